//! The GGNN against computations written out by hand, and the bundle's
//! checks.

use programl::batch::{Batch, GraphInput, Sample};
use programl::graph::{Edge, Flow};
use programl_model::bundle::{self, Bundle, Config, Head, Provenance};
use programl_model::{sinusoids, Ggnn, GraphHead, Hyper, Pool, Prepared, HIDDEN};
use tch::{Device, Kind, Tensor};

mod common;
use common::{cpu_flags, five_nodes, vocabulary};

#[test]
fn parameter_count_matches_the_spec() {
    let hyper = Hyper::spec(2231);
    assert_eq!(hyper.parameter_count(), 87_070);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let total: i64 = model.vs.trainable_variables().iter().map(|t| t.numel() as i64).sum();
    assert_eq!(total, 87_070, "every parameter is trainable and nothing else is");
    assert_eq!(model.vs.variables().len(), 13);
}

#[test]
fn sinusoids_are_sin_then_cos_then_zero_padding() {
    let s = sinusoids(1024);
    assert_eq!(s.size(), [1024, 34]);
    let at = |k: i64, i: i64| s.double_value(&[k, i]);
    assert_eq!(at(0, 0), 0.0);
    assert_eq!(at(0, 16), 1.0);
    assert!((at(3, 0) - 3f64.sin()).abs() < 1e-6);
    // ω_1 = 10000^(-2/32)
    let w1 = 10000f64.powf(-2.0 / 32.0);
    assert!((at(5, 1) - (5.0 * w1).sin()).abs() < 1e-6);
    assert!((at(5, 17) - (5.0 * w1).cos()).abs() < 1e-6);
    assert_eq!((at(700, 32), at(700, 33)), (0.0, 0.0));
}

/// Weights uniform in [-0.5, 0.5), a function of the seed and each
/// parameter's name only. Not libtorch's global generator: the tests of this
/// file run on parallel threads that share it, and the store's parameter
/// order is a hash map's, so its draws would differ from run to run.
fn randomise(model: &Ggnn, seed: u64) {
    tch::no_grad(|| {
        for (name, t) in model.named_parameters() {
            let mut state = name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
            let values: Vec<f32> = (0..t.numel())
                .map(|_| {
                    // splitmix64
                    state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    z ^= z >> 31;
                    (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            t.shallow_clone().copy_(&Tensor::from_slice(&values).view(t.size().as_slice()));
        }
    });
}

/// One step, written out edge by edge with plain tensor ops: the slice of
/// the fused map for the edge's type, the gate row of its position, a sum per
/// target divided by the target's in-degree, and the GRU's equations.
#[test]
fn one_step_by_hand_matches_the_fast_path() {
    let vocab = vocabulary(&["br", "add", "ret", "i32"]); // "i64" is unknown
    let input = five_nodes(&vocab);
    let batch = Batch::from_samples(&[Sample { graph: &input, root: Some(1), positives: None }]).unwrap();
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 7);
    let p = |name: &str| model.named_parameters().into_iter().find(|(n, _)| *n == name).unwrap().1.shallow_clone();
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let _guard = tch::no_grad_guard();

    // h0: embedding row and selector.
    let h0 = model.initial_states(&prepared);
    let emb = p("embedding.weight");
    for (node, token) in [(0, vocab.id("br")), (3, vocab.id("i32")), (4, 0)] {
        let expect = Tensor::cat(&[emb.get(token as i64), Tensor::from_slice(&[50f32, 0.0])], 0);
        assert!(h0.get(node).allclose(&expect, 0.0, 0.0, false), "h0 of node {node}");
    }
    assert_eq!(Vec::<f32>::try_from(h0.get(1).narrow(0, 32, 2)).unwrap(), [0.0, 50.0], "the root's selector");

    // The gate of position k.
    let s = sinusoids(1024);
    let gate = |k: i64| (p("gate.weight").mv(&s.get(k)) + p("gate.bias")).sigmoid() * 2.0;
    let w = p("messages.weight");
    let b = p("messages.bias");
    let map = |t: i64, x: &Tensor| w.narrow(0, 34 * t, 34).mv(x) + b.narrow(0, 34 * t, 34);
    // (source, target, type, position): forward types 0..3, backward 3..6.
    let forward = [(0, 1, 0, 0), (1, 2, 0, 0), (3, 1, 1, 1), (4, 2, 1, 2), (2, 0, 2, 0)];
    let all: Vec<(i64, i64, i64, i64)> = forward.iter().copied().chain(forward.iter().map(|&(s, t, ty, k)| (t, s, ty + 3, k))).collect();
    let mut sums: Vec<Tensor> = (0..5).map(|_| Tensor::zeros([HIDDEN], (Kind::Float, Device::Cpu))).collect();
    let mut count = [0f64; 5];
    for &(src, tgt, ty, k) in &all {
        sums[tgt as usize] = &sums[tgt as usize] + map(ty, &h0.get(src)) * gate(k);
        count[tgt as usize] += 1.0;
    }
    let mean: Vec<Tensor> = sums.iter().zip(count).map(|(s, c)| s / c.max(1.0)).collect();
    let fast = model.messages(&prepared, &h0, &prepared.edge_gates(&model.gate_table()));
    for v in 0..5 {
        assert!(fast.get(v).allclose(&mean[v as usize], 1e-5, 1e-5, false), "mean message of node {v}");
    }

    // GRU: r, z, n gates, PyTorch's equations.
    let (wi, wh, bi, bh) = (p("gru.weight_ih"), p("gru.weight_hh"), p("gru.bias_ih"), p("gru.bias_hh"));
    let part = |t: &Tensor, i: i64| t.narrow(0, 34 * i, 34);
    let h1 = model.propagate(&prepared, &h0, 1, false);
    for v in 0..5i64 {
        let (x, h) = (&mean[v as usize], h0.get(v));
        let gi = |i| part(&wi, i).mv(x) + part(&bi, i);
        let gh = |i| part(&wh, i).mv(&h) + part(&bh, i);
        let r = (gi(0) + gh(0)).sigmoid();
        let z = (gi(1) + gh(1)).sigmoid();
        let n = (gi(2) + &r * gh(2)).tanh();
        let expect = (1.0 - &z) * n + &z * &h;
        assert!(h1.get(v).allclose(&expect, 1e-5, 1e-5, false), "h1 of node {v}");
    }

    // Readout: σ(f([h_T; h_0])) ⊙ g(h_T).
    let logits = model.readout(&h1, &h0);
    for v in 0..5i64 {
        let gate = (p("readout.gate.weight").mv(&Tensor::cat(&[h1.get(v), h0.get(v)], 0)) + p("readout.gate.bias")).sigmoid();
        let expect = gate * (p("readout.transform.weight").mv(&h1.get(v)) + p("readout.transform.bias"));
        assert!(logits.get(v).allclose(&expect, 1e-5, 1e-5, false), "logits of node {v}");
    }
}

/// A graph alone and the same graph inside a batch give the same logits.
#[test]
fn batching_does_not_change_a_graphs_logits() {
    let vocab = vocabulary(&["br", "add", "ret", "i32", "i64"]);
    let input = five_nodes(&vocab);
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 3);
    let _guard = tch::no_grad_guard();
    let alone = Batch::from_samples(&[Sample { graph: &input, root: Some(2), positives: None }]).unwrap();
    let many = Batch::from_samples(&[
        Sample { graph: &input, root: Some(0), positives: None },
        Sample { graph: &input, root: Some(2), positives: None },
        Sample { graph: &input, root: Some(4), positives: None },
    ])
    .unwrap();
    let a = model.forward(&Prepared::new(&alone, &hyper, Device::Cpu), 10, false);
    let b = model.forward(&Prepared::new(&many, &hyper, Device::Cpu), 10, false);
    assert!(a.allclose(&b.narrow(0, 5, 5), 1e-5, 1e-6, false));
    assert!(!a.allclose(&b.narrow(0, 0, 5), 1e-3, 1e-3, false), "the root changes the logits");
}

/// The inference arrangement (no autograd, biases folded, no allocation
/// per step) computes what the plain forward pass does: with every bias
/// non-zero, several roots in one batch, edges of every flow at several
/// positions, a node without incoming edges, and T from 0 to 40.
#[test]
fn inference_arrangement_equals_the_plain_forward_pass() {
    let vocab = vocabulary(&["br", "add", "ret", "i32", "i64"]);
    let input = five_nodes(&vocab);
    let e = |flow, position| Edge { flow, position };
    let lone = GraphInput::from_parts(
        ["add", "i32", "i64", "ret"],
        [(1, 0, e(Flow::Data, 0)), (2, 0, e(Flow::Data, 7)), (0, 3, e(Flow::Control, 0)), (3, 0, e(Flow::Call, 2))],
        &vocab,
    )
    .unwrap();
    let batch = Batch::from_samples(&[
        Sample { graph: &input, root: Some(0), positives: None },
        Sample { graph: &lone, root: Some(2), positives: None },
        Sample { graph: &input, root: Some(4), positives: None },
    ])
    .unwrap();
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 11);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    for steps in [0, 1, 2, 7, 40] {
        let plain = tch::no_grad(|| model.forward(&prepared, steps, false));
        let fast = model.forward_inference(&prepared, steps);
        let diff = (&plain - &fast).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "T = {steps}: logits differ by {diff}");
    }
    let graph = Hyper {
        classes: 3,
        graph: Some(GraphHead { aux: Vec::new(), aux_hidden: 8, pool: Pool::Mean, join: Default::default() }),
        ..Hyper::spec(vocab.len())
    };
    let model = Ggnn::new(&graph, Device::Cpu);
    randomise(&model, 12);
    let prepared = Prepared::new(&batch, &graph, Device::Cpu);
    let plain = tch::no_grad(|| model.pooled_logits(&prepared, 6, false));
    let fast = model.pooled_inference(&prepared, 6);
    assert_eq!(fast.size(), [3, 3]);
    assert!(plain.allclose(&fast, 1e-5, 1e-5, false), "{plain} {fast}");
}

/// Inference keeps its buffers from one call to the next and grows them
/// for a larger batch: one model, called on batches that shrink and grow
/// (past the first block's 2 MiB) and on a graph without edges, still
/// computes what the plain forward pass does, every time.
#[test]
fn inference_reuses_and_grows_its_workspace_without_changing_results() {
    let vocab = vocabulary(&["br", "add", "ret", "i32", "i64"]);
    let input = five_nodes(&vocab);
    let bare = GraphInput::from_parts(["ret"], [], &vocab).unwrap();
    let samples = |copies: usize| -> Vec<Sample> {
        (0..copies).map(|i| Sample { graph: &input, root: Some((i % 5) as u32), positives: None }).collect()
    };
    let (small, large) = (samples(2), samples(400));
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 13);
    let bare = [Sample { graph: &bare, root: Some(0), positives: None }];
    for batch in [&small[..], &large[..], &bare[..], &small[..], &large[..]] {
        let batch = Batch::from_samples(batch).unwrap();
        let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
        let plain = tch::no_grad(|| model.forward(&prepared, 5, false));
        let fast = model.forward_inference(&prepared, 5);
        assert_eq!(fast.size(), [batch.node_count() as i64, 2]);
        let diff = (&plain - &fast).abs().max().double_value(&[]);
        // A few units in the last place of the largest logit (~21 here).
        let scale = plain.abs().max().double_value(&[]).max(1.0);
        assert!(diff < 2e-6 * scale, "{} nodes: logits differ by {diff} (largest {scale})", batch.node_count());
    }
}

/// A graph head pools each graph's node logits: their sum, or with
/// `Pool::Mean` their mean; a config without `pool` means the sum.
#[test]
fn graph_heads_sum_or_average_each_graphs_node_logits() {
    let vocab = vocabulary(&["br", "add", "ret", "i32", "i64"]);
    let input = five_nodes(&vocab);
    let small = GraphInput::from_parts(["ret", "i32"], [(1, 0, Edge { flow: Flow::Data, position: 0 })], &vocab).unwrap();
    let batch = Batch::from_samples(&[
        Sample { graph: &input, root: None, positives: None },
        Sample { graph: &small, root: None, positives: None },
    ])
    .unwrap();
    let _guard = tch::no_grad_guard();
    for pool in [Pool::Sum, Pool::Mean] {
        let hyper = Hyper {
            classes: 3,
            graph: Some(GraphHead { aux: Vec::new(), aux_hidden: 8, pool, join: Default::default() }),
            ..Hyper::spec(vocab.len())
        };
        let model = Ggnn::new(&hyper, Device::Cpu);
        randomise(&model, 5);
        let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
        let nodes = model.forward(&prepared, 4, false);
        let pooled = model.pooled_logits(&prepared, 4, false);
        assert_eq!(pooled.size(), [2, 3]);
        let (a, b) =
            (nodes.narrow(0, 0, 5).sum_dim_intlist(0, false, Kind::Float), nodes.narrow(0, 5, 2).sum_dim_intlist(0, false, Kind::Float));
        let (a, b) = if pool == Pool::Mean { (a / 5.0, b / 2.0) } else { (a, b) };
        assert!(pooled.get(0).allclose(&a, 1e-5, 1e-6, false), "{pool:?}");
        assert!(pooled.get(1).allclose(&b, 1e-5, 1e-6, false), "{pool:?}");
        let json = serde_json::to_string(&hyper).unwrap();
        assert_eq!(json.contains("\"pool\":\"mean\""), pool == Pool::Mean, "{json}");
        let back: Hyper = serde_json::from_str(&json).unwrap();
        assert_eq!(back, hyper);
    }
}

#[test]
fn positions_beyond_the_table_are_clamped() {
    let vocab = vocabulary(&["a"]);
    let e = |position| Edge { flow: Flow::Data, position };
    let far = GraphInput::from_parts(["a", "a"], [(0, 1, e(5000))], &vocab).unwrap();
    let last = GraphInput::from_parts(["a", "a"], [(0, 1, e(1023))], &vocab).unwrap();
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 5);
    let run = |g: &GraphInput| {
        let b = Batch::from_samples(&[Sample { graph: g, root: Some(0), positives: None }]).unwrap();
        tch::no_grad(|| model.forward(&Prepared::new(&b, &hyper, Device::Cpu), 3, false))
    };
    assert!(run(&far).equal(&run(&last)));
}

fn config_for(hyper: &Hyper) -> Config {
    Config {
        format: bundle::FORMAT.into(),
        version: bundle::VERSION,
        task: "reachability".into(),
        head: Head::Node,
        classes: vec!["negative".into(), "positive".into()],
        hyper: hyper.clone(),
        provenance: Provenance {
            graph_mode: "paper".into(),
            llvm_major: 16,
            opaque_pointers: true,
            featurisation_version: programl::batch::LAYOUT_VERSION,
            training_data_hash: "0".into(),
            examples_seen: 0,
            wall_time_s: 0.0,
            dtype: "f32".into(),
            created_by: "test".into(),
            corpus: Vec::new(),
        },
        source: None,
        auto_dtype: None,
    }
}

#[test]
fn bundle_round_trips_and_reports_what_is_wrong() {
    let vocab = vocabulary(&["br", "add", "ret"]);
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 11);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model");
    Bundle::save(&path, &config_for(&hyper), &model, &vocab).unwrap();
    // Saving again replaces the bundle whole; no staging directory is left.
    Bundle::save(&path, &config_for(&hyper), &model, &vocab).unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let loaded = Bundle::load(&path, Device::Cpu).unwrap();
    for ((n, a), (_, b)) in model.named_parameters().into_iter().zip(loaded.model.named_parameters()) {
        assert!(a.equal(b), "{n}");
    }
    assert_eq!(loaded.vocabulary, vocab);
    assert_eq!(loaded.config, config_for(&hyper));

    let err = |f: &dyn Fn(&std::path::Path)| {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m");
        Bundle::save(&p, &config_for(&hyper), &model, &vocab).unwrap();
        f(&p);
        match Bundle::load(&p, Device::Cpu) {
            Ok(_) => panic!("loaded a broken bundle"),
            Err(e) => e.to_string(),
        }
    };
    let write_weights = |p: &std::path::Path, tensors: Vec<(String, Tensor)>| {
        Tensor::write_safetensors(&tensors, p.join(bundle::WEIGHTS_FILE)).unwrap();
    };
    let params = || model.named_parameters().into_iter().map(|(n, t)| (n.to_string(), t.copy())).collect::<Vec<_>>();

    let e = err(&|p| {
        let mut t = params();
        t[3].1 = Tensor::zeros([34, 33], (Kind::Float, Device::Cpu));
        write_weights(p, t);
    });
    assert!(e.contains("tensor 'gate.weight' has shape [34, 33], expected [34, 34]"), "{e}");
    let e = err(&|p| {
        let mut t = params();
        let _ = t.remove(5);
        t.push(("extra".into(), Tensor::zeros([1], (Kind::Float, Device::Cpu))));
        write_weights(p, t);
    });
    assert!(e.contains("missing tensor 'gru.weight_ih'") && e.contains("unexpected tensor 'extra'"), "{e}");
    let e = err(&|p| {
        let mut t = params();
        t[2].1 = t[2].1.to_kind(Kind::Double);
        write_weights(p, t);
    });
    assert!(e.contains("tensor 'messages.bias' is Double, expected Float"), "{e}");
    let e = err(&|p| {
        let w = p.join(bundle::WEIGHTS_FILE);
        let bytes = std::fs::read(&w).unwrap();
        std::fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
    });
    assert!(e.contains("weights.safetensors") && e.contains("not a safetensors file"), "{e}");
    let e = err(&|p| {
        let c = p.join(bundle::CONFIG_FILE);
        let text = std::fs::read_to_string(&c).unwrap().replace("\"version\": 1", "\"version\": 99");
        std::fs::write(&c, text).unwrap();
    });
    assert!(e.contains("config.json") && e.contains("version 99, expected 'programl-model' version 1"), "{e}");
    let e = err(&|p| vocabulary(&["br"]).save(p.join(bundle::VOCABULARY_FILE)).unwrap());
    assert!(e.contains("vocabulary has 2 ids") && e.contains("4 rows"), "{e}");
    let e = err(&|p| {
        let mut t = params();
        t[0].1 = t[0].1.fill(f64::NAN);
        write_weights(p, t);
    });
    assert!(e.contains("'embedding.weight' holds NaN"), "{e}");
    let e = err(&|p| std::fs::remove_file(p.join(bundle::CONFIG_FILE)).unwrap());
    assert!(e.contains("config.json") && e.contains("No such file"), "{e}");
    // A stopping rule, which programl-infer runs and this crate's GGNN
    // does not: refused by name, before any weight is read.
    {
        let (key, value, says) = ("stop", r#"{"tolerance": 0.001, "max_steps": 90}"#, "hyper.stop");
        let e = err(&|p| {
            let c = p.join(bundle::CONFIG_FILE);
            let text = std::fs::read_to_string(&c).unwrap().replacen("\"classes\": 2", &format!("\"classes\": 2, \"{key}\": {value}"), 1);
            std::fs::write(&c, text).unwrap();
        });
        assert!(e.contains("config.json") && e.contains(says) && e.contains("programl-infer"), "{key}: {e}");
    }
    // Another width loads, but not the 34-wide weights.
    let e = err(&|p| {
        let c = p.join(bundle::CONFIG_FILE);
        let text = std::fs::read_to_string(&c).unwrap().replacen("\"classes\": 2", "\"classes\": 2, \"hidden\": 66", 1);
        std::fs::write(&c, text).unwrap();
    });
    assert!(e.contains("weights.safetensors") && e.contains("'embedding.weight' has shape [4, 32], expected [4, 64]"), "{e}");
}

/// On the CPU, inference runs fused element-wise loops (`kernels.rs`)
/// split over the intra-op threads; they compute what libtorch's
/// operations do (the path other devices take), on a batch large enough to
/// be split, at 1, 2 and 3 threads, and the same logits again at a given
/// count (MKL's products may round differently from one count to another).
#[test]
fn fused_cpu_loops_match_libtorch_operations_at_any_thread_count() {
    let vocab = vocabulary(&["br", "add", "ret", "i32", "i64"]);
    let input = five_nodes(&vocab);
    let samples: Vec<Sample> = (0..1500).map(|i| Sample { graph: &input, root: Some((i % 5) as u32), positives: None }).collect();
    let batch = Batch::from_samples(&samples).unwrap();
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 21);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let before = tch::get_num_threads();
    for threads in [1, 2, 3] {
        tch::set_num_threads(threads);
        let fused = model.forward_inference_with(&prepared, 12, true);
        let torch = model.forward_inference_with(&prepared, 12, false);
        let diff = (&fused - &torch).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{threads} threads: fused and libtorch logits differ by {diff}");
        assert!(fused.equal(&model.forward_inference_with(&prepared, 12, true)), "{threads} threads: not deterministic");
        // The fused loops with libtorch's products (the path of CPUs
        // without AVX-512), whatever this CPU has.
        let library = programl_model::with_library_products(|| model.forward_inference_with(&prepared, 12, true));
        let diff = (&library - &torch).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{threads} threads: fused loops with libtorch's products differ by {diff}");
    }
    tch::set_num_threads(before);
    // The hand-written products run exactly where the CPU has AVX-512.
    let flags = cpu_flags();
    let has = |f: &str| flags.iter().any(|w| w == f);
    if cfg!(target_arch = "x86_64") && !flags.is_empty() {
        assert_eq!(programl_model::hand_products(false), has("avx512f"));
        assert_eq!(programl_model::hand_products(true), has("avx512f") && has("avx512_bf16"));
    }
}
