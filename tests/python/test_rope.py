"""Rotary embeddings from PyTorch: parity with a plain-PyTorch float64 reference (NeoX / GPT-J, partial rotary,
fused-qkv views, GQA, M-RoPE layouts), autograd of apply_rotary_pos_emb, the compat names, bad positions, errors,
opcheck."""

import pytest
from common import DEVICES, DTYPES, requires_cuda, requires_opcheck, torch

import fuseops
from fuseops.compat import flaggems as fg
from fuseops.compat import vllm

TOL = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def cache_of(max_pos, r, dtype, device, base=10000.0):
    inv = base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    ang = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv)
    return torch.cat((ang.cos(), ang.sin()), -1).to(dtype).to(device)


def rotate_ref(x, cos, sin, is_neox, inverse=False):
    """x [..., r] float64; cos / sin [..., r / 2] broadcastable."""
    if inverse:
        sin = -sin
    if is_neox:
        a, b = x.chunk(2, -1)
        return torch.cat((a * cos - b * sin, b * cos + a * sin), -1)
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), -1).flatten(-2)


def rope_ref(x, pos, cache, head_size, is_neox, inverse=False):
    """x [T, H * D] -> float64 result; cache rows by pos [T]."""
    T = x.shape[0]
    r = cache.shape[1]
    xd = x.double().cpu().view(T, -1, head_size).clone()
    c = cache.double().cpu()[pos.cpu().long()]
    cos, sin = c[:, None, : r // 2], c[:, None, r // 2:]
    xd[..., :r] = rotate_ref(xd[..., :r], cos, sin, is_neox, inverse)
    return xd.view(T, -1)


def close(out, ref, dtype):
    err = (out.double().cpu() - ref).abs().max().item()
    assert err <= TOL[dtype] * max(1.0, ref.abs().max().item()), err


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("D,r", [(128, 128), (256, 64), (128, 80)])
def test_rotary_embedding_fused_qkv(device, dtype, is_neox, D, r):
    T, Hq, Hk = 7, 4, 2
    gen = torch.Generator().manual_seed(1)
    qkv = torch.randn(T, (Hq + 2 * Hk) * D, generator=gen).to(dtype).to(device)
    q, k = qkv[:, : Hq * D], qkv[:, Hq * D: (Hq + Hk) * D]
    v0 = qkv[:, (Hq + Hk) * D:].clone()
    cache = cache_of(64, r, dtype, device)
    pos = torch.randint(0, 64, (T,), generator=gen).to(device)
    qr, kr = rope_ref(q, pos, cache, D, is_neox), rope_ref(k, pos, cache, D, is_neox)
    out_q, out_k = fuseops.rotary_embedding(pos, q, k, D, cache, is_neox)
    assert out_q.data_ptr() == q.data_ptr()
    close(q, qr, dtype)
    close(k, kr, dtype)
    assert torch.equal(qkv[:, (Hq + Hk) * D:], v0)
    # vLLM's name; key=None; the backward brings q back.
    vllm.rotary_embedding(pos, q, None, D, cache, is_neox)
    fuseops.rotary_embedding_backward(pos, q, None, D, cache, is_neox)
    close(q, qr, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("D,r,offset", [(128, 64, 64), (192, 64, 128), (128, 32, 40), (64, 64, 0)])
def test_vllm_rotary_embedding_rope_dim_offset(device, is_neox, D, r, offset):
    # vLLM's rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox, rope_dim_offset, inverse):
    # dims [offset, offset + r) of each head rotated, the others untouched; query flat, key [T, Hk, D] in a qkv buffer
    T, Hq, Hk, dtype = 5, 3, 2, torch.float32
    gen = torch.Generator().manual_seed(7)
    qkv = torch.randn(T, (Hq + Hk) * D + 8, generator=gen).to(device)
    q, k = qkv[:, : Hq * D], qkv[:, Hq * D: (Hq + Hk) * D].view(T, Hk, D)
    q0, k0, rest0 = q.clone(), k.clone(), qkv[:, (Hq + Hk) * D:].clone()
    cache = cache_of(16, r, dtype, device)
    pos = torch.randint(0, 16, (T,), generator=gen).to(device)

    def want(x):
        xd = x.double().cpu().reshape(T, -1, D).clone()
        part = rope_ref(xd[..., offset: offset + r].reshape(T, -1), pos, cache, r, is_neox)
        xd[..., offset: offset + r] = part.view(T, -1, r)
        return xd

    assert vllm.rotary_embedding(pos, q, k, D, cache, is_neox, offset, False) is None  # as vLLM's op
    close(q.reshape(T, -1, D), want(q0), dtype)
    close(k, want(k0).view(T, Hk, D), dtype)
    assert torch.equal(q.reshape(T, -1, D)[..., :offset], q0.reshape(T, -1, D)[..., :offset])
    assert torch.equal(q.reshape(T, -1, D)[..., offset + r:], q0.reshape(T, -1, D)[..., offset + r:])
    assert torch.equal(qkv[:, (Hq + Hk) * D:], rest0)
    vllm.rotary_embedding(pos, q, k, D, cache, is_neox, rope_dim_offset=offset, inverse=True)  # back
    close(q, q0.double().cpu(), dtype)
    close(k, k0.double().cpu(), dtype)


def test_glm4v_as_transformers_runs_it_is_chunked_with_gptj_pairs():
    # GLM-4.1V's M-RoPE as transformers writes it (glm4v apply_multimodal_rotary_pos_emb): the duplicated cos / sin
    # split by mrope_section * 2 with chunk i taken from axis i % 3, the first half repeated pairwise, GPT-J rotation
    # of the first r dims. That is layout "chunked" with is_neox=False, not FlagGems' GLM round-robin map.
    T, H, D, r, section = 6, 2, 128, 64, [8, 12, 12]
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(T, H, D, generator=gen, dtype=torch.float64)
    cache = cache_of(128, r, torch.float64, "cpu")
    pos = torch.randint(0, 128, (3, T), generator=gen)
    rows = cache[pos]  # [3, T, r]: cos | sin of each axis' position
    full_cos = torch.cat((rows[..., : r // 2], rows[..., : r // 2]), -1)
    full_sin = torch.cat((rows[..., r // 2:], rows[..., r // 2:]), -1)

    def merged(t):
        parts = t.split(section * 2, dim=-1)
        return torch.cat([m[i % 3] for i, m in enumerate(parts)], -1)[:, None, : r // 2].repeat_interleave(2, -1)

    cos, sin = merged(full_cos), merged(full_sin)
    xr = x[..., :r]
    rot = torch.stack((-xr[..., 1::2], xr[..., 0::2]), -1).flatten(-2)
    want = torch.cat((xr * cos + rot * sin, x[..., r:]), -1)
    for layout, ok in (("chunked", True), ("interleaved_glm", False)):
        got = x.float().clone()
        fuseops.mrope(got, None, cache.float(), pos, section, D, r, is_neox=False, layout=layout)
        err = (got.double() - want).abs().max().item()
        assert (err < 1e-5) == ok, (layout, err)


def test_vllm_rotary_embedding_rope_dim_offset_errors():
    q, cache, pos = torch.randn(4, 2 * 64), cache_of(8, 32, torch.float32, "cpu"), torch.arange(4)
    for bad in (-1, 33, 64):
        with pytest.raises(ValueError, match=r"^rotary_embedding: rope_dim_offset: expected 0 <= rope_dim_offset <= "
                                             r"head_size - rotary_dim = 64 - 32, got"):
            vllm.rotary_embedding(pos, q.clone(), None, 64, cache, True, bad)
    with pytest.raises(ValueError, match=r"^rotary_embedding: rope_dim_offset: expected an int"):
        vllm.rotary_embedding(pos, q.clone(), None, 64, cache, True, 8.5)
    for head_size in (0, 16):  # no offset could fit rotary_dim 32: head_size is named
        with pytest.raises(ValueError, match=r"^rotary_embedding: head_size: expected head_size >= rope_dim_offset \+ "
                                             rf"rotary_dim = 8 \+ 32, got {head_size}$"):
            vllm.rotary_embedding(pos, q.clone(), None, head_size, cache, True, 8)
    with pytest.raises(ValueError, match=r"^rotary_embedding: query: expected \[tokens..., H \* head_size\]"):
        vllm.rotary_embedding(pos, torch.randn(4, 96), None, 64, cache, True, 16)
    # what the op refuses on the heads' views is told with the offset and the caller's head_size
    with pytest.raises(ValueError, match=r"^rotary_embedding: query: .*\(with rope_dim_offset 16, the op rotates "
                                         r"the views \[..., H, head_size - rope_dim_offset\] = \[..., H, 48\].*"
                                         r"head_size 64\)$"):
        vllm.rotary_embedding(torch.arange(3), q.clone(), None, 64, cache, True, 16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout,section,r,is_neox", [
    ("chunked", [16, 24, 24], 128, True),
    ("interleaved", [24, 20, 20], 128, True),
    ("interleaved_glm", [8, 12, 12], 64, False),
    ("interleaved", [24, 20, 20], 128, False),
])
def test_mrope(device, layout, section, r, is_neox):
    T, Hq, Hk, D, dtype = 6, 4, 1, 128, torch.float32
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(T, Hq * D, generator=gen).to(device)
    k = torch.randn(T, Hk * D, generator=gen).to(device)
    cache = cache_of(32, r, dtype, device)
    pos = torch.randint(0, 32, (3, T), generator=gen).to(device)
    h = r // 2
    if layout == "chunked":
        axis = [0] * section[0] + [1] * section[1] + [2] * section[2]
    elif layout == "interleaved":
        axis = [1 if (j % 3 == 1 and j < 3 * section[1]) else 2 if (j % 3 == 2 and j < 3 * section[2]) else 0
                for j in range(h)]
    else:
        axis = [0 if c == "T" else 1 if c == "H" else 2 for c in "THWTHWTHWTHWTHWTHWTHWTHWHHWHHWWW"]
    c = cache.double().cpu()
    rows = pos.cpu()[torch.tensor(axis)]  # [h, T]
    cos = torch.stack([c[rows[j], j] for j in range(h)], -1)[:, None]  # [T, 1, h]
    sin = torch.stack([c[rows[j], h + j] for j in range(h)], -1)[:, None]

    def ref(x):
        xd = x.double().cpu().view(T, -1, D).clone()
        xd[..., :r] = rotate_ref(xd[..., :r], cos, sin, is_neox)
        return xd.view(T, -1)

    qr, kr = ref(q), ref(k)
    if layout == "interleaved_glm":
        fg.mrope(q, k, cache, pos, *section, D, r, is_interleaved_glm=True, is_neox_style=is_neox)
    else:
        fuseops.mrope(q, k, cache, pos, section, D, r, is_neox, layout)
    close(q, qr, dtype)
    close(k, kr, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("with_ids", [False, True])
def test_apply_rotary_pos_emb(device, dtype, interleaved, with_ids):
    B, S, Hq, Hk, D = 2, 5, 4, 2, 64
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(B, S, Hq, D, generator=gen).to(dtype).to(device)
    k = torch.randn(B, S, Hk, D, generator=gen).to(dtype).to(device)
    cache = cache_of(16, D, dtype, device)
    cos, sin = cache[:, : D // 2].contiguous(), cache[:, D // 2:].contiguous()
    ids = torch.randint(0, 16, (B, S), generator=gen).to(device) if with_ids else None
    p = (ids if with_ids else torch.arange(S, device=device).repeat(B, 1)).cpu().long()
    c, s = cos.double().cpu()[p][:, :, None], sin.double().cpu()[p][:, :, None]
    qr = rotate_ref(q.double().cpu(), c, s, not interleaved)
    kr = rotate_ref(k.double().cpu(), c, s, not interleaved)
    qe, ke = fg.apply_rotary_pos_emb(q, k, cos, sin, ids, interleaved)
    close(qe, qr, dtype)
    close(ke, kr, dtype)
    qi, ki = q.clone(), k.clone()
    fuseops.apply_rotary_pos_emb(qi, ki, cos, sin, ids, interleaved, inplace=True)
    close(qi, qr, dtype)
    close(ki, kr, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_apply_rotary_pos_emb_autograd(device):
    B, S, H, D = 1, 4, 2, 32
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(B, S, H, D, generator=gen, dtype=torch.float64).float().to(device).requires_grad_()
    k = torch.randn(B, S, H, D, generator=gen, dtype=torch.float64).float().to(device).requires_grad_()
    cache = cache_of(8, D, torch.float32, device)
    cos, sin = cache[:, : D // 2].contiguous(), cache[:, D // 2:].contiguous()
    qe, ke = fuseops.apply_rotary_pos_emb(q, k, cos, sin)
    gq, gk = torch.randn_like(qe), torch.randn_like(ke)
    (qe * gq + ke * gk).sum().backward()
    # Reference: autograd through the float64 formula.
    qd, kd = q.detach().double().cpu().requires_grad_(), k.detach().double().cpu().requires_grad_()
    p = torch.arange(S)[None].repeat(B, 1)
    c, s = cos.double().cpu()[p][:, :, None], sin.double().cpu()[p][:, :, None]
    (rotate_ref(qd, c, s, True) * gq.double().cpu() + rotate_ref(kd, c, s, True) * gk.double().cpu()).sum().backward()
    assert torch.allclose(q.grad.double().cpu(), qd.grad, atol=1e-5)
    assert torch.allclose(k.grad.double().cpu(), kd.grad, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_apply_rotary_pos_emb_backward_of_sum(device):
    # .sum() hands backward an expanded (all strides 0) gradient: each q / k element gets the sum over the outputs it
    # feeds, i.e. the inverse rotation of a ones tensor.
    B, S, Hq, Hk, D = 2, 5, 4, 2, 8
    q = torch.randn(B, S, Hq, D, device=device, requires_grad=True)
    k = torch.randn(B, S, Hk, D, device=device, requires_grad=True)
    cache = cache_of(16, D, torch.float32, device)
    cos, sin = cache[:, : D // 2].contiguous(), cache[:, D // 2:].contiguous()
    qe, ke = fuseops.apply_rotary_pos_emb(q, k, cos, sin)
    (qe.sum() + ke.sum()).backward()
    want_q, want_k = fuseops.apply_rotary_pos_emb_backward(torch.ones(B, S, Hq, D, device=device),
                                                           torch.ones(B, S, Hk, D, device=device), cos, sin)
    assert torch.equal(q.grad, want_q) and torch.equal(k.grad, want_k)
    q.grad = k.grad = None
    qe, ke = fuseops.apply_rotary_pos_emb(q, k, cos, sin)
    qe[:, :, 0].sum().backward()  # a gradient that is zero outside head 0, k's all zero
    assert torch.equal(q.grad[:, :, 0], want_q[:, :, 0]) and not q.grad[:, :, 1:].any() and not k.grad.any()
    # an empty sequence: .sum()'s gradient is empty with strides 0, which torch calls contiguous (it had been refused)
    q0 = torch.randn(B, 0, Hq, D, device=device, requires_grad=True)
    k0 = torch.randn(B, 0, Hk, D, device=device, requires_grad=True)
    qe, ke = fuseops.apply_rotary_pos_emb(q0, k0, cos, sin)
    (qe.sum() + ke.sum()).backward()
    assert q0.grad.shape == q0.shape and k0.grad.shape == k0.shape


@pytest.mark.parametrize("device", DEVICES)
def test_apply_rotary_pos_emb_backward_of_one_gradient_for_both(device):
    # q_embed + k_embed (Hq == Hk): autograd hands the same gradient tensor to both outputs; the backward reads it as
    # grad_q and grad_k at once (inputs only read may overlap; it had been refused as an overlap).
    B, S, H, D = 1, 4, 2, 8
    q = torch.randn(B, S, H, D, device=device, requires_grad=True)
    k = torch.randn(B, S, H, D, device=device, requires_grad=True)
    cache = cache_of(16, D, torch.float32, device)
    cos, sin = cache[:, : D // 2].contiguous(), cache[:, D // 2:].contiguous()
    w = torch.randn(B, S, H, D, device=device)
    qe, ke = fuseops.apply_rotary_pos_emb(q, k, cos, sin)
    ((qe + ke) * w).sum().backward()
    want, _ = fuseops.apply_rotary_pos_emb_backward(w, w.clone(), cos, sin)
    assert torch.equal(q.grad, want) and torch.equal(k.grad, want)
    # q and k one tensor out of place: both outputs are its rotation
    qe, ke = fuseops.apply_rotary_pos_emb(w, w, cos, sin)
    assert torch.equal(qe, ke) and torch.equal(qe, fuseops.apply_rotary_pos_emb(w, w.clone(), cos, sin)[1])


def test_apply_rotary_pos_emb_backward_errors_name_the_gradient():
    cache = cache_of(8, 64, torch.float32, "cpu")
    cos, sin = cache[:, :32].contiguous(), cache[:, 32:].contiguous()
    g = torch.randn(1, 4, 2, 64)
    with pytest.raises(ValueError, match="apply_rotary_pos_emb_backward: grad_q: expected dtype"):
        fuseops.apply_rotary_pos_emb_backward(torch.zeros(1, 4, 2, 64, dtype=torch.int32), g, cos, sin)
    with pytest.raises(ValueError, match="apply_rotary_pos_emb_backward: grad_k"):
        fuseops.apply_rotary_pos_emb_backward(g, torch.randn(1, 3, 2, 64), cos, sin)


def test_apply_rotary_pos_emb_reads_any_layout(monkeypatch):
    # The out-of-place forms only read q and k: a layout the op does not take is copied (the same bytes as from a
    # contiguous copy), one it takes is read as it is (no copy).
    B, S, H, D = 2, 5, 3, 16
    cache = cache_of(8, D, torch.float32, "cpu")
    cos, sin = cache[:, :D // 2].contiguous(), cache[:, D // 2:].contiguous()
    ids = torch.randint(0, 8, (B, S))
    base = torch.randn(B, H, S, 2 * D)
    views = {
        "HF [B, H, S, D].transpose(1, 2)": base[..., :D].contiguous().transpose(1, 2),
        "innermost stride 2": base.transpose(1, 2)[..., ::2],
        "expanded": torch.randn(1, 1, 1, D).expand(B, S, H, D),
        "empty expanded": torch.randn(1, 1, 1, D).expand(B, 0, H, D),
        # layouts with gaps or overlaps, for which empty_like would give outputs the op refuses
        "overlapping heads": torch.randn(B, S, H + D - 1).unfold(-1, D, 1),
        "expanded heads, size-1 dim of stride 1": torch.randn(S, D, 1).permute(2, 0, 1).unsqueeze(2).expand(1, S, H, D),
    }
    for name, q in views.items():
        k = torch.randn(*q.shape[:2], 1, D)
        for with_ids in (False, True):
            p = ids[:q.shape[0], :q.shape[1]] if with_ids else None
            for f in (fuseops.apply_rotary_pos_emb, fuseops.apply_rotary_pos_emb_backward):
                got = f(q, k, cos, sin, p)
                want = f(q.contiguous(), k, cos, sin, p)
                assert all(torch.equal(a, b) for a, b in zip(got, want)), (name, with_ids, f.__name__)
    # token dims that flatten only after a copy (rank 5)
    q5 = torch.randn(200)[:100].as_strided((1, 2, 2, 2, D), (100, 24, 12, 16, 1))
    k5, p5 = torch.randn(1, 2, 2, 1, D), ids[:1, :4].reshape(1, 2, 2)
    got = fuseops.apply_rotary_pos_emb(q5, k5, cos, sin, p5)
    want = fuseops.apply_rotary_pos_emb(q5.contiguous(), k5, cos, sin, p5)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    # an incoming gradient of such a layout in the autograd backward (its strides (1, S D, 0, 1) after sum(2) ... )
    q = torch.randn(1, S, H, D, requires_grad=True)
    qe, _ = fuseops.apply_rotary_pos_emb(q, torch.randn(1, S, 1, D), cos, sin)
    w = torch.randn(S, D, 1)
    (qe.sum(2).permute(1, 2, 0) * w).sum().backward()
    g = w.permute(2, 0, 1).unsqueeze(2).expand(1, S, H, D).contiguous()
    assert torch.equal(q.grad, fuseops.apply_rotary_pos_emb_backward(g, torch.zeros(1, S, 1, D), cos, sin)[0])
    seen, real = [], fuseops.rope.ops

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def apply_rotary_pos_emb(self, *args):
            seen.append(args[2].data_ptr())
            return real.apply_rotary_pos_emb(*args)

    monkeypatch.setattr(fuseops.rope, "ops", Spy())
    qkv = torch.randn(B, S, 3 * H, D)  # q: the first H heads of a fused buffer, read in place
    fuseops.apply_rotary_pos_emb(qkv[:, :, :H], qkv[:, :, H:H + 1], cos, sin)
    fuseops.apply_rotary_pos_emb(qkv[:, :, :H].transpose(0, 1), qkv[:, :, H:H + 1].transpose(0, 1), cos, sin)
    assert seen == [qkv.data_ptr(), seen[1]] and seen[1] != qkv.data_ptr()


@pytest.mark.parametrize("device", DEVICES)
def test_zero_tokens_with_two_dim_positions(device):
    q, cache = torch.randn(2, 0, 16, device=device), cache_of(8, 8, torch.float32, device)
    fuseops.rotary_embedding(torch.zeros(2, 0, dtype=torch.long, device=device), q, None, 8, cache)
    fuseops.mrope(torch.randn(0, 16, device=device), None, cache, torch.zeros(3, 0, dtype=torch.long, device=device),
                  [2, 1, 1], 8, 8)
    fuseops.rotary_embedding(torch.arange(5, device=device), torch.randn(5, 0, device=device), None, 16,
                             cache_of(32, 8, torch.float32, device))  # zero heads


@pytest.mark.parametrize("device", DEVICES)
def test_mrope_positions_with_any_token_stride(device):
    T, D, P = 7, 16, 50
    cache = cache_of(P, D, torch.float32, device)
    pos = torch.randint(0, P, (T, 3), device=device).t()  # [3, T], strides [1, 3]
    q = torch.randn(T, 3 * D, device=device)
    want, got = q.clone(), q.clone()
    fuseops.mrope(want, None, cache, pos.contiguous(), [2, 3, 3], D, D)
    fuseops.mrope(got, None, cache, pos, [2, 3, 3], D, D)
    assert torch.equal(got, want) and not torch.equal(got, q)


@pytest.mark.parametrize("device", DEVICES)
def test_positions_that_do_not_flatten_are_copied(device):
    # HF's position_ids = arange(S).expand(B, S) (stride 0) and a transposed [B, S]: the Python functions take them
    # as their contiguous copies give (the C++ API refuses them by name); the caller's tensor is left as it was
    B, S, H, D, P = 3, 5, 2, 16, 40
    cache = cache_of(P, D, torch.float32, device)
    cos, sin = cache[:, : D // 2].contiguous(), cache[:, D // 2:].contiguous()
    expanded = torch.arange(S, device=device).expand(B, S)
    transposed = torch.randint(0, P, (S, B), device=device).t()
    for ids in (expanded, transposed):
        strides = ids.stride()
        q, k = torch.randn(B, S, H, D, device=device), torch.randn(B, S, 1, D, device=device)
        want = fuseops.apply_rotary_pos_emb(q, k, cos, sin, ids.contiguous())
        got = fuseops.apply_rotary_pos_emb(q, k, cos, sin, ids)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        assert torch.equal(fuseops.apply_rotary_pos_emb_backward(q, k, cos, sin, ids)[0],
                           fuseops.apply_rotary_pos_emb_backward(q, k, cos, sin, ids.contiguous())[0])
        qi, ki = q.clone(), k.clone()
        fuseops.apply_rotary_pos_emb(qi, ki, cos, sin, ids, inplace=True)
        assert torch.equal(qi, want[0]) and torch.equal(ki, want[1])
        qv, qw = q.clone(), q.clone()
        fuseops.rotary_embedding(ids, qv, None, D, cache)
        fuseops.rotary_embedding(ids.contiguous(), qw, None, D, cache)
        assert torch.equal(qv, qw) and not torch.equal(qv, q)
        assert ids.stride() == strides


def test_mrope_section_sum_that_wraps_is_rejected():
    with pytest.raises(ValueError, match="mrope: mrope_section"):
        fuseops.mrope(torch.randn(4, 128), None, cache_of(8, 12, torch.float32, "cpu"),
                      torch.zeros(3, 4, dtype=torch.long), [2**63 - 1, 2**63 - 1, 8], 64, 12)


@pytest.mark.parametrize("call", ["rotary_embedding", "mrope", "apply_inplace"])
def test_in_place_rotation_of_a_tensor_that_requires_grad_raises(call):
    q, k = torch.randn(5, 64, requires_grad=True), torch.randn(5, 64)
    cache = cache_of(32, 16, torch.float32, "cpu")
    cos, sin = cache[:, :8].contiguous(), cache[:, 8:].contiguous()
    run = {
        "rotary_embedding": lambda q, k: fuseops.rotary_embedding(torch.arange(5), k, q, 16, cache),
        "mrope": lambda q, k: fuseops.mrope(q, k, cache, torch.arange(5).expand(3, 5), [2, 3, 3], 16, 16),
        "apply_inplace": lambda q, k: fuseops.apply_rotary_pos_emb(k.view(1, 5, 4, 16), q.view(1, 5, 4, 16), cos, sin,
                                                                   inplace=True),
    }[call]
    name = {"rotary_embedding": "key", "mrope": "query", "apply_inplace": "k"}[call]
    q0 = q.detach().clone()
    with pytest.raises(RuntimeError, match=f"{'apply_rotary_pos_emb' if call == 'apply_inplace' else call}: {name}: "):
        run(q, k)
    assert torch.equal(q.detach(), q0)
    with torch.no_grad():
        run(q, k)
    assert not torch.equal(q.detach(), q0)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_position_leaves_token_and_is_reported(device):
    T, H, D = 4, 2, 64
    q = torch.randn(T, H * D).to(device)
    q0 = q.clone()
    cache = cache_of(8, D, torch.float32, device)
    pos = torch.tensor([1, 8, 2, -1]).to(device)
    fuseops.clear_errors()
    fuseops.rotary_embedding(pos, q, None, D, cache, True)
    assert torch.equal(q[1], q0[1]) and torch.equal(q[3], q0[3])
    assert not torch.equal(q[0], q0[0])
    with pytest.raises(ValueError, match="rotary_embedding: positions: value out of range at index 1"):
        fuseops.check_errors()
    fuseops.check_errors()  # cleared
    # the backward forms record under their own names (they are their own ops, not the forward with inverse=True)
    fuseops.rotary_embedding_backward(pos, q, None, D, cache, True)
    with pytest.raises(ValueError, match="^rotary_embedding_backward: positions: value out of range at index 1"):
        fuseops.check_errors()
    fuseops.mrope_backward(q, None, cache, pos.repeat(3, 1), [8, 12, 12], D, D)
    with pytest.raises(ValueError, match="^mrope_backward: positions: value out of range at index 1"):
        fuseops.check_errors()
    fuseops.rotary_embedding(pos, q, None, D, cache, True, inverse=True)  # the forward's inverse keeps its name
    with pytest.raises(ValueError, match="^rotary_embedding: positions: value out of range at index 1"):
        fuseops.check_errors()


def test_errors_name_the_argument():
    q = torch.randn(4, 128)
    cache = cache_of(8, 64, torch.float32, "cpu")
    with pytest.raises(ValueError, match="rotary_embedding: positions"):
        fuseops.rotary_embedding(torch.zeros(4), q, None, 64, cache)
    with pytest.raises(ValueError, match="rotary_embedding: query"):
        fuseops.rotary_embedding(torch.zeros(4, dtype=torch.long), torch.randn(4, 100), None, 64, cache)
    with pytest.raises(ValueError, match="mrope: mrope_section"):
        fuseops.mrope(q, None, cache, torch.zeros(3, 4, dtype=torch.long), [8, 8, 8], 64, 64)
    with pytest.raises(ValueError, match="mrope: layout"):
        fuseops.mrope(q, None, cache, torch.zeros(3, 4, dtype=torch.long), [8, 12, 12], 64, 64, layout="qwen")
    with pytest.raises(ValueError, match="apply_rotary_pos_emb: cos"):
        fuseops.apply_rotary_pos_emb(torch.randn(1, 4, 2, 64), torch.randn(1, 4, 2, 64), cache, cache)
    # integers and flags as given: a fraction or a truthy non-bool is an error, never truncated or read as True
    pos3 = torch.zeros(3, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="mrope: mrope_section: expected an int, got 8.9"):
        fuseops.mrope(q.clone(), None, cache, pos3, [8.9, 12.2, 12.5], 64, 64)
    with pytest.raises(ValueError, match="rotary_embedding: head_size: expected an int, got 64.5"):
        fuseops.rotary_embedding(torch.zeros(4, dtype=torch.long), q.clone(), None, 64.5, cache)
    with pytest.raises(ValueError, match=r"^rotary_embedding: head_size: expected an int in .* \(int64\)"):
        fuseops.rotary_embedding(torch.zeros(4, dtype=torch.long), q.clone(), None, 2**64 + 64, cache)
    with pytest.raises(ValueError, match=r"^mrope: mrope_section: expected an int in .* \(int64\)"):
        fuseops.mrope(q.clone(), None, cache, pos3, [8, 12, 2**64 + 12], 64, 64)
    with pytest.raises(ValueError, match="rotary_embedding: is_neox: expected a bool"):
        fuseops.rotary_embedding(torch.zeros(4, dtype=torch.long), q.clone(), None, 64, cache, "no")
    with pytest.raises(ValueError, match="apply_rotary_pos_emb: rotary_interleaved: expected a bool"):
        fuseops.apply_rotary_pos_emb(torch.randn(1, 4, 2, 64), torch.randn(1, 4, 2, 64), cache[:, :32].contiguous(),
                                     cache[:, 32:].contiguous(), rotary_interleaved=1)


def test_per_head_fused_qkv_views():
    # GPT-NeoX / HF per-head [q | k | v]: q and k interleave in memory without sharing an element
    T, H, D = 5, 3, 16
    qkv = torch.randn(T, H, 3 * D)
    ref = qkv.clone()
    pos = torch.tensor([0, 3, 1, 7, 2])
    cache = cache_of(8, D, torch.float32, "cpu")
    fuseops.rotary_embedding(pos, qkv[..., :D], qkv[..., D:2 * D], D, cache)
    close(qkv[..., :D].reshape(T, -1), rope_ref(ref[..., :D].reshape(T, -1), pos, cache, D, True), torch.float32)
    close(qkv[..., D:2 * D].reshape(T, -1), rope_ref(ref[..., D:2 * D].reshape(T, -1), pos, cache, D, True),
          torch.float32)
    assert torch.equal(qkv[..., 2 * D:], ref[..., 2 * D:])  # v untouched
    qo, ko = fuseops.apply_rotary_pos_emb(ref[None, :, :, :D], ref[None, :, :, D:2 * D], cache[:, :D // 2].contiguous(),
                                          cache[:, D // 2:].contiguous(), pos[None])
    assert torch.equal(qo[0], qkv[..., :D]) and torch.equal(ko[0], qkv[..., D:2 * D])
    # a cache that is (part of) the query being rotated in place is refused
    buf = torch.randn(4, 32)
    with pytest.raises(ValueError, match="rotary_embedding: query: expected no overlap with cos_sin_cache"):
        fuseops.rotary_embedding(torch.tensor([1, 2, 3, 0]), buf, None, 16, buf[:, 16:])


def test_flags_tensors_and_tables_by_name():
    pos, q, cache = torch.zeros(4, dtype=torch.long), torch.randn(4, 64), cache_of(8, 64, torch.float32, "cpu")
    cos, sin = cache[:, :32].contiguous(), cache[:, 32:].contiguous()
    q4, k4 = torch.randn(1, 4, 2, 64), torch.randn(1, 4, 1, 64)
    cases = [
        ("apply_rotary_pos_emb: inplace: expected a bool", lambda: fuseops.apply_rotary_pos_emb(q4, k4, cos, sin,
                                                                                                inplace="no")),
        ("mrope: is_interleaved: expected a bool", lambda: fg.mrope(q.clone(), None, cache, pos, 8, 12, 12, 64, 64,
                                                                    "no")),
        ("rotary_embedding: is_neox: expected a bool", lambda: vllm.rotary_embedding(pos, q.clone(), None, 64, cache,
                                                                                     0)),
        ("rotary_embedding: query: expected a torch.Tensor", lambda: fuseops.rotary_embedding(pos, "q", None, 64,
                                                                                              cache)),
        ("rotary_embedding: positions: expected a torch.Tensor", lambda: fuseops.rotary_embedding([0, 1], q, None, 64,
                                                                                                  cache)),
        ("mrope: key: expected a torch.Tensor or None", lambda: fuseops.mrope(q, "k", cache, pos, [8, 12, 12], 64,
                                                                              64)),
        ("apply_rotary_pos_emb: k: expected a torch.Tensor", lambda: fuseops.apply_rotary_pos_emb(q4, None, cos, sin)),
        ("rotary_embedding_backward: grad_query: expected a torch.Tensor",
         lambda: fuseops.rotary_embedding_backward(pos, [1.0], None, 64, cache)),
    ]
    for message, call in cases:
        with pytest.raises(ValueError, match=message):
            call()
    # cos / sin / the cache get no gradient: refused when they require one (grad mode on), not dropped silently
    with pytest.raises(RuntimeError, match="apply_rotary_pos_emb: cos: requires grad"):
        fuseops.apply_rotary_pos_emb(q4, k4, cos.clone().requires_grad_(), sin)
    with pytest.raises(RuntimeError, match="rotary_embedding: cos_sin_cache: requires grad"):
        fuseops.rotary_embedding(pos, q.clone(), None, 64, cache.clone().requires_grad_())
    with pytest.raises(RuntimeError, match="rotary_embedding: query: rotates in place.*use apply_rotary_pos_emb with "
                                           "inplace=False for autograd"):
        vllm.rotary_embedding(pos, q.clone().requires_grad_(), None, 64, cache, True)
    # the in-place form of apply_rotary_pos_emb points to its own out-of-place form
    with pytest.raises(RuntimeError, match=r"apply_rotary_pos_emb: q: rotates in place.*\(use inplace=False for "):
        fuseops.apply_rotary_pos_emb(q4.clone().requires_grad_(), k4.clone(), cos, sin, inplace=True)


@requires_opcheck
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    T, H, D = 4, 2, 64
    q, k = torch.randn(T, H * D, device=device), torch.randn(T, H * D, device=device)
    cache = cache_of(8, D, torch.float32, device)
    pos = torch.arange(T, device=device)
    torch.library.opcheck(torch.ops.fuseops.rotary_embedding.default, (pos, q, k, D, cache, True, False))
    torch.library.opcheck(torch.ops.fuseops.mrope.default,
                          (pos.repeat(3, 1), q, k, D, D, cache, [8, 12, 12], True, "interleaved", False))
    torch.library.opcheck(torch.ops.fuseops.rotary_embedding_backward.default, (pos, q, k, D, cache, False))
    torch.library.opcheck(torch.ops.fuseops.mrope_backward.default,
                          (pos.repeat(3, 1), q, k, D, D, cache, [8, 12, 12], False, "interleaved_glm"))
    q4, k4 = q.view(1, T, H, D), k.view(1, T, H, D)
    cos, sin = cache[:, : D // 2].contiguous(), cache[:, D // 2:].contiguous()
    torch.library.opcheck(torch.ops.fuseops.apply_rotary_pos_emb.default,
                          (torch.empty_like(q4), torch.empty_like(k4), q4, k4, cos, sin, None, False, False))
    torch.library.opcheck(torch.ops.fuseops.apply_rotary_pos_emb_inplace.default,
                          (q4.clone(), k4.clone(), cos, sin, None, False, False))


@requires_cuda
def test_cuda_graph_with_bad_position():
    """Capturable: no synchronisation inside; the bad position recorded during replay is raised afterwards."""
    T, H, D = 64, 8, 128
    q = torch.randn(T, H * D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(T, 2 * D, device="cuda", dtype=torch.bfloat16)
    cache = cache_of(4096, D, torch.bfloat16, "cuda")
    pos = torch.arange(T, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fuseops.rotary_embedding(pos, q, k, D, cache, True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fuseops.rotary_embedding(pos, q, k, D, cache, True)
    q0 = q.clone()
    pos[5] = 4096
    fuseops.clear_errors()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(q[5], q0[5])
    with pytest.raises(ValueError, match="rotary_embedding: positions: value out of range at index 5"):
        fuseops.check_errors()


def test_apply_rotary_pos_emb_is_differentiable_to_every_order():
    # the rotation is linear: a gradient penalty's second-order term through it is exact (it was dropped silently)
    torch.manual_seed(0)
    cache = cache_of(16, 8, torch.float64, "cpu")
    cos, sin = cache[:, :4].float().contiguous(), cache[:, 4:].float().contiguous()
    q = torch.randn(1, 5, 2, 8, requires_grad=True)
    k = torch.randn(1, 5, 1, 8)
    qe, _ = fuseops.apply_rotary_pos_emb(q, k, cos, sin)
    (g1,) = torch.autograd.grad((qe ** 3).sum(), q, create_graph=True)
    ((g1 ** 2).sum()).backward()
    # plain PyTorch: the same rotation of q (NeoX halves, position = index in S)
    qr = q.detach().clone().requires_grad_()
    c, s_ = cos[:5].view(1, 5, 1, 4), sin[:5].view(1, 5, 1, 4)
    x1, x2 = qr[..., :4], qr[..., 4:]
    qe_ref = torch.cat((x1 * c - x2 * s_, x2 * c + x1 * s_), -1)
    (r1,) = torch.autograd.grad((qe_ref ** 3).sum(), qr, create_graph=True)
    ((r1 ** 2).sum()).backward()
    torch.testing.assert_close(q.grad, qr.grad, rtol=1e-4, atol=1e-4)
    # the backward function with inputs that require grad is differentiable too
    gq = torch.randn(1, 5, 2, 8, requires_grad=True)
    dq, _ = fuseops.apply_rotary_pos_emb_backward(gq, torch.randn(1, 5, 1, 8), cos, sin)
    assert dq.requires_grad


def test_mrope_section_must_be_ordered():
    # a set iterates in its own order ({3, 1, 2} ran as [1, 2, 3]); a dict gave its keys
    q = torch.randn(4, 2 * 12)
    pos = torch.zeros(3, 4, dtype=torch.long)
    for section in ({3, 1, 2}, {3: 0, 1: 0, 2: 0}):
        with pytest.raises(ValueError, match=r"^mrope: mrope_section: expected a list or tuple of 3 ints"):
            fuseops.mrope(q, None, cache_of(8, 12, torch.float32, "cpu"), pos, section, 12, 12)
    fuseops.mrope(q, None, cache_of(8, 12, torch.float32, "cpu"), pos, (3, 1, 2), 12, 12)  # a tuple is fine
    # FlagGems' mrope returns (query, key)
    out = fg.mrope(q, None, cache_of(8, 12, torch.float32, "cpu"), pos, 3, 1, 2, 12, 12)
    assert isinstance(out, tuple) and out[0] is q and out[1] is None


def test_in_place_writes_bump_the_version_counter():
    # a backward that saved the tensor raises, as after torch's own in-place ops (it read the new values silently)
    cache = cache_of(32, 16, torch.float32, "cpu")
    writes = {
        "rotary_embedding": lambda q: fuseops.rotary_embedding(torch.arange(5), q, None, 16, cache),
        "silu_and_mul": lambda q: fuseops.silu_and_mul(torch.randn(5, 128), out=q),
        "layer_norm_fwd": lambda q: fuseops.layer_norm_fwd(torch.randn(5, 64), torch.ones(64), out=q),
    }
    for name, write in writes.items():
        q = torch.randn(5, 64)
        w = torch.randn(5, 64, requires_grad=True)
        y = (w * q).sum()  # saves q for w's gradient
        write(q)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_errors_use_the_names_of_the_function_called():
    # the backward and in-place forms report their own argument names (the op reported rotary_embedding's query,
    # mrope's query, the state pool's C++ names)
    cache = cache_of(16, 16, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"^rotary_embedding_backward: grad_query: expected last dim a multiple"):
        fuseops.rotary_embedding_backward(torch.arange(4), torch.randn(4, 30), None, 16, cache)
    with pytest.raises(ValueError, match=r"^mrope_backward: grad_query: "):
        fuseops.mrope_backward(torch.randn(4, 30), None, cache, torch.zeros(3, 4, dtype=torch.long), [2, 3, 3], 16,
                               16)
    q, v, g = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 2, 8), torch.randn(1, 1, 2)
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: initial_state: expected shape"):
        fuseops.fused_recurrent_gated_delta_rule(q, q, v, g, g.sigmoid(), initial_state=torch.zeros(2, 2, 8, 7),
                                                 ssm_state_indices=torch.tensor([0]))
    sg = fuseops.fused_sigmoid_gating_delta_rule_update
    with pytest.raises(ValueError, match=r"^fused_sigmoid_gating_delta_rule_update: initial_state_source: "):
        sg(torch.zeros(2), g, torch.zeros(2), 1.0, 20.0, q, q, v, g, torch.zeros(2, 2, 8, 7), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"^fused_sigmoid_gating_delta_rule_update: initial_state_indices: "):
        sg(torch.zeros(2), g, torch.zeros(2), 1.0, 20.0, q, q, v, g, torch.zeros(2, 2, 8, 8), torch.tensor([0.5]))


@pytest.mark.parametrize("device", DEVICES)
def test_flaggems_mrope_glm_flags_and_axis_map(device):
    """FlagGems' GLM call: is_interleaved_glm wins over is_interleaved, and the axis_map its tests pass (the map of
    the sections) is accepted; any other map, or a map without the GLM layout, is refused by name before rotating."""
    T, D, r = 5, 128, 64
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(T, 2 * D, generator=gen).to(device)
    cache = cache_of(32, r, torch.float32, device)
    pos = torch.randint(0, 32, (3, T), generator=gen).to(device)
    glm = [0 if c == "T" else 1 if c == "H" else 2 for c in "THWTHWTHWTHWTHWTHWTHWTHWHHWHHWWW"]
    want, _ = fuseops.mrope(q.clone(), None, cache, pos, [8, 12, 12], D, r, False, "interleaved_glm")
    for flags in (dict(is_interleaved=True, is_interleaved_glm=True),
                  dict(is_interleaved_glm=True, axis_map=torch.tensor(glm, device=device)),
                  dict(is_interleaved=True, is_interleaved_glm=True, axis_map=torch.tensor(glm, dtype=torch.int32)),
                  dict(is_interleaved_glm=True, axis_map=glm),
                  dict(is_interleaved_glm=True, axis_map=tuple(torch.tensor(glm).numpy())),  # numpy ints
                  dict(is_interleaved_glm=True, axis_map=torch.tensor(glm).numpy())):
        got, _ = fg.mrope(q.clone(), None, cache, pos, 8, 12, 12, D, r, is_neox_style=False, **flags)
        assert torch.equal(got, want), flags
    other = glm[::-1]
    x = q.clone()
    for flags, match in ((dict(is_interleaved_glm=True, axis_map=other), r"axis_map: expected the GLM map of the "
                          r"sections \[8, 12, 12\] \(other maps are not supported\): pair 0 takes axis 0, got 2"),
                         (dict(is_interleaved_glm=True, axis_map=glm[:-1]),
                          r"axis_map: expected \[rotary_dim / 2\] = \[32\] entries .* got 31"),
                         (dict(is_interleaved_glm=True, axis_map=torch.tensor(glm, dtype=torch.bool)),
                          "axis_map: expected None or a 1-D sequence of ints"),
                         (dict(is_interleaved_glm=True, axis_map=torch.tensor(glm, dtype=torch.float32)),
                          "axis_map: expected None or a 1-D sequence of ints"),
                         (dict(is_interleaved_glm=True, axis_map=[True] * 32),
                          "axis_map: expected None or a 1-D sequence of ints"),
                         (dict(is_interleaved=True, axis_map=glm),
                          "axis_map: expected None without is_interleaved_glm=True")):
        with pytest.raises(ValueError, match="mrope: " + match):
            fg.mrope(x, None, cache, pos, 8, 12, 12, D, r, is_neox_style=False, **flags)
    assert torch.equal(x, q)  # refused before anything is rotated
    # the op's own errors where the sections, rotary_dim or the cache are wrong (axis_map is not blamed)
    with pytest.raises(ValueError, match="mrope: section_t, section_h, section_w: expected 3 sections"):
        fg.mrope(x, None, cache, pos, 8, 12, 11, D, r, is_interleaved_glm=True, axis_map=glm)
    with pytest.raises(ValueError, match=r"mrope: rotary_dim: expected an int, got a tensor \[2\]"):
        fg.mrope(x, None, cache, pos, 8, 12, 12, D, torch.tensor([r, r]), is_interleaved_glm=True, axis_map=glm)
    with pytest.raises(ValueError, match=r"mrope: rotary_dim: expected cos_sin_cache.shape\[1\] = 64"):
        fg.mrope(x, None, cache, pos, 16, 24, 24, D, 128, is_interleaved_glm=True, axis_map=[0] * 1000)
