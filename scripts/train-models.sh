#!/usr/bin/env bash
# Trains the five shipped DeepDataFlow models by their recipes: for each
# task, `programl-train recipe models/<task>` runs models/<task>/recipe.json
# (the phases in order, each with its rate, graph size limit and
# cumulative budget) and ships the bundle into models/<task> as a whole.
# Resumable, also across machines: the runs live in
# $PROGRAML_CACHE/runs/recipes, and on a machine without them each phase
# continues from the checkpoint kept in the bundle's directory. To train
# longer, raise a phase's budget in its recipe (or add a phase) and run
# this again.
#
#   bash scripts/train-models.sh [LANES] [TASKS...]
#
# LANES: 2 tasks at once on one thread each (default), or 1 (one task at a
# time; on two threads with PROGRAML_TRAIN_THREADS=2); TASKS: default all
# five. Logs: $PROGRAML_CACHE/runs/recipes/<task>.log. Needs the dataset
# ($PROGRAML_CACHE/ddf, `programl dataset build`; PROGRAML_DATA for
# another) and a release build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/bootstrap.sh
PROGRAML_SKIP_BUILD=1 source "$root/scripts/bootstrap.sh" </dev/null >/dev/null
lanes="${1:-2}"
[[ $lanes =~ ^[12]$ ]] || { echo "train-models.sh: LANES must be 1 or 2, got '$lanes'" >&2; exit 2; }
data="${PROGRAML_DATA:-$PROGRAML_CACHE/ddf}"
runs="$PROGRAML_CACHE/runs/recipes"
mkdir -p "$runs"
train="${PROGRAML_TRAIN:-$root/target/release/programl-train}"
threads="${PROGRAML_TRAIN_THREADS:-1}"
[[ $threads =~ ^[1-9][0-9]*$ ]] || { echo "train-models.sh: PROGRAML_TRAIN_THREADS must be a positive integer, got '$threads'" >&2; exit 2; }

one() {
    local task="$1"
    echo "[train-models] $task: $(date +%H:%M:%S)"
    if OMP_WAIT_POLICY=PASSIVE "$train" recipe "$root/models/$task" --data "$data" --runs "$runs" \
        --threads "$threads" --device cpu --quiet >>"$runs/$task.log" 2>&1; then
        echo "[train-models] $task: done ($(date +%H:%M:%S)), shipped to models/$task"
    else
        echo "[train-models] $task: FAILED, see $runs/$task.log"
    fi
}

shift $(($# < 1 ? $# : 1))
tasks=("$@")
((${#tasks[@]})) || tasks=(reachability dominance datadep liveness subexpressions)
if [ "$lanes" -le 1 ]; then
    for t in "${tasks[@]}"; do one "$t"; done
else
    # Two lanes: tasks alternate between them.
    lane() { local i; for ((i = $1; i < ${#tasks[@]}; i += 2)); do one "${tasks[$i]}"; done; }
    lane 0 &
    lane 1 &
    wait
fi
