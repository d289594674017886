//! The model input: program graphs as plain integer arrays, packed into
//! batches (SPEC.md §3).
//!
//! This module is the contract between the trainer and the learned compiler
//! pass: both build the model's input here, so a prediction inside the
//! compiler sees exactly what the model saw in training. [`LAYOUT_VERSION`]
//! names the layout below; a model bundle should record it and refuse any
//! other.
//!
//! # Layout
//!
//! A [`Batch`] is the disjoint union of G ≥ 0 graphs with N nodes in all.
//! Graph `g` owns batch nodes `offsets[g]..offsets[g + 1]`; its node `i` is
//! batch node `offsets[g] + i`. Every array is `i64`:
//!
//! | array | length | value |
//! |---|---|---|
//! | [`tokens`](Batch::tokens) | N | vocabulary id of the node's `text` ([`Vocabulary::id`]; a text not in the vocabulary is [`UNKNOWN_ID`](crate::vocab::UNKNOWN_ID), 0) |
//! | [`selector`](Batch::selector) | N | 1 on each graph's root, 0 elsewhere (all 0 for a graph without root); the model maps 0 to its frozen \[50, 0\] and 1 to \[0, 50\] |
//! | [`labels`](Batch::labels) | N | only if the samples carry labels: 1 on each graph's positives, 0 elsewhere |
//! | [`graph_index`](Batch::graph_index) | N | `g` for the nodes of graph `g` (ascending) |
//! | [`offsets`](Batch::offsets) | G + 1 | `offsets[0] = 0`, `offsets[G] = N` |
//! | [`edges(t)`](Batch::edges): `sources`, `targets`, `positions` | E_t each | edge `k` of type `t` carries a message from node `sources[k]` to node `targets[k]`, gated by position `positions[k]` |
//!
//! The six edge types come in this fixed order ([`EdgeType`] as `usize`):
//!
//! | index | type | edges |
//! |---|---|---|
//! | 0, 1, 2 | control, data, call | the graph's edges of that flow as stored: source → target |
//! | 3, 4, 5 | control, data, call backward | the same edges reversed, target → source, each with its forward edge's position |
//!
//! Backward edge `k` of a flow is forward edge `k` reversed: its `sources`
//! are the very slice the forward type calls `targets` and the other way
//! round, so they always agree and cost nothing. Within a type, edges are
//! listed graph by graph in batch order, and within a graph in the graph's
//! edge order (petgraph's edge index order, which is also the order of the
//! dataset store's edge list). Positions are the raw operand or successor
//! indices of SPEC.md §1, unclamped: clamping to the size of the position
//! gate table (K = 1024 upstream) belongs to the model, which knows K.
//!
//! A single graph, as the compiler pass sees it, is a batch of one: G = 1,
//! `offsets = [0, N]`, `graph_index` all 0.
//!
//! **Why `i64`.** The consumer is libtorch through `tch`: node embeddings,
//! `index_select` over sources, `index_add_` into targets and cross-entropy
//! targets all take `Int64` indices, and `Tensor::from_slice(&[i64])` is one
//! `memcpy`. `u32` is not a `tch` element kind at all, so it would need a
//! conversion pass over every array of every batch; `i64` costs twice the
//! memory of `u32` on arrays that a 10,000-node batch keeps under a few
//! megabytes.
//!
//! **Type edges.** [`Flow::Type`] is reserved (SPEC.md §1): no builder makes
//! it and the model has no weights for it. A graph holding one is rejected
//! with [`InputError::TypeEdge`], never silently trimmed, so trainer and
//! pass fail alike instead of seeing different graphs. (A node of kind
//! [`NodeKind::Type`](crate::graph::NodeKind::Type) would be an ordinary
//! node: only its text matters.) Node kinds, printed IR, functions and
//! blocks are not model input.
//!
//! # Building a batch
//!
//! [`GraphInput`] encodes one graph (tokens and forward edges) once; every
//! example of that graph shares it. A [`Sample`] adds the example's root and,
//! for training, its positives. [`Batcher`] packs samples into batches of at
//! most `max_nodes` nodes, greedily and in the order given: a sample joins
//! the current batch if the sum stays within `max_nodes`, else it starts the
//! next one; a graph larger than `max_nodes` therefore sits alone in its
//! batch. [`plan`] applies the same rule to bare sizes.
//!
//! # Shuffling
//!
//! [`permutation`]`(n, seed)` is a Fisher–Yates shuffle of `0..n` driven by
//! [`SplitMix64`] with Lemire's unbiased bounded integers: the same on every
//! platform and every version of this crate, and free of any third-party
//! generator whose algorithm could change under a version bump. Its values
//! are pinned by tests and must never change.
//!
//! ```
//! use programl::batch::{permutation, Batcher, GraphInput, Sample};
//! use programl::{vocab::Vocabulary, ProgramGraph};
//!
//! let vocab = Vocabulary::from_counts(&Default::default(), 1, None);
//! let graphs = vec![ProgramGraph::new(); 5];
//! let inputs: Vec<GraphInput> = graphs.iter().map(|g| GraphInput::new(g, &vocab).unwrap()).collect();
//! let mut batcher = Batcher::new(2);
//! let mut batches = Vec::new();
//! for i in permutation(inputs.len(), 7) {
//!     let sample = Sample { graph: &inputs[i], root: Some(0), positives: None };
//!     batches.extend(batcher.push(sample).unwrap());
//! }
//! batches.extend(batcher.finish());
//! assert_eq!(batches.iter().map(|b| b.graph_count()).collect::<Vec<_>>(), [2, 2, 1]);
//! assert_eq!(batches[0].offsets(), [0, 1, 2]);
//! assert_eq!(batches[0].selector(), [1, 1]);
//! ```

use std::ops::Range;

use petgraph::visit::EdgeRef;

use crate::graph::{Edge, Flow, ProgramGraph};
use crate::hash::mix;
use crate::vocab::Vocabulary;

/// The version of the layout in the module docs. Any change to what the
/// arrays hold or how they are ordered bumps it.
pub const LAYOUT_VERSION: u32 = 1;

/// The six edge types of the model, in the order of its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeType {
    Control = 0,
    Data = 1,
    Call = 2,
    ControlBackward = 3,
    DataBackward = 4,
    CallBackward = 5,
}

impl EdgeType {
    /// Every edge type, in order (`ALL[i] as usize == i`).
    pub const ALL: [EdgeType; 6] =
        [EdgeType::Control, EdgeType::Data, EdgeType::Call, EdgeType::ControlBackward, EdgeType::DataBackward, EdgeType::CallBackward];

    /// The flow whose edges this type carries.
    pub fn flow(self) -> Flow {
        FLOWS[self as usize % 3]
    }

    /// Whether edges of this type run target → source.
    pub fn is_backward(self) -> bool {
        self as usize >= 3
    }

    /// `control`, …, `call-backward`.
    pub fn name(self) -> &'static str {
        ["control", "data", "call", "control-backward", "data-backward", "call-backward"][self as usize]
    }
}

/// The flows of the forward edge types, in order.
const FLOWS: [Flow; 3] = [Flow::Control, Flow::Data, Flow::Call];

/// Why a graph or sample cannot be model input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// The graph has a [`Flow::Type`] edge, which the model has no weights
    /// for.
    #[error("edge {edge} is a type edge; the model has no type edges")]
    TypeEdge {
        /// The edge's index in the graph's edge order.
        edge: usize,
    },
    /// An edge names a node the graph does not have.
    #[error("edge {edge} ({from} -> {to}) leaves the graph of {nodes} nodes")]
    EdgeOutOfRange { edge: usize, from: u32, to: u32, nodes: usize },
    /// The root is not a node of the graph.
    #[error("root {root} is not a node of the graph ({nodes} nodes)")]
    RootOutOfRange { root: u32, nodes: usize },
    /// A positive is not a node of the graph.
    #[error("positive {node} is not a node of the graph ({nodes} nodes)")]
    PositiveOutOfRange { node: u32, nodes: usize },
    /// A batch would hold samples with and without labels.
    #[error("a batch cannot mix labelled and unlabelled samples")]
    MixedLabels,
}

/// The edges of one edge type as parallel arrays: edge `k` runs from
/// `sources[k]` to `targets[k]` with position `positions[k]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeArrays<'a> {
    pub sources: &'a [i64],
    pub targets: &'a [i64],
    pub positions: &'a [i64],
}

impl EdgeArrays<'_> {
    /// Number of edges.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
}

/// The forward edges of one flow; the backward type is a view of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct FlowEdges {
    sources: Vec<i64>,
    targets: Vec<i64>,
    positions: Vec<i64>,
}

impl FlowEdges {
    fn arrays(&self, backward: bool) -> EdgeArrays<'_> {
        let (sources, targets) = if backward { (&self.targets, &self.sources) } else { (&self.sources, &self.targets) };
        EdgeArrays { sources, targets, positions: &self.positions }
    }

    /// Appends `other`'s edges with their endpoints shifted by `offset`.
    fn extend_shifted(&mut self, other: &FlowEdges, offset: i64) {
        self.sources.extend(other.sources.iter().map(|s| s + offset));
        self.targets.extend(other.targets.iter().map(|t| t + offset));
        self.positions.extend_from_slice(&other.positions);
    }
}

/// One graph encoded for the model: its tokens and forward edges. Built once
/// per graph and shared by all its examples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphInput {
    tokens: Vec<i64>,
    /// Indexed by [`Flow`] as `usize` (control, data, call).
    edges: [FlowEdges; 3],
}

impl GraphInput {
    /// Encodes `graph`: node `i`'s text looked up in `vocab`, edges in the
    /// graph's edge order. Fails only on a [`Flow::Type`] edge.
    pub fn new(graph: &ProgramGraph, vocab: &Vocabulary) -> Result<GraphInput, InputError> {
        GraphInput::from_parts(
            graph.graph.node_weights().map(|n| n.text.as_str()),
            graph.graph.edge_references().map(|e| (e.source().index() as u32, e.target().index() as u32, *e.weight())),
            vocab,
        )
    }

    /// Encodes a graph given as node texts (node `i` is the `i`-th) and
    /// edges `(source, target, edge)` in the graph's edge order, e.g. the
    /// dataset store's compact graphs, without building a [`ProgramGraph`].
    /// Gives what [`GraphInput::new`] gives for the same graph.
    pub fn from_parts<'t>(
        texts: impl IntoIterator<Item = &'t str>,
        edges: impl IntoIterator<Item = (u32, u32, Edge)>,
        vocab: &Vocabulary,
    ) -> Result<GraphInput, InputError> {
        let tokens: Vec<i64> = texts.into_iter().map(|t| i64::from(vocab.id(t))).collect();
        let nodes = tokens.len();
        let mut out = GraphInput { tokens, edges: Default::default() };
        for (k, (from, to, edge)) in edges.into_iter().enumerate() {
            let Some(slot) = FLOWS.iter().position(|&f| f == edge.flow) else { return Err(InputError::TypeEdge { edge: k }) };
            if from as usize >= nodes || to as usize >= nodes {
                return Err(InputError::EdgeOutOfRange { edge: k, from, to, nodes });
            }
            let e = &mut out.edges[slot];
            e.sources.push(from.into());
            e.targets.push(to.into());
            e.positions.push(edge.position.into());
        }
        Ok(out)
    }

    pub fn node_count(&self) -> usize {
        self.tokens.len()
    }

    /// Number of graph edges (each gives one forward and one backward edge).
    pub fn edge_count(&self) -> usize {
        self.edges.iter().map(|e| e.positions.len()).sum()
    }

    /// Vocabulary id of each node.
    pub fn tokens(&self) -> &[i64] {
        &self.tokens
    }

    /// The edges of type `t`.
    pub fn edges(&self, t: EdgeType) -> EdgeArrays<'_> {
        self.edges[t as usize % 3].arrays(t.is_backward())
    }
}

/// One example: a graph, its root if the task has one, and its positive
/// nodes if it is labelled (every other node is negative).
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    pub graph: &'a GraphInput,
    pub root: Option<u32>,
    pub positives: Option<&'a [u32]>,
}

impl Sample<'_> {
    fn check(&self) -> Result<(), InputError> {
        let nodes = self.graph.node_count();
        if let Some(root) = self.root.filter(|&r| r as usize >= nodes) {
            return Err(InputError::RootOutOfRange { root, nodes });
        }
        match self.positives.into_iter().flatten().find(|&&p| p as usize >= nodes) {
            Some(&node) => Err(InputError::PositiveOutOfRange { node, nodes }),
            None => Ok(()),
        }
    }
}

/// The model input of one or more graphs (layout: module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    tokens: Vec<i64>,
    selector: Vec<i64>,
    /// `Some` iff the samples are labelled (decided by the first one).
    labels: Option<Vec<i64>>,
    graph_index: Vec<i64>,
    offsets: Vec<i64>,
    edges: [FlowEdges; 3],
}

impl Default for Batch {
    fn default() -> Batch {
        Batch::new()
    }
}

impl Batch {
    /// An empty batch (no graph, `offsets = [0]`).
    pub fn new() -> Batch {
        Batch {
            tokens: Vec::new(),
            selector: Vec::new(),
            labels: None,
            graph_index: Vec::new(),
            offsets: vec![0],
            edges: Default::default(),
        }
    }

    /// The batch of `samples`, in order, whatever their size.
    pub fn from_samples(samples: &[Sample<'_>]) -> Result<Batch, InputError> {
        let mut b = Batch::new();
        for &s in samples {
            b.push(s)?;
        }
        Ok(b)
    }

    /// Appends `sample` as the next graph. On error the batch is unchanged.
    pub fn push(&mut self, sample: Sample<'_>) -> Result<(), InputError> {
        sample.check()?;
        if self.graph_count() > 0 && self.labels.is_some() != sample.positives.is_some() {
            return Err(InputError::MixedLabels);
        }
        let g = sample.graph;
        let (start, end) = (self.node_count(), self.node_count() + g.node_count());
        let index = self.graph_count() as i64;
        self.tokens.extend_from_slice(&g.tokens);
        self.selector.resize(end, 0);
        if let Some(root) = sample.root {
            self.selector[start + root as usize] = 1;
        }
        if let Some(positives) = sample.positives {
            let labels = self.labels.get_or_insert_with(Vec::new);
            labels.resize(end, 0);
            for &p in positives {
                labels[start + p as usize] = 1;
            }
        }
        self.graph_index.resize(end, index);
        self.offsets.push(end as i64);
        for (mine, theirs) in self.edges.iter_mut().zip(&g.edges) {
            mine.extend_shifted(theirs, start as i64);
        }
        Ok(())
    }

    /// G, the number of graphs.
    pub fn graph_count(&self) -> usize {
        self.offsets.len() - 1
    }

    /// N, the number of nodes.
    pub fn node_count(&self) -> usize {
        self.tokens.len()
    }

    /// The batch nodes of graph `g`.
    pub fn graph_nodes(&self, g: usize) -> Range<usize> {
        self.offsets[g] as usize..self.offsets[g + 1] as usize
    }

    /// Vocabulary id of each node.
    pub fn tokens(&self) -> &[i64] {
        &self.tokens
    }

    /// 1 on each graph's root, 0 elsewhere.
    pub fn selector(&self) -> &[i64] {
        &self.selector
    }

    /// 1 on each graph's positives, 0 elsewhere; `None` if the samples are
    /// unlabelled.
    pub fn labels(&self) -> Option<&[i64]> {
        self.labels.as_deref()
    }

    /// The graph of each node.
    pub fn graph_index(&self) -> &[i64] {
        &self.graph_index
    }

    /// Node offsets of the graphs (G + 1 entries).
    pub fn offsets(&self) -> &[i64] {
        &self.offsets
    }

    /// The edges of type `t`.
    pub fn edges(&self, t: EdgeType) -> EdgeArrays<'_> {
        self.edges[t as usize % 3].arrays(t.is_backward())
    }
}

/// Why raw arrays are not a [`Batch`] ([`Batch::from_arrays`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a model input batch: {0}")]
pub struct LayoutError(pub String);

impl Batch {
    /// The unlabelled batch whose arrays these are, as [`Batch::tokens`],
    /// [`Batch::selector`], [`Batch::offsets`] and the forward edge types
    /// ([`Batch::edges`] of control, data and call) give them.
    ///
    /// This is how a batch crosses a boundary that only passes arrays (the
    /// learned pass hands its batches to the model runtime through a C ABI):
    /// the receiver gets back exactly the batch that was built with
    /// [`Batch::push`], and anything else is refused. Checked: matching
    /// lengths, offsets ascending from 0 to N, non-negative tokens and
    /// positions, at most one root per graph (selector 0 or 1), every edge
    /// inside one graph, and each edge type listed graph by graph in batch
    /// order.
    pub fn from_arrays(tokens: &[i64], selector: &[i64], offsets: &[i64], edges: [EdgeArrays<'_>; 3]) -> Result<Batch, LayoutError> {
        let bad = |detail: String| Err(LayoutError(detail));
        let n = tokens.len();
        if selector.len() != n {
            return bad(format!("{} selector entries for {n} nodes", selector.len()));
        }
        if offsets.first() != Some(&0) || offsets.last() != Some(&(n as i64)) || offsets.windows(2).any(|w| w[0] > w[1]) {
            return bad(format!("offsets must ascend from 0 to the node count {n}"));
        }
        if let Some(t) = tokens.iter().find(|&&t| t < 0 || t > i64::from(u32::MAX)) {
            return bad(format!("token {t} is not a vocabulary id"));
        }
        let graphs = offsets.len() - 1;
        let mut graph_index = Vec::with_capacity(n);
        for g in 0..graphs {
            let nodes = offsets[g] as usize..offsets[g + 1] as usize;
            let roots = selector[nodes.clone()].iter().filter(|&&s| s != 0).count();
            if selector[nodes.clone()].iter().any(|&s| s != 0 && s != 1) || roots > 1 {
                return bad(format!("graph {g}: the selector must hold at most one 1 and 0 elsewhere"));
            }
            graph_index.resize(nodes.end, g as i64);
        }
        let mut flows: [FlowEdges; 3] = Default::default();
        for (flow, (e, out)) in edges.iter().zip(flows.iter_mut()).enumerate() {
            let name = EdgeType::ALL[flow].name();
            if e.sources.len() != e.len() || e.targets.len() != e.len() {
                return bad(format!("{name} edges: sources, targets and positions differ in length"));
            }
            let mut last_graph = 0;
            for k in 0..e.len() {
                let (s, t, p) = (e.sources[k], e.targets[k], e.positions[k]);
                if s < 0 || t < 0 || s as usize >= n || t as usize >= n {
                    return bad(format!("{name} edge {k} ({s} -> {t}) leaves the batch of {n} nodes"));
                }
                if p < 0 || p > i64::from(u32::MAX) {
                    return bad(format!("{name} edge {k} has position {p}"));
                }
                let g = graph_index[s as usize];
                if graph_index[t as usize] != g {
                    return bad(format!("{name} edge {k} ({s} -> {t}) joins two graphs"));
                }
                if g < last_graph {
                    return bad(format!("{name} edge {k} is out of batch order"));
                }
                last_graph = g;
            }
            *out = FlowEdges { sources: e.sources.to_vec(), targets: e.targets.to_vec(), positions: e.positions.to_vec() };
        }
        Ok(Batch {
            tokens: tokens.to_vec(),
            selector: selector.to_vec(),
            labels: None,
            graph_index,
            offsets: offsets.to_vec(),
            edges: flows,
        })
    }
}

/// Whether a graph of `size` nodes joins a batch of `graphs` graphs and
/// `nodes` nodes: the one packing rule of [`Batcher`] and [`plan`].
fn fits(graphs: usize, nodes: usize, size: usize, max_nodes: usize) -> bool {
    graphs == 0 || nodes + size <= max_nodes
}

/// Packs a stream of samples into batches of at most `max_nodes` nodes, in
/// order (module docs). Memory is one batch.
#[derive(Clone, Debug)]
pub struct Batcher {
    max_nodes: usize,
    current: Batch,
}

impl Batcher {
    pub fn new(max_nodes: usize) -> Batcher {
        Batcher { max_nodes, current: Batch::new() }
    }

    /// Adds `sample`; returns the batch it closed, if it did not fit there.
    /// On error nothing changes.
    pub fn push(&mut self, sample: Sample<'_>) -> Result<Option<Batch>, InputError> {
        let c = &self.current;
        if fits(c.graph_count(), c.node_count(), sample.graph.node_count(), self.max_nodes) {
            return self.current.push(sample).map(|()| None);
        }
        let mut next = Batch::new();
        next.push(sample)?;
        Ok(Some(std::mem::replace(&mut self.current, next)))
    }

    /// The last batch, unless empty.
    pub fn finish(self) -> Option<Batch> {
        (self.current.graph_count() > 0).then_some(self.current)
    }
}

/// The batches [`Batcher`] makes of graphs of these node counts, as ranges of
/// indices into `sizes`: consecutive, in order, covering every index once.
pub fn plan(sizes: impl IntoIterator<Item = usize>, max_nodes: usize) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut end, mut nodes) = (0, 0, 0);
    for size in sizes {
        if !fits(end - start, nodes, size, max_nodes) {
            batches.push(start..end);
            (start, nodes) = (end, 0);
        }
        nodes += size;
        end += 1;
    }
    if end > start {
        batches.push(start..end);
    }
    batches
}

/// SplitMix64 (Steele, Lea and Flood, 2014), the generator behind
/// [`permutation`]: output `k` (from 0) is [`mix`]`(seed + k · 0x9E3779B97F4A7C15)`
/// (wrapping), i.e. the reference `splitmix64.c` seeded with `seed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        let x = mix(self.state);
        self.state = self.state.wrapping_add(Self::GAMMA);
        x
    }

    /// A uniform integer in `0..bound` by Lemire's multiply-and-reject
    /// ("Fast random integer generation in an interval", 2019): the high
    /// word of `x · bound`, drawing again while the low word is below
    /// `2^64 mod bound`. Panics if `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "SplitMix64::below(0)");
        let mut m = u128::from(self.next_u64()) * u128::from(bound);
        if (m as u64) < bound {
            let threshold = bound.wrapping_neg() % bound;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(bound);
            }
        }
        (m >> 64) as u64
    }
}

/// A permutation of `0..n` determined by `seed`: Durstenfeld's Fisher–Yates
/// on the identity, for `i` from `n - 1` down to 1 swapping element `i` with
/// element [`SplitMix64::below`]`(i + 1)` of one generator seeded with
/// `seed`. Stable across platforms and versions (pinned by tests).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..n).rev() {
        p.swap(i, rng.below(i as u64 + 1) as usize);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_reference_outputs() {
        // splitmix64.c seeded with 1234567 (the published test vector).
        let mut r = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(got, [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431, 16408922859458223821]);
    }

    #[test]
    fn permutation_values_are_pinned() {
        assert_eq!(permutation(0, 1), Vec::<usize>::new());
        assert_eq!(permutation(1, 1), [0]);
        assert_eq!(permutation(10, 0), PINNED_0);
        assert_eq!(permutation(10, 42), PINNED_42);
        let mut r = SplitMix64::new(9);
        assert!((0..1000).all(|_| r.below(3) < 3));
        assert_eq!(SplitMix64::new(5).below(1), 0);
    }

    // Computed by an independent implementation (Python) of the documented
    // algorithm.
    const PINNED_0: [usize; 10] = [4, 9, 2, 5, 1, 7, 6, 0, 3, 8];
    const PINNED_42: [usize; 10] = [8, 3, 6, 5, 4, 0, 9, 2, 1, 7];

    #[test]
    fn plan_packs_greedily_in_order() {
        assert_eq!(plan([3, 4, 3, 11, 2, 2, 0, 8], 10), [0..3, 3..4, 4..7, 7..8]);
        assert_eq!(plan([5, 5, 5], 10), [0..2, 2..3]);
        assert_eq!(plan([12, 1], 10), [0..1, 1..2]);
        assert_eq!(plan([], 10), Vec::<Range<usize>>::new());
        assert_eq!(plan([1, 1], 0), [0..1, 1..2]);
    }

    fn forward(b: &Batch) -> [EdgeArrays<'_>; 3] {
        [b.edges(EdgeType::Control), b.edges(EdgeType::Data), b.edges(EdgeType::Call)]
    }

    #[test]
    fn from_arrays_gives_back_the_batch_and_refuses_the_rest() {
        let edge = |flow, position| crate::graph::Edge { flow, position };
        let vocab = Vocabulary::from_counts(&Default::default(), 1, None);
        let a = GraphInput::from_parts(["x", "y", "z"], [(0, 1, edge(Flow::Control, 0)), (1, 2, edge(Flow::Data, 3))], &vocab).unwrap();
        let b = GraphInput::from_parts(["u", "v"], [(1, 0, edge(Flow::Call, 0)), (0, 1, edge(Flow::Data, 1))], &vocab).unwrap();
        let batch = Batch::from_samples(&[
            Sample { graph: &a, root: Some(2), positives: None },
            Sample { graph: &b, root: None, positives: None },
            Sample { graph: &a, root: Some(0), positives: None },
        ])
        .unwrap();
        let again = Batch::from_arrays(batch.tokens(), batch.selector(), batch.offsets(), forward(&batch)).unwrap();
        assert_eq!(again, batch);
        assert_eq!(Batch::from_arrays(&[], &[], &[0], forward(&Batch::new())).unwrap(), Batch::new());

        let refused = |tokens: &[i64], selector: &[i64], offsets: &[i64], edges: [EdgeArrays<'_>; 3], why: &str| {
            let e = Batch::from_arrays(tokens, selector, offsets, edges).unwrap_err();
            assert!(e.0.contains(why), "{e} should say {why}");
        };
        let (t, s, o) = (batch.tokens(), batch.selector(), batch.offsets());
        refused(t, &s[1..], o, forward(&batch), "selector entries");
        refused(t, s, &[0, 3, 5], forward(&batch), "offsets");
        refused(t, s, &[0, 5, 3, 8], forward(&batch), "offsets");
        refused(&[-1, 0, 0, 0, 0, 0, 0, 0], s, o, forward(&batch), "token -1");
        refused(t, &[1, 1, 0, 0, 0, 0, 0, 0], o, forward(&batch), "graph 0");
        let mut edges = forward(&batch);
        edges[1] = EdgeArrays { sources: &[2], targets: &[3], positions: &[0] };
        refused(t, s, o, edges, "joins two graphs");
        edges[1] = EdgeArrays { sources: &[6, 1], targets: &[7, 2], positions: &[0, 0] };
        refused(t, s, o, edges, "out of batch order");
        edges[1] = EdgeArrays { sources: &[9], targets: &[0], positions: &[0] };
        refused(t, s, o, edges, "leaves the batch");
        edges[1] = EdgeArrays { sources: &[0], targets: &[1], positions: &[-2] };
        refused(t, s, o, edges, "position -2");
        edges[1] = EdgeArrays { sources: &[0, 1], targets: &[1], positions: &[0, 0] };
        refused(t, s, o, edges, "differ in length");
    }

    #[test]
    fn edge_types_in_model_order() {
        for (i, t) in EdgeType::ALL.into_iter().enumerate() {
            assert_eq!(t as usize, i);
            assert_eq!(t.flow(), FLOWS[i % 3]);
            assert_eq!(t.is_backward(), i >= 3);
        }
        assert_eq!(EdgeType::DataBackward.name(), "data-backward");
    }
}
