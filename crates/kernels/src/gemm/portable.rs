//! The FP32 products below AVX-512: a register tile of 6 rows by 16
//! columns over the packed right-hand side (`[k][stride]`, stride a
//! multiple of 16, zero-padded), in AVX2+FMA intrinsics (12 accumulators
//! of 8 lanes, two loads of `B` and a broadcast per `k`: the classic
//! 6 × 16 SGEMM micro-kernel), or in plain Rust on any target.
//!
//! The plain loop is the reference the AVX2 one is tested against, and
//! runs where the CPU lacks AVX2 (or `isa=portable` forces it). It adds
//! products without FMA (FMA as a library call is slower than both).

use super::{Packed, LANES};
use crate::cpu::Isa;

const TILE_ROWS: usize = 6;

/// The columns from vector `v_first` (of 16) on, of `rows` rows: row
/// `i`'s left-hand side (`b.k` values) and output at `at(i)`. Columns past
/// `b.cols` are not written.
///
/// # Safety
/// Every `at(i)` points to `b.k` readable floats and `b.cols` writable
/// ones that no other thread writes.
pub(crate) unsafe fn rows(isa: Isa, at: impl Fn(usize) -> (*const f32, *mut f32), rows: usize, b: &Packed, v_first: usize) {
    debug_assert!(!b.bf16);
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx2 {
        return avx2::rows(at, rows, b, v_first);
    }
    let _ = isa;
    plain_rows(at, rows, b, v_first)
}

unsafe fn plain_rows(at: impl Fn(usize) -> (*const f32, *mut f32), rows: usize, b: &Packed, v_first: usize) {
    let vectors = b.stride / LANES;
    for v in v_first..vectors {
        let live = b.cols.saturating_sub(v * LANES).min(LANES);
        let bp = b.data.as_ptr().add(v * LANES) as *const f32;
        let mut r = 0;
        while r < rows {
            let tile = (rows - r).min(TILE_ROWS);
            let mut acc = [[0f32; LANES]; TILE_ROWS];
            for kk in 0..b.k {
                let row = std::slice::from_raw_parts(bp.add(kk * b.stride), LANES);
                for (t, acc) in acc.iter_mut().enumerate().take(tile) {
                    let x = *at(r + t).0.add(kk);
                    for (a, w) in acc.iter_mut().zip(row) {
                        *a += x * w;
                    }
                }
            }
            for (t, acc) in acc.iter().enumerate().take(tile) {
                let out = at(r + t).1.add(v * LANES);
                std::ptr::copy_nonoverlapping(acc.as_ptr(), out, live);
            }
            r += tile;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::super::{Packed, LANES};
    use super::TILE_ROWS;

    /// Rows in blocks of [`BLOCK_ROWS`] (their left-hand sides stay in
    /// L1 while every column group passes over them; the packed weights,
    /// 43 KB at 306 columns, come from L2), each block in tiles of 6.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows(at: impl Fn(usize) -> (*const f32, *mut f32), rows: usize, b: &Packed, v_first: usize) {
        const BLOCK_ROWS: usize = 8 * TILE_ROWS;
        let vectors = b.stride / LANES;
        let mut block = 0;
        while block < rows {
            let end = (block + BLOCK_ROWS).min(rows);
            let mut ap = [[std::ptr::null::<f32>(); TILE_ROWS]; BLOCK_ROWS / TILE_ROWS];
            let mut op = [[std::ptr::null_mut::<f32>(); TILE_ROWS]; BLOCK_ROWS / TILE_ROWS];
            for r in block..end {
                let (a, o) = at(r);
                ap[(r - block) / TILE_ROWS][(r - block) % TILE_ROWS] = a;
                op[(r - block) / TILE_ROWS][(r - block) % TILE_ROWS] = o;
            }
            for v in v_first..vectors {
                let live = b.cols.saturating_sub(v * LANES).min(LANES);
                let bp = b.data.as_ptr().add(v * LANES) as *const f32;
                let mut r = block;
                while r < end {
                    let tile = (end - r).min(TILE_ROWS);
                    let t = (r - block) / TILE_ROWS;
                    let out: [*mut f32; TILE_ROWS] =
                        std::array::from_fn(|i| if i < tile { op[t][i].add(v * LANES) } else { std::ptr::null_mut() });
                    match tile {
                        6 => tile_rows::<6>(&ap[t], bp, b.stride, b.k, &out, live),
                        5 => tile_rows::<5>(&ap[t], bp, b.stride, b.k, &out, live),
                        4 => tile_rows::<4>(&ap[t], bp, b.stride, b.k, &out, live),
                        3 => tile_rows::<3>(&ap[t], bp, b.stride, b.k, &out, live),
                        2 => tile_rows::<2>(&ap[t], bp, b.stride, b.k, &out, live),
                        _ => tile_rows::<1>(&ap[t], bp, b.stride, b.k, &out, live),
                    }
                    r += tile;
                }
            }
            block = end;
        }
    }

    /// `R` rows by 16 columns, over `depth` values of k.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile_rows<const R: usize>(
        a: &[*const f32; TILE_ROWS],
        b: *const f32,
        ldb: usize,
        depth: usize,
        out: &[*mut f32; TILE_ROWS],
        live: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for kk in 0..depth {
            let row = b.add(kk * ldb);
            let (b0, b1) = (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)));
            for r in 0..R {
                let x = _mm256_broadcast_ss(&*a[r].add(kk));
                acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
            }
        }
        for r in 0..R {
            if live == LANES {
                _mm256_storeu_ps(out[r], acc[r][0]);
                _mm256_storeu_ps(out[r].add(8), acc[r][1]);
            } else {
                let mut tmp = [0f32; LANES];
                _mm256_storeu_ps(tmp.as_mut_ptr(), acc[r][0]);
                _mm256_storeu_ps(tmp.as_mut_ptr().add(8), acc[r][1]);
                std::ptr::copy_nonoverlapping(tmp.as_ptr(), out[r], live);
            }
        }
    }
}
