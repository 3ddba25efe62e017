"""Gated norm from PyTorch: parity with a plain-PyTorch float64 formula (FLA's math), FLA's signatures and
statistics layout, errors."""

import pytest
from common import DEVICES, poisoned, randn, torch

import fuseops

F = torch.nn.functional
TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}  # relative RMS: a few output roundings


def reference(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm):
    """(y, mean, rstd) in float64 from the op's own inputs; mean/rstd group-major [ngroups * M]."""
    N = x.shape[-1]
    G = N if group_size is None else group_size
    xd = x.double().cpu().reshape(-1, N // G, G)
    zd = None if z is None else z.double().cpu().reshape(-1, N // G, G)
    if zd is not None and not norm_before_gate:
        xd = xd * F.silu(zd)
    mean = torch.zeros(xd.shape[:2], dtype=torch.float64) if is_rms_norm else xd.mean(-1)
    xc = xd - mean[..., None]
    rstd = 1 / torch.sqrt((xc * xc).mean(-1) + eps)
    y = (xc * rstd[..., None]).reshape(-1, N) * weight.double().cpu()
    if bias is not None:
        y = y + bias.double().cpu()
    if zd is not None and norm_before_gate:
        y = y * F.silu(zd.reshape(-1, N))
    return y.reshape(x.shape), mean.T.reshape(-1), rstd.T.reshape(-1)


def rel(out, ref):
    return ((out.double().cpu() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("is_rms_norm", [True, False])
@pytest.mark.parametrize("gate", [None, True, False], ids=["nogate", "after", "before"])
def test_layer_norm_fwd_matches_reference(device, dtype, is_rms_norm, gate):
    x = randn((3, 5, 256), dtype, device)
    z = None if gate is None else randn((3, 5, 256), dtype, device)
    w = randn((256,), torch.float32, device) * 0.1 + 1
    b = randn((256,), torch.float32, device) * 0.1
    out, mean, rstd = fuseops.layer_norm_fwd(x, w, b, 1e-6, z=z, group_size=64, norm_before_gate=bool(gate),
                                             is_rms_norm=is_rms_norm)
    y, m, r = reference(x, w, b, z, 1e-6, 64, bool(gate), is_rms_norm)
    assert out.dtype == dtype and out.shape == x.shape
    assert rel(out, y) < TOL[dtype]
    assert mean is None if is_rms_norm else rel(mean, m) < 1e-6
    assert rstd.dtype == torch.float32 and rstd.shape == (4 * 15,) and rel(rstd, r) < 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_fla_functions_and_qwen3_next_shape(device):
    # Qwen3-Next GDN output norm: per value head (128), SiLU(z) after the norm, bf16, weight in the model dtype.
    x, z = randn((4, 32 * 128), torch.bfloat16, device), randn((4, 32 * 128), torch.bfloat16, device)
    w = (randn((32 * 128,), torch.float32, device) * 0.1 + 1).bfloat16()
    y = fuseops.rmsnorm_fn(x, w, None, z=z, eps=1e-6, group_size=128)
    ref, _, _ = reference(x, w, None, z, 1e-6, 128, True, True)
    assert rel(y, ref) < TOL[torch.bfloat16]
    # Groups of 128 with one weight per head equal rows of 128 (vLLM's form: [T * HV, V], group_size=None), bitwise.
    wh = w[:128]
    grouped = fuseops.rmsnorm_fn(x, wh.repeat(32), None, z=z, eps=1e-6, group_size=128)
    rows = fuseops.rmsnorm_fn(x.view(-1, 128), wh, None, z=z.view(-1, 128), eps=1e-6)
    assert torch.equal(grouped.view(-1, 128), rows)
    # layernorm_fn with a bias equals layer_norm_fwd's output, bitwise.
    b = randn((32 * 128,), torch.bfloat16, device)
    a = fuseops.layernorm_fn(x, w, b, z=z, norm_before_gate=False)
    o, _, _ = fuseops.layer_norm_fwd(x, w, b, z=z, norm_before_gate=False)
    assert torch.equal(a, o)


@pytest.mark.parametrize("device", DEVICES)
def test_out_and_strided_rows(device):
    big = randn((6, 300), torch.bfloat16, device)
    x = big[:, 10:138]  # rows 300 apart
    w = torch.ones(128, dtype=torch.bfloat16, device=device)
    out = poisoned((6, 128), torch.bfloat16, device)
    res, _, rstd = fuseops.layer_norm_fwd(x, w, None, 1e-5, out=out, is_rms_norm=True)
    assert res is out
    ref, _, r = reference(x, w, None, None, 1e-5, None, True, True)
    assert rel(out, ref) < TOL[torch.bfloat16] and rel(rstd, r) < 1e-6


def test_errors_and_forward_only():
    x, w = torch.randn(4, 64), torch.randn(64)
    with pytest.raises(ValueError, match="layer_norm_fwd: group_size: "):
        fuseops.layer_norm_fwd(x, w, group_size=24)
    with pytest.raises(ValueError, match="layer_norm_fwd: weight: "):
        fuseops.layer_norm_fwd(x, torch.randn(63))
    with pytest.raises(ValueError, match="layer_norm_fwd: z: "):
        fuseops.layer_norm_fwd(x, w, z=torch.randn(4, 32))
    with pytest.raises(ValueError, match=r"^layernorm_fn: group_size: expected an int >= 0, got -1"):
        fuseops.layernorm_fn(x, w, None, group_size=-1)
    # group_size 0 is None (N), as in the C++ API and its message for a bad group_size
    assert torch.equal(fuseops.layernorm_fn(x, w, None, group_size=0), fuseops.layernorm_fn(x, w, None))
    with pytest.raises(ValueError,
                       match=r"^layernorm_fn: group_size: .*2\*\*63 - 1\] \(int64\), got 9223372036854775808"):
        fuseops.layernorm_fn(x, w, None, group_size=2**63)
    # Errors name the function the user called, the library's checks included.
    with pytest.raises(ValueError, match="rmsnorm_fn: group_size: expected 0 "):
        fuseops.rmsnorm_fn(x, w, None, group_size=24)
    with pytest.raises(ValueError, match=r"^rmsnorm_fn: weight: expected shape \[N\] = \[64\], got \[16\]"):
        fuseops.rmsnorm_fn(x, w[:16], None)
    # a weight / bias of another float dtype is read as f32, as FLA's kernel reads it: the same bytes as an f32 one
    wh, bh = w.half(), torch.randn(64).bfloat16()
    assert torch.equal(fuseops.layernorm_fn(x, wh, bh), fuseops.layernorm_fn(x, wh.float(), bh.float()))
    assert torch.equal(fuseops.layer_norm_fwd(x, wh)[0], fuseops.layer_norm_fwd(x, wh.float())[0])
    with pytest.raises(ValueError, match=r"^layernorm_fn: weight: expected dtype f32 \(the dtype of x\), got i32"):
        fuseops.layernorm_fn(x, w.int(), None)
    # flags are bools, eps a number finite in fp32, group_size an int (numpy ints too)
    for kwargs, name in (({"is_rms_norm": "False"}, "is_rms_norm"), ({"norm_before_gate": "False"}, "norm_before_gate"),
                         ({"eps": "1e-3"}, "eps"), ({"eps": True}, "eps"), ({"eps": None}, "eps")):
        with pytest.raises(ValueError, match=f"^layernorm_fn: {name}: expected a"):
            fuseops.layernorm_fn(x, w, None, **kwargs)
    with pytest.raises(ValueError, match="layer_norm_fwd: eps: expected a value >= 0, finite in fp32"):
        fuseops.layer_norm_fwd(x, w, eps=1e300)
    with pytest.raises(ValueError, match="rmsnorm_fn: bias: expected a torch.Tensor or None"):
        fuseops.rmsnorm_fn(x, w, "b")
    np = pytest.importorskip("numpy")
    assert torch.equal(fuseops.layer_norm_fwd(x, w, group_size=np.int64(16))[0],
                       fuseops.layer_norm_fwd(x, w, group_size=16)[0])
    with pytest.raises(RuntimeError, match="^rmsnorm_fn: .*forward only"):
        fuseops.rmsnorm_fn(x.requires_grad_(), w, None)
    with torch.no_grad():
        fuseops.rmsnorm_fn(x, w, None)


def test_out_that_requires_grad_is_refused():
    x, w = torch.randn(2, 8), torch.ones(8)
    with pytest.raises(ValueError, match=r"^layer_norm_fwd: out: expected a tensor that does not require grad"):
        fuseops.layer_norm_fwd(x, w, out=torch.empty(2, 8, requires_grad=True))


@pytest.mark.parametrize("device", DEVICES)
def test_fla_functions_copy_views_the_op_does_not_take(device, monkeypatch):
    # FLA's LayerNormFn reads any view (input_guard makes it contiguous); rmsnorm_fn / layernorm_fn take those as a
    # contiguous copy: the same bytes as the contiguous call. layer_norm_fwd keeps FLA's layer_norm_fwd rule.
    w = randn((128,), torch.float32, device) * 0.1 + 1
    base = randn((2, 7, 131), torch.bfloat16, device)
    views = {
        "leading dims": base[:, :3, :128],                                    # rows 131 apart, planes 917: no one stride
        "innermost": randn((128, 5), torch.bfloat16, device).t(),
        "expanded": randn((1, 128), torch.bfloat16, device).expand(5, -1),  # overlapping rows
    }
    for name, x in views.items():
        z = torch.flip(x.contiguous(), [0])
        for fn, kwargs in ((fuseops.rmsnorm_fn, {}), (fuseops.layernorm_fn, {"norm_before_gate": False})):
            got = fn(x, w, None, z=z, group_size=64, **kwargs)
            want = fn(x.contiguous(), w, None, z=z, group_size=64, **kwargs)
            assert got.shape == x.shape and got.is_contiguous() and torch.equal(got, want), name
            assert torch.equal(fn(z, w, None, z=x, **kwargs), fn(z, w, None, z=x.contiguous(), **kwargs)), name
        with pytest.raises(ValueError, match="^layer_norm_fwd: x: "):
            fuseops.layer_norm_fwd(x, w, is_rms_norm=True)
    x = randn((5, 64), torch.bfloat16, device)
    wide = randn((128,), torch.float32, device)
    assert torch.equal(fuseops.rmsnorm_fn(x, wide[::2], wide[1::2]),
                       fuseops.rmsnorm_fn(x, wide[::2].contiguous(), wide[1::2].contiguous()))
    # rows of a wider buffer (and size-1 dims of any stride) are read in place, not copied: the same bytes
    seen = []
    op = fuseops.norm._layer_norm_fwd
    monkeypatch.setattr(fuseops.norm, "_layer_norm_fwd", lambda *args: seen.append(args[3].data_ptr()) or op(*args))
    for rows in (base.reshape(14, 131)[:, :128], base.reshape(14, 131)[:, None, 3:131].transpose(0, 1)):
        assert torch.equal(fuseops.rmsnorm_fn(rows, w, None), fuseops.rmsnorm_fn(rows.contiguous(), w, None))
        assert seen[-2] == rows.data_ptr() and seen[-1] != rows.data_ptr()
