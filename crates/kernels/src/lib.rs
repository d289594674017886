//! The GGNN's CPU kernels: torch-free loops over plain slices, shared by
//! inference (`programl-infer`, which the learned pass links) and by
//! training (`programl-model`, which adds libtorch around them).
//!
//! One module per concern, one file per instruction set:
//!
//! | module | what |
//! |---|---|
//! | [`elem`] | the products' element types (FP32, BF16 bits) and the branch-free `exp`, sigmoid and tanh |
//! | [`forward`] | the step's element-wise work fused: the gated mean over incoming edges ([`forward::aggregate`]) and the GRU cell ([`forward::gru`]; training's variant keeps a tape) |
//! | [`gemm`] | the step's products `[N, 34] · [34, C]` (FP32, BF16): packing, row groups, run-time dispatch |
//! | [`cell`] | the GRU cell on row-major rows of any width (the general step's), exact or to INT8's needs |
//! | [`int8`] | the INT8 inference step, laid out for bytes: AVX-512 VNNI, AVX-VNNI (256-bit `vpdpbusd`), AVX2 (`vpmaddwd`) and portable, the same integer sums on each |
//! | [`backward`] | training's two backward loops (GRU cell, aggregation) and the bias sums |
//! | [`dropout`] | the state dropout mask (a counter hash, eight per instruction with AVX-512DQ) |
//! | [`threads`] | splitting a loop's nodes over threads: a small pool of std threads, or a runner the host installs (libtorch's `at::parallel_for` in training) |
//! | [`cpu`] | what the CPU runs, and the forced path (`isa=`) |
//! | `avx512` | the GRU cell and the backward loops in AVX-512 intrinsics |
//! | `gemm::avx512`, `gemm::portable` | the products per instruction set (the portable one is also compiled for AVX2+FMA) |
//!
//! Each loop is written once as portable Rust over fixed-width rows and
//! compiled again for AVX2 and FMA (`#[target_feature]`); the hot ones are
//! also written in AVX-512 intrinsics. The best path the CPU runs is chosen
//! at run time ([`cpu::Isa`]), and a path can be forced, so one machine
//! tests every path its CPU can run.
//!
//! **Invariant:** no tch, torch-sys, rayon or OpenMP here (`tests/layering.rs`).

/// Hidden state width: the text embedding (32) and the root selector (2).
pub const HIDDEN: usize = 34;
/// Text embedding width.
pub const TEXT_DIM: usize = 32;
/// Edge types: control, data, call, each forward and backward.
pub const EDGE_TYPES: usize = 6;
pub(crate) const H: usize = HIDDEN;
/// Columns of a fused product row: six edge-type maps and `W_hh`'s three gates.
pub const FUSED: usize = 9 * H;
/// Columns of the input product row: `W_ih`'s three gates.
pub const GATES: usize = 3 * H;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub mod backward;
pub mod cell;
pub mod cpu;
pub mod dropout;
pub mod elem;
pub mod forward;
pub mod gemm;
pub mod int8;
pub mod threads;

pub use elem::{Bf16, Elem};

#[cfg(test)]
mod tests;
