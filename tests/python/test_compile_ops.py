"""torch.compile(fullgraph=True) traces every family's Python functions (rope, MoE routing, GDN, gated norm and the
compat signatures), not only the activations of test_compile.py: the argument checks, the naming context managers
and the in-place ops (auto-functionalised) must all trace, and the compiled call must give what eager gives, also in
the tensors an op updates in place."""

import pytest
from common import DEVICES, requires_compile, torch

import fuseops
from fuseops.compat import flaggems, vllm

pytestmark = requires_compile


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in _flat(item)]
    return [x]


def _assert_same(got, want):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor) and g.dtype == w.dtype and g.shape == w.shape
            torch.testing.assert_close(g, w, rtol=0, atol=0)  # same kernels, same inputs: same bits
        else:
            assert g == w


def _compiled_matches_eager(device, f, *args):
    """f on fresh copies of args, eager and compiled (inductor on CUDA, aot_eager on the CPU: no C++ compiler needed);
    the results and every argument afterwards (in-place updates) compare equal."""
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    eager_args = [_clone(a) for a in args]
    compiled_args = [_clone(a) for a in args]
    with torch.no_grad():
        want = f(*eager_args)
        got = torch.compile(f, fullgraph=True, backend=backend)(*compiled_args)
    _assert_same(got, want)
    _assert_same(compiled_args, eager_args)


def _cache(max_pos, rot, device, dtype=torch.float32):
    inv = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=1).to(dtype).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary_embedding_and_mrope(device, is_neox):
    T, Hq, Hk, D, rot = 7, 4, 2, 64, 32
    cache = _cache(64, rot, device)
    pos = torch.randint(0, 64, (T,), device=device)
    pos3 = torch.randint(0, 64, (3, T), device=device)
    q = torch.randn(T, Hq * D, device=device, dtype=torch.bfloat16)
    k = torch.randn(T, Hk * D, device=device, dtype=torch.bfloat16)

    def f(pos, pos3, q, k):
        q, k = fuseops.rotary_embedding(pos, q, k, D, cache, is_neox)
        q, k = fuseops.mrope(q, k, cache, pos3, [4, 6, 6], D, rot, is_neox, "interleaved")
        q2, _ = fuseops.rotary_embedding_backward(pos, q.clone(), None, D, cache, is_neox)
        vllm.rotary_embedding(pos, q, k, D, cache, is_neox)
        return q * 2, k, q2

    _compiled_matches_eager(device, f, pos, pos3, q, k)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rotary_interleaved", [False, True])
def test_apply_rotary_pos_emb_forward_backward(device, rotary_interleaved):
    torch._dynamo.reset()
    B, S, Hq, Hk, D = 2, 5, 4, 2, 32
    cos_sin = _cache(16, D, device)
    cos, sin = cos_sin[:, : D // 2].contiguous(), cos_sin[:, D // 2:].contiguous()
    pos = torch.randint(0, 16, (B, S), device=device)
    backend = "inductor" if device == "cuda" else "aot_eager"

    def f(q, k):
        qe, ke = fuseops.apply_rotary_pos_emb(q, k, cos, sin, pos, rotary_interleaved)
        return (qe * qe).sum() + (ke * 3).sum()

    q = torch.randn(B, S, Hq, D, device=device, requires_grad=True)
    k = torch.randn(B, S, Hk, D, device=device, requires_grad=True)
    q2, k2 = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    f(q, k).backward()
    torch.compile(f, fullgraph=True, backend=backend)(q2, k2).backward()
    torch.testing.assert_close(q2.grad, q.grad)
    torch.testing.assert_close(k2.grad, k.grad)

    def g(q, k):
        qi, ki = flaggems.apply_rotary_pos_emb(q, k, cos, sin, None, rotary_interleaved, inplace=True)
        return fuseops.apply_rotary_pos_emb_backward(qi, ki, cos, sin, None, rotary_interleaved)

    _compiled_matches_eager(device, g, q.detach(), k.detach())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_routing(device, dtype):
    T, E = 9, 64
    logits = torch.randn(T, E, device=device, dtype=dtype)
    bias = torch.randn(E, device=device)
    expert_map = torch.randperm(E, device=device).to(torch.int32)
    expert_map[::3] = -1

    def f(logits):
        w1, ids1, src = fuseops.topk_softmax(logits, 4, renormalize=True, correction_bias=bias)
        w2, ids2 = fuseops.grouped_topk(logits, 8, 4, 6, True, 2.5, bias, "sigmoid", torch.int64)
        w3, ids3 = fuseops.grouped_topk(logits, 1, 1, 3, False, 1.0, None, "softmax")
        aligned = fuseops.moe_align_block_size(ids1, 16, E)
        legacy = fuseops.moe_align_block_size(ids1, 16, E, expert_map, ignore_invalid_experts=False)
        mapped = fuseops.moe_align_block_size(ids1, 16, E, expert_map, pad_sorted_ids=True)
        routed = fuseops.moe_route(logits, 6, 16, True, bias, "sigmoid", 8, 4, 2.5)
        return w1, ids1, src, w2, ids2, w3, ids3, aligned, legacy, mapped, routed

    _compiled_matches_eager(device, f, logits)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_compat_writes_given_outputs(device):
    T, E, k, bs = 6, 32, 2, 8
    logits = torch.randn(T, E, device=device)
    w = torch.empty(T, k, device=device)
    ids = torch.empty(T, k, dtype=torch.int32, device=device)
    src = torch.empty(T, k, dtype=torch.int32, device=device)
    ids_v = torch.randint(0, E, (T, k), dtype=torch.int32, device=device)
    n = T * k + E * (bs - 1)
    sorted_ids = torch.empty(n, dtype=torch.int32, device=device)
    expert_ids = torch.empty((n + bs - 1) // bs, dtype=torch.int32, device=device)
    total = torch.empty(1, dtype=torch.int32, device=device)

    def f(logits, w, ids, src, ids_v, sorted_ids, expert_ids, total):
        vllm.topk_softmax(w, ids, src, logits, True)
        vllm.moe_align_block_size(ids_v, E, bs, sorted_ids, expert_ids, total)
        return vllm.grouped_topk(logits, 4, 2, k, True, 1.0, None, 1)

    _compiled_matches_eager(device, f, logits, w, ids, src, ids_v, sorted_ids, expert_ids, total)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_k_limit_error_under_compile(device):
    """k above topk_group * E / n_group: still a ValueError naming the op when compiled (the op raises it when the
    compiled graph runs; the argument may be named topk_weights there, the op's own name for k)."""
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    logits = torch.randn(4, 16, device=device)

    def f(x):
        return fuseops.grouped_topk(x, 4, 1, 5, True)

    with pytest.raises(ValueError, match=r"grouped_topk: (topk|topk_weights): expected k"):
        torch.compile(f, fullgraph=True, backend=backend)(logits)


@pytest.mark.parametrize("device", DEVICES)
def test_gdn(device):
    T, H, HV, K, V = 40, 2, 4, 32, 16
    dt = torch.bfloat16
    cu = torch.tensor([0, 0, 17, 40], dtype=torch.int64, device=device)
    q = torch.nn.functional.normalize(torch.randn(1, T, H, K, device=device), dim=-1).to(dt)
    k = torch.nn.functional.normalize(torch.randn(1, T, H, K, device=device), dim=-1).to(dt)
    v = torch.randn(1, T, HV, V, device=device, dtype=dt)
    g = torch.nn.functional.logsigmoid(torch.randn(1, T, HV, device=device))
    beta = torch.rand(1, T, HV, device=device, dtype=dt)
    h0 = torch.randn(3, HV, K, V, device=device)
    pool = torch.randn(5, HV, K, V, device=device)
    slots = torch.tensor([4, -1, 1], dtype=torch.int32, device=device)

    def f(q, k, v, g, beta, h0, pool):
        o, ht = fuseops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                               cu_seqlens=cu, chunk_size=16)
        # the chunk states in their slots (nothing read on the host): the slots of the 4 chunks, the others unwritten
        os, hs, h = fuseops.chunk_gated_delta_rule_with_states(q, k, v, g, beta, initial_state=h0,
                                                               output_final_state=True, cu_seqlens=cu, chunk_size=16)
        h = h[0, [1, 2, 3, 5]]
        gc = fuseops.chunk_local_cumsum(g, 16, cu_seqlens=cu)
        a = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, gc, beta, cu, 16)
        od, hd = fuseops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=h0,
                                                          output_final_state=True, cu_seqlens=cu)
        step = slice(0, 3)
        ou, _ = fuseops.fused_recurrent_gated_delta_rule(
            q[:, step], k[:, step], v[:, step], g[:, step], beta[:, step], initial_state=pool,
            cu_seqlens=torch.arange(4, device=q.device), ssm_state_indices=slots, use_qk_l2norm_in_kernel=True)
        return o, ht, os, hs, h, gc, a, od, hd, ou

    _compiled_matches_eager(device, f, q, k, v, g, beta, h0, pool)


@pytest.mark.parametrize("device", DEVICES)
def test_gdn_vllm_order_with_chunk_states(device):
    # vLLM's order: without cu_seqlens the chunk states trace (nothing read on the host) and equal eager bit for bit
    # (no l2 normalisation: that one is torch arithmetic, which inductor may fuse in another order); with cu_seqlens
    # they read cu_seqlens on the host, refused by name while traced (fullgraph=True: Dynamo's error for the raise)
    B, T, H, HV, K, V = 2, 70, 1, 2, 32, 32
    dt = torch.bfloat16
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(dt)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(dt)
    v = torch.randn(B, T, HV, V, device=device, dtype=dt)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, HV, device=device))
    beta = torch.rand(B, T, HV, device=device, dtype=dt)
    h0 = torch.randn(B, HV, K, V, device=device)

    def f(q, k, v, g, beta, h0):
        return vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, None, False, False, True)

    _compiled_matches_eager(device, f, q, k, v, g, beta, h0)

    cu = torch.tensor([0, 70, 140], dtype=torch.int32, device=device)

    def varlen(q, k, v, g, beta, h0):
        return vllm.chunk_gated_delta_rule(q, k, v, g, beta, None, h0, True, cu, False, False, True)

    flat = [x.reshape(1, B * T, *x.shape[2:]) for x in (q, k, v, g, beta)]
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    with torch.no_grad(), pytest.raises(Exception) as raised:
        torch.compile(varlen, fullgraph=True, backend=backend)(*flat, h0)
    chain = " | ".join(str(e) for e in (raised.value, raised.value.__cause__, raised.value.__context__) if e)
    # our ValueError, as raised or as Dynamo reports the raise (its message names the exception and, in its debug
    # context, the text); any other exception in the traced path would not name return_intermediate_states
    assert "return_intermediate_states" in chain or ("Observed exception" in chain and "ValueError" in chain), chain
    # eager, the same call is fine
    with torch.no_grad():
        assert varlen(*flat, h0)[2].shape == (4, HV, K, V)


@pytest.mark.parametrize("device", DEVICES)
def test_gated_norm(device):
    x = torch.randn(3, 5, 64, device=device, dtype=torch.bfloat16)
    z = torch.randn_like(x)
    w = torch.randn(64, device=device)
    b = torch.randn(64, device=device)

    def f(x, z):
        out, mean, rstd = fuseops.layer_norm_fwd(x, w, b, 1e-5, z=z, group_size=16, norm_before_gate=False)
        y = fuseops.rmsnorm_fn(x, w, None, z=z, group_size=32)
        return out, mean, rstd, y, fuseops.layernorm_fn(x, w, b)

    _compiled_matches_eager(device, f, x, z)

    # views the op does not take (leading dims that do not flatten, overlapping rows), which the FLA functions copy,
    # and a 16-bit weight read as f32: the layout test is on strides, so it traces as it runs
    def views(wide, row):
        return (fuseops.rmsnorm_fn(wide[:, :3, :64], w.bfloat16(), None, z=wide[:, 1:4, :64]),
                fuseops.layernorm_fn(row.expand(4, -1), w, b.half()))

    _compiled_matches_eager(device, views, torch.randn(2, 7, 70, device=device, dtype=torch.bfloat16),
                            torch.randn(1, 64, device=device, dtype=torch.bfloat16))
