"""ProGraML program graphs, DeepDataFlow labels and GGNN bundles from Python.

Built on programl-rs's Rust core (the LLVM it was built against,
``LLVM_MAJOR``: 16 by default): the same graph builder as the
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
    pg.save_graphs("g.pb.gz", [g])  # upstream's programl.load_graphs reads it
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Union

from . import _core
from ._core import LLVM_MAJOR, Bundle, ProgramGraph, analyze

__version__ = _core.__version__

__all__ = [
    "ProgramGraph",
    "Bundle",
    "ClangError",
    "from_llvm_ir",
    "from_bitcode",
    "from_clang",
    "from_bytes",
    "save_graphs",
    "load_graphs",
    "analyze",
    "load_bundle",
    "DeepDataFlow",
    "reference_batch",
    "FLOWS",
    "LLVM_MAJOR",
]

#: The model's forward edge types, in the order of its weights.
FLOWS = ("control", "data", "call")

PathLike = Union[str, os.PathLike]


class ClangError(RuntimeError):
    """clang could not compile a source given to :func:`from_clang`."""


# A mode is checked before any work (a compile), as build_ir reads it.
_check_mode = _core.check_mode


def _read(path: Path, what: str) -> tuple[bytes, str]:
    try:
        return path.read_bytes(), _shown(path)
    except OSError as e:
        if e.errno is None:
            raise OSError(f"{path}: cannot read {what}: {e}") from e
        # The same subclass (FileNotFoundError, PermissionError, ...), errno
        # and file name, with what was being read.
        raise type(e)(e.errno, f"cannot read {what}: {e.strerror}", str(path)) from e


def _missing(value: str, what: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, f"cannot read {what}: no such file (a one-word string is read as a path; pass bytes for text)", value)


def _named_file(value: str, what: str) -> Optional[str]:
    """The file a string names (whitespace around it and ``~`` allowed), or
    ``None`` where it is text. One word (no whitespace inside) is read as
    a path (IR or source text worth a graph has whitespace; pass bytes for
    text that has none): a directory raises ``IsADirectoryError``, a
    missing file ``FileNotFoundError``. (A too-long or odd string is never
    a file: ``os.path.isfile`` does not raise.)"""
    name = os.path.expanduser(value.strip())
    if "\n" in name:
        return None
    if os.path.isfile(name):
        return name
    if name and not any(c.isspace() for c in name):
        try:
            st = os.stat(name)
        except FileNotFoundError:
            raise _missing(name, what) from None
        except OSError as e:  # e.g. a directory on the way not searchable
            raise type(e)(e.errno, f"cannot read {what}: {e.strerror}", name) from None
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"cannot read {what}: a directory", name)
        return name  # a device or a pipe (/dev/stdin, a process substitution)
    return None


def _shown(path: Union[str, PathLike]) -> str:
    """A path as errors and the module's name show it: a name that is not
    UTF-8 as the CLI shows it (U+FFFD for each undecodable byte)."""
    return os.fsencode(path).decode("utf-8", errors="replace")


def _read_if_path(value, what: str) -> tuple[bytes, str]:
    if isinstance(value, os.PathLike):
        return _read(Path(value), what)
    if isinstance(value, str):
        name = _named_file(value, what)
        if name is not None:
            return _read(Path(name), what)
        return value.encode(), "<string>"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), "<bytes>"
    raise TypeError(f"expected {what} as text, bytes or a path, got {type(value).__name__}")


def from_llvm_ir(text_or_path: Union[str, bytes, PathLike], *, mode: str = "paper", name: Optional[str] = None) -> ProgramGraph:
    """The graph of LLVM IR text (or a ``.ll`` file): ``programl graph x.ll``.

    ``mode="paper"`` (the CLI's default), ``"model"`` (paper mode without
    the debug intrinsics, ``llvm.dbg.*``: the graphs the models are trained
    on and the learned pass predicts from, so use it for
    :meth:`Bundle.predict` on IR built with ``-g``) or ``"programl-0.3"``
    (upstream 0.3.2's ``llvm2graph``, node for node). A string is read as
    a path when it names a file or is one word (no whitespace: a missing
    file raises ``FileNotFoundError``, a directory ``IsADirectoryError``),
    else as IR text. ``name`` is the module's identifier (default: the
    path, or ``<string>``): errors name it, and IR without a
    ``source_filename`` line takes it as its source file name, which the
    graph records, as ``programl graph FILE`` does.

    Raises ``ValueError`` naming the input when LLVM cannot read it, an
    ``OSError`` subclass when the file cannot be read. Releases the GIL
    while building, so threads build graphs in parallel.
    """
    _check_mode(mode)
    data, shown = _read_if_path(text_or_path, "LLVM IR")
    return _core.build_ir(data, name or shown, mode)


def from_bitcode(bytes_or_path: Union[bytes, PathLike], *, mode: str = "paper", name: Optional[str] = None) -> ProgramGraph:
    """The graph of LLVM bitcode (bytes, or a ``.bc`` file's path).

    ``mode`` and ``name`` as :func:`from_llvm_ir`. Raises ``ValueError``
    when it is not bitcode or LLVM cannot read it, an ``OSError`` subclass
    when the file cannot be read. LLVM 16's bitcode reader crashes the
    process on some damaged files (docs/user/python.md, "Damaged
    bitcode"): read untrusted bitcode in a child process.
    """
    _check_mode(mode)
    if isinstance(bytes_or_path, str):
        path = _named_file(bytes_or_path, "LLVM bitcode")
        if path is None:
            # Text, not a path (IR, say): a ValueError saying what it is,
            # not a missing file named after the text.
            raise ValueError(
                f"not LLVM bitcode: a str is a .bc file's path, and this is text ({bytes_or_path[:40]!r}...); "
                "IR text goes to from_llvm_ir"
            )
        bytes_or_path = Path(path)
    data, shown = _read_if_path(bytes_or_path, "LLVM bitcode")
    # (LLVM reads text as IR and nothing as an empty module.)
    if not data.startswith(_BITCODE_MAGIC):
        raise ValueError(f"{name or shown}: not LLVM bitcode ({len(data)} bytes, without bitcode's magic number)")
    return _core.build_ir(data, name or shown, mode)


# Bitcode's magic numbers: raw ('BC' 0xC0DE) and the wrapper's (0x0B17C0DE,
# little-endian).
_BITCODE_MAGIC = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")


def _clang() -> str:
    chosen = os.environ.get("PROGRAML_CLANG")
    if chosen:
        if not shutil.which(chosen):
            raise ClangError(f"PROGRAML_CLANG={chosen}: not an executable clang")
        return chosen
    for c in (f"clang-{LLVM_MAJOR}", f"/usr/lib/llvm-{LLVM_MAJOR}/bin/clang"):
        if shutil.which(c):
            return c
    raise ClangError(f"clang {LLVM_MAJOR} not found (install clang-{LLVM_MAJOR}, or set PROGRAML_CLANG)")


_LANGUAGES = {"c": ["-x", "c"], "c++": ["-x", "c++"], "cl": ["-x", "cl", "-Xclang", "-finclude-default-header"]}
# A source file's language by its suffix. IR and preprocessed sources go to
# clang without -x (it knows them); any other suffix (POJ-104's .txt, none)
# is C, as clang would not compile it at all.
_SUFFIX_LANGUAGE = {
    ".c": "c", ".h": "c",
    ".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".c++": "c++", ".C": "c++", ".hpp": "c++", ".hh": "c++", ".hxx": "c++",
    ".cl": "cl",
}
_CLANG_KNOWS = (".ll", ".bc", ".i", ".ii")


def from_clang(
    source: Union[str, bytes, PathLike],
    args: Sequence[str] = (),
    *,
    language: Optional[str] = None,
    mode: str = "paper",
    timeout: float = 300,
) -> ProgramGraph:
    """Compiles ``source`` with clang to bitcode and builds its graph in
    this process.

    ``source`` is a path (a ``str`` that names a file, or a ``Path``) or
    source text (a ``str`` that does not name a file, or ``bytes``).
    ``language`` is ``"c"``, ``"c++"`` or ``"cl"`` (OpenCL C, with clang's
    default header); by default, a file's suffix decides (``.cpp`` is C++,
    ``.cl`` OpenCL, ``.ll``/``.bc``/``.i``/``.ii`` go as they are, any
    other suffix is C) and text is C. ``args`` go to clang as given, e.g.
    ``["-O2", "-DN=4"]``. ``mode`` as :func:`from_llvm_ir`.

    Raises :class:`ClangError` with clang's diagnostics (or when it runs
    past ``timeout`` seconds), ``FileNotFoundError`` for a path that does
    not exist, ``TypeError`` for a list as ``source`` (upstream's
    ``programl.from_clang(["x.c", "-O2"])`` is ``from_clang("x.c",
    ["-O2"])`` here) or a string as ``args``.
    """
    _check_mode(mode)
    if language is not None and language not in _LANGUAGES:
        raise ValueError(f"language '{language}': expected one of {', '.join(_LANGUAGES)}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout: {timeout!r}; seconds, more than 0")
    if isinstance(args, (str, bytes)):
        raise TypeError(f"args: a list of clang arguments, e.g. ['-O2'], not a string ({args!r})")
    args = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in args]
    for i, a in enumerate(args):
        if not isinstance(a, (str, bytes)):
            raise TypeError(f"args[{i}]: a clang argument is a string, got {type(a).__name__} ({a!r})")
    if isinstance(source, (list, tuple)):
        raise TypeError(
            "source: one source text or file path, not a list (upstream's programl.from_clang(['x.c', '-O2']) "
            "is from_clang('x.c', ['-O2']) here)"
        )
    if isinstance(source, os.PathLike):
        path = os.fspath(source)
    elif isinstance(source, str):
        path = _named_file(source, "the source")
    elif isinstance(source, (bytes, bytearray, memoryview)):
        path = None
    else:
        raise TypeError(f"source: text, bytes or a path, got {type(source).__name__}")
    if path is not None:
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "cannot read the source: a directory", path)
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, "cannot read the source: no such file", path)
        suffix = Path(path).suffix
        chosen = language or (None if suffix in _CLANG_KNOWS else _SUFFIX_LANGUAGE.get(suffix, "c"))
        text, shown = None, _shown(path)
    else:
        text = source.encode() if isinstance(source, str) else bytes(source)
        path, chosen, shown = "-", language or "c", "<source>"
    lang = _LANGUAGES[chosen] if chosen else []
    cmd = [_clang(), *lang, *args, "-c", "-emit-llvm", "-o", "-", path]
    try:
        r = subprocess.run(cmd, input=text, capture_output=True, timeout=timeout, stdin=None if text is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise ClangError(f"{shown}: clang ran past {timeout} s") from e
    if r.returncode != 0:
        raise ClangError(f"{shown}: clang failed ({r.returncode}):\n{r.stderr.decode(errors='replace')}")
    if not r.stdout:
        # clang succeeds and writes nothing when it takes an input for the
        # linker (e.g. with -x none): never an empty graph in silence.
        raise ClangError(f"{shown}: clang wrote no bitcode (is it a source file? pass language=):\n{r.stderr.decode(errors='replace')}")
    if r.stdout.startswith((b"BC\xc0\xde", b"\xde\xc0\x17\x0b")):
        return _core.build_ir(r.stdout, shown, mode)
    # Not bitcode: an argument changed clang's output. -S gives IR text,
    # which reads; -E gives preprocessed source, which is clang's doing,
    # not the source's fault.
    try:
        return _core.build_ir(r.stdout, shown, mode)
    except ValueError as e:
        raise ClangError(
            f"{shown}: clang wrote neither LLVM bitcode nor IR (did an argument, such as -E, change its output?): {e}"
        ) from None


def from_bytes(data: bytes, format: str = "pb") -> ProgramGraph:
    """A graph from ProGraML protobuf (``pb``, ``pbtxt``) or node-link JSON."""
    if isinstance(data, str):
        raise TypeError("data: the serialised graph as bytes (open(path, 'rb').read(), or text.encode()), got str")
    return ProgramGraph.from_bytes(data, format)


_COMPRESSIONS = ("gz", None)


def _check_compression(compression: Optional[str]) -> None:
    if compression not in _COMPRESSIONS:
        raise ValueError(f"compression {compression!r}: expected 'gz' or None")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publish(tmp: Path, path: Path) -> None:
    """Gives ``tmp`` (a ``mkstemp`` file, mode 0600) the mode a new file
    would have, and renames it onto ``path``."""
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def save_graphs(path: PathLike, graphs: Iterable[ProgramGraph], compression: Optional[str] = "gz") -> None:
    """Writes ``graphs`` to one file as upstream's ``ProgramGraphList``,
    gzip-compressed unless ``compression=None``: what upstream's
    ``programl.save_graphs`` writes and ``programl.load_graphs`` reads.
    Written to a temporary file beside ``path``, flushed to disk and
    renamed: a crash leaves the old file or the new one."""
    _check_compression(compression)
    graphs = list(graphs)
    for i, g in enumerate(graphs):
        if not isinstance(g, ProgramGraph):
            raise TypeError(f"graphs[{i}]: a ProgramGraph, got {type(g).__name__}")
    data = _core.graph_list_bytes(graphs)
    if compression == "gz":
        data = gzip.compress(data)
    shown = path
    # Through a symbolic link, as open(path, "wb") writes: its target is
    # the file replaced, the link stays.
    path = Path(os.path.realpath(path))
    if path.is_dir():
        # The rename would fail naming the temporary file.
        raise IsADirectoryError(errno.EISDIR, "cannot write a ProgramGraphList: a directory", os.fspath(shown))
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise type(e)(e.errno, f"cannot write a ProgramGraphList: {e.strerror}", os.fspath(shown)) from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _publish(Path(tmp), path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_graphs(path: PathLike, idx_list: Optional[Sequence[int]] = None, compression: Optional[str] = "gz") -> List[ProgramGraph]:
    """The graphs of a ``ProgramGraphList`` file (:func:`save_graphs`'s, or
    upstream's ``programl.save_graphs``'s), in order; with ``idx_list``,
    those at its indices. ``compression`` as :func:`save_graphs`. Raises
    ``ValueError`` naming the file (and the graph, by index) when it does
    not read."""
    _check_compression(compression)
    data, shown = _read(Path(path), "a ProgramGraphList")
    if compression == "gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"{shown}: not gzip-compressed ({e}); pass compression=None for an uncompressed list") from e
    try:
        graphs = _core.read_graph_list_bytes(data)
    except ValueError as e:
        raise ValueError(f"{shown}: {e}") from e
    if idx_list is None:
        return graphs
    idx_list = list(idx_list)
    try:
        return [graphs[i] for i in idx_list]
    except IndexError as e:
        raise IndexError(f"{shown}: idx_list {list(idx_list)} for a list of {len(graphs)} graphs") from e


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


def _manifest_digest(store: Path) -> str:
    """The SHA-256 of a store's manifest (empty where there is none: then
    reading the store raises, naming it)."""
    try:
        return hashlib.sha256((store / "manifest.jsonl").read_bytes()).hexdigest()
    except OSError:
        return ""


class DeepDataFlow:
    """A DeepDataFlow store (``programl dataset build``) as a map-style
    dataset of PyG ``Data`` (``len`` and indexing: what
    ``torch.utils.data.DataLoader`` and PyG's ``DataLoader`` take), read
    from its shards once, at construction, into memory.

    Each item is one example (a graph and a root): ``x`` (vocabulary ids),
    ``selector`` (1 at the root), ``y`` (1 at the analysis's positives),
    ``labelled`` (the nodes that carry a label for the task), per flow
    ``<flow>_edge_index`` and ``<flow>_position``, ``steps`` and ``root``;
    the featurisation is the core's, which ``programl-train`` and the pass
    use. ``vocabulary``: a ``vocabulary.json`` or a bundle directory; by
    default the store's train split's vocabulary, as training builds it
    (cached in the store as ``vocabulary.json``, and built again when the
    store's manifest has changed since: a resumed build added shards).
    """

    def __init__(
        self,
        store_dir: PathLike,
        task: str = "reachability",
        split: str = "train",
        subset: str = "ddf-30",
        vocabulary: Optional[PathLike] = None,
    ):
        # The names first: a typo costs nothing (not a vocabulary build).
        _core.check_store_names(task, split, subset)
        store = Path(store_dir)
        if not store.is_dir():
            if store.exists():
                raise NotADirectoryError(errno.ENOTDIR, "not a dataset store (a store is a directory, written by `programl dataset build`)", str(store))
            raise FileNotFoundError(errno.ENOENT, "not a dataset store (no such directory; `programl dataset build` writes one)", str(store))
        built = None
        if vocabulary is None:
            vocabulary = store / "vocabulary.json"
            # The cache is the vocabulary of the manifest it was built from
            # (its digest beside it): a build that resumed and added shards
            # since makes it stale, and it is built again.
            stamp_file = store / "vocabulary.json.manifest-sha256"
            stamp = _manifest_digest(store)
            try:
                fresh = vocabulary.exists() and stamp_file.read_text().strip() == stamp
            except OSError:
                # No stamp: one this version did not write. A store that
                # cannot be written keeps the vocabulary it ships with.
                fresh = vocabulary.exists() and not os.access(store, os.W_OK)
            if not fresh:
                # Cached in the store where it is writable; for a read-only
                # store, built for this use and removed once read.
                where = store if os.access(store, os.W_OK) else None
                with tempfile.NamedTemporaryFile(dir=where, suffix=".json", delete=False) as t:
                    tmp = Path(t.name)
                try:
                    _core.store_vocabulary(store, tmp)
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    raise
                if where is None:
                    vocabulary = built = tmp
                else:
                    _publish(tmp, vocabulary)
                    with tempfile.NamedTemporaryFile("w", dir=store, suffix=".tmp", delete=False) as t:
                        t.write(stamp + "\n")
                    _publish(Path(t.name), stamp_file)
        vocabulary = Path(vocabulary)
        if vocabulary.is_dir():
            vocabulary = vocabulary / "vocabulary.json"
        self.store, self.task, self.split, self.subset = store, task, split, subset
        #: The ``vocabulary.json`` that gave ``x`` (``None`` where it was
        #: built for a read-only store and removed: pass ``vocabulary=``).
        self.vocabulary: Optional[Path] = None if built else vocabulary
        try:
            self.paths, self._graphs, self._examples = _core.read_store(store, task, split, subset, vocabulary)
        finally:
            if built:
                built.unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(self._examples)

    def __repr__(self) -> str:
        return (
            f"DeepDataFlow({self.store}, task={self.task!r}, split={self.split!r}, subset={self.subset!r}: "
            f"{len(self._examples)} examples of {len(self._graphs)} graphs)"
        )

    def __getitem__(self, i: int):
        torch, Data = _pyg()

        def ints(packed: bytes):
            # The store's lists are packed little-endian i32s (4 bytes a
            # value); each item gets its own int64 tensors.
            if not packed:
                return torch.zeros(0, dtype=torch.long)
            return torch.frombuffer(bytearray(packed), dtype=torch.int32).long()

        g, root, steps, positives = self._examples[i]
        tokens, edges, labelled = self._graphs[g]
        x = ints(tokens)
        n = len(x)
        d = Data(x=x)
        d.num_nodes = n
        d.selector = torch.zeros(n, dtype=torch.long)
        d.selector[root] = 1
        d.y = torch.zeros(n, dtype=torch.long)
        d.y[ints(positives)] = 1
        d.labelled = torch.zeros(n, dtype=torch.bool)
        d.labelled[ints(labelled)] = True
        for f, (src, dst, pos) in zip(FLOWS, edges):
            setattr(d, f"{f}_edge_index", torch.stack([ints(src), ints(dst)]))
            setattr(d, f"{f}_position", ints(pos))
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
