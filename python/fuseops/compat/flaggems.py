"""FlagGems' gated activations and rotary embeddings, with FlagGems' signatures.

Rotary: ``apply_rotary_pos_emb`` and ``mrope`` as in ``src/flag_gems/fused/rotary_embedding.py`` and ``mrope.py``
(docs/ops/rope.md). Activations: new tensors, with autograd.

As ``flag_gems.silu_and_mul(A, B)``, ``flag_gems.silu_and_mul_out(A, B, out)`` and
``flag_gems.gelu_and_mul(x, y, approximate="none")`` (FlagGems ``src/flag_gems/fused/``): ``act(gate) * up`` on two
tensors of the same shape [..., d]. Unlike FlagGems, no broadcasting: gate and up must have the same shape
(ValueError otherwise). dtypes float32 / float16 / bfloat16; numerics as FlagGems (fp32, one rounding).
"""

from .. import activation as _activation
from .. import moe as _moe
from .._args import bool_arg, forward_only, int_arg, named_as, written_arg
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
        _ops.topk_softmax.default(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize, None)


def moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False):
    """As ``flag_gems.moe_align_block_size``: returns (sorted_ids, expert_ids, num_tokens_post_pad). With
    ``expert_map`` every id is counted under its global id and the blocks' ``expert_ids`` are mapped afterwards, as
    FlagGems does (``fuseops.moe_align_block_size(..., ignore_invalid_experts=False)``); blocks past the end stay -1
    (FlagGems: ``expert_map[-1]``)."""
    return _moe.moe_align_block_size(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids,
                                     ignore_invalid_experts=False)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, rotary_interleaved=False, inplace=False):
    """As ``flag_gems.fused.apply_rotary_pos_emb``: returns (q_embed, k_embed); differentiable unless inplace."""
    return _rope.apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved, inplace)


def mrope(query, key, cos_sin_cache, positions, section_t, section_h, section_w, head_size, rotary_dim,
          is_interleaved=False, is_interleaved_glm=False, is_neox_style=True, axis_map=None):
    """As ``flag_gems.fused.mrope.mrope``, in place on query and key; returns (query, key) as FlagGems does.
    ``axis_map`` must be None: the GLM map is derived from the sections (docs/ops/rope.md)."""
    if axis_map is not None:
        raise ValueError("mrope: axis_map: expected None (the interleaved_glm map is derived from the sections)")
    is_interleaved = bool_arg("mrope", "is_interleaved", is_interleaved)
    is_interleaved_glm = bool_arg("mrope", "is_interleaved_glm", is_interleaved_glm)
    if is_interleaved and is_interleaved_glm:
        raise ValueError("mrope: is_interleaved_glm: expected False when is_interleaved is True, got True")
    layout = "interleaved_glm" if is_interleaved_glm else "interleaved" if is_interleaved else "chunked"
    section = [int_arg("mrope", name, s) for name, s in
               (("section_t", section_t), ("section_h", section_h), ("section_w", section_w))]
    # the op's checks of the sections (their sum against rotary_dim) name them as mrope_section
    with named_as("mrope", "mrope", {"mrope_section": "section_t, section_h, section_w", "is_neox": "is_neox_style"}):
        return _rope.mrope(query, key, cos_sin_cache, positions, section, head_size, rotary_dim, is_neox_style,
                           layout)
