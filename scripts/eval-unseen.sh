#!/usr/bin/env bash
# Every shipped DeepDataFlow model on an unseen IR set, overall and per -O
# level: DDF-30 at T = 30 (the models' test setting), F1 / precision /
# recall of the positive class, as a Markdown table.
#
#   bash scripts/eval-unseen.sh SET [LIMIT]
#
# SET is a corpus.sh output (SET/<project>/<level>/*.ll), e.g.
#   bash scripts/corpus.sh --opaque --unseen-cxx --levels "O0 O1 O2 O3"
#   bash scripts/eval-unseen.sh ~/.cache/programl-rs/unseen-cxx-opaque-O0-O1-O2-O3
# LIMIT (default 1000) caps the examples per cell (a seeded sample).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
set_dir="$(cd "$1" && pwd)"
limit="${2:-1000}"
train="$root/target/release/programl-train"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
levels="$(find "$set_dir" -mindepth 2 -maxdepth 2 -type d -printf '%f\n' | sort -u | tr '\n' ' ')"
for l in $levels; do
    mkdir -p "$work/$l"
    for f in "$set_dir"/*/"$l"/*.ll; do ln -s "$f" "$work/$l/$(basename "$(dirname "$(dirname "$f")")")__$(basename "$f")"; done
done
echo "set: $set_dir ($(find "$set_dir" -name '*.ll' | wc -l) IR files; projects: $(find "$set_dir" -mindepth 1 -maxdepth 1 -type d -printf '%f ' | sort))"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(date -u +%F); DDF-30, T = 30, --dtype f32, at most $limit examples per cell; F1 (precision / recall)"
echo
printf '| model | all |'; for l in $levels; do printf ' %s |' "$l"; done; echo
printf '|---|---|'; for l in $levels; do printf -- '---|'; done; echo
cell() {
    "$train" eval --model "$root/models/$1" --data "$2" --subset ddf-30 --steps 30 --limit "$limit" --threads 1 --device cpu --dtype f32 --json 2>/dev/null |
        tail -n1 | python3 -c 'import json,sys; v=json.load(sys.stdin); print("%.3f (%.2f / %.2f; %d ex.)" % (v["f1"], v["precision"], v["recall"], v["examples"]))' ||
        echo "failed"
}
for task in reachability dominance datadep liveness subexpressions; do
    printf '| %s | %s |' "$task" "$(cell "$task" "$work")"
    for l in $levels; do printf ' %s |' "$(cell "$task" "$work/$l")"; done
    echo
done
