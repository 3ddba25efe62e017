"""GPU timing of the Python benchmarks, by the method of ``fuseops bench``: the median time per launch under
CUDA-graph replay after a warm-up replay; warm = the same buffers every launch, cold = rotating buffer sets of at
least 4x the L2 size. Used by ``python -m fuseops.bench`` and by the side-by-side baseline scripts of the source tree
(bench/baselines/timing.py loads this file by path, so it imports nothing of fuseops)."""

import math
import statistics
import time

import torch


def time_graph_us(launch, launches, min_seconds=0.2, max_replays=50):
    """Median time per launch of launch(i), i < launches, captured in one CUDA graph and replayed."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(min(launches, 2)):  # eager first: lazy initialisation and errors outside the capture
            launch(i)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(launches):
            launch(i)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()  # warm-up replay
    torch.cuda.synchronize()
    per_launch, t0 = [], time.perf_counter()
    for r in range(max_replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        per_launch.append(start.elapsed_time(end) * 1e3 / launches)
        if r >= 4 and time.perf_counter() - t0 >= min_seconds:
            break
    del graph
    return statistics.median(per_launch)


def launches_for(est_us):
    """Launches per graph for a launch of about est_us: enough for ~2 ms, 10..1000 (as fuseops bench)."""
    return int(min(1000, max(10, 2000 / max(est_us, 0.5))))


def cold_sets(set_bytes, free_fraction=0.8):
    """Buffer sets so that sets * set_bytes >= 4x L2 (2..4096), within free_fraction of the free device memory."""
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    sets = max(2, min(4096, math.ceil(4 * l2 / max(set_bytes, 1))))
    free = torch.cuda.mem_get_info()[0] * free_fraction
    while sets > 2 and sets * set_bytes > free:
        sets //= 2
    return sets


def warm_cold_us(launch_on_set, sets, est_launches=5):
    """(warm, cold) us of launch_on_set(i): warm always on set 0, cold rotating over the `sets` sets; the launches
    per graph follow from an estimate over a graph of `est_launches` launches."""
    est = time_graph_us(lambda i: launch_on_set(0), est_launches, 0.0, 3)
    launches = launches_for(est)
    warm = time_graph_us(lambda i: launch_on_set(0), launches)
    cold = time_graph_us(lambda i: launch_on_set(i % sets), max(sets, (launches // sets) * sets))
    return warm, cold
