#!/usr/bin/env python3
"""What the learned pass costs `opt` per module, for several bundles side by side.

    python3 scripts/pass-cost.py --model models/poj104 --model RUN/model \
        [--dtype f32 --dtype auto] [--reps 9] [--plugin LIB] FILE.ll...

For each IR file: the median wall time of `opt -passes=verify` with the
plugin loaded (the floor), of `opt -O2` (for scale), and, per bundle and
dtype, of `opt -passes='programl-infer<model=M;device=cpu;dtype=D>'` less
the floor. Every command runs in turn within one repetition, so a busy
machine slows all of them alike; still, run it on a quiet one. The CPU is
printed first: name it beside the figures.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="LLVM IR files (.ll or .bc)")
    ap.add_argument("--model", action="append", required=True, help="a bundle directory (repeatable)")
    ap.add_argument("--dtype", action="append", help="f32, bf16, int8 or auto (repeatable; default auto)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--plugin", default=os.path.join(root, "target/release/libprograml_passes.so"))
    ap.add_argument("--opt", default="opt-16")
    a = ap.parse_args()
    if not os.path.exists(a.plugin):
        sys.exit(f"{a.plugin}: no such plugin (build it, or give --plugin)")
    dtypes = a.dtype or ["auto"]
    print(f"CPU: {cpu_name()}; {a.reps} repetitions, medians")
    for f in a.files:
        commands = {"floor": [a.opt, f"-load-pass-plugin={a.plugin}", "-passes=verify", "-disable-output", f]}
        commands["-O2"] = [a.opt, "-O2", "-disable-output", f]
        for m in a.model:
            for d in dtypes:
                passes = f"-passes=programl-infer<model={m};device=cpu;dtype={d}>"
                commands[f"{m} {d}"] = [a.opt, f"-load-pass-plugin={a.plugin}", passes, "-disable-output", f]
        times = {k: [] for k in commands}
        warned = set()
        for _ in range(a.reps):
            for k, cmd in commands.items():
                t0 = time.perf_counter()
                r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                times[k].append(time.perf_counter() - t0)
                if r.returncode != 0:
                    sys.exit(f"{f}: {' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
                if r.stderr.strip() and k not in warned:
                    warned.add(k)
                    print(f"  ({k}: {r.stderr.strip()})")
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"{f}: opt with the plugin, verify only {med['floor']:.1f} ms; opt -O2 {med['-O2']:.1f} ms")
        for k in commands:
            if k not in ("floor", "-O2"):
                print(f"  {k}: +{med[k] - med['floor']:.1f} ms")


if __name__ == "__main__":
    main()
