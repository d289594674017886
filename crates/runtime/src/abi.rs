// The model runtime's C ABI, version 5 (2 added graph-level prediction, 3 the matmul precision, 4 INT8 products, 5 per-call options with a typed dtype in place of the process-wide setters): the types and names both sides use.
//
// This file is the one Rust statement of the ABI. The runtime compiles it
// as its `abi` module; the pass plugin, which must not depend on the
// runtime crate (that would link libtorch into it), `include!`s it.
// `include/programl_runtime.h` states the same for C, and
// `crates/runtime/tests/header.rs` compiles it against this file's layout,
// field by field, and against each function's signature. Any change to a
// type, a signature or a meaning bumps ABI_VERSION.

/// The ABI version; `programl_runtime_abi_version()` returns it and the
/// plugin refuses a runtime whose version differs.
pub const ABI_VERSION: u32 = 5;

/// Exported symbol names, NUL-terminated for `dlsym`.
pub const SYM_ABI_VERSION: &[u8] = b"programl_runtime_abi_version\0";
pub const SYM_OPEN: &[u8] = b"programl_runtime_open\0";
pub const SYM_INFO: &[u8] = b"programl_runtime_info\0";
pub const SYM_PREDICT: &[u8] = b"programl_runtime_predict\0";
pub const SYM_PREDICT_GRAPH: &[u8] = b"programl_runtime_predict_graph\0";
pub const SYM_LAST_ERROR: &[u8] = b"programl_runtime_last_error\0";
pub const SYM_CLOSE: &[u8] = b"programl_runtime_close\0";

/// The forward edges of one flow (control, data or call) of a batch:
/// edge `k` runs from `sources[k]` to `targets[k]` with `positions[k]`.
/// Pointers may be null when `len` is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RtEdges {
    pub sources: *const i64,
    pub targets: *const i64,
    pub positions: *const i64,
    pub len: usize,
}

/// One model input: the arrays of a `programl::batch::Batch` (its layout
/// is `programl::batch`'s module docs), unlabelled. `tokens` and
/// `selector` hold `nodes` entries, `offsets` `graphs + 1`; `edges` are the
/// control, data and call edges in that order (the backward types are
/// derived from them, as in the batch).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RtInput {
    pub nodes: usize,
    pub tokens: *const i64,
    pub selector: *const i64,
    pub graphs: usize,
    pub offsets: *const i64,
    pub edges: [RtEdges; 3],
}

/// The products' precision, as a typed code: what a call asks for
/// ([`RtOptions::dtype`]) and what it ran at (FP32, BF16 or INT8).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtDtype(pub i32);

impl RtDtype {
    /// FP32 products.
    pub const F32: RtDtype = RtDtype(0);
    /// BF16 products (FP32 accumulation) where the device has them.
    pub const BF16: RtDtype = RtDtype(1);
    /// INT8 products (every CPU path).
    pub const INT8: RtDtype = RtDtype(2);
    /// The fastest within the documented bound (asked for only).
    pub const AUTO: RtDtype = RtDtype(3);
}

/// How one prediction runs: per call, nothing process-wide.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RtOptions {
    /// Message-passing steps (`<= 0`: the bundle's).
    pub steps: i64,
    /// Threads for this call (`>= 1`).
    pub threads: i32,
    /// The products' precision asked for.
    pub dtype: RtDtype,
}

/// An open bundle (opaque).
#[repr(C)]
pub struct RtModel {
    _private: [u8; 0],
}

/// `uint32_t programl_runtime_abi_version(void)`.
pub type FnAbiVersion = unsafe extern "C" fn() -> u32;
/// `programl_model *programl_runtime_open(const char *bundle_dir, const char *device)`:
/// loads and checks the bundle on `device` (`cpu`, `cuda` or `auto`); NULL
/// on failure (then see `programl_runtime_last_error`).
pub type FnOpen = unsafe extern "C" fn(*const std::ffi::c_char, *const std::ffi::c_char) -> *mut RtModel;
/// `const char *programl_runtime_info(const programl_model *)`: a JSON
/// object describing the open model (task, head, classes, steps, device,
/// provenance); valid while the model is open. NULL on failure.
pub type FnInfo = unsafe extern "C" fn(*const RtModel) -> *const std::ffi::c_char;
/// `int32_t programl_runtime_predict(programl_model *, const programl_input *,
/// const programl_options *, float *out, size_t out_len, programl_dtype *in_effect)`:
/// class probabilities of every node after `options->steps` steps, at
/// `options->threads` threads and the precision `options->dtype` asks for,
/// written row-major into `out`, which must hold exactly `nodes × classes`
/// floats; `*in_effect` (if not NULL) receives the precision the products
/// ran at (a precision the device lacks gives FP32). 0 on success, -1 on
/// failure.
pub type FnPredict = unsafe extern "C" fn(*mut RtModel, *const RtInput, *const RtOptions, *mut f32, usize, *mut RtDtype) -> i32;
/// `int32_t programl_runtime_predict_graph(programl_model *, const programl_input *,
/// const float *aux, size_t aux_len, const programl_options *, float *out, size_t out_len,
/// programl_dtype *in_effect)`: class probabilities of every graph of the
/// input under a graph-level bundle (head `graph`), row-major into `out`,
/// which must hold exactly `graphs × classes` floats. `aux` holds each
/// graph's raw auxiliary inputs row-major, `aux_len == graphs × A` for the
/// bundle's A inputs (`info`'s `aux`); NULL and 0 when A is 0. 0 on
/// success, -1 on failure. (`programl_runtime_predict` refuses
/// graph-level bundles, and this function node-level ones.)
pub type FnPredictGraph =
    unsafe extern "C" fn(*mut RtModel, *const RtInput, *const f32, usize, *const RtOptions, *mut f32, usize, *mut RtDtype) -> i32;
/// `const char *programl_runtime_last_error(void)`: the message of this
/// thread's last failure (never NULL; empty if none). Valid until the
/// thread's next call into the runtime.
pub type FnLastError = unsafe extern "C" fn() -> *const std::ffi::c_char;
/// `void programl_runtime_close(programl_model *)`: frees the model. NULL is
/// ignored.
pub type FnClose = unsafe extern "C" fn(*mut RtModel);
