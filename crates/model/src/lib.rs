//! The ProGraML GGNN in libtorch (through `tch`), and its bundle format.
//!
//! A model reads the core's model input ([`programl::batch`]): the trainer
//! and the learned compiler pass both featurise graphs there, and this crate
//! turns a [`Batch`](programl::batch::Batch) into tensors
//! ([`Prepared`]) and per-node logits ([`Ggnn::forward`]). A trained model
//! travels as a [`bundle`]: `config.json`, `weights.safetensors` and
//! `vocabulary.json` in one directory, checked on load.
//!
//! ```no_run
//! use programl::batch::{Batch, GraphInput, Sample};
//! use programl_model::{bundle::Bundle, Prepared, select_device, DeviceChoice};
//!
//! let device = select_device(DeviceChoice::Auto).unwrap();
//! let bundle = Bundle::load("models/reachability".as_ref(), device).unwrap();
//! # let graph = programl::ProgramGraph::new();
//! let input = GraphInput::new(&graph, &bundle.vocabulary).unwrap();
//! let batch = Batch::from_samples(&[Sample { graph: &input, root: Some(0), positives: None }]).unwrap();
//! let prepared = Prepared::new(&batch, bundle.model.hyper(), device);
//! let logits = tch::no_grad(|| bundle.model.forward(&prepared, bundle.model.hyper().steps, false));
//! ```
//!
//! **Architecture invariant:** this crate never depends on the dataset store
//! or on plotting; with the trainer and the runtime it is one of the three
//! crates that name `tch`.

mod bptt;
pub mod bundle;
mod ggnn;
pub mod libtorch;
mod widen;
mod workspace;

pub use bptt::{class_weights, Gradients, Tape, TrainStep, Until};
pub use ggnn::{
    hand_products, sinusoids, with_library_products, Aggregation, Ggnn, GraphHead, Hyper, Join, Pool, Prepared, EDGE_TYPES, HIDDEN,
    SELECTOR_DIM, TEXT_DIM,
};
pub use widen::widen;

use std::fmt;
use std::str::FromStr;

pub use tch;
use tch::{Device, Tensor};

/// The precision of FP32 matmuls: `--dtype f32|bf16`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    #[default]
    F32,
    /// BF16 products (FP32 accumulation, FP32 results) where the CPU has
    /// BF16 instructions (AVX512-BF16, AMX); FP32 elsewhere. The inference
    /// forward and the hand-written training step (`bptt.rs`) round the
    /// inputs of their T-step loop's products to BF16 themselves, which
    /// oneDNN runs natively; libtorch's own FP32-as-BF16 setting is also
    /// set, for the CPUs where libtorch honours it (AMX). Weights, states
    /// and every other operation stay FP32, and the autograd forward
    /// (graph-level training, `bench --autograd`) stays FP32.
    Bf16,
    /// Inference only: INT8 products on every kernel path (AVX-512 VNNI's
    /// `vpdpbusd`, AVX2's `vpmaddwd`, or portable; `programl_kernels::int8`). The CPU inference step's
    /// products take each state's (and aggregated message's) first 32
    /// entries as bytes with a scale per node, and each weight column's
    /// with a scale per column, summing in 32-bit integers; the last two
    /// entries, the root selector's in the state, stay FP32, as does
    /// everything else, the GRU cell's sigmoids computed to ~1e-4 (the
    /// gates' quantisation error is ~1e-2). On the five shipped DeepDataFlow
    /// bundles val and test F1 moved by at most 0.002 (README, Shipped
    /// models). The learned pass's default (`dtype=auto`) where the CPU
    /// has VNNI ([`int8_preferred`]). Training refuses it.
    Int8,
}

impl FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            "int8" => Ok(Precision::Int8),
            _ => Err(format!("dtype '{s}' is not one of f32, bf16, int8")),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        })
    }
}

extern "C" {
    fn programl_set_matmul_bf16(on: std::ffi::c_int) -> std::ffi::c_int;
    fn programl_matmul_bf16() -> std::ffi::c_int;
}

/// Sets the matmul precision for the whole process (every model and
/// thread), and returns the precision in effect: BF16 where the CPU has
/// BF16 instructions ([`cpu_has_bf16`]) or where libtorch's own setting
/// measurably changes an FP32 product of the message map's shape
/// (4,096×34 by 34×204). On a CPU without BF16 instructions a request for
/// BF16 leaves FP32 in effect (BF16 products would be emulated, slowly).
///
/// INT8 is in effect on every CPU (the kernels' INT8 step runs on every
/// path); libtorch's own products stay FP32 either way.
pub fn set_matmul_precision(precision: Precision) -> Result<Precision, String> {
    let bf16 = precision == Precision::Bf16;
    // Where the inference step computes its products in BF16 itself, the
    // rest of libtorch's (the readout's small ones) stay FP32: its setting
    // sends them through oneDNN, which compiles kernels for every new
    // shape (every module, in a compiler) before running them.
    let library = bf16 && !(cpu_has_bf16() && ggnn::hand_products(true));
    // SAFETY: plain setters over libtorch's global context; they catch
    // every C++ exception.
    let read = unsafe {
        if programl_set_matmul_bf16(library.into()) != 0 {
            return Err("libtorch refused to set the matmul precision".into());
        }
        programl_matmul_bf16()
    };
    if read != library as std::ffi::c_int {
        return Err(format!("libtorch's matmul precision reads {read} after setting it to {precision}"));
    }
    if !bf16 {
        let effective = if precision == Precision::Int8 { Precision::Int8 } else { Precision::F32 };
        IN_EFFECT.store(effective as u8, std::sync::atomic::Ordering::Relaxed);
        return Ok(effective);
    }
    // The inference forward computes its products in BF16 itself where
    // the CPU has the instructions (libtorch 2.13 routes FP32 products
    // through oneDNN's BF16 only on some CPUs: not on AMD's AVX512-BF16).
    // Elsewhere, whether libtorch's setting does anything is measured once
    // per process (the pass sets the precision before every module).
    static PROBED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let effective = if cpu_has_bf16() || *PROBED.get_or_init(libtorch_bf16_changes_products) { Precision::Bf16 } else { Precision::F32 };
    // FP32 in effect means FP32 everywhere: on a CPU without BF16
    // instructions (an Intel AVX-512 host whose hypervisor hides
    // avx512_bf16, say) libtorch's setting leaves the probe's product
    // alone but still sends other shapes through oneDNN's emulated path,
    // whose results differ from the FP32 ones. So it is switched off again.
    if effective == Precision::F32 && library {
        // SAFETY: as above.
        if unsafe { programl_set_matmul_bf16(0) } != 0 {
            return Err("libtorch refused to reset the matmul precision to FP32".into());
        }
    }
    IN_EFFECT.store(effective as u8, std::sync::atomic::Ordering::Relaxed);
    Ok(effective)
}

/// Whether libtorch's BF16 setting (on) changes an FP32 product of the
/// message map's shape.
fn libtorch_bf16_changes_products() -> bool {
    let _guard = tch::no_grad_guard();
    let options = (tch::Kind::Float, Device::Cpu);
    let (x, w) = (
        Tensor::linspace(-1.0, 1.0, 4096 * 34, options).view([4096, 34]).sin(),
        Tensor::linspace(-1.0, 1.0, 34 * 204, options).view([34, 204]).cos(),
    );
    let reduced = x.mm(&w);
    // SAFETY: plain setters over libtorch's global context; they catch
    // every C++ exception.
    unsafe { programl_set_matmul_bf16(0) };
    let plain = x.mm(&w);
    // SAFETY: as above.
    unsafe { programl_set_matmul_bf16(1) };
    !reduced.equal(&plain)
}

/// Whether the CPU has native BF16 products (AVX512-BF16 or AMX-BF16), as
/// the kernel reports them in `/proc/cpuinfo`.
pub fn cpu_has_bf16() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        info.lines()
            .find_map(|l| l.strip_prefix("flags"))
            .is_some_and(|flags| flags.split_whitespace().any(|f| f == "avx512_bf16" || f == "amx_bf16"))
    })
}

/// Whether INT8 is the fastest precision on this CPU (AVX-512 with VNNI),
/// so what `auto` picks for inference.
pub fn int8_preferred() -> bool {
    programl_kernels::int8::preferred()
}

extern "C" {
    fn programl_parallel_for(
        n: i64,
        grain: i64,
        f: extern "C" fn(*mut std::ffi::c_void, i64, i64),
        ctx: *mut std::ffi::c_void,
    ) -> std::ffi::c_int;
}

/// libtorch's intra-op loop (`at::parallel_for`, `parallel.cc`) as the
/// kernels' runner.
fn libtorch_parallel_for(n: i64, grain: i64, f: extern "C" fn(*mut std::ffi::c_void, i64, i64), ctx: *mut std::ffi::c_void) -> i32 {
    // SAFETY: `f` matches the callback's signature and never unwinds; the
    // C++ side catches every exception.
    unsafe { programl_parallel_for(n, grain, f, ctx) }
}

/// Makes the kernels' parallel loops run on libtorch's intra-op threads
/// (its OpenMP team) in every process that links this crate, so that they
/// never compete with that team's spinning workers (called by
/// [`Ggnn::new`]; idempotent).
pub(crate) fn use_libtorch_threads() {
    programl_kernels::threads::install_runner(libtorch_parallel_for);
}

/// The precision in effect, as a [`Precision`]'s discriminant.
static IN_EFFECT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(Precision::F32 as u8);

/// The matmul precision in effect, as [`set_matmul_precision`] last
/// measured it (FP32 until it is called).
pub fn matmul_precision() -> Precision {
    match IN_EFFECT.load(std::sync::atomic::Ordering::Relaxed) {
        x if x == Precision::Bf16 as u8 => Precision::Bf16,
        x if x == Precision::Int8 as u8 => Precision::Int8,
        _ => Precision::F32,
    }
}

/// Where to run: `--device cpu|cuda|auto`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceChoice {
    Cpu,
    Cuda,
    /// CUDA if libtorch sees a GPU, else the CPU.
    #[default]
    Auto,
}

impl FromStr for DeviceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda),
            "auto" => Ok(DeviceChoice::Auto),
            _ => Err(format!("device '{s}' is not one of cpu, cuda, auto")),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceChoice::Cpu => "cpu",
            DeviceChoice::Cuda => "cuda",
            DeviceChoice::Auto => "auto",
        })
    }
}

/// Whether this process's libtorch has its CUDA library loaded (the
/// binary's build script links `libtorch_cuda` with `--no-as-needed` where
/// the libtorch has one) and sees a GPU.
pub fn cuda_available() -> bool {
    tch::Cuda::is_available()
}

/// The device for `choice`. `cuda` without a usable GPU is an error that
/// says why; `auto` falls back to the CPU and says so once on stderr.
pub fn select_device(choice: DeviceChoice) -> Result<Device, String> {
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Cuda if cuda_available() => Ok(Device::Cuda(0)),
        DeviceChoice::Cuda => Err(format!(
            "--device cuda: no CUDA device is available ({}; CUDA devices seen: {})",
            if cuda_linked() { "libtorch_cuda is loaded" } else { "this libtorch has no CUDA library" },
            tch::Cuda::device_count()
        )),
        DeviceChoice::Auto if cuda_available() => Ok(Device::Cuda(0)),
        DeviceChoice::Auto => {
            eprintln!("device: auto -> cpu (no CUDA device available)");
            Ok(Device::Cpu)
        }
    }
}

/// Whether `libtorch_cuda` is mapped into this process.
pub fn cuda_linked() -> bool {
    std::fs::read_to_string("/proc/self/maps").is_ok_and(|m| m.contains("libtorch_cuda.so"))
}

/// A short name of a device: `cpu`, `cuda:0`.
pub fn device_name(device: Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The class probabilities of every node of `batch` after `steps`
/// message-passing steps, row-major \[N × C\] on the CPU: the softmax of
/// [`Ggnn::forward`]'s logits in evaluation mode, without autograd state,
/// as `programl-train predict` computes them. The model runtime (the
/// learned pass's) calls this on the batches it receives.
///
/// Panics where `tch` does (a libtorch error); the runtime catches it.
pub fn node_probabilities(model: &Ggnn, batch: &programl::batch::Batch, steps: i64) -> Vec<f32> {
    let input = Prepared::new(batch, model.hyper(), model.device());
    let probs = model.forward_inference(&input, steps).softmax(1, tch::Kind::Float).to_device(Device::Cpu);
    Vec::<f32>::try_from(probs.contiguous().view([-1])).expect("f32 probabilities")
}

/// The class probabilities of every graph of `batch` under a graph head,
/// row-major \[G × C\] on the CPU, in evaluation mode without autograd
/// state. `aux` holds each graph's raw auxiliary inputs, row-major
/// \[G × A\] (A = [`Hyper::aux_inputs`]); `None` for a head without them.
///
/// Panics where `tch` does, or if the model has no graph head or `aux`
/// does not fit it; the runtime checks first and catches panics.
pub fn graph_probabilities(model: &Ggnn, batch: &programl::batch::Batch, aux: Option<&[f32]>, steps: i64) -> Vec<f32> {
    assert!(model.hyper().graph.is_some(), "graph_probabilities needs a graph head");
    let input = Prepared::new(batch, model.hyper(), model.device());
    let a = model.hyper().aux_inputs();
    let aux = aux.filter(|_| a > 0).map(|values| {
        assert_eq!(values.len() as i64, input.graphs * a, "{a} auxiliary inputs per graph");
        tch::Tensor::from_slice(values).view([input.graphs, a]).to_device(model.device())
    });
    assert!(a == 0 || aux.is_some(), "this graph head needs {a} auxiliary inputs per graph");
    let probs = tch::no_grad(|| {
        let pooled = model.pooled_inference(&input, steps);
        model.graph_logits(&pooled, aux.as_ref(), false).softmax(1, tch::Kind::Float).to_device(Device::Cpu)
    });
    Vec::<f32>::try_from(probs.contiguous().view([-1])).expect("f32 probabilities")
}

#[cfg(test)]
mod tests {
    /// The kernels' loops really run on libtorch's team: with two
    /// intra-op threads, a loop of several ranges runs on two threads.
    /// (`at::parallel_for`'s OpenMP region is a pragma in a header:
    /// compiled without -fopenmp it ran every range on the calling thread,
    /// and every test still passed.)
    #[test]
    fn kernel_loops_run_on_libtorchs_threads() {
        super::use_libtorch_threads();
        let before = tch::get_num_threads();
        tch::set_num_threads(2);
        let seen = std::sync::Mutex::new(std::collections::HashSet::new());
        let ranges = std::sync::atomic::AtomicUsize::new(0);
        programl_kernels::threads::par_ranges(4 * programl_kernels::threads::PARALLEL_NODES, 2, |_| {
            ranges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(50));
            seen.lock().unwrap().insert(std::thread::current().id());
        });
        tch::set_num_threads(before);
        assert_eq!(ranges.into_inner(), 2, "one range per thread");
        assert_eq!(seen.into_inner().unwrap().len(), 2, "two ranges on one thread: the loops are not parallel");
        assert_eq!(programl_kernels::threads::Pool::global().workers(), 0, "the kernels' own pool was not used");
    }
}
