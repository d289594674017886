#!/usr/bin/env bash
# Compiles POJ-104 at every -O level and trains the algorithm-classification
# model on all four (issue 29, README "Algorithm classification"):
#
#   [HIDDEN=66|34] [EPOCHS=N] bash scripts/train-poj104.sh [BUDGET]
#
# 1. `programl-train poj104 --compile-only`: every program of the dataset
#    compiled at -O0, -O1, -O2 and -O3 into $PROGRAML_CACHE/poj104/ir
#    (cached per level and source; resumable), failures counted per cause;
# 2. training in $PROGRAML_CACHE/runs/poj104-levels for at most BUDGET
#    (default 60m) of wall time. Run it again to continue, also on another
#    machine: a fresh run is seeded from the committed record of the run,
#    models/poj104/checkpoint (the shipped bundle is this run's);
# 3. when the budget is spent (or every epoch done), the run's record (its
#    best bundle on validation, checkpoint, log.csv, compile.json and, once
#    finished, results.json) replaces models/poj104/ whole (`--ship`,
#    atomic: a kill leaves the old directory or the new one).
# The bundle trained at -O0 alone (the paper's protocol, 34 wide) is kept
# beside it as models/poj104-O0/ and is not touched here. The four-level
# bundle replaced it on 2026-11-29, once its 66-wide step cost a build
# within the release-mode budget on AVX-512 VNNI CPUs (the shipped
# bundle: the whole clang process +8.3% over 62 C units at -O2,
# docs/perf/learned-pass.md): the -O0 bundle classifies -O1
# to -O3 IR, what the learned pass sees inside an optimising build, at
# 0.10-0.11 (docs/perf/models.md, "POJ-104").
# HIDDEN=34 runs the same on a 34-wide state (the fused CPU loops, about
# three times the examples a second; the learned pass's specialised
# kernels, about half the cost a graph: what a CPU without AVX-512 VNNI
# keeps within the budget), as its own run ($PROGRAML_CACHE/runs/
# poj104-levels-34), shipped to models/poj104-34.
# Settings: levels O0-O3 (validated and recorded at -O0), T = 6, a 66-wide
# state (docs/perf/models.md, "A wider state"), the mean of the node
# logits, 10 epochs on a cosine schedule from lr 3e-3, batches of 5,000
# nodes, $PROGRAML_THREADS threads (default 2). An epoch is about 157,000
# graphs, about 50 minutes on one thread of a 2-core Xeon. Log:
# $PROGRAML_CACHE/runs/poj104-levels.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The settings are checked before anything is installed, compiled or
# written: a mistyped one costs nothing.
budget="${1:-60m}"
if [ $# -gt 1 ]; then
    # (--promote, which replaced models/poj104 from a run kept in
    # models/poj104/levels, went when the run became the shipped bundle.)
    echo "train-poj104.sh: one argument, the budget (got '$*')" >&2
    exit 2
fi
# What `programl-train poj104 --budget` takes (Budget::from_str in
# crates/train/src/train.rs; poj104 refuses its example counts): a
# duration, checked here so that a bad one fails before the bootstrap and
# the compile.
if ! [[ "$budget" =~ ^[0-9]+([.][0-9]+)?[smh]$ ]] || [[ "$budget" =~ ^0+([.]0+)?[smh]$ ]]; then
    echo "train-poj104.sh: the budget is a duration (45m, 2h, 90s) (got '$budget')" >&2
    exit 2
fi
width="${HIDDEN:-66}"
case "$width" in
    66) name=poj104-levels ship="$root/models/poj104" width_flag=(--hidden 66) ;;
    # 34 is the trainer's default width: no flag, as the run recorded it.
    34) name=poj104-levels-34 ship="$root/models/poj104-34" width_flag=() ;;
    *) echo "train-poj104.sh: HIDDEN is 66 (the default) or 34 (got '$width')" >&2; exit 2 ;;
esac
# EPOCHS extends a finished run (the cosine schedule stretches over the
# new count from where the run stands: docs/user/training.md). Unset, it
# is the count the continued run records (10 for a new one), so running
# the script again continues an extended run instead of ending it early.
epochs="${EPOCHS:-}"
if [ -n "$epochs" ] && ! [[ "$epochs" =~ ^[1-9][0-9]*$ ]]; then
    echo "train-poj104.sh: EPOCHS is a whole number of epochs, at least 1 (got '$epochs')" >&2
    exit 2
fi
# shellcheck source=scripts/bootstrap.sh
PROGRAML_SKIP_BUILD=1 source "$root/scripts/bootstrap.sh" </dev/null >/dev/null
train="${PROGRAML_TRAIN:-$root/target/release/programl-train}"
run="$PROGRAML_CACHE/runs/$name"
log="$PROGRAML_CACHE/runs/$name.log"
mkdir -p "$PROGRAML_CACHE/runs"

# A swap of the checkpoint killed half-way (replace_dir in
# crates/model/src/bundle.rs) leaves it as .checkpoint.old: put back before
# asking whether the run has one (as programl-train's recover_run does).
if [ ! -e "$run/checkpoint" ] && [ -d "$run/.checkpoint.old" ]; then
    mv "$run/.checkpoint.old" "$run/checkpoint"
fi
# A field of a run's checkpoint/state.json (empty when it has none).
state_of() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); v=s["settings"][sys.argv[2]] if sys.argv[2] in s["settings"] else s[sys.argv[2]]; print(",".join(v) if isinstance(v, list) else v)' "$1/checkpoint/state.json" "$2" 2>/dev/null || true; }
# The committed record to continue: the shipped one, if it is this
# four-level run (a checkpoint of other settings is refused).
from=""
if [ "$(state_of "$ship" levels)" = "O0,O1,O2,O3" ]; then
    from="$ship"
fi
# A run of this machine that the committed record is ahead of (another
# machine trained on and committed) is set aside, not continued: shipping
# it would take the record back. Kept as $run.behind-<time>, nothing lost.
if [ -n "$from" ] && [ -e "$run/checkpoint/state.json" ]; then
    here="$(state_of "$run" examples_seen)" there="$(state_of "$from" examples_seen)"
    if [ -n "$here" ] && [ -n "$there" ] && [ "$there" -gt "$here" ]; then
        aside="$run.behind-$(date +%Y%m%d-%H%M%S)"
        echo "[train-poj104] $run has seen $here examples, the committed $from/checkpoint $there: continuing the committed one ($run moved to $aside)"
        mv "$run" "$aside"
    fi
fi
if [ -z "$epochs" ]; then
    if [ -e "$run/checkpoint/state.json" ]; then
        epochs="$(state_of "$run" epochs)"
    elif [ -n "$from" ]; then
        epochs="$(state_of "$from" epochs)"
    fi
    [[ "$epochs" =~ ^[1-9][0-9]*$ ]] || epochs=10
fi
common=(poj104 --out "$run" --levels O0,O1,O2,O3 --epochs "$epochs" --steps 6 "${width_flag[@]}" --pool mean --lr 3e-3 --lr-schedule cosine
    --batch-nodes 5000 --seed 0 --threads "${PROGRAML_THREADS:-2}" --device cpu)

echo "[train-poj104] compiling ($(date +%H:%M:%S)); log $log"
"$train" "${common[@]}" --compile-only --json >"$run.compile.json.tmp" 2>>"$log"
mv "$run.compile.json.tmp" "$run.compile.json"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print("[train-poj104] %d programs, %d failed (%.2f%%)" % (c["programs"], c["failed"], 100*c["failure_rate"]))' "$run.compile.json"

if [ ! -e "$run/checkpoint/state.json" ] && [ -n "$from" ]; then
    echo "[train-poj104] seeding $run from $from/checkpoint (a run of an earlier session)"
    rm -rf "$run" && mkdir -p "$run"
    cp -r "$from/checkpoint" "$run/checkpoint"
    # Before its first epoch ends, a run has no log and no bundle yet.
    [ -e "$from/log.csv" ] && cp "$from/log.csv" "$run/log.csv"
    if [ -e "$from/config.json" ]; then
        mkdir -p "$run/model"
        cp "$from/config.json" "$from/weights.safetensors" "$from/vocabulary.json" "$run/model/"
    fi
fi
echo "[train-poj104] training to epoch $epochs, budget $budget ($(date +%H:%M:%S))"
"$train" "${common[@]}" --budget "$budget" --ship "$ship" >>"$log" 2>&1
grep -E 'shipped to|not shipped there' "$log" | tail -n 1 || true
echo "[train-poj104] done ($(date +%H:%M:%S)); last epoch: $(tail -n 1 "$run/log.csv" 2>/dev/null)"
[ -e "$run/results.json" ] && cat "$run/results.json" || echo "[train-poj104] not finished: run again to continue"
