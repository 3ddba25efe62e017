"""Times FLA's Triton chunk_gated_delta_rule on the `gdn-prefill` cases of a `fuseops bench --json` run (and its
fused_recurrent_gated_delta_rule on the `gdn-decode` pool-form cases), by the
method of `fuseops bench` (timing.py: median per launch under CUDA-graph replay, warm = the same buffers, cold =
rotating sets >= 4x L2), and writes a side-by-side Markdown table with fuseops' times from the same run. Needs no
fuseops extension (fla_gdn_forward.py times both sides in one process through it).

    PYTHONPATH=.baselines FLA_FLASH_QLA=0 python3 bench/baselines/fla_gdn_prefill.py OURS.json OUT.md

FLA is flash-linear-attention from a fetched, uncommitted checkout (../shared/tools/prepare-baselines.sh);
FLA_FLASH_QLA=0 keeps FLA on its own Triton kernels (FLA `fla/ops/gated_delta_rule/backends/flash_qla.py`).
The call is the one of the bench case
(tools/fuseops/gdn_forward_cases.cpp): bf16 q, k, v, beta, fp32 g (log-sigmoid), an fp32 initial state per
sequence, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens for several sequences; K = V = 128.
Decode (one token per sequence): FLA's fused_recurrent_gated_delta_rule with q [N, 1, H, K], an fp32 initial state
[N, HV, K, V] read and the final state written (output_final_state=True): the same state bytes as our pool form.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cold_sets, warm_cold_us  # noqa: E402

K = V = 128


def parse(shape):
    """'16/64:2x4096' -> (16, 64, [4096, 4096]); '2/8:32768' -> (2, 8, [32768]); None for other shapes."""
    try:
        heads, lens = shape.split(":")
        H, HV = (int(x) for x in heads.split("/"))
        if "x" in lens:
            n, length = (int(x) for x in lens.split("x"))
            return H, HV, [length] * n
        return H, HV, [int(lens)]
    except ValueError:
        return None


def time_row(r, N, HV, fla, sets, est_launches):
    """A table row: our times from the bench result r, FLA's warm / cold times of fla(i) on input set i (none if FLA
    fails: reported, the run goes on)."""
    res = {}
    try:
        fla(0)
        res["warm"], res["cold"] = warm_cold_us(fla, sets, est_launches=est_launches)
    except Exception as e:
        print("FLA", r["shape"], "failed:", repr(e)[:200])
    print("%-16s ours %9.1f / %9.1f us  FLA %9s / %9s us" % (
        r["shape"], r["warm_us"], r["cold_us"], "%.1f" % res.get("warm", float("nan")),
        "%.1f" % res.get("cold", float("nan"))), flush=True)
    return dict(shape=r["shape"], N=N, HV=HV, ours_warm=r["warm_us"], ours_cold=r["cold_us"], **res)


def parse_decode(shape):
    """'16/32:N256' -> (16, 32, 256); None for other shapes."""
    try:
        heads, n = shape.split(":N")
        H, HV = (int(x) for x in heads.split("/"))
        return H, HV, int(n)
    except ValueError:
        return None


def decode_rows(ours):
    """FLA's fused_recurrent_gated_delta_rule on the pool-form decode cases of the run."""
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

    rows = []
    for r in ours["results"]:
        if r["op"] != "fused_recurrent_gated_delta_rule_update" or parse_decode(r["shape"]) is None:
            continue
        H, HV, N = parse_decode(r["shape"])
        sets = cold_sets(N * (HV * K * V * 4 * 2 + 2 * H * K * 2 + HV * V * 2 * 2 + HV * 6))
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = [(torch.randn(N, 1, H, K, device="cuda", generator=gen).bfloat16(),
                   torch.randn(N, 1, H, K, device="cuda", generator=gen).bfloat16(),
                   torch.randn(N, 1, HV, V, device="cuda", generator=gen).bfloat16(),
                   F.logsigmoid(torch.randn(N, 1, HV, device="cuda", generator=gen)),
                   torch.rand(N, 1, HV, device="cuda", generator=gen).bfloat16(),
                   torch.randn(N, HV, K, V, device="cuda", generator=gen)) for _ in range(sets)]

        def fla(i):
            q, k, v, g, beta, h0 = inputs[i]
            return fla_recurrent(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                 use_qk_l2norm_in_kernel=True)

        rows.append(time_row(r, N, HV, fla, sets, 1))
        del inputs
        torch.cuda.empty_cache()
    return rows


def main():
    ours_path, md_path = sys.argv[1], sys.argv[2]
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk

    ours = json.load(open(ours_path))
    rows = []
    for r in ours["results"]:
        if r["op"] != "chunk_gated_delta_rule" or r.get("set") not in (None, "gdn-prefill"):
            continue
        parsed = parse(r["shape"])
        if parsed is None:
            continue
        H, HV, lens = parsed
        T, N = sum(lens), len(lens)
        set_bytes = T * (2 * H * K * 2 + HV * V * 2 + HV * 4 + HV * 2 + HV * V * 2) + N * HV * K * V * 4
        sets = cold_sets(set_bytes)
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = []
        for _ in range(sets):
            inputs.append((torch.randn(1, T, H, K, device="cuda", generator=gen).bfloat16(),
                           torch.randn(1, T, H, K, device="cuda", generator=gen).bfloat16(),
                           torch.randn(1, T, HV, V, device="cuda", generator=gen).bfloat16(),
                           F.logsigmoid(torch.randn(1, T, HV, device="cuda", generator=gen)),
                           torch.rand(1, T, HV, device="cuda", generator=gen).bfloat16(),
                           torch.randn(N, HV, K, V, device="cuda", generator=gen)))
        cu = None
        if N > 1:
            cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int64, device="cuda")

        def fla(i):
            q, k, v, g, beta, h0 = inputs[i]
            return fla_chunk(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                             use_qk_l2norm_in_kernel=True, cu_seqlens=cu)

        rows.append(time_row(r, N, HV, fla, sets, 3))
        del inputs
        torch.cuda.empty_cache()
    dec = decode_rows(ours)
    with open(md_path, "w") as f:
        f.write("Side by side in one run on %s (FLA_FLASH_QLA=%s): fuseops chunk_gated_delta_rule (the `gdn-prefill` "
                "cases of `fuseops bench`) vs FLA's Triton chunk_gated_delta_rule, bf16, K = V = 128, chunk 64. Median "
                "us per launch under CUDA-graph replay; warm = same buffers, cold = rotating sets >= 4x L2. Target: "
                ">= 1.5x FLA's speed where N HV >= 64, >= 1.2x elsewhere.\n\n" % (
                    ours["device"], os.environ.get("FLA_FLASH_QLA", "unset")))
        f.write("| case (h_qk/h_v:lens) | N HV | ours warm | ours cold | FLA warm | FLA cold | speedup vs FLA (cold) | "
                "target |\n|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            fc = r.get("cold", float("nan"))
            f.write("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |\n" % (
                r["shape"], r["N"] * r["HV"], r["ours_warm"], r["ours_cold"], r.get("warm", float("nan")), fc,
                fc / r["ours_cold"], 1.5 if r["N"] * r["HV"] >= 64 else 1.2))

        if dec:
            f.write("\nDecode, one token per sequence (FLA: fused_recurrent_gated_delta_rule, fp32 initial state read and "
                    "final state written; ours: the pool form in place; the same state bytes):\n\n"
                    "| case (h_qk/h_v:N) | ours warm | ours cold | FLA warm | FLA cold | speedup vs FLA (cold) |\n"
                    "|---|---|---|---|---|---|\n")
            for r in dec:
                fc = r.get("cold", float("nan"))
                f.write("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n" % (
                    r["shape"], r["ours_warm"], r["ours_cold"], r.get("warm", float("nan")), fc, fc / r["ours_cold"]))


if __name__ == "__main__":
    main()
