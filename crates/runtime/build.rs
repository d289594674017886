// libprograml_runtime.so is the CPU runtime: libtorch_cpu only. So, unlike
// crates/model/torch-link.rs (which every other libtorch artifact uses),
// no libtorch_cuda here: rustc's default --as-needed drops it, and that is
// the point. The rpath lets the pass dlopen the runtime without
// LD_LIBRARY_PATH (crates/runtime-cuda links CUDA for real).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let lib =
        std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys exports DEP_TCH_LIBTORCH_LIB (a direct torch-sys dependency is needed)");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=PROGRAML_LIBTORCH_LIB={lib}");
}
