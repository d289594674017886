//! What every graph-level task shares (device mapping, POJ-104, and the next
//! one): one label per example, read from a graph and, optionally, from
//! auxiliary inputs beside it.
//!
//! A task turns its data into [`Examples`]: the graphs, and the items over
//! them (an item is a graph, a label and its auxiliary inputs; several
//! items may share a graph, as DevMap's rows share a kernel). Then:
//! - [`epoch_batches`] and [`train_step`] train a model on items, each
//!   graph run once per batch whatever the number of its items;
//! - [`probabilities`] (libtorch) and [`probabilities_cpu`] (the torch-free
//!   inference the learned pass runs) predict them;
//! - [`refit_head`] refits a trained model's auxiliary classifier on all
//!   its training items at once, the graph vectors frozen;
//! - [`fit`] is one run: epochs over the training items, a checkpoint
//!   every few minutes and at each epoch's end ([`crate::checkpoint`]), a
//!   resume from it, validation at each epoch's end, the best model by
//!   validation handed back to be saved, and `log.csv`.
//!
//! What stays in the task's own file: reading its data, compiling its
//! sources ([`crate::harness`]), its labels and auxiliary inputs, its
//! protocol (DevMap's cross-validation, POJ-104's fixed split) and metrics.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};
use programl::batch::{plan, Batch, GraphInput, Sample};
use programl_model::{Ggnn, Prepared};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::checkpoint::Checkpoint;
use crate::optim::AdamW;

/// One example: a graph (an index into [`Examples::inputs`]), its class,
/// and its auxiliary inputs (as many as the head's `aux`; none without).
#[derive(Clone, Debug)]
pub struct Item {
    pub graph: usize,
    pub label: usize,
    pub aux: Vec<f32>,
}

/// A graph-level task's examples, featurised with one vocabulary.
pub struct Examples {
    pub inputs: Vec<GraphInput>,
    pub items: Vec<Item>,
}

impl Examples {
    /// `items`' graphs in ascending order, each with its items in the order given.
    fn by_graph(&self, items: &[usize]) -> BTreeMap<usize, Vec<usize>> {
        let mut by: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for &i in items {
            by.entry(self.items[i].graph).or_default().push(i);
        }
        by
    }
}

/// One epoch's batches of `items`: their graphs in an order drawn from
/// `seed` and `epoch`, packed to at most `batch_nodes` nodes, each batch
/// holding its graphs' items, graph by graph. Batches of fewer than
/// `min_items` items are left out (a head with auxiliary inputs normalises
/// them over the batch, which needs two).
pub fn epoch_batches(data: &Examples, items: &[usize], seed: u64, epoch: usize, batch_nodes: usize, min_items: usize) -> Vec<Vec<usize>> {
    let by = data.by_graph(items);
    let graphs: Vec<usize> = by.keys().copied().collect();
    let order: Vec<usize> =
        programl::batch::permutation(graphs.len(), programl::hash::mix(seed ^ (epoch as u64 + 1))).into_iter().map(|i| graphs[i]).collect();
    plan(order.iter().map(|&g| data.inputs[g].node_count()), batch_nodes)
        .into_iter()
        .map(|range| order[range].iter().flat_map(|g| by[g].iter().copied()).collect::<Vec<usize>>())
        .filter(|batch| batch.len() >= min_items)
        .collect()
}

/// A batch of items as the model reads it: each distinct graph once (in the
/// order of first appearance), and for each item the row of its graph.
fn assemble(data: &Examples, items: &[usize]) -> (Batch, Vec<i64>) {
    let mut graphs: Vec<usize> = Vec::new();
    let mut row_of: std::collections::HashMap<usize, i64> = std::collections::HashMap::new();
    let rows: Vec<i64> = items
        .iter()
        .map(|&i| {
            let g = data.items[i].graph;
            *row_of.entry(g).or_insert_with(|| {
                graphs.push(g);
                graphs.len() as i64 - 1
            })
        })
        .collect();
    let samples: Vec<Sample<'_>> = graphs.iter().map(|&g| Sample { graph: &data.inputs[g], root: None, positives: None }).collect();
    (Batch::from_samples(&samples).expect("featurised inputs make a valid batch"), rows)
}

fn aux_tensor(model: &Ggnn, data: &Examples, items: &[usize]) -> Option<Tensor> {
    let a = model.hyper().aux_inputs();
    (a > 0).then(|| {
        let values: Vec<f32> = items.iter().flat_map(|&i| data.items[i].aux.iter().copied()).collect();
        assert_eq!(values.len(), items.len() * a as usize, "every item has the head's auxiliary inputs");
        Tensor::from_slice(&values).view([items.len() as i64, a]).to_device(model.device())
    })
}

/// One optimiser step on `items` (cross-entropy over their labels).
/// Returns the batch's mean loss; a loss that is not finite is an error and
/// the model is left unchanged.
///
/// `code_loss` weighs a second cross-entropy, on the graph's own pooled
/// logits before the auxiliary inputs join them (a head without
/// auxiliary inputs has no such term): the graph's vector is then asked
/// to predict the label from the code alone, not only to be whatever the
/// auxiliary classifier finds useful. Upstream's GGNN calls it the
/// intermediate loss, weight 0.2. The value returned includes it.
pub fn train_step(model: &Ggnn, opt: &mut AdamW, params: &[&Tensor], data: &Examples, items: &[usize], code_loss: f64) -> Result<f64> {
    let device = model.device();
    let (batch, rows) = assemble(data, items);
    let prepared = Prepared::new(&batch, model.hyper(), device);
    let pooled = model.pooled_logits(&prepared, model.hyper().steps, true);
    let index = Tensor::from_slice(&rows).to_device(device);
    let aux = aux_tensor(model, data, items);
    let per_item = pooled.index_select(0, &index);
    let logits = model.graph_logits(&per_item, aux.as_ref(), true);
    let labels: Vec<i64> = items.iter().map(|&i| data.items[i].label as i64).collect();
    let labels = Tensor::from_slice(&labels).to_device(device);
    let mut loss = logits.cross_entropy_for_logits(&labels);
    if aux.is_some() && code_loss != 0.0 {
        loss = loss + model.code_logits(&per_item).cross_entropy_for_logits(&labels) * code_loss;
    }
    let value = loss.double_value(&[]);
    if !value.is_finite() {
        bail!("the training loss is {value}");
    }
    AdamW::zero_grad(params);
    loss.backward();
    opt.step(params);
    Ok(value)
}

/// The graph vectors of `items` \[R, W\] (distinct items, in their
/// order) through the libtorch forward at `steps` steps, without
/// gradients; each graph runs once.
fn pooled_items(model: &Ggnn, data: &Examples, items: &[usize], steps: i64, batch_nodes: usize) -> Tensor {
    let device = model.device();
    let by = data.by_graph(items);
    let graphs: Vec<usize> = by.keys().copied().collect();
    let _guard = tch::no_grad_guard();
    let (mut parts, mut order) = (Vec::new(), Vec::new());
    for range in plan(graphs.iter().map(|&g| data.inputs[g].node_count()), batch_nodes) {
        let batch_items: Vec<usize> = graphs[range].iter().flat_map(|g| by[g].iter().copied()).collect();
        let (batch, rows) = assemble(data, &batch_items);
        let prepared = Prepared::new(&batch, model.hyper(), device);
        parts.push(model.pooled_inference(&prepared, steps).index_select(0, &Tensor::from_slice(&rows).to_device(device)));
        order.extend(batch_items);
    }
    let position: std::collections::HashMap<usize, i64> = order.iter().enumerate().map(|(k, &i)| (i, k as i64)).collect();
    let back: Vec<i64> = items.iter().map(|i| position[i]).collect();
    Tensor::cat(&parts, 0).index_select(0, &Tensor::from_slice(&back).to_device(device))
}

/// Refits the classifier after the graph vector (the auxiliary head,
/// `aux.*`: normalisation, hidden and output layers) on `items`, the
/// message passing and pooling frozen: `head_steps` AdamW steps at `lr`,
/// each over every item at once, then the head's normalisation statistics
/// set to those of the items exactly ([`Ggnn::set_aux_statistics`]). In
/// DevMap's training the head sees about 18 rows a batch for about 340
/// steps, of a graph vector still moving; afterwards the vectors hold
/// still and it can fit all the rows together. A model without auxiliary
/// inputs, or fewer than 2 items (batch statistics need two), is left as
/// it is. Returns the loss before the last step (None where no step ran).
pub fn refit_head(model: &Ggnn, data: &Examples, items: &[usize], lr: f64, head_steps: usize, batch_nodes: usize) -> Result<Option<f64>> {
    if items.len() < 2 {
        return Ok(None);
    }
    let Some(aux) = aux_tensor(model, data, items) else { return Ok(None) };
    let pooled = pooled_items(model, data, items, model.hyper().steps, batch_nodes);
    let labels: Vec<i64> = items.iter().map(|&i| data.items[i].label as i64).collect();
    let labels = Tensor::from_slice(&labels).to_device(model.device());
    let params: Vec<&Tensor> = model.named_parameters().into_iter().filter(|(n, _)| n.starts_with("aux.")).map(|(_, t)| t).collect();
    let mut opt = AdamW::new(&params, lr);
    let mut last = None;
    for step in 0..head_steps {
        let loss = model.graph_logits(&pooled, Some(&aux), true).cross_entropy_for_logits(&labels);
        let value = loss.double_value(&[]);
        if !value.is_finite() {
            bail!("refitting the head: the loss is {value} at step {}", step + 1);
        }
        AdamW::zero_grad(&params);
        loss.backward();
        opt.step(&params);
        last = Some(value);
    }
    model.set_aux_statistics(&pooled, &aux);
    Ok(last)
}

/// Class probabilities of `items` (distinct items, in their order)
/// through the libtorch forward at `steps` message-passing steps; each
/// graph runs once ([`pooled_items`]), then the head runs on every row at
/// once (inference normalisation is per row, so batching it is exact).
pub fn probabilities(model: &Ggnn, data: &Examples, items: &[usize], steps: i64, batch_nodes: usize) -> Vec<Vec<f32>> {
    if items.is_empty() {
        return Vec::new();
    }
    let pooled = pooled_items(model, data, items, steps, batch_nodes);
    let aux = aux_tensor(model, data, items);
    let _guard = tch::no_grad_guard();
    let probs = model.graph_logits(&pooled, aux.as_ref(), false).softmax(1, Kind::Float).to_device(Device::Cpu);
    let c = probs.size()[1] as usize;
    let flat: Vec<f32> = Vec::try_from(probs.flatten(0, -1)).expect("probabilities");
    flat.chunks_exact(c).map(<[f32]>::to_vec).collect()
}

/// [`probabilities`] through the torch-free CPU inference, the learned
/// pass's arithmetic: each item is its own sample (items that share a
/// graph differ in their auxiliary inputs).
pub fn probabilities_cpu(
    model: &programl_infer::Model,
    options: &programl_infer::Options,
    data: &Examples,
    items: &[usize],
    batch_nodes: usize,
) -> Result<Vec<Vec<f32>>> {
    let c = model.classes();
    let a = model.config.hyper.aux_inputs() as usize;
    let mut out = Vec::with_capacity(items.len());
    for range in plan(items.iter().map(|&i| data.inputs[data.items[i].graph].node_count()), batch_nodes) {
        let picked = &items[range];
        let samples: Vec<Sample<'_>> =
            picked.iter().map(|&i| Sample { graph: &data.inputs[data.items[i].graph], root: None, positives: None }).collect();
        let batch = Batch::from_samples(&samples).expect("featurised inputs make a valid batch");
        let aux: Vec<f32> = picked.iter().flat_map(|&i| data.items[i].aux.iter().copied()).collect();
        let aux = (a > 0).then_some(&aux[..]);
        let probs =
            model.graph_probabilities(&batch, aux, options).map_err(|e| anyhow::anyhow!("{}: {e}", model.dir.display()))?.probabilities;
        out.extend(probs.chunks_exact(c).map(<[f32]>::to_vec));
    }
    Ok(out)
}

/// The most likely class and its probability.
pub fn argmax(probabilities: &[f32]) -> (usize, f32) {
    probabilities.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bp), (i, &p)| if p > bp { (i, p) } else { (bi, bp) })
}

/// Settings of a graph-level run, recorded in its checkpoint.
pub trait RunSettings: Clone + std::fmt::Debug + Serialize + DeserializeOwned {
    /// Whether a checkpoint written with `saved` may continue under these
    /// settings (the epoch count, a target, may usually change).
    fn continues(&self, saved: &Self) -> bool;
}

/// `RUN/checkpoint/state.json` of a graph-level run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State<S> {
    pub version: u32,
    pub settings: S,
    pub data_hash: String,
    /// Epochs finished.
    pub epoch: usize,
    /// Batches of `epoch` already trained.
    pub batch: usize,
    pub examples_seen: u64,
    pub wall_s: f64,
    pub adam_step: i64,
    /// The best validation figure so far (-1 before the first).
    pub best_val: f64,
    pub log: Vec<LogRow>,
    /// The training loss summed over the examples of `epoch`'s batches
    /// trained so far, and their count: an epoch that a kill splits
    /// across sessions logs the loss of all its batches. (Absent from
    /// checkpoints written before: 0.)
    #[serde(default)]
    pub epoch_loss_sum: f64,
    #[serde(default)]
    pub epoch_loss_n: u64,
}

/// The state's format. Version 1 is POJ-104's own, which this one reads.
pub const STATE_VERSION: u32 = 1;

/// One line of `log.csv`: an epoch's end.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LogRow {
    pub epoch: usize,
    pub examples: u64,
    pub wall_s: f64,
    pub train_loss: f64,
    /// The validation figure (the task's; accuracy for POJ-104).
    pub val_accuracy: f64,
}

/// How the learning rate moves over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrSchedule {
    /// The base rate throughout.
    #[default]
    Constant,
    /// A half cosine from the base rate at the first batch towards 0 at the
    /// last epoch's end, batch by batch: `lr · (1 + cos(π p)) / 2` at the
    /// fraction `p` of the run's epochs done. Extending a run (more
    /// `--epochs`) stretches what is left of the curve.
    Cosine,
}

impl LrSchedule {
    pub fn parse(text: &str) -> Result<LrSchedule> {
        match text {
            "constant" => Ok(LrSchedule::Constant),
            "cosine" => Ok(LrSchedule::Cosine),
            other => bail!("--lr-schedule '{other}': expected constant or cosine"),
        }
    }

    /// The rate at batch `batch` of `batches` in epoch `epoch` (from 0) of
    /// `epochs`, from the base rate `lr`.
    pub fn rate(self, lr: f64, epoch: usize, batch: usize, batches: usize, epochs: usize) -> f64 {
        match self {
            LrSchedule::Constant => lr,
            LrSchedule::Cosine => {
                let done = (epoch as f64 + batch as f64 / batches.max(1) as f64) / epochs.max(1) as f64;
                half_cosine(lr, done)
            }
        }
    }
}

/// The rate a half cosine from `lr` to 0 gives at the fraction `done` of
/// its span (clamped to 0..=1): the one cosine schedule of every trainer.
pub fn half_cosine(lr: f64, done: f64) -> f64 {
    lr * 0.5 * (1.0 + (std::f64::consts::PI * done.clamp(0.0, 1.0)).cos())
}

/// One run of a graph-level task.
pub struct Run<'a, S> {
    /// The task's name, in progress lines.
    pub name: &'static str,
    pub out: &'a Path,
    pub settings: S,
    /// Identifies the training data; a checkpoint of other data is refused.
    pub data_hash: String,
    pub epochs: usize,
    /// The learning rate's schedule over the epochs, from `fit`'s `lr`.
    pub schedule: LrSchedule,
    pub seed: u64,
    pub batch_nodes: usize,
    pub min_items: usize,
    /// Seconds of training this session; then checkpoint and stop.
    pub budget_s: Option<f64>,
    pub checkpoint_every_s: f64,
    pub quiet: bool,
}

/// How [`fit`] ended.
pub enum Ending<S> {
    /// Every epoch trained.
    Finished(State<S>),
    /// The session's budget ran out; the same run continues from the checkpoint.
    Stopped(State<S>),
}

/// Trains `model` on the items `train` for the run's epochs, resuming from
/// `run.out/checkpoint` when there is one. After each epoch, `validate`
/// scores the model (higher is better) and, when the score is the best so
/// far, `keep` receives the model and the run's state (to save a bundle).
/// Writes `run.out/log.csv` at each epoch's end.
pub fn fit<S: RunSettings>(
    run: &Run<'_, S>,
    model: &Ggnn,
    lr: f64,
    data: &Examples,
    train: &[usize],
    mut validate: impl FnMut(&Ggnn) -> f64,
    mut keep: impl FnMut(&Ggnn, &State<S>) -> Result<()>,
) -> Result<Ending<S>> {
    if run.epochs == 0 || run.batch_nodes == 0 {
        bail!("--epochs and --batch-nodes must be at least 1");
    }
    std::fs::create_dir_all(run.out).map_err(|e| anyhow::anyhow!("{}: cannot create: {e}", run.out.display()))?;
    let _lock = crate::checkpoint::lock_run(run.out)?;
    let params = model.parameters();
    let mut opt = AdamW::new(&params, lr);
    crate::checkpoint::recover_run(run.out)?;
    let ckpt = Checkpoint::new(run.out, model);
    let mut state = if ckpt.exists() {
        let st: State<S> = ckpt.state(STATE_VERSION)?;
        if !run.settings.continues(&st.settings) {
            bail!(
                "{}: the run was started with other settings ({:?}); use another --out or the same settings (--epochs may change)",
                run.out.display(),
                st.settings
            );
        }
        if st.data_hash != run.data_hash {
            bail!("{}: the run was trained on other data (hash {} here {})", run.out.display(), st.data_hash, run.data_hash);
        }
        ckpt.restore(model, &mut opt, st.adam_step)?;
        if !run.quiet {
            eprintln!(
                "{}: resuming {} at epoch {}, batch {} (of {} epochs)",
                run.name,
                run.out.display(),
                st.epoch + 1,
                st.batch,
                run.epochs
            );
        }
        State { settings: run.settings.clone(), ..st }
    } else {
        State {
            version: STATE_VERSION,
            settings: run.settings.clone(),
            data_hash: run.data_hash.clone(),
            epoch: 0,
            batch: 0,
            examples_seen: 0,
            wall_s: 0.0,
            adam_step: 0,
            best_val: -1.0,
            log: Vec::new(),
            epoch_loss_sum: 0.0,
            epoch_loss_n: 0,
        }
    };
    if state.epoch >= run.epochs && state.batch > 0 && !run.quiet {
        eprintln!(
            "{}: {} stands at batch {} of epoch {}, past --epochs {}: the run ends here without that epoch's rest (--epochs {} or more continues it)",
            run.name,
            run.out.display(),
            state.batch,
            state.epoch + 1,
            run.epochs,
            state.epoch + 1
        );
    }
    let session = Instant::now();
    let wall0 = state.wall_s;
    let save = |state: &mut State<S>, opt: &AdamW| -> Result<()> {
        state.wall_s = wall0 + session.elapsed().as_secs_f64();
        state.adam_step = opt.step;
        ckpt.save(state, model, opt)
    };
    let mut last_checkpoint = Instant::now();
    let examples_at_start = state.examples_seen;
    let _armed = crate::interrupt::armed();
    // Ctrl-C or SIGTERM, seen at a batch's end: save, and stop.
    let interrupted = |signal: i32, state: &mut State<S>, opt: &AdamW| -> Result<Ending<S>> {
        crate::interrupt::saying(signal);
        save(state, opt)?;
        Err(crate::interrupt::Interrupted {
            signal,
            at: format!("epoch {}, batch {} ({} examples)", state.epoch + 1, state.batch, state.examples_seen),
        }
        .into())
    };
    while state.epoch < run.epochs {
        let batches = epoch_batches(data, train, run.seed, state.epoch, run.batch_nodes, run.min_items);
        let epoch_start = Instant::now();
        let first_batch = state.batch;
        let mut session_n = 0usize;
        for (b, items) in batches.iter().enumerate().skip(state.batch) {
            // At least one batch per session, so that any budget makes progress.
            if let Some(signal) = crate::interrupt::caught() {
                return interrupted(signal, &mut state, &opt);
            }
            let trained = state.examples_seen > examples_at_start;
            if trained && run.budget_s.is_some_and(|budget| session.elapsed().as_secs_f64() > budget) {
                save(&mut state, &opt)?;
                return Ok(Ending::Stopped(state));
            }
            opt.lr = run.schedule.rate(lr, state.epoch, b, batches.len(), run.epochs);
            let loss = train_step(model, &mut opt, &params, data, items, 0.0).map_err(|e| {
                anyhow::anyhow!("{e} at epoch {}, batch {}: stopping (the checkpoint holds the last good state)", state.epoch + 1, b + 1)
            })?;
            state.epoch_loss_sum += loss * items.len() as f64;
            state.epoch_loss_n += items.len() as u64;
            session_n += items.len();
            state.examples_seen += items.len() as u64;
            state.batch = b + 1;
            if !run.quiet && (b + 1) % 50 == 0 {
                let per = epoch_start.elapsed().as_secs_f64() / (b + 1 - first_batch) as f64;
                eprintln!(
                    "{}: epoch {}/{} batch {}/{} loss {:.3} ({:.1} examples/s, epoch ETA {:.0}s)",
                    run.name,
                    state.epoch + 1,
                    run.epochs,
                    b + 1,
                    batches.len(),
                    state.epoch_loss_sum / state.epoch_loss_n.max(1) as f64,
                    session_n as f64 / epoch_start.elapsed().as_secs_f64(),
                    per * (batches.len() - b - 1) as f64
                );
            }
            if last_checkpoint.elapsed().as_secs_f64() >= run.checkpoint_every_s {
                save(&mut state, &opt)?;
                last_checkpoint = Instant::now();
            }
        }
        if let Some(signal) = crate::interrupt::caught() {
            // Before the epoch's validation, which a resume then runs.
            return interrupted(signal, &mut state, &opt);
        }
        let val = validate(model);
        let wall = wall0 + session.elapsed().as_secs_f64();
        let train_loss = state.epoch_loss_sum / state.epoch_loss_n.max(1) as f64;
        state.log.push(LogRow { epoch: state.epoch + 1, examples: state.examples_seen, wall_s: wall, train_loss, val_accuracy: val });
        if !run.quiet {
            eprintln!(
                "{}: epoch {}/{}: train loss {train_loss:.4}, validation {val:.4}, {wall:.0}s in all",
                run.name,
                state.epoch + 1,
                run.epochs
            );
        }
        state.wall_s = wall;
        if val > state.best_val {
            state.best_val = val;
            keep(model, &state)?;
        }
        state.epoch += 1;
        state.batch = 0;
        (state.epoch_loss_sum, state.epoch_loss_n) = (0.0, 0);
        write_log(run.out, &state.log)?;
        save(&mut state, &opt)?;
        last_checkpoint = Instant::now();
    }
    if let Some(signal) = crate::interrupt::caught() {
        // Caught during the last epoch's validation or saving: saved; the
        // rest (POJ-104's test) runs when the same command continues.
        return interrupted(signal, &mut state, &opt);
    }
    Ok(Ending::Finished(state))
}

fn write_log(out: &Path, rows: &[LogRow]) -> Result<()> {
    let mut text = String::from("epoch,examples,wall_s,train_loss,val_accuracy\n");
    for r in rows {
        text.push_str(&format!("{},{},{:.1},{:.6},{:.6}\n", r.epoch, r.examples, r.wall_s, r.train_loss, r.val_accuracy));
    }
    programl::fsutil::write_bytes_atomically(&out.join("log.csv"), programl::fsutil::Durability::Atomic, text.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use programl::builder::{build_file, BuildOptions};
    use programl_model::{GraphHead, Hyper, Join, Pool};

    /// The cosine schedule starts at the base rate, halves it halfway
    /// through the epochs, moves within an epoch batch by batch, and ends
    /// at 0; the constant one never moves.
    #[test]
    fn the_cosine_schedule_falls_batch_by_batch_to_zero() {
        let c = LrSchedule::Cosine;
        assert_eq!(c.rate(1e-3, 0, 0, 100, 4), 1e-3);
        assert!((c.rate(1e-3, 2, 0, 100, 4) - 5e-4).abs() < 1e-12);
        let (a, b) = (c.rate(1e-3, 1, 10, 100, 4), c.rate(1e-3, 1, 11, 100, 4));
        assert!(a > b && b > c.rate(1e-3, 2, 0, 100, 4), "{a} {b}");
        assert!(c.rate(1e-3, 3, 100, 100, 4).abs() < 1e-12);
        // Past the end (a shortened run) it stays at 0, never rises.
        assert!(c.rate(1e-3, 5, 0, 100, 4).abs() < 1e-12);
        assert!((0..4).all(|e| LrSchedule::Constant.rate(1e-3, e, 7, 100, 4) == 1e-3));
        assert_eq!(LrSchedule::parse("cosine").unwrap(), LrSchedule::Cosine);
        let err = LrSchedule::parse("linear").unwrap_err().to_string();
        assert!(err.contains("'linear'") && err.contains("constant or cosine"), "{err}");
    }

    /// Three real graphs; graph 0 has two items that differ only in their
    /// auxiliary inputs, as two DevMap rows of one kernel do.
    fn examples() -> (Examples, programl::vocab::Vocabulary) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data");
        let graphs: Vec<_> =
            ["branches.ll", "calls.ll", "invoke.ll"].iter().map(|f| build_file(&root.join(f), &BuildOptions::default()).unwrap()).collect();
        let vocabulary = crate::devmap::vocabulary_of(&graphs);
        let inputs = graphs.iter().map(|g| GraphInput::new(g, &vocabulary).unwrap()).collect();
        let item = |graph, label, aux: [f32; 2]| Item { graph, label, aux: aux.to_vec() };
        let items = vec![item(0, 1, [1.0, 2.0]), item(1, 0, [3.0, 1.0]), item(0, 0, [-2.0, 0.5]), item(2, 1, [0.0, 4.0])];
        (Examples { inputs, items }, vocabulary)
    }

    #[test]
    fn an_epoch_holds_every_item_once_with_a_graphs_items_together() {
        let (data, _) = examples();
        let all = [0, 1, 2, 3];
        let whole = epoch_batches(&data, &all, 7, 0, 100_000, 1);
        assert_eq!(whole.len(), 1);
        let mut seen = whole[0].clone();
        let at = |i: usize| whole[0].iter().position(|&x| x == i).unwrap();
        assert_eq!(at(0).abs_diff(at(2)), 1, "graph 0's items are adjacent: {:?}", whole[0]);
        assert!(at(0) < at(2), "in the order given");
        seen.sort_unstable();
        assert_eq!(seen, all);
        // One graph per batch: graph 0's batch has both its items; with two
        // items at least, the one-item batches are left out.
        let one = epoch_batches(&data, &all, 7, 0, 1, 1);
        assert_eq!(one.len(), 3);
        assert!(one.contains(&vec![0, 2]));
        assert_eq!(epoch_batches(&data, &all, 7, 0, 1, 2), vec![vec![0, 2]]);
        // The order depends on the epoch (over a few epochs, not always the same).
        let orders: std::collections::BTreeSet<_> = (0..8).map(|e| epoch_batches(&data, &all, 7, e, 1, 1)).collect();
        assert!(orders.len() > 1);
    }

    /// The examples and a 3-step gated head with their two auxiliary
    /// inputs joining `join`, initialised from `seed`.
    fn gated_model(seed: i64, join: Join) -> (Examples, programl::vocab::Vocabulary, Hyper, Ggnn) {
        let (data, vocabulary) = examples();
        let head = GraphHead { aux: vec!["a".into(), "b".into()], aux_hidden: 8, pool: Pool::Gated, join };
        let hyper = Hyper { steps: 3, state_dropout: 0.0, graph: Some(head), ..Hyper::spec(vocabulary.len()) };
        tch::manual_seed(seed);
        let model = Ggnn::new(&hyper, Device::Cpu);
        (data, vocabulary, hyper, model)
    }

    /// The code-only term: the step's loss is the head's cross-entropy
    /// plus the weight times the pooled logits' own, and training with it
    /// makes the graph's pooled logits predict the label without the
    /// auxiliary inputs.
    #[test]
    fn the_code_loss_adds_the_pooled_logits_cross_entropy() {
        code_loss_adds_the_code_logits_cross_entropy(Join::Logits);
    }

    /// The same where the auxiliary inputs join the pooled state: the code
    /// loss reads the state through `pool.out`.
    #[test]
    fn the_code_loss_reads_the_joined_state_through_pool_out() {
        code_loss_adds_the_code_logits_cross_entropy(Join::State);
    }

    fn code_loss_adds_the_code_logits_cross_entropy(join: Join) {
        let (data, _, hyper, model) = gated_model(5, join);
        let params = model.parameters();
        let mut opt = AdamW::new(&params, 0.01);
        // Graph 1 is labelled 0, graph 2 is labelled 1, one item each.
        let items = [1, 3];
        let (batch, rows) = assemble(&data, &items);
        let prepared = Prepared::new(&batch, &hyper, Device::Cpu);
        let labels = Tensor::from_slice(&[0i64, 1]);
        let (main, code) = {
            let _g = tch::no_grad_guard();
            let pooled = model.pooled_logits(&prepared, hyper.steps, true).index_select(0, &Tensor::from_slice(&rows));
            let aux = aux_tensor(&model, &data, &items);
            let logits = model.graph_logits(&pooled, aux.as_ref(), true);
            let code = model.code_logits(&pooled);
            assert_eq!(pooled.size()[1], if join == Join::State { hyper.hidden } else { 2 });
            (logits.cross_entropy_for_logits(&labels).double_value(&[]), code.cross_entropy_for_logits(&labels).double_value(&[]))
        };
        let value = train_step(&model, &mut opt, &params, &data, &items, 0.5).unwrap();
        assert!((value - (main + 0.5 * code)).abs() < 1e-5, "loss {value}, head {main}, code-only {code}");
        for _ in 0..60 {
            train_step(&model, &mut opt, &params, &data, &items, 0.5).unwrap();
        }
        let _g = tch::no_grad_guard();
        let pooled = model.code_logits(&model.pooled_inference(&prepared, hyper.steps));
        let pooled: Vec<f32> = Vec::try_from(pooled.index_select(0, &Tensor::from_slice(&rows)).flatten(0, -1)).unwrap();
        assert!(pooled[0] > pooled[1] && pooled[3] > pooled[2], "the pooled logits alone give each graph its label: {pooled:?}");
    }

    /// Refitting the head moves the classifier after the graph vector and
    /// nothing else, fits items that share a graph and differ only in their
    /// auxiliary inputs, and leaves the normalisation statistics the items'
    /// own: the inference forward then gives the training forward's logits.
    #[test]
    fn refitting_the_head_moves_only_the_head_and_fits_the_items() {
        let (data, _, hyper, model) = gated_model(4, Join::State);
        let all = [0, 1, 2, 3];
        // As after training: every parameter has a gradient (zeroed by each
        // refit step), so a step over all of them would move them all.
        let params = model.parameters();
        train_step(&model, &mut AdamW::new(&params, 0.01), &params, &data, &all, 0.0).unwrap();
        let before: Vec<(&str, Tensor)> = model.named_parameters().into_iter().map(|(n, t)| (n, t.detach().copy())).collect();
        let first = refit_head(&model, &data, &all, 0.01, 1, 100_000).unwrap().expect("one step's loss");
        let last = refit_head(&model, &data, &all, 0.01, 300, 100_000).unwrap().expect("the last step's loss");
        assert!(last < 0.1 * first, "the loss falls: {first} then {last}");
        for ((name, now), (_, was)) in model.named_parameters().into_iter().zip(&before) {
            let moved = now.not_equal_tensor(was).any().int64_value(&[]) != 0;
            assert_eq!(moved, name.starts_with("aux."), "{name} moved: {moved}");
        }
        let probs = probabilities(&model, &data, &all, hyper.steps, 100_000);
        for (p, &i) in probs.iter().zip(&all) {
            assert_eq!(argmax(p).0, data.items[i].label, "item {i}: {probs:?}");
        }
        let pooled = pooled_items(&model, &data, &all, hyper.steps, 100_000);
        let aux = aux_tensor(&model, &data, &all).unwrap();
        let _g = tch::no_grad_guard();
        let inference = model.graph_logits(&pooled, Some(&aux), false);
        let training = model.graph_logits(&pooled, Some(&aux), true);
        let gap = (inference - training).abs().max().double_value(&[]);
        assert!(gap < 1e-4, "running statistics are the items' own: logits differ by {gap}");
        assert_eq!(refit_head(&model, &data, &all, 0.01, 0, 100_000).unwrap(), None, "0 steps: the statistics only");
        assert_eq!(refit_head(&model, &data, &[1], 0.01, 5, 100_000).unwrap(), None, "one item: nothing to normalise over");
    }

    /// The graph vectors come back in the items' order, whatever the
    /// batches (here one graph each) and however items share graphs, and
    /// each is its graph's vector run alone.
    #[test]
    fn pooled_items_follow_the_items_order_across_batches() {
        let (data, _, hyper, model) = gated_model(6, Join::State);
        let order = [2, 3, 1, 0];
        let pooled = pooled_items(&model, &data, &order, hyper.steps, 1);
        for (k, &i) in order.iter().enumerate() {
            let alone = pooled_items(&model, &data, &[i], hyper.steps, 100_000);
            let gap = (pooled.get(k as i64) - alone.get(0)).abs().max().double_value(&[]);
            assert!(gap < 1e-5, "row {k} (item {i}) differs from its graph run alone by {gap}");
        }
        let (a, b) = (pooled.get(1), pooled.get(3));
        assert!((a - b).abs().max().double_value(&[]) > 1e-3, "items of different graphs have different vectors");
        let shared = (pooled.get(0) - pooled.get(3)).abs().max().double_value(&[]);
        assert!(shared < 1e-5, "items 2 and 0 share graph 0: {shared}");
    }

    #[test]
    fn training_fits_a_batch_and_both_forwards_agree_on_shared_graphs() {
        fits_and_agrees(Join::Logits);
    }

    /// The same with the auxiliary inputs joining the pooled state: it
    /// trains, and the torch-free inference (the pass's) reads the bundle
    /// the same way.
    #[test]
    fn a_state_joined_head_trains_and_both_forwards_agree() {
        fits_and_agrees(Join::State);
    }

    fn fits_and_agrees(join: Join) {
        let (data, vocabulary, hyper, model) = gated_model(3, join);
        let params = model.parameters();
        let mut opt = AdamW::new(&params, 0.01);
        let all = [0, 1, 2, 3];
        let first = train_step(&model, &mut opt, &params, &data, &all, 0.0).unwrap();
        let mut last = first;
        for _ in 0..40 {
            last = train_step(&model, &mut opt, &params, &data, &all, 0.0).unwrap();
        }
        assert!(last < 0.5 * first, "the loss falls on a batch it trains on: {first} then {last}");

        // Batched with its graph run once, or each item alone: the same.
        let together = probabilities(&model, &data, &all, hyper.steps, 100_000);
        for (k, &i) in all.iter().enumerate() {
            let alone = probabilities(&model, &data, &[i], hyper.steps, 100_000);
            for (a, b) in together[k].iter().zip(&alone[0]) {
                assert!((a - b).abs() < 1e-5, "item {i}: {:?} against {:?}", together[k], alone[0]);
            }
        }
        // The two items of graph 0 read their own auxiliary inputs, and the
        // model learnt their labels.
        assert_eq!(argmax(&together[0]).0, 1);
        assert_eq!(argmax(&together[2]).0, 0);

        // The torch-free inference (the learned pass's) gives the same.
        let dir = tempfile::tempdir().unwrap();
        let config = crate::poj104::bundle_config(&["cpu".into(), "gpu".into()], &hyper, Vec::new(), &[], "test", 0, 0.0);
        programl_model::bundle::Bundle::save(dir.path(), &config, &model, &vocabulary).unwrap();
        let cpu = programl_infer::Model::open(dir.path()).unwrap();
        let options = programl_infer::Options { dtype: programl_infer::Dtype::F32, ..Default::default() };
        let torch_free = probabilities_cpu(&cpu, &options, &data, &all, 100_000).unwrap();
        for (a, b) in together.iter().flatten().zip(torch_free.iter().flatten()) {
            assert!((a - b).abs() < 1e-5, "{together:?} against {torch_free:?}");
        }
    }
}
