"""Times FLA's fused kkt+solve Triton kernel (and its unfused chunk_scaled_dot_kkt_fwd + solve_tril) on the
`kkt_solve` cases of a `fuseops bench --json` run, by the method of `fuseops bench` (timing.py), and writes a
side-by-side Markdown table.

    PYTHONPATH=.baselines FLA_FLASH_QLA=0 python3 bench/baselines/fla_kkt_solve.py OURS.json OUT.md

FLA is flash-linear-attention from a fetched, uncommitted checkout (../shared/tools/prepare-baselines.sh). Only
fixed-length cases with chunk size 64 are timed (the FLA kernel is called as in the H200 anchors).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cold_sets, warm_cold_us  # noqa: E402


def retune(modules):
    """Empties the caches of the Triton autotuners defined in `modules`, so that the next call of each kernel tunes it
    for the shape at hand: FLA's autotune keys (e.g. H, HV, K, BC) leave T out, so a config tuned at a short sequence
    would otherwise be reused at a long one (it measured up to 3x slower there, bench/results/h200/gdn.md, thirty-third
    session)."""
    for m in modules:
        for v in vars(m).values():
            for _ in range(4):  # through wrappers such as triton.heuristics (their .fn is the next layer)
                if isinstance(v, triton.runtime.Autotuner):
                    v.cache.clear()
                v = getattr(v, "fn", None)
                if v is None:
                    break


def main():
    ours_path, md_path = sys.argv[1], sys.argv[2]
    import importlib
    from fla.ops.common.chunk_scaled_dot_kkt import chunk_scaled_dot_kkt_fwd
    from fla.ops.gated_delta_rule.chunk_fwd import chunk_gated_delta_rule_fwd_kkt_solve_kernel
    from fla.ops.utils import chunk_local_cumsum, solve_tril
    tuned = [importlib.import_module(m) for m in ("fla.ops.gated_delta_rule.chunk_fwd",
                                                  "fla.ops.common.chunk_scaled_dot_kkt", "fla.ops.utils.solve_tril")]

    ours = json.load(open(ours_path))
    rows = []
    for r in ours["results"]:
        if r["op"] != "kkt_solve":
            continue
        dims = [int(x) for x in r["shape"].split("x") if x.isdigit()]
        if len(dims) == 4:
            B, T, H, K = dims
            HV = H
        elif len(dims) == 5:
            B, T, H, HV, K = dims
        else:
            continue
        BT = 64
        retune(tuned)
        set_bytes = B * T * (H * K * 2 + HV * (4 + 2 + BT * 2))
        sets = cold_sets(set_bytes)
        torch.manual_seed(0)
        ks = [F.normalize(torch.randn(B, T, H, K, device="cuda"), dim=-1).bfloat16() for _ in range(sets)]
        gs = [chunk_local_cumsum(F.logsigmoid(torch.randn(B, T, HV, device="cuda")), chunk_size=BT) for _ in range(sets)]
        bs = [torch.rand(B, T, HV, device="cuda").sigmoid().bfloat16() for _ in range(sets)]
        As = [torch.zeros(B, T, HV, BT, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]

        def fused(i):
            A = As[i]
            A.zero_()
            chunk_gated_delta_rule_fwd_kkt_solve_kernel[(triton.cdiv(T, BT), B * HV)](
                k=ks[i], g=gs[i], beta=bs[i], A=A, cu_seqlens=None, chunk_indices=None, T=T, H=H, HV=HV, K=K,
                BT=BT, BC=16)

        def unfused(i):
            a = chunk_scaled_dot_kkt_fwd(k=ks[i], g=gs[i], beta=bs[i], chunk_size=BT, output_dtype=torch.float32)
            return solve_tril(A=a, output_dtype=torch.bfloat16)

        res = {}
        for name, fn in (("fla_fused", fused), ("fla_unfused", unfused)):
            try:
                fn(0)
                res[name + "_warm"], res[name + "_cold"] = warm_cold_us(fn, sets, est_launches=3)
            except Exception as e:  # report, keep going
                print("FLA", name, r["shape"], "failed:", repr(e)[:200])
        row = dict(shape=r["shape"], bytes=r["bytes"], ours_warm=r["warm_us"], ours_cold=r["cold_us"],
                   copy_us=r["copy_rate_us"], ours_unfused_cold=r["baseline_cold_us"], **res)
        rows.append(row)
        print("%-22s ours %8.2f / %8.2f  fla fused %8s / %8s  fla unfused %8s" % (
            r["shape"], r["warm_us"], r["cold_us"], "%.2f" % res.get("fla_fused_warm", float("nan")),
            "%.2f" % res.get("fla_fused_cold", float("nan")), "%.2f" % res.get("fla_unfused_cold", float("nan"))),
            flush=True)
        del ks, gs, bs, As
        torch.cuda.empty_cache()
    with open(md_path, "w") as f:
        f.write("Side by side in one run on %s: fuseops chunk_gated_delta_rule_fwd_kkt_solve (bf16, chunk 64) vs FLA's "
                "fused Triton kernel and its unfused kkt + solve_tril. Median us per launch under CUDA-graph replay; "
                "warm = same buffers, cold = rotating sets >= 4x L2; copy rate %.3f TB/s.\n\n" % (ours["device"],
                                                                                            ours["copy_tbps"]))
        f.write("| case (B,T,H,K) | ours warm | ours cold | copy-rate us | x copy (cold) | ours unfused cold | "
                "FLA fused warm | FLA fused cold | FLA unfused cold | speedup vs FLA fused (cold) |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            ff = r.get("fla_fused_cold", float("nan"))
            f.write("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n" % (
                r["shape"], r["ours_warm"], r["ours_cold"], r["copy_us"], r["ours_cold"] / r["copy_us"],
                r["ours_unfused_cold"], r.get("fla_fused_warm", float("nan")), ff,
                r.get("fla_unfused_cold", float("nan")), ff / r["ours_cold"]))


if __name__ == "__main__":
    main()
