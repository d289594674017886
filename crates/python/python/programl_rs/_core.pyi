# Types of programl_rs._core, the Rust half of the package (src/lib.rs).
# `to_networkx` and `to_pyg` are the Python half's (__init__.py), set on
# ProgramGraph at import.
from os import PathLike
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

__version__: str
#: The major version of the LLVM the package was built against.
LLVM_MAJOR: int

_Format = Literal["pb", "pbtxt", "json", "dot"]
#: What a graph is read from (dot is written only).
_ReadFormat = Literal["pb", "pbtxt", "json"]
_Node = Tuple[str, str, Optional[str], Optional[str], int]
_Edge = Tuple[int, int, str, int]

class ProgramGraph:
    """A ProGraML program graph (immutable; picklable; equal when the same graph)."""

    @property
    def node_count(self) -> int: ...
    @property
    def edge_count(self) -> int: ...
    def nodes(self) -> List[_Node]:
        """Per node: (type, text, full_text, function, block)."""
    def edges(self) -> List[_Edge]:
        """Per edge: (source, target, flow, position)."""
    def functions(self) -> List[str]: ...
    def kernel_graph(self, kernel: str, kernels: List[str]) -> ProgramGraph:
        """The graph device mapping decides `kernel` on: with several
        `kernels`, the kernel and what it calls, the others left out."""
    def to_bytes(self, format: _Format = "pb") -> bytes: ...
    @staticmethod
    def from_bytes(data: bytes, format: _ReadFormat = "pb") -> ProgramGraph: ...
    def to_networkx(self) -> Any:
        """A networkx.MultiDiGraph with upstream's attributes."""
    def to_pyg(self, vocabulary: Optional[Union[str, PathLike[str]]] = None) -> Any:
        """A torch_geometric.data.Data (needs torch and torch_geometric)."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> Tuple[Any, Tuple[bytes, str]]: ...

class Bundle:
    """A model bundle opened by the torch-free CPU inference."""

    def __init__(self, path: Union[str, PathLike[str]]) -> None: ...
    @property
    def task(self) -> str: ...
    @property
    def head(self) -> Literal["node", "graph"]: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def steps(self) -> int: ...
    @property
    def aux(self) -> List[str]: ...
    def predict(
        self,
        graph: ProgramGraph,
        roots: Optional[Sequence[int]] = None,
        aux: Optional[Sequence[float]] = None,
        dtype: Literal["auto", "f32", "bf16", "int8"] = "auto",
        threads: int = 1,
        steps: Optional[int] = None,
    ) -> Union[Dict[int, List[float]], List[float]]:
        """Node head: {root: [p(node)]}; graph head: [p(class) for class in classes]."""

def build_ir(data: bytes, name: str, mode: str = "paper") -> ProgramGraph: ...
def analyze(graph: ProgramGraph, task: str, root: Optional[int] = None, seed: int = 0) -> List[Dict[str, Any]]: ...
def read_store(
    store: Union[str, PathLike[str]], task: str, split: str, subset: str, vocabulary: Union[str, PathLike[str]]
) -> Tuple[List[str], List[Any], List[Tuple[int, int, int, bytes]]]:
    """Paths, graphs and examples; every list packed as little-endian int32 bytes."""
def check_mode(mode: str) -> None: ...
def check_store_names(task: str, split: str, subset: str) -> None: ...
def store_vocabulary(store: Union[str, PathLike[str]], out: Union[str, PathLike[str]]) -> int: ...
def labelled(graph: ProgramGraph, task: str) -> List[int]: ...
def token_ids(graph: ProgramGraph, path: Union[str, PathLike[str]]) -> List[int]: ...
def graph_list_bytes(graphs: Sequence[ProgramGraph]) -> bytes: ...
def read_graph_list_bytes(data: bytes) -> List[ProgramGraph]: ...
