#!/usr/bin/env python3
"""What the learned pass adds to clang compiling real OpenCL kernels, per bundle.

    python3 scripts/devmap-pass-cost.py --model models/devmap-amd \
        --model models/devmap-nvidia [--files 12] [--reps 7] [--plugin LIB]

Each kernel file of the DevMap programs (the builds that
`programl-train devmap` compiles, crates/train/data/devmap-builds.json,
from the sources it unpacks into $PROGRAML_CACHE/devmap/gpgpu) is compiled
as a SPIR toolchain would, `clang-16 -x cl ... -target spir64 -O2 -c
-emit-llvm` with its program's own options, run in its program's
directory:
- plain (`-w`: the programs' own warnings are not the pass's);
- with the plugin loaded and no pass asked for;
- per bundle, with `PROGRAML_INFER=model=M;device=cpu;transfer=4096;wgsize=256`
  (every kernel of the module gets its own graph and decision).
The figure is the median wall time over --reps repetitions (all variants
in turn within each repetition, so a busy machine slows them alike; still,
run it on a quiet one), less the plain compile's, and that as a share of
it. --files picks that many kernel files spread over the programs (sorted
by path, evenly spaced); 0 takes them all. The CPU is printed first: name
it beside the figures.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time


def cpu_name():
    """The CPU's model name, as pass-cost.py prints it (one definition)."""
    spec = importlib.util.spec_from_file_location("pass_cost", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pass-cost.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cpu_name()


def builds(root, gpgpu, stubs):
    """(program dir, kernel file, argv options) for every buildable kernel file."""
    with open(os.path.join(root, "crates/train/data/devmap-builds.json")) as f:
        spec = json.load(f)
    out = {}
    for p in spec["programs"]:
        if p.get("known_failure") or p.get("embedded") or p.get("embedded_var") or p.get("per_dataset"):
            continue
        d = os.path.join(gpgpu, p["dir"])
        subst = {"{class}": "S", "{class_num}": "0", "{wgsize}": "64", "{dataset}": "default", "{stubs}": stubs}
        opts = []
        for o in p.get("options", []):
            for k, v in subst.items():
                o = o.replace(k, v)
            opts.append(o)
        for file in sorted(set(p["kernels"].values())):
            out[(d, file)] = opts
    return [(d, f, o) for (d, f), o in sorted(out.items())]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = os.environ.get("PROGRAML_CACHE", os.path.expanduser("~/.cache/programl-rs"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="a bundle directory (repeatable)")
    ap.add_argument("--files", type=int, default=12, help="kernel files to time, spread over the programs (0: all)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--plugin", default=os.path.join(root, "target/release/libprograml_passes.so"))
    ap.add_argument("--clang", default="clang-16")
    ap.add_argument("--gpgpu", default=os.path.join(cache, "devmap/gpgpu"), help="the unpacked sources")
    a = ap.parse_args()
    if not os.path.exists(a.plugin):
        sys.exit(f"{a.plugin}: no such plugin (build it, or give --plugin)")
    if not os.path.isdir(a.gpgpu):
        sys.exit(f"{a.gpgpu}: no sources (run `programl-train devmap` once, which unpacks them, or give --gpgpu)")
    models = [os.path.abspath(m) for m in a.model]
    for m in models:
        if not os.path.exists(os.path.join(m, "config.json")):
            sys.exit(f"{m}: not a bundle (no config.json)")
    stubs = os.path.join(cache, "devmap/sources/stubs")
    todo = builds(root, a.gpgpu, stubs)
    if a.files and a.files < len(todo):
        step = len(todo) / a.files
        todo = [todo[int(i * step)] for i in range(a.files)]
    print(f"CPU: {cpu_name()}; {len(todo)} kernel files, {a.reps} repetitions, medians")
    shares = {m: [] for m in models}
    for d, file, opts in todo:
        out = os.path.join("/tmp", f"devmap-pass-cost-{os.getpid()}.bc")
        cmd = [a.clang, "-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header", "-target", "spir64", "-O2", "-c",
               "-emit-llvm", "-w", *opts, file, "-o", out]
        variants = {"plain": (cmd, None), "loaded": (cmd + [f"-fpass-plugin={a.plugin}"], None)}
        for m in models:
            variants[m] = (cmd + [f"-fpass-plugin={a.plugin}"], f"model={m};device=cpu;transfer=4096;wgsize=256")
        times = {k: [] for k in variants}
        failed = None
        for _ in range(a.reps):
            for k, (c, infer) in variants.items():
                env = dict(os.environ)
                env.pop("PROGRAML_INFER", None)
                if infer:
                    env["PROGRAML_INFER"] = infer
                t0 = time.perf_counter()
                r = subprocess.run(c, cwd=d, env=env, capture_output=True, text=True)
                times[k].append(time.perf_counter() - t0)
                if r.returncode != 0:
                    failed = f"{k}: exit {r.returncode}: {r.stderr.strip()[:300]}"
                    break
                if infer and r.stderr.strip():
                    failed = f"{k}: the pass warned: {r.stderr.strip()[:300]}"
                    break
            if failed:
                break
        name = os.path.relpath(os.path.join(d, file), a.gpgpu)
        if failed:
            print(f"{name}: skipped ({failed})")
            continue
        ir = subprocess.run([a.clang.replace("clang", "llvm-dis"), "-o", "-", out], capture_output=True, text=True).stdout
        os.unlink(out)
        kernels, decided = ir.count("spir_kernel void @"), ir.count("!programl.device !")
        if decided != kernels:
            print(f"{name}: skipped (the last bundle decided {decided} of {kernels} kernels)")
            continue
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"{name} ({kernels} kernels): plain {med['plain']:.1f} ms; plugin loaded, no pass {med['loaded']:.1f} ms")
        for m in models:
            add = med[m] - med["plain"]
            shares[m].append(100 * add / med["plain"])
            print(f"  {os.path.relpath(m)}: +{add:.1f} ms ({shares[m][-1]:.1f}%)")
    for m in models:
        s = sorted(shares[m])
        if s:
            q = statistics.quantiles(s, n=4) if len(s) > 1 else [s[0]] * 3
            print(f"{os.path.relpath(m)}: median +{statistics.median(s):.1f}% of the plain compile over {len(s)} files "
                  f"(quartiles {q[0]:.1f}%, {q[2]:.1f}%; max {s[-1]:.1f}%)")


if __name__ == "__main__":
    main()
