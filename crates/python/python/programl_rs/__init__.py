"""ProGraML program graphs, DeepDataFlow labels and GGNN bundles from Python.

Built on programl-rs's Rust core (LLVM 16): the same graph builder as the
``programl`` CLI and the pass plugin, the same analyses as ``programl
analyze``, the same model input as ``programl-train``, and the same torch-free
inference as the learned pass. Not upstream's ``programl`` package: its
graphs are ``--compat programl-0.3`` here, and its protobuf files read and
write both ways.

    import programl_rs as pg
    g = pg.from_clang("int f(int x) { return x * 3 + 1; }")
    g.to_networkx()            # networkx.MultiDiGraph, upstream's attributes
    g.to_pyg()                 # torch_geometric.data.Data (needs PyG)
    pg.load_bundle("models/reachability").predict(g)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

from . import _core
from ._core import Bundle, ProgramGraph, analyze

__version__ = _core.__version__

__all__ = [
    "ProgramGraph",
    "Bundle",
    "ClangError",
    "from_llvm_ir",
    "from_bitcode",
    "from_clang",
    "from_bytes",
    "analyze",
    "load_bundle",
    "DeepDataFlow",
    "FLOWS",
]

#: The model's forward edge types, in the order of its weights.
FLOWS = ("control", "data", "call")

PathLike = Union[str, os.PathLike]


class ClangError(RuntimeError):
    """clang could not compile a source given to :func:`from_clang`."""


def _read(path: Path, what: str) -> tuple[bytes, str]:
    try:
        return path.read_bytes(), str(path)
    except OSError as e:
        raise OSError(f"{path}: cannot read {what}: {e.strerror}") from e


def _read_if_path(value, what: str) -> tuple[bytes, str]:
    if isinstance(value, os.PathLike):
        return _read(Path(value), what)
    if isinstance(value, str):
        # IR text always holds a newline or starts like IR; a short
        # single-line string is taken as a path.
        if "\n" not in value and len(value) < 4096 and not value.lstrip().startswith(("define", "declare", "target", ";", "source_filename")):
            return _read(Path(value), what)
        return value.encode(), "<string>"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), "<bytes>"
    raise TypeError(f"expected {what} as text, bytes or a path, got {type(value).__name__}")


def from_llvm_ir(text_or_path: Union[str, PathLike], *, mode: str = "paper", name: Optional[str] = None) -> ProgramGraph:
    """The graph of LLVM IR text (or a ``.ll`` file): ``programl graph x.ll``.

    ``mode="paper"`` (the CLI's default), ``"model"`` (paper mode without
    the debug intrinsics, ``llvm.dbg.*``: the graphs the models are trained
    on and the learned pass predicts from, so use it for
    :meth:`Bundle.predict` on IR built with ``-g``) or ``"programl-0.3"``
    (upstream 0.3.2's ``llvm2graph``, node for node). Raises ``ValueError`` naming the
    input when LLVM 16 cannot read it. Releases the GIL while building.
    """
    data, shown = _read_if_path(text_or_path, "LLVM IR")
    return _core.build_ir(data, name or shown, mode)


def from_bitcode(bytes_or_path: Union[bytes, PathLike], *, mode: str = "paper", name: Optional[str] = None) -> ProgramGraph:
    """The graph of LLVM bitcode (bytes, or a ``.bc`` file path)."""
    if isinstance(bytes_or_path, str):
        bytes_or_path = Path(bytes_or_path)
    data, shown = _read_if_path(bytes_or_path, "LLVM bitcode")
    return _core.build_ir(data, name or shown, mode)


def _clang() -> str:
    chosen = os.environ.get("PROGRAML_CLANG")
    if chosen:
        if not shutil.which(chosen):
            raise ClangError(f"PROGRAML_CLANG={chosen}: not an executable clang")
        return chosen
    for c in ("clang-16", "/usr/lib/llvm-16/bin/clang"):
        if shutil.which(c):
            return c
    raise ClangError("clang 16 not found (install clang-16, or set PROGRAML_CLANG)")


def from_clang(
    source: Union[str, PathLike],
    args: Sequence[str] = (),
    *,
    language: str = "c",
    mode: str = "paper",
    timeout: float = 300,
) -> ProgramGraph:
    """Compiles ``source`` (its text, or a path to a file) with clang 16 to
    bitcode and builds its graph in this process.

    ``language`` is ``"c"``, ``"c++"`` or ``"cl"`` (OpenCL C, with clang's
    default header). ``args`` go to clang as given, e.g. ``["-O2"]``.
    Raises :class:`ClangError` with clang's diagnostics.
    """
    langs = {"c": ["-x", "c"], "c++": ["-x", "c++"], "cl": ["-x", "cl", "-Xclang", "-finclude-default-header"]}
    if language not in langs:
        raise ValueError(f"language '{language}': expected one of {', '.join(langs)}")
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and Path(source).is_file()):
        path, text, shown = str(source), None, str(source)
    else:
        path, text, shown = "-", str(source).encode(), "<source>"
    cmd = [_clang(), *langs[language], *args, "-c", "-emit-llvm", "-o", "-", path]
    try:
        r = subprocess.run(cmd, input=text, capture_output=True, timeout=timeout, stdin=None if text is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise ClangError(f"{shown}: clang ran past {timeout} s") from e
    if r.returncode != 0:
        raise ClangError(f"{shown}: clang failed ({r.returncode}):\n{r.stderr.decode(errors='replace')}")
    return _core.build_ir(r.stdout, shown, mode)


def from_bytes(data: bytes, format: str = "pb") -> ProgramGraph:
    """A graph from ProGraML protobuf (``pb``, ``pbtxt``) or node-link JSON."""
    return ProgramGraph.from_bytes(data, format)


def _to_networkx(self: ProgramGraph):
    """A ``networkx.MultiDiGraph``, one edge per graph edge, with the same
    node, edge and graph attributes as upstream's ``programl.to_networkx``
    (it is networkx's node-link reading of the same JSON)."""
    import networkx as nx
    from networkx.readwrite import json_graph

    data = json.loads(self.to_bytes("json"))
    try:
        return json_graph.node_link_graph(data, directed=True, multigraph=True, edges="links")
    except TypeError:  # networkx < 3.4 has no `edges=`
        return json_graph.node_link_graph(data, directed=True, multigraph=True)


def _pyg():
    """torch and torch_geometric's ``Data``, or an ImportError that says how
    to install them (the package itself needs neither)."""
    try:
        import torch
        from torch_geometric.data import Data
    except ImportError as e:
        raise ImportError(
            f"programl_rs: to_pyg() and DeepDataFlow need torch and torch_geometric ({e}); "
            "install them with: pip install torch torch_geometric (or, from a checkout, pip install './crates/python[torch]')"
        ) from e
    return torch, Data


def _to_pyg(self: ProgramGraph, vocabulary: Optional[PathLike] = None):
    """A ``torch_geometric.data.Data``: ``edge_index`` [2, E] of every edge
    with ``edge_type`` (0 control, 1 data, 2 call) and ``edge_position``;
    per flow, ``<flow>_edge_index`` and ``<flow>_position`` (what the GGNN
    reads); ``node_type`` (0 instruction, 1 variable, 2 constant),
    ``text``; and ``x``, the vocabulary ids, when ``vocabulary`` (a
    ``vocabulary.json`` or a bundle directory) is given."""
    torch, Data = _pyg()

    kinds = {"instruction": 0, "variable": 1, "constant": 2, "type": 3}
    flows = {"control": 0, "data": 1, "call": 2, "type": 3}
    nodes = self.nodes()
    edges = self.edges()
    d = Data()
    d.num_nodes = len(nodes)
    d.node_type = torch.tensor([kinds[n[0]] for n in nodes], dtype=torch.long)
    d.text = [n[1] for n in nodes]
    if edges:
        src, dst, flow, pos = zip(*edges)
    else:
        src, dst, flow, pos = (), (), (), ()
    d.edge_index = torch.tensor([src, dst], dtype=torch.long).reshape(2, -1)
    d.edge_type = torch.tensor([flows[f] for f in flow], dtype=torch.long)
    d.edge_position = torch.tensor(pos, dtype=torch.long)
    for i, f in enumerate(FLOWS):
        mask = d.edge_type == i
        setattr(d, f"{f}_edge_index", d.edge_index[:, mask])
        setattr(d, f"{f}_position", d.edge_position[mask])
    if vocabulary is not None:
        d.x = torch.tensor(_core.token_ids(self, Path(vocabulary)), dtype=torch.long)
    return d


ProgramGraph.to_networkx = _to_networkx  # type: ignore[attr-defined]
ProgramGraph.to_pyg = _to_pyg  # type: ignore[attr-defined]


def load_bundle(path: PathLike) -> Bundle:
    """Opens a model bundle (``config.json``, ``weights.safetensors``,
    ``vocabulary.json``) with the learned pass's torch-free CPU inference.

    ``bundle.predict(graph, roots=None)`` gives, for a node-level bundle,
    ``{root: [p for every node]}`` (default roots: the sampled ones, as the
    pass); for a graph-level one, the class probabilities in
    ``bundle.classes`` order (``aux=[transfer, wgsize]`` for device
    mapping)."""
    return Bundle(Path(path))


class DeepDataFlow:
    """A DeepDataFlow store (``programl dataset build``) as a
    ``torch.utils.data.Dataset`` of PyG ``Data``, read directly from its
    shards.

    Each item is one example (a graph and a root): ``x`` (vocabulary ids),
    ``selector`` (1 at the root), ``y`` (1 at the analysis's positives),
    ``labelled`` (the nodes that carry a label for the task), per flow
    ``<flow>_edge_index`` and ``<flow>_position``, ``steps`` and ``root``;
    the featurisation is the core's, which ``programl-train`` and the pass
    use. ``vocabulary``: a ``vocabulary.json`` or a bundle directory; by
    default the store's train split's vocabulary, as training builds it
    (cached in the store as ``vocabulary.json``).
    """

    def __init__(
        self,
        store_dir: PathLike,
        task: str = "reachability",
        split: str = "train",
        subset: str = "ddf-30",
        vocabulary: Optional[PathLike] = None,
    ):
        store = Path(store_dir)
        if not store.is_dir():
            raise OSError(f"{store}: not a dataset store (no such directory; `programl dataset build` writes one)")
        if vocabulary is None:
            vocabulary = store / "vocabulary.json"
            if not vocabulary.exists():
                # Cached in the store where it is writable, else built per use.
                where = store if os.access(store, os.W_OK) else None
                with tempfile.NamedTemporaryFile(dir=where, suffix=".json", delete=False) as t:
                    tmp = Path(t.name)
                try:
                    _core.store_vocabulary(store, tmp)
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    raise
                if where is None:
                    vocabulary = tmp
                else:
                    os.replace(tmp, vocabulary)
        vocabulary = Path(vocabulary)
        if vocabulary.is_dir():
            vocabulary = vocabulary / "vocabulary.json"
        self.task, self.split, self.subset = task, split, subset
        self.vocabulary = vocabulary
        self.paths, self._graphs, self._examples = _core.read_store(store, task, split, subset, vocabulary)

    def __len__(self) -> int:
        return len(self._examples)

    def __getitem__(self, i: int):
        torch, Data = _pyg()

        g, root, steps, positives = self._examples[i]
        tokens, edges, labelled = self._graphs[g]
        n = len(tokens)
        d = Data(x=torch.tensor(tokens, dtype=torch.long))
        d.num_nodes = n
        d.selector = torch.zeros(n, dtype=torch.long)
        d.selector[root] = 1
        d.y = torch.zeros(n, dtype=torch.long)
        if positives:
            d.y[torch.tensor(positives, dtype=torch.long)] = 1
        d.labelled = torch.zeros(n, dtype=torch.bool)
        if labelled:
            d.labelled[torch.tensor(labelled, dtype=torch.long)] = True
        for f, (src, dst, pos) in zip(FLOWS, edges):
            setattr(d, f"{f}_edge_index", torch.tensor([src, dst], dtype=torch.long).reshape(2, -1))
            setattr(d, f"{f}_position", torch.tensor(pos, dtype=torch.long))
        d.root, d.steps = root, steps
        return d

    def graph_path(self, i: int) -> str:
        """The IR file (relative to the store's IR directory) of example ``i``."""
        return self.paths[self._examples[i][0]]


def reference_batch(data) -> Dict[str, "object"]:
    """The batch dictionary of ``bench/reference_ggnn.py``'s PyTorch GGNN
    (tokens, selector, ``<flow>.sources/targets/positions``) from a PyG
    ``Data`` or ``Batch`` of :class:`DeepDataFlow` items."""
    out = {"tokens": data.x, "selector": data.selector}
    for f in FLOWS:
        ei = getattr(data, f"{f}_edge_index")
        out[f"{f}.sources"], out[f"{f}.targets"] = ei[0], ei[1]
        out[f"{f}.positions"] = getattr(data, f"{f}_position")
    return out
