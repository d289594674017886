//! A gated layer over the final node states, per node:
//!
//! ```text
//! y = σ(G [h_T; h_0] + g) ⊙ t(T h_T + b)      G [C, 2h], T [C, h]
//! ```
//!
//! with `t` the identity (the readout: `C` classes) or tanh (the gated
//! state pooling: `C = h`, [`crate::config::Pool`]). Two products of
//! every node, the last work of a graph-level decision: POJ-104's 104
//! classes make them about a twelfth of a six-step decision's
//! multiply-adds, and in FP32 beside INT8 steps they were an eighth of a
//! 66-wide decision's time (Zen 4).
//!
//! At INT8 precision, the readout's products are INT8 too where it has at
//! least [`INT8_COLUMNS`] classes ([`int8`], the general step's): `h_T` by
//! `[G_T; T]` (the gate's `h_T` half beside the transform: one product of
//! `2C` columns) and `h_0` by `G_0`, each side quantised on its own (the
//! states within ±1, the embeddings by their own scale), the root
//! selector's two entries (the last of `h_0`, 0 or 50) in FP32 as the
//! steps keep them. Narrower readouts (a node-level bundle's two classes,
//! DevMap's two devices) stay FP32: quantising a row costs more than its
//! FP32 product of two columns. So does the gated state pooling (DevMap's
//! graph heads, 34 columns): its INT8 error reaches the auxiliary
//! classifier through a batch normalisation, and DevMap's accuracy at
//! INT8 pooling was never measured.

use std::ops::Range;
use std::sync::OnceLock;

use programl_kernels::cpu::{self, Isa};
use programl_kernels::elem::{sigmoid_by, tanh_by};
use programl_kernels::gemm::{self, RowGroups};
use programl_kernels::int8::any as int8;
use programl_kernels::threads::{par_ranges, Rows};

use crate::weights::Weights;

/// The narrowest layer whose products run in INT8 at INT8 precision: one
/// vector of 16 columns.
pub(crate) const INT8_COLUMNS: usize = 16;

/// Nodes per block of [`Gated::pooled`]: its buffers (at 104 classes and
/// 66 channels, about 110 KB) stay in cache and are reused from one block
/// to the next.
const POOL_BLOCK: usize = 64;

pub(crate) struct Gated {
    h: usize,
    c: usize,
    /// Tanh on the transform (the pooling, FP32 at every precision) or not
    /// (the readout).
    squash: bool,
    /// FP32: `G` over `[h_T; h_0]`, `T` over `h_T`.
    gate: gemm::Packed,
    transform: gemm::Packed,
    gate_b: Vec<f32>,
    transform_b: Vec<f32>,
    /// INT8, on first use: `[G_T; T]` over `h_T` (`2C` columns) and `G_0`
    /// over `h_0`; the weights as the bundle holds them until then.
    int8: OnceLock<(int8::Packed, int8::Packed)>,
    gate_w: Vec<f32>,
    transform_w: Vec<f32>,
}

impl Gated {
    /// The layer `{prefix}.gate` and `{prefix}.transform` of `weights`,
    /// `c` wide over states of `h`.
    pub fn new(weights: &Weights, prefix: &str, c: usize, h: usize, squash: bool) -> Gated {
        let gate_w = weights.get(&format!("{prefix}.gate.weight")).to_vec();
        let transform_w = weights.get(&format!("{prefix}.transform.weight")).to_vec();
        Gated {
            h,
            c,
            squash,
            gate: gemm::Packed::from_weight(&gate_w, c, 2 * h, false),
            transform: gemm::Packed::from_weight(&transform_w, c, h, false),
            gate_b: weights.get(&format!("{prefix}.gate.bias")).to_vec(),
            transform_b: weights.get(&format!("{prefix}.transform.bias")).to_vec(),
            int8: OnceLock::new(),
            gate_w,
            transform_w,
        }
    }

    /// Whether the layer runs INT8 products at INT8 precision (on a CPU
    /// with AVX-512 VNNI: [`Gated::int8_products`]).
    pub fn runs_int8(&self) -> bool {
        !self.squash && self.c >= INT8_COLUMNS
    }

    /// Whether a run at INT8 precision (`int8`) takes INT8 products here:
    /// a layer that [`Gated::runs_int8`], on the VNNI tiles. Elsewhere
    /// `int8::any`'s AVX2 tiles are slower than the FP32 products (36.5
    /// against 52 products a nanosecond on Zen 4) and the readout stays
    /// FP32, as before INT8 readouts.
    fn int8_products(&self, int8: bool) -> bool {
        int8 && self.runs_int8() && programl_kernels::int8::path() == Isa::Vnni
    }

    fn int8_packs(&self) -> &(int8::Packed, int8::Packed) {
        let (h, c) = (self.h, self.c);
        self.int8.get_or_init(|| {
            let rows = |from: usize| self.gate_w.chunks_exact(2 * h).flat_map(move |row| row[from..from + h].iter().copied());
            let on_t: Vec<f32> = rows(0).chain(self.transform_w.iter().copied()).collect();
            let on_0: Vec<f32> = rows(h).collect();
            (int8::Packed::from_weight(&on_t, 2 * c, h), int8::Packed::from_weight(&on_0, c, h))
        })
    }

    /// The layer on the `N` rows of `h_t` and `h0` (\[N, h\] each), `[N, C]`:
    /// INT8 products where `int8` and [`Gated::runs_int8`], else FP32.
    pub fn run(&self, h_t: &[f32], h0: &[f32], int8: bool, threads: usize) -> Vec<f32> {
        self.run_as(h_t, h0, self.int8_products(int8), threads)
    }

    /// [`Gated::run`] with INT8 products where `int8_products`, on any
    /// path (the tests' portable twin of the VNNI one).
    fn run_as(&self, h_t: &[f32], h0: &[f32], int8_products: bool, threads: usize) -> Vec<f32> {
        let mut out = vec![0f32; h_t.len() / self.h * self.c];
        self.run_into(h_t, h0, int8_products, threads, &mut out, &mut Buffers::default());
        out
    }

    /// [`Gated::run_as`] into `out`, with the products' buffers `s` (grown
    /// as needed, kept by the caller from one block to the next).
    fn run_into(&self, h_t: &[f32], h0: &[f32], int8_products: bool, threads: usize, out: &mut [f32], s: &mut Buffers) {
        let (h, c) = (self.h, self.c);
        let n = h_t.len() / h;
        let grow = |v: &mut Vec<f32>, len: usize| {
            if v.len() < len {
                v.resize(len, 0.0);
            }
        };
        // Every entry of the buffers below is written before it is read.
        if int8_products {
            let (on_t, on_0) = self.int8_packs();
            s.qt.rows(h_t, h, n, h, threads);
            s.q0.rows(h0, h, n, h, threads);
            grow(&mut s.a, n * 2 * c);
            grow(&mut s.b, n * c);
            let all = RowGroups::whole(n);
            int8::product_rows(&s.qt, &all, on_t, &mut s.a, 2 * c, threads);
            int8::product_rows(&s.q0, &all, on_0, &mut s.b, c, threads);
            self.finish(out, &s.a, 2 * c, Some(&s.b), &s.a[c..], 2 * c);
        } else {
            grow(&mut s.a, n * 2 * h);
            for (v, row) in s.a.chunks_exact_mut(2 * h).take(n).enumerate() {
                row[..h].copy_from_slice(&h_t[v * h..][..h]);
                row[h..].copy_from_slice(&h0[v * h..][..h]);
            }
            grow(&mut s.b, 2 * n * c);
            let (gate, value) = s.b.split_at_mut(n * c);
            gemm::product::<f32>(&s.a, 2 * h, n, &self.gate, gate, c, threads);
            gemm::product::<f32>(h_t, h, n, &self.transform, value, c, threads);
            self.finish(out, gate, c, None, value, c);
        }
    }

    /// The layer's outputs summed over each graph's nodes
    /// (`graphs[g]..graphs[g + 1]`), \[G, C\]: [`Gated::run`] on blocks of
    /// [`POOL_BLOCK`] nodes, each block's rows summed, then each graph's
    /// blocks in order (the same sums at any thread count, and for a graph
    /// alone or in a batch). A graph head needs no more, and the `[N, C]`
    /// outputs and `[N, 2C]` products of the whole graph were megabytes of
    /// fresh pages a compiler process faults in once each (a tenth of a
    /// 66-wide decision's time on a 1,500-node unit, Zen 4 VM).
    pub fn pooled(&self, h_t: &[f32], h0: &[f32], graphs: &[usize], int8: bool, threads: usize) -> Vec<f32> {
        let (h, c) = (self.h, self.c);
        let count = graphs.len().saturating_sub(1);
        let blocks: Vec<(usize, Range<usize>)> = (0..count)
            .flat_map(|g| {
                let (a, b) = (graphs[g], graphs[g + 1]);
                (a..b).step_by(POOL_BLOCK).map(move |x| (g, x..(x + POOL_BLOCK).min(b)))
            })
            .collect();
        let mut partial = vec![0f32; blocks.len() * c];
        let shared = Rows::new(&mut partial);
        // Split by nodes (`par_ranges` counts nodes: its grain is 2,048),
        // each range taking the blocks that start in it.
        let nodes = graphs.last().copied().unwrap_or(0);
        let int8_products = self.int8_products(int8);
        par_ranges(nodes, threads, |range| {
            let (mut y, mut buffers) = (vec![0f32; POOL_BLOCK * c], Buffers::default());
            let at = |v: usize| blocks.partition_point(|(_, b)| b.start < v);
            let from = at(range.start);
            for (i, (_, nodes)) in blocks[from..at(range.end)].iter().enumerate() {
                let i = from + i;
                let y = &mut y[..nodes.len() * c];
                let (t, z) = (&h_t[nodes.start * h..nodes.end * h], &h0[nodes.start * h..nodes.end * h]);
                self.run_into(t, z, int8_products, 1, y, &mut buffers);
                // SAFETY: each block writes its own row of `partial`.
                let sums = unsafe { shared.get(i * c, c) };
                for row in y.chunks_exact(c) {
                    sums.iter_mut().zip(row).for_each(|(s, y)| *s += y);
                }
            }
        });
        let mut pooled = vec![0f32; count * c];
        for ((g, _), sums) in blocks.iter().zip(partial.chunks_exact(c)) {
            pooled[g * c..][..c].iter_mut().zip(sums).for_each(|(p, s)| *p += s);
        }
        pooled
    }

    /// `out = σ(g + g_0 + g_b) ⊙ t(v + t_b)` row by row: `g` (row stride
    /// `lg`) the gate's product, plus `g_0` where it comes in two halves
    /// (\[N, C\]), `v` (row stride `lv`) the transform's.
    fn finish(&self, out: &mut [f32], g: &[f32], lg: usize, g0: Option<&[f32]>, v: &[f32], lv: usize) {
        let args = Finish { c: self.c, g, lg, g0, v, lv, gb: &self.gate_b, tb: &self.transform_b };
        #[cfg(target_arch = "x86_64")]
        if cpu::allows(Isa::Avx2) {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe {
                match self.squash {
                    true => finish_fma::<true>(&args, out),
                    false => finish_fma::<false>(&args, out),
                }
            };
        }
        match self.squash {
            true => finish_rows::<false, true>(&args, out),
            false => finish_rows::<false, false>(&args, out),
        }
    }
}

/// [`Gated::run_into`]'s buffers: the rows quantised, the products.
#[derive(Default)]
struct Buffers {
    qt: int8::Quantised,
    q0: int8::Quantised,
    a: Vec<f32>,
    b: Vec<f32>,
}

/// [`Gated::finish`]'s operands.
struct Finish<'a> {
    c: usize,
    g: &'a [f32],
    lg: usize,
    g0: Option<&'a [f32]>,
    v: &'a [f32],
    lv: usize,
    gb: &'a [f32],
    tb: &'a [f32],
}

/// The branch-free sigmoid and tanh ([`programl_kernels::elem`]), in a
/// loop over slices in step that vectorises; `FMA` where compiled for it.
#[inline(always)]
fn finish_rows<const FMA: bool, const SQUASH: bool>(a: &Finish<'_>, out: &mut [f32]) {
    let c = a.c;
    let (gb, tb) = (&a.gb[..c], &a.tb[..c]);
    for (i, y) in out.chunks_exact_mut(c).enumerate() {
        let (g, v) = (&a.g[i * a.lg..][..c], &a.v[i * a.lv..][..c]);
        let g0 = a.g0.map(|g0| &g0[i * c..][..c]);
        let parts = g.iter().zip(gb).zip(v.iter().zip(tb));
        match g0 {
            Some(g0) => {
                for ((y, ((g, gb), (v, tb))), g0) in y.iter_mut().zip(parts).zip(g0) {
                    let t = if SQUASH { tanh_by::<FMA>(v + tb) } else { v + tb };
                    *y = sigmoid_by::<FMA>(g + g0 + gb) * t;
                }
            }
            None => {
                for (y, ((g, gb), (v, tb))) in y.iter_mut().zip(parts) {
                    let t = if SQUASH { tanh_by::<FMA>(v + tb) } else { v + tb };
                    *y = sigmoid_by::<FMA>(g + gb) * t;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn finish_fma<const SQUASH: bool>(a: &Finish<'_>, out: &mut [f32]) {
    finish_rows::<true, SQUASH>(a, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::PathBuf;

    use crate::bundle::read_config;

    /// The shipped bundle `name`'s weights and its widths `(h, C)`.
    fn bundle(name: &str) -> (Weights, usize, usize) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(name);
        let config = read_config(&dir).unwrap();
        let weights = Weights::read(&dir.join(crate::bundle::WEIGHTS_FILE), &config.hyper).unwrap();
        (weights, config.hyper.hidden as usize, config.hyper.classes as usize)
    }

    /// `N` nodes as a graph head sees them: final states within ±1 (a
    /// GRU's), and initial ones that are embedding rows beside the root
    /// selector (`[50, 0]`, every node of a graph-level task).
    fn nodes(weights: &Weights, h: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let embedding = weights.get("embedding.weight");
        let text = h - 2;
        let tokens = embedding.len() / text;
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let h_t = (0..n * h).map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect();
        let mut h0 = vec![0f32; n * h];
        for row in h0.chunks_exact_mut(h) {
            let token = (next() % tokens as u64) as usize;
            row[..text].copy_from_slice(&embedding[token * text..][..text]);
            row[text] = 50.0;
        }
        (h_t, h0)
    }

    /// POJ-104's readouts (104 classes, at 34 and 66 channels) with INT8
    /// products on every path this CPU runs: within 3% of the FP32
    /// outputs' range at most and 0.2% on average (the selector's 50
    /// quantised with the rest would put the gate's pre-activations off by
    /// ~0.4 of a weight), not the FP32 bits (the INT8 products ran), the
    /// paths within FMA rounding of each other (the same integer sums). A
    /// run at INT8 precision takes them on VNNI alone, and elsewhere, or for
    /// a readout narrower than [`INT8_COLUMNS`], is the FP32 run bit for bit.
    #[test]
    fn int8_readouts_stay_close_to_fp32_on_every_path() {
        for name in ["models/poj104-O0", "models/poj104", "models/devmap-amd"] {
            let (weights, h, c) = bundle(name);
            let layer = Gated::new(&weights, "readout", c, h, false);
            let (h_t, h0) = nodes(&weights, h, 300);
            let fp32 = cpu::with_cap(Isa::Portable, || layer.run_as(&h_t, &h0, false, 1));
            let range = fp32.iter().fold(0f32, |m, x| m.max(x.abs()));
            let mut seen: Option<Vec<f32>> = None;
            for isa in [Isa::Portable, Isa::Avx2, Isa::Vnni] {
                if !cpu::run_test_on(isa, &format!("gated::int8_readouts_stay_close_to_fp32_on_every_path ({name}, {isa:?})")) {
                    continue;
                }
                let (f32_here, int8_here) = cpu::with_cap(isa, || (layer.run(&h_t, &h0, false, 1), layer.run(&h_t, &h0, true, 1)));
                let bits = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                if !layer.runs_int8() {
                    assert!(c < INT8_COLUMNS && bits(&f32_here, &int8_here), "{name} {isa:?}: a narrow readout not FP32");
                    continue;
                }
                let got = cpu::with_cap(isa, || layer.run_as(&h_t, &h0, true, 2));
                assert!(bits(&int8_here, if isa == Isa::Vnni { &got } else { &f32_here }), "{name} {isa:?}: the products chosen");
                let d = fp32.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                let mean = fp32.iter().zip(&got).map(|(a, b)| (a - b).abs()).sum::<f32>() / got.len() as f32;
                eprintln!("{name} {isa:?}: INT8 max {d}, mean {mean} off FP32 (range {range})");
                assert!(
                    d > 0.0 && d <= 0.03 * range && mean <= 0.002 * range,
                    "{name} {isa:?}: INT8 max {d}, mean {mean} off FP32 (range {range})"
                );
                if let Some(first) = &seen {
                    let e = first.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    assert!(e <= 1e-4 * range, "{name} {isa:?}: {e} off the first path's INT8");
                }
                seen.get_or_insert(got);
            }
        }
    }

    /// DevMap's gated state pooling (34 columns) stays FP32 at INT8
    /// precision, bit for bit.
    #[test]
    fn the_state_pooling_stays_fp32() {
        let (weights, h, _) = bundle("models/devmap-amd");
        let layer = Gated::new(&weights, "pool", h, h, true);
        assert!(h >= INT8_COLUMNS && !layer.runs_int8());
        let (h_t, h0) = nodes(&weights, h, 100);
        let (fp32, int8) = (layer.run(&h_t, &h0, false, 1), layer.run(&h_t, &h0, true, 1));
        assert!(fp32.iter().zip(&int8).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    /// [`Gated::pooled`] is each graph's sum of [`Gated::run`]'s rows
    /// (graphs of one node, of a block and one, of several blocks), in
    /// FP32 and INT8; the same bits at 1 and 2 threads, and for a graph
    /// alone as in the batch.
    #[test]
    fn pooled_rows_are_each_graphs_sum() {
        let (weights, h, c) = bundle("models/poj104");
        let layer = Gated::new(&weights, "readout", c, h, false);
        // One node; none; a block and one; enough blocks that 2 threads
        // split them (past 2 × 2,048 nodes).
        let graphs = [0, 1, 1, 1 + POOL_BLOCK + 1, 1 + POOL_BLOCK + 1 + 70 * POOL_BLOCK + 7];
        let n = graphs[4];
        let (h_t, h0) = nodes(&weights, h, n);
        for int8 in [false, true] {
            let rows = layer.run(&h_t, &h0, int8, 1);
            let pooled = layer.pooled(&h_t, &h0, &graphs, int8, 1);
            assert_eq!(pooled.len(), 4 * c);
            assert!(pooled[c..2 * c].iter().all(|&x| x == 0.0), "int8 {int8}: the empty graph");
            for g in 0..4 {
                for k in 0..c {
                    let want: f32 = (graphs[g]..graphs[g + 1]).map(|v| rows[v * c + k]).sum();
                    let got = pooled[g * c + k];
                    assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "int8 {int8}: graph {g} class {k}: {got} against {want}");
                }
            }
            let two = layer.pooled(&h_t, &h0, &graphs, int8, 2);
            assert!(pooled.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()), "int8 {int8}: 2 threads differ");
            let (a, b) = (graphs[3], graphs[4]);
            let alone = layer.pooled(&h_t[a * h..b * h], &h0[a * h..b * h], &[0, b - a], int8, 1);
            assert!(alone.iter().zip(&pooled[3 * c..]).all(|(x, y)| x.to_bits() == y.to_bits()), "int8 {int8}: a graph alone differs");
        }
    }
}
