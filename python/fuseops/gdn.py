"""Gated DeltaNet (GDN) intra-chunk stage, with flash-linear-attention's (FLA 0.5.2) names and signatures.

Notation: B batch, T tokens, H key heads, HV value heads (a multiple of H; value head h reads key head h // (HV // H)),
K head dim (1..256), BT chunk size (16, 32 or 64). With ``cu_seqlens`` ([N+1] int32/int64 on the tensors' device),
B == 1 and sequence n is tokens [cu_seqlens[n], cu_seqlens[n+1]); chunks restart at every sequence. ``g`` is the
natural-log chunk-local cumsum returned by :func:`chunk_local_cumsum` with ``scale=None`` (FLA >= 0.5 passes
log2-scaled values to exp2 internally; those are not accepted). docs/ops/gdn.md has the math and tolerances.

Errors: ``ValueError`` naming the argument for bad shapes, dtypes, devices, chunk sizes; a malformed ``cu_seqlens``
is reported by :func:`fuseops.check_errors` (the ops never synchronise). Forward only, as FLA's functions: the
outputs do not require grad.
"""

import torch

from ._ops import ops

_FLOAT = (torch.float32, torch.float16, torch.bfloat16)


def _no_chunk_indices(op, chunk_indices):
    if chunk_indices is not None:
        raise ValueError(
            f"{op}: chunk_indices: expected None (fuseops derives the chunks from cu_seqlens on the device), "
            f"got a {type(chunk_indices).__name__}"
        )


def _check_chunk_size(op, chunk_size):
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size not in (16, 32, 64):
        raise ValueError(f"{op}: chunk_size: expected 16, 32 or 64, got {chunk_size!r}")


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


def chunk_local_cumsum(g, chunk_size, reverse=False, scale=None, cu_seqlens=None, output_dtype=torch.float,
                       chunk_indices=None):
    """Chunk-local cumulative sum of log-decays, as FLA ``chunk_local_cumsum`` (3-D form).

    Args:
        g: [B, T, HV] float32 / float16 / bfloat16.
        chunk_size: 16, 32 or 64.
        reverse: suffix sums within each chunk.
        scale: multiplies after the sum (None: 1).
        cu_seqlens: optional [N+1] int32 / int64, B == 1.
        output_dtype: torch.float32 only.
    Returns:
        [B, T, HV] float32.
    """
    op = "chunk_local_cumsum"
    _no_chunk_indices(op, chunk_indices)
    if output_dtype not in (torch.float, None):
        raise ValueError(f"{op}: output_dtype: expected torch.float32, got {output_dtype}")
    _check_rank(op, "g", g, 3, "[B, T, HV]")
    _check_chunk_size(op, chunk_size)
    out = torch.empty(g.shape, dtype=torch.float32, device=g.device)
    ops.chunk_local_cumsum(out, g, chunk_size, cu_seqlens, reverse, None if scale is None else float(scale))
    return out


def chunk_scaled_dot_kkt_fwd(k, g=None, beta=None, cu_seqlens=None, chunk_size=64, output_dtype=torch.float32,
                             chunk_indices=None):
    """A[t, j] = beta_t <k_t, k_s> exp(g_t - g_s) for s = the j-th token of t's chunk, s < t; 0 elsewhere.

    As FLA ``chunk_scaled_dot_kkt_fwd``. Args: k [B, T, H, K]; g [B, T, HV] float32 (natural-log chunk-local
    cumsum) or None; beta [B, T, HV] or None (ones); cu_seqlens optional; chunk_size 16/32/64; output_dtype float32 /
    float16 / bfloat16. Returns A [B, T, HV, BT], every element written.
    """
    op = "chunk_scaled_dot_kkt_fwd"
    _no_chunk_indices(op, chunk_indices)
    _check_rank(op, "k", k, 4, "[B, T, H, K]")
    _check_optional(op, "g", g)
    _check_optional(op, "beta", beta)
    _check_chunk_size(op, chunk_size)
    if output_dtype not in _FLOAT:
        raise ValueError(f"{op}: output_dtype: expected torch.float32 | float16 | bfloat16, got {output_dtype}")
    B, T = k.shape[0], k.shape[1]
    A = torch.empty((B, T, _heads(k, g, beta), chunk_size), dtype=output_dtype, device=k.device)
    ops.chunk_scaled_dot_kkt_fwd(A, k, g, beta, chunk_size, cu_seqlens)
    return A


def solve_tril(A, cu_seqlens=None, chunk_indices=None, output_dtype=torch.float):
    """(I + A)^{-1} per chunk, as FLA ``solve_tril``: A [B, T, HV, BT] strictly lower per chunk (only those entries
    are read); returns [B, T, HV, BT] in ``output_dtype`` (unit lower triangular, zeros elsewhere)."""
    op = "solve_tril"
    _no_chunk_indices(op, chunk_indices)
    _check_rank(op, "A", A, 4, "[B, T, HV, BT]")
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
    _check_rank(op, "k", k, 4, "[B, T, H, K]")
    _check_optional(op, "g", g)
    _check_optional(op, "beta", beta)
    _check_chunk_size(op, chunk_size)
    dtype = k.dtype if output_dtype is None else output_dtype
    if dtype not in _FLOAT:
        name = "k" if output_dtype is None else "output_dtype"
        raise ValueError(f"{op}: {name}: expected torch.float32 | float16 | bfloat16, got {dtype}")
    B, T = k.shape[0], k.shape[1]
    Ai = torch.empty((B, T, _heads(k, g, beta), chunk_size), dtype=dtype, device=k.device)
    ops.chunk_gated_delta_rule_fwd_kkt_solve(Ai, k, g, beta, chunk_size, cu_seqlens)
    return Ai
