"""CUDA behaviour: capture and replay in a CUDA graph, the current (non-default) stream, the device guard."""

import pytest
from common import assert_close, poisoned, randn, reference_backward, reference_forward, requires_cuda, torch

import fuseops

pytestmark = requires_cuda


def test_cuda_graph_capture_and_replay():
    rows, d = 64, 1000
    x = randn((rows, 2 * d), torch.bfloat16, "cuda")
    out = poisoned((rows, d), torch.bfloat16, "cuda")
    gate, up, dout = (randn((rows, d), torch.float16, "cuda") for _ in range(3))
    dgate, dup = poisoned((rows, d), torch.float16, "cuda"), poisoned((rows, d), torch.float16, "cuda")

    def work():
        fuseops.gelu_and_mul(x, "tanh", out=out)
        allocated = fuseops.silu_and_mul(x)  # during capture: an output from the graph's pool
        fuseops.silu_and_mul_backward(dout, gate, up, dgate=dgate, dup=dup)
        return allocated

    # Warm up on a side stream (as torch.cuda.graph's docs ask: kernels load outside the capture), then capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        work()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        allocated = work()
    for _ in range(3):
        x.copy_(randn((rows, 2 * d), torch.bfloat16, "cuda"))
        dout.copy_(randn((rows, d), torch.float16, "cuda"))
        for t in (out, allocated, dgate, dup):
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, reference_forward(x[:, :d], x[:, d:], "tanh")[0], "out")
        assert_close(allocated, reference_forward(x[:, :d], x[:, d:], None)[0], "allocated")
        ref = reference_backward(dout, gate, up, None)
        assert_close(dgate, ref[0], "dgate")
        assert_close(dup, ref[1], "dup")


def test_runs_on_the_current_stream():
    """The op must run on torch's current stream: on a side stream, after a long kernel that then writes the input.
    Run anywhere else (the legacy default stream does not wait for a non-blocking side stream) it would read the
    old input."""
    rows, d = 256, 4096
    x = randn((rows, 2 * d), torch.bfloat16, "cuda")
    x_new = randn((rows, 2 * d), torch.bfloat16, "cuda")
    raw_out = poisoned((rows, d), torch.bfloat16, "cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the write below
        x.copy_(x_new)
        out = fuseops.silu_and_mul(x)
        fuseops.ops.gelu_and_mul(raw_out, x, "none")
    side.synchronize()
    assert_close(out, reference_forward(x_new[:, :d], x_new[:, d:], None)[0], "functional")
    assert_close(raw_out, reference_forward(x_new[:, :d], x_new[:, d:], "none")[0], "raw op")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_device_guard_second_device():
    """Tensors on cuda:1 while cuda:0 is current: the op runs on cuda:1, on cuda:1's current stream."""
    with torch.cuda.device(0):
        x = randn((8, 64), torch.float32, "cuda:1")
        y = fuseops.silu_and_mul(x)
        assert y.device == x.device
        assert torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    assert_close(y, reference_forward(x[:, :32], x[:, 32:], None)[0])


def test_check_errors_on_device():
    fuseops.clear_errors(0)
    fuseops.check_errors(0)
    fuseops.check_errors()


def test_cuda_graph_norm_and_masked():
    """layer_norm_fwd (statistics allocated inside the capture) and silu_and_mul_masked (masked_m read on the device
    at replay: changing it between replays changes which rows are written)."""
    x, z = randn((64, 4096), torch.bfloat16, "cuda"), randn((64, 4096), torch.bfloat16, "cuda")
    w = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
    xm = randn((4, 16, 64), torch.float32, "cuda")
    m = torch.tensor([16, 0, 5, 1], dtype=torch.int32, device="cuda")
    om = poisoned((4, 16, 32), torch.float32, "cuda")

    def work():
        fuseops.silu_and_mul_masked(xm, m, out=om)
        return fuseops.layer_norm_fwd(x, w, None, 1e-6, z=z, group_size=128, is_rms_norm=True)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        work()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, _, rstd = work()
    for counts in ([16, 0, 5, 1], [0, 3, 16, 2]):
        m.copy_(torch.tensor(counts, dtype=torch.int32))
        om.fill_(float("nan"))
        x.copy_(randn((64, 4096), torch.bfloat16, "cuda"))
        graph.replay()
        torch.cuda.synchronize()
        eager, _, eager_rstd = fuseops.layer_norm_fwd(x, w, None, 1e-6, z=z, group_size=128, is_rms_norm=True)
        assert torch.equal(out, eager) and torch.equal(rstd, eager_rstd)  # deterministic: same bits
        ref = fuseops.silu_and_mul(xm)
        for e, n in enumerate(counts):
            assert torch.equal(om[e, :n], ref[e, :n]), f"expert {e}"
            assert torch.isnan(om[e, n:]).all(), f"expert {e}: a row past masked_m was written"
