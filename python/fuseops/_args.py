"""Checks of the Python functions' scalar arguments: integers and flags are taken as given, never truncated or read as
truthy, and a bad one is a ValueError naming the op and the argument."""
import operator

import torch


def int_arg(op, name, v, lo=None, hi=None):
    """An int (or numpy / torch integer scalar) within [lo, hi] where given; bools and floats are errors."""
    value = None
    if not isinstance(v, bool):
        try:
            value = operator.index(v)
        except TypeError:
            value = None
    if value is None or (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = "" if lo is None else f" >= {lo}" if hi is None else f" in [{lo}, {hi}]"
        raise ValueError(f"{op}: {name}: expected an int{rng}, got {v!r}")
    return value


def bool_arg(op, name, v):
    """True / False (or a numpy bool, or a one-element bool tensor); a string or a number is an error."""
    if isinstance(v, bool) or type(v).__name__ == "bool_" or (isinstance(v, torch.Tensor) and v.dtype == torch.bool
                                                                 and v.numel() == 1):
        return bool(v)
    raise ValueError(f"{op}: {name}: expected a bool, got {v!r}")


def float_arg(op, name, v):
    """A real number (int, float, numpy / torch scalar) as a float; a bool, a string or None is an error."""
    if isinstance(v, (bool, str, bytes)) or type(v).__name__ == "bool_" or v is None:
        raise ValueError(f"{op}: {name}: expected a number, got {v!r}")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: {name}: expected a number, got {v!r}") from None


def tensor_arg(op, name, t, optional=False):
    """A torch.Tensor (or None when ``optional``); anything else is an error naming the argument."""
    if (t is None and optional) or isinstance(t, torch.Tensor):
        return t
    raise ValueError(f"{op}: {name}: expected a torch.Tensor{' or None' if optional else ''}, got {type(t).__name__}")


def forward_only(op, **tensors):
    """fuseops computes no gradient for these inputs: refuse one that requires grad while grad mode is on, rather than
    return outputs that silently drop it from the graph (call the op under torch.no_grad() / torch.inference_mode(),
    or detach)."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise RuntimeError(f"{op}: {name}: requires grad, but fuseops computes no gradient for it (forward only "
                               "there); call the op under torch.no_grad() or detach it")
