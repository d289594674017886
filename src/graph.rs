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
//! **Entry instructions.** A function's entry is the first instruction of
//! its entry block. The default builder records it ([`Function::entry`]);
//! compat mode, which must stay node-for-node equal to upstream, and graphs
//! read from upstream's files carry no record, and there the entry is
//! derived from the graph's structure ([`ProgramGraph::derived_entry`]).
//! [`ProgramGraph::entry`] gives the record, else the derivation; the
//! analyses use nothing else.
//!
//! **Invariants** (checked by [`ProgramGraph::validate`], one check per
//! clause, every violation reported with the item it concerns):
//! - node 0 is the instruction `[external]`, without `full_text`, and no
//!   other node has no `full_text`;
//! - every edge's endpoints are nodes of the graph;
//! - control edges join instructions of the same function;
//! - data edges join a variable or constant and an instruction;
//! - data edges into an instruction have distinct positions (one edge per
//!   operand index; whether each is below the instruction's operand count
//!   only LLVM knows: `crate::builder::check` adds that), and a definition
//!   edge (instruction → variable) has position 0;
//! - call edges join instructions;
//! - every `function` index is in range of [`ProgramGraph::functions`], and
//!   every function's `module` is in range of [`ProgramGraph::modules`];
//! - every function with instructions has exactly one entry: a recorded
//!   entry is an instruction of that function without a control predecessor
//!   inside it, and the one the derivation finds (so record and structure
//!   never name two different entries); without a record, the derivation
//!   finds one.

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
/// A node handle (node `i` is `NodeId::new(i)`).
pub type NodeId = NodeIndex<u32>;
/// Index into [`ProgramGraph::modules`].
pub type ModuleId = u32;

/// The text of the `[external]` node, node 0 of every graph.
pub const EXTERNAL_TEXT: &str = "[external]";
/// The text of the single node of a function that is only declared.
pub const UNDEFINED_FUNCTION_TEXT: &str = "; undefined function";

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Function {
    pub name: String,
    pub module: ModuleId,
    /// The node id of the function's entry instruction (the first of its
    /// entry block), as the builder saw it; `None` where no builder recorded
    /// it (compat mode, upstream's files) or the function has no body.
    pub entry: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
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

/// Two graphs are equal when they are the same graph: the same nodes and
/// edges (endpoints and weights) in the same order, the same functions and
/// modules. (petgraph's graph has no equality of its own.)
impl PartialEq for ProgramGraph {
    fn eq(&self, other: &ProgramGraph) -> bool {
        let edges = |g: &ProgramGraph| g.graph.raw_edges().iter().map(|e| (e.source(), e.target(), e.weight)).collect::<Vec<_>>();
        self.graph.node_count() == other.graph.node_count()
            && self.graph.edge_count() == other.graph.edge_count()
            && self.graph.node_weights().eq(other.graph.node_weights())
            && edges(self) == edges(other)
            && self.functions == other.functions
            && self.modules == other.modules
    }
}

impl Eq for ProgramGraph {}

/// Agrees with `==`: hashes what equality compares.
impl std::hash::Hash for ProgramGraph {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.graph.node_count().hash(state);
        for n in self.graph.node_weights() {
            n.hash(state);
        }
        for e in self.graph.raw_edges() {
            (e.source(), e.target(), e.weight).hash(state);
        }
        self.functions.hash(state);
        self.modules.hash(state);
    }
}

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

    /// Whether `node` may be a DeepDataFlow root or positive at all: an
    /// instruction of a function, other than `[external]` and the
    /// `; undefined function` placeholder of a declaration.
    pub fn is_body_instruction(&self, node: u32) -> bool {
        let Some(n) = self.graph.node_weight(NodeIndex::new(node as usize)) else { return false };
        node != 0 && n.kind == NodeKind::Instruction && n.function.is_some() && n.text != UNDEFINED_FUNCTION_TEXT
    }

    /// Whether the graph holds code: an instruction of a defined function's
    /// body. A module of data or declarations alone has none, and a
    /// graph-level model has nothing to decide on (the learned pass, the
    /// CLI's `predict` and Python's refuse it).
    pub fn has_code(&self) -> bool {
        (1..self.node_count() as u32).any(|n| self.is_body_instruction(n))
    }

    /// The entry instruction of `function`: the builder's record if there is
    /// one, else [`ProgramGraph::derived_entry`].
    pub fn entry(&self, function: FunctionId) -> Option<u32> {
        match self.functions.get(function as usize)?.entry {
            Some(e) => Some(e),
            None => self.derived_entry(function),
        }
    }

    /// The entry instruction of every function (see [`ProgramGraph::entry`]),
    /// derived ones computed in one pass over the graph.
    pub fn entries(&self) -> Vec<Option<u32>> {
        let derived = if self.functions.iter().all(|f| f.entry.is_some()) { Vec::new() } else { self.derived_entries() };
        self.functions.iter().enumerate().map(|(i, f)| f.entry.or_else(|| derived.get(i).copied().flatten())).collect()
    }

    /// The entry of `function` derived from the graph alone, ignoring any
    /// record: among the function's instructions with no control
    /// predecessor inside the function, `[external]` and placeholders
    /// excluded, the one with the lowest node id. (Builders emit the entry
    /// block first; unreachable blocks are the other candidates.)
    pub fn derived_entry(&self, function: FunctionId) -> Option<u32> {
        self.derived_entries().get(function as usize).copied().flatten()
    }

    /// [`ProgramGraph::derived_entry`] of every function, in one pass.
    pub fn derived_entries(&self) -> Vec<Option<u32>> {
        let mut has_pred = vec![false; self.node_count()];
        for e in self.graph.edge_references() {
            if e.weight().flow == Flow::Control && self.graph[e.source()].function == self.graph[e.target()].function {
                has_pred[e.target().index()] = true;
            }
        }
        let mut entries = vec![None; self.functions.len()];
        // Ascending node ids: the first candidate of a function is its entry.
        for id in self.graph.node_indices() {
            let i = id.index() as u32;
            if has_pred[id.index()] || !self.is_body_instruction(i) {
                continue;
            }
            if let Some(slot) = self.graph[id].function.and_then(|f| entries.get_mut(f as usize)) {
                slot.get_or_insert(i);
            }
        }
        entries
    }

    /// The functions `from` reaches through calls (itself included),
    /// never entering those in `exclude` (nor going through them): a call
    /// edge into a function's entry instruction is a call of it. A
    /// declaration is reached as any callee is. (For many closures of one
    /// graph, build its [`FunctionIndex`] once.)
    pub fn call_closure(&self, from: FunctionId, exclude: &[FunctionId]) -> std::collections::BTreeSet<FunctionId> {
        self.function_index().call_closure(from, &|f| exclude.contains(&f))
    }

    /// The graph of the functions `keep` alone: `[external]`, their nodes,
    /// the constants their instructions use, and the edges among these
    /// (node ids renumbered in the same order; functions renumbered, their
    /// entries with them). For example one kernel of a module with several:
    /// the kernel and what it calls ([`ProgramGraph::call_closure`]), the
    /// other kernels left out. (For many subgraphs of one graph, build its
    /// [`FunctionIndex`] once.)
    pub fn functions_subgraph(&self, keep: &std::collections::BTreeSet<FunctionId>) -> ProgramGraph {
        self.function_index().subgraph(keep)
    }

    /// The graph device mapping decides `kernel` on: in a module of several
    /// kernels (`kernels`, every kernel's name), the kernel and what it
    /// calls, the module's other kernels left out; in a module of one, the
    /// whole graph. The learned pass's rule (`kernel_graphs` in the plugin,
    /// by function id), shared by training, `predict` and Python. `None`
    /// where no function is named `kernel`.
    pub fn kernel_subgraph(&self, kernel: &str, kernels: &[String]) -> Option<ProgramGraph> {
        let id_of = |name: &str| self.functions.iter().position(|f| f.name == name).map(|i| i as FunctionId);
        let k = id_of(kernel)?;
        let others: Vec<FunctionId> = kernels.iter().filter(|n| *n != kernel).filter_map(|n| id_of(n)).collect();
        if others.is_empty() {
            return Some(self.clone());
        }
        let index = self.function_index();
        Some(index.subgraph(&index.call_closure(k, &|f| others.contains(&f))))
    }

    /// The calls between functions and each function's nodes, computed in
    /// one pass over the graph, for [`FunctionIndex::call_closure`] and
    /// [`FunctionIndex::subgraph`]: each then costs the size of what it
    /// returns, not the graph's (one closure and subgraph a kernel of a
    /// module of thousands of kernels).
    pub fn function_index(&self) -> FunctionIndex<'_> {
        let entries = self.entries();
        let mut entry_of: std::collections::HashMap<u32, FunctionId> =
            entries.iter().enumerate().filter_map(|(f, e)| e.map(|e| (e, f as FunctionId))).collect();
        let mut nodes: Vec<Vec<u32>> = vec![Vec::new(); self.functions.len()];
        for id in self.graph.node_indices() {
            let node = &self.graph[id];
            // A declaration's only node is its placeholder: calls reach it.
            if let (Some(f), true) = (node.function, node.text == UNDEFINED_FUNCTION_TEXT) {
                entry_of.insert(id.index() as u32, f);
            }
            if let Some(list) = node.function.and_then(|f| nodes.get_mut(f as usize)) {
                list.push(id.index() as u32);
            }
        }
        let mut callees: Vec<Vec<FunctionId>> = vec![Vec::new(); self.functions.len()];
        for e in self.graph.edge_references() {
            if e.weight().flow != Flow::Call {
                continue;
            }
            let (Some(caller), Some(&callee)) = (self.graph[e.source()].function, entry_of.get(&(e.target().index() as u32))) else {
                continue;
            };
            if caller != callee {
                if let Some(list) = callees.get_mut(caller as usize) {
                    list.push(callee);
                }
            }
        }
        FunctionIndex { graph: self, callees, nodes }
    }

    /// Checks the invariants listed in the module docs; returns every
    /// violation found, each naming the node, edge or function.
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
        let nodes = self.node_count();
        // (user, position) of every operand edge seen, to find duplicates.
        let mut operand_slots: std::collections::HashSet<(usize, u32)> = std::collections::HashSet::new();
        for e in self.graph.edge_references() {
            let (si, ti) = (e.source().index(), e.target().index());
            if si >= nodes || ti >= nodes {
                errors.push(format!("{} edge {} joins {si} -> {ti}, not both nodes of {nodes}", e.weight().flow, e.id().index()));
                continue;
            }
            let (s, t) = (&self.graph[e.source()], &self.graph[e.target()]);
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
            } else if e.weight().flow == Flow::Data {
                let position = e.weight().position;
                if t.kind == NodeKind::Instruction && !operand_slots.insert((ti, position)) {
                    errors.push(format!("data edge {si} -> {ti} ({} {:?}): a second edge into operand {position}", t.kind, t.text));
                }
                if s.kind == NodeKind::Instruction && position != 0 {
                    errors.push(format!("definition edge {si} ({:?}) -> {ti} has position {position}, not 0", s.text));
                }
            }
        }
        self.validate_entries(&mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn validate_entries(&self, errors: &mut Vec<String>) {
        let mut has_instructions = vec![false; self.functions.len()];
        let mut has_pred = vec![false; self.node_count()];
        for id in self.graph.node_indices() {
            if self.is_body_instruction(id.index() as u32) {
                if let Some(slot) = self.graph[id].function.and_then(|f| has_instructions.get_mut(f as usize)) {
                    *slot = true;
                }
            }
        }
        for e in self.graph.edge_references() {
            if e.weight().flow == Flow::Control && self.graph[e.source()].function == self.graph[e.target()].function {
                has_pred[e.target().index()] = true;
            }
        }
        let derived = self.derived_entries();
        for (i, f) in self.functions.iter().enumerate() {
            match f.entry {
                Some(e) => {
                    let ok = self.is_body_instruction(e) && self.graph[NodeIndex::new(e as usize)].function == Some(i as FunctionId);
                    if !ok {
                        errors.push(format!("function {i} ({}) records entry {e}, not an instruction of its body", f.name));
                    } else if has_pred[e as usize] {
                        errors
                            .push(format!("function {i} ({}) records entry {e}, which has a control predecessor in the function", f.name));
                    } else if derived[i] != Some(e) {
                        // Builders emit the entry block first: any other
                        // instruction without a predecessor comes later.
                        errors.push(format!(
                            "function {i} ({}) records entry {e}, but its first instruction without a control predecessor is {}",
                            f.name,
                            derived[i].map_or("none".to_string(), |d| d.to_string())
                        ));
                    }
                }
                None if has_instructions[i] && derived[i].is_none() => {
                    errors.push(format!("function {i} ({}) has instructions but no entry: each has a control predecessor", f.name));
                }
                None => {}
            }
        }
    }
}

/// A graph's calls between functions and each function's nodes
/// ([`ProgramGraph::function_index`]).
#[derive(Debug)]
pub struct FunctionIndex<'g> {
    graph: &'g ProgramGraph,
    /// Per function, the functions it calls (through call edges into their
    /// entries or declarations' placeholders), itself left out.
    callees: Vec<Vec<FunctionId>>,
    /// Per function, its nodes, ascending.
    nodes: Vec<Vec<u32>>,
}

impl FunctionIndex<'_> {
    /// [`ProgramGraph::call_closure`], with the functions not to enter
    /// given as a test (`from` itself is entered whatever it says).
    pub fn call_closure(&self, from: FunctionId, exclude: &dyn Fn(FunctionId) -> bool) -> std::collections::BTreeSet<FunctionId> {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![from];
        while let Some(f) = stack.pop() {
            if (f != from && exclude(f)) || !seen.insert(f) {
                continue;
            }
            stack.extend(self.callees.get(f as usize).into_iter().flatten().copied());
        }
        seen
    }

    /// [`ProgramGraph::functions_subgraph`], in time of the kept
    /// functions' nodes and their edges. It finds each edge from its end
    /// in a function, which every edge of a graph the builder makes has;
    /// an edge between two module-level nodes, or between one and
    /// `[external]` (none the builder makes), is left out.
    pub fn subgraph(&self, keep: &std::collections::BTreeSet<FunctionId>) -> ProgramGraph {
        use petgraph::Direction::{Incoming, Outgoing};
        let g = &self.graph.graph;
        if g.node_count() == 0 {
            return self.graph.clone();
        }
        let in_function = |n: NodeIndex| n.index() != 0 && g[n].function.is_some();
        let function_nodes: Vec<u32> = keep.iter().flat_map(|&f| self.nodes.get(f as usize).into_iter().flatten().copied()).collect();
        // [`external`], and the module-level nodes (constants, globals'
        // values) that a kept function's node uses or defines.
        let mut kept: Vec<u32> = vec![0];
        kept.extend(function_nodes.iter().copied());
        for &b in &function_nodes {
            for direction in [Incoming, Outgoing] {
                for a in g.neighbors_directed(NodeIndex::new(b as usize), direction) {
                    if a.index() != 0 && g[a].function.is_none() {
                        kept.push(a.index() as u32);
                    }
                }
            }
        }
        kept.sort_unstable();
        kept.dedup();
        let function_ids: BTreeMap<FunctionId, FunctionId> = keep.iter().enumerate().map(|(i, &f)| (f, i as FunctionId)).collect();
        let mut out = ProgramGraph { graph: DiGraph::default(), functions: Vec::new(), modules: self.graph.modules.clone() };
        let new_id: std::collections::HashMap<u32, u32> = kept
            .iter()
            .map(|&old| {
                let mut node = g[NodeIndex::new(old as usize)].clone();
                node.function = node.function.and_then(|f| function_ids.get(&f).copied());
                (old, out.graph.add_node(node).index() as u32)
            })
            .collect();
        // The edges among them, in the graph's order, each found once from
        // its function node (every edge has one: the builder joins no
        // module-level node to another, nor to `[external]`), so that a
        // constant or `[external]` used by every kernel costs each kernel
        // its own uses, not all of them.
        let mut edges: Vec<EdgeIndex> = Vec::new();
        for &b in &function_nodes {
            let b = NodeIndex::new(b as usize);
            edges.extend(g.edges_directed(b, Outgoing).filter(|e| new_id.contains_key(&(e.target().index() as u32))).map(|e| e.id()));
            edges.extend(
                g.edges_directed(b, Incoming)
                    .filter(|e| !in_function(e.source()) && new_id.contains_key(&(e.source().index() as u32)))
                    .map(|e| e.id()),
            );
        }
        edges.sort_unstable();
        for e in edges {
            let (s, t) = g.edge_endpoints(e).expect("an edge of the graph");
            out.graph.add_edge(
                NodeIndex::new(new_id[&(s.index() as u32)] as usize),
                NodeIndex::new(new_id[&(t.index() as u32)] as usize),
                g[e],
            );
        }
        out.functions = keep
            .iter()
            .filter_map(|&f| self.graph.functions.get(f as usize))
            .map(|f| Function { entry: f.entry.and_then(|e| new_id.get(&e).copied()), ..f.clone() })
            .collect();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(text: &str, function: u32) -> Node {
        Node { kind: NodeKind::Instruction, text: text.into(), full_text: Some(text.into()), function: Some(function), block: 0 }
    }

    fn value(kind: NodeKind, function: Option<u32>) -> Node {
        Node { kind, text: "i32".into(), full_text: Some("i32 %v".into()), function, block: 0 }
    }

    /// Two functions `f` (ids 1-3: br, add, ret; variable 4, constant 5)
    /// and `g` (id 6: ret), every entry recorded: valid.
    fn sample() -> ProgramGraph {
        let mut g = ProgramGraph::new();
        g.modules.push(Module::default());
        for (name, entry) in [("f", 1), ("g", 6)] {
            g.functions.push(Function { name: name.into(), module: 0, entry: Some(entry) });
        }
        let br = g.add_node(inst("br", 0));
        let add = g.add_node(inst("add", 0));
        let ret = g.add_node(inst("ret", 0));
        let v = g.add_node(value(NodeKind::Variable, Some(0)));
        let c = g.add_node(value(NodeKind::Constant, None));
        let other = g.add_node(inst("ret", 1));
        g.add_edge(Flow::Control, 0, br, add);
        g.add_edge(Flow::Control, 0, add, ret);
        g.add_edge(Flow::Data, 0, add, v);
        g.add_edge(Flow::Data, 0, v, ret);
        g.add_edge(Flow::Data, 0, c, add);
        g.add_edge(Flow::Data, 1, c, add);
        g.add_edge(Flow::Call, 0, ProgramGraph::external(), br);
        g.add_edge(Flow::Call, 0, ret, other);
        g
    }

    /// `validate` of `g` fails with exactly one error containing `needle`.
    #[track_caller]
    fn fails_with(g: &ProgramGraph, needle: &str) {
        let errors = g.validate().expect_err("an invalid graph was accepted");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(errors[0].contains(needle), "{errors:#?}");
    }

    #[test]
    fn the_sample_is_valid_and_derivation_agrees() {
        let g = sample();
        assert_eq!(g.validate(), Ok(()));
        assert_eq!(g.derived_entries(), vec![Some(1), Some(6)]);
    }

    #[test]
    fn node_zero_must_be_external() {
        let mut g = sample();
        g.graph[ProgramGraph::external()].text = "ret".into();
        fails_with(&g, "node 0 is not the [external] instruction");
        let mut g = sample();
        g.graph[NodeIndex::new(2)].full_text = None;
        fails_with(&g, "node 2 (add) has no full_text");
    }

    #[test]
    fn functions_and_modules_must_exist() {
        let mut g = sample();
        g.graph[NodeIndex::new(4)].function = Some(7);
        fails_with(&g, "node 4 names function 7 of 2");
        let mut g = sample();
        g.functions[1].module = 3;
        fails_with(&g, "function 1 (g) names module 3 of 1");
    }

    #[test]
    fn control_edges_stay_inside_one_function() {
        let mut g = sample();
        g.add_edge(Flow::Control, 0, NodeIndex::new(3), NodeIndex::new(6));
        fails_with(&g, "control edge 3");
        let mut g = sample();
        g.add_edge(Flow::Control, 0, NodeIndex::new(2), NodeIndex::new(4));
        fails_with(&g, "breaks the schema");
    }

    #[test]
    fn data_edges_follow_the_schema_and_positions() {
        let mut g = sample();
        g.add_edge(Flow::Data, 0, NodeIndex::new(4), NodeIndex::new(5));
        fails_with(&g, "breaks the schema");
        // A second edge into operand 1 of `add`.
        let mut g = sample();
        g.add_edge(Flow::Data, 1, NodeIndex::new(4), NodeIndex::new(2));
        fails_with(&g, "a second edge into operand 1");
        // The same value at two positions is fine.
        let mut g = sample();
        g.add_edge(Flow::Data, 2, NodeIndex::new(5), NodeIndex::new(2));
        assert_eq!(g.validate(), Ok(()));
        let mut g = sample();
        g.add_edge(Flow::Data, 3, NodeIndex::new(1), NodeIndex::new(4));
        fails_with(&g, "definition edge 1 (\"br\") -> 4 has position 3");
        let mut g = sample();
        g.add_edge(Flow::Type, 0, NodeIndex::new(1), NodeIndex::new(2));
        fails_with(&g, "type edge 1");
    }

    #[test]
    fn every_function_with_instructions_has_exactly_one_entry() {
        // A recorded entry that is not the function's.
        let mut g = sample();
        g.functions[1].entry = Some(2);
        fails_with(&g, "function 1 (g) records entry 2, not an instruction of its body");
        // One with a control predecessor.
        let mut g = sample();
        g.functions[0].entry = Some(3);
        fails_with(&g, "records entry 3, which has a control predecessor");
        // A loop back to the entry leaves no candidate at all.
        let mut g = sample();
        g.functions[0].entry = None;
        g.add_edge(Flow::Control, 0, NodeIndex::new(3), NodeIndex::new(1));
        fails_with(&g, "function 0 (f) has instructions but no entry");
        // Two candidates (an unreachable instruction created first): the
        // record must name the one the derivation finds.
        let mut h = ProgramGraph::new();
        h.modules.push(Module::default());
        h.functions.push(Function { name: "f".into(), module: 0, entry: Some(2) });
        let unreachable = h.add_node(inst("unreachable", 0));
        let entry = h.add_node(inst("ret", 0));
        assert_eq!((unreachable.index(), entry.index()), (1, 2));
        fails_with(&h, "records entry 2, but its first instruction without a control predecessor is 1");
        h.functions[0].entry = None;
        assert_eq!(h.validate(), Ok(()));
        assert_eq!(h.entry(0), Some(1));
    }

    #[test]
    fn every_violation_is_reported() {
        let mut g = sample();
        g.graph[ProgramGraph::external()].text = "x".into();
        g.add_edge(Flow::Control, 0, NodeIndex::new(3), NodeIndex::new(6));
        g.add_edge(Flow::Data, 1, NodeIndex::new(4), NodeIndex::new(2));
        assert_eq!(g.validate().unwrap_err().len(), 3);
    }
}
