//! The CPU inference step with INT8 products, on four paths ([`path`]):
//! AVX-512 VNNI (`vpdpbusd`, this file), AVX2 (the loops of [`portable`]
//! compiled for AVX2 and FMA, their sums in `vpmaddwd`: [`avx2`]),
//! AVX-VNNI (the AVX2 path with its sums in 256-bit `vpdpbusd`, also
//! [`avx2`]) and portable (plain Rust, any target). The same layouts,
//! bytes and integer sums on all four; their FP32 parts differ only in FMA
//! (portable: none) and in the cell's reciprocal (VNNI: `rcp14`).
//!
//! What is quantised: the first 32 of the 34 entries of every state and
//! of every node's aggregated message, as bytes with one scale per node
//! (`max |x| / 127`), and the same 32 entries of every weight column (its
//! own scale); sums are exact in 32-bit integers. The last two entries,
//! where the root selector sits in the initial state (0 or 50, against
//! values within ±1 in the rest), stay FP32 on both sides, as does
//! everything else (biases, gates, the GRU cell, the readout); the cell's
//! sigmoids are computed to ~1e-4
//! ([`crate::avx512::cells_by`]), the gates' quantisation error
//! being ~1e-2.
//!
//! Where the time goes in FP32 (products at ~90% of the FMA ports' peak)
//! is not where it goes once the multiply-adds are four times cheaper:
//! writing the products' results, 306 floats a node a step, and reading
//! them back. So the step is laid out for the bytes:
//!
//! - States live node-major ("structure of arrays"): entry `j` of 16
//!   consecutive nodes is one vector, `[34][nodes]` in FP32 and
//!   `[8][nodes]` quads of bytes. A step's GRU ([`gru`]) takes 16 nodes at
//!   a time: their 8 quads of message bytes and 8 of state bytes stay in
//!   registers while each output column's weights are broadcast from
//!   memory, the gates' sums go straight into the cell, and only the new
//!   state is written (FP32 and its bytes). The GRU's products never reach
//!   memory, and no column is padding (34 is not whole vectors of 16, 16
//!   nodes are).
//! - The message product ([`messages`]) writes row-major \[N, 204\] for
//!   the gated mean (which gathers an edge's source row), each node only
//!   the blocks of the edge types it sends ([`RowGroups`]), reading the
//!   state bytes node-major; the gated mean ([`aggregate_to_nodes`])
//!   writes its result straight as bytes.
//!
//! Every quantisation uses one rule ([`quantise`], [`quantiser`]), and the
//! kernels are tested against scalar loops of the same arithmetic, bit for
//! bit.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::cpu::{self, Isa};
use crate::forward::{Edges, GruBias};
use crate::gemm::RowGroups;
use crate::threads::{par_ranges, Rows};
use crate::HIDDEN;

pub mod any;
#[cfg(target_arch = "x86_64")]
mod avx2;
pub(crate) mod portable;

const H: usize = HIDDEN;
const LANES: usize = 16;
/// The quantised entries of a state, and the quads (4 bytes) they make.
pub const QK: usize = 32;
const QUADS: usize = QK / 4;
/// The entries kept in FP32.
const TAIL: usize = H - QK;
/// The message product's register tile: rows by vectors of 16 columns.
const TILE_ROWS: usize = 6;
const TILE_VECS: usize = 4;
/// The message product's columns: six edge-type maps.
pub const MESSAGES: usize = 6 * H;
/// The GRU's columns per side: three gates.
const GATES: usize = 3 * H;

/// The INT8 path this thread takes: VNNI where the CPU has it (and no
/// lower path is forced), else AVX-VNNI where it has that (also under an
/// `avx512` cap), else AVX2 (also on AVX-512 without either VNNI), else
/// portable.
pub fn path() -> Isa {
    match cpu::active() {
        Isa::Vnni => Isa::Vnni,
        Isa::AvxVnni => Isa::AvxVnni,
        Isa::Avx512 if Isa::AvxVnni.supported() => Isa::AvxVnni,
        Isa::Avx512 | Isa::Avx2 => Isa::Avx2,
        Isa::Portable => Isa::Portable,
    }
}

/// Whether INT8 is the fastest precision on this thread's path, so what
/// `dtype=auto` picks: on VNNI only (`vpdpbusd`: 64 products an
/// instruction against FP32's 16; the step 1.9x FP32's on a Sapphire
/// Rapids Xeon). At AVX2's width the INT8 step is slower than FP32's on
/// every CPU measured (docs/perf/learned-pass.md): on an AMD EPYC (Zen 1)
/// `vpmaddwd` (16 products and an add against an FMA's 8); on a Sapphire
/// Rapids Xeon capped at 256 bits, AVX2's INT8 step 0.59x and AVX-VNNI's
/// 0.70x the FP32 step, the products no longer what the step waits on
/// (the cell's sigmoids and the bytes' conversions are).
pub fn preferred() -> bool {
    path() == Isa::Vnni
}

/// Signed bytes in [-127, 127] from `x · inv`, rounded to nearest even (the
/// vector conversion's rounding): the one quantiser, for weights and
/// states alike.
pub fn quantise(x: f32, inv: f32) -> i32 {
    // Nearest even by adding and taking away 1.5 · 2^23 (exact for
    // |x · inv| < 2^22, which a clamp to ±127 covers): `round_ties_even`
    // is a libm call on the baseline x86-64 target.
    const SHIFT: f32 = 12_582_912.0;
    let r = ((x * inv).clamp(-1e6, 1e6) + SHIFT) - SHIFT;
    // An integer within ±1e6, or NaN (which `as` makes 0): a select and
    // the plain conversion vectorise, where `as` (saturating) would be
    // scalar per lane in the AVX2 loops.
    let r = if r.is_nan() { 0.0 } else { r };
    // SAFETY: `r` is finite and within i32 (just above).
    unsafe { r.to_int_unchecked::<i32>() }.clamp(-127, 127)
}

/// `127 / m` for a largest magnitude `m` (0 for an all-zero row), and the
/// scale `m / 127` that takes the bytes back.
pub fn quantiser(m: f32) -> (f32, f32) {
    if m > 0.0 {
        (127.0 / m, m / 127.0)
    } else {
        (0.0, 0.0)
    }
}

/// Nodes rounded up to whole vectors of 16: the node-major buffers' stride.
pub fn padded(nodes: usize) -> usize {
    nodes.div_ceil(LANES) * LANES
}

/// The columns of a weight `[cols, 34]` (as a linear layer holds it, `out
/// = x · wᵀ`), quantised: column `c`'s first 32 entries as signed bytes
/// with a scale of their own, its last two exact.
pub struct Columns {
    cols: usize,
    /// `[cols][8]`: byte `j` of quad `q` is `q(w[c, 4q + j])`.
    quads: Vec<u32>,
    scale: Vec<f32>,
    /// `128 · Σ_k q(w[c, k])`: the state's bytes are unsigned, `q + 128`
    /// (`vpdpbusd` multiplies unsigned by signed bytes), and each sum
    /// starts at minus this to take the offset back out.
    offset: Vec<i32>,
    /// `[cols][2]`.
    tail: Vec<f32>,
    /// `[cols][32]`: the bytes as signed values (the portable sums').
    bytes: Vec<i8>,
    /// `[cols][16]`: the bytes as AVX2's pairs of 16-bit values, `(k, k +
    /// 2)` for `k = 4q` and `4q + 1` ([`avx2`]).
    pairs: Vec<u32>,
}

/// Signed bytes `[n][32]` as AVX2's 16-bit pairs `[n][16]`: per quad, bytes
/// 0 and 2, then 1 and 3 (each the low half, then the high).
fn pairs_of(bytes: &[i8]) -> Vec<u32> {
    let pair = |a: i8, b: i8| (a as i16 as u16 as u32) | ((b as i16 as u16 as u32) << 16);
    bytes.chunks_exact(4).flat_map(|q| [pair(q[0], q[2]), pair(q[1], q[3])]).collect()
}

impl Columns {
    pub fn new(w: &[f32], cols: usize) -> Columns {
        assert_eq!(w.len(), cols * H, "a [{cols}, {H}] weight");
        let mut c = Columns {
            cols,
            quads: vec![0; cols * QUADS],
            scale: vec![0.0; cols],
            offset: vec![0; cols],
            tail: vec![0.0; cols * TAIL],
            bytes: Vec::new(),
            pairs: Vec::new(),
        };
        for col in 0..cols {
            let row = &w[col * H..(col + 1) * H];
            let (inv, s) = quantiser(row[..QK].iter().fold(0f32, |m, x| m.max(x.abs())));
            c.scale[col] = s;
            for (k, x) in row[..QK].iter().enumerate() {
                let q = quantise(*x, inv);
                c.offset[col] += 128 * q;
                c.quads[col * QUADS + k / 4] |= ((q as i8 as u8) as u32) << (8 * (k % 4));
            }
            c.tail[col * TAIL..(col + 1) * TAIL].copy_from_slice(&row[QK..]);
        }
        c.bytes = portable::column_bytes(&c);
        c.pairs = pairs_of(&c.bytes);
        c
    }

    /// The quantised weight `q(w[c, k])`.
    #[cfg(test)]
    fn byte(&self, c: usize, k: usize) -> i32 {
        (self.quads[c * QUADS + k / 4] >> (8 * (k % 4))) as u8 as i8 as i32
    }
}

/// The message product's right-hand side: [`Columns`] laid out for a tile
/// whose vectors run along the columns (each `[stride]`, zero past `cols`).
pub struct Packed {
    cols: usize,
    stride: usize,
    /// `[8][stride]`.
    quads: Vec<u32>,
    scale: Vec<f32>,
    offset: Vec<i32>,
    /// `[2][stride]`.
    tail: Vec<f32>,
    /// `[cols][32]`, as [`Columns`]' (the portable sums').
    bytes: Vec<i8>,
    /// `[16][stride]`: column `c`'s AVX2 pairs ([`Columns`]'), pair-major.
    pairs: Vec<u32>,
}

impl Packed {
    pub fn new(c: &Columns) -> Packed {
        let stride = c.cols.div_ceil(LANES) * LANES;
        let mut p = Packed {
            cols: c.cols,
            stride,
            quads: vec![0; QUADS * stride],
            scale: vec![0.0; stride],
            offset: vec![0; stride],
            tail: vec![0.0; TAIL * stride],
            bytes: c.bytes.clone(),
            pairs: vec![0; 2 * QUADS * stride],
        };
        for col in 0..c.cols {
            for i in 0..2 * QUADS {
                p.pairs[i * stride + col] = c.pairs[col * 2 * QUADS + i];
            }
            for q in 0..QUADS {
                p.quads[q * stride + col] = c.quads[col * QUADS + q];
            }
            p.scale[col] = c.scale[col];
            p.offset[col] = c.offset[col];
            for t in 0..TAIL {
                p.tail[t * stride + col] = c.tail[col * TAIL + t];
            }
        }
        p
    }
}

/// Node-major quantised vectors of 34 (states, or aggregated messages):
/// node `v`'s quad `q` at `quads[q · stride + v]`, its scale at
/// `scales[v]`, its two FP32 entries at `tails[t][v]`.
#[derive(Clone, Copy)]
pub struct Nodes<'a> {
    pub quads: &'a [u32],
    pub scales: &'a [f32],
    pub tails: [&'a [f32]; TAIL],
    pub stride: usize,
}

impl Nodes<'_> {
    fn check(&self, nodes: usize) {
        assert!(nodes <= self.stride && self.stride.is_multiple_of(LANES), "a node-major stride of whole vectors");
        assert!(self.quads.len() >= QUADS * self.stride && self.scales.len() >= self.stride, "node-major buffers too short");
        assert!(self.tails.iter().all(|t| t.len() >= self.stride), "node-major tails too short");
    }
}

/// Row-major vectors `x[v, ..34]` (row stride 34) as [`Nodes`]: node `v`'s
/// entries quantised with its own [`quantiser`], written to `quads`,
/// `scales` and `tails` (stride `stride`), and if given every entry
/// node-major to `full` (`[34][stride]`). Nodes past `x`'s are left alone.
/// The scalar reference of the vectorised loops.
#[cfg(test)]
pub fn to_nodes(x: &[f32], stride: usize, quads: &mut [u32], scales: &mut [f32], tails: [&mut [f32]; TAIL], full: Option<&mut [f32]>) {
    let nodes = x.len() / H;
    assert!(nodes <= stride && quads.len() >= QUADS * stride && scales.len() >= stride);
    let [t0, t1] = tails;
    for (v, row) in x.chunks_exact(H).enumerate() {
        let (inv, s) = quantiser(row[..QK].iter().fold(0f32, |m, x| m.max(x.abs())));
        scales[v] = s;
        for q in 0..QUADS {
            quads[q * stride + v] = (0..4).fold(0u32, |d, j| d | (((quantise(row[4 * q + j], inv) + 128) as u32) << (8 * j)));
        }
        t0[v] = row[QK];
        t1[v] = row[QK + 1];
    }
    if let Some(full) = full {
        assert!(full.len() >= H * stride);
        for (v, row) in x.chunks_exact(H).enumerate() {
            for (j, x) in row.iter().enumerate() {
                full[j * stride + v] = *x;
            }
        }
    }
}

/// [`to_nodes`] for step 0's states, vectorised (the same bits): `x`
/// \[N, 34\] row-major to `full` (`[34][stride]`, whose rows 32 and 33
/// are the tails), `quads` and `scales`; the padding nodes' entries
/// (from `N` to `stride`) set to zero.
pub fn states_to_nodes(x: &[f32], stride: usize, quads: &mut [u32], scales: &mut [f32], full: &mut [f32], threads: usize) {
    let nodes = x.len() / H;
    assert!(nodes <= stride && quads.len() >= QUADS * stride && scales.len() >= stride && full.len() >= H * stride);
    let path = path();
    for row in full.chunks_exact_mut(stride).take(H) {
        row[nodes..].fill(0.0);
    }
    for row in quads.chunks_exact_mut(stride).take(QUADS) {
        row[nodes..].fill(0);
    }
    scales[nodes..stride].fill(0.0);
    let (qs, ss, fs) = (Rows::new(quads), Rows::new(scales), Rows::new(full));
    par_ranges(nodes, threads, |range| {
        let f = fs.ptr();
        // SAFETY: the path's instructions are the CPU's (`path`); each range
        // writes its own nodes' entries, all within the buffers.
        unsafe {
            match path {
                #[cfg(target_arch = "x86_64")]
                Isa::Vnni => {
                    rows_to_nodes(x, range.clone(), stride, qs.ptr(), ss.ptr(), [f.add(QK * stride), f.add((QK + 1) * stride)]);
                    for v in range {
                        for j in 0..QK {
                            *f.add(j * stride + v) = x[v * H + j];
                        }
                    }
                }
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 | Isa::AvxVnni => portable::to_nodes_avx2(x, range, stride, qs.ptr(), ss.ptr(), f),
                _ => portable::to_nodes_portable(x, range, stride, qs.ptr(), ss.ptr(), f),
            }
        }
    });
}

/// Aggregated messages computed in FP32, `x` \[N, 34\] row-major (what
/// [`crate::forward::aggregate`] writes), as [`Nodes`] for [`gru`]: the
/// same quantisation as [`states_to_nodes`] (whose node-major copy goes to
/// `full`, `[34][stride]`, scratch here), the two tail entries to `tails`.
/// For the aggregations whose INT8 loops are not fused
/// ([`crate::forward::Reduce::MeanMax`]).
pub fn messages_to_nodes(
    x: &[f32],
    stride: usize,
    quads: &mut [u32],
    scales: &mut [f32],
    tails: [&mut [f32]; TAIL],
    full: &mut [f32],
    threads: usize,
) {
    states_to_nodes(x, stride, quads, scales, full, threads);
    for (k, tail) in tails.into_iter().enumerate() {
        tail[..stride].copy_from_slice(&full[(QK + k) * stride..][..stride]);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn rows_to_nodes(
    x: &[f32],
    range: std::ops::Range<usize>,
    stride: usize,
    quads: *mut u32,
    scales: *mut f32,
    tails: [*mut f32; TAIL],
) {
    let bias = _mm512_set1_epi32(128);
    for v in range {
        let row = x.as_ptr().add(v * H);
        let a = [_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(LANES))];
        let (inv, s) = quantiser(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a[0]), _mm512_abs_ps(a[1]))));
        *scales.add(v) = s;
        let inv = _mm512_set1_ps(inv);
        for (half, a) in a.iter().enumerate() {
            // Nearest even, as `quantise`; |x| · 127 / max |x| rounds to at
            // most 127, so no clamp.
            let bytes = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(*a, inv)), bias));
            let mut d = [0u32; 4];
            _mm_storeu_si128(d.as_mut_ptr() as *mut __m128i, bytes);
            for (j, d) in d.iter().enumerate() {
                *quads.add((4 * half + j) * stride + v) = *d;
            }
        }
        *tails[0].add(v) = *row.add(QK);
        *tails[1].add(v) = *row.add(QK + 1);
    }
}

/// The part of every node's gated mean that no step changes:
/// `(1 / indegree) Σ_e bias[type e] ⊙ gate[position e]` (zero without
/// incoming edges), into `out` row-major \[N, 34\] (row stride 34), each
/// sum one FMA per edge in edge order, then times `1 / indegree`.
///
/// # Safety
/// [`check_edges`]`(f, edges, bias, gates, nodes)` holds for some `f`.
pub unsafe fn gated_biases(edges: &Edges<'_>, bias: &[f32], gates: &[f32], nodes: usize, out: &mut [f32], threads: usize) {
    assert!(edges.crow.len() > nodes && out.len() >= nodes * H);
    let rows = Rows::new(out);
    let path = path();
    par_ranges(nodes, threads, |range| {
        // SAFETY: the path's instructions are the CPU's; every edge's rows
        // are within `bias` and `gates` (the caller's contract); each range
        // writes its own rows.
        match path {
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni => gated_bias_rows(edges, bias, gates, range, rows.ptr()),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni => portable::gated_biases_avx2(edges, bias, gates, range, rows.ptr()),
            _ => portable::gated_biases_portable(edges, bias, gates, range, rows.ptr()),
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn gated_bias_rows(edges: &Edges<'_>, bias: &[f32], gates: &[f32], range: std::ops::Range<usize>, out: *mut f32) {
    const TAIL_MASK: __mmask16 = (1 << TAIL) - 1;
    let (bp, gp) = (bias.as_ptr(), gates.as_ptr());
    for v in range {
        let (start, end) = (*edges.crow.get_unchecked(v) as usize, *edges.crow.get_unchecked(v + 1) as usize);
        let mut acc = [_mm512_setzero_ps(); 3];
        for e in start..end {
            let b = bp.add(*edges.types.get_unchecked(e) as usize * H);
            let g = gp.add(*edges.positions.get_unchecked(e) as usize * H);
            for (j, acc) in acc.iter_mut().enumerate() {
                let mask = if j < 2 { u16::MAX } else { TAIL_MASK };
                *acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, b.add(j * LANES)), _mm512_maskz_loadu_ps(mask, g.add(j * LANES)), *acc);
            }
        }
        let scale = _mm512_set1_ps(edges.scale(start, end));
        for (j, acc) in acc.iter().enumerate() {
            let mask = if j < 2 { u16::MAX } else { TAIL_MASK };
            _mm512_mask_storeu_ps(out.add(v * H + j * LANES), mask, _mm512_mul_ps(*acc, scale));
        }
    }
}

/// The gated mean of every node's incoming messages, `(1 / indegree)
/// Σ_e (F[e] + bias[type e]) ⊙ gate[position e]` (the FP32 step's
/// [`crate::forward::aggregate`], arranged differently): per edge one FMA
/// of its message and gate, in edge order; then `sum · (1 / indegree) +
/// biases[v]` as one FMA, with `biases` the part no step changes
/// ([`gated_biases`], computed once a call). Straight to [`Nodes`] (each
/// node quantised as [`states_to_nodes`] does): `f` the message product's
/// rows, `edges` their offsets in it.
///
/// # Safety
/// [`check_edges`]`(f, edges, bias, gates, nodes)` holds (a step's loop
/// checks it once, not every step), and `biases` is [`gated_biases`]' for
/// them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn aggregate_to_nodes(
    f: &[f32],
    edges: &Edges<'_>,
    biases: &[f32],
    gates: &[f32],
    nodes: usize,
    stride: usize,
    quads: &mut [u32],
    scales: &mut [f32],
    tails: [&mut [f32]; TAIL],
    threads: usize,
) {
    assert!(nodes <= stride && quads.len() >= QUADS * stride && scales.len() >= stride);
    assert!(tails.iter().all(|t| t.len() >= stride) && edges.crow.len() > nodes && biases.len() >= nodes * H);
    let (qs, ss) = (Rows::new(quads), Rows::new(scales));
    let [t0, t1] = tails.map(Rows::new);
    let path = path();
    par_ranges(nodes, threads, |range| {
        // SAFETY: the path's instructions are the CPU's; every edge's rows
        // are within `f`, `bias` and `gates` (the caller's contract); each
        // range writes its own nodes' entries, within the buffers.
        let (q, s, t) = (qs.ptr(), ss.ptr(), [t0.ptr(), t1.ptr()]);
        match path {
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni => aggregate_nodes(f, edges, biases, gates, range, stride, q, s, t),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni => portable::aggregate_avx2(f, edges, biases, gates, range, stride, q, s, t),
            _ => portable::aggregate_portable(f, edges, biases, gates, range, stride, q, s, t),
        }
    });
}

/// The channel-wise maximum of every node's incoming gated messages,
/// `max_e (F[e] + bias[type e]) ⊙ gate[position e]` (zero without
/// incoming edges: the FP32 step's [`crate::forward::aggregate`] under
/// [`crate::forward::Reduce::Max`], the same values), straight to
/// [`Nodes`] as [`aggregate_to_nodes`] writes them. A max does not split
/// into the biases' part and the product's, so it takes the per-type
/// `bias` itself, not [`gated_biases`]'.
///
/// # Safety
/// [`check_edges`]`(f, edges, bias, gates, nodes)` holds.
#[allow(clippy::too_many_arguments)]
pub unsafe fn aggregate_max_to_nodes(
    f: &[f32],
    edges: &Edges<'_>,
    bias: &[f32],
    gates: &[f32],
    nodes: usize,
    stride: usize,
    quads: &mut [u32],
    scales: &mut [f32],
    tails: [&mut [f32]; TAIL],
    threads: usize,
) {
    assert!(nodes <= stride && quads.len() >= QUADS * stride && scales.len() >= stride);
    assert!(tails.iter().all(|t| t.len() >= stride) && edges.crow.len() > nodes);
    let (qs, ss) = (Rows::new(quads), Rows::new(scales));
    let [t0, t1] = tails.map(Rows::new);
    let path = path();
    par_ranges(nodes, threads, |range| {
        // SAFETY: the path's instructions are the CPU's; every edge's rows
        // are within `f`, `bias` and `gates` (the caller's contract); each
        // range writes its own nodes' entries, within the buffers.
        let (q, s, t) = (qs.ptr(), ss.ptr(), [t0.ptr(), t1.ptr()]);
        match path {
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni => aggregate_max_nodes(f, edges, bias, gates, range, stride, q, s, t),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni => portable::aggregate_max_avx2(f, edges, bias, gates, range, stride, q, s, t),
            _ => portable::aggregate_max_portable(f, edges, bias, gates, range, stride, q, s, t),
        }
    });
}

/// Whether the first `nodes` nodes' edges (`edges.crow[..=nodes]`, in
/// order) read only rows of 34 within `f`, `bias` and `gates`: what
/// [`aggregate_to_nodes`] needs. Panics naming what is out of bounds.
pub fn check_edges(f: &[f32], edges: &Edges<'_>, bias: &[f32], gates: &[f32], nodes: usize) {
    assert!(edges.crow.len() > nodes && edges.crow[0] == 0, "an edge row per node");
    assert!(edges.crow.windows(2).take(nodes).all(|w| w[0] <= w[1]), "edge rows in order");
    let last = edges.crow[nodes] as usize;
    assert!(
        edges.offsets.len() >= last && edges.types.len() >= last && edges.positions.len() >= last,
        "an offset, type and position per edge"
    );
    assert!(edges.offsets[..last].iter().all(|&o| o + H <= f.len()), "an edge's message past the product");
    assert!(edges.types[..last].iter().all(|&t| t >= 0 && (t as usize + 1) * H <= bias.len()), "an edge type past the biases");
    assert!(edges.positions[..last].iter().all(|&p| p >= 0 && (p as usize + 1) * H <= gates.len()), "a position past the gates");
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn aggregate_nodes(
    f: &[f32],
    edges: &Edges<'_>,
    biases: &[f32],
    gates: &[f32],
    range: std::ops::Range<usize>,
    stride: usize,
    quads: *mut u32,
    scales: *mut f32,
    tails: [*mut f32; TAIL],
) {
    const TAIL_MASK: __mmask16 = (1 << TAIL) - 1;
    let (fp, gp) = (f.as_ptr(), gates.as_ptr());
    for v in range {
        let (start, end) = (*edges.crow.get_unchecked(v) as usize, *edges.crow.get_unchecked(v + 1) as usize);
        let mut acc = [_mm512_setzero_ps(); 3];
        for e in start..end {
            let m = fp.add(*edges.offsets.get_unchecked(e));
            let g = gp.add(*edges.positions.get_unchecked(e) as usize * H);
            for (j, acc) in acc.iter_mut().enumerate() {
                let mask = if j < 2 { u16::MAX } else { TAIL_MASK };
                *acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, m.add(j * LANES)), _mm512_maskz_loadu_ps(mask, g.add(j * LANES)), *acc);
            }
        }
        let scale = _mm512_set1_ps(edges.scale(start, end));
        let row = biases.as_ptr().add(v * H);
        let x: [__m512; 3] = std::array::from_fn(|j| {
            let mask = if j < 2 { u16::MAX } else { TAIL_MASK };
            _mm512_fmadd_ps(acc[j], scale, _mm512_maskz_loadu_ps(mask, row.add(j * LANES)))
        });
        store_node_512(&x, v, stride, quads, scales, tails);
    }
}

/// Node `v`'s 34 values (`x[2]`'s first two lanes the tails) into
/// [`Nodes`]' entries: the portable `store_node`'s quantisation.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn store_node_512(x: &[__m512; 3], v: usize, stride: usize, quads: *mut u32, scales: *mut f32, tails: [*mut f32; TAIL]) {
    let bias8 = _mm512_set1_epi32(128);
    let (inv, s) = quantiser(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x[0]), _mm512_abs_ps(x[1]))));
    *scales.add(v) = s;
    let inv = _mm512_set1_ps(inv);
    for (half, a) in x[..2].iter().enumerate() {
        let bytes = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(*a, inv)), bias8));
        let mut d = [0u32; 4];
        _mm_storeu_si128(d.as_mut_ptr() as *mut __m128i, bytes);
        for (j, d) in d.iter().enumerate() {
            *quads.add((4 * half + j) * stride + v) = *d;
        }
    }
    let mut t = [0f32; LANES];
    _mm512_storeu_ps(t.as_mut_ptr(), x[2]);
    *tails[0].add(v) = t[0];
    *tails[1].add(v) = t[1];
}

/// [`aggregate_max_to_nodes`]' nodes `range` on AVX-512: per edge an add
/// and a multiply, then the running maximum, as the portable loop.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn aggregate_max_nodes(
    f: &[f32],
    edges: &Edges<'_>,
    bias: &[f32],
    gates: &[f32],
    range: std::ops::Range<usize>,
    stride: usize,
    quads: *mut u32,
    scales: *mut f32,
    tails: [*mut f32; TAIL],
) {
    const TAIL_MASK: __mmask16 = (1 << TAIL) - 1;
    let (fp, bp, gp) = (f.as_ptr(), bias.as_ptr(), gates.as_ptr());
    for v in range {
        let (start, end) = (*edges.crow.get_unchecked(v) as usize, *edges.crow.get_unchecked(v + 1) as usize);
        let mut x = [_mm512_set1_ps(if start == end { 0.0 } else { f32::NEG_INFINITY }); 3];
        for e in start..end {
            let m = fp.add(*edges.offsets.get_unchecked(e));
            let b = bp.add(*edges.types.get_unchecked(e) as usize * H);
            let g = gp.add(*edges.positions.get_unchecked(e) as usize * H);
            for (j, x) in x.iter_mut().enumerate() {
                let mask = if j < 2 { u16::MAX } else { TAIL_MASK };
                let load = |p: *const f32| _mm512_maskz_loadu_ps(mask, p.add(j * LANES));
                *x = _mm512_max_ps(*x, _mm512_mul_ps(_mm512_add_ps(load(m), load(b)), load(g)));
            }
        }
        store_node_512(&x, v, stride, quads, scales, tails);
    }
}

/// `out[v, c] = x_v · B[.., c]` for the rows of `groups` (each from its
/// group's first column, rounded down to a vector of 16; a group past the
/// last column computes nothing), `x` quantised node-major, `out` row
/// stride `ldo`: per output `(Σ q_x q_B) · (scale_B · scale_x)`, then the
/// two FP32 entries' products, in that order.
pub fn messages(x: Nodes<'_>, groups: &RowGroups, b: &Packed, out: &mut [f32], ldo: usize, threads: usize) {
    let extent = groups.len();
    let path = path();
    x.check(extent);
    assert!(extent == 0 || (out.len() >= (extent - 1) * ldo + b.cols && ldo >= b.cols), "output too short");
    let shared = Rows::new(out);
    par_ranges(extent, threads, |range| {
        for (first, share) in groups.shares(range) {
            if first >= b.cols {
                continue;
            }
            let out = shared.ptr();
            let at = |i: usize| {
                let r = groups.row(share.start + i);
                // SAFETY: every row is below `extent`, checked above.
                (r, unsafe { out.add(r * ldo) })
            };
            // SAFETY: each range writes its own rows (disjoint shares); the
            // path's instructions are the CPU's.
            unsafe {
                match path {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Vnni => message_rows(&x, at, share.len(), b, first / LANES),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => portable::messages_avx2(&x, &at, share.len(), b, first / LANES * LANES),
                    #[cfg(target_arch = "x86_64")]
                    Isa::AvxVnni => portable::messages_avxvnni(&x, &at, share.len(), b, first / LANES * LANES),
                    _ => portable::messages_portable(&x, &at, share.len(), b, first / LANES * LANES),
                }
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn message_rows(x: &Nodes<'_>, at: impl Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, v_first: usize) {
    let vectors = b.stride / LANES;
    let live = |v: usize| {
        let n = b.cols.saturating_sub(v * LANES).min(LANES);
        if n == LANES {
            u16::MAX
        } else {
            (1u16 << n) - 1
        }
    };
    let mut r = 0;
    while r < rows {
        let tile = (rows - r).min(TILE_ROWS);
        let mut rows_at = [(0usize, std::ptr::null_mut::<f32>()); TILE_ROWS];
        for (t, slot) in rows_at.iter_mut().enumerate().take(tile) {
            *slot = at(r + t);
        }
        let mut v0 = v_first;
        while v0 < vectors {
            let vecs = (vectors - v0).min(TILE_VECS);
            let masks: [u16; TILE_VECS] = std::array::from_fn(|v| if v < vecs { live(v0 + v) } else { 0 });
            macro_rules! tile {
                ($($r:literal)*) => {
                    match (tile, vecs) {
                        $(
                            ($r, 4) => message_tile::<$r, 4>(x, &rows_at, b, v0, &masks),
                            ($r, 3) => message_tile::<$r, 3>(x, &rows_at, b, v0, &masks),
                            ($r, 2) => message_tile::<$r, 2>(x, &rows_at, b, v0, &masks),
                            ($r, 1) => message_tile::<$r, 1>(x, &rows_at, b, v0, &masks),
                        )*
                        _ => unreachable!(),
                    }
                };
            }
            tile!(1 2 3 4 5 6);
            v0 += vecs;
        }
        r += tile;
    }
}

/// One register tile of [`messages`]: `R` rows by `V` vectors from `v0`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn message_tile<const R: usize, const V: usize>(
    x: &Nodes<'_>,
    rows: &[(usize, *mut f32); TILE_ROWS],
    b: &Packed,
    v0: usize,
    masks: &[u16; TILE_VECS],
) {
    let first = v0 * LANES;
    let start: [__m512i; V] = std::array::from_fn(|v| {
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(b.offset.as_ptr().add(first + v * LANES) as *const _))
    });
    let mut acc = [start; R];
    for q in 0..QUADS {
        let w = b.quads.as_ptr().add(q * b.stride + first);
        let bv: [__m512i; V] = std::array::from_fn(|v| _mm512_loadu_si512(w.add(v * LANES) as *const _));
        let quads = x.quads.as_ptr().add(q * x.stride);
        for (r, acc) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_epi32(*quads.add(rows[r].0) as i32);
            for v in 0..V {
                acc[v] = _mm512_dpbusd_epi32(acc[v], a, bv[v]);
            }
        }
    }
    for v in 0..V {
        let c = first + v * LANES;
        let col_scale = _mm512_loadu_ps(b.scale.as_ptr().add(c));
        let tail: [__m512; TAIL] = std::array::from_fn(|t| _mm512_loadu_ps(b.tail.as_ptr().add(t * b.stride + c)));
        for (r, acc) in acc.iter().enumerate() {
            let (node, out) = rows[r];
            let mut y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[v]), _mm512_mul_ps(col_scale, _mm512_set1_ps(*x.scales.get_unchecked(node))));
            for (t, w) in tail.iter().enumerate() {
                y = _mm512_fmadd_ps(_mm512_set1_ps(*x.tails[t].get_unchecked(node)), *w, y);
            }
            _mm512_mask_storeu_ps(out.add(c), masks[v], y);
        }
    }
}

/// The GRU's weights: `W_ih` (side 0, on the aggregated messages) and
/// `W_hh` (side 1, on the state), each \[102, 34\].
pub struct Gru {
    sides: [Columns; 2],
}

impl Gru {
    pub fn new(w_ih: &[f32], w_hh: &[f32]) -> Gru {
        Gru { sides: [Columns::new(w_ih, GATES), Columns::new(w_hh, GATES)] }
    }
}

/// A step's new states, node-major: FP32 `[34][stride]`, bytes and scales.
pub struct NextStates<'a> {
    pub full: &'a mut [f32],
    pub quads: &'a mut [u32],
    pub scales: &'a mut [f32],
}

/// The GRU cell for every node (`nodes`, rounded up to whole vectors of
/// 16): the gates' pre-activations `GI = m · W_ihᵀ`, `GH = h · W_hhᵀ` per
/// output, each as [`messages`]' outputs are (`(Σ q q) · (scale_w ·
/// scale_x)`, then the two FP32 entries), then the cell
/// ([`crate::avx512::cells_by`], its sigmoids to ~1e-4, with
/// `bias`) on `h_full` (`[34][stride]`).
/// Writes the new state node-major in FP32 and as bytes ([`quantise`]
/// with each node's own [`quantiser`]).
#[allow(clippy::too_many_arguments)]
pub fn gru(m: Nodes<'_>, h: Nodes<'_>, h_full: &[f32], w: &Gru, bias: &GruBias, nodes: usize, next: NextStates<'_>, threads: usize) {
    let stride = m.stride;
    let path = path();
    assert!(h.stride == stride && h_full.len() >= H * stride && next.full.len() >= H * stride);
    assert!(next.quads.len() >= QUADS * stride && next.scales.len() >= stride);
    m.check(nodes);
    h.check(nodes);
    let padded = padded(nodes);
    let out = (Rows::new(next.full), Rows::new(next.quads), Rows::new(next.scales));
    par_ranges(padded, threads, |range| {
        // Whole vectors: each range's bounds rounded up to 16 (the ranges
        // stay disjoint and cover every vector).
        let (start, end) = (range.start.next_multiple_of(LANES), range.end.next_multiple_of(LANES));
        for n0 in (start..end).step_by(LANES) {
            let o = (out.0.ptr(), out.1.ptr(), out.2.ptr());
            // SAFETY: the path's instructions are the CPU's; each range
            // writes its own nodes' columns of the outputs, every index
            // within `stride` (checked above).
            unsafe {
                match path {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Vnni => gru_tile(&m, &h, h_full, w, bias, n0, o),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => {
                        portable::gru_avx2(&m, &h, h_full, w, bias, n0, o);
                        portable::gru_avx2(&m, &h, h_full, w, bias, n0 + portable::P, o);
                    }
                    #[cfg(target_arch = "x86_64")]
                    Isa::AvxVnni => {
                        portable::gru_avxvnni(&m, &h, h_full, w, bias, n0, o);
                        portable::gru_avxvnni(&m, &h, h_full, w, bias, n0 + portable::P, o);
                    }
                    _ => {
                        portable::gru_portable(&m, &h, h_full, w, bias, n0, o);
                        portable::gru_portable(&m, &h, h_full, w, bias, n0 + portable::P, o);
                    }
                }
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gru_tile(m: &Nodes<'_>, h: &Nodes<'_>, h_full: &[f32], w: &Gru, bias: &GruBias, n0: usize, out: (*mut f32, *mut u32, *mut f32)) {
    let stride = m.stride;
    let side = |x: &Nodes<'_>| {
        let quads: [__m512i; QUADS] = std::array::from_fn(|q| _mm512_loadu_si512(x.quads.as_ptr().add(q * stride + n0) as *const _));
        let scale = _mm512_loadu_ps(x.scales.as_ptr().add(n0));
        let tails: [__m512; TAIL] = std::array::from_fn(|t| _mm512_loadu_ps(x.tails[t].as_ptr().add(n0)));
        (quads, scale, tails)
    };
    let inputs = [side(m), side(h)];
    let mut largest = _mm512_setzero_ps();
    for u0 in (0..QK).step_by(4) {
        largest = gru_units::<4>(&inputs, h_full, w, bias, n0, stride, u0, out.0, largest);
    }
    gru_units::<TAIL>(&inputs, h_full, w, bias, n0, stride, QK, out.0, largest);
    // The new states' bytes, each node with its own scale (as `to_nodes`).
    let some = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(largest, _mm512_setzero_ps());
    let inv = _mm512_maskz_div_ps(some, _mm512_set1_ps(127.0), largest);
    _mm512_storeu_ps(out.2.add(n0), _mm512_maskz_div_ps(some, largest, _mm512_set1_ps(127.0)));
    let bias8 = _mm512_set1_epi32(128);
    for q in 0..QUADS {
        let mut d = _mm512_setzero_si512();
        for j in 0..4 {
            let x = _mm512_loadu_ps(out.0.add((4 * q + j) * stride + n0));
            let u = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, inv)), bias8);
            d = _mm512_or_si512(d, _mm512_sllv_epi32(u, _mm512_set1_epi32(8 * j as i32)));
        }
        _mm512_storeu_si512(out.1.add(q * stride + n0) as *mut _, d);
    }
}

/// [`gru_tile`]'s units `u0..u0 + U` (`u0 + U <= 34`) for 16 nodes: their
/// six sums, the cell, the new state stored; returns `largest` updated
/// with the new states' magnitudes (quantised units only).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
unsafe fn gru_units<const U: usize>(
    inputs: &[([__m512i; QUADS], __m512, [__m512; TAIL]); 2],
    h_full: &[f32],
    w: &Gru,
    bias: &GruBias,
    n0: usize,
    stride: usize,
    u0: usize,
    out: *mut f32,
    mut largest: __m512,
) -> __m512 {
    // Pre-activations per side (0: GI, 1: GH), unit and gate.
    let mut pre = [[[_mm512_setzero_ps(); 3]; U]; 2];
    for (s, (quads, scale, tails)) in inputs.iter().enumerate() {
        let c = &w.sides[s];
        let col = |i: usize, g: usize| g * H + u0 + i;
        // (Every column below 102: `u0 + U <= 34`, checked by the caller.)
        let mut acc: [[__m512i; 3]; U] =
            std::array::from_fn(|i| std::array::from_fn(|g| _mm512_set1_epi32(-*c.offset.get_unchecked(col(i, g)))));
        for (q, a) in quads.iter().enumerate() {
            for (i, acc) in acc.iter_mut().enumerate() {
                for (g, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_dpbusd_epi32(*acc, *a, _mm512_set1_epi32(*c.quads.get_unchecked(col(i, g) * QUADS + q) as i32));
                }
            }
        }
        for i in 0..U {
            for g in 0..3 {
                let k = col(i, g);
                let mut y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][g]), _mm512_mul_ps(_mm512_set1_ps(*c.scale.get_unchecked(k)), *scale));
                for (t, x) in tails.iter().enumerate() {
                    y = _mm512_fmadd_ps(*x, _mm512_set1_ps(*c.tail.get_unchecked(k * TAIL + t)), y);
                }
                pre[s][i][g] = y;
            }
        }
    }
    let unit = |i: usize| u0 + i;
    let b: [[__m512; 4]; U] = std::array::from_fn(|i| {
        let j = unit(i);
        [_mm512_set1_ps(bias.r[j]), _mm512_set1_ps(bias.z[j]), _mm512_set1_ps(bias.i_n[j]), _mm512_set1_ps(bias.h_n[j])]
    });
    let hv: [__m512; U] = std::array::from_fn(|i| _mm512_loadu_ps(h_full.as_ptr().add(unit(i) * stride + n0)));
    let new = crate::avx512::cells_by::<U, true>(pre[0], pre[1], b, hv);
    for (i, [new, ..]) in new.iter().enumerate() {
        _mm512_storeu_ps(out.add(unit(i) * stride + n0), *new);
        if unit(i) < QK {
            largest = _mm512_max_ps(largest, _mm512_abs_ps(*new));
        }
    }
    largest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elem::madd;

    use crate::tests::random;

    /// `a · b + c` as the path computes it: fused on AVX2 and VNNI, a
    /// multiply and an add on the portable path.
    fn fma_of(path: Isa, a: f32, b: f32, c: f32) -> f32 {
        if path == Isa::Portable {
            madd::<false>(a, b, c)
        } else {
            madd::<true>(a, b, c)
        }
    }

    /// The INT8 paths this CPU runs, each test's case named `test [path]`:
    /// portable on every machine, AVX2, AVX-VNNI and VNNI where the CPU
    /// has them (else a `SKIP:` line for that case). Each is the path that
    /// the kernels take under its cap.
    fn paths(test: &str) -> Vec<Isa> {
        let run: Vec<Isa> = [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Vnni]
            .into_iter()
            .filter(|&p| p == Isa::Portable || cpu::run_test_on(p, &format!("{test} [{p}]")))
            .collect();
        for &p in &run {
            assert_eq!(cpu::with_cap(p, path), p, "{test}: capped at {p}, the INT8 kernels take another path");
        }
        run
    }

    /// AVX-512 without VNNI takes AVX-VNNI's INT8 products where the CPU
    /// has them and AVX2's where it does not; a cap at `avxvnni` on a CPU
    /// without AVX-VNNI runs AVX2 (so a forced path never faults).
    #[test]
    fn the_int8_path_follows_the_flags_not_the_order() {
        let (avx2, avxvnni) = (Isa::Avx2.supported(), Isa::AvxVnni.supported());
        if Isa::Avx512.supported() {
            assert_eq!(cpu::with_cap(Isa::Avx512, path), if avxvnni { Isa::AvxVnni } else { Isa::Avx2 });
        }
        if avx2 {
            let want = if avxvnni { Isa::AvxVnni } else { Isa::Avx2 };
            assert_eq!(cpu::with_cap(Isa::AvxVnni, path), want);
            assert_eq!(cpu::with_cap(Isa::AvxVnni, cpu::active), want);
            assert_eq!(cpu::with_cap(Isa::AvxVnni, cpu::active_float), Isa::Avx2);
            assert_eq!(Isa::AvxVnni.check().is_ok(), avxvnni);
        }
        assert_eq!(cpu::with_cap(Isa::Portable, path), Isa::Portable);
        assert_eq!(preferred(), path() == Isa::Vnni);
    }

    /// Random row-major vectors of 34 (row `r % 3 == 0` with a selector's
    /// 50 in its tail, every 11th all zero in its quantised part).
    fn rows(n: usize, seed: &mut u64) -> Vec<f32> {
        let mut x: Vec<f32> = (0..n * H).map(|_| random(seed)).collect();
        for r in 0..n {
            x[r * H + QK] = if r % 3 == 0 { 50.0 } else { 0.0 };
            if r % 11 == 5 {
                x[r * H..r * H + QK].fill(0.0);
            }
        }
        x
    }

    struct Quantised {
        quads: Vec<u32>,
        scales: Vec<f32>,
        tails: [Vec<f32>; 2],
        full: Vec<f32>,
        stride: usize,
    }

    impl Quantised {
        fn new(x: &[f32]) -> Quantised {
            let stride = padded(x.len() / H);
            let mut q = Quantised {
                quads: vec![0; QUADS * stride],
                scales: vec![0.0; stride],
                tails: [vec![0.0; stride], vec![0.0; stride]],
                full: vec![0.0; H * stride],
                stride,
            };
            let [t0, t1] = &mut q.tails;
            to_nodes(x, stride, &mut q.quads, &mut q.scales, [t0, t1], Some(&mut q.full));
            q
        }

        fn nodes(&self) -> Nodes<'_> {
            Nodes { quads: &self.quads, scales: &self.scales, tails: [&self.tails[0], &self.tails[1]], stride: self.stride }
        }

        /// Node `v`'s byte `k` as the signed value it stands for.
        fn byte(&self, v: usize, k: usize) -> i32 {
            ((self.quads[k / 4 * self.stride + v] >> (8 * (k % 4))) & 0xff) as i32 - 128
        }

        /// The arithmetic every INT8 output follows, in scalar code (the
        /// two FP32 entries' products fused or not, as `path` computes).
        fn product(&self, v: usize, w: &Columns, c: usize, path: Isa) -> f32 {
            let dot: i32 = (0..QK).map(|k| self.byte(v, k) * w.byte(c, k)).sum();
            let mut y = dot as f32 * (w.scale[c] * self.scales[v]);
            for t in 0..TAIL {
                y = fma_of(path, self.tails[t][v], w.tail[c * TAIL + t], y);
            }
            y
        }
    }

    /// The weights' AVX2 pairs and signed bytes are their quads', every
    /// byte in its place (the pairs: bytes 0 and 2, then 1 and 3).
    #[test]
    fn the_weights_layouts_hold_the_same_bytes() {
        let mut seed = 0x77u64;
        let w: Vec<f32> = (0..37 * H).map(|_| random(&mut seed)).collect();
        let c = Columns::new(&w, 37);
        let p = Packed::new(&c);
        for col in 0..37 {
            for k in 0..QK {
                let b = c.byte(col, k);
                assert_eq!(c.bytes[col * QK + k] as i32, b);
                assert_eq!(p.bytes[col * QK + k] as i32, b);
                let (q, j) = (k / 4, k % 4);
                let pair = c.pairs[col * 2 * QUADS + 2 * q + j % 2];
                assert_eq!(p.pairs[(2 * q + j % 2) * p.stride + col], pair);
                let half = if j < 2 { pair as u16 } else { (pair >> 16) as u16 };
                assert_eq!(half as i16 as i32, b, "column {col}, byte {k}");
            }
        }
    }

    /// Step 0's states on every path are `to_nodes`' scalar arithmetic,
    /// bit for bit, at 1 and 3 threads (padding nodes zero).
    #[test]
    fn states_to_nodes_is_to_nodes() {
        for path in paths("int8::states_to_nodes_is_to_nodes") {
            let mut seed = 0x1234_5678_9abcu64;
            for (n, threads) in [(1, 1), (37, 1), (5000, 3)] {
                let x = rows(n, &mut seed);
                let want = Quantised::new(&x);
                let stride = want.stride;
                let (mut quads, mut scales, mut full) = (vec![7; QUADS * stride], vec![7.0; stride], vec![7.0; H * stride]);
                cpu::with_cap(path, || states_to_nodes(&x, stride, &mut quads, &mut scales, &mut full, threads));
                let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
                assert_eq!(quads, want.quads, "{path}: {n} nodes' states");
                assert_eq!(bits(&scales), bits(&want.scales), "{path}");
                assert_eq!(bits(&full), bits(&want.full), "{path}");
            }
        }
    }

    /// A message product, biases, gates and random edges for `n` nodes:
    /// node `v` has `(7v + 3) % 6` incoming edges (some none, many
    /// several), each from a random source, of a random type and position.
    struct RandomEdges {
        f: Vec<f32>,
        bias: Vec<f32>,
        gates: Vec<f32>,
        crow: Vec<i64>,
        offsets: Vec<usize>,
        types: Vec<i64>,
        pos: Vec<i64>,
    }

    impl RandomEdges {
        fn new(n: usize, seed: &mut u64) -> Self {
            let f: Vec<f32> = (0..n * MESSAGES).map(|_| random(seed)).collect();
            let bias: Vec<f32> = (0..6 * H).map(|_| random(seed) * 0.1).collect();
            let positions = 7;
            let gates: Vec<f32> = (0..positions * H).map(|_| random(seed) + 1.0).collect();
            let mut crow = vec![0i64];
            let (mut offsets, mut types, mut pos) = (vec![], vec![], vec![]);
            for v in 0..n {
                let degree = (v * 7 + 3) % 6;
                for _ in 0..degree {
                    let source = ((random(seed) + 1.0) / 2.0 * n as f32) as usize % n;
                    let t = ((random(seed) + 1.0) * 3.0) as usize % 6;
                    offsets.push(source * MESSAGES + t * H);
                    types.push(t as i64);
                    pos.push(((random(seed) + 1.0) * 3.5) as i64 % positions as i64);
                }
                crow.push(offsets.len() as i64);
            }
            RandomEdges { f, bias, gates, crow, offsets, types, pos }
        }
    }

    /// The channel-wise max straight to bytes is the FP32 step's max
    /// ([`crate::forward::aggregate`] under [`crate::forward::Reduce::Max`])
    /// then [`to_nodes`], bit for bit: the same add, multiply and maximum
    /// per edge, zero for nodes without edges; on random edges, at 1 and 3
    /// threads, on every path. Gates here are signed, so a channel's
    /// largest message is often negative.
    #[test]
    fn aggregate_max_to_nodes_is_the_fp32_max_then_its_bytes() {
        for path in paths("int8::aggregate_max_to_nodes_is_the_fp32_max_then_its_bytes") {
            let mut seed = 0x005e_ed0f_3a77_u64;
            for (n, threads) in [(5, 1), (300, 1), (4500, 3)] {
                let RandomEdges { f, bias, mut gates, crow, offsets, types, pos } = RandomEdges::new(n, &mut seed);
                for g in gates.iter_mut().skip(3).step_by(4) {
                    *g = -*g;
                }
                let edges = Edges { crow: &crow, offsets: &offsets, types: &types, positions: &pos, reduce: crate::forward::Reduce::Max };
                let mut fp32 = vec![f32::NAN; n * H];
                crate::forward::aggregate::<f32, f32>(&f, &edges, &bias, &gates, &mut fp32, 1);
                for v in 0..n {
                    let (start, end) = (crow[v] as usize, crow[v + 1] as usize);
                    for j in 0..H {
                        let want = (start..end)
                            .map(|e| (f[offsets[e] + j] + bias[types[e] as usize * H + j]) * gates[pos[e] as usize * H + j])
                            .fold(if start == end { 0.0 } else { f32::NEG_INFINITY }, f32::max);
                        assert_eq!(fp32[v * H + j], want, "node {v} [{j}]: the FP32 max");
                    }
                }
                assert!(fp32.iter().any(|&x| x < 0.0), "some channels' largest message is negative");
                let want = Quantised::new(&fp32);
                let stride = want.stride;
                let (mut quads, mut scales, mut t0, mut t1) =
                    (vec![0; QUADS * stride], vec![0.0; stride], vec![0.0; stride], vec![0.0; stride]);
                check_edges(&f, &edges, &bias, &gates, n);
                cpu::with_cap(path, || {
                    // SAFETY: checked just above.
                    unsafe {
                        aggregate_max_to_nodes(&f, &edges, &bias, &gates, n, stride, &mut quads, &mut scales, [&mut t0, &mut t1], threads)
                    }
                });
                let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
                assert_eq!(quads, want.quads, "{path}: {n} nodes");
                assert_eq!(bits(&scales), bits(&want.scales), "{path}: {n} nodes");
                assert_eq!([bits(&t0), bits(&t1)], [bits(&want.tails[0]), bits(&want.tails[1])], "{path}: {n} nodes");
            }
        }
    }

    /// The gated mean straight to bytes is its scalar arithmetic (per edge
    /// `m · g` added with one rounding, then `sum · (1 / indegree) +
    /// biases[v]`, the biases' gated mean summed the same way; on the
    /// portable path, each a multiply and an add) then [`to_nodes`], bit
    /// for bit, on random edges (nodes without any, many with several), at
    /// 1 and 3 threads, on every path; and within 1e-5 of the FP32 step's
    /// gated mean ([`crate::forward::aggregate`]); the same for the sum.
    #[test]
    fn aggregate_to_nodes_is_the_gated_mean_then_its_bytes() {
        for path in paths("int8::aggregate_to_nodes_is_the_gated_mean_then_its_bytes") {
            let mut seed = 0xdead_beef_1234u64;
            // Summed messages (`Reduce::Sum`) as well: the same arithmetic
            // with 1 in place of 1 / indegree.
            for (n, threads, summed) in [(5, 1, false), (300, 1, false), (4500, 3, false), (300, 1, true), (4500, 3, true)] {
                let RandomEdges { f, bias, gates, crow, offsets, types, pos } = RandomEdges::new(n, &mut seed);
                let edges = Edges {
                    crow: &crow,
                    offsets: &offsets,
                    types: &types,
                    positions: &pos,
                    reduce: if summed { crate::forward::Reduce::Sum } else { crate::forward::Reduce::Mean },
                };
                let mut fp32 = vec![0f32; n * H];
                crate::forward::aggregate::<f32, f32>(&f, &edges, &bias, &gates, &mut fp32, 1);
                let mut mean = vec![0f32; n * H];
                let mut biases_want = vec![0f32; n * H];
                for v in 0..n {
                    let (start, end) = (crow[v] as usize, crow[v + 1] as usize);
                    let scale = match (end > start, summed) {
                        (false, _) => 0.0,
                        (true, true) => 1.0,
                        (true, false) => 1.0 / (end - start) as f32,
                    };
                    for j in 0..H {
                        let (mut sum, mut sum_b) = (0f32, 0f32);
                        for e in start..end {
                            let g = gates[pos[e] as usize * H + j];
                            sum = fma_of(path, f[offsets[e] + j], g, sum);
                            sum_b = fma_of(path, bias[types[e] as usize * H + j], g, sum_b);
                        }
                        biases_want[v * H + j] = sum_b * scale;
                        mean[v * H + j] = fma_of(path, sum, scale, biases_want[v * H + j]);
                        let d = (mean[v * H + j] - fp32[v * H + j]).abs();
                        assert!(
                            d < 1e-5 * (1.0 + fp32[v * H + j].abs()),
                            "{path}: node {v} [{j}]: {} against FP32's {}",
                            mean[v * H + j],
                            fp32[v * H + j]
                        );
                    }
                }
                let want = Quantised::new(&mean);
                let stride = want.stride;
                let (mut quads, mut scales, mut t0, mut t1) =
                    (vec![0; QUADS * stride], vec![0.0; stride], vec![0.0; stride], vec![0.0; stride]);
                check_edges(&f, &edges, &bias, &gates, n);
                let mut biases = vec![f32::NAN; n * H];
                // SAFETY: checked just above.
                cpu::with_cap(path, || unsafe { gated_biases(&edges, &bias, &gates, n, &mut biases, threads) });
                let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&biases), bits(&biases_want), "{path}: {n} nodes' gated biases");
                cpu::with_cap(path, || {
                    // SAFETY: as above.
                    unsafe {
                        aggregate_to_nodes(&f, &edges, &biases, &gates, n, stride, &mut quads, &mut scales, [&mut t0, &mut t1], threads)
                    }
                });
                assert_eq!(quads, want.quads, "{path}: {n} nodes");
                assert_eq!(bits(&scales), bits(&want.scales), "{path}: {n} nodes");
                assert_eq!([bits(&t0), bits(&t1)], [bits(&want.tails[0]), bits(&want.tails[1])], "{path}: {n} nodes");
            }
        }
    }

    /// The message product against the scalar arithmetic, bit for bit, on
    /// every path, at every tile remainder, over grouped rows (a group
    /// past the last column writes nothing), with a padded output stride,
    /// at 1 and 3 threads; and within INT8's error of the FP32 product, the
    /// tail (a selector's 50) exact.
    #[test]
    fn message_products_are_their_scalar_arithmetic() {
        for path in paths("int8::message_products_are_their_scalar_arithmetic") {
            let mut seed = 0x2545_f491u64;
            for (n, cols, threads) in [(1, 204, 1), (7, 102, 1), (13, 34, 1), (4099, 204, 3), (600, 17, 2)] {
                let x = rows(n, &mut seed);
                let q = Quantised::new(&x);
                let w: Vec<f32> = (0..cols * H).map(|_| random(&mut seed) * 0.3).collect();
                let columns = Columns::new(&w, cols);
                let packed = Packed::new(&columns);
                let first: Vec<usize> = (0..n).map(|r| if r % 17 == 3 { cols } else { (r * 7919 % 3) * 34 % cols.max(1) }).collect();
                let groups = RowGroups::by_first_column(&first);
                let ldo = cols + 5;
                let mut out = vec![f32::NAN; n * ldo];
                cpu::with_cap(path, || messages(q.nodes(), &groups, &packed, &mut out, ldo, threads));
                for r in 0..n {
                    for c in 0..ldo {
                        let got = out[r * ldo + c];
                        if c >= cols || c < first[r] / LANES * LANES || first[r] >= cols {
                            assert!(got.is_nan(), "{path}, {n} rows: [{r}, {c}] written");
                            continue;
                        }
                        let want = q.product(r, &columns, c, path);
                        assert_eq!(got.to_bits(), want.to_bits(), "{path}, {n} rows, {cols} cols: [{r}, {c}] {got} vs {want}");
                        let exact: f64 = (0..H).map(|j| x[r * H + j] as f64 * w[c * H + j] as f64).sum();
                        assert!((got as f64 - exact).abs() < 0.05, "{path}: [{r}, {c}]: INT8 {got}, FP32 {exact}");
                    }
                }
            }
        }
    }

    /// The portable INT8 cell's sigmoid (both builds) within 2e-4
    /// (relative) of the exact one, from saturation (±100) to 0, and the
    /// cell within 1e-3 of the exact GRU cell.
    #[test]
    fn the_portable_cell_is_within_its_error() {
        for i in -16000..=16000 {
            let x = i as f32 / 160.0;
            for (fma, got) in [(false, portable::sigmoid_approx::<false>(x)), (true, portable::sigmoid_approx::<true>(x))] {
                let want = 1.0 / (1.0 + (-x as f64).exp());
                let ok = if want < 1e-30 { (got as f64) < 1e-30 } else { ((got as f64 - want) / want).abs() < 2e-4 };
                assert!(ok, "σ({x}) = {got}, not {want} (fma {fma})");
            }
        }
        let mut seed = 0x51_7cc1_b727_220au64;
        let sig = |x: f32| 1.0 / (1.0 + (-x as f64).exp());
        for scale in [0.01f32, 1.0, 8.0, 60.0] {
            for _ in 0..2000 {
                let mut v = |s: f32| random(&mut seed) * s;
                let (x, g) = ([v(scale), v(scale), v(scale)], [v(scale), v(scale), v(scale)]);
                let (b, h) = ([v(1.0), v(1.0), v(1.0), v(1.0)], v(1.0));
                let r = sig(x[0] + g[0] + b[0]);
                let z = sig(x[1] + g[1] + b[1]);
                let n = ((x[2] + b[2]) as f64 + r * (g[2] + b[3]) as f64).tanh();
                let want = n + z * (h as f64 - n);
                for got in [portable::cell::<false>(x, g, b, h), portable::cell::<true>(x, g, b, h)] {
                    assert!((got as f64 - want).abs() < 1e-3, "scale {scale}: {got} against {want}");
                }
            }
        }
    }

    /// The AVX-512 INT8 cell's sigmoid within 2e-4 (relative) of the exact
    /// one, from saturation (±100) to 0, and its cell within 1e-3 of the
    /// FP32 step's.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_cell_is_within_its_error() {
        if !crate::cpu::run_test_on(crate::cpu::Isa::Vnni, "int8::the_cell_is_within_its_error") {
            return;
        }
        let lanes = |v: __m512| unsafe { std::mem::transmute::<__m512, [f32; 16]>(v) };
        for i in -1000..=1000 {
            let x: [f32; 16] = std::array::from_fn(|l| (i * 16 + l as i32) as f32 / 160.0);
            // SAFETY: AVX-512 (checked above).
            let [got] = unsafe { crate::avx512::sigmoid_approx_n([_mm512_loadu_ps(x.as_ptr())]) };
            for (x, got) in x.iter().zip(lanes(got)) {
                let want = 1.0 / (1.0 + (-*x as f64).exp());
                let ok = if want < 1e-30 { (got as f64) < 1e-30 } else { ((got as f64 - want) / want).abs() < 2e-4 };
                assert!(ok, "σ({x}) = {got}, not {want}");
            }
        }
        let mut seed = 0x51_7cc1_b727_220au64;
        for scale in [0.01f32, 1.0, 8.0, 60.0] {
            let mut v = |scale: f32| {
                let x: [f32; 16] = std::array::from_fn(|_| random(&mut seed) * scale);
                // SAFETY: AVX-512 (checked above).
                unsafe { _mm512_loadu_ps(x.as_ptr()) }
            };
            let (x, g) = ([v(scale), v(scale), v(scale)], [v(scale), v(scale), v(scale)]);
            let (b, h) = ([v(1.0), v(1.0), v(1.0), v(1.0)], v(1.0));
            // SAFETY: AVX-512 (checked above).
            let ([got], [want]) =
                unsafe { (crate::avx512::cells_by::<1, true>([x], [g], [b], [h]), crate::avx512::cells::<1>([x], [g], [b], [h])) };
            for (a, b) in lanes(got[0]).iter().zip(lanes(want[0])) {
                assert!((a - b).abs() < 1e-3, "scale {scale}: {a} against FP32's {b}");
            }
        }
    }

    /// The cell one lane of `path`'s GRU computes, on pre-activations.
    fn path_cell(path: Isa, x: [f32; 3], g: [f32; 3], b: [f32; 4], h: f32) -> f32 {
        match path {
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni => {
                // SAFETY: the CPU has AVX-512 (the caller's path).
                unsafe {
                    let s = _mm512_set1_ps;
                    let [[out, ..]] = crate::avx512::cells_by::<1, true>(
                        [[s(x[0]), s(x[1]), s(x[2])]],
                        [[s(g[0]), s(g[1]), s(g[2])]],
                        [[s(b[0]), s(b[1]), s(b[2]), s(b[3])]],
                        [s(h)],
                    );
                    _mm512_cvtss_f32(out)
                }
            }
            Isa::Portable => portable::cell::<false>(x, g, b, h),
            _ => portable::cell::<true>(x, g, b, h),
        }
    }

    /// The fused GRU on every path against the scalar arithmetic of its
    /// sums and the path's cell on them, bit for bit (new states, their
    /// bytes and scales), at node counts that are not whole vectors and at
    /// 1 and 3 threads; and every path within 2e-3 · (1 + |h|) of the
    /// portable one (the cells' sigmoids differ by ~1e-4, and the update
    /// gate's error is scaled by `h - n`: 50 where the selector sits).
    #[test]
    fn gru_is_its_sums_and_the_cell() {
        let mut outputs: Vec<(Isa, Vec<f32>)> = Vec::new();
        let mut states = Vec::new();
        for path in paths("int8::gru_is_its_sums_and_the_cell") {
            let mut seed = 0x9e37_79b9_7f4au64;
            let mut all = Vec::new();
            states.clear();
            for (n, threads) in [(1, 1), (21, 1), (4100, 3)] {
                let (m, h) = (rows(n, &mut seed), rows(n, &mut seed));
                let (mq, hq) = (Quantised::new(&m), Quantised::new(&h));
                let w_ih: Vec<f32> = (0..GATES * H).map(|_| random(&mut seed) * 0.4).collect();
                let w_hh: Vec<f32> = (0..GATES * H).map(|_| random(&mut seed) * 0.4).collect();
                let gru_w = Gru::new(&w_ih, &w_hh);
                let mut bias = GruBias { r: [0.0; H], z: [0.0; H], i_n: [0.0; H], h_n: [0.0; H] };
                for j in 0..H {
                    (bias.r[j], bias.z[j], bias.i_n[j], bias.h_n[j]) =
                        (random(&mut seed), random(&mut seed), random(&mut seed), random(&mut seed));
                }
                let stride = mq.stride;
                let (mut full, mut quads, mut scales) = (vec![0.0; H * stride], vec![0; QUADS * stride], vec![0.0; stride]);
                cpu::with_cap(path, || {
                    gru(
                        mq.nodes(),
                        hq.nodes(),
                        &hq.full,
                        &gru_w,
                        &bias,
                        n,
                        NextStates { full: &mut full, quads: &mut quads, scales: &mut scales },
                        threads,
                    )
                });
                let mut new = vec![0f32; n * H];
                for v in 0..n {
                    for j in 0..H {
                        let pre = |s: usize, g: usize| {
                            let x = if s == 0 { &mq } else { &hq };
                            x.product(v, &gru_w.sides[s], g * H + j, path)
                        };
                        let b = [bias.r[j], bias.z[j], bias.i_n[j], bias.h_n[j]];
                        let cell = path_cell(path, [pre(0, 0), pre(0, 1), pre(0, 2)], [pre(1, 0), pre(1, 1), pre(1, 2)], b, h[v * H + j]);
                        new[v * H + j] = cell;
                        assert_eq!(full[j * stride + v].to_bits(), cell.to_bits(), "{path}, {n} nodes: node {v}, unit {j}");
                    }
                }
                let want = Quantised::new(&new);
                for v in 0..n {
                    assert_eq!(scales[v].to_bits(), want.scales[v].to_bits(), "{path}: node {v}'s scale");
                    for q in 0..QUADS {
                        assert_eq!(quads[q * stride + v], want.quads[q * stride + v], "{path}: node {v}'s quad {q}");
                    }
                }
                all.extend(new);
                states.extend(h);
            }
            outputs.push((path, all));
        }
        let (_, portable) = &outputs[0];
        for (path, out) in &outputs[1..] {
            for (i, ((a, b), h)) in out.iter().zip(portable).zip(&states).enumerate() {
                assert!((a - b).abs() < 2e-3 * (1.0 + h.abs()), "{path} against portable at {i}: {a} vs {b} (h {h})");
            }
        }
    }
}
