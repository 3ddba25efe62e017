"""Checks of the Python functions' scalar arguments: integers and flags are taken as given, never truncated or read as
truthy, and a bad one is a ValueError naming the op and the argument."""
import contextlib
import math
import numbers
import operator
import re

import torch


def shown(v):
    """A value as messages show it: a tensor by its shape and dtype (not every element), anything else by repr."""
    if isinstance(v, torch.Tensor):
        return f"a {'meta ' if v.device.type == 'meta' else ''}tensor {list(v.shape)} {v.dtype}"
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def is_bool(v):
    """A Python bool or a numpy bool scalar (``numpy.bool_``, named ``numpy.bool`` from numpy 2), not a bool tensor."""
    return isinstance(v, bool) or (type(v).__module__ == "numpy" and type(v).__name__ in ("bool_", "bool"))


def _bool_tensor(v):
    """A bool tensor with values (a meta tensor has none to read: an error, not NotImplementedError)."""
    return isinstance(v, torch.Tensor) and v.dtype == torch.bool and v.device.type != "meta"


INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def int_arg(op, name, v, lo=None, hi=None, hi_is=None):
    """An int (or numpy / torch integer scalar: a 0-dim tensor) within [lo, hi] where given, and within int64 (what the
    ops' schemas take: a larger one failed in torch's argument parser as "expected int, found int"); bools, floats and
    tensors with dims (torch.tensor([4]) is a list of one) or on meta (no value to read) are errors. ``hi_is``: what
    the bound hi is, for the message (e.g. "min(E, 32), E = 16 experts")."""
    not_dual(op, name, v, number=True)
    value = None
    if not is_bool(v) and not (isinstance(v, torch.Tensor) and
                               (v.dtype == torch.bool or v.dim() != 0 or v.device.type == "meta")):
        try:
            value = operator.index(v)
        except TypeError:
            value = None
    if value is None or (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = "" if lo is None else f" >= {lo}" if hi is None else f" in [{lo}, {hi}]"
        rng += f" ({hi} = {hi_is})" if hi is not None and hi_is else ""
        raise ValueError(f"{op}: {name}: expected an int{rng}, got {shown(v)}")
    if not INT64_MIN <= value <= INT64_MAX:
        low = "-2**63" if lo is None else lo
        high = "2**63 - 1" if hi is None else hi
        raise ValueError(f"{op}: {name}: expected an int in [{low}, {high}] (int64), got {shown(v)}")
    return value


def is_flag(v):
    """What the flags take: a bool, a numpy bool scalar or a one-element bool tensor (with a value: not on meta)."""
    return is_bool(v) or (_bool_tensor(v) and v.numel() == 1)


def bool_arg(op, name, v):
    """True / False (or a numpy bool, or a one-element bool tensor); a string or a number is an error."""
    if is_flag(v):
        return bool(v)
    raise ValueError(f"{op}: {name}: expected a bool, got {shown(v)}")


def not_dual(op, name, v, number=False):
    """No forward-mode AD tangent on ``v``: fuseops computes none, so its outputs would carry none (the raw ops refuse
    a dual tensor by name too; this serves the Python autograd Functions, which torch would refuse unnamed, and the
    0-dim tensors given for a number, which the number would drop)."""
    if isinstance(v, torch.Tensor) and torch.autograd.forward_ad.unpack_dual(v).tangent is not None:
        instead = ("a number, or the primal of the dual tensor" if number else
                   "the primal, torch.autograd.forward_ad.unpack_dual(t).primal, and compute the tangent otherwise")
        raise NotImplementedError(f"{op}: {name}: a dual tensor of forward-mode AD; fuseops computes no tangent (pass "
                                  f"{instead})")


def float_arg(op, name, v):
    """A real number (int, float, numpy / torch scalar) as a float; a bool, a string or None is an error, and so is a
    0-dim tensor that requires grad while grad mode is on (the number would cut it from the graph) or that lives on
    meta (no value to read)."""
    not_dual(op, name, v, number=True)
    if isinstance(v, torch.Tensor) and v.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{op}: {name}: requires grad, but fuseops computes no gradient for it (a number there); "
                           "pass a float, or detach it")
    if (isinstance(v, (str, bytes)) or is_bool(v) or _bool_tensor(v) or v is None or
            (isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real)) or
            (isinstance(v, torch.Tensor) and (v.dim() != 0 or v.is_complex() or v.device.type == "meta"))):
        # a tensor with dims is a list (as for the ints), a complex number is no real one, a meta one has no value
        raise ValueError(f"{op}: {name}: expected a number, got {shown(v)}")
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past the float range (10**400)
        raise ValueError(f"{op}: {name}: expected a number in the float range, got {shown(v)}") from None
    # a number float() takes past its range (Decimal('1e400') -> inf, Decimal('1e-400') -> 0.0): refused, never
    # misread (an infinity or NaN given as such is left to the op's own check)
    if (math.isinf(f) and v != f) or (f == 0 and v != 0):
        raise ValueError(f"{op}: {name}: expected a number in the float range, got {shown(v)} (it reads as {f})")
    return f


# True while torch.compile traces (Dynamo cannot trace has_names(), and a named tensor does not reach a compiled
# region: Dynamo refuses it first); False on torch without torch.compiler.
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def tensor_arg(op, name, t, optional=False):
    """A dense torch.Tensor (or None when ``optional``); anything else is an error naming the argument: also a sparse,
    mkldnn, quantized or nested tensor (the ops read strided memory; torch would refuse them with a dispatcher
    error that names no argument), and a named tensor (torch's error there speaks of TorchScript)."""
    if t is None and optional:
        return t
    if isinstance(t, torch.Tensor):
        if t.layout != torch.strided or t.is_quantized or getattr(t, "is_nested", False):
            got = ("a quantized tensor" if t.is_quantized else "a nested tensor" if getattr(t, "is_nested", False)
                   else f"a tensor of layout {t.layout}")
            raise ValueError(f"{op}: {name}: expected a dense (strided) tensor, got {got}")
        if not _compiling() and t.has_names():  # torch refuses them in custom ops with an error about TorchScript
            raise ValueError(f"{op}: {name}: expected a tensor without dimension names, got names {t.names} (drop "
                             "them with .rename(None))")
        return t
    raise ValueError(f"{op}: {name}: expected a torch.Tensor{' or None' if optional else ''}, got {type(t).__name__}")


def written_arg(op, name, t, optional=True):
    """An output the op writes in place: a tensor that does not require grad while grad mode is on (autograd would not
    see the write), or None where ``optional`` (the function allocates it); anything else is an error naming it."""
    tensor_arg(op, name, t, optional=optional)
    if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{op}: {name}: expected a tensor that does not require grad (the op writes it in place)")


def forward_only(op, optional=(), **tensors):
    """fuseops computes no gradient for these inputs: refuse one that requires grad while grad mode is on, rather than
    return outputs that silently drop it from the graph (call the op under torch.no_grad() / torch.inference_mode(),
    or detach). Each must be a tensor, or None where its name is in ``optional`` (a ValueError naming it otherwise)."""
    for name, t in tensors.items():
        tensor_arg(op, name, t, optional=name in optional)
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise RuntimeError(f"{op}: {name}: requires grad, but fuseops computes no gradient for it (forward only "
                               "there); call the op under torch.no_grad() or detach it")


def dense(t):
    """t with contiguous strides, for an incoming gradient the ops read: torch counts an empty tensor as contiguous,
    also with the zero strides of .sum()'s expanded gradient, which the ops refuse (innermost stride 1, rows apart)."""
    return t.contiguous() if t.numel() else t.new_empty(t.shape)


def one_stride(sizes, strides):
    """(ok, stride): whether dims of these sizes and strides step with one stride when flattened (size-1 dims
    ignored; stride[i] = stride[i+1] * size[i+1]), as the ops' token-dim and row checks require, and that stride
    (None without a dim of size > 1)."""
    stride, extent = None, 0
    for size, st in zip(reversed(sizes), reversed(strides)):
        if size == 1:
            continue
        if stride is None:
            stride = st
        elif st != extent:
            return False, None
        extent = st * size
    return True, stride


def takes_rows(t):
    """Whether the ops take t's layout as rows as it is, by the rule of their row check (as_row_matrix,
    src/core/validate.cpp): innermost stride 1 (N > 1), the leading dims other than size-1 ones nested (stride[i] =
    stride[i+1] * size[i+1]), and rows at least N apart. Strides only, no view attempt, so it traces as it runs
    (fake tensors included). Used to decide which read-only views the FLA / vLLM-style functions copy."""
    n = t.shape[-1]
    if n > 1 and t.stride(-1) != 1:
        return False
    ok, row_stride = one_stride(t.shape[:-1], t.stride()[:-1])
    return ok and (row_stride is None or row_stride >= n)


def unit_innermost(t):
    """A tensor the ops only read, as a contiguous copy where its innermost stride is not 1 (an expanded or transposed
    view: the C++ API refuses that layout by name), else as it is; anything else (None, meta, empty) as it is."""
    if (isinstance(t, torch.Tensor) and t.device.type != "meta" and t.dim() >= 1 and t.numel() > 0 and
            t.shape[-1] > 1 and t.stride(-1) != 1):
        return t.contiguous()
    return t


class _NoSecondDerivative(torch.autograd.Function):
    """A copy of a backward's ``result``, recorded on the tensors it was computed from (``sources``); its own backward
    raises ``message``."""

    @staticmethod
    def forward(ctx, message, result, *sources):
        ctx.message = message
        return result.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def not_twice_differentiable(op, grads, *inputs, depends=None):
    """The results ``grads`` of a backward that has no derivative of its own, given the tensors it read (``inputs``:
    the incoming gradients and the saved tensors; ``depends``, where given, holds for each result the tuple of those
    it was computed from, else every result counts as computed from all). Where autograd records this backward
    (create_graph=True) and a result's tensors include one that requires grad, the result comes back through a node
    whose inputs are those tensors and whose backward raises naming ``op``: every path from the result to what it was
    computed from passes that node, so a second-order term is an error, never silently dropped, whether the caller
    runs .backward() or torch.autograd.grad(..., inputs=...) (as in a gradient penalty). torch's once_differentiable
    wraps only the incoming gradients, and an error node fed by copies of the results would lie on no such path."""
    if not torch.is_grad_enabled():
        return grads
    message = f"{op}: not twice differentiable (fuseops computes no second derivative)"
    out = list(grads)
    for i, g in enumerate(grads):
        if not isinstance(g, torch.Tensor):
            continue
        needing = [t for t in (inputs if depends is None else depends[i]) if isinstance(t, torch.Tensor) and
                   t.requires_grad]
        if needing:
            out[i] = _NoSecondDerivative.apply(message, g, *needing)
    return tuple(out)


@contextlib.contextmanager
def named_as(called, op, names):
    """Restates the ValueErrors, RuntimeErrors and NotImplementedErrors of op ``op`` in the names of the Python
    function the user called (same type): the message's leading "<op>: " becomes "<called>: " and each argument name
    in ``names`` (whole words) its Python name, e.g. apply_rotary_pos_emb(inplace=True)'s
    "apply_rotary_pos_emb_inplace: q_out: ..." would read "apply_rotary_pos_emb: q: ..."."""
    try:
        yield
    except (ValueError, RuntimeError, NotImplementedError) as e:
        msg = str(e)
        if type(e) not in (ValueError, RuntimeError, NotImplementedError) or not msg.startswith(op + ": "):
            raise
        rest = msg[len(op) + 2:]
        for internal, public in names.items():
            rest = re.sub(rf"\b{re.escape(internal)}\b", public, rest)
        raise type(e)(f"{called}: {rest}") from None
