//! The step's element-wise work, fused: two loops per step instead of some
//! fifteen tensor operations, each of which read and wrote whole \[N, 34\]
//! or \[E, 34\] arrays.
//!
//! - [`aggregate`]: the mean (or the sum, the channel-wise max, or the
//!   two by direction: [`Reduce`]) over each node's incoming edges of the gated message
//!   `(F[row] + b_type) ⊙ p(position)`, read straight from the fused
//!   product's rows and the gate table (no per-edge array);
//!   [`aggregate_max_tape`] also keeps which edge won each channel, for
//!   training's backward;
//! - [`gru`]: the GRU cell's gates and new state from the two products;
//!   [`gru_train`] also keeps training's tape.
//!
//! Both take the products in FP32 or BF16 ([`Elem`]), accumulate in FP32,
//! and split the nodes over threads ([`crate::threads`]). On x86-64 the
//! loops are compiled again for AVX2 and FMA, and the GRU cell is also
//! written in AVX-512 intrinsics (`crate::avx512`); the best the CPU runs
//! is chosen at run time ([`crate::cpu`]).

#[cfg(target_arch = "x86_64")]
use crate::avx512;
use crate::cpu::{self, Isa};
use crate::elem::{sigmoid_by, tanh_by, Bf16, Elem};
use crate::gemm::RowGroups;
use crate::threads::{par_ranges, split, split2, Shared};
use crate::{EDGE_TYPES, H};

/// A row of 34 padded to whole AVX2 vectors (and halves of AVX-512 ones).
const PADDED: usize = 40;

/// Where block `b` of node `v`'s row of a product is: at
/// `v · row + b · block` (row-major \[N, B·34\]: `row = 34B`, `block =
/// 34`; block-major \[B, N, 34\]: `row = 34`, `block = 34N`).
#[derive(Clone, Copy)]
pub struct Layout {
    pub row: usize,
    pub block: usize,
}

impl Layout {
    pub fn row_major(blocks: usize) -> Layout {
        Layout { row: blocks * H, block: H }
    }
    pub fn block_major(nodes: usize) -> Layout {
        Layout { row: H, block: nodes * H }
    }
}

/// The edges of a batch as the aggregation reads them, sorted by target.
pub struct Edges<'a> {
    /// `crow[v]..crow[v + 1]` are node `v`'s incoming edges.
    pub crow: &'a [i64],
    /// Where each edge's message (its source's block of its type) starts
    /// in the fused product.
    pub offsets: &'a [usize],
    /// Each edge's type (its bias row) and clamped position (its gate row).
    pub types: &'a [i64],
    pub positions: &'a [i64],
    /// How a node combines them.
    pub reduce: Reduce,
}

/// How a node combines its incoming messages (a bundle's
/// `hyper.aggregation`): their mean, their sum, their channel-wise
/// maximum, or ([`Reduce::MeanMax`]) the mean of those along forward edges
/// plus the channel-wise maximum of those along backward ones. Without
/// incoming edges the result is zero under all four; under `MeanMax` each
/// of its two terms is zero without edges of its direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reduce {
    #[default]
    Mean,
    Sum,
    Max,
    /// The mean over forward edges (a node hears its operands and its
    /// predecessors) plus the channel-wise max over backward edges (it
    /// hears its users and its successors), summed into the same values.
    MeanMax,
}

/// The first backward edge type ([`crate::EDGE_TYPES`] order: control,
/// data, call, then the three reversed).
pub const FIRST_BACKWARD: i64 = 3;

impl Reduce {
    /// Whether the messages along edges of type `t` go into the
    /// channel-wise maximum (and training sends their gradient to the
    /// winners), not into the mean or the sum.
    #[inline(always)]
    pub fn takes_max(self, t: i64) -> bool {
        match self {
            Reduce::Max => true,
            Reduce::MeanMax => t >= FIRST_BACKWARD,
            Reduce::Mean | Reduce::Sum => false,
        }
    }

    /// Whether some messages go into a channel-wise maximum (the forward
    /// keeps winners for training).
    #[inline(always)]
    pub fn has_max(self) -> bool {
        matches!(self, Reduce::Max | Reduce::MeanMax)
    }

    /// What the summed (non-max) messages of a node whose incoming edges
    /// have the types `types` are multiplied by: [`message_scale`] of the
    /// in-degree, and under [`Reduce::MeanMax`] 1 / the number of forward
    /// edges (0 without one).
    #[inline(always)]
    pub fn scale_of(self, types: &[i64]) -> f32 {
        match self {
            Reduce::MeanMax => {
                let forward = types.iter().filter(|&&t| t < FIRST_BACKWARD).count();
                message_scale(forward, Reduce::MeanMax)
            }
            r => message_scale(types.len(), r),
        }
    }
}

impl Edges<'_> {
    /// [`Reduce::scale_of`] the node whose incoming edges are `start..end`.
    #[inline(always)]
    pub fn scale(&self, start: usize, end: usize) -> f32 {
        self.reduce.scale_of(&self.types[start..end])
    }
}

/// What a node's summed incoming messages are multiplied by, given its
/// in-degree: 1 / in-degree for the mean, 1 for the sum (and for the max,
/// which is not a sum: its kernels read this only for the zero), and 0
/// without incoming edges. Under [`Reduce::MeanMax`] the in-degree is the
/// forward edges' ([`Reduce::scale_of`] counts them). Every aggregation
/// (the kernels', the general step's, training's) applies this one rule.
#[inline(always)]
pub fn message_scale(in_degree: usize, reduce: Reduce) -> f32 {
    if in_degree == 0 {
        0.0
    } else if matches!(reduce, Reduce::Mean | Reduce::MeanMax) {
        1.0 / in_degree as f32
    } else {
        1.0
    }
}

/// No edge: the winner recorded by [`aggregate_max_tape`] for a node
/// without incoming edges.
pub const NO_EDGE: u32 = u32::MAX;

/// `out[v] = (1/indeg v) Σ_{e → v} (F[e] + bias[type e]) ⊙ gates[pos e]`
/// (zero without incoming edges, `F[e]` the 34 values at the edge's
/// offset), for every node: `fused` the \[N, 306\] product in any layout,
/// `bias` \[6, 34\], `gates` \[P, 34\], `out` \[N, 34\] (FP32 or BF16: the
/// next product's input). Under [`Reduce::Sum`] without the `1/indeg`;
/// under [`Reduce::Max`] the channel-wise maximum of the same messages;
/// under [`Reduce::MeanMax`] the forward edges' mean plus the backward
/// edges' maximum.
pub fn aggregate<T: Elem, O: Elem>(fused: &[T], edges: &Edges<'_>, bias: &[f32], gates: &[f32], out: &mut [O], threads: usize) {
    let nodes = out.len() / H;
    split(out, nodes, threads, |first, chunk| {
        #[cfg(target_arch = "x86_64")]
        if cpu::allows(Isa::Avx2) {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { aggregate_avx2(fused, edges, bias, gates, first, chunk) };
        }
        aggregate_rows(fused, edges, bias, gates, first, chunk)
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn aggregate_avx2<T: Elem, O: Elem>(fused: &[T], edges: &Edges<'_>, bias: &[f32], gates: &[f32], first: usize, out: &mut [O]) {
    aggregate_rows(fused, edges, bias, gates, first, out)
}

#[inline(always)]
fn aggregate_rows<T: Elem, O: Elem>(fused: &[T], edges: &Edges<'_>, bias: &[f32], gates: &[f32], first: usize, out: &mut [O]) {
    if edges.reduce.has_max() {
        let mut winners = [0u32; H];
        for (i, row) in out.chunks_exact_mut(H).enumerate() {
            let acc = max_row(fused, edges, bias, gates, first + i, &mut winners);
            for j in 0..H {
                row[j] = O::from_f32(acc[j]);
            }
        }
        return;
    }
    for (i, row) in out.chunks_exact_mut(H).enumerate() {
        let v = first + i;
        let (start, end) = (edges.crow[v] as usize, edges.crow[v + 1] as usize);
        let mut acc = [0f32; H];
        for e in start..end {
            let m = &fused[edges.offsets[e]..][..H];
            let b = &bias[edges.types[e] as usize * H..][..H];
            let g = &gates[edges.positions[e] as usize * H..][..H];
            for j in 0..H {
                acc[j] += (m[j].f32() + b[j]) * g[j];
            }
        }
        let scale = edges.scale(start, end);
        for j in 0..H {
            row[j] = O::from_f32(acc[j] * scale);
        }
    }
}

/// Node `v`'s channel-wise maximum over its incoming gated messages (zero
/// without incoming edges), and in `winners` the edge that gave each
/// channel (the first of equal ones; [`NO_EDGE`] without edges).
///
/// Under [`Reduce::MeanMax`] the maximum is over the backward edges only
/// (the winners [`NO_EDGE`] without one), plus the forward edges' mean.
#[inline(always)]
fn max_row<T: Elem>(fused: &[T], edges: &Edges<'_>, bias: &[f32], gates: &[f32], v: usize, winners: &mut [u32; H]) -> [f32; H] {
    if edges.reduce == Reduce::MeanMax {
        return mean_max_row(fused, edges, bias, gates, v, winners);
    }
    let (start, end) = (edges.crow[v] as usize, edges.crow[v + 1] as usize);
    if start == end {
        *winners = [NO_EDGE; H];
        return [0f32; H];
    }
    let mut acc = [f32::NEG_INFINITY; H];
    for e in start..end {
        let m = &fused[edges.offsets[e]..][..H];
        let b = &bias[edges.types[e] as usize * H..][..H];
        let g = &gates[edges.positions[e] as usize * H..][..H];
        for j in 0..H {
            let x = (m[j].f32() + b[j]) * g[j];
            if x > acc[j] {
                acc[j] = x;
                winners[j] = e as u32;
            }
        }
    }
    acc
}

/// [`max_row`] under [`Reduce::MeanMax`].
#[inline(always)]
fn mean_max_row<T: Elem>(fused: &[T], edges: &Edges<'_>, bias: &[f32], gates: &[f32], v: usize, winners: &mut [u32; H]) -> [f32; H] {
    let (start, end) = (edges.crow[v] as usize, edges.crow[v + 1] as usize);
    let mut max = [f32::NEG_INFINITY; H];
    let mut sum = [0f32; H];
    let mut backward = false;
    *winners = [NO_EDGE; H];
    for e in start..end {
        let m = &fused[edges.offsets[e]..][..H];
        let b = &bias[edges.types[e] as usize * H..][..H];
        let g = &gates[edges.positions[e] as usize * H..][..H];
        if edges.types[e] >= FIRST_BACKWARD {
            backward = true;
            for j in 0..H {
                let x = (m[j].f32() + b[j]) * g[j];
                if x > max[j] {
                    max[j] = x;
                    winners[j] = e as u32;
                }
            }
        } else {
            for j in 0..H {
                sum[j] += (m[j].f32() + b[j]) * g[j];
            }
        }
    }
    let scale = edges.scale(start, end);
    for j in 0..H {
        max[j] = if backward { max[j] } else { 0.0 } + sum[j] * scale;
    }
    max
}

/// [`aggregate`] under [`Reduce::Max`], FP32 out, also writing `winners`
/// \[N, 34\]: the edge (its index in `edges`) whose message is each
/// node's maximum in each channel, which training's backward
/// ([`crate::backward::aggregate_backward`]) sends the gradient to.
pub fn aggregate_max_tape<T: Elem>(
    fused: &[T],
    edges: &Edges<'_>,
    bias: &[f32],
    gates: &[f32],
    out: &mut [f32],
    winners: &mut [u32],
    threads: usize,
) {
    assert!(edges.reduce.has_max(), "the tape of the max aggregation");
    let nodes = out.len() / H;
    split2(out, winners, nodes, threads, |first, chunk, won| {
        #[cfg(target_arch = "x86_64")]
        if cpu::allows(Isa::Avx2) {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { max_tape_avx2(fused, edges, bias, gates, first, chunk, won) };
        }
        max_tape_rows(fused, edges, bias, gates, first, chunk, won)
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_tape_avx2<T: Elem>(
    fused: &[T],
    edges: &Edges<'_>,
    bias: &[f32],
    gates: &[f32],
    first: usize,
    out: &mut [f32],
    won: &mut [u32],
) {
    max_tape_rows(fused, edges, bias, gates, first, out, won)
}

#[inline(always)]
fn max_tape_rows<T: Elem>(fused: &[T], edges: &Edges<'_>, bias: &[f32], gates: &[f32], first: usize, out: &mut [f32], won: &mut [u32]) {
    for (i, (row, w)) in out.chunks_exact_mut(H).zip(won.chunks_exact_mut(H)).enumerate() {
        let w: &mut [u32; H] = w.try_into().expect("34 winners a node");
        row.copy_from_slice(&max_row(fused, edges, bias, gates, first + i, w));
    }
}

/// The GRU cell's biases as the fused step adds them: `r` and `z` take
/// `b_i + b_h`, the candidate `b_in` outside and `b_hn` inside the reset.
pub struct GruBias {
    pub r: [f32; H],
    pub z: [f32; H],
    pub i_n: [f32; H],
    pub h_n: [f32; H],
}

/// One GRU update for every node: `gi` \[N, 102\] = `m · W_ihᵀ` (no bias),
/// the hidden gates `W_hh h` in blocks 6..9 of `fused` \[N, 306\] (each in
/// its layout), `h` \[N, 34\]; writes `next` \[N, 34\] and, if given, its
/// BF16 copy (the next step's product input).
#[allow(clippy::too_many_arguments)]
pub fn gru<T: Elem>(
    gi: (&[T], Layout),
    fused: (&[T], Layout),
    h: &[f32],
    bias: &GruBias,
    next: &mut [f32],
    next_bf16: Option<&mut [Bf16]>,
    threads: usize,
) {
    let nodes = next.len() / H;
    match next_bf16 {
        None => split(next, nodes, threads, |first, chunk| gru_dispatch::<T, f32>(gi, fused, h, bias, first, chunk, None)),
        Some(copy) => split2(next, copy, nodes, threads, |first, chunk, copy| gru_dispatch(gi, fused, h, bias, first, chunk, Some(copy))),
    }
}

pub type Product<'a, T> = (&'a [T], Layout);

fn gru_dispatch<T: Elem, C: Elem>(
    gi: Product<'_, T>,
    fused: Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    first: usize,
    next: &mut [f32],
    copy: Option<&mut [C]>,
) {
    #[cfg(target_arch = "x86_64")]
    if copy.is_none() && cpu::allows(Isa::Avx512) {
        let out = Shared::new(next);
        let nodes = next.len() / H;
        // SAFETY: the CPU has AVX-512; this range's rows only.
        return unsafe { avx512::gru(gi, fused, h, bias, out, None, first..first + nodes, first) };
    }
    #[cfg(target_arch = "x86_64")]
    if cpu::allows(Isa::Avx2) {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { gru_avx2(gi, fused, h, bias, first, next, copy) };
    }
    gru_rows::<T, C, false>(gi, fused, h, bias, first, next, copy)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gru_avx2<T: Elem, C: Elem>(
    gi: Product<'_, T>,
    fused: Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    first: usize,
    next: &mut [f32],
    copy: Option<&mut [C]>,
) {
    gru_rows::<T, C, true>(gi, fused, h, bias, first, next, copy)
}

/// One node's GRU update, padded to whole vectors (the transcendental
/// loop has no scalar tail): its gates, its candidate, `W_hn h + b_hn`
/// and its new state; entries past 34 are padding.
struct GruRow {
    r: [f32; PADDED],
    z: [f32; PADDED],
    n: [f32; PADDED],
    phn: [f32; PADDED],
    h: [f32; PADDED],
}

#[inline(always)]
fn gru_row<T: Elem, const FMA: bool>((gi, gl): Product<'_, T>, (fused, fl): Product<'_, T>, h: &[f32], bias: &GruBias, v: usize) -> GruRow {
    let x = |g: usize| &gi[v * gl.row + g * gl.block..][..H];
    let hh = |g: usize| &fused[v * fl.row + (6 + g) * fl.block..][..H];
    let (xr, xz, xn, hr, hz, hn) = (x(0), x(1), x(2), hh(0), hh(1), hh(2));
    let hv = &h[v * H..][..H];
    // The reset and update gates' pre-activations side by side: one loop
    // of ten independent vectors through the sigmoid, whose exp is a chain
    // of a dozen dependent operations (a loop of three chains per vector
    // left the FMA ports idle). The same operations per element.
    let (mut prz, mut pxn, mut phn, mut ph) = ([0f32; 2 * PADDED], [0f32; PADDED], [0f32; PADDED], [0f32; PADDED]);
    for j in 0..H {
        prz[j] = xr[j].f32() + hr[j].f32() + bias.r[j];
        prz[PADDED + j] = xz[j].f32() + hz[j].f32() + bias.z[j];
        pxn[j] = xn[j].f32() + bias.i_n[j];
        phn[j] = hn[j].f32() + bias.h_n[j];
        ph[j] = hv[j];
    }
    for x in prz.iter_mut() {
        *x = sigmoid_by::<FMA>(*x);
    }
    let mut row = GruRow { r: [0.0; PADDED], z: [0.0; PADDED], n: [0.0; PADDED], phn, h: [0.0; PADDED] };
    row.r.copy_from_slice(&prz[..PADDED]);
    row.z.copy_from_slice(&prz[PADDED..]);
    for j in 0..PADDED {
        row.n[j] = tanh_by::<FMA>(pxn[j] + row.r[j] * phn[j]);
    }
    for j in 0..PADDED {
        row.h[j] = row.n[j] + row.z[j] * (ph[j] - row.n[j]);
    }
    row
}

#[inline(always)]
fn gru_rows<T: Elem, C: Elem, const FMA: bool>(
    (gi, gl): Product<'_, T>,
    (fused, fl): Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    first: usize,
    next: &mut [f32],
    mut copy: Option<&mut [C]>,
) {
    for (i, row) in next.chunks_exact_mut(H).enumerate() {
        let out = gru_row::<T, FMA>((gi, gl), (fused, fl), h, bias, first + i);
        let out = &out.h[..H];
        row.copy_from_slice(out);
        if let Some(c) = copy.as_deref_mut() {
            for (d, s) in c[i * H..][..H].iter_mut().zip(out) {
                *d = C::from_f32(*s);
            }
        }
    }
}

/// What training's forward keeps of one GRU update, \[N, 34\] each: the
/// reset and update gates, the candidate, and `W_hn h + b_hn`.
pub struct GruTape {
    pub r: Shared,
    pub z: Shared,
    pub n: Shared,
    pub ghn: Shared,
}

/// [`gru`] for training: writes `next` and the tape.
#[allow(clippy::too_many_arguments)]
pub fn gru_train<T: Elem>(
    gi: Product<'_, T>,
    fused: Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    next: &mut [f32],
    tape: &GruTape,
    threads: usize,
) {
    let nodes = h.len() / H;
    let out = Shared::new(next);
    par_ranges(nodes, threads, |range| {
        #[cfg(target_arch = "x86_64")]
        if cpu::allows(Isa::Avx512) {
            // SAFETY: the CPU has AVX-512; rows of `range` only.
            return unsafe { avx512::gru(gi, fused, h, bias, out, Some(tape), range, 0) };
        }
        #[cfg(target_arch = "x86_64")]
        if cpu::allows(Isa::Avx2) {
            // SAFETY: the CPU has AVX2 and FMA; rows of `range` only.
            return unsafe { gru_train_avx2(gi, fused, h, bias, out, tape, range) };
        }
        // SAFETY: rows of `range` only.
        unsafe { gru_train_rows::<T, false>(gi, fused, h, bias, out, tape, range) }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gru_train_avx2<T: Elem>(
    gi: Product<'_, T>,
    fused: Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    out: Shared,
    tape: &GruTape,
    range: std::ops::Range<usize>,
) {
    gru_train_rows::<T, true>(gi, fused, h, bias, out, tape, range)
}

#[inline(always)]
unsafe fn gru_train_rows<T: Elem, const FMA: bool>(
    (gi, gl): Product<'_, T>,
    (fused, fl): Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    out: Shared,
    tape: &GruTape,
    range: std::ops::Range<usize>,
) {
    for v in range {
        let GruRow { r, z, n, phn, h: o } = gru_row::<T, FMA>((gi, gl), (fused, fl), h, bias, v);
        out.slice(v * H, H).copy_from_slice(&o[..H]);
        tape.r.slice(v * H, H).copy_from_slice(&r[..H]);
        tape.z.slice(v * H, H).copy_from_slice(&z[..H]);
        tape.n.slice(v * H, H).copy_from_slice(&n[..H]);
        tape.ghn.slice(v * H, H).copy_from_slice(&phn[..H]);
    }
}

/// Which blocks of the fused product `h · [W_msg; W_hh]ᵀ` each node needs,
/// for edges whose sources are `sources` (`node · 6 + type`): the blocks
/// of the edge types it sends and the GRU's three. Returns each edge
/// type's block (`slot[type]`: the types that fewest nodes send first)
/// and the rows grouped by their first needed column, so that each node's
/// needs are one suffix of the row. On real graphs only call instructions
/// (and function entries) need the call blocks, only instructions the
/// control blocks, and a constant needs one data block: about a quarter
/// of the product's columns go.
pub fn needed_blocks(sources: &[i64], nodes: usize) -> ([usize; EDGE_TYPES], RowGroups) {
    let (slot, first) = first_needed(sources, nodes, H);
    (slot, RowGroups::by_first_column(&first))
}

/// [`needed_blocks`] for blocks of `h` columns (a state of any width):
/// each edge type's block, and each node's first needed column (`6 · h`
/// for a node that sends nothing: the GRU's blocks only).
pub fn first_needed(sources: &[i64], nodes: usize, h: usize) -> ([usize; EDGE_TYPES], Vec<usize>) {
    const TYPES: usize = EDGE_TYPES;
    let mut sends = vec![0u8; nodes];
    for &s in sources {
        sends[(s / EDGE_TYPES as i64) as usize] |= 1 << (s % EDGE_TYPES as i64);
    }
    let senders: [usize; TYPES] = std::array::from_fn(|t| sends.iter().filter(|&&m| m >> t & 1 == 1).count());
    let mut order: [usize; TYPES] = std::array::from_fn(|t| t);
    order.sort_by_key(|&t| (senders[t], t));
    let mut slot = [0usize; TYPES];
    for (b, &t) in order.iter().enumerate() {
        slot[t] = b;
    }
    let first: Vec<usize> =
        sends.iter().map(|&m| (0..TYPES).filter(|&t| m >> t & 1 == 1).map(|t| slot[t]).min().unwrap_or(TYPES) * h).collect();
    (slot, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The edge types that fewest nodes send get the first blocks, and
    /// each node's group starts at the first block it needs: node 0 sends
    /// types 2 and 0, node 1 types 0, 4 and 1, node 2 types 1 and 0, node 3
    /// type 1, node 4 nothing (it needs the GRU's blocks only).
    #[test]
    fn nodes_need_the_blocks_of_the_types_they_send() {
        let edge = |node: i64, ty: i64| node * EDGE_TYPES as i64 + ty;
        let sources = [edge(0, 2), edge(0, 0), edge(1, 0), edge(1, 4), edge(2, 1), edge(2, 0), edge(3, 1), edge(1, 1)];
        let (slot, groups) = needed_blocks(&sources, 5);
        // Senders: types 3 and 5 none, 2 and 4 one node, 0 and 1 three
        // (ties in type order).
        assert_eq!(slot, [4, 5, 2, 0, 3, 1]);
        let h = H;
        let groups = groups.groups();
        assert_eq!(groups, vec![(2 * h, vec![0]), (3 * h, vec![1]), (4 * h, vec![2]), (5 * h, vec![3]), (6 * h, vec![4])]);
    }
}
