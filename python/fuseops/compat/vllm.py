"""vLLM's activation, rotary-embedding, MoE routing and GDN prefill ops, with vLLM's argument order.

The activations write their outputs and return None, as ``torch.ops._C.silu_and_mul(out, input)`` and friends (vLLM
``csrc/activation_kernels.cu``), which vLLM's ``SiluAndMul.forward_cuda`` calls with an ``out`` it allocated. Not
differentiable (vLLM's are not either). Shapes: out [..., d], input [..., 2*d]; dtypes float32 / float16 / bfloat16.
Numerics: one rounding at the store, so results may differ from vLLM's (two roundings) by 1 ulp
(docs/ops/activation.md). The routing ops write or return what vLLM's do (each function says which).
:func:`chunk_gated_delta_rule` takes the order of vLLM's vendored FLA function and returns its three values (o,
final_state, intermediate_states: the per-chunk states for prefix caching). Errors: ValueError naming the argument.
"""

import torch

from .._args import _compiling, bool_arg, float_arg, forward_only, int_arg, named_as, tensor_arg, written_arg
from .._ops import ops

__all__ = [
    "silu_and_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "topk_softmax",
    "grouped_topk",
    "moe_align_block_size",
    "rotary_embedding",
    "chunk_gated_delta_rule",
]


def _not_differentiable(op, out, input):
    # as the native functions: no graph is dropped and no tracked tensor written silently
    written_arg(op, "out", out, optional=False)
    forward_only(op, input=input)


def silu_and_mul(out, input):
    """out = silu(input[..., :d]) * input[..., d:]."""
    _not_differentiable("silu_and_mul", out, input)
    ops.silu_and_mul.default(out, input)


def gelu_and_mul(out, input):
    """out = gelu(input[..., :d]) * input[..., d:], erf form (approximate="none")."""
    _not_differentiable("gelu_and_mul", out, input)
    ops.gelu_and_mul.default(out, input, "none")


def gelu_tanh_and_mul(out, input):
    """out = gelu(input[..., :d]) * input[..., d:], tanh approximation."""
    _not_differentiable("gelu_tanh_and_mul", out, input)
    ops.gelu_tanh_and_mul.default(out, input)


def topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize=False, bias=None,
                 is_padding=None, *, e_score_correction_bias=None):
    """As ``torch.ops._moe_C.topk_softmax``: fills topk_weights [T, k] float32, topk_indices [T, k] (int32/int64) and
    token_expert_indices [T, k] int32 (j*T + t) from gating_output [T, E]; returns None.

    ``bias`` / ``e_score_correction_bias``: one optional [E] float32 / float16 / bfloat16 correction bias, added to
    the softmax probabilities for selection only (the weights are the unbiased probabilities). The sixth positional
    argument, as in vLLM; by keyword, ``e_score_correction_bias`` is vLLM's name (its platform op
    ``topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize=False,
    e_score_correction_bias=None)``) and ``bias`` the name this function had first (kept). Passing both (neither
    None) is a ValueError naming both.

    ``is_padding`` (newer vLLM, ``VLLM_MOE_SKIP_PADDING``): None, or a bool [T] mask of padding rows, whose
    topk_indices are set to -1 (the id the schedule skips as padding; their weights are computed as for any row)."""
    op = "topk_softmax"
    bias_name = "bias"
    if e_score_correction_bias is not None:
        if bias is not None:
            raise ValueError(f"{op}: bias, e_score_correction_bias: expected at most one of them (two names of the one "
                             f"correction bias: e_score_correction_bias is vLLM's, bias the older one), got both")
        bias, bias_name = e_score_correction_bias, "e_score_correction_bias"
    renormalize = bool_arg(op, "renormalize", renormalize)
    forward_only(op, gating_output=gating_output, **{bias_name: bias}, optional=(bias_name,))
    written_arg(op, "topk_weights", topk_weights, optional=False)
    written_arg(op, "topk_indices", topk_indices, optional=False)
    written_arg(op, "token_expert_indices", token_expert_indices, optional=False)
    tensor_arg(op, "is_padding", is_padding, optional=True)
    tensor_arg(op, "gating_output", gating_output)
    if is_padding is not None and gating_output.dim() == 2:  # (another rank: the op's error names gating_output)
        T = gating_output.shape[0]
        if is_padding.dtype != torch.bool or is_padding.dim() != 1 or is_padding.shape[0] != T:
            raise ValueError(f"{op}: is_padding: expected a bool tensor [T] = [{T}] (the rows of gating_output), got "
                             f"{list(is_padding.shape)} {is_padding.dtype}")
        if is_padding.device != gating_output.device:
            raise ValueError(f"{op}: is_padding: expected device {gating_output.device} (the device of "
                             f"gating_output), got {is_padding.device}")
        # read as it is now: the op's outputs may share its memory
        is_padding = is_padding.detach().clone()
    from ..moe import read_rows

    with named_as(op, op, {"topk_ids": "topk_indices", "correction_bias": bias_name}):
        ops.topk_softmax.default(topk_weights, topk_indices, token_expert_indices, read_rows(gating_output),
                                 renormalize, bias)
    if is_padding is not None:
        topk_indices.masked_fill_(is_padding.unsqueeze(1), -1)


def grouped_topk(scores, n_group, topk_group, topk, renormalize, routed_scaling_factor, bias, scoring_func=0):
    """As vLLM's ``_custom_ops.grouped_topk`` (``torch.ops._moe_C.grouped_topk``): returns (topk_values float32,
    topk_indices int32).

    scoring_func 1: ``scores`` are logits, sigmoid inside. vLLM's default 0 ("none": ``scores`` already activated) is
    not supported: a ValueError, also when scoring_func is left out (it had defaulted to 1 here, so a call without it
    applied a second sigmoid to activated scores)."""
    op = "grouped_topk"
    if int_arg(op, "scoring_func", scoring_func) != 1:  # an int, as vLLM's schema takes (not 1.0, not a bool)
        raise ValueError(f"{op}: scoring_func: expected 1 (sigmoid of the logits in scores); 0 (vLLM's default: "
                         f"scores already activated) is not supported, got {scoring_func!r}")
    renormalize = bool_arg(op, "renormalize", renormalize)
    forward_only(op, scores=scores, bias=bias, optional=("bias",))
    n_group = int_arg(op, "n_group", n_group, 1)
    topk_group = int_arg(op, "topk_group", topk_group, 1)
    from ..moe import _check_topk, _k_named_topk, _rows, read_rows

    _rows(op, "scores", scores)
    topk = _check_topk(op, topk, scores.shape[1])
    routed_scaling_factor = float_arg(op, "routed_scaling_factor", routed_scaling_factor)
    w = torch.empty((scores.shape[0], topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((scores.shape[0], topk), dtype=torch.int32, device=scores.device)
    with _k_named_topk(op):
        ops.grouped_topk.default(w, ids, read_rows(scores), bias, n_group, topk_group, renormalize,
                                 routed_scaling_factor, "sigmoid")
    return w, ids


def moe_align_block_size(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                         expert_map=None):
    """As ``torch.ops._moe_C.moe_align_block_size`` (outputs preallocated by the caller). **num_experts comes before
    block_size**, as in that op; :func:`fuseops.moe_align_block_size` and vLLM's Python wrapper take ``(topk_ids,
    block_size, num_experts, ...)``. Swapped ints are not refused (both are in range): into buffers of the lengths the
    wrapper allocates for the intended ints the swapped schedule does not fit (a ValueError naming the buffer); into
    longer ones ids >= the swapped num_experts are skipped and reported by :func:`fuseops.check_errors`, and the
    schedule is silently another (docs/ops/moe.md, "Python entry points").

    A given ``expert_map`` is applied in the kernel, as vLLM's op applies one (its wrapper passes it only with
    ``ignore_invalid_experts=True``): ids of other ranks' experts are dropped, no -1 blocks; for the wrapper's default
    flow (False) call this without the map and map ``experts_ids`` afterwards, or use
    ``fuseops.moe_align_block_size(..., ignore_invalid_experts=False)``.
    """
    from ..moe import _check_align_args, id_rows

    op = "moe_align_block_size"
    for name, t in (("topk_ids", topk_ids), ("sorted_token_ids", sorted_token_ids), ("experts_ids", experts_ids),
                    ("num_tokens_post_pad", num_tokens_post_pad)):
        tensor_arg(op, name, t)
    tensor_arg(op, "expert_map", expert_map, optional=True)
    num_experts, block_size = _check_align_args(op, num_experts, block_size)  # the op's ranges, by name
    with named_as(op, op, {"expert_ids": "experts_ids"}):  # vLLM's name
        ops.moe_align_block_size.default(id_rows(topk_ids), num_experts, block_size, sorted_token_ids, experts_ids,
                                         num_tokens_post_pad, expert_map)


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox, rope_dim_offset=0, inverse=False):
    """In place on query and key (key may be None), as ``torch.ops._C.rotary_embedding`` (vLLM
    ``csrc/pos_encoding_kernels.cu``; docs/ops/rope.md); the argument checks of :func:`fuseops.rotary_embedding`
    (is_neox a bool, no tensor that requires grad).

    ``rope_dim_offset`` (vLLM's): the rotated dims of each head are [rope_dim_offset, rope_dim_offset + rotary_dim),
    rotary_dim = cos_sin_cache.shape[1]; the others pass through (e.g. vLLM's DeepSeek-V4 indexer rotates the last
    rotary_dim dims: rope_dim_offset = head_size - rotary_dim). An int with 0 <= rope_dim_offset <= head_size -
    rotary_dim, else a ValueError naming it. ``inverse``: rotate by -theta (vLLM's; the gradient's rotation)."""
    from .. import rope

    op = "rotary_embedding"
    offset = int_arg(op, "rope_dim_offset", rope_dim_offset)
    if offset == 0:
        rope.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox, inverse)
        return None  # as vLLM's op
    head_size = int_arg(op, "head_size", head_size)
    tensor_arg(op, "query", query)
    tensor_arg(op, "key", key, optional=True)
    tensor_arg(op, "cos_sin_cache", cos_sin_cache)
    rotary_dim = cos_sin_cache.shape[-1] if cos_sin_cache.dim() == 2 else 0
    if 0 < offset and head_size < rotary_dim:  # no offset could fit: the head size is what is wrong
        raise ValueError(f"{op}: head_size: expected head_size >= rope_dim_offset + rotary_dim = {offset} + "
                         f"{rotary_dim}, got {head_size}")
    if not 0 < offset <= head_size - rotary_dim:
        raise ValueError(f"{op}: rope_dim_offset: expected 0 <= rope_dim_offset <= head_size - rotary_dim = "
                         f"{head_size} - {rotary_dim}, got {offset}")

    def heads(name, x):  # [tokens..., H * head_size] or [tokens..., H, head_size] -> the heads' dims from offset on
        if x is None:
            return None
        if x.dim() < 2 or x.shape[-1] % head_size or x.stride(-1) != 1:
            raise ValueError(f"{op}: {name}: expected [tokens..., H * head_size] or [tokens..., H, head_size] with "
                             f"head_size {head_size} and innermost stride 1, got shape {list(x.shape)}, strides "
                             f"{list(x.stride())}")
        if x.shape[-1] != head_size:
            x = x.view(*x.shape[:-1], x.shape[-1] // head_size, head_size)
        return x[..., offset:]

    try:
        rope.rotary_embedding(positions, heads("query", query), heads("key", key), head_size - offset, cos_sin_cache,
                              is_neox, inverse)
    except ValueError as e:  # the op saw the heads' views: say so, with the caller's head_size
        raise ValueError(f"{e} (with rope_dim_offset {offset}, the op rotates the views [..., H, head_size - "
                         f"rope_dim_offset] = [..., H, {head_size - offset}] of the heads' dims from the offset on; "
                         f"head_size {head_size})") from None
    return None


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None,
                           head_first=False, use_qk_l2norm_in_kernel=False, return_intermediate_states=False):
    """The chunked GDN forward in the order of vLLM's vendored FLA ``chunk_gated_delta_rule``: returns (o, final_state,
    intermediate_states).

    Without ``return_intermediate_states`` o and final_state are those of :func:`fuseops.chunk_gated_delta_rule` (the
    same call, the same bytes). Every check of it holds either way: ValueError naming the argument; chunk size 64.
    ``head_first``: False only (True is a ValueError naming it, where vLLM raises too). ``intermediate_states`` is
    None unless ``return_intermediate_states``; then it is the state at the start of every chunk of 64 tokens, before
    the chunk's tokens (chunk 0 of a sequence: its initial state, or zeros), in k's dtype, [number of chunks, HV, K,
    V]: without cu_seqlens B * ceil(T / 64) chunks, batch-major; with cu_seqlens the chunks of sequence 0, then of
    sequence 1, ..., ceil(L / 64) for a sequence of L tokens (none for an empty one). They are the forward's own chunk
    states, written by the same call that gives o and final_state (the C++ chunk_gated_delta_rule_with_states: one
    forward), in its intermediate dtype (k's, or float32 for 16-bit inputs with K or V < 32) and then cast to k's
    dtype. With the states asked for, o and final_state on the CPU are the same bytes as fuseops.chunk_gated_delta_rule
    gives; on CUDA o comes from the output stage that reads the states (not from the form that keeps them inside the
    recurrence's kernel, where fuseops.chunk_gated_delta_rule takes it): equal to its o within the forward's tolerance
    (docs/ops/gdn.md), not always byte for byte.

    The states with cu_seqlens read cu_seqlens on the host, as vLLM does (their number depends on the values): that
    call synchronises with the device, is not capturable in a CUDA graph (a ValueError while the current stream
    captures) and runs eagerly only (a ValueError while torch.compile traces, which Dynamo reports as a graph break:
    an error under fullgraph=True), and a malformed cu_seqlens is a ValueError there, raised before the op runs (so
    that nothing is left for fuseops.check_errors). Without cu_seqlens, or without return_intermediate_states,
    nothing is read on the host: the call is capturable and traces under torch.compile(fullgraph=True).
    """
    from .. import gdn

    op = "chunk_gated_delta_rule"
    return_intermediate_states = bool_arg(op, "return_intermediate_states", return_intermediate_states)
    cu_host = None
    if return_intermediate_states and cu_seqlens is not None:
        why = ("torch.compile traces" if _compiling() else
               "the current CUDA stream captures a graph" if _capturing(cu_seqlens) else None)
        if why:
            raise ValueError(f"{op}: return_intermediate_states: with cu_seqlens the number of chunk states depends "
                             f"on the values of cu_seqlens, read on the host (a synchronisation), which cannot be done "
                             f"while {why}: call it eagerly")
        # cu_seqlens is read and checked before the op runs, so that a malformed one is this ValueError only (the op,
        # run first, would also leave it in the record a later fuseops.check_errors raises), and only where it is the
        # argument at fault: after the op's Python-side checks of the tensors (the op makes them again), beside q, k
        # and v that agree (anything else is left to the op, which names the argument)
        forward_only(op, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, optional=("initial_state",))
        gdn._reject_kwargs(op, {"head_first": head_first})
        if _readable_cu(cu_seqlens, q, k, v):
            cu_host = gdn._host_cu_seqlens(op, cu_seqlens, v.shape[1])
    if not return_intermediate_states:
        o, final_state = gdn.chunk_gated_delta_rule(q, k, v, g, beta, scale, initial_state, output_final_state,
                                                    use_qk_l2norm_in_kernel, cu_seqlens, head_first=head_first)
        return o, final_state, None
    # one forward that also writes its chunk states h [B, NS, HV, K, V] (chunk slots), then vLLM's order
    o, final_state, h = gdn._chunk_forward(op, q, k, v, g, beta, scale, initial_state, output_final_state,
                                           use_qk_l2norm_in_kernel, cu_seqlens, 64, {"head_first": head_first},
                                           states=True)
    if cu_seqlens is None:
        return o, final_state, h.reshape(h.shape[0] * h.shape[1], *h.shape[2:]).to(k.dtype)
    if cu_host is None:  # (not read above: the op has accepted cu_seqlens and q, k, v since)
        cu_host = gdn._host_cu_seqlens(op, cu_seqlens, v.shape[1])
    slots = gdn._slots_in_sequence_order(cu_host, 64).to(h.device)
    return o, final_state, h[0].index_select(0, slots).to(k.dtype)


def _readable_cu(cu_seqlens, q, k, v):
    """Whether cu_seqlens can be read on the host as offsets into T before the op's checks: an int32 / int64 tensor
    [N+1] beside 4-D q, k and v of one float dtype, batch 1 and one T (anything else is left to the op, which names
    the argument at fault)."""
    qkv = (q, k, v)
    return (isinstance(cu_seqlens, torch.Tensor) and cu_seqlens.dtype in (torch.int32, torch.int64)
            and cu_seqlens.dim() == 1 and cu_seqlens.shape[0] >= 1
            and all(isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[0] == 1 for t in qkv)
            and len({t.shape[1] for t in qkv}) == 1
            and len({t.dtype for t in qkv}) == 1 and q.dtype in (torch.float32, torch.float16, torch.bfloat16))


def _capturing(t):
    """Whether reading ``t`` on the host would break a CUDA graph capture on the current stream."""
    return isinstance(t, torch.Tensor) and t.is_cuda and torch.cuda.is_current_stream_capturing()
