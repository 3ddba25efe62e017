"""Fake kernels, so that FakeTensor tracing (``torch.compile(fullgraph=True)``, ``torch.library.opcheck``) passes
through every op. Each op writes caller-given outputs and returns ``()``, so each fake is a no-op."""

import torch

from . import _ops  # noqa: F401  (the ops must exist before their fakes are registered)

# Every op of bindings/torch/registration.cpp except version() (a string, never traced).
OPS = (
    "silu_and_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "silu_and_mul_split",
    "gelu_and_mul_split",
    "silu_and_mul_backward",
    "gelu_and_mul_backward",
    "silu_and_mul_masked",
    "gelu_and_mul_masked",
    "layer_norm_fwd",
    "chunk_local_cumsum",
    "chunk_scaled_dot_kkt_fwd",
    "solve_tril",
    "chunk_gated_delta_rule_fwd_kkt_solve",
    "topk_softmax",
    "grouped_topk",
    "moe_align_block_size",
    "moe_route",
    "rotary_embedding",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_inplace",
    "mrope",
    "recompute_w_u_fwd",
    "chunk_gated_delta_rule_fwd_h",
    "chunk_fwd_o",
    "chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "fused_recurrent_gated_delta_rule_update",
    "fused_sigmoid_gating_delta_rule_update",
    "check_errors",
    "clear_errors",
)


def _writes_outputs_only(*args, **kwargs):
    return None


def _half_width(input, *args):
    return input.new_empty(input.shape[:-1] + (input.shape[-1] // 2,))


def _like_gate(gate, up, *args):
    return gate.new_empty(gate.shape)


# The functional overloads, which allocate their output.
FUNCTIONAL = {
    "silu_and_mul.functional": _half_width,
    "gelu_and_mul.functional": _half_width,
    "gelu_tanh_and_mul.functional": _half_width,
    "silu_and_mul_split.functional": _like_gate,
    "gelu_and_mul_split.functional": _like_gate,
}


def _register():
    # torch >= 2.4: register_fake; 2.2 and 2.3: impl_abstract; older torch: eager use only.
    register = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
    if register is None:
        return False
    for name in OPS:
        register(f"fuseops::{name}")(_writes_outputs_only)
    for name, fake in FUNCTIONAL.items():
        register(f"fuseops::{name}")(fake)
    return True


registered = _register()
