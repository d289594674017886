"""Graphs per second from Python: programl_rs against upstream's programl 0.3.2.

Run by bench/python_vs_upstream.sh, once in each environment, on the same
files (LLVM 10-readable IR from the corpus): upstream's `from_llvm_ir(text,
version="10")` runs its llvm2graph-10 binary per call; programl_rs builds
in-process, `mode="programl-0.3"` for the same graphs. Prints one JSON line.
"""
import json
import sys
import time
from pathlib import Path

which, listing = sys.argv[1], sys.argv[2]
files = [Path(l) for l in Path(listing).read_text().split()]
texts = [f.read_text() for f in files]
if which == "upstream":
    import programl

    build = lambda t: programl.from_llvm_ir(t, version="10")
    count = lambda g: len(g.node)
else:
    import programl_rs

    build = lambda t: programl_rs.from_llvm_ir(t, mode="programl-0.3")
    count = lambda g: g.node_count
build(texts[0])  # warm: imports, the binary's first start
start = time.perf_counter()
nodes = sum(count(build(t)) for t in texts)
wall = time.perf_counter() - start
print(json.dumps({"impl": which, "files": len(texts), "nodes": nodes, "wall_s": round(wall, 3), "graphs_per_s": round(len(texts) / wall, 1)}))
