"""Masked expert-major activations from PyTorch: only rows r < masked_m[e] are written, out-of-range counts are
clamped and recorded for check_errors(), errors name the argument."""

import pytest
from common import DEVICES, poisoned, randn, torch

import fuseops

F = torch.nn.functional


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("approximate", [None, "none", "tanh"])
def test_masked_activation_valid_rows_only(device, approximate):
    E, T, d = 5, 7, 24
    x = randn((E, T, 2 * d), torch.float32, device)
    m = torch.tensor([0, 7, 3, 9, -1], dtype=torch.int32, device=device)  # 9 > T_max, -1 < 0: recorded
    out = poisoned((E, T, d), torch.float32, device)
    if approximate is None:
        res = fuseops.silu_and_mul_masked(x, m, out=out)
        act = F.silu
    else:
        res = fuseops.gelu_and_mul_masked(x, m, approximate, out=out)
        act = lambda g: F.gelu(g, approximate=approximate)  # noqa: E731
    assert res is out
    with pytest.raises(ValueError, match=r"_masked: masked_m: .*index 3"):
        fuseops.check_errors()
    xd = x.double().cpu()
    ref = act(xd[..., :d]) * xd[..., d:]
    for e, n in enumerate([0, 7, 3, 7, 0]):
        o = out[e].cpu()
        assert torch.isnan(o[n:]).all(), f"expert {e}: a row past masked_m was written"
        if n:
            assert ((o[:n].double() - ref[e, :n]).abs() <= 1e-5 * (1 + ref[e, :n].abs())).all()
    fuseops.check_errors()  # cleared


def test_masked_errors():
    with pytest.raises(ValueError, match="silu_and_mul_masked: input: expected rank 3"):
        fuseops.silu_and_mul_masked(torch.randn(4, 8), torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="silu_and_mul_masked: masked_m: "):
        fuseops.silu_and_mul_masked(torch.randn(4, 2, 8), torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="gelu_and_mul_masked: approximate: "):
        fuseops.gelu_and_mul_masked(torch.randn(4, 2, 8), torch.zeros(4, dtype=torch.int32), "exact")
    # A list for masked_m and a positional out: ValueError naming the argument, not TypeError.
    with pytest.raises(ValueError, match="silu_and_mul_masked: masked_m: expected a torch.Tensor, got list"):
        fuseops.silu_and_mul_masked(torch.randn(4, 2, 8), [1, 2, 1, 0])
    x, m = torch.randn(4, 2, 8), torch.ones(4, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"silu_and_mul_masked: out: expected a keyword argument \(out=\.\.\.\)"):
        fuseops.silu_and_mul_masked(x, m, torch.empty(4, 2, 4))
    with pytest.raises(ValueError, match="gelu_and_mul_masked: approximate: .*out is keyword-only"):
        fuseops.gelu_and_mul_masked(x, m, torch.empty(4, 2, 4))
