//! `include/programl_runtime.h` against `src/abi.rs`, by a C compiler:
//! the version, every dtype code, every struct's size and each field's
//! offset and size as Rust lays them out, and every function's prototype
//! (each redeclared here with the C type of its Rust signature; a
//! mismatch is a conflicting declaration). The Rust side of each
//! prototype is pinned by the type assertions beside the exports
//! (`src/lib.rs`: each export is one of `abi.rs`'s function types), so
//! neither statement can drift from the other.

use std::fmt::Write;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;

use programl_runtime::abi::{RtDtype, RtEdges, RtInput, RtOptions, ABI_VERSION};

/// The exports' signatures (`abi.rs`'s function types) in C.
const PROTOTYPES: &str = "
uint32_t programl_runtime_abi_version(void);
programl_model *programl_runtime_open(const char *, const char *);
const char *programl_runtime_info(const programl_model *);
int32_t programl_runtime_predict(programl_model *, const programl_input *, const programl_options *, float *, size_t, programl_dtype *);
int32_t programl_runtime_predict_graph(programl_model *, const programl_input *, const float *, size_t, const programl_options *, float *, size_t, programl_dtype *);
const char *programl_runtime_last_error(void);
void programl_runtime_close(programl_model *);
";

#[test]
fn the_c_header_matches_the_rust_abi_field_by_field() {
    let mut c = String::from("#include \"programl_runtime.h\"\n#include <stddef.h>\n");
    let mut check = |cond: String, what: &str| writeln!(c, "_Static_assert({cond}, \"{what}\");").unwrap();
    check(format!("PROGRAML_RUNTIME_ABI_VERSION == {ABI_VERSION}u"), "the ABI version");
    for (name, code) in [("F32", RtDtype::F32), ("BF16", RtDtype::BF16), ("INT8", RtDtype::INT8), ("AUTO", RtDtype::AUTO)] {
        check(format!("PROGRAML_DTYPE_{name} == {}", code.0), &format!("dtype {name}"));
    }
    check(format!("sizeof(programl_dtype) == {}", size_of::<RtDtype>()), "programl_dtype");
    macro_rules! fields {
        ($c:literal, $rust:ty, $($field:ident),+) => {{
            check(format!("sizeof({}) == {}", $c, size_of::<$rust>()), concat!($c, " size"));
            $(
                check(format!("offsetof({}, {}) == {}", $c, stringify!($field), offset_of!($rust, $field)), concat!($c, ".", stringify!($field), " offset"));
                check(
                    format!("sizeof((({} *)0)->{}) == {}", $c, stringify!($field), {
                        fn size<T>(_: fn(&$rust) -> &T) -> usize { size_of::<T>() }
                        size(|x: &$rust| &x.$field)
                    }),
                    concat!($c, ".", stringify!($field), " size"),
                );
            )+
        }};
    }
    fields!("programl_options", RtOptions, steps, threads, dtype);
    fields!("programl_edges", RtEdges, sources, targets, positions, len);
    fields!("programl_input", RtInput, nodes, tokens, selector, graphs, offsets, edges);
    c.push_str(PROTOTYPES);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("header_check.c");
    std::fs::write(&file, &c).unwrap();
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include");
    let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
    let out = std::process::Command::new(clang)
        .args(["-std=c11", "-fsyntax-only", "-Werror", "-Wall", "-I"])
        .arg(&include)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "include/programl_runtime.h disagrees with src/abi.rs:\n{}\n{c}", String::from_utf8_lossy(&out.stderr));
}

/// The check itself fails on a header that says something else: a field
/// moved, and a prototype changed.
#[test]
fn the_check_catches_a_drifted_header() {
    let header = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/programl_runtime.h")).unwrap();
    for (from, to) in [
        ("  int32_t threads;\n  programl_dtype dtype;", "  programl_dtype dtype;\n  int32_t threads;"),
        ("const programl_options *options,\n                                 float *out", "int64_t steps,\n                                 float *out"),
    ] {
        assert!(header.contains(from), "the header no longer holds {from:?}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("programl_runtime.h"), header.replace(from, to)).unwrap();
        let mut c = String::from("#include \"programl_runtime.h\"\n#include <stddef.h>\n");
        writeln!(c, "_Static_assert(offsetof(programl_options, threads) == {}, \"threads\");", offset_of!(RtOptions, threads)).unwrap();
        c.push_str(PROTOTYPES);
        std::fs::write(dir.path().join("check.c"), &c).unwrap();
        let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
        let out = std::process::Command::new(clang)
            .args(["-std=c11", "-fsyntax-only", "-Werror", "-I"])
            .arg(dir.path())
            .arg(dir.path().join("check.c"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "a header with {to:?} passed the check");
    }
}
