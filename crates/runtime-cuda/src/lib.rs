//! `libprograml_runtime_cuda.so`: the model runtime of `crates/runtime`,
//! linked with libtorch_cuda (build.rs) so that `device=cuda` and
//! `device=auto` can use a GPU. The code is programl-runtime's; its C ABI
//! functions are `#[no_mangle]` and so exported from this library too
//! (`tests/layering.rs` checks the exports and the NEEDED entries).

pub use programl_runtime::*;
