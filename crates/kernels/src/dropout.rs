//! The state dropout mask of training: a counter hash of `(seed, pair)`,
//! so the mask depends on the seed alone, not on the threads.

use crate::cpu::{self, Isa};
use crate::threads::{par_ranges, Rows};
use crate::H;

/// Fills `out` (any even length: states of any width) with a dropout
/// mask: each entry `scale` with probability `keep`, else 0. Entries come
/// in pairs from one 64-bit hash of `(seed, pair index)` (32 bits each, of
/// which the top 24 are compared), so the mask depends on the seed alone,
/// not on the threads or the state's width. Threads take runs of 17 pairs,
/// a 34-wide row's. ATen's CPU `bernoulli_` draws one Mersenne Twister
/// number per entry on one thread on AMD CPUs (MKL's generator only on
/// Intel ones): a tenth of a training step with dropout.
pub fn dropout_mask(out: &mut [f32], seed: u64, keep: f32, scale: f32, threads: usize) {
    assert!(out.len().is_multiple_of(2) && H.is_multiple_of(2), "entries come in pairs");
    let pairs = out.len() / 2;
    let run = H / 2;
    // Kept below: the top 24 bits of a 32-bit draw under `keep · 2^24`.
    let bound = (keep as f64 * (1u64 << 24) as f64).round() as u32;
    let all = Rows::new(out);
    par_ranges(pairs.div_ceil(run), threads, |r| {
        let (first, last) = (r.start * run, (r.end * run).min(pairs));
        // SAFETY: the runs are disjoint and within `out`.
        let rows = unsafe { all.get(2 * first, 2 * (last - first)) };
        #[cfg(target_arch = "x86_64")]
        if cpu::allows(Isa::Avx512) && cpu::has_flag("avx512dq") {
            // SAFETY: the CPU has AVX-512F and DQ.
            return unsafe { dropout_pairs_avx512(rows, first as u64, seed, bound, scale) };
        }
        dropout_pairs(rows, first as u64, seed, bound, scale)
    });
}

/// The multiplier that spreads pair indices before [`programl::hash::mix`].
const PAIR_SPREAD: u64 = 0xD1B5_4A32_D192_ED03;

/// [`dropout_mask`]'s entries for the pairs of `rows`, the first being
/// pair `first_pair` of the mask.
pub(crate) fn dropout_pairs(rows: &mut [f32], first_pair: u64, seed: u64, bound: u32, scale: f32) {
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
///
/// # Safety
/// The CPU has AVX-512 F and DQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
pub(crate) unsafe fn dropout_pairs_avx512(rows: &mut [f32], first_pair: u64, seed: u64, bound: u32, scale: f32) {
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
