"""vLLM's activation and rotary-embedding ops, with vLLM's argument order: they write ``out`` and return None.

As ``torch.ops._C.silu_and_mul(out, input)`` and friends (vLLM ``csrc/activation_kernels.cu``), which vLLM's
``SiluAndMul.forward_cuda`` calls with an ``out`` it allocated. Not differentiable (vLLM's are not either). Shapes:
out [..., d], input [..., 2*d]; dtypes float32 / float16 / bfloat16. Numerics: one rounding at the store, so results
may differ from vLLM's (two roundings) by 1 ulp (docs/ops/activation.md). Errors: ValueError naming the argument.
"""

from .._ops import ops


def silu_and_mul(out, input):
    """out = silu(input[..., :d]) * input[..., d:]."""
    ops.silu_and_mul.default(out, input)


def gelu_and_mul(out, input):
    """out = gelu(input[..., :d]) * input[..., d:], erf form (approximate="none")."""
    ops.gelu_and_mul.default(out, input, "none")


def gelu_tanh_and_mul(out, input):
    """out = gelu(input[..., :d]) * input[..., d:], tanh approximation."""
    ops.gelu_tanh_and_mul.default(out, input)


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    """In place on query and key (key may be None), as ``torch.ops._C.rotary_embedding`` (docs/ops/rope.md)."""
    ops.rotary_embedding.default(positions, query, key, head_size, cos_sin_cache, is_neox, False)
