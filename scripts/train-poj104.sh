#!/usr/bin/env bash
# Compiles POJ-104 and trains the shipped algorithm-classification model
# (issue 11, README "Algorithm classification"):
#
#   bash scripts/train-poj104.sh [BUDGET]
#
# 1. `programl-train poj104 --compile-only`: every program of the dataset
#    compiled at -O0 into $PROGRAML_CACHE/poj104/ir (cached; resumable),
#    failures counted per cause: compile.json;
# 2. training in $PROGRAML_CACHE/runs/poj104 for at most BUDGET (default
#    60m) of wall time; run again to continue (also on another machine:
#    the run is seeded from models/poj104/checkpoint);
# 3. the best bundle on validation, its checkpoint, log.csv, compile.json
#    and (once every epoch is done) results.json with the test figures:
#    models/poj104/.
# Settings: -O0, T = 6, mean pooling, 12 epochs, lr 3e-3, batches of 5,000
# nodes, $PROGRAML_THREADS threads (default 2). Log:
# $PROGRAML_CACHE/runs/poj104.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/bootstrap.sh
PROGRAML_SKIP_BUILD=1 source "$root/scripts/bootstrap.sh" </dev/null >/dev/null
budget="${1:-60m}"
train="${PROGRAML_TRAIN:-$root/target/release/programl-train}"
run="$PROGRAML_CACHE/runs/poj104"
ship="$root/models/poj104"
log="$PROGRAML_CACHE/runs/poj104.log"
mkdir -p "$PROGRAML_CACHE/runs"
common=(poj104 --out "$run" --levels O0 --epochs 12 --steps 6 --pool mean --lr 3e-3 --batch-nodes 5000 --seed 0 --threads "${PROGRAML_THREADS:-2}" --device cpu)

echo "[train-poj104] compiling ($(date +%H:%M:%S)); log $log"
"$train" "${common[@]}" --compile-only --json >"$run.compile.json.tmp" 2>>"$log"
mv "$run.compile.json.tmp" "$run.compile.json"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print("[train-poj104] %d programs, %d failed (%.2f%%)" % (c["programs"], c["failed"], 100*c["failure_rate"]))' "$run.compile.json"

if [ ! -e "$run/checkpoint/state.json" ] && [ -e "$ship/checkpoint/state.json" ]; then
    echo "[train-poj104] seeding $run from $ship/checkpoint (a run of an earlier session)"
    mkdir -p "$run"
    cp -r "$ship/checkpoint" "$run/checkpoint"
    cp "$ship/log.csv" "$run/log.csv"
    rm -rf "$run/model" && mkdir -p "$run/model"
    cp "$ship/config.json" "$ship/weights.safetensors" "$ship/vocabulary.json" "$run/model/"
fi
echo "[train-poj104] training, budget $budget ($(date +%H:%M:%S))"
"$train" "${common[@]}" --budget "$budget" >>"$log" 2>&1

if [ -e "$run/model/config.json" ]; then
    rm -rf "$ship.tmp"
    cp -r "$run/model" "$ship.tmp"
    cp -r "$run/checkpoint" "$ship.tmp/checkpoint"
    cp "$run/log.csv" "$ship.tmp/"
    cp "$run.compile.json" "$ship.tmp/compile.json"
    [ -e "$run/results.json" ] && cp "$run/results.json" "$ship.tmp/"
    rm -rf "$ship"
    mv "$ship.tmp" "$ship"
fi
echo "[train-poj104] done ($(date +%H:%M:%S)); last epoch: $(tail -n 1 "$run/log.csv" 2>/dev/null)"
[ -e "$run/results.json" ] && cat "$run/results.json" || echo "[train-poj104] not finished: run again to continue"
