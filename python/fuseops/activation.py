"""Gated activations, SwiGLU and GeGLU, forward and backward (docs/ops/activation.md).

Fused form, as vLLM and FlashInfer: the first half of the last dim is the gate (activated), the second half is up:

    out[..., i] = act(input[..., i]) * input[..., d + i]        input: [..., 2*d]   out: [..., d]

Split form, as FlagGems: ``out = act(gate) * up`` with gate, up, out: [..., d]. The activations:

    silu(g) = g / (1 + exp(-g))
    gelu(g) = 0.5 g (1 + erf(g / sqrt(2)))                        approximate="none"
    gelu(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))     approximate="tanh"

Rules for every function here:

- dtypes: torch.float32, torch.float16 or torch.bfloat16; every tensor of one call has the same dtype.
- shapes: any leading dims, flattened into rows that must be expressible with one row stride; the innermost stride
  must be 1 (rows may be further apart, e.g. a view into a wider fused buffer). Zero rows are valid.
- devices: CPU or one CUDA device. CUDA work runs on the current stream, without host synchronisation, so it can be
  captured in a CUDA graph.
- outputs: allocated unless ``out=`` (keyword-only) is given; an ``out`` must not overlap an input.
- autograd: the forward functions are differentiable (backward through the fused backward op, not twice
  differentiable); ``out=`` is not allowed when an input requires grad.
- numerics: the activation and the product are computed in fp32 and rounded once, at the store (FlashInfer's and
  FlagGems' convention); PyTorch eager ``F.silu(g) * u`` rounds twice and may differ by 1 ulp.
- errors: ValueError naming the argument (dtype, shape, odd last dim, overlapping out, a positional ``out``, ...);
  RuntimeError when the build has no CUDA for a CUDA tensor or a launch fails.
"""

import torch

from ._args import dense, forward_only, not_twice_differentiable, tensor_arg, written_arg
from ._ops import ops

_APPROXIMATE = ("none", "tanh")


def _vllm_hint(vllm_name):
    return f"; vLLM's order {vllm_name}(out, input) is fuseops.compat.vllm.{vllm_name}" if vllm_name else ""


def _reject_positional(op, extra, signature, vllm_name=None):
    hint = _vllm_hint(vllm_name)
    raise ValueError(
        f"{op}: out: expected a keyword argument (out=...), got {len(extra)} extra positional argument(s); "
        f"the signature is {op}{signature}{hint}"
    )


def _check_approximate(op, approximate, vllm_name=None, outputs="out"):
    """approximate by name; a tensor in its place is an output passed positionally (`outputs`: the keyword-only
    outputs of op, e.g. "dgate, dup" for the backward)."""
    if isinstance(approximate, str) and approximate in _APPROXIMATE:
        return
    if isinstance(approximate, torch.Tensor):
        keywords = ", ".join(f"{name}=..." for name in outputs.split(", "))
        raise ValueError(
            f'{op}: approximate: expected "none" | "tanh", got a Tensor; {outputs} '
            f'{"is" if "," not in outputs else "are"} keyword-only ({keywords})' + _vllm_hint(vllm_name)
        )
    raise ValueError(f'{op}: approximate: expected "none" | "tanh", got {approximate!r}')


def _no_out_with_grad(op, out):
    if out is not None:
        raise ValueError(f"{op}: out: out= is not differentiable, but an input requires grad")


def _check_out(op, out):
    written_arg(op, "out", out)


def _fused_out(op, input):
    if input.dim() == 0:
        raise ValueError(f"{op}: input: expected rank >= 1 [..., 2*d], got rank 0")
    return input.new_empty(input.shape[:-1] + (input.shape[-1] // 2,))


# The op overloads, looked up once (a lookup per call is measurable at decode sizes).
_silu_and_mul = ops.silu_and_mul.default
_gelu_and_mul = ops.gelu_and_mul.default
_gelu_tanh_and_mul = ops.gelu_tanh_and_mul.default
_silu_and_mul_split = ops.silu_and_mul_split.default
_gelu_and_mul_split = ops.gelu_and_mul_split.default
_silu_and_mul_backward = ops.silu_and_mul_backward.default
_gelu_and_mul_backward = ops.gelu_and_mul_backward.default
_silu_and_mul_fn = ops.silu_and_mul.functional
_gelu_and_mul_fn = ops.gelu_and_mul.functional
_gelu_tanh_and_mul_fn = ops.gelu_tanh_and_mul.functional
_silu_and_mul_split_fn = ops.silu_and_mul_split.functional
_gelu_and_mul_split_fn = ops.gelu_and_mul_split.functional


def _fused_forward(op, out, input, approximate):
    if approximate is None:
        _silu_and_mul(out, input)
    elif op == "gelu_tanh_and_mul":
        _gelu_tanh_and_mul(out, input)
    else:
        _gelu_and_mul(out, input, approximate)


def _split_forward(out, gate, up, approximate):
    if approximate is None:
        _silu_and_mul_split(out, gate, up)
    else:
        _gelu_and_mul_split(out, gate, up, approximate)


def _backward(dgate, dup, dout, gate, up, approximate):
    if approximate is None:
        _silu_and_mul_backward(dgate, dup, dout, gate, up)
    else:
        _gelu_and_mul_backward(dgate, dup, dout, gate, up, approximate)


class _FusedActAndMul(torch.autograd.Function):
    """input [..., 2d] -> act(input[..., :d]) * input[..., d:]; approximate None is silu, else gelu's."""

    @staticmethod
    def forward(ctx, input, approximate, op):
        out = _fused_out(op, input)
        _fused_forward(op, out, input, approximate)
        ctx.save_for_backward(input)
        ctx.approximate = approximate
        ctx.op = op
        return out

    @staticmethod
    def backward(ctx, dout):
        (input,) = ctx.saved_tensors
        d = input.shape[-1] // 2
        with torch.no_grad():
            # One [..., 2d] buffer; its halves are dgate and dup (they do not overlap, as the op requires).
            grad = torch.empty(input.shape, dtype=input.dtype, device=input.device)
            _backward(grad[..., :d], grad[..., d:], dense(dout), input[..., :d], input[..., d:], ctx.approximate)
        # the backward ops have no backward: double backward raises instead of going wrong
        return not_twice_differentiable(ctx.op, (grad, None, None), dout, input)


class _SplitActAndMul(torch.autograd.Function):
    """act(gate) * up; approximate None is silu, else gelu's."""

    @staticmethod
    def forward(ctx, gate, up, approximate, op):
        out = gate.new_empty(gate.shape)
        _split_forward(out, gate, up, approximate)
        ctx.save_for_backward(gate, up)
        ctx.approximate = approximate
        ctx.op = op
        return out

    @staticmethod
    def backward(ctx, dout):
        gate, up = ctx.saved_tensors
        with torch.no_grad():
            dc = dense(dout)
            dgate = dc.new_empty(dc.shape)
            dup = dc.new_empty(dc.shape)
            _backward(dgate, dup, dc, gate, up, ctx.approximate)
        # dgate = dout up act'(gate) reads all three; dup = dout act(gate) does not read up
        return not_twice_differentiable(ctx.op, (dgate, dup, None, None), dout, gate, up,
                                        depends=((dout, gate, up), (dout, gate), (), ()))


def _fused(op, input, approximate, out):
    tensor_arg(op, "input", input)
    if input.requires_grad and torch.is_grad_enabled():
        _no_out_with_grad(op, out)
        return _FusedActAndMul.apply(input, approximate, op)
    _check_out(op, out)
    if out is None:
        if approximate is None:
            return _silu_and_mul_fn(input)
        if op == "gelu_tanh_and_mul":
            return _gelu_tanh_and_mul_fn(input)
        return _gelu_and_mul_fn(input, approximate)
    _fused_forward(op, out, input, approximate)
    return out


def _split(op, gate, up, approximate, out):
    tensor_arg(op, "gate", gate)
    tensor_arg(op, "up", up)
    if (gate.requires_grad or up.requires_grad) and torch.is_grad_enabled():
        _no_out_with_grad(op, out)
        return _SplitActAndMul.apply(gate, up, approximate, op)
    _check_out(op, out)
    if out is None:
        return _silu_and_mul_split_fn(gate, up) if approximate is None else _gelu_and_mul_split_fn(gate, up, approximate)
    _split_forward(out, gate, up, approximate)
    return out


def silu_and_mul(input, *args, out=None):
    """SwiGLU, fused form: ``silu(input[..., :d]) * input[..., d:]``.

    As vLLM / FlashInfer ``silu_and_mul`` (FlashInfer's signature ``silu_and_mul(input, out=None)``; vLLM's
    ``silu_and_mul(out, input)`` is :func:`fuseops.compat.vllm.silu_and_mul`).

    Args:
        input: [..., 2*d], float32 / float16 / bfloat16, last dim even and >= 2.
        out: optional [..., d], same dtype and device (keyword-only).
    Returns:
        out: [..., d].
    Raises:
        ValueError: naming the argument: dtype, odd last dim, shapes, devices, strides, overlapping ``out``, an
            ``out`` passed positionally.
    """
    if args:
        _reject_positional("silu_and_mul", args, "(input, *, out=None)", "silu_and_mul")
    return _fused("silu_and_mul", input, None, out)


def gelu_and_mul(input, approximate="none", *, out=None):
    """GeGLU, fused form: ``gelu(input[..., :d], approximate) * input[..., d:]``.

    As vLLM ``gelu_and_mul`` (approximate="none") / ``gelu_tanh_and_mul`` (approximate="tanh") and FlashInfer's.

    Args:
        input: [..., 2*d], float32 / float16 / bfloat16, last dim even and >= 2.
        approximate: "none" (erf) or "tanh", as ``torch.nn.functional.gelu``.
        out: optional [..., d], same dtype and device (keyword-only).
    Returns:
        out: [..., d].
    Raises:
        ValueError: as :func:`silu_and_mul`, and for an ``approximate`` other than "none" / "tanh".
    """
    _check_approximate("gelu_and_mul", approximate, "gelu_and_mul")
    return _fused("gelu_and_mul", input, approximate, out)


def gelu_tanh_and_mul(input, *args, out=None):
    """GeGLU with the tanh approximation, fused form: ``gelu_and_mul(input, "tanh")``.

    As vLLM / FlashInfer ``gelu_tanh_and_mul``. Shapes, dtypes and errors as :func:`gelu_and_mul`.
    """
    if args:
        _reject_positional("gelu_tanh_and_mul", args, "(input, *, out=None)", "gelu_tanh_and_mul")
    return _fused("gelu_tanh_and_mul", input, "tanh", out)


def silu_and_mul_split(gate, up, *args, out=None):
    """SwiGLU, split form: ``silu(gate) * up``.

    As FlagGems ``silu_and_mul(A, B)`` (also :func:`fuseops.compat.flaggems.silu_and_mul`), without broadcasting.

    Args:
        gate, up: [..., d], float32 / float16 / bfloat16, the same shape.
        out: optional [..., d], same dtype and device (keyword-only).
    Returns:
        out: [..., d].
    Raises:
        ValueError: naming the argument: dtype, shapes, devices, strides, overlapping ``out``, a positional ``out``.
    """
    if args:
        _reject_positional("silu_and_mul_split", args, "(gate, up, *, out=None)")
    return _split("silu_and_mul_split", gate, up, None, out)


def gelu_and_mul_split(gate, up, approximate="none", *, out=None):
    """GeGLU, split form: ``gelu(gate, approximate) * up``.

    As FlagGems ``gelu_and_mul(x, y, approximate)`` (also :func:`fuseops.compat.flaggems.gelu_and_mul`), without
    broadcasting. Shapes, dtypes and errors as :func:`silu_and_mul_split`; ``approximate`` is "none" or "tanh".
    """
    _check_approximate("gelu_and_mul_split", approximate)
    return _split("gelu_and_mul_split", gate, up, approximate, out)


def _backward_call(op, dout, gate, up, approximate, dgate, dup):
    for name, t in (("dout", dout), ("gate", gate), ("up", up)):
        tensor_arg(op, name, t)
    tensor_arg(op, "dgate", dgate, optional=True)
    tensor_arg(op, "dup", dup, optional=True)
    # no derivative of its own: inputs that require grad are refused (their graph would be dropped), and outputs that
    # do (the op would write into a tensor autograd tracks)
    forward_only(op, dout=dout, gate=gate, up=up)
    written_arg(op, "dgate", dgate)
    written_arg(op, "dup", dup)
    if dgate is None:
        dgate = dout.new_empty(dout.shape)
    if dup is None:
        dup = dout.new_empty(dout.shape)
    _backward(dgate, dup, dout, gate, up, approximate)
    return dgate, dup


def silu_and_mul_backward(dout, gate, up, *args, dgate=None, dup=None):
    """Backward of ``out = silu(gate) * up``: ``dgate = dout * up * silu'(gate)``, ``dup = dout * silu(gate)``.

    As FlagGems / Liger's SwiGLU backward, except that the gradients go to new (or given) tensors and never overwrite
    gate and up.

    Args:
        dout, gate, up: [..., d], float32 / float16 / bfloat16, the same shape.
        dgate, dup: optional outputs [..., d] (keyword-only); they must not overlap the inputs or each other (two
            halves of one [..., 2d] buffer are fine).
    Returns:
        (dgate, dup).
    Raises:
        ValueError: naming the argument, as :func:`silu_and_mul_split`.
    """
    if args:
        raise ValueError(
            "silu_and_mul_backward: dgate: expected keyword arguments (dgate=..., dup=...), got "
            f"{len(args)} extra positional argument(s); the signature is "
            "silu_and_mul_backward(dout, gate, up, *, dgate=None, dup=None)"
        )
    return _backward_call("silu_and_mul_backward", dout, gate, up, None, dgate, dup)


def gelu_and_mul_backward(dout, gate, up, approximate="none", *, dgate=None, dup=None):
    """Backward of ``out = gelu(gate, approximate) * up``: ``dgate = dout * up * gelu'(gate)``,
    ``dup = dout * gelu(gate)``.

    As FlagGems (erf form, approximate="none") and Liger / FlagGems (tanh form). Shapes, dtypes and errors as
    :func:`silu_and_mul_backward`; ``approximate`` is "none" or "tanh".
    """
    _check_approximate("gelu_and_mul_backward", approximate, outputs="dgate, dup")
    return _backward_call("gelu_and_mul_backward", dout, gate, up, approximate, dgate, dup)


# Masked expert-major forms (MoE, DeepEP low-latency / DeepGEMM masked layout).
_silu_and_mul_masked = ops.silu_and_mul_masked.default
_gelu_and_mul_masked = ops.gelu_and_mul_masked.default


def _masked(op, input, masked_m, approximate, out):
    tensor_arg(op, "input", input)
    tensor_arg(op, "masked_m", masked_m)
    if input.dim() != 3:
        raise ValueError(f"{op}: input: expected rank 3 [E, T_max, 2*d], got {list(input.shape)}")
    if input.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{op}: input: requires grad, but the masked form is forward only (its rows past masked_m "
                           "are undefined); call it under torch.no_grad() or detach input")
    if out is None:
        out = input.new_empty(input.shape[:-1] + (input.shape[-1] // 2,))
    else:
        _check_out(op, out)
    if approximate is None:
        _silu_and_mul_masked(out, input, masked_m)
    else:
        _gelu_and_mul_masked(out, input, masked_m, approximate)
    return out


def silu_and_mul_masked(input, masked_m, *args, out=None):
    """SwiGLU on the valid rows of an expert-major buffer: for each expert e and row r < min(masked_m[e], T_max),
    ``out[e, r] = silu(input[e, r, :d]) * input[e, r, d:]``.

    The semantics of SGLang's ``silu_and_mul_masked_post_quant_fwd`` and vLLM's ``masked_moe_activation`` without
    the fp8 quantisation (docs/ops/activation.md, "Masked expert-major form"): rows past masked_m[e] are neither read
    nor written, so in an allocated ``out`` they are uninitialised; masked_m[e] > T_max is treated as T_max (and
    masked_m[e] < 0 as 0) and recorded for :func:`fuseops.check_errors`; nothing is synchronised.

    Args:
        input: [E, T_max, 2*d], float32 / float16 / bfloat16.
        masked_m: [E] int32 / int64 on input's device.
        out: optional [E, T_max, d] (keyword-only).
    Returns:
        out: [E, T_max, d].
    Raises:
        ValueError: naming the argument (also for an ``out`` passed positionally, or a masked_m that is no tensor).
    """
    if args:
        _reject_positional("silu_and_mul_masked", args, "(input, masked_m, *, out=None)")
    return _masked("silu_and_mul_masked", input, masked_m, None, out)


def gelu_and_mul_masked(input, masked_m, approximate="none", *, out=None):
    """GeGLU (approximate "none" | "tanh") in the masked expert-major form of :func:`silu_and_mul_masked`."""
    _check_approximate("gelu_and_mul_masked", approximate)
    return _masked("gelu_and_mul_masked", input, masked_m, approximate, out)
