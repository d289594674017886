// Link settings for every final artifact that links libtorch (binaries,
// test binaries, cdylibs): shared by the build scripts of programl-model,
// programl-train and the runtime with `include!`.
//
// torch-sys sets an rpath and links libtorch_cuda only for its own
// artifacts, and rustc links with `--as-needed`, which drops
// libtorch_cuda (nothing references its symbols directly: it registers the
// CUDA backend from static constructors). So each final artifact:
// - gets an rpath to the libtorch it was built against, so it starts
//   without LD_LIBRARY_PATH;
// - links libtorch_cuda with `--no-as-needed` where that libtorch has one,
//   so CUDA is really available at run time (tests/ check NEEDED).
fn torch_link() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .expect("torch-sys exports DEP_TCH_LIBTORCH_LIB (a direct torch-sys dependency is needed)");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    println!("cargo:rustc-env=PROGRAML_LIBTORCH_LIB={lib}");
    if std::path::Path::new(&lib).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-L{lib}");
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
