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
//!
//! Where the CPU has AVX-VNNI, the same loops take the quads whole: 256-bit
//! `vpdpbusd` multiplies four unsigned state bytes by four signed weight
//! bytes and adds the four products to a 32-bit lane, exactly (no
//! saturation), as AVX-512 VNNI's does on 512 bits: 32 products an
//! instruction against `vpmaddwd`'s 16 and its add. One macro writes both
//! builds, so they differ only in the operands and the product.

use std::arch::x86_64::*;

use super::portable::{GruSums, P};
use super::{Gru, Nodes, Packed, GATES, QUADS};

/// Columns per block of [`gru_sums`] (102 = 17 × 6).
const BLOCK: usize = 6;
/// Rows per tile of [`message_rows`].
const ROWS: usize = 4;
/// FP32 or 32-bit lanes of a vector.
const LANES: usize = 8;

/// A quad's bytes as two vectors of 16-bit pairs: bytes 0 and 2, bytes 1
/// and 3.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn split(quads: __m256i) -> [__m256i; 2] {
    [_mm256_and_si256(quads, _mm256_set1_epi32(0x00ff_00ff)), _mm256_srli_epi16::<8>(quads)]
}

/// Writes one build of [`gru_sums`] and [`message_rows`]: `$n` operands a
/// quad (vectors from a node-major vector of quads, `split`; 32-bit
/// scalars from one quad, `scalar`), the weights' operands in the
/// [`super::Columns`] and [`super::Packed`] field `$field` (`$n` a quad),
/// and `product` adding one operand's products into a sum.
macro_rules! integer_sums {
    (
        gru: $gru:ident, messages: $messages:ident, features: $features:literal, per_quad: $n:expr, field: $field:ident,
        split: |$qv:ident| $split:expr, scalar: |$d:ident| $scalar:expr, product: |$acc:ident, $a:ident, $w:ident| $product:expr $(,)?
    ) => {
        /// The sums of [`super::portable::gru_tile`]'s [`P`] nodes from `n0`.
        ///
        /// # Safety
        /// The CPU has the build's features; `n0 + P` is within the
        /// inputs' stride.
        #[inline]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $gru(inputs: [&Nodes<'_>; 2], w: &Gru, n0: usize, sums: &mut GruSums) {
            const K: usize = $n * QUADS;
            const _: () = assert!(P == LANES && GATES.is_multiple_of(BLOCK));
            for (s, x) in inputs.iter().enumerate() {
                let c = &w.sides[s];
                let mut a = [_mm256_setzero_si256(); K];
                for q in 0..QUADS {
                    let $qv = _mm256_loadu_si256(x.quads.as_ptr().add(q * x.stride + n0) as *const __m256i);
                    let parts: [__m256i; $n] = $split;
                    a[q * $n..][..$n].copy_from_slice(&parts);
                }
                let weights = c.$field.as_ptr();
                for col0 in (0..GATES).step_by(BLOCK) {
                    let mut acc: [__m256i; BLOCK] = std::array::from_fn(|i| _mm256_set1_epi32(-*c.offset.get_unchecked(col0 + i)));
                    for (p, &$a) in a.iter().enumerate() {
                        for (i, sum) in acc.iter_mut().enumerate() {
                            let $w = _mm256_set1_epi32(*weights.add((col0 + i) * K + p) as i32);
                            let $acc = *sum;
                            *sum = $product;
                        }
                    }
                    for (i, acc) in acc.iter().enumerate() {
                        _mm256_storeu_si256(sums[s][col0 + i].as_mut_ptr() as *mut __m256i, *acc);
                    }
                }
            }
        }

        /// [`super::messages`]' rows: row `i` (node and output at `at(i)`)
        /// from column `first` (a multiple of 16) on, tiles of 4 rows by 16
        /// columns, each output `sum · (scale_w · scale_x)` and then the two
        /// FP32 entries' products (FMAs), as the VNNI tile computes it.
        ///
        /// # Safety
        /// The CPU has the build's features; every row's output holds
        /// `b.cols` values from `first` on.
        #[inline]
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $messages(x: &Nodes<'_>, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
            const K: usize = $n * QUADS;
            debug_assert!(first.is_multiple_of(2 * LANES) && b.stride.is_multiple_of(2 * LANES));
            let mut r0 = 0;
            while r0 < rows {
                let tile = (rows - r0).min(ROWS);
                // Rows past the tile's repeat its first (computed, not stored).
                let rows_at: [(usize, *mut f32); ROWS] = std::array::from_fn(|t| at(r0 + if t < tile { t } else { 0 }));
                let mut ap = [[0i32; K]; ROWS];
                for (t, (v, _)) in rows_at.iter().enumerate() {
                    for q in 0..QUADS {
                        let $d = *x.quads.get_unchecked(q * x.stride + v);
                        let parts: [i32; $n] = $scalar;
                        ap[t][q * $n..][..$n].copy_from_slice(&parts);
                    }
                }
                let mut c0 = first;
                while c0 < b.cols {
                    let load = |p: *const i32, v: usize| _mm256_loadu_si256(p.add(c0 + v * LANES) as *const __m256i);
                    let start: [__m256i; 2] = std::array::from_fn(|v| _mm256_sub_epi32(_mm256_setzero_si256(), load(b.offset.as_ptr(), v)));
                    let mut acc = [start; ROWS];
                    for p in 0..K {
                        let row = b.$field.as_ptr().add(p * b.stride) as *const i32;
                        let wv = [load(row, 0), load(row, 1)];
                        for (t, sums) in acc.iter_mut().enumerate() {
                            let $a = _mm256_set1_epi32(ap[t][p]);
                            for (sum, &$w) in sums.iter_mut().zip(&wv) {
                                let $acc = *sum;
                                *sum = $product;
                            }
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
    };
}

// AVX2: 16-bit pairs, `vpmaddwd` and an add.
integer_sums! {
    gru: gru_sums, messages: message_rows, features: "avx2,fma", per_quad: 2, field: pairs,
    split: |quads| split(quads),
    scalar: |d| [(d & 0x00ff_00ff) as i32, ((d >> 8) & 0x00ff_00ff) as i32],
    product: |acc, a, w| _mm256_add_epi32(acc, _mm256_madd_epi16(a, w)),
}

// AVX-VNNI: whole quads, unsigned state bytes by signed weight bytes.
integer_sums! {
    gru: gru_sums_vnni, messages: message_rows_vnni, features: "avx2,fma,avxvnni", per_quad: 1, field: quads,
    split: |quads| [quads],
    scalar: |d| [d as i32],
    product: |acc, a, w| _mm256_dpbusd_avx_epi32(acc, a, w),
}
