"""Times fuseops and FLA's Triton GDN forward side by side in one process, on the cases of the `gdn-prefill` and
`gdn-decode` sets, by the method of `fuseops bench` (timing.py: median per launch under CUDA-graph replay, warm =
same buffers), and writes a Markdown table with the ratio to FLA and to FlashQLA's / FlashInfer's published H200 times.

    PYTHONPATH=python:.baselines FLA_FLASH_QLA=0 python3 bench/baselines/fla_gdn_forward.py OUT.md \
        [--only prefill|decode|stages]

`--only stages` times the two stages recompute_w_u_fwd and chunk_gated_delta_rule_fwd_h alone against FLA's
(fla.ops.gated_delta_rule.wy_fast.recompute_w_u_fwd, fla.ops.common.chunk_delta_h.chunk_gated_delta_rule_fwd_h) on the
single-sequence prefill cases, both fed the same bf16 k, v, beta, A (our kkt_solve), w, u and fp32 g, h0 (FLA reads
g as a log2 cumsum, fuseops as a natural-log one: the same work, other values).

FLA is flash-linear-attention from a fetched, uncommitted checkout (../shared/tools/prepare-baselines.sh);
FLA_FLASH_QLA=0 keeps FLA on its own Triton kernels (FLA `fla/ops/gated_delta_rule/backends/flash_qla.py`).
Prefill: chunk_gated_delta_rule(q, k, v, g,
beta, initial_state, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens) with bf16 q/k/v/beta, fp32 g
(log-sigmoid), fp32 h0 — the same call on both sides. Decode (one token per sequence): fuseops' pool form
(fused_recurrent_gated_delta_rule with ssm_state_indices, in place) vs FLA's fused_recurrent_gated_delta_rule
(initial_state read, final state written: the same bytes); the relative difference of o between the two is checked
first, each side synchronised on its own (an asynchronous device error then names its side).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import launches_for, time_graph_us  # noqa: E402

# (h_qk, h_v, sequence lengths) of tools/fuseops/gdn_forward_cases.cpp
PREFILL = [(2, 8, [32768]), (2, 8, [8192]), (2, 8, [2048]), (2, 8, [1024] * 8), (16, 64, [32768]), (16, 64, [8192]),
           (16, 64, [4096, 4096]), (16, 32, [8192]), (16, 32, [4096] * 8), (2, 8, [16384, 16384]), (16, 32, [4096]),
           (16, 32, [32768])]
DECODE = [(16, 32, 1), (16, 32, 64), (16, 32, 256)]
# FlashQLA / FlashInfer published H200 forward ms (the H200 anchors), keyed like PREFILL.
PUBLISHED = {(2, 8, (32768,)): (0.320, 1.655), (2, 8, (8192,)): (0.119, 0.417), (2, 8, (2048,)): (0.061, 0.109),
             (2, 8, (1024,) * 8): (0.061, 0.058), (16, 64, (32768,)): (1.521, 1.552), (16, 64, (8192,)): (0.397, 0.392),
             (16, 64, (4096, 4096)): (0.312, 0.213), (16, 32, (8192,)): (0.280, 0.394),
             (16, 32, (4096,) * 8): (0.619, 0.431), (2, 8, (16384, 16384)): (0.301, 0.830)}
K = V = 128


def label(H, HV, lens):
    if len(lens) == 1:
        return "%d/%d:%d" % (H, HV, lens[0])
    if all(x == lens[0] for x in lens):
        return "%d/%d:%dx%d" % (H, HV, len(lens), lens[0])
    if len(lens) <= 8:  # as tools/fuseops/gdn_forward_cases.cpp
        return "%d/%d:[%s]" % (H, HV, ",".join(str(x) for x in lens))
    return "%d/%d:%dseq,%dtok" % (H, HV, len(lens), sum(lens))


def time_us(fn):
    fn()
    est = time_graph_us(lambda i: fn(), 3, 0.0, 3)
    return time_graph_us(lambda i: fn(), launches_for(est))


def prefill_inputs(H, HV, lens):
    T = sum(lens)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(1, T, H, K, device="cuda", generator=g).bfloat16()
    k = torch.randn(1, T, H, K, device="cuda", generator=g).bfloat16()
    v = torch.randn(1, T, HV, V, device="cuda", generator=g).bfloat16()
    gate = F.logsigmoid(torch.randn(1, T, HV, device="cuda", generator=g))
    beta = torch.rand(1, T, HV, device="cuda", generator=g).bfloat16()
    h0 = torch.randn(len(lens), HV, K, V, device="cuda", generator=g)
    cu = None
    if len(lens) > 1:
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    return q, k, v, gate, beta, h0, cu


def stage_rows(fuseops, out_md):
    """recompute_w_u_fwd and chunk_gated_delta_rule_fwd_h alone, fuseops vs FLA, single-sequence prefill cases."""
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h as fla_fwd_h
    from fla.ops.gated_delta_rule.wy_fast import recompute_w_u_fwd as fla_wu

    rows = []
    for H, HV, lens in PREFILL:
        if len(lens) != 1:
            continue
        q, k, v, gate, beta, h0, _ = prefill_inputs(H, HV, lens)
        k = F.normalize(k.float(), dim=-1).bfloat16()
        g = fuseops.chunk_local_cumsum(gate, 64)
        A = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, g, beta, chunk_size=64)
        w, u = fuseops.recompute_w_u_fwd(k, v, beta, A, g)
        cases = [
            ("recompute_w_u_fwd", lambda: fuseops.recompute_w_u_fwd(k, v, beta, A, g),
             lambda: fla_wu(k, v, beta, A, g)),
            ("chunk_gated_delta_rule_fwd_h",
             lambda: fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, g, initial_state=h0, output_final_state=True),
             lambda: fla_fwd_h(k, w, u, g=g, initial_state=h0, output_final_state=True)),
        ]
        T = lens[0]
        for name, ours, fla in cases:
            t_ours, t_fla = time_us(ours), time_us(fla)
            rows.append((label(H, HV, lens), name, t_ours, t_fla))
            print("%-16s %-30s ours %9.1f us  FLA %9.1f us  x%.2f" % (rows[-1][0], name, t_ours, t_fla,
                                                                       t_fla / t_ours), flush=True)
        del q, k, v, gate, beta, h0, g, A, w, u
        torch.cuda.empty_cache()
    with open(out_md, "w") as f:
        f.write("Side by side in one process on %s (FLA_FLASH_QLA=%s): the GDN forward stages alone, fuseops vs FLA "
                "Triton, bf16, K = V = 128, chunk 64. Median us per launch under CUDA-graph replay (warm).\n\n" % (
                    torch.cuda.get_device_name(), os.environ.get("FLA_FLASH_QLA", "unset")))
        f.write("| case (h_qk/h_v:T) | stage | fuseops us | FLA us | speedup vs FLA |\n|---|---|---|---|---|\n")
        for case, name, to, tf in rows:
            f.write("| %s | %s | %.1f | %.1f | %.2f |\n" % (case, name, to, tf, tf / to))


def main():
    out_md = sys.argv[1]
    only = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--only" else None
    import fuseops
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

    rows = []
    if only == "stages":
        stage_rows(fuseops, out_md)
        return
    if only in (None, "prefill"):
        for H, HV, lens in PREFILL:
            q, k, v, gate, beta, h0, cu = prefill_inputs(H, HV, lens)
            cu64 = cu.long() if cu is not None else None
            ours = lambda: fuseops.chunk_gated_delta_rule(q, k, v, gate, beta, initial_state=h0, output_final_state=True,
                                                          use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
            fla = lambda: fla_chunk(q, k, v, gate, beta, initial_state=h0, output_final_state=True,
                                    use_qk_l2norm_in_kernel=True, cu_seqlens=cu64)
            o1, s1 = ours()
            o2, s2 = fla()
            diff = ((o1.float() - o2.float()).norm() / o2.float().norm()).item()
            t_ours, t_fla = time_us(ours), time_us(fla)
            T = sum(lens)
            flops = T * HV * 2.0 * (64 * (3 * K + 2 * V) + 3 * K * V)
            qla, fi = PUBLISHED.get((H, HV, tuple(lens)), (None, None))
            rows.append((label(H, HV, lens), t_ours, t_fla, flops / t_ours / 1e6, diff, qla, fi))
            print("%-16s ours %9.1f us  FLA %9.1f us  x%.2f  rel diff o %.1e" % (rows[-1][0], t_ours, t_fla,
                                                                                 t_fla / t_ours, diff), flush=True)
            del q, k, v, gate, beta, h0, o1, o2, s1, s2
            torch.cuda.empty_cache()
    if only in (None, "decode"):
        for H, HV, N in DECODE:
            gen = torch.Generator(device="cuda").manual_seed(0)
            q = torch.randn(N, 1, H, K, device="cuda", generator=gen).bfloat16()
            k = torch.randn(N, 1, H, K, device="cuda", generator=gen).bfloat16()
            v = torch.randn(N, 1, HV, V, device="cuda", generator=gen).bfloat16()
            gate = F.logsigmoid(torch.randn(N, 1, HV, device="cuda", generator=gen))
            beta = torch.rand(N, 1, HV, device="cuda", generator=gen).bfloat16()
            pool = torch.randn(N, HV, K, V, device="cuda", generator=gen)
            idx = torch.arange(N, dtype=torch.int32, device="cuda")
            ours = lambda: fuseops.fused_recurrent_gated_delta_rule(q, k, v, gate, beta, initial_state=pool,
                                                                    inplace_final_state=True, ssm_state_indices=idx,
                                                                    use_qk_l2norm_in_kernel=True)
            fla = lambda: fla_recurrent(q, k, v, gate, beta, initial_state=pool, output_final_state=True,
                                        use_qk_l2norm_in_kernel=True)
            # agreement first (ours on a copy of the pool: it updates it in place), each side synchronised on its own
            o1, _ = fuseops.fused_recurrent_gated_delta_rule(q, k, v, gate, beta, initial_state=pool.clone(),
                                                             inplace_final_state=True, ssm_state_indices=idx,
                                                             use_qk_l2norm_in_kernel=True)
            torch.cuda.synchronize()
            o2, s2 = fla()
            torch.cuda.synchronize()
            diff = ((o1.float() - o2.float()).norm() / o2.float().norm()).item()
            del o1, o2, s2
            t_ours = time_us(ours)
            torch.cuda.synchronize()
            t_fla = time_us(fla)
            state_bytes = 2 * 4.0 * N * HV * K * V
            rows.append(("%d/%d:N%d" % (H, HV, N), t_ours, t_fla, state_bytes / t_ours / 1e6, diff, None, None))
            print("%-16s ours %9.1f us  FLA %9.1f us  x%.2f  state %.2f TB/s  rel diff o %.1e" % (
                rows[-1][0], t_ours, t_fla, t_fla / t_ours, rows[-1][3], diff), flush=True)
            del q, k, v, gate, beta, pool
            torch.cuda.empty_cache()
    with open(out_md, "w") as f:
        f.write("Side by side in one process on %s (FLA_FLASH_QLA=%s): fuseops vs FLA Triton, GDN forward, bf16, "
                "K = V = 128. Median us per launch under CUDA-graph replay (warm). TFLOP/s (prefill) counts the "
                "chunked algorithm's multiply-adds x 2 (docs/ops/gdn.md); decode shows the state TB/s "
                "(fp32 read + write).\n\n" % (torch.cuda.get_device_name(), os.environ.get("FLA_FLASH_QLA", "unset")))
        f.write("| case (h_qk/h_v:lens) | fuseops us | FLA us | speedup vs FLA | TFLOP/s or TB/s | rel diff o vs FLA | "
                "FlashQLA ms (pub.) | FlashInfer ms (pub.) | ours / FlashQLA |\n|---|---|---|---|---|---|---|---|---|\n")
        for name, to, tf, rate, diff, qla, fi in rows:
            f.write("| %s | %.1f | %.1f | %.2f | %.1f | %s | %s | %s | %s |\n" % (
                name, to, tf, tf / to, rate, "-" if diff is None else "%.1e" % diff, "-" if qla is None else qla,
                "-" if fi is None else fi, "-" if qla is None else "%.2f" % (to / 1e3 / qla)))


if __name__ == "__main__":
    main()
