#!/usr/bin/env bash
# A real third-party CMake build with the graph pass attached (issue 12,
# part 4): Debian's json-c (bookworm, 0.16), unmodified, built twice in the
# same source and build directories, with clang-16 -O2 -g (RelWithDebInfo):
#
#   1. plain;
#   2. with find_package(Programl) and programl_add_graphs on every target
#      (scripts/thirdparty-attach.cmake, through CMAKE_PROJECT_INCLUDE).
#
# Checks: every translation unit (object file) of every target has exactly
# one graph in its target's directory, and every graph reads back
# (`programl summary`); the objects of both builds are byte-identical (the
# graph pass must not change the IR); json-c's own test suite (ctest, its
# tests under valgrind's memcheck unless USE_VALGRIND=0) passes after both
# builds. Prints the figures, the build times and what the pass added.
#
#   bash scripts/thirdparty.sh                 # static libs off: 43 units
#   THIRDPARTY_STATIC=ON bash scripts/thirdparty.sh   # the full build: 56
#   JOBS=2 (make -j), PROGRAML_CACHE (where the source and builds live)
#   THIRDPARTY_MODEL=models/reachability: a third build, with the learned
#   pass on every target instead (on the CPU, in the plugin): no crash,
#   one decision line per unit, and the objects compared with the plain
#   build's (the pass changes metadata only).
#
# Needs: the plugin built (cargo build --release -p programl-passes) and the
# CLI (-p programl-cli); clang-16; cmake; valgrind (unless USE_VALGRIND=0);
# the source, fetched once with `apt-get source json-c` (the deb-src entry
# and dpkg-dev that scripts/corpus.sh installs; scripts/test.sh runs it
# before the tests).
# Exit codes: 0 all checks passed; 1 a check failed; 3 a prerequisite is
# missing (the test suite turns that into a skip, or a failure under CI).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${PROGRAML_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/programl-rs}"
work="$cache/thirdparty"
pkg=json-c
jobs="${JOBS:-2}"
static="${THIRDPARTY_STATIC:-OFF}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
plugin="$target_dir/release/libprograml_passes.so"
programl="$target_dir/release/programl"
say() { printf '[thirdparty] %s\n' "$*"; }
missing() { say "missing: $*"; exit 3; }
fail() { say "FAILED: $*"; exit 1; }

[ -f "$plugin" ] || missing "$plugin (cargo build --release -p programl-passes)"
[ -x "$programl" ] || missing "$programl (cargo build --release -p programl-cli)"
for tool in clang-16 cmake make; do
    command -v "$tool" >/dev/null || missing "$tool (bash scripts/bootstrap.sh)"
done
if [ "${USE_VALGRIND:-1}" != 0 ]; then
    command -v valgrind >/dev/null || missing "valgrind (apt-get install valgrind; or USE_VALGRIND=0)"
fi

# --- the source, once ------------------------------------------------------
src="$work/$pkg"
if [ ! -f "$src/CMakeLists.txt" ]; then
    mkdir -p "$work/download"
    say "apt-get source $pkg"
    (cd "$work/download" && apt-get source --only-source -qq "$pkg" </dev/null >"$work/download/log" 2>&1) ||
        missing "the source of $pkg: apt-get source $pkg failed (no deb-src entry? run scripts/corpus.sh once; see $work/download/log)"
    unpacked="$(find "$work/download" -mindepth 1 -maxdepth 1 -type d -name "$pkg-*" | head -n1)"
    [ -n "$unpacked" ] || missing "the source of $pkg: nothing unpacked in $work/download"
    rm -rf "$src"
    mv "$unpacked" "$src"
fi
version="$(cd "$src" && dpkg-parsechangelog -S Version 2>/dev/null || echo unknown)"

build="$work/build"      # the same path for both builds
graphs="$work/graphs"
plain_objects="$work/plain-objects"
configure() {
    cmake -S "$src" -B "$build" -G "Unix Makefiles" -DCMAKE_C_COMPILER=clang-16 \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_STATIC_LIBS="$static" \
        `# clang 16 warns where gcc 12 did not, and json-c sets -Werror` \
        -DDISABLE_WERROR=ON \
        `# valgrind 3.19 cannot read clang 16's default DWARF 5` \
        -DCMAKE_C_FLAGS=-gdwarf-4 "$@" >"$work/configure.log" 2>&1 ||
        fail "cmake configure (see $work/configure.log)"
}
# Prints "WALL CPU": seconds of make, elapsed and user + system of all the
# compiles (CPU time is what a loaded machine disturbs least).
timed_make() {
    /usr/bin/time -f '%e %U %S' -o "$work/time" make -C "$build" -j"$jobs" >"$work/make.log" 2>&1 ||
        fail "make (see $work/make.log)"
    awk '{ printf "%.2f %.2f\n", $1, $2 + $3 }' "$work/time"
}
run_tests() {
    (cd "$build" && ctest --output-on-failure >"$work/ctest-$1.log" 2>&1) ||
        fail "$pkg's test suite after the $1 build (see $work/ctest-$1.log)"
    grep -E '^[0-9]+% tests passed' "$work/ctest-$1.log"
}
objects() { (cd "$build" && find . -name '*.o' | sort); }

# --- 1. plain ----------------------------------------------------------------
rm -rf "$build" "$graphs" "$plain_objects"
configure
read -r plain_time plain_cpu < <(timed_make)
plain_tests=$(run_tests plain)
mkdir -p "$plain_objects"
(cd "$build" && objects | while IFS= read -r o; do mkdir -p "$plain_objects/$(dirname "$o")" && cp "$o" "$plain_objects/$o"; done)
units=$(objects | wc -l)
say "plain build: $units translation units, ${plain_time} s (make -j$jobs), CPU ${plain_cpu} s; $plain_tests"

# --- 2. with the graph pass -----------------------------------------------------
rm -rf "$build"
PROGRAML_PLUGIN="$plugin" configure \
    -DCMAKE_PROJECT_INCLUDE="$root/scripts/thirdparty-attach.cmake" -DPROGRAML_ATTACH_GRAPHS="$graphs"
read -r graph_time graph_cpu < <(timed_make)
graph_tests=$(run_tests graph)
[ "$(objects | wc -l)" = "$units" ] || fail "$(objects | wc -l) objects with the pass, $units without"

# Every unit one graph, in its target's directory: the objects of
# CMakeFiles/<target>.dir/ against the files of graphs/<target>/.
bad=0
targets=0
while IFS= read -r dir; do
    t="$(basename "$dir" .dir)"
    n_obj=$(find "$dir" -name '*.o' | wc -l)
    [ "$n_obj" -gt 0 ] || continue
    targets=$((targets + 1))
    n_graph=$(find "$graphs/$t" -type f 2>/dev/null | wc -l)
    if [ "$n_obj" != "$n_graph" ]; then
        say "target $t: $n_obj units, $n_graph graphs"
        bad=1
    fi
    # Each unit's graph carries the unit's stem.
    while IFS= read -r o; do
        stem="$(basename "$o" .c.o)"
        stem="${stem%.o}"
        found=$(find "$graphs/$t" -type f -name "$stem.*.pb" | wc -l)
        [ "$found" = 1 ] || { say "target $t: $found graphs for $o"; bad=1; }
    done < <(find "$dir" -name '*.o')
done < <(find "$build" -type d -name '*.dir' -path '*/CMakeFiles/*')
total_graphs=$(find "$graphs" -type f | wc -l)
[ "$bad" = 0 ] && [ "$total_graphs" = "$units" ] || fail "graphs: $total_graphs for $units units (above)"
"$programl" summary $(find "$graphs" -type f | sort) >"$work/summary.log" 2>&1 || fail "a graph does not read back (see $work/summary.log)"
nodes=$(awk '/module\(s\)/ { n += $(NF-3) } END { print n }' "$work/summary.log")

# Byte-identical objects.
identical=0
while IFS= read -r o; do
    cmp -s "$build/$o" "$plain_objects/$o" || fail "$o differs with the graph pass"
    identical=$((identical + 1))
done < <(objects)

added() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f s, %+.1f%%", b - a, 100 * (b - a) / a }'; }
say "$pkg $version: $units translation units in $targets targets (static libs $static), clang-16 -O2 -g, make -j$jobs"
say "graphs: $total_graphs, one per unit, each in its target's directory, all read back ($nodes nodes)"
say "objects: $identical of $units byte-identical with and without the graph pass"
say "test suite: plain $plain_tests; with the pass $graph_tests"
if [ -n "${THIRDPARTY_MODEL:-}" ]; then
    model="$(cd "$THIRDPARTY_MODEL" && pwd)"
    rm -rf "$build" "$work/infer"
    PROGRAML_PLUGIN="$plugin" configure \
        -DCMAKE_PROJECT_INCLUDE="$root/scripts/thirdparty-attach.cmake" -DPROGRAML_ATTACH_GRAPHS="$work/infer" \
        -DPROGRAML_ATTACH_MODEL="$model"
    read -r infer_time infer_cpu < <(timed_make)
    infer_tests=$(run_tests infer)
    if grep -q -i 'warning.*programl' "$work/make.log"; then
        grep -i 'warning.*programl' "$work/make.log" | head -n 3
        fail "the learned pass warned (see $work/make.log)"
    fi
    # One record per unit: "decisions" (a node-level bundle's roots) or
    # "decision" (a graph-level bundle's one prediction per module).
    decisions=$(grep -c '"kind":"decisions\?"' "$work/infer/decisions.jsonl" || true)
    [ "$decisions" = "$units" ] || fail "$decisions decision lines for $units units"
    same=0
    differ=()
    while IFS= read -r o; do
        if cmp -s "$build/$o" "$plain_objects/$o"; then same=$((same + 1)); else differ+=("$o"); fi
    done < <(objects)
    say "learned pass ($(basename "$model")): $decisions units annotated, no warning; objects: $same of $units byte-identical to the plain build's${differ[*]:+; differ: ${differ[*]}}"
    say "test suite with the learned pass: $infer_tests"
    say "build time with the learned pass: ${infer_time} s ($(added "$plain_time" "$infer_time")); CPU ${infer_cpu} s ($(added "$plain_cpu" "$infer_cpu"))"
fi
say "build time: plain ${plain_time} s, with the graph pass ${graph_time} s ($(added "$plain_time" "$graph_time")); CPU ${plain_cpu} s and ${graph_cpu} s ($(added "$plain_cpu" "$graph_cpu"))"
