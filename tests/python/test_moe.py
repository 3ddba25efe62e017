"""MoE routing through torch: the allocating functions against plain-PyTorch references (float64), vLLM's wrapper
order for moe_align_block_size, the compat entries, errors, and CUDA-graph capture on a GPU."""

import numpy as np
import pytest

from common import DEVICES, requires_cuda, torch  # noqa: F401  (skips the module without torch / fuseops)

import fuseops
from fuseops.compat import vllm as vllm_compat


def _ref_topk_softmax(logits, k, renormalize):
    p = torch.softmax(logits.double(), dim=-1)
    # Stable descending order: ties go to the lower index.
    order = torch.sort(-p, dim=-1, stable=True).indices[:, :k]
    w = p.gather(1, order)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w, order


def _ref_align(ids, block_size, E):
    flat = ids.flatten().tolist()
    n, blocks = fuseops.moe_align_sizes(len(flat), E, block_size)
    sorted_ids = [len(flat)] * n
    expert_ids = [-1] * blocks
    pos = 0
    for e in range(E):
        idx = [i for i, v in enumerate(flat) if v == e]
        sorted_ids[pos:pos + len(idx)] = idx
        padded = (len(idx) + block_size - 1) // block_size * block_size
        for b in range(pos // block_size, (pos + padded) // block_size):
            expert_ids[b] = e
        pos += padded
    return sorted_ids, expert_ids, pos


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("E,k", [(8, 2), (60, 6), (128, 8), (512, 10)])
def test_topk_softmax(device, E, k):
    g = torch.randn(37, E, device=device)
    w, ids, src = fuseops.topk_softmax(g, k, renormalize=True)
    rw, rids = _ref_topk_softmax(g.cpu(), k, True)
    assert torch.equal(ids.cpu().long(), rids)
    torch.testing.assert_close(w.cpu().double(), rw, rtol=2e-5, atol=1e-7)
    T = g.shape[0]
    expected = torch.arange(k).view(1, k) * T + torch.arange(T).view(T, 1)
    assert torch.equal(src.cpu().long(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_topk_softmax_nan_rows(device):
    g = torch.full((2, 64), float("nan"), device=device)
    w, ids, _ = fuseops.topk_softmax(g, 8, renormalize=True)
    assert ids.cpu().tolist() == [list(range(8))] * 2
    torch.testing.assert_close(w.cpu(), torch.full((2, 8), 1 / 8))


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_topk_deepseek(device):
    T, E, ng, tg, k = 19, 256, 8, 4, 8
    x = torch.randn(T, E, device=device)
    bias = torch.randn(E, device=device).to(torch.bfloat16)
    w, ids = fuseops.grouped_topk(x, ng, tg, k, True, 2.5, bias=bias)
    s = torch.sigmoid(x.cpu().double())
    b = s + bias.cpu().double()
    grp = b.view(T, ng, -1).topk(2, dim=-1).values.sum(-1)
    keep = torch.sort(-grp, dim=-1, stable=True).indices[:, :tg]
    mask = torch.zeros(T, ng, dtype=torch.bool).scatter_(1, keep, True)
    masked = b.masked_fill(~mask.repeat_interleave(E // ng, dim=1), float("-inf"))
    rids = torch.sort(-masked, dim=-1, stable=True).indices[:, :k]
    rw = s.gather(1, rids)
    rw = rw / rw.sum(-1, keepdim=True) * 2.5
    assert torch.equal(ids.cpu().long(), rids)
    torch.testing.assert_close(w.cpu().double(), rw, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_compat_grouped_topk_and_topk_softmax(device):
    # the compat entries give what the native functions give (vLLM's argument order; scoring_func 1: sigmoid)
    x = torch.randn(7, 64, device=device)
    bias = torch.randn(64, device=device)
    w, ids = vllm_compat.grouped_topk(x, 4, 2, 6, True, 2.0, bias, 1)
    rw, rids = fuseops.grouped_topk(x, 4, 2, 6, True, 2.0, bias=bias)
    assert torch.equal(ids, rids) and torch.equal(w, rw)
    tw = torch.empty(7, 3, device=device)
    tids = torch.empty(7, 3, dtype=torch.int32, device=device)
    src = torch.empty(7, 3, dtype=torch.int32, device=device)
    vllm_compat.topk_softmax(tw, tids, src, x, True)
    nw, nids, nsrc = fuseops.topk_softmax(x, 3, renormalize=True)
    assert torch.equal(tw, nw) and torch.equal(tids, nids) and torch.equal(src, nsrc)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("T,k,E,bs", [(0, 8, 64, 16), (1, 8, 256, 64), (33, 6, 60, 16), (500, 8, 256, 64)])
def test_moe_align_block_size(device, T, k, E, bs):
    ids = torch.stack([torch.randperm(E)[:k] for _ in range(T)]) if T else torch.empty(0, k, dtype=torch.long)
    ids = ids.to(torch.int32).to(device)
    sorted_ids, expert_ids, total = fuseops.moe_align_block_size(ids, bs, E)
    rs, re, rt = _ref_align(ids.cpu(), bs, E)
    assert sorted_ids.cpu().tolist() == rs
    assert expert_ids.cpu().tolist() == re
    assert total.cpu().tolist() == [rt]
    # vLLM's op order writes the same outputs.
    s2, e2, t2 = torch.empty_like(sorted_ids), torch.empty_like(expert_ids), torch.empty_like(total)
    vllm_compat.moe_align_block_size(ids, E, bs, s2, e2, t2)
    assert torch.equal(s2, sorted_ids) and torch.equal(e2, expert_ids) and torch.equal(t2, total)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_align_block_size_expert_map_both_flows(device):
    """vLLM's two flows with an expert map: ignore_invalid_experts=True (our default, vLLM PR #29642) maps each id
    before counting; False (vLLM's wrapper default, FlagGems) counts global ids and maps the blocks' expert_ids."""
    import fuseops.compat.flaggems as flaggems_compat
    E, bs = 12, 4
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(-1, E, (37, 3), generator=gen, dtype=torch.int32)  # -1: padding rows' sentinel
    local = torch.randperm(E, generator=gen)[:5]  # five experts of this rank, local ids 0..4
    expert_map = torch.full((E,), -1, dtype=torch.int32)
    expert_map[local] = torch.arange(5, dtype=torch.int32)
    mapped = torch.where(ids >= 0, expert_map[ids.clamp(min=0).long()], ids)
    rs, re, rt = _ref_align(mapped, bs, E)  # counted after the map
    got = fuseops.moe_align_block_size(ids.to(device), bs, E, expert_map.to(device))
    assert [t.cpu().tolist() for t in got] == [rs, re, [rt]]
    rs, re, rt = _ref_align(ids, bs, E)  # counted under the global ids, the blocks mapped after
    re = [int(expert_map[e]) if e >= 0 else -1 for e in re]
    assert any(e == -1 for e in re[:rt // bs])  # blocks of other ranks' experts are in the schedule, mapped to -1
    args = (ids.to(device), bs, E, expert_map.to(device))
    for got in (fuseops.moe_align_block_size(*args, ignore_invalid_experts=False),
                flaggems_compat.moe_align_block_size(*args)):
        assert [t.cpu().tolist() for t in got] == [rs, re, [rt]]
    # the legacy flow checks the map as the op does
    ids = ids.to(device)
    for bad, match in ((torch.zeros(E, device=device), "expert_map: expected dtype i32, got f32"),
                       (expert_map[:7].to(device), r"expert_map: expected shape \[num_experts\] = \[12\], got \[7\]"),
                       (expert_map.view(3, 4).to(device), r"expert_map: expected rank 1 \[num_experts\] = \[12\]")):
        for flag in (True, False):
            with pytest.raises(ValueError, match="moe_align_block_size: " + match):
                fuseops.moe_align_block_size(ids, bs, E, bad, ignore_invalid_experts=flag)
    with pytest.raises(ValueError, match="moe_align_block_size: ignore_invalid_experts: expected a bool, got 1"):
        fuseops.moe_align_block_size(ids, bs, E, expert_map.to(device), ignore_invalid_experts=1)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_route_equals_parts(device):
    x = torch.randn(70, 256, device=device, dtype=torch.bfloat16)
    bias = torch.randn(256, device=device)
    w, ids, s, e, t = fuseops.moe_route(x, 8, 64, renormalize=True, bias=bias, scoring="sigmoid", n_group=8,
                                        topk_group=4, routed_scaling_factor=2.5)
    w2, ids2 = fuseops.grouped_topk(x, 8, 4, 8, True, 2.5, bias=bias)
    s2, e2, t2 = fuseops.moe_align_block_size(ids2, 64, 256)
    for a, b in ((w, w2), (ids, ids2), (s, s2), (e, e2), (t, t2)):
        assert torch.equal(a, b)


def test_errors():
    # more experts than the routers take: named on the logits, not on the schedule's size measured with them
    with pytest.raises(ValueError, match=r"moe_route: gating_output: expected E in \[1, 1024\], got 2100"):
        fuseops.moe_route(torch.randn(2100, 2100), 1, 2**20)
    with pytest.raises(ValueError, match="grouped_topk: n_group"):
        fuseops.grouped_topk(torch.randn(2, 256), 7, 4, 8, True)
    # The arguments the user passed: topk (not the topk_weights the wrapper allocates), correction_bias.
    with pytest.raises(ValueError, match=r"topk_softmax: topk: expected an int in \[1, 8\] "
                                         r"\(8 = min\(E, 32\), E = 8 experts\), got 9$"):
        fuseops.topk_softmax(torch.randn(2, 8), 9)
    with pytest.raises(ValueError, match=r"topk_softmax: topk: expected an int in \[1, 16\] "
                                         r"\(16 = min\(E, 32\), E = 16 experts\), got 17$"):
        fuseops.topk_softmax(torch.randn(2, 16), 17)
    with pytest.raises(ValueError, match="topk_softmax: correction_bias: "):
        fuseops.topk_softmax(torch.randn(2, 16), 2, correction_bias=torch.randn(15))
    with pytest.raises(ValueError, match="grouped_topk: topk: "):
        fuseops.grouped_topk(torch.randn(2, 256), 8, 4, 33, True)
    with pytest.raises(ValueError, match="moe_route: topk: "):
        fuseops.moe_route(torch.randn(2, 8), 9, 16)
    # more than the chosen groups hold: named topk here (the op itself names topk_weights' shape)
    with pytest.raises(ValueError, match=r"^grouped_topk: topk: expected k <= topk_group \* E / n_group = 4, got 5$"):
        fuseops.grouped_topk(torch.randn(2, 16), 8, 2, 5, True)
    with pytest.raises(ValueError, match=r"^moe_route: topk: expected k <= topk_group \* E / n_group = 4, got 5$"):
        fuseops.moe_route(torch.randn(2, 16), 5, 16, scoring="sigmoid", n_group=8, topk_group=2)
    with pytest.raises(ValueError, match=r"^grouped_topk: topk_weights: expected k = shape\[1\] <= topk_group \* E / "
                                         r"n_group = 4, got k = 5$"):
        fuseops.ops.grouped_topk(torch.empty(2, 5), torch.empty(2, 5, dtype=torch.int32), torch.randn(2, 16), None,
                                 8, 2, True, 1.0, "sigmoid")
    with pytest.raises(ValueError, match=r"^grouped_topk: topk: expected k <= topk_group \* E / n_group = 4, got 5$"):
        vllm_compat.grouped_topk(torch.randn(3, 16), 4, 1, 5, False, 1.0, None, 1)
    # in the op's order: the logits' E and dtype and the bias come before k's limit
    with pytest.raises(ValueError, match=r"^grouped_topk: scores: expected E in \[1, 1024\], got 0"):
        fuseops.grouped_topk(torch.randn(3, 0), 1, 1, 1, False)
    with pytest.raises(ValueError, match=r"^moe_route: gating_output: expected E in \[1, 1024\], got 0"):
        fuseops.moe_route(torch.randn(3, 0), 1, 4)
    with pytest.raises(ValueError, match=r"^grouped_topk: scores: unsupported dtype torch.float64"):
        fuseops.grouped_topk(torch.randn(2, 16, dtype=torch.float64), 4, 1, 5, False)
    with pytest.raises(ValueError, match=r"^grouped_topk: bias: "):
        fuseops.grouped_topk(torch.randn(2, 16), 4, 1, 5, False, bias=torch.randn(15))
    with pytest.raises(ValueError, match="moe_align_block_size: block_size"):
        fuseops.moe_align_block_size(torch.zeros(2, 2, dtype=torch.int32), 0, 8)
    with pytest.raises(ValueError, match="moe_route: scoring"):
        fuseops.moe_route(torch.randn(2, 8), 2, 16, scoring="relu")
    # indices_dtype by name (a string failed inside torch.empty; None was reported as the internal topk_ids)
    for dtype in ("int64", None, torch.float32):
        with pytest.raises(ValueError, match=r"^topk_softmax: indices_dtype: expected torch.int32 or torch.int64"):
            fuseops.topk_softmax(torch.randn(2, 8), 2, indices_dtype=dtype)
    with pytest.raises(ValueError, match=r"^grouped_topk: indices_dtype: "):
        fuseops.grouped_topk(torch.randn(2, 8), 2, 1, 2, True, indices_dtype=torch.int16)
    with pytest.raises(ValueError, match=r"^moe_route: indices_dtype: "):
        fuseops.moe_route(torch.randn(2, 8), 2, 4, indices_dtype="int32")
    # ints past int64 are named (torch's parser said "expected int, found int")
    with pytest.raises(ValueError, match=r"^grouped_topk: n_group: expected an int in \[1, 2\*\*63 - 1\] \(int64\)"):
        fuseops.grouped_topk(torch.randn(2, 8), 2**64, 1, 2, True)
    # vLLM's order (topk, renormalize, n_group, topk_group) passed positionally: the swapped bool / ints are errors
    with pytest.raises(ValueError, match="grouped_topk: topk_group: expected an int"):
        fuseops.grouped_topk(torch.randn(2, 256), 8, True, 8, 4)
    with pytest.raises(ValueError, match="grouped_topk: renormalize: expected a bool"):
        fuseops.grouped_topk(torch.randn(2, 256), 8, 4, 8, 1)
    with pytest.raises(ValueError, match="grouped_topk: n_group: expected an int"):
        fuseops.grouped_topk(torch.randn(2, 256), 8.0, 4, 8, True)
    with pytest.raises(ValueError, match="grouped_topk: routed_scaling_factor: expected a number"):
        fuseops.grouped_topk(torch.randn(2, 256), 8, 4, 8, True, "2.5")
    with pytest.raises(ValueError, match="moe_route: topk_group: expected an int"):
        fuseops.moe_route(torch.randn(2, 256), 8, 16, scoring="sigmoid", n_group=8, topk_group=True)
    # a bias that is not a tensor; vLLM's grouped_topk with a float or negative topk
    with pytest.raises(ValueError, match="topk_softmax: correction_bias: expected a torch.Tensor or None, got list"):
        fuseops.topk_softmax(torch.randn(2, 3), 2, correction_bias=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="grouped_topk: bias: expected a torch.Tensor or None"):
        fuseops.grouped_topk(torch.randn(2, 256), 8, 4, 8, True, bias=[0.0] * 256)
    vllm = fuseops.compat.vllm
    with pytest.raises(ValueError, match="grouped_topk: topk: expected an int"):
        vllm.grouped_topk(torch.randn(2, 256), 8, 4, 4.0, True, 1.0, None, 1)
    with pytest.raises(ValueError, match="grouped_topk: topk: expected an int"):
        vllm.grouped_topk(torch.randn(2, 256), 8, 4, -1, True, 1.0, None, 1)
    with pytest.raises(ValueError, match="grouped_topk: routed_scaling_factor: expected a number"):
        vllm.grouped_topk(torch.randn(2, 256), 8, 4, 8, True, True, None, 1)
    # vLLM's default scoring_func 0 (scores already activated) is refused, also when left out: it had defaulted to 1
    # here, which applied a second sigmoid
    for extra in ((), (0,)):
        with pytest.raises(ValueError, match=r"^grouped_topk: scoring_func: expected 1"):
            vllm.grouped_topk(torch.randn(2, 256), 8, 4, 8, True, 1.0, None, *extra)
    # scoring_func is an int, as vLLM's schema takes: a bool, a float 1.0 (had been taken) or a tensor of two
    # elements (had raised torch's "ambiguous" error) is named
    for bad in (True, 1.0, torch.tensor([1, 1])):
        with pytest.raises(ValueError, match=r"^grouped_topk: scoring_func: expected an int"):
            vllm.grouped_topk(torch.randn(2, 256), 8, 4, 8, True, 1.0, None, bad)
    # scoring is a string: an array holding one (had passed `in`, then failed in torch's schema parser) is named
    for call in (lambda s: fuseops.grouped_topk(torch.randn(2, 8), 1, 1, 2, True, scoring=s),
                 lambda s: fuseops.moe_route(torch.randn(2, 8), 2, 16, scoring=s)):
        with pytest.raises(ValueError, match=r": scoring: expected 'softmax' \| 'sigmoid'"):
            call(np.array(["sigmoid"]))
    # flags are bools, not truthy values
    with pytest.raises(ValueError, match="topk_softmax: renormalize: expected a bool"):
        fuseops.topk_softmax(torch.randn(2, 8), 2, renormalize="no")
    with pytest.raises(ValueError, match="moe_align_block_size: pad_sorted_ids: expected a bool"):
        fuseops.moe_align_block_size(torch.zeros(2, 2, dtype=torch.int32), 4, 4, pad_sorted_ids="no")
    with pytest.raises(ValueError, match="moe_align_sizes: pad_sorted_ids: expected a bool"):
        fuseops.moe_align_sizes(4, 4, 4, pad_sorted_ids=2.5)


def test_moe_align_sizes_arguments():
    assert fuseops.moe_align_sizes(16, 8, 4) == (40, 10)
    assert fuseops.moe_align_sizes(2, 256, 64) == (128, 2)
    for args, name in (((-5, 8, 4), "numel"), ((5, 0, 4), "num_experts"), ((5, 8, 0), "block_size"),
                       ((5.0, 8, 4), "numel"), ((5, True, 4), "num_experts")):
        with pytest.raises(ValueError, match=f"moe_align_sizes: {name}: "):
            fuseops.moe_align_sizes(*args)


def test_align_ranges_are_checked_before_allocating():
    # block_size / num_experts outside the op's ranges and int32 overflows raise ValueError before any allocation
    ids = torch.zeros(512, 8, dtype=torch.int32)
    with pytest.raises(ValueError, match="moe_align_block_size: block_size: expected an int in \\[1, 1048576\\]"):
        fuseops.moe_align_block_size(ids, 2**30, 8)
    with pytest.raises(ValueError, match="moe_align_block_size: num_experts: expected an int in \\[1, 4096\\]"):
        fuseops.moe_align_block_size(ids, 16, 5000)
    # the schedule past int32 through its padding, num_experts * (block_size - 1): on the larger factor, as the op
    with pytest.raises(ValueError, match="moe_align_block_size: block_size: .*< 2\\^31.*got 1048576$"):
        fuseops.moe_align_block_size(ids, 2**20, 4096)
    with pytest.raises(ValueError, match="moe_route: block_size: expected an int in \\[1, 1048576\\]"):
        fuseops.moe_route(torch.randn(64, 8), 2, 2**30)
    with pytest.raises(ValueError, match="moe_align_sizes: block_size: .*< 2\\^31"):
        fuseops.moe_align_sizes(4096, 4096, 2**20)
    with pytest.raises(ValueError, match="moe_align_sizes: numel: .*< 2\\^31.*got 2147483648$"):
        fuseops.moe_align_sizes(2**31, 1, 1)
    # rounded up (pad_sorted_ids), the length counts as allocated: 2^31 is refused before anything is allocated, on
    # the padding's larger factor
    with pytest.raises(ValueError, match="moe_align_sizes: block_size: .*rounded up to block_size.*got 1048576$"):
        fuseops.moe_align_sizes(4096, 2047, 2**20, True)
    with pytest.raises(ValueError, match=r"moe_align_block_size: block_size: .*which is 2147483648 .*got 1048576$"):
        fuseops.moe_align_block_size(torch.zeros(4096, 1, dtype=torch.int32), 2**20, 2047, pad_sorted_ids=True)
    # the ids blamed with their shape, as the op does
    with pytest.raises(ValueError, match=r"moe_align_block_size: topk_ids: .*got \[268435456, 8\]$"):
        fuseops.moe_align_block_size(torch.zeros(1, dtype=torch.int32).expand(2**28, 8), 64, 256)
    with pytest.raises(ValueError, match="moe_align_block_size: expert_map: expected a torch.Tensor or None, got int"):
        fuseops.moe_align_block_size(torch.zeros(4, 2, dtype=torch.int32), 16, 8, expert_map=5)
    assert fuseops.moe_align_sizes(4096, 4096, 2**18) == (2**30, 4096)
    # fewer ids than experts: the schedule is capped at numel * block_size (as the op sizes it), not refused
    assert fuseops.moe_align_sizes(8, 4096, 2**20) == (8 * 2**20, 8)


def test_routers_refuse_inputs_that_require_grad():
    # routing computes no gradient: a logits or bias tensor that requires grad is an error in grad mode, not weights
    # silently cut from the graph
    x = torch.randn(4, 64, requires_grad=True)
    bias = torch.randn(64, requires_grad=True)
    with pytest.raises(RuntimeError, match="topk_softmax: gating_output: requires grad"):
        fuseops.topk_softmax(x, 4, True)
    with pytest.raises(RuntimeError, match="topk_softmax: correction_bias: requires grad"):
        fuseops.topk_softmax(x.detach(), 4, True, correction_bias=bias)
    with pytest.raises(RuntimeError, match="grouped_topk: scores: requires grad"):
        fuseops.grouped_topk(x, 4, 2, 4, True)
    with pytest.raises(RuntimeError, match="grouped_topk: bias: requires grad"):
        fuseops.grouped_topk(x.detach(), 4, 2, 4, True, bias=bias)
    with pytest.raises(RuntimeError, match="moe_route: gating_output: requires grad"):
        fuseops.moe_route(x, 4, 16)
    with torch.no_grad():
        w, ids, _ = fuseops.topk_softmax(x, 4, True)
        assert w.shape == (4, 4) and not w.requires_grad
        fuseops.moe_route(x, 4, 16, bias=bias, scoring="sigmoid", n_group=4, topk_group=2)
    w, _ = fuseops.grouped_topk(x.detach(), 4, 2, 4, True)
    assert not w.requires_grad


def test_bad_ids_are_recorded():
    fuseops.clear_errors()
    ids = torch.tensor([[0, 9], [-1, 3]], dtype=torch.int32)
    s, e, t = fuseops.moe_align_block_size(ids, 4, 8)
    assert t.tolist() == [8]
    with pytest.raises(ValueError, match=r"^moe_align_block_size: topk_ids: value out of range at index 1 \(the index "
                                         r"is the id's flat \(row-major\) index in topk_ids: expected -1 \(padding\) "
                                         r"or an expert id in \[0, num_experts\); it is skipped\)"):
        fuseops.check_errors()
    # ids of another rank (the Python functions read any): the flat index of the ids as passed, no [T, k] named
    import fuseops.compat.flaggems as flaggems_compat
    for bad in (torch.tensor([2, 0, 5, 9], dtype=torch.int32), torch.tensor([2, 0, 5, -3]).view(2, 1, 2)):
        for align in (fuseops.moe_align_block_size, flaggems_compat.moe_align_block_size):
            align(bad, 4, 8)
            with pytest.raises(ValueError, match=r"^moe_align_block_size: topk_ids: value out of range at index 3 "
                                                 r"\(the index is the id's flat \(row-major\) index in topk_ids:") as e:
                fuseops.check_errors()
            assert "[T, k]" not in str(e.value)
    # a map entry outside [-1, num_experts): recorded at the global id whose entry was read
    fuseops.moe_align_block_size(torch.tensor([[0, 2]], dtype=torch.int32), 4, 3,
                                 torch.tensor([0, 1, 7], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"^moe_align_block_size: expert_map: value out of range at index 2 \(the index "
                                         r"is the global expert id whose entry was read"):
        fuseops.check_errors()


@requires_cuda
def test_cuda_graph_capture():
    x = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(256, device="cuda")
    out = fuseops.moe_route(x, 8, 64, True, bias, "sigmoid", 8, 4, 2.5)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        cap = fuseops.moe_route(x, 8, 64, True, bias, "sigmoid", 8, 4, 2.5)
    g.replay()
    torch.cuda.synchronize()
    for a, b in zip(out, cap):
        assert torch.equal(a, b)


def test_moe_align_sizes_reads_integer_scalars_as_ints():
    # a torch (or numpy) integer scalar skipped the int32 check and came back as a tensor
    with pytest.raises(ValueError, match=r"^moe_align_sizes: numel: expected a schedule length \(numel \+ num_experts"):
        fuseops.moe_align_sizes(torch.tensor(2 ** 31), 1, 1)
    sizes = fuseops.moe_align_sizes(torch.tensor(10), torch.tensor(4), 4)
    assert sizes == fuseops.moe_align_sizes(10, 4, 4) and all(type(x) is int for x in sizes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pad_sorted_ids", [False, True])
def test_flaggems_moe_align_block_size_lengths(device, pad_sorted_ids):
    """compat.flaggems allocates FlagGems' lengths, numel + E * (bs - 1) (rounded up with pad_sorted_ids), also where
    numel < E (vLLM's wrapper and fuseops cap them at numel * bs there); the schedule is the same, the tail padding."""
    import fuseops.compat.flaggems as flaggems_compat
    ids = torch.tensor([[3, 7]], dtype=torch.int32, device=device)
    E, bs = 64, 16
    n = 2 + E * (bs - 1)
    n = (n + bs - 1) // bs * bs if pad_sorted_ids else n
    s, e, t = flaggems_compat.moe_align_block_size(ids, bs, E, None, pad_sorted_ids)
    assert (s.shape[0], e.shape[0]) == (n, (n + bs - 1) // bs)
    s0, e0, t0 = fuseops.moe_align_block_size(ids, bs, E, pad_sorted_ids=pad_sorted_ids)
    assert s0.shape[0] == 32 and torch.equal(t, t0)
    assert torch.equal(s[:s0.shape[0]], s0) and torch.equal(e[:e0.shape[0]], e0)
    assert (s[s0.shape[0]:] == 2).all() and (e[e0.shape[0]:] == -1).all()
    # the int32 limit of the uncapped length is told without vLLM's cap
    big = torch.zeros(1, 1, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"moe_align_block_size: block_size: expected a schedule length \(numel \+ "
                                         r"num_experts \* \(block_size - 1\)\) < 2\^31 .* got 1048576"):
        flaggems_compat.moe_align_block_size(big, 2**20, 4096)
    fuseops.moe_align_block_size(big, 2**20, 4096)  # capped at numel * block_size: fits


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_topk_softmax_is_padding(device):
    """Newer vLLM's is_padding mask: the padding rows' ids become -1 (skipped by the schedule), the other outputs as
    without it; a mask of the wrong dtype, shape or device is refused by name before anything is written."""
    T, E, k = 5, 16, 3
    x = torch.randn(T, E, device=device)
    pad = torch.tensor([False, True, False, False, True], device=device)

    def outputs():
        return (torch.empty(T, k, device=device), torch.empty(T, k, dtype=torch.int32, device=device),
                torch.empty(T, k, dtype=torch.int32, device=device))

    w0, i0, s0 = outputs()
    vllm_compat.topk_softmax(w0, i0, s0, x, True)
    w, i, s = outputs()
    vllm_compat.topk_softmax(w, i, s, x, True, None, pad)
    assert torch.equal(w, w0) and torch.equal(s, s0)
    assert torch.equal(i, torch.where(pad[:, None], torch.full_like(i0, -1), i0))
    aligned = fuseops.moe_align_block_size(i, 4, E)
    assert aligned[2].item() == fuseops.moe_align_block_size(i0[~pad], 4, E)[2].item()  # padding rows skipped
    for bad, match in ((pad.int(), r"is_padding: expected a bool tensor \[T\] = \[5\]"),
                       (pad[:4], r"is_padding: expected a bool tensor \[T\] = \[5\] .* got \[4\]"),
                       (pad.view(5, 1), r"is_padding: expected a bool tensor \[T\] = \[5\]"),
                       ("x", r"is_padding: expected a torch.Tensor or None")):
        w, i, s = outputs()
        i.fill_(7)
        with pytest.raises(ValueError, match="topk_softmax: " + match):
            vllm_compat.topk_softmax(w, i, s, x, True, None, bad)
        assert (i == 7).all()


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_topk_softmax_e_score_correction_bias(device):
    """vLLM's keyword name e_score_correction_bias gives what bias= (and the sixth positional argument) gives; the
    bias changes the selection here, so a dropped keyword would show; passing both names is a ValueError naming both,
    raised before anything is written."""
    T, E, k = 9, 32, 4
    x = torch.randn(T, E, device=device)
    bias = torch.zeros(E, device=device)
    bias[E - k:] = 2.0  # above any softmax probability: experts E-k..E-1 win every row

    def outputs():
        return (torch.empty(T, k, device=device), torch.empty(T, k, dtype=torch.int32, device=device),
                torch.empty(T, k, dtype=torch.int32, device=device))

    results = []
    for call in (lambda *o: vllm_compat.topk_softmax(*o, x, True, bias=bias),
                 lambda *o: vllm_compat.topk_softmax(*o, x, True, bias),
                 lambda *o: vllm_compat.topk_softmax(*o, x, True, e_score_correction_bias=bias),
                 lambda *o: vllm_compat.topk_softmax(*o, x, renormalize=True, bias=None, e_score_correction_bias=bias)):
        out = outputs()
        call(*out)
        results.append(out)
    for got in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(got, results[0]))
    assert sorted(results[0][1][0].tolist()) == list(range(E - k, E))
    nw, nids, nsrc = fuseops.topk_softmax(x, k, renormalize=True, correction_bias=bias)
    assert torch.equal(results[0][0], nw) and torch.equal(results[0][1], nids)
    w, i, s = outputs()
    i.fill_(7)
    with pytest.raises(ValueError, match=r"^topk_softmax: bias, e_score_correction_bias: expected at most one"):
        vllm_compat.topk_softmax(w, i, s, x, True, bias, e_score_correction_bias=bias)
    with pytest.raises(ValueError, match=r"^topk_softmax: bias, e_score_correction_bias: .*got both"):
        vllm_compat.topk_softmax(w, i, s, x, True, bias=bias, e_score_correction_bias=bias.clone())
    assert (i == 7).all()
    with pytest.raises(ValueError, match=r"^topk_softmax: e_score_correction_bias: "):  # errors use the name passed
        vllm_compat.topk_softmax(w, i, s, x, True, e_score_correction_bias=torch.zeros(E + 1, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_moe_align_block_size_reads_ids_of_any_rank(device):
    """topk_ids are read by numel, as vLLM's and FlagGems' wrappers read them: 0-D, 1-D and 3-D ids give the schedule
    of the same ids as [T, k]."""
    import fuseops.compat.flaggems as flaggems_compat
    E, bs = 8, 4
    ids = torch.randint(-1, E, (3, 5, 2), dtype=torch.int32, device=device)
    want = fuseops.moe_align_block_size(ids.reshape(15, 2), bs, E)
    for shaped in (ids, ids.reshape(-1), ids.permute(2, 0, 1).contiguous().permute(1, 2, 0),
                   ids.reshape(15, 2).t().contiguous().t()):  # the last two: innermost stride not 1
        for align in (fuseops.moe_align_block_size, flaggems_compat.moe_align_block_size):  # (numel >= E: same sizes)
            got = align(shaped, bs, E)
            assert all(torch.equal(g, w) for g, w in zip(got, want))
        s, e, t = (torch.empty_like(x) for x in want)
        vllm_compat.moe_align_block_size(shaped, E, bs, s, e, t)
        assert torch.equal(s, want[0]) and torch.equal(e, want[1]) and torch.equal(t, want[2])
    one = torch.tensor(3, dtype=torch.int32, device=device)
    assert [x.tolist() for x in flaggems_compat.moe_align_block_size(one, bs, E)][2] == [4]
    assert [x.tolist() for x in fuseops.moe_align_block_size(one.reshape(1, 1), bs, E)] == \
        [x.tolist() for x in fuseops.moe_align_block_size(one, bs, E)]


@pytest.mark.parametrize("device", DEVICES)
def test_moe_align_block_size_reads_overlapping_ids(device):
    """ids whose elements overlap (expand's stride 0, rows closer than their length) are read as their contiguous copy
    by all three entries, at any rank: the C++ API's rule that rows must not overlap keeps outputs apart, and had
    refused these read-only ids ("expected row stride >= 2")."""
    import fuseops.compat.flaggems as flaggems_compat
    E, bs = 8, 4
    base = torch.tensor([3, 1, 0, 6, 7, 2], dtype=torch.int32, device=device)
    for ids in (torch.tensor([3, 1], device=device).expand(5, 2),  # the row stride 0 (int64)
                base[:2].expand(2, 3, 2),  # 3-D: [6, 2] with row stride 0 once flattened
                base[:1].expand(9),  # 1-D: [9, 1] with row stride 0
                base[:3].unsqueeze(1).expand(3, 4),  # innermost stride 0
                base.as_strided((5, 2), (1, 1))):  # rows one element apart, overlapping
        want = fuseops.moe_align_block_size(ids.contiguous(), bs, E)
        for align in (fuseops.moe_align_block_size, flaggems_compat.moe_align_block_size):  # (numel >= E: same sizes)
            got = align(ids, bs, E)
            assert all(torch.equal(g, w) for g, w in zip(got, want)), list(ids.shape)
        s, e, t = (torch.empty_like(x) for x in want)
        vllm_compat.moe_align_block_size(ids, E, bs, s, e, t)
        assert torch.equal(s, want[0]) and torch.equal(e, want[1]) and torch.equal(t, want[2])
    assert base.tolist() == [3, 1, 0, 6, 7, 2]  # read only


@pytest.mark.parametrize("device", DEVICES)
def test_routers_read_overlapping_logits(device):
    """Logits whose rows overlap (one row expanded over the tokens, a column broadcast over the experts, rows closer
    than E) are read as their contiguous copy by every router entry, as a stride-0 bias is; a transposed view
    (innermost stride not 1) stays the op's error, as documented."""
    import fuseops.compat.flaggems as flaggems_compat
    T, E, k = 4, 16, 3
    row = torch.randn(1, E, device=device)
    flat = torch.randn(T + E, device=device)
    bias = torch.randn(E, device=device)

    def entries(g):
        out = [fuseops.topk_softmax(g, k, True), fuseops.grouped_topk(g, 4, 2, k, True, 2.0, bias),
               fuseops.grouped_topk(g, 4, 2, k, True, scoring="softmax"), fuseops.moe_route(g, k, 4, bias=bias),
               vllm_compat.grouped_topk(g, 4, 2, k, True, 2.0, bias, 1)]
        for fill in (lambda *a: vllm_compat.topk_softmax(*a, True, bias), lambda *a: flaggems_compat.topk_softmax(*a)):
            w, i, src = (torch.empty(T, k, device=device), torch.empty(T, k, dtype=torch.int32, device=device),
                         torch.empty(T, k, dtype=torch.int32, device=device))
            fill(w, i, src, g)
            out.append((w, i, src))
        return out

    for g in (row.expand(T, E), flat[:T].unsqueeze(1).expand(T, E), flat.as_strided((T, E), (1, 1))):
        for got, want in zip(entries(g), entries(g.contiguous())):
            assert all(torch.equal(a, b) for a, b in zip(got, want))
    with pytest.raises(ValueError, match=r"^topk_softmax: gating_output: expected innermost stride 1"):
        fuseops.topk_softmax(torch.randn(E, T, device=device).t(), k)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_topk_softmax_is_padding_read_before_the_outputs(device):
    """A mask sharing memory with an output is read as it was when called (the op writes the outputs first); a
    gating_output of the wrong rank is named before the mask is looked at."""
    T, k = 5, 2
    g = torch.randn(T, 8, device=device)
    buf = torch.zeros(T * k * 4, dtype=torch.uint8, device=device)
    src = buf.view(torch.int32).view(T, k)
    pad = buf[:T].view(torch.bool)  # all False, then overwritten by token_expert_indices
    ids = torch.empty(T, k, dtype=torch.int32, device=device)
    vllm_compat.topk_softmax(torch.empty(T, k, device=device), ids, src, g, False, None, pad)
    assert (ids >= 0).all()
    o = torch.empty(T, k, device=device)
    i32 = torch.empty(T, k, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"topk_softmax: gating_output: expected rank 2"):
        vllm_compat.topk_softmax(o, i32, i32.clone(), torch.randn(8, device=device), False, None,
                                 torch.zeros(T, dtype=torch.bool, device=device))
