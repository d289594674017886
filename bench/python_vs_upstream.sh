#!/usr/bin/env bash
# programl_rs against upstream's programl 0.3.2 Python package, side by side:
#   bash bench/python_vs_upstream.sh [FILES]   (default 200 corpus files)
# Upstream runs in its own venv ($PROGRAML_CACHE/upstream-venv, never the
# project venv, whose torch tch needs): the reference wheel the bootstrap
# downloaded, with protobuf<4 for its generated code, and dgl stubbed (it
# imports dgl at load for to_dgl, which this bench does not call).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${PROGRAML_CACHE:-$HOME/.cache/programl-rs}"
n="${1:-200}"
venv="$cache/upstream-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import google.protobuf, networkx' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'protobuf<4' networkx numpy tqdm absl-py
    "$venv/bin/pip" install -q --no-deps "$cache"/wheels/programl-0.3.2-*.whl
fi
stub="$cache/upstream-dgl-stub"
mkdir -p "$stub/dgl"
echo "# stub: upstream programl imports dgl at load; the bench never calls to_dgl" > "$stub/dgl/__init__.py"
echo "class DGLHeteroGraph: pass" > "$stub/dgl/heterograph.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Every 12th corpus file, rewritten for LLVM 10's parser as the conformance
# test does (programl_testkit::rewrite_for_llvm10): both sides read these.
# programl_rs reads the files as they are (LLVM 16), upstream the rewrites.
find "$cache/corpus" -name '*.ll' | sort | awk -v n="$n" 'NR % 12 == 1 && c < n { print; c++ }' > "$work/originals"
(cd "$root" && cargo run --release --quiet -p programl-testkit --features programl/llvm16 --example llvm10 -- "$work/ir" < "$work/originals")
list="$work/files"
ls -d "$work"/ir/*.ll > "$list"
echo "files: $(wc -l < "$list") from $cache/corpus; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); one thread each"
PYTHONPATH="$stub" "$venv/bin/python" "$root/bench/python_vs_upstream.py" upstream "$list"
"$root/.venv/bin/python" "$root/bench/python_vs_upstream.py" ours "$work/originals"
