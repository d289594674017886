//! The gated graph neural network of SPEC.md §3, node head.
//!
//! Parameters (their names are the checkpoint format: the keys of
//! `weights.safetensors`, all `f32`):
//!
//! | name | shape | what |
//! |---|---|---|
//! | `embedding.weight` | \[V, 32\] | node-text embedding; row 0 is the unknown token |
//! | `messages.weight`, `messages.bias` | \[204, 34\], \[204\] | the six edge-type maps fused: rows `34t..34t+34` are edge type `t` ([`EdgeType`] order) |
//! | `gate.weight`, `gate.bias` | \[34, 34\], \[34\] | the position gate, shared by all edge types |
//! | `gru.weight_ih`, `gru.weight_hh`, `gru.bias_ih`, `gru.bias_hh` | \[102, 34\] ×2, \[102\] ×2 | one GRU cell (PyTorch's `GRUCell` layout: reset, update, new) |
//! | `readout.gate.weight`, `readout.gate.bias` | \[C, 68\], \[C\] | `f` of the readout, on `[h_T; h_0]` |
//! | `readout.transform.weight`, `readout.transform.bias` | \[C, 34\], \[C\] | `g` of the readout, on `h_T` |
//!
//! The forward pass, for T steps over a [`Batch`]:
//!
//! 1. `h_0 = [embedding[token]; selector]`, the selector row being the
//!    frozen `[50, 0]` (not the root) or `[0, 50]` (the root);
//! 2. the position gate table `p(k) = 2σ(W_p s(k) + b_p)` for
//!    `k < 1024` (positions clamped), `s(k)` the sinusoidal embedding
//!    `[sin(k·ω); cos(k·ω); 0; 0]` with `ω_i = 10000^(−2i/32)`;
//! 3. per step, the message along edge `w → v` of type `t` and position `k`
//!    is `(W_t h_w + b_t) ⊙ p(k)`; `v` receives the mean of its incoming
//!    messages over all six types (no message: zero), and
//!    `h ← GRU(mean, h)`; in training, dropout 0.2 on the new `h`;
//! 4. `logits = σ(f([h_T; h_0])) ⊙ g(h_T)`, C = 2 per node.
//!
//! The computation is arranged for speed (see [`Prepared`]): one matmul
//! gives all six edge-type maps, the per-edge gate rows are gathered once per
//! forward pass (they do not depend on `h`), and the aggregation is built
//! once per batch and reused over the T steps.
//! Training does not differentiate this code through autograd:
//! [`Ggnn::loss_and_gradients`] (`bptt.rs`) computes the gradients by hand.

use std::cell::RefCell;

use programl::batch::{Batch, EdgeType};

use tch::{nn, Device, Kind, Tensor};

use crate::workspace::Workspace;
use programl_kernels::{self as kernels, forward, gemm, int8};

/// Node-text embedding width (SPEC.md §3).
pub const TEXT_DIM: i64 = kernels::TEXT_DIM as i64;
/// Root-selector width.
pub const SELECTOR_DIM: i64 = 2;
/// Hidden state width: text embedding and selector.
pub const HIDDEN: i64 = kernels::HIDDEN as i64;
const _: () = assert!(HIDDEN == TEXT_DIM + SELECTOR_DIM);
/// Edge types: control, data, call, each forward and backward.
pub const EDGE_TYPES: i64 = kernels::EDGE_TYPES as i64;
/// Blocks of 34 columns in one row of the fused per-step product
/// `h · [W_msg; W_hh]ᵀ`: six edge-type maps, then the GRU's three hidden
/// gates (306 = 9 × 34).
pub(crate) const FUSED_BLOCKS: i64 = EDGE_TYPES + 3;

pub use programl_infer::config::{Aggregation, GraphHead, Hyper, Join, Pool, NORM_EPS};

/// Batch-norm momentum of the auxiliary classifier (PyTorch's `BatchNorm1d` default).
const NORM_MOMENTUM: f64 = 0.1;

/// The GGNN: its variables live in [`Ggnn::vs`].
pub struct Ggnn {
    /// The variables, named as in the module docs.
    pub vs: nn::VarStore,
    hyper: Hyper,
    pub(crate) embedding: Tensor,
    pub(crate) messages_w: Tensor,
    pub(crate) messages_b: Tensor,
    pub(crate) gate_w: Tensor,
    pub(crate) gate_b: Tensor,
    pub(crate) w_ih: Tensor,
    pub(crate) w_hh: Tensor,
    pub(crate) b_ih: Tensor,
    pub(crate) b_hh: Tensor,
    pub(crate) readout_gate_w: Tensor,
    pub(crate) readout_gate_b: Tensor,
    pub(crate) readout_w: Tensor,
    pub(crate) readout_b: Tensor,
    /// `s(k)` for every position, \[positions, 34\] (constant).
    pub(crate) sinusoids: Tensor,
    /// The frozen selector rows, \[2, 2\].
    pub(crate) selector_table: Tensor,
    /// The graph head's auxiliary classifier, if it has auxiliary inputs.
    pub(crate) aux: Option<AuxNet>,
    /// The graph head's gated pooling of node states ([`Pool::Gated`]).
    pub(crate) pool_net: Option<PoolNet>,
    /// Inference's per-step buffers, kept from one call to the next.
    workspace: RefCell<Workspace>,
}

/// The auxiliary classifier of a [`GraphHead`].
pub(crate) struct AuxNet {
    norm_w: Tensor,
    norm_b: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    hidden_w: Tensor,
    hidden_b: Tensor,
    out_w: Tensor,
    out_b: Tensor,
}

/// The gated pooling of node states ([`Pool`]).
pub(crate) struct PoolNet {
    gate_w: Tensor,
    gate_b: Tensor,
    transform_w: Tensor,
    transform_b: Tensor,
    out_w: Tensor,
    out_b: Tensor,
}

/// Xavier (Glorot) uniform bound for a `fan_out × fan_in` weight.
fn xavier(fan_out: i64, fan_in: i64) -> nn::Init {
    let a = (6.0 / (fan_in + fan_out) as f64).sqrt();
    nn::Init::Uniform { lo: -a, up: a }
}

impl Ggnn {
    /// A freshly initialised model on `device` (upstream's initialisation:
    /// embedding N(0, 1), Xavier-uniform linear weights with zero biases,
    /// PyTorch's GRU cell init). Seed with `tch::manual_seed` first for a
    /// reproducible start.
    pub fn new(hyper: &Hyper, device: Device) -> Ggnn {
        crate::use_libtorch_threads();
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let h = hyper.hidden;
        assert!(h >= 4 && h % 2 == 0, "hyper.hidden {h} is not an even width >= 4");
        let c = hyper.classes;
        let gru = 1.0 / (h as f64).sqrt();
        let gru_init = nn::Init::Uniform { lo: -gru, up: gru };
        let embedding =
            (&root / "embedding").var("weight", &[hyper.vocab_size as i64, h - SELECTOR_DIM], nn::Init::Randn { mean: 0.0, stdev: 1.0 });
        let messages_w = (&root / "messages").var("weight", &[EDGE_TYPES * h, h], xavier(EDGE_TYPES * h, h));
        let messages_b = (&root / "messages").var("bias", &[EDGE_TYPES * h], nn::Init::Const(0.0));
        let gate_w = (&root / "gate").var("weight", &[h, h], xavier(h, h));
        let gate_b = (&root / "gate").var("bias", &[h], nn::Init::Const(0.0));
        let w_ih = (&root / "gru").var("weight_ih", &[3 * h, h], gru_init);
        let w_hh = (&root / "gru").var("weight_hh", &[3 * h, h], gru_init);
        let b_ih = (&root / "gru").var("bias_ih", &[3 * h], gru_init);
        let b_hh = (&root / "gru").var("bias_hh", &[3 * h], gru_init);
        let readout_gate_w = (&root / "readout" / "gate").var("weight", &[c, 2 * h], xavier(c, 2 * h));
        let readout_gate_b = (&root / "readout" / "gate").var("bias", &[c], nn::Init::Const(0.0));
        let readout_w = (&root / "readout" / "transform").var("weight", &[c, h], xavier(c, h));
        let readout_b = (&root / "readout" / "transform").var("bias", &[c], nn::Init::Const(0.0));
        let sinusoids = sinusoids_of_width(hyper.positions, h).to_device(device);
        let v = hyper.selector_value;
        let selector_table = Tensor::from_slice(&[v as f32, 0.0, 0.0, v as f32]).view([2, 2]).to_device(device);
        let aux = (hyper.aux_inputs() > 0).then(|| {
            let width = hyper.aux_width();
            let hidden = hyper.graph.as_ref().map_or(0, |g| g.aux_hidden);
            let p = &root / "aux";
            let norm = &p / "norm";
            AuxNet {
                norm_w: norm.var("weight", &[width], nn::Init::Const(1.0)),
                norm_b: norm.var("bias", &[width], nn::Init::Const(0.0)),
                running_mean: norm.zeros_no_train("running_mean", &[width]),
                running_var: norm.ones_no_train("running_var", &[width]),
                hidden_w: (&p / "hidden").var("weight", &[hidden, width], xavier(hidden, width)),
                hidden_b: (&p / "hidden").var("bias", &[hidden], nn::Init::Const(0.0)),
                out_w: (&p / "out").var("weight", &[c, hidden], xavier(c, hidden)),
                out_b: (&p / "out").var("bias", &[c], nn::Init::Const(0.0)),
            }
        });
        let pool_net = hyper.pools_states().then(|| {
            let p = &root / "pool";
            PoolNet {
                gate_w: (&p / "gate").var("weight", &[h, 2 * h], xavier(h, 2 * h)),
                gate_b: (&p / "gate").var("bias", &[h], nn::Init::Const(0.0)),
                transform_w: (&p / "transform").var("weight", &[h, h], xavier(h, h)),
                transform_b: (&p / "transform").var("bias", &[h], nn::Init::Const(0.0)),
                out_w: (&p / "out").var("weight", &[c, h], xavier(c, h)),
                out_b: (&p / "out").var("bias", &[c], nn::Init::Const(0.0)),
            }
        });
        Ggnn {
            vs,
            hyper: hyper.clone(),
            embedding,
            messages_w,
            messages_b,
            gate_w,
            gate_b,
            w_ih,
            w_hh,
            b_ih,
            b_hh,
            readout_gate_w,
            readout_gate_b,
            readout_w,
            readout_b,
            sinusoids,
            selector_table,
            aux,
            pool_net,
            workspace: RefCell::default(),
        }
    }

    pub fn hyper(&self) -> &Hyper {
        &self.hyper
    }

    pub fn device(&self) -> Device {
        self.vs.device()
    }

    /// The state width (`hyper.hidden`): [`HIDDEN`] runs the CPU's fused
    /// loops, any other even width libtorch's operations
    /// ([`Ggnn::is_spec_width`]).
    pub fn width(&self) -> i64 {
        self.hyper.hidden
    }

    /// Whether the state is SPEC.md §3's 34 wide, the width the CPU's fused
    /// forward and backward loops (`programl-kernels`) are built for.
    pub fn is_spec_width(&self) -> bool {
        self.hyper.hidden == HIDDEN
    }

    /// The position gate table `p(k)`, \[positions, 34\].
    pub fn gate_table(&self) -> Tensor {
        self.sinusoids.linear(&self.gate_w, Some(&self.gate_b)).sigmoid() * 2.0
    }

    /// The gate table's rows for this input's positions, `p(k)` for `k <
    /// input.position_rows`.
    fn position_gates(&self, input: &Prepared) -> Tensor {
        self.sinusoids.narrow(0, 0, input.position_rows).linear(&self.gate_w, Some(&self.gate_b)).sigmoid() * 2.0
    }

    /// [`Ggnn::initial_states`] into `h0` (\[N, 34\]), the embedding's
    /// rows through `text` (\[N, 32\]): inference's buffers.
    fn initial_states_into(&self, h0: &Tensor, text: &Tensor, input: &Prepared) {
        let selector = self.selector_table.index_select(0, &input.selector);
        let _ = Tensor::cat_out(h0, &[self.embedding.index_select_out(text, 0, &input.tokens), selector], 1);
    }

    /// [`Ggnn::readout`], its concatenation into `both` (\[N, 68\]).
    fn readout_into(&self, both: &Tensor, h_t: &Tensor, h0: &Tensor) -> Tensor {
        let gate = Tensor::cat_out(both, &[h_t, h0], 1).linear(&self.readout_gate_w, Some(&self.readout_gate_b)).sigmoid();
        gate * h_t.linear(&self.readout_w, Some(&self.readout_b))
    }

    /// Initial node states `h_0`, \[N, 34\].
    pub fn initial_states(&self, input: &Prepared) -> Tensor {
        let text = Tensor::embedding(&self.embedding, &input.tokens, -1, false, false);
        let selector = self.selector_table.index_select(0, &input.selector);
        Tensor::cat(&[text, selector], 1)
    }

    /// One message-passing step without the update: the mean incoming
    /// message of every node, \[N, 34\]. `edge_gates` is
    /// [`Prepared::edge_gates`] of this forward pass.
    pub fn messages(&self, input: &Prepared, h: &Tensor, edge_gates: &Tensor) -> Tensor {
        let n = h.size()[0];
        // [N, 6·34] → [6N, 34]: row 6w + t is W_t h_w + b_t.
        let transformed = h.linear(&self.messages_w, Some(&self.messages_b)).view([n * EDGE_TYPES, self.width()]);
        let per_edge = transformed.index_select(0, &input.sources) * edge_gates;
        input.aggregate(&per_edge, n)
    }

    /// The message map and the GRU's hidden map as one linear map on `h`,
    /// \[306, 34\] and \[306\]: its output row, viewed as nine blocks of 34,
    /// holds `W_t h + b_t` for the six edge types, then `W_hh h + b_hh`.
    pub(crate) fn fused_weights(&self) -> (Tensor, Tensor) {
        (Tensor::cat(&[&self.messages_w, &self.w_hh], 0), Tensor::cat(&[&self.messages_b, &self.b_hh], 0))
    }

    /// T steps from `h_0`; dropout on the state when `train`.
    ///
    /// (Training's hand-written backward, `bptt.rs`, and inference,
    /// [`Ggnn::logits_inference`], use a fused arrangement: one product
    /// for the six edge maps and `W_hh`, the GRU's gates by hand.)
    pub fn propagate(&self, input: &Prepared, h0: &Tensor, steps: i64, train: bool) -> Tensor {
        let gates = input.edge_gates(&self.gate_table());
        let mut h = h0.shallow_clone();
        for _ in 0..steps {
            let m = self.messages(input, &h, &gates);
            h = m.gru_cell(&h, &self.w_ih, &self.w_hh, Some(&self.b_ih), Some(&self.b_hh));
            if train && self.hyper.state_dropout > 0.0 {
                let mask = state_dropout_mask(&h, self.hyper.state_dropout);
                // A new tensor, not `*=`: gru_cell's backward may read its
                // output, which an in-place product would overwrite.
                #[allow(clippy::assign_op_pattern)]
                {
                    h = h * mask;
                }
            }
        }
        h
    }

    /// [`Ggnn::propagate`] in evaluation mode, arranged for inference: the
    /// same function, computed without autograd and without allocating
    /// inside the loop. Every buffer of the call is carved from the model's
    /// [`Workspace`], kept from one call to the next: inside a host
    /// compiler, whose allocator returns freed blocks to the system,
    /// allocating a step's tensors anew cost as much as the arithmetic, and
    /// allocating a call's buffers anew cost a third of it in page faults.
    /// Per step, with every \[N, 34\] block its own contiguous slab
    /// (block-major: one product per block writes `[9, N, 34]` rather than
    /// one `[N, 306]` product whose column blocks are strided; element-wise
    /// operations on strided blocks measured 6 times slower than on
    /// contiguous ones):
    ///
    /// ```text
    /// F  = h · [W_msg; W_hh]ᵀ                (a product per block, [9, N, 34], no bias)
    /// M  = S · (F[rows] ⊙ gates)             (gather, gate, CSR mean)
    /// GI = M · W_ihᵀ + K                     ([3, N, 34])
    /// r, z = σ(GI_r + F_r), σ(GI_z + F_z)   (one operation over both)
    /// n  = tanh(GI_n + r ⊙ (F_n + b_hn))       (as 2σ(2·…) − 1)
    /// h' = n + z ⊙ (h − n)
    /// ```
    ///
    /// The biases that do not depend on `h` are folded into constants made
    /// once per call: the edge-type biases, gated and averaged, go through
    /// `W_ih` into `K = (S · (b_type ⊙ gates)) · W_ihᵀ + b_ih + [b_hr; b_hz; 0]`.
    /// Tested equal to [`Ggnn::propagate`] (`tests/ggnn.rs`).
    ///
    /// `h_0` and the readout's `[h_T; h_0]` are carved from the workspace
    /// too, and the gate table is computed only for the positions the batch
    /// has; the logits returned are a fresh tensor. Call under
    /// `tch::no_grad`.
    fn logits_inference(&self, ws: &mut Workspace, input: &Prepared, steps: i64) -> Tensor {
        let (n, e) = (input.nodes, input.edges);
        // SAFETY: every buffer, and every view of one, is dropped by the end
        // of this call, whose result is a fresh tensor; nothing here is
        // recorded by autograd (the caller holds `tch::no_grad`).
        // With BF16 products, F is kept in BF16 only, and the products'
        // BF16 inputs get buffers of their own (carved as f32 pairs).
        let bf16 = crate::matmul_precision() == crate::Precision::Bf16;
        let (n_f32, n_b) = if bf16 { (0, n) } else { (n, 0) };
        let [text, h0, both, f, per_edge, gates, m, mut gi, mut rz, mut new, mut k, s0, s1, h_b, f_b, m_b, gi_b, gathered_b] = unsafe {
            ws.carve(
                self.embedding.device(),
                [
                    &[n, TEXT_DIM],
                    &[n, HIDDEN],
                    &[n, 2 * HIDDEN],
                    &[FUSED_BLOCKS, n_f32, HIDDEN],
                    &[e, HIDDEN],
                    &[e, HIDDEN],
                    &[n, HIDDEN],
                    &[3, n, HIDDEN],
                    &[2, n, HIDDEN],
                    &[n, HIDDEN],
                    &[3, n, HIDDEN],
                    &[n, HIDDEN],
                    &[n, HIDDEN],
                    &[n_b, HIDDEN / 2],
                    &[FUSED_BLOCKS, n_b, HIDDEN / 2],
                    &[n_b, HIDDEN / 2],
                    &[3, n_b, HIDDEN / 2],
                    &[if bf16 { e } else { 0 }, HIDDEN / 2],
                ],
            )
        };
        let [mut h_b, f_b, mut m_b, gi_b, gathered_b] = [h_b, f_b, m_b, gi_b, gathered_b].map(|t| t.view_dtype(Kind::BFloat16));
        // F as the step reads it: FP32, or its BF16 product.
        let f = if bf16 { f_b.shallow_clone() } else { f };
        self.initial_states_into(&h0, &text, input);
        let table = self.position_gates(input).index_select_out(&gates, 0, &input.positions);
        drop(table);
        // [out, in] weight rows as [blocks, in, out] right-hand sides.
        let by_block = |w: &Tensor, blocks: i64| w.view([blocks, HIDDEN, HIDDEN]).transpose(1, 2).contiguous();
        let (w, _) = self.fused_weights();
        let w_f = by_block(&w, FUSED_BLOCKS);
        let w_ih = by_block(&self.w_ih, 3);
        // tanh(a) = 2σ(2a) − 1: every term of the candidate state's
        // pre-activation is doubled (its blocks of W_hh and W_ih, and its
        // biases below), and one sigmoid replaces MKL's tanh, which cost 12%
        // of a step alone.
        for mut candidate in [w_f.get(FUSED_BLOCKS - 1), w_ih.get(2)] {
            let _ = candidate.g_mul_scalar_(2.0);
        }
        let b_hn = self.b_hh.narrow(0, 2 * HIDDEN, HIDDEN) * 2.0;
        let (w_f_b, w_ih_b) = (w_f.to_kind(Kind::BFloat16), w_ih.to_kind(Kind::BFloat16));
        // K: the gated edge-type biases (in `per_edge` for now), averaged
        // into `m`, through W_ih, plus b_ih and the reset and update gates'
        // b_hh.
        let mut edge_bias = self.messages_b.view([EDGE_TYPES, HIDDEN]).index_select_out(&per_edge, 0, &input.edge_types);
        let _ = edge_bias.g_mul_(&gates);
        input.aggregate_into(&m, &per_edge);
        block_products(&k, &m, &w_ih);
        let k_bias = Tensor::cat(
            &[self.b_ih.narrow(0, 0, 2 * HIDDEN) + self.b_hh.narrow(0, 0, 2 * HIDDEN), self.b_ih.narrow(0, 2 * HIDDEN, HIDDEN) * 2.0],
            0,
        );
        let _ = k.g_add_(&k_bias.view([3, 1, HIDDEN]));
        // Edge e's message is row (type · N + source node) of F's [9N, 34].
        let rows_index = &input.edge_types * n + input.sources.divide_scalar_mode(EDGE_TYPES, "floor");
        let rows = f.view([FUSED_BLOCKS * n, HIDDEN]);
        let (r, z) = (rz.get(0), rz.get(1));
        // Step s writes buffer s % 2 from the other one (or from h0).
        let states = [s0, s1];
        let mut h = h0.shallow_clone();
        for step in 0..steps {
            if bf16 {
                // The products in BF16 (FP32 accumulation); their results
                // are read in FP32 by the element-wise operations.
                h_b.copy_(&h);
                block_products(&f_b, &h_b, &w_f_b);
                let _ = rows.index_select_out(&gathered_b, 0, &rows_index).mul_out(&per_edge, &gates);
                input.aggregate_into(&m, &per_edge);
                m_b.copy_(&m);
                block_products(&gi_b, &m_b, &w_ih_b);
                let _ = gi_b.add_out(&gi, &k);
            } else {
                block_products(&f, &h, &w_f);
                let mut gathered = rows.index_select_out(&per_edge, 0, &rows_index);
                let _ = gathered.g_mul_(&gates);
                input.aggregate_into(&m, &per_edge);
                block_products(&gi, &m, &w_ih);
                let _ = gi.g_add_(&k);
            }
            let _ = gi.narrow(0, 0, 2).add_out(&rz, &f.narrow(0, EDGE_TYPES, 2));
            let _ = rz.sigmoid_();
            let _ = f.get(EDGE_TYPES + 2).add_out(&new, &b_hn);
            let _ = new.g_mul_(&r);
            let _ = new.g_add_(&gi.get(2));
            let _ = new.sigmoid_();
            let _ = new.g_mul_scalar_(2.0);
            let _ = new.g_add_scalar_(-1.0);
            let mut next = h.sub_out(&states[(step % 2) as usize], &new);
            let _ = next.g_mul_(&z);
            let _ = next.g_add_(&new);
            h = next;
        }
        self.readout_into(&both, &h, &h0)
    }

    /// Per-node logits \[N, C\] after `steps` steps in evaluation mode,
    /// without autograd state: what eval, predict and the learned pass
    /// compute ([`Ggnn::forward`]'s values, computed as
    /// [`Ggnn::logits_inference`] does).
    pub fn forward_inference(&self, input: &Prepared, steps: i64) -> Tensor {
        self.forward_inference_with(input, steps, self.device() == Device::Cpu)
    }

    /// [`Ggnn::forward_inference`] with the CPU's fused element-wise loops
    /// ([`Ggnn::logits_fused`], `fused`, CPU only) or libtorch's operations
    /// ([`Ggnn::logits_inference`], every device): the CPU uses the first,
    /// and tests check it against the second.
    #[doc(hidden)]
    pub fn forward_inference_with(&self, input: &Prepared, steps: i64, fused: bool) -> Tensor {
        tch::no_grad(|| {
            // (A nested call, which nothing makes, would get a workspace
            // of its own.)
            let mut own = Workspace::default();
            let mut kept = self.workspace.try_borrow_mut();
            let ws = kept.as_deref_mut().unwrap_or(&mut own);
            if fused && self.is_spec_width() {
                assert_eq!(self.device(), Device::Cpu, "the fused inference loops run on the CPU");
                self.logits_fused(ws, input, steps)
            } else if input.reduce.has_max() || !self.is_spec_width() {
                // `logits_inference` folds the messages' biases through
                // their mean, which a max does not allow, and is built for
                // 34 channels: the plain forward.
                self.forward(input, steps, false)
            } else {
                self.logits_inference(ws, input, steps)
            }
        })
    }

    /// The biases as the fused loops add them: the six edge-type biases
    /// \[6 × 34\], and the GRU's ([`forward::GruBias`]).
    pub(crate) fn kernel_biases(&self) -> (Vec<f32>, forward::GruBias) {
        let (b_msg, b_ih, b_hh) = (floats(&self.messages_b), floats(&self.b_ih), floats(&self.b_hh));
        let hd = HIDDEN as usize;
        let mut bias = forward::GruBias {
            r: [0.0; HIDDEN as usize],
            z: [0.0; HIDDEN as usize],
            i_n: [0.0; HIDDEN as usize],
            h_n: [0.0; HIDDEN as usize],
        };
        for j in 0..hd {
            bias.r[j] = b_ih[j] + b_hh[j];
            bias.z[j] = b_ih[hd + j] + b_hh[hd + j];
            bias.i_n[j] = b_ih[2 * hd + j];
            bias.h_n[j] = b_hh[2 * hd + j];
        }
        (b_msg, bias)
    }

    /// [`Ggnn::logits_inference`]'s function on the CPU, each step the
    /// products for the six edge maps and `W_hh` (306 columns), one loop
    /// for the gated mean ([`kernels::aggregate`]: straight from the
    /// product, the edge-type biases and the gate table), the products for
    /// `W_ih` (102 columns), and one loop for the GRU cell
    /// ([`kernels::gru`]), which also writes the next step's BF16 input
    /// when the products are libtorch's BF16 ones. Where the CPU has
    /// AVX-512 the products are hand-written (`gemm.rs`; row-major
    /// buffers, BF16 for BF16 products, FP32 inputs). Otherwise
    /// BF16 products are one product each (oneDNN: row-major \[N, 306\]
    /// and \[N, 102\]); FP32 ones one per block of 34 columns
    /// (block-major \[9, N, 34\] and \[3, N, 34\]), which MKL computes
    /// faster than one wide product. Buffers come from the workspace.
    fn logits_fused(&self, ws: &mut Workspace, input: &Prepared, steps: i64) -> Tensor {
        use forward::{Edges, Layout};
        use kernels::{FUSED, GATES};
        // INT8 products are hand-written only: with libtorch's products
        // (the tests' second way) the step is FP32.
        if crate::matmul_precision() == crate::Precision::Int8 && HAND_PRODUCTS.with(|h| h.get()) {
            return self.logits_int8(ws, input, steps);
        }
        let n = input.nodes;
        let bf16 = crate::matmul_precision() == crate::Precision::Bf16;
        // Hand-written products where the CPU has them (their inputs FP32,
        // rounded inside the products), else libtorch's (BF16: oneDNN's,
        // BF16 inputs too). BF16 products write BF16 buffers either way:
        // half the memory the step streams through.
        let hand = hand_products_on(bf16);
        let (w, _) = self.fused_weights();
        let sources = Vec::<i64>::try_from(&input.sources).expect("edge rows");
        // The hand-written products compute for each node only the blocks
        // it needs (`gemm::RowGroups`): libtorch's compute them all, in
        // the model's order.
        let (slot, groups) = if hand { needed_blocks(&sources, n as usize) } else { (std::array::from_fn(|t| t), None) };
        let packed = hand.then(|| {
            let order: Vec<Tensor> = (0..EDGE_TYPES)
                .map(|b| w.narrow(0, slot.iter().position(|&s| s == b as usize).expect("a permutation") as i64 * HIDDEN, HIDDEN))
                .chain(std::iter::once(w.narrow(0, EDGE_TYPES * HIDDEN, 3 * HIDDEN)))
                .collect();
            (
                gemm::Packed::from_weight(&floats(&Tensor::cat(&order, 0)), FUSED, HIDDEN as usize, bf16),
                gemm::Packed::from_weight(&floats(&self.w_ih), GATES, HIDDEN as usize, bf16),
            )
        });
        // BF16 copies of the products' inputs: libtorch's BF16 path only.
        let narrow_inputs = bf16 && !hand;
        // BF16 buffers are carved as f32 pairs (every width is even).
        let slots = |width: usize, narrow: bool| if narrow { width as i64 / 2 } else { width as i64 };
        let n_b = if narrow_inputs { n } else { 0 };
        // SAFETY: as in `logits_inference`.
        let [text, h0, both, f, gi, m, s0, s1, h_b] = unsafe {
            ws.carve(
                Device::Cpu,
                [
                    &[n, TEXT_DIM],
                    &[n, HIDDEN],
                    &[n, 2 * HIDDEN],
                    &[n, slots(FUSED, bf16)],
                    &[n, slots(GATES, bf16)],
                    &[n, slots(HIDDEN as usize, narrow_inputs)],
                    &[n, HIDDEN],
                    &[n, HIDDEN],
                    &[n_b, HIDDEN / 2],
                ],
            )
        };
        let kind = if bf16 { Kind::BFloat16 } else { Kind::Float };
        let m_kind = if narrow_inputs { Kind::BFloat16 } else { Kind::Float };
        let [f, gi] = [f, gi].map(|t| if bf16 { t.view_dtype(Kind::BFloat16) } else { t });
        let m = if narrow_inputs { m.view_dtype(Kind::BFloat16) } else { m };
        let mut h_b = h_b.view_dtype(Kind::BFloat16);
        self.initial_states_into(&h0, &text, input);
        let table = self.position_gates(input).contiguous();
        // libtorch's right-hand sides: [34, 306] and [34, 102], or per
        // block [B, 34, 34] (none for the hand-written products).
        let (w_f, w_ih) = if hand {
            (Tensor::new(), Tensor::new())
        } else if bf16 {
            (w.tr().contiguous().to_kind(kind), self.w_ih.tr().contiguous().to_kind(kind))
        } else {
            let by_block = |w: &Tensor, blocks: i64| w.view([blocks, HIDDEN, HIDDEN]).transpose(1, 2).contiguous();
            (by_block(&w, FUSED_BLOCKS), by_block(&self.w_ih, 3))
        };
        let nodes = n as usize;
        let (f_layout, gi_layout) = if bf16 || hand {
            (Layout::row_major(FUSED_BLOCKS as usize), Layout::row_major(3))
        } else {
            (Layout::block_major(nodes), Layout::block_major(nodes))
        };
        let (f_out, gi_out) = if bf16 || hand {
            (f.shallow_clone(), gi.shallow_clone())
        } else {
            (f.view([FUSED_BLOCKS, n, HIDDEN]), gi.view([3, n, HIDDEN]))
        };
        let threads = tch::get_num_threads().max(1) as usize;
        let whole = gemm::RowGroups::whole(nodes);
        let product = |out: &Tensor, x: &Tensor, w: &Tensor, hand: Option<(&gemm::Packed, &gemm::RowGroups)>| {
            if let Some((p, rows)) = hand {
                // SAFETY: an FP32 CPU input and an output of `kind`,
                // contiguous, `out` not aliased.
                unsafe {
                    kernels::with_elem!(bf16, T => gemm::product_rows::<T>(view(x, Kind::Float), HIDDEN as usize, rows, p, view_mut(out, kind), p.cols(), threads));
                }
            } else if bf16 {
                let _ = x.mm_out(out, w);
            } else {
                block_products(out, x, w);
            }
        };
        // Each edge's message: its source's block of its type.
        let offsets: Vec<usize> =
            sources.iter().map(|&s| (s / EDGE_TYPES) as usize * f_layout.row + slot[(s % EDGE_TYPES) as usize] * f_layout.block).collect();
        let (b_msg, bias) = self.kernel_biases();
        // SAFETY (every `view`/`view_mut` below): CPU tensors of the kind
        // named, contiguous, alive for the borrow, and the mutable ones
        // not aliased by any slice in use at the same time.
        let edges = unsafe {
            Edges {
                crow: view(&input.crow, Kind::Int64),
                offsets: &offsets,
                types: view(&input.edge_types, Kind::Int64),
                positions: view(&input.positions, Kind::Int64),
                reduce: input.reduce,
            }
        };
        let gates: &[f32] = unsafe { view(&table, Kind::Float) };
        if narrow_inputs {
            h_b.copy_(&h0);
        }
        let states = [s0, s1];
        let mut h = h0.shallow_clone();
        for step in 0..steps {
            let next = &states[(step % 2) as usize];
            product(&f_out, if narrow_inputs { &h_b } else { &h }, &w_f, packed.as_ref().zip(groups.as_ref()).map(|(p, g)| (&p.0, g)));
            unsafe {
                if narrow_inputs {
                    forward::aggregate::<kernels::Bf16, kernels::Bf16>(
                        view(&f, kind),
                        &edges,
                        &b_msg,
                        gates,
                        view_mut(&m, m_kind),
                        threads,
                    );
                } else {
                    kernels::with_elem!(bf16, T => forward::aggregate::<T, f32>(view(&f, kind), &edges, &b_msg, gates, view_mut(&m, m_kind), threads));
                }
            }
            product(&gi_out, &m, &w_ih, packed.as_ref().map(|p| (&p.1, &whole)));
            unsafe {
                kernels::with_elem!(
                    bf16,
                    T => forward::gru::<T>(
                        (view(&gi, kind), gi_layout),
                        (view(&f, kind), f_layout),
                        view(&h, Kind::Float),
                        &bias,
                        view_mut(next, Kind::Float),
                        narrow_inputs.then(|| view_mut(&h_b, Kind::BFloat16)),
                        threads,
                    )
                );
            }
            h = next.shallow_clone();
        }
        self.readout_into(&both, &h, &h0)
    }

    /// [`Ggnn::logits_fused`] with INT8 products ([`crate::int8`]): each
    /// step the message product (six edge maps, 204 columns, each node the
    /// blocks it sends), the gated mean straight to bytes (its biases'
    /// part, the same every step, once a call), and the fused
    /// GRU, whose products never reach memory. States are node-major
    /// between steps.
    fn logits_int8(&self, ws: &mut Workspace, input: &Prepared, steps: i64) -> Tensor {
        use forward::Edges;
        use int8::{Nodes, MESSAGES};
        const HD: usize = HIDDEN as usize;
        const QUADS: usize = int8::QK / 4;
        let n = input.nodes;
        let nodes = n as usize;
        let stride = int8::padded(nodes);
        let sp = stride as i64;
        let threads = tch::get_num_threads().max(1) as usize;
        let sources = Vec::<i64>::try_from(&input.sources).expect("edge rows");
        let (slot, groups) = needed_blocks(&sources, nodes);
        let groups = groups.expect("the rows by their first block");
        // The edge maps' weights in their blocks' order.
        let w_msg = floats(&self.messages_w);
        let mut ordered = vec![0f32; w_msg.len()];
        for (t, &b) in slot.iter().enumerate() {
            ordered[b * HD * HD..(b + 1) * HD * HD].copy_from_slice(&w_msg[t * HD * HD..(t + 1) * HD * HD]);
        }
        let msg = int8::Packed::new(&int8::Columns::new(&ordered, MESSAGES));
        let gru_w = int8::Gru::new(&floats(&self.w_ih), &floats(&self.w_hh));
        // SAFETY: as in `logits_inference`.
        let [text, h0, both, f, biases, hf, hq, hs, mq, ms, mt, full, mut h_last] = unsafe {
            ws.carve(
                Device::Cpu,
                [
                    &[n, TEXT_DIM],
                    &[n, HIDDEN],
                    &[n, 2 * HIDDEN],
                    &[n, MESSAGES as i64],
                    &[n, HIDDEN],
                    &[2, HIDDEN, sp],
                    &[2, QUADS as i64, sp],
                    &[2, sp],
                    &[QUADS as i64, sp],
                    &[sp],
                    &[2, sp],
                    &[HIDDEN, sp],
                    &[n, HIDDEN],
                ],
            )
        };
        self.initial_states_into(&h0, &text, input);
        let table = self.position_gates(input).contiguous();
        let offsets: Vec<usize> =
            sources.iter().map(|&s| (s / EDGE_TYPES) as usize * MESSAGES + slot[(s % EDGE_TYPES) as usize] * HD).collect();
        let (b_msg, bias) = self.kernel_biases();
        // SAFETY (every `view`/`view_mut` below): CPU tensors of the kind
        // named (the bytes' buffers carved as f32, the same size),
        // contiguous, alive for the borrow, and the mutable ones not
        // aliased by any slice in use at the same time.
        unsafe {
            let edges = Edges {
                crow: view(&input.crow, Kind::Int64),
                offsets: &offsets,
                types: view(&input.edge_types, Kind::Int64),
                positions: view(&input.positions, Kind::Int64),
                reduce: input.reduce,
            };
            let gates: &[f32] = view(&table, Kind::Float);
            let (hf, hq, hs) = (view_mut::<f32>(&hf, Kind::Float), view_mut::<u32>(&hq, Kind::Float), view_mut::<f32>(&hs, Kind::Float));
            let (mq, ms, mt) = (view_mut::<u32>(&mq, Kind::Float), view_mut::<f32>(&ms, Kind::Float), view_mut::<f32>(&mt, Kind::Float));
            // The padding nodes' lanes (from `nodes` to `stride`) are
            // computed and never read; zero, they hold no stale values.
            for row in mq.chunks_exact_mut(stride) {
                row[nodes..].fill(0);
            }
            for row in ms.chunks_exact_mut(stride).chain(mt.chunks_exact_mut(stride)) {
                row[nodes..].fill(0.0);
            }
            let f = view_mut::<f32>(&f, Kind::Float);
            int8::check_edges(f, &edges, &b_msg, gates, nodes);
            // The biases' part of the gated mean: the same every step (a
            // max takes its messages whole).
            let max = edges.reduce == forward::Reduce::Max;
            // Under mean-max: aggregated in FP32 (into `biases`, which only
            // the mean and the sum read) and quantised through `full`.
            let mixed = edges.reduce == forward::Reduce::MeanMax;
            let biases = view_mut::<f32>(&biases, Kind::Float);
            let full = view_mut::<f32>(&full, Kind::Float);
            if !max && !mixed {
                int8::gated_biases(&edges, &b_msg, gates, nodes, biases, threads);
            }
            let mut hf: [&mut [f32]; 2] = {
                let (a, b) = hf.split_at_mut(HD * stride);
                [a, b]
            };
            let mut hq: [&mut [u32]; 2] = {
                let (a, b) = hq.split_at_mut(QUADS * stride);
                [a, b]
            };
            let mut hs: [&mut [f32]; 2] = {
                let (a, b) = hs.split_at_mut(stride);
                [a, b]
            };
            int8::states_to_nodes(view(&h0, Kind::Float), stride, hq[0], hs[0], hf[0], threads);
            for step in 0..steps as usize {
                let cur = step % 2;
                let [hf_a, hf_b] = &mut hf;
                let [hq_a, hq_b] = &mut hq;
                let [hs_a, hs_b] = &mut hs;
                let ((hf_cur, hf_next), (hq_cur, hq_next), (hs_cur, hs_next)) = if cur == 0 {
                    ((&**hf_a, &mut **hf_b), (&**hq_a, &mut **hq_b), (&**hs_a, &mut **hs_b))
                } else {
                    ((&**hf_b, &mut **hf_a), (&**hq_b, &mut **hq_a), (&**hs_b, &mut **hs_a))
                };
                let h = Nodes {
                    quads: hq_cur,
                    scales: hs_cur,
                    tails: [&hf_cur[int8::QK * stride..], &hf_cur[(int8::QK + 1) * stride..]],
                    stride,
                };
                int8::messages(h, &groups, &msg, f, MESSAGES, threads);
                {
                    let (t0, t1) = mt.split_at_mut(stride);
                    // (The edges were checked against these buffers above.)
                    if mixed {
                        forward::aggregate::<f32, f32>(f, &edges, &b_msg, gates, biases, threads);
                        int8::messages_to_nodes(biases, stride, mq, ms, [t0, t1], full, threads);
                    } else if max {
                        int8::aggregate_max_to_nodes(f, &edges, &b_msg, gates, nodes, stride, mq, ms, [t0, t1], threads);
                    } else {
                        int8::aggregate_to_nodes(f, &edges, biases, gates, nodes, stride, mq, ms, [t0, t1], threads);
                    }
                }
                let msgs = Nodes { quads: mq, scales: ms, tails: [&mt[..stride], &mt[stride..]], stride };
                int8::gru(
                    msgs,
                    h,
                    hf_cur,
                    &gru_w,
                    &bias,
                    nodes,
                    int8::NextStates { full: hf_next, quads: hq_next, scales: hs_next },
                    threads,
                );
            }
        }
        // The last state, row-major for the readout.
        let last = hf.get(steps % 2).narrow(1, 0, n).tr();
        h_last.copy_(&last);
        self.readout_into(&both, &h_last, &h0)
    }

    /// [`Ggnn::pooled_logits`] in evaluation mode, without autograd state.
    pub fn pooled_inference(&self, input: &Prepared, steps: i64) -> Tensor {
        if self.pool_net.is_some() {
            return tch::no_grad(|| self.pooled_logits(input, steps, false));
        }
        tch::no_grad(|| self.pool(input, &self.forward_inference(input, steps)))
    }

    /// The readout: logits \[N, C\] from `h_T` and `h_0`.
    pub fn readout(&self, h_t: &Tensor, h0: &Tensor) -> Tensor {
        let gate = Tensor::cat(&[h_t, h0], 1).linear(&self.readout_gate_w, Some(&self.readout_gate_b)).sigmoid();
        gate * h_t.linear(&self.readout_w, Some(&self.readout_b))
    }

    /// Per-node logits \[N, C\] after `steps` steps.
    pub fn forward(&self, input: &Prepared, steps: i64, train: bool) -> Tensor {
        let h0 = self.initial_states(input);
        let h = self.propagate(input, &h0, steps, train);
        self.readout(&h, &h0)
    }

    /// Graph logits \[G, C\]: each graph's per-node logits after `steps`
    /// steps, summed (or averaged, as the head's [`Pool`] says) over its
    /// nodes. Where the auxiliary inputs join the gated pooling's state
    /// ([`Join::State`]), that state instead, \[G, H\].
    pub fn pooled_logits(&self, input: &Prepared, steps: i64, train: bool) -> Tensor {
        let Some(p) = &self.pool_net else {
            return self.pool(input, &self.forward(input, steps, train));
        };
        let h0 = self.initial_states(input);
        let h = self.propagate(input, &h0, steps, train);
        let gate = Tensor::cat(&[&h, &h0], 1).linear(&p.gate_w, Some(&p.gate_b)).sigmoid();
        let nodes = gate * h.linear(&p.transform_w, Some(&p.transform_b)).tanh();
        let options = (nodes.kind(), nodes.device());
        let sum = Tensor::zeros([input.graphs, nodes.size()[1]], options).index_add(0, &input.graph_index, &nodes);
        let ones = Tensor::ones([input.graph_index.size()[0], 1], options);
        let counts = Tensor::zeros([input.graphs, 1], options).index_add(0, &input.graph_index, &ones).clamp_min(1.0);
        let state = sum / counts;
        if self.hyper.joins_state() {
            return state;
        }
        state.linear(&p.out_w, Some(&p.out_b))
    }

    /// The graph's logits from the code alone, from rows of
    /// [`Ggnn::pooled_logits`]: those rows themselves, or, where the
    /// auxiliary inputs join the pooled state ([`Join::State`]), the
    /// state through `pool.out` (the training's code loss).
    pub fn code_logits(&self, pooled: &Tensor) -> Tensor {
        match (&self.pool_net, self.hyper.joins_state()) {
            (Some(p), true) => pooled.linear(&p.out_w, Some(&p.out_b)),
            _ => pooled.shallow_clone(),
        }
    }

    /// Graph logits \[G, C\] from per-node logits \[N, C\], as the head's
    /// [`Pool`] says.
    fn pool(&self, input: &Prepared, nodes: &Tensor) -> Tensor {
        let options = (nodes.kind(), nodes.device());
        let sum = Tensor::zeros([input.graphs, self.hyper.classes], options).index_add(0, &input.graph_index, nodes);
        match self.hyper.graph.as_ref().map_or(Pool::Sum, |g| g.pool) {
            Pool::Sum => sum,
            Pool::Mean | Pool::Gated => {
                let ones = Tensor::ones([input.graph_index.size()[0], 1], options);
                let counts = Tensor::zeros([input.graphs, 1], options).index_add(0, &input.graph_index, &ones).clamp_min(1.0);
                sum / counts
            }
        }
    }

    /// A graph head's logits \[R, C\] for R rows, each a graph's pooled
    /// logits (rows of [`Ggnn::pooled_logits`]) with its raw auxiliary
    /// inputs \[R, A\]. Without auxiliary inputs, the pooled logits
    /// themselves. In training (`train`), the normalisation uses the
    /// rows' own statistics and updates the running ones.
    pub fn graph_logits(&self, pooled: &Tensor, aux: Option<&Tensor>, train: bool) -> Tensor {
        let (Some(net), Some(aux)) = (&self.aux, aux) else {
            return pooled.shallow_clone();
        };
        let x = Tensor::cat(&[pooled, &aux.to_kind(pooled.kind()).clamp_min(0.0).log1p()], 1);
        let x = x.batch_norm(
            Some(&net.norm_w),
            Some(&net.norm_b),
            Some(&net.running_mean),
            Some(&net.running_var),
            train,
            NORM_MOMENTUM,
            NORM_EPS,
            false,
        );
        x.linear(&net.hidden_w, Some(&net.hidden_b)).relu().linear(&net.out_w, Some(&net.out_b))
    }

    /// Sets the auxiliary classifier's normalisation statistics to those
    /// of `rows` exactly (graph vectors \[R, W\] with their raw auxiliary
    /// inputs \[R, A\]), as [`Ggnn::graph_logits`] joins them: the
    /// running statistics training leaves behind follow the last few
    /// batches of a model still moving. The variance is the biased one, by
    /// which training normalises (not the unbiased one running statistics
    /// keep), so the inference forward on `rows` reproduces the training
    /// forward on them all at once. No-op without auxiliary inputs.
    pub fn set_aux_statistics(&self, pooled: &Tensor, aux: &Tensor) {
        let Some(net) = &self.aux else { return };
        tch::no_grad(|| {
            let x = Tensor::cat(&[pooled, &aux.to_kind(pooled.kind()).clamp_min(0.0).log1p()], 1);
            let (mean, var) = (x.mean_dim([0i64].as_slice(), false, Kind::Float), x.var_dim([0i64].as_slice(), false, false));
            net.running_mean.shallow_clone().copy_(&mean);
            net.running_var.shallow_clone().copy_(&var);
        });
    }

    /// Every trainable parameter, in [`Hyper::parameter_shapes`] order.
    pub fn parameters(&self) -> Vec<&Tensor> {
        self.named_parameters().into_iter().map(|(_, t)| t).collect()
    }

    /// Every parameter with its name, in [`Hyper::parameter_shapes`] order.
    pub fn named_parameters(&self) -> Vec<(&'static str, &Tensor)> {
        let mut all = vec![
            ("embedding.weight", &self.embedding),
            ("messages.weight", &self.messages_w),
            ("messages.bias", &self.messages_b),
            ("gate.weight", &self.gate_w),
            ("gate.bias", &self.gate_b),
            ("gru.weight_ih", &self.w_ih),
            ("gru.weight_hh", &self.w_hh),
            ("gru.bias_ih", &self.b_ih),
            ("gru.bias_hh", &self.b_hh),
            ("readout.gate.weight", &self.readout_gate_w),
            ("readout.gate.bias", &self.readout_gate_b),
            ("readout.transform.weight", &self.readout_w),
            ("readout.transform.bias", &self.readout_b),
        ];
        if let Some(p) = &self.pool_net {
            all.extend([
                ("pool.gate.weight", &p.gate_w),
                ("pool.gate.bias", &p.gate_b),
                ("pool.transform.weight", &p.transform_w),
                ("pool.transform.bias", &p.transform_b),
                ("pool.out.weight", &p.out_w),
                ("pool.out.bias", &p.out_b),
            ]);
        }
        if let Some(a) = &self.aux {
            all.extend([
                ("aux.norm.weight", &a.norm_w),
                ("aux.norm.bias", &a.norm_b),
                ("aux.hidden.weight", &a.hidden_w),
                ("aux.hidden.bias", &a.hidden_b),
                ("aux.out.weight", &a.out_w),
                ("aux.out.bias", &a.out_b),
            ]);
        }
        all
    }

    /// Non-trainable saved state, in [`Hyper::buffer_shapes`] order.
    pub fn named_buffers(&self) -> Vec<(&'static str, &Tensor)> {
        match &self.aux {
            Some(a) => vec![("aux.norm.running_mean", &a.running_mean), ("aux.norm.running_var", &a.running_var)],
            None => Vec::new(),
        }
    }

    /// Parameters then buffers: what `weights.safetensors` holds, in
    /// [`Hyper::tensor_shapes`] order.
    pub fn named_tensors(&self) -> Vec<(&'static str, &Tensor)> {
        let mut all = self.named_parameters();
        all.extend(self.named_buffers());
        all
    }
}

/// The elements of a contiguous CPU tensor of `kind` as a slice of `T`
/// (`f32` for Float, [`kernels::Bf16`] for BFloat16, `i64` for Int64).
///
/// # Safety
/// `T` matches `kind`; the tensor outlives the slice and is not written
/// while it is borrowed.
pub(crate) unsafe fn view<T>(t: &Tensor, kind: Kind) -> &[T] {
    assert!(t.kind() == kind && t.is_contiguous() && t.device() == Device::Cpu, "a contiguous CPU {kind:?} tensor");
    let len = t.numel();
    if len == 0 {
        return &[];
    }
    std::slice::from_raw_parts(t.data_ptr() as *const T, len)
}

/// [`view`], writable.
///
/// # Safety
/// As [`view`], and no other slice of the tensor's memory is in use.
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn view_mut<T>(t: &Tensor, kind: Kind) -> &mut [T] {
    assert!(t.kind() == kind && t.is_contiguous() && t.device() == Device::Cpu, "a contiguous CPU {kind:?} tensor");
    let len = t.numel();
    if len == 0 {
        return &mut [];
    }
    std::slice::from_raw_parts_mut(t.data_ptr() as *mut T, len)
}

/// A parameter's values, row-major (FP32 parameters).
pub(crate) fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.contiguous().view([-1])).expect("f32 parameters")
}

/// A dropout mask like `h` \[N, 34\] at rate `p`, scaled by `1/(1 − p)`:
/// what the state's dropout multiplies by in training, in the autograd
/// forward and the hand-written step alike (so one seed gives both the same
/// masks). Its seed is one draw from libtorch's generator, so
/// `tch::manual_seed` governs it as it does the rest.
pub(crate) fn state_dropout_mask(h: &Tensor, p: f64) -> Tensor {
    let seed = Tensor::randint(i64::MAX, [1], (Kind::Int64, Device::Cpu)).int64_value(&[0]) as u64;
    let mut mask = vec![0f32; h.numel()];
    kernels::dropout::dropout_mask(&mut mask, seed, (1.0 - p) as f32, (1.0 / (1.0 - p)) as f32, tch::get_num_threads().max(1) as usize);
    Tensor::from_slice(&mask).view(h.size().as_slice()).to_device(h.device())
}

thread_local! {
    /// Whether this thread's CPU inference uses the hand-written products
    /// where the CPU has them ([`with_library_products`]).
    static HAND_PRODUCTS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Whether this thread's CPU steps compute their products by hand (FP32 or
/// BF16, as `bf16` says): where the CPU can, unless
/// [`with_library_products`] says otherwise.
pub(crate) fn hand_products_on(bf16: bool) -> bool {
    gemm::available(bf16) && HAND_PRODUCTS.with(|h| h.get())
}

/// Runs `f` with the CPU steps' products (inference, and FP32 training)
/// left to libtorch on this thread, whatever the CPU: the tests' second
/// way to the same logits and gradients.
#[doc(hidden)]
pub fn with_library_products<R>(f: impl FnOnce() -> R) -> R {
    let before = HAND_PRODUCTS.with(|h| h.replace(false));
    let out = f();
    HAND_PRODUCTS.with(|h| h.set(before));
    out
}

/// Whether the CPU inference step computes its products itself on this
/// machine at this precision (AVX-512; for BF16 also AVX512-BF16).
#[doc(hidden)]
pub fn hand_products(bf16: bool) -> bool {
    gemm::available(bf16)
}

/// [`forward::needed_blocks`], for this crate's callers.
fn needed_blocks(sources: &[i64], nodes: usize) -> ([usize; EDGE_TYPES as usize], Option<gemm::RowGroups>) {
    let (slot, groups) = forward::needed_blocks(sources, nodes);
    (slot, Some(groups))
}

/// `out[b] = x · w[b]` for every block `b`: `out` \[B, N, 34\], `x`
/// \[N, 34\], `w` \[B, 34, 34\], one product per block. (A batched product
/// over `x` expanded to \[B, N, 34\] copies the expansion into a fresh
/// tensor first: B copies of the state per step, and their allocation.)
pub(crate) fn block_products(out: &Tensor, x: &Tensor, w: &Tensor) {
    for b in 0..w.size()[0] {
        let _ = x.mm_out(&out.get(b), &w.get(b));
    }
}

/// `s(k)` for `k < positions`: 16 sines, 16 cosines, 2 zeros (the
/// selector's columns), \[positions, 34\].
pub fn sinusoids(positions: i64) -> Tensor {
    sinusoids_of_width(positions, HIDDEN)
}

/// [`sinusoids`] for a state `width` wide ([`programl_infer::config::sinusoid_into`]),
/// \[positions, width\].
pub fn sinusoids_of_width(positions: i64, width: i64) -> Tensor {
    let mut rows = vec![0f32; (positions * width) as usize];
    for (k, row) in rows.chunks_exact_mut(width as usize).enumerate() {
        programl_infer::config::sinusoid_into(k as i64, row);
    }
    Tensor::from_slice(&rows).view([positions, width])
}

/// A [`Batch`] as tensors on the model's device, with everything that does
/// not change over the T steps computed once.
pub struct Prepared {
    /// Vocabulary ids, \[N\] (ids beyond the embedding are mapped to the
    /// unknown id 0).
    pub tokens: Tensor,
    /// 0/1 root selector, \[N\].
    pub selector: Tensor,
    /// 0/1 labels, \[N\], if the batch is labelled.
    pub labels: Option<Tensor>,
    /// Each node's weight in the training loss, \[N\] (float): `None`,
    /// every node weighs 1; the trainer's `--loss-nodes labelled` gives 1
    /// to the nodes that carry the task's label and 0 to the rest. The
    /// loss is averaged over the weights (times `pos_weight`'s).
    pub loss_weights: Option<Tensor>,
    /// For all edges of all six types, sorted by target: the row of the
    /// fused transform to read, `6 · source + type`, \[E\].
    pub sources: Tensor,
    /// The same rows in the fused per-step product `h · [W_msg; W_hh]ᵀ`
    /// viewed as \[9N, 34\] (the hand-written training step's, `bptt.rs`):
    /// `9 · source + type`, \[E\].
    pub fused_rows: Tensor,
    /// Clamped positions, in the same order, \[E\].
    pub positions: Tensor,
    /// One more than the largest of them (0 without edges): the rows of the
    /// gate table that the batch reads.
    pub position_rows: i64,
    /// Edge types ([`EdgeType`] order), in the same order, \[E\].
    pub edge_types: Tensor,
    /// The target node of every edge, in the same order, \[E\].
    pub targets: Tensor,
    /// `1 / indegree(v)` (0 where there is no incoming edge), \[N, 1\];
    /// under mean-max, of the forward edges only.
    pub inv_degree: Tensor,
    /// How the model combines its messages ([`Hyper::aggregation`]);
    /// `inv_degree` is 1 where a node has edges unless it is the mean or
    /// mean-max ([`forward::Reduce::scale_of`]).
    pub reduce: forward::Reduce,
    /// Node `v`'s incoming edges are `crow[v]..crow[v + 1]` in this order,
    /// \[N + 1\] (64-bit).
    pub crow: Tensor,
    /// Mean aggregation as a sparse \[N, E\] CSR matrix: row `v` holds
    /// `inv_degree(v)` on the columns of `v`'s incoming edges (under
    /// mean-max, zero on the backward ones). Built on
    /// first use ([`Prepared::mean`]): the CPU's fused loops never use it,
    /// and building it cost a third of a millisecond per module in the
    /// learned pass.
    mean: std::cell::OnceCell<Tensor>,
    /// [`Prepared::backward_edges`], built on first use.
    backward: std::cell::OnceCell<Tensor>,
    /// The graph of every node, \[N\], and the number of graphs.
    pub graph_index: Tensor,
    pub graphs: i64,
    /// Nodes, edges.
    pub nodes: i64,
    pub edges: i64,
}

impl Prepared {
    /// Converts `batch` for a model with `hyper`, on `device`.
    pub fn new(batch: &Batch, hyper: &Hyper, device: Device) -> Prepared {
        let n = batch.node_count();
        let vocab = hyper.vocab_size as i64;
        let tokens: Vec<i64> = batch.tokens().iter().map(|&t| if (0..vocab).contains(&t) { t } else { 0 }).collect();
        // (target, 6·source + type, position) for every edge, counting-sorted
        // by target (stable, so the order within a target is the batch's).
        let total: usize = EdgeType::ALL.iter().map(|&t| batch.edges(t).len()).sum();
        let mut indegree = vec![0i64; n + 1];
        for t in EdgeType::ALL {
            for &v in batch.edges(t).targets {
                indegree[v as usize + 1] += 1;
            }
        }
        let mut crow = indegree.clone();
        for i in 1..=n {
            crow[i] += crow[i - 1];
        }
        let mut next = crow.clone();
        let mut sources = vec![0i64; total];
        let mut positions = vec![0i64; total];
        let max_position = hyper.positions - 1;
        for t in EdgeType::ALL {
            let e = batch.edges(t);
            for k in 0..e.len() {
                let v = e.targets[k] as usize;
                let slot = next[v] as usize;
                next[v] += 1;
                sources[slot] = e.sources[k] * EDGE_TYPES + t as i64;
                positions[slot] = e.positions[k].clamp(0, max_position);
            }
        }
        let targets: Vec<i64> = (0..n).flat_map(|v| std::iter::repeat_n(v as i64, indegree[v + 1] as usize)).collect();
        // What each node's summed messages are multiplied by: the kernels' rule.
        let reduce = hyper.aggregation.reduce();
        let types: Vec<i64> = sources.iter().map(|s| s % EDGE_TYPES).collect();
        let inv_degree: Vec<f32> = (0..n).map(|v| reduce.scale_of(&types[crow[v] as usize..crow[v + 1] as usize])).collect();
        Prepared {
            tokens: Tensor::from_slice(&tokens).to_device(device),
            selector: Tensor::from_slice(batch.selector()).to_device(device),
            labels: batch.labels().map(|l| Tensor::from_slice(l).to_device(device)),
            loss_weights: None,
            fused_rows: Tensor::from_slice(&sources.iter().map(|s| s / EDGE_TYPES * FUSED_BLOCKS + s % EDGE_TYPES).collect::<Vec<i64>>())
                .to_device(device),
            edge_types: Tensor::from_slice(&types).to_device(device),
            sources: Tensor::from_slice(&sources).to_device(device),
            position_rows: positions.iter().max().map_or(0, |&p| p + 1),
            positions: Tensor::from_slice(&positions).to_device(device),
            targets: Tensor::from_slice(&targets).to_device(device),
            inv_degree: Tensor::from_slice(&inv_degree).view([n as i64, 1]).to_device(device),
            crow: Tensor::from_slice(&crow).to_device(device),
            reduce,
            mean: std::cell::OnceCell::new(),
            backward: std::cell::OnceCell::new(),
            graph_index: Tensor::from_slice(batch.graph_index()).to_device(device),
            graphs: batch.graph_count() as i64,
            nodes: n as i64,
            edges: total as i64,
        }
    }

    /// The gate row of every edge, \[E, 34\], from the gate table.
    pub fn edge_gates(&self, table: &Tensor) -> Tensor {
        table.index_select(0, &self.positions)
    }

    /// The mean (or, for a sum bundle, the sum; for a max bundle, the
    /// channel-wise maximum; for a mean-max bundle, the forward edges'
    /// mean plus the backward edges' maximum) of the per-edge messages
    /// \[E, 34\] by target, \[N, 34\]; zero for a node without incoming
    /// edges. Differentiable (autograd splits a max's gradient among equal
    /// messages).
    pub fn aggregate(&self, per_edge: &Tensor, nodes: i64) -> Tensor {
        debug_assert_eq!(nodes, self.nodes);
        self.aggregate_parts(per_edge).0
    }

    /// [`Prepared::aggregate`], and beside it the channel-wise maximum it
    /// holds (of every edge under the max, of the backward edges under
    /// mean-max; `None` for the mean and the sum), which training's
    /// backward compares the messages with.
    pub fn aggregate_parts(&self, per_edge: &Tensor) -> (Tensor, Option<Tensor>) {
        match self.reduce {
            forward::Reduce::Max => {
                let max = self.channel_max(per_edge, None);
                (max.shallow_clone(), Some(max))
            }
            forward::Reduce::MeanMax => {
                let max = self.channel_max(per_edge, Some(self.backward_edges()));
                (self.mean().mm(per_edge) + &max, Some(max))
            }
            forward::Reduce::Mean | forward::Reduce::Sum => (self.mean().mm(per_edge), None),
        }
    }

    /// The channel-wise maximum by target of the per-edge messages, of
    /// the edges `among` (all where `None`); zero for a node without them.
    pub fn channel_max(&self, per_edge: &Tensor, among: Option<&Tensor>) -> Tensor {
        // (aten's `scatter_reduce.two`, tch's `internal_scatter_reduce`;
        // not `index_reduce`, which prints a beta warning. Without
        // `include_self`, a node no edge reaches keeps its zero.)
        let (messages, targets) = match among {
            Some(e) => (per_edge.index_select(0, e), self.targets.index_select(0, e)),
            None => (per_edge.shallow_clone(), self.targets.shallow_clone()),
        };
        let width = per_edge.size()[1];
        let zeros = Tensor::zeros([self.nodes, width], (per_edge.kind(), per_edge.device()));
        let index = targets.view([-1, 1]).expand([-1, width], false);
        zeros.internal_scatter_reduce(0, &index, &messages, "amax", false)
    }

    /// The backward edges' indices (types 3..6), \[E_b\], built on first
    /// use.
    pub fn backward_edges(&self) -> &Tensor {
        self.backward.get_or_init(|| self.edge_types.ge(forward::FIRST_BACKWARD).nonzero().view([-1]))
    }

    /// [`Prepared::aggregate`] into `out`, \[N, 34\].
    pub fn aggregate_into(&self, out: &Tensor, per_edge: &Tensor) {
        if self.reduce.has_max() {
            out.shallow_clone().copy_(&self.aggregate(per_edge, self.nodes));
            return;
        }
        let _ = self.mean().mm_out(out, per_edge);
    }

    /// The aggregation's CSR matrix (each edge's entry its target's
    /// `inv_degree`), built on first use from `crow`
    /// (the edges are already in row order: column `e` is edge `e`).
    fn mean(&self) -> &Tensor {
        self.mean.get_or_init(|| {
            let (n, total) = (self.nodes, self.edges);
            let crow = self.crow.to_device(Device::Cpu);
            let degree = crow.narrow(0, 1, n) - crow.narrow(0, 0, n);
            let scale = self.inv_degree.to_device(Device::Cpu).view([-1]);
            let mut values = scale.repeat_interleave_self_tensor(&degree, 0, Some(total));
            if self.reduce == forward::Reduce::MeanMax {
                // Only the forward edges go into the mean.
                values *= self.edge_types.to_device(Device::Cpu).lt(forward::FIRST_BACKWARD).to_kind(Kind::Float);
            }
            // 32-bit indices where they fit: MKL's sparse product takes
            // them, and 64-bit ones were converted on every product.
            let index = if total < i32::MAX as i64 { Kind::Int } else { Kind::Int64 };
            Tensor::sparse_csr_tensor_crow_col_value_size(
                &crow.to_kind(index),
                &Tensor::arange(total, (index, Device::Cpu)),
                &values,
                [n, total],
                (Kind::Float, Device::Cpu),
            )
            .to_device(self.crow.device())
        })
    }
}
