"""GDN intra-chunk ops from PyTorch: parity with a plain-PyTorch float64 reference (per-chunk inverse with
torch.linalg), fused == unfused bytes, varlen, opcheck, CUDA graphs, errors."""

import pytest
from common import DEVICES, requires_opcheck, torch

import fuseops

F = torch.nn.functional


def make_inputs(B, T, H, HV, K, device, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    k = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1).to(dtype).to(device)
    graw = F.logsigmoid(torch.randn(B, T, HV, generator=gen)).to(device)
    beta = torch.rand(B, T, HV, generator=gen).sigmoid().to(dtype).to(device)
    return k, graw, beta


def chunks(T, BT, cu_seqlens):
    bounds = [(0, T)] if cu_seqlens is None else list(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()))
    for bos, eos in bounds:
        for s in range(bos, eos, BT):
            yield s, min(s + BT, eos)


def reference(k, g, beta, BT, cu_seqlens=None):
    """float64 (A, Ai) with the op's layout, from the op's own inputs."""
    B, T, H, K = k.shape
    HV = g.shape[2] if g is not None else beta.shape[2] if beta is not None else H
    kd = k.double().cpu()
    gd = g.double().cpu() if g is not None else torch.zeros(B, T, HV, dtype=torch.float64)
    bd = beta.double().cpu() if beta is not None else torch.ones(B, T, HV, dtype=torch.float64)
    A = torch.zeros(B, T, HV, BT, dtype=torch.float64)
    Ai = torch.zeros(B, T, HV, BT, dtype=torch.float64)
    for b in range(B):
        for s, e in chunks(T, BT, cu_seqlens):
            L = e - s
            for h in range(HV):
                kk = kd[b, s:e, h // (HV // H)]
                gram = kk @ kk.T
                gg = gd[b, s:e, h]
                m = torch.tril(bd[b, s:e, h, None] * gram * torch.exp(gg[:, None] - gg[None, :]).nan_to_num(0), -1)
                A[b, s:e, h, :L] = m
                Ai[b, s:e, h, :L] = torch.linalg.inv(torch.eye(L, dtype=torch.float64) + m)
    return A, Ai


def rel_rms(out, ref):
    return ((out.double().cpu() - ref).norm() / ref.norm()).item()


TOL = {torch.float32: 1e-5, torch.bfloat16: 5e-3, torch.float16: 5e-3}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("BT", [16, 32, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kkt_solve_matches_reference_and_unfused(device, BT, dtype):
    k, graw, beta = make_inputs(2, 100, 2, 4, 60, device, dtype)
    g = fuseops.chunk_local_cumsum(graw, BT)
    A_ref, Ai_ref = reference(k, g, beta, BT)
    A = fuseops.chunk_scaled_dot_kkt_fwd(k, g, beta, chunk_size=BT)
    assert rel_rms(A, A_ref) < 1e-5
    Ai = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, g, beta, chunk_size=BT)
    assert Ai.dtype == dtype
    assert rel_rms(Ai, Ai_ref) < TOL[dtype]
    unfused = fuseops.solve_tril(A, output_dtype=dtype)
    bits = torch.int16 if dtype != torch.float32 else torch.int32
    assert torch.equal(Ai.view(bits), unfused.view(bits))  # bytewise: the fused op equals the unfused chain


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_and_defaults(device):
    cu = torch.tensor([0, 0, 5, 70, 70, 200], dtype=torch.int32, device=device)
    k, graw, beta = make_inputs(1, 200, 2, 2, 64, device, torch.float32)
    g = fuseops.chunk_local_cumsum(graw, 64, cu_seqlens=cu)
    Ai = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, g, beta, cu_seqlens=cu)
    _, Ai_ref = reference(k, g, beta, 64, cu.cpu())
    assert rel_rms(Ai, Ai_ref) < 1e-5
    # no gate, no beta
    Ai = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, cu_seqlens=cu)
    _, Ai_ref = reference(k, None, None, 64, cu.cpu())
    assert rel_rms(Ai, Ai_ref) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_cumsum(device):
    g = torch.randn(2, 70, 3, device=device)
    out = fuseops.chunk_local_cumsum(g, 32, reverse=True, scale=0.5)
    ref = torch.zeros(2, 70, 3, dtype=torch.float64)
    gd = g.double().cpu()
    for s in range(0, 70, 32):
        e = min(s + 32, 70)
        ref[:, s:e] = 0.5 * gd[:, s:e].flip(1).cumsum(1).flip(1)
    assert rel_rms(out, ref) < 1e-6


def test_errors():
    k, graw, beta = make_inputs(1, 64, 2, 2, 32, "cpu")
    with pytest.raises(ValueError, match="chunk_size"):
        fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, None, beta, chunk_size=48)
    with pytest.raises(ValueError, match="chunk_indices"):
        fuseops.solve_tril(torch.zeros(1, 64, 2, 64), chunk_indices=torch.zeros(1))
    with pytest.raises(ValueError, match=r"^chunk_scaled_dot_kkt_fwd: k: "):
        fuseops.chunk_scaled_dot_kkt_fwd(k[0])
    with pytest.raises(ValueError, match="HV|heads"):
        fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, None, torch.rand(1, 64, 3))


@requires_opcheck
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    k, graw, beta = make_inputs(1, 70, 2, 2, 32, device, torch.float32)
    g = fuseops.chunk_local_cumsum(graw, 32)
    ops = fuseops.ops
    torch.library.opcheck(ops.chunk_local_cumsum.default, (torch.empty_like(g), graw, 32))
    A = torch.empty(1, 70, 2, 32, device=device)
    torch.library.opcheck(ops.chunk_scaled_dot_kkt_fwd.default, (A, k, g, beta, 32))
    torch.library.opcheck(ops.solve_tril.default, (torch.empty_like(A), A.zero_()))
    torch.library.opcheck(ops.chunk_gated_delta_rule_fwd_kkt_solve.default, (torch.empty_like(A), k, g, beta, 32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_graph_capture():
    k, graw, beta = make_inputs(1, 256, 2, 2, 128, "cuda")
    g = fuseops.chunk_local_cumsum(graw, 64)
    cu = torch.tensor([0, 100, 256], device="cuda")
    eager = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, g, beta, cu_seqlens=cu)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, g, beta, cu_seqlens=cu)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
