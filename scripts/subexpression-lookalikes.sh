#!/usr/bin/env bash
# How far the graph lets a subexpressions model go on an IR set: over
# every file's sampled roots (the dataset's rule), the positives and the
# lookalikes (`programl analyze --task subexpressions --lookalikes`),
# overall and per -O level, with the precision and F1 they bound.
#
#   bash scripts/subexpression-lookalikes.sh SET
#
# SET is a corpus.sh output (SET/<project>/<level>/*.ll), e.g.
#   bash scripts/corpus.sh --opaque --unseen-cxx --levels "O0 O1 O2 O3"
#   bash scripts/subexpression-lookalikes.sh ~/.cache/programl-rs/unseen-cxx-opaque-O0-O1-O2-O3
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
programl="${PROGRAML:-$root/target/release/programl}"
set_dir="$(cd "$1" && pwd)"
levels="$(find "$set_dir" -mindepth 2 -maxdepth 2 -type d -printf '%f\n' | sort -u | tr '\n' ' ')"
for level in all $levels; do
    if [ "$level" = all ]; then pattern='*.ll'; else pattern="*/$level/*.ll"; fi
    find "$set_dir" -path "$set_dir/$pattern" -print0 | sort -z |
        while IFS= read -r -d '' f; do
            "$programl" analyze --task subexpressions --lookalikes "$f" || echo "{\"failed\": \"$f\"}"
        done |
        python3 -c '
import json, sys
files = roots = positives = lookalikes = failed = 0
for line in sys.stdin:
    v = json.loads(line)
    if "failed" in v:
        failed += 1
        continue
    files += 1; roots += v["roots"]; positives += v["positives"]; lookalikes += v["lookalikes"]
p = positives / (positives + lookalikes) if positives + lookalikes else float("nan")
print("%s: %d files (%d failed), %d roots, %d positives, %d lookalikes: precision at most %.4f, F1 at most %.4f"
      % (sys.argv[1], files, failed, roots, positives, lookalikes, p, 2 * p / (1 + p)))' "$level"
done
