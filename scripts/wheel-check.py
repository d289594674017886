"""Checks an installed programl_rs wheel (scripts/wheel.sh), run by
scripts/test.sh from a fresh venv that holds only the wheel and its
dependencies:

    VENV/bin/python scripts/wheel-check.py HELLO.ll HELLO.pb MODELS_DIR

- the package imported is the installed one, not the checkout's;
- every libLLVM mapped into the process is the wheel's own copy (in
  programl_rs.libs/, renamed by hash), never the system's;
- its graph of HELLO.ll is the CLI's (HELLO.pb) byte for byte; a bundle
  predicts; save_graphs/load_graphs round-trip;
- the wheel's metadata carries the package page (crates/python/README.md)
  and its classifiers.
"""

import os
import sys
from importlib.metadata import metadata
import tempfile
from pathlib import Path

import programl_rs as pg

ll, pb, models = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
here = Path(pg.__file__).resolve().parent
checkout = Path(__file__).resolve().parents[1]
assert checkout not in here.parents, f"imported from the checkout: {here}"

g = pg.from_llvm_ir(ll, name=str(ll))
assert g.to_bytes() == pb.read_bytes(), "the graph differs from the CLI's"

mapped = {line.split()[-1] for line in open("/proc/self/maps") if "libLLVM" in line}
ours = str(here.parent / "programl_rs.libs") + f"/libLLVM-{pg.LLVM_MAJOR}-"
assert mapped and all(m.startswith(ours) for m in mapped), f"libLLVM mapped from {sorted(mapped)}, not {ours}*"

bundle = pg.load_bundle(models / "poj104")
p = bundle.predict(g)
assert len(p) == len(bundle.classes) and abs(sum(p) - 1) < 1e-4, p

with tempfile.TemporaryDirectory() as d:
    pg.save_graphs(Path(d) / "g.pb.gz", [g, g])
    assert pg.load_graphs(Path(d) / "g.pb.gz") == [g, g]

meta = metadata("programl-rs")
page = meta.get_payload() or meta.get("Description") or ""
assert "# programl-rs" in page and meta.get("Description-Content-Type", "").startswith("text/markdown"), \
    "the wheel's metadata lacks the package page (crates/python/README.md)"
assert any(c.startswith("Topic :: Software Development :: Compilers") for c in meta.get_all("Classifier") or []), meta.get_all("Classifier")

hidden = os.environ.get("PROGRAML_WHEEL_HIDDEN", "no")
print(f"[wheel-check] passed: programl_rs {pg.__version__} from {here}, libLLVM {sorted(mapped)[0]}, "
      f"{g.node_count} nodes as the CLI, POJ-104 class {bundle.classes[p.index(max(p))]}; system LLVM hidden: {hidden}")
