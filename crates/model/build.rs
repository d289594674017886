include!("torch-link.rs");

fn main() {
    // For this crate's own test binaries.
    torch_link();
    // The matmul-precision setter (src/precision.cc) and libtorch's
    // parallel loop for the kernels (src/parallel.cc), against the headers
    // of the libtorch torch-sys builds with.
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys exports DEP_TCH_LIBTORCH_LIB");
    let include = std::path::Path::new(&lib).parent().expect("libtorch's lib directory has a parent").join("include");
    println!("cargo:rerun-if-changed=src/precision.cc");
    println!("cargo:rerun-if-changed=src/parallel.cc");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("src/precision.cc")
        .file("src/parallel.cc")
        .include(&include)
        .warnings(false)
        .compile("programl_precision");
}
