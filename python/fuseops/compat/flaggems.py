"""FlagGems' gated activations and rotary embeddings, with FlagGems' signatures.

Rotary: ``apply_rotary_pos_emb`` and ``mrope`` as in ``src/flag_gems/fused/rotary_embedding.py`` and ``mrope.py``
(docs/ops/rope.md). Activations: new tensors, with autograd.

As ``flag_gems.silu_and_mul(A, B)``, ``flag_gems.silu_and_mul_out(A, B, out)`` and
``flag_gems.gelu_and_mul(x, y, approximate="none")`` (FlagGems ``src/flag_gems/fused/``): ``act(gate) * up`` on two
tensors of the same shape [..., d]. Unlike FlagGems, no broadcasting and no dtype promotion: gate and up must have
the same shape and the same dtype (ValueError otherwise; FlagGems' pointwise_dynamic promotes mixed dtypes: cast
first). dtypes float32 / float16 / bfloat16; numerics as FlagGems (fp32, one rounding).
"""

import operator

import torch

from .. import activation as _activation
from .. import moe as _moe
from .._args import bool_arg, forward_only, int_arg, is_bool, named_as, shown as _shown, tensor_arg, written_arg
from .._ops import ops as _ops
from .. import rope as _rope

__all__ = [
    "silu_and_mul",
    "silu_and_mul_out",
    "gelu_and_mul",
    "topk_softmax",
    "moe_align_block_size",
    "apply_rotary_pos_emb",
    "mrope",
]


def silu_and_mul(A, B):
    """silu(A) * B; differentiable in A and B."""
    with named_as("silu_and_mul", "silu_and_mul_split", {"gate": "A", "up": "B"}):
        return _activation.silu_and_mul_split(A, B)


def silu_and_mul_out(A, B, out):
    """silu(A) * B written into ``out``; returns ``out``."""
    with named_as("silu_and_mul_out", "silu_and_mul_split", {"gate": "A", "up": "B"}):
        return _activation.silu_and_mul_split(A, B, out=out)


def gelu_and_mul(x, y, approximate="none"):
    """gelu(x, approximate) * y with approximate "none" (erf) or "tanh"; differentiable in x and y."""
    with named_as("gelu_and_mul", "gelu_and_mul_split", {"gate": "x", "up": "y"}):
        return _activation.gelu_and_mul_split(x, y, approximate)


def topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize=False):
    """As ``flag_gems.topk_softmax``: fills the three outputs (FlagGems adds 1e-8 to its denominators; we do not)."""
    renormalize = bool_arg("topk_softmax", "renormalize", renormalize)
    forward_only("topk_softmax", gating_output=gating_output)
    for name, t in (("topk_weights", topk_weights), ("topk_indices", topk_indices),
                    ("token_expert_indices", token_expert_indices)):
        written_arg("topk_softmax", name, t, optional=False)
    with named_as("topk_softmax", "topk_softmax", {"topk_ids": "topk_indices"}):
        _ops.topk_softmax.default(topk_weights, topk_indices, token_expert_indices, _moe.read_rows(gating_output),
                                  renormalize, None)


def moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False):
    """As ``flag_gems.moe_align_block_size``: returns (sorted_ids, expert_ids, num_tokens_post_pad), of the lengths
    FlagGems allocates: numel + num_experts * (block_size - 1) (rounded up to block_size with ``pad_sorted_ids``) and
    that over block_size, rounded up, without the cap at numel * block_size that vLLM's wrapper (and
    :func:`fuseops.moe_align_block_size`) applies where numel < num_experts. With ``expert_map`` every id is counted
    under its global id and the blocks' ``expert_ids`` are mapped afterwards, as FlagGems does
    (``fuseops.moe_align_block_size(..., ignore_invalid_experts=False)``).

    Blocks past the end are -1: the padding of the FlagGems version we benchmark against (flagos-ai/FlagGems as
    fetched for ``.baselines``, ed2508bcb in bench/results/h200/activation.md), whose Triton kernels store -1 there
    in an ``expert_ids`` allocated with ``torch.empty``. With ``expert_map`` that version maps them too, to
    ``expert_map[-1]`` (the map's last entry); they stay -1 here. Older FlagGems versions left 0 there (an
    ``expert_ids`` from ``torch.zeros`` that the kernels did not fill, e.g. FlagOpen/FlagGems 4b1bad6; with a map,
    ``expert_map[0]``)."""
    return _moe._aligned("moe_align_block_size", topk_ids, block_size, num_experts, expert_map, pad_sorted_ids,
                         False, False)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, rotary_interleaved=False, inplace=False):
    """As ``flag_gems.fused.apply_rotary_pos_emb``: returns (q_embed, k_embed); differentiable unless inplace."""
    return _rope.apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved, inplace)


def mrope(query, key, cos_sin_cache, positions, section_t, section_h, section_w, head_size, rotary_dim,
          is_interleaved=False, is_interleaved_glm=False, is_neox_style=True, axis_map=None):
    """As ``flag_gems.fused.mrope.mrope``, in place on query and key; returns (query, key) as FlagGems does.

    ``is_interleaved_glm`` wins over ``is_interleaved``, as in FlagGems. The GLM map is derived from the sections
    (docs/ops/rope.md); ``axis_map`` ([rotary_dim / 2] ints, the per-pair axis FlagGems reads with
    ``is_interleaved_glm``) may be given and must equal that map (a ValueError otherwise: other maps are not
    supported). It is compared on the host: a CUDA ``axis_map`` costs a synchronisation. Without
    ``is_interleaved_glm`` FlagGems does not read ``axis_map``; here it must be None."""
    is_interleaved = bool_arg("mrope", "is_interleaved", is_interleaved)
    is_interleaved_glm = bool_arg("mrope", "is_interleaved_glm", is_interleaved_glm)
    layout = "interleaved_glm" if is_interleaved_glm else "interleaved" if is_interleaved else "chunked"
    section = [int_arg("mrope", name, s) for name, s in
               (("section_t", section_t), ("section_h", section_h), ("section_w", section_w))]
    if axis_map is not None:
        if not is_interleaved_glm:
            raise ValueError("mrope: axis_map: expected None without is_interleaved_glm=True (only the GLM layout "
                             f"reads a map), got {_shown(axis_map)}")
        _check_glm_axis_map(axis_map, section, int_arg("mrope", "rotary_dim", rotary_dim), cos_sin_cache)
    # the op's checks of the sections (their sum against rotary_dim) name them as mrope_section
    with named_as("mrope", "mrope", {"mrope_section": "section_t, section_h, section_w", "is_neox": "is_neox_style"}):
        return _rope.mrope(query, key, cos_sin_cache, positions, section, head_size, rotary_dim, is_neox_style,
                           layout)


def _glm_axis_map(section):
    """The interleaved_glm axis of each rotary pair (docs/ops/rope.md): slot j % 3 names the preferred axis; once
    that axis's quota (its section) is used up, the next axis (cyclically) with quota left."""
    left, axes = list(section), []
    for j in range(sum(section)):
        axis = next((a for a in ((j + i) % 3 for i in range(3)) if left[a] > 0), None)
        if axis is None:
            break
        left[axis] -= 1
        axes.append(axis)
    return axes


def _check_glm_axis_map(axis_map, section, rotary_dim, cos_sin_cache):
    """axis_map given with the GLM layout: a 1-D sequence of ints (a tensor, a numpy array, a list or tuple) equal to
    the map the sections give. Compared only where the sections and rotary_dim are what the op takes (it refuses them
    by name otherwise), so that a wrong rotary_dim is not blamed on axis_map."""
    pairs = rotary_dim // 2
    if isinstance(axis_map, torch.Tensor):
        tensor_arg("mrope", "axis_map", axis_map)
        ok = (axis_map.dim() == 1 and axis_map.dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
              and axis_map.device.type != "meta")  # (a meta tensor has no values to compare)
    elif type(axis_map).__name__ == "ndarray" and type(axis_map).__module__ == "numpy":
        ok = axis_map.ndim == 1 and axis_map.dtype.kind in "iu"
    else:
        ok = isinstance(axis_map, (list, tuple)) and all(not is_bool(a) and _is_index(a) for a in axis_map)
    if not ok:
        raise ValueError(f"mrope: axis_map: expected None or a 1-D sequence of ints (a tensor, numpy array, list or "
                         f"tuple), got {_shown(axis_map)}")
    width = cos_sin_cache.shape[-1] if isinstance(cos_sin_cache, torch.Tensor) and cos_sin_cache.dim() == 2 else None
    if min(section) < 0 or sum(section) != pairs or rotary_dim != 2 * pairs or width != rotary_dim:
        return
    if len(axis_map) != pairs:
        raise ValueError(f"mrope: axis_map: expected [rotary_dim / 2] = [{pairs}] entries (the GLM map of the "
                         f"sections {section}), got {len(axis_map)}")
    got = axis_map.tolist() if hasattr(axis_map, "tolist") else [int(a) for a in axis_map]
    want = _glm_axis_map(section)
    if got != want:
        j = next(j for j in range(pairs) if got[j] != want[j])
        raise ValueError(f"mrope: axis_map: expected the GLM map of the sections {section} (other maps are not "
                         f"supported): pair {j} takes axis {want[j]}, got {got[j]}")


def _is_index(a):
    try:
        operator.index(a)
        return True
    except TypeError:
        return False
