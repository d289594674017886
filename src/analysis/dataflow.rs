//! Compact adjacency of a program graph, built once and shared by every
//! analysis and every root (compressed sparse rows, by flow and direction).

use std::collections::VecDeque;

use petgraph::visit::EdgeRef;
use rustc_hash::FxHashMap;

use crate::graph::{Flow, NodeKind, ProgramGraph};

/// Adjacency lists in compressed sparse row form.
#[derive(Clone, Debug, Default)]
pub(super) struct Csr {
    offsets: Vec<u32>,
    /// (neighbour, edge position)
    items: Vec<(u32, u32)>,
}

impl Csr {
    fn build(n: usize, mut pairs: Vec<(u32, u32, u32)>) -> Csr {
        // (from, to, position), stably ordered by `from`, then position.
        pairs.sort_by_key(|&(from, _, pos)| (from, pos));
        let mut offsets = vec![0u32; n + 1];
        for &(from, _, _) in &pairs {
            offsets[from as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        Csr { offsets, items: pairs.into_iter().map(|(_, to, pos)| (to, pos)).collect() }
    }

    pub(super) fn of(&self, node: u32) -> &[(u32, u32)] {
        &self.items[self.offsets[node as usize] as usize..self.offsets[node as usize + 1] as usize]
    }

    pub(super) fn nodes(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        self.of(node).iter().map(|&(n, _)| n)
    }
}

/// A program graph's adjacency by flow, and its nodes by function.
pub struct FlowGraph<'g> {
    pub(super) graph: &'g ProgramGraph,
    pub(super) control_succ: Csr,
    pub(super) control_pred: Csr,
    pub(super) data_succ: Csr,
    pub(super) data_pred: Csr,
    /// Body instructions of each function, ascending (no `[external]`, no
    /// `; undefined function` placeholder).
    pub(super) function_instructions: Vec<Vec<u32>>,
    /// Each function's entry instruction ([`ProgramGraph::entries`]: the
    /// builder's record, else derived from the graph's structure).
    pub(super) entries: Vec<Option<u32>>,
}

impl<'g> FlowGraph<'g> {
    pub fn new(graph: &'g ProgramGraph) -> FlowGraph<'g> {
        let n = graph.node_count();
        let (mut cs, mut cp, mut ds, mut dp) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for e in graph.graph.edge_references() {
            let (s, t, pos) = (e.source().index() as u32, e.target().index() as u32, e.weight().position);
            match e.weight().flow {
                Flow::Control => {
                    cs.push((s, t, pos));
                    cp.push((t, s, pos));
                }
                Flow::Data => {
                    ds.push((s, t, pos));
                    dp.push((t, s, pos));
                }
                Flow::Call | Flow::Type => {}
            }
        }
        let mut function_instructions = vec![Vec::new(); graph.functions.len()];
        for id in graph.graph.node_indices() {
            if graph.is_body_instruction(id.index() as u32) {
                if let Some(f) = graph.graph[id].function.filter(|&f| (f as usize) < function_instructions.len()) {
                    function_instructions[f as usize].push(id.index() as u32);
                }
            }
        }
        FlowGraph {
            graph,
            control_succ: Csr::build(n, cs),
            control_pred: Csr::build(n, cp),
            data_succ: Csr::build(n, ds),
            data_pred: Csr::build(n, dp),
            function_instructions,
            entries: graph.entries(),
        }
    }

    pub fn graph(&self) -> &'g ProgramGraph {
        self.graph
    }

    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    pub(super) fn kind(&self, node: u32) -> NodeKind {
        self.graph.graph[petgraph::graph::NodeIndex::new(node as usize)].kind
    }

    pub(super) fn node(&self, node: u32) -> &'g crate::graph::Node {
        &self.graph.graph[petgraph::graph::NodeIndex::new(node as usize)]
    }

    /// Body instructions (never `[external]` nor a `; undefined function`
    /// placeholder), ascending: the nodes that may be roots or positives.
    pub fn instructions(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.node_count() as u32).filter(|&n| self.graph.is_body_instruction(n))
    }

    /// Variable nodes, ascending.
    pub fn variables(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.node_count() as u32).filter(|&n| self.kind(n) == NodeKind::Variable)
    }

    /// Whether `node` is a body instruction (see [`FlowGraph::instructions`]).
    pub fn is_instruction(&self, node: u32) -> bool {
        self.graph.is_body_instruction(node)
    }

    /// The entry instruction of a function.
    pub fn entry(&self, function: u32) -> Option<u32> {
        self.entries.get(function as usize).copied().flatten()
    }

    pub fn is_variable(&self, node: u32) -> bool {
        self.kind(node) == NodeKind::Variable
    }

    /// The function of a node, if any.
    pub(super) fn function(&self, node: u32) -> Option<u32> {
        self.node(node).function
    }

    /// Control successors of an instruction.
    pub fn successors(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        self.control_succ.nodes(node)
    }

    /// Control predecessors of an instruction.
    pub fn predecessors(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        self.control_pred.nodes(node)
    }

    /// Breadth-first search over control edges from `start`, never entering
    /// `avoid`: calls `visit(node, depth)` once per node reached, in BFS
    /// order, `start` at depth 1. Returns the largest depth, i.e. the
    /// number of nodes on the longest shortest path (synchronous rounds + 1);
    /// 0 if `start` is `avoid`.
    pub(super) fn control_bfs(&self, start: u32, avoid: Option<u32>, mut visit: impl FnMut(u32, u32)) -> u32 {
        if Some(start) == avoid {
            return 0;
        }
        let mut depth: FxHashMap<u32, u32> = FxHashMap::default();
        depth.insert(start, 1);
        let mut queue = VecDeque::from([start]);
        let mut deepest = 0;
        while let Some(n) = queue.pop_front() {
            let d = depth[&n];
            deepest = deepest.max(d);
            visit(n, d);
            for s in self.successors(n) {
                if Some(s) != avoid {
                    if let std::collections::hash_map::Entry::Vacant(e) = depth.entry(s) {
                        e.insert(d + 1);
                        queue.push_back(s);
                    }
                }
            }
        }
        deepest
    }
}
