//! The crate's own tests: threads, dropout, the element functions.

use crate::cpu::{self, Isa};
use crate::dropout::*;
use crate::elem::*;
use crate::threads::*;
use crate::H;

/// The kernels' tests' random numbers: xorshift64, in [-1, 1).
pub(crate) fn random(seed: &mut u64) -> f32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
}
/// The pool really runs a loop on several threads: at two threads, a
/// loop of two ranges runs on two threads; at one, on the caller alone.
#[test]
fn loops_run_on_more_than_one_thread() {
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    let ranges = std::sync::atomic::AtomicUsize::new(0);
    par_ranges(4 * PARALLEL_NODES, 2, |_| {
        ranges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Long enough that one thread cannot take every range first.
        std::thread::sleep(std::time::Duration::from_millis(50));
        seen.lock().unwrap().insert(std::thread::current().id());
    });
    assert_eq!(ranges.into_inner(), 2, "one range per thread");
    assert_eq!(seen.into_inner().unwrap().len(), 2, "two ranges on one thread: the loops are not parallel");
}

/// The dropout mask keeps `keep` of its entries (within 4 standard
/// deviations over 340,000), at `scale`, the same at any thread count,
/// with no pattern between neighbours, and another seed draws another.
#[test]
fn dropout_masks_keep_their_share_at_any_thread_count() {
    let rows = 10_000;
    let draw = |seed: u64, threads: usize| {
        let mut m = vec![f32::NAN; rows * H];
        dropout_mask(&mut m, seed, 0.8, 1.25, threads);
        m
    };
    let one = draw(7, 1);
    assert!(one.iter().all(|&x| x == 0.0 || x == 1.25));
    let kept = one.iter().filter(|&&x| x != 0.0).count() as f64;
    let n = one.len() as f64;
    let sd = (n * 0.8 * 0.2).sqrt();
    assert!((kept - 0.8 * n).abs() < 4.0 * sd, "kept {kept} of {n}");
    // Both halves of a pair, and neighbouring pairs, independent.
    let both = one.chunks_exact(2).filter(|p| p[0] != 0.0 && p[1] != 0.0).count() as f64;
    let pairs = n / 2.0;
    assert!((both - 0.64 * pairs).abs() < 4.0 * (pairs * 0.64 * 0.36).sqrt(), "both of a pair kept {both} of {pairs}");
    assert_eq!(one, draw(7, 3));
    // A length that is no whole number of 34-wide rows (a wider state's
    // batch, plus a stray pair): the same entries as far as it goes.
    let mut odd = vec![f32::NAN; 66 * 1031 + 2];
    dropout_mask(&mut odd, 7, 0.8, 1.25, 3);
    assert_eq!(odd[..], one[..odd.len()]);
    let other = draw(8, 1);
    assert!(one.iter().zip(&other).filter(|(a, b)| a != b).count() > rows, "another seed, another mask");
}

/// The vector mask is the scalar one bit for bit, at every length of
/// a tail and from any first pair (AVX-512DQ CPUs; elsewhere `SKIP:`, and
/// the scalar loop is all there is).
#[test]
fn dropout_mask_vector_is_the_scalar_mask() {
    #[cfg(target_arch = "x86_64")]
    if cpu::run_test_on(Isa::Avx512, "dropout_mask_vector_is_the_scalar_mask")
        && cpu::run_test_with("avx512dq", "dropout_mask_vector_is_the_scalar_mask")
    {
        for (len, first, seed) in [(0usize, 0u64, 1u64), (2, 5, 2), (16, 0, 3), (34, 17, 4), (46, 1 << 40, 5), (3400, 123_456, 6)] {
            let bound = (0.8f64 * (1u64 << 24) as f64).round() as u32;
            let (mut scalar, mut vector) = (vec![f32::NAN; len], vec![f32::NAN; len]);
            dropout_pairs(&mut scalar, first, seed, bound, 1.25);
            unsafe { dropout_pairs_avx512(&mut vector, first, seed, bound, 1.25) };
            assert!(scalar.iter().zip(&vector).all(|(a, b)| a.to_bits() == b.to_bits()), "{len} entries from pair {first}");
        }
    }
}

/// Both forms of the functions (with FMAs, the vectorised loops'; and
/// with a multiply and an add, the portable loop's) are accurate.
#[test]
fn exp_sigmoid_and_tanh_are_accurate() {
    exp_sigmoid_and_tanh_are_accurate_by::<true>();
    exp_sigmoid_and_tanh_are_accurate_by::<false>();
}

fn exp_sigmoid_and_tanh_are_accurate_by<const FMA: bool>() {
    let (exp, sigmoid, tanh) = (exp_by::<FMA>, sigmoid_by::<FMA>, tanh_by::<FMA>);
    let mut worst = 0f64;
    for i in -8000..=8000 {
        let x = i as f32 / 100.0;
        let want = (x as f64).exp();
        if !(1e-37..=1e38).contains(&want) {
            continue;
        }
        worst = worst.max(((exp(x) as f64) - want).abs() / want);
    }
    assert!(worst < 5e-7, "exp: relative error {worst}");
    for i in -2000..=2000 {
        let x = i as f32 / 100.0;
        let s = 1.0 / (1.0 + (-(x as f64)).exp());
        assert!((sigmoid(x) as f64 - s).abs() < 1e-6, "sigmoid({x})");
        assert!((tanh(x) as f64 - (x as f64).tanh()).abs() < 2e-6, "tanh({x})");
    }
    assert!(sigmoid(-1000.0) < 1e-37);
    assert_eq!(sigmoid(1000.0), 1.0);
}

/// Round to nearest even, as libtorch converts: exact halves go to the
/// even neighbour, others to the nearest (values worked by hand).
#[test]
fn bf16_rounds_to_nearest_even() {
    for (x, bits) in [
        (1.0f32, 0x3f80u16),
        (-2.5, 0xc020),
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: the even one, 1.
        (1.0 + 1.0 / 256.0, 0x3f80),
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even, 1 + 2^-6.
        (1.0 + 3.0 / 256.0, 0x3f82),
        // π = 0x40490fdb: the lower 16 bits 0x0fdb are below half.
        (std::f32::consts::PI, 0x4049),
        // 65504 = 0x477fe000: above half, rounds up.
        (65504.0, 0x4780),
    ] {
        assert_eq!(Bf16::from_f32(x).0, bits, "{x}");
        assert_eq!(Bf16(bits).f32(), f32::from_bits((bits as u32) << 16));
    }
}

/// Every path's name (`isa=`, `--isa`) reads back as the path, an unknown
/// one is refused naming all five, and the best path the CPU runs is one
/// it has every flag of, with none above it that it could run.
#[test]
fn paths_read_back_and_the_best_is_the_cpus() {
    for isa in Isa::ALL {
        assert_eq!(isa.to_string().parse::<Isa>(), Ok(isa));
    }
    let err = "sse4".parse::<Isa>().unwrap_err();
    assert!(Isa::ALL.iter().all(|i| err.contains(&i.to_string())), "{err}");
    let best = cpu::detected();
    assert!(best.supported() && best.check().is_ok());
    assert!(Isa::ALL.iter().filter(|&&i| i > best).all(|i| !i.supported()), "a path above {best} runs here");
    assert!(Isa::Portable.supported());
}

/// Random inputs of the aggregation's loops for `n` nodes and 5 positions:
/// the fused product (row-major), the six types' biases, the gate table,
/// and node `v`'s `degree(v)` incoming edges, edge `k` drawn by `edge(v,
/// k, the previous edge, random)` as (source, type, position), sorted by
/// target as the kernels read them.
struct Inputs {
    n: usize,
    positions: usize,
    layout: crate::forward::Layout,
    fused: Vec<f32>,
    bias: Vec<f32>,
    gates: Vec<f32>,
    crow: Vec<i64>,
    offsets: Vec<usize>,
    types: Vec<i64>,
    pos: Vec<i64>,
    /// Each edge's row of the product viewed as \[9N, 34\] (`9·source + type`).
    rows: Vec<i64>,
    targets: Vec<i64>,
}

type Drawn = (usize, usize, usize);

impl Inputs {
    fn random(
        seed: &mut u64,
        n: usize,
        degree: impl Fn(usize) -> usize,
        mut edge: impl FnMut(usize, usize, Option<Drawn>, &mut dyn FnMut() -> f32) -> Drawn,
    ) -> Inputs {
        let positions = 5;
        let layout = crate::forward::Layout::row_major(crate::FUSED / H);
        let mut random = || random(seed);
        let fused: Vec<f32> = (0..n * crate::FUSED).map(|_| random()).collect();
        let bias: Vec<f32> = (0..6 * H).map(|_| random() * 0.1).collect();
        let gates: Vec<f32> = (0..positions * H).map(|_| random() + 1.0).collect();
        let (mut crow, mut offsets, mut types, mut pos, mut rows, mut targets) = (vec![0i64], vec![], vec![], vec![], vec![], vec![]);
        let mut last = None;
        for v in 0..n {
            for k in 0..degree(v) {
                let (source, t, p) = edge(v, k, last, &mut random);
                last = Some((source, t, p));
                offsets.push(source * layout.row + t * layout.block);
                types.push(t as i64);
                pos.push(p as i64);
                rows.push((source * 9 + t) as i64);
                targets.push(v as i64);
            }
            crow.push(offsets.len() as i64);
        }
        Inputs { n, positions, layout, fused, bias, gates, crow, offsets, types, pos, rows, targets }
    }

    fn edges(&self, reduce: crate::forward::Reduce) -> crate::forward::Edges<'_> {
        crate::forward::Edges { crow: &self.crow, offsets: &self.offsets, types: &self.types, positions: &self.pos, reduce }
    }

    /// Edge `e`'s gated message in channel `j`, as the kernels compute it.
    fn message(&self, e: usize, j: usize) -> f32 {
        (self.fused[self.offsets[e] + j] + self.bias[self.types[e] as usize * H + j]) * self.gates[self.pos[e] as usize * H + j]
    }

    /// The reference backward of edge `e`, whose target's gradient it
    /// takes scaled by `share[j]` per channel: into `want_fused` (the
    /// message columns of its source's row) and `want_table`.
    fn add_backward(&self, e: usize, da: &[f32], share: impl Fn(usize) -> f64, want_fused: &mut [f64], want_table: &mut [f64]) {
        let t = self.targets[e] as usize;
        for j in 0..H {
            let s = share(j) * da[t * H + j] as f64;
            let (g, p) = (self.gates[self.pos[e] as usize * H + j] as f64, self.pos[e] as usize);
            want_fused[self.rows[e] as usize / 9 * crate::FUSED + self.types[e] as usize * H + j] += s * g;
            want_table[p * H + j] += s * (self.fused[self.offsets[e] + j] + self.bias[self.types[e] as usize * H + j]) as f64;
        }
    }

    /// `d_fused`'s message columns within 1e-5 and `d_table` within 1e-3
    /// (relative) of the reference.
    fn assert_backward(&self, isa: Isa, d_fused: &[f32], d_table: &[f32], want_fused: &[f64], want_table: &[f64]) {
        use crate::FUSED;
        for v in 0..self.n {
            for c in 0..6 * H {
                let (got, want) = (d_fused[v * FUSED + c] as f64, want_fused[v * FUSED + c]);
                assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "{isa}: d_fused[{v}, {c}] {got} against {want}");
            }
        }
        for (i, (&got, &want)) in d_table.iter().zip(want_table).enumerate() {
            assert!((got as f64 - want).abs() <= 1e-3 * (1.0 + want.abs()), "{isa}: d_table[{i}] {got} against {want}");
        }
    }
}

/// The portable path and the best this CPU runs.
fn two_paths() -> Vec<Isa> {
    let mut paths = vec![Isa::Portable];
    if cpu::detected() != Isa::Portable {
        paths.push(cpu::detected());
    }
    paths
}

/// The max aggregation on random edges (nodes without any, many with
/// several, equal messages included): each node's channel is the largest
/// of its gated messages, computed as the mean's kernels compute a
/// message; the recorded winner is the first edge that gives it; and the
/// backward sends each channel's gradient to that edge alone, through its
/// gate to the product's row and through its message to the gate table.
/// On the portable path and on the best this CPU runs.
#[test]
fn max_aggregation_takes_each_channels_largest_message_and_sends_back_to_it() {
    use crate::backward::{aggregate_backward, ByRow, EdgesBackward};
    use crate::forward::{aggregate, aggregate_max_tape, Reduce, NO_EDGE};
    use crate::FUSED;
    let mut seed = 0x5eed_u64;
    let x = Inputs::random(
        &mut seed,
        700,
        |v| (v * 5 + 2) % 7,
        |v, k, last, random| match last {
            // Every seventh node's second edge repeats its first: equal messages.
            Some(first) if k == 1 && v % 7 == 0 => first,
            _ => (
                ((random() + 1.0) / 2.0 * 700.0) as usize % 700,
                ((random() + 1.0) * 3.0) as usize % 6,
                ((random() + 1.0) * 2.5) as usize % 5,
            ),
        },
    );
    let n = x.n;
    let mut random = || random(&mut seed);
    let edges = x.edges(Reduce::Max);
    let da: Vec<f32> = (0..n * H).map(|_| random()).collect();
    let by_row = ByRow::new(&x.rows, n);
    for isa in two_paths() {
        cpu::with_cap(isa, || {
            for threads in [1, 3] {
                let (mut out, mut taped, mut winners) = (vec![f32::NAN; n * H], vec![f32::NAN; n * H], vec![0u32; n * H]);
                aggregate::<f32, f32>(&x.fused, &edges, &x.bias, &x.gates, &mut out, threads);
                aggregate_max_tape::<f32>(&x.fused, &edges, &x.bias, &x.gates, &mut taped, &mut winners, threads);
                assert_eq!(out, taped, "{isa}: the tape's forward is the forward");
                for v in 0..n {
                    let (start, end) = (x.crow[v] as usize, x.crow[v + 1] as usize);
                    for j in 0..H {
                        let w = winners[v * H + j];
                        if start == end {
                            assert_eq!((out[v * H + j], w), (0.0, NO_EDGE), "{isa}: node {v} has no edges");
                            continue;
                        }
                        let best = (start..end).map(|e| x.message(e, j)).fold(f32::NEG_INFINITY, f32::max);
                        let first = (start..end).find(|&e| x.message(e, j) == best).unwrap();
                        assert_eq!((out[v * H + j], w), (best, first as u32), "{isa}: node {v}, channel {j}");
                    }
                }
                // The backward: d_fused's message columns and the gate table's gradient.
                let (mut d_fused, mut d_table, mut bias_sums) = (vec![f32::NAN; n * FUSED], vec![0f32; x.positions * H], vec![0f32; 6 * H]);
                let reads = EdgesBackward {
                    da: &da,
                    inv_degree: &[],
                    fused: (&x.fused, x.layout),
                    bias: &x.bias,
                    gates: &x.gates,
                    targets: &x.targets,
                    positions: &x.pos,
                    by_row: &by_row,
                    winners: Some(&winners),
                    reduce: Reduce::Max,
                };
                aggregate_backward::<f32>(reads, &mut d_fused, &mut d_table, &mut bias_sums, threads);
                let (mut want_fused, mut want_table) = (vec![0f64; n * FUSED], vec![0f64; x.positions * H]);
                for e in 0..x.targets.len() {
                    let t = x.targets[e] as usize;
                    x.add_backward(e, &da, |j| (winners[t * H + j] == e as u32) as u8 as f64, &mut want_fused, &mut want_table);
                }
                x.assert_backward(isa, &d_fused, &d_table, &want_fused, &want_table);
                for c in 0..6 * H {
                    let want: f64 = (0..n).map(|v| want_fused[v * FUSED + c]).sum();
                    assert!((bias_sums[c] as f64 - want).abs() <= 1e-3 * (1.0 + want.abs()), "{isa}: bias sum {c}");
                }
            }
        });
    }
}

/// The mixed aggregation ([`crate::forward::Reduce::MeanMax`]) on random
/// edges of all six types: each node's channel is the mean of its gated
/// messages along forward edges plus the largest along backward ones (each
/// term zero without edges of its direction); the winners are backward
/// edges only; and the backward sends a forward edge `da / (forward
/// in-degree)` and a backward one its channels where it won. Checked
/// against a reference written from that definition, in f64, on the
/// portable path and on the best this CPU runs.
#[test]
fn mean_max_aggregation_averages_forward_edges_and_takes_the_largest_backward_one() {
    use crate::backward::{aggregate_backward, ByRow, EdgesBackward};
    use crate::forward::{aggregate, aggregate_max_tape, Reduce, NO_EDGE};
    use crate::FUSED;
    let mut seed = 0x3ea7_u64;
    // 0 to 6 edges; some nodes only forward, some only backward.
    let x = Inputs::random(
        &mut seed,
        600,
        |v| (v * 5 + 3) % 7,
        |v, k, _, random| {
            let t = match v % 5 {
                0 => k % 3,
                1 => 3 + k % 3,
                _ => ((random() + 1.0) * 3.0) as usize % 6,
            };
            let source = ((random() + 1.0) / 2.0 * 600.0) as usize % 600;
            (source, t, ((random() + 1.0) * 2.5) as usize % 5)
        },
    );
    let (n, crow, types) = (x.n, &x.crow, &x.types);
    let mut random = || random(&mut seed);
    let edges = x.edges(Reduce::MeanMax);
    let message = |e: usize, j: usize| x.message(e, j) as f64;
    let forward_degree = |v: usize| (crow[v] as usize..crow[v + 1] as usize).filter(|&e| types[e] < 3).count();
    let inv_degree: Vec<f32> = (0..n).map(|v| if forward_degree(v) == 0 { 0.0 } else { 1.0 / forward_degree(v) as f32 }).collect();
    let da: Vec<f32> = (0..n * H).map(|_| random()).collect();
    let by_row = ByRow::new(&x.rows, n);
    let (mut only_forward, mut only_backward, mut both) = (0, 0, 0);
    for v in 0..n {
        let (f, b) = (forward_degree(v), (crow[v + 1] - crow[v]) as usize - forward_degree(v));
        match (f > 0, b > 0) {
            (true, false) => only_forward += 1,
            (false, true) => only_backward += 1,
            (true, true) => both += 1,
            _ => {}
        }
    }
    assert!(only_forward > 50 && only_backward > 50 && both > 50, "the edges cover each case");
    for isa in two_paths() {
        cpu::with_cap(isa, || {
            for threads in [1, 3] {
                let (mut out, mut taped, mut winners) = (vec![f32::NAN; n * H], vec![f32::NAN; n * H], vec![0u32; n * H]);
                aggregate::<f32, f32>(&x.fused, &edges, &x.bias, &x.gates, &mut out, threads);
                aggregate_max_tape::<f32>(&x.fused, &edges, &x.bias, &x.gates, &mut taped, &mut winners, threads);
                assert_eq!(out, taped, "{isa}: the tape's forward is the forward");
                for v in 0..n {
                    let all = crow[v] as usize..crow[v + 1] as usize;
                    let fwd: Vec<usize> = all.clone().filter(|&e| types[e] < 3).collect();
                    let bwd: Vec<usize> = all.clone().filter(|&e| types[e] >= 3).collect();
                    for j in 0..H {
                        let mean = if fwd.is_empty() { 0.0 } else { fwd.iter().map(|&e| message(e, j)).sum::<f64>() / fwd.len() as f64 };
                        let (max, first) = match bwd.iter().map(|&e| message(e, j)).reduce(f64::max) {
                            None => (0.0, NO_EDGE),
                            Some(m) => (m, *bwd.iter().find(|&&e| message(e, j) == m).unwrap() as u32),
                        };
                        let got = out[v * H + j] as f64;
                        assert!(
                            (got - (mean + max)).abs() <= 1e-5 * (1.0 + (mean + max).abs()),
                            "{isa}: node {v}, channel {j}: {got} against {}",
                            mean + max
                        );
                        assert_eq!(winners[v * H + j], first, "{isa}: node {v}, channel {j}'s winner");
                    }
                }
                let (mut d_fused, mut d_table, mut bias_sums) = (vec![f32::NAN; n * FUSED], vec![0f32; x.positions * H], vec![0f32; 6 * H]);
                let reads = EdgesBackward {
                    da: &da,
                    inv_degree: &inv_degree,
                    fused: (&x.fused, x.layout),
                    bias: &x.bias,
                    gates: &x.gates,
                    targets: &x.targets,
                    positions: &x.pos,
                    by_row: &by_row,
                    winners: Some(&winners),
                    reduce: Reduce::MeanMax,
                };
                aggregate_backward::<f32>(reads, &mut d_fused, &mut d_table, &mut bias_sums, threads);
                let (mut want_fused, mut want_table) = (vec![0f64; n * FUSED], vec![0f64; x.positions * H]);
                for e in 0..x.targets.len() {
                    let t = x.targets[e] as usize;
                    let share = |j: usize| match types[e] < 3 {
                        true => 1.0 / forward_degree(t) as f64,
                        false => (winners[t * H + j] == e as u32) as u8 as f64,
                    };
                    x.add_backward(e, &da, share, &mut want_fused, &mut want_table);
                }
                x.assert_backward(isa, &d_fused, &d_table, &want_fused, &want_table);
            }
        });
    }
}
