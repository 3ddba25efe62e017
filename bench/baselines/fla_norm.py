"""Times FLA's gated norm (`fla.modules.layernorm_gated.layer_norm_fwd`, the Triton kernel of `layernorm_fn` /
`rmsnorm_fn`) on the `norm` cases of a `fuseops bench --json` run, by the method of `fuseops bench` (timing.py), and
writes a side-by-side Markdown table. Optionally also times fuseops' Python API in the same process.

    fuseops bench --set norm --json OURS.json
    PYTHONPATH=.baselines:python python3 bench/baselines/fla_norm.py OURS.json OUT.md

FLA is flash-linear-attention from a fetched, uncommitted checkout (../shared/tools/prepare-baselines.sh). Cases are
parsed from the op name (rms_norm / layer_norm, ",gate" after the norm, ",gate-before", ",bias", ",w32" f32 weights)
and the shape ("ROWSxN" or "ROWSxN/gG"). FLA always writes rstd (and mean for LayerNorm), as our bench does.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cold_sets, warm_cold_us  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def parse(r):
    op, shape = r["op"].split(","), r["shape"]
    dims, _, group = shape.partition("/g")
    rows, N = (int(v) for v in dims.split("x"))
    return dict(rms=op[0] == "rms_norm", gate="gate" in op or "gate-before" in op, before="gate-before" in op,
                bias="bias" in op, w32="w32" in op, rows=rows, N=N, G=int(group) if group else None,
                dtype=DTYPES[r["dtype"]])


def main():
    ours_path, md_path = sys.argv[1], sys.argv[2]
    from fla.modules.layernorm_gated import layer_norm_fwd

    try:
        import fuseops
    except ImportError:  # FLA alone
        fuseops = None
    ours = json.load(open(ours_path))
    rows = []
    for r in ours["results"]:
        if not (r["op"].startswith("rms_norm") or r["op"].startswith("layer_norm")):
            continue
        c = parse(r)
        dt, wdt = c["dtype"], torch.float32 if c["w32"] else c["dtype"]
        es = torch.tensor([], dtype=dt).element_size()
        set_bytes = 3 * c["rows"] * c["N"] * es
        sets = cold_sets(set_bytes)
        torch.manual_seed(0)
        xs = [torch.randn(c["rows"], c["N"], device="cuda", dtype=dt) for _ in range(sets)]
        zs = [torch.randn(c["rows"], c["N"], device="cuda", dtype=dt) if c["gate"] else None for _ in range(sets)]
        outs = [torch.empty_like(x) for x in xs]
        w = (1 + 0.1 * torch.randn(c["N"], device="cuda")).to(wdt)
        b = (0.1 * torch.randn(c["N"], device="cuda")).to(wdt) if c["bias"] else None
        kw = dict(group_size=c["G"], norm_before_gate=not c["before"], is_rms_norm=c["rms"])

        def fla(i):
            layer_norm_fwd(xs[i], w, b, 1e-6, z=zs[i], out=outs[i], **kw)

        def ours_py(i):
            fuseops.layer_norm_fwd(xs[i], w, b, 1e-6, z=zs[i], out=outs[i], **kw)

        res = {}
        impls = [("fla", fla)] + ([("fuseops_py", ours_py)] if fuseops else [])
        for name, fn in impls:
            try:
                fn(0)
                res[name + "_warm"], res[name + "_cold"] = warm_cold_us(fn, sets, est_launches=3)
            except Exception as e:  # report, keep going
                print(name, r["op"], r["shape"], "failed:", repr(e)[:200])
        if fuseops:  # the two agree (same math in fp32; rounding differences of the output dtype at most)
            fla(0)
            ref = outs[0].float().clone()
            ours_py(0)
            res["max_rel_diff"] = ((outs[0].float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        row = dict(op=r["op"], shape=r["shape"], dtype=r["dtype"], bytes=r["bytes"], ours_warm=r["warm_us"],
                   ours_cold=r["cold_us"], copy_us=r["copy_rate_us"], **res)
        rows.append(row)
        print("%-24s %-16s %-5s ours %8.2f / %8.2f  fla %8s / %8s  copy %7.2f" % (
            r["op"], r["shape"], r["dtype"], r["warm_us"], r["cold_us"], "%.2f" % res.get("fla_warm", float("nan")),
            "%.2f" % res.get("fla_cold", float("nan")), r["copy_rate_us"]), flush=True)
        del xs, zs, outs
        torch.cuda.empty_cache()
    nan = float("nan")
    with open(md_path, "w") as f:
        f.write("Side by side in one run on %s: fuseops layer_norm_fwd (C++ bench, rstd written) vs FLA's Triton "
                "layer_norm_fwd (fla/modules/layernorm_gated.py). Median us per launch under CUDA-graph replay; warm = "
                "same buffers, cold = rotating sets >= 4x L2; copy rate %.3f TB/s.\n\n" % (ours["device"],
                                                                                           ours["copy_tbps"]))
        f.write("| op | shape | dtype | ours warm | ours cold | copy-rate us | x copy (cold) | FLA warm | FLA cold | "
                "speedup vs FLA (cold) | fuseops Python cold | max rel diff |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            fc = r.get("fla_cold", nan)
            f.write("| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1e |\n" % (
                r["op"], r["shape"], r["dtype"], r["ours_warm"], r["ours_cold"], r["copy_us"],
                r["ours_cold"] / r["copy_us"], r.get("fla_warm", nan), fc, fc / r["ours_cold"],
                r.get("fuseops_py_cold", nan), r.get("max_rel_diff", nan)))


if __name__ == "__main__":
    main()
