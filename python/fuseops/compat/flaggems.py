"""FlagGems' gated activations, with FlagGems' signatures: new tensors, with autograd.

As ``flag_gems.silu_and_mul(A, B)``, ``flag_gems.silu_and_mul_out(A, B, out)`` and
``flag_gems.gelu_and_mul(x, y, approximate="none")`` (FlagGems ``src/flag_gems/fused/``): ``act(gate) * up`` on two
tensors of the same shape [..., d]. Unlike FlagGems, no broadcasting: gate and up must have the same shape
(ValueError otherwise). dtypes float32 / float16 / bfloat16; numerics as FlagGems (fp32, one rounding).
"""

from .. import activation as _activation
from .. import moe as _moe
from .._ops import ops as _ops


def silu_and_mul(A, B):
    """silu(A) * B; differentiable in A and B."""
    return _activation.silu_and_mul_split(A, B)


def silu_and_mul_out(A, B, out):
    """silu(A) * B written into ``out``; returns ``out``."""
    return _activation.silu_and_mul_split(A, B, out=out)


def gelu_and_mul(x, y, approximate="none"):
    """gelu(x, approximate) * y with approximate "none" (erf) or "tanh"; differentiable in x and y."""
    return _activation.gelu_and_mul_split(x, y, approximate)


def topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize=False):
    """As ``flag_gems.topk_softmax``: fills the three outputs (FlagGems adds 1e-8 to its denominators; we do not)."""
    _ops.topk_softmax.default(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize, None)


def moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False):
    """As ``flag_gems.moe_align_block_size``: returns (sorted_ids, expert_ids, num_tokens_post_pad)."""
    return _moe.moe_align_block_size(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids)
