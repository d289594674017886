//! `--dtype`: libtorch's matmul precision, set for the whole process (so
//! this file is its own test binary). BF16 is in effect exactly where the
//! CPU can run it: never on a CPU without AVX-512 or BF16 instructions
//! (AVX2-only machines), always where it has native BF16 (AVX512-BF16 or
//! AMX); a model's predictions and the hand-written training step's
//! gradients under it stay within BF16's rounding of the FP32 ones.

use programl::batch::{Batch, Sample};
use programl_model::{set_matmul_precision, Ggnn, Hyper, Precision, Prepared};
use tch::Device;

mod common;
use common::{cpu_flags, five_nodes, vocabulary};

#[test]
fn bf16_runs_where_the_cpu_has_it_and_predictions_stay_close() {
    assert_eq!("bf16".parse::<Precision>(), Ok(Precision::Bf16));
    assert!("f16".parse::<Precision>().unwrap_err().contains("f32, bf16, int8"));
    assert_eq!(set_matmul_precision(Precision::F32), Ok(Precision::F32));

    let vocab = vocabulary(&["br", "add", "ret", "i32"]);
    let input = five_nodes(&vocab);
    let positives = [[0u32, 1], [1, 2], [2, 3], [3, 4], [4, 0]];
    let samples: Vec<Sample<'_>> =
        (0..2000).map(|i| Sample { graph: &input, root: Some(i % 5), positives: Some(&positives[i as usize % 5]) }).collect();
    let batch = Batch::from_samples(&samples).unwrap();
    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(3);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let f32_logits = model.forward_inference(&prepared, 10);
    let f32_grads = model.loss_and_gradients(&prepared, 10, false, 1.0);

    let in_effect = set_matmul_precision(Precision::Bf16).unwrap();
    let flags = cpu_flags();
    let has = |f: &str| flags.iter().any(|x| x == f);
    if has("avx512_bf16") || has("amx_bf16") {
        assert_eq!(in_effect, Precision::Bf16, "the CPU has BF16 instructions");
    } else if !has("avx512f") {
        assert_eq!(in_effect, Precision::F32, "no AVX-512 and no BF16: libtorch keeps FP32");
    }
    let logits = model.forward_inference(&prepared, 10);
    let diff = (&logits - &f32_logits).abs().max().double_value(&[]);
    let scale = f32_logits.abs().max().double_value(&[]);
    let grads = model.loss_and_gradients(&prepared, 10, false, 1.0);
    // The largest relative difference of a gradient (by norm).
    let grad_diff = grads
        .grads
        .iter()
        .zip(&f32_grads.grads)
        .map(|(g, f)| (g - f).norm().double_value(&[]) / f.norm().double_value(&[]).max(1e-12))
        .fold(0.0, f64::max);
    eprintln!("precision {in_effect}: logits max diff {diff} of {scale}, gradients relative {grad_diff}");
    match in_effect {
        Precision::F32 => {
            assert_eq!(diff, 0.0, "FP32 in effect: the very same logits");
            assert_eq!(grad_diff, 0.0, "FP32 in effect: the very same gradients");
        }
        Precision::Bf16 => {
            assert!(diff > 0.0 && diff < 0.05 * scale, "BF16: logits within its rounding ({diff} of {scale})");
            assert!(grad_diff > 0.0 && grad_diff < 0.05, "BF16: gradients within its rounding (relative {grad_diff})");
        }
        Precision::Int8 => unreachable!("BF16 requested"),
    }
    // A batch of a module's size takes the hand-written products (where
    // the CPU has AVX512-BF16): the same rounding of the products'
    // operands and results as libtorch's BF16 path: as close to FP32 on
    // average.
    if in_effect == Precision::Bf16 {
        let small = Batch::from_samples(&samples[..200]).unwrap();
        let small = Prepared::new(&small, &hyper, Device::Cpu);
        let hand = model.forward_inference(&small, 10);
        let library = programl_model::with_library_products(|| model.forward_inference(&small, 10));
        let exact = f32_logits.narrow(0, 0, 1000);
        let off = |t: &tch::Tensor| {
            let d = (t - &exact).abs();
            (d.max().double_value(&[]), d.mean(tch::Kind::Double).double_value(&[]))
        };
        let ((hand_max, hand_mean), (library_max, library_mean)) = (off(&hand), off(&library));
        eprintln!(
            "1,000 nodes under BF16, difference from FP32 (largest, mean): hand-written products {hand_max}, {hand_mean}; libtorch's {library_max}, {library_mean}"
        );
        assert!(hand_max > 0.0 && hand_max < 0.05 * scale, "BF16 products move logits within its rounding ({hand_max})");
        assert!(
            hand_mean <= 1.1 * library_mean,
            "the hand-written BF16 products are farther from FP32 ({hand_mean}) than libtorch's ({library_mean})"
        );
    }
    assert_eq!(set_matmul_precision(Precision::F32), Ok(Precision::F32));
    assert!(model.forward_inference(&prepared, 10).equal(&f32_logits), "back to FP32: the FP32 logits again");
    assert!(model.loss_and_gradients(&prepared, 10, false, 1.0).loss.equal(&f32_grads.loss), "back to FP32: the FP32 loss again");
}
