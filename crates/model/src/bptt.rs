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
//!   `n` and `W_hh h + b_hh` per step; its weight gradients are one
//!   accumulated product per step each (`gemm::outer_accumulate` where the
//!   CPU has AVX-512, in FP32 from FP32 operands also under `--dtype bf16`:
//!   faster there than MKL's AVX2 path or oneDNN's BF16 product with its
//!   casts; libtorch's `addmm` elsewhere).
//!
//! Dropout masks come from the function the autograd forward uses
//! ([`state_dropout_mask`]), in the same order, so for one seed the masks,
//! and the loss, are those of [`Ggnn::forward`] in training mode; `crates/model/tests/bptt.rs` checks
//! the loss and every gradient against autograd.

use tch::{Kind, Tensor};

use crate::ggnn::{floats, state_dropout_mask, view, Ggnn, Prepared, EDGE_TYPES, FUSED_BLOCKS, HIDDEN, SELECTOR_DIM, TEXT_DIM};
use programl_kernels::{self as kernels, gemm};

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
    /// `h` and `a` as operands of the products ([`Products::operand`]).
    h_op: Tensor,
    a_op: Tensor,
    /// The dropout mask (already scaled by `1/(1 − p)`), in training.
    mask: Option<Tensor>,
    /// Under the max aggregation, each edge's share of its target's
    /// gradient per channel, \[E, 34\]: 1 where its message is the
    /// maximum (split among equal ones), else 0; under mean-max, that for
    /// backward edges and `inv_degree` of the target for forward ones.
    won: Option<Tensor>,
}

/// The readout's part of the backward: the loss, the gradients reaching
/// `h_T` and `h_0`, and the readout's parameter gradients.
struct Head {
    loss: Tensor,
    dh_t: Tensor,
    dh0: Tensor,
    d_gate_w: Tensor,
    d_gate_b: Tensor,
    d_w: Tensor,
    d_b: Tensor,
}

/// The loss of one training step and the gradient of every parameter.
pub struct Gradients {
    /// Mean cross-entropy over the batch's nodes (a scalar tensor), plus
    /// the settling term where one was asked for.
    pub loss: Tensor,
    /// The steps the forward ran.
    pub steps: i64,
    /// One tensor per parameter, in [`Ggnn::parameters`] order.
    pub grads: Vec<Tensor>,
}

/// Whether the T-step loop's products run in BF16 (`--dtype bf16` on a CPU
/// with BF16 instructions): each product's inputs rounded to BF16, FP32
/// accumulation, an FP32 result. Everything else stays FP32.
fn bf16() -> bool {
    crate::matmul_precision() == crate::Precision::Bf16
}

/// The products' operands as they enter them: BF16 copies where [`bf16`]
/// says so (each made once: the weights per call, an activation per step,
/// kept on the tape for the backward), else the FP32 tensors themselves.
#[derive(Clone, Copy)]
struct Products {
    bf16: bool,
}

impl Products {
    fn operand(self, t: &Tensor) -> Tensor {
        if self.bf16 && t.device() == tch::Device::Cpu && gemm::available(true) {
            // (libtorch's conversion takes its AVX2 path: 5% of a step.)
            let t = t.contiguous();
            let out = Tensor::empty(t.size(), (Kind::BFloat16, tch::Device::Cpu));
            // SAFETY: contiguous CPU tensors of these kinds and one size;
            // `out` fresh.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(out.data_ptr() as *mut kernels::Bf16, out.numel());
                gemm::to_bf16(view(&t, Kind::Float), dst, tch::get_num_threads().max(1) as usize);
            }
            out
        } else if self.bf16 {
            t.to_kind(Kind::BFloat16)
        } else {
            t.shallow_clone()
        }
    }

    /// `acc += a · b`, each factor given as (FP32 tensor, its operand):
    /// one `addmm_` in FP32, the BF16 product added otherwise.
    fn accumulate(self, acc: &mut Tensor, a: (&Tensor, &Tensor), b: (&Tensor, &Tensor)) {
        let _ = if self.bf16 { acc.g_add_(&self.mm(a.1, b.1)) } else { acc.addmm_(a.0, b.0) };
    }

    /// `x + a · b`, the factors as in [`Products::accumulate`].
    fn plus_product(self, x: &Tensor, a: (&Tensor, &Tensor), b: (&Tensor, &Tensor)) -> Tensor {
        if self.bf16 {
            x + self.mm(a.1, b.1)
        } else {
            x.addmm(a.0, b.0)
        }
    }

    /// `a · b` of two operands, as FP32.
    fn mm(self, a: &Tensor, b: &Tensor) -> Tensor {
        let r = a.mm(b);
        if self.bf16 {
            r.to_kind(Kind::Float)
        } else {
            r
        }
    }
}

/// `acc += gradᵀ · input` by hand (`gemm::outer_accumulate`): `grad` \[N, C\],
/// `input` \[N, 34\], `acc` \[C, 34\], contiguous FP32 CPU tensors.
fn outer_by_hand(acc: &mut Tensor, grad: &Tensor, input: &Tensor, threads: usize) {
    let (rows, cols) = (grad.size()[0] as usize, grad.size()[1] as usize);
    let k = input.size()[1] as usize;
    let (grad, input) = (grad.contiguous(), input.contiguous());
    // SAFETY: FP32 CPU tensors, contiguous, of the sizes read above;
    // `acc` is not aliased by either.
    unsafe {
        gemm::outer_accumulate(
            view(&grad, Kind::Float),
            cols,
            view(&input, Kind::Float),
            k,
            rows,
            cols,
            k,
            crate::ggnn::view_mut(acc, Kind::Float),
            threads,
        )
    };
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

/// Flush-to-zero and denormals-are-zero on this thread (x86-64's MXCSR)
/// while alive; the thread's previous mode comes back on drop. A
/// gradient taken back through hundreds of steps shrinks into the
/// denormal range, where each SSE or AVX operation on it costs a
/// microcode assist of about a hundred cycles: without this, one training
/// step at T = 300 took 13.6 s instead of 1.45 (the bench's 1,440-node
/// batch, one thread, Intel Xeon Sapphire Rapids; docs/perf/ggnn.md).
/// The values lost are below 1.2e-38. PyTorch's `set_flush_denormal`
/// sets the same two bits.
struct FlushDenormals {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl FlushDenormals {
    #[cfg(target_arch = "x86_64")]
    #[allow(deprecated)] // the intrinsics stay; inline assembly would do the same
    fn new() -> FlushDenormals {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        const FTZ_DAZ: u32 = 0x8040; // bit 15 flush-to-zero, bit 6 denormals-are-zero
                                     // SAFETY: SSE is part of x86-64; only the two rounding-mode bits change.
        let saved = unsafe { _mm_getcsr() };
        unsafe { _mm_setcsr(saved | FTZ_DAZ) };
        FlushDenormals { saved }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn new() -> FlushDenormals {
        FlushDenormals {}
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        #[allow(deprecated)]
        // SAFETY: restores the mode read in `new`.
        unsafe {
            std::arch::x86_64::_mm_setcsr(self.saved)
        };
    }
}

/// One training step's unroll and loss ([`Ggnn::gradients`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainStep {
    /// The steps run, or with `until` their cap.
    pub steps: i64,
    /// Stop early where the states settle ([`Ggnn::settling_until`]).
    pub until: Option<Until>,
    /// What the backward keeps of the unroll.
    pub tape: Tape,
    /// Draw the model's state-dropout masks (training), or run without.
    pub dropout: bool,
    /// The positive class's weight in the loss.
    pub pos_weight: f64,
    /// The weight of the settling term ([`Ggnn::settling_loss_and_gradients`]).
    pub stability: f64,
}

impl TrainStep {
    /// `steps` steps on the full tape, no dropout, an unweighted loss and
    /// no settling term: the fields to change from.
    pub fn steps(steps: i64) -> TrainStep {
        TrainStep { steps, until: None, tape: Tape::Full, dropout: false, pos_weight: 1.0, stability: 0.0 }
    }
}

/// What the backward keeps of the unroll ([`Ggnn::gradients`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tape {
    /// Every step's record: memory grows with the steps (about 1 KiB a
    /// node a step on the CPU's fused loops).
    #[default]
    Full,
    /// A checkpointed tape: the state entering each earlier segment of
    /// this many steps, and the last segment's record. The backward
    /// recomputes each earlier segment's record from its state before
    /// taking it back, so the gradients are those of [`Tape::Full`] for
    /// one more forward, in memory for `T / n` states and `n` records.
    Segments(usize),
}

/// The forward's record for the backward ([`unroll`]).
struct Unroll<S> {
    /// The steps run.
    steps: i64,
    /// The final state `h_T`.
    h_t: Tensor,
    /// `h_{T−1}`, if a step ran.
    h_before: Option<Tensor>,
    /// Under [`Tape::Segments`]: the state entering each full segment
    /// before the last, oldest first.
    starts: Vec<Tensor>,
    /// The length of those segments (0 for a full tape).
    segment: usize,
    /// The last segment's records in order (every step's for a full tape).
    tape: Vec<S>,
}

/// Runs `steps` steps of `step` from `h0` (stopping early where `until`
/// says the states settled), keeping what `tape` asks.
fn unroll<S>(h0: &Tensor, steps: i64, until: Option<Until>, tape: Tape, step: &mut impl FnMut(&Tensor) -> (Tensor, S)) -> Unroll<S> {
    let segment = match tape {
        Tape::Full => 0,
        Tape::Segments(n) => n,
    };
    let mut run = Unroll { steps: 0, h_t: h0.shallow_clone(), h_before: None, starts: Vec::new(), segment, tape: Vec::new() };
    let mut start = h0.shallow_clone();
    for t in 0..steps.max(0) {
        if segment > 0 && run.tape.len() == segment {
            run.starts.push(std::mem::replace(&mut start, run.h_t.shallow_clone()));
            run.tape.clear();
        }
        let (next, record) = step(&run.h_t);
        run.tape.push(record);
        run.steps = t + 1;
        let settled = until.is_some_and(|u| t + 1 >= u.min_steps && u.settled(&next, &run.h_t));
        run.h_before = Some(std::mem::replace(&mut run.h_t, next));
        if settled {
            break;
        }
    }
    run
}

/// Takes `dh` (the gradient reaching `h_T`) back through the unroll,
/// `back(record, dh, last)` per step from the last (`last` true for the
/// final step only), recomputing each earlier segment's records with
/// `step`; returns the gradient reaching `h_0`.
fn unroll_backward<S>(
    run: &Unroll<S>,
    mut dh: Tensor,
    step: &mut impl FnMut(&Tensor) -> (Tensor, S),
    mut back: impl FnMut(&S, Tensor, bool) -> Tensor,
) -> Tensor {
    let mut last = true;
    for record in run.tape.iter().rev() {
        dh = back(record, dh, std::mem::take(&mut last));
    }
    for start in run.starts.iter().rev() {
        let mut h = start.shallow_clone();
        let mut records = Vec::with_capacity(run.segment);
        for _ in 0..run.segment {
            let (next, record) = step(&h);
            records.push(record);
            h = next;
        }
        for record in records.iter().rev() {
            dh = back(record, dh, false);
        }
    }
    dh
}

/// When a training forward stops ([`Ggnn::settling_until`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Until {
    /// The largest movement of a state entry in one step that counts as
    /// settled (the stopping rule's tolerance).
    pub tolerance: f64,
    /// Steps run before the test applies (the examples' recorded need).
    pub min_steps: i64,
}

impl Until {
    fn settled(&self, next: &Tensor, h: &Tensor) -> bool {
        (next - h).abs().max().double_value(&[]) <= self.tolerance
    }
}

/// The settling term of [`Ggnn::settling_loss_and_gradients`]: its loss
/// (a scalar) and its gradient with respect to `h_T` (that with respect
/// to `h_{T−1}` is the negation), or `None` when it is off or there was no
/// step.
fn settling(h_t: &Tensor, h_before: Option<&Tensor>, stability: f64) -> Option<(Tensor, Tensor)> {
    let before = h_before.filter(|_| stability > 0.0)?;
    let diff = h_t - before;
    let loss = diff.square().mean(Kind::Float) * stability;
    let grad = diff * (2.0 * stability / h_t.numel().max(1) as f64);
    Some((loss, grad))
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
        self.loss_and_gradients_with(input, steps, dropout, pos_weight, self.device() == tch::Device::Cpu)
    }

    /// [`Ggnn::loss_and_gradients`] with a settling term added to the
    /// loss: `stability` × the mean over the batch's state entries of
    /// `(h_T − h_{T−1})²`, the last step's movement. Trained at step
    /// counts past what each example needs, it teaches the states to
    /// reach a fixed point once the answer is known, which is what an
    /// adaptive-depth bundle's stopping rule (`hyper.stop`) tests.
    /// `stability` 0 is [`Ggnn::loss_and_gradients`].
    pub fn settling_loss_and_gradients(&self, input: &Prepared, steps: i64, dropout: bool, pos_weight: f64, stability: f64) -> Gradients {
        self.settling_with(input, steps, dropout, pos_weight, stability, self.device() == tch::Device::Cpu)
    }

    /// [`Ggnn::loss_and_gradients`] with the CPU's fused loops
    /// ([`Ggnn::bptt_fused`], `fused`, CPU only) or libtorch's operations
    /// (every device): the CPU uses the first, and tests check it against
    /// the second and against autograd.
    #[doc(hidden)]
    pub fn loss_and_gradients_with(&self, input: &Prepared, steps: i64, dropout: bool, pos_weight: f64, fused: bool) -> Gradients {
        self.settling_with(input, steps, dropout, pos_weight, 0.0, fused)
    }

    /// [`Ggnn::settling_loss_and_gradients`] on either path, as
    /// [`Ggnn::loss_and_gradients_with`].
    #[doc(hidden)]
    pub fn settling_with(&self, input: &Prepared, steps: i64, dropout: bool, pos_weight: f64, stability: f64, fused: bool) -> Gradients {
        self.until_with(input, steps, None, dropout, pos_weight, stability, fused)
    }

    /// The training step's gradients with the unroll's record kept as
    /// `tape` says: [`Ggnn::settling_until`] when `until` is given (then
    /// `steps` is the cap), else [`Ggnn::settling_loss_and_gradients`].
    /// [`Tape::Segments`] gives the same gradients in memory for a few
    /// states per segment, at the cost of a second forward; it refuses
    /// dropout, whose masks a recomputed segment would draw again.
    pub fn gradients(&self, input: &Prepared, step: &TrainStep) -> Gradients {
        self.taped_with(input, step, self.device() == tch::Device::Cpu)
    }

    /// [`Ggnn::settling_loss_and_gradients`] trained as adaptive depth
    /// infers: the forward runs at least `until.min_steps` steps, then
    /// stops at the first step that moves no state entry of the batch by
    /// more than `until.tolerance`, or at `cap`; the loss and its
    /// gradients are taken there ([`Gradients::steps`] says where).
    pub fn settling_until(&self, input: &Prepared, cap: i64, until: Until, dropout: bool, pos_weight: f64, stability: f64) -> Gradients {
        self.until_with(input, cap, Some(until), dropout, pos_weight, stability, self.device() == tch::Device::Cpu)
    }

    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn until_with(
        &self,
        input: &Prepared,
        steps: i64,
        until: Option<Until>,
        dropout: bool,
        pos_weight: f64,
        stability: f64,
        fused: bool,
    ) -> Gradients {
        self.taped_with(input, &TrainStep { steps, until, tape: Tape::Full, dropout, pos_weight, stability }, fused)
    }

    /// [`Ggnn::gradients`] on either path, as [`Ggnn::loss_and_gradients_with`].
    #[doc(hidden)]
    pub fn taped_with(&self, input: &Prepared, step: &TrainStep, fused: bool) -> Gradients {
        let TrainStep { tape, dropout, stability, .. } = *step;
        assert!(stability >= 0.0 && stability.is_finite(), "stability {stability} is not a finite weight >= 0");
        if let Tape::Segments(n) = tape {
            assert!(n > 0, "a checkpointed tape's segments hold at least one step");
            assert!(
                !(dropout && self.hyper().state_dropout > 0.0),
                "a checkpointed tape recomputes its segments, and dropout would draw their masks again"
            );
        }
        let _flush = FlushDenormals::new();
        tch::no_grad(|| {
            if fused && self.is_spec_width() {
                assert_eq!(self.device(), tch::Device::Cpu, "the fused training loops run on the CPU");
                self.bptt_fused(input, step)
            } else {
                self.bptt(input, step)
            }
        })
    }

    /// [`Ggnn::bptt`]'s gradients on the CPU, through the fused loops of
    /// `kernels.rs`: per step forward one product for the six edge maps
    /// and `W_hh` (no bias: the loops add it), the gated mean
    /// ([`kernels::aggregate`]), the `W_ih` product and the GRU cell
    /// ([`kernels::gru_train`], keeping its gates); per step backward the
    /// GRU's ([`kernels::gru_backward`]), the `W_ih` products, the message
    /// product again (the tape keeps `h`, not the \[N, 306\] product), the
    /// aggregation's ([`kernels::aggregate_backward`]: the messages'
    /// gradient by row and the gate table's by position, without
    /// per-edge tensors) and the `W` products. Dropout masks are drawn
    /// as in [`Ggnn::bptt`].
    fn bptt_fused(&self, input: &Prepared, step: &TrainStep) -> Gradients {
        let TrainStep { steps, until, tape, dropout, pos_weight, stability } = *step;
        use crate::ggnn::{block_products, view_mut};
        use kernels::backward::{self, ByRow};
        use kernels::forward::{self, Edges, GruTape, Layout};
        use kernels::threads::Shared;
        use kernels::{FUSED, GATES};
        let labels = input.labels.as_ref().expect("a training batch is labelled");
        let n = input.nodes;
        let nodes = n as usize;
        let p = self.hyper().state_dropout;
        let dropout = dropout && p > 0.0;
        let pr = Products { bf16: bf16() };
        let kind = if pr.bf16 { Kind::BFloat16 } else { Kind::Float };
        let threads = tch::get_num_threads().max(1) as usize;
        let float = (Kind::Float, tch::Device::Cpu);

        let h0 = self.initial_states(input);
        let positions = input.position_rows.max(1);
        let table = self.gate_table();
        let gates_table = table.narrow(0, 0, positions).contiguous();
        let (w, _) = self.fused_weights();
        let (w_op, w_ih_op) = (pr.operand(&w), pr.operand(&self.w_ih));
        // The forward products' right-hand sides: BF16 products are one
        // wide product each (oneDNN), row-major [N, 306] and [N, 102];
        // FP32 ones one per block of 34 columns (MKL is faster so),
        // block-major [9, N, 34] and [3, N, 34].
        let by_block = |w: &Tensor, blocks: i64| w.view([blocks, HIDDEN, HIDDEN]).transpose(1, 2).contiguous();
        let (w_f, w_i) = if pr.bf16 {
            (pr.operand(&w.tr()), pr.operand(&self.w_ih.tr()))
        } else {
            (by_block(&w, FUSED_BLOCKS), by_block(&self.w_ih, 3))
        };
        // FP32 where the CPU has AVX-512: the hand-written products
        // (`gemm.rs`), row-major, the message blocks' own packing for the
        // backward's recomputation, and the two backward products by the
        // transposed weights.
        let hand = (!pr.bf16 && crate::ggnn::hand_products_on(false)).then(|| {
            let h = HIDDEN as usize;
            [
                gemm::Packed::from_weight(&floats(&w), FUSED, h, false),
                gemm::Packed::from_weight(&floats(&w.narrow(0, 0, EDGE_TYPES * HIDDEN)), EDGE_TYPES as usize * h, h, false),
                gemm::Packed::from_weight(&floats(&self.w_ih), GATES, h, false),
                gemm::Packed::from_weight(&floats(&self.w_ih.tr()), h, GATES, false),
                gemm::Packed::from_weight(&floats(&w.tr()), h, FUSED, false),
            ]
        });
        // out [n, cols] = x [n, ld] · the packed right-hand side.
        let by_hand = |x: &Tensor, ld: usize, pack: &gemm::Packed| -> Tensor {
            let out = Tensor::empty([n, pack.cols() as i64], float);
            // SAFETY: FP32 CPU tensors, contiguous, `out` fresh.
            unsafe { gemm::product(view(x, Kind::Float), ld, nodes, pack, view_mut::<f32>(&out, Kind::Float), pack.cols(), threads) };
            out
        };
        let (layout, gi_layout) = if pr.bf16 || hand.is_some() {
            (Layout::row_major(FUSED / 34), Layout::row_major(GATES / 34))
        } else {
            (Layout::block_major(nodes), Layout::block_major(nodes))
        };
        // x · w in that arrangement, `blocks` blocks of it (the backward
        // needs only the six message blocks of F again).
        let product = |x: &Tensor, w: &Tensor, blocks: i64| -> Tensor {
            if let Some(packs) = &hand {
                let pack = match blocks {
                    FUSED_BLOCKS => &packs[0],
                    EDGE_TYPES => &packs[1],
                    _ => &packs[2],
                };
                by_hand(x, HIDDEN as usize, pack)
            } else if pr.bf16 {
                x.mm(&w.narrow(1, 0, blocks * HIDDEN))
            } else {
                let out = Tensor::empty([blocks, n, HIDDEN], float);
                block_products(&out, x, &w.narrow(0, 0, blocks));
                out
            }
        };
        let (b_msg, bias) = self.kernel_biases();
        let rows: Vec<i64> = Vec::<i64>::try_from(&input.fused_rows).expect("edge rows");
        let offsets: Vec<usize> =
            rows.iter().map(|&q| (q / FUSED_BLOCKS) as usize * layout.row + (q % FUSED_BLOCKS) as usize * layout.block).collect();
        let (crow, types, pos, targets) = (
            Vec::<i64>::try_from(&input.crow).expect("crow"),
            Vec::<i64>::try_from(&input.edge_types).expect("types"),
            Vec::<i64>::try_from(&input.positions).expect("positions"),
            Vec::<i64>::try_from(&input.targets).expect("targets"),
        );
        let inv_degree = Vec::<f32>::try_from(input.inv_degree.view([-1])).expect("inverse degrees");
        let edges = Edges { crow: &crow, offsets: &offsets, types: &types, positions: &pos, reduce: input.reduce };
        // SAFETY (every view below): contiguous CPU tensors of the kind
        // named, alive for the borrow; each written through one slice at a time.
        let gates: &[f32] = unsafe { view(&gates_table, Kind::Float) };

        struct Saved {
            h: Tensor,
            h_op: Tensor,
            a: Tensor,
            a_op: Tensor,
            r: Tensor,
            z: Tensor,
            n: Tensor,
            ghn: Tensor,
            mask: Option<Tensor>,
            /// Under the max aggregation, each node's winning edge per channel.
            winners: Option<Vec<u32>>,
        }
        let max = input.reduce.has_max();
        let mut step = |h: &Tensor| -> (Tensor, Saved) {
            let h_op = pr.operand(h);
            let f = product(&h_op, &w_f, FUSED_BLOCKS);
            let a = Tensor::empty([n, 34], float);
            let mut winners = max.then(|| vec![0u32; nodes * 34]);
            unsafe {
                let out: &mut [f32] = view_mut(&a, Kind::Float);
                match &mut winners {
                    Some(won) => {
                        kernels::with_elem!(pr.bf16, T => forward::aggregate_max_tape::<T>(view(&f, kind), &edges, &b_msg, gates, out, won, threads))
                    }
                    None => {
                        kernels::with_elem!(pr.bf16, T => forward::aggregate::<T, f32>(view(&f, kind), &edges, &b_msg, gates, out, threads))
                    }
                }
            }
            let a_op = pr.operand(&a);
            let gi = product(&a_op, &w_i, 3);
            let [mut next, r, z, nn, ghn] = std::array::from_fn(|_| Tensor::empty([n, 34], float));
            unsafe {
                let tape_out = GruTape {
                    r: Shared::new(view_mut(&r, Kind::Float)),
                    z: Shared::new(view_mut(&z, Kind::Float)),
                    n: Shared::new(view_mut(&nn, Kind::Float)),
                    ghn: Shared::new(view_mut(&ghn, Kind::Float)),
                };
                let (gl, fl) = (gi_layout, layout);
                kernels::with_elem!(
                    pr.bf16,
                    T => forward::gru_train::<T>(
                        (view(&gi, kind), gl),
                        (view(&f, kind), fl),
                        view(h, Kind::Float),
                        &bias,
                        view_mut(&next, Kind::Float),
                        &tape_out,
                        threads,
                    )
                );
            }
            let mask = if dropout {
                let m = state_dropout_mask(h, p);
                next *= &m;
                Some(m)
            } else {
                None
            };
            (next, Saved { h: h.shallow_clone(), h_op, a, a_op, r, z, n: nn, ghn, mask, winners })
        };
        let run = unroll(&h0, steps, until, tape, &mut step);
        let h_t = &run.h_t;
        let head = self.readout_backward(h_t, &h0, labels, input.loss_weights.as_ref(), pos_weight);
        let settle = settling(h_t, run.h_before.as_ref(), stability);
        let dh = match &settle {
            Some((_, g)) => &head.dh_t + g,
            None => head.dh_t.shallow_clone(),
        };

        let by_row = ByRow::new(&rows, nodes);
        // The weight gradients by hand wherever the CPU has AVX-512 (FP32
        // operands, also under BF16 products).
        let outer_hand = crate::ggnn::hand_products_on(false);
        let zeros = |shape: &[i64]| Tensor::zeros(shape, float);
        let mut d_w = zeros(&[FUSED as i64, 34]);
        let mut d_w_ih = zeros(&[GATES as i64, 34]);
        // The biases' gradients: column sums the backward loops take.
        // (`gru_sums`: the input gates' `b_ih`, then the hidden gates' `b_hh`.)
        let (mut d_b, mut gru_sums) = (vec![0f32; FUSED], vec![0f32; 2 * GATES]);
        let mut d_table = vec![0f32; positions as usize * 34];
        let back = |s: &Saved, dh: Tensor, last: bool| -> Tensor {
            let dh_new = match &s.mask {
                Some(m) => dh * m,
                None => dh,
            }
            .contiguous();
            let dgi = Tensor::empty([n, GATES as i64], float);
            let d_fused = Tensor::empty([n, FUSED as i64], float);
            let dh_direct = Tensor::empty([n, 34], float);
            unsafe {
                backward::gru_backward(
                    backward::GruBackward {
                        dh_new: view(&dh_new, Kind::Float),
                        h: view(&s.h, Kind::Float),
                        r: view(&s.r, Kind::Float),
                        z: view(&s.z, Kind::Float),
                        n: view(&s.n, Kind::Float),
                        ghn: view(&s.ghn, Kind::Float),
                    },
                    view_mut(&dgi, Kind::Float),
                    view_mut(&d_fused, Kind::Float),
                    view_mut(&dh_direct, Kind::Float),
                    &mut gru_sums,
                    threads,
                );
            }
            let dgi_op = pr.operand(&dgi);
            if outer_hand {
                outer_by_hand(&mut d_w_ih, &dgi, &s.a, threads);
            } else {
                pr.accumulate(&mut d_w_ih, (&dgi.tr(), &dgi_op.tr()), (&s.a, &s.a_op));
            }
            let da = match &hand {
                Some(packs) => by_hand(&dgi, GATES, &packs[3]),
                None => pr.mm(&dgi_op, &w_ih_op).contiguous(),
            };
            let f = product(&s.h_op, &w_f, EDGE_TYPES);
            unsafe {
                let (d, fu) = (view(&da, Kind::Float), view_mut(&d_fused, Kind::Float));
                // The recomputed product holds the six message blocks only.
                let back = if pr.bf16 || hand.is_some() { Layout::row_major(EDGE_TYPES as usize) } else { layout };
                kernels::with_elem!(
                    pr.bf16,
                    T => backward::aggregate_backward::<T>(
                        backward::EdgesBackward {
                            da: d,
                            inv_degree: &inv_degree,
                            fused: (view(&f, kind), back),
                            bias: &b_msg,
                            gates,
                            targets: &targets,
                            positions: &pos,
                            by_row: &by_row,
                            winners: s.winners.as_deref(),
                            reduce: input.reduce,
                        },
                        fu,
                        &mut d_table,
                        &mut d_b[..EDGE_TYPES as usize * 34],
                        threads,
                    )
                );
            }
            let d_fused_op = pr.operand(&d_fused);
            if outer_hand {
                outer_by_hand(&mut d_w, &d_fused, &s.h, threads);
            } else {
                pr.accumulate(&mut d_w, (&d_fused.tr(), &d_fused_op.tr()), (&s.h, &s.h_op));
            }
            let mut dh = match &hand {
                Some(packs) => by_hand(&d_fused, FUSED, &packs[4]).g_add_(&dh_direct),
                None => pr.plus_product(&dh_direct, (&d_fused, &d_fused_op), (&w, &w_op)),
            };
            if let (true, Some((_, g))) = (last, &settle) {
                dh -= g; // the settling term's part through h_{T−1}
            }
            dh
        };
        let dh = unroll_backward(&run, dh, &mut step, back);
        let hm = EDGE_TYPES * HIDDEN;
        for (d, s) in d_b[hm as usize..].iter_mut().zip(&gru_sums[GATES..]) {
            *d += s;
        }
        let (d_b, d_b_ih) = (Tensor::from_slice(&d_b), Tensor::from_slice(&gru_sums[..GATES]));
        let dh0 = dh + &head.dh0;
        let d_embedding = self.embedding.zeros_like().index_add_(0, &input.tokens, &dh0.narrow(1, 0, TEXT_DIM));
        // Gate table p = 2σ(P): dP = dp ⊙ p ⊙ (1 − p/2), over every row.
        let d_full = table.zeros_like();
        d_full.narrow(0, 0, positions).copy_(&Tensor::from_slice(&d_table).view([positions, 34]));
        let d_pre_table = d_full * &table * one_minus(&(&table * 0.5));
        let grads = vec![
            d_embedding,
            d_w.narrow(0, 0, hm),
            d_b.narrow(0, 0, hm),
            d_pre_table.tr().mm(&self.sinusoids),
            sum_rows(&d_pre_table),
            d_w_ih,
            d_w.narrow(0, hm, 3 * HIDDEN),
            d_b_ih,
            d_b.narrow(0, hm, 3 * HIDDEN),
            head.d_gate_w,
            head.d_gate_b,
            head.d_w,
            head.d_b,
        ];
        debug_assert!(grads.iter().zip(self.parameters()).all(|(g, p)| g.size() == p.size()));
        let loss = match settle {
            Some((l, _)) => head.loss + l,
            None => head.loss,
        };
        Gradients { loss, grads, steps: run.steps }
    }

    fn bptt(&self, input: &Prepared, step: &TrainStep) -> Gradients {
        let TrainStep { steps, until, tape, dropout, pos_weight, stability } = *step;
        let labels = input.labels.as_ref().expect("a training batch is labelled");
        let n = input.nodes;
        let device = self.device();
        let p = self.hyper().state_dropout;
        let dropout = dropout && p > 0.0;
        let hd = self.width();
        let h2 = 2 * hd;

        // Forward, keeping what the backward needs: the arrangement of
        // `Ggnn::propagate` without autograd (one fused matmul per step).
        let h0 = self.initial_states(input);
        let table = self.gate_table();
        let gates = input.edge_gates(&table);
        let (w, b) = self.fused_weights();
        let pr = Products { bf16: bf16() };
        // Right-hand sides: forward `Wᵀ`, backward `W`.
        let (w_t, w_ih_t, w_op, w_ih_op) = (pr.operand(&w.tr()), pr.operand(&self.w_ih.tr()), pr.operand(&w), pr.operand(&self.w_ih));
        let hm = EDGE_TYPES * hd;
        let mut step = |h: &Tensor| -> (Tensor, Step) {
            let h_op = pr.operand(h);
            let fused = if pr.bf16 { pr.mm(&h_op, &w_t) + &b } else { h.linear(&w, Some(&b)) };
            let gathered = fused.view([n * FUSED_BLOCKS, hd]).index_select(0, &input.fused_rows);
            let per_edge = &gathered * &gates;
            let (a, max) = input.aggregate_parts(&per_edge);
            // Under the max aggregation, where each edge's message is its
            // target's maximum (autograd's rule: equal ones share). Under
            // mean-max, that among the backward edges, and each forward
            // edge's share of its target's mean.
            let won = match (input.reduce, &max) {
                (kernels::forward::Reduce::Max, Some(max)) => {
                    let hit = per_edge.eq_tensor(&max.index_select(0, &input.targets)).to_kind(Kind::Float);
                    let ties = Tensor::zeros([n, hd], (Kind::Float, device)).index_add(0, &input.targets, &hit);
                    Some(hit / ties.index_select(0, &input.targets))
                }
                (kernels::forward::Reduce::MeanMax, Some(max)) => {
                    let back = input.edge_types.ge(kernels::forward::FIRST_BACKWARD).to_kind(Kind::Float).view([-1, 1]);
                    let hit = per_edge.eq_tensor(&max.index_select(0, &input.targets)).to_kind(Kind::Float) * &back;
                    let ties = Tensor::zeros([n, hd], (Kind::Float, device)).index_add(0, &input.targets, &hit).clamp_min(1.0);
                    let mean = (1.0 - &back) * input.inv_degree.index_select(0, &input.targets);
                    Some(hit / ties.index_select(0, &input.targets) + mean)
                }
                _ => None,
            };
            let a_op = pr.operand(&a);
            let gi = if pr.bf16 { pr.mm(&a_op, &w_ih_t) + &self.b_ih } else { a.linear(&self.w_ih, Some(&self.b_ih)) };
            let gh = fused.narrow(1, hm, 3 * hd);
            let rz = (gh.narrow(1, 0, h2) + gi.narrow(1, 0, h2)).sigmoid_();
            let ghn = gh.narrow(1, h2, hd).contiguous();
            let new = gi.narrow(1, h2, hd).addcmul(&rz.narrow(1, 0, hd), &ghn).tanh_();
            // GRUCell: h' = (h − n) ⊙ z + n.
            let mut next = (h - &new).g_mul_(&rz.narrow(1, hd, hd)).g_add_(&new);
            let mask = if dropout {
                let m = state_dropout_mask(h, p);
                next *= &m;
                Some(m)
            } else {
                None
            };
            (next, Step { h: h.shallow_clone(), gathered, a, rz, n: new, ghn, h_op, a_op, mask, won })
        };
        let run = unroll(&h0, steps, until, tape, &mut step);
        let h_t = &run.h_t;

        let head = self.readout_backward(h_t, &h0, labels, input.loss_weights.as_ref(), pos_weight);
        let settle = settling(h_t, run.h_before.as_ref(), stability);
        let dh = match &settle {
            Some((_, g)) => &head.dh_t + g,
            None => head.dh_t.shallow_clone(),
        };

        // The scatter-add onto the rows of the fused product viewed as
        // [9N, 34], as one embedding bag (sum) per step: bag r holds the
        // edges that read row r, in `order`.
        let rows = n * FUSED_BLOCKS;
        let order = input.fused_rows.argsort_stable(true, 0, false);
        let counts = input.fused_rows.bincount(None::<Tensor>, rows);
        let offsets = Tensor::cat(&[Tensor::zeros([1], (Kind::Int64, device)), counts.cumsum(0, Kind::Int64).narrow(0, 0, rows - 1)], 0);

        let zeros = |shape: &[i64]| Tensor::zeros(shape, (Kind::Float, device));
        let mut d_w = zeros(&[FUSED_BLOCKS * hd, hd]);
        let mut d_b = zeros(&[FUSED_BLOCKS * hd]);
        let mut d_w_ih = zeros(&[3 * hd, hd]);
        let mut d_b_ih = zeros(&[3 * hd]);
        let mut d_gates = zeros(&[input.edges, hd]);
        let back = |s: &Step, dh: Tensor, last: bool| -> Tensor {
            let dh_new = match &s.mask {
                Some(m) => dh * m,
                None => dh,
            };
            let r = s.rz.narrow(1, 0, hd);
            let z = s.rz.narrow(1, hd, hd);
            // h' = (1 − z) n + z h
            let dn = &dh_new - &dh_new * &z;
            let dz = &dh_new * (&s.h - &s.n);
            let dh_direct = &dh_new * &z;
            let d_pre_n = dn * one_minus(&s.n.square());
            let d_pre_rz = Tensor::cat(&[&d_pre_n * &s.ghn, dz], 1) * &s.rz * one_minus(&s.rz);
            let dgi = Tensor::cat(&[&d_pre_rz, &d_pre_n], 1);
            let dgi_op = pr.operand(&dgi);
            pr.accumulate(&mut d_w_ih, (&dgi.tr(), &dgi_op.tr()), (&s.a, &s.a_op));
            let _ = d_b_ih.g_add_(&sum_rows(&dgi));
            let da = pr.mm(&dgi_op, &w_ih_op);
            // Through the mean (a gather by target) and the gate.
            let mut d_edge = match &s.won {
                Some(won) => da.index_select(0, &input.targets) * won,
                None => (da * &input.inv_degree).index_select(0, &input.targets),
            };
            let _ = d_gates.addcmul_(&d_edge, &s.gathered);
            let _ = d_edge.g_mul_(&gates);
            // d(fused) = [scatter of d_edge | dgh], [N, 306].
            let (d_fused, _, _, _) = Tensor::embedding_bag(&d_edge, &order, &offsets, false, 0, false, None::<Tensor>, false);
            let d_fused = d_fused.view([n, FUSED_BLOCKS * hd]);
            let d_gh = d_fused.narrow(1, hm, 3 * hd);
            d_gh.narrow(1, 0, h2).copy_(&d_pre_rz);
            d_gh.narrow(1, h2, hd).copy_(&(&d_pre_n * &r));
            let d_fused_op = pr.operand(&d_fused);
            pr.accumulate(&mut d_w, (&d_fused.tr(), &d_fused_op.tr()), (&s.h, &s.h_op));
            let _ = d_b.g_add_(&sum_rows(&d_fused));
            let mut dh = pr.plus_product(&dh_direct, (&d_fused, &d_fused_op), (&w, &w_op));
            if let (true, Some((_, g))) = (last, &settle) {
                dh -= g;
            }
            dh
        };
        let dh = unroll_backward(&run, dh, &mut step, back);
        let d_messages_w = d_w.narrow(0, 0, hm);
        let d_w_hh = d_w.narrow(0, hm, 3 * hd);
        let d_messages_b = d_b.narrow(0, 0, hm);
        let d_b_hh = d_b.narrow(0, hm, 3 * hd);
        let dh0 = dh + &head.dh0;

        let d_embedding = self.embedding.zeros_like().index_add_(0, &input.tokens, &dh0.narrow(1, 0, hd - SELECTOR_DIM));
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
            head.d_gate_w,
            head.d_gate_b,
            head.d_w,
            head.d_b,
        ];
        debug_assert!(grads.iter().zip(self.parameters()).all(|(g, p)| g.size() == p.size()));
        let loss = match settle {
            Some((l, _)) => head.loss + l,
            None => head.loss,
        };
        Gradients { loss, grads, steps: run.steps }
    }

    /// The readout and the loss, forward and backward, from the final and
    /// initial states. Each node weighs its class's weight (`pos_weight`
    /// for label 1, else 1) times its entry of `node_weights` (1 when
    /// absent), and the loss is the weighted mean of the nodes'
    /// cross-entropies (0, with zero gradients, when every weight is 0).
    fn readout_backward(&self, h_t: &Tensor, h0: &Tensor, labels: &Tensor, node_weights: Option<&Tensor>, pos_weight: f64) -> Head {
        let n = h_t.size()[0];
        let device = self.device();
        // Readout and cross-entropy: logits = σ(F) ⊙ g.
        let hc = Tensor::cat(&[h_t, h0], 1);
        let f = hc.linear(&self.readout_gate_w, Some(&self.readout_gate_b)).sigmoid();
        let g = h_t.linear(&self.readout_w, Some(&self.readout_b));
        let logits = &f * &g;
        let classes = logits.size()[1];
        let residual = logits.softmax(1, Kind::Float) - labels.one_hot(classes).to_kind(Kind::Float);
        let (loss, dlogits) = match (node_weights, pos_weight == 1.0) {
            (None, true) => (logits.cross_entropy_for_logits(labels), residual / n as f64),
            (None, false) => {
                let weights = class_weights(classes, pos_weight, device);
                let per_node = weights.index_select(0, labels).unsqueeze(1);
                let total = per_node.sum(Kind::Float);
                let loss = logits.cross_entropy_loss::<Tensor>(labels, Some(weights), tch::Reduction::Mean, -100, 0.0);
                (loss, residual * per_node / total)
            }
            (Some(mask), _) => {
                let weights = class_weights(classes, pos_weight, device);
                let per_node = (weights.index_select(0, labels) * mask.to_kind(Kind::Float)).unsqueeze(1);
                // Clamped: a batch with no weighted node gives 0, not NaN.
                let total = per_node.sum(Kind::Float).clamp_min(f64::from(f32::MIN_POSITIVE));
                let nll = logits.log_softmax(1, Kind::Float).gather(1, &labels.unsqueeze(1), false).neg();
                let loss = (&nll * &per_node).sum(Kind::Float) / &total;
                (loss, residual * per_node / total)
            }
        };
        let d_pre_f = &dlogits * &g * &f * one_minus(&f);
        let dg = &dlogits * &f;
        let d_readout_gate_w = d_pre_f.tr().mm(&hc);
        let d_readout_gate_b = sum_rows(&d_pre_f);
        let d_readout_w = dg.tr().mm(h_t);
        let d_readout_b = sum_rows(&dg);
        let dhc = d_pre_f.mm(&self.readout_gate_w);
        Head {
            loss,
            dh_t: dg.mm(&self.readout_w) + dhc.narrow(1, 0, self.width()),
            dh0: dhc.narrow(1, self.width(), self.width()),
            d_gate_w: d_readout_gate_w,
            d_gate_b: d_readout_gate_b,
            d_w: d_readout_w,
            d_b: d_readout_b,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The guard turns flush-to-zero and denormals-are-zero on for its
    /// life and gives the thread its own mode back: training must not
    /// leave a caller's arithmetic changed.
    #[test]
    #[cfg(target_arch = "x86_64")]
    #[allow(deprecated)]
    fn flushing_denormals_is_undone_on_drop() {
        use std::arch::x86_64::_mm_getcsr;
        let before = unsafe { _mm_getcsr() };
        assert_eq!(before & 0x8040, 0, "a Rust thread starts without FTZ/DAZ");
        let tiny = std::hint::black_box(1e-39f32);
        assert!(std::hint::black_box(tiny * 1.0) > 0.0, "a denormal survives a product");
        {
            let _flush = super::FlushDenormals::new();
            assert_eq!(unsafe { _mm_getcsr() } & 0x8040, 0x8040);
            assert_eq!(std::hint::black_box(tiny) * std::hint::black_box(1.0f32), 0.0, "flushed");
        }
        // The control bits (the low six are sticky exception flags).
        assert_eq!(unsafe { _mm_getcsr() } & !0x3f, before & !0x3f);
        assert!(std::hint::black_box(tiny) * std::hint::black_box(1.0f32) > 0.0);
    }
}
