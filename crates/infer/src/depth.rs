//! How many message-passing steps a batch runs: a fixed T, or adaptive
//! depth (`hyper.stop`), where each graph stops at the first step that
//! moves none of its state entries by more than the tolerance.
//!
//! Every step loop (the 34-wide kernels at FP32, BF16 and INT8, and the
//! general step of [`crate::wide`]) keeps one [`Settle`] and calls
//! [`Settle::after_step`] once the step's new states are written. A graph
//! that has converged keeps its states from then on while the other graphs
//! of the batch go on, so a graph's result and step count are those of the
//! same graph alone, and those of a fixed run of that many steps.
//!
//! The 34-wide loops compute every node of their batch at every step (the
//! graphs' rows are interleaved in the products' row groups), so a graph
//! done early would cost as much as one still running. Their [`Settle`]
//! is made by [`Settle::compacting`]: once the graphs done hold a quarter
//! of the batch's nodes it stops the loop, and the caller
//! ([`crate::model`]) continues with the graphs still running alone, from
//! their states, the steps counted on from where they were.

use std::ops::Range;

use crate::config::Stop;

/// How many steps: a fixed number, or until each graph converges.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Depth<'a> {
    Fixed(usize),
    Adaptive(&'a Stop),
}

impl Depth<'_> {
    /// The most steps any graph may run.
    pub fn cap(&self) -> usize {
        match self {
            Depth::Fixed(steps) => *steps,
            Depth::Adaptive(stop) => stop.max_steps.max(0) as usize,
        }
    }
}

/// The graphs' progress through the steps of one batch.
pub(crate) struct Settle<'a> {
    /// The graphs' node offsets, `graphs[g]..graphs[g + 1]`.
    graphs: &'a [usize],
    tolerance: Option<f64>,
    done: Vec<bool>,
    ran: Vec<i64>,
    /// Steps the graphs ran before this batch's first (a compacted batch
    /// continues its graphs' runs).
    base: usize,
    /// Whether to stop the loop once the graphs done hold [`COMPACT`] of
    /// the nodes, for the caller to compact the batch.
    compact: bool,
    /// Nodes of the graphs done.
    done_nodes: usize,
}

/// The share of a batch's nodes in graphs done (at least) at which a
/// compacting loop stops for the batch to be compacted: a quarter.
const COMPACT: (usize, usize) = (1, 4);

impl<'a> Settle<'a> {
    pub fn new(graphs: &'a [usize], depth: Depth<'_>) -> Settle<'a> {
        let count = graphs.len().saturating_sub(1);
        let tolerance = match depth {
            Depth::Fixed(_) => None,
            Depth::Adaptive(stop) => Some(stop.tolerance),
        };
        Settle { graphs, tolerance, done: vec![false; count], ran: vec![0; count], base: 0, compact: false, done_nodes: 0 }
    }

    /// A [`Settle`] whose graphs have run `base` steps already, and which
    /// stops its loop (`after_step` is true) once the graphs done hold a
    /// quarter of the nodes, with a stopping rule; at a fixed T, as
    /// [`Settle::new`].
    pub fn compacting(graphs: &'a [usize], depth: Depth<'_>, base: usize) -> Settle<'a> {
        let mut settle = Settle::new(graphs, depth);
        settle.base = base;
        settle.compact = settle.tolerance.is_some();
        settle
    }

    /// Whether every graph is done.
    pub fn all_done(&self) -> bool {
        !self.done.is_empty() && self.done.iter().all(|&d| d)
    }

    /// Which graphs have converged (none at a fixed T).
    pub fn done(&self) -> &[bool] {
        &self.done
    }

    /// After step `step` (from 0): each graph still running has run
    /// `step + 1` steps; with a stopping rule, `visit(nodes, false)` returns
    /// how far the graph's states moved in this step (the largest absolute
    /// change of an entry), and a graph that moved no more than the
    /// tolerance is done. Each graph done at an earlier step is
    /// `visit(nodes, true)`: the loop puts its previous states back in the
    /// new buffer. True when the loop stops: every graph is done, or (a
    /// compacting `Settle`) the graphs done hold a quarter of the nodes.
    pub fn after_step(&mut self, step: usize, mut visit: impl FnMut(Range<usize>, bool) -> f32) -> bool {
        for g in 0..self.done.len() {
            let nodes = self.graphs[g]..self.graphs[g + 1];
            if self.done[g] {
                visit(nodes, true);
                continue;
            }
            self.ran[g] = (self.base + step) as i64 + 1;
            if let Some(tolerance) = self.tolerance {
                let len = nodes.len();
                self.done[g] = visit(nodes, false) as f64 <= tolerance;
                self.done_nodes += if self.done[g] { len } else { 0 };
            }
        }
        let total = self.graphs.last().copied().unwrap_or(0) - self.graphs.first().copied().unwrap_or(0);
        self.all_done() || (self.compact && self.done_nodes > 0 && self.done_nodes * COMPACT.1 >= total * COMPACT.0)
    }

    /// [`Settle::after_step`] for states row-major, `width` per node: a
    /// graph done earlier gets its rows of `cur` back in `next`; the
    /// others' movement is measured between the two.
    pub fn after_step_rows(&mut self, step: usize, width: usize, cur: &[f32], next: &mut [f32]) -> bool {
        self.after_step(step, |nodes, frozen| {
            let rows = nodes.start * width..nodes.end * width;
            if frozen {
                next[rows.clone()].copy_from_slice(&cur[rows]);
                return 0.0;
            }
            moved(&next[rows.clone()], &cur[rows])
        })
    }

    /// The steps each graph ran (from the first of all, `base` included).
    pub fn ran(self) -> Vec<i64> {
        self.ran
    }
}

/// The graphs of a batch that [`Settle::compacting`] stopped, to go on
/// with alone: the indices of those not done.
pub(crate) fn running(done: &[bool]) -> Vec<usize> {
    done.iter().enumerate().filter(|(_, &d)| !d).map(|(g, _)| g).collect()
}

/// The largest absolute difference between two equally long slices.
pub(crate) fn moved(next: &[f32], cur: &[f32]) -> f32 {
    next.iter().zip(cur).fold(0f32, |m, (a, b)| m.max((a - b).abs()))
}
