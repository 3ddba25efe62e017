"""Fake kernels, so that FakeTensor tracing (``torch.compile(fullgraph=True)``, ``torch.library.opcheck``) passes
through every op. Each op writes caller-given outputs and returns ``()``, so each fake checks only what the ops check
before any shape: that the tensors share one device, cpu or cuda (the C++ ops' rule, with their message); the
activations' functional overloads, which allocate their output, also check the input shape they size it from. A fake is
also the op's Meta kernel, which a call with a meta tensor reaches instead of the C++ op (FakeTensors report the device
they stand for, never meta): there the device check is the error naming the first meta tensor. Without it the call
would return outputs never written (torch >= 2.4) or torch's dispatcher error (older torch)."""

import torch

from . import _ops  # noqa: F401  (the ops must exist before their fakes are registered)

# Every op of bindings/torch/registration.cpp except version() and chunk_gated_delta_rule_intermediate_dtype() (no
# tensor: strings, never traced; gdn.py's _intermediate_dtype is its rule in Python).
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
    "rotary_embedding_backward",
    "mrope_backward",
    "recompute_w_u_fwd",
    "chunk_gated_delta_rule_fwd_h",
    "chunk_fwd_o",
    "chunk_gated_delta_rule",
    "chunk_gated_delta_rule_with_states",
    "fused_recurrent_gated_delta_rule",
    "fused_recurrent_gated_delta_rule_update",
    "fused_recurrent_gated_delta_rule.pool",
    "fused_sigmoid_gating_delta_rule_update",
    "check_errors",
    "clear_errors",
)


def _half_width(op):
    """The fake of op's functional overload: out [..., d] of input [..., 2 d]. It checks the shape it derives that
    from, with the op's messages, so that a traced call raises the op's ValueError (a rank-0 input was an IndexError
    here, an odd width traced to a wrong shape); its other checks happen when the op runs."""
    def fake(input, *args):
        if input.dim() == 0:
            raise ValueError(f"{op}: input: expected rank >= 1 [..., 2*d], got rank 0")
        two_d = input.shape[-1]
        if two_d < 2 or two_d % 2:
            shape = "[" + ", ".join(str(n) for n in input.shape) + "]"
            raise ValueError(f"{op}: input: expected an even last dim 2*d >= 2, got {two_d} in {shape}")
        return input.new_empty(input.shape[:-1] + (two_d // 2,))
    return fake


def _like_gate(gate, up, *args):
    return gate.new_empty(gate.shape)


# The functional overloads, which allocate their output.
FUNCTIONAL = {
    "silu_and_mul.functional": _half_width("silu_and_mul"),
    "gelu_and_mul.functional": _half_width("gelu_and_mul"),
    "gelu_tanh_and_mul.functional": _half_width("gelu_tanh_and_mul"),
    "silu_and_mul_split.functional": _like_gate,
    "gelu_and_mul_split.functional": _like_gate,
}


def _tensors(schema, values):
    """(name, tensor) of each tensor argument of a call (``values``: argument name -> value): inputs first, then the
    outputs it writes (``Tensor!``)."""
    inputs, outputs = [], []
    for a in schema.arguments:
        t = values.get(a.name)
        if isinstance(t, torch.Tensor):
            written = a.alias_info is not None and a.alias_info.is_write
            (outputs if written else inputs).append((a.name, t))
    return inputs + outputs


def _rope_names(values):
    """apply_rotary_pos_emb(_inplace)'s errors as its binding states them (bindings/torch/rope.cpp): with inverse, under
    apply_rotary_pos_emb_backward and the gradients' names."""
    if not values.get("inverse"):
        return "apply_rotary_pos_emb", {}
    return "apply_rotary_pos_emb_backward", {n: "grad_" + n for n in ("q", "k", "q_out", "k_out")}


# Ops whose binding names the op or its arguments otherwise than the schema: the argument values -> (op, renames).
_NAMING = {"apply_rotary_pos_emb": _rope_names, "apply_rotary_pos_emb_inplace": _rope_names}


def _off_device(tensors):
    """(argument, reference) for the first tensor off the call's device, or None. The call's device is that of the
    first tensor not on meta, the reference (its argument name and device); a meta tensor has no data for an op to
    read, so it is off that device, or, where every tensor is on meta (reference None), off the kinds ops run on."""
    real = [(arg, t.device) for arg, t in tensors if t.device.type != "meta"]
    reference = real[0] if real else None
    for arg, t in tensors:
        if reference is None or t.device != reference[1]:
            return arg, reference
    return None


def _fake(name, result=None):
    """The fake of op ``name`` ("op" or "op.overload"): every tensor on one device, not meta, else the ValueError the
    C++ ops raise ("<op>: <arg>: expected device D (the device of <first>), got E"); then ``result(*args)`` (the
    functional overloads' new output) or None."""
    op, _, overload = name.partition(".")
    schema = getattr(getattr(torch.ops.fuseops, op), overload or "default")._schema

    def fake(*args, **kwargs):
        values = dict(zip((a.name for a in schema.arguments), args))
        values.update(kwargs)
        tensors = _tensors(schema, values)
        off = _off_device(tensors)
        if off is not None:
            called, renames = _NAMING[op](values) if op in _NAMING else (op, {})
            arg, reference = off
            expected = ("device kind cpu or cuda" if reference is None else
                        f"device {reference[1]} (the device of {renames.get(reference[0], reference[0])})")
            raise ValueError(f"{called}: {renames.get(arg, arg)}: expected {expected}, got {values[arg].device}")
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
