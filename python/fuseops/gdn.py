"""Gated DeltaNet (GDN): the intra-chunk stage, the chunked forward (prefill) and the decode.

Names and signatures are flash-linear-attention's (FLA): release 0.5.2's, and for chunk_local_cumsum those of FLA
after it (docs/ops/gdn.md).

Notation: B batch, T tokens, H key heads, HV value heads (a multiple of H; value head h reads key head h // (HV // H)),
K head dim (1..256), BT chunk size (16, 32 or 64). With ``cu_seqlens`` ([N+1] int32/int64 on the tensors' device),
B == 1 and sequence n is tokens [cu_seqlens[n], cu_seqlens[n+1]); chunks restart at every sequence. ``g`` is the
natural-log chunk-local cumsum returned by :func:`chunk_local_cumsum` with ``scale=None`` (FLA >= 0.5 passes
log2-scaled values to exp2 internally; those are not accepted). docs/ops/gdn.md has the math and tolerances.

Errors: ``ValueError`` naming the argument for bad shapes, dtypes, devices, chunk sizes; a malformed ``cu_seqlens``
is reported by :func:`fuseops.check_errors` (the ops never synchronise). Forward only: an input that requires grad
while grad mode is on is a RuntimeError (FLA's chunk_gated_delta_rule has a backward; fuseops has none yet), so a
graph is never dropped silently; call the functions under torch.no_grad() / torch.inference_mode().
"""

import torch

from ._args import (_compiling, bool_arg, float_arg, forward_only, int_arg, is_flag, named_as, shown, tensor_arg,
                    unit_innermost)
from ._ops import ops

_FLOAT = (torch.float32, torch.float16, torch.bfloat16)


def _no_chunk_indices(op, chunk_indices):
    if chunk_indices is not None:
        raise ValueError(
            f"{op}: chunk_indices: expected None (fuseops derives the chunks from cu_seqlens on the device), "
            f"got a {type(chunk_indices).__name__}"
        )


def _check_chunk_size(op, chunk_size):
    """The chunk size as an int (numpy / torch integer scalars accepted): 16, 32 or 64."""
    try:
        value = int_arg(op, "chunk_size", chunk_size)
    except ValueError:
        value = None
    if value not in (16, 32, 64):
        raise ValueError(f"{op}: chunk_size: expected 16, 32 or 64, got {chunk_size!r}")
    return value


def _check_cu(op, cu_seqlens):
    """cu_seqlens: None or a tensor of rank 1 [N+1], N >= 0 (the op checks its dtype and device); its shape is checked
    here because the functions size their outputs from it (a 0-dim or empty one raised IndexError / a negative
    dimension before)."""
    if cu_seqlens is not None and not isinstance(cu_seqlens, torch.Tensor):
        raise ValueError(f"{op}: cu_seqlens: expected a tensor [N+1] int32 / int64 or None, got "
                         f"{type(cu_seqlens).__name__}")
    tensor_arg(op, "cu_seqlens", cu_seqlens, optional=True)  # dense
    if cu_seqlens is not None and (cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1):
        raise ValueError(f"{op}: cu_seqlens: expected rank 1 [N+1] with at least one entry ([0]: no sequences), got "
                         f"shape {list(cu_seqlens.shape)}")
    return _contiguous_read(cu_seqlens)


def _check_cu_values(op, name, cu, T, where):
    """cu (an int64 CPU tensor [N+1]) checked: 0 = cu[0] <= ... <= cu[N] = T, else a ValueError naming ``name``."""
    if cu[0] != 0 or cu[-1] != T or bool((cu[1:] < cu[:-1]).any()):
        values = cu.tolist()
        text = str(values) if len(values) <= 16 else f"{str(values[:8])[:-1]}, ..., {str(values[-4:])[1:]}"
        raise ValueError(f"{op}: {name}: expected 0 = {name}[0] <= ... <= {name}[N] = T = {T} ({where}), got {text}")


def _check_cu_seqlens_cpu(op, cu_seqlens_cpu, cu_seqlens, T):
    """FLA's ``cu_seqlens_cpu``: a host copy of cu_seqlens, from which FLA lays out its chunks without a
    synchronisation. fuseops needs none (its kernels read cu_seqlens on the device), so the copy is checked, not
    read for the computation: given with cu_seqlens, a CPU int32 / int64 tensor of cu_seqlens' shape, and (except
    while torch.compile traces, which cannot read it) 0 = cu[0] <= ... <= cu[N] = T; else a ValueError naming it.
    That its values equal cu_seqlens' is not checked: that would read the device tensor on the host."""
    if cu_seqlens_cpu is None:
        return
    if cu_seqlens is None:
        raise ValueError(f"{op}: cu_seqlens_cpu: a host copy of cu_seqlens, given without cu_seqlens")
    if (not isinstance(cu_seqlens_cpu, torch.Tensor) or cu_seqlens_cpu.device.type != "cpu"
            or cu_seqlens_cpu.dtype not in (torch.int32, torch.int64) or cu_seqlens_cpu.shape != cu_seqlens.shape):
        where = f" on {cu_seqlens_cpu.device}" if isinstance(cu_seqlens_cpu, torch.Tensor) else ""
        raise ValueError(f"{op}: cu_seqlens_cpu: expected a CPU tensor int32 / int64 of cu_seqlens' shape "
                         f"{list(cu_seqlens.shape)} (a host copy of cu_seqlens), got {shown(cu_seqlens_cpu)}{where}")
    if not _compiling():
        _check_cu_values(op, "cu_seqlens_cpu", cu_seqlens_cpu.to(torch.int64), T, "a host copy of cu_seqlens")


def _check_optional(op, name, t):
    if t is not None:
        _check_rank(op, name, t, 3, "[B, T, HV]")


def _heads(k, g, beta):
    if g is not None:
        return g.shape[2]
    if beta is not None:
        return beta.shape[2]
    return k.shape[2]


def _check_rank(op, name, t, rank, dims):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{op}: {name}: expected a tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{op}: {name}: expected rank {rank} {dims}, got {list(t.shape)}")


def _out_like(op, name, t, shape):
    """The output o, allocated in the dtype of input `name`; an unsupported dtype is that input's error, not o's."""
    if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"{op}: {name}: expected dtype float32, float16 or bfloat16, got {t.dtype}")
    return torch.empty(shape, dtype=t.dtype, device=t.device)


def chunk_local_cumsum(g, chunk_size, reverse=False, scale=None, cu_seqlens=None, output_dtype=torch.float,
                       chunk_indices=None, **kwargs):
    """Chunk-local cumulative sum of log-decays, as FLA ``chunk_local_cumsum`` (3-D form; FLA's current signature and
    positional order: FLA 0.5.2 still had ``head_first`` sixth, which a positional call there must pass by keyword).

    Args:
        g: [B, T, HV] float32 / float16 / bfloat16.
        chunk_size: 16, 32 or 64.
        reverse: suffix sums within each chunk.
        scale: multiplies after the sum (None: 1).
        cu_seqlens: optional [N+1] int32 / int64, B == 1.
        output_dtype: torch.float32; None means g's dtype (FLA's rule), which must then be float32.
        chunk_indices: None only (derived from cu_seqlens on the device).
        head_first: by keyword only, False (FLA removed it; any other value is a ValueError).
    Returns:
        [B, T, HV] float32.
    """
    op = "chunk_local_cumsum"
    forward_only(op, g=g)
    _reject_kwargs(op, kwargs)
    cu_seqlens = _check_cu(op, cu_seqlens)
    reverse = bool_arg(op, "reverse", reverse)
    if is_flag(output_dtype):  # FLA 0.5.2 had head_first in this place; FLA since, and fuseops, do not
        raise ValueError(f"{op}: output_dtype: expected a torch.dtype, got {shown(output_dtype)} (FLA 0.5.2's sixth "
                         "positional argument was head_first; fuseops takes FLA's current order (g, chunk_size, "
                         "reverse, scale, cu_seqlens, output_dtype, chunk_indices): drop head_first, whose only "
                         "supported value is False, or pass it by keyword)")
    _no_chunk_indices(op, chunk_indices)
    _check_rank(op, "g", g, 3, "[B, T, HV]")
    if output_dtype is None and g.dtype != torch.float32:
        raise ValueError(f"{op}: output_dtype: None asks for g's dtype ({g.dtype}); fuseops writes torch.float32 "
                         "only: pass output_dtype=torch.float32")
    if output_dtype not in (torch.float32, None):
        raise ValueError(f"{op}: output_dtype: expected torch.float32, got {output_dtype}")
    chunk_size = _check_chunk_size(op, chunk_size)
    out = torch.empty(g.shape, dtype=torch.float32, device=g.device)
    ops.chunk_local_cumsum(out, g, chunk_size, cu_seqlens, reverse,
                           None if scale is None else float_arg(op, "scale", scale))
    return out


def chunk_scaled_dot_kkt_fwd(k, g=None, beta=None, cu_seqlens=None, chunk_size=64, output_dtype=torch.float32,
                             chunk_indices=None):
    """A[t, j] = beta_t <k_t, k_s> exp(g_t - g_s) for s = the j-th token of t's chunk, s < t; 0 elsewhere.

    As FLA ``chunk_scaled_dot_kkt_fwd``. Args: k [B, T, H, K]; g [B, T, HV] float32 (natural-log chunk-local
    cumsum) or None; beta [B, T, HV] or None (ones); cu_seqlens optional; chunk_size 16/32/64; output_dtype float32 /
    float16 / bfloat16. Returns A [B, T, HV, BT], every element written.
    """
    op = "chunk_scaled_dot_kkt_fwd"
    forward_only(op, k=k, g=g, beta=beta, optional=("g", "beta"))
    cu_seqlens = _check_cu(op, cu_seqlens)
    _no_chunk_indices(op, chunk_indices)
    _check_rank(op, "k", k, 4, "[B, T, H, K]")
    _check_optional(op, "g", g)
    _check_optional(op, "beta", beta)
    chunk_size = _check_chunk_size(op, chunk_size)
    if output_dtype not in _FLOAT:
        raise ValueError(f"{op}: output_dtype: expected torch.float32 | float16 | bfloat16, got {output_dtype}")
    B, T = k.shape[0], k.shape[1]
    A = torch.empty((B, T, _heads(k, g, beta), chunk_size), dtype=output_dtype, device=k.device)
    ops.chunk_scaled_dot_kkt_fwd(A, k, g, beta, chunk_size, cu_seqlens)
    return A


def solve_tril(A, cu_seqlens=None, chunk_indices=None, output_dtype=torch.float):
    """(I + A)^{-1} per chunk, as FLA ``solve_tril``: A [B, T, HV, BT] strictly lower per chunk (only those entries
    are read); returns [B, T, HV, BT] in ``output_dtype`` (None: A's dtype, as FLA) (unit lower triangular, zeros
    elsewhere)."""
    op = "solve_tril"
    forward_only(op, A=A)
    cu_seqlens = _check_cu(op, cu_seqlens)
    _no_chunk_indices(op, chunk_indices)
    _check_rank(op, "A", A, 4, "[B, T, HV, BT]")
    if output_dtype is None:
        output_dtype = A.dtype
    if output_dtype not in _FLOAT:
        raise ValueError(f"{op}: output_dtype: expected torch.float32 | float16 | bfloat16, got {output_dtype}")
    Ai = torch.empty(A.shape, dtype=output_dtype, device=A.device)
    ops.solve_tril(Ai, A, cu_seqlens)
    return Ai


def chunk_gated_delta_rule_fwd_kkt_solve(k, g=None, beta=None, cu_seqlens=None, chunk_size=64, output_dtype=None):
    """The fused intra-chunk stage in one launch: solve_tril(chunk_scaled_dot_kkt_fwd(k, g, beta)).

    Bitwise identical to ``solve_tril(chunk_scaled_dot_kkt_fwd(..., output_dtype=torch.float32),
    output_dtype=...)`` on the same device and dispatch path. Args as :func:`chunk_scaled_dot_kkt_fwd`;
    ``output_dtype`` defaults to ``k.dtype``. Returns [B, T, HV, BT].
    """
    op = "chunk_gated_delta_rule_fwd_kkt_solve"
    forward_only(op, k=k, g=g, beta=beta, optional=("g", "beta"))
    cu_seqlens = _check_cu(op, cu_seqlens)
    _check_rank(op, "k", k, 4, "[B, T, H, K]")
    _check_optional(op, "g", g)
    _check_optional(op, "beta", beta)
    chunk_size = _check_chunk_size(op, chunk_size)
    dtype = k.dtype if output_dtype is None else output_dtype
    if dtype not in _FLOAT:
        name = "k" if output_dtype is None else "output_dtype"
        raise ValueError(f"{op}: {name}: expected torch.float32 | float16 | bfloat16, got {dtype}")
    B, T = k.shape[0], k.shape[1]
    Ai = torch.empty((B, T, _heads(k, g, beta), chunk_size), dtype=dtype, device=k.device)
    ops.chunk_gated_delta_rule_fwd_kkt_solve(Ai, k, g, beta, chunk_size, cu_seqlens)
    return Ai


# ---------------------------------------------------------------------------------------------------------------
# Forward: prefill stages, the chunked op, decode (include/fuseops/gdn_forward.h, docs/ops/gdn.md).

# FLA keyword arguments fuseops does not implement: passing one (whatever its value) is a ValueError naming it.
_UNSUPPORTED_CHUNK = ("use_beta_sigmoid_in_kernel", "allow_neg_eigval", "state_v_first", "transpose_state_layout",
                      "use_gate_in_kernel", "A_log", "dt_bias", "head_first", "cu_seqlens_cpu", "chunk_indices",
                      "cp_context", "gk", "gv", "g_gamma", "is_kda", "use_exp2")


# Values of those arguments that ask for what fuseops does anyway (FLA's defaults): accepted, so drop-in callers that
# spell the default out (e.g. head_first=False) keep working; any other value is an error. use_exp2 (some FLA and
# vLLM stage signatures): False is g as a natural log, which fuseops takes; True (log2-scaled g) is refused.
_DEFAULT_CHUNK = {"use_exp2": False, "use_beta_sigmoid_in_kernel": False, "allow_neg_eigval": False,
                  "state_v_first": False, "transpose_state_layout": False, "use_gate_in_kernel": False, "A_log": None,
                  "dt_bias": None, "head_first": False, "cu_seqlens_cpu": None, "chunk_indices": None,
                  "cp_context": None, "gk": None, "gv": None, "g_gamma": None, "is_kda": False}


def _reject_kwargs(op, kwargs, allowed=()):
    for name, value in kwargs.items():
        if name in allowed:
            continue
        if name in _DEFAULT_CHUNK and _is_default(value, _DEFAULT_CHUNK[name]):
            continue
        why = "not supported by fuseops" if name in _UNSUPPORTED_CHUNK else "unknown argument"
        accepted = f"; {name}={_DEFAULT_CHUNK[name]!r} is accepted" if name in _DEFAULT_CHUNK else ""
        raise ValueError(f"{op}: {name}: {why} (fuseops implements FLA's default layout and gating{accepted}), "
                         f"got {shown(value)}")


def _is_default(value, default):
    """None is None only; False is False or any other false bool (numpy.False_, a one-element bool tensor, as the flags
    take them), never 0 or an empty container."""
    if default is None:
        return value is None
    return is_flag(value) and bool(value) == default


def _contiguous_read(t):
    """A tensor the op only reads (slot indices, num_accepted_tokens, cu_seqlens, a read-only initial state) as the
    kernels read it: contiguous, a copy where it is not, as FLA's and vLLM's ``input_guard`` makes their inputs. vLLM
    passes views such as ``block_table[:, 0]``; the copy is captured with the op in a CUDA graph."""
    return t.contiguous() if isinstance(t, torch.Tensor) and not t.is_contiguous() else t


def _num_seqs(q, cu_seqlens):
    return q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, **kwargs):
    """The chunked GDN forward, as FLA ``chunk_gated_delta_rule`` (forward only).

    Args:
        q, k: [B, T, H, K]; v: [B, T, HV, V] (one dtype: float32 / float16 / bfloat16).
        g: [B, T, HV] raw per-token log-decay (the chunk-local cumsum is done inside); beta: [B, T, HV].
        scale: default K ** -0.5. initial_state: [N, HV, K, V] float32 / float16 / bfloat16 (read as
            float32; a non-contiguous one, as cu_seqlens, is read as a contiguous copy, as FLA's input_guard).
        output_final_state: return the final state [N, HV, K, V] float32 (else None).
        use_qk_l2norm_in_kernel: q, k <- x / sqrt(sum x^2 + 1e-6), rounded to the intermediate dtype (the input
            dtype; float32 for 16-bit inputs with K or V < 32: chunk_gated_delta_rule_intermediate_dtype).
        cu_seqlens: [N+1] int32 / int64 (B == 1). chunk_size: 16, 32 or 64.
        cu_seqlens_cpu (keyword, FLA's): a host copy of cu_seqlens, which fuseops does not need (the kernels read
            cu_seqlens on the device, no synchronisation): checked (a CPU int32 / int64 tensor of cu_seqlens' shape,
            0 = cu[0] <= ... <= cu[N] = T; the values not while torch.compile traces), not read otherwise; its
            agreement with cu_seqlens is not checked (that would read the device tensor).
    Returns:
        (o [B, T, HV, V] in q.dtype, final_state or None).
    Unsupported FLA keyword arguments (state_v_first, use_gate_in_kernel, head_first, ...) raise ValueError; so does
    vLLM's return_intermediate_states: :func:`fuseops.compat.vllm.chunk_gated_delta_rule` takes vLLM's order and
    returns (o, final_state, intermediate_states); :func:`chunk_gated_delta_rule_with_states` returns the chunk
    states in fuseops' chunk slots.
    """
    o, ht, _ = _chunk_forward("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                              use_qk_l2norm_in_kernel, cu_seqlens, chunk_size, kwargs)
    return o, ht


def chunk_gated_delta_rule_with_states(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                                       use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size=64, **kwargs):
    """:func:`chunk_gated_delta_rule` that also returns its chunk states h, the state at the start of every chunk
    (before the chunk's tokens; chunk 0 of a sequence: its initial state, or zeros), from the same single forward
    (C++ ``chunk_gated_delta_rule_with_states``, include/fuseops/gdn_forward.h). These are the states vLLM's vendored
    FLA ``chunk_gated_delta_rule(..., return_intermediate_states=True)`` keeps for prefix caching (vLLM
    ``vllm/model_executor/layers/fla/ops/chunk.py``; FLA's h of ``chunk_gated_delta_rule_fwd_h``), here in fuseops'
    chunk slots; :func:`fuseops.compat.vllm.chunk_gated_delta_rule` returns them in vLLM's order and dtype.

    Args:
        As :func:`chunk_gated_delta_rule`, in its order, with its checks (FLA's unsupported keyword arguments
        included): q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; initial_state [N, HV, K, V];
        cu_seqlens [N+1] int32 / int64 (B == 1); chunk_size BT: 16, 32 or 64.
    Returns:
        (o [B, T, HV, V] in q.dtype, final_state [N, HV, K, V] float32 or None, h [B, NS, HV, K, V]). h is in the
        intermediate dtype (q's; float32 for float16 / bfloat16 inputs with K or V < 32), each state rounded once
        from float32, in the chunk slots of :func:`chunk_gated_delta_rule_fwd_h`'s h (gdn_chunk_slots):
        - without cu_seqlens NS = ceil(T / BT), and h[b, c] is the state of batch row b before its tokens
          [c BT, (c + 1) BT);
        - with cu_seqlens NS = N + ceil(T / BT): chunk 0 of sequence n is h[0, n], and its chunk c >= 1, starting at
          token t = cu_seqlens[n] + c BT, is h[0, N + (t - 1) // BT]; an empty sequence has no chunk, and the slots of
          no chunk are not written (their values are undefined).
    On the CPU o and final_state are the bytes of :func:`chunk_gated_delta_rule`; on CUDA o comes from the output
    stage that reads h (not from the form that keeps the states inside the recurrence's kernel, which
    chunk_gated_delta_rule takes where it applies): equal to its o within the forward's tolerance (docs/ops/gdn.md),
    not always byte for byte. Nothing is read on the host (a malformed cu_seqlens is recorded for
    :func:`fuseops.check_errors`, as chunk_gated_delta_rule's): the call is capturable in a CUDA graph.

    Errors: those of chunk_gated_delta_rule (ValueError naming the argument; an input that requires grad, a
    RuntimeError), named ``chunk_gated_delta_rule_with_states``; ``return_intermediate_states`` is refused by name
    (the states are always returned).
    """
    return _chunk_forward("chunk_gated_delta_rule_with_states", q, k, v, g, beta, scale, initial_state,
                          output_final_state, use_qk_l2norm_in_kernel, cu_seqlens, chunk_size, kwargs, states=True)


def _chunk_slots(T, N, chunk_size, varlen):
    """NS, the chunk slots of h (gdn_chunk_slots, include/fuseops/gdn_forward.h): ceil(T / BT) per batch row, or
    N + ceil(T / BT) with cu_seqlens (``varlen``; N sequences)."""
    per_row = (T + chunk_size - 1) // chunk_size
    return N + per_row if varlen else per_row


def _chunk_forward(op, q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
                   cu_seqlens, chunk_size, kwargs, states=False):
    """chunk_gated_delta_rule's checks (errors named ``op``) and call; with ``states`` the one call of
    chunk_gated_delta_rule_with_states, which also writes the chunk states h [B, NS, HV, K, V] (NS: _chunk_slots) in
    the intermediate dtype. Returns (o, final_state or None, h or None)."""
    forward_only(op, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, optional=("initial_state",))
    initial_state = _contiguous_read(initial_state)
    cu_seqlens = _check_cu(op, cu_seqlens)
    output_final_state = bool_arg(op, "output_final_state", output_final_state)
    use_qk_l2norm_in_kernel = bool_arg(op, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    if "return_intermediate_states" in kwargs:  # vLLM's argument: its function returns three values
        taken = ("fuseops.chunk_gated_delta_rule_with_states, which always returns the chunk states (o, final_state, "
                 "h in chunk slots)" if states else
                 "fuseops.chunk_gated_delta_rule (FLA's signature, two results)")
        raise ValueError(f"{op}: return_intermediate_states: not taken by {taken}; "
                         "fuseops.compat.vllm.chunk_gated_delta_rule takes it, in vLLM's order, and returns (o, "
                         f"final_state, intermediate_states), got {shown(kwargs['return_intermediate_states'])}")
    kwargs = dict(kwargs)
    cu_seqlens_cpu = kwargs.pop("cu_seqlens_cpu", None)
    _reject_kwargs(op, kwargs)
    _check_rank(op, "q", q, 4, "[B, T, H, K]")
    _check_rank(op, "v", v, 4, "[B, T, HV, V]")
    chunk_size = _check_chunk_size(op, chunk_size)
    B, T, HV, V = v.shape
    _check_cu_seqlens_cpu(op, cu_seqlens_cpu, cu_seqlens, T)
    K = q.shape[3]
    o = _out_like(op, "q", q, (B, T, HV, V))
    ht = None
    if output_final_state:
        ht = torch.empty((_num_seqs(q, cu_seqlens), HV, K, V), dtype=torch.float32, device=q.device)
    sc = None if scale is None else float_arg(op, "scale", scale)
    if not states:
        ops.chunk_gated_delta_rule(o, ht, q, k, v, g, beta, sc, initial_state,
                                   bool(use_qk_l2norm_in_kernel), cu_seqlens, chunk_size)
        return o, ht, None
    NS = _chunk_slots(T, _num_seqs(q, cu_seqlens), chunk_size, cu_seqlens is not None)
    h = torch.empty((B, NS, HV, K, V), dtype=_intermediate_dtype(q.dtype, K, V), device=q.device)
    with named_as(op, "chunk_gated_delta_rule_with_states", {}):
        ops.chunk_gated_delta_rule_with_states(o, h, ht, q, k, v, g, beta, sc, initial_state,
                                               bool(use_qk_l2norm_in_kernel), cu_seqlens, chunk_size)
    return o, ht, h


def recompute_w_u_fwd(k, v, beta, A, g=None, cu_seqlens=None, chunk_indices=None):
    """w = A (beta e^g k), u = A (beta v) per chunk, as FLA ``recompute_w_u_fwd``. ``g``: natural-log chunk-local
    cumsum (float32) or None. Returns (w [B, T, HV, K] in k.dtype, u [B, T, HV, V] in v.dtype). Rounding: with k, v,
    A of one 16-bit dtype on CUDA, A diag(beta e^g) and A diag(beta) are rounded once to it (FLA rounds beta e^g k and
    beta v instead; one rounding per term either way)."""
    op = "recompute_w_u_fwd"
    forward_only(op, k=k, v=v, beta=beta, A=A, g=g, optional=("g",))
    cu_seqlens = _check_cu(op, cu_seqlens)
    _no_chunk_indices(op, chunk_indices)
    _check_rank(op, "k", k, 4, "[B, T, H, K]")
    _check_rank(op, "A", A, 4, "[B, T, HV, BT]")
    _check_rank(op, "v", v, 4, "[B, T, HV, V]")
    B, T, HV = A.shape[0], A.shape[1], A.shape[2]
    w = torch.empty((B, T, HV, k.shape[3]), dtype=k.dtype, device=k.device)
    u = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    ops.recompute_w_u_fwd(w, u, k, v, beta, A, g, cu_seqlens)
    return w, u


def chunk_gated_delta_rule_fwd_h(k, w, u, g=None, gk=None, initial_state=None, output_final_state=False, chunk_size=64,
                                 save_new_value=True, state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
                                 chunk_indices=None, **kwargs):
    """The state recurrence across chunks, as FLA ``chunk_gated_delta_rule_fwd_h`` (its positional order; default
    state layout: ``gk``, ``state_v_first`` and ``chunk_indices`` only at their defaults; ``cu_seqlens_cpu``, FLA's host
    copy of cu_seqlens, is checked as by :func:`chunk_gated_delta_rule` and not otherwise read).

    Returns (h [B, NS, HV, K, V] in k.dtype, v_new [B, T, HV, V] in u.dtype (ungated; None with
    ``save_new_value=False``, as FLA, though it is still computed), final_state or None). h is
    indexed by chunk slot: NS = ceil(T / BT) per batch row, or N + ceil(T / BT) with cu_seqlens (see
    include/fuseops/gdn_forward.h, gdn_chunk_slots), not FLA's compacted chunk list.
    """
    op = "chunk_gated_delta_rule_fwd_h"
    forward_only(op, k=k, w=w, u=u, g=g, initial_state=initial_state, optional=("g", "initial_state"))
    initial_state = _contiguous_read(initial_state)
    _reject_kwargs(op, dict(kwargs, gk=gk, state_v_first=state_v_first, chunk_indices=chunk_indices))
    cu_seqlens = _check_cu(op, cu_seqlens)
    output_final_state = bool_arg(op, "output_final_state", output_final_state)
    save_new_value = bool_arg(op, "save_new_value", save_new_value)
    _check_rank(op, "k", k, 4, "[B, T, H, K]")
    _check_rank(op, "u", u, 4, "[B, T, HV, V]")
    _check_cu_seqlens_cpu(op, cu_seqlens_cpu, cu_seqlens, k.shape[1])
    chunk_size = _check_chunk_size(op, chunk_size)
    B, T, HV, V = u.shape
    N = _num_seqs(k, cu_seqlens)
    NS = _chunk_slots(T, N, chunk_size, cu_seqlens is not None)
    h = torch.empty((B, NS, HV, k.shape[3], V), dtype=k.dtype, device=k.device)
    v_new = torch.empty(u.shape, dtype=u.dtype, device=u.device)
    ht = torch.empty((N, HV, k.shape[3], V), dtype=torch.float32, device=k.device) if output_final_state else None
    ops.chunk_gated_delta_rule_fwd_h(h, v_new, ht, k, w, u, g, initial_state, chunk_size, cu_seqlens)
    return h, v_new if save_new_value else None, ht


def chunk_fwd_o(q, k, v, h, g=None, g_gamma=None, scale=None, state_v_first=False, cu_seqlens=None, chunk_size=64,
                chunk_indices=None, **kwargs):
    """o = scale (e^g q h + causal gated (q k^T) v) per chunk, as FLA ``chunk_fwd_o`` (its positional order;
    ``g_gamma``, ``state_v_first`` and ``chunk_indices`` only at their defaults); ``v`` is v_new and ``h`` the
    per-chunk states of :func:`chunk_gated_delta_rule_fwd_h`; scale None: K ** -0.5. Returns o [B, T, HV, V] in
    v.dtype."""
    op = "chunk_fwd_o"
    forward_only(op, q=q, k=k, v=v, h=h, g=g, optional=("g",))
    _reject_kwargs(op, dict(kwargs, g_gamma=g_gamma, state_v_first=state_v_first, chunk_indices=chunk_indices))
    cu_seqlens = _check_cu(op, cu_seqlens)
    _check_rank(op, "q", q, 4, "[B, T, H, K]")
    _check_rank(op, "v", v, 4, "[B, T, HV, V]")
    chunk_size = _check_chunk_size(op, chunk_size)
    o = _out_like(op, "v", v, v.shape)
    # (K = 0 is the op's error: any scale)
    sc = (q.shape[3] ** -0.5 if q.shape[3] > 0 else 1.0) if scale is None else float_arg(op, "scale", scale)
    with named_as(op, op, {"v_new": "v"}):  # the op's name for this function's v
        ops.chunk_fwd_o(o, q, k, v, h, g, sc, chunk_size, cu_seqlens)
    return o


# ---------------------------------------------------------------------------------------------------------------
# The state at the start of every chunk (vLLM's return_intermediate_states, fuseops.compat.vllm).


def _intermediate_dtype(dtype, K, V):
    """The dtype chunk_gated_delta_rule stores its intermediates (the chunk states h among them) in, for inputs of
    ``dtype`` and head dims K, V: q's dtype, float32 for 16-bit inputs with K or V < 32. The C++ rule
    (chunk_gated_delta_rule_intermediate_dtype, bound as ops.chunk_gated_delta_rule_intermediate_dtype) in plain
    Python, so that torch.compile traces it as a constant; a test holds the two equal over every dtype and head dim the
    op accepts. Arguments the op refuses are named by its own checks, made before it writes h."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) and min(K, V) < 32 else dtype


def _slots_in_sequence_order(cu, chunk_size):
    """The h slots (gdn_chunk_slots) of every chunk, sequence by sequence and in order within each: chunk 0 of sequence
    n is slot n, chunk c >= 1, starting at token t, slot N + (t - 1) // BT. ``cu``: cu_seqlens on the host (int64); a
    sequence of L tokens has ceil(L / BT) chunks, an empty one none."""
    N = cu.shape[0] - 1
    chunks = torch.div(cu[1:] - cu[:-1] + chunk_size - 1, chunk_size, rounding_mode="floor")
    seq = torch.repeat_interleave(torch.arange(N), chunks)
    c = torch.arange(seq.shape[0]) - torch.repeat_interleave(torch.cumsum(chunks, 0) - chunks, chunks)
    t = cu[seq] + c * chunk_size
    return torch.where(c == 0, seq, N + torch.div(t - 1, chunk_size, rounding_mode="floor"))


def _host_cu_seqlens(op, cu_seqlens, T):
    """cu_seqlens read on the host (a synchronisation with its device), checked: 0 = cu[0] <= ... <= cu[N] = T."""
    cu = cu_seqlens.to("cpu", torch.int64)
    _check_cu_values(op, "cu_seqlens", cu, T, "read on the host for return_intermediate_states")
    return cu


def fused_recurrent_gated_delta_rule(q, k, v, g=None, beta=None, scale=None, initial_state=None,
                                     output_final_state=False, use_qk_l2norm_in_kernel=False, cu_seqlens=None,
                                     ssm_state_indices=None, num_accepted_tokens=None, inplace_final_state=None,
                                     **kwargs):
    """The token recurrence (decode, any T), as FLA ``fused_recurrent_gated_delta_rule``.

    ``beta`` (None: ones) is per head [B, T, HV] or, as FLA's per-channel beta (taken where beta has v's rank), per
    value column [B, T, HV, V]: v'_t[j] = beta_t[j] (v_t[j] - (S^T k_t)[j]) for each column j; both forms take either.
    A per-column beta without innermost stride 1 (e.g. a per-head beta expanded over V) is read as a contiguous copy,
    as FLA's input_guard makes it (the C++ API refuses it by name). Another rank or shape is a ValueError naming beta
    with the expected shape.

    FLA form: ``initial_state`` [N, HV, K, V] is read-only; returns (o [B, T, HV, V] in v.dtype, final_state float32
    or None). vLLM serving form (``ssm_state_indices`` given): ``initial_state`` is the state pool [S, HV, K, V]
    (float32 / bfloat16 / float16, as vLLM's mamba_ssm_cache_dtype) updated in place, as vLLM's ``inplace_final_state=True`` (its default); each slot [HV, K, V]
    contiguous, the slots at least HV * K * V elements apart (vLLM's pools in padded pages, stride(0) the page's
    elements, are taken as they are; overlapping slots are a ValueError); ``ssm_state_indices``
    [N'] or [N', Tmax] (with ``num_accepted_tokens`` [N'']), N', N'' >= N: rows past the N sequences are not read (vLLM's
    CUDA-graph step passes the padded batch's indices with ``cu_seqlens[:num_decodes + 1]``); index -1 is a padding
    slot, any other index outside [0, S) is recorded for :func:`fuseops.check_errors` (and its sequence treated as
    padding). Returns (o, initial_state): the
    pool is the final state, whatever ``output_final_state`` says. ``inplace_final_state``: None (the form decides),
    True (the serving form: ssm_state_indices required) or False (the FLA form); False with ``ssm_state_indices`` is a
    ValueError: vLLM's per-token final states in a new [T, HV, K, V] tensor are not supported. In the serving form
    ``cu_seqlens[N]`` may be less than T (vLLM's CUDA-graph padded decode steps): the tokens past it belong to no
    sequence and their o rows are 0; the FLA form records ``cu_seqlens[N] != T`` as malformed. Not checked (as in
    vLLM, the indices live on the device): no slot may serve two sequences of one call (no sequence may read or write
    a slot another sequence of the call writes); the sequences run concurrently, so such a call leaves that slot and
    those sequences' outputs unspecified, and nothing is raised or recorded.
    """
    op = "fused_recurrent_gated_delta_rule"
    forward_only(op, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, ssm_state_indices=ssm_state_indices,
                 num_accepted_tokens=num_accepted_tokens,
                 optional=("g", "beta", "initial_state", "ssm_state_indices", "num_accepted_tokens"))
    if isinstance(initial_state, torch.Tensor) and initial_state.dim() == 3:
        # a gate's shape [B, T, HV] where a state belongs: FLA's positional order (gk, gv before beta) puts beta here
        raise ValueError(f"{op}: initial_state: expected [N, HV, K, V] (or the pool [S, HV, K, V]), got rank 3 "
                         f"{list(initial_state.shape)}: FLA's positional order (q, k, v, g, gk, gv, beta, scale, "
                         "initial_state, ...) puts beta there; fuseops takes vLLM's (q, k, v, g, beta, scale, "
                         "initial_state, ...): pass beta, scale and initial_state by keyword")
    cu_seqlens = _check_cu(op, cu_seqlens)
    output_final_state = bool_arg(op, "output_final_state", output_final_state)
    use_qk_l2norm_in_kernel = bool_arg(op, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    if inplace_final_state is not None:
        inplace_final_state = bool_arg(op, "inplace_final_state", inplace_final_state)
        if not inplace_final_state and ssm_state_indices is not None:
            raise ValueError(f"{op}: inplace_final_state: False with ssm_state_indices (vLLM's per-token final states "
                             "in a new tensor) is not supported; the serving form updates the pool in place "
                             "(inplace_final_state=True or None)")
    _reject_kwargs(op, kwargs)
    _check_rank(op, "q", q, 4, "[B, T, H, K]")
    _check_rank(op, "v", v, 4, "[B, T, HV, V]")
    if isinstance(beta, torch.Tensor) and beta.dim() == 4:  # per column: read as the op takes it
        beta = unit_innermost(beta)
    o = _out_like(op, "v", v, v.shape)
    sc = None if scale is None else float_arg(op, "scale", scale)
    if ssm_state_indices is not None or inplace_final_state is True:
        if initial_state is None:
            why = "ssm_state_indices given" if ssm_state_indices is not None else "inplace_final_state=True"
            raise ValueError(f"{op}: initial_state: expected the state pool [S, HV, K, V] in the serving form ({why}), "
                             "got None")
        if ssm_state_indices is None:
            raise ValueError(f"{op}: ssm_state_indices: expected a tensor with inplace_final_state=True (the serving "
                             "form), got None")
        # the op's .pool overload: its errors, the recorded bad indices included, name this function and its pool
        ops.fused_recurrent_gated_delta_rule.pool(o, initial_state, q, k, v, g, beta, sc,
                                                  _contiguous_read(ssm_state_indices),
                                                  _contiguous_read(num_accepted_tokens),
                                                  bool(use_qk_l2norm_in_kernel), cu_seqlens)
        return o, initial_state
    if num_accepted_tokens is not None:
        raise ValueError(f"{op}: num_accepted_tokens: expected None without ssm_state_indices")
    ht = None
    if output_final_state:
        ht = torch.empty((_num_seqs(q, cu_seqlens), v.shape[2], q.shape[3], v.shape[3]), dtype=torch.float32,
                         device=q.device)
    ops.fused_recurrent_gated_delta_rule.default(o, ht, q, k, v, g, beta, sc, _contiguous_read(initial_state),
                                         bool(use_qk_l2norm_in_kernel), cu_seqlens)
    return o, ht


def _per_token(op, name, x, v):
    """vLLM passes the gate inputs as [num_tokens, HV]: view them as [B, T, HV] over v's [B, T] token dims."""
    if not (isinstance(x, torch.Tensor) and x.dim() == 2):
        return x
    B, T = v.shape[0], v.shape[1]
    if x.shape[0] != B * T:
        raise ValueError(f"{op}: {name}: expected [B, T, HV] or [B * T, HV] with B * T = {B * T} tokens (v is "
                         f"{list(v.shape)}), got {list(x.shape)}")
    return x.view(B, T, x.shape[1])


def fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b,
                                           initial_state_source, initial_state_indices, scale=None,
                                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, num_accepted_tokens=None,
                                           **kwargs):
    """vLLM's fused sigmoid-gating decode: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) inside the kernel,
    the state pool ``initial_state_source`` [S, HV, K, V] updated in place at ``initial_state_indices`` (each slot
    contiguous, the slots at least HV * K * V elements apart, as vLLM's padded pages).
    ``a``, ``b``: [B, T, HV], or vLLM's 2-D [B * T, HV] (the tokens of q / v flattened); ``b`` is per head only (no
    per-channel form, as in vLLM). Returns o [B, T, HV, V] in
    v.dtype. The indices follow :func:`fused_recurrent_gated_delta_rule`'s ``ssm_state_indices``, with its
    precondition: no slot serves two sequences of one call (not checked), and ``cu_seqlens[N]`` may be less than T as
    in its serving form (the tokens past it are padding: o rows 0)."""
    op = "fused_sigmoid_gating_delta_rule_update"
    forward_only(op, A_log=A_log, a=a, dt_bias=dt_bias, q=q, k=k, v=v, b=b, initial_state_source=initial_state_source,
                 initial_state_indices=initial_state_indices, num_accepted_tokens=num_accepted_tokens,
                 optional=("num_accepted_tokens",))
    cu_seqlens = _check_cu(op, cu_seqlens)
    use_qk_l2norm_in_kernel = bool_arg(op, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    _reject_kwargs(op, kwargs)
    _check_rank(op, "v", v, 4, "[B, T, HV, V]")
    a = _per_token(op, "a", a, v)
    b = _per_token(op, "b", b, v)
    o = _out_like(op, "v", v, v.shape)
    # (the op names the pool and its indices as this function does: initial_state_source / initial_state_indices)
    ops.fused_sigmoid_gating_delta_rule_update(o, initial_state_source, A_log, a, dt_bias, q, k, v, b,
                                               None if scale is None else float_arg(op, "scale", scale),
                                               _contiguous_read(initial_state_indices),
                                               _contiguous_read(num_accepted_tokens),
                                               bool(use_qk_l2norm_in_kernel), cu_seqlens,
                                               float_arg(op, "softplus_beta", softplus_beta),
                                               float_arg(op, "softplus_threshold", softplus_threshold))
    return o
