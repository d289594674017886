//! An open bundle, its weights packed once, and the GGNN's inference on
//! the CPU: the node head (class probabilities of every node) and the
//! graph head (of every graph), at FP32, BF16 or INT8.
//!
//! The step is the one `programl-model`'s CPU inference computes, on the
//! same kernels (`programl-kernels`), with plain buffers instead of
//! tensors:
//!
//! ```text
//! h_0 = [embedding[token]; selector]
//! per step:  F  = h · [W_msg; W_hh]ᵀ         (each node only the blocks it needs)
//!            M  = mean over incoming edges of (F[source, type] + b_type) ⊙ p(position)
//!            GI = M · W_ihᵀ
//!            h  = GRU(GI, F[W_hh blocks], h)
//! logits = σ(f([h_T; h_0])) ⊙ g(h_T)
//! ```
//!
//! What depends on the weights alone is made when the bundle is opened:
//! the position gate table `p(k) = 2σ(W_p s(k) + b_p)` for every
//! position, the GRU's biases as the cell adds them, `W_ih` packed for
//! FP32 (and BF16 where the CPU has it) and quantised for INT8. The fused
//! product's columns come in an order that depends on the graph (the edge
//! types that fewest nodes send first, so that each node's needs are a
//! suffix of its row): its packings are made once per order and kept
//! (a handful of orders occur).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use programl::batch::{Batch, EdgeType};
use programl::vocab::Vocabulary;
use programl_kernels::cpu::{self, Isa};
use programl_kernels::forward::{self, Edges, GruBias, Layout};
use programl_kernels::gemm::{self, RowGroups};
use programl_kernels::{int8, Bf16, Elem, EDGE_TYPES, FUSED, GATES, HIDDEN};

use crate::bundle::{read_config, AutoDtype, BundleError, Config, Head, VOCABULARY_FILE, WEIGHTS_FILE};
use crate::config::{sinusoid_into, Aggregation, Pool, Stop, NORM_EPS, SELECTOR_DIM};
use crate::depth::{self, Depth, Settle};
use crate::gated::Gated;
use crate::weights::Weights;
use crate::wide::{self, Wide};
use crate::{Dtype, Options, Precision};

const H: usize = HIDDEN;

/// An open bundle, ready to predict.
pub struct Model {
    pub config: Config,
    pub vocabulary: Vocabulary,
    /// The directory it was opened from.
    pub dir: PathBuf,
    weights: Weights,
    /// The state width (`hyper.hidden`; 34 for the shipped bundles).
    hidden: usize,
    /// `p(k)` for the positions computed so far, \[rows, hidden\]: grown on
    /// demand to the largest position a batch uses (real graphs use a few
    /// dozen of the 1,024; computing all of them cost a millisecond a
    /// process, more than a graph-level decision's readout).
    gate_table: Mutex<Arc<Vec<f32>>>,
    /// The six edge-type biases, \[6, 34\].
    msg_bias: Vec<f32>,
    /// The kernels specialised for the shipped width, 34 (a fixed T or a
    /// stopping rule, every precision): `None` for another width.
    fast: Option<Fast>,
    /// The step for any other width ([`crate::wide`]), FP32 or INT8.
    wide: Option<Wide>,
    /// The readout: its gate \[C, 2h\] and transform \[C, h\].
    readout: Gated,
    /// The gated state pooling's gate \[h, 2h\] and transform \[h, h\],
    /// for a graph head that pools states ([`crate::config::Pool`]).
    pool: Option<Gated>,
    /// The fused product's packings, per block order and precision.
    packs: Mutex<HashMap<(Order, Precision), Arc<Packing>>>,
    /// Buffers kept from one call to the next.
    scratch: Mutex<Scratch>,
}

/// The packed weights of the 34-wide kernels.
struct Fast {
    gru_bias: GruBias,
    /// `W_ih` packed: FP32, and BF16 where the CPU has BF16 products.
    w_ih: gemm::Packed,
    w_ih_bf16: Option<gemm::Packed>,
    /// INT8: `W_ih` and `W_hh` quantised (every path: VNNI, AVX2, portable).
    int8_gru: int8::Gru,
}

/// A permutation of the six edge-type blocks (`slot[type]`).
type Order = [u8; EDGE_TYPES];

enum Packing {
    /// FP32 or BF16: `[W_msg (in slot order); W_hh]ᵀ`, \[34, 306\].
    Fused(gemm::Packed),
    /// INT8: the six edge maps in slot order, \[34, 204\], quantised.
    Messages(int8::Packed),
}

/// Per-call buffers, grown as needed.
#[derive(Default)]
pub(crate) struct Scratch {
    f32s: Vec<Vec<f32>>,
    products_f32: Vec<Vec<f32>>,
    products_bf16: Vec<Vec<Bf16>>,
    u32s: Vec<Vec<u32>>,
}

fn grow<T: Clone>(pool: &mut Vec<Vec<T>>, lens: &[usize], zero: T) {
    if pool.len() < lens.len() {
        pool.resize_with(lens.len(), Vec::new);
    }
    for (b, &len) in pool.iter_mut().zip(lens) {
        if b.len() < len {
            b.resize(len, zero.clone());
        }
    }
}

fn take<T, const N: usize>(pool: &mut [Vec<T>], lens: [usize; N]) -> [&mut [T]; N] {
    let mut it = pool.iter_mut();
    lens.map(|len| &mut it.next().expect("grown")[..len])
}

/// What a prediction returns: probabilities, row-major, and how they were
/// computed.
#[derive(Clone, Debug)]
pub struct Output {
    /// \[rows × classes\]: one row per node (node head) or graph (graph head).
    pub probabilities: Vec<f32>,
    /// The precision in effect.
    pub precision: Precision,
    /// The kernel path taken.
    pub isa: Isa,
    /// Message-passing steps run: the most any graph ran.
    pub steps: i64,
    /// The steps each graph of the batch ran (all the same without a
    /// stopping rule, `hyper.stop`).
    pub steps_per_graph: Vec<i64>,
}

/// A prediction's logits and how they were computed.
struct Run {
    logits: Vec<f32>,
    precision: Precision,
    isa: Isa,
    steps_per_graph: Vec<i64>,
}

impl Run {
    fn steps(&self) -> i64 {
        self.steps_per_graph.iter().copied().max().unwrap_or(0)
    }
}

/// A batch as the step reads it: edges of all six types sorted by target.
struct Input {
    nodes: usize,
    tokens: Vec<usize>,
    selector: Vec<usize>,
    /// `crow[v]..crow[v + 1]` are node `v`'s incoming edges.
    crow: Vec<i64>,
    /// Per edge: `6 · source + type`, the type, the clamped position.
    sources: Vec<i64>,
    types: Vec<i64>,
    positions: Vec<i64>,
    /// The graphs' node offsets, `graphs[g]..graphs[g + 1]`.
    graphs: Vec<usize>,
}

/// Nodes per chunk of a batch, per thread (a larger graph runs alone).
const CHUNK_NODES: usize = 2048;

impl Input {
    /// Rows of the gate table the edges read: one more than the largest
    /// (clamped) position.
    fn position_rows(&self) -> usize {
        self.positions.iter().max().map_or(0, |&p| p as usize + 1)
    }

    /// Ranges of whole graphs (indices into `graphs`), each of at most
    /// `limit` nodes unless one graph alone is larger. (By graph, not by
    /// node offset: an empty graph at a boundary belongs to one chunk.)
    fn chunks(&self, limit: usize) -> Vec<std::ops::Range<usize>> {
        let count = self.graphs.len().saturating_sub(1);
        let mut out = Vec::new();
        let mut first = 0usize;
        for g in 0..count {
            if self.graphs[g + 1] - self.graphs[first] > limit && g > first {
                out.push(first..g);
                first = g;
            }
        }
        if first < count || out.is_empty() {
            out.push(first..count);
        }
        out
    }

    /// The graphs `range` (indices into `graphs`; no edge crosses a
    /// graph's bounds) as an input of their own.
    fn part(&self, range: std::ops::Range<usize>) -> Input {
        let (a, b) = (self.graphs[range.start], self.graphs[range.end]);
        let (e0, e1) = (self.crow[a] as usize, self.crow[b] as usize);
        let shift = (a * EDGE_TYPES) as i64;
        Input {
            graphs: self.graphs[range.start..=range.end].iter().map(|o| o - a).collect(),
            nodes: b - a,
            tokens: self.tokens[a..b].to_vec(),
            selector: self.selector[a..b].to_vec(),
            crow: self.crow[a..=b].iter().map(|&c| c - e0 as i64).collect(),
            sources: self.sources[e0..e1].iter().map(|&s| s - shift).collect(),
            types: self.types[e0..e1].to_vec(),
            positions: self.positions[e0..e1].to_vec(),
        }
    }

    /// The graphs `keep` (indices into `graphs`, ascending) as an input
    /// of their own, in that order.
    fn select(&self, keep: &[usize]) -> Input {
        let mut out = Input {
            nodes: 0,
            tokens: Vec::new(),
            selector: Vec::new(),
            crow: vec![0],
            sources: Vec::new(),
            types: Vec::new(),
            positions: Vec::new(),
            graphs: vec![0],
        };
        for &g in keep {
            let (a, b) = (self.graphs[g], self.graphs[g + 1]);
            let (e0, e1) = (self.crow[a] as usize, self.crow[b] as usize);
            // Sources are `6 · node + type`: the graph's nodes move from `a`
            // to `out.nodes`, its edges from `e0` to the edges so far.
            let shift = (out.nodes as i64 - a as i64) * EDGE_TYPES as i64;
            let edges = out.sources.len() as i64 - e0 as i64;
            out.tokens.extend_from_slice(&self.tokens[a..b]);
            out.selector.extend_from_slice(&self.selector[a..b]);
            out.crow.extend(self.crow[a + 1..=b].iter().map(|&c| c + edges));
            out.sources.extend(self.sources[e0..e1].iter().map(|&s| s + shift));
            out.types.extend_from_slice(&self.types[e0..e1]);
            out.positions.extend_from_slice(&self.positions[e0..e1]);
            out.nodes += b - a;
            out.graphs.push(out.nodes);
        }
        out
    }

    fn new(batch: &Batch, vocab_size: usize, positions: i64) -> Input {
        let n = batch.node_count();
        let tokens = batch.tokens().iter().map(|&t| if (0..vocab_size as i64).contains(&t) { t as usize } else { 0 }).collect();
        let selector = batch.selector().iter().map(|&s| (s != 0) as usize).collect();
        let total: usize = EdgeType::ALL.iter().map(|&t| batch.edges(t).len()).sum();
        let mut crow = vec![0i64; n + 1];
        for t in EdgeType::ALL {
            for &v in batch.edges(t).targets {
                crow[v as usize + 1] += 1;
            }
        }
        for i in 1..=n {
            crow[i] += crow[i - 1];
        }
        let mut next = crow.clone();
        let (mut sources, mut types, mut clamped) = (vec![0i64; total], vec![0i64; total], vec![0i64; total]);
        for t in EdgeType::ALL {
            let e = batch.edges(t);
            for k in 0..e.len() {
                let v = e.targets[k] as usize;
                let slot = next[v] as usize;
                next[v] += 1;
                sources[slot] = e.sources[k] * EDGE_TYPES as i64 + t as i64;
                types[slot] = t as i64;
                clamped[slot] = e.positions[k].clamp(0, positions - 1);
            }
        }
        let mut graphs: Vec<usize> = batch.offsets().iter().map(|&o| o as usize).collect();
        if graphs.last() != Some(&n) {
            graphs.push(n);
        }
        Input { nodes: n, tokens, selector, crow, sources, types, positions: clamped, graphs }
    }
}

impl Model {
    /// Opens and checks the bundle in `dir`: `config.json`, the vocabulary
    /// (its size against the embedding's), every tensor; then packs.
    pub fn open(dir: &Path) -> Result<Model, BundleError> {
        let config = read_config(dir)?;
        let vocab_path = dir.join(VOCABULARY_FILE);
        let vocabulary = Vocabulary::load(&vocab_path).map_err(|source| BundleError::Vocabulary { path: vocab_path.clone(), source })?;
        if vocabulary.len() != config.hyper.vocab_size {
            return Err(BundleError::Invalid {
                path: vocab_path,
                detail: format!(
                    "the vocabulary has {} ids (with the unknown id) but the model's embedding has {} rows (config.json hyper.vocab_size)",
                    vocabulary.len(),
                    config.hyper.vocab_size
                ),
            });
        }
        let weights = Weights::read(&dir.join(WEIGHTS_FILE), &config.hyper)?;
        Ok(Model::from_parts(config, vocabulary, weights, dir.to_path_buf()))
    }

    /// [`Model::open`] with `edit` applied to the bundle's config before the
    /// model is built, for settings that are the reader's to choose (a
    /// stopping rule, `hyper.stop`, to evaluate a fixed-T bundle with
    /// adaptive depth). The edited config is checked as a read one is.
    pub fn open_with(dir: &Path, edit: impl FnOnce(&mut Config)) -> Result<Model, BundleError> {
        let m = Model::open(dir)?;
        let mut config = m.config.clone();
        edit(&mut config);
        if config == m.config {
            return Ok(m);
        }
        crate::bundle::check_config(dir, &config)?;
        let weights = Weights::read(&dir.join(WEIGHTS_FILE), &config.hyper)?;
        Ok(Model::from_parts(config, m.vocabulary, weights, dir.to_path_buf()))
    }

    /// A model from checked parts (what [`Model::open`] read).
    pub fn from_parts(config: Config, vocabulary: Vocabulary, weights: Weights, dir: PathBuf) -> Model {
        let hidden = config.hyper.hidden as usize;
        let fast = (hidden == H).then(|| {
            let (b_ih, b_hh) = (weights.get("gru.bias_ih"), weights.get("gru.bias_hh"));
            let mut gru_bias = GruBias { r: [0.0; H], z: [0.0; H], i_n: [0.0; H], h_n: [0.0; H] };
            for j in 0..H {
                gru_bias.r[j] = b_ih[j] + b_hh[j];
                gru_bias.z[j] = b_ih[H + j] + b_hh[H + j];
                gru_bias.i_n[j] = b_ih[2 * H + j];
                gru_bias.h_n[j] = b_hh[2 * H + j];
            }
            let w_ih = weights.get("gru.weight_ih");
            Fast {
                gru_bias,
                w_ih: gemm::Packed::from_weight(w_ih, GATES, H, false),
                w_ih_bf16: cpu::bf16().then(|| gemm::Packed::from_weight(w_ih, GATES, H, true)),
                int8_gru: int8::Gru::new(w_ih, weights.get("gru.weight_hh")),
            }
        });
        let wide = (hidden != H).then(|| Wide::new(&weights, hidden));
        let c = config.hyper.classes as usize;
        Model {
            readout: Gated::new(&weights, "readout", c, hidden, false),
            pool: config.hyper.pools_states().then(|| Gated::new(&weights, "pool", hidden, hidden, true)),
            msg_bias: weights.get("messages.bias").to_vec(),
            hidden,
            config,
            vocabulary,
            dir,
            weights,
            gate_table: Mutex::new(Arc::new(Vec::new())),
            fast,
            wide,
            packs: Mutex::new(HashMap::new()),
            scratch: Mutex::new(Scratch::default()),
        }
    }

    /// The precision a request gives on this thread's path: BF16 where the
    /// CPU has BF16 products (else FP32), INT8 on every path (VNNI, AVX2,
    /// portable), `auto` INT8 where it is the fastest ([`int8::preferred`]:
    /// VNNI) and FP32 elsewhere.
    pub fn precision_for(dtype: Dtype) -> Precision {
        match dtype {
            Dtype::F32 => Precision::F32,
            Dtype::Bf16 if cpu::bf16() => Precision::Bf16,
            Dtype::Int8 => Precision::Int8,
            Dtype::Auto if int8::preferred() => Precision::Int8,
            _ => Precision::F32,
        }
    }

    /// The gate table's rows `0..rows` (at least), computed on first need.
    fn gate_rows(&self, rows: usize) -> Arc<Vec<f32>> {
        let h = self.hidden;
        let mut table = self.gate_table.lock().unwrap_or_else(|p| p.into_inner());
        let have = table.len() / h;
        if have < rows {
            let (gw, gb) = (self.weights.get("gate.weight"), self.weights.get("gate.bias"));
            let mut grown = Vec::with_capacity(rows * h);
            grown.extend_from_slice(&table);
            let mut s = vec![0f32; h];
            for k in have..rows {
                sinusoid_into(k as i64, &mut s);
                for j in 0..h {
                    let mut x = gb[j] as f64;
                    for (i, &si) in s.iter().enumerate() {
                        x += gw[j * h + i] as f64 * si as f64;
                    }
                    grown.push(2.0 * (1.0 / (1.0 + (-x).exp())) as f32);
                }
            }
            *table = Arc::new(grown);
        }
        table.clone()
    }

    /// The fused product's packing for one block order.
    fn packing(&self, slot: &[usize; EDGE_TYPES], precision: Precision) -> Arc<Packing> {
        let order: Order = slot.map(|s| s as u8);
        let mut packs = self.packs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = packs.get(&(order, precision)) {
            return p.clone();
        }
        let w_msg = self.weights.get("messages.weight");
        let block = H * H;
        let mut ordered = vec![0f32; EDGE_TYPES * block];
        for (t, &b) in slot.iter().enumerate() {
            ordered[b * block..(b + 1) * block].copy_from_slice(&w_msg[t * block..(t + 1) * block]);
        }
        let packing = match precision {
            Precision::Int8 => Packing::Messages(int8::Packed::new(&int8::Columns::new(&ordered, int8::MESSAGES))),
            _ => {
                ordered.extend_from_slice(self.weights.get("gru.weight_hh"));
                Packing::Fused(gemm::Packed::from_weight(&ordered, FUSED, H, precision == Precision::Bf16))
            }
        };
        // A few orders occur; a pathological stream of graphs cannot grow
        // the cache without bound.
        if packs.len() >= 64 {
            packs.clear();
        }
        let packing = Arc::new(packing);
        packs.insert((order, precision), packing.clone());
        packing
    }

    /// Per-node logits \[N × C\] after `steps` steps, and the precision
    /// and path used.
    pub fn node_logits(&self, batch: &Batch, opts: &Options) -> (Vec<f32>, Precision, Isa, i64) {
        self.node_logits_with(batch, None, opts)
    }

    /// [`Model::node_logits`] with the steps each graph of the batch ran
    /// (all alike without a stopping rule).
    pub fn node_logits_per_graph(&self, batch: &Batch, opts: &Options) -> (Vec<f32>, Vec<i64>) {
        let run = self.run(batch, None, opts, false);
        (run.logits, run.steps_per_graph)
    }

    /// [`Model::node_logits`] with the root selector `selector` (one 0/1
    /// per node) in place of the batch's: several roots per graph, as the
    /// upstream GGNN's benchmark workload has them (`programl-train bench`).
    pub fn node_logits_with(&self, batch: &Batch, selector: Option<&[i64]>, opts: &Options) -> (Vec<f32>, Precision, Isa, i64) {
        let run = self.run(batch, selector, opts, false);
        let steps = run.steps();
        (run.logits, run.precision, run.isa, steps)
    }

    /// The per-node logits of `batch` (`per_graph`: summed over each
    /// graph's nodes, \[G, C\]), and how they were computed.
    fn run(&self, batch: &Batch, selector: Option<&[i64]>, opts: &Options, per_graph: bool) -> Run {
        let isa = opts.isa.unwrap_or(Isa::Vnni);
        cpu::with_cap(isa, || {
            // The bundle's stopping rule, capped at `steps` where given;
            // without a rule, `steps` or the bundle's T.
            let capped = match (opts.steps, &self.config.hyper.stop) {
                (Some(s), Some(stop)) => Some(Stop { tolerance: stop.tolerance, max_steps: s.clamp(0, stop.max_steps) }),
                _ => None,
            };
            let depth = match (&capped, &self.config.hyper.stop, opts.steps) {
                (Some(stop), _, _) | (None, Some(stop), _) => Depth::Adaptive(stop),
                (None, None, Some(s)) => Depth::Fixed(s.max(0) as usize),
                (None, None, None) => Depth::Fixed(self.config.hyper.steps.max(0) as usize),
            };
            // The 34-wide kernels run any depth at any precision; the
            // general step (another width) FP32 or INT8 (BF16 asks run FP32).
            let general = self.fast.is_none();
            // INT8's accuracy bound (models/README.md) was measured on the
            // mean's and the max's bundles; a sum or mean-max bundle's
            // `auto` stays FP32, and so does a bundle's whose config says so
            // (measured outside the bound); an explicit `int8` is honoured.
            let aggregation = self.config.hyper.aggregation;
            let auto_f32 = opts.dtype == Dtype::Auto
                && (aggregation.is_sum() || aggregation == Aggregation::MeanMax || self.config.auto_dtype == Some(AutoDtype::F32));
            let precision = match Model::precision_for(opts.dtype) {
                _ if auto_f32 => Precision::F32,
                Precision::Bf16 if general => Precision::F32,
                p => p,
            };
            let mut input = Input::new(batch, self.config.hyper.vocab_size, self.config.hyper.positions);
            if let Some(s) = selector {
                assert_eq!(s.len(), input.nodes, "one selector entry per node");
                input.selector = s.iter().map(|&x| (x != 0) as usize).collect();
            }
            let mut own = Scratch::default();
            let mut kept = self.scratch.try_lock();
            let scratch = match kept.as_deref_mut() {
                Ok(s) => s,
                Err(_) => &mut own,
            };
            let threads = opts.threads.max(1);
            // Graphs never exchange messages, so a batch runs in chunks of
            // whole graphs whose step buffers stay in cache (ten roots of a
            // 1,000-node unit in one pass streamed a 13 MB product per
            // step: 40% slower per root than one root alone).
            let chunks = input.chunks(CHUNK_NODES * threads);
            let (logits, steps_per_graph) = if chunks.len() == 1 {
                self.logits(&input, depth, precision, per_graph, threads, scratch)
            } else {
                let mut all = Vec::new();
                let mut steps = Vec::with_capacity(input.graphs.len());
                for range in chunks {
                    let (logits, s) = self.logits(&input.part(range), depth, precision, per_graph, threads, scratch);
                    all.extend(logits);
                    steps.extend(s);
                }
                (all, steps)
            };
            // The path the products took: INT8's own (AVX-VNNI under an
            // `avx512` cap), else the float kernels'.
            let isa = match (precision, general, int8::path()) {
                // The general step's INT8 products: VNNI's tiles, else
                // AVX2's (`vpmaddubsw`; also under AVX-VNNI).
                (Precision::Int8, true, Isa::AvxVnni) => Isa::Avx2,
                (Precision::Int8, _, path) => path,
                _ => cpu::active_float(),
            };
            Run { logits, precision, isa, steps_per_graph }
        })
    }

    /// Class probabilities of every node of `batch` (node-level bundles).
    pub fn node_probabilities(&self, batch: &Batch, opts: &Options) -> Result<Output, String> {
        if self.config.head != Head::Node {
            return Err(format!("{}: a graph-level bundle predicts per graph, not per node", self.dir.display()));
        }
        let mut run = self.run(batch, None, opts, false);
        softmax_rows(&mut run.logits, self.classes());
        let steps = run.steps();
        Ok(Output { probabilities: run.logits, precision: run.precision, isa: run.isa, steps, steps_per_graph: run.steps_per_graph })
    }

    /// Class probabilities of every graph of `batch` under the graph head,
    /// with each graph's raw auxiliary inputs row-major \[G × A\] (`None`
    /// for a head without them).
    pub fn graph_probabilities(&self, batch: &Batch, aux: Option<&[f32]>, opts: &Options) -> Result<Output, String> {
        let Some(head) = self.config.hyper.graph.as_ref() else {
            return Err(format!("{}: a node-level bundle has no graph head", self.dir.display()));
        };
        let (a, c, g) = (head.aux.len(), self.classes(), batch.graph_count());
        let aux = match (a, aux) {
            (0, _) => None,
            (_, Some(values)) if values.len() == g * a => Some(values),
            (_, Some(values)) => return Err(format!("{a} auxiliary inputs per graph for {g} graphs, got {} values", values.len())),
            (_, None) => return Err(format!("this graph head needs {a} auxiliary inputs per graph ({})", head.aux.join(", "))),
        };
        let mut run = self.run(batch, None, opts, true);
        // Per graph, summed over its nodes: C logits, or the gated
        // pooling's h terms.
        let width = if self.pool.is_some() { self.hidden } else { c };
        let mut pooled = std::mem::take(&mut run.logits);
        assert_eq!(pooled.len(), g * width, "one pooled row per graph");
        let mut counts = vec![0f32; g];
        for &graph in batch.graph_index() {
            counts[graph as usize] += 1.0;
        }
        if head.pool != Pool::Sum {
            for (row, n) in pooled.chunks_exact_mut(width).zip(&counts) {
                row.iter_mut().for_each(|x| *x /= n.max(1.0));
            }
        }
        let joins_state = self.config.hyper.joins_state();
        if self.pool.is_some() && !joins_state {
            let (ow, ob) = (self.weights.get("pool.out.weight"), self.weights.get("pool.out.bias"));
            pooled = pooled
                .chunks_exact(width)
                .flat_map(|u| (0..c).map(move |k| ob[k] + (0..width).map(|j| ow[k * width + j] * u[j]).sum::<f32>()))
                .collect();
        }
        let mut out = match aux {
            None => pooled,
            Some(aux) => self.aux_classifier(&pooled, if joins_state { width } else { c }, aux, g),
        };
        softmax_rows(&mut out, c);
        let steps = run.steps();
        Ok(Output { probabilities: out, precision: run.precision, isa: run.isa, steps, steps_per_graph: run.steps_per_graph })
    }

    /// The auxiliary classifier in evaluation mode: `[pooled; log1p(aux)]`,
    /// batch-normalised with the running statistics, one ReLU layer.
    /// `pooled` is `p` wide per graph: the C logits, or the H-wide state
    /// ([`crate::config::Join`]).
    fn aux_classifier(&self, pooled: &[f32], p: usize, aux: &[f32], g: usize) -> Vec<f32> {
        let w = &self.weights;
        let c = self.classes();
        let a = aux.len() / g.max(1);
        let width = p + a;
        let (nw, nb, rm, rv) =
            (w.get("aux.norm.weight"), w.get("aux.norm.bias"), w.get("aux.norm.running_mean"), w.get("aux.norm.running_var"));
        let (hw, hb, ow, ob) = (w.get("aux.hidden.weight"), w.get("aux.hidden.bias"), w.get("aux.out.weight"), w.get("aux.out.bias"));
        let hidden = hb.len();
        let mut out = vec![0f32; g * c];
        for r in 0..g {
            let x: Vec<f32> = (0..width)
                .map(|j| {
                    let raw = if j < p { pooled[r * p + j] } else { aux[r * a + j - p].max(0.0).ln_1p() };
                    (raw - rm[j]) / (rv[j] + NORM_EPS as f32).sqrt() * nw[j] + nb[j]
                })
                .collect();
            let hid: Vec<f32> = (0..hidden).map(|i| (hb[i] + (0..width).map(|j| hw[i * width + j] * x[j]).sum::<f32>()).max(0.0)).collect();
            for k in 0..c {
                out[r * c + k] = ob[k] + (0..hidden).map(|i| ow[k * hidden + i] * hid[i]).sum::<f32>();
            }
        }
        out
    }

    pub fn classes(&self) -> usize {
        self.config.hyper.classes as usize
    }

    /// The logits of every node (`per_graph`: each graph's summed, the
    /// readout a block of nodes at a time, [`Gated::pooled`]): `h_0`, the
    /// steps, the readout; and the steps each graph ran.
    #[allow(clippy::too_many_arguments)]
    fn logits(
        &self,
        input: &Input,
        depth: Depth<'_>,
        precision: Precision,
        per_graph: bool,
        threads: usize,
        scratch: &mut Scratch,
    ) -> (Vec<f32>, Vec<i64>) {
        let (n, h) = (input.nodes, self.hidden);
        let text = h - SELECTOR_DIM as usize;
        let embedding = self.weights.get("embedding.weight");
        let v = self.config.hyper.selector_value as f32;
        let mut h0 = vec![0f32; n * h];
        for (i, row) in h0.chunks_exact_mut(h).enumerate() {
            row[..text].copy_from_slice(&embedding[input.tokens[i] * text..][..text]);
            row[text] = if input.selector[i] == 0 { v } else { 0.0 };
            row[text + 1] = if input.selector[i] == 0 { 0.0 } else { v };
        }
        let (h_t, steps) = match &self.fast {
            Some(_) => self.steps_compacting(input, h0.clone(), depth, precision, threads, scratch),
            None => {
                let wide = self.wide.as_ref().expect("the general step for a width without kernels of its own");
                let gates = self.gate_rows(input.position_rows());
                let edges = wide::Edges {
                    nodes: n,
                    crow: &input.crow,
                    sources: &input.sources,
                    types: &input.types,
                    positions: &input.positions,
                    graphs: &input.graphs,
                    reduce: self.config.hyper.aggregation.reduce(),
                };
                wide.run(&edges, &h0, &gates, depth, precision == Precision::Int8, threads)
            }
        };
        // The readout (or the gated pooling's per-node terms), INT8 with
        // the steps where it is wide enough to pay ([`Gated`]).
        let int8 = precision == Precision::Int8;
        let layer = self.pool.as_ref().unwrap_or(&self.readout);
        let out = match per_graph {
            true => layer.pooled(&h_t, &h0, &input.graphs, int8, threads),
            false => layer.run(&h_t, &h0, int8, threads),
        };
        (out, steps)
    }

    /// The 34-wide steps of `input` from the states `h0`, at most
    /// `depth.cap()`; and the steps each graph ran. With a stopping rule,
    /// once the graphs done hold a quarter of the nodes
    /// ([`Settle::compacting`]), those still running go on as a batch of
    /// their own from their states, and so on: a graph done early costs
    /// no more steps. Each graph's states and steps are those of the graph
    /// alone (its rows' arithmetic does not depend on the other rows').
    fn steps_compacting(
        &self,
        input: &Input,
        h0: Vec<f32>,
        depth: Depth<'_>,
        precision: Precision,
        threads: usize,
        scratch: &mut Scratch,
    ) -> (Vec<f32>, Vec<i64>) {
        let fast = self.fast.as_ref().expect("the 34-wide kernels for a 34-wide bundle");
        let cap = depth.cap();
        let count = input.graphs.len().saturating_sub(1);
        if cap == 0 {
            return (h0, vec![0; count]);
        }
        let mut h_t = h0;
        let mut ran = vec![0i64; count];
        // The batch being run (`None`: `input` itself), its graphs' indices
        // in `input`, and the steps they have run.
        let mut part: Option<Input> = None;
        let mut live: Vec<usize> = (0..count).collect();
        let mut base = 0;
        loop {
            let now = part.as_ref().unwrap_or(input);
            let start: Vec<f32> = match &part {
                None => h_t.clone(),
                Some(_) => live.iter().flat_map(|&g| h_t[input.graphs[g] * H..input.graphs[g + 1] * H].iter().copied()).collect(),
            };
            let mut settle = Settle::compacting(&now.graphs, depth, base);
            let steps = cap - base;
            let states = match precision {
                Precision::Int8 => self.steps_int8(now, &start, steps, &mut settle, threads, scratch),
                Precision::Bf16 if fast.w_ih_bf16.is_some() => {
                    self.steps_products::<Bf16>(now, &start, steps, &mut settle, threads, scratch)
                }
                _ => self.steps_products::<f32>(now, &start, steps, &mut settle, threads, scratch),
            };
            let all = settle.all_done();
            let done = settle.done().to_vec();
            let now_ran = settle.ran();
            for (i, &g) in live.iter().enumerate() {
                let (a, b) = (now.graphs[i], now.graphs[i + 1]);
                h_t[input.graphs[g] * H..input.graphs[g + 1] * H].copy_from_slice(&states[a * H..b * H]);
                ran[g] = now_ran[i];
            }
            let keep = depth::running(&done);
            base = keep.first().map_or(cap, |&i| now_ran[i] as usize);
            if all || keep.is_empty() || base >= cap {
                return (h_t, ran);
            }
            live = keep.iter().map(|&i| live[i]).collect();
            part = Some(input.select(&live));
        }
    }

    /// The batch's edges as the kernels' aggregation reads them, each
    /// message at its offset in the step's product.
    fn edges<'a>(&self, input: &'a Input, offsets: &'a [usize]) -> Edges<'a> {
        Edges {
            crow: &input.crow,
            offsets,
            types: &input.types,
            positions: &input.positions,
            reduce: self.config.hyper.aggregation.reduce(),
        }
    }

    /// The steps with FP32 or BF16 products (`T`: the products' element),
    /// at most `steps`, each graph until `settle` says it has converged.
    fn steps_products<T: ProductElem>(
        &self,
        input: &Input,
        h0: &[f32],
        steps: usize,
        settle: &mut Settle<'_>,
        threads: usize,
        scratch: &mut Scratch,
    ) -> Vec<f32> {
        let n = input.nodes;
        let bf16 = std::mem::size_of::<T>() == 2;
        let precision = if bf16 { Precision::Bf16 } else { Precision::F32 };
        let (slot, groups) = forward::needed_blocks(&input.sources, n);
        let packing = self.packing(&slot, precision);
        let Packing::Fused(fused) = &*packing else { unreachable!("FP32 and BF16 packings are fused") };
        let fast = self.fast.as_ref().expect("the 34-wide kernels for a 34-wide bundle");
        let w_ih = if bf16 { fast.w_ih_bf16.as_ref().expect("BF16 packing where the CPU has BF16") } else { &fast.w_ih };
        let offsets: Vec<usize> =
            input.sources.iter().map(|&s| (s / EDGE_TYPES as i64) as usize * FUSED + slot[(s % EDGE_TYPES as i64) as usize] * H).collect();
        let edges = self.edges(input, &offsets);
        let whole = RowGroups::whole(n);
        let gates = self.gate_rows(input.position_rows());
        let ([f, gi], [m, s0, s1]) = carve_products::<T>(scratch, n);
        s0.copy_from_slice(h0);
        let mut cur = 0;
        for step in 0..steps {
            let (h, next) = if cur == 0 { (&*s0, &mut *s1) } else { (&*s1, &mut *s0) };
            gemm::product_rows::<T>(h, H, &groups, fused, f, FUSED, threads);
            forward::aggregate::<T, f32>(f, &edges, &self.msg_bias, &gates, m, threads);
            gemm::product_rows::<T>(m, H, &whole, w_ih, gi, GATES, threads);
            forward::gru::<T>((gi, Layout::row_major(3)), (f, Layout::row_major(9)), h, &fast.gru_bias, next, None, threads);
            // A converged graph is computed with the others (its rows are
            // interleaved with theirs in the products' row groups) and its
            // states put back: its result is that of its own last step.
            let all = settle.after_step_rows(step, H, h, next);
            cur ^= 1;
            if all {
                break;
            }
        }
        if cur == 0 {
            s0.to_vec()
        } else {
            s1.to_vec()
        }
    }

    /// The steps with INT8 products (`int8`'s step: states node-major), at
    /// most `steps`, each graph until `settle` says it has converged.
    fn steps_int8(
        &self,
        input: &Input,
        h0: &[f32],
        steps: usize,
        settle: &mut Settle<'_>,
        threads: usize,
        scratch: &mut Scratch,
    ) -> Vec<f32> {
        use int8::{Nodes, MESSAGES, QK};
        const QUADS: usize = QK / 4;
        let fast = self.fast.as_ref().expect("the 34-wide kernels for a 34-wide bundle");
        let gru_w = &fast.int8_gru;
        let nodes = input.nodes;
        let stride = int8::padded(nodes);
        let (slot, groups) = forward::needed_blocks(&input.sources, nodes);
        let packing = self.packing(&slot, Precision::Int8);
        let Packing::Messages(msg) = &*packing else { unreachable!("INT8 packings are the messages'") };
        let offsets: Vec<usize> = input
            .sources
            .iter()
            .map(|&s| (s / EDGE_TYPES as i64) as usize * MESSAGES + slot[(s % EDGE_TYPES as i64) as usize] * H)
            .collect();
        let edges = self.edges(input, &offsets);
        // Under `mean-max` the messages are aggregated in FP32 (into
        // `biases`, which only the mean and the sum read) and quantised
        // through `full`.
        let mixed = edges.reduce == forward::Reduce::MeanMax;
        let lens = [nodes * MESSAGES, nodes * H, 2 * H * stride, 2 * stride, stride, 2 * stride, if mixed { H * stride } else { 0 }];
        grow(&mut scratch.f32s, &lens, 0.0);
        let [f, biases, hf, hs, ms, mt, full] = take(&mut scratch.f32s, lens);
        let [hq, mq] = scratch_u32(&mut scratch.u32s, [2 * QUADS * stride, QUADS * stride]);
        // Padding lanes (from `nodes` to `stride`): computed, never read;
        // zero, they hold no stale values.
        for row in mq.chunks_exact_mut(stride) {
            row[nodes..].fill(0);
        }
        for row in ms.chunks_exact_mut(stride).chain(mt.chunks_exact_mut(stride)) {
            row[nodes..].fill(0.0);
        }
        let table = self.gate_rows(input.position_rows());
        let gates = &table[..];
        int8::check_edges(f, &edges, &self.msg_bias, gates, nodes);
        let max = edges.reduce == forward::Reduce::Max;
        if !max && !mixed {
            // SAFETY: the edges were checked against these buffers just above.
            unsafe { int8::gated_biases(&edges, &self.msg_bias, gates, nodes, biases, threads) };
        }
        let (hf_a, hf_b) = hf.split_at_mut(H * stride);
        let (hq_a, hq_b) = hq.split_at_mut(QUADS * stride);
        let (hs_a, hs_b) = hs.split_at_mut(stride);
        let mut hf = [hf_a, hf_b];
        let mut hq = [hq_a, hq_b];
        let mut hs = [hs_a, hs_b];
        int8::states_to_nodes(h0, stride, hq[0], hs[0], hf[0], threads);
        let mut last = 0;
        for step in 0..steps {
            let cur = step % 2;
            let [hf_a, hf_b] = &mut hf;
            let [hq_a, hq_b] = &mut hq;
            let [hs_a, hs_b] = &mut hs;
            let ((hf_cur, hf_next), (hq_cur, hq_next), (hs_cur, hs_next)) = if cur == 0 {
                ((&**hf_a, &mut **hf_b), (&**hq_a, &mut **hq_b), (&**hs_a, &mut **hs_b))
            } else {
                ((&**hf_b, &mut **hf_a), (&**hq_b, &mut **hq_a), (&**hs_b, &mut **hs_a))
            };
            let h = Nodes { quads: hq_cur, scales: hs_cur, tails: [&hf_cur[QK * stride..], &hf_cur[(QK + 1) * stride..]], stride };
            int8::messages(h, &groups, msg, f, MESSAGES, threads);
            {
                let (t0, t1) = mt.split_at_mut(stride);
                // SAFETY: the edges were checked against these buffers above.
                unsafe {
                    if mixed {
                        forward::aggregate::<f32, f32>(f, &edges, &self.msg_bias, gates, biases, threads);
                        int8::messages_to_nodes(biases, stride, mq, ms, [t0, t1], full, threads);
                    } else if max {
                        int8::aggregate_max_to_nodes(f, &edges, &self.msg_bias, gates, nodes, stride, mq, ms, [t0, t1], threads)
                    } else {
                        int8::aggregate_to_nodes(f, &edges, biases, gates, nodes, stride, mq, ms, [t0, t1], threads)
                    }
                };
            }
            let msgs = Nodes { quads: mq, scales: ms, tails: [&mt[..stride], &mt[stride..]], stride };
            int8::gru(
                msgs,
                h,
                hf_cur,
                gru_w,
                &fast.gru_bias,
                nodes,
                int8::NextStates { full: &mut *hf_next, quads: &mut *hq_next, scales: &mut *hs_next },
                threads,
            );
            // As in `steps_products`: a converged graph's columns (full
            // states, bytes, scales) are put back.
            let all = settle.after_step(step, |nodes, frozen| {
                if frozen {
                    for j in 0..H {
                        let cols = j * stride + nodes.start..j * stride + nodes.end;
                        hf_next[cols.clone()].copy_from_slice(&hf_cur[cols]);
                    }
                    for q in 0..QUADS {
                        let cols = q * stride + nodes.start..q * stride + nodes.end;
                        hq_next[cols.clone()].copy_from_slice(&hq_cur[cols]);
                    }
                    hs_next[nodes.clone()].copy_from_slice(&hs_cur[nodes]);
                    return 0.0;
                }
                (0..H).fold(0f32, |m, j| {
                    let cols = j * stride + nodes.start..j * stride + nodes.end;
                    m.max(depth::moved(&hf_next[cols.clone()], &hf_cur[cols]))
                })
            });
            last = 1 - cur;
            if all {
                break;
            }
        }
        // The last state, row-major for the readout.
        let last = &hf[last];
        let mut h = vec![0f32; nodes * H];
        for v in 0..nodes {
            for j in 0..H {
                h[v * H + j] = last[j * stride + v];
            }
        }
        h
    }
}

fn scratch_u32<const N: usize>(pool: &mut Vec<Vec<u32>>, lens: [usize; N]) -> [&mut [u32]; N] {
    grow(pool, &lens, 0);
    take(pool, lens)
}

/// An element type of the products, with its pool of buffers.
pub(crate) trait ProductElem: Elem + Default {
    fn pool(scratch: &mut Scratch) -> (&mut Vec<Vec<Self>>, &mut Vec<Vec<f32>>);
}

impl ProductElem for f32 {
    fn pool(scratch: &mut Scratch) -> (&mut Vec<Vec<f32>>, &mut Vec<Vec<f32>>) {
        (&mut scratch.products_f32, &mut scratch.f32s)
    }
}

impl ProductElem for Bf16 {
    fn pool(scratch: &mut Scratch) -> (&mut Vec<Vec<Bf16>>, &mut Vec<Vec<f32>>) {
        (&mut scratch.products_bf16, &mut scratch.f32s)
    }
}

/// The products' buffers: `F` \[N, 306\] and `GI` \[N, 102\] of `T`, and
/// three FP32 \[N, 34\] (the mean message, two states).
#[allow(clippy::type_complexity)]
fn carve_products<T: ProductElem>(scratch: &mut Scratch, n: usize) -> ([&mut [T]; 2], [&mut [f32]; 3]) {
    let (products, floats) = T::pool(scratch);
    grow(products, &[n * FUSED, n * GATES], T::default());
    grow(floats, &[n * H; 3], 0.0);
    (take(products, [n * FUSED, n * GATES]), take(floats, [n * H; 3]))
}

/// Row-wise softmax of `x` \[R × C\], in place.
fn softmax_rows(x: &mut [f32], c: usize) {
    for row in x.chunks_exact_mut(c) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        row.iter_mut().for_each(|v| *v /= sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks are runs of whole graphs, by graph index: every graph in
    /// exactly one chunk, empty ones too (by node offset, an empty graph at
    /// a boundary was in both neighbours, one pooled row too many), and
    /// each part's graphs are the batch's, rebased.
    #[test]
    fn chunks_hold_each_graph_once() {
        let graphs = vec![0, 10, 10, 2100, 2100, 2200, 5000];
        let nodes = *graphs.last().unwrap();
        let input = Input {
            nodes,
            tokens: vec![0; nodes],
            selector: vec![0; nodes],
            crow: vec![0; nodes + 1],
            sources: Vec::new(),
            types: Vec::new(),
            positions: Vec::new(),
            graphs: graphs.clone(),
        };
        let chunks = input.chunks(2048);
        // Graph 2 (2,090 nodes) is past the limit alone, as is graph 5.
        assert_eq!(chunks, [0..2, 2..3, 3..5, 5..6]);
        let mut seen = 0;
        for range in chunks {
            let part = input.part(range.clone());
            assert_eq!(part.graphs.len(), range.len() + 1);
            assert_eq!(part.nodes, graphs[range.end] - graphs[range.start]);
            for (g, o) in range.clone().zip(&part.graphs) {
                assert_eq!(graphs[g] - graphs[range.start], *o);
            }
            seen += range.len();
        }
        assert_eq!(seen, graphs.len() - 1);
        assert_eq!(input.chunks(1 << 20), vec![0..6]);
    }
}
