"""Benchmark of the fuseops ops from PyTorch: ``python -m fuseops.bench [--quick] [--json FILE] [--md FILE]``.

1. Device time, side by side: fuseops, torch eager of the same math (``F.silu(a) * b``, ``F.gelu(a, approximate) * b``)
   and ``torch.compile`` of that math. Timed as ``fuseops bench`` times: the median time per launch under CUDA-graph
   replay (torch.cuda.CUDAGraph); warm = the same buffers every launch, cold = rotating through buffer sets of at
   least 4x the L2 size. TB/s and "x copy" use the cold time, the bytes the op must move, and the rate of a 1 GiB
   device-to-device copy measured in the same run.
2. Host overhead per call at decode sizes (1 and 64 rows x 14336, bfloat16): N back-to-back eager calls timed with
   time.perf_counter, synchronising only at the end (wall us/call); the host's own cost of a call, measured while the
   GPU is kept busy so that no call waits for it (host us/call); and the device time per launch under graph replay
   (device us/launch). A call is host-bound when its wall time exceeds its device time.
"""

import argparse
import datetime
import json
import statistics
import time

import torch
import torch.nn.functional as F

import fuseops

from .timing import cold_sets, launches_for, time_graph_us

D = 14336  # Llama-3-8B / Mixtral MLP intermediate size
FULL = [("silu", r, D) for r in (1, 64, 4096, 8192)] + [("silu", 40960, 512)]
FULL += [(k, r, D) for k in ("gelu", "gelu_tanh") for r in (64, 8192)] + [("silu_backward", 4096, D)]
QUICK = [("silu", 64, D), ("silu", 8192, D), ("gelu", 8192, D), ("silu_backward", 4096, D)]


def copy_rate_tbps():
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for i in range(12):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 2:
            ms.append(start.elapsed_time(end))
    return 2.0 * src.numel() / (statistics.median(ms) * 1e-3) / 1e12


def _formula(kind):
    """The plain-PyTorch math of a case, for eager and torch.compile: (x) -> out, or (dout, g, u) -> (dg, du)."""
    if kind == "silu_backward":

        def silu_backward(dout, g, u):
            s = torch.sigmoid(g)
            return dout * u * s * (1 + g * (1 - s)), dout * g * s

        return silu_backward
    approximate = {"gelu": "none", "gelu_tanh": "tanh"}.get(kind)

    def act_and_mul(x):
        d = x.shape[-1] // 2
        a = F.silu(x[..., :d]) if kind == "silu" else F.gelu(x[..., :d], approximate=approximate)
        return a * x[..., d:]

    return act_and_mul


def _fuseops_op(kind):
    if kind == "silu_backward":
        return fuseops.ops.silu_and_mul_backward.default
    op = {"silu": "silu_and_mul", "gelu": "gelu_and_mul", "gelu_tanh": "gelu_tanh_and_mul"}[kind]
    return getattr(fuseops.ops, op).default


def _buffer_sets(kind, rows, d, sets, dtype=torch.bfloat16):
    """Per set: the fuseops arguments (outputs first) and the baseline's arguments."""
    result = []
    for _ in range(sets):
        if kind == "silu_backward":
            dg, du = (torch.empty(rows, d, dtype=dtype, device="cuda") for _ in range(2))
            dout, g, u = (torch.randn(rows, d, device="cuda").to(dtype) for _ in range(3))
            result.append(((dg, du, dout, g, u), (dout, g, u)))
        else:
            x = torch.randn(rows, 2 * d, device="cuda").to(dtype)
            result.append(((torch.empty(rows, d, dtype=dtype, device="cuda"), x), (x,)))
    return result


def bench_case(kind, rows, d, copy_tbps):
    elem = 2  # bfloat16
    per_set = (5 if kind == "silu_backward" else 3) * rows * d * elem
    sets = cold_sets(per_set, free_fraction=0.6)
    bufs = _buffer_sets(kind, rows, d, sets)
    formula, op = _formula(kind), _fuseops_op(kind)
    torch._dynamo.reset()  # a fresh cache per case: no recompile limit across shapes
    compiled = torch.compile(formula, dynamic=False)
    impls = {
        "fuseops": lambda i: op(*bufs[i][0]),
        "eager": lambda i: formula(*bufs[i][1]),
        "compile": lambda i: compiled(*bufs[i][1]),
    }
    row = {"op": kind, "rows": rows, "d": d, "dtype": "bf16", "bytes": per_set, "cold_sets": sets}
    est = time_graph_us(lambda i: impls["fuseops"](0), 5, 0.0, 3)
    n = launches_for(est)
    cold_n = max(sets, (n // sets) * sets)
    for name, fn in impls.items():
        try:
            row[f"{name}_warm_us"] = time_graph_us(lambda i: fn(0), n)
            row[f"{name}_cold_us"] = time_graph_us(lambda i: fn(i % sets), cold_n)
        except Exception as e:  # e.g. torch.compile without a working Triton: report, keep going
            print(f"  {kind} {rows}x{d} {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            row[f"{name}_warm_us"] = row[f"{name}_cold_us"] = float("nan")
    row["tbps_cold"] = per_set / row["fuseops_cold_us"] / 1e6
    row["copy_us"] = per_set / (copy_tbps * 1e6)
    del bufs, compiled
    torch.cuda.empty_cache()
    return row


def _host_us_per_call(fn, calls=256, reps=15):
    """The host's cost of one call: calls issued while the GPU is busy with a long kernel, so none waits for it."""
    times = []
    for _ in range(reps):
        torch.cuda._sleep(100_000_000)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def host_overhead(rows, calls):
    x = torch.randn(rows, 2 * D, device="cuda").to(torch.bfloat16)
    g, u = x[:, :D], x[:, D:]
    out = torch.empty(rows, D, dtype=torch.bfloat16, device="cuda")
    impls = {
        "fuseops.silu_and_mul(x)": lambda: fuseops.silu_and_mul(x),
        "torch.ops.fuseops.silu_and_mul(out, x)": lambda: fuseops.ops.silu_and_mul(out, x),
        "F.silu(g)": lambda: F.silu(g),
        "torch.mul(g, u)": lambda: torch.mul(g, u),
        "F.silu(g) * u": lambda: F.silu(g) * u,
    }
    result = []
    for name, fn in impls.items():
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / calls * 1e6
        device = time_graph_us(lambda i: fn(), 200)
        host = _host_us_per_call(fn)
        bound = "host" if wall > 1.1 * device else "device"
        result.append({"call": name, "rows": rows, "d": D, "calls": calls, "wall_us_per_call": wall,
                       "host_us_per_call": host, "device_us_per_launch": device, "bound": bound})
    return result


def _fmt(v):
    return f"{v:.2f}" if v == v else "n/a"


RESULT_COLUMNS = ["op", "rows", "d", "fuseops_warm_us", "fuseops_cold_us", "tbps_cold", "copy_us", "eager_warm_us",
                  "eager_cold_us", "compile_warm_us", "compile_cold_us"]
HOST_COLUMNS = ["call", "rows", "wall_us_per_call", "host_us_per_call", "device_us_per_launch", "bound"]


def _table(rows, columns):
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r[c]) if isinstance(r[c], float) else str(r[c]) for c in columns) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fuseops.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few cases and 2000 calls for the host overhead")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--md", metavar="FILE", help="write the results as Markdown tables")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("fuseops.bench: needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 2
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 64 << 20)
    copy_tbps = copy_rate_tbps()
    empty_us = time_graph_us(lambda i: torch.cuda._sleep(0), 200)
    head = (f"fuseops {fuseops.__version__}, torch {torch.__version__}, {props.name}, "
            f"{props.multi_processor_count} SMs, L2 {l2_bytes / 1e6:.0f} MB; copy rate {copy_tbps:.3f} TB/s "
            f"(1 GiB D2D, read + write); empty kernel {empty_us:.2f} us")
    method = ("Device times: median us per launch under CUDA-graph replay; warm = same buffers, cold = rotating "
              "buffer sets >= 4x L2; bf16; TB/s on the fuseops cold time; copy_us = bytes / copy rate.")
    print(head + "\n" + method)
    results = []
    for kind, rows, d in QUICK if args.quick else FULL:
        results.append(bench_case(kind, rows, d, copy_tbps))
        r = results[-1]
        print(f"{kind:14} {rows:6}x{d:<6} fuseops {_fmt(r['fuseops_warm_us']):>8} / {_fmt(r['fuseops_cold_us']):>8} us"
              f" ({r['tbps_cold']:.2f} TB/s)  eager {_fmt(r['eager_warm_us']):>8} / {_fmt(r['eager_cold_us']):>8}"
              f"  compile {_fmt(r['compile_warm_us']):>8} / {_fmt(r['compile_cold_us']):>8}  (warm / cold)", flush=True)
    calls = 2000 if args.quick else 10000
    host_note = (f"Host overhead: wall = {calls} back-to-back calls timed with time.perf_counter, one synchronize at "
                 "the end; host = the cost of a call issued while the GPU is busy; device = graph replay per launch.")
    print("\n" + host_note)
    overhead = []
    for rows in (1, 64):
        for r in host_overhead(rows, calls):
            overhead.append(r)
            print(f"{r['call']:42} rows {rows:3}: wall {r['wall_us_per_call']:7.2f}  host {r['host_us_per_call']:7.2f}"
                  f"  device {r['device_us_per_launch']:7.2f} us  ({r['bound']}-bound)", flush=True)
    command = "python -m fuseops.bench" + (" --quick" if args.quick else "")
    report = {"command": command, "date": str(datetime.date.today()), "fuseops": fuseops.__version__,
              "torch": torch.__version__, "device": props.name, "l2_bytes": l2_bytes, "copy_tbps": copy_tbps,
              "empty_kernel_us": empty_us, "results": results, "host_overhead": overhead}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"{head}. Date: {report['date']}. Command: `{report['command']}`.\n\n{method}\n\n")
            f.write(_table(results, RESULT_COLUMNS) + f"\n\n{host_note}\n\n" + _table(overhead, HOST_COLUMNS) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
