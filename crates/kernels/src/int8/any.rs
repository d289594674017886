//! INT8 products for an inner dimension of any width, row-major on both
//! sides: `out[r, c] = x[r, ..k] · B[.., c]`, what the step of a state
//! other than 34 wide runs at `dtype=int8` (`programl-infer`'s general
//! step). The 34-wide step ([`super`]) lays its states out node-major for
//! its fixed width; this one keeps the general step's row-major buffers
//! and replaces only its two products.
//!
//! The same quantisation as the 34-wide step ([`quantise`],
//! [`quantiser`]): the first `qk` entries of every left-hand row (a state
//! or an aggregated message) as signed bytes with one scale per row, the
//! same entries of every weight column with a scale per column, sums
//! exact in 32-bit integers; the last `k - qk` entries (at least two: the
//! root selector's, 0 or 50 in the initial state against values within
//! ±1 in the rest) stay FP32 on both sides. `qk` is the largest multiple
//! of 4 that leaves two ([`split`]): 64 of 66, 32 of 34.
//!
//! Three paths, the same integer sums and the same FP32 epilogue (`y =
//! Σ · (scale_c · scale_r)`, then each FP32 entry's product added, fused
//! where the path has FMA):
//! - AVX-512 VNNI: `vpdpbusd` on a register tile of up to 6 rows by 4
//!   vectors of 16 columns, the row's bytes unsigned (`q + 128`) and each
//!   sum started at minus `128 · Σ q(w)` to take the offset back out, as
//!   [`super::messages`] does;
//! - AVX2 (also under AVX-VNNI and on AVX-512 without VNNI): `vpmaddubsw`
//!   on `|q|` and the weights' bytes signed by `q` (`vpsignb`), exact
//!   ([`rows_avx2`]), on a tile of up to 2 rows by 4 vectors of 8 columns;
//! - portable (the scalar sums, any target).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{quantise, quantiser};
use crate::cpu::{self, Isa};
use crate::elem::madd;
use crate::gemm::RowGroups;
use crate::threads::{par_ranges, Rows};

// The products' vectors, as `gemm`'s (the general step packs its rows by it).
use crate::gemm::LANES;
const TILE_ROWS: usize = 6;
const TILE_VECS: usize = 4;

/// The quantised entries of a row of `k`, and the FP32 ones after them:
/// `qk` is the largest multiple of 4 with at least two entries left.
pub fn split(k: usize) -> (usize, usize) {
    let qk = k.saturating_sub(2) / 4 * 4;
    (qk, k - qk)
}

/// A right-hand side `wᵀ` from a weight `w[cols, k]` (as a linear layer
/// holds it), quantised per column and packed for a tile whose vectors run
/// along the columns (each row of the packing `[stride]`, zero past
/// `cols`).
pub struct Packed {
    k: usize,
    qk: usize,
    cols: usize,
    stride: usize,
    /// `[qk / 4][stride]`: byte `j` of quad `q` of column `c` is
    /// `q(w[c, 4q + j])`, signed.
    quads: Vec<u32>,
    scale: Vec<f32>,
    /// `128 · Σ_k q(w[c, k])` (the left-hand bytes are `q + 128`).
    offset: Vec<i32>,
    /// `[k - qk][stride]`: the FP32 entries.
    tail: Vec<f32>,
    /// `[cols][qk]`: the bytes as signed values (the portable sums').
    bytes: Vec<i8>,
}

impl Packed {
    pub fn from_weight(w: &[f32], cols: usize, k: usize) -> Packed {
        assert_eq!(w.len(), cols * k, "a [{cols}, {k}] weight");
        let (qk, tail) = split(k);
        let stride = cols.div_ceil(LANES) * LANES;
        let mut p = Packed {
            k,
            qk,
            cols,
            stride,
            quads: vec![0; qk / 4 * stride],
            scale: vec![0.0; stride],
            offset: vec![0; stride],
            tail: vec![0.0; tail * stride],
            bytes: vec![0; cols * qk],
        };
        for c in 0..cols {
            let row = &w[c * k..(c + 1) * k];
            let (inv, s) = quantiser(row[..qk].iter().fold(0f32, |m, x| m.max(x.abs())));
            p.scale[c] = s;
            for (j, &x) in row[..qk].iter().enumerate() {
                let q = quantise(x, inv);
                p.bytes[c * qk + j] = q as i8;
                p.offset[c] += 128 * q;
                p.quads[j / 4 * stride + c] |= ((q as i8 as u8) as u32) << (8 * (j % 4));
            }
            for t in 0..tail {
                p.tail[t * stride + c] = row[qk + t];
            }
        }
        p
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn k(&self) -> usize {
        self.k
    }
}

/// Left-hand rows quantised ([`Quantised::rows`]): row `r`'s quads of
/// unsigned bytes (`q + 128`) at `quads[r · qk / 4..]`, its scale, its FP32
/// entries at `tails[r · (k - qk)..]`. Buffers grow and are reused.
#[derive(Default)]
pub struct Quantised {
    k: usize,
    rows: usize,
    quads: Vec<u32>,
    scales: Vec<f32>,
    tails: Vec<f32>,
}

impl Quantised {
    /// Quantises `rows` rows of `k` entries of `x` (row stride `lda`),
    /// each with its own [`quantiser`], split over `threads`.
    pub fn rows(&mut self, x: &[f32], lda: usize, rows: usize, k: usize, threads: usize) {
        assert!(rows == 0 || (lda >= k && x.len() >= (rows - 1) * lda + k), "left-hand side too short");
        let (qk, tail) = split(k);
        let quads = qk / 4;
        self.k = k;
        self.rows = rows;
        grow(&mut self.quads, rows * quads, 0);
        grow(&mut self.scales, rows, 0.0);
        grow(&mut self.tails, rows * tail, 0.0);
        let (q, s, t) = (Rows::new(&mut self.quads), Rows::new(&mut self.scales), Rows::new(&mut self.tails));
        let (wide, fma) = (cpu::allows(Isa::Avx512), cpu::allows(Isa::Avx2));
        par_ranges(rows, threads, |range| {
            // SAFETY: each range writes its own rows of the three buffers.
            let (q, s, t) = unsafe {
                (
                    q.get(range.start * quads, range.len() * quads),
                    s.get(range.start, range.len()),
                    t.get(range.start * tail, range.len() * tail),
                )
            };
            let x = &x[range.start * lda..];
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: the CPU has AVX-512 F, BW and VL (the path's flags).
                return unsafe { quantise_rows_avx512(x, lda, k, q, s, t) };
            }
            #[cfg(target_arch = "x86_64")]
            if fma {
                // SAFETY: the CPU has AVX2 and FMA.
                return unsafe { quantise_rows_avx2(x, lda, k, q, s, t) };
            }
            let _ = (wide, fma);
            quantise_rows(x, lda, k, q, s, t)
        });
    }
}

fn grow<T: Copy>(v: &mut Vec<T>, len: usize, zero: T) {
    if v.len() < len {
        v.resize(len, zero);
    }
}

/// The scalar quantisation of rows: as many rows as `scales` holds.
#[inline(always)]
fn quantise_rows(x: &[f32], lda: usize, k: usize, quads: &mut [u32], scales: &mut [f32], tails: &mut [f32]) {
    let (qk, tail) = split(k);
    for (r, s) in scales.iter_mut().enumerate() {
        let row = &x[r * lda..][..k];
        // Sixteen running maxima, so that the loop vectorises (a float
        // `max` fold does not reorder).
        let mut most = [0f32; LANES];
        for chunk in row[..qk].chunks(LANES) {
            for (m, v) in most.iter_mut().zip(chunk) {
                *m = m.max(v.abs());
            }
        }
        let (inv, scale) = quantiser(most.iter().fold(0f32, |m, &x| m.max(x)));
        *s = scale;
        for (q, four) in quads[r * qk / 4..][..qk / 4].iter_mut().zip(row[..qk].chunks_exact(4)) {
            *q = (0..4).fold(0u32, |d, j| d | (((quantise(four[j], inv) + 128) as u32) << (8 * j)));
        }
        tails[r * tail..][..tail].copy_from_slice(&row[qk..]);
    }
}

/// [`quantise_rows`] in AVX-512, 16 entries an instruction: the largest
/// magnitude by `vmaxps` (the new value first, so that a NaN is passed
/// over, as `f32::max` does), the bytes by a clamp to ±127 (which keeps a
/// NaN: a row whose largest magnitude is below ~4e-37 has an infinite
/// `127 / max`, and the scalar [`quantise`] clamps), `vcvtps2dq` (nearest
/// even, as [`quantise`]; a NaN gives 0 after the offset, as there) and
/// `vpmovdb`: the scalar loop's bytes exactly.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn quantise_rows_avx512(x: &[f32], lda: usize, k: usize, quads: &mut [u32], scales: &mut [f32], tails: &mut [f32]) {
    let (qk, tail) = split(k);
    let chunks = qk.div_ceil(LANES);
    let mask = |c: usize| -> u16 {
        let n = (qk - c * LANES).min(LANES);
        if n == LANES {
            u16::MAX
        } else {
            (1u16 << n) - 1
        }
    };
    let bias = _mm512_set1_epi32(128);
    let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    for (r, s) in scales.iter_mut().enumerate() {
        let row = x[r * lda..][..k].as_ptr();
        let mut most = _mm512_setzero_ps();
        for c in 0..chunks {
            most = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(mask(c), row.add(c * LANES))), most);
        }
        let (inv, scale) = quantiser(_mm512_reduce_max_ps(most));
        *s = scale;
        let inv = _mm512_set1_ps(inv);
        let out = quads[r * qk / 4..][..qk / 4].as_mut_ptr();
        for c in 0..chunks {
            let m = mask(c);
            let a = _mm512_maskz_loadu_ps(m, row.add(c * LANES));
            // `vmaxps`/`vminps` return their second operand when either is
            // NaN: the product second keeps it.
            let y = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mul_ps(a, inv)));
            let bytes = _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(y), bias));
            // `qk` is whole quads: a chunk's live lanes are whole quads.
            _mm_mask_storeu_epi8(out.add(c * LANES / 4) as *mut i8, m, bytes);
        }
        tails[r * tail..][..tail].copy_from_slice(&x[r * lda + qk..][..tail]);
    }
}

/// [`quantise_rows_avx512`] in AVX2, 8 entries an instruction, the same
/// operations (the NaN rules of `vmaxps`/`vminps` and `vcvtps2dq` are the
/// same at 256 bits), a quad's four bytes gathered by `vpshufb`: the
/// scalar loop's bytes exactly.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantise_rows_avx2(x: &[f32], lda: usize, k: usize, quads: &mut [u32], scales: &mut [f32], tails: &mut [f32]) {
    const L: usize = 8;
    let (qk, tail) = split(k);
    let chunks = qk.div_ceil(L);
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask = |c: usize| _mm256_cmpgt_epi32(_mm256_set1_epi32((qk - c * L).min(L) as i32), lanes);
    let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let bias = _mm256_set1_epi32(128);
    let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    // Byte 0 of each 32-bit lane to the lane's first four bytes, per
    // 128-bit half.
    let gather = _mm256_setr_epi8(
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    );
    for (r, s) in scales.iter_mut().enumerate() {
        let row = x[r * lda..][..k].as_ptr();
        let mut most = _mm256_setzero_ps();
        for c in 0..chunks {
            let a = _mm256_and_ps(_mm256_maskload_ps(row.add(c * L), mask(c)), magnitude);
            most = _mm256_max_ps(a, most);
        }
        let half = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps::<1>(most));
        let half = _mm_max_ps(half, _mm_movehl_ps(half, half));
        let half = _mm_max_ss(half, _mm_shuffle_ps::<1>(half, half));
        let (inv, scale) = quantiser(_mm_cvtss_f32(half));
        *s = scale;
        let inv = _mm256_set1_ps(inv);
        let out = quads[r * qk / 4..][..qk / 4].as_mut_ptr();
        for c in 0..chunks {
            let a = _mm256_maskload_ps(row.add(c * L), mask(c));
            let y = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(a, inv)));
            let bytes = _mm256_shuffle_epi8(_mm256_add_epi32(_mm256_cvtps_epi32(y), bias), gather);
            // `qk` is whole quads: a chunk holds one or two.
            *out.add(2 * c) = _mm256_extract_epi32::<0>(bytes) as u32;
            if 2 * c + 1 < qk / 4 {
                *out.add(2 * c + 1) = _mm256_extract_epi32::<4>(bytes) as u32;
            }
        }
        tails[r * tail..][..tail].copy_from_slice(&x[r * lda + qk..][..tail]);
    }
}

/// `out[r, c] = x_r · B[.., c]` for the rows of `groups` (row `r` of `x`
/// and of `out`), each from its group's first column rounded down to a
/// vector of 16 (a few columns before it may be written too; a group past
/// the last column computes nothing); `out` row stride `ldo`.
pub fn product_rows(x: &Quantised, groups: &RowGroups, b: &Packed, out: &mut [f32], ldo: usize, threads: usize) {
    crate::gemm::check_strided(groups.len(), out.len(), ldo, b.cols);
    product_rows_by(x, groups, b, out, |r| r * ldo, threads)
}

/// [`product_rows`] with each row's output placed on its own, row `r`'s
/// column `c` at `out[row0[r] + c]`, as `gemm::product_rows_at` (rows
/// packed shorter than the right-hand side: a row writes only from its
/// group's first column rounded down to 16).
///
/// # Safety
/// The rows' written ranges, `row0[r] + ⌊first / 16⌋ · 16 .. row0[r] +
/// cols` for each row of `groups`, do not overlap (threads write them at
/// once); that each is inside `out` is checked.
pub unsafe fn product_rows_at(x: &Quantised, groups: &RowGroups, b: &Packed, out: &mut [f32], row0: &[usize], threads: usize) {
    crate::gemm::check_placed(groups.len(), row0, out.len(), b.cols);
    product_rows_by(x, groups, b, out, |r| row0[r], threads)
}

/// [`product_rows`], row `r`'s column 0 at `out[col0(r)]` (checked by the
/// callers to hold the row's columns).
fn product_rows_by(x: &Quantised, groups: &RowGroups, b: &Packed, out: &mut [f32], col0: impl Fn(usize) -> usize + Sync, threads: usize) {
    let extent = groups.len();
    assert_eq!(x.k, b.k, "the rows' width and the weight's");
    assert!(extent <= x.rows, "rows not quantised");
    let path = super::path();
    let shared = Rows::new(out);
    par_ranges(extent, threads, |range| {
        for (first, share) in groups.shares(range) {
            if first >= b.cols {
                continue;
            }
            let out = shared.ptr();
            let at = |i: usize| {
                let r = groups.row(share.start + i);
                // SAFETY: every row's place holds its columns, checked by the callers.
                (r, unsafe { out.add(col0(r)) })
            };
            let first = first / LANES * LANES;
            // SAFETY: each range writes its own rows (disjoint shares); the
            // path's instructions are the CPU's.
            unsafe {
                match path {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Vnni => rows_vnni(x, &at, share.len(), b, first),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 | Isa::AvxVnni => rows_avx2(x, &at, share.len(), b, first),
                    _ => rows_portable(x, &at, share.len(), b, first),
                }
            }
        }
    });
}

/// `out[i, c] = x_{rows.start + i} · B[.., c]` for every column, on the
/// calling thread: a block of rows into a buffer of its own (row stride
/// `ldo`), as the general step's cell takes its gates' products.
pub fn product_block(x: &Quantised, rows: std::ops::Range<usize>, b: &Packed, out: &mut [f32], ldo: usize) {
    assert_eq!(x.k, b.k, "the rows' width and the weight's");
    assert!(rows.end <= x.rows, "rows not quantised");
    assert!(rows.is_empty() || (out.len() >= (rows.len() - 1) * ldo + b.cols && ldo >= b.cols), "output too short");
    let ptr = out.as_mut_ptr();
    // SAFETY: every output row is within `out`, checked above.
    let at = |i: usize| (rows.start + i, unsafe { ptr.add(i * ldo) });
    // SAFETY: the rows are quantised and the outputs in bounds (checked
    // above); the path's instructions are the CPU's.
    unsafe {
        match super::path() {
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni => rows_vnni(x, &at, rows.len(), b, 0),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::AvxVnni => rows_avx2(x, &at, rows.len(), b, 0),
            _ => rows_portable(x, &at, rows.len(), b, 0),
        }
    }
}

/// The scalar rows: row `i` (its index and output at `at(i)`) from column
/// `first` on, `FMA` the epilogue's fused multiply-adds.
///
/// # Safety
/// Every row's output holds `b.cols` values.
#[inline(always)]
unsafe fn rows_scalar<const FMA: bool>(x: &Quantised, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
    let (qk, tail) = (b.qk, b.k - b.qk);
    let mut a = vec![0i32; qk];
    for i in 0..rows {
        let (r, out) = at(i);
        for (j, v) in a.iter_mut().enumerate() {
            *v = ((x.quads[r * qk / 4 + j / 4] >> (8 * (j % 4))) & 0xff) as i32 - 128;
        }
        let xs = x.scales[r];
        let xt = &x.tails[r * tail..][..tail];
        for c in first..b.cols {
            let wb = &b.bytes[c * qk..][..qk];
            let sum: i32 = a.iter().zip(wb).map(|(a, &w)| a * w as i32).sum();
            let mut y = sum as f32 * (b.scale[c] * xs);
            for (t, &v) in xt.iter().enumerate() {
                y = madd::<FMA>(v, b.tail[t * b.stride + c], y);
            }
            *out.add(c) = y;
        }
    }
}

/// # Safety
/// As [`rows_scalar`].
unsafe fn rows_portable(x: &Quantised, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
    rows_scalar::<false>(x, at, rows, b, first)
}

/// The scalar sums compiled for AVX2 and FMA: [`rows_avx2`]'s reference.
///
/// # Safety
/// As [`rows_scalar`], on a CPU with AVX2 and FMA.
#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_scalar_fma(x: &Quantised, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
    rows_scalar::<true>(x, at, rows, b, first)
}

/// Rows and vectors of 8 columns of [`tile_avx2`].
const AVX2_ROWS: usize = 2;
const AVX2_VECS: usize = 4;
/// Quads a row of [`tile_avx2`] takes (`k` up to 258); wider rows take
/// the scalar sums.
const AVX2_QUADS: usize = 64;

/// The rows on AVX2: the VNNI tiles' integer sums without `vpdpbusd`.
/// `vpmaddubsw` multiplies unsigned bytes by signed ones and adds pairs
/// into 16 bits with saturation, which the VNNI layout's `q + 128` by
/// `±127` would reach (2 · 255 · 127); so each sum is taken as `|q| ·
/// (w · sign q)` (`vpsignb` on the weights): at most 2 · 127 · 127 a pair,
/// exact. `vpmaddwd` by ones adds the pairs into the 32-bit lanes, a quad
/// each. Those are `Σ q w` exactly, the scalar sums, with no offset to take
/// out; the epilogue is the scalar one's, fused: the same bits.
///
/// Per 32 products: `vpsignb`, `vpmaddubsw`, `vpmaddwd` and `vpaddd`,
/// against four FMAs for FP32. On Zen 4 that is still slower than FP32: a
/// block of 48 rows of 66 by 198 columns at 36.5 products a nanosecond,
/// FP32's at 52 (the scalar sums this replaced: 7.7); 4 rows by 2 vectors
/// gave 34.2. So `dtype=auto` stays FP32 below VNNI ([`super::preferred`]),
/// and this is what `dtype=int8` runs there: VNNI's integer sums at a
/// usable speed.
///
/// # Safety
/// As [`rows_scalar`], on a CPU with AVX2 and FMA; `first` a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(x: &Quantised, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
    const L: usize = 8;
    let quads = b.qk / 4;
    if quads > AVX2_QUADS {
        return rows_scalar::<true>(x, at, rows, b, first);
    }
    let vectors = b.stride / L;
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let live = |v: usize| _mm256_cmpgt_epi32(_mm256_set1_epi32(b.cols.saturating_sub(v * L).min(L) as i32), lanes);
    // A tile's rows as signed bytes and their magnitudes, quad by quad.
    let mut signed = [[0u32; AVX2_QUADS]; AVX2_ROWS];
    let mut magnitude = [[0u32; AVX2_QUADS]; AVX2_ROWS];
    let mut v0 = first / L;
    while v0 < vectors {
        let vecs = (vectors - v0).min(AVX2_VECS);
        let masks: [__m256i; AVX2_VECS] = std::array::from_fn(|v| live(v0 + v));
        let mut i = 0;
        while i < rows {
            let tile = (rows - i).min(AVX2_ROWS);
            let mut rows_at = [(0usize, std::ptr::null_mut::<f32>()); AVX2_ROWS];
            for (t, slot) in rows_at.iter_mut().enumerate().take(tile) {
                *slot = at(i + t);
                signs_and_magnitudes(&x.quads[slot.0 * quads..][..quads], &mut signed[t], &mut magnitude[t]);
            }
            macro_rules! tile {
                ($($r:literal)*) => {
                    match (tile, vecs) {
                        $(
                            ($r, 4) => tile_avx2::<$r, 4>(x, &rows_at, &signed, &magnitude, b, v0, &masks),
                            ($r, 3) => tile_avx2::<$r, 3>(x, &rows_at, &signed, &magnitude, b, v0, &masks),
                            ($r, 2) => tile_avx2::<$r, 2>(x, &rows_at, &signed, &magnitude, b, v0, &masks),
                            ($r, 1) => tile_avx2::<$r, 1>(x, &rows_at, &signed, &magnitude, b, v0, &masks),
                        )*
                        _ => unreachable!(),
                    }
                };
            }
            tile!(1 2);
            i += tile;
        }
        v0 += vecs;
    }
}

/// A row's quads of `q + 128` as signed bytes `q` and as `|q|`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn signs_and_magnitudes(quads: &[u32], signed: &mut [u32; AVX2_QUADS], magnitude: &mut [u32; AVX2_QUADS]) {
    let flip = _mm256_set1_epi8(-128);
    let mut j = 0;
    while j + 8 <= quads.len() {
        let q = _mm256_xor_si256(_mm256_loadu_si256(quads.as_ptr().add(j) as *const _), flip);
        _mm256_storeu_si256(signed.as_mut_ptr().add(j) as *mut _, q);
        _mm256_storeu_si256(magnitude.as_mut_ptr().add(j) as *mut _, _mm256_abs_epi8(q));
        j += 8;
    }
    for j in j..quads.len() {
        let q = quads[j] ^ 0x8080_8080;
        signed[j] = q;
        magnitude[j] = u32::from_le_bytes(q.to_le_bytes().map(|b| (b as i8).unsigned_abs()));
    }
}

/// One register tile on AVX2: `R` rows by `V` vectors of 8 columns from
/// vector `v0` ([`rows_avx2`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_avx2<const R: usize, const V: usize>(
    x: &Quantised,
    rows: &[(usize, *mut f32); AVX2_ROWS],
    signed: &[[u32; AVX2_QUADS]; AVX2_ROWS],
    magnitude: &[[u32; AVX2_QUADS]; AVX2_ROWS],
    b: &Packed,
    v0: usize,
    masks: &[__m256i; AVX2_VECS],
) {
    const L: usize = 8;
    let first = v0 * L;
    let quads = b.qk / 4;
    let tail = b.k - b.qk;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); V]; R];
    for q in 0..quads {
        let w = b.quads.as_ptr().add(q * b.stride + first);
        let bv: [__m256i; V] = std::array::from_fn(|v| _mm256_loadu_si256(w.add(v * L) as *const _));
        for (r, acc) in acc.iter_mut().enumerate() {
            let s = _mm256_set1_epi32(*signed[r].get_unchecked(q) as i32);
            let m = _mm256_set1_epi32(*magnitude[r].get_unchecked(q) as i32);
            for v in 0..V {
                let pairs = _mm256_maddubs_epi16(m, _mm256_sign_epi8(bv[v], s));
                acc[v] = _mm256_add_epi32(acc[v], _mm256_madd_epi16(pairs, ones));
            }
        }
    }
    // The scalar epilogue's operations in its order: the sum by the two
    // scales' product, then each FP32 entry's product fused in.
    for v in 0..V {
        let c = first + v * L;
        let col_scale = _mm256_loadu_ps(b.scale.as_ptr().add(c));
        for (r, acc) in acc.iter().enumerate() {
            let (row, out) = rows[r];
            let mut y = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[v]), _mm256_mul_ps(col_scale, _mm256_set1_ps(*x.scales.get_unchecked(row))));
            for t in 0..tail {
                let w = _mm256_loadu_ps(b.tail.as_ptr().add(t * b.stride + c));
                y = _mm256_fmadd_ps(_mm256_set1_ps(*x.tails.get_unchecked(row * tail + t)), w, y);
            }
            _mm256_maskstore_ps(out.add(c), masks[v], y);
        }
    }
}

/// # Safety
/// As [`rows_scalar`], on a CPU with AVX-512 VNNI; `first` a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows_vnni(x: &Quantised, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
    let vectors = b.stride / LANES;
    let live = |v: usize| {
        let n = b.cols.saturating_sub(v * LANES).min(LANES);
        if n == LANES {
            u16::MAX
        } else {
            (1u16 << n) - 1
        }
    };
    // Columns outer: a block of 4 vectors' weights (`qk / 4` quads of 64
    // columns: 4 KB at 64 entries) stays in L1 while the rows stream past
    // it, as in the FP32 products (`gemm`); the whole right-hand side of a
    // 66-wide step's fused product (39 KB) would not.
    let mut v0 = first / LANES;
    while v0 < vectors {
        let vecs = (vectors - v0).min(TILE_VECS);
        let masks: [u16; TILE_VECS] = std::array::from_fn(|v| if v < vecs { live(v0 + v) } else { 0 });
        let mut i = 0;
        while i < rows {
            let tile = (rows - i).min(TILE_ROWS);
            let mut rows_at = [(0usize, std::ptr::null_mut::<f32>()); TILE_ROWS];
            for (t, slot) in rows_at.iter_mut().enumerate().take(tile) {
                *slot = at(i + t);
            }
            macro_rules! tile {
                ($($r:literal)*) => {
                    match (tile, vecs) {
                        $(
                            ($r, 4) => tile_vnni::<$r, 4>(x, &rows_at, b, v0, &masks),
                            ($r, 3) => tile_vnni::<$r, 3>(x, &rows_at, b, v0, &masks),
                            ($r, 2) => tile_vnni::<$r, 2>(x, &rows_at, b, v0, &masks),
                            ($r, 1) => tile_vnni::<$r, 1>(x, &rows_at, b, v0, &masks),
                        )*
                        _ => unreachable!(),
                    }
                };
            }
            tile!(1 2 3 4 5 6);
            i += tile;
        }
        v0 += vecs;
    }
}

/// One register tile: `R` rows by `V` vectors of columns from vector `v0`.
/// Not inlined: each of its 24 shapes compiled on its own allocates its
/// registers better than all of them inlined into [`rows_vnni`] (~1.5% of
/// a 66-wide step).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline(never)]
unsafe fn tile_vnni<const R: usize, const V: usize>(
    x: &Quantised,
    rows: &[(usize, *mut f32); TILE_ROWS],
    b: &Packed,
    v0: usize,
    masks: &[u16; TILE_VECS],
) {
    let first = v0 * LANES;
    let quads = b.qk / 4;
    let tail = b.k - b.qk;
    let start: [__m512i; V] = std::array::from_fn(|v| {
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(b.offset.as_ptr().add(first + v * LANES) as *const _))
    });
    let mut acc = [start; R];
    let row_quads: [*const u32; R] = std::array::from_fn(|r| x.quads.as_ptr().add(rows[r].0 * quads));
    for q in 0..quads {
        let w = b.quads.as_ptr().add(q * b.stride + first);
        let bv: [__m512i; V] = std::array::from_fn(|v| _mm512_loadu_si512(w.add(v * LANES) as *const _));
        for (r, acc) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_epi32(*row_quads[r].add(q) as i32);
            for v in 0..V {
                acc[v] = _mm512_dpbusd_epi32(acc[v], a, bv[v]);
            }
        }
    }
    if tail == 2 {
        // The usual case (34 and 66 channels): the two FP32 entries'
        // products unrolled, each row's scale and entries broadcast once
        // for all its vectors, each vector's scales and weights loaded once
        // for all its rows; the same operations in the same order as the
        // loop below. (Its run-time trip count kept the accumulators on
        // the stack and each row's chain of FMAs waiting: a fifth of the
        // tile's time.)
        let zero = _mm512_setzero_ps();
        let (mut scale, mut t0, mut t1) = ([zero; R], [zero; R], [zero; R]);
        for r in 0..R {
            let row = rows[r].0;
            scale[r] = _mm512_set1_ps(*x.scales.get_unchecked(row));
            t0[r] = _mm512_set1_ps(*x.tails.get_unchecked(row * 2));
            t1[r] = _mm512_set1_ps(*x.tails.get_unchecked(row * 2 + 1));
        }
        for v in 0..V {
            let c = first + v * LANES;
            let col_scale = _mm512_loadu_ps(b.scale.as_ptr().add(c));
            let w0 = _mm512_loadu_ps(b.tail.as_ptr().add(c));
            let w1 = _mm512_loadu_ps(b.tail.as_ptr().add(b.stride + c));
            for r in 0..R {
                let y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][v]), _mm512_mul_ps(col_scale, scale[r]));
                let y = _mm512_fmadd_ps(t1[r], w1, _mm512_fmadd_ps(t0[r], w0, y));
                _mm512_mask_storeu_ps(rows[r].1.add(c), masks[v], y);
            }
        }
        return;
    }
    for v in 0..V {
        let c = first + v * LANES;
        let col_scale = _mm512_loadu_ps(b.scale.as_ptr().add(c));
        for (r, acc) in acc.iter().enumerate() {
            let (row, out) = rows[r];
            let mut y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[v]), _mm512_mul_ps(col_scale, _mm512_set1_ps(*x.scales.get_unchecked(row))));
            for t in 0..tail {
                let w = _mm512_loadu_ps(b.tail.as_ptr().add(t * b.stride + c));
                y = _mm512_fmadd_ps(_mm512_set1_ps(*x.tails.get_unchecked(row * tail + t)), w, y);
            }
            _mm512_mask_storeu_ps(out.add(c), masks[v], y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded values in (-1, 1), scaled.
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// Rows that need columns from several starts (some past every column).
    fn groups(rows: usize, cols: usize) -> RowGroups {
        let first: Vec<usize> = (0..rows).map(|r| [0, 17, cols / 2, cols, 5][r % 5].min(cols)).collect();
        RowGroups::by_first_column(&first)
    }

    fn run(isa: Isa, x: &[f32], rows: usize, k: usize, w: &[f32], cols: usize, g: &RowGroups) -> Vec<f32> {
        cpu::with_cap(isa, || {
            let b = Packed::from_weight(w, cols, k);
            let mut q = Quantised::default();
            q.rows(x, k, rows, k, 1);
            let mut out = vec![f32::NAN; rows * cols];
            product_rows(&q, g, &b, &mut out, cols, 2);
            out
        })
    }

    const SHAPES: [(usize, usize, usize); 6] = [(1, 66, 9), (13, 66, 594), (7, 34, 102), (20, 50, 150), (9, 3, 40), (6, 130, 33)];

    /// The product against the FP32 one: within the quantisation's bound,
    /// `|x| |w|` over 127 per side (the entries past `qk` exact), with the
    /// selector-like large entries in the FP32 tail; columns before a
    /// row's group are left alone, those from its vector on written.
    #[test]
    fn products_are_within_the_quantisation_bound() {
        for (rows, k, cols) in SHAPES {
            let mut x = values(rows * k, 7 + k as u64, 1.0);
            for r in 0..rows {
                x[r * k + k - 1] = 50.0 * (r % 2) as f32;
            }
            let w = values(cols * k, 11 + cols as u64, 0.3);
            let g = groups(rows, cols);
            let out = run(Isa::Portable, &x, rows, k, &w, cols, &g);
            let (qk, _) = split(k);
            for (first, members) in g.groups() {
                // A group at or past the last column computes nothing.
                let from = if first >= cols { cols } else { first / LANES * LANES };
                for r in members {
                    let r = r as usize;
                    for c in 0..cols {
                        let y = out[r * cols + c];
                        if c < from {
                            assert!(y.is_nan(), "column {c} before row {r}'s group written");
                            continue;
                        }
                        let exact: f64 = (0..k).map(|j| x[r * k + j] as f64 * w[c * k + j] as f64).sum();
                        let xm = x[r * k..r * k + qk].iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                        let wm = w[c * k..c * k + qk].iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                        let bound = qk as f64 * xm * wm * (1.0 / 127.0) + 1e-4;
                        assert!((y as f64 - exact).abs() <= bound, "[{rows}, {k}] · [{k}, {cols}] row {r} column {c}: {y} against {exact}");
                    }
                }
            }
        }
    }

    /// The scalar sums compiled for FMA, on the rows of `g` (the
    /// quantisation the portable one's: the same bytes on every path).
    fn scalar_fma(x: &[f32], rows: usize, k: usize, w: &[f32], cols: usize, g: &RowGroups) -> Vec<f32> {
        cpu::with_cap(Isa::Portable, || {
            let b = Packed::from_weight(w, cols, k);
            let mut q = Quantised::default();
            q.rows(x, k, rows, k, 1);
            let mut out = vec![f32::NAN; rows * cols];
            let ptr = out.as_mut_ptr();
            for (first, members) in g.groups() {
                if first >= cols {
                    continue;
                }
                let members: Vec<usize> = members.iter().map(|&r| r as usize).collect();
                // SAFETY: each row's output is its own row of `out`; the
                // CPU has AVX2 and FMA (the callers check).
                let at = |i: usize| (members[i], unsafe { ptr.add(members[i] * cols) });
                unsafe { rows_scalar_fma(&q, &at, members.len(), &b, first / LANES * LANES) };
            }
            out
        })
    }

    /// VNNI's tiles and AVX2's against the scalar sums compiled for FMA
    /// (the same integer sums, the same epilogue, fused): bit for bit, at
    /// widths with and without a partial vector of columns, a row tile of
    /// every size, and quads left over from vectors of 8.
    #[test]
    fn the_tiles_match_the_scalar_sums() {
        if !cpu::run_test_on(Isa::Avx2, "int8::any::tests::the_tiles_match_the_scalar_sums") {
            return;
        }
        let shapes = SHAPES.iter().copied().chain([(5, 22, 7), (11, 258, 70), (3, 262, 20)]);
        for (rows, k, cols) in shapes {
            // Magnitudes up to 127 on both sides, so that pairs of products
            // reach 2 · 127 · 127 (the most `vpmaddubsw` may add).
            let mut x = values(rows * k, 3 + k as u64, 1.5);
            let mut w = values(cols * k, 5 + cols as u64, 0.4);
            x[..k.min(8)].iter_mut().for_each(|v| *v = -1.5);
            w[..k.min(8)].iter_mut().for_each(|v| *v = -0.4);
            let g = groups(rows, cols);
            let want: Vec<u32> = scalar_fma(&x, rows, k, &w, cols, &g).iter().map(|v| v.to_bits()).collect();
            for isa in [Isa::Avx2, Isa::Vnni] {
                if !cpu::run_test_on(isa, &format!("int8::any::tests::the_tiles_match_the_scalar_sums [{isa}]")) {
                    continue;
                }
                let got: Vec<u32> = run(isa, &x, rows, k, &w, cols, &g).iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{isa}: [{rows}, {k}] · [{k}, {cols}]");
            }
        }
    }

    /// The portable path (no FMA) and the AVX2 build agree to the
    /// epilogue's rounding: the integer sums are the same on every path.
    #[test]
    fn paths_share_the_integer_sums() {
        for (rows, k, cols) in SHAPES {
            let x = values(rows * k, 13 + k as u64, 1.0);
            let w = values(cols * k, 17 + cols as u64, 0.5);
            let g = groups(rows, cols);
            let portable = run(Isa::Portable, &x, rows, k, &w, cols, &g);
            let best = run(cpu::active(), &x, rows, k, &w, cols, &g);
            for (p, b) in portable.iter().zip(&best) {
                assert!(p.is_nan() && b.is_nan() || (p - b).abs() <= 1e-5 * (1.0 + p.abs()), "{p} against {b}");
            }
        }
    }

    /// The AVX-512 and AVX2 quantisers and the scalar one: the same
    /// bytes, scales and FP32 entries.
    #[test]
    fn the_vector_quantisers_quantise_as_the_scalar_loop() {
        for isa in [Isa::Avx2, Isa::Avx512] {
            if !cpu::run_test_on(isa, &format!("int8::any::tests::the_vector_quantisers_quantise_as_the_scalar_loop [{isa}]")) {
                continue;
            }
            quantises_as_the_scalar_loop(isa);
        }
    }

    fn quantises_as_the_scalar_loop(isa: Isa) {
        for (rows, k, _) in SHAPES.iter().copied().chain([(3, 22, 0), (4, 38, 0)]) {
            let mut x = values(rows * (k + 3), 23 + k as u64, 2.0);
            x[k / 2] = 0.5 / 127.0 * 3.0; // a value at a rounding tie's scale
            if rows > 2 {
                // A row of magnitudes so small that `127 / max` is infinite,
                // and a row with a NaN among its quantised entries.
                x[k + 3..2 * (k + 3)].iter_mut().for_each(|v| *v *= 1e-37);
                x[2 * (k + 3) + k / 3] = f32::NAN;
            }
            let rows_of = |isa: Isa| {
                cpu::with_cap(isa, || {
                    let mut q = Quantised::default();
                    q.rows(&x, k + 3, rows, k, 1);
                    let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
                    (q.quads.clone(), bits(&q.scales), bits(&q.tails))
                })
            };
            assert_eq!(rows_of(isa), rows_of(Isa::Portable), "{isa}: [{rows}, {k}]");
        }
    }

    /// A block of rows into a buffer of its own: the same numbers as the
    /// rows' product over every row, bit for bit.
    #[test]
    fn a_block_is_the_same_rows_product() {
        for isa in [Isa::Portable, Isa::Avx2, Isa::Vnni] {
            if !cpu::run_test_on(isa, &format!("int8::any::tests::a_block_is_the_same_rows_product [{isa}]")) {
                continue;
            }
            for (rows, k, cols) in SHAPES {
                let x = values(rows * k, 29 + k as u64, 1.0);
                let w = values(cols * k, 31 + cols as u64, 0.5);
                cpu::with_cap(isa, || {
                    let b = Packed::from_weight(&w, cols, k);
                    let mut q = Quantised::default();
                    q.rows(&x, k, rows, k, 1);
                    let mut all = vec![0f32; rows * cols];
                    product_rows(&q, &RowGroups::whole(rows), &b, &mut all, cols, 1);
                    let start = rows / 3;
                    let mut block = vec![0f32; (rows - start) * cols];
                    product_block(&q, start..rows, &b, &mut block, cols);
                    assert_eq!(block, all[start * cols..], "[{rows}, {k}] · [{k}, {cols}], {isa}");
                });
            }
        }
    }

    /// Rows placed on their own (`product_rows_at`), packed as the general
    /// step packs its messages, are the rows' product bit for bit, and
    /// nothing outside them is written; on every path the CPU runs.
    #[test]
    fn rows_placed_on_their_own_are_the_rows_product() {
        for isa in [Isa::Portable, Isa::Avx2, Isa::Vnni] {
            if !cpu::run_test_on(isa, &format!("int8::any::tests::rows_placed_on_their_own_are_the_rows_product [{isa}]")) {
                continue;
            }
            let (rows, h) = (301, 66);
            let cols = 6 * h;
            let x = values(rows * h, 37, 1.0);
            let w = values(cols * h, 41, 0.5);
            let first: Vec<usize> = (0..rows).map(|r| (r * 7919 % 7) * h).collect();
            let (row0, end) = crate::gemm::packed_rows(&first, cols);
            let groups = RowGroups::by_first_column(&first);
            let (full, packed) = cpu::with_cap(isa, || {
                let b = Packed::from_weight(&w, cols, h);
                let mut q = Quantised::default();
                q.rows(&x, h, rows, h, 1);
                let mut full = vec![f32::NAN; rows * cols];
                product_rows(&q, &groups, &b, &mut full, cols, 2);
                let mut packed = vec![f32::NAN; end];
                // SAFETY: the rows are packed one after another.
                unsafe { product_rows_at(&q, &groups, &b, &mut packed, &row0, 2) };
                (full, packed)
            });
            let mut written = 0;
            for r in 0..rows {
                let start = crate::gemm::written_from(first[r], cols);
                for c in start..cols {
                    assert_eq!(packed[row0[r] + c].to_bits(), full[r * cols + c].to_bits(), "{isa}: [{r}, {c}]");
                }
                written += cols - start;
            }
            assert_eq!(packed.iter().filter(|v| !v.is_nan()).count(), written, "{isa}: written outside the rows");
        }
    }

    #[test]
    fn the_split_leaves_two_entries_at_least() {
        assert_eq!(split(66), (64, 2));
        assert_eq!(split(34), (32, 2));
        assert_eq!(split(40), (36, 4));
        assert_eq!(split(3), (0, 3));
        assert_eq!(split(1), (0, 1));
    }
}
