"""Times FlagGems' gated activations on the cases of a `fuseops bench --json` run, with the same method
(median per launch under CUDA-graph replay; warm = same buffers, cold = rotating buffer sets >= 4x L2), and writes a
side-by-side Markdown table.

    PYTHONPATH=.baselines/flaggems/src:.baselines/pylib python3 bench/baselines/flaggems_activation.py \
        OURS.json OUT.md [OUT.json]

FlagGems computes the two-tensor form silu_and_mul(A, B) / gelu_and_mul(x, y, approximate) on contiguous gate and up
tensors (as in the H200 anchors); our row is the fused [M, 2N] input form. Backward cases
are skipped (FlagGems' backward runs through autograd, not as one op).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cold_sets, warm_cold_us  # noqa: E402


def main():
    ours_path, md_path = sys.argv[1], sys.argv[2]
    json_path = sys.argv[3] if len(sys.argv) > 3 else None
    from flag_gems.fused.gelu_and_mul import gelu_and_mul
    from flag_gems.fused.silu_and_mul import silu_and_mul

    ours = json.load(open(ours_path))
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    rows = []
    for r in ours["results"]:
        op = r["op"]
        if "backward" in op:
            continue
        if op.startswith("silu_and_mul"):
            fn = lambda a, b: silu_and_mul(a, b)
        elif op.startswith("gelu_tanh_and_mul") or "(tanh)" in op:
            fn = lambda a, b: gelu_and_mul(a, b, "tanh")
        elif op.startswith("gelu_and_mul"):
            fn = lambda a, b: gelu_and_mul(a, b, "none")
        else:
            continue
        m, n = (int(x) for x in r["shape"].split("x"))
        dt = dtypes[r["dtype"]]
        es = torch.tensor([], dtype=dt).element_size()
        sets = cold_sets(3 * m * n * es)  # a, b and the output FlagGems allocates
        a = torch.randn(sets, m, n, device="cuda", dtype=dt)
        b = torch.randn(sets, m, n, device="cuda", dtype=dt)
        warm, cold = warm_cold_us(lambda i: fn(a[i], b[i]), sets)
        del a, b
        torch.cuda.empty_cache()
        row = dict(set=r["set"], op=op, shape=r["shape"], dtype=r["dtype"], bytes=r["bytes"], ours_warm=r["warm_us"],
                   ours_cold=r["cold_us"], flaggems_warm=warm, flaggems_cold=cold)
        rows.append(row)
        print("%-16s %-26s %-11s %-5s ours %8.2f / %8.2f us  flaggems %8.2f / %8.2f us  speedup %5.2f / %5.2f" % (
            row["set"], op, r["shape"], r["dtype"], r["warm_us"], r["cold_us"], warm, cold, warm / r["warm_us"],
            cold / r["cold_us"]), flush=True)
    copy = ours["copy_tbps"]
    with open(md_path, "w") as f:
        f.write("Side by side in one run on %s: fuseops (fused [M, 2N] input) vs FlagGems (two contiguous tensors). "
                "Median us per launch under CUDA-graph replay; warm = same buffers, cold = rotating sets >= 4x L2. "
                "TB/s on the cold time; copy rate %.3f TB/s.\n\n" % (ours["device"], copy))
        f.write("| set | op | shape | dtype | ours warm | ours cold | ours TB/s cold | FlagGems warm | FlagGems cold | "
                "speedup warm | speedup cold |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| %s | %s | %s | %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f |\n" % (
                r["set"], r["op"], r["shape"], r["dtype"], r["ours_warm"], r["ours_cold"],
                r["bytes"] / r["ours_cold"] / 1e6, r["flaggems_warm"], r["flaggems_cold"],
                r["flaggems_warm"] / r["ours_warm"], r["flaggems_cold"] / r["ours_cold"]))
    if json_path:
        json.dump(rows, open(json_path, "w"), indent=1)
    slower = [r for r in rows if r["flaggems_warm"] < r["ours_warm"] or r["flaggems_cold"] < r["ours_cold"]]
    print("flaggems side by side: %d cases, %d where FlagGems is faster warm or cold" % (len(rows), len(slower)))


if __name__ == "__main__":
    main()
