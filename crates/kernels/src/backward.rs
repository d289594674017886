//! Training's backward loops: the GRU cell's ([`gru_backward`]) and the
//! aggregation's ([`aggregate_backward`], which also sums the biases'
//! gradients), per thread in node ranges summed in range order (bit-for-bit
//! reproducible). Compiled again for AVX2+FMA, and in AVX-512 intrinsics
//! (`crate::avx512`).

#[cfg(target_arch = "x86_64")]
use crate::avx512;
use crate::cpu::{self, Isa};
use crate::elem::Elem;
use crate::forward::{Product, Reduce};
use crate::threads::{par_ranges_summing, Shared};
use crate::{FUSED, GATES, H};

/// Rows summed per range while they are in cache: a range's rows are
/// written and then summed this many at a time.
const SUM_CHUNK: usize = 64;

/// `sums[j] += Σ_v rows[v · stride + j]` for the rows `range` of `rows`
/// (`sums.len()` columns).
fn add_rows(sums: &mut [f32], rows: &[f32], stride: usize, range: std::ops::Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    if cpu::allows(Isa::Avx512) {
        // SAFETY: the CPU has AVX-512.
        return unsafe { add_rows_avx512(sums, rows, stride, range) };
    }
    add_rows_plain(sums, rows, stride, range)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn add_rows_avx512(sums: &mut [f32], rows: &[f32], stride: usize, range: std::ops::Range<usize>) {
    add_rows_plain(sums, rows, stride, range)
}

#[inline(always)]
fn add_rows_plain(sums: &mut [f32], rows: &[f32], stride: usize, range: std::ops::Range<usize>) {
    let width = sums.len();
    for v in range {
        for (d, s) in sums.iter_mut().zip(&rows[v * stride..][..width]) {
            *d += s;
        }
    }
}

/// What the GRU update's backward reads (see [`gru_backward`]): the
/// gradient of the new state and the step's tape.
#[derive(Clone, Copy)]
pub struct GruBackward<'a> {
    pub dh_new: &'a [f32],
    pub h: &'a [f32],
    pub r: &'a [f32],
    pub z: &'a [f32],
    pub n: &'a [f32],
    pub ghn: &'a [f32],
}

/// Where its rows go (threads write disjoint rows).
#[derive(Clone, Copy)]
pub struct GruGrads {
    pub dgi: Shared,
    pub d_fused: Shared,
    pub dh_direct: Shared,
}

/// The GRU update's backward for every node, from `dh_new` (the gradient
/// of the new state) and the step's tape: writes `dgi` \[N, 102\] (the
/// gradient of `m · W_ihᵀ + b_ih`), the hidden gates' part of `d_fused`
/// \[N, 306\] (columns 204..306, the gradient of `W_hh h + b_hh`), and
/// `dh_direct` \[N, 34\] (the gradient reaching `h` through `z`).
pub fn gru_backward(
    reads: GruBackward<'_>,
    dgi: &mut [f32],
    d_fused: &mut [f32],
    dh_direct: &mut [f32],
    bias_sums: &mut [f32],
    threads: usize,
) {
    assert_eq!(bias_sums.len(), 2 * GATES);
    let nodes = reads.h.len() / H;
    let out = GruGrads { dgi: Shared::new(dgi), d_fused: Shared::new(d_fused), dh_direct: Shared::new(dh_direct) };
    let GruGrads { dgi, d_fused, .. } = out;
    par_ranges_summing(nodes, threads, bias_sums, |range, sums| {
        let mut start = range.start;
        while start < range.end {
            let chunk = start..(start + SUM_CHUNK).min(range.end);
            let run = |chunk: std::ops::Range<usize>| {
                #[cfg(target_arch = "x86_64")]
                if cpu::allows(Isa::Avx512) {
                    // SAFETY: the CPU has AVX-512; rows of `range` only.
                    return unsafe { avx512::gru_backward(reads, out, chunk) };
                }
                #[cfg(target_arch = "x86_64")]
                if cpu::allows(Isa::Avx2) {
                    // SAFETY: the CPU has AVX2 and FMA; rows of `range` only.
                    return unsafe { gru_backward_avx2(reads, out, chunk) };
                }
                // SAFETY: rows of `range` only.
                unsafe { gru_backward_rows(reads, out, chunk) }
            };
            run(chunk.clone());
            // SAFETY: the rows this thread just wrote, read back by it.
            let len = chunk.len();
            let (gi_rows, hh_rows) =
                unsafe { (dgi.slice(chunk.start * GATES, len * GATES), d_fused.slice(chunk.start * FUSED + 6 * H, len * FUSED - 6 * H)) };
            let (s_gi, s_hh) = sums.split_at_mut(GATES);
            add_rows(s_gi, gi_rows, GATES, 0..len);
            add_rows(s_hh, hh_rows, FUSED, 0..len);
            start = chunk.end;
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gru_backward_avx2(reads: GruBackward<'_>, out: GruGrads, range: std::ops::Range<usize>) {
    gru_backward_rows(reads, out, range)
}

#[inline(always)]
unsafe fn gru_backward_rows(
    GruBackward { dh_new, h, r, z, n, ghn }: GruBackward<'_>,
    GruGrads { dgi, d_fused, dh_direct }: GruGrads,
    range: std::ops::Range<usize>,
) {
    {
        for v in range {
            let row = |t: &'_ [f32]| -> [f32; H] { t[v * H..][..H].try_into().expect("34") };
            let (dh, hv, rv, zv, nv, gv) = (row(dh_new), row(h), row(r), row(z), row(n), row(ghn));
            let (gi_row, fu_row, direct) =
                (dgi.slice(v * GATES, GATES), d_fused.slice(v * FUSED + 6 * H, GATES), dh_direct.slice(v * H, H));
            for j in 0..H {
                let dn = dh[j] * (1.0 - zv[j]);
                let dz = dh[j] * (hv[j] - nv[j]);
                direct[j] = dh[j] * zv[j];
                let d_pre_n = dn * (1.0 - nv[j] * nv[j]);
                let d_pre_r = d_pre_n * gv[j] * rv[j] * (1.0 - rv[j]);
                let d_pre_z = dz * zv[j] * (1.0 - zv[j]);
                gi_row[j] = d_pre_r;
                gi_row[H + j] = d_pre_z;
                gi_row[2 * H + j] = d_pre_n;
                fu_row[j] = d_pre_r;
                fu_row[H + j] = d_pre_z;
                fu_row[2 * H + j] = d_pre_n * rv[j];
            }
        }
    }
}

/// The edges grouped by the fused product's row they read (`9 · source +
/// type`): row `q`'s edges are `edges[start[q]..start[q + 1]]`.
pub struct ByRow {
    pub start: Vec<usize>,
    pub edges: Vec<usize>,
}

impl ByRow {
    /// Counting sort of `rows` (each below `9 · nodes`), stable.
    pub fn new(rows: &[i64], nodes: usize) -> ByRow {
        let mut start = vec![0usize; FUSED / H * nodes + 1];
        for &q in rows {
            start[q as usize + 1] += 1;
        }
        for q in 1..start.len() {
            start[q] += start[q - 1];
        }
        let mut next = start.clone();
        let mut edges = vec![0usize; rows.len()];
        for (e, &q) in rows.iter().enumerate() {
            edges[next[q as usize]] = e;
            next[q as usize] += 1;
        }
        ByRow { start, edges }
    }
}

/// What the aggregation's backward reads (see [`aggregate_backward`]).
#[derive(Clone, Copy)]
pub struct EdgesBackward<'a, T> {
    pub da: &'a [f32],
    pub inv_degree: &'a [f32],
    pub fused: Product<'a, T>,
    pub bias: &'a [f32],
    pub gates: &'a [f32],
    pub targets: &'a [i64],
    pub positions: &'a [i64],
    pub by_row: &'a ByRow,
    /// Under the max aggregation, the forward's winners
    /// ([`crate::forward::aggregate_max_tape`], \[N, 34\]): edge `e` gets
    /// channel `j` of its target's gradient only where it won it, and
    /// `inv_degree` is not read. Under [`Reduce::MeanMax`] that holds for
    /// the backward edges, and the forward ones take `inv_degree` (1 / the
    /// target's forward edges).
    pub winners: Option<&'a [u32]>,
    /// The forward's aggregation: which edges the winners are read for
    /// ([`Reduce::takes_max`]).
    pub reduce: Reduce,
}

/// The aggregation's backward. With `s[v] = da[v] / indeg(v)`: the message
/// rows of `d_fused` \[N, 306\] (columns 0..204: row `q`'s gradient is
/// `Σ_{e reads q} s[target e] ⊙ gates[pos e]`, zero where no edge reads
/// it), and `d_table` \[P, 34\] += `Σ_e s[target e] ⊙ (F[e] + bias[type e])`
/// (the messages before gating, `fused` the step's product as in
/// [`aggregate`]). Under the max aggregation (`winners`), `s[v]` is
/// `da[v]` on the channels where the edge won, zero elsewhere; under
/// [`Reduce::MeanMax`], that for backward edges and `da[v] ⊙ inv_degree[v]`
/// for forward ones.
pub fn aggregate_backward<T: Elem>(
    reads: EdgesBackward<'_, T>,
    d_fused: &mut [f32],
    d_table: &mut [f32],
    bias_sums: &mut [f32],
    threads: usize,
) {
    assert_eq!(bias_sums.len(), 6 * H);
    assert_eq!(reads.reduce.has_max(), reads.winners.is_some(), "winners exactly where the forward took a max");
    let nodes = reads.da.len() / H;
    let out = Shared::new(d_fused);
    // Per range: its share of d_table, then the message columns' sums.
    let mut both = vec![0f32; d_table.len() + bias_sums.len()];
    let table_len = d_table.len();
    par_ranges_summing(nodes, threads, &mut both, |range, part| {
        let (table, sums) = part.split_at_mut(table_len);
        let mut start = range.start;
        while start < range.end {
            let chunk = start..(start + SUM_CHUNK).min(range.end);
            let run = |table: &mut [f32], chunk: std::ops::Range<usize>| {
                #[cfg(target_arch = "x86_64")]
                if cpu::allows(Isa::Avx512) && reads.winners.is_none() {
                    // SAFETY: the CPU has AVX-512; rows of `range` only.
                    return unsafe { avx512::edges_backward(reads, out, table, chunk) };
                }
                #[cfg(target_arch = "x86_64")]
                if cpu::allows(Isa::Avx2) {
                    // SAFETY: the CPU has AVX2 and FMA; rows of `range` only.
                    return unsafe { edges_backward_avx2(reads, out, table, chunk) };
                }
                // SAFETY: rows of `range` only.
                unsafe { edges_backward_rows(reads, out, table, chunk) }
            };
            run(table, chunk.clone());
            // SAFETY: the rows this thread just wrote, read back by it.
            add_rows(sums, unsafe { out.slice(chunk.start * FUSED, chunk.len() * FUSED) }, FUSED, 0..chunk.len());
            start = chunk.end;
        }
    });
    for (d, s) in d_table.iter_mut().chain(bias_sums.iter_mut()).zip(&both) {
        *d += s;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn edges_backward_avx2<T: Elem>(reads: EdgesBackward<'_, T>, out: Shared, table: &mut [f32], range: std::ops::Range<usize>) {
    edges_backward_rows::<T>(reads, out, table, range)
}

#[inline(always)]
unsafe fn edges_backward_rows<T: Elem>(
    EdgesBackward { da, inv_degree, fused: (fused, fl), bias, gates, targets, positions, by_row, winners, reduce }: EdgesBackward<'_, T>,
    out: Shared,
    table: &mut [f32],
    range: std::ops::Range<usize>,
) {
    {
        for v in range {
            for t in 0..6 {
                let q = v * 9 + t;
                let mut acc = [0f32; H];
                let m = &fused[v * fl.row + t * fl.block..][..H];
                let b = &bias[t * H..][..H];
                for &e in &by_row.edges[by_row.start[q]..by_row.start[q + 1]] {
                    let target = targets[e] as usize;
                    let d = &da[target * H..][..H];
                    let p = positions[e] as usize;
                    let g = &gates[p * H..][..H];
                    let dt = &mut table[p * H..][..H];
                    if let Some(won) = winners.filter(|_| reduce.takes_max(t as i64)) {
                        let won = &won[target * H..][..H];
                        for j in 0..H {
                            if won[j] == e as u32 {
                                acc[j] += d[j] * g[j];
                                dt[j] += d[j] * (m[j].f32() + b[j]);
                            }
                        }
                        continue;
                    }
                    let scale = inv_degree[target];
                    for j in 0..H {
                        let s = d[j] * scale;
                        acc[j] += s * g[j];
                        dt[j] += s * (m[j].f32() + b[j]);
                    }
                }
                // Node `v`'s message columns, written by this thread alone.
                out.slice(v * FUSED + t * H, H).copy_from_slice(&acc);
            }
        }
    }
}
