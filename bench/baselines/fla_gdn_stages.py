"""One FLA chunk_gated_delta_rule call per `gdn-prefill` case label, between cudaProfilerStart and cudaProfilerStop,
after three warm-up calls (Triton's autotuning), so that Nsight Compute times FLA's kernels one by one:

    PYTHONPATH=.baselines FLA_FLASH_QLA=0 ncu --clock-control none --profile-from-start off \
        --metrics gpu__time_duration.sum --csv python3 bench/baselines/fla_gdn_stages.py 16/64:8192 > fla.csv

Our side of the same comparison: `ncu --clock-control none --metrics gpu__time_duration.sum --csv -k
regex:"l2norm|cumsum|intra|fwd_|kkt|solve|w_u" -c 8 fuseops bench --quiet --set gdn-prefill --shape 16/64:8192`.
Inputs: fla_gdn_forward.prefill_inputs (bf16 q, k, v, beta, f32 log-sigmoid g, an f32 initial state per sequence;
output_final_state=True, use_qk_l2norm_in_kernel=True, K = V = 128). One process per case keeps ncu's
output in the case's order (ncu prints its results when the process ends). Results: bench/results/h200/gdn.md
(fourteenth session).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fla_gdn_forward import prefill_inputs  # noqa: E402
from fla_gdn_prefill import parse  # noqa: E402


def main():
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk

    for shape in sys.argv[1:]:
        parsed = parse(shape)
        if parsed is None:
            sys.exit("not a gdn-prefill label (H/HV:T or H/HV:NxT): %s" % shape)
        q, k, v, g, beta, h0, cu = prefill_inputs(*parsed)

        def call():
            return fla_chunk(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                             use_qk_l2norm_in_kernel=True, cu_seqlens=cu)

        for _ in range(3):
            call()
        torch.cuda.synchronize()
        print("CASE", shape, flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
