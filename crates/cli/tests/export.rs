//! `programl dataset export` end to end: a small dataset built with the CLI
//! from C programs compiled by clang (generated once into cargo's scratch
//! directory, as in `tests/dataset.rs`) is exported in upstream ProGraML's
//! layout and read back with plain Python protobuf (`export_check.py`, in
//! the project venv, with the message definitions of the ProGraML 0.3.2
//! wheel). The script checks, for every task and split, each graph, each
//! label file's roots, labels and step counts against the store, the split
//! links and the vocabulary file; this test checks that re-exporting
//! changes nothing, that the step-count subset leaves graphs out, and that
//! the checker does fail on a wrong file.
//!
//! The venv and the wheel come from `scripts/bootstrap.sh`; without them
//! this test fails (it never skips).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use programl::format::{features_list_bytes, GraphFeatures};
use programl_dataset::export::{analysis_dir, graph_name, GRAPH_SUFFIX, LABELS_SUFFIX};
use programl_dataset::{split_key, split_of, Dataset, Record, Split, Subset, Task};
use serde_json::{json, Value};

/// A file of one function: a chain of branches so long that every
/// dominance example has more than 30 steps.
const CHAIN: &str = "chains/long.O0.ll";
/// A file whose name needs escaping.
const ODD: &str = "odd dir/x+y %1.O0.ll";
const LEVELS: [&str; 2] = ["O0", "O1"];

fn programl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_programl"))
}

fn clang() -> PathBuf {
    Path::new(programl::LLVM_BINDIR).join("clang")
}

/// C source of program `i`: loops, branches, a switch, recursion, pointer
/// chasing and repeated expressions, so every task has examples.
fn program(i: usize) -> String {
    let ops = ["+", "-", "*", "^", "|"];
    let op = ops[i % ops.len()];
    let k = 3 + i % 7;
    let mut s = String::from("struct node { int value; struct node *next; };\nint table[64];\n");
    s += &format!("int loop(int n) {{ int s = 0; for (int j = 0; j < n; j++) s = s {op} table[j % 64] {op} {k}; return s; }}\n");
    s += &format!(
        "int branch(int x) {{ if (x > {k}) return x {op} 1; else if (x < -{k}) return x * 2; else if (x == 0) return {k}; return x - {k}; }}\n"
    );
    s += &format!(
        "int pick(int x) {{ switch (x % 4) {{ case 0: return x {op} {k}; case 1: return x + 1; case 2: x *= 3; /* fall through */ default: return x - {k}; }} }}\n"
    );
    s += &format!("int rec(int n) {{ return n < 2 ? n : rec(n - 1) {op} rec(n - 2); }}\n");
    s += &format!(
        "int walk(struct node *p) {{ int s = {k}; while (p) {{ if (p->value > s) s = p->value {op} s; p = p->next; }} return s; }}\n"
    );
    s += "int same(int a, int b, int c) { int x = a * b + c; if (c > 0) x += (a * b + c) << 1; return x ^ (a * b + c); }\n";
    // Member accesses of a local struct: one address computation per use
    // at -O0, common subexpressions of the alloca.
    s += "struct pair { int a, b; };\nint fields(int x) { struct pair p = { x, x + 1 }; p.b += p.a; return p.b * p.b + p.a; }\n";
    s += "int main(int argc, char **argv) {\n  struct node n = { argc, 0 };\n";
    s += "  int r = loop(argc) + branch(argc) + pick(argc) + rec(argc) + walk(&n);\n";
    s += "  return r + same(argc, r, argc - 1) + fields(r);\n}\n";
    s
}

fn chain_program() -> String {
    let mut s = String::from("int chain(int x) {\n");
    for c in 0..40 {
        s += &format!("  if (x > {c}) x = x * {} + {c}; else x ^= {};\n", c % 7 + 1, c + 3);
    }
    s += "  return x;\n}\n";
    s
}

/// The program stems `projP/progI`: the first ones that give the train
/// split three sources and validation and test two each.
fn stems() -> Vec<String> {
    let mut need = [3usize, 2, 2];
    let mut stems = Vec::new();
    for i in 0.. {
        if need.iter().all(|&n| n == 0) {
            break;
        }
        let stem = format!("proj{}/prog{i}", i % 2);
        let split = split_of(&split_key(Path::new(&format!("{stem}.O0.ll"))));
        if need[split as usize] > 0 {
            need[split as usize] -= 1;
            stems.push(stem);
        }
    }
    stems
}

fn compile(source: &str, c: &Path, ll: &Path, level: &str) {
    std::fs::create_dir_all(ll.parent().unwrap()).unwrap();
    std::fs::write(c, source).unwrap();
    let out = Command::new(clang()).args(["-S", "-emit-llvm", "-w", &format!("-{level}"), "-o"]).arg(ll).arg(c).output().unwrap();
    assert!(out.status.success(), "clang {}: {}", c.display(), String::from_utf8_lossy(&out.stderr));
    std::fs::remove_file(c).unwrap();
}

/// The corpus, generated once (in a scratch directory, then renamed).
fn corpus() -> &'static Path {
    static CORPUS: OnceLock<PathBuf> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("export-corpus-v2");
        if dir.join("complete").exists() {
            return dir;
        }
        let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let root = scratch.path();
        for (i, stem) in stems().iter().enumerate() {
            for level in LEVELS {
                compile(&program(i), &root.join(format!("{stem}.c")), &root.join(format!("{stem}.{level}.ll")), level);
            }
        }
        compile(&chain_program(), &root.join("chain.c"), &root.join(CHAIN), "O0");
        compile(&program(99), &root.join("odd.c"), &root.join(ODD), "O0");
        std::fs::write(root.join("complete"), "").unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(scratch.keep(), &dir).unwrap();
        dir
    })
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `programl dataset export`; returns its standard output.
fn export(data: &Path, split: Split, task: &str, subset: Subset, out: &Path) -> String {
    let output = run(programl()
        .args(["dataset", "export", "--data"])
        .arg(data)
        .args(["--split", split.name(), "--task", task, "--subset", subset.name(), "--out"])
        .arg(out));
    String::from_utf8(output.stdout).unwrap()
}

/// The project venv's Python, with `google.protobuf`; panics with the fix
/// when either is missing.
fn python() -> PathBuf {
    let venv = programl_testkit::cache_dir().join("venv");
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "the project venv is missing ({} not found): run `bash scripts/bootstrap.sh` (this test needs it and does not skip)",
        python.display()
    );
    let out = Command::new(&python).args(["-c", "import google.protobuf"]).output().unwrap();
    assert!(
        out.status.success(),
        "{} cannot import google.protobuf: run `bash scripts/bootstrap.sh` (it installs protobuf into the venv): {}",
        python.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    python
}

/// The wheel's `programl` package directory (the parent of the binaries
/// the conformance tests use).
fn wheel_package() -> PathBuf {
    let bin = std::env::var_os("PROGRAML_ORACLE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(programl_testkit::default_oracle_dir);
    let package = bin.parent().unwrap().to_path_buf();
    assert!(
        package.join("proto/util_pb2.py").is_file(),
        "the ProGraML 0.3.2 wheel is not unpacked ({} not found): run `bash scripts/bootstrap.sh`",
        package.join("proto/util_pb2.py").display()
    );
    package
}

fn check(python: &Path, expected: &Path) -> Output {
    Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/export_check.py"))
        .arg(expected)
        .arg(wheel_package())
        .output()
        .unwrap()
}

/// Every file under `dir` with its bytes (symbolic links: their target).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                files.insert(path.clone(), std::fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes());
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// What a directory holds after `exports` (split, tasks, subset), in
/// order, as `export_check.py` reads it.
fn expected_dir(out: &Path, records: &[Record], exports: &[(Split, &[Task], Subset)]) -> Value {
    let mut graphs = BTreeMap::new();
    let mut splits: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut labels: BTreeMap<&str, BTreeMap<String, Value>> = BTreeMap::new();
    for &(split, tasks, subset) in exports {
        splits.entry(split.name()).or_default();
        for r in records.iter().filter(|r| r.split == split) {
            let name = graph_name(&r.path);
            let mut any = false;
            for &task in tasks {
                let files = labels.entry(analysis_dir(task)).or_default();
                let examples: Vec<Value> = r
                    .examples(task)
                    .iter()
                    .filter(|e| subset.contains(e.steps))
                    .map(|e| json!({"root": e.root, "steps": e.steps, "positives": e.positives}))
                    .collect();
                if examples.is_empty() {
                    files.remove(&name);
                } else {
                    any = true;
                    files.insert(name.clone(), Value::Array(examples));
                }
            }
            if any {
                graphs.insert(name.clone(), json!({"texts": r.graph.texts, "edges": r.graph.edges.len()}));
                splits.entry(split.name()).or_default().insert(name);
            }
        }
    }
    json!({"out": out, "graphs": graphs, "splits": splits, "labels": labels})
}

#[test]
fn export_reads_back_with_python_protobuf() {
    // Fail early and clearly without the venv or the wheel.
    let python = python();
    wheel_package();

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    run(programl().args(["dataset", "build", "-j", "2", "--ir"]).arg(corpus()).arg("--out").arg(&data));
    let dataset = Dataset::open(&data).unwrap();
    let records: Vec<Record> = dataset.records().map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), 2 * stems().len() + 2);
    // The fixture exercises every task in every split.
    for split in Split::ALL {
        for task in Task::ALL {
            let n: usize = records.iter().filter(|r| r.split == split).map(|r| r.examples(task).len()).sum();
            assert!(n > 0, "no {task} example in the {split} split of the fixture");
        }
    }

    // A: every split and task, all examples; then once more, unchanged.
    let a = tmp.path().join("a");
    let mut exports_a = Vec::new();
    for split in Split::ALL {
        let stdout = export(&data, split, "all", Subset::Ddf, &a);
        assert!(stdout.contains("mode \"paper\"") && stdout.contains("not upstream's"), "{stdout}");
        assert!(stdout.contains("labels/domtree/"), "{stdout}");
        exports_a.push((split, &Task::ALL[..], Subset::Ddf));
    }
    let before = snapshot(&a);
    export(&data, Split::Train, "all", Subset::Ddf, &a);
    assert_eq!(snapshot(&a), before, "exporting again changed the export");
    let odd = graph_name(ODD);
    assert_eq!(odd, "odd%20dir+x%2By%20%251.O0.ll");
    assert!(before.keys().any(|p| p.ends_with(format!("graphs/{odd}{GRAPH_SUFFIX}"))), "{odd} not exported");

    // B and C: DDF-30 leaves the chain's dominance examples (all longer)
    // out. B first exports all of them, so its label file goes stale and
    // is removed while its graph stays; C never writes the graph.
    let chain = records.iter().find(|r| r.path == CHAIN).unwrap();
    let dominance = chain.examples(Task::Dominance);
    assert!(!dominance.is_empty() && dominance.iter().all(|e| e.steps > 30), "{dominance:?}");
    let (split, chain_name) = (chain.split, graph_name(CHAIN));
    let b = tmp.path().join("b");
    export(&data, split, "dominance", Subset::Ddf, &b);
    let stale = b.join("labels/domtree").join(format!("{chain_name}{LABELS_SUFFIX}"));
    assert!(stale.is_file());
    let stdout = export(&data, split, "domtree", Subset::Ddf30, &b);
    let gone = records
        .iter()
        .filter(|r| r.split == split && !r.examples(Task::Dominance).is_empty())
        .filter(|r| !r.examples(Task::Dominance).iter().any(|e| Subset::Ddf30.contains(e.steps)))
        .count();
    assert!(!stale.exists() && stdout.contains(&format!("removed {gone} stale label file")), "{stdout}");
    assert!(b.join("graphs").join(format!("{chain_name}{GRAPH_SUFFIX}")).is_file());
    let c = tmp.path().join("c");
    export(&data, split, "dominance", Subset::Ddf30, &c);
    assert!(!c.join("graphs").join(format!("{chain_name}{GRAPH_SUFFIX}")).exists());
    assert!(!c.join(split.name()).join(format!("{chain_name}{GRAPH_SUFFIX}")).exists());

    // The train split's vocabulary: by count, then text.
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    let mut total = 0;
    for r in records.iter().filter(|r| r.split == Split::Train) {
        for t in &r.graph.texts {
            *counts.entry(t).or_default() += 1;
            total += 1;
        }
    }
    let mut vocab: Vec<(&str, u64)> = counts.into_iter().collect();
    vocab.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));

    let dom: &[Task] = &[Task::Dominance];
    let expected = json!({
        "vocab": vocab,
        "vocab_total": total,
        "dirs": [
            expected_dir(&a, &records, &exports_a),
            expected_dir(&b, &records, &[(split, dom, Subset::Ddf), (split, dom, Subset::Ddf30)]),
            expected_dir(&c, &records, &[(split, dom, Subset::Ddf30)]),
        ],
    });
    let expected_path = tmp.path().join("expected.json");
    std::fs::write(&expected_path, serde_json::to_vec(&expected).unwrap()).unwrap();
    let out = check(&python, &expected_path);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "export_check.py found problems:\n{stdout}\n{stderr}");
    eprintln!("{}", stdout.trim());
    assert!(stdout.contains(" examples") && !stdout.contains("checked: 0 graphs"), "{stdout}");

    // The checker fails on a wrong step count.
    let (name, record) = records
        .iter()
        .filter(|r| r.split == Split::Train)
        .find_map(|r| (!r.examples(Task::Liveness).is_empty()).then(|| (graph_name(&r.path), r)))
        .unwrap();
    let wrong: Vec<GraphFeatures> = record
        .examples(Task::Liveness)
        .iter()
        .map(|e| GraphFeatures::data_flow(record.graph.node_count(), e.root, &e.positives, e.steps + 1).unwrap())
        .collect();
    let file = a.join("labels/liveness").join(format!("{name}{LABELS_SUFFIX}"));
    std::fs::write(&file, features_list_bytes(&wrong)).unwrap();
    let out = check(&python, &expected_path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "export_check.py accepted a wrong step count in {}", file.display());
    assert!(stderr.contains(&format!("{name}{LABELS_SUFFIX} example 0")) && stderr.contains("data_flow_step_count"), "{stderr}");
}

#[test]
fn export_errors_name_the_input() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-dataset");
    let out = programl()
        .args(["dataset", "export", "--data"])
        .arg(&missing)
        .args(["--split", "val", "--task", "all", "--out"])
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no-such-dataset") && stderr.contains("not a dataset"), "{stderr}");
    let out = programl().args(["dataset", "export", "--data", ".", "--split", "dev", "--task", "all", "--out", "x"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown split 'dev'"));
    let out = programl().args(["dataset", "export", "--data", ".", "--split", "val", "--task", "dom", "--out", "x"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("domtree or all"));
}
