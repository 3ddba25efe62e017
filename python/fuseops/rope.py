"""Rotary position embeddings: vLLM's ``rotary_embedding`` (in place), FlagGems' ``apply_rotary_pos_emb`` and
multimodal ``mrope`` (chunked: Qwen2/2.5-VL and GLM-4.1V; interleaved: Qwen3-VL; FlagGems' GLM round-robin map), with
their backward.

Math (docs/ops/rope.md): with r = rotary_dim and h = r / 2, NeoX (``is_neox=True``) rotates the pairs (j, j + h) of
the first r dims of every head, GPT-J (``is_neox=False`` / ``rotary_interleaved=True``) the pairs (2j, 2j + 1), by
the angle of cache row ``positions[t]`` (``[cos θ_0..θ_{h-1}, sin θ_0..θ_{h-1}]``); dims past r pass through.
``inverse=True`` rotates by -θ, which is also the gradient: the ``*_backward`` functions. fp32 math, one rounding.

Out-of-range positions never read out of bounds: the token is left unrotated and the fault is recorded on the
device; :func:`fuseops.check_errors` raises it as ``ValueError("<op>: positions: value out of range at index i ...")``
(``FUSEOPS_DEBUG=1`` raises after every op). The ops never synchronise. Other bad arguments raise ``ValueError``
naming the argument.
"""

import torch

from ._args import bool_arg as _flag, dense, forward_only, int_arg as _int, named_as, not_dual, one_stride, tensor_arg
from ._ops import ops

_LAYOUTS = ("chunked", "interleaved", "interleaved_glm")


def _not_tracked(op, **tensors):
    """The in-place forms are not recorded by autograd: refuse a tensor that requires grad while grad mode is on (as
    the gated norm and the masked activations do) rather than change it behind autograd's back."""
    if torch.is_grad_enabled():
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor) and t.requires_grad:
                way = "inplace=False" if op == "apply_rotary_pos_emb" else "apply_rotary_pos_emb with inplace=False"
                raise RuntimeError(f"{op}: {name}: rotates in place, which autograd does not track, but {name} "
                                   f"requires grad (use {way} for autograd, or torch.no_grad())")


def _flattened(positions):
    """Positions whose token dims flatten with one stride, as the op takes them (size-1 dims aside); others, such as
    HF's ``arange(S).expand(B, S)`` (stride 0) or a transposed [B, S], as a contiguous copy (the C++ API refuses them
    by name). Not a tensor: left to the op's error."""
    if not isinstance(positions, torch.Tensor) or positions.numel() == 0:
        return positions
    extent = None  # the span of the dims inside the current one, which its stride must equal
    for size, stride in reversed(list(zip(positions.shape, positions.stride()))):
        if size == 1:
            continue
        if extent is not None and stride != extent:
            return positions.contiguous()
        extent = stride * size
    return positions


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox=True, inverse=False):
    """Rotates ``query`` and ``key`` in place, as vLLM ``rotary_embedding``; returns ``(query, key)``.

    Args:
        positions: [T] or [B, S] int32 / int64.
        query: [tokens..., Hq * head_size] or [tokens..., Hq, head_size] (a view into a fused qkv buffer is fine).
        key: the same with Hk heads, or None.
        head_size: D.
        cos_sin_cache: [max_position, rotary_dim] float32 / float16 / bfloat16; rotary_dim even, <= head_size.
        is_neox: NeoX (rotate-half) pairing, else GPT-J (interleaved).
        inverse: rotate by -θ.
    """
    return _rotary_embedding(False, positions, query, key, head_size, cos_sin_cache, is_neox, inverse)


def _rotary_embedding(backward, positions, query, key, head_size, cos_sin_cache, is_neox, inverse=False):
    """rotary_embedding or (backward) its gradient: each its own op, which names itself and its arguments in its
    errors, those check_errors() raises later included."""
    op, qn, kn = ("rotary_embedding_backward", "grad_query", "grad_key") if backward else ("rotary_embedding", "query",
                                                                                          "key")
    for name, t, optional in (("positions", positions, False), (qn, query, False), (kn, key, True)):
        tensor_arg(op, name, t, optional)
    tensor_arg(op, "cos_sin_cache", cos_sin_cache)
    _not_tracked(op, **{qn: query, kn: key})
    forward_only(op, cos_sin_cache=cos_sin_cache)
    args = (_flattened(positions), query, key, _int(op, "head_size", head_size), cos_sin_cache,
            _flag(op, "is_neox", is_neox))
    if backward:
        ops.rotary_embedding_backward(*args)
    else:
        ops.rotary_embedding(*args, _flag(op, "inverse", inverse))
    return query, key


def rotary_embedding_backward(positions, grad_query, grad_key, head_size, cos_sin_cache, is_neox=True):
    """Gradient of :func:`rotary_embedding` with respect to query and key, in place on the gradients."""
    return _rotary_embedding(True, positions, grad_query, grad_key, head_size, cos_sin_cache, is_neox)


class _ApplyRotaryPosEmb(torch.autograd.Function):
    """The rotation by theta (inverse: by -theta) of q and k; its gradient is the rotation the other way, itself
    through this function, so that a gradient taken with create_graph=True is differentiable again (the rotation is
    linear in q and k: every order is exact; a plain op call there had dropped the second-order terms silently)."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, position_ids, rotary_interleaved, inverse):
        q, k = _heads_read(q), _heads_read(k)  # only read: a layout the op does not take is copied (FlagGems views)
        # contiguous outputs: empty_like keeps the dim order of a q with gaps or overlaps, a layout the op may refuse
        q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
        ops.apply_rotary_pos_emb(q_out, k_out, q, k, cos, sin, position_ids, rotary_interleaved, inverse)
        ctx.save_for_backward(cos, sin, position_ids)
        ctx.rotary_interleaved = rotary_interleaved
        ctx.inverse = inverse
        return q_out, k_out

    @staticmethod
    def backward(ctx, grad_q, grad_k):
        cos, sin, position_ids = ctx.saved_tensors
        for name, g in (("grad_q", grad_q), ("grad_k", grad_k)):  # a dual incoming gradient: refused by name, as
            not_dual("apply_rotary_pos_emb_backward", name, g)    # _check_tables refuses a dual input
        # Incoming gradients may have any layout (.sum() gives an expanded one, all strides 0, also when empty);
        # forward copies what the op cannot read as it is.
        dq, dk = _ApplyRotaryPosEmb.apply(grad_q, grad_k, cos, sin, position_ids,
                                          ctx.rotary_interleaved, not ctx.inverse)
        return dq, dk, None, None, None, None, None


def _heads_read(t):
    """t ([tokens..., H, D], only read) as it is where the op takes its layout (innermost stride 1, the token dims
    flattening to one stride; the head stride free), else a contiguous copy (e.g. HF's [B, H, S, D].transpose(1, 2)
    at B > 1, or an expanded gradient). By strides only, so it traces under torch.compile."""
    if t.dim() < 2:
        return t  # refused by the op, by name
    if (t.shape[-1] > 1 and t.stride(-1) != 1) or not one_stride(t.shape[:-2], t.stride()[:-2])[0]:
        return dense(t)
    return t


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, rotary_interleaved=False, inplace=False):
    """As FlagGems ``apply_rotary_pos_emb``: returns ``(q_embed, k_embed)``.

    Args:
        q: [tokens..., Hq, D]; k: [tokens..., Hk, D] (same token dims).
        cos, sin: [max_seq, D / 2].
        position_ids: [tokens...] int32 / int64, or None: then q is [B, S, Hq, D] and the position is the index in S.
        rotary_interleaved: GPT-J pairing (FlagGems' name), else NeoX.
        inplace: rotate q and k themselves and return them (not differentiable); otherwise new tensors, with autograd
            for q and k.
    """
    op = "apply_rotary_pos_emb"
    _check_tables(op, (("q", q), ("k", k)), cos, sin, position_ids)
    position_ids = _flattened(position_ids)
    rotary_interleaved = _flag(op, "rotary_interleaved", rotary_interleaved)
    if _flag(op, "inplace", inplace):
        _not_tracked(op, q=q, k=k)
        with named_as(op, op, {"q_out": "q", "k_out": "k"}):  # in place: the outputs are q and k
            ops.apply_rotary_pos_emb_inplace(q, k, cos, sin, position_ids, rotary_interleaved, False)
        return q, k
    return _ApplyRotaryPosEmb.apply(q, k, cos, sin, position_ids, rotary_interleaved, False)


def _check_tables(op, rotated, cos, sin, position_ids):
    """The tensors of apply_rotary_pos_emb(_backward) by name; cos / sin get no gradient (refused if they need one)."""
    for name, t in rotated:
        tensor_arg(op, name, t)
    tensor_arg(op, "cos", cos)
    tensor_arg(op, "sin", sin)
    tensor_arg(op, "position_ids", position_ids, optional=True)
    for name, t in rotated + (("cos", cos), ("sin", sin)):
        not_dual(op, name, t)  # (torch refuses a dual input of an autograd Function without naming it)
    forward_only(op, cos=cos, sin=sin)


def apply_rotary_pos_emb_backward(grad_q, grad_k, cos, sin, position_ids=None, rotary_interleaved=False):
    """Gradient of :func:`apply_rotary_pos_emb`: new tensors ``(grad_q_in, grad_k_in)``, the incoming gradients
    rotated by -theta; differentiable with respect to them (autograd records it where they require grad)."""
    op = "apply_rotary_pos_emb_backward"
    _check_tables(op, (("grad_q", grad_q), ("grad_k", grad_k)), cos, sin, position_ids)
    return _ApplyRotaryPosEmb.apply(grad_q, grad_k, cos, sin, _flattened(position_ids),
                                    _flag(op, "rotary_interleaved", rotary_interleaved), True)


def mrope(query, key, cos_sin_cache, positions, mrope_section, head_size, rotary_dim, is_neox=True,
          layout="chunked", inverse=False):
    """Multimodal RoPE in place, as vLLM ``MRotaryEmbedding`` / FlagGems ``mrope``; returns ``(query, key)``.

    Args:
        query: [T, Hq * head_size] or [T, Hq, head_size]; key: the same with Hk heads, or None.
        cos_sin_cache: [max_position, rotary_dim].
        positions: [3, T] (temporal, height, width) or [T] (ordinary RoPE), int32 / int64.
        mrope_section: [s_t, s_h, s_w], summing to rotary_dim / 2.
        layout: "chunked" (Qwen2-VL, Qwen2.5-VL; GLM-4.1V with is_neox=False and GLM-4.5V with is_neox=True, as HF
            and vLLM run them),
            "interleaved" (Qwen3-VL) or "interleaved_glm" (FlagGems' GLM round-robin map, ``is_interleaved_glm``).
    """
    return _mrope(False, query, key, cos_sin_cache, positions, mrope_section, head_size, rotary_dim, is_neox, layout,
                  inverse)


def _mrope(backward, query, key, cos_sin_cache, positions, mrope_section, head_size, rotary_dim, is_neox, layout,
           inverse=False):
    """mrope or (backward) its gradient, each its own op (as _rotary_embedding)."""
    op = "mrope_backward" if backward else "mrope"
    names = ("grad_query", "grad_key") if backward else ("query", "key")
    if not isinstance(layout, str) or layout not in _LAYOUTS:
        raise ValueError(f"{op}: layout: expected one of {', '.join(_LAYOUTS)}, got {layout!r}")
    tensor_arg(op, names[0], query)
    tensor_arg(op, names[1], key, optional=True)
    tensor_arg(op, "cos_sin_cache", cos_sin_cache)
    tensor_arg(op, "positions", positions)
    _not_tracked(op, **{names[0]: query, names[1]: key})
    forward_only(op, cos_sin_cache=cos_sin_cache)
    # an ordered sequence: a set or a dict iterates in an order of its own (a set {3, 1, 2} ran as [1, 2, 3])
    if not isinstance(mrope_section, (list, tuple, torch.Size)) and not (
            (isinstance(mrope_section, torch.Tensor) or type(mrope_section).__name__ == "ndarray")
            and mrope_section.ndim == 1):
        raise ValueError(f"{op}: mrope_section: expected a list or tuple of 3 ints, got "
                         f"{type(mrope_section).__name__} {mrope_section!r}")
    section = [_int(op, "mrope_section", s) for s in mrope_section]
    args = (positions, query, key, _int(op, "head_size", head_size), _int(op, "rotary_dim", rotary_dim), cos_sin_cache,
            section, _flag(op, "is_neox", is_neox), layout)
    if backward:
        ops.mrope_backward(*args)
    else:
        ops.mrope(*args, _flag(op, "inverse", inverse))
    return query, key


def mrope_backward(grad_query, grad_key, cos_sin_cache, positions, mrope_section, head_size, rotary_dim,
                   is_neox=True, layout="chunked"):
    """Gradient of :func:`mrope` with respect to query and key, in place on the gradients."""
    return _mrope(True, grad_query, grad_key, cos_sin_cache, positions, mrope_section, head_size, rotary_dim, is_neox,
                  layout)
