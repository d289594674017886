//! The GRU cell written out in AVX-512 (FP32 or BF16 products): 8 rows at a
//! time as 17 vectors (34 values row by row as two vectors of 16 and a
//! masked one of 2 wasted a third of the lanes), the exponential as [`exp`]'s
//! polynomial with `vscalefps` for the power of two, and the reciprocal as
//! `vrcp14ps` and one Newton step (relative error ~1e-8). The portable
//! loop, compiled for AVX2, spills its 40-wide rows to the stack.

use std::arch::x86_64::*;

use crate::backward::{EdgesBackward, GruBackward, GruGrads};
use crate::elem::Elem;
use crate::forward::{GruBias, GruTape, Product};
use crate::threads::Shared;
use crate::{FUSED, GATES, H};

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

/// `exp` (as the scalar [`crate::elem::exp`]: a clamp, a range reduction by
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
    let mut p = [_mm512_set1_ps(crate::elem::EXP_POLY[0]); M];
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
        r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(crate::elem::LN2_HI), x[i]);
    }
    for i in 0..M {
        r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(crate::elem::LN2_LO), r[i]);
    }
    for c in crate::elem::EXP_POLY[1..].iter().copied() {
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
    if !crate::cpu::run_test_on(crate::cpu::Isa::Avx512, "avx512::cells_are_the_cell_bit_for_bit") {
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
pub(crate) unsafe fn gru<T: Elem>(
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

/// [`crate::backward::gru_backward`]'s rows `range`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn gru_backward(
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

/// [`crate::backward::aggregate_backward`]'s rows `range`, with this thread's
/// share of the gate table's gradient in `table`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn edges_backward<T: Elem>(
    EdgesBackward { da, inv_degree, fused: (fused, fl), bias, gates, targets, positions, by_row, .. }: EdgesBackward<'_, T>,
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
