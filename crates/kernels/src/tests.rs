//! The crate's own tests: threads, dropout, the element functions.

use crate::cpu::{self, Isa};
use crate::dropout::*;
use crate::elem::*;
use crate::threads::*;
use crate::H;


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
    let other = draw(8, 1);
    assert!(one.iter().zip(&other).filter(|(a, b)| a != b).count() > rows, "another seed, another mask");
}

/// The vector mask is the scalar one bit for bit, at every length of
/// a tail and from any first pair (AVX-512DQ CPUs; elsewhere `SKIP:`, and
/// the scalar loop is all there is).
#[test]
fn dropout_mask_vector_is_the_scalar_mask() {
    #[cfg(target_arch = "x86_64")]
    if cpu::run_test_on(Isa::Avx512, "dropout_mask_vector_is_the_scalar_mask") && cpu::run_test_with("avx512dq", "dropout_mask_vector_is_the_scalar_mask") {
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
        if want < 1e-37 || want > 1e38 {
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
