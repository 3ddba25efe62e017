"""GDN forward from PyTorch: chunk_gated_delta_rule and the decode forms against a plain-PyTorch float64 token
recurrence (relative RMS <= 5e-3 for 16-bit inputs, 1e-4 for float32: docs/ops/gdn.md), varlen with empty
sequences, prefill-then-decode, the state pool, unsupported FLA keyword arguments, CUDA-graph capture; vLLM's order
(fuseops.compat.vllm.chunk_gated_delta_rule) with its per-chunk states against the recurrence at chunk starts."""

import pytest
from common import DEVICES, requires_cuda, torch

import fuseops
from fuseops.compat import vllm

F = torch.nn.functional


def recurrence(q, k, v, g, beta, h0, scale, cu_seqlens=None, l2norm=False, chunk=None):
    """float64 token recurrence (include/fuseops/gdn_forward.h); returns (o, final_state), and with ``chunk`` (a chunk
    size) also the state at the start of every chunk, before its tokens: [chunks, HV, K, V], sequence by sequence
    (batch-major without cu_seqlens), ceil(L / chunk) chunks for a sequence of L tokens."""
    q, k, v, g, beta = (x.double().cpu() for x in (q, k, v, g, beta))
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    bounds = [(b, 0, T) for b in range(B)] if cu_seqlens is None else [
        (0, s, e) for s, e in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())]
    o = torch.zeros(B, T, HV, V, dtype=torch.float64)
    ht = torch.zeros(len(bounds), HV, K, V, dtype=torch.float64)
    starts = []
    for n, (b, s, e) in enumerate(bounds):
        starts.append(torch.zeros(len(range(s, e, chunk)) if chunk else 0, HV, K, V, dtype=torch.float64))
        for h in range(HV):
            hk = h // (HV // H)
            S = h0[n, h].double().cpu().clone() if h0 is not None else torch.zeros(K, V, dtype=torch.float64)
            for t in range(s, e):
                if chunk and (t - s) % chunk == 0:
                    starts[-1][(t - s) // chunk, h] = S
                S = S * torch.exp(g[b, t, h])
                vp = beta[b, t, h] * (v[b, t, h] - S.T @ k[b, t, hk])
                S = S + torch.outer(k[b, t, hk], vp)
                o[b, t, h] = scale * (S.T @ q[b, t, hk])
            ht[n, h] = S
    if chunk is None:
        return o, ht
    return o, ht, torch.cat(starts) if starts else torch.zeros(0, HV, K, V, dtype=torch.float64)


def rel_rms(x, ref):
    x = x.double().cpu()
    return ((x - ref).norm() / ref.norm()).item()


def inputs(B, T, H, HV, K, V, dtype, device, N=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen).to(dtype).to(device)
    k = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1).to(dtype).to(device)
    v = torch.randn(B, T, HV, V, generator=gen).to(dtype).to(device)
    g = F.logsigmoid(torch.randn(B, T, HV, generator=gen)).to(device)
    beta = torch.rand(B, T, HV, generator=gen).to(device)
    h0 = (0.5 * torch.randn(N or B, HV, K, V, generator=gen)).to(device)
    return q, k, v, g, beta, h0


def limit(dtype):
    return 1e-4 if dtype == torch.float32 else 5e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunk_matches_recurrence(device, dtype):
    q, k, v, g, beta, h0 = inputs(2, 75, 2, 4, 32, 16, dtype, device)
    o, ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    ro, rht = recurrence(q, k, v, g, beta, h0, 32 ** -0.5)
    assert o.dtype == dtype and ht.dtype == torch.float32
    assert rel_rms(o, ro) <= limit(dtype) and rel_rms(ht, rht) <= limit(dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_empty_sequences_and_l2norm(device):
    lens = [0, 5, 64, 0, 70]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
    q, k, v, g, beta, h0 = inputs(1, sum(lens), 1, 2, 32, 32, torch.bfloat16, device, N=len(lens))
    q, k = q * 3, k * 3  # unnormalised: the kernel normalises
    o, ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                           use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    ro, rht = recurrence(q, k, v, g, beta, h0, 32 ** -0.5, cu, l2norm=True)
    assert rel_rms(o, ro) <= 5e-3 and rel_rms(ht, rht) <= 5e-3
    assert torch.equal(ht[0], h0[0]) and torch.equal(ht[3], h0[3])  # empty sequences keep their state


@pytest.mark.parametrize("device", DEVICES)
def test_prefill_then_decode_and_pool(device):
    q, k, v, g, beta, h0 = inputs(1, 41, 1, 2, 32, 32, torch.float32, device)
    ro, rht = recurrence(q, k, v, g, beta, h0, 32 ** -0.5)
    _, ht = fuseops.chunk_gated_delta_rule(q[:, :40], k[:, :40], v[:, :40], g[:, :40], beta[:, :40],
                                           initial_state=h0, output_final_state=True)
    o1, ht1 = fuseops.fused_recurrent_gated_delta_rule(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:],
                                                       initial_state=ht, output_final_state=True)
    assert rel_rms(o1, ro[:, 40:]) <= 1e-4 and rel_rms(ht1, rht) <= 1e-4
    pool = torch.full((3, 2, 32, 32), float("nan"), device=device)
    pool[1] = ht[0]
    o2, _ = fuseops.fused_recurrent_gated_delta_rule(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:],
                                                     initial_state=pool, inplace_final_state=True,
                                                     ssm_state_indices=torch.tensor([1], device=device))
    assert rel_rms(o2, ro[:, 40:]) <= 1e-4 and rel_rms(pool[1:2], rht) <= 1e-4
    assert torch.isnan(pool[0]).all() and torch.isnan(pool[2]).all()
    # vLLM's default: with ssm_state_indices and no inplace_final_state, the pool is updated in place as well
    pool2 = torch.full((3, 2, 32, 32), float("nan"), device=device)
    pool2[1] = ht[0]
    o3, p3 = fuseops.fused_recurrent_gated_delta_rule(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:],
                                                      initial_state=pool2,
                                                      ssm_state_indices=torch.tensor([1], device=device))
    assert p3 is pool2 and torch.equal(o3, o2) and torch.equal(pool2[1], pool[1])
    # 16-bit pools (vLLM's --mamba-ssm-cache-dtype bfloat16 / float16): read as f32, the new state rounded to the pool
    for dtype, tol in ((torch.float16, 2e-3), (torch.bfloat16, 1e-2)):
        p16 = torch.full((3, 2, 32, 32), float("nan"), dtype=dtype, device=device)
        p16[1] = ht[0].to(dtype)
        o4, _ = fuseops.fused_recurrent_gated_delta_rule(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:],
                                                         initial_state=p16,
                                                         ssm_state_indices=torch.tensor([1], device=device))
        assert p16.dtype == dtype and rel_rms(o4, ro[:, 40:]) <= tol and rel_rms(p16[1:2].float(), rht) <= tol
        assert torch.isnan(p16[0]).all() and torch.isnan(p16[2]).all()
    # inplace_final_state=False with ssm_state_indices (vLLM: per-token states in a new tensor) is refused by name,
    # before anything is written; True without ssm_state_indices too
    before = pool2.clone()
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: inplace_final_state: False with "):
        fuseops.fused_recurrent_gated_delta_rule(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:],
                                                 initial_state=pool2, inplace_final_state=False,
                                                 ssm_state_indices=torch.tensor([1], device=device))
    assert torch.equal(pool2[1], before[1])
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: ssm_state_indices: expected a tensor"):
        fuseops.fused_recurrent_gated_delta_rule(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:],
                                                 initial_state=pool2, inplace_final_state=True)
    # indices without a pool: the error names the missing pool, not the indices given
    for kw in (dict(ssm_state_indices=torch.tensor([1], device=device)), dict(inplace_final_state=True)):
        with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: initial_state: expected the state "
                                             r"pool \[S, HV, K, V\] in the serving form .*got None$"):
            fuseops.fused_recurrent_gated_delta_rule(q[:, 40:], k[:, 40:], v[:, 40:], g[:, 40:], beta[:, 40:], **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_pool_indices_as_strided_views(device):
    # vLLM passes slot indices as views (block_table[:, 0], block_table[:, :num_spec + 1]): same result as contiguous
    q, k, v, g, beta, h0 = inputs(3, 1, 1, 2, 16, 16, torch.float32, device)
    table = torch.tensor([[2, 9], [0, 9], [4, 9]], device=device)
    pool = torch.randn(5, 2, 16, 16, device=device)
    pool_c = pool.clone()
    o, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, inplace_final_state=True,
                                                    ssm_state_indices=table[:, 0])
    o_c, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool_c, inplace_final_state=True,
                                                      ssm_state_indices=table[:, 0].contiguous())
    assert not table[:, 0].is_contiguous()
    assert torch.equal(o, o_c) and torch.equal(pool, pool_c)
    # fixed length T = 2 with [N, 1] per-token slots: a shape error, named, before anything runs
    q2, k2, v2, g2, b2, _ = inputs(3, 2, 1, 2, 16, 16, torch.float32, device)
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: ssm_state_indices: .*Tmax >= T"):
        fuseops.fused_recurrent_gated_delta_rule(q2, k2, v2, g2, b2, initial_state=pool, inplace_final_state=True,
                                                 ssm_state_indices=table[:, :1],
                                                 num_accepted_tokens=torch.ones(3, dtype=torch.int32, device=device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pool_in_padded_pages(device, dtype):
    # vLLM's state pools: torch.as_strided views into pages shared with the conv state (stride(0) = the page's
    # elements, the state after the conv state's bytes). Same o and states as a contiguous pool; the rest of each page
    # untouched. Both decode forms, the fused-gating one included.
    N, HV, K, V, slots = 3, 4, 64, 64, 6
    q, k, v, g, beta, _ = inputs(N, 1, 2, HV, K, V, torch.bfloat16, device)
    per, conv = HV * K * V, 40  # conv: the elements before the state in each page
    page = conv + per + 24
    raw = torch.randn(slots * page, device=device).to(dtype)
    pool = torch.as_strided(raw, (slots, HV, K, V), (page, K * V, V, 1), conv)
    assert not pool.is_contiguous()
    pool_c, raw_before = pool.clone(), raw.clone()
    idx = torch.tensor([4, -1, 1], device=device)
    o, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx)
    o_c, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool_c, ssm_state_indices=idx)
    assert torch.equal(o, o_c) and torch.equal(pool, pool_c)
    assert not torch.equal(pool[4], raw_before[4 * page + conv:4 * page + conv + per].view(HV, K, V))  # written
    outside = torch.ones(slots * page, dtype=torch.bool, device=device)
    for s in range(slots):
        outside[s * page + conv:s * page + conv + per] = False
    assert torch.equal(raw[outside], raw_before[outside])
    gen = torch.Generator().manual_seed(2)
    A_log, dt_bias = torch.randn(HV, generator=gen).to(device), torch.randn(HV, generator=gen).to(device)
    a, b = torch.randn(N, 1, HV, generator=gen).to(device), torch.randn(N, 1, HV, generator=gen).to(device)
    o2 = fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool, idx)
    o2_c = fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool_c, idx)
    assert torch.equal(o2, o2_c) and torch.equal(pool, pool_c)
    assert torch.equal(raw[outside], raw_before[outside])
    # slots that overlap are refused by name, before anything is written
    overlapping = torch.as_strided(raw, (slots, HV, K, V), (per - V, K * V, V, 1))
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: initial_state: .*stride\(0\) >= HV K V"):
        fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=overlapping, ssm_state_indices=idx)


def _three_alone_and_zero_tail(o, pool, pool_3, q, k, v, g, beta, cu, idx):
    """o and pool of a padded step equal the first 3 sequences run alone (cu, idx: theirs), the tail o rows 0."""
    o_3, _ = fuseops.fused_recurrent_gated_delta_rule(q[:, :3], k[:, :3], v[:, :3], g[:, :3], beta[:, :3],
                                                      initial_state=pool_3, cu_seqlens=cu, ssm_state_indices=idx,
                                                      use_qk_l2norm_in_kernel=True)
    assert torch.equal(o[:, :3], o_3) and torch.equal(pool, pool_3)
    assert torch.equal(o[:, 3:], torch.zeros_like(o[:, 3:]))


def _raw_gates(HV, T, device, seed):
    """A_log, dt_bias [HV] and a, b [T, HV] of the fused sigmoid-gating form."""
    gen = torch.Generator().manual_seed(seed)
    A_log, dt_bias = torch.randn(HV, generator=gen).to(device), torch.randn(HV, generator=gen).to(device)
    return A_log, dt_bias, torch.randn(T, HV, generator=gen).to(device), torch.randn(T, HV, generator=gen).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("K", [32, 128])  # CUDA: the fallback kernel, the fast one
def test_padded_decode_step(device, K):
    # vLLM's CUDA-graph padded decode step: 3 decodes in a batch of 5, query_start_loc[4:] filled with 3, indices -1:
    # the same o rows and pool as the 3 alone, the 2 tail rows 0, nothing recorded; the FLA form still records it
    H, HV, V, T = 2, 4, 32, 5
    q, k, v, g, beta, _ = inputs(1, T, H, HV, K, V, torch.bfloat16, device)
    pool = torch.randn(4, HV, K, V, device=device)
    pool_3 = pool.clone()
    cu = torch.tensor([0, 1, 2, 3, 3, 3], dtype=torch.int32, device=device)
    idx = torch.tensor([0, 1, 2, -1, -1], dtype=torch.int32, device=device)
    fuseops.clear_errors()
    o, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                                    ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    fuseops.check_errors()
    _three_alone_and_zero_tail(o, pool, pool_3, q, k, v, g, beta, cu[:4], idx[:3])
    A_log, dt_bias, a, b = _raw_gates(HV, T, device, 3)
    o2 = fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool, idx,
                                                        cu_seqlens=cu)
    fuseops.check_errors()
    assert torch.equal(o2[:, 3:], torch.zeros_like(o2[:, 3:]))
    fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool[:3].clone(), cu_seqlens=cu[:4])
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: cu_seqlens: .*cu_seqlens\[N\] = T"):
        fuseops.check_errors()
    # the rest of the rule stands in the serving form: cu_seqlens[N] past T is recorded
    fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx[:3],
                                             cu_seqlens=torch.tensor([0, 1, 2, 6], dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match=r"cu_seqlens: .*cu_seqlens\[N\] <= T"):
        fuseops.check_errors()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("K", [32, 128])
def test_padded_decode_step_indices_of_the_whole_batch(device, K):
    # vLLM's layer passes cu_seqlens=query_start_loc[:num_decodes + 1] with the indices (and num_accepted_tokens) of
    # the whole padded batch (gdn_attn's builder fills their rows past num_decodes with -1 / 1): rows past N are never
    # read. Here they hold an out-of-range slot and a 0 count, which would be recorded if they were.
    H, HV, V, T = 2, 4, 32, 5
    q, k, v, g, beta, _ = inputs(1, T, H, HV, K, V, torch.bfloat16, device)
    pool = torch.randn(6, HV, K, V, device=device)
    pool_3 = pool.clone()
    cu = torch.tensor([0, 1, 2, 3], dtype=torch.int32, device=device)
    idx = torch.tensor([0, 1, 2, 99, 99], dtype=torch.int32, device=device)
    fuseops.clear_errors()
    o, _ = fuseops.fused_recurrent_gated_delta_rule(q=q, k=k, v=v, g=g, beta=beta, initial_state=pool,
                                                    inplace_final_state=True, cu_seqlens=cu, ssm_state_indices=idx,
                                                    use_qk_l2norm_in_kernel=True)
    fuseops.check_errors()
    _three_alone_and_zero_tail(o, pool, pool_3, q, k, v, g, beta, cu, idx[:3])
    A_log, dt_bias, a, b = _raw_gates(HV, T, device, 5)
    fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool, idx, cu_seqlens=cu)
    fuseops.check_errors()
    # speculative decoding: 2 sequences of 2 tokens in a batch of 4, [batch, Tmax] indices, num_accepted_tokens padded
    spec_cu = torch.tensor([0, 2, 4], dtype=torch.int32, device=device)
    spec_idx = torch.tensor([[0, 1], [2, 3], [99, 99], [99, 99]], dtype=torch.int32, device=device)
    accepted = torch.tensor([1, 2, 0, 0], dtype=torch.int32, device=device)
    spec_pool = pool.clone()
    o4, _ = fuseops.fused_recurrent_gated_delta_rule(q[:, :4], k[:, :4], v[:, :4], g[:, :4], beta[:, :4],
                                                     initial_state=spec_pool, cu_seqlens=spec_cu,
                                                     ssm_state_indices=spec_idx, num_accepted_tokens=accepted)
    fuseops.check_errors()
    want_pool = pool.clone()
    want, _ = fuseops.fused_recurrent_gated_delta_rule(q[:, :4], k[:, :4], v[:, :4], g[:, :4], beta[:, :4],
                                                       initial_state=want_pool, cu_seqlens=spec_cu,
                                                       ssm_state_indices=spec_idx[:2], num_accepted_tokens=accepted[:2])
    assert torch.equal(o4, want) and torch.equal(spec_pool, want_pool)
    # fewer rows than sequences stay an error naming the indices
    with pytest.raises(ValueError, match=r"ssm_state_indices: expected shape \[N'\] or \[N', Tmax\] with N' >= N = 3"):
        fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                                 ssm_state_indices=idx[:2])


def test_cu_seqlens_without_sequences_is_an_error():
    q, k, v, g, beta, _ = inputs(1, 10, 1, 2, 16, 16, torch.float32, "cpu")
    with pytest.raises(ValueError, match="chunk_gated_delta_rule: cu_seqlens"):
        fuseops.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=torch.tensor([0], dtype=torch.int32))


@pytest.mark.parametrize("device", DEVICES)
def test_sigmoid_gating_decode(device):
    N, HV = 4, 4
    q, k, v, _, _, _ = inputs(N, 1, 2, HV, 32, 32, torch.bfloat16, device)
    gen = torch.Generator().manual_seed(1)
    A_log, dt_bias = torch.randn(HV, generator=gen).to(device), torch.randn(HV, generator=gen).to(device)
    a, b = torch.randn(N, 1, HV, generator=gen).to(device), torch.randn(N, 1, HV, generator=gen).to(device)
    pool = torch.randn(6, HV, 32, 32, generator=gen).to(device)
    idx = torch.tensor([5, -1, 0, 2], dtype=torch.int32, device=device)
    start = pool.clone()
    o = fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool, idx,
                                                       use_qk_l2norm_in_kernel=True)
    g = -torch.exp(A_log.double()) * F.softplus(a.double() + dt_bias.double())
    beta = torch.sigmoid(b.double())
    h0 = torch.stack([start[i] if i >= 0 else torch.zeros_like(start[0]) for i in idx.tolist()])
    ro, rht = recurrence(q, k, v, g, beta, h0, 32 ** -0.5, l2norm=True)
    ro[1] = 0  # padding slot: o is 0
    assert rel_rms(o, ro) <= 5e-3
    for n, i in enumerate(idx.tolist()):
        if i >= 0:
            assert rel_rms(pool[i], rht[n]) <= 5e-3
    assert torch.equal(pool[1], start[1]) and torch.equal(pool[3], start[3]) and torch.equal(pool[4], start[4])
    # vLLM passes a, b as [num_tokens, HV]: the same as [N, 1, HV] for q [N, 1, H, K], bitwise.
    pool2 = start.clone()
    o2 = fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a[:, 0], dt_bias, 1.0, 20.0, q, k, v, b[:, 0], pool2,
                                                        idx, use_qk_l2norm_in_kernel=True)
    assert torch.equal(o2, o) and torch.equal(pool2, pool)
    with pytest.raises(ValueError, match=r"fused_sigmoid_gating_delta_rule_update: a: .*got \[3, 4\]"):
        fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a[:3, 0], dt_bias, 1.0, 20.0, q, k, v, b[:, 0], pool2,
                                                       idx)


@pytest.mark.parametrize("device", DEVICES)
def test_sigmoid_gating_decode_from_a_packed_projection(device):
    # vLLM's packed decode takes mixed_qkv [N, 2 H K + HV V] (one token per sequence): its q, k, v are views of it
    # (rows of the packed width, innermost stride 1), read in place by the op; the same bytes as contiguous copies
    # (docs/ops/gdn.md, "vLLM's packed decode")
    N, H, HV, K, V = 5, 2, 4, 32, 16
    gen = torch.Generator().manual_seed(3)
    mixed = torch.randn(N, 2 * H * K + HV * V, generator=gen).bfloat16().to(device)
    a, b = torch.randn(N, HV, generator=gen).to(device), torch.randn(N, HV, generator=gen).to(device)
    A_log, dt_bias = torch.randn(HV, generator=gen).to(device), torch.randn(HV, generator=gen).to(device)
    q, k, v = (t.view(N, 1, -1, d) for t, d in zip(mixed.split([H * K, H * K, HV * V], dim=-1), (K, K, V)))
    assert q.data_ptr() == mixed.data_ptr() and q.stride()[0] == mixed.shape[1] and q.stride()[2:] == (K, 1)
    pool = torch.randn(7, HV, K, V, generator=gen).to(device)
    idx = torch.tensor([6, 0, -1, 3, 2], device=device)
    pool_c = pool.clone()
    o = fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool, idx,
                                                       use_qk_l2norm_in_kernel=True)
    o_c = fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, q.contiguous(),
                                                         k.contiguous(), v.contiguous(), b, pool_c, idx,
                                                         use_qk_l2norm_in_kernel=True)
    assert torch.equal(o, o_c) and torch.equal(pool, pool_c)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_per_channel_beta(device, dtype):
    # FLA's per-channel beta [B, T, HV, V]: v'[j] = beta[j] (v[j] - (S^T k)[j]) (the reference's beta[b, t, h] is then
    # a vector of V). FLA form, varlen with an empty sequence; f32 and bf16 betas.
    cu = torch.tensor([0, 2, 2, 5, 6], dtype=torch.int32, device=device)
    q, k, v, g, _, h0 = inputs(1, 6, 1, 2, 32, 16, dtype, device, N=4)
    gen = torch.Generator().manual_seed(2)
    beta = torch.rand(1, 6, 2, 16, generator=gen).to(device)
    for b in (beta, beta.bfloat16()):
        o, ht = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, b, initial_state=h0, output_final_state=True,
                                                         cu_seqlens=cu)
        ro, rht = recurrence(q, k, v, g, b, h0, 32 ** -0.5, cu)
        assert rel_rms(o, ro) <= limit(dtype) and rel_rms(ht, rht) <= limit(dtype)
        assert torch.equal(ht[1], h0[1])  # the empty sequence keeps its state
    # pool form: [N, Tmax] indices with num_accepted_tokens, per-token writes, a padding (-1) start slot
    pool = torch.randn(8, 2, 32, 16, generator=gen).to(device)
    start = pool.clone()
    idx = torch.tensor([[4, 5, -1], [-1, -1, -1], [1, 6, 7], [3, -1, -1]], dtype=torch.int32, device=device)
    acc = torch.tensor([1, 1, 2, 1], dtype=torch.int32, device=device)  # start slots 4, -1, 6, 3
    o, p = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                                                    num_accepted_tokens=acc, cu_seqlens=cu)
    fuseops.check_errors()
    h0s = torch.stack([start[4], torch.zeros_like(start[0]), start[6], start[3]])
    ro, rht = recurrence(q, k, v, g, beta, h0s, 32 ** -0.5, cu)
    assert p is pool and rel_rms(o, ro) <= limit(dtype)
    for slot, n in ((5, 0), (7, 2), (3, 3)):  # each sequence's state after its last token
        assert rel_rms(pool[slot], rht[n]) <= limit(dtype)
    assert torch.equal(pool[0], start[0]) and torch.equal(pool[2], start[2])  # untouched slots


@pytest.mark.parametrize("device", DEVICES)
def test_decode_per_channel_beta_of_equal_columns_is_per_head(device):
    # every column's beta the head's: the per-head result, bit for bit on the CPU, to tolerance on CUDA (another kernel)
    q, k, v, g, beta, h0 = inputs(2, 3, 1, 2, 64, 32, torch.bfloat16, device)
    o, ht = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    wide = beta[..., None].expand(-1, -1, -1, 32).contiguous()
    o_c, ht_c = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, wide, initial_state=h0, output_final_state=True)
    if device == "cpu":
        assert torch.equal(o_c, o) and torch.equal(ht_c, ht)
    else:
        assert rel_rms(o_c, o.double().cpu()) <= 5e-3 and rel_rms(ht_c, ht.double().cpu()) <= 5e-3
    # the same beta broadcast over V (innermost stride 0), as FLA takes it: read as the contiguous copy
    o_b, ht_b = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta[..., None].expand(-1, -1, -1, 32),
                                                         initial_state=h0, output_final_state=True)
    assert torch.equal(o_b, o_c) and torch.equal(ht_b, ht_c)


def test_decode_per_channel_beta_errors():
    q, k, v, g, beta, h0 = inputs(1, 6, 1, 2, 32, 16, torch.float32, "cpu")
    pool, idx = torch.zeros(3, 2, 32, 16), torch.tensor([1])
    op = "fused_recurrent_gated_delta_rule"
    for kw in ({"initial_state": h0}, {"initial_state": pool, "ssm_state_indices": idx}):  # both forms, one name
        with pytest.raises(ValueError, match=rf"^{op}: beta: expected shape \[B, T, HV, V\] = \[1, 6, 2, 16\], "
                                             r"got \[1, 6, 2, 15\]"):
            fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, torch.rand(1, 6, 2, 15), **kw)
        with pytest.raises(ValueError, match=rf"^{op}: beta: expected rank 3 \[B, T, HV\] or rank 4 \[B, T, HV, V\]"):
            fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, torch.rand(1, 6, 2, 16, 1), **kw)
        with pytest.raises(ValueError, match=rf"^{op}: beta: expected shape \[B, T, HV\] = \[1, 6, 2\] or, per value "
                                             r"column, \[B, T, HV, V\] = \[1, 6, 2, 16\], got \[1, 6, 16\]"):
            fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, torch.rand(1, 6, 16), **kw)
    # the fused sigmoid-gating form's b stays per head
    with pytest.raises(ValueError, match=r"^fused_sigmoid_gating_delta_rule_update: b: expected rank 3 \[B, T, HV\]"):
        fuseops.fused_sigmoid_gating_delta_rule_update(torch.zeros(2), g, torch.zeros(2), 1.0, 20.0, q, k, v,
                                                       torch.rand(1, 6, 2, 16), pool, idx)


@pytest.mark.parametrize("name", ["state_v_first", "use_gate_in_kernel", "head_first", "allow_neg_eigval", "use_exp2"])
def test_unsupported_fla_kwargs(name):
    q, k, v, g, beta, _ = inputs(1, 8, 1, 1, 16, 16, torch.float32, "cpu")
    with pytest.raises(ValueError, match=f"chunk_gated_delta_rule: {name}"):
        fuseops.chunk_gated_delta_rule(q, k, v, g, beta, **{name: True})
    # FLA's default spelled out asks for what fuseops does: accepted, same result
    o, _ = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, **{name: False})
    o_ref, _ = fuseops.chunk_gated_delta_rule(q, k, v, g, beta)
    assert torch.equal(o, o_ref)
    o, _ = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, **{name: torch.tensor(False)})  # as the flags take it
    assert torch.equal(o, o_ref)
    with pytest.raises(ValueError, match=f"^chunk_gated_delta_rule: {name}: "):  # a meta tensor has no value to read
        fuseops.chunk_gated_delta_rule(q, k, v, g, beta, **{name: torch.zeros((), dtype=torch.bool, device="meta")})
    with pytest.raises(ValueError, match="chunk_gated_delta_rule: not_an_fla_argument: unknown argument"):
        fuseops.chunk_gated_delta_rule(q, k, v, g, beta, not_an_fla_argument=False)


def test_fla_order_points_to_the_vllm_order_for_states():
    q, k, v, g, beta, _ = inputs(1, 8, 1, 1, 16, 16, torch.float32, "cpu")
    for value in (True, False):
        with pytest.raises(ValueError, match="^chunk_gated_delta_rule: return_intermediate_states: not taken by "
                                             "fuseops.chunk_gated_delta_rule .*fuseops.compat.vllm.chunk_gated_delta_"
                                             "rule takes it"):
            fuseops.chunk_gated_delta_rule(q, k, v, g, beta, return_intermediate_states=value)


def test_fla_positional_order_of_the_recurrence_is_named():
    # FLA's fused_recurrent_gated_delta_rule(q, k, v, g, gk, gv, beta, scale, initial_state, ...): positionally its
    # beta lands in our initial_state, whose error says so (before the flags its later arguments land in)
    q, k, v, g, beta, h0 = inputs(1, 8, 1, 2, 16, 16, torch.float32, "cpu")
    hint = (r"^fused_recurrent_gated_delta_rule: initial_state: expected \[N, HV, K, V\] .*got rank 3 \[1, 8, 2\]: "
            r"FLA's positional order .*pass beta, scale and initial_state by keyword")
    for extra in ((), (0.25,), (0.25, h0, True)):
        with pytest.raises(ValueError, match=hint):
            fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, None, None, beta, *extra)
    # the keyword call in either library's terms runs
    o, ht = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta=beta, scale=0.25, initial_state=h0,
                                                     output_final_state=True)
    assert o.shape == v.shape and ht.shape == h0.shape


def test_use_exp2_false_is_natural_log_g():
    # some FLA / vLLM stage signatures take use_exp2: False is fuseops' own natural-log g, True is refused by name
    q, k, v, graw, beta, h0 = inputs(1, 70, 1, 2, 16, 16, torch.float32, "cpu")
    g = fuseops.chunk_local_cumsum(graw, 64)
    w, u = fuseops.recompute_w_u_fwd(k, v, beta, fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, g, beta), g)
    h, v_new, _ = fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, g, initial_state=h0, use_exp2=False)
    h_ref, v_ref, _ = fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, g, initial_state=h0)
    assert torch.equal(h, h_ref) and torch.equal(v_new, v_ref)
    assert torch.equal(fuseops.chunk_fwd_o(q, k, v_new, h, g, use_exp2=False), fuseops.chunk_fwd_o(q, k, v_new, h, g))
    with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule_fwd_h: use_exp2: not supported .*use_exp2=False"):
        fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, g, use_exp2=True)
    with pytest.raises(ValueError, match=r"^chunk_fwd_o: use_exp2: not supported"):
        fuseops.chunk_fwd_o(q, k, v_new, h, g, use_exp2=True)


def test_shape_errors_name_the_argument_the_op_blames():
    # k fits v and q does not: q is named, also where the binding sizes the workspace first (it named v); the stage
    # chunk_fwd_o names this function's v (the op calls it v_new)
    q, k, v = torch.randn(1, 70, 3, 8), torch.randn(1, 70, 1, 8), torch.randn(1, 70, 2, 8)
    with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule: q: expected shape \[B, T, H, K\] \(k's shape\)"):
        fuseops.chunk_gated_delta_rule(q, k, v, torch.zeros(1, 70, 2), torch.ones(1, 70, 2))
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match=r"^chunk_fwd_o: v: expected the value heads of g and h, HV = 4"):
        fuseops.chunk_fwd_o(q, k, torch.randn(1, 4, 2, 8), torch.zeros(1, 1, 4, 8, 8), torch.zeros(1, 4, 4),
                            chunk_size=16)
    with pytest.raises(ValueError, match=r"^chunk_fwd_o: v: expected innermost stride 1"):
        fuseops.chunk_fwd_o(q, k, torch.randn(1, 4, 4, 16)[..., ::2], torch.zeros(1, 1, 4, 8, 8),
                            torch.zeros(1, 4, 4), chunk_size=16)


def test_errors_name_the_argument():
    q, k, v, g, beta, _ = inputs(1, 8, 1, 2, 16, 16, torch.float32, "cpu")
    with pytest.raises(ValueError, match="chunk_gated_delta_rule: q: expected dtype"):  # not o, allocated inside
        fuseops.chunk_gated_delta_rule(q.double(), k, v, g, beta)
    with pytest.raises(ValueError, match="fused_recurrent_gated_delta_rule: v: expected dtype"):
        fuseops.fused_recurrent_gated_delta_rule(q, k, v.double(), g, beta)
    with pytest.raises(ValueError, match="chunk_gated_delta_rule: beta"):
        fuseops.chunk_gated_delta_rule(q, k, v, g, beta[:, :, :1])
    with pytest.raises(ValueError, match="fused_recurrent_gated_delta_rule: initial_state"):
        fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(1, 2, 16, 8))


def test_tensor_arguments_say_whether_none_is_allowed():
    # A required tensor given something else reads "expected a torch.Tensor", an optional one "... or None".
    q, k, v, g, beta, _ = inputs(1, 8, 1, 2, 16, 16, torch.float32, "cpu")
    cases = [
        (r"^chunk_gated_delta_rule: beta: expected a torch.Tensor, got int",
         lambda: fuseops.chunk_gated_delta_rule(q, k, v, g, 3)),
        (r"^chunk_gated_delta_rule: g: expected a torch.Tensor, got NoneType",
         lambda: fuseops.chunk_gated_delta_rule(q, k, v, None, beta)),
        (r"^chunk_gated_delta_rule: initial_state: expected a torch.Tensor or None, got int",
         lambda: fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=3)),
        (r"^chunk_scaled_dot_kkt_fwd: k: expected a torch.Tensor, got int",
         lambda: fuseops.chunk_scaled_dot_kkt_fwd(3)),
        (r"^chunk_scaled_dot_kkt_fwd: beta: expected a torch.Tensor or None, got int",
         lambda: fuseops.chunk_scaled_dot_kkt_fwd(k, beta=3)),
        (r"^fused_recurrent_gated_delta_rule: q: expected a torch.Tensor, got int",
         lambda: fuseops.fused_recurrent_gated_delta_rule(3, k, v, g, beta)),
        (r"^fused_recurrent_gated_delta_rule: g: expected a torch.Tensor or None, got int",
         lambda: fuseops.fused_recurrent_gated_delta_rule(q, k, v, 3, beta)),
        (r"^recompute_w_u_fwd: A: expected a torch.Tensor, got int",
         lambda: fuseops.recompute_w_u_fwd(k, v, beta, 3)),
        (r"^chunk_fwd_o: h: expected a torch.Tensor, got int",
         lambda: fuseops.chunk_fwd_o(q, k, v, 3)),
    ]
    for message, call in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_scalar_arguments_are_checked():
    # Flags are bools, not truthy values; the chunk size an int (numpy integers accepted); cu_seqlens a tensor.
    np = pytest.importorskip("numpy")
    q, k, v, g, beta, _ = inputs(1, 8, 1, 2, 16, 16, torch.float32, "cpu")
    o, _ = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=np.int64(16))
    assert torch.equal(o, fuseops.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=16)[0])
    cases = [
        ("chunk_gated_delta_rule: use_qk_l2norm_in_kernel: expected a bool",
         lambda: fuseops.chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel="no")),
        ("chunk_gated_delta_rule: output_final_state: expected a bool",
         lambda: fuseops.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state="no")),
        ("chunk_gated_delta_rule: chunk_size: expected 16, 32 or 64",
         lambda: fuseops.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=16.0)),
        ("chunk_gated_delta_rule: cu_seqlens: expected a tensor",
         lambda: fuseops.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=[0, 8])),
        ("fused_recurrent_gated_delta_rule: use_qk_l2norm_in_kernel: expected a bool",
         lambda: fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=1)),
        ("fused_recurrent_gated_delta_rule: output_final_state: expected a bool",
         lambda: fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state="yes")),
        ("chunk_local_cumsum: reverse: expected a bool",
         lambda: fuseops.chunk_local_cumsum(g, 16, reverse="no")),
        ("chunk_local_cumsum: cu_seqlens: expected a tensor",
         lambda: fuseops.chunk_local_cumsum(g, 16, cu_seqlens=(0, 8))),
    ]
    for message, call in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_number_arguments_and_decode_dtypes():
    # scale / softplus_* are numbers (not strings or bools); q, k, v of one dtype in the decode ops too
    q, k, v, g, beta, _ = inputs(1, 2, 1, 2, 8, 8, torch.float32, "cpu")
    for call in (lambda: fuseops.chunk_gated_delta_rule(q, k, v, g, beta, scale="x"),
                 lambda: fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale=True)):
        with pytest.raises(ValueError, match=r"_rule: scale: expected a number"):
            call()
    with pytest.raises(ValueError, match="fused_recurrent_gated_delta_rule: k: expected dtype f32 .the dtype of q."):
        fuseops.fused_recurrent_gated_delta_rule(q, k.bfloat16(), v, g, beta)
    pool = torch.zeros(2, 2, 8, 8)
    A_log, dt_bias, a, b = torch.zeros(2), torch.zeros(2), torch.zeros(1, 2, 2), torch.zeros(1, 2, 2)
    sg = fuseops.fused_sigmoid_gating_delta_rule_update
    with pytest.raises(ValueError, match="fused_sigmoid_gating_delta_rule_update: softplus_threshold: expected a number"):
        sg(A_log, a, dt_bias, 1.0, "20", q, k, v, b, pool, torch.tensor([0]))
    with pytest.raises(ValueError, match="fused_sigmoid_gating_delta_rule_update: v: expected dtype"):
        sg(A_log, a, dt_bias, 1.0, 20.0, q, k, v.half(), b, pool, torch.tensor([0]))
    # SGLang's is_kda=False is the default layout: accepted; True is not supported
    o = sg(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool.clone(), torch.tensor([0]), is_kda=False)
    assert torch.equal(o, sg(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool.clone(), torch.tensor([0])))
    with pytest.raises(ValueError, match="fused_sigmoid_gating_delta_rule_update: is_kda: not supported"):
        sg(A_log, a, dt_bias, 1.0, 20.0, q, k, v, b, pool, torch.tensor([0]), is_kda=True)


def test_chunk_local_cumsum_takes_flas_signature():
    g = torch.randn(1, 8, 2)
    ref = fuseops.chunk_local_cumsum(g, 16)
    assert torch.equal(fuseops.chunk_local_cumsum(g, 16, head_first=False), ref)
    # FLA's positional order: (g, chunk_size, reverse, scale, cu_seqlens, output_dtype, chunk_indices)
    assert torch.equal(fuseops.chunk_local_cumsum(g, 16, False, None, None, torch.float32, None), ref)
    assert torch.equal(fuseops.chunk_local_cumsum(g, 16, False, None, None, None), ref)  # None: g's dtype, f32 here
    with pytest.raises(ValueError, match=r"^chunk_local_cumsum: output_dtype: None asks for g's dtype"):
        fuseops.chunk_local_cumsum(g.bfloat16(), 16, False, None, None, None)
    with pytest.raises(ValueError, match=r"^chunk_local_cumsum: output_dtype: expected torch.float32"):
        fuseops.chunk_local_cumsum(g, 16, False, None, None, torch.bfloat16)
    with pytest.raises(ValueError, match="chunk_local_cumsum: head_first: not supported"):
        fuseops.chunk_local_cumsum(g, 16, head_first=True)
    # FLA 0.5.2's positional order had head_first sixth: such a call is refused, naming the place and the fix
    for head_first in (False, True):
        with pytest.raises(ValueError, match=r"^chunk_local_cumsum: output_dtype: expected a torch.dtype, got "
                                             rf"{head_first} \(FLA 0.5.2's sixth positional argument was head_first"):
            fuseops.chunk_local_cumsum(g, 16, False, None, None, head_first, torch.float)
    with pytest.raises(ValueError, match="chunk_local_cumsum: bogus: unknown argument"):
        fuseops.chunk_local_cumsum(g, 16, bogus=1)


def test_solve_tril_output_dtype_none_is_As_dtype():
    A = torch.tril(torch.randn(1, 32, 2, 16), -1).bfloat16()
    ref = fuseops.solve_tril(A, output_dtype=torch.bfloat16)
    out = fuseops.solve_tril(A, output_dtype=None)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_stages_take_flas_positional_order_and_equal_the_chunked_op(device):
    # cumsum -> kkt_solve -> recompute_w_u -> fwd_h -> fwd_o, called with FLA's positional orders, equal the whole op
    # (float32: the stages and the op share the arithmetic; the tolerance is the float32 one of docs/ops/gdn.md)
    torch.manual_seed(3)
    B, T, H, HV, K, V, BT = 1, 40, 1, 2, 16, 8, 16
    q, k, v, g, beta, h0 = inputs(B, T, H, HV, K, V, torch.float32, device)
    scale = K ** -0.5
    gc = fuseops.chunk_local_cumsum(g, BT, False, None, None, torch.float32, None)
    Ai = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, gc, beta, None, BT, torch.float32)
    w, u = fuseops.recompute_w_u_fwd(k, v, beta, Ai, gc, None, None)
    # FLA: (k, w, u, g, gk, initial_state, output_final_state, chunk_size, save_new_value, state_v_first, cu_seqlens)
    h, v_new, ht = fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, gc, None, h0, True, BT, True, False, None)
    # FLA: (q, k, v, h, g, g_gamma, scale, state_v_first, cu_seqlens, chunk_size)
    o = fuseops.chunk_fwd_o(q, k, v_new, h, gc, None, scale, False, None, BT)
    o_ref, ht_ref = recurrence(q, k, v, g, beta, h0, scale)
    assert rel_rms(o, o_ref) <= 1e-4 and rel_rms(ht, ht_ref) <= 1e-4
    # the default scale is K ** -0.5
    assert torch.equal(fuseops.chunk_fwd_o(q, k, v_new, h, gc, chunk_size=BT), o)
    with pytest.raises(ValueError, match=r"^chunk_fwd_o: g_gamma: not supported"):
        fuseops.chunk_fwd_o(q, k, v_new, h, gc, torch.tensor([0.5]), scale, chunk_size=BT)
    with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule_fwd_h: gk: not supported"):
        fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, gc, torch.zeros_like(k), chunk_size=BT)
    with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule_fwd_h: state_v_first: not supported"):
        fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, gc, chunk_size=BT, state_v_first=True)
    # save_new_value=False: v_new is None, as FLA; h and the final state unchanged
    h2, none, ht2 = fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, gc, None, h0, True, BT, False)
    assert none is None and torch.equal(h2, h) and torch.equal(ht2, ht)


def test_inputs_requiring_grad_are_refused():
    # Forward only: an input that requires grad (grad mode on) is an error, never a silently dropped graph.
    q, k, v, g, beta, h0 = inputs(1, 4, 1, 2, 8, 8, torch.float32, "cpu")
    wq = q.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="chunk_gated_delta_rule: q: requires grad"):
        fuseops.chunk_gated_delta_rule(wq, k, v, g, beta)
    with pytest.raises(RuntimeError, match="fused_recurrent_gated_delta_rule: beta: requires grad"):
        fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta.clone().requires_grad_())
    with pytest.raises(RuntimeError, match="chunk_scaled_dot_kkt_fwd: k: requires grad"):
        fuseops.chunk_scaled_dot_kkt_fwd(k.clone().requires_grad_())
    with torch.no_grad():
        o, _ = fuseops.chunk_gated_delta_rule(wq, k, v, g, beta)
    assert torch.allclose(o, fuseops.chunk_gated_delta_rule(q, k, v, g, beta)[0])


def test_empty_pool_is_all_padding():
    # S = 0 (a tensor without data): index -1 is padding (o = 0), any other index is recorded and its sequence padding
    q, k, v, g, beta, _ = inputs(2, 1, 1, 1, 4, 4, torch.float32, "cpu")
    fuseops.clear_errors()
    o, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(0, 1, 4, 4),
                                                    ssm_state_indices=torch.tensor([-1, -1], dtype=torch.int32))
    assert torch.count_nonzero(o) == 0
    fuseops.check_errors()
    o, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(0, 1, 4, 4),
                                                    ssm_state_indices=torch.tensor([-1, 5], dtype=torch.int32))
    assert torch.count_nonzero(o) == 0
    with pytest.raises(ValueError, match="^fused_recurrent_gated_delta_rule: ssm_state_indices: value out of range "
                                         "at index 1"):  # the function called, not the C++ API's _update name
        fuseops.check_errors()


def test_sigmoid_gating_records_bad_indices_under_its_own_names():
    # fused_sigmoid_gating_delta_rule_update takes vLLM's initial_state_source / initial_state_indices: a recorded bad
    # index (raised later by check_errors, or at the op under FUSEOPS_DEBUG) names initial_state_indices too
    q, k, v, _, _, _ = inputs(1, 1, 1, 1, 4, 4, torch.float32, "cpu")
    hv = v.shape[2]
    zeros = torch.zeros(hv)
    fuseops.clear_errors()
    for idx in (torch.tensor([5]), torch.tensor([[7]])):  # [N] and [N, Tmax] indices, slot >= S = 2
        try:
            fuseops.fused_sigmoid_gating_delta_rule_update(zeros, torch.zeros(1, 1, hv), zeros, 1.0, 20.0, q, k, v,
                                                           torch.zeros(1, 1, hv), torch.zeros(2, hv, 4, 4), idx)
        except ValueError as e:  # FUSEOPS_DEBUG: raised at the op
            message = str(e)
        else:
            with pytest.raises(ValueError) as raised:
                fuseops.check_errors()
            message = str(raised.value)
        assert message.startswith("fused_sigmoid_gating_delta_rule_update: initial_state_indices: value out of range "
                                  "at index 0"), message


def test_chunk_errors_name_the_op_the_user_called():
    # The arguments that size the workspace (q, v, cu_seqlens) are checked before the op runs: still a ValueError
    # naming chunk_gated_delta_rule, not the workspace query.
    q, k, v, g, beta, _ = inputs(1, 8, 2, 4, 16, 16, torch.float32, "cpu")
    op = fuseops.chunk_gated_delta_rule
    cases = [
        ("cu_seqlens", lambda: op(q, k, v, g, beta, cu_seqlens=torch.tensor([0.0, 8.0]))),
        ("v", lambda: op(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3])),  # HV = 3, not a multiple of H = 2
        ("q", lambda: op(*inputs(1, 8, 2, 4, 257, 16, torch.float32, "cpu")[:5])),
        ("v", lambda: op(q, k, v[..., :0], g, beta)),
        ("v", lambda: op(q, k, torch.randn(1, 8, 4, 32)[..., ::2], g, beta)),
    ]
    for name, call in cases:
        with pytest.raises(ValueError, match=f"^chunk_gated_delta_rule: {name}: "):
            call()


@requires_cuda
def test_cuda_graph_capture():
    q, k, v, g, beta, h0 = inputs(1, 130, 2, 4, 64, 64, torch.bfloat16, "cuda")
    o_ref, ht_ref = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    pool = h0.clone()
    idx = torch.tensor([0], device="cuda")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)  # warm-up
        with torch.cuda.graph(graph, stream=stream):
            o, ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
            od, _ = fuseops.fused_recurrent_gated_delta_rule(q[:, :1], k[:, :1], v[:, :1], g[:, :1], beta[:, :1],
                                                             initial_state=pool, inplace_final_state=True,
                                                             ssm_state_indices=idx)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(o, o_ref) and torch.equal(ht, ht_ref)


@pytest.mark.parametrize("device", DEVICES)
def test_cu_seqlens_cpu_is_checked_and_not_needed(device):
    # FLA's host copy of cu_seqlens: accepted where it can be that copy (the same results as without it), else a
    # ValueError naming it; fuseops reads cu_seqlens on the device
    q, k, v, g, beta, h0 = inputs(1, 21, 1, 2, 16, 16, torch.float32, device, N=3)
    cu = torch.tensor([0, 5, 5, 21], dtype=torch.int32, device=device)
    ref, ref_ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                 cu_seqlens=cu, chunk_size=16)
    for host in (cu.cpu(), cu.cpu().long()):
        o, ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                               cu_seqlens=cu, chunk_size=16, cu_seqlens_cpu=host)
        assert torch.equal(o, ref) and torch.equal(ht, ref_ht)
    op = "chunk_gated_delta_rule"
    bad = [
        ("a host copy of cu_seqlens, given without cu_seqlens", None, cu.cpu()),
        (r"expected a CPU tensor int32 / int64 of cu_seqlens' shape \[4\]", cu, cu.cpu().float()),
        (r"expected a CPU tensor int32 / int64 of cu_seqlens' shape \[4\]", cu, cu.cpu()[:3]),
        (r"expected a CPU tensor int32 / int64 of cu_seqlens' shape \[4\]", cu, [0, 5, 5, 21]),
        (r"expected 0 = cu_seqlens_cpu\[0\] <= \.\.\. <= cu_seqlens_cpu\[N\] = T = 21 \(a host copy of "
         r"cu_seqlens\), got \[0, 5, 5, 20\]", cu, torch.tensor([0, 5, 5, 20])),
        (r"expected 0 = .* got \[0, 6, 5, 21\]", cu, torch.tensor([0, 6, 5, 21])),
        (r"expected 0 = .* got \[1, 5, 5, 21\]", cu, torch.tensor([1, 5, 5, 21])),
    ]
    if device != "cpu":
        bad.append((r"expected a CPU tensor .* on cuda", cu, cu))
    for message, cu_dev, host in bad:
        with pytest.raises(ValueError, match=f"^{op}: cu_seqlens_cpu: {message}"):
            fuseops.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu_dev, chunk_size=16, cu_seqlens_cpu=host)
    # chunk_gated_delta_rule_fwd_h (FLA's positional slot of cu_seqlens_cpu), from the forward's own stages
    gc = fuseops.chunk_local_cumsum(g, 16, cu_seqlens=cu)
    w, u = fuseops.recompute_w_u_fwd(k, v, beta, fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, gc, beta, cu, 16), gc,
                                     cu)
    _, v_new, ht = fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, gc, None, h0, True, 16, cu_seqlens=cu)
    _, v_new2, ht2 = fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, gc, None, h0, True, 16, True, False, cu,
                                                          cu.cpu())
    assert torch.equal(v_new, v_new2) and torch.equal(ht, ht2)  # (h's slots past a sequence's chunks are unwritten)
    with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule_fwd_h: cu_seqlens_cpu: expected 0 = "):
        fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, gc, None, h0, True, 16, cu_seqlens=cu,
                                             cu_seqlens_cpu=torch.tensor([0, 5, 21, 21]).flip(0))


def test_shapes_the_functions_size_outputs_from_are_checked_first():
    # (they raised IndexError, a negative dimension or ZeroDivisionError from Python arithmetic before the op's check)
    q, k, v, g, beta, h0 = inputs(1, 4, 1, 2, 8, 8, torch.float32, "cpu")
    for cu in (torch.tensor(5), torch.zeros(0, dtype=torch.long)):
        with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule: cu_seqlens: expected rank 1 \[N\+1\] with at "
                                             r"least one entry \(\[0\]: no sequences\), got shape \["):
            fuseops.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, cu_seqlens=cu)
        with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: cu_seqlens: expected rank 1"):
            fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state=True, cu_seqlens=cu)
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: q: expected rank 4"):
        fuseops.fused_recurrent_gated_delta_rule(q[0], k, v, g, beta, output_final_state=True)
    with pytest.raises(ValueError, match=r"^chunk_fwd_o: "):
        fuseops.chunk_fwd_o(q[..., :0], k[..., :0], v, torch.zeros(1, 1, 2, 0, 8), g, chunk_size=16)


# ---------------------------------------------------------------------------------------------------------------
# vLLM's order: fuseops.compat.vllm.chunk_gated_delta_rule(q, k, v, g, beta, scale, initial_state, output_final_state,
# cu_seqlens, head_first, use_qk_l2norm_in_kernel, return_intermediate_states) -> (o, final_state, states).


def _check_states(states, ref, h0, firsts, dtype):
    """states against the recurrence's chunk-start states; ``firsts``: the index of each sequence's chunk 0 (its initial
    state, or zeros, rounded once to dtype: bit for bit)."""
    assert states.dtype == dtype and states.shape == ref.shape, (states.dtype, states.shape, ref.shape)
    if states.shape[0] == 0:
        return
    for n, c in firsts:
        want = torch.zeros_like(states[c]) if h0 is None else h0[n].to(dtype)
        assert torch.equal(states[c], want), (n, c)
    assert rel_rms(states, ref) <= limit(dtype)
    for c in range(states.shape[0]):  # each chunk, not only the whole
        if ref[c].norm() > 0:
            assert rel_rms(states[c], ref[c]) <= 2 * limit(dtype), c


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("l2norm", [False, True])
@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("heads", [(1, 2, 32, 32), (2, 4, 16, 8)])  # HV = 2H; K, V < 32: f32 intermediates
def test_vllm_order_states_fixed_length(device, dtype, l2norm, with_h0, heads):
    H, HV, K, V = heads
    B, T = 2, 150  # chunks of 64, 64 and 22 tokens per batch row
    q, k, v, g, beta, h0 = inputs(B, T, H, HV, K, V, dtype, device, seed=5)
    if l2norm:
        q, k = q * 3, k * 3  # unnormalised: the op normalises
    h0 = h0 if with_h0 else None
    # vLLM's positional order, up to return_intermediate_states
    o, ht, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, None, False, l2norm, True)
    o_ref, ht_ref = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                   use_qk_l2norm_in_kernel=l2norm)
    assert torch.equal(o, o_ref) and torch.equal(ht, ht_ref)  # the fused op's results
    ro, rht, rstates = recurrence(q, k, v, g, beta, h0, K ** -0.5, l2norm=l2norm, chunk=64)
    assert rel_rms(o, ro) <= limit(dtype) and rel_rms(ht, rht) <= limit(dtype)
    assert states.device == q.device and rstates.shape == (B * 3, HV, K, V)
    _check_states(states, rstates, h0, [(0, 0), (1, 3)], dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("l2norm", [False, True])
@pytest.mark.parametrize("with_h0", [False, True])
def test_vllm_order_states_varlen(device, dtype, l2norm, with_h0):
    # an empty sequence first and in the middle, one shorter than a chunk, one of 3 chunks (the last partial), one of
    # exactly a chunk, one of a single token: 0 + 1 + 3 + 0 + 1 + 1 = 6 chunks, sequence by sequence
    lens = [0, 37, 150, 0, 64, 1]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
    q, k, v, g, beta, h0 = inputs(1, sum(lens), 1, 2, 32, 32, dtype, device, N=len(lens), seed=6)
    if l2norm:
        q, k = q * 3, k * 3
    h0 = h0 if with_h0 else None
    o, ht, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, cu, False, l2norm, True)
    o_ref, ht_ref = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                   use_qk_l2norm_in_kernel=l2norm, cu_seqlens=cu)
    assert torch.equal(o, o_ref) and torch.equal(ht, ht_ref)
    ro, rht, rstates = recurrence(q, k, v, g, beta, h0, 32 ** -0.5, cu, l2norm=l2norm, chunk=64)
    assert rel_rms(o, ro) <= limit(dtype) and rel_rms(ht, rht) <= limit(dtype)
    assert rstates.shape[0] == 6
    _check_states(states, rstates, h0, [(1, 0), (2, 1), (4, 4), (5, 5)], dtype)
    # int64 cu_seqlens: the same
    _, _, states64 = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, cu.long(), False, l2norm, True)
    assert torch.equal(states64, states)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("heads", [(4, 4), (2, 1), (16, 8)])
def test_vllm_order_states_of_small_heads(device, heads):
    # bf16 with K or V below 32: the states come from f32 intermediates, as the op's own; with no decay and beta = 1
    # 16-bit intermediates would miss the bound (measured 1.3e-2 at K = V = 4, 1.9e-2 at K = 2, V = 1; docs/ops/gdn.md,
    # Tolerances), the f32 ones leave only the final rounding to bf16 (~1.7e-3)
    K, V = heads
    q, k, v, g, beta, h0 = inputs(1, 512, 1, 1, K, V, torch.bfloat16, device, seed=9)
    g, beta = torch.zeros_like(g), torch.ones_like(beta)
    _, _, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, None, False, False, True)
    _, _, ref = recurrence(q, k, v, g, beta, h0, K ** -0.5, chunk=64)
    assert states.dtype == torch.bfloat16 and rel_rms(states, ref) <= 5e-3


@pytest.mark.parametrize("chunk_size", [16, 64])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("heads", [(1, 2, 32, 32), (2, 4, 16, 8)])  # K, V < 32: f32 intermediates from bf16
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_with_states_raw_op_gives_the_stages_h(dtype, heads, varlen, chunk_size):
    # torch.ops.fuseops.chunk_gated_delta_rule_with_states on the CPU: its chunk states h [B, NS, HV, K, V] (in the
    # intermediate dtype) are the bytes of the public stages' h on the same inputs with the op's intermediates (the
    # same CPU kernels on the same values), in every slot of a chunk; o and final_state are the bytes of
    # chunk_gated_delta_rule
    H, HV, K, V = heads
    if varlen:
        lens = [0, 37, 150, 1]
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
        B, T, N = 1, sum(lens), len(lens)
    else:
        cu, B, T, N = None, 2, 150, 2
    q, k, v, g, beta, h0 = inputs(B, T, H, HV, K, V, dtype, "cpu", N=N, seed=11)
    it = getattr(torch, fuseops.ops.chunk_gated_delta_rule_intermediate_dtype(dtype, K, V))
    assert it == (torch.float32 if min(K, V) < 32 else dtype)
    per_row = (T + chunk_size - 1) // chunk_size
    NS = per_row if cu is None else N + per_row
    o = torch.empty(B, T, HV, V, dtype=dtype)
    h = torch.full((B, NS, HV, K, V), float("nan"), dtype=it)
    ht = torch.empty(N, HV, K, V)
    fuseops.ops.chunk_gated_delta_rule_with_states(o, h, ht, q, k, v, g, beta, None, h0, False, cu, chunk_size)
    gc = fuseops.chunk_local_cumsum(g, chunk_size, cu_seqlens=cu)
    kn = k.to(it)
    Ai = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(kn, gc, beta, cu, chunk_size)
    w, u = fuseops.recompute_w_u_fwd(kn, v.to(it), beta, Ai, gc, cu)
    h_ref, _, ht_ref = fuseops.chunk_gated_delta_rule_fwd_h(kn, w, u, gc, None, h0, True, chunk_size,
                                                            cu_seqlens=cu)
    assert h.dtype == h_ref.dtype == it
    if cu is None:
        assert torch.equal(h, h_ref)
    else:  # the slots of a chunk (the others are not written: still NaN)
        slots = fuseops.gdn._slots_in_sequence_order(cu.long(), chunk_size)
        assert torch.equal(h[0, slots], h_ref[0, slots])
        others = torch.ones(NS, dtype=torch.bool)
        others[slots] = False
        assert bool(h[0, others].isnan().all())
    assert torch.equal(ht, ht_ref)
    o_ref, ht_op = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, cu_seqlens=cu,
                                                  chunk_size=chunk_size)
    assert torch.equal(o, o_ref) and torch.equal(ht, ht_op)
    # the public function: the raw op's results, h in its chunk slots (the slots of no chunk aside)
    fo, fht, fh = fuseops.chunk_gated_delta_rule_with_states(q, k, v, g, beta, None, h0, True, False, cu, chunk_size)
    assert fh.shape == (B, NS, HV, K, V) and fh.dtype == it
    assert torch.equal(fo, o) and torch.equal(fht, ht)
    assert torch.equal(fh, h) if cu is None else torch.equal(fh[0, slots], h[0, slots])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("heads", [(1, 2, 32, 32), (2, 4, 16, 8)])  # K, V < 32: float32 h from bf16 inputs
def test_with_states_function_gives_what_compat_gathers(device, varlen, heads):
    # fuseops.chunk_gated_delta_rule_with_states: h [B, NS, HV, K, V] in the intermediate dtype, in chunk slots; its
    # chunk slots in vLLM's order, cast to k's dtype, are compat.vllm's intermediate_states (one forward each, the
    # same op on the same inputs: the same bytes), and o and final_state equal compat's too; chunk 0 of a sequence
    # holds its initial state, rounded once
    H, HV, K, V = heads
    dtype = torch.bfloat16
    if varlen:
        lens = [0, 37, 150, 0, 64, 1]
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
        B, T, N = 1, sum(lens), len(lens)
    else:
        cu, B, T, N = None, 2, 150, 2
    q, k, v, g, beta, h0 = inputs(B, T, H, HV, K, V, dtype, device, N=N, seed=12)
    o, ht, h = fuseops.chunk_gated_delta_rule_with_states(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                                          cu_seqlens=cu)
    it = torch.float32 if min(K, V) < 32 else dtype
    NS = 3 if cu is None else N + 4  # ceil(150 / 64) per row; N + ceil(252 / 64)
    assert h.shape == (B, NS, HV, K, V) and h.dtype == it and h.device == q.device
    vo, vht, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, cu, False, False, True)
    assert torch.equal(o, vo) and torch.equal(ht, vht)
    if cu is None:
        gathered = h.reshape(B * NS, HV, K, V)
        assert torch.equal(h[:, 0], h0.to(it))
    else:
        slots = fuseops.gdn._slots_in_sequence_order(cu.cpu().long(), 64).to(device)
        gathered = h[0].index_select(0, slots)
        # chunk 0 of sequence n at slot n; sequence 2's later chunks (t = 101, 165) at N + (t - 1) // 64
        assert slots.tolist() == [1, 2, 7, 8, 4, 5]
        for n in (1, 2, 4, 5):  # the non-empty sequences' chunk 0
            assert torch.equal(h[0, n], h0[n].to(it))
    assert torch.equal(gathered.to(k.dtype), states)
    ro, rht, rstates = recurrence(q, k, v, g, beta, h0, K ** -0.5, cu, chunk=64)
    assert rel_rms(o, ro) <= limit(dtype) and rel_rms(ht, rht) <= limit(dtype)
    assert rel_rms(gathered, rstates) <= limit(dtype)
    # without output_final_state: None, the same o and h
    o2, ht2, h2 = fuseops.chunk_gated_delta_rule_with_states(q, k, v, g, beta, initial_state=h0, cu_seqlens=cu)
    assert ht2 is None and torch.equal(o2, o)
    assert torch.equal(h2, h) if cu is None else torch.equal(h2[0, slots], h[0, slots])


def test_with_states_function_errors_name_it():
    # every check of chunk_gated_delta_rule, named as the user called the function (the Python-side checks, the op's
    # and the workspace query's); FLA's keyword arguments as chunk_gated_delta_rule takes them
    op = "chunk_gated_delta_rule_with_states"
    f = fuseops.chunk_gated_delta_rule_with_states
    q, k, v, g, beta, h0 = inputs(1, 8, 2, 4, 16, 16, torch.float32, "cpu")
    cases = [
        ("q", lambda: f(q[0], k, v, g, beta)),
        ("q", lambda: f(q.double(), k, v, g, beta)),
        ("k", lambda: f(q, k.double(), v, g, beta)),
        ("v", lambda: f(q, k, v[:, :, :3], g[:, :, :3], beta[:, :, :3])),  # HV = 3, not a multiple of H = 2
        ("v", lambda: f(q, k, v[..., :0], g, beta)),
        ("beta", lambda: f(q, k, v, g, beta[:, :, :1])),
        ("initial_state", lambda: f(q, k, v, g, beta, initial_state=h0[:, :1])),
        ("scale", lambda: f(q, k, v, g, beta, scale="0.5")),
        ("output_final_state", lambda: f(q, k, v, g, beta, output_final_state=1)),
        ("use_qk_l2norm_in_kernel", lambda: f(q, k, v, g, beta, use_qk_l2norm_in_kernel="yes")),
        ("chunk_size", lambda: f(q, k, v, g, beta, chunk_size=48)),
        ("cu_seqlens", lambda: f(q, k, v, g, beta, cu_seqlens=torch.tensor([0.0, 8.0]))),
        ("cu_seqlens", lambda: f(q, k, v, g, beta, cu_seqlens=torch.tensor(8))),
        ("state_v_first", lambda: f(q, k, v, g, beta, state_v_first=True)),
        ("not_an_fla_argument", lambda: f(q, k, v, g, beta, not_an_fla_argument=False)),
    ]
    for name, call in cases:
        with pytest.raises(ValueError, match=f"^{op}: {name}: "):
            call()
    with pytest.raises(RuntimeError, match=f"^{op}: q: requires grad"):
        f(q.clone().requires_grad_(), k, v, g, beta)
    for value in (True, False):
        with pytest.raises(ValueError, match=f"^{op}: return_intermediate_states: not taken by fuseops.{op}, which "
                                             "always returns the chunk states .*fuseops.compat.vllm.chunk_gated_delta_"
                                             "rule takes it"):
            f(q, k, v, g, beta, return_intermediate_states=value)
    # FLA's defaults spelled out are accepted, as by chunk_gated_delta_rule
    o, _, h = f(q, k, v, g, beta, head_first=False, use_exp2=False, cu_seqlens_cpu=None)
    o_ref, _, h_ref = f(q, k, v, g, beta)
    assert torch.equal(o, o_ref) and torch.equal(h, h_ref)
    # a malformed cu_seqlens is recorded under the function's name, nothing read on the host
    fuseops.clear_errors()
    f(q, k, v, g, beta, cu_seqlens=torch.tensor([0, 9], dtype=torch.int32))
    with pytest.raises(ValueError, match=f"^{op}: cu_seqlens"):
        fuseops.check_errors()


def test_varlen_batch_is_refused_by_name():
    # with cu_seqlens the inputs are of batch 1: the Python functions refuse a batch of 2 with the op's own message
    # (the raw op's C++ check, word for word, under the name the user called)
    q, k, v, g, beta, _ = inputs(2, 8, 1, 2, 16, 16, torch.float32, "cpu")
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    with pytest.raises(ValueError) as raw:
        fuseops.ops.chunk_gated_delta_rule(torch.empty(2, 8, 2, 16), None, q, k, v, g, beta, None, None, False, cu, 64)
    text = str(raw.value)
    assert text == ("chunk_gated_delta_rule: cu_seqlens: expected inputs of batch B = 1 with cu_seqlens (sequences "
                    "packed along T; flatten the batch), got B = 2"), text
    rest = text[len("chunk_gated_delta_rule"):]
    for op, f in (("chunk_gated_delta_rule", fuseops.chunk_gated_delta_rule),
                  ("chunk_gated_delta_rule_with_states", fuseops.chunk_gated_delta_rule_with_states)):
        with pytest.raises(ValueError) as raised:
            f(q, k, v, g, beta, cu_seqlens=cu)
        assert str(raised.value) == op + rest
    for states in (False, True):
        with pytest.raises(ValueError) as raised:
            vllm.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, return_intermediate_states=states)
        assert str(raised.value) == text
    # q and v of other batches: the op names the argument at fault, not cu_seqlens
    with pytest.raises(ValueError, match="^chunk_gated_delta_rule_with_states: v: "):
        fuseops.chunk_gated_delta_rule_with_states(q[:1], k[:1], v, g[:1], beta[:1], cu_seqlens=cu)


def test_intermediate_dtype_is_the_cpp_rule():
    # bound from C++ (chunk_gated_delta_rule_intermediate_dtype): the input dtype, float32 for 16-bit inputs with K or
    # V < 32; a dtype or head dim the op refuses is a ValueError naming the argument
    rule = fuseops.ops.chunk_gated_delta_rule_intermediate_dtype
    assert rule(torch.bfloat16, 128, 128) == "bfloat16" and rule(torch.float16, 64, 32) == "float16"
    assert rule(torch.bfloat16, 31, 128) == "float32" and rule(torch.float16, 128, 8) == "float32"
    assert rule(torch.float32, 4, 4) == "float32"
    # gdn.py's Python form of the rule (a constant under torch.compile) is the C++ rule on everything the op accepts
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for K in range(1, 257):
            for V in (1, 8, 31, 32, 33, 64, 100, 128, 256):
                assert fuseops.gdn._intermediate_dtype(dtype, K, V) == getattr(torch, rule(dtype, K, V)), (dtype, K, V)
                assert fuseops.gdn._intermediate_dtype(dtype, V, K) == getattr(torch, rule(dtype, V, K)), (dtype, V, K)
    for args, name in (((torch.int32, 128, 128), "dtype"), ((torch.float64, 128, 128), "dtype"),
                       ((torch.bfloat16, 0, 128), "head_k_dim"), ((torch.bfloat16, 128, 257), "head_v_dim")):
        with pytest.raises(ValueError, match=f"^chunk_gated_delta_rule_intermediate_dtype: {name}: "):
            rule(*args)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_order_without_states_is_the_fused_op(device):
    lens = [3, 0, 70]
    cu = torch.tensor([0, 3, 3, 73], dtype=torch.int64, device=device)
    q, k, v, g, beta, h0 = inputs(1, 73, 2, 4, 32, 16, torch.bfloat16, device, N=3, seed=7)
    want = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, 0.3, h0, True, True, cu)  # FLA's order
    got = vllm.chunk_gated_delta_rule(q, k, v, g, beta, 0.3, h0, True, cu, False, True)  # vLLM's
    assert len(got) == 3 and got[2] is None
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    got = vllm.chunk_gated_delta_rule(q, k, v, g, beta, 0.3, h0, True, cu, False, True, False)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and got[2] is None
    # defaults: no final state, no states, no l2 normalisation, K ** -0.5
    o, ht, states = vllm.chunk_gated_delta_rule(q[:, :3], k[:, :3], v[:, :3], g[:, :3], beta[:, :3])
    assert ht is None and states is None
    assert torch.equal(o, fuseops.chunk_gated_delta_rule(q[:, :3], k[:, :3], v[:, :3], g[:, :3], beta[:, :3])[0])
    # output_final_state=False with the states: the final state stays None
    o, ht, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, 0.3, h0, False, cu, False, True, True)
    assert ht is None and torch.equal(o, want[0]) and states.shape == (3, 4, 32, 16)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_order_states_without_tokens(device):
    q, k, v, g, beta, h0 = inputs(2, 0, 1, 2, 16, 16, torch.float32, device)
    o, ht, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, None, False, False, True)
    assert o.shape == (2, 0, 2, 16) and torch.equal(ht, h0) and states.shape == (0, 2, 16, 16)
    q, k, v, g, beta, h0 = inputs(1, 0, 1, 2, 16, 16, torch.bfloat16, device, N=2)
    for cu in ([0], [0, 0, 0]):  # no sequences; two empty ones
        cu = torch.tensor(cu, dtype=torch.int32, device=device)
        o, ht, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0[:cu.shape[0] - 1], True, cu, False,
                                                    True, True)
        assert states.shape == (0, 2, 16, 16) and states.dtype == torch.bfloat16
        assert torch.equal(ht, h0[:cu.shape[0] - 1])


def test_vllm_order_refusals():
    # every argument: the fused op's checks, with and without the states (nothing computed before them)
    q, k, v, g, beta, h0 = inputs(1, 8, 1, 2, 16, 16, torch.float32, "cpu")
    cu = torch.tensor([0, 8], dtype=torch.int32)
    args = dict(q=q, k=k, v=v, g=g, beta=beta, scale=None, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                head_first=False, use_qk_l2norm_in_kernel=False)
    bad = {
        "q": q[0],
        "k": k.double(),
        "v": v[:, :4],
        "g": g[..., :1],
        "beta": beta[:, :4],
        "scale": "0.5",
        "initial_state": h0[:, :1],
        "output_final_state": 1,
        "cu_seqlens": cu.float(),
        "head_first": True,
        "use_qk_l2norm_in_kernel": "yes",
    }
    for name, value in bad.items():
        for states in (False, True):
            with pytest.raises(ValueError, match=f"^chunk_gated_delta_rule: {name}: "):
                vllm.chunk_gated_delta_rule(**dict(args, **{name: value}), return_intermediate_states=states)
    for value in (1, "True", None, torch.tensor([True, False])):
        with pytest.raises(ValueError, match="^chunk_gated_delta_rule: return_intermediate_states: expected a bool"):
            vllm.chunk_gated_delta_rule(**args, return_intermediate_states=value)
    with pytest.raises(ValueError, match="^chunk_gated_delta_rule: head_first: not supported"):
        vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, None, False, None, True)
    with pytest.raises(TypeError):  # vLLM's fixed signature: FLA's other arguments are Python's error, as in vLLM
        vllm.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64)
    with pytest.raises(RuntimeError, match="chunk_gated_delta_rule: q: requires grad"):
        vllm.chunk_gated_delta_rule(q.clone().requires_grad_(), k, v, g, beta, return_intermediate_states=True)
    # numpy / tensor flags as the fused op takes them
    o, _, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, return_intermediate_states=torch.tensor(True))
    assert states.shape == (1, 2, 16, 16) and torch.equal(o, fuseops.chunk_gated_delta_rule(q, k, v, g, beta)[0])


def test_vllm_order_states_refuse_a_malformed_cu_seqlens():
    # read on the host for the states: a ValueError naming cu_seqlens, raised before the fused op runs, so nothing is
    # left in the record for a later check_errors; without the states the fused op's rule holds (recorded, raised by
    # check_errors)
    q, k, v, g, beta, _ = inputs(1, 20, 1, 1, 16, 16, torch.float32, "cpu")
    for values in ([0, 12, 21], [1, 12, 20], [0, 12, 8, 20]):
        cu = torch.tensor(values, dtype=torch.int32)
        fuseops.clear_errors()
        with pytest.raises(ValueError, match=r"^chunk_gated_delta_rule: cu_seqlens: expected 0 = cu_seqlens\[0\] <= "
                                             r"\.\.\. <= cu_seqlens\[N\] = T = 20 .*got \[" + str(values[0])):
            vllm.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, return_intermediate_states=True)
        fuseops.check_errors()  # nothing recorded
        vllm.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)
        with pytest.raises(ValueError, match="chunk_gated_delta_rule: cu_seqlens"):
            fuseops.check_errors()


@requires_cuda
def test_vllm_order_states_and_cuda_graphs():
    # without cu_seqlens nothing is read on the host: capturable, the same bytes as eager; with cu_seqlens the states
    # read it on the host: refused by name while the stream captures
    q, k, v, g, beta, h0 = inputs(2, 130, 2, 4, 64, 64, torch.bfloat16, "cuda")
    want = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, None, False, True, True)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, None, False, True, True)  # warm-up
        with torch.cuda.graph(graph, stream=stream):
            got = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, None, False, True, True)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    cu = torch.tensor([0, 100, 260], dtype=torch.int32, device="cuda")
    qv, kv, vv, gv, bv = (x.reshape(1, 260, *x.shape[2:]) for x in (q, k, v, g, beta))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        vllm.chunk_gated_delta_rule(qv, kv, vv, gv, bv, None, h0, True, cu, False, True, False)  # warm-up
        with pytest.raises(ValueError, match="chunk_gated_delta_rule: return_intermediate_states: .*captures a graph"):
            with torch.cuda.graph(graph, stream=stream):
                vllm.chunk_gated_delta_rule(qv, kv, vv, gv, bv, None, h0, True, cu, False, True, True)


@pytest.mark.parametrize("device", DEVICES)
def test_read_only_views_are_read_as_copies(device):
    # as FLA's and vLLM's input_guard: a non-contiguous initial_state or cu_seqlens (e.g. a strided slice of
    # query_start_loc) is read as a contiguous copy, with the same result as the contiguous tensor, and is not written
    q, k, v, g, beta, h0 = inputs(1, 130, 2, 4, 32, 32, torch.float32, device, N=2)
    h0_t = h0.transpose(2, 3).contiguous().transpose(2, 3)
    assert not h0_t.is_contiguous()
    cu_wide = torch.tensor([0, 7, 60, 7, 130, 7], dtype=torch.int32, device=device)
    cu = cu_wide[::2]
    assert not cu.is_contiguous()
    before = (h0_t.clone(), cu_wide.clone())
    want_o, want_ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, None, h0_t.contiguous(), True,
                                                     cu_seqlens=cu.contiguous())
    got_o, got_ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, None, h0_t, True, cu_seqlens=cu)
    assert torch.equal(got_o, want_o) and torch.equal(got_ht, want_ht)
    o, ht, states = vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0_t, True, cu, False, False, True)
    assert torch.equal(o, want_o) and torch.equal(ht, want_ht) and states.shape == (3, 4, 32, 32)
    dec_o, dec_ht = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, None, h0_t, True, cu_seqlens=cu)
    ref_o, ref_ht = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, None, h0_t.contiguous(), True,
                                                             cu_seqlens=cu.contiguous())
    assert torch.equal(dec_o, ref_o) and torch.equal(dec_ht, ref_ht)
    assert torch.equal(h0_t, before[0]) and torch.equal(cu_wide, before[1])


def test_vllm_order_states_name_the_argument_at_fault_first():
    # with the states asked for, cu_seqlens is read on the host only where it is the argument at fault: a batch of 2,
    # a q that requires grad or head_first=True are named as without the states, before a malformed cu_seqlens
    q, k, v, g, beta, _ = inputs(2, 8, 1, 1, 16, 16, torch.float32, "cpu")
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    for states in (False, True):
        with pytest.raises(ValueError, match="^chunk_gated_delta_rule: cu_seqlens: .*B = 1"):
            vllm.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu, return_intermediate_states=states)
    q1, k1, v1, g1, b1 = (x[:1] for x in (q, k, v, g, beta))
    bad = torch.tensor([0, 9], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="chunk_gated_delta_rule: q: requires grad"):
        vllm.chunk_gated_delta_rule(q1.clone().requires_grad_(), k1, v1, g1, b1, cu_seqlens=bad,
                                    return_intermediate_states=True)
    with pytest.raises(ValueError, match="^chunk_gated_delta_rule: head_first: "):
        vllm.chunk_gated_delta_rule(q1, k1, v1, g1, b1, None, None, False, bad, True, False, True)
    with pytest.raises(ValueError, match="^chunk_gated_delta_rule: k: "):
        vllm.chunk_gated_delta_rule(q1, k1.double(), v1, g1, b1, cu_seqlens=bad, return_intermediate_states=True)
    fuseops.check_errors()  # nothing launched, nothing recorded
