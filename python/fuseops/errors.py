"""The library-wide record of bad device-resident values (include/fuseops/error.h)."""

import torch

from ._args import INT32_MAX, int_arg
from ._ops import ops

# They synchronise with the device: keep them out of compiled graphs (a graph break; an error under fullgraph=True).
_eager_only = getattr(getattr(torch, "compiler", None), "disable", lambda fn: fn)


@_eager_only
def check_errors(device=-1):
    """Raises the bad device-resident value recorded first since the last check, then clears the record.

    Ops never synchronise (so they can be captured in CUDA graphs); a value that lives on the device and is out of
    range (an index, a length) is recorded by the kernel instead. This call synchronises with ``device`` (a CUDA
    ordinal; -1: every device that ran an op) and reads the record. The record keeps the first (op, argument) that
    recorded and, of that pair, the smallest bad index over every call since the last check: to tie an index to its
    call, check after each call (or set FUSEOPS_DEBUG).

    Raises:
        ValueError: naming the op, the argument and that index; also for a ``device`` that is not an int in
            [-1, 2**31 - 1].
    """
    # the C++ API's device is an int: a larger ordinal wrapped (2**32 - 1 was read as -1, every device)
    ops.check_errors.default(int_arg("check_errors", "device", device, -1, INT32_MAX))


@_eager_only
def clear_errors(device=-1):
    """Clears any recorded device error without raising it (``device`` as :func:`check_errors`)."""
    ops.clear_errors.default(int_arg("clear_errors", "device", device, -1, INT32_MAX))
