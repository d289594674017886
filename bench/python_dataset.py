"""What `programl_rs.DeepDataFlow` costs on a store: the memory it holds,
its construction time and the items it gives a second. One line a task.

    python bench/python_dataset.py STORE [TASK ...] [--split train] [--subset ddf] [--items 3000]

Each task runs in a process of its own (a second dataset in the same
process would reuse the first one's freed memory). The memory is the
resident set (/proc/self/status) after construction less before it; items
are `ds[i]` for the first --items examples, in order.
docs/user/python.md ("The DeepDataFlow store") records its figures.
"""

import argparse
import gc
import resource
import subprocess
import sys
import time

import programl_rs as pg


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("tasks", nargs="*", default=["reachability", "liveness"])
    ap.add_argument("--split", default="train")
    ap.add_argument("--subset", default="ddf")
    ap.add_argument("--items", type=int, default=3000)
    args = ap.parse_args()
    if len(args.tasks) > 1:
        for task in args.tasks:
            rest = ["--split", args.split, "--subset", args.subset, "--items", str(args.items)]
            subprocess.run([sys.executable, __file__, args.store, task, *rest], check=True)
        return
    import torch  # noqa: F401  (loaded before the baseline, as a training script has it)

    for task in args.tasks:
        gc.collect()
        before = rss_mib()
        t = time.perf_counter()
        ds = pg.DeepDataFlow(args.store, task=task, split=args.split, subset=args.subset)
        built = time.perf_counter() - t
        gc.collect()
        held = rss_mib() - before
        n = min(len(ds), args.items)
        t = time.perf_counter()
        nodes = sum(ds[i].num_nodes for i in range(n))
        took = time.perf_counter() - t
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{task}: {len(ds)} examples of {len(ds._graphs)} graphs ({args.split}, {args.subset}); held {held:.0f} MiB; "
            f"built in {built:.1f} s; {n} items ({nodes} nodes) in {took:.2f} s, {n / took:.0f} a second; peak RSS {peak:.0f} MiB"
        )
        del ds


if __name__ == "__main__":
    main()
