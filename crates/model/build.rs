include!("torch-link.rs");
include!("torch-version.rs");

fn main() {
    // For this crate's own test binaries.
    torch_link();
    // The matmul-precision setter (src/precision.cc) and libtorch's
    // parallel loop for the kernels (src/parallel.cc), against the headers
    // of the libtorch torch-sys builds with.
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys exports DEP_TCH_LIBTORCH_LIB");
    // The version libtorch::check compares the loaded libtorch with.
    let root = std::path::Path::new(&lib).parent().expect("libtorch's lib directory has a parent");
    let version = libtorch_version_at(root).unwrap_or_default();
    println!("cargo:rerun-if-changed={}", root.join("version.py").display());
    println!("cargo:rerun-if-changed=torch-version.rs");
    println!("cargo:rustc-env=PROGRAML_LIBTORCH_VERSION={version}");
    let include = root.join("include");
    println!("cargo:rerun-if-changed=src/precision.cc");
    println!("cargo:rerun-if-changed=src/parallel.cc");
    // `at::parallel_for` is a header template whose OpenMP backend is a
    // `#pragma omp parallel`: without -fopenmp the pragma is dropped and
    // every "parallel" loop runs on the calling thread alone. With it the
    // region calls GCC's OpenMP runtime, which must be the one libtorch
    // ships and runs its own team on (torch/lib/libgomp.so.1, by its
    // soname), so that one team and one thread count serve both.
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("src/precision.cc")
        .file("src/parallel.cc")
        .include(&include)
        .flag("-fopenmp")
        .warnings(false)
        .compile("programl_precision");
    let gomp = std::path::Path::new(&lib).join("libgomp.so.1");
    if gomp.exists() {
        println!("cargo:rustc-link-search=native={lib}");
        println!("cargo:rustc-link-lib=dylib:+verbatim=libgomp.so.1");
    } else {
        // A libtorch built against another OpenMP (or the system's
        // libgomp): the compiler's own.
        println!("cargo:rustc-link-lib=dylib=gomp");
    }
}
