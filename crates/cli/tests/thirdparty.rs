//! A real third-party CMake build with the graph pass attached (issue 12,
//! part 4): `scripts/thirdparty.sh` builds Debian's json-c (43 translation
//! units, its shared library, tests and app) plain and with
//! `programl_add_graphs` on every target, in the same directories, and
//! checks one graph per unit, byte-identical objects and json-c's own test
//! suite. Here without valgrind (`USE_VALGRIND=0`), to keep the run short;
//! the script alone runs json-c's tests under memcheck.
//!
//! Needs the plugin built next to this test's `programl`, and json-c's
//! source (fetched once by the script with `apt-get source`); without them
//! the test is a skip, a failure under `CI=true`.

use std::path::Path;
use std::process::Command;

#[test]
fn json_c_builds_with_the_graph_pass_byte_identical_and_passes_its_tests() {
    let test = "json_c_builds_with_the_graph_pass_byte_identical_and_passes_its_tests";
    let bin = Path::new(env!("CARGO_BIN_EXE_programl"));
    let target_dir = bin.parent().and_then(Path::parent).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/thirdparty.sh");
    let out = Command::new("bash").arg(&script).env("CARGO_TARGET_DIR", target_dir).env("USE_VALGRIND", "0").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        programl_testkit::skip_unless_ci(test, stdout.lines().last().unwrap_or("a prerequisite is missing"));
        return;
    }
    assert!(out.status.success(), "{}\n{stdout}{stderr}", script.display());
    println!("{stdout}");
    for expected in [
        "43 translation units in 27 targets",
        "graphs: 43, one per unit, each in its target's directory, all read back",
        "objects: 43 of 43 byte-identical with and without the graph pass",
        "test suite: plain 100% tests passed, 0 tests failed out of 23; with the pass 100% tests passed, 0 tests failed out of 23",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
}
