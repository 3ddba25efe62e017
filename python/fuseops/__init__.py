"""fuseops: fused operators for LLM training and inference, for PyTorch.

The ops are ``torch.ops.fuseops.*`` (bindings/torch/registration.cpp): they write caller-given outputs and return
nothing. This package wraps them in functions that allocate their outputs, support autograd and trace under
``torch.compile(fullgraph=True)``::

    import fuseops
    y = fuseops.silu_and_mul(x)                          # x: [..., 2*d] -> y: [..., d]
    y = fuseops.gelu_and_mul(x, approximate="tanh")

Other projects' signatures: :mod:`fuseops.compat.vllm` (``silu_and_mul(out, input)``) and
:mod:`fuseops.compat.flaggems` (``silu_and_mul(A, B)``). Benchmark: ``python -m fuseops.bench``.
"""

# _ops loads the extension (which defines the ops) before _fake registers their fake kernels.
from ._ops import library_path, ops  # isort: skip
from . import _fake  # noqa: F401  (fake kernels for torch.compile)
from .activation import (
    gelu_and_mul,
    gelu_and_mul_backward,
    gelu_and_mul_masked,
    gelu_and_mul_split,
    gelu_tanh_and_mul,
    silu_and_mul,
    silu_and_mul_backward,
    silu_and_mul_masked,
    silu_and_mul_split,
)
from .errors import check_errors, clear_errors
from .gdn import (
    chunk_gated_delta_rule_fwd_kkt_solve,
    chunk_local_cumsum,
    chunk_scaled_dot_kkt_fwd,
    solve_tril,
)
from .norm import layer_norm_fwd, layernorm_fn, rmsnorm_fn

__version__ = ops.version()

__all__ = [
    "check_errors",
    "chunk_gated_delta_rule_fwd_kkt_solve",
    "chunk_local_cumsum",
    "chunk_scaled_dot_kkt_fwd",
    "solve_tril",
    "clear_errors",
    "gelu_and_mul",
    "gelu_and_mul_backward",
    "gelu_and_mul_masked",
    "gelu_and_mul_split",
    "gelu_tanh_and_mul",
    "layer_norm_fwd",
    "layernorm_fn",
    "library_path",
    "ops",
    "rmsnorm_fn",
    "silu_and_mul",
    "silu_and_mul_backward",
    "silu_and_mul_masked",
    "silu_and_mul_split",
]
