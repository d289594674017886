//! Opening the models, once per process: on the CPU in-process, on a GPU
//! in the CUDA runtime.
//!
//! **The CPU** (`device=cpu`, and `device=auto` without a GPU) runs in
//! this plugin: `programl-infer`, torch-free, linked in. Nothing is
//! loaded: no libtorch, no c10, no runtime library.
//!
//! **CUDA** (`device=cuda`, and `device=auto` where a GPU is present,
//! `/dev/nvidia0`) runs in the CUDA runtime
//! (`libprograml_runtime_cuda.so`), which links libtorch; the plugin does
//! not. The first prediction that needs it `dlopen`s it with `RTLD_NOW |
//! RTLD_LOCAL` (its symbols, and libtorch's, stay out of the compiler's
//! global namespace) and never closes it: libtorch's static destructors
//! crash when it is unloaded. Where it is: `PROGRAML_RUNTIME`, else next
//! to this plugin.
//!
//! After opening, the ABI version is checked ([`abi::ABI_VERSION`]). Open
//! runtimes are kept by path, open bundles by (canonical directory,
//! device), failures included, so later modules of the same process (an
//! LTO link, an opt run over many files) pay nothing again.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use programl::batch::{Batch, EdgeType};

use super::params::{Device, Dtype, ENV_RUNTIME, PASS_NAME};

/// The C ABI shared with `crates/runtime` (one file, included by both).
#[allow(dead_code)]
pub mod abi {
    include!("../../../crates/runtime/src/abi.rs");
}

use abi::{RtDtype, RtEdges, RtInput, RtModel, RtOptions};

pub const CUDA_RUNTIME: &str = "libprograml_runtime_cuda.so";

/// An open runtime: its exported functions.
pub struct Runtime {
    pub path: PathBuf,
    open: abi::FnOpen,
    info: abi::FnInfo,
    predict: abi::FnPredict,
    predict_graph: abi::FnPredictGraph,
    last_error: abi::FnLastError,
}

impl Runtime {
    fn last_error(&self) -> String {
        // SAFETY: the ABI returns a NUL-terminated string, never NULL; it
        // is copied before the next call.
        let p = unsafe { (self.last_error)() };
        if p.is_null() {
            return "unknown error".into();
        }
        let text = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        if text.is_empty() {
            "unknown error".into()
        } else {
            text
        }
    }
}

/// Whether this machine has an NVIDIA GPU device node.
pub fn gpu_present() -> bool {
    Path::new("/dev/nvidia0").exists()
}

/// The absolute path of this plugin (the shared object holding this
/// function), from the dynamic loader.
pub fn plugin_path() -> Option<PathBuf> {
    // SAFETY: dladdr only reads; the address is a function of this object.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(plugin_path as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let path = PathBuf::from(CStr::from_ptr(info.dli_fname).to_string_lossy().into_owned());
        Some(path.canonicalize().unwrap_or(path))
    }
}

/// The least work (nodes × steps, summed over the module's batches) for
/// which `device=auto` runs on a GPU. The CUDA runtime costs about 1.1 s
/// a process before its first prediction (libtorch, the CUDA context, the
/// bundle on the device), while the CPU starts at once. Measured on an
/// H100 beside a Xeon (docs/perf/learned-pass.md, "`device=cuda` on an
/// NVIDIA H100"): one CPU thread runs about 3.5 M node-steps a second, so
/// the start is worth about 4 M; ten roots of tinyxml2.cpp (4.3 M) took
/// 2.1 s on the CPU and 1.6 s with CUDA, compress.c's (3.1 M) 1.3 s and
/// 1.5 s, and every root of huffman.c (40 M) 11.5 s and 3.1 s. 8 M keeps
/// a CPU thread busy for about 2.3 s, twice the start; below it the CPU runs,
/// so a compile per unit at the default roots stays on the CPU and a build
/// that leaves the pass on pays no libtorch on a GPU machine.
pub const AUTO_CUDA_MIN_WORK: u64 = 8_000_000;

/// The device `device` resolves to for `work` (nodes × steps): `auto` is
/// CUDA where a GPU is present and the work reaches
/// [`AUTO_CUDA_MIN_WORK`], else the CPU.
pub fn resolve(device: Device, work: u64) -> Device {
    resolve_with(device, work, gpu_present)
}

/// [`resolve`], asking `gpu` whether a GPU is present (only for `auto`).
pub fn resolve_with(device: Device, work: u64, gpu: impl FnOnce() -> bool) -> Device {
    match device {
        Device::Auto if work >= AUTO_CUDA_MIN_WORK && gpu() => Device::Cuda,
        Device::Auto => Device::Cpu,
        other => other,
    }
}

/// The CUDA runtime library: `PROGRAML_RUNTIME`, else next to this plugin.
pub fn cuda_runtime_path() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(ENV_RUNTIME).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let dir = plugin_path()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .ok_or_else(|| format!("cannot tell where this plugin is, so where the CUDA runtime is; set {ENV_RUNTIME}"))?;
    Ok(dir.join(CUDA_RUNTIME))
}

type Cached<T> = Mutex<HashMap<PathBuf, Result<T, String>>>;

fn runtimes() -> &'static Cached<&'static Runtime> {
    static RUNTIMES: OnceLock<Cached<&'static Runtime>> = OnceLock::new();
    RUNTIMES.get_or_init(Default::default)
}

/// The runtime at `path`, opened on first use. `Ok((runtime, true))` if this
/// call opened it.
pub fn load(path: &Path) -> Result<(&'static Runtime, bool), String> {
    let mut cache = runtimes().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = cache.get(path) {
        return r.clone().map(|r| (r, false));
    }
    let loaded = open_library(path).map(|r| &*Box::leak(Box::new(r)));
    cache.insert(path.to_path_buf(), loaded.clone());
    loaded.map(|r| (r, true))
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".into()
    } else {
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn open_library(path: &Path) -> Result<Runtime, String> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| format!("{}: bad path", path.display()))?;
    // SAFETY: dlopen with a valid path. RTLD_LOCAL keeps libtorch's symbols
    // out of the global scope; the handle is never closed.
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // dlerror starts with the path itself; say it once.
        let error = dl_error();
        let prefix = format!("{}: ", path.display());
        let error = error.strip_prefix(&prefix).unwrap_or(&error);
        return Err(format!("cannot open the model runtime {}: {error}", path.display()));
    }
    let symbol = |name: &[u8]| -> Result<*mut c_void, String> {
        // SAFETY: `name` is NUL-terminated (abi constants).
        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast::<c_char>()) };
        if p.is_null() {
            let shown = String::from_utf8_lossy(&name[..name.len() - 1]).into_owned();
            Err(format!("{} is not a programl model runtime (no symbol {shown})", path.display()))
        } else {
            Ok(p)
        }
    };
    // SAFETY: each symbol has the type the ABI gives it.
    unsafe {
        let version: abi::FnAbiVersion = std::mem::transmute(symbol(abi::SYM_ABI_VERSION)?);
        let found = version();
        if found != abi::ABI_VERSION {
            return Err(format!(
                "{}: runtime ABI version {found}, but this plugin speaks version {}; use the runtime built with this plugin",
                path.display(),
                abi::ABI_VERSION
            ));
        }
        Ok(Runtime {
            path: path.to_path_buf(),
            open: std::mem::transmute::<*mut c_void, abi::FnOpen>(symbol(abi::SYM_OPEN)?),
            info: std::mem::transmute::<*mut c_void, abi::FnInfo>(symbol(abi::SYM_INFO)?),
            predict: std::mem::transmute::<*mut c_void, abi::FnPredict>(symbol(abi::SYM_PREDICT)?),
            predict_graph: std::mem::transmute::<*mut c_void, abi::FnPredictGraph>(symbol(abi::SYM_PREDICT_GRAPH)?),
            last_error: std::mem::transmute::<*mut c_void, abi::FnLastError>(symbol(abi::SYM_LAST_ERROR)?),
        })
    }
}

/// An open bundle: in-process on the CPU, or in the CUDA runtime.
pub struct Model {
    backend: Backend,
    /// The model's description (JSON: device, vocab_size, classes, ...).
    pub info: serde_json::Value,
    pub classes: usize,
    /// The precision the runtime had in effect at the last prediction (the
    /// ABI's code: 0 FP32, 1 BF16, 2 INT8).
    in_effect: std::sync::atomic::AtomicI32,
}

enum Backend {
    /// `programl-infer` in this process (the CPU).
    Local(programl_infer::Model),
    /// A model in the CUDA runtime. Calls are serialised (one lock per
    /// model): the runtime's tensors are not meant to be shared between
    /// threads.
    Runtime { runtime: &'static Runtime, handle: Mutex<ModelHandle> },
}

struct ModelHandle(*mut RtModel);
// SAFETY: the handle is only used under the Mutex.
unsafe impl Send for ModelHandle {}

type ModelKey = (PathBuf, Device);

fn models() -> &'static Mutex<HashMap<ModelKey, Result<Arc<Model>, String>>> {
    static MODELS: OnceLock<Mutex<HashMap<ModelKey, Result<Arc<Model>, String>>>> = OnceLock::new();
    MODELS.get_or_init(Default::default)
}

/// The bundle `dir` (canonical) opened on `device` (resolved: CPU or
/// CUDA), once per process: on the CPU in this process, on CUDA in the
/// runtime `load` opens. `Ok((model, true))` if this call opened it.
pub fn open_model(
    dir: &Path,
    device: Device,
    load: impl FnOnce() -> Result<&'static Runtime, String>,
) -> Result<(Arc<Model>, bool), String> {
    let key = (dir.to_path_buf(), device);
    let mut cache = models().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = cache.get(&key) {
        return m.clone().map(|m| (m, false));
    }
    let opened = match device {
        Device::Cuda => load().and_then(|runtime| open_in(runtime, dir, device)),
        _ => open_local(dir),
    }
    .map(Arc::new);
    cache.insert(key, opened.clone());
    opened.map(|m| (m, true))
}

/// The bundle opened in this process (torch-free, on the CPU).
fn open_local(dir: &Path) -> Result<Model, String> {
    let model = programl_infer::Model::open(dir).map_err(|e| e.to_string())?;
    let info = serde_json::json!({
        "device": "cpu",
        "engine": "programl-infer",
        "task": model.config.task,
        "classes": model.config.classes,
        "steps": model.config.hyper.steps,
        "vocab_size": model.config.hyper.vocab_size,
        "isa": programl_infer::cpu::detected().to_string(),
    });
    let classes = model.classes();
    Ok(Model { backend: Backend::Local(model), info, classes, in_effect: std::sync::atomic::AtomicI32::new(0) })
}

fn open_in(runtime: &'static Runtime, dir: &Path, device: Device) -> Result<Model, String> {
    let c_dir = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| format!("{}: bad path", dir.display()))?;
    let c_device = CString::new(device.name()).expect("no NUL");
    // SAFETY: valid C strings; the ABI returns NULL on failure.
    let handle = unsafe { (runtime.open)(c_dir.as_ptr(), c_device.as_ptr()) };
    if handle.is_null() {
        return Err(runtime.last_error());
    }
    // SAFETY: a live handle; the string lives as long as it.
    let info = unsafe { (runtime.info)(handle) };
    if info.is_null() {
        return Err(runtime.last_error());
    }
    let text = unsafe { CStr::from_ptr(info) }.to_string_lossy().into_owned();
    let info: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("the runtime's model info is not JSON: {e}"))?;
    let classes = info["classes"].as_array().map_or(0, Vec::len);
    Ok(Model {
        backend: Backend::Runtime { runtime, handle: Mutex::new(ModelHandle(handle)) },
        info,
        classes,
        in_effect: std::sync::atomic::AtomicI32::new(0),
    })
}

/// The ABI's view of `batch` (borrowing its arrays).
fn input_of(batch: &Batch) -> RtInput {
    let edges = |t: EdgeType| {
        let e = batch.edges(t);
        RtEdges { sources: e.sources.as_ptr(), targets: e.targets.as_ptr(), positions: e.positions.as_ptr(), len: e.len() }
    };
    RtInput {
        nodes: batch.node_count(),
        tokens: batch.tokens().as_ptr(),
        selector: batch.selector().as_ptr(),
        graphs: batch.graph_count(),
        offsets: batch.offsets().as_ptr(),
        edges: [edges(EdgeType::Control), edges(EdgeType::Data), edges(EdgeType::Call)],
    }
}

impl Model {
    /// The precision of the last prediction's products: `f32`, `bf16` or
    /// `int8` (what `dtype=auto` chose, or FP32 where the CPU lacks what
    /// was asked for).
    pub fn dtype_in_effect(&self) -> &'static str {
        match self.in_effect.load(std::sync::atomic::Ordering::Relaxed) {
            1 => "bf16",
            2 => "int8",
            _ => "f32",
        }
    }

    /// Says once per process that a requested precision is not in effect.
    fn note_precision(&self, dtype: Dtype, got: i32, isa: Option<programl_infer::Isa>) {
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        self.in_effect.store(got, std::sync::atomic::Ordering::Relaxed);
        if got == 0 && dtype == Dtype::Bf16 && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            // Three causes: the CPU, an `isa=` below AVX-512 (where BF16
            // runs), or a bundle of another width than 34, whose general
            // step has no BF16 path (programl_infer::Model).
            if let Some(cap) = isa.filter(|&i| i < programl_infer::Isa::Avx512 && programl_infer::cpu::bf16()) {
                log::warn!(target: PASS_NAME, "dtype={dtype}: isa={cap} keeps the step below AVX-512, where BF16 runs; the products stay FP32")
            } else if programl_infer::cpu::bf16() {
                log::warn!(target: PASS_NAME, "dtype={dtype}: this bundle's step (a state of another width than 34) has no BF16 path; the products stay FP32")
            } else {
                log::warn!(target: PASS_NAME, "dtype={dtype}: this CPU has no BF16 instructions (AVX512-BF16); the products stay FP32")
            }
        }
    }

    /// One prediction in the CUDA runtime, `rows × classes` probabilities:
    /// `predict` gets the model's handle (locked for the call), the batch
    /// as the ABI's input (its arrays live across the call), the call's
    /// options, the output and the slot for the precision in effect.
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        runtime: &Runtime,
        handle: &Mutex<ModelHandle>,
        batch: &Batch,
        rows: usize,
        steps: i64,
        threads: i32,
        dtype: Dtype,
        predict: impl FnOnce(*mut RtModel, &RtInput, &RtOptions, &mut [f32], &mut RtDtype) -> i32,
    ) -> Result<Vec<f32>, String> {
        let handle = handle.lock().unwrap_or_else(|p| p.into_inner());
        let options = RtOptions { steps, threads: threads.max(1), dtype: dtype_code(dtype) };
        let mut out = vec![0f32; rows * self.classes];
        let mut in_effect = RtDtype::F32;
        let input = input_of(batch);
        if predict(handle.0, &input, &options, &mut out, &mut in_effect) != 0 {
            return Err(runtime.last_error());
        }
        self.note_precision(dtype, in_effect.0, None);
        Ok(out)
    }

    /// The options of one in-process prediction.
    fn options(&self, steps: i64, threads: i32, dtype: Dtype, isa: Option<programl_infer::Isa>) -> programl_infer::Options {
        programl_infer::Options { steps: (steps > 0).then_some(steps), threads: threads.max(1) as usize, dtype, isa }
    }

    /// Class probabilities of every graph of `batch` under a graph-level
    /// bundle, row-major \[G × C\]; `aux` row-major \[G × A\].
    pub fn predict_graph(
        &self,
        batch: &Batch,
        aux: &[f32],
        steps: i64,
        threads: i32,
        dtype: Dtype,
        isa: Option<programl_infer::Isa>,
    ) -> Result<Vec<f32>, String> {
        match &self.backend {
            Backend::Local(model) => {
                let aux = (!aux.is_empty()).then_some(aux);
                let out = model.graph_probabilities(batch, aux, &self.options(steps, threads, dtype, isa))?;
                self.note_precision(dtype, precision_code(out.precision), isa);
                Ok(out.probabilities)
            }
            Backend::Runtime { runtime, handle } => {
                let aux_ptr = if aux.is_empty() { std::ptr::null() } else { aux.as_ptr() };
                // SAFETY: `aux` holds aux.len() floats (the rest: `call`).
                self.call(runtime, handle, batch, batch.graph_count(), steps, threads, dtype, |h, input, options, out, in_effect| unsafe {
                    (runtime.predict_graph)(h, input, aux_ptr, aux.len(), options, out.as_mut_ptr(), out.len(), in_effect)
                })
            }
        }
    }

    /// Class probabilities of every node of `batch`, row-major \[N × C\].
    pub fn predict(
        &self,
        batch: &Batch,
        steps: i64,
        threads: i32,
        dtype: Dtype,
        isa: Option<programl_infer::Isa>,
    ) -> Result<Vec<f32>, String> {
        match &self.backend {
            Backend::Local(model) => {
                let out = model.node_probabilities(batch, &self.options(steps, threads, dtype, isa))?;
                self.note_precision(dtype, precision_code(out.precision), isa);
                Ok(out.probabilities)
            }
            Backend::Runtime { runtime, handle } => {
                // SAFETY: as `call` says.
                self.call(runtime, handle, batch, batch.node_count(), steps, threads, dtype, |h, input, options, out, in_effect| unsafe {
                    (runtime.predict)(h, input, options, out.as_mut_ptr(), out.len(), in_effect)
                })
            }
        }
    }
}

/// The CUDA runtime ABI's code for a precision request.
fn dtype_code(dtype: Dtype) -> RtDtype {
    match dtype {
        Dtype::F32 => RtDtype::F32,
        Dtype::Bf16 => RtDtype::BF16,
        Dtype::Int8 => RtDtype::INT8,
        Dtype::Auto => RtDtype::AUTO,
    }
}

/// A precision in effect in the ABI's codes (0 FP32, 1 BF16, 2 INT8).
fn precision_code(p: programl_infer::Precision) -> i32 {
    match p {
        programl_infer::Precision::F32 => 0,
        programl_infer::Precision::Bf16 => 1,
        programl_infer::Precision::Int8 => 2,
    }
}

/// Milliseconds since `start`.
pub fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_the_gpu_only_for_work_that_repays_its_start() {
        let big = AUTO_CUDA_MIN_WORK;
        let small = AUTO_CUDA_MIN_WORK - 1;
        // No GPU: the CPU, whatever the work.
        assert_eq!(resolve_with(Device::Auto, big, || false), Device::Cpu);
        // A GPU: the CPU below the bound (the GPU is not even looked for),
        // CUDA at and above it.
        assert_eq!(resolve_with(Device::Auto, small, || panic!("looked for a GPU for small work")), Device::Cpu);
        assert_eq!(resolve_with(Device::Auto, big, || true), Device::Cuda);
        assert_eq!(resolve_with(Device::Auto, u64::MAX, || true), Device::Cuda);
        // An explicit device is kept.
        for work in [0, small, big] {
            assert_eq!(resolve_with(Device::Cpu, work, || true), Device::Cpu);
            assert_eq!(resolve_with(Device::Cuda, work, || false), Device::Cuda);
        }
        // The measured units (T = 30): ten roots of tinyxml2.cpp (14,491
        // nodes; 2.1 s on a CPU thread, 1.6 s with CUDA) stay on the CPU;
        // every root of huffman.c (1,571 nodes, 848 roots; 11.5 s and
        // 3.1 s) goes to the GPU.
        assert_eq!(resolve_with(Device::Auto, 14_491 * 10 * 30, || true), Device::Cpu);
        assert_eq!(resolve_with(Device::Auto, 1_571 * 848 * 30, || true), Device::Cuda);
    }
}
