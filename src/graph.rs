//! The program graph: the one data structure every other module speaks.
//!
//! A [`ProgramGraph`] is a directed multigraph (petgraph) whose nodes are
//! instructions, variables and constants of one LLVM module, and whose edges
//! carry control, data and call flow, each with a position (see SPEC.md §1).
//!
//! Node ids are dense: node `i` is `NodeIndex::new(i)`, and node 0 is always
//! the `[external]` instruction. Serialization lives in `crate::format`; this
//! module derives no serde.
//!
//! **Invariants** (checked by [`ProgramGraph::validate`]):
//! - node 0 is the instruction `[external]`, without `full_text`;
//! - control edges join instructions of the same function;
//! - data edges join a variable or constant and an instruction;
//! - call edges join instructions;
//! - every `function` index is in range of [`ProgramGraph::functions`], and
//!   every function's `module` is in range of [`ProgramGraph::modules`].

use std::collections::BTreeMap;
use std::fmt;

use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    Instruction = 0,
    Variable = 1,
    Constant = 2,
    /// Reserved (upstream's newest revision only); never built.
    Type = 3,
}

/// What an edge carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flow {
    Control = 0,
    Data = 1,
    Call = 2,
    /// Reserved; never built.
    Type = 3,
}

impl NodeKind {
    pub const ALL: [NodeKind; 4] = [NodeKind::Instruction, NodeKind::Variable, NodeKind::Constant, NodeKind::Type];

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Instruction => "instruction",
            NodeKind::Variable => "variable",
            NodeKind::Constant => "constant",
            NodeKind::Type => "type",
        }
    }

    pub fn from_code(code: i64) -> Option<NodeKind> {
        NodeKind::ALL.into_iter().find(|k| *k as i64 == code)
    }
}

impl Flow {
    pub const ALL: [Flow; 4] = [Flow::Control, Flow::Data, Flow::Call, Flow::Type];

    pub fn name(self) -> &'static str {
        match self {
            Flow::Control => "control",
            Flow::Data => "data",
            Flow::Call => "call",
            Flow::Type => "type",
        }
    }

    pub fn from_code(code: i64) -> Option<Flow> {
        Flow::ALL.into_iter().find(|f| *f as i64 == code)
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Index into [`ProgramGraph::functions`].
pub type FunctionId = u32;
/// Index into [`ProgramGraph::modules`].
pub type ModuleId = u32;

/// The text of the `[external]` node, node 0 of every graph.
pub const EXTERNAL_TEXT: &str = "[external]";
/// The text of the single node of a function that is only declared.
pub const UNDEFINED_FUNCTION_TEXT: &str = "; undefined function";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: NodeKind,
    /// Opcode name for instructions, the type for variables and constants.
    pub text: String,
    /// The printed IR; `None` only for `[external]`.
    pub full_text: Option<String>,
    /// The function the node belongs to; `None` for `[external]` and for
    /// constants, which belong to the module.
    pub function: Option<FunctionId>,
    /// Basic-block index (one counter over the whole module).
    pub block: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Edge {
    pub flow: Flow,
    /// Operand index for data uses, successor index for branch control
    /// edges, 0 otherwise.
    pub position: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub module: ModuleId,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Module {
    pub name: String,
    /// String features, e.g. `llvm_target_triple`, `llvm_data_layout`.
    pub features: BTreeMap<String, String>,
}

/// A ProGraML program graph.
#[derive(Clone, Debug, Default)]
pub struct ProgramGraph {
    pub graph: DiGraph<Node, Edge, u32>,
    pub functions: Vec<Function>,
    pub modules: Vec<Module>,
}

/// Module feature key of the target triple.
pub const FEATURE_TARGET_TRIPLE: &str = "llvm_target_triple";
/// Module feature key of the data layout.
pub const FEATURE_DATA_LAYOUT: &str = "llvm_data_layout";

impl ProgramGraph {
    /// The `[external]` node, node 0.
    pub fn external() -> NodeIndex<u32> {
        NodeIndex::new(0)
    }

    /// An empty graph holding only the `[external]` node.
    pub fn new() -> ProgramGraph {
        let mut g = ProgramGraph::default();
        g.graph.add_node(Node { kind: NodeKind::Instruction, text: EXTERNAL_TEXT.to_string(), full_text: None, function: None, block: 0 });
        g
    }

    pub fn add_node(&mut self, node: Node) -> NodeIndex<u32> {
        self.graph.add_node(node)
    }

    pub fn add_edge(&mut self, flow: Flow, position: u32, from: NodeIndex<u32>, to: NodeIndex<u32>) -> EdgeIndex<u32> {
        self.graph.add_edge(from, to, Edge { flow, position })
    }

    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    pub fn edge_count(&self) -> usize {
        self.graph.edge_count()
    }

    pub fn node(&self, id: NodeIndex<u32>) -> &Node {
        &self.graph[id]
    }

    /// Node counts by kind, indexed by `NodeKind as usize`.
    pub fn node_counts(&self) -> [usize; 4] {
        let mut counts = [0; 4];
        for n in self.graph.node_weights() {
            counts[n.kind as usize] += 1;
        }
        counts
    }

    /// Edge counts by flow, indexed by `Flow as usize`.
    pub fn edge_counts(&self) -> [usize; 4] {
        let mut counts = [0; 4];
        for e in self.graph.edge_weights() {
            counts[e.flow as usize] += 1;
        }
        counts
    }

    /// Checks the invariants listed in the module docs; returns every
    /// violation found, each naming the node or edge.
    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut errors = Vec::new();
        match self.graph.node_weights().next() {
            Some(n) if n.kind == NodeKind::Instruction && n.text == EXTERNAL_TEXT && n.full_text.is_none() => {}
            _ => errors.push("node 0 is not the [external] instruction".to_string()),
        }
        for (i, f) in self.functions.iter().enumerate() {
            if f.module as usize >= self.modules.len() {
                errors.push(format!("function {i} ({}) names module {} of {}", f.name, f.module, self.modules.len()));
            }
        }
        for id in self.graph.node_indices() {
            let n = &self.graph[id];
            if let Some(f) = n.function {
                if f as usize >= self.functions.len() {
                    errors.push(format!("node {} names function {f} of {}", id.index(), self.functions.len()));
                }
            }
            if id.index() > 0 && n.full_text.is_none() {
                errors.push(format!("node {} ({}) has no full_text", id.index(), n.text));
            }
        }
        for e in self.graph.edge_references() {
            let (s, t) = (&self.graph[e.source()], &self.graph[e.target()]);
            let (si, ti) = (e.source().index(), e.target().index());
            let ok = match e.weight().flow {
                Flow::Control => s.kind == NodeKind::Instruction && t.kind == NodeKind::Instruction && s.function == t.function,
                Flow::Data => matches!(
                    (s.kind, t.kind),
                    (NodeKind::Variable | NodeKind::Constant, NodeKind::Instruction) | (NodeKind::Instruction, NodeKind::Variable)
                ),
                Flow::Call => s.kind == NodeKind::Instruction && t.kind == NodeKind::Instruction,
                Flow::Type => false,
            };
            if !ok {
                errors.push(format!(
                    "{} edge {si} ({} {:?}) -> {ti} ({} {:?}) breaks the schema",
                    e.weight().flow,
                    s.kind,
                    s.text,
                    t.kind,
                    t.text
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}
