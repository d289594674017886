#!/usr/bin/env bash
# The main job, end to end (README "run it"):
#
#   bash scripts/demo.sh [FILE.c]          # default: examples/hello.c
#
# Bootstraps, then compiles the C file with clang-16 -O1 and the ProGraML
# pass plugin (`-fpass-plugin=$(programl plugin-path)`), which writes the
# module's program graph into out/ (PROGRAML_GRAPH_DIR). Prints the graph's
# node and edge counts by type (`programl summary`), and renders it as
# out/<name>.svg with GraphViz when `dot` is installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# shellcheck source=scripts/bootstrap.sh
source "$root/scripts/bootstrap.sh" </dev/null

src="${1:-examples/hello.c}"
name="$(basename "${src%.*}")"
out="$root/out"
programl="$root/target/release/programl"
plugin="$("$programl" plugin-path)"
mkdir -p "$out"
rm -f "$out/$name".*

echo "[demo] clang-16 -O1 -fpass-plugin=$plugin $src (graphs -> out/)"
PROGRAML_GRAPH_DIR="$out" PROGRAML_GRAPH_FORMAT=pb \
    clang-16 -O1 -fpass-plugin="$plugin" -c "$src" -o "$out/$name.o"
graph="$(ls -t "$out/$name".*pb 2>/dev/null | head -n1 || true)"
[ -n "$graph" ] || { echo "[demo] the pass wrote no graph for $name into $out" >&2; exit 1; }
echo "[demo] graph: ${graph#"$root"/}"
"$programl" summary "$graph"

if command -v dot >/dev/null; then
    dotfile="$out/$name.dot"
    svg="$out/$name.svg"
    "$programl" convert --format dot -o "$dotfile" "$graph"
    dot -Tsvg "$dotfile" -o "$svg"
    echo "[demo] rendered ${svg#"$root"/} ($(wc -c <"$svg") bytes) from ${dotfile#"$root"/}"
else
    echo "[demo] graphviz not installed: no SVG (apt-get install graphviz)"
fi
