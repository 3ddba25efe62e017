"""torch.library.opcheck on the activation and gated-norm ops (schema and alias annotations, fake kernels, AOT dispatch),
on CPU and CUDA. The other ops: test_gdn.py (intra-chunk), test_rope.py, test_opcheck_recorded.py (GDN forward and
decode, MoE routing)."""

import pytest
from common import DEVICES, poisoned, randn, requires_opcheck, torch

import fuseops

pytestmark = requires_opcheck

ops = fuseops.ops


def samples(device, dtype=torch.bfloat16, rows=7, d=40):
    """(op, args, kwargs) for every tensor op; outputs poisoned with NaN."""
    x = randn((rows, 2 * d), dtype, device)
    gate, up, dout = (randn((rows, d), dtype, device) for _ in range(3))

    def out():
        return poisoned((rows, d), dtype, device)

    # Gated norm: [rows, 2d] in groups of d / 2, float32 weight and bias [2d]; statistics [4 * rows].
    xn, zn = randn((rows, 2 * d), dtype, device), randn((rows, 2 * d), dtype, device)
    w, b = randn((2 * d,), torch.float32, device), randn((2 * d,), torch.float32, device)

    def stat():
        return poisoned((4 * rows,), torch.float32, device)

    # Masked: 3 experts of rows // 2 + 1 rows; zeros rather than NaN past masked_m (those rows are never written).
    tm = rows // 2 + 1
    xm = randn((3, tm, 2 * d), dtype, device)
    masked_m = torch.tensor([tm, 0, tm // 2], dtype=torch.int32, device=device)

    return [
        (ops.silu_and_mul.default, (out(), x), {}),
        (ops.gelu_and_mul.default, (out(), x), {}),
        (ops.gelu_and_mul.default, (out(), x), {"approximate": "tanh"}),
        (ops.gelu_tanh_and_mul.default, (out(), x), {}),
        (ops.silu_and_mul_split.default, (out(), gate, up), {}),
        (ops.gelu_and_mul_split.default, (out(), gate, up), {"approximate": "none"}),
        (ops.gelu_and_mul_split.default, (out(), gate, up, "tanh"), {}),
        (ops.silu_and_mul_backward.default, (out(), out(), dout, gate, up), {}),
        (ops.gelu_and_mul_backward.default, (out(), out(), dout, gate, up), {}),
        (ops.gelu_and_mul_backward.default, (out(), out(), dout, gate, up, "tanh"), {}),
        (ops.layer_norm_fwd.default, (poisoned((rows, 2 * d), dtype, device), stat(), stat(), xn, w, b),
         {"group_size": d // 2}),
        (ops.layer_norm_fwd.default, (poisoned((rows, 2 * d), dtype, device), None, stat(), xn, w, None, zn),
         {"group_size": d // 2, "is_rms_norm": True}),
        (ops.silu_and_mul_masked.default, (torch.zeros((3, tm, d), dtype=dtype, device=device), xm, masked_m), {}),
        (ops.gelu_and_mul_masked.default, (torch.zeros((3, tm, d), dtype=dtype, device=device), xm, masked_m, "tanh"),
         {}),
        (ops.silu_and_mul.functional, (x,), {}),
        (ops.gelu_and_mul.functional, (x,), {"approximate": "tanh"}),
        (ops.gelu_tanh_and_mul.functional, (x,), {}),
        (ops.silu_and_mul_split.functional, (gate, up), {}),
        (ops.gelu_and_mul_split.functional, (gate, up, "none"), {}),
    ]


def sample_id(sample):
    op, args, kwargs = sample
    return f"{str(op)}-{len(args)}args-{'-'.join(map(str, kwargs.values())) or 'default'}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index", range(len(samples("cpu"))), ids=[sample_id(s) for s in samples("cpu")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck(device, index, dtype):
    op, args, kwargs = samples(device, dtype)[index]
    torch.library.opcheck(op, args, kwargs)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_zero_rows(device):
    op, args, kwargs = samples(device, rows=0)[0]
    torch.library.opcheck(op, args, kwargs)


@pytest.mark.parametrize("op", ["check_errors", "clear_errors"])
def test_opcheck_no_tensor_ops(op):
    # No tensors: the autograd-registration and AOT-dispatch checks have nothing to check.
    torch.library.opcheck(getattr(ops, op).default, (-1,), test_utils=("test_schema", "test_faketensor"))


def test_every_op_has_a_fake():
    from fuseops import _fake

    assert _fake.registered
    for name in list(_fake.OPS) + list(_fake.FUNCTIONAL):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fuseops::{name}", "Meta"), name
