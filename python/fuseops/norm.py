"""Gated normalisation, as flash-linear-attention's ``fla/modules/layernorm_gated.py`` (docs/ops/norm.md).

RMSNorm or LayerNorm over the last dim, or over groups of ``group_size`` consecutive elements of it, with an optional
SiLU gate ``z`` applied after the norm (``norm_before_gate=True``) or to x before it; statistics in fp32::

    x' = x * silu(z)                          if z is not None and not norm_before_gate, else x
    rstd = 1 / sqrt(mean(x'^2) + eps)         RMSNorm     y = x' * rstd * weight (+ bias)
    rstd = 1 / sqrt(var(x') + eps)            LayerNorm   y = (x' - mean(x')) * rstd * weight (+ bias)
    y = y * silu(z)                           if z is not None and norm_before_gate

This is the output norm of Qwen3-Next's Gated DeltaNet layers (RMSNorm per value head, gate after the norm).

Rules: x, z, out: float32 / float16 / bfloat16 of one dtype, shape [..., N] (any leading dims, flattened into rows;
innermost stride 1; :func:`layernorm_fn` and :func:`rmsnorm_fn` read any other view of x and z as a contiguous copy,
as FLA's LayerNormFn does). weight, bias: [N] (stride 1; the two FLA functions copy other views), read as float32:
the op takes float32 or x's dtype, the Python functions convert any other float dtype to float32 first (exactly
for 16-bit ones), as FLA's kernel reads them. ``group_size`` None (or 0, the C++
API's value) means N; otherwise it must divide N and be at most 16384. Output in x's dtype; mean and rstd float32
[N / group_size * M], group-major (entry g * M + m), as FLA. CUDA work runs on the current stream without host
synchronisation. Forward only: FLA's backward is not implemented, so these functions raise when an input requires
grad with grad mode on.

Errors: ValueError naming the argument; RuntimeError when an input requires grad.
"""

import torch

from ._args import bool_arg, float_arg, forward_only, int_arg, takes_rows, tensor_arg, written_arg
from ._ops import ops

_layer_norm_fwd = ops.layer_norm_fwd.default


def _group(op, group_size):
    return 0 if group_size is None else int_arg(op, "group_size", group_size, 0)  # 0: N, as None (the C++ API's 0)


def _check_args(op, x, weight, bias, z, eps, norm_before_gate, is_rms_norm):
    """The arguments by name: tensors, eps a number, the flags bools; returns (eps, norm_before_gate, is_rms_norm)."""
    tensor_arg(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x: expected rank >= 1 [..., N], got rank 0")
    forward_only(op, x=x, weight=weight, bias=bias, z=z, optional=("bias", "z"))
    return (float_arg(op, "eps", eps), bool_arg(op, "norm_before_gate", norm_before_gate),
            bool_arg(op, "is_rms_norm", is_rms_norm))


def layer_norm_fwd(x, weight, bias=None, eps=1e-6, z=None, out=None, group_size=None, norm_before_gate=True,
                   is_rms_norm=False):
    """FLA ``layer_norm_fwd(x, weight, bias, eps, z=None, out=None, group_size=None, norm_before_gate=True,
    is_rms_norm=False) -> (out, mean, rstd)``, with FLA's argument order (``bias`` and ``eps`` may be given
    positionally) and any leading dims (FLA requires [M, N]).

    Returns out (x's shape and dtype), mean (float32 [N / group_size * M], None for RMSNorm) and rstd (float32, same
    shape). ``weight`` is required (a tensor: None is a ValueError; FLA's own functions take it too).
    """
    op = "layer_norm_fwd"
    eps, norm_before_gate, is_rms_norm = _check_args(op, x, weight, bias, z, eps, norm_before_gate, is_rms_norm)
    written_arg(op, "out", out)
    weight, bias = _as_fp32_affine(x, weight, bias)
    g = _group(op, group_size)
    N = x.shape[-1]
    M = x.numel() // N if N else 0
    ngroups = N // g if g and N % g == 0 else 1
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    mean = None if is_rms_norm else torch.empty(ngroups * M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(ngroups * M, dtype=torch.float32, device=x.device)
    _layer_norm_fwd(out, mean, rstd, x, weight, bias, z, eps, g, norm_before_gate, is_rms_norm)
    return out, mean, rstd


def _as_fp32_affine(x, weight, bias):
    """weight / bias as the op takes them (float32 or x's dtype, both one dtype), converted to float32 (exactly, for
    16-bit ones) where FLA's kernel, which loads them as float32 whatever their dtype, would take them and the op
    would not; anything else (a weight or bias that is not a float tensor) leaves both as they are, for the op's own
    errors about the user's tensors."""
    def floating(t):
        return isinstance(t, torch.Tensor) and t.is_floating_point()

    if not floating(weight) or not isinstance(x, torch.Tensor) or not (bias is None or floating(bias)):
        return weight, bias
    accepted = (torch.float32, x.dtype)
    if weight.dtype not in accepted or (bias is not None and (bias.dtype not in accepted or bias.dtype != weight.dtype)):
        weight = weight.float()
        bias = None if bias is None else bias.float()
    return weight, bias


def _as_rows(t):
    """A tensor the FLA functions only read, as LayerNormFn reads it (its input_guard makes every input contiguous):
    as it is where the op takes its layout (:func:`takes_rows`), else a contiguous copy; anything else (None, a rank-0
    or empty tensor, meta) as it is, for the op's own checks."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta" or t.dim() == 0 or t.numel() == 0:
        return t
    return t if takes_rows(t) else t.contiguous()


def _norm_fn(op, x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm):
    eps, norm_before_gate, is_rms_norm = _check_args(op, x, weight, bias, z, eps, norm_before_gate, is_rms_norm)
    # FLA's LayerNormFn copies views into contiguous tensors and its kernel reads weight / bias in any float dtype:
    # so do these drop-in functions (layer_norm_fwd keeps FLA's layer_norm_fwd rules: no copies).
    x, z, weight, bias = _as_rows(x), _as_rows(z), _as_rows(weight), _as_rows(bias)
    weight, bias = _as_fp32_affine(x, weight, bias)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    g = _group(op, group_size)
    try:
        _layer_norm_fwd(out, None, None, x, weight, bias, z, eps, g, norm_before_gate, is_rms_norm)
    except ValueError as e:
        # The op's errors name layer_norm_fwd and x / weight / bias / z / eps / group_size, which are this function's
        # arguments too: name the function the user called.
        prefix = "layer_norm_fwd: "
        if not str(e).startswith(prefix):
            raise
        raise ValueError(f"{op}: {str(e)[len(prefix):]}") from None
    return out


def layernorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True, is_rms_norm=False):
    """FLA ``layernorm_fn``: ``norm(x) * silu(z)`` if norm_before_gate else ``norm(x * silu(z))``; returns y only
    (no statistics are stored)."""
    return _norm_fn("layernorm_fn", x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm)


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """FLA ``rmsnorm_fn``: :func:`layernorm_fn` with ``is_rms_norm=True``."""
    return _norm_fn("rmsnorm_fn", x, weight, bias, z, eps, group_size, norm_before_gate, True)
