//! Write faults (issue 12, part 5): a full disk and a file size limit, on
//! every file the CLI writes. The tests run as root, where permissions do
//! not stop a write, so the faults come from the kernel instead:
//!
//! - a full disk: a `/dev/full` device node (`mknod c 1 7`, made in a
//!   temporary directory so that a regression replacing the node cannot
//!   touch the real one), or the real `/dev/full` opened as stdout;
//! - a failing write in the middle of a file: `RLIMIT_FSIZE`, set in the
//!   child before `exec`. Past the limit the kernel sends SIGXFSZ, which
//!   `programl` ignores, so that write() fails with EFBIG and the error
//!   names the file.
//!
//! Each fault must give one error line naming the file and the cause, a
//! failing exit code, no partial file under a final name (every file there
//! is byte-for-byte what a run without the fault writes), no temporary file
//! left over, and an earlier complete file untouched.

use std::collections::BTreeMap;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use programl_dataset::{Dataset, Record};

const PROGRAMS: usize = 24;
const ENOSPC: &str = "No space left on device (os error 28)";
const EFBIG: &str = "File too large (os error 27)";

fn programl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_programl"))
}

/// The IR corpus: `progI.ll`, generated programs of 1 to 5 functions at
/// -O0 (graphs of different sizes), compiled once into cargo's scratch
/// directory.
fn corpus() -> &'static Path {
    static CORPUS: OnceLock<PathBuf> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults-corpus-v1");
        if dir.join("complete").exists() {
            return dir;
        }
        let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let clang = Path::new(programl::LLVM_BINDIR).join("clang");
        for i in 0..PROGRAMS {
            let c = scratch.path().join(format!("prog{i}.c"));
            std::fs::write(&c, programl_testkit::c_program(i)).unwrap();
            let out = Command::new(&clang)
                .args(["-S", "-emit-llvm", "-w", "-O0", "-o"])
                .arg(scratch.path().join(format!("prog{i}.ll")))
                .arg(&c)
                .output()
                .unwrap();
            assert!(out.status.success(), "clang {}: {}", c.display(), String::from_utf8_lossy(&out.stderr));
            std::fs::remove_file(&c).unwrap();
        }
        std::fs::write(scratch.path().join("complete"), "").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(scratch.keep(), &dir).unwrap();
        dir
    })
}

fn input(i: usize) -> PathBuf {
    corpus().join(format!("prog{i}.ll"))
}

/// Runs `cmd` with its files limited to `limit` bytes (none: unlimited).
fn run_limited(cmd: &mut Command, limit: Option<u64>) -> Output {
    if let Some(bytes) = limit {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs
        // between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    // stderr is a pipe: the limit does not apply to it.
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn ok(cmd: &mut Command) -> Output {
    let out = run_limited(cmd, None);
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command failed with exit code `code`, printing `expected` as an
/// error line, and did not panic.
#[track_caller]
fn assert_fails(out: &Output, code: i32, expected: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "exit status {}; stderr:\n{err}", out.status);
    assert!(err.lines().any(|l| l.starts_with("programl: ") && l.contains(expected)), "no error line with {expected:?}:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Every regular file under `dir` (symbolic links not followed), by
/// relative path.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                walk(root, &entry.path(), out);
            } else if kind.is_file() {
                out.insert(entry.path().strip_prefix(root).unwrap().to_path_buf(), std::fs::read(entry.path()).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}

/// No file under `dir` carries a temporary name (programl::fsutil's
/// `.NAME.XXXXXX.tmp`, the export's link names `.NAME.PID.N.tmp`).
#[track_caller]
fn assert_no_temporaries(dir: &Path) {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), found);
            } else if entry.file_name().to_string_lossy().ends_with(".tmp") {
                found.push(entry.path());
            }
        }
    }
    let mut found = Vec::new();
    walk(dir, &mut found);
    assert!(found.is_empty(), "temporary files left behind: {found:?}");
}

/// A character device node `name` in `dir` with the numbers of /dev/full
/// (1, 7) or /dev/null (1, 3); `None` (after `skip_unless_ci`) where mknod
/// is not permitted.
fn device(dir: &Path, name: &str, minor: u32, test: &str) -> Option<PathBuf> {
    let path = dir.join(name);
    let out = Command::new("mknod").arg(&path).args(["c", "1", &minor.to_string()]).output().unwrap();
    if !out.status.success() {
        programl_testkit::skip_unless_ci(test, &format!("mknod: {}", String::from_utf8_lossy(&out.stderr).trim()));
        return None;
    }
    Some(path)
}

#[track_caller]
fn assert_still_a_device(path: &Path) {
    let kind = std::fs::symlink_metadata(path).unwrap().file_type();
    assert!(kind.is_char_device(), "{} was replaced by a {kind:?}", path.display());
}

fn dataset_from(ir: &Path, out: &Path, limit: Option<u64>) -> Output {
    let mut cmd = programl();
    cmd.args(["dataset", "build", "-j", "1", "--shard-size", "1", "--ir"]).arg(ir).arg("--out").arg(out);
    run_limited(&mut cmd, limit)
}

fn dataset(out: &Path, limit: Option<u64>) -> Output {
    dataset_from(corpus(), out, limit)
}

/// `n` one-instruction modules: shards of one record smaller than the
/// manifest's lines add up to.
fn tiny_corpus(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        let ir = format!("define i32 @f{i}(i32 %x) {{\n  %y = add i32 %x, {i}\n  ret i32 %y\n}}\n");
        std::fs::write(dir.path().join(format!("tiny{i}.ll")), ir).unwrap();
    }
    dir
}

fn records(data: &Path) -> Vec<Record> {
    let mut records: Vec<Record> = Dataset::open(data).unwrap().records().map(|r| r.unwrap()).collect();
    records.sort_by(|a, b| a.path.cmp(&b.path));
    records
}

#[test]
fn output_files_on_a_full_device_are_errors_naming_them_and_devices_stay() {
    let test = "output_files_on_a_full_device_are_errors_naming_them_and_devices_stay";
    let dir = tempfile::tempdir().unwrap();
    let (Some(full), Some(null)) = (device(dir.path(), "full", 7, test), device(dir.path(), "null", 3, test)) else { return };
    let graph = dir.path().join("g.pb");
    ok(programl().arg("graph").arg(input(3)).arg("-o").arg(&graph));

    // Before the fix, each of these renamed a regular file over the node
    // (as root, `-o /dev/null` replaced /dev/null) and exited 0.
    for args in [
        vec!["graph".into(), input(3).into_os_string(), "-o".into(), full.clone().into()],
        vec!["graph".into(), input(3).into_os_string(), "--format".into(), "json".into(), "-o".into(), full.clone().into()],
        vec!["convert".into(), "--format".into(), "dot".into(), graph.clone().into(), "-o".into(), full.clone().into()],
    ] {
        let out = run_limited(programl().args(&args), None);
        assert_fails(&out, 2, &format!("{}: cannot write: {ENOSPC}", full.display()));
        assert_still_a_device(&full);
    }
    ok(programl().arg("graph").arg(input(3)).arg("-o").arg(&null));
    assert_still_a_device(&null);
    assert_no_temporaries(dir.path());
}

#[test]
fn stdout_on_a_full_device_is_an_error_naming_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("g.pb");
    ok(programl().arg("graph").arg(input(5)).arg("-o").arg(&graph));
    let ll = input(5);
    let commands: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["graph".as_ref(), ll.as_os_str()],
        vec!["graph".as_ref(), "--format".as_ref(), "json".as_ref(), ll.as_os_str()],
        // `summary` panicked here (print!), exit code 101.
        vec!["summary".as_ref(), graph.as_os_str()],
        vec!["convert".as_ref(), "--format".as_ref(), "pbtxt".as_ref(), graph.as_os_str()],
        // Both said "No space left on device", naming nothing.
        vec!["analyze".as_ref(), "--task".as_ref(), "liveness".as_ref(), ll.as_os_str()],
        vec!["annotations".as_ref(), ll.as_os_str()],
    ];
    for args in commands {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = run_limited(programl().args(&args).stdout(full), None);
        assert_fails(&out, 2, &format!("<stdout>: cannot write: {ENOSPC}"));
    }
}

#[test]
fn graph_files_past_a_size_limit_are_whole_or_absent() {
    let dir = tempfile::tempdir().unwrap();

    // One input, -o FILE: an earlier complete file survives a failed write.
    let file = dir.path().join("one.json");
    ok(programl().args(["graph", "--format", "json"]).arg(input(4)).arg("-o").arg(&file));
    let before = std::fs::read(&file).unwrap();
    let out = run_limited(
        programl().args(["graph", "--format", "json", "--compat", "programl-0.3"]).arg(input(4)).arg("-o").arg(&file),
        Some(100),
    );
    assert_fails(&out, 2, &format!("{}: cannot write: {EFBIG}", file.display()));
    assert_eq!(std::fs::read(&file).unwrap(), before, "the earlier complete graph was changed");
    let fresh = dir.path().join("fresh.pb");
    let out = run_limited(programl().arg("graph").arg(input(4)).arg("-o").arg(&fresh), Some(100));
    assert_fails(&out, 2, &format!("{}: cannot write: {EFBIG}", fresh.display()));
    assert!(!fresh.exists());

    // A directory: the graphs larger than the limit fail, each named, and
    // the others are complete.
    let reference = dir.path().join("reference");
    ok(programl().args(["graph", "--format", "json", "-j", "1"]).arg(corpus()).arg("-o").arg(&reference));
    let expected = files(&reference);
    assert_eq!(expected.len(), PROGRAMS);
    let mut sizes: Vec<u64> = expected.values().map(|b| b.len() as u64).collect();
    sizes.sort();
    let limit = sizes[PROGRAMS / 2];
    let too_large: Vec<&PathBuf> = expected.iter().filter(|(_, b)| b.len() as u64 > limit).map(|(p, _)| p).collect();
    assert!(!too_large.is_empty() && too_large.len() < PROGRAMS, "sizes {sizes:?}");

    let limited = dir.path().join("limited");
    let out = run_limited(programl().args(["graph", "--format", "json", "-j", "1"]).arg(corpus()).arg("-o").arg(&limited), Some(limit));
    assert_fails(&out, 1, &format!("{} of {PROGRAMS} files failed", too_large.len()));
    let err = stderr(&out);
    for p in &too_large {
        assert!(err.contains(&format!("{}: cannot write: {EFBIG}", limited.join(p).display())), "{} not named:\n{err}", p.display());
    }
    let written = files(&limited);
    let missing: Vec<&PathBuf> = expected.keys().filter(|p| !written.contains_key(*p)).collect();
    assert_eq!(missing, too_large, "the graphs absent are not those past the limit");
    for (p, bytes) in &written {
        assert!(bytes == &expected[p], "{}: differs from the graph written without a limit", p.display());
    }
    assert_no_temporaries(dir.path());
    println!(
        "faults graph -o DIR: {PROGRAMS} inputs, RLIMIT_FSIZE {limit} B: {} failed, each named; {} written whole",
        too_large.len(),
        written.len()
    );

    // Standard output redirected to a file: the limit is an error too,
    // where the default SIGXFSZ would have killed the process silently.
    let stdout = std::fs::File::create(dir.path().join("stdout.json")).unwrap();
    let out = run_limited(programl().args(["graph", "--format", "json"]).arg(input(4)).stdout(stdout), Some(100));
    assert_fails(&out, 2, &format!("<stdout>: cannot write: {EFBIG}"));
}

#[test]
fn dataset_build_past_a_size_limit_commits_nothing_partial_and_resumes() {
    let clean = tempfile::tempdir().unwrap();
    let out = dataset(clean.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    let reference = records(clean.path());
    assert_eq!(reference.len(), PROGRAMS);
    let shards = Dataset::open(clean.path()).unwrap().shards().to_vec();
    let smallest = shards.iter().map(|s| s.bytes).min().unwrap();

    // Every shard past the limit: the first one fails, named; nothing is
    // committed, no temporary file stays; a resumed build completes.
    let data = tempfile::tempdir().unwrap();
    let out = dataset(data.path(), Some(smallest - 1));
    assert_fails(&out, 2, &format!("{}: cannot write: {EFBIG}", data.path().join("shard-000001.pgds").display()));
    let mut names: Vec<String> =
        std::fs::read_dir(data.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, [".lock", "manifest.jsonl"]);
    assert_eq!(Dataset::open(data.path()).unwrap().record_count(), 0);

    let out = dataset(data.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(records(data.path()) == reference, "the resumed dataset differs from the clean build");
    assert_no_temporaries(data.path());
}

#[test]
fn dataset_build_with_a_manifest_past_a_size_limit_resumes() {
    // Shards fit, the manifest outgrows the limit: an append fails part-way
    // through a line, after its shard was renamed into place. The dataset
    // reads back with the shards whose lines are complete, and a resumed
    // build removes the uncommitted shard and ends equal to a clean one.
    let ir = tiny_corpus(40);
    let clean = tempfile::tempdir().unwrap();
    let out = dataset_from(ir.path(), clean.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    let reference = records(clean.path());
    assert_eq!(reference.len(), 40);
    let largest = Dataset::open(clean.path()).unwrap().shards().iter().map(|s| s.bytes).max().unwrap();
    let manifest_bytes = std::fs::metadata(clean.path().join("manifest.jsonl")).unwrap().len();
    assert!(manifest_bytes > 2 * largest, "the manifest ({manifest_bytes} B) must outgrow the largest shard ({largest} B)");

    let data = tempfile::tempdir().unwrap();
    let manifest = data.path().join("manifest.jsonl");
    let limit = manifest_bytes / 2;
    let out = dataset_from(ir.path(), data.path(), Some(limit));
    assert_fails(&out, 2, &format!("{}: {EFBIG}", manifest.display()));
    assert_eq!(std::fs::metadata(&manifest).unwrap().len(), limit, "the append stopped at the limit, part-way through a line");
    let partial = records(data.path());
    assert!(!partial.is_empty() && partial.len() < reference.len(), "{} records", partial.len());
    for r in &partial {
        assert!(reference.contains(r), "{}: a committed record differs from the clean build's", r.path);
    }
    println!(
        "faults dataset build: manifest limited to {limit} of {manifest_bytes} B: {} of {} records committed, 1 shard uncommitted",
        partial.len(),
        reference.len()
    );
    let out = dataset_from(ir.path(), data.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("removed 1 uncommitted shard(s)"), "{}", stderr(&out));
    assert!(records(data.path()) == reference, "the resumed dataset differs from the clean build");
    assert_no_temporaries(data.path());
}

#[test]
fn dataset_side_files_past_a_size_limit_or_on_a_full_device() {
    let test = "dataset_side_files_past_a_size_limit_or_on_a_full_device";
    let data = tempfile::tempdir().unwrap();
    let out = dataset(data.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    let d = data.path();

    // The vocabulary and the plot: written atomically (the plot was drawn
    // straight into its file, which a limit left half-written).
    let vocab = d.join("vocab.json");
    ok(programl().args(["vocab", "build"]).arg(d));
    let vocab_before = std::fs::read(&vocab).unwrap();
    let out = run_limited(programl().args(["vocab", "build", "--max-size", "3"]).arg(d), Some(50));
    assert_fails(&out, 2, &format!("{}: cannot write: {EFBIG}", vocab.display()));
    assert_eq!(std::fs::read(&vocab).unwrap(), vocab_before);

    let plot = d.join("stats.png");
    ok(programl().args(["dataset", "stats", "--font", "none"]).arg(d));
    let plot_before = std::fs::read(&plot).unwrap();
    let out = run_limited(programl().args(["dataset", "stats"]).arg(d), Some(plot_before.len() as u64 / 2));
    assert_fails(&out, 2, &format!("{}: cannot draw the plot", plot.display()));
    assert_eq!(std::fs::read(&plot).unwrap(), plot_before, "the earlier plot was changed");
    assert_no_temporaries(d);

    // stdout on a full disk.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let out = run_limited(programl().args(["dataset", "stats", "--no-plot"]).arg(d).stdout(full), None);
    assert_fails(&out, 2, &format!("<stdout>: cannot write: {ENOSPC}"));

    // Device nodes as the outputs.
    let dir = tempfile::tempdir().unwrap();
    let Some(full) = device(dir.path(), "full", 7, test) else { return };
    let out = run_limited(programl().args(["vocab", "build"]).arg(d).arg("-o").arg(&full), None);
    assert_fails(&out, 2, &format!("{}: cannot write: {ENOSPC}", full.display()));
    let out = run_limited(programl().args(["dataset", "stats"]).arg(d).arg("--plot").arg(&full), None);
    assert_fails(&out, 2, &format!("{}: cannot write: {ENOSPC}", full.display()));
    assert_still_a_device(&full);
}

#[test]
fn dataset_export_past_a_size_limit_leaves_complete_files() {
    let data = tempfile::tempdir().unwrap();
    let out = dataset(data.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    let export = |dir: &Path, limit| {
        let mut cmd = programl();
        cmd.args(["dataset", "export", "--split", "train", "--task", "all", "--data"]).arg(data.path()).arg("--out").arg(dir);
        run_limited(&mut cmd, limit)
    };
    let reference = tempfile::tempdir().unwrap();
    let out = export(reference.path(), None);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = files(reference.path());
    let mut sizes: Vec<u64> = expected.values().map(|b| b.len() as u64).collect();
    sizes.sort();
    let limit = sizes[sizes.len() / 2];

    // Into a fresh directory: it stops at the first file past the limit,
    // naming it and its input; what is there is complete.
    let fresh = tempfile::tempdir().unwrap();
    let out = export(fresh.path(), Some(limit));
    assert_fails(&out, 2, &format!(": cannot write: {EFBIG}"));
    let line = stderr(&out);
    assert!(line.contains(&format!("{}/", fresh.path().display())) && line.contains(": exporting prog"), "{line}");
    let written = files(fresh.path());
    assert!(written.len() < expected.len());
    for (p, bytes) in &written {
        assert!(expected.get(p) == Some(bytes), "{}: differs from the export without a limit", p.display());
    }
    assert_no_temporaries(fresh.path());
    println!("faults dataset export: RLIMIT_FSIZE {limit} B: stopped after {} of {} files, all whole", written.len(), expected.len());

    // Over a complete export: every file stays as it was.
    let out = export(reference.path(), Some(limit));
    assert_fails(&out, 2, &format!(": cannot write: {EFBIG}"));
    assert!(files(reference.path()) == expected, "a complete export was changed by a failed one");
    assert_no_temporaries(reference.path());
}
