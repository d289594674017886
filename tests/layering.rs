//! The layering the crate map promises (ARCHITECTURE.md), checked on the
//! workspace as CI builds it (`cargo build --release --workspace`, which
//! `scripts/bootstrap.sh` runs before the tests):
//!
//! - no path in the normal dependency graph from zstd, plotters, tch,
//!   torch-sys or rayon to the plugin (`programl-passes`), the core
//!   (`programl`), or the CPU inference (`programl-kernels`,
//!   `programl-infer`): features unify across a workspace build, crate
//!   boundaries don't;
//! - the plugin depends on no workspace crate but the core and the CPU
//!   inference (never `programl-model`);
//! - neither the plugin nor the `programl` CLI has libtorch or libc10 among
//!   its NEEDED libraries;
//! - `--features llvmNN` selects LLVM NN alone on every crate that builds
//!   an artifact (no dependency keeps its default `llvm16`);
//! - the model runtime depends on the model crate and the core only (never
//!   the dataset store or the trainer); it is built as one library only,
//!   the CUDA runtime, which links libtorch_cuda and exports the C ABI the
//!   plugin opens (the CPU needs no runtime library: it runs in the plugin).
//!
//! The linker drops unused code, so symbols alone would hide a compiled-in
//! dependency: the dependency graph is the check that counts.

use std::path::PathBuf;
use std::process::Command;

/// Crates the graph path and the CPU inference must never compile in.
const HEAVY: &[&str] = &["zstd", "plotters", "tch", "torch-sys", "rayon"];
/// Crates that must never depend on a heavy one.
const TORCH_FREE: &[&str] = &["programl-passes", "programl", "programl-kernels", "programl-infer"];
/// The workspace crates the plugin may depend on.
const PLUGIN_MAY_USE: &[&str] = &["programl", "programl-kernels", "programl-infer"];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cargo_tree(args: &[&str]) -> (bool, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(&cargo)
        .args(["tree", "-e", "normal", "--charset", "ascii"])
        .args(args)
        .current_dir(workspace())
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} tree: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The package names on the lines of a `cargo tree` listing.
fn packages(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.trim_start_matches(|c: char| " |`-\\".contains(c)).split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// `cargo tree --workspace -e normal -i spec` for every version of the
/// package `spec` names (cargo refuses an ambiguous name and lists the
/// versions instead); `None` if the package is not in the graph at all.
fn inverse_trees(spec: &str) -> Option<Vec<String>> {
    let (ok, text) = cargo_tree(&["--workspace", "-i", spec]);
    if ok {
        return Some(vec![text]);
    }
    if text.contains("did not match any packages") {
        return None;
    }
    assert!(text.contains("is ambiguous"), "cargo tree -i {spec} failed:\n{text}");
    let versions: Vec<&str> = text.lines().map(str::trim).filter(|l| l.starts_with(&format!("{spec}@"))).collect();
    assert!(!versions.is_empty(), "no versions listed:\n{text}");
    Some(versions.into_iter().flat_map(|v| inverse_trees(v).unwrap_or_default()).collect())
}

#[test]
fn heavy_crates_never_reach_the_graph_path() {
    let mut found_any = false;
    for heavy in HEAVY {
        let Some(trees) = inverse_trees(heavy) else { continue };
        let text = trees.join("\n");
        found_any = true;
        let dependents = packages(&text);
        for krate in TORCH_FREE {
            assert!(
                !dependents.iter().any(|p| p == krate),
                "{heavy} reaches {krate} (cargo tree --workspace -e normal -i {heavy}):\n{text}"
            );
        }
    }
    // The check must be able to see a path: zstd reaches the dataset store
    // and through it the CLI.
    assert!(found_any, "none of {HEAVY:?} is in the dependency graph: is the dataset crate gone?");
    let text = inverse_trees("zstd").unwrap().join("\n");
    assert!(packages(&text).iter().any(|p| p == "programl-cli"), "zstd should reach programl-cli:\n{text}");
}

/// Only the model, the trainer and the runtime name `tch` (STYLE.md's
/// crate map); the CLI and the dataset store never reach it.
#[test]
fn only_the_learning_crates_reach_tch() {
    let text = inverse_trees("tch").expect("the model crate depends on tch").join("\n");
    let workspace_dependents: Vec<String> = packages(&text).into_iter().filter(|p| p.starts_with("programl")).collect();
    assert!(workspace_dependents.iter().any(|p| p == "programl-model"), "{text}");
    for p in &workspace_dependents {
        assert!(
            ["programl-model", "programl-train", "programl-runtime", "programl-runtime-cuda"].contains(&p.as_str()),
            "{p} depends on tch; only the model, the trainer and the runtime may:\n{text}"
        );
    }
}

#[test]
fn plugin_depends_on_the_core_and_the_cpu_inference_alone() {
    let (ok, text) = cargo_tree(&["-p", "programl-passes", "--prefix", "none", "--no-dedupe"]);
    assert!(ok, "cargo tree -p programl-passes failed:\n{text}");
    let deps = packages(&text);
    assert!(deps.iter().any(|p| p == "programl"), "the plugin should depend on the core:\n{text}");
    assert!(deps.iter().any(|p| p == "programl-infer"), "the plugin should link the CPU inference:\n{text}");
    for p in &deps {
        assert!(
            !p.starts_with("programl") || p == "programl-passes" || PLUGIN_MAY_USE.contains(&p.as_str()),
            "the plugin depends on workspace crate {p}; it may use {PLUGIN_MAY_USE:?} only"
        );
        assert!(!HEAVY.contains(&p.as_str()), "the plugin compiles in {p}");
    }
}

/// The Python package predicts through the torch-free inference, as the
/// pass does: it never reaches the model crate, tch or torch-sys.
#[test]
fn python_package_predicts_without_libtorch() {
    let (ok, text) = cargo_tree(&["-p", "programl-python", "-e", "normal", "--prefix", "none", "--no-dedupe"]);
    assert!(ok, "cargo tree -p programl-python failed:\n{text}");
    let deps = packages(&text);
    for want in ["programl", "programl-dataset", "programl-infer", "pyo3"] {
        assert!(deps.iter().any(|p| p == want), "the Python package should depend on {want}:\n{text}");
    }
    for banned in ["programl-model", "tch", "torch-sys", "programl-runtime"] {
        assert!(!deps.iter().any(|p| p == banned), "the Python package reaches {banned}:\n{text}");
    }
}

/// `target/release` (or the profile directory this test was built into).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/layering-<hash>
    exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>").to_path_buf()
}

fn needed(binary: &PathBuf) -> Vec<String> {
    assert!(
        binary.exists(),
        "{} is missing: build the workspace first (cargo build --release --workspace, as scripts/bootstrap.sh does)",
        binary.display()
    );
    let out = Command::new("readelf").arg("-d").arg(binary).output().expect("running readelf (binutils)");
    assert!(out.status.success(), "readelf -d {} failed", binary.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let libs: Vec<String> = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).and_then(|s| s.split(']').next()))
        .map(str::to_string)
        .collect();
    assert!(libs.iter().any(|l| l.starts_with("libc.so")), "{}: no NEEDED libc? {text}", binary.display());
    libs
}

#[test]
fn plugin_and_cli_never_link_libtorch() {
    let dir = profile_dir();
    for binary in [dir.join("libprograml_passes.so"), dir.join("programl")] {
        for lib in needed(&binary) {
            assert!(
                !lib.starts_with("libtorch") && !lib.starts_with("libc10"),
                "{} links {lib}: the graph path must never load libtorch",
                binary.display()
            );
        }
    }
}

#[test]
fn runtime_depends_on_the_model_alone() {
    let (ok, text) = cargo_tree(&["-p", "programl-runtime", "--prefix", "none", "--no-dedupe"]);
    assert!(ok, "cargo tree -p programl-runtime failed:\n{text}");
    let deps = packages(&text);
    assert!(deps.iter().any(|p| p == "programl-model"), "the runtime should depend on the model:\n{text}");
    for p in &deps {
        assert!(
            // (zstd is no marker here: tch reaches it through zip.)
            !["programl-dataset", "programl-train", "programl-cli", "programl-passes", "plotters", "rayon"].contains(&p.as_str()),
            "the runtime depends on {p}; it may use the model and the core only"
        );
    }
}

/// The C ABI the plugin looks up (crates/runtime/src/abi.rs).
const RUNTIME_SYMBOLS: &[&str] = &[
    "programl_runtime_abi_version",
    "programl_runtime_open",
    "programl_runtime_info",
    "programl_runtime_predict_graph",
    "programl_runtime_predict",
    "programl_runtime_last_error",
    "programl_runtime_close",
];

fn exported(binary: &PathBuf) -> String {
    let out = Command::new("readelf").args(["--dyn-syms", "--wide"]).arg(binary).output().expect("running readelf");
    assert!(out.status.success(), "readelf --dyn-syms {} failed", binary.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The CPU inference's own dependencies: the core, the kernels, a
/// safetensors reader, serde; nothing that links libtorch or spawns a
/// rayon pool.
#[test]
fn cpu_inference_depends_on_the_core_alone() {
    for krate in ["programl-kernels", "programl-infer"] {
        let (ok, text) = cargo_tree(&["-p", krate, "--prefix", "none", "--no-dedupe"]);
        assert!(ok, "cargo tree -p {krate} failed:\n{text}");
        for p in packages(&text) {
            assert!(!HEAVY.contains(&p.as_str()), "{krate} compiles in {p}");
            assert!(
                !p.starts_with("programl") || ["programl", "programl-kernels", "programl-infer"].contains(&p.as_str()),
                "{krate} depends on workspace crate {p}"
            );
        }
    }
}

/// One runtime library, the CUDA one: it links libtorch_cuda for real and
/// exports the C ABI. The CPU has no runtime library to open.
#[test]
fn the_cuda_runtime_links_libtorch_cuda() {
    let dir = profile_dir();
    let cuda = dir.join("libprograml_runtime_cuda.so");
    let cuda_libs = needed(&cuda);
    assert!(
        cuda_libs.iter().any(|l| l == "libtorch_cuda.so"),
        "{} does not link libtorch_cuda.so ({cuda_libs:?}): its build script links it with --no-as-needed where the \
         libtorch has one; a libtorch without CUDA cannot make a CUDA runtime",
        cuda.display()
    );
    let symbols = exported(&cuda);
    for name in RUNTIME_SYMBOLS {
        assert!(
            symbols.lines().any(|l| l.contains(" FUNC ") && l.contains(" GLOBAL ") && l.split_whitespace().last() == Some(*name)),
            "{} does not export {name}",
            cuda.display()
        );
    }
}

/// The LLVM features of the core that `cargo tree -e features -i programl`
/// shows enabled for `krate` built with `--no-default-features --features
/// feature`.
fn llvm_features_of_the_core(krate: &str, feature: &str) -> Vec<String> {
    let (ok, text) = cargo_tree(&["-e", "features", "-p", krate, "--no-default-features", "--features", feature, "-i", "programl"]);
    assert!(ok, "cargo tree -p {krate} --features {feature}: {text}");
    let mut found: Vec<String> = text
        .lines()
        .filter_map(|l| l.split("programl feature \"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .filter(|f| f.starts_with("llvm"))
        .map(str::to_string)
        .collect();
    found.sort();
    found.dedup();
    found
}

/// `--features llvmNN` selects LLVM NN alone on every crate that builds an
/// artifact: a dependency that kept its default `llvm16` would enable a
/// second version, which the core's build.rs refuses (found 2026-12-01:
/// kernels, infer and model did). Checked on the dependency graph, so it
/// holds on a machine with LLVM 16 alone.
#[test]
fn one_llvm_feature_selects_one_llvm() {
    for krate in ["programl-passes", "programl-train", "programl-python", "programl-runtime-cuda", "programl-cli", "programl-runtime"] {
        for feature in ["llvm15", "llvm17", "llvm19"] {
            assert_eq!(llvm_features_of_the_core(krate, feature), [feature], "{krate} --no-default-features --features {feature}");
        }
        assert_eq!(llvm_features_of_the_core(krate, "default"), ["llvm16"], "{krate} by default");
    }
}
