// The model runtime's C ABI, version 4 (2 added graph-level prediction, 3 the matmul precision, 4 INT8 products): the types and names both sides use.
//
// This file is the one Rust statement of the ABI. The runtime compiles it
// as its `abi` module; the pass plugin, which must not depend on the
// runtime crate (that would link libtorch into it), `include!`s it.
// `include/programl_runtime.h` states the same for C. Any change to a type,
// a signature or a meaning bumps ABI_VERSION.

/// The ABI version; `programl_runtime_abi_version()` returns it and the
/// plugin refuses a runtime whose version differs.
pub const ABI_VERSION: u32 = 4;

/// Exported symbol names, NUL-terminated for `dlsym`.
pub const SYM_ABI_VERSION: &[u8] = b"programl_runtime_abi_version\0";
pub const SYM_OPEN: &[u8] = b"programl_runtime_open\0";
pub const SYM_INFO: &[u8] = b"programl_runtime_info\0";
pub const SYM_SET_THREADS: &[u8] = b"programl_runtime_set_threads\0";
pub const SYM_SET_DTYPE: &[u8] = b"programl_runtime_set_dtype\0";
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
/// `int32_t programl_runtime_set_threads(int32_t n)`: libtorch's intra-op
/// threads for the process; 0 on success, -1 on failure.
pub type FnSetThreads = unsafe extern "C" fn(i32) -> i32;
/// `int32_t programl_runtime_set_dtype(int32_t dtype)`: the matmul
/// precision for the process: FP32 (`dtype == 0`), BF16 products where
/// the CPU has BF16 instructions (1), or INT8 products where it has
/// AVX-512 VNNI (2), or auto (3: INT8 where the CPU has VNNI, else FP32).
/// Returns the precision in effect in the codes 0-2 (a precision the CPU
/// lacks gives 0), -1 on failure.
pub type FnSetDtype = unsafe extern "C" fn(i32) -> i32;
/// `int32_t programl_runtime_predict(programl_model *, const programl_input *,
/// int64_t steps, float *out, size_t out_len)`: class probabilities of
/// every node after `steps` steps (`steps <= 0`: the bundle's), written
/// row-major into `out`, which must hold exactly `nodes × classes` floats.
/// 0 on success, -1 on failure.
pub type FnPredict = unsafe extern "C" fn(*mut RtModel, *const RtInput, i64, *mut f32, usize) -> i32;
/// `int32_t programl_runtime_predict_graph(programl_model *, const programl_input *,
/// const float *aux, size_t aux_len, int64_t steps, float *out, size_t out_len)`:
/// class probabilities of every graph of the input under a graph-level
/// bundle (head `graph`), row-major into `out`, which must hold exactly
/// `graphs × classes` floats. `aux` holds each graph's raw auxiliary
/// inputs row-major, `aux_len == graphs × A` for the bundle's A inputs
/// (`info`'s `aux`); NULL and 0 when A is 0. 0 on success, -1 on failure.
/// (`programl_runtime_predict` refuses graph-level bundles, and this
/// function node-level ones.)
pub type FnPredictGraph = unsafe extern "C" fn(*mut RtModel, *const RtInput, *const f32, usize, i64, *mut f32, usize) -> i32;
/// `const char *programl_runtime_last_error(void)`: the message of this
/// thread's last failure (never NULL; empty if none). Valid until the
/// thread's next call into the runtime.
pub type FnLastError = unsafe extern "C" fn() -> *const std::ffi::c_char;
/// `void programl_runtime_close(programl_model *)`: frees the model. NULL is
/// ignored.
pub type FnClose = unsafe extern "C" fn(*mut RtModel);
