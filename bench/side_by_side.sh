#!/usr/bin/env bash
# This project's GGNN against the PyTorch reference of SPEC.md §3
# (bench_reference.py, upstream's style), side by side in one run: for each
# round and each mode (train T=30, infer T=30, infer T=200), this project in
# FP32, in BF16 where the CPU has BF16 instructions, then the reference,
# each in its own process, at the same thread count. Prints one JSON line
# per measurement, then a table of medians over the rounds and the ratios.
#
#   bash bench/side_by_side.sh [ROUNDS=3] [THREADS=2]
#
# Needs a release build (`programl-train`) and the project venv (the
# bootstrap makes both).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/bootstrap.sh
PROGRAML_SKIP_BUILD=1 source "$root/scripts/bootstrap.sh" </dev/null >/dev/null
rounds="${1:-3}"
threads="${2:-2}"
for arg in "ROUNDS=$rounds" "THREADS=$threads"; do
    [[ ${arg#*=} =~ ^[1-9][0-9]*$ ]] || { echo "side_by_side.sh: ${arg%%=*} must be a positive integer, got '${arg#*=}'" >&2; exit 2; }
done
train="${PROGRAML_TRAIN:-$root/target/release/programl-train}"
python="$VIRTUAL_ENV/bin/python"
dtypes=(f32)
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then dtypes+=(bf16); fi
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
echo "[side-by-side] $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $rounds rounds, $threads threads; $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((r = 1; r <= rounds; r++)); do
    for mode in "train 30 5" "infer 30 10" "infer 200 3"; do
        read -r m steps iters <<<"$mode"
        for d in "${dtypes[@]}"; do
            "$train" bench --mode "$m" --steps "$steps" --iters "$iters" --threads "$threads" --device cpu --dtype "$d" --json 2>/dev/null |
                sed "s/^{/{\"impl\":\"programl-rs\",\"round\":$r,/" | tee -a "$out"
        done
        "$python" "$root/bench/bench_reference.py" --mode "$m" --steps "$steps" --threads "$threads" --reps "$iters" 2>/dev/null |
            sed "s/^{/{\"round\":$r,/" | tee -a "$out"
    done
done
"$python" - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def key(r):
    impl = r.get("impl", "reference")
    return (r["mode"], r["steps"]), ("reference" if impl != "programl-rs" else "programl-rs " + r["dtype"])
cells = {}
for r in rows:
    cells.setdefault(key(r), []).append(r["nodes_per_s"])
modes = sorted({k[0] for k in cells}, key=lambda m: (m[0] != "train", m[1]))
impls = sorted({k[1] for k in cells if k[1] != "reference"})
print(f"\n{'mode':<12}" + "".join(f"{i:>20}" for i in impls) + f"{'reference':>14}" + "".join(f"{'ratio ' + i.split()[-1]:>12}" for i in impls))
for m in modes:
    ref = statistics.median(cells.get((m, "reference"), [float("nan")]))
    ours = [statistics.median(cells.get((m, i), [float("nan")])) for i in impls]
    print(f"{m[0] + ' T=' + str(m[1]):<12}" + "".join(f"{o:>20,.0f}" for o in ours) + f"{ref:>14,.0f}" + "".join(f"{o / ref:>11.2f}x" for o in ours))
print("(nodes/s, medians over the rounds; ratio = this project / the reference)")
EOF
