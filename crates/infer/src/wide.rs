//! The step for a state of any width: what a bundle runs on whose
//! `hyper.hidden` is not 34, at a fixed T or with a stopping rule
//! (`hyper.stop`), with FP32 or INT8 products: POJ-104's shipped bundle
//! (66 wide). Width 34 (the DeepDataFlow and DevMap bundles,
//! `models/poj104-O0`) runs on the kernels specialised for it
//! ([`crate::model`]) at every precision and depth; this step is the same
//! arithmetic with the width a run-time value:
//!
//! ```text
//! F  = h · W_msgᵀ                                   ≤ [N, 6h] (each node only the blocks it needs, packed)
//! M  = mean over incoming edges of (F[source, type] + b_type) ⊙ p(position)
//! GI = M · W_ihᵀ    GH = h · W_hhᵀ                  [B, 3h] each, a block of B nodes at a time
//! r  = σ(GI_r + GH_r + b_ir + b_hr)   z = σ(GI_z + GH_z + b_iz + b_hz)
//! n  = tanh(GI_n + b_in + r ⊙ (GH_n + b_hn))        h' = n + z ⊙ (h − n)
//! ```
//!
//! The products are the kernels' ([`gemm`] in FP32, [`int8`] in INT8, any
//! inner width). Each node's row of `F` starts at the first block it needs,
//! as on the 34-wide kernels ([`forward::first_needed`]: the edge types
//! that fewest nodes send first; a node that sends no call edges skips the
//! call blocks, one that sends nothing the whole row). Only `F` and `M`
//! span the graph: the gates' products are made a block of [`BLOCK`]
//! nodes at a time and go straight into the cell, so that a large graph's
//! step buffers are 7 floats of state width a node, not 15 (a 12,000-node
//! unit's at 66 channels: 23 MB, not 48 MB, written and read each step),
//! and `F`'s rows are packed, each node's only as long as the blocks it
//! needs.
//! The gated mean is a plain loop, compiled for AVX-512 or AVX2+FMA where
//! the CPU has it; the cell is the kernels' ([`cell::rows`]: AVX-512
//! intrinsics, a row's last vector masked), its sigmoids exact with FP32
//! products and to INT8's needs (~1e-4) with INT8 ones, as on the 34-wide
//! kernels.
//!
//! Adaptive depth ([`crate::depth`]) as on the 34-wide kernels, but a
//! graph that has converged is no longer computed: only the runs of
//! graphs still going are.

use programl_kernels::cell;
use programl_kernels::cpu::{self, Isa};
use programl_kernels::forward::{self, Reduce};
use programl_kernels::gemm::{self, RowGroups};
use programl_kernels::int8::any as int8;
use programl_kernels::threads::{par_ranges, Rows};
use programl_kernels::EDGE_TYPES;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use crate::depth::{Depth, Settle};
use crate::weights::Weights;

/// The weights of the step, packed once.
pub(crate) struct Wide {
    h: usize,
    /// `W_msg`, six \[h, h\] blocks in type order, as the bundle holds it.
    w_msg: Vec<f32>,
    /// `W_msgᵀ` (six blocks in slot order), \[h, 6h\], per block order
    /// (`slot[type]`; a handful occur) and precision (INT8 or not).
    packs: Mutex<HashMap<([u8; EDGE_TYPES], bool), Arc<Fused>>>,
    /// `W_ih` and `W_hh`, \[3h, h\] each, as the bundle holds them.
    w_ih: Vec<f32>,
    w_hh: Vec<f32>,
    /// `(W_ihᵀ, W_hhᵀ)`, \[h, 3h\] each, packed for FP32 and quantised
    /// for INT8 on first use: a process runs one precision, and a compiler
    /// opens the bundle once per translation unit.
    gates_f32: OnceLock<(gemm::Packed, gemm::Packed)>,
    gates_int8: OnceLock<(int8::Packed, int8::Packed)>,
    /// \[6, h\].
    msg_bias: Vec<f32>,
    /// The cell's biases: `b_ir + b_hr`, `b_iz + b_hz`, `b_in`, `b_hn`.
    bias: [Vec<f32>; 4],
}

/// The fused product's right-hand side at one precision.
enum Fused {
    F32(gemm::Packed),
    Int8(int8::Packed),
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
        let (b_ih, b_hh) = (weights.get("gru.bias_ih"), weights.get("gru.bias_hh"));
        let bias = [
            (0..h).map(|j| b_ih[j] + b_hh[j]).collect(),
            (0..h).map(|j| b_ih[h + j] + b_hh[h + j]).collect(),
            b_ih[2 * h..3 * h].to_vec(),
            b_hh[2 * h..3 * h].to_vec(),
        ];
        Wide {
            h,
            w_msg: weights.get("messages.weight").to_vec(),
            packs: Mutex::new(HashMap::new()),
            w_ih: weights.get("gru.weight_ih").to_vec(),
            w_hh: weights.get("gru.weight_hh").to_vec(),
            gates_f32: OnceLock::new(),
            gates_int8: OnceLock::new(),
            msg_bias: weights.get("messages.bias").to_vec(),
            bias,
        }
    }

    /// `(W_ihᵀ, W_hhᵀ)` packed for FP32, on first use.
    fn gates_f32(&self) -> &(gemm::Packed, gemm::Packed) {
        let h = self.h;
        self.gates_f32.get_or_init(|| {
            (gemm::Packed::from_weight(&self.w_ih, 3 * h, h, false), gemm::Packed::from_weight(&self.w_hh, 3 * h, h, false))
        })
    }

    /// `(W_ihᵀ, W_hhᵀ)` quantised for INT8, on first use.
    fn gates_int8(&self) -> &(int8::Packed, int8::Packed) {
        let h = self.h;
        self.gates_int8.get_or_init(|| (int8::Packed::from_weight(&self.w_ih, 3 * h, h), int8::Packed::from_weight(&self.w_hh, 3 * h, h)))
    }

    /// The fused product's packing for the block order `slot`, quantised
    /// for INT8 where `int8`.
    fn packing(&self, slot: &[usize; EDGE_TYPES], int8: bool) -> Arc<Fused> {
        let h = self.h;
        let key = (slot.map(|s| s as u8), int8);
        let mut packs = self.packs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = packs.get(&key) {
            return p.clone();
        }
        let block = h * h;
        let mut ordered = vec![0f32; EDGE_TYPES * block];
        for (t, &b) in slot.iter().enumerate() {
            ordered[b * block..(b + 1) * block].copy_from_slice(&self.w_msg[t * block..(t + 1) * block]);
        }
        // A few orders occur; a pathological stream of graphs cannot grow
        // the cache without bound.
        if packs.len() >= 64 {
            packs.clear();
        }
        let packed = Arc::new(if int8 {
            Fused::Int8(int8::Packed::from_weight(&ordered, 6 * h, h))
        } else {
            Fused::F32(gemm::Packed::from_weight(&ordered, 6 * h, h, false))
        });
        packs.insert(key, packed.clone());
        packed
    }

    /// The states after the steps, from `h0` (\[N, h\] row-major), with
    /// `gates` the position gate table (\[rows, h\]), the products in INT8
    /// where `int8` ([`int8`]: the states and the aggregated messages
    /// quantised per node, the weights per column) and FP32 elsewhere; and
    /// the steps each graph ran.
    #[allow(clippy::too_many_arguments)]
    pub fn run(&self, e: &Edges<'_>, h0: &[f32], gates: &[f32], depth: Depth<'_>, int8: bool, threads: usize) -> (Vec<f32>, Vec<i64>) {
        let (n, h) = (e.nodes, self.h);
        let (slot, first) = forward::first_needed(e.sources, n, h);
        let fused = self.packing(&slot, int8);
        let (mut hq, mut mq) = (int8::Quantised::default(), int8::Quantised::default());
        // `F` packed: each node's row holds only the blocks it needs, from
        // its first needed column rounded down to 16 (where the products
        // start writing) to the end; a node that sends nothing has none.
        // `row0[v]` is where node v's column 0 would sit (the products'
        // reference point; `gemm::packed_rows`). About half of `[N, 6h]` on
        // real graphs, so half the pages to touch and the gathers closer
        // together.
        let (row0, end) = gemm::packed_rows(&first, 6 * h);
        // Each edge's message: its source's row of `F`, its type's block.
        let offsets: Vec<usize> =
            e.sources.iter().map(|&s| row0[(s / EDGE_TYPES as i64) as usize] + slot[(s % EDGE_TYPES as i64) as usize] * h).collect();
        let mut cur = h0.to_vec();
        let mut next = vec![0f32; n * h];
        let (mut f, mut m) = (vec![0f32; end], vec![0f32; n * h]);
        let mut settle = Settle::new(e.graphs, depth);
        // The row groups of each run of graphs still going, made again
        // only when the runs change.
        let mut runs: Vec<(Range<usize>, RowGroups)> = Vec::new();
        for step in 0..depth.cap() {
            // Only the graphs still running are computed (a graph's edges
            // stay inside its own rows): runs of consecutive ones at a time.
            let now = active_runs(e.graphs, settle.done(), n);
            if runs.len() != now.len() || runs.iter().zip(&now).any(|((r, _), n)| r != n) {
                runs = now.into_iter().map(|r| (r.clone(), RowGroups::by_first_column(&first[r]))).collect();
            }
            for (rows, groups) in &runs {
                let (x, len) = (rows.start, rows.len());
                let at = &row0[x..x + len];
                // SAFETY (both products): the rows were packed one after
                // another above, each from its group's first column
                // rounded down to 16, so their written ranges are disjoint.
                match &*fused {
                    Fused::F32(w) => unsafe { gemm::product_rows_at(&cur[x * h..], h, groups, w, &mut f, at, threads) },
                    Fused::Int8(w) => {
                        hq.rows(&cur[x * h..], h, len, h, threads);
                        unsafe { int8::product_rows_at(&hq, groups, w, &mut f, at, threads) };
                    }
                }
                self.aggregate(e, &offsets, rows.clone(), &f, gates, &mut m, threads);
                let quantised = int8.then(|| {
                    mq.rows(&m[x * h..], h, len, h, threads);
                    (&mq, &hq)
                });
                self.cells(rows.clone(), &m, &cur, quantised, &mut next, threads);
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
    #[allow(clippy::too_many_arguments)]
    fn aggregate(&self, e: &Edges<'_>, offsets: &[usize], nodes: Range<usize>, f: &[f32], gates: &[f32], m: &mut [f32], threads: usize) {
        let h = self.h;
        let out = Rows::new(m);
        let (fma, wide) = (cpu::allows(Isa::Avx2), cpu::allows(Isa::Avx512));
        par_ranges(nodes.len(), threads, |range| {
            let range = nodes.start + range.start..nodes.start + range.end;
            // SAFETY: each range writes its own rows of `m`.
            let rows = unsafe { out.get(range.start * h, range.len() * h) };
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: the CPU has AVX-512 F (and FMA).
                return unsafe { aggregate_avx512(self, e, offsets, f, gates, range.start, rows) };
            }
            #[cfg(target_arch = "x86_64")]
            if fma {
                // SAFETY: the CPU has AVX2 and FMA.
                return unsafe { aggregate_avx2(self, e, offsets, f, gates, range.start, rows) };
            }
            let _ = (fma, wide);
            aggregate_rows(self, e, offsets, f, gates, range.start, rows)
        });
    }

    /// The GRU cell of the nodes `nodes` (a run starting at `nodes.start`)
    /// into `next`, from the mean messages `m` and the states `cur`, a
    /// block of [`BLOCK`] nodes at a time: the block's two gate products
    /// (INT8 from the run's quantised rows where `quantised`, `(messages,
    /// states)`, else FP32), then the cell on them.
    fn cells(
        &self,
        nodes: Range<usize>,
        m: &[f32],
        cur: &[f32],
        quantised: Option<(&int8::Quantised, &int8::Quantised)>,
        next: &mut [f32],
        threads: usize,
    ) {
        let h = self.h;
        let out = Rows::new(next);
        // Split by nodes (`par_ranges` counts nodes: its grain is 2,048),
        // each range taking the blocks that start in it.
        par_ranges(nodes.len(), threads, |range| {
            let (mut gi, mut gh) = (vec![0f32; BLOCK * 3 * h], vec![0f32; BLOCK * 3 * h]);
            for b in range.start.div_ceil(BLOCK)..range.end.div_ceil(BLOCK) {
                // The block's rows, within the run and within the batch.
                let local = b * BLOCK..((b + 1) * BLOCK).min(nodes.len());
                let (a, len) = (nodes.start + local.start, local.len());
                match quantised {
                    Some((mq, hq)) => {
                        let (w_ih, w_hh) = self.gates_int8();
                        int8::product_block(mq, local.clone(), w_ih, &mut gi, 3 * h);
                        int8::product_block(hq, local.clone(), w_hh, &mut gh, 3 * h);
                    }
                    None => {
                        let (w_ih, w_hh) = self.gates_f32();
                        gemm::product::<f32>(&m[a * h..], h, len, w_ih, &mut gi, 3 * h, 1);
                        gemm::product::<f32>(&cur[a * h..], h, len, w_hh, &mut gh, 3 * h, 1);
                    }
                }
                // SAFETY: each block writes its own rows of `next`.
                let rows = unsafe { out.get(a * h, len * h) };
                let [r, z, i_n, h_n] = &self.bias;
                let bias = cell::Biases { r, z, i_n, h_n };
                cell::rows(h, &gi, &gh, bias, &cur[a * h..(a + len) * h], rows, quantised.is_some());
            }
        });
    }
}

/// Nodes per block of the cell: its two gate products, \[B, 3h\] each,
/// stay in cache (76 KB at 66 channels) between the products and the cell.
/// A multiple of the INT8 tiles' 6 rows (32 left a tile of 2: 48 is ~4%
/// faster a 66-wide step, Zen 4).
const BLOCK: usize = 48;

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
fn aggregate_rows(w: &Wide, e: &Edges<'_>, offsets: &[usize], f: &[f32], gates: &[f32], first: usize, out: &mut [f32]) {
    let h = w.h;
    let mut most = vec![0f32; if e.reduce.has_max() { h } else { 0 }];
    for (i, row) in out.chunks_exact_mut(h).enumerate() {
        let v = first + i;
        let (start, end) = (e.crow[v] as usize, e.crow[v + 1] as usize);
        row.fill(0.0);
        most.fill(f32::NEG_INFINITY);
        let (mut summed, mut maxed) = (false, false);
        for k in start..end {
            let t = e.types[k] as usize;
            let msg = &f[offsets[k]..][..h];
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
unsafe fn aggregate_avx2(w: &Wide, e: &Edges<'_>, offsets: &[usize], f: &[f32], gates: &[f32], first: usize, out: &mut [f32]) {
    aggregate_rows(w, e, offsets, f, gates, first, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn aggregate_avx512(w: &Wide, e: &Edges<'_>, offsets: &[usize], f: &[f32], gates: &[f32], first: usize, out: &mut [f32]) {
    aggregate_rows(w, e, offsets, f, gates, first, out)
}
