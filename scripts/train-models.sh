#!/usr/bin/env bash
# Trains the five shipped DeepDataFlow models and copies each best bundle
# into models/<task>/. Resumable: every run lives in
# $PROGRAML_CACHE/runs/<task>, and running this again with the same
# arguments continues each run where it stopped (the budget is cumulative).
#
#   bash scripts/train-models.sh [BUDGET] [LANES]
#
# BUDGET: per task, wall time or examples (default 15m); LANES: 2 runs at
# once on one thread each (default), or 1 (one run at a time).
# The learning rate is 5e-3, not the spec's 2.5e-4: on a CPU budget of
# thousands of examples 2.5e-4 has not left the all-negative start (README).
# Logs: $PROGRAML_CACHE/runs/<task>.log. Needs the dataset
# ($PROGRAML_CACHE/ddf, `programl dataset build`) and a release build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/bootstrap.sh
PROGRAML_SKIP_BUILD=1 source "$root/scripts/bootstrap.sh" </dev/null >/dev/null
budget="${1:-15m}"
lanes="${2:-2}"
data="${PROGRAML_DATA:-$PROGRAML_CACHE/ddf}"
runs="$PROGRAML_CACHE/runs"
mkdir -p "$runs"
train="$root/target/release/programl-train"
# The arguments every session must repeat (a run refuses other ones).
common=(--data "$data" --lr 5e-3 --val-examples 2000 --val-every 3000 --threads 1 --device cpu --quiet)

one() {
    local task="$1"
    echo "[train-models] $task: budget $budget ($(date +%H:%M:%S))"
    if OMP_WAIT_POLICY=PASSIVE "$train" train --task "$task" --out "$runs/$task" --budget "$budget" "${common[@]}" >>"$runs/$task.log" 2>&1; then
        rm -rf "$root/models/$task.tmp"
        cp -r "$runs/$task/model" "$root/models/$task.tmp"
        cp "$runs/$task/log.csv" "$runs/$task/curves.png" "$root/models/$task.tmp/"
        rm -rf "$root/models/$task"
        mv "$root/models/$task.tmp" "$root/models/$task"
        echo "[train-models] $task: done ($(date +%H:%M:%S)); $(tail -n 1 "$runs/$task.log")"
    else
        echo "[train-models] $task: FAILED, see $runs/$task.log"
    fi
}

tasks=(reachability dominance datadep liveness subexpressions)
mkdir -p "$root/models"
if [ "$lanes" -le 1 ]; then
    for t in "${tasks[@]}"; do one "$t"; done
else
    (for t in reachability datadep subexpressions; do one "$t"; done) &
    (for t in dominance liveness; do one "$t"; done) &
    wait
fi
