//! The FP32 step for a state of any width: what a bundle runs on whose
//! `hyper.hidden` is not 34, at a fixed T or with a stopping rule
//! (`hyper.stop`). The shipped width, 34, runs on the kernels specialised
//! for it ([`crate::model`]) at every precision and depth; this step is
//! the same arithmetic with the width a run-time value:
//!
//! ```text
//! F  = h · [W_msg; W_hh]ᵀ                          [N, 9h]  (every block for every node)
//! M  = mean over incoming edges of (F[source, type] + b_type) ⊙ p(position)
//! GI = M · W_ihᵀ                                    [N, 3h]
//! r  = σ(GI_r + F_hr + b_ir + b_hr)   z = σ(GI_z + F_hz + b_iz + b_hz)
//! n  = tanh(GI_n + b_in + r ⊙ (F_hn + b_hn))        h' = n + z ⊙ (h − n)
//! ```
//!
//! The products are the kernels' ([`gemm`], any inner width); the gated
//! mean and the cell are plain loops (the transcendentals the kernels'
//! branch-free ones), compiled for AVX2+FMA where the CPU has it.
//!
//! Adaptive depth ([`crate::depth`]) as on the 34-wide kernels, but a
//! graph that has converged is no longer computed: only the runs of
//! graphs still going are.

use programl_kernels::cpu::{self, Isa};
use programl_kernels::elem::{sigmoid_by, tanh_by};
use programl_kernels::forward::Reduce;
use programl_kernels::gemm;
use programl_kernels::threads::{par_ranges, Rows};
use programl_kernels::EDGE_TYPES;

use std::ops::Range;

use crate::depth::{Depth, Settle};
use crate::weights::Weights;

/// The weights of the step, packed once.
pub(crate) struct Wide {
    h: usize,
    /// `[W_msg (six blocks in type order); W_hh]ᵀ`, \[h, 9h\].
    fused: gemm::Packed,
    /// `W_ihᵀ`, \[h, 3h\].
    w_ih: gemm::Packed,
    /// \[6, h\].
    msg_bias: Vec<f32>,
    /// The cell's biases: `b_ir + b_hr`, `b_iz + b_hz`, `b_in`, `b_hn`.
    bias: [Vec<f32>; 4],
}

/// A batch as the step reads it (see `model::Input`): node count, edges by
/// target (`crow`), each edge's `6 · source + type`, type and position
/// row, and the graphs' node offsets (`graphs[g]..graphs[g + 1]`).
pub(crate) struct Edges<'a> {
    pub nodes: usize,
    pub crow: &'a [i64],
    pub sources: &'a [i64],
    pub types: &'a [i64],
    pub positions: &'a [i64],
    pub graphs: &'a [usize],
    /// How a node combines them.
    pub reduce: Reduce,
}

impl Wide {
    pub fn new(weights: &Weights, h: usize) -> Wide {
        let mut fused = weights.get("messages.weight").to_vec();
        fused.extend_from_slice(weights.get("gru.weight_hh"));
        let (b_ih, b_hh) = (weights.get("gru.bias_ih"), weights.get("gru.bias_hh"));
        let bias = [
            (0..h).map(|j| b_ih[j] + b_hh[j]).collect(),
            (0..h).map(|j| b_ih[h + j] + b_hh[h + j]).collect(),
            b_ih[2 * h..3 * h].to_vec(),
            b_hh[2 * h..3 * h].to_vec(),
        ];
        Wide {
            h,
            fused: gemm::Packed::from_weight(&fused, 9 * h, h, false),
            w_ih: gemm::Packed::from_weight(weights.get("gru.weight_ih"), 3 * h, h, false),
            msg_bias: weights.get("messages.bias").to_vec(),
            bias,
        }
    }

    /// The states after the steps, from `h0` (\[N, h\] row-major), with
    /// `gates` the position gate table (\[rows, h\]); and the steps each
    /// graph ran.
    pub fn run(&self, e: &Edges<'_>, h0: &[f32], gates: &[f32], depth: Depth<'_>, threads: usize) -> (Vec<f32>, Vec<i64>) {
        let (n, h) = (e.nodes, self.h);
        let mut cur = h0.to_vec();
        let mut next = vec![0f32; n * h];
        let (mut f, mut m, mut gi) = (vec![0f32; n * 9 * h], vec![0f32; n * h], vec![0f32; n * 3 * h]);
        let mut settle = Settle::new(e.graphs, depth);
        for step in 0..depth.cap() {
            // Only the graphs still running are computed (a graph's edges
            // stay inside its own rows): runs of consecutive ones at a time.
            for rows in active_runs(e.graphs, settle.done(), n) {
                let (x, len) = (rows.start, rows.len());
                gemm::product::<f32>(&cur[x * h..], h, len, &self.fused, &mut f[x * 9 * h..], 9 * h, threads);
                self.aggregate(e, rows.clone(), &f, gates, &mut m, threads);
                gemm::product::<f32>(&m[x * h..], h, len, &self.w_ih, &mut gi[x * 3 * h..], 3 * h, threads);
                self.cells(rows, &gi, &f, &cur, &mut next, threads);
            }
            let all = settle.after_step_rows(step, h, &cur, &mut next);
            std::mem::swap(&mut cur, &mut next);
            if all {
                break;
            }
        }
        (cur, settle.ran())
    }

    /// `m[v] = (1/indeg v) Σ_e (F[source e, type e] + b_type) ⊙ gates[pos e]`,
    /// for the nodes `nodes`.
    fn aggregate(&self, e: &Edges<'_>, nodes: Range<usize>, f: &[f32], gates: &[f32], m: &mut [f32], threads: usize) {
        let h = self.h;
        let out = Rows::new(m);
        let fma = cpu::allows(Isa::Avx2);
        par_ranges(nodes.len(), threads, |range| {
            let range = nodes.start + range.start..nodes.start + range.end;
            // SAFETY: each range writes its own rows of `m`.
            let rows = unsafe { out.get(range.start * h, range.len() * h) };
            #[cfg(target_arch = "x86_64")]
            if fma {
                // SAFETY: the CPU has AVX2 and FMA.
                return unsafe { aggregate_avx2(self, e, f, gates, range.start, rows) };
            }
            let _ = fma;
            aggregate_rows(self, e, f, gates, range.start, rows)
        });
    }

    /// The GRU cell of the nodes `nodes`: `gi` \[N, 3h\], the hidden gates
    /// in blocks 6..9 of `f` \[N, 9h\], the state `cur`; into `next`.
    fn cells(&self, nodes: Range<usize>, gi: &[f32], f: &[f32], cur: &[f32], next: &mut [f32], threads: usize) {
        let h = self.h;
        let out = Rows::new(next);
        let fma = cpu::allows(Isa::Avx2);
        par_ranges(nodes.len(), threads, |range| {
            let range = nodes.start + range.start..nodes.start + range.end;
            // SAFETY: each range writes its own rows of `next`.
            let rows = unsafe { out.get(range.start * h, range.len() * h) };
            #[cfg(target_arch = "x86_64")]
            if fma {
                // SAFETY: the CPU has AVX2 and FMA.
                return unsafe { cell_avx2(self, gi, f, cur, range.start, rows) };
            }
            let _ = fma;
            cell_rows::<false>(self, gi, f, cur, range.start, rows)
        });
    }
}

/// The node ranges of the graphs not `done`, consecutive graphs merged
/// (all `n` nodes when the batch has no graph boundaries).
fn active_runs(graphs: &[usize], done: &[bool], n: usize) -> Vec<Range<usize>> {
    if graphs.len() < 2 {
        return Vec::from([0..n]);
    }
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (g, _) in done.iter().enumerate().filter(|(_, &d)| !d) {
        let r = graphs[g]..graphs[g + 1];
        match runs.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => runs.push(r),
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

/// Each node's messages: summed (scaled to the mean where the aggregation
/// says) along the edges whose type does not take the max, the
/// channel-wise max along those that do ([`Reduce::takes_max`]), the two
/// added under `mean-max`; zero without edges.
#[inline(always)]
fn aggregate_rows(w: &Wide, e: &Edges<'_>, f: &[f32], gates: &[f32], first: usize, out: &mut [f32]) {
    let h = w.h;
    let mut most = vec![0f32; if e.reduce.has_max() { h } else { 0 }];
    for (i, row) in out.chunks_exact_mut(h).enumerate() {
        let v = first + i;
        let (start, end) = (e.crow[v] as usize, e.crow[v + 1] as usize);
        row.fill(0.0);
        most.fill(f32::NEG_INFINITY);
        let (mut summed, mut maxed) = (false, false);
        for k in start..end {
            let (source, t) = ((e.sources[k] / EDGE_TYPES as i64) as usize, e.types[k] as usize);
            let msg = &f[source * 9 * h + t * h..][..h];
            let b = &w.msg_bias[t * h..][..h];
            let g = &gates[e.positions[k] as usize * h..][..h];
            if e.reduce.takes_max(t as i64) {
                maxed = true;
                for j in 0..h {
                    most[j] = most[j].max((msg[j] + b[j]) * g[j]);
                }
            } else {
                summed = true;
                for j in 0..h {
                    row[j] += (msg[j] + b[j]) * g[j];
                }
            }
        }
        let scale = e.reduce.scale_of(&e.types[start..end]);
        for j in 0..h {
            row[j] = match (summed, maxed) {
                (true, true) => row[j] * scale + most[j],
                (true, false) => row[j] * scale,
                (false, true) => most[j],
                (false, false) => 0.0,
            };
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn aggregate_avx2(w: &Wide, e: &Edges<'_>, f: &[f32], gates: &[f32], first: usize, out: &mut [f32]) {
    aggregate_rows(w, e, f, gates, first, out)
}

#[inline(always)]
fn cell_rows<const FMA: bool>(w: &Wide, gi: &[f32], f: &[f32], cur: &[f32], first: usize, out: &mut [f32]) {
    let h = w.h;
    let [br, bz, bin, bhn] = &w.bias;
    for (i, row) in out.chunks_exact_mut(h).enumerate() {
        let v = first + i;
        let x = &gi[v * 3 * h..][..3 * h];
        let g = &f[v * 9 * h + 6 * h..][..3 * h];
        let old = &cur[v * h..][..h];
        for j in 0..h {
            let r = sigmoid_by::<FMA>(x[j] + g[j] + br[j]);
            let z = sigmoid_by::<FMA>(x[h + j] + g[h + j] + bz[j]);
            let n = tanh_by::<FMA>(x[2 * h + j] + bin[j] + r * (g[2 * h + j] + bhn[j]));
            row[j] = n + z * (old[j] - n);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn cell_avx2(w: &Wide, gi: &[f32], f: &[f32], cur: &[f32], first: usize, out: &mut [f32]) {
    cell_rows::<true>(w, gi, f, cur, first, out)
}
