#!/usr/bin/env python3
"""What the learned pass holds in memory on a large unit, per bundle.

    python3 scripts/pass-memory.py --model models/poj104 --model models/reachability \
        [--functions 3000] [--plugin LIB] [FILE.ll ...]

Without files, writes a seeded synthetic C unit of FUNCTIONS functions
(loops, a switch, a call each: about 105 graph nodes a function) and
compiles it with `clang-16 -O2 -S -emit-llvm`. For each IR file: the peak
resident memory (`/usr/bin/time`'s %M) of `opt -passes=verify` with the
plugin loaded (the floor), then, per bundle, of `opt` running
`programl-infer` with `max_nodes` past the graph (so the unit is
predicted for) and at the default bound; what the pass adds over the floor,
per node of the module's graph (the count the pass logs), and the wall
times; for the synthetic unit, also `clang-16 -O2 -c` with and without the
pass (the first bundle, the bound lifted). The CPU is printed first: name it beside the figures.
"""
import argparse
import importlib.util
import os
import random
import re
import subprocess
import sys
import tempfile


def cpu_name():
    """The CPU's model name, as pass-cost.py prints it (one definition)."""
    spec = importlib.util.spec_from_file_location("pass_cost", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pass-cost.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cpu_name()


def synthetic_unit(functions, path):
    rng = random.Random(1)
    out = ["#include <stdio.h>", "#include <string.h>"]
    for i in range(functions):
        call = "s += f%d(a, n - 1, k + 1);" % rng.randint(0, i - 1) if i else ""
        out.append(
            """
int f%d(int *a, int n, int k) {
  int s = %d;
  for (int j = 0; j < n; j++) {
    switch ((a[j] + k) %% 5) {
      case 0: s += a[j] * %d; break;
      case 1: s ^= a[j] << %d; break;
      case 2: if (s > k) s -= a[j]; else s += k; break;
      case 3: a[j] = s %% (k + 1); break;
      default: s = s * 31 + j;
    }
  }
  %s
  return s;
}"""
            % (i, i, rng.randint(1, 9), rng.randint(1, 5), call)
        )
    out.append('int main(int c, char **v) { int a[16]; memset(a, 0, sizeof a); printf("%%d\\n", f%d(a, c, 3)); return 0; }' % (functions - 1))
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def measure(cmd, env=None):
    """(peak RSS in KB, wall s, stderr) of `cmd` under /usr/bin/time."""
    full = ["/usr/bin/time", "-f", "@@time %M %e"] + cmd
    p = subprocess.run(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    m = re.search(r"@@time (\d+) ([0-9.]+)", p.stderr)
    if p.returncode != 0 or not m:
        sys.exit("pass-memory: %s failed:\n%s" % (" ".join(cmd), p.stderr[-2000:]))
    return int(m.group(1)), float(m.group(2)), p.stderr


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", help="LLVM IR files (.ll or .bc); default: the synthetic unit")
    ap.add_argument("--model", action="append", required=True, help="a bundle directory (repeatable)")
    ap.add_argument("--functions", type=int, default=3000, help="functions of the synthetic unit")
    ap.add_argument("--plugin", default=os.path.join(root, "target/release/libprograml_passes.so"))
    ap.add_argument("--opt", default="opt-16")
    ap.add_argument("--clang", default="clang-16")
    args = ap.parse_args()
    print("CPU: %s" % cpu_name())
    tmp = tempfile.mkdtemp(prefix="pass-memory.")
    files = args.files
    if not files:
        c, ll = os.path.join(tmp, "unit.c"), os.path.join(tmp, "unit.ll")
        synthetic_unit(args.functions, c)
        rss, wall, _ = measure([args.clang, "-O2", "-c", c, "-o", os.path.join(tmp, "unit.o")])
        print("synthetic unit: %d functions; clang -O2 -c: %.2f s, peak RSS %.0f MB" % (args.functions, wall, rss / 1024))
        # The whole compile with the pass (the first bundle), bound lifted.
        env = dict(os.environ, PROGRAML_INFER="model=%s;device=cpu;max_nodes=%d" % (args.model[0], 1 << 62))
        cmd = [args.clang, "-O2", "-fpass-plugin=" + args.plugin, "-c", c, "-o", os.path.join(tmp, "unit.o")]
        rss, wall, _ = measure(cmd, env)
        print("  with the learned pass (%s, max_nodes lifted): %.2f s, peak RSS %.0f MB" % (args.model[0], wall, rss / 1024))
        subprocess.run([args.clang, "-O2", "-S", "-emit-llvm", c, "-o", ll], check=True)
        files = [ll]
    env = dict(os.environ, PROGRAML_LOG="info")
    for f in files:
        floor, floor_s, _ = measure([args.opt, "-load-pass-plugin=" + args.plugin, "-passes=verify", f, "-o", "/dev/null"])
        print("\n%s: opt -passes=verify (plugin loaded): peak RSS %.0f MB, %.2f s" % (f, floor / 1024, floor_s))
        print("%-28s %10s %10s %8s %8s  %s" % ("bundle", "nodes", "added MB", "B/node", "wall s", "at the default bound"))
        for m in args.model:
            passes = "programl-infer<model=%s;device=cpu;max_nodes=%d>" % (m, 1 << 62)
            rss, wall, err = measure([args.opt, "-load-pass-plugin=" + args.plugin, "-passes=" + passes, f, "-o", "/dev/null"], env)
            nodes = re.search(r" (\d+) nodes[;,]", err)
            n = int(nodes.group(1)) if nodes else 0
            added = (rss - floor) / 1024
            d_rss, d_wall, d_err = measure(
                [args.opt, "-load-pass-plugin=" + args.plugin, "-passes=programl-infer<model=%s;device=cpu>" % m, f, "-o", "/dev/null"], env
            )
            bounded = "skipped" if "more than max_nodes" in d_err else "predicted"
            print(
                "%-28s %10d %10.0f %8.0f %8.2f  %s: +%.0f MB, %.2f s"
                % (m, n, added, (rss - floor) * 1024 / n if n else float("nan"), wall, bounded, (d_rss - floor) / 1024, d_wall)
            )


if __name__ == "__main__":
    main()
