//! The format-neutral half of reading: graphs as the wire formats hold them
//! (plain integers, `function` 0 for "none"), checked and turned into a
//! [`ProgramGraph`].

use petgraph::graph::NodeIndex;

use super::FormatError;
use crate::graph::{Edge, Flow, Function, Module, Node, NodeKind, ProgramGraph};

pub(super) struct RawNode {
    pub kind: i64,
    pub text: String,
    pub full_text: Option<String>,
    pub function: i64,
    pub block: i64,
}

pub(super) struct RawEdge {
    pub flow: i64,
    pub position: i64,
    pub source: i64,
    pub target: i64,
}

pub(super) struct RawFunction {
    pub name: String,
    pub module: i64,
    pub entry: Option<i64>,
}

#[derive(Default)]
pub(super) struct RawGraph {
    pub nodes: Vec<RawNode>,
    pub edges: Vec<RawEdge>,
    /// Each function: name, module, and its recorded entry node (the
    /// `entry_node` feature), if any.
    pub functions: Vec<RawFunction>,
    pub modules: Vec<Module>,
}

fn unsigned(what: impl FnOnce() -> String, value: i64) -> Result<u32, FormatError> {
    u32::try_from(value).map_err(|_| FormatError::OutOfRange { what: what(), value })
}

impl RawGraph {
    /// Checks every reference and builds the graph. Node 0 and constants get
    /// no function (the formats store 0 for them).
    pub fn into_graph(self) -> Result<ProgramGraph, FormatError> {
        let (nodes, edges, functions, modules) = (self.nodes.len(), self.edges.len(), self.functions.len(), self.modules.len());
        let mut g = ProgramGraph::default();
        g.graph.reserve_exact_nodes(nodes);
        g.graph.reserve_exact_edges(edges);
        for (i, RawFunction { name, module, entry }) in self.functions.into_iter().enumerate() {
            if module < 0 || module as usize >= modules {
                return Err(FormatError::DanglingModule { function: i, module, modules });
            }
            let entry = match entry {
                None => None,
                Some(e) if e <= 0 || e as usize >= nodes => return Err(FormatError::DanglingEntry { function: i, node: e, nodes }),
                Some(e) => Some(e as u32),
            };
            g.functions.push(Function { name, module: module as u32, entry });
        }
        g.modules = self.modules;
        for (i, n) in self.nodes.into_iter().enumerate() {
            let kind = NodeKind::from_code(n.kind).ok_or(FormatError::UnknownNodeType { node: i, code: n.kind })?;
            let block = unsigned(|| format!("node {i} block"), n.block)?;
            let function = if i == 0 || kind == NodeKind::Constant {
                None
            } else if n.function < 0 || n.function as usize >= functions {
                return Err(FormatError::DanglingFunction { node: i, function: n.function, functions });
            } else {
                Some(n.function as u32)
            };
            g.graph.add_node(Node { kind, text: n.text, full_text: n.full_text, function, block });
        }
        for (i, e) in self.edges.into_iter().enumerate() {
            let flow = Flow::from_code(e.flow).ok_or(FormatError::UnknownFlow { edge: i, code: e.flow })?;
            let position = unsigned(|| format!("edge {i} position"), e.position)?;
            let end = |node: i64| {
                if node < 0 || node as usize >= nodes {
                    Err(FormatError::DanglingEdge { edge: i, node, nodes })
                } else {
                    Ok(NodeIndex::new(node as usize))
                }
            };
            let (s, t) = (end(e.source)?, end(e.target)?);
            g.graph.add_edge(s, t, Edge { flow, position });
        }
        Ok(g)
    }
}
