//! DeepDataFlow: exact classical data flow analyses over program graphs
//! (SPEC.md §2), used to label graphs for training.
//!
//! Each analysis answers, for one *root* node, which nodes are positive and
//! how many steps the classical algorithm needed to reach its fixed point.
//! The analyses run on default-mode (`Mode::Paper`) graphs: one node per
//! value, so data edges are def-use chains.
//!
//! Roots and positives are *body* instructions and variables: never
//! `[external]`, never a `; undefined function` placeholder. Each function's
//! entry instruction is [`ProgramGraph::entries`]: the builder's record in
//! default mode, derived from the graph's structure otherwise.
//!
//! Step counts (SPEC.md §2, revised) measure *depth*: the synchronous rounds
//! a message-passing network needs before every label of the example is
//! final. Reachability and dominance count nodes on a path (rounds + 1),
//! datadep and liveness count edges (rounds), subexpressions is 2.
//!
//! [`FlowGraph`] builds compact adjacency lists once per graph; an
//! [`Analyzer`] caches the per-function results (reachability from the
//! entry, liveness sweeps) that every root of a function shares.
//!
//! **Architecture invariant:** analyses never see LLVM; they read only the
//! graph, so labels can be computed from stored graphs too.

mod datadep;
mod dataflow;
mod dominance;
mod liveness;
mod reachability;
mod subexpressions;

pub use dataflow::FlowGraph;

use std::fmt;

use crate::graph::{NodeKind, ProgramGraph, UNDEFINED_FUNCTION_TEXT};

/// A DeepDataFlow task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Task {
    Reachability,
    Dominance,
    DataDep,
    Liveness,
    Subexpressions,
}

impl Task {
    pub const ALL: [Task; 5] = [Task::Reachability, Task::Dominance, Task::DataDep, Task::Liveness, Task::Subexpressions];

    /// The task's name on the command line and in stored datasets.
    pub fn name(self) -> &'static str {
        match self {
            Task::Reachability => "reachability",
            Task::Dominance => "dominance",
            Task::DataDep => "datadep",
            Task::Liveness => "liveness",
            Task::Subexpressions => "subexpressions",
        }
    }

    pub fn parse(name: &str) -> Option<Task> {
        Task::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The result of one analysis from one root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labels {
    pub task: Task,
    pub root: u32,
    /// Depth of the example in the task's unit (SPEC.md §2; module docs).
    pub steps: u32,
    /// Positive node ids, ascending.
    pub positives: Vec<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnalysisError {
    #[error("node {root} is not in the graph ({nodes} nodes)")]
    NoSuchNode { root: u32, nodes: usize },
    #[error("node {root} cannot be a {task} root: {why}")]
    NotARoot { task: Task, root: u32, why: &'static str },
}

/// Runs the analyses on one graph, caching per-function work across roots.
pub struct Analyzer<'g> {
    flow: FlowGraph<'g>,
    dominance: dominance::Cache,
    liveness: liveness::Cache,
    subexpressions: Option<subexpressions::Classes>,
}

impl<'g> Analyzer<'g> {
    pub fn new(graph: &'g ProgramGraph) -> Analyzer<'g> {
        Analyzer {
            flow: FlowGraph::new(graph),
            dominance: dominance::Cache::default(),
            liveness: liveness::Cache::default(),
            subexpressions: None,
        }
    }

    pub fn flow(&self) -> &FlowGraph<'g> {
        &self.flow
    }

    /// The nodes that may be roots of `task`, ascending (SPEC.md §2:
    /// dominance roots are reachable from their function's entry, liveness
    /// roots have a non-empty live-out set, subexpression roots share their
    /// expression with another instruction).
    pub fn eligible_roots(&mut self, task: Task) -> Vec<u32> {
        match task {
            Task::Reachability => self.flow.instructions().collect(),
            Task::Dominance => {
                let flow = &self.flow;
                flow.instructions().filter(|&n| self.dominance.is_root(flow, n)).collect()
            }
            Task::DataDep => self.flow.variables().collect(),
            Task::Liveness => {
                let flow = &self.flow;
                flow.instructions().filter(|&n| self.liveness.has_live_out(flow, n)).collect()
            }
            Task::Subexpressions => {
                let flow = &self.flow;
                self.subexpressions.get_or_insert_with(|| subexpressions::Classes::new(flow)).shared_roots()
            }
        }
    }

    /// The roots `programl analyze` and `programl dataset build` label:
    /// [`sample_roots`] over the eligible roots, seeded by `seed`, the task
    /// and a fingerprint of the graph (its node texts), so the same graph
    /// gets the same roots wherever it is labelled.
    pub fn sampled_roots(&mut self, task: Task, seed: u64) -> Vec<u32> {
        let eligible = self.eligible_roots(task);
        let seed = mix(seed ^ mix(task as u64 + 1) ^ self.fingerprint());
        let roots = sample_roots(&eligible, self.flow.node_count(), seed);
        self.prepare(task, &roots);
        roots
    }

    /// Announces the roots of `task` about to be analysed. Optional: it lets
    /// liveness answer all of a function's roots with one sweep instead of
    /// one sweep per root. [`Analyzer::sampled_roots`] calls it.
    pub fn prepare(&mut self, task: Task, roots: &[u32]) {
        if task == Task::Liveness {
            self.liveness.expect(roots);
        }
    }

    /// Subexpressions' labels over `roots` against what the graph's node
    /// texts and edges show: `(positives, lookalikes)`, the instructions
    /// that compute each root's expression, and those that differ from it
    /// only where no node text or edge says so (an `icmp`'s predicate, a
    /// `getelementptr`'s source element type, an `extractvalue`'s indices
    /// of the same type, a `shufflevector`'s mask). A model that reads the
    /// graph cannot tell the two apart, so `positives / (positives +
    /// lookalikes)` bounds its precision on these roots
    /// (`programl analyze --task subexpressions --lookalikes`).
    pub fn subexpression_lookalikes(&self, roots: &[u32]) -> (u64, u64) {
        subexpressions::lookalikes(&self.flow, roots)
    }

    /// A hash of the graph's node kinds and texts, in node order.
    fn fingerprint(&self) -> u64 {
        let mut h = crate::hash::Fnv1a::default();
        for n in self.flow.graph().graph.node_weights() {
            h.write(n.text.as_bytes());
            h.write(&[n.kind as u8, 0xff]);
        }
        h.finish()
    }

    /// Runs `task` from `root`.
    pub fn analyze(&mut self, task: Task, root: u32) -> Result<Labels, AnalysisError> {
        let nodes = self.flow.node_count();
        if root as usize >= nodes {
            return Err(AnalysisError::NoSuchNode { root, nodes });
        }
        if root == 0 {
            return Err(AnalysisError::NotARoot { task, root, why: "[external] is never a root" });
        }
        let flow = &self.flow;
        let (steps, positives) = match task {
            Task::Reachability => {
                require_instruction(flow, task, root)?;
                reachability::analyze(flow, root)
            }
            Task::Dominance => {
                require_instruction(flow, task, root)?;
                self.dominance.analyze(flow, root).ok_or(AnalysisError::NotARoot {
                    task,
                    root,
                    why: "it is not reachable from its function's entry",
                })?
            }
            Task::DataDep => {
                if !flow.is_variable(root) {
                    return Err(AnalysisError::NotARoot { task, root, why: "datadep roots are variables" });
                }
                datadep::analyze(flow, root)
            }
            Task::Liveness => {
                require_instruction(flow, task, root)?;
                self.liveness.analyze(flow, root)
            }
            Task::Subexpressions => {
                require_instruction(flow, task, root)?;
                self.subexpressions.get_or_insert_with(|| subexpressions::Classes::new(flow)).analyze(root)
            }
        };
        Ok(Labels { task, root, steps, positives })
    }
}

fn require_instruction(flow: &FlowGraph<'_>, task: Task, root: u32) -> Result<(), AnalysisError> {
    if flow.is_instruction(root) {
        Ok(())
    } else {
        Err(AnalysisError::NotARoot { task, root, why: "this task's roots are instructions of a function body" })
    }
}

/// How many roots to sample from a graph of `nodes` nodes (SPEC.md §2):
/// min(ceil(|V| / 10), 10). This project uses |V|, the paper's rule; upstream
/// used the number of eligible roots instead.
pub fn root_count(nodes: usize) -> usize {
    nodes.div_ceil(10).min(10)
}

/// Picks up to [`root_count`] distinct roots from `eligible`, deterministically
/// for a given `seed`: the eligible nodes ordered by a seeded hash.
pub fn sample_roots(eligible: &[u32], nodes: usize, seed: u64) -> Vec<u32> {
    let n = root_count(nodes).min(eligible.len());
    let mut keyed: Vec<(u64, u32)> = eligible.iter().map(|&r| (mix(seed ^ mix(r as u64 + 1)), r)).collect();
    keyed.sort_unstable();
    let mut roots: Vec<u32> = keyed[..n].iter().map(|&(_, r)| r).collect();
    roots.sort_unstable();
    roots
}

pub use crate::hash::mix;

/// The nodes `task` labels, ascending, given every node's kind and text:
/// variables for liveness, instructions otherwise, never `[external]` (node
/// 0) nor a `; undefined function` placeholder. Training, evaluation and the
/// learned pass's `verify` all count over these nodes.
pub fn labelled_nodes<'t>(task: Task, kinds: &[NodeKind], texts: impl IntoIterator<Item = &'t str>) -> Vec<u32> {
    let want = if task == Task::Liveness { NodeKind::Variable } else { NodeKind::Instruction };
    kinds
        .iter()
        .zip(texts)
        .enumerate()
        .filter(|&(i, (&k, text))| k == want && !(k == NodeKind::Instruction && (i == 0 || text == UNDEFINED_FUNCTION_TEXT)))
        .map(|(i, _)| i as u32)
        .collect()
}
