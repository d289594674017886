// libprograml_runtime_cuda.so links libtorch_cuda for real: rustc links
// with --as-needed, and nothing references libtorch_cuda's symbols directly
// (it registers the CUDA backend from static constructors), so without
// --no-as-needed the library would be dropped and CUDA silently absent.
// crates/model/torch-link.rs does exactly that (plus the rpath) where the
// libtorch has a CUDA library. Against a CPU-only libtorch the library still
// builds (so a workspace build works anywhere) but warns: it is then no more
// than the CPU runtime, and tests/layering.rs, which checks that its NEEDED
// entries include libtorch_cuda.so, fails.
include!("../model/torch-link.rs");

fn main() {
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB").unwrap_or_default();
    let cuda = std::path::Path::new(&lib).join("libtorch_cuda.so");
    if !cuda.exists() {
        println!(
            "cargo:warning={} is missing: this libtorch has no CUDA library, so libprograml_runtime_cuda.so is built without CUDA",
            cuda.display()
        );
    }
    torch_link();
}
