//! The CPU inference step's element-wise work, fused: two loops per step
//! instead of some fifteen libtorch operations, each of which read and
//! wrote whole \[N, 34\] or \[E, 34\] tensors (and, with BF16 products,
//! converted dtypes element by element on a slow path).
//!
//! - [`aggregate`]: the mean over each node's incoming edges of the gated
//!   message `(F[row] + b_type) ⊙ p(position)`, read straight from the
//!   fused product's rows and the gate table (no per-edge tensor);
//! - [`gru`]: the GRU cell's gates and new state from the two products.
//!
//! Both take the products in FP32 or BF16 ([`Elem`]), accumulate in FP32,
//! and split the nodes over libtorch's intra-op threads ([`par_ranges`]).
//! The training step adds their variants that keep a tape
//! ([`gru_train`]) and the two backward loops ([`gru_backward`],
//! [`aggregate_backward`], which also sum the biases' gradients). The
//! exponential is a branch-free polynomial (Cephes' `expf`, relative error
//! ~1e-7) that the compiler vectorises; on x86-64 the loops are compiled
//! again for AVX2 and FMA, the GRU cell and the backward loops are also
//! written out in AVX-512 intrinsics (`mod avx512`: the GRU cell on 8
//! rows of 34 laid end to end as 17 vectors, the backward loops on 34
//! values as two vectors and a masked one), and the best the CPU runs is chosen at run
//! time (the portable build's FMAs are library calls: slow, but x86-64
//! CPUs without AVX2 and FMA predate 2013).

use crate::ggnn::HIDDEN;

const H: usize = HIDDEN as usize;
/// Columns of a fused product row: six edge-type maps and `W_hh`'s three gates.
pub(crate) const FUSED: usize = 9 * H;
/// Columns of the input product row: `W_ih`'s three gates.
pub(crate) const GATES: usize = 3 * H;
/// A row of 34 padded to whole AVX2 vectors (and halves of AVX-512 ones).
const PADDED: usize = 40;

/// An element of a product: FP32, or BF16 stored as its upper 16 bits.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    fn f32(self) -> f32;
    fn from_f32(x: f32) -> Self;
}

impl Elem for f32 {
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(x: f32) -> f32 {
        x
    }
}

/// BF16 bits.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct Bf16(pub u16);

impl Elem for Bf16 {
    #[inline(always)]
    fn f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
    /// Round to nearest even, as libtorch converts (NaN never occurs here).
    #[inline(always)]
    fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        Bf16(((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16)
    }
}

/// `e^x`, branch-free: `2^n · p(r)` with `x = n ln 2 + r`, `|r| ≤ ln2/2`
/// (Cephes' polynomial). Inputs are clamped to [-87, 88].
#[inline(always)]
fn exp(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.max(-87.0).min(88.0);
    let shifted = x * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    // (mul_add: one FMA instruction where the loop is compiled for FMA,
    // as the AVX2 variants are.)
    let r = (-n).mul_add(0.693_359_4, x);
    let r = (-n).mul_add(-2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4f32;
    p = p.mul_add(r, 1.398_199_9e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 0.166_666_65);
    p = p.mul_add(r, 0.5);
    let y = (p * r).mul_add(r, r + 1.0);
    let n = shifted.to_bits() as i32 - MAGIC.to_bits() as i32;
    y * f32::from_bits(((n + 127) << 23) as u32)
}

#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[inline(always)]
fn tanh(x: f32) -> f32 {
    2.0 * sigmoid(2.0 * x) - 1.0
}

/// Where block `b` of node `v`'s row of a product is: at
/// `v · row + b · block` (row-major \[N, B·34\]: `row = 34B`, `block =
/// 34`; block-major \[B, N, 34\]: `row = 34`, `block = 34N`).
#[derive(Clone, Copy)]
pub(crate) struct Layout {
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

/// Runs `$body` with the type `$T` bound to [`Bf16`] when `$bf16`, else to
/// `f32`: one call site for the two element types of the products.
macro_rules! with_elem {
    ($bf16:expr, $T:ident => $body:expr) => {
        if $bf16 {
            type $T = $crate::kernels::Bf16;
            $body
        } else {
            type $T = f32;
            $body
        }
    };
}
pub(crate) use with_elem;

/// The edges of a batch as the aggregation reads them, sorted by target.
pub(crate) struct Edges<'a> {
    /// `crow[v]..crow[v + 1]` are node `v`'s incoming edges.
    pub crow: &'a [i64],
    /// Where each edge's message (its source's block of its type) starts
    /// in the fused product.
    pub offsets: &'a [usize],
    /// Each edge's type (its bias row) and clamped position (its gate row).
    pub types: &'a [i64],
    pub positions: &'a [i64],
}

/// `out[v] = (1/indeg v) Σ_{e → v} (F[e] + bias[type e]) ⊙ gates[pos e]`
/// (zero without incoming edges, `F[e]` the 34 values at the edge's
/// offset), for every node: `fused` the \[N, 306\] product in any layout,
/// `bias` \[6, 34\], `gates` \[P, 34\], `out` \[N, 34\] (FP32 or BF16: the
/// next product's input).
pub(crate) fn aggregate<T: Elem, O: Elem>(fused: &[T], edges: &Edges<'_>, bias: &[f32], gates: &[f32], out: &mut [O], threads: usize) {
    let nodes = out.len() / H;
    split(out, nodes, threads, |first, chunk| {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
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
        let scale = if end > start { 1.0 / (end - start) as f32 } else { 0.0 };
        for j in 0..H {
            row[j] = O::from_f32(acc[j] * scale);
        }
    }
}

/// The GRU cell's biases as the fused step adds them: `r` and `z` take
/// `b_i + b_h`, the candidate `b_in` outside and `b_hn` inside the reset.
pub(crate) struct GruBias {
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
pub(crate) fn gru<T: Elem>(
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

type Product<'a, T> = (&'a [T], Layout);

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
    if copy.is_none() && avx512::usable() {
        let out = Shared::new(next);
        let nodes = next.len() / H;
        // SAFETY: the CPU has AVX-512; this range's rows only.
        return unsafe { avx512::gru(gi, fused, h, bias, out, None, first..first + nodes, first) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { gru_avx2(gi, fused, h, bias, first, next, copy) };
    }
    gru_rows(gi, fused, h, bias, first, next, copy)
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
    gru_rows(gi, fused, h, bias, first, next, copy)
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
fn gru_row<T: Elem>((gi, gl): Product<'_, T>, (fused, fl): Product<'_, T>, h: &[f32], bias: &GruBias, v: usize) -> GruRow {
    let x = |g: usize| &gi[v * gl.row + g * gl.block..][..H];
    let hh = |g: usize| &fused[v * fl.row + (6 + g) * fl.block..][..H];
    let (xr, xz, xn, hr, hz, hn) = (x(0), x(1), x(2), hh(0), hh(1), hh(2));
    let hv = &h[v * H..][..H];
    let (mut pr, mut pz, mut pxn, mut phn, mut ph) = ([0f32; PADDED], [0f32; PADDED], [0f32; PADDED], [0f32; PADDED], [0f32; PADDED]);
    for j in 0..H {
        pr[j] = xr[j].f32() + hr[j].f32() + bias.r[j];
        pz[j] = xz[j].f32() + hz[j].f32() + bias.z[j];
        pxn[j] = xn[j].f32() + bias.i_n[j];
        phn[j] = hn[j].f32() + bias.h_n[j];
        ph[j] = hv[j];
    }
    let mut row = GruRow { r: [0.0; PADDED], z: [0.0; PADDED], n: [0.0; PADDED], phn, h: [0.0; PADDED] };
    for j in 0..PADDED {
        row.r[j] = sigmoid(pr[j]);
        row.z[j] = sigmoid(pz[j]);
        row.n[j] = tanh(pxn[j] + row.r[j] * phn[j]);
        row.h[j] = row.n[j] + row.z[j] * (ph[j] - row.n[j]);
    }
    row
}

#[inline(always)]
fn gru_rows<T: Elem, C: Elem>(
    (gi, gl): Product<'_, T>,
    (fused, fl): Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    first: usize,
    next: &mut [f32],
    mut copy: Option<&mut [C]>,
) {
    for (i, row) in next.chunks_exact_mut(H).enumerate() {
        let out = gru_row((gi, gl), (fused, fl), h, bias, first + i);
        let out = &out.h[..H];
        row.copy_from_slice(out);
        if let Some(c) = copy.as_deref_mut() {
            for (d, s) in c[i * H..][..H].iter_mut().zip(out) {
                *d = C::from_f32(*s);
            }
        }
    }
}

/// Below this many nodes a step runs on the calling thread alone.
const PARALLEL_NODES: usize = 2048;

/// Runs `work(first_node, rows)` over `nodes` rows of 34 of `out`, split
/// into one contiguous range per thread.
fn split<O: Send>(out: &mut [O], nodes: usize, threads: usize, work: impl Fn(usize, &mut [O]) + Sync) {
    assert!(out.len() >= nodes * H);
    let rows = Rows(out.as_mut_ptr());
    // SAFETY: the ranges are disjoint and within `nodes`.
    par_ranges(nodes, threads, |r| work(r.start, unsafe { rows.get(r.start * H, r.len() * H) }));
}

/// [`split`] over two outputs of the same rows.
fn split2<A: Send, B: Send>(a: &mut [A], b: &mut [B], nodes: usize, threads: usize, work: impl Fn(usize, &mut [A], &mut [B]) + Sync) {
    assert!(a.len() >= nodes * H && b.len() >= nodes * H);
    let (ra, rb) = (Rows(a.as_mut_ptr()), Rows(b.as_mut_ptr()));
    // SAFETY: the ranges are disjoint and within `nodes`.
    par_ranges(nodes, threads, |r| work(r.start, unsafe { ra.get(r.start * H, r.len() * H) }, unsafe { rb.get(r.start * H, r.len() * H) }));
}

/// A slice that threads take disjoint parts of.
pub(crate) struct Rows<O>(*mut O);

// SAFETY: every user takes parts that no other thread touches.
unsafe impl<O: Send> Send for Rows<O> {}
unsafe impl<O: Send> Sync for Rows<O> {}

impl<O> Rows<O> {
    pub fn new(slice: &mut [O]) -> Rows<O> {
        Rows(slice.as_mut_ptr())
    }

    /// # Safety
    /// In bounds, and taken by this thread alone for the borrow.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self, start: usize, len: usize) -> &mut [O] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }

    /// The start (for writes that [`Rows::get`]'s rules govern).
    pub fn ptr(&self) -> *mut O {
        self.0
    }
}

/// A buffer that threads write in disjoint row ranges.
#[derive(Clone, Copy)]
pub(crate) struct Shared(*mut f32);

// SAFETY: every user writes rows that no other thread touches.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    pub fn new(buffer: &mut [f32]) -> Shared {
        Shared(buffer.as_mut_ptr())
    }

    /// The buffer's start (writes through it follow [`Shared::slice`]'s rule).
    pub fn ptr(&self) -> *mut f32 {
        self.0
    }

    /// Elements `start..start + len`.
    ///
    /// # Safety
    /// In bounds, and written by this thread alone for the borrow.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, len: usize) -> &mut [f32] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

/// Runs `work(range)` over `0..nodes`, one contiguous range per thread,
/// on libtorch's intra-op threads (`at::parallel_for`: ranges of at least
/// [`PARALLEL_NODES`], as many as there are threads at most, split
/// evenly, so the same ranges for the same thread count every time).
/// `threads` 1 runs `work` on the calling thread.
pub(crate) fn par_ranges(nodes: usize, threads: usize, work: impl Fn(std::ops::Range<usize>) + Sync) {
    if threads.clamp(1, nodes.div_ceil(PARALLEL_NODES).max(1)) == 1 {
        return work(0..nodes);
    }
    struct Call<'a> {
        work: &'a (dyn Fn(std::ops::Range<usize>) + Sync),
        panic: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
    }
    extern "C" fn run(ctx: *mut std::ffi::c_void, begin: i64, end: i64) {
        // SAFETY: `ctx` is the `Call` below, alive for the whole call.
        let call = unsafe { &*(ctx as *const Call<'_>) };
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (call.work)(begin as usize..end as usize))) {
            call.panic.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(payload);
        }
    }
    let call = Call { work: &work, panic: std::sync::Mutex::new(None) };
    // SAFETY: `run` matches the callback's signature and catches every
    // panic; `call` outlives the call.
    let status = unsafe { programl_parallel_for(nodes as i64, PARALLEL_NODES as i64, run, &call as *const Call<'_> as *mut _) };
    if let Some(payload) = call.panic.into_inner().unwrap_or_else(|p| p.into_inner()) {
        std::panic::resume_unwind(payload);
    }
    assert_eq!(status, 0, "at::parallel_for failed");
}

extern "C" {
    fn programl_parallel_for(
        n: i64,
        grain: i64,
        f: extern "C" fn(*mut std::ffi::c_void, i64, i64),
        ctx: *mut std::ffi::c_void,
    ) -> std::ffi::c_int;
}

/// Fills `out` (rows of 34) with a dropout mask: each entry `scale` with
/// probability `keep`, else 0. Entries come in pairs from one 64-bit hash
/// of `(seed, pair index)` (32 bits each, of which the top 24 are
/// compared), so the mask depends on the seed alone, not on the threads.
/// ATen's CPU `bernoulli_` draws one Mersenne Twister number per entry on
/// one thread on AMD CPUs (MKL's generator only on Intel ones): a tenth of
/// a training step with dropout.
pub(crate) fn dropout_mask(out: &mut [f32], seed: u64, keep: f32, scale: f32, threads: usize) {
    assert!(out.len() % H == 0 && H % 2 == 0);
    let nodes = out.len() / H;
    // Kept below: the top 24 bits of a 32-bit draw under `keep · 2^24`.
    let bound = (keep as f64 * (1u64 << 24) as f64).round() as u32;
    split(out, nodes, threads, |first, rows| {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq") {
            // SAFETY: the CPU has AVX-512F and DQ.
            return unsafe { dropout_pairs_avx512(rows, (first * H / 2) as u64, seed, bound, scale) };
        }
        dropout_pairs(rows, (first * H / 2) as u64, seed, bound, scale)
    });
}

/// The multiplier that spreads pair indices before [`programl::hash::mix`].
const PAIR_SPREAD: u64 = 0xD1B5_4A32_D192_ED03;

/// [`dropout_mask`]'s entries for the pairs of `rows`, the first being
/// pair `first_pair` of the mask.
fn dropout_pairs(rows: &mut [f32], first_pair: u64, seed: u64, bound: u32, scale: f32) {
    for (i, pair) in rows.chunks_exact_mut(2).enumerate() {
        let z = programl::hash::mix(seed ^ (first_pair + i as u64).wrapping_mul(PAIR_SPREAD));
        pair[0] = if ((z as u32) >> 8) < bound { scale } else { 0.0 };
        pair[1] = if (((z >> 32) as u32) >> 8) < bound { scale } else { 0.0 };
    }
}

/// [`dropout_pairs`], 8 pairs (16 entries) per iteration: the same
/// SplitMix64 in 64-bit lanes (`vpmullq`), each lane's low and high 32 bits
/// being its pair's two entries, as they lie in memory. Bit for bit the
/// scalar mask (tested).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn dropout_pairs_avx512(rows: &mut [f32], first_pair: u64, seed: u64, bound: u32, scale: f32) {
    use std::arch::x86_64::*;
    let pairs = rows.len() / 2;
    let splat = |x: u64| _mm512_set1_epi64(x as i64);
    let lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    use programl::hash::{MIX_GAMMA, MIX_MUL};
    let (seed_v, spread, golden) = (splat(seed), splat(PAIR_SPREAD), splat(MIX_GAMMA));
    let (m1, m2) = (splat(MIX_MUL[0]), splat(MIX_MUL[1]));
    let (bound_v, scale_v) = (_mm512_set1_epi32(bound as i32), _mm512_set1_ps(scale));
    let mut i = 0;
    while i + 8 <= pairs {
        let index = _mm512_add_epi64(splat(first_pair + i as u64), lanes);
        let mut z = _mm512_add_epi64(_mm512_xor_si512(seed_v, _mm512_mullo_epi64(index, spread)), golden);
        z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), m1);
        z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), m2);
        z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
        let kept = _mm512_cmplt_epu32_mask(_mm512_srli_epi32(z, 8), bound_v);
        _mm512_storeu_ps(rows.as_mut_ptr().add(2 * i), _mm512_maskz_mov_ps(kept, scale_v));
        i += 8;
    }
    dropout_pairs(&mut rows[2 * i..], first_pair + i as u64, seed, bound, scale);
}

/// What training's forward keeps of one GRU update, \[N, 34\] each: the
/// reset and update gates, the candidate, and `W_hn h + b_hn`.
pub(crate) struct GruTape {
    pub r: Shared,
    pub z: Shared,
    pub n: Shared,
    pub ghn: Shared,
}

/// [`gru`] for training: writes `next` and the tape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gru_train<T: Elem>(
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
        if avx512::usable() {
            // SAFETY: the CPU has AVX-512; rows of `range` only.
            return unsafe { avx512::gru(gi, fused, h, bias, out, Some(tape), range, 0) };
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA; rows of `range` only.
            return unsafe { gru_train_avx2(gi, fused, h, bias, out, tape, range) };
        }
        // SAFETY: rows of `range` only.
        unsafe { gru_train_rows(gi, fused, h, bias, out, tape, range) }
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
    gru_train_rows(gi, fused, h, bias, out, tape, range)
}

#[inline(always)]
unsafe fn gru_train_rows<T: Elem>(
    (gi, gl): Product<'_, T>,
    (fused, fl): Product<'_, T>,
    h: &[f32],
    bias: &GruBias,
    out: Shared,
    tape: &GruTape,
    range: std::ops::Range<usize>,
) {
    for v in range {
        let GruRow { r, z, n, phn, h: o } = gru_row((gi, gl), (fused, fl), h, bias, v);
        out.slice(v * H, H).copy_from_slice(&o[..H]);
        tape.r.slice(v * H, H).copy_from_slice(&r[..H]);
        tape.z.slice(v * H, H).copy_from_slice(&z[..H]);
        tape.n.slice(v * H, H).copy_from_slice(&n[..H]);
        tape.ghn.slice(v * H, H).copy_from_slice(&phn[..H]);
    }
}

/// The GRU cell written out in AVX-512 (FP32 or BF16 products): 8 rows at a
/// time as 17 vectors (34 values row by row as two vectors of 16 and a
/// masked one of 2 wasted a third of the lanes), the exponential as [`exp`]'s
/// polynomial with `vscalefps` for the power of two, and the reciprocal as
/// `vrcp14ps` and one Newton step (relative error ~1e-8). The portable
/// loop, compiled for AVX2, spills its 40-wide rows to the stack.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::{EdgesBackward, Elem, GruBackward, GruBias, GruGrads, GruTape, Product, Shared, FUSED, GATES, H};

    /// Whether the CPU runs this module's loops.
    pub(super) fn usable() -> bool {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("avx512vl")
    }

    /// 16 products' values (`mask` of them) from `p`, as FP32.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn load<T: Elem>(p: *const T, mask: __mmask16) -> __m512 {
        if std::mem::size_of::<T>() == 4 {
            _mm512_maskz_loadu_ps(mask, p as *const f32)
        } else {
            // BF16: the upper half of an FP32.
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p as *const i16))))
        }
    }

    const MASKS: [__mmask16; 3] = [0xffff, 0xffff, 0x0003];

    /// One vector's inputs to [`cell`]: the input gates' products, the
    /// hidden ones, the biases, the state.
    type CellArgs = ([__m512; 3], [__m512; 3], [__m512; 4], __m512);

    /// The cell on 16 lanes: `x*` the input gates' products, `g*` the
    /// hidden ones (no biases), `b*` the biases, `h` the state. Returns
    /// the new state and the tape's `r`, `z`, `n`, `W_hn h + b_hn`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn cell(x: [__m512; 3], g: [__m512; 3], b: [__m512; 4], h: __m512) -> [__m512; 5] {
        let [out] = cells([x], [g], [b], [h]);
        out
    }

    /// `exp` (as the scalar [`super::exp`]: a clamp, a range reduction by
    /// ln 2, a degree-7 polynomial) on `M` vectors at once, each operation
    /// for all of them before the next: `M` independent chains in flight,
    /// where one vector's chain of about twelve dependent operations left
    /// the FMA ports idle. Each lane's operations are the same whatever
    /// `M`, so the same bits.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn exp_n<const M: usize>(mut x: [__m512; M]) -> [__m512; M] {
        let mut n = [_mm512_setzero_ps(); M];
        let mut r = [_mm512_setzero_ps(); M];
        let mut p = [_mm512_set1_ps(1.987_569_1e-4); M];
        for v in x.iter_mut() {
            *v = _mm512_min_ps(_mm512_max_ps(*v, _mm512_set1_ps(-87.0)), _mm512_set1_ps(88.0));
        }
        for i in 0..M {
            n[i] = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
                x[i],
                _mm512_set1_ps(std::f32::consts::LOG2_E),
            ));
        }
        for i in 0..M {
            r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(0.693_359_4), x[i]);
        }
        for i in 0..M {
            r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(-2.121_944_4e-4), r[i]);
        }
        for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            for i in 0..M {
                p[i] = _mm512_fmadd_ps(p[i], r[i], _mm512_set1_ps(c));
            }
        }
        for i in 0..M {
            let y = _mm512_fmadd_ps(_mm512_mul_ps(p[i], r[i]), r[i], _mm512_add_ps(r[i], _mm512_set1_ps(1.0)));
            x[i] = _mm512_scalef_ps(y, n[i]);
        }
        x
    }

    /// `1 / (1 + exp(-x))` on `M` vectors at once (as [`exp_n`]), the
    /// reciprocal as `rcp14` and one Newton step.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn sigmoid_n<const M: usize>(mut x: [__m512; M]) -> [__m512; M] {
        for v in x.iter_mut() {
            *v = _mm512_sub_ps(_mm512_setzero_ps(), *v);
        }
        let mut d = exp_n(x);
        for v in d.iter_mut() {
            *v = _mm512_add_ps(_mm512_set1_ps(1.0), *v);
        }
        for (o, d) in x.iter_mut().zip(d) {
            let r = _mm512_rcp14_ps(d);
            *o = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0)));
        }
        x
    }

    /// `σ(x)` on `M` vectors to INT8 inference's needs (relative error ~1e-4, against
    /// the gates' quantisation error of ~1e-2), in 12 operations against the
    /// FP32 cell's 20: `exp(-x)` as `2^n · p(r)` (`n` the nearest integer to
    /// `-x · log2 e`, `r = -x - n ln 2` in one step, `p` Taylor's degree 5),
    /// `-x` clamped to at least -87 (no denormal sums), and the reciprocal
    /// as `rcp14` (2^-14).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn sigmoid_approx_n<const M: usize>(x: [__m512; M]) -> [__m512; M] {
        let mut out = [_mm512_setzero_ps(); M];
        let mut n = [_mm512_setzero_ps(); M];
        let mut r = [_mm512_setzero_ps(); M];
        let mut p = [_mm512_set1_ps(1.0 / 120.0); M];
        for i in 0..M {
            let x = _mm512_min_ps(x[i], _mm512_set1_ps(87.0));
            n[i] = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
                x,
                _mm512_set1_ps(-std::f32::consts::LOG2_E),
            ));
            // x + n ln 2 = -r
            r[i] = _mm512_fmadd_ps(n[i], _mm512_set1_ps(std::f32::consts::LN_2), x);
        }
        for c in [1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            for i in 0..M {
                // p · r + c, with r = -(x + n ln 2)
                p[i] = _mm512_fnmadd_ps(p[i], r[i], _mm512_set1_ps(c));
            }
        }
        for i in 0..M {
            out[i] = _mm512_rcp14_ps(_mm512_add_ps(_mm512_scalef_ps(p[i], n[i]), _mm512_set1_ps(1.0)));
        }
        out
    }

    /// [`cell`] on `M` vectors at once, the same bits: the reset and
    /// update gates of all `M` together, then their candidates (the
    /// candidate's tanh(a) as 2σ(2a) − 1).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn cells<const M: usize>(
        x: [[__m512; 3]; M],
        g: [[__m512; 3]; M],
        b: [[__m512; 4]; M],
        h: [__m512; M],
    ) -> [[__m512; 5]; M] {
        cells_by::<M, false>(x, g, b, h)
    }

    /// [`cells`] with its sigmoids exact to ~1e-7 ([`sigmoid_n`], the FP32
    /// step's and training's) or, `APPROX`, to ~1e-4 ([`sigmoid_approx_n`],
    /// INT8 inference's); the same operations around them either way.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn cells_by<const M: usize, const APPROX: bool>(
        x: [[__m512; 3]; M],
        g: [[__m512; 3]; M],
        b: [[__m512; 4]; M],
        h: [__m512; M],
    ) -> [[__m512; 5]; M] {
        let sigmoid = |v: [__m512; M]| if APPROX { sigmoid_approx_n(v) } else { sigmoid_n(v) };
        let mut pre_r = [_mm512_setzero_ps(); M];
        let mut pre_z = [_mm512_setzero_ps(); M];
        for i in 0..M {
            pre_r[i] = _mm512_add_ps(_mm512_add_ps(x[i][0], g[i][0]), b[i][0]);
            pre_z[i] = _mm512_add_ps(_mm512_add_ps(x[i][1], g[i][1]), b[i][1]);
        }
        let r = sigmoid(pre_r);
        let z = sigmoid(pre_z);
        let mut phn = [_mm512_setzero_ps(); M];
        let mut a2 = [_mm512_setzero_ps(); M];
        for i in 0..M {
            phn[i] = _mm512_add_ps(g[i][2], b[i][3]);
            let a = _mm512_fmadd_ps(r[i], phn[i], _mm512_add_ps(x[i][2], b[i][2]));
            a2[i] = _mm512_add_ps(a, a);
        }
        let s = sigmoid(a2);
        let mut out = [[_mm512_setzero_ps(); 5]; M];
        for i in 0..M {
            // tanh(a) = 2σ(2a) − 1
            let n = _mm512_fmsub_ps(_mm512_set1_ps(2.0), s[i], _mm512_set1_ps(1.0));
            out[i] = [_mm512_fmadd_ps(z[i], _mm512_sub_ps(h[i], n), n), r[i], z[i], n, phn[i]];
        }
        out
    }

    #[cfg(test)]
    #[test]
    fn cells_are_the_cell_bit_for_bit() {
        if !usable() {
            return;
        }
        let mut seed = 0x9e37_79b9u32;
        let mut v = |scale: f32| {
            let lanes: [f32; 16] = std::array::from_fn(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                (seed as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
            });
            // SAFETY: AVX-512 (checked above).
            unsafe { _mm512_loadu_ps(lanes.as_ptr()) }
        };
        // Pre-activations from saturated (±60, past exp's clamp) to small.
        for scale in [0.01f32, 1.0, 8.0, 60.0] {
            let args: [CellArgs; 4] = std::array::from_fn(|_| {
                ([v(scale), v(scale), v(scale)], [v(scale), v(scale), v(scale)], [v(1.0), v(1.0), v(1.0), v(1.0)], v(1.0))
            });
            // SAFETY: AVX-512 (checked above).
            let (many, one) = unsafe {
                (cells(args.map(|a| a.0), args.map(|a| a.1), args.map(|a| a.2), args.map(|a| a.3)), args.map(|a| cell(a.0, a.1, a.2, a.3)))
            };
            for (i, (m, o)) in many.iter().zip(&one).enumerate() {
                for (k, (a, b)) in m.iter().zip(o).enumerate() {
                    let bits = |x: __m512| unsafe { std::mem::transmute::<__m512, [u32; 16]>(x) };
                    let (a, b) = (bits(*a), bits(*b));
                    assert_eq!(a, b, "scale {scale}: vector {i}, output {k}");
                }
            }
        }
    }

    /// Nodes per block of [`gru`]'s flat loop: 8 rows of 34 are 17 whole
    /// vectors.
    const BLOCK: usize = 8;
    const FLAT: usize = BLOCK * H / 16;

    /// Rows `range` of `out` (row `v` at `(v - base) · 34`) and, if given,
    /// of the tape (row `v` at `v · 34`). Blocks of 8 nodes go as 17 full
    /// vectors over their rows laid end to end (a vector that straddles two
    /// rows of a product is two masked loads), the rest row by row as two
    /// vectors and a masked one of 2: a third fewer vectors than row by row.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn gru<T: Elem>(
        (gi, gl): Product<'_, T>,
        (fused, fl): Product<'_, T>,
        h: &[f32],
        bias: &GruBias,
        out: Shared,
        tape: Option<&GruTape>,
        range: std::ops::Range<usize>,
        base: usize,
    ) {
        let last = range.end.saturating_sub(1);
        assert!(
            range.is_empty()
                || (last * gl.row + 2 * gl.block + H <= gi.len()
                    && last * fl.row + 8 * fl.block + H <= fused.len()
                    && (last + 1) * H <= h.len())
        );
        let store = |v: usize, offset: usize, mask: __mmask16, [new, r, z, n, phn]: [__m512; 5]| {
            let at = |s: Shared, row: usize| s.ptr().add(row * H + offset);
            _mm512_mask_storeu_ps(at(out, v - base), mask, new);
            if let Some(t) = tape {
                _mm512_mask_storeu_ps(at(t.r, v), mask, r);
                _mm512_mask_storeu_ps(at(t.z, v), mask, z);
                _mm512_mask_storeu_ps(at(t.n, v), mask, n);
                _mm512_mask_storeu_ps(at(t.ghn, v), mask, phn);
            }
        };
        // Per vector q of a block: its first row, first column and the
        // lanes in that row; the biases of its lanes' columns.
        let split: [(usize, usize, __mmask16); FLAT] = std::array::from_fn(|q| {
            let (row, col) = (16 * q / H, 16 * q % H);
            let here = (H - col).min(16);
            (row, col, if here == 16 { u16::MAX } else { (1u16 << here) - 1 })
        });
        let lanes = |b: &[f32; H]| -> [__m512; FLAT] {
            std::array::from_fn(|q| {
                let mut v = [0f32; 16];
                for (l, x) in v.iter_mut().enumerate() {
                    *x = b[(16 * q + l) % H];
                }
                _mm512_loadu_ps(v.as_ptr())
            })
        };
        let (b_r, b_z, b_in, b_hn) = (lanes(&bias.r), lanes(&bias.z), lanes(&bias.i_n), lanes(&bias.h_n));
        // 16 values of a product from row `row`, column `col` on, the lanes
        // past `mask` from the next row's start (`stride` further on).
        let straddle = |p: *const T, stride: usize, mask: __mmask16| {
            let x = load(p, mask);
            if mask == u16::MAX {
                x
            } else {
                let rest = load(p.add(stride - H), !mask);
                _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_castps_si512(rest)))
            }
        };
        // At inference a block's vectors go CHUNK at a time through `cells`
        // (the last one alone): independent chains for the FMA ports, 4%
        // off a call on a real graph. Training's (with the tape's four more
        // stores a vector) measured no faster, and keeps one at a time.
        const CHUNK: usize = 4;
        let chunked = tape.is_none();
        let gather = |v: usize, q: usize| {
            let (row, col, mask) = split[q];
            let u = v + row;
            let (x, g) = (gi.as_ptr().add(u * gl.row + col), fused.as_ptr().add(u * fl.row + 6 * fl.block + col));
            let xs = [0, 1, 2].map(|j| straddle(x.add(j * gl.block), gl.row, mask));
            let gs = [0, 1, 2].map(|j| straddle(g.add(j * fl.block), fl.row, mask));
            (xs, gs, [b_r[q], b_z[q], b_in[q], b_hn[q]], _mm512_loadu_ps(h.as_ptr().add(v * H + 16 * q)))
        };
        let mut v = range.start;
        while v + BLOCK <= range.end {
            let mut q = 0;
            while chunked && q + CHUNK <= FLAT {
                let mut args: [CellArgs; CHUNK] =
                    [([_mm512_setzero_ps(); 3], [_mm512_setzero_ps(); 3], [_mm512_setzero_ps(); 4], _mm512_setzero_ps()); CHUNK];
                for (i, a) in args.iter_mut().enumerate() {
                    *a = gather(v, q + i);
                }
                let res = cells(args.map(|a| a.0), args.map(|a| a.1), args.map(|a| a.2), args.map(|a| a.3));
                for (i, r) in res.into_iter().enumerate() {
                    store(v, 16 * (q + i), u16::MAX, r);
                }
                q += CHUNK;
            }
            for q in q..FLAT {
                let (xs, gs, bs, hv) = gather(v, q);
                store(v, 16 * q, u16::MAX, cell(xs, gs, bs, hv));
            }
            v += BLOCK;
        }
        let f32s = |p: *const f32, j: usize| _mm512_maskz_loadu_ps(MASKS[j], p.add(16 * j));
        for v in v..range.end {
            let x = gi.as_ptr().add(v * gl.row);
            let g = fused.as_ptr().add(v * fl.row + 6 * fl.block);
            for j in 0..3 {
                let xs = [0, 1, 2].map(|b| load(x.add(b * gl.block + 16 * j), MASKS[j]));
                let gs = [0, 1, 2].map(|b| load(g.add(b * fl.block + 16 * j), MASKS[j]));
                let bs = [&bias.r, &bias.z, &bias.i_n, &bias.h_n].map(|b| f32s(b.as_ptr(), j));
                let res = cell(xs, gs, bs, f32s(h.as_ptr().add(v * H), j));
                store(v, 16 * j, MASKS[j], res);
            }
        }
    }

    /// [`super::gru_backward`]'s rows `range`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn gru_backward(
        GruBackward { dh_new, h, r, z, n, ghn }: GruBackward<'_>,
        GruGrads { dgi, d_fused, dh_direct }: GruGrads,
        range: std::ops::Range<usize>,
    ) {
        assert!(range.end * H <= h.len().min(dh_new.len()).min(r.len()).min(z.len()).min(n.len()).min(ghn.len()));
        let one = _mm512_set1_ps(1.0);
        for v in range {
            let at = |t: &[f32], j: usize| _mm512_maskz_loadu_ps(MASKS[j], t.as_ptr().add(v * H + 16 * j));
            let (gi_row, fu_row, direct) = (dgi.ptr().add(v * GATES), d_fused.ptr().add(v * FUSED + 6 * H), dh_direct.ptr().add(v * H));
            for j in 0..3 {
                let (dh, hv, rv, zv, nv, gv) = (at(dh_new, j), at(h, j), at(r, j), at(z, j), at(n, j), at(ghn, j));
                let dn = _mm512_mul_ps(dh, _mm512_sub_ps(one, zv));
                let dz = _mm512_mul_ps(dh, _mm512_sub_ps(hv, nv));
                let d_pre_n = _mm512_mul_ps(dn, _mm512_fnmadd_ps(nv, nv, one));
                let d_pre_r = _mm512_mul_ps(_mm512_mul_ps(d_pre_n, gv), _mm512_mul_ps(rv, _mm512_sub_ps(one, rv)));
                let d_pre_z = _mm512_mul_ps(dz, _mm512_mul_ps(zv, _mm512_sub_ps(one, zv)));
                let (m, o) = (MASKS[j], 16 * j);
                _mm512_mask_storeu_ps(direct.add(o), m, _mm512_mul_ps(dh, zv));
                _mm512_mask_storeu_ps(gi_row.add(o), m, d_pre_r);
                _mm512_mask_storeu_ps(gi_row.add(H + o), m, d_pre_z);
                _mm512_mask_storeu_ps(gi_row.add(2 * H + o), m, d_pre_n);
                _mm512_mask_storeu_ps(fu_row.add(o), m, d_pre_r);
                _mm512_mask_storeu_ps(fu_row.add(H + o), m, d_pre_z);
                _mm512_mask_storeu_ps(fu_row.add(2 * H + o), m, _mm512_mul_ps(d_pre_n, rv));
            }
        }
    }

    /// [`super::aggregate_backward`]'s rows `range`, with this thread's
    /// share of the gate table's gradient in `table`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn edges_backward<T: Elem>(
        EdgesBackward { da, inv_degree, fused: (fused, fl), bias, gates, targets, positions, by_row }: EdgesBackward<'_, T>,
        out: Shared,
        table: &mut [f32],
        range: std::ops::Range<usize>,
    ) {
        let f32s = |p: *const f32, j: usize| _mm512_maskz_loadu_ps(MASKS[j], p.add(16 * j));
        for v in range {
            for t in 0..6 {
                let q = v * 9 + t;
                let m = fused[v * fl.row + t * fl.block..][..H].as_ptr();
                let b = bias[t * H..][..H].as_ptr();
                let message: [__m512; 3] = std::array::from_fn(|j| _mm512_add_ps(load(m.add(16 * j), MASKS[j]), f32s(b, j)));
                let mut acc = [_mm512_setzero_ps(); 3];
                for &e in &by_row.edges[by_row.start[q]..by_row.start[q + 1]] {
                    let target = targets[e] as usize;
                    let scale = _mm512_set1_ps(inv_degree[target]);
                    let d = da[target * H..][..H].as_ptr();
                    let p = positions[e] as usize;
                    let g = gates[p * H..][..H].as_ptr();
                    let dt = table[p * H..][..H].as_mut_ptr();
                    for j in 0..3 {
                        let s = _mm512_mul_ps(f32s(d, j), scale);
                        acc[j] = _mm512_fmadd_ps(s, f32s(g, j), acc[j]);
                        _mm512_mask_storeu_ps(dt.add(16 * j), MASKS[j], _mm512_fmadd_ps(s, message[j], f32s(dt, j)));
                    }
                }
                // Node `v`'s message columns, written by this thread alone.
                let o = out.ptr().add(v * FUSED + t * H);
                for j in 0..3 {
                    _mm512_mask_storeu_ps(o.add(16 * j), MASKS[j], acc[j]);
                }
            }
        }
    }
}

/// Runs `work(range, part)` over `0..nodes` as [`par_ranges`] does, each
/// range with a zeroed `part` as long as `sums`, and adds the parts to
/// `sums` in the order of their ranges (not of their finishing): the same
/// bits on every run.
pub(crate) fn par_ranges_summing(nodes: usize, threads: usize, sums: &mut [f32], work: impl Fn(std::ops::Range<usize>, &mut [f32]) + Sync) {
    let partial = std::sync::Mutex::new(Vec::<(usize, Vec<f32>)>::new());
    let len = sums.len();
    par_ranges(nodes, threads, |range| {
        let mut part = vec![0f32; len];
        let first = range.start;
        work(range, &mut part);
        partial.lock().unwrap_or_else(|p| p.into_inner()).push((first, part));
    });
    let mut partial = partial.into_inner().unwrap_or_else(|p| p.into_inner());
    partial.sort_by_key(|(first, _)| *first);
    for (_, part) in partial {
        for (d, s) in sums.iter_mut().zip(&part) {
            *d += s;
        }
    }
}

/// Rows summed per range while they are in cache: a range's rows are
/// written and then summed this many at a time.
const SUM_CHUNK: usize = 64;

/// `sums[j] += Σ_v rows[v · stride + j]` for the rows `range` of `rows`
/// (`sums.len()` columns).
fn add_rows(sums: &mut [f32], rows: &[f32], stride: usize, range: std::ops::Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
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
pub(crate) struct GruBackward<'a> {
    pub dh_new: &'a [f32],
    pub h: &'a [f32],
    pub r: &'a [f32],
    pub z: &'a [f32],
    pub n: &'a [f32],
    pub ghn: &'a [f32],
}

/// Where its rows go (threads write disjoint rows).
#[derive(Clone, Copy)]
pub(crate) struct GruGrads {
    pub dgi: Shared,
    pub d_fused: Shared,
    pub dh_direct: Shared,
}

/// The GRU update's backward for every node, from `dh_new` (the gradient
/// of the new state) and the step's tape: writes `dgi` \[N, 102\] (the
/// gradient of `m · W_ihᵀ + b_ih`), the hidden gates' part of `d_fused`
/// \[N, 306\] (columns 204..306, the gradient of `W_hh h + b_hh`), and
/// `dh_direct` \[N, 34\] (the gradient reaching `h` through `z`).
pub(crate) fn gru_backward(
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
                if avx512::usable() {
                    // SAFETY: the CPU has AVX-512; rows of `range` only.
                    return unsafe { avx512::gru_backward(reads, out, chunk) };
                }
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
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
pub(crate) struct ByRow {
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
pub(crate) struct EdgesBackward<'a, T> {
    pub da: &'a [f32],
    pub inv_degree: &'a [f32],
    pub fused: Product<'a, T>,
    pub bias: &'a [f32],
    pub gates: &'a [f32],
    pub targets: &'a [i64],
    pub positions: &'a [i64],
    pub by_row: &'a ByRow,
}

/// The aggregation's backward. With `s[v] = da[v] / indeg(v)`: the message
/// rows of `d_fused` \[N, 306\] (columns 0..204: row `q`'s gradient is
/// `Σ_{e reads q} s[target e] ⊙ gates[pos e]`, zero where no edge reads
/// it), and `d_table` \[P, 34\] += `Σ_e s[target e] ⊙ (F[e] + bias[type e])`
/// (the messages before gating, `fused` the step's product as in
/// [`aggregate`]).
pub(crate) fn aggregate_backward<T: Elem>(
    reads: EdgesBackward<'_, T>,
    d_fused: &mut [f32],
    d_table: &mut [f32],
    bias_sums: &mut [f32],
    threads: usize,
) {
    assert_eq!(bias_sums.len(), 6 * H);
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
                if avx512::usable() {
                    // SAFETY: the CPU has AVX-512; rows of `range` only.
                    return unsafe { avx512::edges_backward(reads, out, table, chunk) };
                }
                #[cfg(target_arch = "x86_64")]
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
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
    edges_backward_rows(reads, out, table, range)
}

#[inline(always)]
unsafe fn edges_backward_rows<T: Elem>(
    EdgesBackward { da, inv_degree, fused: (fused, fl), bias, gates, targets, positions, by_row }: EdgesBackward<'_, T>,
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
                    let scale = inv_degree[target];
                    let d = &da[target * H..][..H];
                    let p = positions[e] as usize;
                    let g = &gates[p * H..][..H];
                    let dt = &mut table[p * H..][..H];
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The loops really run on libtorch's team: with two intra-op threads,
    /// a loop of several ranges runs on two threads. (`at::parallel_for`'s
    /// OpenMP region is a pragma in a header: compiled without -fopenmp it
    /// ran every range on the calling thread, and every test still passed.)
    #[test]
    fn loops_run_on_more_than_one_thread() {
        let before = tch::get_num_threads();
        tch::set_num_threads(2);
        let seen = std::sync::Mutex::new(std::collections::HashSet::new());
        let ranges = std::sync::atomic::AtomicUsize::new(0);
        par_ranges(4 * PARALLEL_NODES, 2, |_| {
            ranges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Long enough that one thread cannot take every range first.
            std::thread::sleep(std::time::Duration::from_millis(50));
            seen.lock().unwrap().insert(std::thread::current().id());
        });
        tch::set_num_threads(before);
        assert_eq!(ranges.into_inner(), 2, "one range per thread");
        assert_eq!(seen.into_inner().unwrap().len(), 2, "two ranges on one thread: the loops are not parallel");
    }

    /// The dropout mask keeps `keep` of its entries (within 4 standard
    /// deviations over 340,000), at `scale`, the same at any thread count,
    /// with no pattern between neighbours, and another seed draws another.
    #[test]
    fn dropout_masks_keep_their_share_at_any_thread_count() {
        let rows = 10_000;
        let draw = |seed: u64, threads: usize| {
            let mut m = vec![f32::NAN; rows * H];
            dropout_mask(&mut m, seed, 0.8, 1.25, threads);
            m
        };
        let one = draw(7, 1);
        assert!(one.iter().all(|&x| x == 0.0 || x == 1.25));
        let kept = one.iter().filter(|&&x| x != 0.0).count() as f64;
        let n = one.len() as f64;
        let sd = (n * 0.8 * 0.2).sqrt();
        assert!((kept - 0.8 * n).abs() < 4.0 * sd, "kept {kept} of {n}");
        // Both halves of a pair, and neighbouring pairs, independent.
        let both = one.chunks_exact(2).filter(|p| p[0] != 0.0 && p[1] != 0.0).count() as f64;
        let pairs = n / 2.0;
        assert!((both - 0.64 * pairs).abs() < 4.0 * (pairs * 0.64 * 0.36).sqrt(), "both of a pair kept {both} of {pairs}");
        assert_eq!(one, draw(7, 3));
        let other = draw(8, 1);
        assert!(one.iter().zip(&other).filter(|(a, b)| a != b).count() > rows, "another seed, another mask");
    }

    /// The vector mask is the scalar one bit for bit, at every length of
    /// a tail and from any first pair (AVX-512 CPUs only: elsewhere the
    /// scalar loop is all there is).
    #[test]
    fn dropout_mask_vector_is_the_scalar_mask() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq") {
            for (len, first, seed) in [(0usize, 0u64, 1u64), (2, 5, 2), (16, 0, 3), (34, 17, 4), (46, 1 << 40, 5), (3400, 123_456, 6)] {
                let bound = (0.8f64 * (1u64 << 24) as f64).round() as u32;
                let (mut scalar, mut vector) = (vec![f32::NAN; len], vec![f32::NAN; len]);
                dropout_pairs(&mut scalar, first, seed, bound, 1.25);
                unsafe { dropout_pairs_avx512(&mut vector, first, seed, bound, 1.25) };
                assert!(scalar.iter().zip(&vector).all(|(a, b)| a.to_bits() == b.to_bits()), "{len} entries from pair {first}");
            }
        }
    }

    #[test]
    fn exp_sigmoid_and_tanh_are_accurate() {
        let mut worst = 0f64;
        for i in -8000..=8000 {
            let x = i as f32 / 100.0;
            let want = (x as f64).exp();
            if want < 1e-37 || want > 1e38 {
                continue;
            }
            worst = worst.max(((exp(x) as f64) - want).abs() / want);
        }
        assert!(worst < 5e-7, "exp: relative error {worst}");
        for i in -2000..=2000 {
            let x = i as f32 / 100.0;
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            assert!((sigmoid(x) as f64 - s).abs() < 1e-6, "sigmoid({x})");
            assert!((tanh(x) as f64 - (x as f64).tanh()).abs() < 2e-6, "tanh({x})");
        }
        assert!(sigmoid(-1000.0) < 1e-37);
        assert_eq!(sigmoid(1000.0), 1.0);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        for x in [1.0f32, -2.5, 3.141_592_7, 1e-3, 65504.0, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0] {
            let b = Bf16::from_f32(x);
            let t = tch::Tensor::from_slice(&[x]).to_kind(tch::Kind::BFloat16).to_kind(tch::Kind::Float);
            assert_eq!(b.f32(), t.double_value(&[0]) as f32, "{x}");
        }
    }
}
