//! The model runtime's C ABI over `programl-model` (libtorch), built into
//! `libprograml_runtime_cuda.so` by `crates/runtime-cuda`: what the learned
//! pass opens for `device=cuda`.
//!
//! The pass plugin (`passes/`) never links libtorch: loading it into opt or
//! clang must stay cheap, and on the CPU it runs the torch-free
//! `programl-infer` in-process. When a CUDA prediction first runs in a
//! process it `dlopen`s the runtime (`RTLD_LOCAL`, never unloaded), which
//! links libtorch through `programl-model`, and talks to it through a small
//! C ABI ([`abi`], `include/programl_runtime.h`):
//!
//! ```text
//! uint32_t        programl_runtime_abi_version(void);
//! programl_model *programl_runtime_open(const char *bundle_dir, const char *device);
//! const char     *programl_runtime_info(const programl_model *);
//! int32_t         programl_runtime_predict(programl_model *, const programl_input *,
//!                                          const programl_options *, float *out, size_t out_len,
//!                                          programl_dtype *in_effect);
//! int32_t         programl_runtime_predict_graph(programl_model *, const programl_input *,
//!                                                const float *aux, size_t aux_len,
//!                                                const programl_options *, float *out, size_t out_len,
//!                                                programl_dtype *in_effect);
//! const char     *programl_runtime_last_error(void);
//! void            programl_runtime_close(programl_model *);
//! ```
//!
//! Threads and precision come with each call (`programl_options`): libtorch
//! keeps both process-wide, so the runtime sets them under one lock for the
//! whole call, and two calls never see each other's settings.
//!
//! A `programl_input` is the arrays of one core [`Batch`], built by the
//! caller with `programl::batch` (the code training uses); the runtime
//! rebuilds the batch with [`Batch::from_arrays`], which refuses anything a
//! batch cannot be, and runs [`programl_model::node_probabilities`] on it
//! (node-level bundles) or [`programl_model::graph_probabilities`]
//! (graph-level bundles, with the caller's auxiliary inputs).
//!
//! **Boundary rules.** Every export catches panics (`tch` panics on libtorch
//! errors) and returns an error code or NULL; the message is kept per
//! thread for `programl_runtime_last_error`. A panic hook installed on
//! first use records panic messages instead of printing them, and libtorch's
//! own warnings (e.g. the one-time "sparse CSR tensor support is in beta
//! state" that preparing a batch triggers) are silenced by raising c10's log
//! threshold to `ERROR` unless `TORCH_CPP_LOG_LEVEL` says otherwise: the
//! runtime lives inside compilers, whose output must carry nothing of it.
//!
//! This crate is an rlib: `crates/runtime-cuda` builds it into
//! `libprograml_runtime_cuda.so`, linked with libtorch_cuda. Its tests run
//! the same ABI on the CPU.
//!
//! **Architecture invariant:** the runtime depends on the model crate (and
//! through it the core) only: never the dataset store or the trainer.

#[path = "abi.rs"]
pub mod abi;

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::Once;

use programl::batch::{Batch, EdgeArrays};
use programl_model::bundle::{Bundle, Head};
use programl_model::tch::{self, Device};
use programl_model::{cuda_available, device_name, select_device, DeviceChoice};

use abi::{RtDtype, RtEdges, RtInput, RtModel, RtOptions, ABI_VERSION};

/// An open bundle behind an `RtModel` pointer.
struct Model {
    bundle: Bundle,
    classes: usize,
    info: CString,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Runs `work` with panics caught: `Err` and panics both become the
/// thread's last error and `failed` is returned.
fn guarded<T>(failed: T, work: impl FnOnce() -> Result<T, String>) -> T {
    setup();
    match panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(value)) => {
            set_last_error("");
            value
        }
        Ok(Err(message)) => {
            set_last_error(&message);
            failed
        }
        Err(payload) => {
            let message = PANIC_MESSAGE.with(|m| m.borrow_mut().take()).unwrap_or_else(|| payload_text(payload.as_ref()));
            std::mem::forget(payload);
            set_last_error(&format!("internal error: {message}"));
            failed
        }
    }
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

extern "C" {
    /// c10's minimum severity for its log (0 info, 1 warning, 2 error,
    /// 3 fatal): `TORCH_CPP_LOG_LEVEL` sets it at load time; libtorch's
    /// default warning handler prints through this log.
    static mut FLAGS_caffe2_log_level: i32;
}

/// Once per process: the quiet panic hook, and libtorch's warnings off
/// unless the user asked for a level with `TORCH_CPP_LOG_LEVEL`.
fn setup() {
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        panic::set_hook(Box::new(|info| {
            let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            let message = format!("{}{location}", payload_text(info.payload()));
            PANIC_MESSAGE.with(|m| {
                if let Ok(mut slot) = m.try_borrow_mut() {
                    *slot = Some(message);
                }
            });
        }));
        // One intra-op thread until a call asks for more, from the first
        // operation on: libtorch's default (all cores) would run the
        // bundle's warm-up on an OpenMP team whose worker then spins,
        // taking a core from the compiler (and from the other jobs of a
        // parallel build).
        tch::set_num_threads(1);
        if std::env::var_os("TORCH_CPP_LOG_LEVEL").is_none() {
            // SAFETY: a plain int of libc10, written once before any tensor
            // work of this runtime.
            unsafe {
                let level = std::ptr::addr_of_mut!(FLAGS_caffe2_log_level);
                if *level < 2 {
                    *level = 2;
                }
            }
        }
    });
}

/// A C string argument, or an error naming it.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn text_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    CStr::from_ptr(p).to_str().map_err(|_| format!("{what} is not UTF-8"))
}

/// # Safety
/// `p` points to `len` values, or `len` is 0.
unsafe fn slice<'a>(p: *const i64, len: usize, what: &str) -> Result<&'a [i64], String> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(format!("{what} is NULL but holds {len} entries"));
    }
    Ok(std::slice::from_raw_parts(p, len))
}

fn open(dir: &str, device: &str) -> Result<Model, String> {
    // Before any tensor: another libtorch than the build's fails later
    // with a message that names neither.
    programl_model::libtorch::check()?;
    let choice: DeviceChoice = device.parse()?;
    let device = match choice {
        // Never select_device(Auto): it reports its choice on stderr.
        DeviceChoice::Auto => {
            if cuda_available() {
                Device::Cuda(0)
            } else {
                Device::Cpu
            }
        }
        DeviceChoice::Cuda if !programl_model::cuda_linked() => {
            return Err("device=cuda: this build of the runtime does not load libtorch_cuda; use libprograml_runtime_cuda.so".into())
        }
        other => select_device(other).map_err(|e| e.replace("--device cuda", "device=cuda"))?,
    };
    let bundle = Bundle::load(Path::new(dir), device).map_err(|e| e.to_string())?;
    warm_up(&bundle)?;
    let c = &bundle.config;
    let info = serde_json::json!({
        "abi": ABI_VERSION,
        "runtime": concat!("programl-runtime ", env!("CARGO_PKG_VERSION")),
        "bundle": dir,
        "task": c.task,
        "head": if c.head == Head::Graph { "graph" } else { "node" },
        "classes": c.classes,
        "aux": c.hyper.graph.as_ref().map_or(&[][..], |g| &g.aux[..]),
        "steps": c.hyper.steps,
        "vocab_size": c.hyper.vocab_size,
        "device": device_name(device),
        "cuda_linked": programl_model::cuda_linked(),
        "provenance": c.provenance,
    });
    let classes = c.classes.len();
    Ok(Model { bundle, classes, info: CString::new(info.to_string()).map_err(|e| e.to_string())? })
}

/// One forward pass on a two-node graph: libtorch initialises lazily on its
/// first operations (kernels, allocator, thread pool), and that once-per-
/// process cost belongs with opening the bundle, not with the first
/// module's inference.
fn warm_up(bundle: &Bundle) -> Result<(), String> {
    let edge = EdgeArrays { sources: &[0], targets: &[1], positions: &[0] };
    let none = EdgeArrays { sources: &[], targets: &[], positions: &[] };
    let batch = Batch::from_arrays(&[0, 0], &[1, 0], &[0, 2], [edge, edge, none]).map_err(|e| e.to_string())?;
    let probs = match bundle.config.head {
        Head::Node => programl_model::node_probabilities(&bundle.model, &batch, 1),
        Head::Graph => {
            let aux = vec![1.0; bundle.model.hyper().aux_inputs() as usize];
            programl_model::graph_probabilities(&bundle.model, &batch, Some(&aux), 1)
        }
    };
    if probs.iter().all(|p| p.is_finite()) {
        Ok(())
    } else {
        Err(format!("{}: the model computes non-finite probabilities", bundle.dir.display()))
    }
}

/// Set, `programl_runtime_predict` panics before any work: the tests check
/// that a panic inside the runtime is an error, never an abort.
pub const ENV_PANIC_FOR_TESTING: &str = "PROGRAML_RUNTIME_PANIC_FOR_TESTING";

/// The batch an `RtInput` states, checked.
fn input_batch(input: &RtInput) -> Result<Batch, String> {
    // SAFETY: the caller passes arrays of the lengths it states (ABI).
    let (tokens, selector, offsets, edges) = unsafe {
        let edge = |e: &RtEdges, name: &str| -> Result<EdgeArrays<'_>, String> {
            Ok(EdgeArrays {
                sources: slice(e.sources, e.len, &format!("{name} sources"))?,
                targets: slice(e.targets, e.len, &format!("{name} targets"))?,
                positions: slice(e.positions, e.len, &format!("{name} positions"))?,
            })
        };
        (
            slice(input.tokens, input.nodes, "tokens")?,
            slice(input.selector, input.nodes, "selector")?,
            slice(input.offsets, input.graphs + 1, "offsets")?,
            [edge(&input.edges[0], "control")?, edge(&input.edges[1], "data")?, edge(&input.edges[2], "call")?],
        )
    };
    Batch::from_arrays(tokens, selector, offsets, edges).map_err(|e| e.to_string())
}

/// One call's settings applied to libtorch (process-wide there, so held
/// under [`CALL`] for the call): the threads, and the precision asked for;
/// returns the precision in effect.
fn apply(options: &RtOptions) -> Result<RtDtype, String> {
    if options.threads < 1 {
        return Err(format!("threads={}: at least 1", options.threads));
    }
    if tch::get_num_threads() != options.threads {
        tch::set_num_threads(options.threads);
    }
    // The last request and its answer: setting the precision measures it
    // with a product, which a pass calling per module need not repeat.
    static LAST: std::sync::Mutex<Option<(RtDtype, RtDtype)>> = std::sync::Mutex::new(None);
    let code = |p: programl_model::Precision| match p {
        programl_model::Precision::F32 => RtDtype::F32,
        programl_model::Precision::Bf16 => RtDtype::BF16,
        programl_model::Precision::Int8 => RtDtype::INT8,
    };
    let wanted = match options.dtype {
        RtDtype::F32 => programl_model::Precision::F32,
        RtDtype::BF16 => programl_model::Precision::Bf16,
        RtDtype::INT8 => programl_model::Precision::Int8,
        RtDtype::AUTO if programl_model::int8_preferred() => programl_model::Precision::Int8,
        RtDtype::AUTO => programl_model::Precision::F32,
        RtDtype(other) => return Err(format!("dtype {other}: 0 (f32), 1 (bf16), 2 (int8) or 3 (auto)")),
    };
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((asked, got)) = *last {
        if asked == options.dtype {
            return Ok(got);
        }
    }
    let got = code(programl_model::set_matmul_precision(wanted)?);
    *last = Some((options.dtype, got));
    Ok(got)
}

/// One prediction at a time: the settings libtorch keeps process-wide
/// (threads, precision) belong to the call that set them.
static CALL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `options` read, and applied for the duration of the returned guard.
///
/// # Safety
/// `options` is NULL or points to an `RtOptions`.
unsafe fn with_options(options: *const RtOptions) -> Result<(std::sync::MutexGuard<'static, ()>, RtOptions, RtDtype), String> {
    let options = *options.as_ref().ok_or("the options are NULL")?;
    let guard = CALL.lock().unwrap_or_else(|p| p.into_inner());
    let in_effect = apply(&options)?;
    Ok((guard, options, in_effect))
}

fn predict(model: &Model, input: &RtInput, steps: i64, out: *mut f32, out_len: usize) -> Result<(), String> {
    if std::env::var_os(ENV_PANIC_FOR_TESTING).is_some() {
        panic!("{ENV_PANIC_FOR_TESTING} is set");
    }
    if model.bundle.config.head != Head::Node {
        return Err(format!("{}: a graph-level bundle (head \"graph\"): use programl_runtime_predict_graph", model.bundle.dir.display()));
    }
    let batch = input_batch(input)?;
    let want = batch.node_count() * model.classes;
    if out_len != want || (want > 0 && out.is_null()) {
        return Err(format!("the output holds {out_len} floats; {} nodes × {} classes need {want}", batch.node_count(), model.classes));
    }
    if batch.node_count() == 0 {
        return Ok(());
    }
    let steps = if steps > 0 { steps } else { model.bundle.model.hyper().steps };
    let probs = programl_model::node_probabilities(&model.bundle.model, &batch, steps);
    if probs.len() != want {
        return Err(format!("the model gave {} probabilities for {want}", probs.len()));
    }
    // SAFETY: `out` holds `out_len == want` floats (checked above).
    unsafe { std::ptr::copy_nonoverlapping(probs.as_ptr(), out, want) };
    Ok(())
}

fn predict_graph(
    model: &Model,
    input: &RtInput,
    aux: *const f32,
    aux_len: usize,
    steps: i64,
    out: *mut f32,
    out_len: usize,
) -> Result<(), String> {
    if std::env::var_os(ENV_PANIC_FOR_TESTING).is_some() {
        panic!("{ENV_PANIC_FOR_TESTING} is set");
    }
    if model.bundle.config.head != Head::Graph {
        return Err(format!("{}: a node-level bundle: use programl_runtime_predict", model.bundle.dir.display()));
    }
    let batch = input_batch(input)?;
    let graphs = batch.graph_count();
    let want = graphs * model.classes;
    if out_len != want || (want > 0 && out.is_null()) {
        return Err(format!("the output holds {out_len} floats; {graphs} graphs × {} classes need {want}", model.classes));
    }
    let a = model.bundle.model.hyper().aux_inputs() as usize;
    if aux_len != graphs * a || (aux_len > 0 && aux.is_null()) {
        return Err(format!("{aux_len} auxiliary inputs given; {graphs} graphs × {a} inputs need {}", graphs * a));
    }
    if graphs == 0 {
        return Ok(());
    }
    // SAFETY: `aux` holds `aux_len` floats (ABI), checked non-null above.
    let aux: &[f32] = if aux_len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(aux, aux_len) } };
    if let Some(bad) = aux.iter().find(|v| !v.is_finite() || **v < 0.0) {
        return Err(format!("auxiliary input {bad} is not a finite non-negative number"));
    }
    let steps = if steps > 0 { steps } else { model.bundle.model.hyper().steps };
    let probs = programl_model::graph_probabilities(&model.bundle.model, &batch, (a > 0).then_some(aux), steps);
    if probs.len() != want {
        return Err(format!("the model gave {} probabilities for {want}", probs.len()));
    }
    // SAFETY: `out` holds `out_len == want` floats (checked above).
    unsafe { std::ptr::copy_nonoverlapping(probs.as_ptr(), out, want) };
    Ok(())
}

// The exports have the types the ABI states (checked at compile time).
const _: abi::FnAbiVersion = programl_runtime_abi_version;
const _: abi::FnOpen = programl_runtime_open;
const _: abi::FnInfo = programl_runtime_info;
const _: abi::FnPredict = programl_runtime_predict;
const _: abi::FnPredictGraph = programl_runtime_predict_graph;
const _: abi::FnLastError = programl_runtime_last_error;
const _: abi::FnClose = programl_runtime_close;

/// See [`abi::FnAbiVersion`].
#[no_mangle]
pub extern "C" fn programl_runtime_abi_version() -> u32 {
    ABI_VERSION
}

/// See [`abi::FnOpen`].
///
/// # Safety
/// Both arguments are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn programl_runtime_open(bundle_dir: *const c_char, device: *const c_char) -> *mut RtModel {
    guarded(std::ptr::null_mut(), || {
        let dir = text_arg(bundle_dir, "the bundle directory")?;
        let device = text_arg(device, "the device")?;
        Ok(Box::into_raw(Box::new(open(dir, device)?)).cast::<RtModel>())
    })
}

/// See [`abi::FnInfo`].
///
/// # Safety
/// `model` is NULL or a model from `programl_runtime_open`, not closed.
#[no_mangle]
pub unsafe extern "C" fn programl_runtime_info(model: *const RtModel) -> *const c_char {
    guarded(std::ptr::null(), || {
        let model = model.cast::<Model>().as_ref().ok_or("the model is NULL")?;
        Ok(model.info.as_ptr())
    })
}

/// See [`abi::FnPredict`].
///
/// # Safety
/// `model` comes from `programl_runtime_open`; `input`'s arrays hold the
/// entries it states; `out` holds `out_len` floats.
#[no_mangle]
pub unsafe extern "C" fn programl_runtime_predict(
    model: *mut RtModel,
    input: *const RtInput,
    options: *const RtOptions,
    out: *mut f32,
    out_len: usize,
    in_effect: *mut RtDtype,
) -> i32 {
    guarded(-1, || {
        let model = model.cast::<Model>().as_ref().ok_or("the model is NULL")?;
        let input = input.as_ref().ok_or("the input is NULL")?;
        let (_call, options, dtype) = with_options(options)?;
        predict(model, input, options.steps, out, out_len)?;
        if let Some(slot) = in_effect.as_mut() {
            *slot = dtype;
        }
        Ok(0)
    })
}

/// See [`abi::FnPredictGraph`].
///
/// # Safety
/// `model` comes from `programl_runtime_open`; `input`'s arrays hold the
/// entries it states; `aux` holds `aux_len` floats; `out` holds `out_len`
/// floats.
#[no_mangle]
pub unsafe extern "C" fn programl_runtime_predict_graph(
    model: *mut RtModel,
    input: *const RtInput,
    aux: *const f32,
    aux_len: usize,
    options: *const RtOptions,
    out: *mut f32,
    out_len: usize,
    in_effect: *mut RtDtype,
) -> i32 {
    guarded(-1, || {
        let model = model.cast::<Model>().as_ref().ok_or("the model is NULL")?;
        let input = input.as_ref().ok_or("the input is NULL")?;
        let (_call, options, dtype) = with_options(options)?;
        predict_graph(model, input, aux, aux_len, options.steps, out, out_len)?;
        if let Some(slot) = in_effect.as_mut() {
            *slot = dtype;
        }
        Ok(0)
    })
}

/// See [`abi::FnLastError`].
#[no_mangle]
pub extern "C" fn programl_runtime_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// See [`abi::FnClose`].
///
/// # Safety
/// `model` is NULL or comes from `programl_runtime_open` and is not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn programl_runtime_close(model: *mut RtModel) {
    guarded((), || {
        if !model.is_null() {
            drop(Box::from_raw(model.cast::<Model>()));
        }
        Ok(())
    })
}
