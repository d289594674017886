//! Why a graph could not be read.

use super::Format;

/// Why [`read_graph`](super::read_graph) rejected its input. Messages name
/// the offending node, edge, function or module by index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("the {format} format is write-only and cannot be read")]
    WriteOnly { format: Format },
    #[error("not a binary ProgramGraph protocol buffer ({len} bytes): {source}")]
    Pb { len: usize, source: protobuf::Error },
    #[error("not a binary ProgramGraphFeaturesList protocol buffer ({len} bytes): {source}")]
    FeaturesPb { len: usize, source: protobuf::Error },
    #[error("not a binary ProgramGraphList protocol buffer ({len} bytes): {source}")]
    ListPb { len: usize, source: protobuf::Error },
    /// A graph of a `ProgramGraphList` that does not read.
    #[error("graph {index} of {count}: {source}")]
    ListItem { index: usize, count: usize, source: Box<FormatError> },
    #[error("not a text ProgramGraph protocol buffer: {0}")]
    PbTxt(String),
    #[error("not node-link JSON of a program graph: {0}")]
    Json(#[source] serde_json::Error),
    #[error("node at position {position} has id {id}; node ids must be 0, 1, 2, ... in order")]
    NodeId { position: usize, id: i64 },
    #[error("node {node} has unknown type {code}")]
    UnknownNodeType { node: usize, code: i64 },
    #[error("edge {edge} has unknown flow {code}")]
    UnknownFlow { edge: usize, code: i64 },
    #[error("edge {edge} names node {node} of {nodes}")]
    DanglingEdge { edge: usize, node: i64, nodes: usize },
    #[error("node {node} names function {function} of {functions}")]
    DanglingFunction { node: usize, function: i64, functions: usize },
    #[error("function {function} records entry node {node} of {nodes}")]
    DanglingEntry { function: usize, node: i64, nodes: usize },
    #[error("function {function} names module {module} of {modules}")]
    DanglingModule { function: usize, module: i64, modules: usize },
    /// A field holds a value the graph cannot (negative, too large).
    #[error("{what} is {value}, out of range")]
    OutOfRange { what: String, value: i64 },
    /// The graph reads, but breaks an invariant of
    /// [`ProgramGraph::validate`](crate::graph::ProgramGraph::validate).
    #[error("not a valid program graph: {first}{}", if *count > 1 { format!(" (and {} more problems)", count - 1) } else { String::new() })]
    Invalid { count: usize, first: String },
    #[error("{owner}: feature {key:?} {problem}")]
    BadFeature { owner: String, key: String, problem: String },
}
