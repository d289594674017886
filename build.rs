//! Build script for the `programl` library.
//!
//! 1. Locates the LLVM selected by the `llvmNN` cargo feature (through
//!    `LLVM_SYS_<NN>0_PREFIX`, then `llvm-config-NN`, then `/usr/lib/llvm-NN`).
//! 2. Compiles the small C++ shim (`src/builder/shim.cc`) that prints values
//!    with one `ModuleSlotTracker` per module (the C API cannot do this).
//! 3. Links the shared libLLVM once. inkwell is used with its
//!    `*-no-llvm-linking` features, so this is the only LLVM link.
//! 4. Generates Rust code for the ProGraML protobuf schema (`proto/`), with
//!    the pure-Rust parser: no `protoc` needed.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSIONS: [u32; 6] = [14, 15, 16, 17, 18, 19];

/// The protobuf schema, generated into `$OUT_DIR/proto` (one module each).
const PROTOS: [&str; 4] =
    ["proto/features.proto", "proto/program_graph.proto", "proto/program_graph_features.proto", "proto/program_graph_list.proto"];

fn main() {
    let major = selected_llvm_major();
    let config = llvm_config(major);
    let query = |arg: &str| -> String {
        let out = Command::new(&config).arg(arg).output().unwrap_or_else(|e| panic!("running {} {arg}: {e}", config.display()));
        assert!(out.status.success(), "{} {arg} failed", config.display());
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let includedir = query("--includedir");
    let libdir = query("--libdir");

    let mut shim = cc::Build::new();
    shim.cpp(true)
        .file("src/builder/shim.cc")
        .include(&includedir)
        .flag_if_supported("-std=c++17")
        .flag_if_supported("-fno-rtti")
        .flag_if_supported("-Wno-unused-parameter")
        .define("_GNU_SOURCE", None)
        .define("__STDC_CONSTANT_MACROS", None)
        .define("__STDC_FORMAT_MACROS", None)
        .define("__STDC_LIMIT_MACROS", None);
    shim.compile("programl_shim");

    println!("cargo:rustc-link-search=native={libdir}");
    println!("cargo:rustc-link-lib=dylib=LLVM-{major}");
    // Binaries and tests find libLLVM without LD_LIBRARY_PATH.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{libdir}");
    println!("cargo:rustc-env=PROGRAML_LLVM_BINDIR={}", query("--bindir"));
    println!("cargo:rustc-env=PROGRAML_LLVM_MAJOR={major}");
    println!("cargo:rerun-if-changed=src/builder/shim.cc");
    for v in VERSIONS {
        println!("cargo:rerun-if-env-changed=LLVM_SYS_{v}0_PREFIX");
    }

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap()).join("proto");
    std::fs::create_dir_all(&out_dir).unwrap();
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    protobuf_codegen::Codegen::new().pure().include("proto").inputs(PROTOS).out_dir(&out_dir).run_from_script();
}

fn selected_llvm_major() -> u32 {
    let selected: Vec<u32> = VERSIONS.into_iter().filter(|v| env::var_os(format!("CARGO_FEATURE_LLVM{v}")).is_some()).collect();
    match selected.as_slice() {
        [one] => *one,
        [] => panic!("select one LLVM version feature: llvm14 .. llvm19"),
        many => panic!("select exactly one LLVM version feature, got {many:?}"),
    }
}

fn llvm_config(major: u32) -> PathBuf {
    let candidates = [
        env::var_os(format!("LLVM_SYS_{major}0_PREFIX")).map(|p| Path::new(&p).join("bin/llvm-config")),
        Some(PathBuf::from(format!("/usr/lib/llvm-{major}/bin/llvm-config"))),
        Some(PathBuf::from(format!("llvm-config-{major}"))),
    ];
    for c in candidates.into_iter().flatten() {
        if let Ok(out) = Command::new(&c).arg("--version").output() {
            let v = String::from_utf8_lossy(&out.stdout);
            if out.status.success() && v.trim().starts_with(&format!("{major}.")) {
                return c;
            }
        }
    }
    panic!(
        "LLVM {major} not found: install llvm-{major}-dev (see scripts/bootstrap.sh) \
         or set LLVM_SYS_{major}0_PREFIX"
    );
}
