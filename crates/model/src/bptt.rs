//! The training step's gradients by hand: backpropagation through the
//! T-step unroll, without autograd.
//!
//! `tch` has no custom autograd functions, and autograd's own backward of
//! the fast forward is slow on a CPU: the gather `Y[src]` turns into an
//! `index_add` that re-sorts its index at every step, the gate rows into an
//! `E × 34` gradient per step, and every elementwise op of the GRU cell keeps
//! its own saved tensors. Written out, the backward uses what is known once
//! per batch:
//!
//! - the mean aggregation `S` (\[N, E\], one nonzero `1/indeg(target)` per
//!   column) has the transpose `Sᵀ·d = (d ⊙ invdeg)[target]`, a gather;
//! - the gather's backward is a scatter-add onto the `6N` rows of the fused
//!   map, done as one product with a CSR \[6N, E\] of ones built once per
//!   batch (edges ordered by source row);
//! - the gate rows do not depend on `h`: their gradient is summed over the
//!   steps per edge, reduced by position once, and taken through
//!   `2σ(W_p s(k) + b_p)` once;
//! - the GRU cell (PyTorch's `GRUCell`: reset, update, new) keeps `r`, `z`,
//!   `n` and `W_hh h + b_hh` per step; its weight gradients are one `addmm`
//!   per step each.
//!
//! Dropout masks are drawn exactly as ATen's CPU dropout draws them
//! (`bernoulli_(1 − p)` on an empty tensor like `h`, then `/(1 − p)`), in the
//! same order, so for one seed the masks, and the loss, are those of
//! [`Ggnn::forward`] in training mode; `crates/model/tests/bptt.rs` checks
//! the loss and every gradient against autograd.

use tch::{Kind, Tensor};

use crate::ggnn::{Ggnn, Prepared, EDGE_TYPES, FUSED_BLOCKS, HIDDEN, TEXT_DIM};

/// What the backward pass keeps of one step.
struct Step {
    /// The state entering the step, \[N, 34\].
    h: Tensor,
    /// `Y[src]`, the fused map's row of every edge, \[E, 34\].
    gathered: Tensor,
    /// The mean message, the GRU's input, \[N, 34\].
    a: Tensor,
    /// Reset and update gates side by side, \[N, 68\].
    rz: Tensor,
    /// The new gate, \[N, 34\].
    n: Tensor,
    /// `W_hn h + b_hn`, \[N, 34\].
    ghn: Tensor,
    /// The dropout mask (already scaled by `1/(1 − p)`), in training.
    mask: Option<Tensor>,
}

/// The loss of one training step and the gradient of every parameter.
pub struct Gradients {
    /// Mean cross-entropy over the batch's nodes (a scalar tensor).
    pub loss: Tensor,
    /// One tensor per parameter, in [`Ggnn::parameters`] order.
    pub grads: Vec<Tensor>,
}

/// Whether the T-step loop's products run in BF16 (`--dtype bf16` on a CPU
/// with BF16 instructions): each product's inputs rounded to BF16, FP32
/// accumulation, an FP32 result. Everything else stays FP32.
fn bf16() -> bool {
    crate::matmul_precision() == crate::Precision::Bf16
}

/// `a · b`, in BF16 where [`bf16`] says so.
fn product(a: &Tensor, b: &Tensor) -> Tensor {
    if bf16() {
        a.to_kind(Kind::BFloat16).mm(&b.to_kind(Kind::BFloat16)).to_kind(Kind::Float)
    } else {
        a.mm(b)
    }
}

/// `x · wᵀ + b`, the product in BF16 where [`bf16`] says so.
fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    if bf16() {
        product(x, &w.tr()) + b
    } else {
        x.linear(w, Some(b))
    }
}

/// `acc += a · b`, the product in BF16 where [`bf16`] says so.
fn add_product(acc: &mut Tensor, a: &Tensor, b: &Tensor) {
    if bf16() {
        let _ = acc.g_add_(&product(a, b));
    } else {
        let _ = acc.addmm_(a, b);
    }
}

fn sum_rows(t: &Tensor) -> Tensor {
    t.sum_dim_intlist([0i64].as_slice(), false, Kind::Float)
}

/// Per-class loss weights: `pos_weight` for class 1, 1 for the others.
pub fn class_weights(classes: i64, pos_weight: f64, device: tch::Device) -> Tensor {
    let mut w = vec![1f32; classes as usize];
    if let Some(positive) = w.get_mut(1) {
        *positive = pos_weight as f32;
    }
    Tensor::from_slice(&w).to_device(device)
}

/// `1 − t`.
fn one_minus(t: &Tensor) -> Tensor {
    t.neg() + 1.0
}

impl Ggnn {
    /// Forward at `steps` (dropout on the state when `dropout` and the
    /// model's dropout is non-zero), cross-entropy against `input.labels`
    /// with the positive class (label 1) weighted `pos_weight` and every
    /// other 1, averaged over the weights as PyTorch's weighted
    /// `cross_entropy` does (`pos_weight` 1: the plain mean), and the
    /// gradients by hand. Keeps no autograd state (it runs under
    /// `no_grad`). Panics if the batch has no labels.
    pub fn loss_and_gradients(&self, input: &Prepared, steps: i64, dropout: bool, pos_weight: f64) -> Gradients {
        tch::no_grad(|| self.bptt(input, steps, dropout, pos_weight))
    }

    fn bptt(&self, input: &Prepared, steps: i64, dropout: bool, pos_weight: f64) -> Gradients {
        let labels = input.labels.as_ref().expect("a training batch is labelled");
        let n = input.nodes;
        let device = self.device();
        let p = self.hyper().state_dropout;
        let dropout = dropout && p > 0.0;
        let h2 = 2 * HIDDEN;

        // Forward, keeping what the backward needs: the arrangement of
        // `Ggnn::propagate` without autograd (one fused matmul per step).
        let h0 = self.initial_states(input);
        let table = self.gate_table();
        let gates = input.edge_gates(&table);
        let (w, b) = self.fused_weights();
        let hm = EDGE_TYPES * HIDDEN;
        let mut h = h0.shallow_clone();
        let mut tape = Vec::with_capacity(steps.max(0) as usize);
        for _ in 0..steps {
            let fused = linear(&h, &w, &b);
            let gathered = fused.view([n * FUSED_BLOCKS, HIDDEN]).index_select(0, &input.fused_rows);
            let a = input.aggregate(&(&gathered * &gates), n);
            let gi = linear(&a, &self.w_ih, &self.b_ih);
            let gh = fused.narrow(1, hm, 3 * HIDDEN);
            let rz = (gh.narrow(1, 0, h2) + gi.narrow(1, 0, h2)).sigmoid_();
            let ghn = gh.narrow(1, h2, HIDDEN).contiguous();
            let new = gi.narrow(1, h2, HIDDEN).addcmul(&rz.narrow(1, 0, HIDDEN), &ghn).tanh_();
            // GRUCell: h' = (h − n) ⊙ z + n.
            let mut next = (&h - &new).g_mul_(&rz.narrow(1, HIDDEN, HIDDEN)).g_add_(&new);
            let mask = if dropout {
                let mut m = h.empty_like();
                let _ = m.bernoulli_float_(1.0 - p);
                let _ = m.g_div_scalar_(1.0 - p);
                next = next * &m;
                Some(m)
            } else {
                None
            };
            tape.push(Step { h, gathered, a, rz, n: new, ghn, mask });
            h = next;
        }
        let h_t = h;

        // Readout and cross-entropy: logits = σ(F) ⊙ g.
        let hc = Tensor::cat(&[&h_t, &h0], 1);
        let f = hc.linear(&self.readout_gate_w, Some(&self.readout_gate_b)).sigmoid();
        let g = h_t.linear(&self.readout_w, Some(&self.readout_b));
        let logits = &f * &g;
        let classes = logits.size()[1];
        let residual = logits.softmax(1, Kind::Float) - labels.one_hot(classes).to_kind(Kind::Float);
        let (loss, dlogits) = if pos_weight == 1.0 {
            (logits.cross_entropy_for_logits(labels), residual / n as f64)
        } else {
            let weights = class_weights(classes, pos_weight, device);
            let per_node = weights.index_select(0, labels).unsqueeze(1);
            let total = per_node.sum(Kind::Float);
            let loss = logits.cross_entropy_loss::<Tensor>(labels, Some(weights), tch::Reduction::Mean, -100, 0.0);
            (loss, residual * per_node / total)
        };
        let d_pre_f = &dlogits * &g * &f * one_minus(&f);
        let dg = &dlogits * &f;
        let d_readout_gate_w = d_pre_f.tr().mm(&hc);
        let d_readout_gate_b = sum_rows(&d_pre_f);
        let d_readout_w = dg.tr().mm(&h_t);
        let d_readout_b = sum_rows(&dg);
        let dhc = d_pre_f.mm(&self.readout_gate_w);
        let mut dh = dg.mm(&self.readout_w) + dhc.narrow(1, 0, HIDDEN);

        // The scatter-add onto the rows of the fused product viewed as
        // [9N, 34], as one embedding bag (sum) per step: bag r holds the
        // edges that read row r, in `order`.
        let rows = n * FUSED_BLOCKS;
        let order = input.fused_rows.argsort_stable(true, 0, false);
        let counts = input.fused_rows.bincount(None::<Tensor>, rows);
        let offsets = Tensor::cat(&[Tensor::zeros([1], (Kind::Int64, device)), counts.cumsum(0, Kind::Int64).narrow(0, 0, rows - 1)], 0);

        let zeros = |shape: &[i64]| Tensor::zeros(shape, (Kind::Float, device));
        let mut d_w = zeros(&[FUSED_BLOCKS * HIDDEN, HIDDEN]);
        let mut d_b = zeros(&[FUSED_BLOCKS * HIDDEN]);
        let mut d_w_ih = zeros(&[3 * HIDDEN, HIDDEN]);
        let mut d_b_ih = zeros(&[3 * HIDDEN]);
        let mut d_gates = zeros(&[input.edges, HIDDEN]);
        for s in tape.iter().rev() {
            let dh_new = match &s.mask {
                Some(m) => dh * m,
                None => dh,
            };
            let r = s.rz.narrow(1, 0, HIDDEN);
            let z = s.rz.narrow(1, HIDDEN, HIDDEN);
            // h' = (1 − z) n + z h
            let dn = &dh_new - &dh_new * &z;
            let dz = &dh_new * (&s.h - &s.n);
            let dh_direct = &dh_new * &z;
            let d_pre_n = dn * one_minus(&s.n.square());
            let d_pre_rz = Tensor::cat(&[&d_pre_n * &s.ghn, dz], 1) * &s.rz * one_minus(&s.rz);
            let dgi = Tensor::cat(&[&d_pre_rz, &d_pre_n], 1);
            add_product(&mut d_w_ih, &dgi.tr(), &s.a);
            let _ = d_b_ih.g_add_(&sum_rows(&dgi));
            let da = product(&dgi, &self.w_ih);
            // Through the mean (a gather by target) and the gate.
            let mut d_edge = (da * &input.inv_degree).index_select(0, &input.targets);
            let _ = d_gates.addcmul_(&d_edge, &s.gathered);
            let _ = d_edge.g_mul_(&gates);
            // d(fused) = [scatter of d_edge | dgh], [N, 306].
            let (d_fused, _, _, _) = Tensor::embedding_bag(&d_edge, &order, &offsets, false, 0, false, None::<Tensor>, false);
            let d_fused = d_fused.view([n, FUSED_BLOCKS * HIDDEN]);
            let d_gh = d_fused.narrow(1, hm, 3 * HIDDEN);
            let _ = d_gh.narrow(1, 0, h2).copy_(&d_pre_rz);
            let _ = d_gh.narrow(1, h2, HIDDEN).copy_(&(&d_pre_n * &r));
            add_product(&mut d_w, &d_fused.tr(), &s.h);
            let _ = d_b.g_add_(&sum_rows(&d_fused));
            dh = if bf16() { dh_direct + product(&d_fused, &w) } else { dh_direct.addmm(&d_fused, &w) };
        }
        let d_messages_w = d_w.narrow(0, 0, hm);
        let d_w_hh = d_w.narrow(0, hm, 3 * HIDDEN);
        let d_messages_b = d_b.narrow(0, 0, hm);
        let d_b_hh = d_b.narrow(0, hm, 3 * HIDDEN);
        let dh0 = dh + dhc.narrow(1, HIDDEN, HIDDEN);

        let d_embedding = self.embedding.zeros_like().index_add_(0, &input.tokens, &dh0.narrow(1, 0, TEXT_DIM));
        // Gate table p = 2σ(P): dP = dp ⊙ p ⊙ (1 − p/2).
        let d_table = table.zeros_like().index_add_(0, &input.positions, &d_gates);
        let d_pre_table = d_table * &table * one_minus(&(&table * 0.5));
        let d_gate_w = d_pre_table.tr().mm(&self.sinusoids);
        let d_gate_b = sum_rows(&d_pre_table);

        let grads = vec![
            d_embedding,
            d_messages_w,
            d_messages_b,
            d_gate_w,
            d_gate_b,
            d_w_ih,
            d_w_hh,
            d_b_ih,
            d_b_hh,
            d_readout_gate_w,
            d_readout_gate_b,
            d_readout_w,
            d_readout_b,
        ];
        debug_assert!(grads.iter().zip(self.parameters()).all(|(g, p)| g.size() == p.size()));
        Gradients { loss, grads }
    }
}
