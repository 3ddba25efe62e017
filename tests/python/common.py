"""Shared pieces of the Python tests: the module-level skip, devices and dtypes, the float64 references and the
tolerance of docs/ops/activation.md.

Importing this module skips the importing test module (with the reason) when torch or the fuseops extension is
missing; a present but broken extension is an error, not a skip.
"""

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the fuseops Python tests need it")
try:
    import fuseops
except ImportError as e:
    pytest.skip(
        f"the fuseops extension is not importable ({e}): build it with `pip install --no-build-isolation --no-deps "
        "--no-index .` or a CMake build with FUSEOPS_BUILD_TORCH=ON (python/README-python.md)",
        allow_module_level=True,
    )

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
APPROXIMATES = ["none", "tanh"]
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device (or torch without CUDA)")

# torch.library.opcheck, register_fake and torch.compile are what torch >= 2.4 offers; older torch runs eager only.
HAS_OPCHECK = hasattr(torch.library, "opcheck") and hasattr(torch.library, "register_fake")
HAS_COMPILE = hasattr(torch, "compile") and HAS_OPCHECK
requires_opcheck = pytest.mark.skipif(not HAS_OPCHECK, reason=f"torch {torch.__version__} has no torch.library.opcheck")
requires_compile = pytest.mark.skipif(
    not HAS_COMPILE, reason=f"torch {torch.__version__}: torch.compile with register_fake needs torch >= 2.4"
)

# Activation kinds: None is silu, else gelu's `approximate`.
KINDS = [None, "none", "tanh"]


def kind_id(kind):
    return "silu" if kind is None else f"gelu_{kind}"


# ---------------------------------------------------------------------------------------------------------------
# float64 references: the plain formulas, in the forms that do not cancel (mathematically the same as PyTorch's
# F.silu / F.gelu: 0.5 (1 + erf(x)) = 0.5 erfc(-x), 0.5 (1 + tanh(u)) = sigmoid(2u)).


def act(g, kind):
    if kind is None:
        return g * torch.sigmoid(g)
    if kind == "none":
        return 0.5 * g * torch.erfc(-g / math.sqrt(2.0))
    u = math.sqrt(2.0 / math.pi) * (g + 0.044715 * g * g * g)
    return g * torch.sigmoid(2.0 * u)


def _leaves(*tensors):
    return [t.detach().to(torch.float64).requires_grad_() for t in tensors]


def _with_sensitivity(outputs, leaves):
    """(ref, sens) per output: sens = |ref| + sum over inputs |x * d ref / d x| (elementwise ops: one partial each)."""
    result = []
    for out in outputs:
        grads = torch.autograd.grad(out.sum(), leaves, retain_graph=True, allow_unused=True)
        sens = out.detach().abs()
        for x, g in zip(leaves, grads):
            if g is not None:
                sens = sens + (x.detach() * g).abs()
        result.append((out.detach(), sens))
    return result


def reference_forward(gate, up, kind):
    """[(act(gate) * up, sens)] in float64."""
    g, u = _leaves(gate, up)
    return _with_sensitivity([act(g, kind) * u], [g, u])


def reference_backward(dout, gate, up, kind):
    """[(dgate, sens), (dup, sens)] in float64: dgate = dout * up * act'(gate), dup = dout * act(gate), by autograd
    of the plain formula."""
    dc, g, u = _leaves(dout, gate, up)
    a = act(g, kind)
    (da,) = torch.autograd.grad(a, g, grad_outputs=torch.ones_like(a), create_graph=True)
    return _with_sensitivity([dc * u * da, dc * a], [dc, g, u])


# ---------------------------------------------------------------------------------------------------------------
# Tolerance (docs/ops/activation.md): |out - ref| <= u_out |ref| + 16 * 2^-24 * sens + atol. The doc's flush term
# (2^-117 times |up| or |dout| for subnormal intermediates flushed by the f16 / bf16 fast policy, 2^-140 for f32
# ones rounded to the subnormal spacing) is left out: these tests draw moderate values, where none is subnormal.

UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
ATOL = {torch.float32: 1e-30, torch.float16: 1e-30 + 2.0**-25, torch.bfloat16: 1e-30}


def assert_close(out, ref_sens, what=""):
    ref, sens = ref_sens
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o = out.detach().to("cpu", torch.float64)
    ref, sens = ref.cpu(), sens.cpu()
    tol = UNIT_ROUNDOFF[out.dtype] * ref.abs() + 16 * 2.0**-24 * sens + ATOL[out.dtype]
    err = (o - ref).abs()
    bad = ~(err <= tol)  # NaN (an unwritten, poisoned element) counts as bad
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements off; first at flat index {i}: "
            f"got {o.flatten()[i].item()!r}, expected {ref.flatten()[i].item()!r} +- {tol.flatten()[i].item():.3g}"
        )


def randn(shape, dtype, device, scale=1.0):
    return (torch.randn(shape, dtype=torch.float32, device=device) * scale).to(dtype)


def poisoned(shape, dtype, device):
    """An output buffer full of NaN, so an element the op does not write fails the comparison."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)
