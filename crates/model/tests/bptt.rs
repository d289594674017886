//! The hand-written backward ([`Ggnn::loss_and_gradients`]) against
//! autograd through [`Ggnn::forward`]: the same loss and the same gradient
//! of every parameter, without dropout and with it (one seed gives both the
//! same masks).

use programl::batch::{Batch, GraphInput, Sample, SplitMix64};
use programl::graph::{Edge, Flow};
use programl::vocab::{Counts, Vocabulary};
use programl_model::{Ggnn, Hyper, Prepared, Tape, TrainStep, Until};
use tch::{Device, Tensor};

fn vocabulary(texts: &[String]) -> Vocabulary {
    let mut counts = Counts::default();
    for t in texts {
        *counts.texts.entry(t.clone()).or_default() += 1;
        counts.total += 1;
    }
    Vocabulary::from_counts(&counts, 1, None)
}

fn randomise(model: &Ggnn, seed: i64) {
    tch::manual_seed(seed);
    tch::no_grad(|| {
        for (_, t) in model.named_parameters() {
            let _ = t.shallow_clone().uniform_(-0.5, 0.5);
        }
    });
}

/// libtorch's generator is global and tests run on parallel threads: each
/// test holds this throughout, so that no other test draws between its
/// seeding and its draws (initial weights, dropout masks).
static GENERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn generator() -> std::sync::MutexGuard<'static, ()> {
    GENERATOR.lock().unwrap_or_else(|e| e.into_inner())
}

/// Loss and gradients by autograd, after seeding with `seed`.
fn autograd(model: &Ggnn, input: &Prepared, steps: i64, train: bool, seed: i64) -> (f64, Vec<Tensor>) {
    weighted_autograd(model, input, steps, train, seed, 1.0)
}

/// The same with the positive class weighted `pos_weight` (PyTorch's
/// weighted cross-entropy, averaged over the weights).
fn weighted_autograd(model: &Ggnn, input: &Prepared, steps: i64, train: bool, seed: i64, pos_weight: f64) -> (f64, Vec<Tensor>) {
    zero_grads(model);
    tch::manual_seed(seed);
    let logits = model.forward(input, steps, train);
    let weights = Tensor::from_slice(&[1f32, pos_weight as f32]);
    let loss = logits.cross_entropy_loss::<Tensor>(input.labels.as_ref().unwrap(), Some(weights), tch::Reduction::Mean, -100, 0.0);
    loss.backward();
    (loss.double_value(&[]), model.parameters().iter().map(|p| p.grad().copy()).collect())
}

/// Clears the parameters' accumulated gradients before an autograd pass.
fn zero_grads(model: &Ggnn) {
    for p in model.parameters() {
        let mut g = p.grad();
        if g.defined() {
            let _ = g.detach_().zero_();
        }
    }
}

fn by_hand(model: &Ggnn, input: &Prepared, steps: i64, train: bool, seed: i64) -> (f64, Vec<Tensor>) {
    weighted_by_hand(model, input, steps, train, seed, 1.0)
}

fn weighted_by_hand(model: &Ggnn, input: &Prepared, steps: i64, train: bool, seed: i64, pos_weight: f64) -> (f64, Vec<Tensor>) {
    tch::manual_seed(seed);
    let g = model.loss_and_gradients(input, steps, train, pos_weight);
    (g.loss.double_value(&[]), g.grads)
}

/// Asserts equal losses and gradients within `tol`, relative to each
/// gradient's largest entry; returns the largest relative difference.
fn compare(model: &Ggnn, ours: &(f64, Vec<Tensor>), theirs: &(f64, Vec<Tensor>), tol: f64) -> f64 {
    assert!((ours.0 - theirs.0).abs() <= 1e-6 * theirs.0.abs().max(1.0), "loss {} vs autograd {}", ours.0, theirs.0);
    let mut worst = 0f64;
    for ((name, p), (a, b)) in model.named_parameters().into_iter().zip(ours.1.iter().zip(&theirs.1)) {
        assert_eq!(a.size(), p.size(), "{name}");
        let scale = b.abs().max().double_value(&[]);
        assert!(scale > 0.0, "autograd's gradient of {name} is zero: the case checks nothing there");
        let rel = (a - b).abs().max().double_value(&[]) / scale;
        assert!(rel < tol, "gradient of {name} differs by {rel} (relative to its largest entry {scale})");
        worst = worst.max(rel);
    }
    worst
}

/// The five-node graph of `tests/ggnn.rs` (0 → 1 → 2 control, 3 ⇒ 1 and
/// 4 ⇒ 2 data at positions 1 and 2, 2 → 0 call), labelled.
#[test]
fn gradients_match_autograd_on_the_hand_built_graph() {
    let _generator = generator();
    let vocab = vocabulary(&["br", "add", "ret", "i32"].map(String::from)); // "i64" is unknown
    let e = |flow, position| Edge { flow, position };
    let edges = [
        (0, 1, e(Flow::Control, 0)),
        (1, 2, e(Flow::Control, 0)),
        (3, 1, e(Flow::Data, 1)),
        (4, 2, e(Flow::Data, 2)),
        (2, 0, e(Flow::Call, 0)),
    ];
    let input = GraphInput::from_parts(["br", "add", "ret", "i32", "i64"], edges, &vocab).unwrap();
    let positives = [1u32, 2];
    let batch = Batch::from_samples(&[Sample { graph: &input, root: Some(1), positives: Some(&positives) }]).unwrap();
    let hyper = Hyper::spec(vocab.len());
    let model = Ggnn::new(&hyper, Device::Cpu);
    randomise(&model, 7);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    for steps in [1, 3, 30] {
        let theirs = autograd(&model, &prepared, steps, false, 1);
        let ours = by_hand(&model, &prepared, steps, false, 1);
        compare(&model, &ours, &theirs, 1e-4);
    }
}

/// A seeded random batch: two graphs, every edge type, positions up to 9,
/// nodes without incoming edges, unknown tokens.
fn random_batch(seed: u64) -> (Vocabulary, Batch) {
    sized_random_batch(seed, &[150, 90])
}

/// [`random_batch`] with graphs of the given sizes.
fn sized_random_batch(seed: u64, sizes: &[usize]) -> (Vocabulary, Batch) {
    let mut rng = SplitMix64::new(seed);
    let texts: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    let vocab = vocabulary(&texts[..30]);
    let mut inputs = Vec::new();
    for &n in sizes {
        let nodes: Vec<&str> = (0..n).map(|_| texts[rng.below(40) as usize].as_str()).collect();
        let mut edges = Vec::new();
        for (flow, count) in [(Flow::Control, n / 2), (Flow::Data, n), (Flow::Call, n / 8)] {
            for _ in 0..count {
                // Targets avoid the last tenth: those nodes receive nothing forward.
                let s = rng.below(n as u64) as u32;
                let t = rng.below((n - n / 10) as u64) as u32;
                edges.push((s, t, Edge { flow, position: rng.below(10) as u32 }));
            }
        }
        inputs.push(GraphInput::from_parts(nodes, edges, &vocab).unwrap());
    }
    let labels: Vec<Vec<u32>> = inputs.iter().map(|g| (0..g.node_count() as u32).filter(|_| rng.below(4) == 0).collect()).collect();
    let samples: Vec<Sample<'_>> = inputs
        .iter()
        .zip(&labels)
        .enumerate()
        .map(|(i, (g, l))| Sample { graph: g, root: Some(i as u32 * 7), positives: Some(l) })
        .collect();
    (vocab, Batch::from_samples(&samples).unwrap())
}

#[test]
fn gradients_match_autograd_on_a_random_batch_with_and_without_dropout() {
    let _generator = generator();
    let (vocab, batch) = random_batch(3);
    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(11);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let steps = 30;
    let plain = autograd(&model, &prepared, steps, false, 5);
    compare(&model, &by_hand(&model, &prepared, steps, false, 5), &plain, 1e-4);
    let dropped = autograd(&model, &prepared, steps, true, 5);
    assert!((dropped.0 - plain.0).abs() > 1e-6, "dropout changes the loss ({} vs {})", dropped.0, plain.0);
    compare(&model, &by_hand(&model, &prepared, steps, true, 5), &dropped, 1e-4);
    // Another seed draws other masks, for both.
    let other = by_hand(&model, &prepared, steps, true, 6);
    assert!((other.0 - dropped.0).abs() > 1e-7);
    compare(&model, &other, &autograd(&model, &prepared, steps, true, 6), 1e-4);
}

/// Summed, max and mean-max messages (`hyper.aggregation`): the
/// hand-written step and backward, on both paths (the CPU's fused loops,
/// whose max keeps each channel's winning edge, and libtorch's
/// operations), against autograd through the aggregation (the sparse
/// matrix; `scatter_reduce`'s amax), with and without dropout; and the loss
/// is not the mean's.
#[test]
fn sum_max_and_mean_max_aggregation_gradients_match_autograd() {
    use programl_model::Aggregation;
    let _generator = generator();
    let (vocab, batch) = random_batch(11);
    let mean = Hyper::spec(vocab.len());
    for aggregation in [Aggregation::Sum, Aggregation::Max, Aggregation::MeanMax] {
        let hyper = Hyper { aggregation, ..mean.clone() };
        let model = Ggnn::new(&hyper, Device::Cpu);
        randomise(&model, 5);
        let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
        for (steps, train) in [(1, false), (4, false), (4, true)] {
            let theirs = autograd(&model, &prepared, steps, train, 1);
            for fused in [true, false] {
                tch::manual_seed(1);
                let g = model.loss_and_gradients_with(&prepared, steps, train, 1.0, fused);
                let ours = (g.loss.double_value(&[]), g.grads);
                compare(&model, &ours, &theirs, 1e-4);
            }
            let as_mean = by_hand(&model, &Prepared::new(&batch, &mean, Device::Cpu), steps, train, 1);
            assert!(
                (as_mean.0 - theirs.0).abs() > 1e-4,
                "{aggregation:?}, {steps} steps: the loss {} is the mean's {}",
                theirs.0,
                as_mean.0
            );
        }
    }
}

/// `--pos-weight`: the positive class weighted in the loss. The loss and
/// every gradient still match autograd's weighted cross-entropy, and the
/// weight really moves them (a positive's share of the loss grows).
#[test]
fn weighted_loss_gradients_match_autograd() {
    let _generator = generator();
    let (vocab, batch) = random_batch(4);
    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(12);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let plain = by_hand(&model, &prepared, 6, false, 1);
    for pos_weight in [0.5, 20.0] {
        let ours = weighted_by_hand(&model, &prepared, 6, false, 1, pos_weight);
        compare(&model, &ours, &weighted_autograd(&model, &prepared, 6, false, 1, pos_weight), 1e-4);
        assert!((ours.0 - plain.0).abs() > 1e-4, "weight {pos_weight}: loss {} equals the unweighted {}", ours.0, plain.0);
    }
    // With dropout too (the same masks for both).
    let ours = weighted_by_hand(&model, &prepared, 6, true, 2, 20.0);
    compare(&model, &ours, &weighted_autograd(&model, &prepared, 6, true, 2, 20.0), 1e-4);
}

/// On the CPU the training step runs fused loops (`kernels.rs`), split
/// over the intra-op threads; their loss and gradients are libtorch's
/// operations' (the path other devices take), on a batch large enough to
/// be split, at 1, 2 and 3 threads, with dropout and a weighted loss.
#[test]
fn fused_training_loops_match_libtorch_operations_at_any_thread_count() {
    let _generator = generator();
    let (vocab, batch) = sized_random_batch(9, &[2600, 1900]);
    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(13);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let before = tch::get_num_threads();
    for threads in [1, 2, 3] {
        tch::set_num_threads(threads);
        let run = |fused: bool| {
            tch::manual_seed(3);
            let g = model.loss_and_gradients_with(&prepared, 8, true, 3.0, fused);
            (g.loss.double_value(&[]), g.grads)
        };
        let fused = run(true);
        compare(&model, &fused, &run(false), 1e-4);
        // Bit for bit the same on a second run (reproducible training).
        let again = run(true);
        assert_eq!(fused.0, again.0);
        assert!(fused.1.iter().zip(&again.1).all(|(a, b)| a.equal(b)), "{threads} threads: other gradients on a second run");
    }
    tch::set_num_threads(before);
}

/// The settling term (adaptive-depth training): `stability` × the mean of
/// `(h_T − h_{T−1})²` added to the cross-entropy. Loss and every gradient
/// match autograd through the same sum, on both paths (the CPU's fused
/// loops and libtorch's operations), at T = 1 (where `h_{T−1}` is the
/// initial state, so the term's gradient reaches the embedding directly)
/// and at T = 7; and the term really moves them.
#[test]
fn settling_term_gradients_match_autograd() {
    let _generator = generator();
    let (vocab, batch) = random_batch(5);
    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(14);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let stability = 5.0;
    for steps in [1, 7] {
        for p in model.parameters() {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.detach_().zero_();
            }
        }
        let h0 = model.initial_states(&prepared);
        let before = model.propagate(&prepared, &h0, steps - 1, false);
        let h_t = model.propagate(&prepared, &before, 1, false);
        let logits = model.readout(&h_t, &h0);
        let ce = logits.cross_entropy_for_logits(prepared.labels.as_ref().unwrap());
        let loss = &ce + (&h_t - &before).square().mean(tch::Kind::Float) * stability;
        loss.backward();
        let theirs = (loss.double_value(&[]), model.parameters().iter().map(|p| p.grad().copy()).collect::<Vec<_>>());
        assert!(loss.double_value(&[]) - ce.double_value(&[]) > 1e-4, "T = {steps}: the settling term adds nothing");
        for fused in [true, false] {
            let g = model.settling_with(&prepared, steps, false, 1.0, stability, fused);
            compare(&model, &(g.loss.double_value(&[]), g.grads), &theirs, 1e-4);
        }
        let plain = by_hand(&model, &prepared, steps, false, 1);
        assert!((plain.0 - theirs.0).abs() > 1e-4);
    }
}

/// Training as adaptive depth infers ([`Ggnn::settling_until`]): with a
/// tolerance nothing exceeds, the forward stops right at `min_steps` and
/// its loss and gradients are those of a fixed run of that many steps;
/// with a zero tolerance it runs to the cap; both paths stop alike.
#[test]
fn a_training_forward_stops_where_the_rule_would() {
    let _generator = generator();
    let (vocab, batch) = random_batch(6);
    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(15);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    for fused in [true, false] {
        let loose = model.until_with(&prepared, 40, Some(Until { tolerance: 1e9, min_steps: 3 }), false, 1.0, 0.5, fused);
        assert_eq!(loose.steps, 3);
        let fixed = model.settling_with(&prepared, 3, false, 1.0, 0.5, fused);
        assert_eq!(fixed.steps, 3);
        // Within rounding, not bit for bit: libtorch's products (MKL's
        // sparse one on the plain path) may split their sums differently
        // from one call to the next on a loaded machine (seen once in
        // about 80 runs beside two training jobs). A step more or fewer
        // moves the loss by far more than this.
        assert!(loose.loss.allclose(&fixed.loss, 1e-5, 1e-8, false), "fused {fused}: the loss");
        assert!(loose.grads.iter().zip(&fixed.grads).all(|(a, b)| a.allclose(b, 1e-4, 1e-7, false)), "fused {fused}: the gradients");
        let one_more = model.settling_with(&prepared, 4, false, 1.0, 0.5, fused);
        assert!(!one_more.loss.allclose(&fixed.loss, 1e-5, 1e-8, false), "fused {fused}: a fourth step moves the loss");
        let strict = model.until_with(&prepared, 9, Some(Until { tolerance: 0.0, min_steps: 1 }), false, 1.0, 0.5, fused);
        assert_eq!(strict.steps, 9, "a zero tolerance runs the cap");
    }
}

/// A checkpointed tape ([`Tape::Segments`]) recomputes each earlier
/// segment from the state that entered it, so its loss and gradients are
/// the full tape's: segments of one step, of a length that does not divide
/// the steps, and longer than the run; fixed steps and the stopping rule;
/// the mean and the max (whose winners the recomputation finds again); on
/// both paths. Dropout, whose masks a recomputation would draw anew, is
/// refused.
#[test]
fn a_checkpointed_tape_gives_the_full_tapes_gradients() {
    let _generator = generator();
    let (vocab, batch) = random_batch(7);
    let mean = Hyper::spec(vocab.len());
    let weighted = |steps| TrainStep { pos_weight: 2.0, stability: 0.5, ..TrainStep::steps(steps) };
    for aggregation in [mean.aggregation, programl_model::Aggregation::Max] {
        let hyper = Hyper { aggregation, ..mean.clone() };
        tch::manual_seed(16);
        let model = Ggnn::new(&hyper, Device::Cpu);
        randomise(&model, 17);
        let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
        for fused in [true, false] {
            for until in [None, Some(Until { tolerance: 0.0, min_steps: 2 })] {
                let full = model.taped_with(&prepared, &TrainStep { until, ..weighted(10) }, fused);
                assert_eq!(full.steps, 10);
                for n in [1, 3, 10, 25] {
                    let cut = model.taped_with(&prepared, &TrainStep { until, tape: Tape::Segments(n), ..weighted(10) }, fused);
                    let what = format!("{aggregation:?}, fused {fused}, until {until:?}, segments of {n}");
                    assert_eq!(cut.steps, full.steps, "{what}");
                    assert!(cut.loss.allclose(&full.loss, 1e-6, 1e-9, false), "{what}: the loss");
                    for (i, (a, b)) in cut.grads.iter().zip(&full.grads).enumerate() {
                        assert!(a.allclose(b, 1e-4, 1e-7, false), "{what}: gradient {i}");
                    }
                }
            }
            // The gradient reaching the embedding runs through every
            // step: it differs once the first segment's part is missing.
            let short = model.taped_with(&prepared, &weighted(7), fused);
            let full = model.taped_with(&prepared, &weighted(10), fused);
            assert!(!short.grads[0].allclose(&full.grads[0], 1e-4, 1e-7, false));
        }
    }
    let hyper = Hyper { state_dropout: 0.2, ..mean };
    let model = Ggnn::new(&hyper, Device::Cpu);
    let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
    let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.taped_with(&prepared, &TrainStep { tape: Tape::Segments(2), dropout: true, ..TrainStep::steps(4) }, true)
    }));
    assert!(refused.is_err(), "dropout under a checkpointed tape");
}

/// Autograd's loss with per-node weights: the mean of the nodes'
/// cross-entropies weighted by their class's weight times `input.loss_weights`.
fn node_weighted_autograd(model: &Ggnn, input: &Prepared, steps: i64, train: bool, seed: i64, pos_weight: f64) -> (f64, Vec<Tensor>) {
    zero_grads(model);
    tch::manual_seed(seed);
    let logits = model.forward(input, steps, train);
    let labels = input.labels.as_ref().unwrap();
    let weights = Tensor::from_slice(&[1f32, pos_weight as f32]).index_select(0, labels) * input.loss_weights.as_ref().unwrap();
    let nll = logits.log_softmax(1, tch::Kind::Float).gather(1, &labels.unsqueeze(1), false).squeeze_dim(1).neg();
    let loss = (nll * &weights).sum(tch::Kind::Float) / weights.sum(tch::Kind::Float);
    loss.backward();
    (loss.double_value(&[]), model.parameters().iter().map(|p| p.grad().copy()).collect())
}

/// `--loss-nodes labelled`: per-node loss weights (`Prepared::loss_weights`,
/// 0 on the nodes that carry no label). The loss and every gradient match
/// autograd's weighted mean, with and without a positive weight and
/// dropout, on both paths (fused loops and libtorch's operations); the
/// weights really move the loss; a node of weight 0 moves nothing
/// (flipping its label changes neither loss nor gradients); and a batch
/// whose weights are all 0 gives a zero loss, not NaN.
#[test]
fn node_weighted_loss_gradients_match_autograd() {
    let _generator = generator();
    let (vocab, batch) = random_batch(4);
    let hyper = Hyper::spec(vocab.len());
    tch::manual_seed(12);
    let model = Ggnn::new(&hyper, Device::Cpu);
    let n = batch.node_count();
    let mask: Vec<f32> = (0..n).map(|i| if i % 3 == 0 { 0.0 } else { 1.0 }).collect();
    let weighted = |labels: Option<Tensor>, mask: &[f32]| {
        let mut p = Prepared::new(&batch, &hyper, Device::Cpu);
        if let Some(l) = labels {
            p.labels = Some(l);
        }
        p.loss_weights = Some(Tensor::from_slice(mask));
        p
    };
    let prepared = weighted(None, &mask);
    let plain = by_hand(&model, &Prepared::new(&batch, &hyper, Device::Cpu), 6, false, 1);
    for pos_weight in [1.0, 20.0] {
        for (train, seed) in [(false, 1), (true, 2)] {
            let ours = weighted_by_hand(&model, &prepared, 6, train, seed, pos_weight);
            compare(&model, &ours, &node_weighted_autograd(&model, &prepared, 6, train, seed, pos_weight), 1e-4);
            let run = |fused: bool| {
                tch::manual_seed(seed);
                let g = model.loss_and_gradients_with(&prepared, 6, train, pos_weight, fused);
                (g.loss.double_value(&[]), g.grads)
            };
            compare(&model, &run(true), &run(false), 1e-4);
        }
    }
    let masked = by_hand(&model, &prepared, 6, false, 1);
    assert!((masked.0 - plain.0).abs() > 1e-4, "the node weights left the loss at {}", plain.0);
    // Labels of weight-0 nodes flipped: nothing moves.
    let labels = prepared.labels.as_ref().unwrap();
    let flipped: Vec<i64> =
        Vec::<i64>::try_from(labels).unwrap().iter().zip(&mask).map(|(&l, &m)| if m == 0.0 { 1 - l } else { l }).collect();
    assert!(flipped != Vec::<i64>::try_from(labels).unwrap());
    let moved = by_hand(&model, &weighted(Some(Tensor::from_slice(&flipped)), &mask), 6, false, 1);
    compare(&model, &moved, &masked, 1e-6);
    // No weighted node: a zero loss and zero gradients.
    let none = by_hand(&model, &weighted(None, &vec![0.0; n]), 6, false, 1);
    assert_eq!(none.0, 0.0);
    assert!(none.1.iter().all(|g| g.abs().max().double_value(&[]) == 0.0), "a batch of weight 0 moved the weights");
}

/// A state wider than SPEC.md §3's 34 (`hyper.hidden`, issue 30's
/// capacity experiment) trains on libtorch's operations (the CPU's fused
/// loops are built for 34): its hand-written gradients match autograd for
/// each aggregation, with and without dropout, whichever path is asked for.
#[test]
fn a_wider_state_trains_with_gradients_matching_autograd() {
    use programl_model::Aggregation;
    let _generator = generator();
    let (vocab, batch) = random_batch(5);
    for aggregation in [Aggregation::Mean, Aggregation::Max, Aggregation::MeanMax] {
        let hyper = Hyper { hidden: 66, aggregation, ..Hyper::spec(vocab.len()) };
        let model = Ggnn::new(&hyper, Device::Cpu);
        assert_eq!(model.width(), 66);
        randomise(&model, 9);
        let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
        for (steps, train) in [(3, false), (3, true)] {
            let theirs = autograd(&model, &prepared, steps, train, 2);
            for fused in [true, false] {
                tch::manual_seed(2);
                let g = model.loss_and_gradients_with(&prepared, steps, train, 1.0, fused);
                assert_eq!(g.grads[0].size(), [vocab.len() as i64, 64], "the embedding is the text's 64 entries");
                compare(&model, &(g.loss.double_value(&[]), g.grads), &theirs, 1e-4);
            }
        }
        // Inference takes the plain forward on the CPU too.
        let direct = tch::no_grad(|| model.forward(&prepared, 5, false));
        let inferred = model.forward_inference(&prepared, 5);
        assert!((direct - inferred).abs().max().double_value(&[]) < 1e-6, "{aggregation:?}");
    }
}

/// `programl_model::widen`: a trained 34-wide model carried into 66 and 98
/// channels computes the same logits with no noise, and stays within a
/// rounding of them with a little; the noise is what lets the new channels
/// learn (with none, their gradients are exactly zero).
#[test]
fn a_widened_model_starts_where_the_narrow_one_stands() {
    use programl_model::Aggregation;
    let _generator = generator();
    let (vocab, batch) = random_batch(8);
    for aggregation in [Aggregation::Mean, Aggregation::Max] {
        let narrow_hyper = Hyper { aggregation, ..Hyper::spec(vocab.len()) };
        let narrow = Ggnn::new(&narrow_hyper, Device::Cpu);
        randomise(&narrow, 3);
        let expected = tch::no_grad(|| narrow.forward(&Prepared::new(&batch, &narrow_hyper, Device::Cpu), 6, false));
        for hidden in [66, 98] {
            let hyper = Hyper { hidden, ..narrow_hyper.clone() };
            let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
            let wide = Ggnn::new(&hyper, Device::Cpu);
            programl_model::widen(&wide, &narrow, 0.0).unwrap();
            let got = tch::no_grad(|| wide.forward(&prepared, 6, false));
            let diff = (&got - &expected).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "{aggregation:?} {hidden}: widened logits differ by {diff}");
            // No noise: the new channels' GRU rows get no gradient.
            let g = wide.loss_and_gradients(&prepared, 3, false, 1.0);
            let new_rows = |t: &Tensor| t.narrow(0, 1, 1).abs().max().double_value(&[]);
            assert_eq!(new_rows(&g.grads[6]), 0.0, "{aggregation:?} {hidden}: weight_hh's row of a new channel");
            // A little noise: close to the narrow model, and learning.
            let wide = Ggnn::new(&hyper, Device::Cpu);
            programl_model::widen(&wide, &narrow, 0.01).unwrap();
            let got = tch::no_grad(|| wide.forward(&prepared, 6, false));
            let diff = (&got - &expected).abs().max().double_value(&[]);
            let scale = expected.abs().max().double_value(&[]);
            assert!(diff > 0.0 && diff < 0.05 * scale, "{aggregation:?} {hidden}: noisy widened logits differ by {diff} (largest {scale})");
            let g = wide.loss_and_gradients(&prepared, 3, false, 1.0);
            assert!(new_rows(&g.grads[6]) > 0.0, "{aggregation:?} {hidden}: a new channel learns");
        }
    }
    // Widths the sinusoids do not line up for, and other heads, are refused.
    let narrow = Ggnn::new(&Hyper::spec(vocab.len()), Device::Cpu);
    let odd = Ggnn::new(&Hyper { hidden: 50, ..Hyper::spec(vocab.len()) }, Device::Cpu);
    let e = programl_model::widen(&odd, &narrow, 0.0).unwrap_err();
    assert!(e.contains("not 50"), "{e}");
    let other = Ggnn::new(&Hyper { hidden: 66, ..Hyper::spec(vocab.len() + 1) }, Device::Cpu);
    assert!(programl_model::widen(&other, &narrow, 0.0).unwrap_err().contains("vocabulary"));
}
