//! The INT8 step's integer sums in AVX2 (`vpmaddwd`): each 32-bit lane
//! multiplies two pairs of 16-bit values and adds them, exactly. The state
//! bytes (`q + 128`, unsigned) split into pairs of 16-bit values, bytes 0
//! and 2 of a quad in one vector and bytes 1 and 3 in the other, and the
//! weights are packed as the same pairs ([`super::Columns`]' and
//! [`super::Packed`]'s `pairs`); each sum starts at minus the weights'
//! offset, as VNNI's do. So the sums are the VNNI step's and the scalar
//! ones' ([`super::portable`]), bit for bit.
//!
//! (`vpmaddubsw`, bytes by bytes into 16-bit sums, saturates at unsigned
//! 255 by signed 127 and needs `vpsignb` around it: one instruction more
//! per 32 products than `vpmaddwd`'s two.)

use std::arch::x86_64::*;

use super::portable::{GruSums, P};
use super::{Gru, Nodes, Packed, GATES, QUADS};

/// Columns per block of [`gru_sums`] (102 = 17 × 6).
const BLOCK: usize = 6;
/// Rows per tile of [`message_rows`].
const ROWS: usize = 4;
/// FP32 or 32-bit lanes of a vector.
const LANES: usize = 8;
/// Pairs of 16-bit values per quantised state: two per quad.
pub(crate) const PAIRS: usize = 2 * QUADS;

/// A quad's bytes as two vectors of 16-bit pairs: bytes 0 and 2, bytes 1
/// and 3.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn split(quads: __m256i) -> [__m256i; 2] {
    [_mm256_and_si256(quads, _mm256_set1_epi32(0x00ff_00ff)), _mm256_srli_epi16::<8>(quads)]
}

/// The sums of [`super::portable::gru_tile`]'s [`P`] nodes from `n0`.
///
/// # Safety
/// The CPU has AVX2; `n0 + P` is within the inputs' stride.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gru_sums(inputs: [&Nodes<'_>; 2], w: &Gru, n0: usize, sums: &mut GruSums) {
    const _: () = assert!(P == LANES && GATES.is_multiple_of(BLOCK));
    for (s, x) in inputs.iter().enumerate() {
        let c = &w.sides[s];
        let mut a = [_mm256_setzero_si256(); PAIRS];
        for q in 0..QUADS {
            let [even, odd] = split(_mm256_loadu_si256(x.quads.as_ptr().add(q * x.stride + n0) as *const __m256i));
            a[2 * q] = even;
            a[2 * q + 1] = odd;
        }
        let pairs = c.pairs.as_ptr();
        for col0 in (0..GATES).step_by(BLOCK) {
            let mut acc: [__m256i; BLOCK] = std::array::from_fn(|i| _mm256_set1_epi32(-*c.offset.get_unchecked(col0 + i)));
            for (p, a) in a.iter().enumerate() {
                for (i, acc) in acc.iter_mut().enumerate() {
                    let wv = _mm256_set1_epi32(*pairs.add((col0 + i) * PAIRS + p) as i32);
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(*a, wv));
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                _mm256_storeu_si256(sums[s][col0 + i].as_mut_ptr() as *mut __m256i, *acc);
            }
        }
    }
}

/// [`super::messages`]' rows: row `i` (node and output at `at(i)`) from
/// column `first` (a multiple of 16) on, tiles of 4 rows by 16 columns,
/// each output `sum · (scale_w · scale_x)` and then the two FP32 entries'
/// products (FMAs), as the VNNI tile computes it.
///
/// # Safety
/// The CPU has AVX2 and FMA; every row's output holds `b.cols` values
/// from `first` on.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn message_rows(x: &Nodes<'_>, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
    debug_assert!(first.is_multiple_of(2 * LANES) && b.stride.is_multiple_of(2 * LANES));
    let mut r0 = 0;
    while r0 < rows {
        let tile = (rows - r0).min(ROWS);
        // Rows past the tile's repeat its first (computed, not stored).
        let rows_at: [(usize, *mut f32); ROWS] = std::array::from_fn(|t| at(r0 + if t < tile { t } else { 0 }));
        let mut ap = [[0i32; PAIRS]; ROWS];
        for (t, (v, _)) in rows_at.iter().enumerate() {
            for q in 0..QUADS {
                let d = *x.quads.get_unchecked(q * x.stride + v);
                ap[t][2 * q] = (d & 0x00ff_00ff) as i32;
                ap[t][2 * q + 1] = ((d >> 8) & 0x00ff_00ff) as i32;
            }
        }
        let mut c0 = first;
        while c0 < b.cols {
            let load = |p: *const i32, v: usize| _mm256_loadu_si256(p.add(c0 + v * LANES) as *const __m256i);
            let start: [__m256i; 2] = std::array::from_fn(|v| _mm256_sub_epi32(_mm256_setzero_si256(), load(b.offset.as_ptr(), v)));
            let mut acc = [start; ROWS];
            for p in 0..PAIRS {
                let row = b.pairs.as_ptr().add(p * b.stride) as *const i32;
                let wv = [load(row, 0), load(row, 1)];
                for (t, acc) in acc.iter_mut().enumerate() {
                    let a = _mm256_set1_epi32(ap[t][p]);
                    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(a, wv[0]));
                    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(a, wv[1]));
                }
            }
            for v in 0..2 {
                let c = c0 + v * LANES;
                let live = b.cols.saturating_sub(c).min(LANES);
                if live == 0 {
                    continue;
                }
                let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(live as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                let col_scale = _mm256_loadu_ps(b.scale.as_ptr().add(c));
                let tail = [_mm256_loadu_ps(b.tail.as_ptr().add(c)), _mm256_loadu_ps(b.tail.as_ptr().add(b.stride + c))];
                for (t, &(node, out)) in rows_at.iter().enumerate().take(tile) {
                    let scale = _mm256_mul_ps(col_scale, _mm256_set1_ps(*x.scales.get_unchecked(node)));
                    let mut y = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[t][v]), scale);
                    y = _mm256_fmadd_ps(_mm256_set1_ps(*x.tails[0].get_unchecked(node)), tail[0], y);
                    y = _mm256_fmadd_ps(_mm256_set1_ps(*x.tails[1].get_unchecked(node)), tail[1], y);
                    if live == LANES {
                        _mm256_storeu_ps(out.add(c), y);
                    } else {
                        _mm256_maskstore_ps(out.add(c), mask, y);
                    }
                }
            }
            c0 += 2 * LANES;
        }
        r0 += tile;
    }
}
