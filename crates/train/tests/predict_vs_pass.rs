//! The learned pass and `programl-train` agree: on the same IR files and the
//! same (sampled) roots, with each shipped bundle,
//!
//! - `programl-infer`'s decisions (its sidecar: every labelled node's
//!   probability per root) are `programl-train predict`'s probabilities
//!   within 1e-5, node for node;
//! - the annotations it wrote into the IR, read back by `programl
//!   annotations`, are exactly the nodes `predict` puts above 0.5, with the
//!   same probabilities;
//! - its `verify` figures, pooled over the files, are `programl-train eval`'s
//!   on the same directory (subset DDF: every sampled root);
//! - all of this also under `dtype=bf16` and `dtype=int8` (and the same
//!   `--dtype`), checked on reachability: reduced products where the CPU
//!   has them, and where it has not, one warning from the pass and FP32's
//!   figures; and at the default, `auto`, on datadep.
//!
//! Both sides featurise with `programl::batch` and, on the CPU, run the
//! torch-free inference (`programl-infer`): linked into the plugin inside
//! opt, and into the trainer in its own process. So this checks the whole
//! path: graph and roots in the pass, the options each side passes, and
//! the anchors of the metadata.
//!
//! Needs the plugin and the `programl` CLI built in the same profile
//! (`cargo build --release -p programl-passes -p programl-cli`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const TASKS: [&str; 5] = ["reachability", "dominance", "datadep", "liveness", "subexpressions"];
const TOLERANCE: f64 = 1e-5;

fn profile_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_programl-train")).parent().unwrap().to_path_buf()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn built(name: &str) -> PathBuf {
    let p = profile_dir().join(name);
    assert!(p.exists(), "{} is missing: cargo build --release -p programl-passes -p programl-cli first", p.display());
    p
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn tool(name: &str) -> PathBuf {
    Path::new(programl::LLVM_BINDIR).join(name)
}

/// IR of real C code (the lit suite's input and the demo program) at -O0
/// and -O2, in `dir`.
fn compile_inputs(dir: &Path) -> Vec<PathBuf> {
    let root = workspace();
    let sources = [root.join("llvm-tests/Inputs/infer/prog.c"), root.join("examples/hello.c")];
    let mut out = Vec::new();
    for src in &sources {
        for level in ["-O0", "-O2"] {
            let stem = src.file_stem().unwrap().to_string_lossy();
            let ll = dir.join(format!("{stem}{level}.ll"));
            run(Command::new(tool("clang")).args([level, "-S", "-emit-llvm"]).arg(src).arg("-o").arg(&ll));
            out.push(ll);
        }
    }
    out
}

/// `opt` with the plugin loaded running `pass` on `file`, the IR written to
/// `out`; it must succeed.
fn opt_with(plugin: &Path, pass: &str, file: &Path, out: &Path) -> Output {
    run(Command::new(tool("opt"))
        .arg(format!("-load-pass-plugin={}", plugin.display()))
        .arg(format!("-passes={pass}"))
        .arg(file)
        .arg("-S")
        .arg("-o")
        .arg(out))
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes).lines().filter(|l| l.trim_start().starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// root → node → probability.
type Probabilities = BTreeMap<u64, BTreeMap<u64, f64>>;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    // The bundle's files only: models/<task>/ also holds the training run's
    // checkpoint/ directory, which a bundle does not need.
    for entry in std::fs::read_dir(from).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn pass_predict_and_eval_agree() {
    let plugin = built("libprograml_passes.so");
    let cli = built("programl");
    let tmp = tempfile::tempdir().unwrap();
    let ir_dir = tmp.path().join("ir");
    std::fs::create_dir_all(&ir_dir).unwrap();
    let files = compile_inputs(&ir_dir);

    let mut compared = 0usize;
    // Reachability's probabilities from the pass, by dtype.
    let mut reach: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    // Every task in FP32; reachability also in BF16 and INT8, and
    // datadep at the default, `auto` (INT8 where the CPU has VNNI).
    let runs = TASKS.iter().map(|&t| (t, "f32")).chain([("reachability", "bf16"), ("reachability", "int8"), ("datadep", "auto")]);
    for (task, dtype) in runs {
        // A private copy: the bundles in models/ may be replaced by training
        // while this runs, and both sides must read the same one.
        let bundle = tmp.path().join("models").join(task);
        if !bundle.exists() {
            copy_dir(&workspace().join("models").join(task), &bundle);
        }
        let sidecar = tmp.path().join(format!("{task}-{dtype}.jsonl"));
        let mut pooled = (0u64, 0u64, 0u64);
        // Some files have no eligible root for a task (no common
        // subexpression at -O0): then both sides say nothing.
        let mut roots = 0usize;
        for file in &files {
            let annotated = tmp.path().join(format!("{task}-{dtype}-{}", file.file_name().unwrap().to_string_lossy()));
            let before = std::fs::read_to_string(&sidecar).map(|s| s.lines().count()).unwrap_or(0);
            let pass = format!(
                "programl-infer<model={};device=cpu;threads=1;dtype={dtype};verify;sidecar={}>",
                bundle.display(),
                sidecar.display()
            );
            let out = opt_with(&plugin, &pass, file, &annotated);
            let said = String::from_utf8_lossy(&out.stderr);
            if dtype == "bf16" && !programl_model::cpu_has_bf16() {
                assert!(said.lines().count() == 1 && said.contains("no BF16 instructions"), "{task} {dtype}: {said}");
            } else {
                assert!(said.is_empty(), "{task} {dtype} {}: the pass said:\n{said}", file.display());
            }
            let records: Vec<Value> = json_lines(&std::fs::read(&sidecar).unwrap()).into_iter().skip(before).collect();
            assert_eq!(records.len(), 2, "{task} {}: expected decisions and verify, got {records:?}", file.display());
            let (decisions, verify) = (&records[0], &records[1]);
            assert_eq!((decisions["kind"].as_str(), verify["kind"].as_str()), (Some("decisions"), Some("verify")));
            // The precision in effect, as the record says: INT8 runs on
            // every CPU, `auto` is INT8 where the CPU has VNNI; BF16 where
            // the CPU lacks it is FP32.
            let in_effect = match dtype {
                "bf16" if programl_model::cpu_has_bf16() => "bf16",
                "int8" => "int8",
                "auto" if programl_model::int8_preferred() => "int8",
                _ => "f32",
            };
            assert_eq!(decisions["dtype"].as_str(), Some(in_effect), "{task} {dtype}: the record's dtype");
            let mut pass_p: Probabilities = BTreeMap::new();
            for r in decisions["roots"].as_array().unwrap() {
                let nodes = pass_p.entry(r["root"].as_u64().unwrap()).or_default();
                for pair in r["nodes"].as_array().unwrap() {
                    nodes.insert(pair[0].as_u64().unwrap(), pair[1].as_f64().unwrap());
                }
            }
            if task == "reachability" {
                reach.entry(dtype).or_default().extend(pass_p.values().flat_map(|n| n.values().copied()));
            }
            pooled.0 += verify["tp"].as_u64().unwrap();
            pooled.1 += verify["fp"].as_u64().unwrap();
            pooled.2 += verify["fn"].as_u64().unwrap();

            let out = run(Command::new(env!("CARGO_BIN_EXE_programl-train"))
                .args(["predict", "--roots", "sample", "--json", "--device", "cpu", "--threads", "1", "--dtype", dtype, "--model"])
                .arg(&bundle)
                .arg(file));
            let mut predict_p: Probabilities = BTreeMap::new();
            for line in json_lines(&out.stdout) {
                let nodes = predict_p.entry(line["root"].as_u64().unwrap()).or_default();
                for n in line["nodes"].as_array().unwrap() {
                    nodes.insert(n["node"].as_u64().unwrap(), n["p"].as_f64().unwrap());
                }
            }
            roots += predict_p.len();
            assert_eq!(
                pass_p.keys().collect::<Vec<_>>(),
                predict_p.keys().collect::<Vec<_>>(),
                "{task} {}: the pass and predict chose different roots",
                file.display()
            );
            for (root, nodes) in &predict_p {
                let theirs = &pass_p[root];
                assert_eq!(
                    theirs.keys().collect::<Vec<_>>(),
                    nodes.keys().collect::<Vec<_>>(),
                    "{task} {} root {root}: different labelled nodes",
                    file.display()
                );
                for (node, p) in nodes {
                    let q = theirs[node];
                    assert!((p - q).abs() <= TOLERANCE, "{task} {} root {root} node {node}: predict {p}, pass {q}", file.display());
                    compared += 1;
                }
            }

            // The IR's annotations: the nodes above 0.5, with their probability.
            let out = run(Command::new(&cli).arg("annotations").arg(&annotated));
            let ann: Value = serde_json::from_slice(&out.stdout).unwrap();
            let mut annotated_p: Probabilities = BTreeMap::new();
            for r in ann["predictions"][task].as_array().cloned().unwrap_or_default() {
                let nodes = annotated_p.entry(r["root"].as_u64().unwrap()).or_default();
                for pair in r["positives"].as_array().unwrap() {
                    nodes.insert(pair[0].as_u64().unwrap(), pair[1].as_f64().unwrap());
                }
            }
            for (root, nodes) in &predict_p {
                let positives: BTreeMap<u64, f64> = nodes.iter().filter(|(_, &p)| p > 0.5).map(|(&n, &p)| (n, p)).collect();
                let empty = BTreeMap::new();
                let written = annotated_p.get(root).unwrap_or(&empty);
                assert_eq!(
                    written.keys().collect::<Vec<_>>(),
                    positives.keys().collect::<Vec<_>>(),
                    "{task} {} root {root}: annotated positives differ from predict's",
                    file.display()
                );
                for (node, p) in &positives {
                    assert!((p - written[node]).abs() <= TOLERANCE, "{task} {} root {root} node {node}", file.display());
                }
            }
        }

        assert!(roots > 0, "{task}: no root in any file");
        // verify, pooled over the files, is eval on the same directory.
        let out = run(Command::new(env!("CARGO_BIN_EXE_programl-train"))
            .args(["eval", "--subset", "ddf", "--json", "--device", "cpu", "--threads", "1", "--dtype", dtype, "--model"])
            .arg(&bundle)
            .arg("--data")
            .arg(&ir_dir));
        let eval = json_lines(&out.stdout).pop().expect("eval prints one JSON line");
        let theirs = (eval["tp"].as_u64().unwrap(), eval["fp"].as_u64().unwrap(), eval["fn"].as_u64().unwrap());
        assert_eq!(pooled, theirs, "{task}: verify (tp, fp, fn) pooled over the files vs programl-train eval");
    }
    assert!(compared > 1000, "only {compared} probabilities compared");
    let full = &reach["f32"];
    for (dtype, native) in [("bf16", programl_model::cpu_has_bf16()), ("int8", true)] {
        let reduced = &reach[dtype];
        assert_eq!(full.len(), reduced.len());
        let drift = full.iter().zip(reduced).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        let flipped = full.iter().zip(reduced).filter(|(a, b)| (**a > 0.5) != (**b > 0.5)).count();
        let mean = full.iter().zip(reduced).map(|(a, b)| (a - b).abs()).sum::<f64>() / full.len() as f64;
        eprintln!("dtype={dtype} against f32 on {} probabilities: max {drift}, mean {mean}, {flipped} flipped", full.len());
        if native {
            // The reduced products' rounding, carried over T = 30
            // recurrent steps: small on average, and a node near the
            // boundary may cross it (BF16: 2 of 3,840 here; val F1 moved by
            // at most 0.0004 on every task under BF16, 0.0006 under INT8).
            assert!(
                drift > 0.0 && mean < 0.01 && flipped * 100 < full.len(),
                "dtype={dtype} against f32: max {drift}, mean {mean}, {flipped} flipped"
            );
        } else {
            assert_eq!(drift, 0.0, "no {dtype} products on this CPU: FP32's probabilities");
        }
    }
}

/// Graph-level bundles: `predict` gives each graph the pass's decision, with
/// its probabilities within 1e-5: device mapping per kernel of a module
/// with two (with the auxiliary inputs, and without them through the
/// bundle's `noaux/`), and POJ-104 per module. `predict` on the `.cl`
/// file itself compiles it as the pass's lit test does, to the same
/// decisions.
#[test]
fn graph_level_predict_gives_the_pass_decisions() {
    let plugin = built("libprograml_passes.so");
    let root = workspace();
    let tmp = tempfile::tempdir().unwrap();
    let inputs = root.join("llvm-tests/Inputs/infer");
    let (two, sort) = (tmp.path().join("two.ll"), tmp.path().join("sort.ll"));
    run(Command::new(tool("clang"))
        .args(["-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header", "-target", "spir64", "-O1", "-S", "-emit-llvm"])
        .arg(inputs.join("two_kernels.cl"))
        .arg("-o")
        .arg(&two));
    run(Command::new(tool("clang")).args(["-O0", "-S", "-emit-llvm"]).arg(inputs.join("sort.cpp")).arg("-o").arg(&sort));
    let devmap = tmp.path().join("models/devmap-amd");
    copy_dir(&root.join("models/devmap-amd"), &devmap);
    copy_dir(&root.join("models/devmap-amd/noaux"), &devmap.join("noaux"));
    let poj = tmp.path().join("models/poj104");
    copy_dir(&root.join("models/poj104"), &poj);

    // (bundle, pass parameters beyond the model, predict's --aux, file, decisions expected)
    let cases: [(&Path, &str, Option<&str>, &Path, usize); 3] = [
        (&devmap, "transfer=4096;wgsize=256", Some("transfer=4096,wgsize=256"), &two, 2),
        (&devmap, "", None, &two, 2),
        (&poj, "", None, &sort, 1),
    ];
    let mut seen_classes = BTreeMap::new();
    for (bundle, params, aux, file, expected) in cases {
        let sidecar = tmp.path().join("side.jsonl");
        let _ = std::fs::remove_file(&sidecar);
        let params = if params.is_empty() { String::new() } else { format!(";{params}") };
        let pass =
            format!("programl-infer<model={};device=cpu;threads=1;dtype=f32;sidecar={}{params}>", bundle.display(), sidecar.display());
        let out = run(Command::new(tool("opt"))
            .arg(format!("-load-pass-plugin={}", plugin.display()))
            .arg(format!("-passes={pass}"))
            .arg(file)
            .args(["-S", "-o", "/dev/null"]));
        assert!(out.stderr.is_empty(), "the pass said: {}", String::from_utf8_lossy(&out.stderr));
        let decisions = json_lines(&std::fs::read(&sidecar).unwrap());
        assert_eq!(decisions.len(), expected, "{decisions:?}");

        let mut cmd = Command::new(env!("CARGO_BIN_EXE_programl-train"));
        cmd.args(["predict", "--json", "--device", "cpu", "--threads", "1", "--dtype", "f32", "--model"]).arg(bundle).arg(file);
        if let Some(a) = aux {
            cmd.args(["--aux", a]);
        }
        let predicted = json_lines(&run(&mut cmd).stdout).remove(0);
        let graphs = predicted["graphs"].as_array().unwrap();
        assert_eq!(graphs.len(), expected, "{predicted}");
        for (d, g) in decisions.iter().zip(graphs) {
            let name = g["name"].as_str().unwrap();
            if let Some(k) = d["kernel"].as_str() {
                assert!(name.ends_with(&format!(":{k}")), "the pass decided {k}, predict {name}");
            }
            assert_eq!(d["class"], g["class"], "{name}");
            let (theirs, ours) = (d["probabilities"].as_object().unwrap(), g["probabilities"].as_object().unwrap());
            assert_eq!(theirs.len(), ours.len());
            for (class, p) in ours {
                let q = theirs[class].as_f64().unwrap();
                assert!((p.as_f64().unwrap() - q).abs() <= TOLERANCE, "{name} class {class}: predict {p}, pass {q}");
            }
            seen_classes.insert(format!("{name} {aux:?}"), g["class"].clone());
        }
    }
    // The .cl file itself: compiled as the lit test compiles it, the same decisions.
    let out = run(Command::new(env!("CARGO_BIN_EXE_programl-train"))
        .args(["predict", "--json", "--device", "cpu", "--threads", "1", "--dtype", "f32", "--aux", "transfer=4096,wgsize=256", "--model"])
        .arg(&devmap)
        .arg(inputs.join("two_kernels.cl")));
    let from_source = json_lines(&out.stdout).remove(0);
    for g in from_source["graphs"].as_array().unwrap() {
        let kernel = g["name"].as_str().unwrap().rsplit(':').next().unwrap().to_string();
        let key = format!("{}:{kernel} {:?}", two.display(), Some("transfer=4096,wgsize=256"));
        assert_eq!(seen_classes.get(&key), Some(&g["class"]), "{kernel}");
    }
}

/// A bundle with a stopping rule (adaptive depth) runs in `predict` on the
/// torch-free inference, as in the pass (the libtorch model refuses such
/// bundles, so `predict` must not load it): on the same files and roots,
/// the pass's probabilities are `predict`'s within 1e-5, at the default
/// `auto`, and `predict` says the steps each root ran under the rule,
/// which differ from root to root and stay within the cap.
#[test]
fn adaptive_bundles_predict_as_the_pass_decides() {
    let plugin = built("libprograml_passes.so");
    let tmp = tempfile::tempdir().unwrap();
    let ir_dir = tmp.path().join("ir");
    std::fs::create_dir_all(&ir_dir).unwrap();
    let files = compile_inputs(&ir_dir);
    for name in ["datadep-adaptive", "dominance-adaptive"] {
        let bundle = tmp.path().join("models").join(name);
        copy_dir(&workspace().join("models").join(name), &bundle);
        let config: Value = serde_json::from_str(&std::fs::read_to_string(bundle.join("config.json")).unwrap()).unwrap();
        let cap = config["hyper"]["stop"]["max_steps"].as_i64().expect("an adaptive bundle's cap");
        let sidecar = tmp.path().join(format!("{name}.jsonl"));
        let (mut steps, mut compared) = (Vec::new(), 0usize);
        for file in &files {
            let before = std::fs::read_to_string(&sidecar).map(|s| s.lines().count()).unwrap_or(0);
            let pass = format!("programl-infer<model={};device=cpu;threads=1;sidecar={}>", bundle.display(), sidecar.display());
            let out = opt_with(&plugin, &pass, file, &tmp.path().join("out.ll"));
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(said.is_empty(), "{name} {}: the pass said:\n{said}", file.display());
            let mut pass_p: Probabilities = BTreeMap::new();
            for record in json_lines(&std::fs::read(&sidecar).unwrap()).into_iter().skip(before) {
                for r in record["roots"].as_array().into_iter().flatten() {
                    let nodes = pass_p.entry(r["root"].as_u64().unwrap()).or_default();
                    for pair in r["nodes"].as_array().unwrap() {
                        nodes.insert(pair[0].as_u64().unwrap(), pair[1].as_f64().unwrap());
                    }
                }
            }
            let out = run(Command::new(env!("CARGO_BIN_EXE_programl-train"))
                .args(["predict", "--roots", "sample", "--json", "--device", "cpu", "--threads", "1", "--model"])
                .arg(&bundle)
                .arg(file));
            let lines = json_lines(&out.stdout);
            assert_eq!(lines.len(), pass_p.len(), "{name} {}: predict's roots against the pass's", file.display());
            for line in lines {
                let root = line["root"].as_u64().unwrap();
                let theirs = pass_p.get(&root).unwrap_or_else(|| panic!("{name} {}: root {root} not in the pass's", file.display()));
                let ran = line["steps"].as_i64().unwrap();
                assert!((1..=cap).contains(&ran), "{name} {} root {root}: {ran} steps, the cap {cap}", file.display());
                steps.push(ran);
                for n in line["nodes"].as_array().unwrap() {
                    let (node, p) = (n["node"].as_u64().unwrap(), n["p"].as_f64().unwrap());
                    let q = theirs[&node];
                    assert!((p - q).abs() <= TOLERANCE, "{name} {} root {root} node {node}: predict {p}, pass {q}", file.display());
                    compared += 1;
                }
            }
        }
        eprintln!("{name}: {compared} probabilities compared; steps per root {steps:?}");
        assert!(compared > 0, "{name}: no root in any file");
        assert!(steps.iter().any(|&s| s != steps[0]), "{name}: every root ran {} steps: no rule at work", steps[0]);
    }
}
