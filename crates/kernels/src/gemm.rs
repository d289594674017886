//! The inference step's products, hand-written for their one shape: a
//! short inner dimension (34) against a few hundred columns (306 and 102),
//! `out[N, C] = a[N, 34] · B[34, C]`, in FP32 or BF16 (FP32 accumulation).
//!
//! Where the CPU has AVX-512 (and, for BF16, its `vdpbf16ps` dot
//! products), these replace libtorch's products in the CPU inference step:
//! on an AMD Zen 4, MKL takes its AVX2 path and oneDNN prepares every new
//! shape (every module, in a compiler) before its first product, which at
//! the size of one translation unit costs more than the product. Elsewhere
//! the step keeps libtorch's products.
//!
//! The right-hand side is packed once per call ([`Packed`]): zero-padded to
//! whole vectors of 16 columns, and for BF16 as pairs of consecutive `k`
//! (the operand `vdpbf16ps` multiplies and sums). A tile of up to 6 rows by
//! 4 vectors (64 columns) lives in 24 registers over the 34 `k`; the
//! columns are the outer loop, so a tile's 34 x 64 weights stay in L1 while
//! the rows stream past them. Rows split over the threads as the other
//! loops' do. The BF16 left-hand side is rounded to nearest even, as
//! libtorch converts.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::cpu::{self, Isa};
use crate::elem::{Bf16, Elem};
use crate::threads::{par_ranges, Rows};

mod portable;

pub const LANES: usize = 16;
/// Rows and vectors of one register tile.
const TILE_ROWS: usize = 6;
const TILE_VECS: usize = 4;

/// A right-hand side `B[k, cols]`, packed.
pub struct Packed {
    pub(crate) k: usize,
    pub(crate) cols: usize,
    /// Row stride in elements: `cols` rounded up to whole vectors.
    pub(crate) stride: usize,
    pub(crate) bf16: bool,
    /// FP32: `[k][stride]`; BF16: `[k / 2][stride]` pairs, the lower half
    /// `B[2i, c]` and the upper `B[2i + 1, c]`.
    pub(crate) data: Vec<u32>,
}

/// Whether the AVX-512 products run on this thread for this precision
/// (FP32 products run everywhere: AVX2+FMA or portable below AVX-512;
/// BF16 ones need AVX512-BF16).
pub fn available(bf16: bool) -> bool {
    cpu::allows(Isa::Avx512) && (!bf16 || cpu::bf16())
}

impl Packed {
    /// Packs `w`, a weight `[cols, k]` as a linear layer holds it (`out =
    /// x · wᵀ`), as the right-hand side `wᵀ`.
    pub fn from_weight(w: &[f32], cols: usize, k: usize, bf16: bool) -> Packed {
        assert_eq!(w.len(), cols * k, "a [{cols}, {k}] weight");
        assert!(!bf16 || k.is_multiple_of(2), "BF16 pairs need an even inner dimension");
        let stride = cols.div_ceil(LANES) * LANES;
        let data = if bf16 {
            let mut d = vec![0u32; k / 2 * stride];
            for i in 0..k / 2 {
                for c in 0..cols {
                    let lo = Bf16::from_f32(w[c * k + 2 * i]).0 as u32;
                    let hi = Bf16::from_f32(w[c * k + 2 * i + 1]).0 as u32;
                    d[i * stride + c] = lo | hi << 16;
                }
            }
            d
        } else {
            let mut d = vec![0u32; k * stride];
            for kk in 0..k {
                for c in 0..cols {
                    d[kk * stride + c] = w[c * k + kk].to_bits();
                }
            }
            d
        };
        Packed { k, cols, stride, bf16, data }
    }

    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// `out[r, ..cols] = a[r, ..k] · B` for `rows` rows: `a` with row stride
/// `lda` (FP32, rounded to BF16 here when `b` is BF16), `out` with row
/// stride `ldo`, FP32 or (BF16 products only) BF16 rounded to nearest
/// even. Needs [`available`]`(b.bf16)`.
pub fn product<O: Elem>(a: &[f32], lda: usize, rows: usize, b: &Packed, out: &mut [O], ldo: usize, threads: usize) {
    product_rows(a, lda, &RowGroups::whole(rows), b, out, ldo, threads)
}

/// The rows of a product in groups, each group needing only the columns
/// from its own start on: every row `0..len` once, listed by index (row `i`
/// of the left-hand side and of the output), a group's rows consecutive.
///
/// The inference step's product `h · [W_msg; W_hh]ᵀ` needs, for a node,
/// the blocks of the edge types it is a source of and the GRU's three:
/// with the blocks ordered so that those needs are suffixes, a node that
/// sends no call edges skips the call blocks, a constant everything but
/// its data block (about a quarter of the product on real graphs).
pub struct RowGroups {
    /// `rows[bounds[g]..bounds[g + 1]]` are group `g`'s rows.
    rows: Vec<u32>,
    bounds: Vec<usize>,
    /// Group `g`'s first column.
    first: Vec<usize>,
    /// Every row in order, needing every column (no index list).
    whole: bool,
}

impl RowGroups {
    /// `rows` rows, every column.
    pub fn whole(rows: usize) -> RowGroups {
        RowGroups { rows: Vec::new(), bounds: vec![0, rows], first: vec![0], whole: true }
    }

    /// Row `i` needs the columns from `first[i]` on: one group per
    /// distinct start, in increasing order, rows ascending within each.
    pub fn by_first_column(first: &[usize]) -> RowGroups {
        let mut starts: Vec<usize> = first.to_vec();
        starts.sort_unstable();
        starts.dedup();
        let mut bounds = vec![0usize; starts.len() + 1];
        for f in first {
            bounds[starts.partition_point(|s| s < f) + 1] += 1;
        }
        for g in 1..bounds.len() {
            bounds[g] += bounds[g - 1];
        }
        let mut fill = bounds.clone();
        let mut rows = vec![0u32; first.len()];
        for (i, f) in first.iter().enumerate() {
            let g = starts.partition_point(|s| s < f);
            rows[fill[g]] = u32::try_from(i).expect("rows fit 32 bits");
            fill[g] += 1;
        }
        RowGroups { rows, bounds, first: starts, whole: false }
    }

    pub fn len(&self) -> usize {
        *self.bounds.last().unwrap_or(&0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The share of every group that a range of `0..len()` (a thread's)
    /// takes: the same fraction of each group, as each group's first
    /// column and its positions `start..end` (rows by [`RowGroups::row`]).
    pub fn shares(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + '_ {
        let total = self.len().max(1);
        (0..self.first.len()).map(move |g| {
            let (lo, hi) = (self.bounds[g], self.bounds[g + 1]);
            let share = |x: usize| lo + (hi - lo) * x / total;
            (self.first[g], share(range.start)..share(range.end))
        })
    }

    /// Each group's first column and its rows.
    pub fn groups(&self) -> Vec<(usize, Vec<u32>)> {
        (0..self.first.len()).map(|g| (self.first[g], self.rows[self.bounds[g]..self.bounds[g + 1]].to_vec())).collect()
    }

    pub fn row(&self, i: usize) -> usize {
        if self.whole {
            i
        } else {
            self.rows[i] as usize
        }
    }
}

/// [`product`] for the rows of `groups`, each from its group's first
/// column (rounded down to a whole vector of 16: a few columns before it
/// may be written too; a group at or past the last column computes
/// nothing); the other columns of `out` are left as they are.
/// Every group is split evenly over the threads, so that each thread gets
/// the same mix of long and short rows.
pub fn product_rows<O: Elem>(a: &[f32], lda: usize, groups: &RowGroups, b: &Packed, out: &mut [O], ldo: usize, threads: usize) {
    check_strided(groups.len(), out.len(), ldo, b.cols);
    product_rows_by(a, lda, groups, b, out, |r| r * ldo, threads)
}

/// That `rows` rows of `cols` columns, `ldo` apart, fit in `len`
/// (`product_rows` here and in `int8::any`).
pub(crate) fn check_strided(rows: usize, len: usize, ldo: usize, cols: usize) {
    assert!(rows == 0 || (len >= (rows - 1) * ldo + cols && ldo >= cols), "output too short");
}

/// That each of the first `rows` rows placed at `row0` holds `cols`
/// columns within `len` (`product_rows_at` here and in `int8::any`).
pub(crate) fn check_placed(rows: usize, row0: &[usize], len: usize, cols: usize) {
    let fits = |&r: &usize| r.checked_add(cols).is_some_and(|end| end <= len);
    assert!(row0.len() >= rows && row0[..rows].iter().all(fits), "output too short");
}

/// [`product_rows`] with each row's output placed on its own: row `r`'s
/// column `c` at `out[row0[r] + c]`. A row whose group starts at column
/// `f` writes only from `f` rounded down to 16, so rows may be packed
/// shorter than the right-hand side (the general step's messages: each
/// node only the blocks it needs, `row0[r]` that much before its place).
///
/// # Safety
/// The rows' written ranges, `row0[r] + ⌊first / 16⌋ · 16 .. row0[r] +
/// cols` for each row of `groups`, do not overlap (threads write them at
/// once); that each is inside `out` is checked.
pub unsafe fn product_rows_at(a: &[f32], lda: usize, groups: &RowGroups, b: &Packed, out: &mut [f32], row0: &[usize], threads: usize) {
    check_placed(groups.len(), row0, out.len(), b.cols);
    product_rows_by(a, lda, groups, b, out, |r| row0[r], threads)
}

/// The column a row needing the columns from `first` on is written from
/// ([`product_rows`]): `first` rounded down to a vector of 16, or `cols`
/// (nothing) when it needs none.
pub fn written_from(first: usize, cols: usize) -> usize {
    if first >= cols {
        cols
    } else {
        first / LANES * LANES
    }
}

/// Rows packed one after another for [`product_rows_at`], each only as
/// long as it is written ([`written_from`]): each row's `row0` (where its
/// column 0 would sit) and the buffer's length. A leading pad of `cols`
/// keeps every `row0` inside the buffer.
pub fn packed_rows(first: &[usize], cols: usize) -> (Vec<usize>, usize) {
    let mut end = cols;
    let row0 = first
        .iter()
        .map(|&f| {
            let start = written_from(f, cols);
            let row0 = end - start;
            end += cols - start;
            row0
        })
        .collect();
    (row0, end)
}

/// [`product_rows`], row `r`'s column 0 at `out[col0(r)]` (checked by the
/// callers to hold the row's columns).
fn product_rows_by<O: Elem>(
    a: &[f32],
    lda: usize,
    groups: &RowGroups,
    b: &Packed,
    out: &mut [O],
    col0: impl Fn(usize) -> usize + Sync,
    threads: usize,
) {
    assert!(!b.bf16 || available(true), "BF16 products need AVX512-BF16");
    let narrow = std::mem::size_of::<O>() == 2;
    assert!(!narrow || b.bf16, "BF16 results come from BF16 products only");
    // The groups hold every row below their length once.
    let extent = groups.len();
    assert!(extent == 0 || (a.len() >= (extent - 1) * lda + b.k && lda >= b.k), "left-hand side too short");
    if !available(false) {
        // FP32 below AVX-512: AVX2+FMA or portable (no BF16 results).
        assert!(!narrow, "BF16 results need AVX512-BF16");
        let isa = cpu::active();
        let shared = Rows::new(out);
        par_ranges(groups.len(), threads, |range| {
            // A group past the last column computes nothing.
            for (first, share) in groups.shares(range).filter(|(first, _)| *first < b.cols) {
                let at = |i: usize| {
                    let r = groups.row(share.start + i);
                    // SAFETY: each range writes its own rows (as below).
                    unsafe { (a.as_ptr().add(r * lda), (shared.ptr() as *mut f32).add(col0(r))) }
                };
                // SAFETY: rows below `extent`, checked against both buffers.
                unsafe { portable::rows(isa, at, share.end - share.start, b, first / LANES) };
            }
        });
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let half = b.k / 2;
        // BF16: the left-hand side as pairs of k, once for all column groups.
        let pairs: Vec<u32> = if b.bf16 {
            let mut p = vec![0u32; extent * half];
            // SAFETY: the CPU has AVX512-BF16 (checked above); the rows are
            // in bounds (checked above).
            unsafe { to_pairs(a, lda, extent, b.k, &mut p) };
            p
        } else {
            Vec::new()
        };
        let shared = Rows::new(out);
        par_ranges(groups.len(), threads, |range| {
            for (first, share) in groups.shares(range).filter(|(first, _)| *first < b.cols) {
                let (start, end) = (share.start, share.end);
                let v0 = first / LANES;
                let out = shared.ptr();
                // SAFETY: each range writes its own rows of `out` (the
                // shares of disjoint ranges are disjoint); the CPU
                // features were checked above (AVX512-BW and VL come with
                // AVX512-BF16 on every CPU that has it); every row is
                // below `extent`, checked against both buffers above.
                unsafe {
                    if narrow {
                        let at = |i: usize| {
                            let r = groups.row(start + i);
                            (pairs.as_ptr().add(r * half), (out as *mut u16).add(col0(r)))
                        };
                        rows_bf16_out(at, end - start, b, v0);
                    } else if b.bf16 {
                        let at = |i: usize| {
                            let r = groups.row(start + i);
                            (pairs.as_ptr().add(r * half), (out as *mut f32).add(col0(r)))
                        };
                        rows_bf16(at, end - start, b, v0);
                    } else {
                        let at = |i: usize| {
                            let r = groups.row(start + i);
                            (a.as_ptr().add(r * lda) as *const u32, (out as *mut f32).add(col0(r)))
                        };
                        rows_f32(at, end - start, b, v0);
                    }
                }
            }
        });
    }
}

/// `a`'s rows (`k` values each, `k` even) rounded to BF16 as pairs, 16
/// pairs per instruction (`vcvtne2ps2bf16`: nearest even, as
/// [`Bf16::from_f32`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn to_pairs(a: &[f32], lda: usize, rows: usize, k: usize, out: &mut [u32]) {
    let half = k / 2;
    for r in 0..rows {
        let (src, dst) = (a.as_ptr().add(r * lda), out.as_mut_ptr().add(r * half));
        let mut i = 0;
        while i < half {
            let n = (half - i).min(16);
            let mask = if n == 16 { u32::MAX } else { (1u32 << (2 * n)) - 1 };
            let lo = _mm512_maskz_loadu_ps(mask as u16, src.add(2 * i));
            let hi = _mm512_maskz_loadu_ps((mask >> 16) as u16, src.add(2 * i + 16));
            let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_mask_storeu_epi32(dst.add(i) as *mut i32, if n == 16 { u16::MAX } else { (1u16 << n) - 1 }, packed);
            i += n;
        }
    }
}

/// `src` rounded to BF16 (nearest even) into `dst`, 32 values per
/// instruction, split over the intra-op threads (`threads`). Needs
/// [`available`]`(true)`.
pub fn to_bf16(src: &[f32], dst: &mut [Bf16], threads: usize) {
    assert!(available(true) && src.len() == dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        const ROW: usize = 1024;
        let out = Rows::new(dst);
        par_ranges(src.len().div_ceil(ROW), threads, |range| {
            let (start, end) = (range.start * ROW, (range.end * ROW).min(src.len()));
            // SAFETY: the CPU has AVX512-BF16 (asserted); each range
            // writes its own part of `dst`.
            unsafe { to_bf16_avx512(&src[start..end], out.get(start, end - start)) }
        });
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn to_bf16_avx512(src: &[f32], dst: &mut [Bf16]) {
    let mut i = 0;
    while i < src.len() {
        let n = (src.len() - i).min(32);
        let mask = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
        let lo = _mm512_maskz_loadu_ps(mask as u16, src.as_ptr().add(i));
        let hi = _mm512_maskz_loadu_ps((mask >> 16) as u16, src.as_ptr().add(i + 16));
        let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_mask_storeu_epi16(dst.as_mut_ptr().add(i) as *mut i16, mask, packed);
        i += n;
    }
}

/// Calls `$tile::<R, V>` for the `(R, V)` that `$key` holds.
#[cfg(target_arch = "x86_64")]
macro_rules! dispatch {
    ($tile:ident, $key:expr, $args:tt) => {
        dispatch!(@arms $tile, $key, $args, 1 2 3 4 5 6)
    };
    (@arms $tile:ident, $key:expr, $args:tt, $($r:literal)*) => {
        match $key {
            $(
                ($r, 4) => $tile::<$r, 4> $args,
                ($r, 3) => $tile::<$r, 3> $args,
                ($r, 2) => $tile::<$r, 2> $args,
                ($r, 1) => $tile::<$r, 1> $args,
            )*
            _ => unreachable!(),
        }
    };
}

/// Defines the loops of one precision: `$rows` (all column groups of some
/// rows) and `$tile` (one register tile), compiled for `$features`.
#[cfg(target_arch = "x86_64")]
macro_rules! precision {
    ($rows:ident, $tile:ident, $features:literal, $bf16:tt, $out:tt) => {
        /// The column groups from vector `v_first` on of `rows` rows,
        /// row `i`'s left-hand side and output at `at(i)`.
        #[target_feature(enable = $features)]
        unsafe fn $rows(at: impl Fn(usize) -> (*const u32, *mut $out), rows: usize, b: &Packed, v_first: usize) {
            let depth = if $bf16 { b.k / 2 } else { b.k };
            let vectors = b.stride / LANES;
            let mut v0 = v_first;
            while v0 < vectors {
                let vecs = (vectors - v0).min(TILE_VECS);
                let mut masks = [0u16; TILE_VECS];
                for (v, m) in masks.iter_mut().enumerate().take(vecs) {
                    let live = b.cols.saturating_sub((v0 + v) * LANES).min(LANES);
                    *m = if live == LANES { u16::MAX } else { (1u16 << live) - 1 };
                }
                let bp = b.data.as_ptr().add(v0 * LANES);
                let mut r = 0;
                while r < rows {
                    let tile = (rows - r).min(TILE_ROWS);
                    let mut ap = [std::ptr::null::<u32>(); TILE_ROWS];
                    let mut op = [std::ptr::null_mut::<$out>(); TILE_ROWS];
                    for t in 0..tile {
                        let (a, o) = at(r + t);
                        ap[t] = a;
                        op[t] = o.add(v0 * LANES);
                    }
                    dispatch!($tile, (tile, vecs), (&ap, bp, b.stride, depth, &op, &masks));
                    r += tile;
                }
                v0 += vecs;
            }
        }

        /// One register tile: `R` rows (their left-hand sides and outputs
        /// at `a` and `out`) by `V` vectors, over `depth` steps of k (BF16:
        /// pairs of k).
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $tile<const R: usize, const V: usize>(
            a: &[*const u32; TILE_ROWS],
            b: *const u32,
            ldb: usize,
            depth: usize,
            out: &[*mut $out; TILE_ROWS],
            masks: &[u16; TILE_VECS],
        ) {
            let a: [*const u32; R] = std::array::from_fn(|r| a[r]);
            let mut acc = [[_mm512_setzero_ps(); V]; R];
            for kk in 0..depth {
                let row = b.add(kk * ldb);
                let bv: [__m512i; V] = std::array::from_fn(|v| _mm512_loadu_si512(row.add(v * LANES) as *const _));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = *a[r].add(kk);
                    precision!(@step $bf16, x, bv, acc, V);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                for v in 0..V {
                    precision!(@store $out, out[r].add(v * LANES), masks[v], acc[v]);
                }
            }
        }
    };
    (@store f32, $p:expr, $mask:expr, $x:expr) => {
        _mm512_mask_storeu_ps($p, $mask, $x)
    };
    // BF16 results: rounded to nearest even as they are stored.
    (@store u16, $p:expr, $mask:expr, $x:expr) => {
        _mm256_mask_storeu_epi16($p as *mut i16, $mask, std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh($x)))
    };
    (@step true, $x:ident, $bv:ident, $acc:ident, $V:ident) => {
        let x: __m512bh = std::mem::transmute(_mm512_set1_epi32($x as i32));
        for v in 0..$V {
            $acc[v] = _mm512_dpbf16_ps($acc[v], x, std::mem::transmute::<__m512i, __m512bh>($bv[v]));
        }
    };
    (@step false, $x:ident, $bv:ident, $acc:ident, $V:ident) => {
        let x = _mm512_set1_ps(f32::from_bits($x));
        for v in 0..$V {
            $acc[v] = _mm512_fmadd_ps(x, _mm512_castsi512_ps($bv[v]), $acc[v]);
        }
    };
}

#[cfg(target_arch = "x86_64")]
precision!(rows_f32, tile_f32, "avx512f", false, f32);
#[cfg(target_arch = "x86_64")]
precision!(rows_bf16, tile_bf16, "avx512f,avx512bf16", true, f32);
#[cfg(target_arch = "x86_64")]
precision!(rows_bf16_out, tile_bf16_out, "avx512f,avx512bf16,avx512bw,avx512vl", true, u16);

/// `acc[c, j] += Σ_r x[r, c] · y[r, j]` over `rows` rows, in FP32: a linear
/// layer's weight gradient `xᵀ · y` (`x` its output's gradient \[rows,
/// cols\], row stride `ldx`; `y` its input \[rows, k\], row stride `ldy`;
/// `acc` \[cols, k\] row-major, as the weight). The training step's two
/// weight gradients per step, which MKL computed on its AVX2 path. Each
/// range of rows sums into a partial of its own, and the partials are added
/// in range order: the same bits at a thread count. Needs
/// [`available`]`(false)`.
#[allow(clippy::too_many_arguments)]
pub fn outer_accumulate(x: &[f32], ldx: usize, y: &[f32], ldy: usize, rows: usize, cols: usize, k: usize, acc: &mut [f32], threads: usize) {
    assert!(available(false), "the hand-written products need AVX-512");
    assert!(rows == 0 || (ldx >= cols && x.len() >= (rows - 1) * ldx + cols), "gradient too short");
    assert!(rows == 0 || (ldy >= k && y.len() >= (rows - 1) * ldy + k), "input too short");
    assert_eq!(acc.len(), cols * k, "a [{cols}, {k}] accumulator");
    #[cfg(target_arch = "x86_64")]
    {
        let stride = cols.div_ceil(LANES) * LANES;
        // P[j, c] = Σ_r y[r, j] x[r, c]: lanes along the gradient's columns.
        let mut p = vec![0f32; k * stride];
        crate::threads::par_ranges_summing(rows, threads, &mut p, |range, part| {
            // SAFETY: the CPU has AVX-512 (asserted); the rows are in
            // bounds (asserted); `part` holds `k · stride` values.
            unsafe { outer_rows(x, ldx, y, ldy, cols, k, stride, range, part) }
        });
        for c in 0..cols {
            for j in 0..k {
                acc[c * k + j] += p[j * stride + c];
            }
        }
    }
}

/// [`outer_accumulate`]'s rows `range` into `part` (`P[j, c]`, row stride
/// `stride`), 128 rows at a time so that they stay in cache over the tiles.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn outer_rows(
    x: &[f32],
    ldx: usize,
    y: &[f32],
    ldy: usize,
    cols: usize,
    k: usize,
    stride: usize,
    range: std::ops::Range<usize>,
    part: &mut [f32],
) {
    const CHUNK: usize = 128;
    let vectors = stride / LANES;
    let mut r0 = range.start;
    while r0 < range.end {
        let r1 = (r0 + CHUNK).min(range.end);
        let mut v0 = 0;
        while v0 < vectors {
            let vecs = (vectors - v0).min(TILE_VECS);
            let mut masks = [0u16; TILE_VECS];
            for (v, m) in masks.iter_mut().enumerate().take(vecs) {
                let live = cols.saturating_sub((v0 + v) * LANES).min(LANES);
                *m = if live == LANES { u16::MAX } else { (1u16 << live) - 1 };
            }
            let mut j0 = 0;
            while j0 < k {
                let tile = (k - j0).min(TILE_ROWS);
                let xp = x.as_ptr().add(r0 * ldx + v0 * LANES);
                let yp = y.as_ptr().add(r0 * ldy + j0);
                let out = part.as_mut_ptr().add(j0 * stride + v0 * LANES);
                dispatch!(outer_tile, (tile, vecs), (xp, ldx, yp, ldy, r1 - r0, out, stride, &masks));
                j0 += tile;
            }
            v0 += vecs;
        }
        r0 = r1;
    }
}

/// One register tile of [`outer_rows`]: `R` values of `j` by `V` vectors
/// of columns, summed over `rows` rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn outer_tile<const R: usize, const V: usize>(
    x: *const f32,
    ldx: usize,
    y: *const f32,
    ldy: usize,
    rows: usize,
    out: *mut f32,
    stride: usize,
    masks: &[u16; TILE_VECS],
) {
    let mut acc: [[__m512; V]; R] = std::array::from_fn(|j| std::array::from_fn(|v| _mm512_loadu_ps(out.add(j * stride + v * LANES))));
    for r in 0..rows {
        let xr = x.add(r * ldx);
        let xv: [__m512; V] = std::array::from_fn(|v| _mm512_maskz_loadu_ps(masks[v], xr.add(v * LANES)));
        let yr = y.add(r * ldy);
        for (j, acc) in acc.iter_mut().enumerate() {
            let b = _mm512_set1_ps(*yr.add(j));
            for v in 0..V {
                acc[v] = _mm512_fmadd_ps(b, xv[v], acc[v]);
            }
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        for v in 0..V {
            _mm512_storeu_ps(out.add(j * stride + v * LANES), acc[v]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path this CPU runs, FP32 on each and BF16 where the CPU has
    /// AVX512-BF16 (a path the CPU lacks prints `SKIP:`).
    fn paths(test: &str) -> Vec<(Isa, bool)> {
        let mut all = Vec::new();
        for isa in Isa::ALL.into_iter().filter(|&i| i != Isa::Vnni) {
            if crate::cpu::run_test_on(isa, &format!("{test} [{isa}]")) {
                all.push((isa, false));
            }
        }
        if crate::cpu::run_test_on(Isa::Avx512, &format!("{test} [bf16]"))
            && crate::cpu::run_test_with("avx512_bf16", &format!("{test} [bf16]"))
        {
            all.push((Isa::Avx512, true));
        }
        all
    }

    /// This thread's cap for a scope.
    struct CapGuard(Isa);
    impl CapGuard {
        fn new(isa: Isa) -> CapGuard {
            CapGuard(crate::cpu::set_cap(isa))
        }
    }
    impl Drop for CapGuard {
        fn drop(&mut self) {
            crate::cpu::set_cap(self.0);
        }
    }

    /// The vector conversion is the scalar one, bit for bit, at lengths
    /// with every tail and split over threads.
    #[test]
    fn to_bf16_rounds_as_the_scalar_conversion() {
        let test = "gemm::to_bf16_rounds_as_the_scalar_conversion";
        if !crate::cpu::run_test_on(Isa::Avx512, test) || !crate::cpu::run_test_with("avx512_bf16", test) {
            return;
        }
        for len in [0, 1, 31, 32, 33, 5000, 70_001] {
            let src: Vec<f32> = (0..len).map(|i| ((i as f32) * 0.618_034).sin() * 3.0e3 / (1.0 + i as f32)).collect();
            let mut dst = vec![Bf16(0); len];
            to_bf16(&src, &mut dst, 3);
            for (i, (d, s)) in dst.iter().zip(&src).enumerate() {
                assert_eq!(d.0, Bf16::from_f32(*s).0, "{len} values: [{i}] = {s}");
            }
        }
    }

    /// Grouped rows: each row's columns from its group's start on (from
    /// the vector holding that start) are the plain product's, bit for bit,
    /// and the columns before that vector are not written; at 1 and 3
    /// threads, rows in any order across the groups.
    #[test]
    fn grouped_rows_compute_their_columns_and_leave_the_rest() {
        for (isa, bf16) in paths("gemm::grouped_rows_compute_their_columns_and_leave_the_rest") {
            crate::cpu::with_cap(isa, || grouped_rows_on_one_path(bf16));
        }
    }

    fn grouped_rows_on_one_path(bf16: bool) {
        {
            let (rows, cols, k) = (2311, 306, 34);
            let a: Vec<f32> = (0..rows * k).map(|i| ((i as f32) * 0.377).sin()).collect();
            let w: Vec<f32> = (0..cols * k).map(|i| ((i as f32) * 0.611).cos()).collect();
            let packed = Packed::from_weight(&w, cols, k, bf16);
            let mut full = vec![0f32; rows * cols];
            product(&a, k, rows, &packed, &mut full, cols, 1);
            // Starts at block boundaries of 34 (not whole vectors), and 0.
            let first: Vec<usize> = (0..rows).map(|r| (r * 7919 % 7) * 34).collect();
            let groups = RowGroups::by_first_column(&first);
            assert_eq!(groups.first, vec![0, 34, 68, 102, 136, 170, 204]);
            for threads in [1, 3] {
                let mut out = vec![f32::NAN; rows * cols];
                product_rows(&a, k, &groups, &packed, &mut out, cols, threads);
                for r in 0..rows {
                    let written = first[r] / LANES * LANES;
                    for c in 0..cols {
                        let got = out[r * cols + c];
                        if c < written {
                            assert!(got.is_nan(), "bf16 {bf16}, {threads} threads: row {r} column {c} before {written} written");
                        } else {
                            assert_eq!(got.to_bits(), full[r * cols + c].to_bits(), "bf16 {bf16}, {threads} threads: [{r}, {c}]");
                        }
                    }
                }
            }
        }
    }

    /// Rows placed on their own (`product_rows_at`), packed as the general
    /// step packs its messages: each row only from its group's first
    /// column rounded down to 16, one after another, a row that needs
    /// nothing (first column past the last) empty; each row's columns are
    /// the full product's, bit for bit, and nothing else is written (the
    /// leading pad and the gaps stay NaN). FP32 on every path the CPU runs.
    #[test]
    fn rows_placed_on_their_own_pack_as_the_general_step_does() {
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
            if !crate::cpu::run_test_on(isa, &format!("gemm::rows_placed_on_their_own_pack_as_the_general_step_does [{isa}]")) {
                continue;
            }
            crate::cpu::with_cap(isa, || {
                let (rows, h, k) = (517, 66, 66);
                let cols = 6 * h;
                let a: Vec<f32> = (0..rows * k).map(|i| ((i as f32) * 0.377).sin()).collect();
                let w: Vec<f32> = (0..cols * k).map(|i| ((i as f32) * 0.611).cos()).collect();
                let packed = Packed::from_weight(&w, cols, k, false);
                let mut full = vec![0f32; rows * cols];
                product(&a, k, rows, &packed, &mut full, cols, 1);
                let first: Vec<usize> = (0..rows).map(|r| (r * 7919 % 7) * h).collect();
                let (row0, end) = packed_rows(&first, cols);
                let groups = RowGroups::by_first_column(&first);
                for threads in [1, 3] {
                    let mut out = vec![f32::NAN; end];
                    // SAFETY: the rows are packed one after another.
                    unsafe { product_rows_at(&a, k, &groups, &packed, &mut out, &row0, threads) };
                    let mut written = 0;
                    for r in 0..rows {
                        let start = written_from(first[r], cols);
                        for c in start..cols {
                            assert_eq!(out[row0[r] + c].to_bits(), full[r * cols + c].to_bits(), "{isa}, {threads} threads: [{r}, {c}]");
                        }
                        written += cols - start;
                    }
                    assert_eq!(out.iter().filter(|x| !x.is_nan()).count(), written, "{isa}, {threads} threads: written outside the rows");
                }
            });
        }
    }

    /// The weight gradient `xᵀ · y` added to what the accumulator held,
    /// against a plain loop, at shapes with every tile remainder and padded
    /// strides; the same bits again at a thread count.
    #[test]
    fn outer_products_accumulate_as_a_plain_loop() {
        if !crate::cpu::run_test_on(Isa::Avx512, "gemm::outer_products_accumulate_as_a_plain_loop") {
            return;
        }
        for (rows, cols, k, threads) in [(1, 306, 34, 1), (129, 102, 34, 1), (5000, 306, 34, 3), (4099, 17, 5, 2), (0, 34, 34, 2)] {
            let (ldx, ldy) = (cols + 3, k + 1);
            let x: Vec<f32> = (0..rows * ldx).map(|i| ((i as f32) * 0.271).sin()).collect();
            let y: Vec<f32> = (0..rows * ldy).map(|i| ((i as f32) * 0.577).cos()).collect();
            let start: Vec<f32> = (0..cols * k).map(|i| i as f32 * 0.01).collect();
            let mut acc = start.clone();
            outer_accumulate(&x, ldx, &y, ldy, rows, cols, k, &mut acc, threads);
            for c in 0..cols {
                for j in 0..k {
                    let want = start[c * k + j] as f64 + (0..rows).map(|r| x[r * ldx + c] as f64 * y[r * ldy + j] as f64).sum::<f64>();
                    let got = acc[c * k + j] as f64;
                    assert!((got - want).abs() < 1e-3 * (1.0 + want.abs()), "rows {rows} cols {cols} k {k}: [{c}, {j}] {got} vs {want}");
                }
            }
            let mut again = start.clone();
            outer_accumulate(&x, ldx, &y, ldy, rows, cols, k, &mut again, threads);
            assert!(acc.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "not reproducible");
        }
    }

    /// The products against a plain triple loop (BF16: on the rounded
    /// operands), at every tile remainder and a column count that is not
    /// whole vectors, with padded strides, at 1 and 3 threads.
    #[test]
    fn products_match_a_plain_loop() {
        let mut seed = 0x1234_5678u64;
        let mut next = || crate::tests::random(&mut seed);
        for (isa, bf16) in paths("gemm::products_match_a_plain_loop") {
            let _cap = CapGuard::new(isa);
            let round = |x: f32| if bf16 { Bf16::from_f32(x).f32() } else { x };
            for (rows, cols, threads) in [(1, 306, 1), (7, 102, 1), (13, 34, 1), (4099, 306, 3), (6000, 17, 2)] {
                let k = 34;
                let (lda, ldo) = (k + 3, cols + 5);
                let a: Vec<f32> = (0..rows * lda).map(|_| next()).collect();
                let w: Vec<f32> = (0..cols * k).map(|_| next()).collect();
                let packed = Packed::from_weight(&w, cols, k, bf16);
                if bf16 {
                    // The vector rounding is the scalar one, bit for bit.
                    let mut pairs = vec![0u32; rows * k / 2];
                    unsafe { to_pairs(&a, lda, rows, k, &mut pairs) };
                    for (i, p) in pairs.iter().enumerate() {
                        let (r, j) = (i / (k / 2), i % (k / 2));
                        let want = Bf16::from_f32(a[r * lda + 2 * j]).0 as u32 | (Bf16::from_f32(a[r * lda + 2 * j + 1]).0 as u32) << 16;
                        assert_eq!(*p, want, "row {r} pair {j}");
                    }
                }
                let mut out = vec![f32::NAN; rows * ldo];
                product(&a, lda, rows, &packed, &mut out, ldo, threads);
                if bf16 {
                    // BF16 results: the FP32 ones rounded, bit for bit;
                    // nothing past the columns written.
                    let mut narrow = vec![Bf16(0xffff); rows * ldo];
                    product(&a, lda, rows, &packed, &mut narrow, ldo, threads);
                    for (i, (n, f)) in narrow.iter().zip(&out).enumerate() {
                        let want = if i % ldo < cols { Bf16::from_f32(*f).0 } else { 0xffff };
                        assert_eq!(n.0, want, "rows {rows} cols {cols}: BF16 result [{}, {}]", i / ldo, i % ldo);
                    }
                }
                for r in 0..rows {
                    for c in 0..ldo {
                        let got = out[r * ldo + c];
                        if c >= cols {
                            assert!(got.is_nan(), "column {c} past {cols} written");
                            continue;
                        }
                        let want: f64 = (0..k).map(|kk| round(a[r * lda + kk]) as f64 * round(w[c * k + kk]) as f64).sum();
                        assert!((got as f64 - want).abs() < 1e-4, "bf16 {bf16} rows {rows} cols {cols}: [{r}, {c}] {got} vs {want}");
                    }
                }
            }
        }
    }
}
