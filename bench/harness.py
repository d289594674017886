"""Shared timing / reporting helpers for the GGNN benchmarks (reference,
upstream side-by-side, fast-path exploration).  One JSON line per measurement
with the keys: mode, steps, threads, dtype, device, batch_nodes, edges,
median_s, nodes_per_s, graphs_per_s, gflops, matmul_gflops, peak_rss_mb
(plus a few extras: impl, reps, min_s, max_s, spread)."""
import json
import resource
import statistics
import time

import torch

FLOPS_PER_NODE_STEP = 28e3  # ~ 2*34*204 (messages) + 2*2*34*102 (GRU)


def set_threads(n: int):
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def measure(fn, warmup: int = 2, reps: int = 10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def matmul_gflops(rows: int = 8640, dtype=torch.float32, reps: int = 200) -> float:
    """Median GFLOP/s of a plain [rows,34] x [34,204] matmul (the fused message map)."""
    a = torch.randn(rows, 34).to(dtype)
    b = torch.randn(34, 204).to(dtype)
    out = torch.empty(rows, 204, dtype=dtype)
    for _ in range(10):
        torch.mm(a, b, out=out)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        torch.mm(a, b, out=out)
        ts.append(time.perf_counter() - t)
    return 2 * rows * 34 * 204 / statistics.median(ts) / 1e9


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def report(impl, mode, steps, times, batch_nodes, edges, graphs, dtype="float32", mm=None, **extra):
    med = statistics.median(times)
    flops = FLOPS_PER_NODE_STEP * batch_nodes * steps * (3 if mode == "train" else 1)
    row = {
        "impl": impl,
        "mode": mode,
        "steps": steps,
        "threads": torch.get_num_threads(),
        "dtype": dtype,
        "device": "cpu",
        "batch_nodes": batch_nodes,
        "edges": edges,
        "median_s": round(med, 5),
        "nodes_per_s": round(batch_nodes / med, 1),
        "graphs_per_s": round(graphs / med, 3),
        "gflops": round(flops / med / 1e9, 3),
        "matmul_gflops": round(mm if mm is not None else matmul_gflops(batch_nodes), 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "reps": len(times),
        "min_s": round(min(times), 5),
        "max_s": round(max(times), 5),
        "spread": round((max(times) - min(times)) / med, 3),
    }
    row.update(extra)
    print(json.dumps(row), flush=True)
    return row
