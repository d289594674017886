//! The INT8 step in plain Rust: the portable path (every target), and,
//! compiled again for AVX2 and FMA, the AVX2 path, whose integer sums are
//! AVX2's 16-bit products ([`super::avx2`]), and the AVX-VNNI path (the
//! same with the sums in 256-bit `vpdpbusd`).
//!
//! The same layouts, the same quantisation and the same integer sums as
//! the AVX-512 VNNI step ([`super`]); the sums' FP32 epilogue is the same
//! operations in the same order (fused where `FMA`). One difference: the
//! cell's approximate sigmoid ends in an exact division here, where VNNI
//! takes `rcp14`'s reciprocal (both within 2e-4 of σ, tested).
//!
//! Each loop runs over a tile of [`P`] nodes, lane by lane, so the AVX2
//! build vectorises it across nodes (8 FP32 lanes).

use super::{quantise, quantiser, Columns, Gru, Nodes, Packed, GATES, H, QK, QUADS, TAIL};
use crate::elem::madd;
use crate::forward::{Edges, GruBias};

/// Nodes per tile: one AVX2 vector of FP32 or of 32-bit sums.
pub(crate) const P: usize = 8;

/// A tile's integer sums, `[column][lane]`, for both sides of the GRU
/// (0: the aggregated messages by `W_ih`, 1: the state by `W_hh`).
pub(crate) type GruSums = [[[i32; P]; GATES]; 2];

/// Node `v`'s quantised entry `k` (its byte less the offset of 128).
#[inline(always)]
fn byte(x: &Nodes<'_>, v: usize, k: usize) -> i32 {
    ((x.quads[k / 4 * x.stride + v] >> (8 * (k % 4))) & 0xff) as i32 - 128
}

/// The integer sums of [`gru`]'s tile at `n0`, in scalar code.
pub(crate) fn gru_sums(inputs: [&Nodes<'_>; 2], w: &Gru, n0: usize, sums: &mut GruSums) {
    for (s, x) in inputs.iter().enumerate() {
        let c = &w.sides[s];
        for l in 0..P {
            let a: [i32; QK] = std::array::from_fn(|k| byte(x, n0 + l, k));
            for (col, sum) in sums[s].iter_mut().enumerate() {
                let wb = &c.bytes[col * QK..][..QK];
                sum[l] = a.iter().zip(wb).map(|(a, b)| a * *b as i32).sum();
            }
        }
    }
}

/// `σ(x)` as INT8 inference computes it: [`crate::avx512::sigmoid_approx_n`]'s
/// operations lane for lane (`-x` clamped to at least -87, `exp(-x)` as
/// `2^n · p(r)` with Taylor's degree 5), the reciprocal an exact division.
#[inline(always)]
pub(crate) fn sigmoid_approx<const FMA: bool>(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.min(87.0);
    // Nearest even, as `vrndscaleps`; |y| < 2^22 after the clamp (past 200
    // the power of two is infinite either way).
    let y = (x * -std::f32::consts::LOG2_E).min(200.0);
    let n = (y + SHIFT) - SHIFT;
    let r = madd::<FMA>(n, std::f32::consts::LN_2, x);
    let mut p = 1.0f32 / 120.0;
    for c in [1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = madd::<FMA>(-p, r, c);
    }
    // `vscalefps`: p · 2^n, exact (p within [0.7, 1.5], n at least -126).
    // `n` is an integer within [-126, 200] (`x <= 87` above, `y <= 200`; a
    // NaN `x` is 87 after `min`), so the plain conversion, which
    // vectorises where a saturating `as` does not, is exact.
    // SAFETY: finite and within i32.
    let n_int = unsafe { n.to_int_unchecked::<i32>() };
    let scaled = if n > 127.0 { f32::INFINITY } else { p * f32::from_bits(((n_int + 127) << 23) as u32) };
    1.0 / (scaled + 1.0)
}

/// The GRU cell on one lane, [`crate::avx512::cells_by`]'s operations (its
/// sigmoids [`sigmoid_approx`]): `x` the input gates' sums, `g` the hidden
/// ones, `b` the biases (`r`, `z`, `i_n`, `h_n`), `h` the state.
#[inline(always)]
pub(crate) fn cell<const FMA: bool>(x: [f32; 3], g: [f32; 3], b: [f32; 4], h: f32) -> f32 {
    let r = sigmoid_approx::<FMA>((x[0] + g[0]) + b[0]);
    let z = sigmoid_approx::<FMA>((x[1] + g[1]) + b[1]);
    let phn = g[2] + b[3];
    let a = madd::<FMA>(r, phn, x[2] + b[2]);
    let s = sigmoid_approx::<FMA>(a + a);
    // tanh(a) = 2σ(2a) − 1
    let n = madd::<FMA>(2.0, s, -1.0);
    madd::<FMA>(z, h - n, n)
}

/// One tile of [`super::gru`]: [`P`] nodes from `n0`, their sums from
/// `sums` (the scalar [`gru_sums`] or AVX2's), then each output as
/// `sum · (scale_w · scale_x)` and the two FP32 entries' products, the
/// cell, the new state and its bytes.
///
/// # Safety
/// `out` holds `[34][stride]`, `[8][stride]` and `[stride]` from `n0` on
/// for `P` nodes; `n0 + P <= stride`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gru_tile<const FMA: bool>(
    inputs: [&Nodes<'_>; 2],
    sums: &GruSums,
    h_full: &[f32],
    w: &Gru,
    bias: &GruBias,
    n0: usize,
    out: (*mut f32, *mut u32, *mut f32),
) {
    let stride = inputs[0].stride;
    let mut largest = [0f32; P];
    for j in 0..H {
        let mut pre = [[[0f32; P]; 3]; 2];
        for (s, x) in inputs.iter().enumerate() {
            let c = &w.sides[s];
            for (g, pre) in pre[s].iter_mut().enumerate() {
                let k = g * H + j;
                let (scale, t0, t1) = (c.scale[k], c.tail[k * TAIL], c.tail[k * TAIL + 1]);
                let sum = &sums[s][k];
                let (xs, x0, x1) = (&x.scales[n0..][..P], &x.tails[0][n0..][..P], &x.tails[1][n0..][..P]);
                for l in 0..P {
                    let y = sum[l] as f32 * (scale * xs[l]);
                    pre[l] = madd::<FMA>(x1[l], t1, madd::<FMA>(x0[l], t0, y));
                }
            }
        }
        let b = [bias.r[j], bias.z[j], bias.i_n[j], bias.h_n[j]];
        let hv = &h_full[j * stride + n0..][..P];
        let mut new = [0f32; P];
        for l in 0..P {
            let x = [pre[0][0][l], pre[0][1][l], pre[0][2][l]];
            let g = [pre[1][0][l], pre[1][1][l], pre[1][2][l]];
            new[l] = cell::<FMA>(x, g, b, hv[l]);
        }
        std::ptr::copy_nonoverlapping(new.as_ptr(), out.0.add(j * stride + n0), P);
        if j < QK {
            for l in 0..P {
                largest[l] = largest[l].max(new[l].abs());
            }
        }
    }
    quantise_tile(out.0, stride, n0, &largest, out.1, out.2);
}

/// The bytes and scales of [`P`] nodes' new states (node-major FP32 at
/// `full`), each with its own [`quantiser`] of `largest`.
#[inline(always)]
unsafe fn quantise_tile(full: *const f32, stride: usize, n0: usize, largest: &[f32; P], quads: *mut u32, scales: *mut f32) {
    let mut inv = [0f32; P];
    for l in 0..P {
        let (i, s) = quantiser(largest[l]);
        inv[l] = i;
        *scales.add(n0 + l) = s;
    }
    for q in 0..QUADS {
        let mut d = [0u32; P];
        for j in 0..4 {
            let row = full.add((4 * q + j) * stride + n0);
            for l in 0..P {
                d[l] |= ((quantise(*row.add(l), inv[l]) + 128) as u32) << (8 * j);
            }
        }
        std::ptr::copy_nonoverlapping(d.as_ptr(), quads.add(q * stride + n0), P);
    }
}

/// [`super::messages`]' rows, in scalar code: row `i` (node and output at
/// `at(i)`) from column `first` on.
///
/// # Safety
/// Every row's output holds `b.cols` values from `first` on.
#[inline(always)]
pub(crate) unsafe fn message_rows<const FMA: bool>(
    x: &Nodes<'_>,
    at: impl Fn(usize) -> (usize, *mut f32),
    rows: usize,
    b: &Packed,
    first: usize,
) {
    for i in 0..rows {
        let (v, out) = at(i);
        let a: [i32; QK] = std::array::from_fn(|k| byte(x, v, k));
        let (xs, x0, x1) = (x.scales[v], x.tails[0][v], x.tails[1][v]);
        for c in first..b.cols {
            let wb = &b.bytes[c * QK..][..QK];
            let sum: i32 = a.iter().zip(wb).map(|(a, w)| a * *w as i32).sum();
            let y = sum as f32 * (b.scale[c] * xs);
            *out.add(c) = madd::<FMA>(x1, b.tail[b.stride + c], madd::<FMA>(x0, b.tail[c], y));
        }
    }
}

/// Node `v`'s 34 values `x` as [`Nodes`]' entries: its scale, its bytes
/// (node-major, stride `stride`) and its two FP32 entries.
#[inline(always)]
unsafe fn store_node(x: &[f32; H], v: usize, stride: usize, quads: *mut u32, scales: *mut f32, tails: [*mut f32; TAIL]) {
    let (inv, s) = quantiser(x[..QK].iter().fold(0f32, |m, x| m.max(x.abs())));
    *scales.add(v) = s;
    for q in 0..QUADS {
        *quads.add(q * stride + v) = (0..4).fold(0u32, |d, j| d | (((quantise(x[4 * q + j], inv) + 128) as u32) << (8 * j)));
    }
    *tails[0].add(v) = x[QK];
    *tails[1].add(v) = x[QK + 1];
}

/// [`super::states_to_nodes`]' nodes `range`: row-major `x` to node-major
/// `full` and [`Nodes`]' entries (`full`'s rows 32 and 33 the tails).
///
/// # Safety
/// The buffers hold `stride` nodes; `range` is within `x`'s rows.
#[inline(always)]
pub(crate) unsafe fn rows_to_nodes(
    x: &[f32],
    range: std::ops::Range<usize>,
    stride: usize,
    quads: *mut u32,
    scales: *mut f32,
    full: *mut f32,
) {
    for v in range {
        let row: &[f32; H] = x[v * H..][..H].try_into().expect("a row of 34");
        store_node(row, v, stride, quads, scales, [full.add(QK * stride), full.add((QK + 1) * stride)]);
        for j in 0..QK {
            *full.add(j * stride + v) = row[j];
        }
    }
}

/// [`super::gated_biases`]' rows `range`, into `out` row-major.
///
/// # Safety
/// [`super::check_edges`] holds for the edges of `range`; `out` holds
/// their rows.
#[inline(always)]
pub(crate) unsafe fn gated_bias_rows<const FMA: bool>(
    edges: &Edges<'_>,
    bias: &[f32],
    gates: &[f32],
    range: std::ops::Range<usize>,
    out: *mut f32,
) {
    for v in range {
        let (start, end) = (edges.crow[v] as usize, edges.crow[v + 1] as usize);
        let mut acc = [0f32; H];
        for e in start..end {
            let b = &bias[edges.types[e] as usize * H..][..H];
            let g = &gates[edges.positions[e] as usize * H..][..H];
            for j in 0..H {
                acc[j] = madd::<FMA>(b[j], g[j], acc[j]);
            }
        }
        let scale = edges.scale(start, end);
        for (j, a) in acc.iter().enumerate() {
            *out.add(v * H + j) = a * scale;
        }
    }
}

/// [`super::aggregate_to_nodes`]' nodes `range`.
///
/// # Safety
/// As [`super::aggregate_to_nodes`]; the buffers hold `stride` nodes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn aggregate_nodes<const FMA: bool>(
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
    for v in range {
        let (start, end) = (edges.crow[v] as usize, edges.crow[v + 1] as usize);
        let mut acc = [0f32; H];
        for e in start..end {
            let m = &f[edges.offsets[e]..][..H];
            let g = &gates[edges.positions[e] as usize * H..][..H];
            for j in 0..H {
                acc[j] = madd::<FMA>(m[j], g[j], acc[j]);
            }
        }
        let scale = edges.scale(start, end);
        let row = &biases[v * H..][..H];
        let x: [f32; H] = std::array::from_fn(|j| madd::<FMA>(acc[j], scale, row[j]));
        store_node(&x, v, stride, quads, scales, tails);
    }
}

/// [`super::aggregate_max_to_nodes`]' nodes `range`: per node the
/// channel-wise maximum of `(F[e] + bias[type e]) ⊙ gate[position e]`
/// (an add then a multiply, as [`crate::forward::aggregate`]'s max, so
/// the same values bit for bit), zero without incoming edges.
///
/// # Safety
/// As [`super::aggregate_max_to_nodes`]; the buffers hold `stride` nodes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn aggregate_max_nodes(
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
    for v in range {
        let (start, end) = (edges.crow[v] as usize, edges.crow[v + 1] as usize);
        let mut x = [if start == end { 0f32 } else { f32::NEG_INFINITY }; H];
        for e in start..end {
            let m = &f[edges.offsets[e]..][..H];
            let b = &bias[edges.types[e] as usize * H..][..H];
            let g = &gates[edges.positions[e] as usize * H..][..H];
            for j in 0..H {
                x[j] = x[j].max((m[j] + b[j]) * g[j]);
            }
        }
        store_node(&x, v, stride, quads, scales, tails);
    }
}

/// Compiles each loop above twice: `$plain` for any target (no FMA), and
/// `$avx2` for AVX2 and FMA.
macro_rules! twice {
    ($(fn $name:ident / $avx2:ident <$fma:ident> ($($arg:ident : $ty:ty),*) => $body:expr;)*) => {
        $(
            /// The portable build (any target).
            ///
            /// # Safety
            /// As the loop it calls.
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn $name($($arg: $ty),*) {
                const $fma: bool = false;
                $body
            }

            /// The AVX2 build.
            ///
            /// # Safety
            /// As the loop it calls, on a CPU with AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn $avx2($($arg: $ty),*) {
                const $fma: bool = true;
                $body
            }
        )*
    };
}

twice! {
    fn gru_portable / gru_avx2 <FMA> (m: &Nodes<'_>, h: &Nodes<'_>, h_full: &[f32], w: &Gru, bias: &GruBias, n0: usize, out: (*mut f32, *mut u32, *mut f32)) => {
        let mut sums = [[[0i32; P]; GATES]; 2];
        if FMA {
            #[cfg(target_arch = "x86_64")]
            super::avx2::gru_sums([m, h], w, n0, &mut sums);
        } else {
            gru_sums([m, h], w, n0, &mut sums);
        }
        gru_tile::<FMA>([m, h], &sums, h_full, w, bias, n0, out)
    };
    fn messages_portable / messages_avx2 <FMA> (x: &Nodes<'_>, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) => {
        if FMA {
            #[cfg(target_arch = "x86_64")]
            super::avx2::message_rows(x, at, rows, b, first);
        } else {
            message_rows::<FMA>(x, at, rows, b, first)
        }
    };
    fn to_nodes_portable / to_nodes_avx2 <FMA> (x: &[f32], range: std::ops::Range<usize>, stride: usize, quads: *mut u32, scales: *mut f32, full: *mut f32) => {
        let _ = FMA;
        rows_to_nodes(x, range, stride, quads, scales, full)
    };
    fn gated_biases_portable / gated_biases_avx2 <FMA> (edges: &Edges<'_>, bias: &[f32], gates: &[f32], range: std::ops::Range<usize>, out: *mut f32) => {
        gated_bias_rows::<FMA>(edges, bias, gates, range, out)
    };
    fn aggregate_portable / aggregate_avx2 <FMA> (f: &[f32], edges: &Edges<'_>, biases: &[f32], gates: &[f32], range: std::ops::Range<usize>, stride: usize, quads: *mut u32, scales: *mut f32, tails: [*mut f32; TAIL]) => {
        aggregate_nodes::<FMA>(f, edges, biases, gates, range, stride, quads, scales, tails)
    };
    fn aggregate_max_portable / aggregate_max_avx2 <FMA> (f: &[f32], edges: &Edges<'_>, bias: &[f32], gates: &[f32], range: std::ops::Range<usize>, stride: usize, quads: *mut u32, scales: *mut f32, tails: [*mut f32; TAIL]) => {
        let _ = FMA;
        aggregate_max_nodes(f, edges, bias, gates, range, stride, quads, scales, tails)
    };
}

/// The AVX-VNNI build of [`gru_avx2`]: the same loops, the sums in
/// 256-bit `vpdpbusd` ([`super::avx2`]).
///
/// # Safety
/// As [`gru_tile`], on a CPU with AVX2, FMA and AVX-VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avxvnni")]
pub(crate) unsafe fn gru_avxvnni(
    m: &Nodes<'_>,
    h: &Nodes<'_>,
    h_full: &[f32],
    w: &Gru,
    bias: &GruBias,
    n0: usize,
    out: (*mut f32, *mut u32, *mut f32),
) {
    let mut sums = [[[0i32; P]; GATES]; 2];
    super::avx2::gru_sums_vnni([m, h], w, n0, &mut sums);
    gru_tile::<true>([m, h], &sums, h_full, w, bias, n0, out)
}

/// The AVX-VNNI build of [`messages_avx2`].
///
/// # Safety
/// As [`message_rows`], on a CPU with AVX2, FMA and AVX-VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avxvnni")]
pub(crate) unsafe fn messages_avxvnni(x: &Nodes<'_>, at: &dyn Fn(usize) -> (usize, *mut f32), rows: usize, b: &Packed, first: usize) {
    super::avx2::message_rows_vnni(x, at, rows, b, first)
}

/// The columns' bytes as signed values, `[cols][32]` (the scalar sums').
pub(crate) fn column_bytes(c: &Columns) -> Vec<i8> {
    (0..c.cols * QK).map(|i| (c.quads[i / QK * QUADS + i % QK / 4] >> (8 * (i % 4))) as u8 as i8).collect()
}
