//! Upstream ProGraML's `ProgramGraphList` (`proto/program_graph_list.proto`):
//! many graphs in one binary protocol buffer, what upstream's Python
//! `programl.save_graphs` writes (gzip around it by default: compression is
//! the caller's) and `programl.load_graphs` reads.
//!
//! Each graph is the same message [`super::write_graph`] writes as `pb`, so
//! a list is its graphs' `pb` bytes one after another, each framed as field
//! 2; reading checks every graph as [`super::read_graph`] does.

use std::io::{self, Write};

use protobuf::{CodedOutputStream, Message};

use super::pb::program_graph_list::ProgramGraphList;
use super::{proto, FormatError};
use crate::graph::ProgramGraph;

/// `ProgramGraphList.graph`.
const LIST_GRAPH: u32 = 2;

/// Writes `graphs` as one binary `ProgramGraphList` (no `context`).
pub fn write_graph_list<'a>(graphs: impl IntoIterator<Item = &'a ProgramGraph>, out: &mut dyn Write) -> io::Result<()> {
    let mut os = CodedOutputStream::new(out);
    let mut buf = Vec::new();
    for g in graphs {
        buf.clear();
        proto::write_pb(g, &mut buf)?;
        os.write_bytes(LIST_GRAPH, &buf).map_err(io::Error::other)?;
    }
    os.flush().map_err(io::Error::other)
}

/// Reads a binary `ProgramGraphList`: its graphs in order, each checked as
/// [`super::read_graph`] checks one. The list's `context` features are
/// ignored (upstream writes none). An error names the graph by index.
pub fn read_graph_list(bytes: &[u8]) -> Result<Vec<ProgramGraph>, FormatError> {
    let list = ProgramGraphList::parse_from_bytes(bytes).map_err(|source| FormatError::ListPb { len: bytes.len(), source })?;
    let count = list.graph.len();
    list.graph
        .into_iter()
        .enumerate()
        .map(|(index, m)| proto::graph_from_message(m).map_err(|source| FormatError::ListItem { index, count, source: Box::new(source) }))
        .collect()
}
