//! The GRU cell on row-major rows of any width: what the general step
//! (`programl-infer`'s `wide`, a state other than 34 wide) runs after each
//! block's two gate products.
//!
//! ```text
//! r = σ(GI_r + GH_r + b_r)   z = σ(GI_z + GH_z + b_z)      (b_r = b_ir + b_hr, b_z likewise)
//! n = tanh(GI_n + b_in + r ⊙ (GH_n + b_hn))                h' = n + z ⊙ (h − n)
//! ```
//!
//! The same operations as the 34-wide kernels' cell
//! ([`crate::avx512::cells_by`]), with its two sigmoids: exact to ~1e-7
//! for FP32 products, or to ~1e-4 where the products are INT8
//! (`approx`: against the gates' quantisation error of ~1e-2, the 34-wide
//! INT8 step's choice). A row is its width's whole vectors of 16 and one
//! masked vector for the rest (66 channels: four and one of two lanes);
//! on AVX-512 four vectors go through the chain of operations together,
//! so that the FMA ports have four independent chains. A row's scalar
//! remainder, in a loop the compiler vectorises, cost as much as a whole
//! vector per lane and the exact sigmoid's division most of the rest:
//! the cell was a fifth of a 66-wide INT8 step on Zen 4.
//!
//! On AVX2 and FMA the same, by hand: vectors of 8, a row's last one
//! masked (`vmaskmovps`), four through the chain together, the sigmoids
//! exact (Cephes' exponential and a Newton step on `rcpps`) at either
//! precision. Compiled from the portable loop, as it was until
//! 2026-11-29, the 2 leftover lanes of a 66-wide row ran scalar and the
//! sigmoid's `vdivps` set the pace: the cell was a fifth of a 66-wide FP32
//! step on Zen 4's AVX2 path.
//!
//! Elsewhere the lanes are the portable [`crate::int8::portable::cell`]
//! (`approx`) or the exact branch-free sigmoid ([`crate::elem`]).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use crate::cpu::{self, Isa};
use crate::elem::{sigmoid_by, tanh_by};
#[cfg(target_arch = "x86_64")]
use crate::elem::{EXP_POLY, LN2_HI, LN2_LO};

/// The cell's biases, each `h` wide: `b_ir + b_hr`, `b_iz + b_hz`, `b_in`,
/// `b_hn`.
#[derive(Clone, Copy)]
pub struct Biases<'a> {
    pub r: &'a [f32],
    pub z: &'a [f32],
    pub i_n: &'a [f32],
    pub h_n: &'a [f32],
}

/// The cell of `out.len() / h` rows: `gi` and `gh` their gate products
/// (`[rows, 3h]` each, gates in the order r, z, n; no biases), `old`
/// their states (`[rows, h]`), the new states into `out`. Sigmoids to
/// ~1e-4 where `approx` (INT8 products), else ~1e-7. On the best path the
/// thread's cap allows ([`cpu::allows`]).
///
/// # Panics
/// Where a slice is shorter than the rows need, or a bias is not `h`
/// wide.
pub fn rows(h: usize, gi: &[f32], gh: &[f32], bias: Biases<'_>, old: &[f32], out: &mut [f32], approx: bool) {
    assert!(h > 0 && out.len().is_multiple_of(h), "cell rows: {} outputs are not rows of {h}", out.len());
    let n = out.len() / h;
    assert!(gi.len() >= n * 3 * h && gh.len() >= n * 3 * h && old.len() >= n * h, "cell rows: inputs shorter than {n} rows of {h}");
    assert!([bias.r, bias.z, bias.i_n, bias.h_n].iter().all(|b| b.len() == h), "cell rows: a bias is not {h} wide");
    match approx {
        true => rows_on::<true>(h, gi, gh, bias, old, out),
        false => rows_on::<false>(h, gi, gh, bias, old, out),
    }
}

/// [`rows`] on the best path, its sigmoids `APPROX`'s (lengths checked).
fn rows_on<const APPROX: bool>(h: usize, gi: &[f32], gh: &[f32], bias: Biases<'_>, old: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if cpu::allows(Isa::Avx512) {
            // SAFETY: the CPU has AVX-512 F; the lengths are checked.
            return unsafe { rows_avx512::<APPROX>(h, gi, gh, bias, old, out) };
        }
        if cpu::allows(Isa::Avx2) {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { rows_avx2(h, gi, gh, bias, old, out) };
        }
    }
    rows_portable::<APPROX>(h, gi, gh, bias, old, out)
}

/// One lane of the cell: the exact sigmoid ([`sigmoid_by`]), or INT8's
/// ([`crate::int8::portable::cell`]).
#[inline(always)]
fn lane<const APPROX: bool>(x: [f32; 3], g: [f32; 3], b: [f32; 4], h: f32) -> f32 {
    if APPROX {
        crate::int8::portable::cell::<false>(x, g, b, h)
    } else {
        let r = sigmoid_by::<false>(x[0] + g[0] + b[0]);
        let z = sigmoid_by::<false>(x[1] + g[1] + b[1]);
        let n = tanh_by::<false>(x[2] + b[2] + r * (g[2] + b[3]));
        n + z * (h - n)
    }
}

/// The rows in plain loops: every operand sliced to `h` and walked in
/// step (`zip`), so that the loop has no bounds checks and vectorises.
#[inline(always)]
fn rows_portable<const APPROX: bool>(h: usize, gi: &[f32], gh: &[f32], bias: Biases<'_>, old: &[f32], out: &mut [f32]) {
    let (br, bz, bin, bhn) = (&bias.r[..h], &bias.z[..h], &bias.i_n[..h], &bias.h_n[..h]);
    for (v, (row, old)) in out.chunks_exact_mut(h).zip(old.chunks_exact(h)).enumerate() {
        let (xr, rest) = gi[v * 3 * h..][..3 * h].split_at(h);
        let (xz, xn) = rest.split_at(h);
        let (gr, rest) = gh[v * 3 * h..][..3 * h].split_at(h);
        let (gz, gn) = rest.split_at(h);
        let gates = xr.iter().zip(gr).zip(br).zip(xz.iter().zip(gz).zip(bz));
        let news = xn.iter().zip(gn).zip(bin.iter().zip(bhn));
        for ((y, o), ((((xr, gr), br), ((xz, gz), bz)), ((xn, gn), (bin, bhn)))) in row.iter_mut().zip(old).zip(gates.zip(news)) {
            *y = lane::<APPROX>([*xr, *xz, *xn], [*gr, *gz, *gn], [*br, *bz, *bin, *bhn], *o);
        }
    }
}

/// The rows on AVX2 and FMA: each row's vectors of 8 (the last one
/// masked, `vmaskmovps`), [`GROUP`] at a time across rows through
/// [`cells_avx2`]. Its sigmoids are exact (~1e-7) at either precision:
/// INT8 products on this path (`dtype=int8`) need only ~1e-4, and the
/// exact form costs little more here without AVX-512's `scalef`.
///
/// # Safety
/// The CPU has AVX2 and FMA; the slices hold the rows ([`rows`] checks).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(h: usize, gi: &[f32], gh: &[f32], bias: Biases<'_>, old: &[f32], out: &mut [f32]) {
    let n = out.len() / h;
    let per_row = h.div_ceil(8);
    let last = (h - (per_row - 1) * 8) as i32;
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let last_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(last), lanes);
    let full = _mm256_set1_epi32(-1);
    let mut units = [(0usize, 0usize, 0usize, full); GROUP];
    let mut filled = 0;
    for row in 0..n {
        for v in 0..per_row {
            let mask = if v + 1 == per_row { last_mask } else { full };
            units[filled] = (row * 3 * h, row * h, v * 8, mask);
            filled += 1;
            if filled == GROUP {
                group_avx2::<GROUP>(h, &units, gi, gh, bias, old, out);
                filled = 0;
            }
        }
    }
    match filled {
        1 => group_avx2::<1>(h, &units, gi, gh, bias, old, out),
        2 => group_avx2::<2>(h, &units, gi, gh, bias, old, out),
        3 => group_avx2::<3>(h, &units, gi, gh, bias, old, out),
        _ => {}
    }
}

/// The first `M` of `units` (`(gate row, state row, column, mask)`) on
/// AVX2: masked loads (a masked-off lane reads nothing, so no fault past
/// a slice), summed as they arrive into the cell's five operands (AVX2
/// has 16 registers: eleven a vector would spill), the cell, a masked
/// store.
///
/// # Safety
/// As [`rows_avx2`]; the units within the rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn group_avx2<const M: usize>(
    h: usize,
    units: &[(usize, usize, usize, __m256i); GROUP],
    gi: &[f32],
    gh: &[f32],
    bias: Biases<'_>,
    old: &[f32],
    out: &mut [f32],
) {
    let zero = _mm256_setzero_ps();
    let (mut pre_r, mut pre_z, mut xn, mut gn, mut s) = ([zero; M], [zero; M], [zero; M], [zero; M], [zero; M]);
    for i in 0..M {
        let (gate, state, c, m) = units[i];
        // (A macro, not a closure: a closure does not inherit the target
        // features, and its intrinsics become calls.)
        macro_rules! load {
            ($p:expr) => {
                _mm256_maskload_ps($p, m)
            };
        }
        let (x, g) = (gi.as_ptr().add(gate + c), gh.as_ptr().add(gate + c));
        pre_r[i] = _mm256_add_ps(_mm256_add_ps(load!(x), load!(g)), load!(bias.r.as_ptr().add(c)));
        pre_z[i] = _mm256_add_ps(_mm256_add_ps(load!(x.add(h)), load!(g.add(h))), load!(bias.z.as_ptr().add(c)));
        xn[i] = _mm256_add_ps(load!(x.add(2 * h)), load!(bias.i_n.as_ptr().add(c)));
        gn[i] = _mm256_add_ps(load!(g.add(2 * h)), load!(bias.h_n.as_ptr().add(c)));
        s[i] = load!(old.as_ptr().add(state + c));
    }
    // The cell, in the order of the AVX-512 kernels' `cells_by` (tanh(a)
    // as 2σ(2a) − 1).
    let r = sigmoid_avx2(pre_r);
    let z = sigmoid_avx2(pre_z);
    let mut a2 = [zero; M];
    for i in 0..M {
        let a = _mm256_fmadd_ps(r[i], gn[i], xn[i]);
        a2[i] = _mm256_add_ps(a, a);
    }
    let t = sigmoid_avx2(a2);
    for i in 0..M {
        let (_, state, c, m) = units[i];
        let n = _mm256_fmsub_ps(_mm256_set1_ps(2.0), t[i], _mm256_set1_ps(1.0));
        _mm256_maskstore_ps(out.as_mut_ptr().add(state + c), m, _mm256_fmadd_ps(z[i], _mm256_sub_ps(s[i], n), n));
    }
}

/// `1 / (1 + e^-x)` on `M` vectors of 8: `e^-x` as [`crate::elem::exp_by`]
/// (Cephes' polynomial, `2^n` put into the exponent bits, the argument
/// clamped to [-87, 88]), the reciprocal as `rcpps` (2^-12) and one Newton
/// step (~2^-23), not a division (`vdivps`: 11-13 cycles of latency and
/// a divider per core, where the sigmoids of four vectors wait on it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn sigmoid_avx2<const M: usize>(x: [__m256; M]) -> [__m256; M] {
    let mut e = [_mm256_setzero_ps(); M];
    let mut n = [_mm256_setzero_ps(); M];
    let mut r = [_mm256_setzero_ps(); M];
    for i in 0..M {
        let v = _mm256_sub_ps(_mm256_setzero_ps(), x[i]);
        e[i] = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-87.0)), _mm256_set1_ps(88.0));
        n[i] = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            e[i],
            _mm256_set1_ps(std::f32::consts::LOG2_E),
        ));
        r[i] = _mm256_fnmadd_ps(n[i], _mm256_set1_ps(LN2_HI), e[i]);
        r[i] = _mm256_fnmadd_ps(n[i], _mm256_set1_ps(LN2_LO), r[i]);
    }
    let mut p = [_mm256_set1_ps(EXP_POLY[0]); M];
    for c in EXP_POLY[1..].iter().copied() {
        for i in 0..M {
            p[i] = _mm256_fmadd_ps(p[i], r[i], _mm256_set1_ps(c));
        }
    }
    let mut out = [_mm256_setzero_ps(); M];
    for i in 0..M {
        let y = _mm256_fmadd_ps(_mm256_mul_ps(p[i], r[i]), r[i], _mm256_add_ps(r[i], _mm256_set1_ps(1.0)));
        // 2^n: n within [-126, 127] (the clamp), so a normal number.
        let two_n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n[i]), _mm256_set1_epi32(127))));
        let d = _mm256_fmadd_ps(y, two_n, _mm256_set1_ps(1.0));
        let q = _mm256_rcp_ps(d);
        out[i] = _mm256_mul_ps(q, _mm256_fnmadd_ps(d, q, _mm256_set1_ps(2.0)));
    }
    out
}

/// Vectors of 16 a group of the AVX-512 path takes through the cell's
/// chain together.
#[cfg(target_arch = "x86_64")]
const GROUP: usize = 4;

/// The rows on AVX-512: each row's vectors (the last one masked), taken
/// [`GROUP`] at a time across rows through [`crate::avx512::cells_by`].
/// (No closures inside: a closure does not inherit the function's target
/// features, and its intrinsics are then calls.)
///
/// # Safety
/// The CPU has AVX-512 F; the slices hold the rows ([`rows`] checks).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
unsafe fn rows_avx512<const APPROX: bool>(h: usize, gi: &[f32], gh: &[f32], bias: Biases<'_>, old: &[f32], out: &mut [f32]) {
    let n = out.len() / h;
    let per_row = h.div_ceil(16);
    let last = h - (per_row - 1) * 16;
    let last_mask: __mmask16 = if last == 16 { 0xffff } else { (1u16 << last) - 1 };
    // Every unit (row, vector) in order: its row's offset in the gates
    // and in the states, its column, its mask.
    let mut units = [(0usize, 0usize, 0usize, 0 as __mmask16); GROUP];
    let mut filled = 0;
    for row in 0..n {
        for v in 0..per_row {
            let mask = if v + 1 == per_row { last_mask } else { 0xffff };
            units[filled] = (row * 3 * h, row * h, v * 16, mask);
            filled += 1;
            if filled == GROUP {
                group::<GROUP, APPROX>(h, &units, gi, gh, bias, old, out);
                filled = 0;
            }
        }
    }
    match filled {
        1 => group::<1, APPROX>(h, &units, gi, gh, bias, old, out),
        2 => group::<2, APPROX>(h, &units, gi, gh, bias, old, out),
        3 => group::<3, APPROX>(h, &units, gi, gh, bias, old, out),
        _ => {}
    }
}

/// The first `M` of `units` (`(gate row, state row, column, mask)`).
///
/// # Safety
/// As [`rows_avx512`]; the units within the rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
#[inline]
unsafe fn group<const M: usize, const APPROX: bool>(
    h: usize,
    units: &[(usize, usize, usize, __mmask16); GROUP],
    gi: &[f32],
    gh: &[f32],
    bias: Biases<'_>,
    old: &[f32],
    out: &mut [f32],
) {
    let zero = _mm512_setzero_ps();
    let (mut x, mut g) = ([[zero; 3]; M], [[zero; 3]; M]);
    let (mut b, mut s) = ([[zero; 4]; M], [zero; M]);
    for i in 0..M {
        let (gate, state, c, m) = units[i];
        for k in 0..3 {
            x[i][k] = _mm512_maskz_loadu_ps(m, gi.as_ptr().add(gate + k * h + c));
            g[i][k] = _mm512_maskz_loadu_ps(m, gh.as_ptr().add(gate + k * h + c));
        }
        b[i] = [
            _mm512_maskz_loadu_ps(m, bias.r.as_ptr().add(c)),
            _mm512_maskz_loadu_ps(m, bias.z.as_ptr().add(c)),
            _mm512_maskz_loadu_ps(m, bias.i_n.as_ptr().add(c)),
            _mm512_maskz_loadu_ps(m, bias.h_n.as_ptr().add(c)),
        ];
        s[i] = _mm512_maskz_loadu_ps(m, old.as_ptr().add(state + c));
    }
    let new = crate::avx512::cells_by::<M, APPROX>(x, g, b, s);
    for i in 0..M {
        let (_, state, c, m) = units[i];
        _mm512_mask_storeu_ps(out.as_mut_ptr().add(state + c), m, new[i][0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{self, Isa};

    /// `n` values in [-scale, scale), seeded.
    fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n).map(|_| crate::tests::random(&mut s) * scale).collect()
    }

    fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// The cell in f64.
    fn reference(h: usize, gi: &[f32], gh: &[f32], b: &[Vec<f32>; 4], old: &[f32]) -> Vec<f64> {
        let n = old.len() / h;
        let mut out = vec![0f64; n * h];
        for v in 0..n {
            for j in 0..h {
                let (x, g) = (|k: usize| gi[v * 3 * h + k * h + j] as f64, |k: usize| gh[v * 3 * h + k * h + j] as f64);
                let r = sigmoid(x(0) + g(0) + b[0][j] as f64);
                let z = sigmoid(x(1) + g(1) + b[1][j] as f64);
                let c = (x(2) + b[2][j] as f64 + r * (g(2) + b[3][j] as f64)).tanh();
                out[v * h + j] = c + z * (old[v * h + j] as f64 - c);
            }
        }
        out
    }

    /// Every path the CPU runs (the portable one always), at widths with
    /// and without a partial vector and row counts that leave every size
    /// of last group: within 2e-6 of f64 exact, 2e-4 `approx`; every row
    /// written, nothing past them.
    #[test]
    fn the_cell_on_every_path_and_width() {
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
            if !cpu::run_test_on(isa, &format!("cell::the_cell_on_every_path_and_width ({isa:?})")) {
                continue;
            }
            for h in [1, 16, 18, 34, 66, 80] {
                for n in [1, 2, 3, 5, 32] {
                    let seed = (h * 100 + n) as u64;
                    // Pre-activations well past the sigmoid's knee both ways.
                    let (gi, gh) = (random(n * 3 * h, seed, 4.0), random(n * 3 * h, seed + 1, 4.0));
                    let b: [Vec<f32>; 4] = std::array::from_fn(|k| random(h, seed + 2 + k as u64, 1.0));
                    let old = random(n * h, seed + 7, 1.0);
                    let want = reference(h, &gi, &gh, &b, &old);
                    for approx in [false, true] {
                        let mut out = vec![f32::NAN; n * h + 3];
                        let bias = Biases { r: &b[0], z: &b[1], i_n: &b[2], h_n: &b[3] };
                        cpu::with_cap(isa, || rows(h, &gi, &gh, bias, &old, &mut out[..n * h], approx));
                        let bound = if approx { 2e-4 } else { 2e-6 };
                        for (k, (got, want)) in out.iter().zip(&want).enumerate() {
                            let d = (*got as f64 - want).abs();
                            assert!(d <= bound, "{isa:?} h {h} rows {n} approx {approx}: [{k}] {got} against {want}");
                        }
                        assert!(out[n * h..].iter().all(|x| x.is_nan()), "{isa:?} h {h}: wrote past the rows");
                    }
                }
            }
        }
    }
}
