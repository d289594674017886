//! A bundle's settings: the model's shape ([`Hyper`]), its graph head, and
//! `config.json` ([`Config`], read and checked by [`read_config`]).
//!
//! These types are the bundle format: the trainer (`programl-model`)
//! writes them and re-exports them; this crate, the learned pass and
//! `eval`/`predict` read them.

use serde::{Deserialize, Serialize};

/// Node-text embedding width (SPEC.md §3).
pub const TEXT_DIM: i64 = programl_kernels::TEXT_DIM as i64;
/// Root-selector width.
pub const SELECTOR_DIM: i64 = 2;
/// Hidden state width: text embedding and selector.
pub const HIDDEN: i64 = programl_kernels::HIDDEN as i64;
/// Edge types: control, data, call, each forward and backward.
pub const EDGE_TYPES: i64 = programl_kernels::EDGE_TYPES as i64;

/// `s(k)`, position `k`'s sinusoidal embedding: 16 sines, 16 cosines of
/// `k·ω_i` with `ω_i = 10000^(−2i/32)`, then 2 zeros (the selector's
/// columns). The position gate is `p(k) = 2σ(W_p s(k) + b_p)`.
pub fn sinusoid(k: i64) -> [f32; HIDDEN as usize] {
    let mut row = [0f32; HIDDEN as usize];
    sinusoid_into(k, &mut row);
    row
}

/// [`sinusoid`] for a state of any width `row.len()` (`hidden`): `t / 2`
/// sines and `t / 2` cosines of `k·ω_i`, `ω_i = 10000^(−2i/t)` with `t =
/// hidden − 2` the text embedding's width, then the selector's 2 zeros.
pub fn sinusoid_into(k: i64, row: &mut [f32]) {
    let text = row.len() - SELECTOR_DIM as usize;
    let half = text / 2;
    row.fill(0.0);
    for i in 0..half {
        let omega = 1.0 / 10000f64.powf((2 * i) as f64 / text as f64);
        let a = k as f64 * omega;
        row[i] = a.sin() as f32;
        row[half + i] = a.cos() as f32;
    }
}

/// Batch-norm epsilon of the auxiliary classifier (PyTorch's
/// `BatchNorm1d` default).
pub const NORM_EPS: f64 = 1e-5;

/// The model's shape and training constants. Saved in a bundle's
/// `config.json`; the parameter shapes follow from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hyper {
    /// Embedding rows: the vocabulary with its unknown id.
    pub vocab_size: usize,
    /// Rows of the position gate table; larger positions are clamped.
    pub positions: i64,
    /// The selector's non-zero value (upstream: 50).
    pub selector_value: f64,
    /// Message-passing steps by default (training uses this T).
    pub steps: i64,
    /// Dropout on the GRU state during training.
    pub state_dropout: f64,
    /// Classes per node (and per graph, with a graph head).
    pub classes: i64,
    /// The graph-level head, for graph tasks (absent: per-node predictions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphHead>,
    /// State width: the text embedding (`hidden − 2`, even) and the root
    /// selector (2). Absent: 34, SPEC.md §3's. `programl-infer` runs any
    /// width (34 on its fastest kernels); the trainer builds 34.
    #[serde(default = "spec_hidden", skip_serializing_if = "is_spec_hidden")]
    pub hidden: i64,
    /// When message passing stops (absent: after `steps` steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// How a node combines its incoming messages (absent: `mean`).
    #[serde(default, skip_serializing_if = "Aggregation::is_mean")]
    pub aggregation: Aggregation,
}

/// How a node combines its incoming messages each step: their `mean`
/// (SPEC.md §3's, upstream's), their `sum`, or their channel-wise `max`.
/// A sum or a max can say "one of them" where a mean takes a vote (a
/// dominance merge: docs/perf/models.md, "Why the short tasks stall"),
/// and a max keeps one strong message from fading among many weak ones.
/// `mean-max` is the mean over forward edges (a node's operands and
/// predecessors) plus the max over backward ones (its users and
/// successors): an AND over a few operands beside an OR over many users.
/// Every precision runs all four; the INT8 step takes a max's messages
/// whole (`int8::aggregate_max_to_nodes`), where a mean's or a sum's split
/// into their biases' part and their products', and aggregates
/// `mean-max`'s in FP32 before quantising them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregation {
    #[default]
    Mean,
    Sum,
    Max,
    #[serde(rename = "mean-max")]
    MeanMax,
}

impl Aggregation {
    pub fn is_mean(&self) -> bool {
        *self == Aggregation::Mean
    }

    pub fn is_sum(&self) -> bool {
        *self == Aggregation::Sum
    }

    /// Its name in `config.json` and on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Aggregation::Mean => "mean",
            Aggregation::Sum => "sum",
            Aggregation::Max => "max",
            Aggregation::MeanMax => "mean-max",
        }
    }

    /// The kernels' name for it.
    pub fn reduce(&self) -> programl_kernels::forward::Reduce {
        use programl_kernels::forward::Reduce;
        match self {
            Aggregation::Mean => Reduce::Mean,
            Aggregation::Sum => Reduce::Sum,
            Aggregation::Max => Reduce::Max,
            Aggregation::MeanMax => Reduce::MeanMax,
        }
    }
}

impl std::str::FromStr for Aggregation {
    type Err = String;
    fn from_str(s: &str) -> Result<Aggregation, String> {
        match s {
            "mean" => Ok(Aggregation::Mean),
            "sum" => Ok(Aggregation::Sum),
            "max" => Ok(Aggregation::Max),
            "mean-max" => Ok(Aggregation::MeanMax),
            other => Err(format!("aggregation '{other}': expected mean, sum, max or mean-max")),
        }
    }
}

fn spec_hidden() -> i64 {
    HIDDEN
}

fn is_spec_hidden(h: &i64) -> bool {
    *h == HIDDEN
}

/// Adaptive depth: each graph's message passing stops at the first step
/// after which no entry of any of its nodes' states moved by more than
/// `tolerance` (a fixed point, within it), or after `max_steps` steps. A
/// graph that stopped keeps its state while the rest of its batch goes on,
/// so its result does not depend on the batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stop {
    /// The largest change of a state entry in one step that counts as
    /// converged (≥ 0).
    pub tolerance: f64,
    /// The cap on steps (1..=[`crate::bundle::MAX_STEPS`]).
    pub max_steps: i64,
}

impl Stop {
    /// The rule's values are usable: a finite tolerance ≥ 0 and a cap in
    /// 1..=[`crate::bundle::MAX_STEPS`]; else what is wrong, each field
    /// named under `prefix` (`hyper.stop` in a bundle's config).
    pub fn check(&self, prefix: &str) -> Result<(), String> {
        use crate::bundle::MAX_STEPS;
        if !(self.tolerance.is_finite() && self.tolerance >= 0.0) {
            return Err(format!("{prefix}.tolerance {} is not a finite value ≥ 0", self.tolerance));
        }
        if !(1..=MAX_STEPS).contains(&self.max_steps) {
            return Err(format!("{prefix}.max_steps {} is outside 1..={MAX_STEPS}", self.max_steps));
        }
        Ok(())
    }
}

/// A graph-level head (SPEC.md §3, "graph-level tasks"): the per-node
/// readout is summed over each graph's nodes into C graph logits; where
/// the task has auxiliary inputs, those logits and the inputs go through a
/// small classifier:
///
/// ```text
/// x = [Σ_v R_v ; log(1 + aux)]        (C + A)
/// x̂ = batch-normalised x              (running statistics at inference)
/// logits = W_2 relu(W_1 x̂ + b_1) + b_2   (C)
/// ```
///
/// (upstream's auxiliary readout, in `programl/models/ggnn/` at v0.1.0,
/// without its dropout). The auxiliary inputs are raw quantities (bytes,
/// work-items): the model applies `log1p` itself, so that the trainer and
/// the learned pass featurise them the same way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphHead {
    /// Names of the auxiliary inputs, in input order (empty: none).
    pub aux: Vec<String>,
    /// Width of the auxiliary classifier's hidden layer.
    pub aux_hidden: i64,
    /// How the nodes become the graph's C logits: `sum` (upstream's, the
    /// default) or `mean` of the per-node logits (logits that do not grow
    /// with the graph, which many-class tasks such as POJ-104 need to
    /// train stably), or `gated`, a pooling of the node states ([`Pool`]).
    #[serde(default, skip_serializing_if = "Pool::is_sum")]
    pub pool: Pool,
    /// What the auxiliary inputs join ([`Join`]): the graph's C logits
    /// (the default) or, with `gated` pooling, the pooled state itself.
    #[serde(default, skip_serializing_if = "Join::is_logits")]
    pub join: Join,
}

/// What a graph head's auxiliary inputs are concatenated with before its
/// classifier. `logits`: the graph's C pooled logits (upstream's; the
/// code reaches the classifier through C numbers). `state`: the `gated`
/// pooling's H-wide mean of node terms, before `pool.out`, so that the
/// classifier sees the graph vector whole and can learn thresholds on the
/// auxiliary inputs that differ from one kind of code to another:
///
/// ```text
/// x = [mean_v(u_v) ; log(1 + aux)]     (H + A; `pool.out` then serves
///                                       only the training's code loss)
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Join {
    #[default]
    Logits,
    State,
}

impl Join {
    pub fn is_logits(&self) -> bool {
        *self == Join::Logits
    }
}

/// A graph head's pooling. `sum` and `mean` pool the per-node readout
/// (C logits per node). `gated` pools the final node states instead, as
/// the GGNN paper's graph-level output does (Li et al., ICLR 2016, eq. 7),
/// averaged rather than summed so that it does not grow with the graph:
///
/// ```text
/// u_v = σ(W_g [h_T; h_0] + b_g) ⊙ tanh(W_s h_T + b_s)     (H per node)
/// logits = W_o mean_v(u_v) + b_o                           (C)
/// ```
///
/// Its tensors are `pool.gate.*`, `pool.transform.*` and `pool.out.*`;
/// the per-node readout's stay in the bundle, unused by the graph head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pool {
    #[default]
    Sum,
    Mean,
    Gated,
}

impl Pool {
    pub fn is_sum(&self) -> bool {
        *self == Pool::Sum
    }
}

impl Hyper {
    /// SPEC.md §3 for a vocabulary of `vocab_size` ids.
    pub fn spec(vocab_size: usize) -> Hyper {
        Hyper {
            vocab_size,
            positions: 1024,
            selector_value: 50.0,
            steps: 30,
            state_dropout: 0.2,
            classes: 2,
            graph: None,
            hidden: HIDDEN,
            stop: None,
            aggregation: Aggregation::Mean,
        }
    }

    /// The auxiliary inputs of a graph head (0 without one).
    pub fn aux_inputs(&self) -> i64 {
        self.graph.as_ref().map_or(0, |g| g.aux.len() as i64)
    }

    /// Every parameter's name and shape, in a fixed order.
    pub fn parameter_shapes(&self) -> Vec<(&'static str, Vec<i64>)> {
        let (h, c) = (self.hidden, self.classes);
        vec![
            ("embedding.weight", vec![self.vocab_size as i64, h - SELECTOR_DIM]),
            ("messages.weight", vec![EDGE_TYPES * h, h]),
            ("messages.bias", vec![EDGE_TYPES * h]),
            ("gate.weight", vec![h, h]),
            ("gate.bias", vec![h]),
            ("gru.weight_ih", vec![3 * h, h]),
            ("gru.weight_hh", vec![3 * h, h]),
            ("gru.bias_ih", vec![3 * h]),
            ("gru.bias_hh", vec![3 * h]),
            ("readout.gate.weight", vec![c, 2 * h]),
            ("readout.gate.bias", vec![c]),
            ("readout.transform.weight", vec![c, h]),
            ("readout.transform.bias", vec![c]),
        ]
        .into_iter()
        .chain(self.pool_shapes())
        .chain(self.aux_shapes().into_iter().filter(|(n, _)| !n.starts_with("aux.norm.running")))
        .collect()
    }

    /// Whether the auxiliary classifier takes the pooled state rather than
    /// the pooled logits ([`Join::State`]).
    pub fn joins_state(&self) -> bool {
        self.graph.as_ref().is_some_and(|g| g.join == Join::State)
    }

    /// The width of the auxiliary classifier's input: the pooled logits
    /// (C) or state (H), then the auxiliary inputs (0 without them).
    pub fn aux_width(&self) -> i64 {
        match self.aux_inputs() {
            0 => 0,
            a if self.joins_state() => self.hidden + a,
            a => self.classes + a,
        }
    }

    /// Whether the graph head pools node states ([`Pool::Gated`]).
    pub fn pools_states(&self) -> bool {
        self.graph.as_ref().is_some_and(|g| g.pool == Pool::Gated)
    }

    /// The gated state pooling's tensors ([`Pool`]).
    fn pool_shapes(&self) -> Vec<(&'static str, Vec<i64>)> {
        if !self.pools_states() {
            return Vec::new();
        }
        let (h, c) = (self.hidden, self.classes);
        vec![
            ("pool.gate.weight", vec![h, 2 * h]),
            ("pool.gate.bias", vec![h]),
            ("pool.transform.weight", vec![h, h]),
            ("pool.transform.bias", vec![h]),
            ("pool.out.weight", vec![c, h]),
            ("pool.out.bias", vec![c]),
        ]
    }

    /// The auxiliary classifier's tensors, trainable and not.
    fn aux_shapes(&self) -> Vec<(&'static str, Vec<i64>)> {
        let (w, c) = (self.aux_width(), self.classes);
        if w == 0 {
            return Vec::new();
        }
        let hidden = self.graph.as_ref().map_or(0, |g| g.aux_hidden);
        vec![
            ("aux.norm.weight", vec![w]),
            ("aux.norm.bias", vec![w]),
            ("aux.norm.running_mean", vec![w]),
            ("aux.norm.running_var", vec![w]),
            ("aux.hidden.weight", vec![hidden, w]),
            ("aux.hidden.bias", vec![hidden]),
            ("aux.out.weight", vec![c, hidden]),
            ("aux.out.bias", vec![c]),
        ]
    }

    /// Non-trainable state saved with the weights (the auxiliary
    /// classifier's running statistics), in [`Ggnn::named_buffers`] order.
    pub fn buffer_shapes(&self) -> Vec<(&'static str, Vec<i64>)> {
        self.aux_shapes().into_iter().filter(|(n, _)| n.starts_with("aux.norm.running")).collect()
    }

    /// Everything `weights.safetensors` holds: parameters, then buffers.
    pub fn tensor_shapes(&self) -> Vec<(&'static str, Vec<i64>)> {
        let mut all = self.parameter_shapes();
        all.extend(self.buffer_shapes());
        all
    }

    /// Number of trainable parameters.
    pub fn parameter_count(&self) -> i64 {
        self.parameter_shapes().iter().map(|(_, s)| s.iter().product::<i64>()).sum()
    }
}

/// The class a node-level bundle's probabilities are reported for: the one
/// named `positive`, else the second of two (the learned pass's and the
/// Python package's choice).
pub fn positive_class(classes: &[String]) -> Option<usize> {
    classes.iter().position(|c| c == "positive").or((classes.len() == 2).then_some(1))
}
