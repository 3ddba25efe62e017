"""Times FlagGems' MoE routing ops on the cases of a `fuseops bench --json` run (sets mixtral-8x7b, qwen3-next-80b,
qwen3-moe, deepseek-v3), with the same method (median per launch under CUDA-graph replay; warm = same buffers,
cold = rotating buffer sets >= 4x L2), and writes a side-by-side Markdown table.

    PYTHONPATH=.baselines/flaggems/src:.baselines/pylib python3 bench/baselines/flaggems_moe.py OURS.json OUT.md [OUT.json]

FlagGems ops: topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, renormalize) (adds 1e-8
to its denominators), grouped_topk(scores, n_group, topk_group, topk, renormalize, routed_scaling_factor, bias,
scoring_func=1) (bias cast to the scores' dtype), moe_align_block_size(topk_ids, block_size, num_experts) (allocates
its outputs, order inside regions not deterministic). moe_route has no FlagGems counterpart: its row compares with
FlagGems' router followed by FlagGems' moe_align_block_size.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cold_sets, warm_cold_us  # noqa: E402

# Router settings of each set (the same as tools/fuseops/moe_cases.cpp).
SETS = {
    "mixtral-8x7b": dict(E=8, k=2, grouped=False),
    "qwen3-next-80b": dict(E=512, k=10, grouped=False),
    "qwen3-moe": dict(E=128, k=8, grouped=False),
    "deepseek-v3": dict(E=256, k=8, grouped=True, n_group=8, topk_group=4, scale=2.5),
}


def main():
    ours_path, md_path = sys.argv[1], sys.argv[2]
    json_path = sys.argv[3] if len(sys.argv) > 3 else None
    from flag_gems.fused.grouped_topk import grouped_topk
    from flag_gems.fused.moe_align_block_size import moe_align_block_size
    from flag_gems.fused.topk_softmax import topk_softmax

    ours = json.load(open(ours_path))
    rows = []
    for r in ours["results"]:
        cfg = SETS.get(r["set"])
        if cfg is None or r["op"] not in ("topk_softmax", "grouped_topk", "moe_align_block_size", "moe_route"):
            continue
        T = int(r["shape"].split("x")[0])
        E, k = cfg["E"], cfg["k"]
        sets = cold_sets(T * E * 2 + T * k * 12 + (T * k + E * 63) * 4)
        logits = torch.randn(sets, T, E, device="cuda", dtype=torch.bfloat16) * 2
        bias = (torch.randn(E, device="cuda") * 0.5).to(torch.bfloat16)
        w = torch.empty(sets, T, k, device="cuda", dtype=torch.float32)
        ids = torch.empty(sets, T, k, device="cuda", dtype=torch.int32)
        tei = torch.empty(sets, T, k, device="cuda", dtype=torch.int32)

        def router(i):
            if cfg["grouped"]:
                return grouped_topk(logits[i], cfg["n_group"], cfg["topk_group"], k, True, cfg["scale"], bias, 1)[1]
            topk_softmax(w[i], ids[i], tei[i], logits[i], True)
            return ids[i]

        for i in range(sets):
            ids[i].copy_(router(i))
        if r["op"] == "moe_align_block_size":
            fn = lambda i: moe_align_block_size(ids[i], 64, E)
        elif r["op"] == "moe_route":
            fn = lambda i: moe_align_block_size(router(i), 64, E)
        else:
            fn = router
        warm, cold = warm_cold_us(fn, sets)
        del logits, w, ids, tei
        torch.cuda.empty_cache()
        row = dict(set=r["set"], op=r["op"], shape=r["shape"], ours_warm=r["warm_us"], ours_cold=r["cold_us"],
                   flaggems_warm=warm, flaggems_cold=cold)
        rows.append(row)
        print("%-15s %-21s %-18s ours %7.2f / %7.2f us  flaggems %7.2f / %7.2f us  speedup %5.2f / %5.2f" % (
            row["set"], row["op"], row["shape"], row["ours_warm"], row["ours_cold"], warm, cold,
            warm / row["ours_warm"], cold / row["ours_cold"]), flush=True)
    with open(md_path, "w") as f:
        f.write("Side by side in one run on %s: fuseops vs FlagGems (moe_route: FlagGems' router + moe_align_block_size). "
                "Median us per launch under CUDA-graph replay; warm = same buffers, cold = rotating sets >= 4x L2.\n\n"
                % ours["device"])
        f.write("| set | op | shape | ours warm | ours cold | FlagGems warm | FlagGems cold | speedup warm | speedup cold |\n"
                "|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n" % (
                r["set"], r["op"], r["shape"], r["ours_warm"], r["ours_cold"], r["flaggems_warm"], r["flaggems_cold"],
                r["flaggems_warm"] / r["ours_warm"], r["flaggems_cold"] / r["ours_cold"]))
    if json_path:
        json.dump(rows, open(json_path, "w"), indent=1)


if __name__ == "__main__":
    main()
