#!/usr/bin/env bash
# Crash hunt: runs the `programl` CLI and the pass plugin (under opt-16) over
# llvm-stress-16 modules and over IR corpora, in both graph modes, and counts
# crashes (signals, panics) separately from clean one-line rejections.
#
#   bash scripts/stress.sh [N_STRESS] [CORPUS_DIR...]
#
# N_STRESS defaults to 1000 modules (seeds 0..N-1, sizes 20..1000); corpora
# default to the cached corpora under $PROGRAML_CACHE. Exit status 1 if
# anything crashed. Needs the release build (scripts/bootstrap.sh).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${PROGRAML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/programl-rs}"
n="${1:-1000}"
shift || true
corpora=("$@")
if ((${#corpora[@]} == 0)); then
    for d in "$cache"/corpus "$cache"/corpus-opaque-*; do [ -d "$d" ] && corpora+=("$d"); done
fi
programl="$root/target/release/programl"
plugin="$("$programl" plugin-path)" || exit 1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

inputs=("${corpora[@]}")
if [ "$n" -gt 0 ]; then
    echo "[stress] generating $n llvm-stress-16 modules"
    mkdir -p "$work/stress"
    seq 0 $((n - 1)) | xargs -P "$(nproc)" -I{} sh -c \
        'llvm-stress-16 -seed {} -size $((20 + ({} * 37) % 980)) -o '"$work"'/stress/s{}.ll'
    inputs=("$work/stress" "${corpora[@]}")
fi

crashes=0
# CLI: whole directories at once; a panic or signal shows as exit >1 or a
# "panicked" line.
for dir in "${inputs[@]}"; do
    for mode in paper programl-0.3; do
        out="$work/out"
        rm -rf "$out"
        "$programl" graph --compat "$mode" -o "$out" "$dir" 2>"$work/cli.err"
        rc=$?
        files=$(find "$dir" -name '*.ll' -o -name '*.bc' | wc -l)
        rejected=$(grep -c '^programl: .*: ' "$work/cli.err" || true)
        if [ "$rc" -gt 1 ] || grep -q 'panicked' "$work/cli.err"; then
            crashes=$((crashes + 1))
            echo "[stress] CLI CRASH on $dir ($mode): exit $rc"; head -5 "$work/cli.err"
        fi
        echo "[stress] cli $mode: $dir: $files files, exit $rc, $rejected rejected"
    done
done

# The pass, one opt process per file (as in a build).
pass_run() { # FILE MODE
    local out
    out="$(opt-16 -load-pass-plugin="$PLUGIN" -passes="programl-graph<out=$WORK/pass;compat=$2>" -disable-output "$1" 2>&1)"
    local rc=$?
    if [ "$rc" -ge 128 ] || printf '%s' "$out" | grep -q 'internal error\|panicked'; then
        echo "CRASH $1 $2 rc=$rc: $(printf '%s' "$out" | head -2)"
    elif [ "$rc" -ne 0 ]; then
        echo "REJECT $1"
    else
        echo "OK"
    fi
}
export -f pass_run
export PLUGIN="$plugin" WORK="$work"
mkdir -p "$work/pass"
for dir in "${inputs[@]}"; do
    for mode in paper programl-0.3; do
        find "$dir" -name '*.ll' | xargs -P "$(nproc)" -I{} bash -c 'pass_run "$@"' _ {} "$mode" >"$work/pass.log"
        ok=$(grep -c '^OK' "$work/pass.log" || true)
        rej=$(grep -c '^REJECT' "$work/pass.log" || true)
        bad=$(grep -c '^CRASH' "$work/pass.log" || true)
        crashes=$((crashes + bad))
        grep '^CRASH' "$work/pass.log" | head -3
        echo "[stress] pass $mode: $dir: $ok ok, $rej rejected by opt, $bad crashed"
        rm -f "$work/pass"/*
    done
done
echo "[stress] crashes: $crashes"
[ "$crashes" = 0 ]
