//! Compact adjacency of a program graph, built once and shared by every
//! analysis and every root (compressed sparse rows, by flow and direction).

use petgraph::visit::EdgeRef;

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
    /// Instruction nodes of each function, ascending; the first is the
    /// function's entry (builders create the entry block's first
    /// instruction before any other).
    pub(super) function_instructions: Vec<Vec<u32>>,
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
            let node = &graph.graph[id];
            if node.kind == NodeKind::Instruction {
                if let Some(f) = node.function.filter(|&f| (f as usize) < function_instructions.len()) {
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

    /// Instruction nodes other than `[external]`, ascending.
    pub fn instructions(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.node_count() as u32).filter(|&n| self.kind(n) == NodeKind::Instruction)
    }

    /// Variable nodes, ascending.
    pub fn variables(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.node_count() as u32).filter(|&n| self.kind(n) == NodeKind::Variable)
    }

    pub fn is_instruction(&self, node: u32) -> bool {
        node != 0 && self.kind(node) == NodeKind::Instruction
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

    /// Orders the instructions reachable from `entry` over control edges in
    /// post-order of a depth-first search (successors in position order).
    pub fn post_order(&self, entry: u32) -> Vec<u32> {
        let mut order = Vec::new();
        let mut seen = vec![false; self.node_count()];
        // (node, index of the next successor to visit)
        let mut stack = vec![(entry, 0usize)];
        seen[entry as usize] = true;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let succ = self.control_succ.of(node);
            if let Some(&(s, _)) = succ.get(*next) {
                *next += 1;
                if !seen[s as usize] {
                    seen[s as usize] = true;
                    stack.push((s, 0));
                }
            } else {
                order.push(node);
                stack.pop();
            }
        }
        order
    }
}
