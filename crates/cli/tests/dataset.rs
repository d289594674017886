//! `programl dataset` and `programl vocab` end to end, on a corpus of 40
//! generated C programs compiled by clang at -O0 and -O2 (plus two broken
//! files): a build killed with SIGKILL and resumed equals a clean build,
//! stored examples equal a fresh analysis, corrupt shards are named and
//! skipped, and stats, the plot and the vocabulary work on real data.
//!
//! The corpus is generated once into cargo's per-target scratch directory
//! and reused by later runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use programl::analysis::{Analyzer, Task};
use programl::builder::{build, BuildOptions};
use programl_dataset::{split_key, split_of, Dataset, DatasetError, Query, Record, Split, StoredGraph, Subset, Vocabulary};

const PROGRAMS: usize = 40;
const LEVELS: [&str; 2] = ["O0", "O2"];
/// Inputs: every program at every level, plus the two broken files.
const INPUTS: usize = PROGRAMS * LEVELS.len() + 2;
const BROKEN: [&str; 2] = ["proj0/broken.ll", "proj1/empty.O2.bc"];

fn programl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_programl"))
}

fn clang() -> PathBuf {
    Path::new(programl::LLVM_BINDIR).join("clang")
}

/// The corpus directory: `projP/progI.OL.ll` for P = I mod 4, generated
/// once (atomically: in a scratch directory, then renamed).
fn corpus() -> &'static Path {
    static CORPUS: OnceLock<PathBuf> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dataset-corpus-v1");
        if dir.join("complete").exists() {
            return dir;
        }
        let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let root = scratch.path();
        std::thread::scope(|scope| {
            for part in 0..2 {
                scope.spawn(move || {
                    for i in (part..PROGRAMS).step_by(2) {
                        let sub = root.join(format!("proj{}", i % 4));
                        std::fs::create_dir_all(&sub).unwrap();
                        let c = sub.join(format!("prog{i}.c"));
                        std::fs::write(&c, programl_testkit::c_program(i)).unwrap();
                        for level in LEVELS {
                            let ll = sub.join(format!("prog{i}.{level}.ll"));
                            let out = Command::new(clang())
                                .args(["-S", "-emit-llvm", "-w", &format!("-{level}"), "-o"])
                                .arg(&ll)
                                .arg(&c)
                                .output()
                                .unwrap();
                            assert!(out.status.success(), "clang {}: {}", c.display(), String::from_utf8_lossy(&out.stderr));
                        }
                        std::fs::remove_file(&c).unwrap();
                    }
                });
            }
        });
        std::fs::write(root.join(BROKEN[0]), "define i32 @f( {\n").unwrap();
        std::fs::write(root.join(BROKEN[1]), b"BC\xC0\xDE\x00\x01").unwrap();
        std::fs::write(root.join("complete"), "").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(scratch.keep(), &dir).unwrap();
        dir
    })
}

/// A smaller corpus: the first `n` programs (both levels) and the broken
/// files, as symbolic links into the corpus.
fn small_corpus(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..n {
        let sub = format!("proj{}", i % 4);
        std::fs::create_dir_all(dir.path().join(&sub)).unwrap();
        for level in LEVELS {
            let name = format!("{sub}/prog{i}.{level}.ll");
            std::os::unix::fs::symlink(corpus().join(&name), dir.path().join(&name)).unwrap();
        }
    }
    for b in BROKEN {
        std::fs::create_dir_all(dir.path().join(b).parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(corpus().join(b), dir.path().join(b)).unwrap();
    }
    dir
}

fn run_build(ir: &Path, out: &Path, extra: &[&str]) -> String {
    let output = programl().args(["dataset", "build", "--ir"]).arg(ir).arg("--out").arg(out).args(extra).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "dataset build failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

fn all_records(data: &Path) -> Vec<Record> {
    let dataset = Dataset::open(data).unwrap();
    let mut records: Vec<Record> = dataset.records().map(|r| r.unwrap()).collect();
    records.sort_by(|a, b| a.path.cmp(&b.path));
    records
}

fn shard_lines(data: &Path) -> usize {
    std::fs::read_to_string(data.join("manifest.jsonl")).map_or(0, |m| m.lines().filter(|l| l.contains(r#""kind":"shard""#)).count())
}

/// Starts a build and SIGKILLs it once the manifest has `shards` committed
/// shards. Panics if the build finished first. One record per shard: each
/// commit costs three fsyncs, which keeps even a release build of the corpus
/// running for most of a second, time enough to kill it mid-run.
fn build_and_kill(ir: &Path, out: &Path, shards: usize) {
    let mut child = programl()
        .args(["dataset", "build", "-j", "2", "--shard-size", "1", "--ir"])
        .arg(ir)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while shard_lines(out) < shards {
        assert!(child.try_wait().unwrap().is_none(), "the build finished before it could be killed");
        assert!(Instant::now() < deadline, "no shard after 300 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(status.code().is_none(), "the build exited by itself ({status}) before the kill");
}

fn recorded_inputs(data: &Path) -> Vec<String> {
    let dataset = Dataset::open(data).unwrap();
    let mut inputs: Vec<String> = dataset.shards().iter().flat_map(|s| s.inputs.clone()).collect();
    inputs.extend(dataset.failures().iter().map(|f| f.input.clone()));
    inputs
}

#[test]
fn killed_and_resumed_build_equals_a_clean_build() {
    let ir = corpus();
    let clean = tempfile::tempdir().unwrap();
    let clean_report = run_build(ir, clean.path(), &["-j", "2"]);
    assert!(clean_report.contains(&format!("{INPUTS} IR files, 0 already recorded")), "{clean_report}");
    assert!(clean_report.contains(&format!("this run: {} ok, 2 failed", INPUTS - 2)), "{clean_report}");
    assert!(clean_report.contains("labels/s") && clean_report.contains("peak RSS"), "{clean_report}");

    let data = tempfile::tempdir().unwrap();
    let out = data.path();
    build_and_kill(ir, out, 1);
    let after_first = recorded_inputs(out).len();
    assert!((1..INPUTS).contains(&after_first), "{after_first} inputs recorded after the first kill");

    // What a kill between a shard's rename and its manifest line leaves: a
    // complete shard no line names. Plus a temporary file and a torn line.
    let first = Dataset::open(out).unwrap().shards()[0].path.clone();
    std::fs::copy(&first, out.join("shard-999999.pgds")).unwrap();
    std::fs::write(out.join("shard-000777.pgds.tmp"), b"partial").unwrap();
    let mut manifest = std::fs::OpenOptions::new().append(true).open(out.join("manifest.jsonl")).unwrap();
    std::io::Write::write_all(&mut manifest, br#"{"kind":"shard","file":"shard-000999.pgds","records":3,"#).unwrap();
    drop(manifest);

    let shards_now = shard_lines(out);
    build_and_kill(ir, out, shards_now + 3);
    assert!(!out.join("shard-999999.pgds").exists(), "orphan shard survived a resume");
    assert!(!out.join("shard-000777.pgds.tmp").exists());
    let after_second = recorded_inputs(out).len();
    assert!(after_second > after_first && after_second < INPUTS, "{after_first} then {after_second}");

    let report = run_build(ir, out, &["-j", "2", "--shard-size", "3"]);
    assert!(report.contains(&format!("{after_second} already recorded")), "{report}");

    // Every input exactly once, as a record or a failure.
    let mut inputs = recorded_inputs(out);
    assert_eq!(inputs.len(), INPUTS, "{inputs:?}");
    inputs.sort();
    inputs.dedup();
    assert_eq!(inputs.len(), INPUTS, "an input is recorded twice");
    let failures: BTreeSet<String> = Dataset::open(out).unwrap().failures().iter().map(|f| f.input.clone()).collect();
    assert_eq!(failures, BROKEN.iter().map(|s| s.to_string()).collect());

    // Only committed shards are left on disk.
    let dataset = Dataset::open(out).unwrap();
    let committed: BTreeSet<PathBuf> = dataset.shards().iter().map(|s| s.path.clone()).collect();
    let on_disk: BTreeSet<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pgds" || e == "tmp"))
        .collect();
    assert_eq!(on_disk, committed);

    // Same records, same examples as the clean build.
    let resumed = all_records(out);
    let reference = all_records(clean.path());
    assert_eq!(resumed.len(), INPUTS - 2);
    assert_eq!(resumed.iter().map(|r| &r.path).collect::<Vec<_>>(), reference.iter().map(|r| &r.path).collect::<Vec<_>>());
    for (a, b) in resumed.iter().zip(&reference) {
        assert!(a == b, "{}: resumed record differs from the clean build's", a.path);
    }

    // A finished dataset resumes to a no-op.
    let again = run_build(ir, out, &[]);
    assert!(again.contains(&format!("{INPUTS} already recorded; this run: 0 ok, 0 failed, 0 shard(s)")), "{again}");
}

#[test]
fn records_hold_the_graph_and_the_examples_of_a_fresh_analysis() {
    let ir = small_corpus(12);
    let data = tempfile::tempdir().unwrap();
    run_build(ir.path(), data.path(), &["--seed", "5"]);
    let records = all_records(data.path());
    assert_eq!(records.len(), 24);
    let mut examples = BTreeMap::new();
    for r in &records {
        let context = inkwell::context::Context::create();
        let module = programl::ir::load_module(&context, &ir.path().join(&r.path)).unwrap();
        let graph = build(&module, &BuildOptions::default());
        assert_eq!(r.graph, StoredGraph::from_graph(&graph), "{}", r.path);
        assert_eq!(r.key, split_key(Path::new(&r.path)));
        assert_eq!(r.split, split_of(&r.key));
        let mut analyzer = Analyzer::new(&graph);
        for task in Task::ALL {
            let roots = analyzer.sampled_roots(task, 5);
            let stored: Vec<u32> = r.examples(task).iter().map(|e| e.root).collect();
            assert_eq!(stored, roots, "{}: {task}", r.path);
            assert!(roots.len() <= graph.node_count().div_ceil(10).min(10));
            for e in r.examples(task) {
                let labels = analyzer.analyze(task, e.root).unwrap();
                assert_eq!((e.steps, &e.positives), (labels.steps, &labels.positives), "{}: {task} root {}", r.path, e.root);
            }
            *examples.entry(task).or_insert(0) += r.examples(task).len();
        }
    }
    // Every task has examples on this corpus (subexpressions need -O0's
    // repeated `argc * r + 7`).
    for task in Task::ALL {
        assert!(examples[&task] > 0, "no {task} examples: {examples:?}");
    }
    // Another seed picks other roots for at least some graph.
    let other = tempfile::tempdir().unwrap();
    run_build(ir.path(), other.path(), &["--seed", "6"]);
    let differs = all_records(other.path()).iter().zip(&records).any(|(a, b)| a.examples != b.examples);
    assert!(differs, "--seed changes nothing");
    // Resuming with another seed is refused.
    let out = programl().args(["dataset", "build", "--seed", "7", "--ir"]).arg(ir.path()).arg("--out").arg(data.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seed 5"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn splits_follow_the_source_and_queries_filter() {
    let ir = corpus();
    let data = tempfile::tempdir().unwrap();
    run_build(ir, data.path(), &[]);
    let dataset = Dataset::open(data.path()).unwrap();
    let records = all_records(data.path());
    // Both optimisation levels of a program share key and split.
    let mut by_key: BTreeMap<&str, BTreeSet<Split>> = BTreeMap::new();
    for r in &records {
        assert_eq!(r.key, r.path.replace(".O0.ll", "").replace(".O2.ll", ""));
        by_key.entry(&r.key).or_default().insert(r.split);
    }
    assert_eq!(by_key.len(), PROGRAMS);
    assert!(by_key.values().all(|s| s.len() == 1));
    let per_split: BTreeMap<Split, usize> = records.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.split).or_default() += 1;
        m
    });
    assert_eq!(per_split.len(), 3, "{per_split:?}");

    // Query counts agree with filtering by hand, for every combination.
    for task in Task::ALL {
        for split in Split::ALL {
            for subset in Subset::ALL {
                let query = Query { task: Some(task), split: Some(split), subset };
                let got = dataset.examples(query).map(|e| e.unwrap()).collect::<Vec<_>>();
                let expected: usize = records
                    .iter()
                    .filter(|r| r.split == split)
                    .map(|r| r.examples(task).iter().filter(|e| subset.contains(e.steps)).count())
                    .sum();
                assert_eq!(got.len(), expected, "{task} {split} {subset}");
                assert!(got.iter().all(|e| e.task == task && e.record.split == split && subset.contains(e.example().steps)));
            }
        }
    }
    let all = dataset.examples(Query::default()).count();
    assert_eq!(all, records.iter().map(|r| r.examples.values().map(Vec::len).sum::<usize>()).sum::<usize>());
    // The subsets are not trivial on this corpus.
    let steps = |s| dataset.examples(Query { subset: s, ..Query::default() }).count();
    assert!(steps(Subset::Ddf30) < steps(Subset::Ddf60) || steps(Subset::Ddf60) < all, "no example beyond 30 steps");
    assert_eq!(dataset.records_in(Split::Test).count(), per_split[&Split::Test]);
}

#[test]
fn corrupt_shards_are_named_and_the_others_stay_readable() {
    let ir = small_corpus(10);
    let data = tempfile::tempdir().unwrap();
    run_build(ir.path(), data.path(), &["--shard-size", "4"]);
    let dataset = Dataset::open(data.path()).unwrap();
    let shards = dataset.shards().to_vec();
    assert_eq!(shards.len(), 5);
    let total = dataset.record_count();
    // Flip one byte in the middle of shard 1, truncate shard 3.
    let mut bytes = std::fs::read(&shards[1].path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&shards[1].path, bytes).unwrap();
    let bytes = std::fs::read(&shards[3].path).unwrap();
    std::fs::write(&shards[3].path, &bytes[..bytes.len() - 10]).unwrap();

    let (mut ok, mut errors) = (0, Vec::new());
    for r in dataset.records() {
        match r {
            Ok(_) => ok += 1,
            Err(e) => errors.push(e),
        }
    }
    assert_eq!(ok, total - shards[1].records as usize - shards[3].records as usize);
    assert_eq!(errors.len(), 2);
    let names: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert!(matches!(&errors[0], DatasetError::CorruptShard { shard, .. } if *shard == shards[1].path));
    assert!(names[0].contains(&shards[1].path.display().to_string()) && names[0].contains("checksum"), "{names:?}");
    assert!(names[1].contains(&shards[3].path.display().to_string()) && names[1].contains("truncated"), "{names:?}");

    // A shard swapped for another valid one is caught by the manifest.
    std::fs::copy(&shards[0].path, &shards[2].path).unwrap();
    let e = dataset.read_shard(2).unwrap_err().to_string();
    assert!(e.contains("shard-000003.pgds") && e.contains("the manifest committed"), "{e}");

    // stats reports them and fails; vocab refuses to build from part of the data.
    let out = programl().args(["dataset", "stats"]).arg(data.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("shard-000002.pgds: corrupt shard") && stderr.contains("shard-000004.pgds: corrupt shard"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("unreadable"));
    let out = programl().args(["vocab", "build"]).arg(data.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt shard"));
}

#[test]
fn a_resumed_build_rebuilds_shards_lost_from_the_disk() {
    let ir = small_corpus(10);
    let inputs_n = 10 * LEVELS.len() + 2;
    let data = tempfile::tempdir().unwrap();
    let out = data.path();
    run_build(ir.path(), out, &["--shard-size", "4"]);
    let reference = all_records(out);
    let shards = Dataset::open(out).unwrap().shards().to_vec();
    assert_eq!(shards.len(), 5);
    // One moved elsewhere and linked back: still there.
    let moved = data.path().join("elsewhere.pgds");
    std::fs::rename(&shards[0].path, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &shards[0].path).unwrap();
    // One deleted, one cut short: a reader names both, a resume rebuilds both.
    std::fs::remove_file(&shards[1].path).unwrap();
    let e = Dataset::open(out).unwrap().read_shard(1).unwrap_err();
    assert!(matches!(&e, DatasetError::CorruptShard { shard, .. } if *shard == shards[1].path), "{e}");
    assert!(e.to_string().contains("missing: the manifest committed it with 4 record(s)"), "{e}");
    let bytes = std::fs::read(&shards[3].path).unwrap();
    std::fs::write(&shards[3].path, &bytes[..bytes.len() - 10]).unwrap();

    let output = programl().args(["dataset", "build", "--shard-size", "4", "--ir"]).arg(ir.path()).arg("--out").arg(out).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lost = |shard: &programl_dataset::ShardInfo, why: &str| {
        format!("committed shard {} is lost ({why}", shard.path.display()) + &format!("): its {} record(s) are built again", shard.records)
    };
    assert!(stderr.contains(&lost(&shards[1], "missing")), "{stderr}");
    let damaged = shards[3].path.with_extension("pgds.damaged");
    let why = format!("{} bytes on the disk, {} committed, the file kept as {}", bytes.len() - 10, bytes.len(), damaged.display());
    assert!(stderr.contains(&lost(&shards[3], &why)), "{stderr}");
    assert_eq!(stderr.matches("is lost").count(), 2, "{stderr}");
    assert!(shards[0].path.is_symlink(), "the linked shard was left as it was");
    assert_eq!(std::fs::read(&damaged).unwrap(), bytes[..bytes.len() - 10], "the damaged file is kept as it was");
    let again = shards[1].records + shards[3].records;
    let recorded = inputs_n as u32 - again;
    assert!(stdout.contains(&format!("{recorded} already recorded; this run: {again} ok, 0 failed")), "{stdout}");

    // Every record back, equal to the first build's; every shard readable.
    let dataset = Dataset::open(out).unwrap();
    assert!(dataset.records().all(|r| r.is_ok()));
    assert_eq!(all_records(out), reference);
    let mut inputs = recorded_inputs(out);
    inputs.sort();
    inputs.dedup();
    assert_eq!(inputs.len(), inputs_n);
    // And a further resume finds nothing lost.
    let output = programl().args(["dataset", "build", "--ir"]).arg(ir.path()).arg("--out").arg(out).output().unwrap();
    assert!(output.status.success() && !String::from_utf8_lossy(&output.stderr).contains("lost"));
    assert!(String::from_utf8_lossy(&output.stdout).contains(&format!("{inputs_n} already recorded; this run: 0 ok")));
}

#[test]
fn stats_plot_and_vocabulary() {
    let ir = corpus();
    let data = tempfile::tempdir().unwrap();
    run_build(ir, data.path(), &[]);
    let plot = data.path().join("stats.png");
    let out = programl().args(["dataset", "stats"]).arg(data.path()).arg("--plot").arg(&plot).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("records: {}", INPUTS - 2)), "{stdout}");
    assert!(stdout.contains("2 failed inputs"), "{stdout}");
    for needle in ["DDF-30", "DDF-200", "reachability", "subexpressions", "positive", "nodes per graph", "steps, liveness"] {
        assert!(stdout.contains(needle), "{needle} missing from\n{stdout}");
    }
    let png = std::fs::read(&plot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "not a plot: {} bytes", png.len());

    // Without a font the plot is still drawn, without text.
    let bare = data.path().join("bare.png");
    let out = programl().args(["dataset", "stats"]).arg(data.path()).arg("--plot").arg(&bare).args(["--font", "none"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read(&bare).unwrap().starts_with(b"\x89PNG"));

    let vocab_path = data.path().join("v.json");
    let out = programl().args(["vocab", "build"]).arg(data.path()).arg("-o").arg(&vocab_path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("coverage val") && stdout.contains("coverage test"), "{stdout}");
    let vocab = Vocabulary::load(&vocab_path).unwrap();
    let dataset = Dataset::open(data.path()).unwrap();
    // Train texts all have ids; ids follow descending count.
    let mut train_texts = BTreeSet::new();
    for r in dataset.records_in(Split::Train) {
        train_texts.extend(r.unwrap().graph.texts);
    }
    assert_eq!(vocab.len(), train_texts.len() + 1);
    assert!(train_texts.iter().all(|t| vocab.id(t) != 0));
    assert_eq!(vocab.id("no such text"), 0);
    assert_eq!(vocab.text(0), Some("<unknown>"));
    assert!((1..vocab.len() as u32 - 1).all(|i| vocab.count_of(i) >= vocab.count_of(i + 1)));
    assert_eq!(vocab.text(vocab.id("[external]")), Some("[external]"));
    // Deterministic: a second build writes the same file.
    let second = data.path().join("v2.json");
    assert!(programl().args(["vocab", "build"]).arg(data.path()).arg("-o").arg(&second).output().unwrap().status.success());
    assert_eq!(std::fs::read(&vocab_path).unwrap(), std::fs::read(&second).unwrap());
}

#[test]
fn a_second_build_on_the_same_dataset_is_refused_while_one_runs() {
    let ir = small_corpus(6);
    let data = tempfile::tempdir().unwrap();
    let config = programl_dataset::BuildConfig::new(ir.path(), data.path());
    let held = programl_dataset::Builder::open(config).unwrap();
    let out = programl().args(["dataset", "build", "--ir"]).arg(ir.path()).arg("--out").arg(data.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another `dataset build`"), "{}", String::from_utf8_lossy(&out.stderr));
    let report = held.run(&|_| {}).unwrap();
    assert_eq!((report.ok, report.failed.len(), report.total_records), (12, 2, 12));
}

/// `--out` naming a regular file is refused as not a directory, before
/// anything is written (it said only "File exists").
#[test]
fn out_that_is_a_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let ir = dir.path().join("ir");
    std::fs::create_dir(&ir).unwrap();
    std::fs::write(ir.join("f.ll"), "define i32 @f(i32 %x) {\n  ret i32 %x\n}\n").unwrap();
    let file = dir.path().join("hello.ll");
    std::fs::write(&file, "keep").unwrap();
    let output = programl().args(["dataset", "build", "--ir"]).arg(&ir).arg("--out").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("{}: not a directory", file.display())), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

/// The corpus manifests (`scripts/corpus.sh`'s `corpus-manifest.json`) of
/// the IR directory, at its top and one level down, are recorded in the
/// dataset and shown by `stats`; a resumed build whose IR directory now
/// holds another corpus is refused with both names, and one without any
/// still says so.
#[test]
fn the_dataset_records_the_corpus_it_was_built_from() {
    let ir = small_corpus(4);
    let manifest = |id: &str, set: &str| {
        format!(
            r#"{{"format": "programl-corpus-manifest", "version": 1, "id": "{id}", "set": "{set}", "pointers": "opaque",
               "levels": ["O0", "O2"], "compiler": "clang", "projects": [], "missing": [], "not_in_lock": []}}"#
        )
    };
    std::fs::write(ir.path().join("corpus-manifest.json"), manifest("0123456789abcdef", "corpus")).unwrap();
    std::fs::write(ir.path().join("proj1").join("corpus-manifest.json"), manifest("fedcba9876543210", "cxx")).unwrap();
    let data = tempfile::tempdir().unwrap();
    run_build(ir.path(), data.path(), &["--shard-size", "2"]);
    let info = Dataset::open(data.path()).unwrap().info().clone();
    let names: Vec<String> = info.corpus.iter().map(|c| c.name()).collect();
    assert_eq!(names, ["corpus-opaque-O0-O2@0123456789abcdef", "cxx-opaque-O0-O2@fedcba9876543210"]);
    assert_eq!(info.corpus[1].path, "proj1/corpus-manifest.json");
    let out = programl().args(["dataset", "stats", "--no-plot"]).arg(data.path()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("corpus: cxx-opaque-O0-O2@fedcba9876543210 (proj1/corpus-manifest.json)"), "{stdout}");
    // The same corpus resumes (a no-op here).
    run_build(ir.path(), data.path(), &[]);
    // Another corpus in the same directory does not.
    std::fs::write(ir.path().join("proj1").join("corpus-manifest.json"), manifest("1111111111111111", "cxx")).unwrap();
    let out = programl().args(["dataset", "build", "--ir"]).arg(ir.path()).arg("--out").arg(data.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a resume from another corpus was accepted");
    assert!(
        stderr.contains("cxx-opaque-O0-O2@fedcba9876543210") && stderr.contains("cxx-opaque-O0-O2@1111111111111111") && stderr.contains("new dataset directory"),
        "{stderr}"
    );
    // A manifest that is not one is named.
    std::fs::write(ir.path().join("corpus-manifest.json"), "{}").unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let out = programl().args(["dataset", "build", "--ir"]).arg(ir.path()).arg("--out").arg(fresh.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("corpus-manifest.json: not a corpus manifest"), "{stderr}");
    // No manifest: none recorded, and stats says so.
    let bare = small_corpus(2);
    let data = tempfile::tempdir().unwrap();
    run_build(bare.path(), data.path(), &[]);
    assert!(Dataset::open(data.path()).unwrap().info().corpus.is_empty());
    let out = programl().args(["dataset", "stats", "--no-plot"]).arg(data.path()).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("corpus: none recorded"));
}
