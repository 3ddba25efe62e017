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
from .rope import (
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_backward,
    mrope,
    mrope_backward,
    rotary_embedding,
    rotary_embedding_backward,
)
from .gdn import (
    chunk_fwd_o,
    chunk_gated_delta_rule,
    chunk_gated_delta_rule_fwd_h,
    chunk_gated_delta_rule_fwd_kkt_solve,
    chunk_gated_delta_rule_with_states,
    chunk_local_cumsum,
    chunk_scaled_dot_kkt_fwd,
    fused_recurrent_gated_delta_rule,
    fused_sigmoid_gating_delta_rule_update,
    recompute_w_u_fwd,
    solve_tril,
)
from .moe import grouped_topk, moe_align_block_size, moe_align_sizes, moe_route, topk_softmax
from .norm import layer_norm_fwd, layernorm_fn, rmsnorm_fn

__version__ = ops.version()

__all__ = [
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_backward",
    "mrope",
    "mrope_backward",
    "rotary_embedding",
    "rotary_embedding_backward",
    "check_errors",
    "chunk_fwd_o",
    "chunk_gated_delta_rule",
    "chunk_gated_delta_rule_fwd_h",
    "chunk_gated_delta_rule_fwd_kkt_solve",
    "chunk_gated_delta_rule_with_states",
    "chunk_local_cumsum",
    "chunk_scaled_dot_kkt_fwd",
    "clear_errors",
    "fused_recurrent_gated_delta_rule",
    "fused_sigmoid_gating_delta_rule_update",
    "gelu_and_mul",
    "gelu_and_mul_backward",
    "gelu_and_mul_masked",
    "gelu_and_mul_split",
    "gelu_tanh_and_mul",
    "grouped_topk",
    "layer_norm_fwd",
    "layernorm_fn",
    "library_path",
    "moe_align_block_size",
    "moe_align_sizes",
    "moe_route",
    "ops",
    "recompute_w_u_fwd",
    "rmsnorm_fn",
    "silu_and_mul",
    "silu_and_mul_backward",
    "silu_and_mul_masked",
    "silu_and_mul_split",
    "topk_softmax",
    "solve_tril",
]
