//! Compiles `src/shim.cc` (the one LLVM C++ call the learned pass needs)
//! against the headers of the LLVM selected by the `llvmNN` feature, found
//! as the core's build script finds it: `LLVM_SYS_<NN>0_PREFIX`, then
//! `/usr/lib/llvm-NN`, then `llvm-config-NN`. The core links libLLVM.

use std::path::PathBuf;
use std::process::Command;

const VERSIONS: [u32; 6] = [14, 15, 16, 17, 18, 19];

fn main() {
    let major = VERSIONS
        .into_iter()
        .find(|v| std::env::var_os(format!("CARGO_FEATURE_LLVM{v}")).is_some())
        .expect("select one LLVM version feature: llvm14 .. llvm19");
    let candidates = [
        std::env::var_os(format!("LLVM_SYS_{major}0_PREFIX")).map(|p| PathBuf::from(p).join("bin/llvm-config")),
        Some(PathBuf::from(format!("/usr/lib/llvm-{major}/bin/llvm-config"))),
        Some(PathBuf::from(format!("llvm-config-{major}"))),
    ];
    let includedir = candidates
        .into_iter()
        .flatten()
        .find_map(|c| {
            let out = Command::new(&c).arg("--includedir").output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .unwrap_or_else(|| panic!("llvm-config for LLVM {major} not found (set LLVM_SYS_{major}0_PREFIX)"));
    cc::Build::new()
        .cpp(true)
        .file("src/shim.cc")
        .include(&includedir)
        .flag_if_supported("-std=c++17")
        .flag_if_supported("-fno-rtti")
        .flag_if_supported("-Wno-unused-parameter")
        .define("__STDC_CONSTANT_MACROS", None)
        .define("__STDC_FORMAT_MACROS", None)
        .define("__STDC_LIMIT_MACROS", None)
        .compile("programl_passes_shim");
    println!("cargo:rerun-if-changed=src/shim.cc");
    // The plugin's own calls into its exported functions (shim.cc calls
    // `programl_passes_run` and the rest, which lib.rs exports) bind to this
    // library, not to the first library in the process that exports the
    // same names: a second build of the plugin loaded beside this one
    // (clang -fpass-plugin=A -fpass-plugin=B) would otherwise run A's
    // passes through B's classes.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    for v in VERSIONS {
        println!("cargo:rerun-if-env-changed=LLVM_SYS_{v}0_PREFIX");
    }
}
