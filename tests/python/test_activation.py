"""Forward and backward of every activation op against the float64 reference (docs/ops/activation.md tolerance), on
CPU and CUDA, for float32 / float16 / bfloat16: the raw torch.ops, the functional API and the compat modules."""

import pytest
from common import (
    DEVICES,
    DTYPES,
    KINDS,
    assert_close,
    kind_id,
    poisoned,
    randn,
    reference_backward,
    reference_forward,
    torch,
)

import fuseops
from fuseops.compat import flaggems, vllm

# (leading dims, d): odd d, d not a multiple of 8, one element, zero rows, rank 3, a wide row.
CASES = [((7,), 5), ((3, 4), 64), ((33,), 1000), ((0,), 8), ((1,), 1), ((2, 3, 2), 13), ((2,), 14336)]
CASE_IDS = [f"{'x'.join(map(str, lead))}-d{d}" for lead, d in CASES]

parametrize_all = [
    pytest.mark.parametrize("device", DEVICES),
    pytest.mark.parametrize("dtype", DTYPES, ids=str),
    pytest.mark.parametrize("kind", KINDS, ids=kind_id),
    pytest.mark.parametrize("lead,d", CASES, ids=CASE_IDS),
]


def all_cases(fn):
    for mark in reversed(parametrize_all):
        fn = mark(fn)
    return fn


def raw_fused(out, x, kind):
    if kind is None:
        fuseops.ops.silu_and_mul(out, x)
    elif kind == "none":
        fuseops.ops.gelu_and_mul(out, x)  # the schema's default approximate="none"
    else:
        fuseops.ops.gelu_tanh_and_mul(out, x)


def functional_fused(x, kind, **kw):
    if kind is None:
        return fuseops.silu_and_mul(x, **kw)
    if kind == "tanh" and not kw:
        return fuseops.gelu_tanh_and_mul(x)
    return fuseops.gelu_and_mul(x, kind, **kw)


def functional_split(gate, up, kind, **kw):
    if kind is None:
        return fuseops.silu_and_mul_split(gate, up, **kw)
    return fuseops.gelu_and_mul_split(gate, up, kind, **kw)


@all_cases
def test_fused_forward(device, dtype, kind, lead, d):
    x = randn(lead + (2 * d,), dtype, device)
    ref = reference_forward(x[..., :d], x[..., d:], kind)[0]
    out = poisoned(lead + (d,), dtype, device)
    raw_fused(out, x, kind)
    assert_close(out, ref, "raw op")
    if kind == "tanh":
        out2 = poisoned(lead + (d,), dtype, device)
        fuseops.ops.gelu_and_mul(out2, x, "tanh")
        assert torch.equal(out2, out), "gelu_and_mul(tanh) != gelu_tanh_and_mul"
    y = functional_fused(x, kind)
    assert y.dtype == dtype and y.device == x.device
    assert torch.equal(y, out), "functional != raw op"


@all_cases
def test_split_forward(device, dtype, kind, lead, d):
    gate, up = randn(lead + (d,), dtype, device), randn(lead + (d,), dtype, device)
    out = poisoned(lead + (d,), dtype, device)
    if kind is None:
        fuseops.ops.silu_and_mul_split(out, gate, up)
    else:
        fuseops.ops.gelu_and_mul_split(out, gate, up, kind)
    assert_close(out, reference_forward(gate, up, kind)[0])
    assert torch.equal(functional_split(gate, up, kind), out)


@all_cases
def test_backward(device, dtype, kind, lead, d):
    dout, gate, up = (randn(lead + (d,), dtype, device) for _ in range(3))
    (ref_dgate, ref_dup) = reference_backward(dout, gate, up, kind)
    dgate, dup = poisoned(lead + (d,), dtype, device), poisoned(lead + (d,), dtype, device)
    if kind is None:
        fuseops.ops.silu_and_mul_backward(dgate, dup, dout, gate, up)
        got = fuseops.silu_and_mul_backward(dout, gate, up)
    else:
        fuseops.ops.gelu_and_mul_backward(dgate, dup, dout, gate, up, kind)
        got = fuseops.gelu_and_mul_backward(dout, gate, up, kind)
    assert_close(dgate, ref_dgate, "dgate")
    assert_close(dup, ref_dup, "dup")
    assert torch.equal(got[0], dgate) and torch.equal(got[1], dup)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
def test_wide_value_range(device, dtype, kind):
    """|g| up to ~20: the tails where the textbook formulas cancel (gelu for g < -3, tanh form for u < -2)."""
    x = randn((64, 2 * 96), dtype, device, scale=5.0)
    assert_close(functional_fused(x, kind), reference_forward(x[:, :96], x[:, 96:], kind)[0])
    dout, gate, up = (randn((64, 96), dtype, device, scale=5.0) for _ in range(3))
    if kind is None:
        dgate, dup = fuseops.silu_and_mul_backward(dout, gate, up)
    else:
        dgate, dup = fuseops.gelu_and_mul_backward(dout, gate, up, kind)
    ref = reference_backward(dout, gate, up, kind)
    assert_close(dgate, ref[0], "dgate")
    assert_close(dup, ref[1], "dup")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_views(device, dtype):
    """Rows further apart than their width, for inputs and outputs; gate and up as two halves of one buffer; padding
    between output rows is never written."""
    rows, d = 9, 24
    wide = randn((rows, 2 * d + 8), dtype, device)
    x = wide[:, 3 : 3 + 2 * d]
    out_buf = torch.zeros((rows, d + 5), dtype=dtype, device=device)
    out = out_buf[:, :d]
    fuseops.silu_and_mul(x, out=out)
    assert_close(out, reference_forward(x[:, :d], x[:, d:], None)[0])
    assert torch.equal(out_buf[:, d:], torch.zeros_like(out_buf[:, d:])), "wrote into the padding between rows"
    y = fuseops.gelu_and_mul_split(x[:, :d], x[:, d:], "tanh")
    assert_close(y, reference_forward(x[:, :d], x[:, d:], "tanh")[0])
    # dgate / dup as the two halves of one [rows, 2d] buffer (the layout autograd of the fused form uses).
    grad = poisoned((rows, 2 * d), dtype, device)
    dout = randn((rows, d), dtype, device)
    fuseops.silu_and_mul_backward(dout, x[:, :d], x[:, d:], dgate=grad[:, :d], dup=grad[:, d:])
    ref = reference_backward(dout, x[:, :d], x[:, d:], None)
    assert_close(grad[:, :d], ref[0], "dgate")
    assert_close(grad[:, d:], ref[1], "dup")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
def test_nan_and_inf(device, kind):
    """IEEE evaluation of the formula, as PyTorch: NaN in gives NaN out; act(-inf) * u is NaN; act(+inf) = +inf."""
    g = torch.tensor([float("nan"), 1.0, float("inf"), float("-inf")], device=device)
    u = torch.tensor([1.0, float("nan"), 2.0, 1.0], device=device)
    y = fuseops.silu_and_mul(torch.cat([g, u])) if kind is None else fuseops.gelu_and_mul(torch.cat([g, u]), kind)
    assert torch.isnan(y[:2]).all()
    assert y[2].item() == float("inf")
    assert torch.isnan(y[3])


@pytest.mark.parametrize("device", DEVICES)
def test_out_is_returned_and_written(device):
    x = randn((4, 16), torch.bfloat16, device)
    out = poisoned((4, 8), torch.bfloat16, device)
    assert fuseops.silu_and_mul(x, out=out) is out
    assert fuseops.gelu_tanh_and_mul(x, out=out) is out
    assert fuseops.gelu_and_mul_split(x[:, :8], x[:, 8:], "none", out=out) is out
    dgate, dup = poisoned((4, 8), torch.bfloat16, device), poisoned((4, 8), torch.bfloat16, device)
    got = fuseops.gelu_and_mul_backward(x[:, :8], x[:, :8], x[:, 8:], dgate=dgate, dup=dup)
    assert got[0] is dgate and got[1] is dup


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compat_vllm(device, dtype):
    """vLLM's order: (out, input), writes out, returns None."""
    d = 40
    x = randn((5, 2 * d), dtype, device)
    for fn, kind in ((vllm.silu_and_mul, None), (vllm.gelu_and_mul, "none"), (vllm.gelu_tanh_and_mul, "tanh")):
        out = poisoned((5, d), dtype, device)
        assert fn(out, x) is None
        assert_close(out, reference_forward(x[:, :d], x[:, d:], kind)[0], fn.__name__)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compat_flaggems(device, dtype):
    """FlagGems' signatures: silu_and_mul(A, B), silu_and_mul_out(A, B, out), gelu_and_mul(x, y, approximate);
    new tensors, differentiable."""
    a, b = randn((6, 33), dtype, device), randn((6, 33), dtype, device)
    assert_close(flaggems.silu_and_mul(a, b), reference_forward(a, b, None)[0])
    out = poisoned((6, 33), dtype, device)
    assert flaggems.silu_and_mul_out(a, b, out) is out
    assert_close(out, reference_forward(a, b, None)[0])
    for kind in ("none", "tanh"):
        assert_close(flaggems.gelu_and_mul(a, b, kind), reference_forward(a, b, kind)[0])
    assert_close(flaggems.gelu_and_mul(a, b), reference_forward(a, b, "none")[0])
    a.requires_grad_()
    b.requires_grad_()
    flaggems.gelu_and_mul(a, b, approximate="tanh").sum().backward()
    ref = reference_backward(torch.ones_like(a), a, b, "tanh")
    assert_close(a.grad, ref[0], "dA")
    assert_close(b.grad, ref[1], "dB")


def test_version_and_check_errors():
    assert fuseops.__version__.count(".") == 2
    fuseops.clear_errors()
    fuseops.check_errors()  # nothing recorded by the activations: no error


# rtol per docs/ops/activation.md (about 1 ulp of the output dtype); atol covers PyTorch's own float32 error where its
# textbook formulas cancel (gelu's 1 + erf for g < -3) and values near a zero of the derivative.
RTOL_VS_FP32 = {torch.float32: 1e-5, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
def test_parity_with_pytorch_fp32(device, dtype, kind):
    """Every op against plain PyTorch in float32 on the inputs upcast: F.silu(g) * u, F.gelu(g, approximate) * u, and
    torch autograd of those for the backward."""
    rows, d = 37, 300
    x = randn((rows, 2 * d), dtype, device)
    g, u = x[:, :d].float().requires_grad_(), x[:, d:].float().requires_grad_()
    a = torch.nn.functional.silu(g) if kind is None else torch.nn.functional.gelu(g, approximate=kind)
    ref = a * u
    dout = randn((rows, d), dtype, device)
    ref.backward(dout.float())

    def check(got, want, what, atol=1e-6):  # `what` names the tensor in a failure's traceback
        torch.testing.assert_close(got.float(), want.detach(), rtol=RTOL_VS_FP32[dtype], atol=atol)

    check(functional_fused(x, kind), ref, "fused")
    check(functional_split(x[:, :d], x[:, d:], kind), ref, "split")
    if kind is None:
        dgate, dup = fuseops.silu_and_mul_backward(dout, x[:, :d], x[:, d:])
    else:
        dgate, dup = fuseops.gelu_and_mul_backward(dout, x[:, :d], x[:, d:], kind)
    check(dgate, g.grad, "dgate", atol=1e-5)
    check(dup, u.grad, "dup", atol=1e-5)


def test_second_order_terms_raise_instead_of_going_missing():
    # a gradient penalty: g1 depends on x through the saved input, not through the incoming gradient (ones); the
    # backward has no derivative, so differentiating g1 must raise (it was dropped: x.grad off by up to 3.09)
    for call in (lambda x: fuseops.silu_and_mul(x), lambda x: fuseops.gelu_and_mul_split(x[..., :4], x[..., 4:])):
        x = torch.randn(3, 8, requires_grad=True)
        (g1,) = torch.autograd.grad(call(x).sum(), x, create_graph=True)
        assert g1.requires_grad
        with pytest.raises(RuntimeError, match="not twice differentiable"):
            ((g1 ** 2).sum() + (x ** 2).sum()).backward()
    # torch.autograd.grad(..., inputs=...) of a penalty: the second-order term through h = x0 W must raise, not be
    # dropped (the error node sat on copies of the results, off every path to W: dW came back wrong by up to 17.5);
    # with allow_unused=True too (it came back None)
    for call in (lambda h: fuseops.silu_and_mul(h), lambda h: fuseops.gelu_and_mul_split(h[..., :4], h[..., 4:]),
                 lambda h: flaggems.silu_and_mul(h[..., :4], h[..., 4:])):
        x0, w = torch.randn(3, 8, requires_grad=True), torch.randn(8, requires_grad=True)
        (gx,) = torch.autograd.grad(call(x0 * w).sum(), x0, create_graph=True)
        with pytest.raises(RuntimeError, match="not twice differentiable"):
            torch.autograd.grad((gx ** 2).sum(), w, retain_graph=True)
        with pytest.raises(RuntimeError, match="not twice differentiable"):
            torch.autograd.grad(gx.sum(), x0, allow_unused=True)
    # a penalty that needs no derivative of the backward: with the gate frozen, dup = dout silu(gate) does not read
    # up, so differentiating it w.r.t. up's weights is first order (it had raised: every result was tied to every
    # input); PyTorch's value
    lin = torch.nn.Linear(3, 4)
    h, a = torch.randn(5, 3, requires_grad=True), torch.randn(5, 4)
    (g,) = torch.autograd.grad(flaggems.silu_and_mul(a, lin(h)).sum(), h, create_graph=True)
    (dw,) = torch.autograd.grad(g.pow(2).sum(), lin.weight)
    (gr,) = torch.autograd.grad((torch.nn.functional.silu(a) * lin(h)).sum(), h, create_graph=True)
    (dwr,) = torch.autograd.grad(gr.pow(2).sum(), lin.weight)
    torch.testing.assert_close(dw, dwr, rtol=1e-5, atol=1e-6)
    # first order under create_graph=True is unchanged
    x = torch.randn(3, 8, requires_grad=True)
    (g1,) = torch.autograd.grad(fuseops.silu_and_mul(x).sum(), x, create_graph=True)
    ref = x.detach().clone().requires_grad_()
    (gr,) = torch.autograd.grad((torch.nn.functional.silu(ref[..., :4]) * ref[..., 4:]).sum(), ref)
    torch.testing.assert_close(g1.detach(), gr, rtol=1e-5, atol=1e-6)


def test_zero_rows_backward_through_sum():
    # .sum()'s gradient of an empty output is expanded (strides 0), and torch calls an empty tensor contiguous: the
    # backward had refused it ("dout: expected innermost stride 1"); x.grad is empty, as PyTorch's
    for call in (lambda x: fuseops.silu_and_mul(x), lambda x: fuseops.gelu_tanh_and_mul(x),
                 lambda x: fuseops.gelu_and_mul_split(x[..., :4], x[..., 4:]),
                 lambda x: flaggems.silu_and_mul(x[..., :4], x[..., 4:])):
        for shape in ((0, 8), (2, 0, 8)):
            x = torch.randn(*shape, requires_grad=True)
            call(x).sum().backward()
            assert x.grad is not None and x.grad.shape == x.shape


def test_backward_functions_refuse_what_autograd_tracks():
    d, g, u = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4)
    with pytest.raises(RuntimeError, match="silu_and_mul_backward: gate: requires grad"):
        fuseops.silu_and_mul_backward(d, g.clone().requires_grad_(), u)
    with pytest.raises(ValueError, match="gelu_and_mul_backward: dgate: expected a tensor that does not require grad"):
        fuseops.gelu_and_mul_backward(d, g, u, dgate=torch.empty(2, 4, requires_grad=True))
    with pytest.raises(ValueError, match="silu_and_mul: out: expected a tensor that does not require grad"):
        vllm.silu_and_mul(torch.empty(2, 4, requires_grad=True), torch.randn(2, 8))
    with pytest.raises(RuntimeError, match="silu_and_mul: input: requires grad"):
        vllm.silu_and_mul(torch.empty(2, 4), torch.randn(2, 8, requires_grad=True))


def test_scalar_arguments_from_a_new_users_pass():
    # an int past the float range, a device that is no int, a bool count; a tensor in a message is shown by its shape
    with pytest.raises(ValueError, match=r"^grouped_topk: routed_scaling_factor: expected a number in the float range"):
        fuseops.grouped_topk(torch.randn(2, 8), 1, 1, 2, True, 10 ** 400)
    with pytest.raises(ValueError, match=r"^check_errors: device: expected an int in \[-1, 2147483647\]"):
        fuseops.check_errors("cpu")
    with pytest.raises(ValueError, match=r"^clear_errors: device: expected an int in \[-1, 2147483647\], got True"):
        fuseops.clear_errors(True)
    # the C++ API's device is an int: a larger one wrapped (2**32 - 1 became -1, every device)
    for device in (2**31, 2**32 - 1):
        with pytest.raises(ValueError, match=r"^check_errors: device: expected an int in \[-1, 2147483647\]"):
            fuseops.check_errors(device)
        with pytest.raises(ValueError, match=rf"^clear_errors: device: expected -1 .* got {device}"):
            fuseops.ops.clear_errors(device)  # the raw op checks too
    ids = torch.zeros(2, 2, dtype=torch.int32)
    outs = (torch.empty(64, dtype=torch.int32), torch.empty(8, dtype=torch.int32), torch.empty(1, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^moe_align_block_size: num_experts: expected an int in \[1, 4096\], "
                                         r"got True"):
        vllm.moe_align_block_size(ids, True, 16, *outs)
    with pytest.raises(ValueError, match=r"^moe_align_block_size: block_size: expected an int in \[1, 1048576\], "
                                         r"got 0"):
        vllm.moe_align_block_size(ids, 4, 0, *outs)
    # tensors by name, and an int is a scalar: a one-element tensor with dims is a list of one
    with pytest.raises(ValueError, match=r"^moe_align_block_size: topk_ids: expected a torch.Tensor, got list"):
        vllm.moe_align_block_size([[0]], 4, 16, *outs)
    with pytest.raises(ValueError, match=r"^moe_align_block_size: num_experts: expected an int in \[1, 4096\], got a "
                                         r"tensor \[1\]"):
        vllm.moe_align_block_size(ids, torch.tensor([4]), 16, *outs)
    vllm.moe_align_block_size(ids, torch.tensor(4), 16, *outs)  # a 0-dim integer tensor is an int
    import numpy as np
    q = torch.randn(1, 4, 1, 8)
    g = torch.randn(1, 4, 1)
    out = fuseops.chunk_local_cumsum(g, 16, head_first=np.False_)  # numpy's False is FLA's default too
    assert torch.equal(out, fuseops.chunk_local_cumsum(g, 16))
    # numpy's bool (numpy.bool_, named numpy.bool from numpy 2) is a flag, never an int or a number
    o1, _ = fuseops.chunk_gated_delta_rule(q, q, q, g, g.sigmoid(), output_final_state=np.True_)
    assert torch.equal(o1, fuseops.chunk_gated_delta_rule(q, q, q, g, g.sigmoid(), output_final_state=True)[0])
    bad_chunk = r"^chunk_gated_delta_rule: chunk_size: expected 16, 32 or 64, got (np\.)?True_?$"
    with pytest.raises(ValueError, match=bad_chunk):
        fuseops.chunk_gated_delta_rule(q, q, q, g, g.sigmoid(), chunk_size=np.True_)
    for flag in (np.True_, torch.tensor(True)):  # a bool tensor is no number either
        with pytest.raises(ValueError, match=r"^grouped_topk: routed_scaling_factor: expected a number"):
            fuseops.grouped_topk(torch.randn(2, 8), 1, 1, 2, True, flag)
    with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule: chunk_size: expected 16, 32 or 64"):
        fuseops.chunk_gated_delta_rule(q, q, q, g, g.sigmoid(), chunk_size=torch.tensor(True))
    with pytest.raises(ValueError, match=r"got a tensor \[1, 4, 1, 8\] torch.float32$"):
        fuseops.chunk_gated_delta_rule(q, q, q, g, g, gk=q)


def test_vmap_is_the_per_example_fallback_or_an_error():
    # README: no batching rule. A functional op runs torch's per-example fallback (the values of a loop; torch logs a
    # performance message on stderr); an op that writes tensors (the norms, the activations' backward) raises torch's
    # "Batching rule not implemented"
    vmap = getattr(torch, "vmap", None)
    if vmap is None:
        vmap = pytest.importorskip("functorch").vmap
    x = torch.randn(3, 4, 16)
    batched = vmap(fuseops.silu_and_mul)(x)
    assert torch.equal(batched, torch.stack([fuseops.silu_and_mul(t) for t in x]))
    with pytest.raises(RuntimeError, match="Batching rule not implemented"):
        vmap(lambda t: fuseops.layer_norm_fwd(t, torch.ones(16))[0])(x)
    with pytest.raises(RuntimeError, match="Batching rule not implemented"):
        vmap(lambda d, g, u: fuseops.silu_and_mul_backward(d, g, u)[0])(x[..., :8], x[..., :8], x[..., 8:])
