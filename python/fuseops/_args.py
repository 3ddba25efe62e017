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
