//! Bundles of other shapes than the shipped ones run without new kernels:
//! a state of any width (`hyper.hidden`) and adaptive depth (`hyper.stop`),
//! on the general step (FP32, and INT8 products). Checked against a plain f64 GGNN written out
//! here from SPEC.md §3 (itself checked against the shipped 34-wide bundle
//! on the specialised kernels), on real IR.

use std::collections::BTreeMap;
use std::path::Path;

use programl::batch::{Batch, EdgeType, GraphInput, Sample};
use programl_infer::config::{sinusoid_into, Aggregation, Hyper, Stop};
use programl_infer::{Dtype, Isa, Model, Options, Precision};

mod common;
use common::{graph_of, root};

/// A bundle's tensors, by name.
type Tensors = BTreeMap<String, (Vec<i64>, Vec<f32>)>;

fn read_tensors(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(n, v)| {
            let values = v.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            (n, (v.shape().iter().map(|&d| d as i64).collect(), values))
        })
        .collect()
}

/// A node-level bundle of `hyper`'s shape with seeded random weights (the
/// reachability bundle's vocabulary), written to a new directory; `gain`
/// scales the recurrent weights (below 1: dynamics that settle).
fn synthetic_with(hyper: &Hyper, seed: u64, gain: f32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let shipped = root().join("models/reachability");
    std::fs::copy(shipped.join("vocabulary.json"), dir.path().join("vocabulary.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(shipped.join("config.json")).unwrap()).unwrap();
    config["hyper"] = serde_json::to_value(hyper).unwrap();
    std::fs::write(dir.path().join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let mut state = seed | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let mut bytes = Vec::new();
    let mut shapes = Vec::new();
    for (name, shape) in hyper.tensor_shapes() {
        let count: i64 = shape.iter().product();
        // Xavier-like ranges, embeddings and biases of order one and 0.1.
        let scale = match shape.as_slice() {
            [_] => 0.1,
            _ if name == "embedding.weight" => 1.0,
            [rows, cols] if name.starts_with("gru.") || name.starts_with("messages.") => gain * (6.0 / (rows + cols) as f32).sqrt(),
            [rows, cols] => (6.0 / (rows + cols) as f32).sqrt(),
            _ => 1.0,
        };
        let values: Vec<f32> = (0..count).map(|_| uniform() * scale).collect();
        bytes.push(values.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        shapes.push((name.to_string(), shape.iter().map(|&d| d as usize).collect::<Vec<_>>()));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = shapes
        .iter()
        .zip(&bytes)
        .map(|((n, s), b)| (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("weights.safetensors")).unwrap();
    dir
}

fn synthetic(hyper: &Hyper, seed: u64) -> tempfile::TempDir {
    synthetic_with(hyper, seed, 1.0)
}

/// The GGNN of SPEC.md §3 in f64, straight from the tensors: per-node class
/// probabilities after `steps` steps (every graph the same T).
fn reference(hyper: &Hyper, tensors: &Tensors, batch: &Batch, steps: usize) -> Vec<f64> {
    let h = hyper.hidden as usize;
    let text = h - 2;
    let t = |name: &str| -> Vec<f64> { tensors[name].1.iter().map(|&x| x as f64).collect() };
    let (emb, wm, bm, gw, gb) = (t("embedding.weight"), t("messages.weight"), t("messages.bias"), t("gate.weight"), t("gate.bias"));
    let (wih, whh, bih, bhh) = (t("gru.weight_ih"), t("gru.weight_hh"), t("gru.bias_ih"), t("gru.bias_hh"));
    let (rgw, rgb, rtw, rtb) =
        (t("readout.gate.weight"), t("readout.gate.bias"), t("readout.transform.weight"), t("readout.transform.bias"));
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    // y = W x + b for W [rows, cols] row-major.
    let affine = |w: &[f64], b: Option<&[f64]>, x: &[f64], rows: usize| -> Vec<f64> {
        (0..rows).map(|r| b.map_or(0.0, |b| b[r]) + (0..x.len()).map(|c| w[r * x.len() + c] * x[c]).sum::<f64>()).collect()
    };
    let n = batch.node_count();
    let v = hyper.selector_value;
    let mut h0 = vec![vec![0f64; h]; n];
    for (i, row) in h0.iter_mut().enumerate() {
        let tok = batch.tokens()[i];
        let tok = if (0..hyper.vocab_size as i64).contains(&tok) { tok as usize } else { 0 };
        row[..text].copy_from_slice(&emb[tok * text..(tok + 1) * text]);
        let root = batch.selector()[i] != 0;
        row[text] = if root { 0.0 } else { v };
        row[text + 1] = if root { v } else { 0.0 };
    }
    let gate = |p: i64| -> Vec<f64> {
        let mut s = vec![0f32; h];
        sinusoid_into(p, &mut s);
        let s: Vec<f64> = s.iter().map(|&x| x as f64).collect();
        affine(&gw, Some(&gb), &s, h).into_iter().map(|x| 2.0 * sig(x)).collect()
    };
    let mut cur = h0.clone();
    for _ in 0..steps {
        let max = hyper.aggregation == Aggregation::Max;
        let mut acc = vec![vec![if max { f64::NEG_INFINITY } else { 0.0 }; h]; n];
        let mut deg = vec![0usize; n];
        // Under mean-max: the backward edges' maximum, beside the forward
        // edges' sum in `acc` and their count in `deg`.
        let mixed = hyper.aggregation == Aggregation::MeanMax;
        let mut back: Vec<Option<Vec<f64>>> = vec![None; n];
        for ty in EdgeType::ALL {
            let e = batch.edges(ty);
            let k = ty as usize;
            for i in 0..e.len() {
                let (u, w) = (e.sources[i] as usize, e.targets[i] as usize);
                let msg = affine(&wm[k * h * h..(k + 1) * h * h], Some(&bm[k * h..(k + 1) * h]), &cur[u], h);
                let g = gate(e.positions[i].clamp(0, hyper.positions - 1));
                if mixed && ty.is_backward() {
                    let b = back[w].get_or_insert_with(|| vec![f64::NEG_INFINITY; h]);
                    for j in 0..h {
                        b[j] = b[j].max(msg[j] * g[j]);
                    }
                    continue;
                }
                for j in 0..h {
                    if max {
                        acc[w][j] = acc[w][j].max(msg[j] * g[j]);
                    } else {
                        acc[w][j] += msg[j] * g[j];
                    }
                }
                deg[w] += 1;
            }
        }
        cur = (0..n)
            .map(|i| {
                let sum = !matches!(hyper.aggregation, Aggregation::Mean | Aggregation::MeanMax);
                let m: Vec<f64> = acc[i]
                    .iter()
                    .enumerate()
                    .map(|(j, x)| {
                        let most = back[i].as_ref().map_or(0.0, |b| b[j]);
                        most + if deg[i] == 0 {
                            0.0
                        } else if sum {
                            *x
                        } else {
                            x / deg[i] as f64
                        }
                    })
                    .collect();
                let gi = affine(&wih, Some(&bih), &m, 3 * h);
                let gh = affine(&whh, Some(&bhh), &cur[i], 3 * h);
                (0..h)
                    .map(|j| {
                        let r = sig(gi[j] + gh[j]);
                        let z = sig(gi[h + j] + gh[h + j]);
                        let nn = (gi[2 * h + j] + r * gh[2 * h + j]).tanh();
                        (1.0 - z) * nn + z * cur[i][j]
                    })
                    .collect()
            })
            .collect();
    }
    let c = hyper.classes as usize;
    let mut out = Vec::with_capacity(n * c);
    for i in 0..n {
        let both: Vec<f64> = cur[i].iter().chain(&h0[i]).copied().collect();
        let g = affine(&rgw, Some(&rgb), &both, c);
        let val = affine(&rtw, Some(&rtb), &cur[i], c);
        let logits: Vec<f64> = (0..c).map(|k| sig(g[k]) * val[k]).collect();
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = logits.iter().map(|x| (x - max).exp()).sum();
        out.extend(logits.iter().map(|x| (x - max).exp() / sum));
    }
    out
}

fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (*x as f64 - y).abs()).fold(0.0, f64::max)
}

fn fp32(steps: Option<i64>) -> Options {
    Options { steps, threads: 1, dtype: Dtype::F32, isa: None }
}

/// A random bundle of `hyper` (kept in the returned directory), opened,
/// with its tensors and the batch of [`inputs`] in its vocabulary.
fn synthetic_on_real_ir(hyper: &Hyper, seed: u64) -> (tempfile::TempDir, Model, Tensors, Batch) {
    let dir = synthetic(hyper, seed);
    let model = Model::open(dir.path()).unwrap();
    let tensors = read_tensors(&dir.path().join("weights.safetensors"));
    let inputs = inputs(&model.vocabulary);
    let batch = batch_of(&inputs);
    (dir, model, tensors, batch)
}

/// Three roots of a real C++ unit and one of a C one, as a batch.
fn inputs(vocabulary: &programl::vocab::Vocabulary) -> Vec<GraphInput> {
    let cpp = graph_of("llvm-tests/Inputs/infer/sort.cpp", &["-O1"]);
    let c = graph_of("examples/hello.c", &["-O0"]);
    [&cpp, &cpp, &c].iter().map(|g| GraphInput::new(g, vocabulary).unwrap()).collect()
}

fn batch_of<'a>(inputs: &'a [GraphInput]) -> Batch {
    let samples: Vec<Sample<'a>> = inputs
        .iter()
        .enumerate()
        .map(|(i, g)| Sample { graph: g, root: Some((i as u32 * 11) % g.node_count() as u32), positives: None })
        .collect();
    Batch::from_samples(&samples).unwrap()
}

/// The reference is the GGNN the shipped bundles compute: on the shipped
/// reachability bundle (34 wide, the specialised kernels), within 1e-4.
#[test]
fn the_reference_is_the_shipped_models_arithmetic() {
    let dir = root().join("models/reachability");
    let model = Model::open(&dir).unwrap();
    let tensors = read_tensors(&dir.join("weights.safetensors"));
    let inputs = inputs(&model.vocabulary);
    let batch = batch_of(&inputs);
    let got = model.node_probabilities(&batch, &fp32(Some(6))).unwrap();
    let want = reference(&model.config.hyper, &tensors, &batch, 6);
    let d = max_diff(&got.probabilities, &want);
    assert!(d < 1e-4, "shipped reachability against the reference: {d}");
}

/// States 18 and 66 wide run on the general step at 1 and 2 threads and
/// on every path the CPU runs: FP32 within 1e-4 of the reference, INT8
/// (its products, `programl_kernels::int8::any`) within INT8's bound, as
/// the 34-wide INT8 step's (0.05), and the two not the same numbers.
#[test]
fn any_width_runs_and_matches_the_reference() {
    for (hidden, seed) in [(18i64, 7u64), (66, 11)] {
        let hyper = Hyper { hidden, steps: 8, ..Hyper::spec(0) };
        let vocab = programl::vocab::Vocabulary::load(root().join("models/reachability/vocabulary.json")).unwrap();
        let hyper = Hyper { vocab_size: vocab.len(), ..hyper };
        let (_dir, model, tensors, batch) = synthetic_on_real_ir(&hyper, seed);
        let want = reference(&hyper, &tensors, &batch, 8);
        let spread = want.chunks_exact(2).map(|p| p[1]).fold((1f64, 0f64), |(lo, hi), p| (lo.min(p), hi.max(p)));
        assert!(spread.1 - spread.0 > 0.01, "hidden {hidden}: the random model's probabilities barely vary ({spread:?})");
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Vnni] {
            if !programl_infer::cpu::run_test_on(isa, &format!("any_width_runs_and_matches_the_reference [{hidden} {isa}]")) {
                continue;
            }
            for threads in [1, 2] {
                let opts = Options { steps: None, threads, dtype: Dtype::F32, isa: Some(isa) };
                let got = model.node_probabilities(&batch, &opts).unwrap();
                assert_eq!((got.precision, got.steps, got.steps_per_graph.clone()), (Precision::F32, 8, vec![8; 3]), "hidden {hidden}");
                let d = max_diff(&got.probabilities, &want);
                assert!(d < 1e-4, "hidden {hidden}, {isa}, {threads} threads: {d} from the reference");
                let int8 = model.node_probabilities(&batch, &Options { dtype: Dtype::Int8, ..opts }).unwrap();
                assert_eq!((int8.precision, int8.steps), (Precision::Int8, 8), "hidden {hidden}, {isa}: an int8 request");
                let d = max_diff(&int8.probabilities, &want);
                assert!(d < 0.05, "hidden {hidden}, {isa}, {threads} threads, INT8: {d} from the reference");
                assert!(int8.probabilities != got.probabilities, "hidden {hidden}, {isa}: INT8 gave FP32's numbers");
            }
        }
    }
}

/// Summed and max messages (`hyper.aggregation: sum|max`) on the 34-wide
/// kernels and on the general step (18 wide), FP32, on every path the CPU
/// runs: within 1e-4 of the reference, and not the mean's probabilities.
/// A max bundle asked for INT8 runs INT8 products on both steps (the
/// 34-wide kernels' max of whole messages; the general step's FP32 max of
/// its INT8 products' messages), within INT8's bound of the reference.
#[test]
fn summed_and_max_messages_match_the_reference_on_both_steps() {
    let vocab = programl::vocab::Vocabulary::load(root().join("models/reachability/vocabulary.json")).unwrap();
    for aggregation in [Aggregation::Sum, Aggregation::Max, Aggregation::MeanMax] {
        for (hidden, seed) in [(34i64, 5u64), (18, 9)] {
            let hyper = Hyper { hidden, steps: 8, vocab_size: vocab.len(), aggregation, ..Hyper::spec(0) };
            let (_dir, model, tensors, batch) = synthetic_on_real_ir(&hyper, seed);
            let want = reference(&hyper, &tensors, &batch, 8);
            let as_mean = reference(&Hyper { aggregation: Aggregation::Mean, ..hyper.clone() }, &tensors, &batch, 8);
            let apart = want.iter().zip(&as_mean).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            assert!(apart > 1e-3, "{aggregation:?}, hidden {hidden}: the reference is the mean's ({apart})");
            for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
                let case = format!("summed_and_max_messages_match_the_reference_on_both_steps [{aggregation:?} {hidden} {isa}]");
                if !programl_infer::cpu::run_test_on(isa, &case) {
                    continue;
                }
                let got =
                    model.node_probabilities(&batch, &Options { steps: None, threads: 2, dtype: Dtype::F32, isa: Some(isa) }).unwrap();
                let d = max_diff(&got.probabilities, &want);
                assert!(d < 1e-4, "{aggregation:?}, hidden {hidden}, {isa}: {d} from the reference");
                if aggregation != Aggregation::Sum {
                    let int8 =
                        model.node_probabilities(&batch, &Options { steps: None, threads: 2, dtype: Dtype::Int8, isa: Some(isa) }).unwrap();
                    assert_eq!(
                        int8.precision,
                        Precision::Int8,
                        "{aggregation:?}, hidden {hidden}, {isa}: the precision of an int8 request"
                    );
                    let d = max_diff(&int8.probabilities, &want);
                    assert!(d < 0.05, "{aggregation:?}, hidden {hidden}, {isa}, INT8: {d} from the reference");
                }
            }
        }
    }
}

/// Adaptive depth (FP32 and INT8): each graph stops when its states stop moving (within
/// the tolerance), at most `max_steps`; a graph's probabilities and step
/// count are those of the same graph alone, and those of a fixed run of
/// that many steps, bit for bit; a zero tolerance runs the cap.
#[test]
fn adaptive_depth_stops_each_graph_at_its_fixed_point() {
    let vocab = programl::vocab::Vocabulary::load(root().join("models/reachability/vocabulary.json")).unwrap();
    let stop = Stop { tolerance: 1e-3, max_steps: 60 };
    let hyper = Hyper { hidden: 18, steps: 8, stop: Some(stop), ..Hyper::spec(vocab.len()) };
    let dir = synthetic_with(&hyper, 3, 0.3);
    let model = Model::open(dir.path()).unwrap();
    let inputs = inputs(&model.vocabulary);
    let batch = batch_of(&inputs);
    let bits = |p: &[f32]| p.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let offsets = batch.offsets().to_vec();
    // FP32 and the general step's INT8 products alike (their quantisation
    // is per node, so a graph's arithmetic is its own in any batch).
    for dtype in [Dtype::F32, Dtype::Int8] {
        let opts = |steps: Option<i64>| Options { steps, threads: 1, dtype, isa: None };
        let got = model.node_probabilities(&batch, &opts(None)).unwrap();
        eprintln!("{dtype}: steps per graph: {:?}", got.steps_per_graph);
        assert_eq!(got.steps_per_graph.len(), 3);
        assert!(got.steps_per_graph.iter().all(|&s| (1..60).contains(&s)), "{dtype}: {:?}: none converged", got.steps_per_graph);
        assert_eq!(got.steps, *got.steps_per_graph.iter().max().unwrap());
        for (g, input) in inputs.iter().enumerate() {
            let rows = offsets[g] as usize * 2..offsets[g + 1] as usize * 2;
            let root = Some((g as u32 * 11) % input.node_count() as u32);
            let alone = Batch::from_samples(&[Sample { graph: input, root, positives: None }]).unwrap();
            let one = model.node_probabilities(&alone, &opts(None)).unwrap();
            assert_eq!(one.steps_per_graph, vec![got.steps_per_graph[g]], "{dtype}, graph {g}: steps alone");
            assert_eq!(bits(&one.probabilities), bits(&got.probabilities[rows.clone()]), "{dtype}, graph {g} alone");
            let fixed = model.node_probabilities(&alone, &opts(Some(got.steps_per_graph[g]))).unwrap();
            assert_eq!(bits(&fixed.probabilities), bits(&one.probabilities), "{dtype}, graph {g}: a fixed run of its steps");
        }
    }
    let got = model.node_probabilities(&batch, &fp32(None)).unwrap();
    // `steps` caps the rule: no graph runs more, one that stops earlier
    // still stops where it did.
    let least = *got.steps_per_graph.iter().min().unwrap();
    let cap = least + 1;
    let capped = model.node_probabilities(&batch, &fp32(Some(cap))).unwrap();
    let want: Vec<i64> = got.steps_per_graph.iter().map(|&s| s.min(cap)).collect();
    assert_eq!(capped.steps_per_graph, want, "capped at {cap}");
    // The tolerance decides: zero runs the cap.
    let strict = Hyper { stop: Some(Stop { tolerance: 0.0, max_steps: 12 }), ..hyper.clone() };
    let dir = synthetic_with(&strict, 3, 0.3);
    let model = Model::open(dir.path()).unwrap();
    let got = model.node_probabilities(&batch, &fp32(None)).unwrap();
    assert_eq!(got.steps_per_graph, vec![12; 3]);
}

/// Adaptive depth on the 34-wide kernels, at FP32, BF16 (where the CPU has
/// it) and INT8, on every path the CPU runs, with the mean and the max:
/// each graph stops at its own fixed point, its probabilities and step
/// count are those of the graph alone and those of a fixed run of that many
/// steps, bit for bit, and FP32's are within 1e-4 of the reference at that
/// many steps (INT8's within its bound of 0.05).
#[test]
fn adaptive_depth_runs_on_the_34_wide_kernels_at_every_precision() {
    let vocab = programl::vocab::Vocabulary::load(root().join("models/reachability/vocabulary.json")).unwrap();
    let inputs = inputs(&vocab);
    let batch = batch_of(&inputs);
    let offsets = batch.offsets().to_vec();
    let bits = |p: &[f32]| p.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // Cases whose graphs stopped at different steps: those where a graph
    // done early is carried through the others' steps.
    let mut staggered = 0;
    for aggregation in [Aggregation::Mean, Aggregation::Max, Aggregation::MeanMax] {
        let stop = Stop { tolerance: 1e-3, max_steps: 60 };
        let hyper = Hyper { stop: Some(stop), aggregation, ..Hyper::spec(vocab.len()) };
        let dir = synthetic_with(&hyper, 5, 0.6);
        let model = Model::open(dir.path()).unwrap();
        let tensors = read_tensors(&dir.path().join("weights.safetensors"));
        for isa in [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Vnni] {
            let case = format!("adaptive_depth_runs_on_the_34_wide_kernels_at_every_precision [{aggregation:?} {isa}]");
            if !programl_infer::cpu::run_test_on(isa, &case) {
                continue;
            }
            for (dtype, bound) in [(Dtype::F32, 1e-4), (Dtype::Bf16, 0.05), (Dtype::Int8, 0.05)] {
                let what = format!("{aggregation:?}, {isa}, {dtype}");
                let opts = |steps: Option<i64>| Options { steps, threads: 2, dtype, isa: Some(isa) };
                let got = model.node_probabilities(&batch, &opts(None)).unwrap();
                let want = match dtype {
                    Dtype::Bf16 if !programl_infer::cpu::with_cap(isa, programl_infer::cpu::bf16) => Precision::F32,
                    Dtype::Bf16 => Precision::Bf16,
                    Dtype::Int8 => Precision::Int8,
                    _ => Precision::F32,
                };
                assert_eq!(got.precision, want, "{what}: the precision");
                eprintln!("{what}: steps per graph {:?}", got.steps_per_graph);
                assert!(got.steps_per_graph.iter().all(|&s| (1..60).contains(&s)), "{what}: {:?}, none converged", got.steps_per_graph);
                staggered += got.steps_per_graph.iter().any(|&s| s != got.steps_per_graph[0]) as usize;
                for (g, input) in inputs.iter().enumerate() {
                    let rows = offsets[g] as usize * 2..offsets[g + 1] as usize * 2;
                    let root = Some((g as u32 * 11) % input.node_count() as u32);
                    let alone = Batch::from_samples(&[Sample { graph: input, root, positives: None }]).unwrap();
                    let one = model.node_probabilities(&alone, &opts(None)).unwrap();
                    let steps = got.steps_per_graph[g];
                    assert_eq!(one.steps_per_graph, vec![steps], "{what}, graph {g}: steps alone");
                    assert_eq!(bits(&one.probabilities), bits(&got.probabilities[rows.clone()]), "{what}, graph {g} alone");
                    let fixed = Model::open_with(dir.path(), |c| c.hyper.stop = None).unwrap();
                    let fixed = fixed.node_probabilities(&alone, &opts(Some(steps))).unwrap();
                    assert_eq!(bits(&fixed.probabilities), bits(&one.probabilities), "{what}, graph {g}: a fixed run of {steps} steps");
                    let d = max_diff(&one.probabilities, &reference(&hyper, &tensors, &alone, steps as usize));
                    assert!(d < bound, "{what}, graph {g}: {d} from the reference at {steps} steps");
                }
            }
        }
    }
    assert!(staggered > 0, "no case stopped its graphs at different steps: the test checks no graph carried past its stop");
}

/// How many times a batch of graphs of `sizes` nodes that ran `steps`
/// each was compacted, under the rule of `depth.rs`: after a step, once
/// the graphs done hold a quarter of the nodes of the batch being run
/// while another still runs, the graphs still running become the batch.
fn compactions(sizes: &[usize], steps: &[i64]) -> usize {
    let mut batch: Vec<usize> = (0..sizes.len()).collect();
    let mut count = 0;
    for s in 1..*steps.iter().max().unwrap() {
        let total: usize = batch.iter().map(|&g| sizes[g]).sum();
        let done: usize = batch.iter().filter(|&&g| steps[g] <= s).map(|&g| sizes[g]).sum();
        if done > 0 && 4 * done >= total {
            batch.retain(|&g| steps[g] > s);
            count += 1;
        }
    }
    count
}

/// Once the graphs done hold a quarter of a batch's nodes, the graphs
/// still running go on as a batch of their own (a graph done early costs
/// no more steps): at FP32, BF16 and INT8, on every path the CPU runs,
/// each graph's probabilities and steps are still those of the graph
/// alone, bit for bit, including after a second compaction.
#[test]
fn a_batch_whose_graphs_stop_apart_is_compacted_exactly() {
    let vocab = programl::vocab::Vocabulary::load(root().join("models/reachability/vocabulary.json")).unwrap();
    let graphs = [
        graph_of("examples/hello.c", &["-O0"]),
        graph_of("llvm-tests/Inputs/infer/sort.cpp", &["-O1"]),
        graph_of("llvm-tests/Inputs/infer/prog.c", &["-O0"]),
        graph_of("llvm-tests/Inputs/infer/main.c", &["-O2"]),
        graph_of("llvm-tests/Inputs/infer/sort.cpp", &["-O0"]),
    ];
    let inputs: Vec<GraphInput> = graphs.iter().chain(&graphs).map(|g| GraphInput::new(g, &vocab).unwrap()).collect();
    let batch = batch_of(&inputs);
    let sizes: Vec<usize> = inputs.iter().map(|g| g.node_count()).collect();
    let offsets = batch.offsets().to_vec();
    let bits = |p: &[f32]| p.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    // Weights that contract slowly enough for the graphs to stop apart.
    let hyper = Hyper { stop: Some(Stop { tolerance: 1e-3, max_steps: 300 }), aggregation: Aggregation::Max, ..Hyper::spec(vocab.len()) };
    let dir = synthetic_with(&hyper, 5, 0.9);
    let mut twice = 0;
    let model = Model::open(dir.path()).unwrap();
    for isa in [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Vnni] {
        let case = format!("a_batch_whose_graphs_stop_apart_is_compacted_exactly [{isa}]");
        if !programl_infer::cpu::run_test_on(isa, &case) {
            continue;
        }
        for dtype in [Dtype::F32, Dtype::Bf16, Dtype::Int8] {
            let what = format!("{isa}, {dtype}");
            let opts = Options { steps: None, threads: 2, dtype, isa: Some(isa) };
            let got = model.node_probabilities(&batch, &opts).unwrap();
            eprintln!("{what}: sizes {sizes:?}, steps per graph {:?}", got.steps_per_graph);
            let times = compactions(&sizes, &got.steps_per_graph);
            assert!(times > 0, "{what}: {:?}: the batch was never compacted", got.steps_per_graph);
            twice += (times > 1) as usize;
            for (g, input) in inputs.iter().enumerate() {
                let rows = offsets[g] as usize * 2..offsets[g + 1] as usize * 2;
                let root = Some((g as u32 * 11) % input.node_count() as u32);
                let alone = Batch::from_samples(&[Sample { graph: input, root, positives: None }]).unwrap();
                let one = model.node_probabilities(&alone, &opts).unwrap();
                assert_eq!(one.steps_per_graph, vec![got.steps_per_graph[g]], "{what}, graph {g}: steps alone");
                assert_eq!(bits(&one.probabilities), bits(&got.probabilities[rows]), "{what}, graph {g}: alone");
            }
        }
    }
    assert!(twice > 0, "no case compacted a batch twice");
}

/// A bundle whose config says `auto_dtype: f32` (dominance-adaptive's:
/// INT8 measured outside its bound there) runs FP32 at `auto` on every
/// path, an explicit INT8 request still INT8; without it, `auto` is the
/// rule for every bundle.
#[test]
fn a_bundle_can_keep_auto_at_fp32() {
    let vocab = programl::vocab::Vocabulary::load(root().join("models/reachability/vocabulary.json")).unwrap();
    let inputs = inputs(&vocab);
    let batch = batch_of(&inputs);
    let hyper = Hyper { stop: Some(Stop { tolerance: 1e-3, max_steps: 60 }), aggregation: Aggregation::Max, ..Hyper::spec(vocab.len()) };
    let dir = synthetic_with(&hyper, 5, 0.6);
    let plain = Model::open(dir.path()).unwrap();
    let kept = Model::open_with(dir.path(), |c| c.auto_dtype = Some(programl_infer::bundle::AutoDtype::F32)).unwrap();
    for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Vnni] {
        if !programl_infer::cpu::run_test_on(isa, &format!("a_bundle_can_keep_auto_at_fp32 [{isa}]")) {
            continue;
        }
        let opts = |dtype| Options { steps: None, threads: 1, dtype, isa: Some(isa) };
        let rule = programl_infer::cpu::with_cap(isa, || Model::precision_for(Dtype::Auto));
        assert_eq!(plain.node_probabilities(&batch, &opts(Dtype::Auto)).unwrap().precision, rule, "{isa}: without auto_dtype");
        let auto = kept.node_probabilities(&batch, &opts(Dtype::Auto)).unwrap();
        let f32 = kept.node_probabilities(&batch, &opts(Dtype::F32)).unwrap();
        assert_eq!(auto.precision, Precision::F32, "{isa}: auto_dtype f32");
        assert_eq!(auto.probabilities, f32.probabilities, "{isa}: auto is FP32's result");
        assert_eq!(kept.node_probabilities(&batch, &opts(Dtype::Int8)).unwrap().precision, Precision::Int8, "{isa}: an int8 request");
    }
    // It is read from config.json, and written back only where set.
    let text = std::fs::read_to_string(dir.path().join("config.json")).unwrap();
    assert!(!text.contains("auto_dtype"));
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config["auto_dtype"] = "f32".into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    assert_eq!(Model::open(dir.path()).unwrap().config.auto_dtype, Some(programl_infer::bundle::AutoDtype::F32));
    config["auto_dtype"] = "int4".into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let err = Model::open(dir.path()).err().expect("an unknown auto_dtype is an error").to_string();
    assert!(err.contains("config.json") && err.contains("int4"), "{err}");
}

/// Shapes a bundle cannot have are one error naming config.json.
#[test]
fn a_bad_width_or_stopping_rule_is_an_error_naming_the_config() {
    let vocab = programl::vocab::Vocabulary::load(root().join("models/reachability/vocabulary.json")).unwrap();
    let good = Hyper { hidden: 18, ..Hyper::spec(vocab.len()) };
    for (edit, says) in [
        (serde_json::json!({"hidden": 17}), "hyper.hidden 17 is not an even width"),
        (serde_json::json!({"hidden": 2}), "hyper.hidden 2 is not an even width"),
        (serde_json::json!({"hidden": 100000}), "hyper.hidden 100000"),
        (serde_json::json!({"stop": {"tolerance": -1.0, "max_steps": 5}}), "hyper.stop.tolerance -1"),
        (serde_json::json!({"stop": {"tolerance": 0.1, "max_steps": 0}}), "hyper.stop.max_steps 0"),
        (serde_json::json!({"stop": {"tolerance": 0.1}}), "max_steps"),
    ] {
        let dir = synthetic(&good, 1);
        let path = dir.path().join("config.json");
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (k, v) in edit.as_object().unwrap() {
            config["hyper"][k] = v.clone();
        }
        std::fs::write(&path, config.to_string()).unwrap();
        let e = match Model::open(dir.path()) {
            Ok(_) => panic!("{edit} opened"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("config.json") && e.contains(says), "{edit}: {e}");
    }
    // A graph head whose auxiliary inputs join a state it does not pool,
    // or that has no auxiliary inputs to join.
    for graph in [
        serde_json::json!({"aux": ["transfer"], "aux_hidden": 4, "pool": "mean", "join": "state"}),
        serde_json::json!({"aux": [], "aux_hidden": 4, "pool": "gated", "join": "state"}),
    ] {
        let dir = synthetic(&good, 1);
        let path = dir.path().join("config.json");
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config["head"] = serde_json::json!("graph");
        config["hyper"]["graph"] = graph.clone();
        std::fs::write(&path, config.to_string()).unwrap();
        let e = match Model::open(dir.path()) {
            Ok(_) => panic!("{graph} opened"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("config.json") && e.contains("hyper.graph.join \"state\" needs pool \"gated\""), "{graph}: {e}");
    }
    // Weights of another width than the config's: one error naming them.
    let dir = synthetic(&good, 1);
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["hyper"]["hidden"] = serde_json::json!(20);
    std::fs::write(&path, config.to_string()).unwrap();
    let e = match Model::open(dir.path()) {
        Ok(_) => panic!("18-wide weights opened as 20"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("weights.safetensors") && e.contains("expected [20, 20]"), "{e}");
}
