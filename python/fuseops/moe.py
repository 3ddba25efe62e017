"""MoE routing: top-k expert selection per token and the block schedule of the fused-MoE GEMM, with vLLM's names.

Notation: T tokens, E experts, k experts per token. The functions allocate their outputs and return them; the ops
never synchronise, so they run inside CUDA graphs. docs/ops/moe.md has the semantics (NaN/Inf rules, tie-breaking,
the deterministic schedule order) and the tolerances.

Errors: ``ValueError`` naming the argument for bad shapes, dtypes, devices and ranges; expert ids outside
[-1, num_experts) (and bad ``expert_map`` entries) are skipped and reported by :func:`fuseops.check_errors`.
Not differentiable (routing decisions are discrete; vLLM's are not either): logits or a bias that require grad while
grad mode is on raise ``RuntimeError`` rather than return weights silently cut from the graph (call the routers
under ``torch.no_grad()`` / ``torch.inference_mode()``, or detach).
"""

import contextlib
import math

import torch

from ._args import INT32_MAX, bool_arg, float_arg, forward_only, int_arg, takes_rows, tensor_arg
from ._ops import ops

_SCORING = ("softmax", "sigmoid")
_MAX_ALIGN_EXPERTS = 4096  # kMaxAlignExperts of include/fuseops/moe.h
_MAX_ROUTER_EXPERTS = 1024  # kMaxRouterExperts
_DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64"}  # the ops'
# names (dtype_name of include/fuseops/tensor.h); any other dtype as torch names it
_MAX_BLOCK_SIZE = 1 << 20


def _check_groups(op, n_group, topk_group, renormalize, routed_scaling_factor):
    """The grouped-routing scalars by name (the op checks their ranges against E): a swapped positional bool / int
    (vLLM's order differs) is an error, not a silent 0 / 1."""
    int_arg(op, "n_group", n_group, 1)
    int_arg(op, "topk_group", topk_group, 1)
    bool_arg(op, "renormalize", renormalize)
    float_arg(op, "routed_scaling_factor", routed_scaling_factor)


def _check_topk(op, topk, E):
    """k in [1, min(E, 32)], named as the caller passed it (the op itself can only name topk_weights' shape)."""
    return int_arg(op, "topk", topk, 1, min(E, 32) if E >= 1 else None, f"min(E, 32), E = {E} experts")


@contextlib.contextmanager
def _k_named_topk(op):
    """The op's limit k <= topk_group * E / n_group, which it states on topk_weights' shape, restated on ``topk``:
    the Python functions allocate topk_weights from it. In the op's order of checks (the logits' dtype and E, the
    bias, n_group and topk_group come first)."""
    try:
        yield
    except ValueError as e:
        msg = str(e)
        if not msg.startswith(f"{op}: topk_weights: expected k = shape[1] <= "):
            raise
        rest = msg[len(f"{op}: topk_weights: expected k = shape[1] <= "):].replace(", got k = ", ", got ")
        raise ValueError(f"{op}: topk: expected k <= {rest}") from None


def _check_indices_dtype(op, indices_dtype):
    """torch.int32 or torch.int64, named (a string failed in torch.empty, None named the internal topk_ids)."""
    if indices_dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{op}: indices_dtype: expected torch.int32 or torch.int64, got {indices_dtype!r}")


def _rows(op, name, t):
    tensor_arg(op, name, t)
    if t.dim() != 2:
        raise ValueError(f"{op}: {name}: expected rank 2 [T, E], got {list(t.shape)}")
    return t.shape[0]


def read_rows(t, any_innermost=False):
    """A rank-2 [rows, cols] tensor an op only reads, as the contiguous copy where its elements overlap: a stride 0 on
    a dim of size > 1 (an expanded row or column) or rows closer than their length. The C++ API refuses such a layout
    by name (the rule keeps the outputs it writes apart); reading it is harmless, so it is read as vLLM's and FLA's
    input guards read it, through ``.contiguous()``. With ``any_innermost``, also where the innermost stride is not 1
    (the ids: any layout is read); without it a transposed view stays the op's error, as documented for the logits.
    Anything else (None, not rank 2, meta, empty) as it is."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta" or t.dim() != 2 or t.numel() == 0:
        return t
    if any_innermost:  # every layout the row check refuses
        return t if takes_rows(t) else t.contiguous()
    rows, cols = t.shape
    unit = cols == 1 or t.stride(1) == 1
    overlap = (cols > 1 and t.stride(1) == 0) or (rows > 1 and (t.stride(0) == 0 or (unit and t.stride(0) < cols)))
    return t.contiguous() if overlap else t


def topk_softmax(gating_output, topk, renormalize=False, correction_bias=None, indices_dtype=torch.int32):
    """Softmax top-k routing, as vLLM ``topk_softmax``.

    Args:
        gating_output: [T, E] float32 / float16 / bfloat16 logits, E <= 1024.
        topk: k in [1, min(E, 32)].
        renormalize: divide the k weights by their sum.
        correction_bias: optional [E] float32 / float16 / bfloat16 tensor added to the probabilities for selection
            only.
        indices_dtype: torch.int32 or torch.int64 for ``topk_ids``.

    Returns:
        (topk_weights [T, k] float32, topk_ids [T, k], token_expert_indices [T, k] int32 with j*T + t).
    """
    op = "topk_softmax"
    _check_indices_dtype(op, indices_dtype)
    renormalize = bool_arg(op, "renormalize", renormalize)
    T = _rows(op, "gating_output", gating_output)
    topk = _check_topk(op, topk, gating_output.shape[1])
    forward_only(op, gating_output=gating_output, correction_bias=correction_bias, optional=("correction_bias",))
    dev = gating_output.device
    w = torch.empty((T, topk), dtype=torch.float32, device=dev)
    ids = torch.empty((T, topk), dtype=indices_dtype, device=dev)
    src = torch.empty((T, topk), dtype=torch.int32, device=dev)
    ops.topk_softmax.default(w, ids, src, read_rows(gating_output), renormalize, correction_bias)
    return w, ids, src


def grouped_topk(scores, n_group, topk_group, topk, renormalize, routed_scaling_factor=1.0, bias=None,
                 scoring="sigmoid", indices_dtype=torch.int32):
    """Grouped top-k routing (DeepSeek-V3 noaux_tc, Kimi-K2 with n_group=1), as vLLM ``grouped_topk``.

    **Scoring defaults to sigmoid here**, DeepSeek-V3 / R1's noaux_tc routing, as vLLM's fused kernel
    ``vllm._custom_ops.grouped_topk`` (``torch.ops._moe_C.grouped_topk``) runs it for those models (vLLM passes its
    ``scoring_func=1``, sigmoid of the logits; that op's own default 0 takes scores already activated, which fuseops
    does not take). :func:`moe_route` (and C++ ``MoeRouterConfig``) default to softmax instead, as vLLM's Python router
    function ``grouped_topk(hidden_states, gating_output, topk, renormalize, num_expert_group, topk_group,
    scoring_func="softmax", ...)`` and ``GroupedTopKRouter`` do
    (vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py). A DeepSeek-V2 style softmax router must
    pass ``scoring="softmax"`` here.

    Args:
        scores: [T, E] float32 / float16 / bfloat16 router logits (scored with ``scoring``).
        n_group, topk_group: E % n_group == 0, n_group <= 32, 1 <= topk_group <= n_group.
        topk: k <= min(32, topk_group * E / n_group).
        renormalize: divide the k weights by their sum; routed_scaling_factor multiplies them afterwards.
        bias: optional [E] e_score_correction_bias, float32 / float16 / bfloat16 whatever the scores' dtype
            (selection only).
        scoring: "sigmoid" (the default) or "softmax".

    Returns:
        (topk_weights [T, k] float32, topk_ids [T, k] indices_dtype).
    """
    op = "grouped_topk"
    _check_indices_dtype(op, indices_dtype)
    T = _rows(op, "scores", scores)
    topk = _check_topk(op, topk, scores.shape[1])
    _check_groups(op, n_group, topk_group, renormalize, routed_scaling_factor)
    if not isinstance(scoring, str) or scoring not in _SCORING:
        raise ValueError(f"{op}: scoring: expected 'softmax' | 'sigmoid', got {scoring!r}")
    forward_only(op, scores=scores, bias=bias, optional=("bias",))
    w = torch.empty((T, topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((T, topk), dtype=indices_dtype, device=scores.device)
    with _k_named_topk(op):
        ops.grouped_topk.default(w, ids, read_rows(scores), bias, n_group, topk_group, renormalize,
                                 float(routed_scaling_factor), scoring)
    return w, ids


def moe_align_sizes(numel, num_experts, block_size, pad_sorted_ids=False):
    """(len(sorted_token_ids), len(expert_ids)) as vLLM's ``moe_align_block_size`` wrapper allocates them.
    ``numel`` >= 0, ``num_experts`` in [1, 4096], ``block_size`` in [1, 2^20] (ints), and the schedule's length below
    2^31 (it is int32), else ValueError naming the argument."""
    op = "moe_align_sizes"
    pad_sorted_ids = bool_arg(op, "pad_sorted_ids", pad_sorted_ids)
    # the checked ints go on (a numpy / torch integer scalar skipped the int32 check and came back as a tensor)
    numel = int_arg(op, "numel", numel, 0)
    num_experts = int_arg(op, "num_experts", num_experts, 1, _MAX_ALIGN_EXPERTS)
    block_size = int_arg(op, "block_size", block_size, 1, _MAX_BLOCK_SIZE)
    return _checked_align_sizes(op, "numel", numel, num_experts, block_size, pad_sorted_ids)


def _check_align_args(op, num_experts, block_size):
    """The schedule's ranges (those of the op), checked before anything is allocated; returns them as ints."""
    return (int_arg(op, "num_experts", num_experts, 1, _MAX_ALIGN_EXPERTS),
            int_arg(op, "block_size", block_size, 1, _MAX_BLOCK_SIZE))


def _schedule_blame(numel, num_experts, block_size, ids, capped=True):
    """(name, got) blamed where the schedule is too long: the op's rule (moe_schedule_blame in src/common/moe_math.h),
    checked here before anything is allocated. Where numel < num_experts (length numel * block_size; ``capped``) the
    larger of the two; else the larger term of numel + num_experts * (block_size - 1), the ids (``ids``) or the
    padding's larger factor."""
    if capped and numel < num_experts:
        return ("block_size", block_size) if block_size >= numel else ids
    if num_experts * (block_size - 1) <= numel:
        return ids
    return ("block_size", block_size) if block_size - 1 >= num_experts else ("num_experts", num_experts)


def _checked_align_sizes(op, ids_name, numel, num_experts, block_size, pad_sorted_ids, ids_got=None, capped=True):
    """_align_sizes, with the int32 limit of the schedule (as allocated: with pad_sorted_ids, rounded up) checked
    before anything is allocated; the error names what _schedule_blame says (the ids as ``ids_name``, shown as
    ``ids_got``, else numel)."""
    n, blocks = _align_sizes(numel, num_experts, block_size, pad_sorted_ids, capped)
    if isinstance(numel, int) and n > INT32_MAX:
        name, got = _schedule_blame(numel, num_experts, block_size, (ids_name, numel if ids_got is None else ids_got),
                                    capped)
        rounded = ", rounded up to block_size (pad_sorted_ids)" if pad_sorted_ids else ""
        cap = "; numel * block_size where numel < num_experts" if capped else ""
        raise ValueError(f"{op}: {name}: expected a schedule length (numel + num_experts * (block_size - 1){rounded}"
                         f"{cap}) < 2^31 (numel {numel}, num_experts {num_experts}, block_size {block_size}), which "
                         f"is {n} (an int32 schedule), got {got}")
    return n, blocks


def _align_sizes(numel, num_experts, block_size, pad_sorted_ids, capped=True):
    """vLLM's lengths; without ``capped`` FlagGems' (no cap at numel * block_size where numel < num_experts)."""
    # numel may be symbolic under torch.compile (not an int: the int32 check is then the op's); the caller has checked
    # the arguments.
    n = numel + num_experts * (block_size - 1)
    if pad_sorted_ids:
        n = (n + block_size - 1) // block_size * block_size
    if capped and numel < num_experts:
        n = min(numel * block_size, n)
    return n, (n + block_size - 1) // block_size


def moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False,
                         ignore_invalid_experts=True):
    """The block schedule of the fused-MoE GEMM, with vLLM's wrapper signature and outputs.

    ``topk_ids``: int32 / int64 of any shape (its flat row-major indices; vLLM and FlagGems read contiguous ids by
    numel, in memory order), e.g. [T, k].
    Region e of ``sorted_token_ids`` lists the flat indices of ``topk_ids`` routed to expert e in ascending order
    (deterministic), padded with numel to a multiple of block_size; ``expert_ids`` gives each block's expert (-1 past
    the end); ``num_tokens_post_pad`` [1] is the end of the last region. Ids -1 are padding.

    ``expert_map`` ([num_experts] int32: global id -> local id or -1, for expert parallelism) is applied in one of
    vLLM's two ways:

    - ``ignore_invalid_experts=True`` (the default here; vLLM's wrapper defaults to False): the map is applied to
      each id before counting (vLLM PR #29642): ids mapped to -1 are dropped, regions are in local-id order, entries
      outside [-1, num_experts) are skipped and reported by :func:`fuseops.check_errors`. The dropped ids' rows get no
      block, so a GEMM that relied on vLLM's -1 blocks to write zeros there leaves them unwritten (pass False, or zero
      the output; docs/ops/moe.md, "Differences from vLLM").
    - ``ignore_invalid_experts=False`` (vLLM's legacy flow, FlagGems): every id is counted under its global id, then
      ``expert_ids`` of the blocks before ``num_tokens_post_pad`` become ``expert_map[expert_ids]`` (-1 for experts of
      other ranks, whose blocks the GEMM skips). Blocks past the end stay -1 (vLLM maps them too: expert_map[0] or
      expert_map[-1]). The entries are copied as they are, as vLLM does.

    Returns:
        (sorted_token_ids int32, expert_ids int32, num_tokens_post_pad int32 [1]), of the lengths vLLM's wrapper
        allocates (:func:`moe_align_sizes`).
    """
    return _aligned("moe_align_block_size", topk_ids, block_size, num_experts, expert_map, pad_sorted_ids,
                    ignore_invalid_experts, True)


def _aligned(op, topk_ids, block_size, num_experts, expert_map, pad_sorted_ids, ignore_invalid_experts, capped):
    """moe_align_block_size's outputs in new tensors of vLLM's lengths, or FlagGems' without ``capped``."""
    pad_sorted_ids = bool_arg(op, "pad_sorted_ids", pad_sorted_ids)
    ignore_invalid_experts = bool_arg(op, "ignore_invalid_experts", ignore_invalid_experts)
    tensor_arg(op, "topk_ids", topk_ids)
    tensor_arg(op, "expert_map", expert_map, optional=True)
    num_experts, block_size = _check_align_args(op, num_experts, block_size)
    n, blocks = _checked_align_sizes(op, "topk_ids", topk_ids.numel(), num_experts, block_size, pad_sorted_ids,
                                     str(list(topk_ids.shape)), capped)
    legacy_map = expert_map is not None and not ignore_invalid_experts
    if legacy_map:
        _check_legacy_map(op, expert_map, num_experts, topk_ids)
    dev = topk_ids.device
    sorted_ids = torch.empty((n,), dtype=torch.int32, device=dev)
    expert_ids = torch.empty((blocks,), dtype=torch.int32, device=dev)
    total = torch.empty((1,), dtype=torch.int32, device=dev)
    ops.moe_align_block_size.default(id_rows(topk_ids), num_experts, block_size, sorted_ids, expert_ids, total,
                                     None if legacy_map else expert_map)
    if legacy_map:  # the blocks before the end hold global ids in [0, num_experts); those after, -1
        local = expert_map.index_select(0, expert_ids.clamp(min=0).long())
        expert_ids = torch.where(expert_ids >= 0, local, expert_ids)
    return sorted_ids, expert_ids, total


def id_rows(topk_ids):
    """topk_ids of any rank and layout as the op's [T, k] with innermost stride 1 and rows apart, its flat (row-major)
    indices unchanged (vLLM and FlagGems read topk_ids by numel): a 0-D or 1-D tensor as [numel, 1], a higher rank as
    [prod(leading dims), last dim]; a contiguous copy where that view's innermost stride is not 1 or its elements
    overlap (an expanded tensor), layouts the C++ API refuses by name (:func:`read_rows`)."""
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.device.type == "meta":
        return topk_ids
    rows = topk_ids
    if topk_ids.dim() < 2:
        rows = topk_ids.reshape(topk_ids.numel(), 1)
    elif topk_ids.dim() > 2:
        rows = topk_ids.reshape(math.prod(topk_ids.shape[:-1]), topk_ids.shape[-1])
    return read_rows(rows, any_innermost=True)


def _check_legacy_map(op, expert_map, num_experts, topk_ids):
    """The checks the op makes of an expert_map it is given (it is not given one in the legacy flow)."""
    if expert_map.dtype != torch.int32:
        got = _DTYPE_NAMES.get(expert_map.dtype, str(expert_map.dtype).replace("torch.", ""))
        raise ValueError(f"{op}: expert_map: expected dtype i32, got {got}")
    if expert_map.dim() != 1 or expert_map.shape[0] != num_experts:
        what = "shape" if expert_map.dim() == 1 else "rank 1"
        raise ValueError(f"{op}: expert_map: expected {what} [num_experts] = [{num_experts}], got "
                         f"{list(expert_map.shape)}")
    if expert_map.device != topk_ids.device:
        raise ValueError(f"{op}: expert_map: expected device {topk_ids.device} (the device of topk_ids), got "
                         f"{expert_map.device}")


def moe_route(gating_output, topk, block_size, renormalize=False, bias=None, scoring="softmax", n_group=1,
              topk_group=1, routed_scaling_factor=1.0, indices_dtype=torch.int32):
    """Fused router: grouped_topk (or topk_softmax for softmax without groups) then moe_align_block_size(ids, E).

    Identical results to the two calls, in fewer kernel launches.

    **Scoring defaults to softmax here**, as C++ ``MoeRouterConfig`` and vLLM's Python router function
    ``grouped_topk(..., scoring_func="softmax", ...)`` do
    (vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py), while :func:`grouped_topk` defaults to
    sigmoid (DeepSeek-V3 noaux_tc): a DeepSeek-V3 / R1 router through moe_route must pass ``scoring="sigmoid"``.

    Args:
        gating_output: [T, E] float32 / float16 / bfloat16 router logits, E <= 1024.
        topk, block_size: k as in :func:`grouped_topk`; the schedule's block_size in [1, 2^20] (num_experts = E).
        renormalize, bias, n_group, topk_group, routed_scaling_factor: as in :func:`grouped_topk`.
        scoring: "softmax" (the default) or "sigmoid".

    Returns:
        (topk_weights, topk_ids, sorted_token_ids, expert_ids, num_tokens_post_pad).
    """
    op = "moe_route"
    _check_indices_dtype(op, indices_dtype)
    T = _rows(op, "gating_output", gating_output)
    topk = _check_topk(op, topk, gating_output.shape[1])
    _check_groups(op, n_group, topk_group, renormalize, routed_scaling_factor)
    if not isinstance(scoring, str) or scoring not in _SCORING:
        raise ValueError(f"{op}: scoring: expected 'softmax' | 'sigmoid', got {scoring!r}")
    forward_only(op, gating_output=gating_output, bias=bias, optional=("bias",))
    dev = gating_output.device
    E = gating_output.shape[1]
    if E > _MAX_ROUTER_EXPERTS:  # the op's own check, before the schedule's size is measured with E
        raise ValueError(f"{op}: gating_output: expected E in [1, {_MAX_ROUTER_EXPERTS}], got {E} in "
                         f"{list(gating_output.shape)}")
    block_size = int_arg(op, "block_size", block_size, 1, _MAX_BLOCK_SIZE)
    n, blocks = _checked_align_sizes(op, "gating_output", T * topk, E, block_size, False)
    w = torch.empty((T, topk), dtype=torch.float32, device=dev)
    ids = torch.empty((T, topk), dtype=indices_dtype, device=dev)
    sorted_ids = torch.empty((n,), dtype=torch.int32, device=dev)
    expert_ids = torch.empty((blocks,), dtype=torch.int32, device=dev)
    total = torch.empty((1,), dtype=torch.int32, device=dev)
    with _k_named_topk(op):
        ops.moe_route.default(w, ids, sorted_ids, expert_ids, total, read_rows(gating_output), bias, scoring,
                              n_group, topk_group, renormalize, float(routed_scaling_factor), block_size)
    return w, ids, sorted_ids, expert_ids, total
