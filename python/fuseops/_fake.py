"""Fake kernels, so that FakeTensor tracing (``torch.compile(fullgraph=True)``, ``torch.library.opcheck``) passes
through every op. Each op writes caller-given outputs and returns ``()``, so each fake checks only what the ops check
before any shape: that the tensors share one device (the C++ ops' rule, with their message). A fake is also the op's
Meta kernel, which a call that mixes a meta tensor with real ones reaches instead of the C++ op: there the device
check is the error naming the argument (without it the call would return outputs never written)."""

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


def _tensors(schema, args, kwargs):
    """(name, tensor) of each tensor argument of a call: inputs first, then the outputs it writes (``Tensor!``)."""
    values = dict(zip((a.name for a in schema.arguments), args))
    values.update(kwargs)
    inputs, outputs = [], []
    for a in schema.arguments:
        t = values.get(a.name)
        if isinstance(t, torch.Tensor):
            written = a.alias_info is not None and a.alias_info.is_write
            (outputs if written else inputs).append((a.name, t))
    return inputs + outputs


def _fake(name, result=None):
    """The fake of op ``name`` ("op" or "op.overload"): every tensor on the first one's device, else the ValueError the
    C++ ops raise ("<op>: <arg>: expected device D (the device of <first>), got E"); then ``result(*args)`` (the
    functional overloads' new output) or None."""
    op, _, overload = name.partition(".")
    schema = getattr(getattr(torch.ops.fuseops, op), overload or "default")._schema

    def fake(*args, **kwargs):
        first = None
        for arg, t in _tensors(schema, args, kwargs):
            if first is None:
                first = (arg, t.device)
            elif t.device != first[1]:
                raise ValueError(f"{op}: {arg}: expected device {first[1]} (the device of {first[0]}), got {t.device}")
        return result(*args) if result is not None else None

    return fake


def _register():
    fakes = {name: _fake(name) for name in OPS}
    fakes.update({name: _fake(name, result) for name, result in FUNCTIONAL.items()})
    # torch >= 2.4: register_fake; 2.2 and 2.3: impl_abstract (each also the op's Meta kernel).
    register = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
    if register is not None:
        for name, fake in fakes.items():
            register(f"fuseops::{name}")(fake)
        return True
    # Older torch runs the ops eagerly only (no tracing); a call mixing meta and real tensors still gets the device
    # error rather than torch's "could not run with arguments from the 'AutogradMeta' backend".
    global _meta_library
    _meta_library = torch.library.Library("fuseops", "IMPL")
    for name, fake in fakes.items():
        for key in ("Meta", "AutogradMeta"):
            _meta_library.impl(name, fake, key)
    return False


_meta_library = None
registered = _register()
