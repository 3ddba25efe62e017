"""Autograd of the functional forward ops: gradients against float64 autograd of the plain formula (the tolerance of
docs/ops/activation.md, in the input dtype), the no-grad fast path, and what autograd refuses."""

import math

import pytest
from common import DEVICES, DTYPES, KINDS, assert_close, kind_id, randn, reference_backward, torch

import fuseops


def fused(x, kind):
    return fuseops.silu_and_mul(x) if kind is None else fuseops.gelu_and_mul(x, kind)


def split(gate, up, kind):
    return fuseops.silu_and_mul_split(gate, up) if kind is None else fuseops.gelu_and_mul_split(gate, up, kind)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
@pytest.mark.parametrize("shape", [(17, 3, 40), (1, 7), (0, 8)], ids=str)
def test_fused_gradient(device, dtype, kind, shape):
    d = shape[-1]
    x = randn(shape[:-1] + (2 * d,), dtype, device).requires_grad_()
    y = fused(x, kind)
    assert y.requires_grad and y.shape == shape
    dout = randn(shape, dtype, device)
    y.backward(dout)
    ref = reference_backward(dout, x[..., :d], x[..., d:], kind)
    assert x.grad.dtype == dtype and x.grad.shape == x.shape
    assert_close(x.grad[..., :d], ref[0], "d input[..., :d]")
    assert_close(x.grad[..., d:], ref[1], "d input[..., d:]")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
def test_split_gradient(device, dtype, kind):
    gate = randn((9, 130), dtype, device).requires_grad_()
    up = randn((9, 130), dtype, device).requires_grad_()
    dout = randn((9, 130), dtype, device)
    split(gate, up, kind).backward(dout)
    ref = reference_backward(dout, gate, up, kind)
    assert_close(gate.grad, ref[0], "dgate")
    assert_close(up.grad, ref[1], "dup")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
def test_matches_torch_autograd_float32(device, kind):
    """Against PyTorch's own autograd of F.silu(g) * u / F.gelu(g, approximate) * u, in float32 (gradcheck-style: the
    analytic backward of our op equals the autograd of the formula), plus a float64 finite-difference check of the
    reference itself."""
    x = randn((32, 2 * 64), torch.float32, device).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    g, u = x_ref[:, :64], x_ref[:, 64:]
    act = torch.nn.functional.silu(g) if kind is None else torch.nn.functional.gelu(g, approximate=kind)
    dout = randn((32, 64), torch.float32, device)
    (act * u).backward(dout)
    fused(x, kind).backward(dout)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)  # PyTorch fp32 gelu cancels for g < -3
    # The float64 reference agrees with finite differences.
    g64 = randn((5, 3), torch.float64, "cpu").requires_grad_()
    u64 = randn((5, 3), torch.float64, "cpu").requires_grad_()
    from common import act as ref_act

    assert torch.autograd.gradcheck(lambda a, b: ref_act(a, kind) * b, (g64, u64))


def test_reference_equals_pytorch_formula():
    g = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    from common import act as ref_act

    torch.testing.assert_close(ref_act(g, None), torch.nn.functional.silu(g), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(ref_act(g, "none"), torch.nn.functional.gelu(g), rtol=1e-9, atol=1e-15)
    gelu_tanh = torch.nn.functional.gelu(g, approximate="tanh")
    torch.testing.assert_close(ref_act(g, "tanh"), gelu_tanh, rtol=1e-9, atol=1e-15)
    one = torch.tensor(1.0, dtype=torch.float64)
    assert math.isclose(ref_act(one, "none").item(), 0.8413447460685429, rel_tol=1e-12)  # Phi(1)


@pytest.mark.parametrize("device", DEVICES)
def test_no_grad_paths(device):
    x = randn((4, 32), torch.bfloat16, device)
    assert fuseops.silu_and_mul(x).grad_fn is None
    x.requires_grad_()
    with torch.no_grad():
        assert fuseops.gelu_and_mul(x).grad_fn is None
    assert fuseops.gelu_and_mul(x).grad_fn is not None


@pytest.mark.parametrize("device", DEVICES)
def test_out_with_grad_is_refused(device):
    x = randn((4, 32), torch.float32, device).requires_grad_()
    with pytest.raises(ValueError, match="silu_and_mul: out: .*requires grad"):
        fuseops.silu_and_mul(x, out=torch.empty(4, 16, device=device))
    gate = x[:, :16]
    with pytest.raises(ValueError, match="gelu_and_mul_split: out:"):
        fuseops.gelu_and_mul_split(gate, gate.detach(), out=torch.empty(4, 16, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_broadcast_and_expanded_gradients(device):
    """A grad output that is not contiguous (sum().backward() gives an expanded one) still works."""
    x = randn((6, 2 * 10), torch.float32, device).requires_grad_()
    fuseops.silu_and_mul(x).sum().backward()
    ref = reference_backward(torch.ones(6, 10, device=device), x[:, :10], x[:, 10:], None)
    assert_close(x.grad[:, :10], ref[0])
    assert_close(x.grad[:, 10:], ref[1])


@pytest.mark.parametrize("device", DEVICES)
def test_strided_input_gradient(device):
    """The fused input as a column slice of a wider buffer (rows further apart than 2d)."""
    wide = randn((5, 50), torch.float32, device).requires_grad_()
    x = wide[:, 4:44]
    dout = randn((5, 20), torch.float32, device)
    fuseops.gelu_and_mul(x, "tanh").backward(dout)
    ref = reference_backward(dout, x[:, :20], x[:, 20:], "tanh")
    assert_close(wide.grad[:, 4:24], ref[0])
    assert_close(wide.grad[:, 24:44], ref[1])
    assert (wide.grad[:, :4] == 0).all() and (wide.grad[:, 44:] == 0).all()
