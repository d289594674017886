//! `programl-train` end to end on a small fixture: generated C programs
//! compiled by clang, a dataset store built from them, a short training run
//! that must beat the trivial classifiers, a SIGKILLed run and one stopped
//! by Ctrl-C or SIGTERM that resume to the very same weights, a run past a file size limit that fails naming
//! the file and completes after, `eval` on IR files, `predict`, and clear
//! errors for broken bundles.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use programl::analysis::Task;
use programl_dataset::{Dataset, Split, Subset};

const PROGRAMS: usize = 30;
const LEVELS: [&str; 2] = ["O0", "O1"];

fn trainer() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_programl-train"));
    c.stdin(Stdio::null());
    c
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?} failed:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// `train` with `train_args` (a budget of 10) and `extra`, which must
/// fail: its stderr.
fn train_refused(data: &Path, out: &Path, extra: &[&str]) -> String {
    let mut a = train_args(data, out, "10");
    a.extend(extra.iter().map(|s| s.to_string()));
    let o = trainer().args(&a).output().unwrap();
    assert!(!o.status.success());
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The id of the fixture's corpus manifest.
const FIXTURE_CORPUS: &str = "00f1c5ec0f1c5ec0";

/// IR of the fixture programs, and a dataset store of them (built once per
/// target directory).
fn fixture() -> &'static (PathBuf, PathBuf) {
    static FIXTURE: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("train-fixture-v2");
        let (ir, data) = (dir.join("ir"), dir.join("data"));
        if dir.join("complete").exists() {
            return (ir, data);
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&ir).unwrap();
        let clang = Path::new(programl::LLVM_BINDIR).join("clang");
        for i in 0..PROGRAMS {
            let sub = ir.join(format!("proj{}", i % 3));
            std::fs::create_dir_all(&sub).unwrap();
            let c = sub.join(format!("prog{i}.c"));
            std::fs::write(&c, programl_testkit::c_program(i)).unwrap();
            for level in LEVELS {
                let ll = sub.join(format!("prog{i}.{level}.ll"));
                let out =
                    Command::new(&clang).args(["-S", "-emit-llvm", "-w", &format!("-{level}"), "-o"]).arg(&ll).arg(&c).output().unwrap();
                assert!(out.status.success(), "clang: {}", String::from_utf8_lossy(&out.stderr));
            }
            std::fs::remove_file(&c).unwrap();
        }
        // As scripts/corpus.sh describes a set: the store records it, and
        // the bundles trained on the store name it.
        std::fs::write(
            ir.join("corpus-manifest.json"),
            format!(
                r#"{{"format": "programl-corpus-manifest", "version": 1, "id": "{FIXTURE_CORPUS}", "set": "fixture", "pointers": "opaque", "levels": {LEVELS:?}}}"#
            ),
        )
        .unwrap();
        let builder = programl_dataset::Builder::open(programl_dataset::BuildConfig::new(&ir, &data)).unwrap();
        builder.run(&|_| {}).unwrap();
        std::fs::write(dir.join("complete"), "").unwrap();
        (ir, data)
    })
}

fn train_args(data: &Path, out: &Path, budget: &str) -> Vec<String> {
    [
        "train",
        "--task",
        "datadep",
        "--data",
        &data.display().to_string(),
        "--out",
        &out.display().to_string(),
        "--budget",
        budget,
        "--val-examples",
        "150",
        "--val-every",
        "400",
        "--batch-nodes",
        "4000",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--quiet",
        // A small fixture learns within a minute only at a higher rate and
        // fewer steps than the shipped models (datadep learns fastest).
        "--lr",
        "0.01",
        "--steps",
        "15",
    ]
    .map(String::from)
    .to_vec()
}

/// `eval --json` of a bundle on the store's test split, DDF-30, one CPU thread.
fn eval_ddf30(model: &Path, data: &Path) -> serde_json::Value {
    eval_ddf30_as(model, data, "auto")
}

/// [`eval_ddf30`] at `--dtype dtype`.
fn eval_ddf30_as(model: &Path, data: &Path, dtype: &str) -> serde_json::Value {
    let eval = run(trainer().args(["eval", "--model"]).arg(model).arg("--data").arg(data).args([
        "--subset",
        "ddf-30",
        "--json",
        "--threads",
        "1",
        "--device",
        "cpu",
        "--dtype",
        dtype,
    ]));
    serde_json::from_slice(&eval.stdout).unwrap()
}

/// The `config.json` of a run's bundle (`RUN/model`).
fn config(run: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("model/config.json")).unwrap()).unwrap()
}

/// A run's validations from its `log.csv`: (examples, F1).
fn val_rows(run: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(run.join("log.csv"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("val,"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[1].parse().unwrap(), f[6].parse().unwrap())
        })
        .collect()
}

/// Positives and labelled nodes of the test split's DDF-30 examples.
fn test_split_counts(data: &Path) -> (u64, u64) {
    let dataset = Dataset::open(data).unwrap();
    let (mut positives, mut labelled) = (0, 0);
    for r in dataset.records_in(Split::Test) {
        let r = r.unwrap();
        let nodes = programl_dataset::labels_kind(Task::DataDep);
        let count = r
            .graph
            .kinds
            .iter()
            .enumerate()
            .filter(|&(i, &k)| k == nodes && i != 0 && r.graph.texts[i] != programl::graph::UNDEFINED_FUNCTION_TEXT)
            .count();
        for e in r.examples(Task::DataDep).iter().filter(|e| Subset::Ddf30.contains(e.steps)) {
            positives += e.positives.len() as u64;
            labelled += count as u64;
        }
    }
    (positives, labelled)
}

#[test]
fn a_short_run_beats_the_trivial_classifiers() {
    let (_, data) = fixture();
    let run_dir = tempfile::tempdir().unwrap();
    let out = run_dir.path().join("run");
    run(trainer().args(train_args(data, &out, "1200")));
    for f in ["model/config.json", "model/weights.safetensors", "model/vocabulary.json", "log.csv", "curves.png", "checkpoint/state.json"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let log = std::fs::read_to_string(out.join("log.csv")).unwrap();
    assert!(log.starts_with("kind,examples,wall_s,loss,precision,recall,f1\n") && log.contains("\nval,"), "{log}");

    let v = eval_ddf30(&out.join("model"), data);
    let f1 = v["f1"].as_f64().unwrap();
    let (positives, labelled) = test_split_counts(data);
    assert_eq!(v["tp"].as_u64().unwrap() + v["fn"].as_u64().unwrap(), positives, "{v}");
    // Always negative scores F1 0; always positive 2p/(1+p) at positive share p.
    let share = positives as f64 / labelled as f64;
    let always_positive = 2.0 * share / (1.0 + share);
    assert!(f1 > always_positive && f1 > 0.0, "F1 {f1} vs always-positive {always_positive}: {v}");
    for key in ["task", "subset", "steps", "examples", "precision", "recall", "tp", "fp", "fn", "vocab_coverage"] {
        assert!(v.get(key).is_some(), "eval --json lacks {key}: {v}");
    }
    assert_eq!(v["task"], "datadep");
    assert_eq!(v["vocab_coverage"].as_f64().unwrap(), 1.0, "the test split's texts all occur in train: {v}");
}

/// `--loss-nodes labelled`: the loss over the labelled nodes only. A
/// short run learns as the default does (it beats the trivial
/// classifiers), records the choice in its state, and trains other weights
/// than the same run over every node.
#[test]
fn a_run_with_the_loss_over_labelled_nodes_learns() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (labelled, all) = (dir.path().join("labelled"), dir.path().join("all"));
    run(trainer().args(train_args(data, &labelled, "1200")).args(["--loss-nodes", "labelled"]));
    run(trainer().args(train_args(data, &all, "1200")));
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(labelled.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["args"]["loss_nodes"], "labelled", "{}", state["args"]);
    let weights = |d: &Path| std::fs::read(d.join("checkpoint/weights.safetensors")).unwrap();
    assert!(weights(&labelled) != weights(&all), "the loss's node set changed no weight");
    let v = eval_ddf30(&labelled.join("model"), data);
    let (positives, labelled_nodes) = test_split_counts(data);
    let share = positives as f64 / labelled_nodes as f64;
    let f1 = v["f1"].as_f64().unwrap();
    assert!(f1 > 2.0 * share / (1.0 + share), "F1 {f1} after 1,200 examples over labelled nodes: {v}");
}

#[test]
fn a_killed_run_resumes_to_the_same_weights() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (whole, killed) = (dir.path().join("whole"), dir.path().join("killed"));
    let mut args = train_args(data, &whole, "500");
    args.extend(["--checkpoint-every".into(), "0".into()]);
    run(trainer().args(&args));

    let mut args_k = train_args(data, &killed, "500");
    args_k.extend(["--checkpoint-every".into(), "0".into()]);
    let mut child = trainer().args(&args_k).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // Kill once a checkpoint past the start exists.
    let start = Instant::now();
    loop {
        let state = std::fs::read_to_string(killed.join("checkpoint/state.json")).unwrap_or_default();
        let seen = serde_json::from_str::<serde_json::Value>(&state).ok().and_then(|v| v["examples_seen"].as_u64()).unwrap_or(0);
        if seen > 0 || start.elapsed() > Duration::from_secs(50) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the run finished before it could be killed");
    run(trainer().args(&args_k));

    for f in ["checkpoint/weights.safetensors", "checkpoint/optimizer.safetensors", "model/weights.safetensors"] {
        assert!(std::fs::read(whole.join(f)).unwrap() == std::fs::read(killed.join(f)).unwrap(), "{f} differs after kill -9 and resume");
    }
    let state = |d: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join("checkpoint/state.json")).unwrap()).unwrap()
    };
    assert_eq!(state(&whole)["examples_seen"], state(&killed)["examples_seen"]);
    assert_eq!(state(&whole)["history"].as_array().unwrap().len(), state(&killed)["history"].as_array().unwrap().len());
    // Re-running a finished run trains no further.
    run(trainer().args(&args_k));
    assert_eq!(state(&killed)["examples_seen"], state(&whole)["examples_seen"]);
    // Other arguments on the same run directory are refused.
    let mut other = args_k.clone();
    let at = other.iter().position(|a| a == "--val-every").unwrap() + 1;
    other[at] = "500".into();
    let out = trainer().args(&other).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The refusal names what differs, then and now.
    assert!(!out.status.success() && err.contains("started with other arguments (val_every: ") && err.contains(", 500 now)"), "{err}");
    // The loss's positive weight is part of a run: its default (a run
    // recorded before the flag existed has none) is the same run, another
    // weight is not, and a weight that is not positive is refused by name.
    let with_weight = |w: &str| [args_k.clone(), vec!["--pos-weight".into(), w.into()]].concat();
    run(trainer().args(with_weight("1")));
    let out = trainer().args(with_weight("5")).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("started with other arguments"));
    // So is the loss's node set: `all` (the default) is the same run.
    let with_nodes = |n: &str| [args_k.clone(), vec!["--loss-nodes".into(), n.into()]].concat();
    run(trainer().args(with_nodes("all")));
    let out = trainer().args(with_nodes("labelled")).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("started with other arguments"));
    let out = trainer().args(with_weight("0")).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--pos-weight 0"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ctrl-C (SIGINT) or SIGTERM mid-run: the run saves its checkpoint at the
/// batch's end and then ends by that signal (status 130 or 143 in a
/// shell); the same command continues it to the very weights of a
/// run never stopped. (Before, the signal ended the process and the work
/// since the last periodic checkpoint was lost.)
#[test]
fn an_interrupted_run_saves_its_checkpoint_and_resumes_to_the_same_weights() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    run(trainer().args(train_args(data, &whole, "1500")));
    let state = |d: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join("checkpoint/state.json")).unwrap_or_default()).unwrap_or_default()
    };
    for (signal, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let stopped = dir.path().join(name);
        let mut args = train_args(data, &stopped, "1500");
        // No periodic checkpoint: the validations' (every 400 examples) and
        // the signal's are the only ones written.
        args.extend(["--checkpoint-every".into(), "3600".into()]);
        let mut cmd = trainer();
        cmd.args(&args).stdout(Stdio::null()).stderr(Stdio::piped());
        // As from a terminal: a test run in the background of a script
        // (CI) inherits SIGINT ignored, which the trainer then leaves so.
        // SAFETY: signal(2) is async-signal-safe, as pre_exec requires.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let start = Instant::now();
        let before = loop {
            let seen = state(&stopped)["examples_seen"].as_u64().unwrap_or(0);
            if seen > 0 || start.elapsed() > Duration::from_secs(50) {
                break seen;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // SAFETY: a signal to the child this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // Ended by the signal itself (a shell script running it stops too).
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(signal), "{name}: {err}");
        assert!(
            err.contains(&format!("{name}: stopping after this batch to save the checkpoint"))
                && err.contains(&format!("{name}: saving the checkpoint"))
                && err.contains("run the same command to continue"),
            "{name}: {err}"
        );
        let saved = state(&stopped)["examples_seen"].as_u64().unwrap();
        assert!(before > 0 && saved >= before && saved < 1500, "{name}: {before} examples checkpointed before the signal, {saved} after");
        run(trainer().args(&args));
        for f in ["checkpoint/weights.safetensors", "checkpoint/optimizer.safetensors", "model/weights.safetensors"] {
            assert!(
                std::fs::read(whole.join(f)).unwrap() == std::fs::read(stopped.join(f)).unwrap(),
                "{f} differs after {name} and resume"
            );
        }
        assert_eq!(state(&whole)["examples_seen"], state(&stopped)["examples_seen"], "{name}");
        let losses = |d: &Path| -> Vec<serde_json::Value> {
            state(d)["history"].as_array().unwrap().iter().map(|r| serde_json::json!([r["kind"], r["examples"], r["loss"]])).collect()
        };
        assert_eq!(losses(&whole), losses(&stopped), "{name}: the log (wall times aside)");
    }
}

#[test]
fn a_run_started_from_a_bundle_measures_it_first_and_keeps_the_better() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    run(trainer().args(train_args(data, &first, "400")));
    let best_first = val_rows(&first).iter().map(|r| r.1).fold(f64::MIN, f64::max);
    let first_examples = config(&first)["provenance"]["examples_seen"].as_u64().unwrap();
    let corpus = format!("fixture-opaque-{}@{FIXTURE_CORPUS}", LEVELS.join("-"));
    assert_eq!(config(&first)["provenance"]["corpus"], serde_json::json!([corpus]), "the bundle names the store's corpus");

    // A lower rate from the first run's bundle: the bundle is validated
    // at 0 examples, with the F1 it was kept for.
    let mut args = train_args(data, &second, "400");
    let at = args.iter().position(|a| a == "--lr").unwrap() + 1;
    args[at] = "0.002".into();
    args.extend(["--init".into(), first.join("model").display().to_string()]);
    run(trainer().args(&args));
    let rows = val_rows(&second);
    assert_eq!(rows[0].0, 0, "{rows:?}");
    assert!((rows[0].1 - best_first).abs() < 1e-9, "the bundle scores {} at the start, {best_first} when it was kept", rows[0].1);
    let best_second = rows.iter().map(|r| r.1).fold(f64::MIN, f64::max);
    let shipped = config(&second);
    let examples = shipped["provenance"]["examples_seen"].as_u64().unwrap();
    if best_second == rows[0].1 {
        assert_eq!(examples, first_examples, "no later validation beat the start: the bundle is the one started from");
        assert_eq!(
            std::fs::read(first.join("model/weights.safetensors")).unwrap(),
            std::fs::read(second.join("model/weights.safetensors")).unwrap()
        );
    } else {
        assert!(examples > first_examples, "the provenance counts both runs' examples: {examples}");
    }
    assert_eq!(std::fs::read(first.join("model/vocabulary.json")).unwrap(), std::fs::read(second.join("vocabulary.json")).unwrap());

    // Resuming ignores --init (the checkpoint holds the weights); a bundle
    // of another task is refused by name.
    run(trainer().args(&args));
    let other = dir.path().join("other");
    let mut wrong = train_args(data, &other, "400");
    let at = wrong.iter().position(|a| a == "datadep").unwrap();
    wrong[at] = "liveness".into();
    wrong.extend(["--init".into(), first.join("model").display().to_string()]);
    let out = trainer().args(&wrong).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--init") && err.contains("datadep bundle, not liveness"), "{err}");

    // A mean bundle's weights start a model that sums its messages, or
    // takes their maximum: the bundle it ships says so, and eval runs it
    // (at INT8 too: the INT8 step sums or takes the max of whole messages).
    for word in ["sum", "max"] {
        let other = dir.path().join(word);
        let mut args = train_args(data, &other, "200");
        args.extend(["--aggregation".into(), word.into(), "--init".into(), first.join("model").display().to_string()]);
        run(trainer().args(&args));
        assert_eq!(config(&other)["hyper"]["aggregation"], word, "{}", config(&other));
        for dtype in ["f32", "int8"] {
            let eval = run(trainer()
                .args(["eval", "--model"])
                .arg(other.join("model"))
                .arg("--data")
                .arg(data)
                .args(["--json", "--device", "cpu", "--dtype", dtype]));
            let v: serde_json::Value = serde_json::from_slice(&eval.stdout).unwrap();
            assert!(v["examples"].as_u64().unwrap() > 0, "{word}, {dtype}: {v}");
        }
    }
    assert!(config(&first)["hyper"].get("aggregation").is_none(), "a mean bundle's config is as it was: {}", config(&first));
    // Without --aggregation, a max bundle fine-tunes as a max (not as a
    // mean, whose sums of the max's weights score near 0), and the run
    // resumes with the same arguments.
    let tuned = dir.path().join("tuned");
    let mut args: Vec<String> = train_args(data, &tuned, "200").into_iter().filter(|a| a != "--quiet").collect();
    args.extend(["--init".into(), dir.path().join("max").join("model").display().to_string()]);
    let out = run(trainer().args(&args));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("aggregation: max (the --init bundle's"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(config(&tuned)["hyper"]["aggregation"], "max", "{}", config(&tuned));
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(tuned.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["args"]["aggregation"], "max", "{state}");
    let again = trainer().args(&args).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let bad = trainer().args(train_args(data, &dir.path().join("bad"), "200")).args(["--aggregation", "median"]).output().unwrap();
    assert!(
        !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("expected mean, sum, max or mean-max"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// `--hidden`: a bundle's weights carried into a wider state (issue 30's
/// capacity experiment). The widened model starts where the bundle stood,
/// trains on libtorch's operations, ships a bundle that says its width,
/// which eval runs at FP32 and INT8, and resumes without the flags.
#[test]
fn a_wider_state_starts_from_a_narrower_bundle() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let (first, wide) = (dir.path().join("first"), dir.path().join("wide"));
    run(trainer().args(train_args(data, &first, "400")));
    assert!(config(&first)["hyper"].get("hidden").is_none(), "a 34-wide config is as it was");
    let mut args: Vec<String> = train_args(data, &wide, "200").into_iter().filter(|a| a != "--quiet").collect();
    args.extend(["--hidden".into(), "66".into(), "--init".into(), first.join("model").display().to_string()]);
    let out = run(trainer().args(&args));
    assert!(String::from_utf8_lossy(&out.stderr).contains("widened to 66"), "{}", String::from_utf8_lossy(&out.stderr));
    let first_val = eval_ddf30(&first.join("model"), data)["f1"].as_f64().unwrap();
    let (at, start) = val_rows(&wide)[0];
    assert_eq!(at, 0, "validated at 0 examples");
    let kept = val_rows(&first).iter().map(|r| r.1).fold(f64::MIN, f64::max);
    assert!((start - kept).abs() < 0.02, "widened, the bundle validates at {start}; kept at {kept}");
    assert_eq!(config(&wide)["hyper"]["hidden"], 66, "{}", config(&wide));
    for dtype in ["f32", "int8"] {
        let v = eval_ddf30_as(&wide.join("model"), data, dtype);
        let f1 = v["f1"].as_f64().unwrap();
        assert!(f1 > first_val - 0.1, "{dtype}: the wide bundle scores {f1}, the narrow {first_val}");
    }
    // Resumes with the same flags, and without them (the run's own width).
    run(trainer().args(&args));
    run(trainer().args(train_args(data, &wide, "200")));
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(wide.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["args"]["hidden"], 66, "{state}");
    // Widths that are refused, by name.
    for (width, says) in [("50", "not 50"), ("17", "--hidden 17 is not an even width")] {
        let mut bad = train_args(data, &dir.path().join(format!("bad{width}")), "200");
        bad.extend(["--hidden".into(), width.into(), "--init".into(), first.join("model").display().to_string()]);
        let out = trainer().args(&bad).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{width}: {err}");
    }
}

/// `--near-weight`: the negatives that read the root's operands weigh more
/// in the loss. A run with it trains and records it (a resume must match);
/// a weight that is not positive is refused by name.
#[test]
fn near_negatives_can_weigh_more_in_the_loss() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("near");
    let mut args = train_args(data, &out, "200");
    args.extend(["--near-weight".into(), "3".into()]);
    run(trainer().args(&args));
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["args"]["near_weight"], 3.0, "{state}");
    let log = std::fs::read_to_string(out.join("log.csv")).unwrap();
    let losses: Vec<f64> = log.lines().filter(|l| l.starts_with("train,")).map(|l| l.split(',').nth(3).unwrap().parse().unwrap()).collect();
    assert!(!losses.is_empty() && losses.iter().all(|l| l.is_finite()), "{log}");
    let resumed = trainer().args(train_args(data, &out, "200")).output().unwrap();
    assert!(!resumed.status.success() && String::from_utf8_lossy(&resumed.stderr).contains("other arguments"));
    let mut bad = train_args(data, &dir.path().join("bad"), "200");
    bad.extend(["--near-weight".into(), "0".into()]);
    let out = trainer().args(&bad).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--near-weight 0 is not a positive number"), "{err}");
}

#[test]
fn eval_on_ir_files_predict_and_broken_bundles() {
    let (ir, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    run(trainer().args(train_args(data, &out, "150")));
    let model = out.join("model");

    // IR files labelled on the fly.
    let eval = run(trainer().args(["eval", "--model"]).arg(&model).arg("--data").arg(ir.join("proj1")).args(["--json", "--device", "cpu"]));
    let v: serde_json::Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert!(v["examples"].as_u64().unwrap() > 0 && v["subset"] == "ddf", "{v}");

    // predict: one object per root, a probability for each labelled node.
    let file = ir.join("proj1/prog1.O1.ll");
    let p = run(trainer().args(["predict", "--model"]).arg(&model).arg(&file).args(["--roots", "all", "--json", "--device", "cpu"]));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&p.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let nodes = l["nodes"].as_array().unwrap();
        assert!(!nodes.is_empty());
        assert!(nodes.iter().all(|n| (0.0..=1.0).contains(&n["p"].as_f64().unwrap())));
    }
    // A reader that stops early (`| head -c 1`) ends predict quietly.
    let mut piped = trainer()
        .args(["predict", "--model"])
        .arg(&model)
        .arg(&file)
        .args(["--roots", "all", "--json", "--device", "cpu"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(piped.stdout.take());
    let closed = piped.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
    let bad =
        trainer().args(["predict", "--model"]).arg(&model).arg(&file).args(["--roots", "999999", "--device", "cpu"]).output().unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("node 999999 is not in the graph"));

    // A truncated weights file and a vocabulary of the wrong size.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    for f in ["config.json", "weights.safetensors", "vocabulary.json"] {
        std::fs::copy(model.join(f), broken.join(f)).unwrap();
    }
    let w = std::fs::read(broken.join("weights.safetensors")).unwrap();
    std::fs::write(broken.join("weights.safetensors"), &w[..w.len() - 100]).unwrap();
    let e = trainer().args(["eval", "--model"]).arg(&broken).arg("--data").arg(data).output().unwrap();
    let stderr = String::from_utf8_lossy(&e.stderr);
    assert!(!e.status.success() && stderr.contains("weights.safetensors") && stderr.contains("not a safetensors file"), "{stderr}");
    let missing = trainer().args(["eval", "--model"]).arg(dir.path().join("nothing")).arg("--data").arg(data).output().unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("config.json"), "{}", String::from_utf8_lossy(&missing.stderr));
}

/// The CUDA path, on a machine without a GPU: the binary links
/// `libtorch_cuda` for real (NEEDED, found through its own RUNPATH), so
/// where a GPU exists libtorch sees it; `--device cuda` without one is an
/// error that says so, and `auto` falls back to the CPU with one line.
#[test]
fn cuda_is_linked_and_device_choices_behave_without_a_gpu() {
    let exe = env!("CARGO_BIN_EXE_programl-train");
    let out = Command::new("readelf").args(["-d", exe]).output().expect("readelf");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let lib = env!("PROGRAML_LIBTORCH_LIB");
    assert!(dynamic.contains(&format!("[{lib}]")) || dynamic.contains(&format!("{lib}:")), "no RUNPATH to {lib}:\n{dynamic}");
    if Path::new(lib).join("libtorch_cuda.so").exists() {
        assert!(dynamic.contains("[libtorch_cuda.so]"), "libtorch_cuda.so is not NEEDED (dropped by --as-needed?):\n{dynamic}");
    }
    let has_gpu = Path::new("/dev/nvidia0").exists();
    let args = [
        "bench",
        "--mode",
        "infer",
        "--steps",
        "1",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--batch-nodes",
        "200",
        "--graph-nodes",
        "100",
        "--threads",
        "1",
    ];
    let cuda = trainer().args(args).args(["--device", "cuda"]).output().unwrap();
    let auto = trainer().args(args).args(["--device", "auto"]).output().unwrap();
    assert!(auto.status.success(), "{}", String::from_utf8_lossy(&auto.stderr));
    if !has_gpu {
        let e = String::from_utf8_lossy(&cuda.stderr);
        assert!(!cuda.status.success() && e.contains("--device cuda: no CUDA device is available (libtorch_cuda is loaded"), "{e}");
        let a = String::from_utf8_lossy(&auto.stderr);
        assert_eq!(a.matches("device: auto -> cpu").count(), 1, "{a}");
        // On the CPU inference runs the torch-free engine, as the pass does.
        assert!(String::from_utf8_lossy(&auto.stdout).contains(" cpu programl-infer ("), "{}", String::from_utf8_lossy(&auto.stdout));
        assert!(String::from_utf8_lossy(&auto.stdout).contains("): 200 nodes"), "{}", String::from_utf8_lossy(&auto.stdout));
    } else {
        assert!(cuda.status.success() && String::from_utf8_lossy(&cuda.stdout).contains("cuda:0"));
    }
}

/// A run resumes on a store rebuilt elsewhere from the same IR (another
/// path, another shard layout and order: what a later session on a fresh
/// machine has), and refuses a store whose examples differ.
#[test]
fn a_run_resumes_on_a_rebuilt_store_and_refuses_other_data() {
    let (ir, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let rebuilt = dir.path().join("rebuilt");
    let mut config = programl_dataset::BuildConfig::new(ir, &rebuilt);
    config.shard_records = 3; // many small shards, filled in another order
    config.jobs = 1;
    programl_dataset::Builder::open(config).unwrap().run(&|_| {}).unwrap();
    let manifest = |d: &Path| std::fs::read(d.join(programl_dataset::MANIFEST)).unwrap();
    assert_ne!(manifest(data), manifest(&rebuilt), "the rebuilt store should be laid out differently");

    let out = dir.path().join("run");
    let first = train_args(data, &out, "150");
    run(trainer().args(&first));
    let seen = |d: &Path| -> u64 {
        let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.join("checkpoint/state.json")).unwrap()).unwrap();
        s["examples_seen"].as_u64().unwrap()
    };
    let before = seen(&out);
    run(trainer().args(train_args(&rebuilt, &out, "300")));
    assert!(seen(&out) > before, "the run did not continue on the rebuilt store");

    // A store of other programs (a subset of the IR) is other data.
    let subset_ir = dir.path().join("subset-ir");
    std::fs::create_dir_all(&subset_ir).unwrap();
    for entry in std::fs::read_dir(ir.join("proj0")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, subset_ir.join(p.file_name().unwrap())).unwrap();
    }
    let other = dir.path().join("other");
    programl_dataset::Builder::open(programl_dataset::BuildConfig::new(&subset_ir, &other)).unwrap().run(&|_| {}).unwrap();
    let refused = trainer().args(train_args(&other, &out, "450")).output().unwrap();
    assert!(!refused.status.success(), "a run accepted other training data");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("training data changed"), "{}", String::from_utf8_lossy(&refused.stderr));
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A full disk, as root meets it (writes cannot be denied by permissions):
/// a file size limit. The run fails with an error naming the file, leaves no
/// partial file under a final name, and the same command without the limit
/// then completes.
#[test]
fn a_write_failure_names_the_file_and_the_run_completes_after() {
    use std::os::unix::process::CommandExt;
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = train_args(data, &out, "300");
    let mut limited = trainer();
    limited.args(&args);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        limited.pre_exec(|| {
            let l = libc::rlimit { rlim_cur: 40 * 1024, rlim_max: 40 * 1024 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let failed = limited.output().unwrap();
    let err = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "not an error exit (SIGXFSZ?): {err}");
    assert!(err.contains(&out.display().to_string()) && err.contains("File too large"), "{err}");
    for f in files_under(&out) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "{} left behind", f.display());
        if name.ends_with(".safetensors") {
            assert!(tch::Tensor::read_safetensors(&f).is_ok(), "{} is partial", f.display());
        } else if name.ends_with(".json") {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok(), "{} is partial", f.display());
        }
    }
    run(trainer().args(&args));
    let bundle = programl_model::bundle::Bundle::load(&out.join("model"), tch::Device::Cpu).unwrap();
    assert!(bundle.config.provenance.examples_seen >= 300);
}

/// `programl-train recipe`: a bundle directory's recipe.json run to its
/// end (two phases, the second from the first's bundle) and shipped into
/// the directory as a whole, with the recipe and each phase's record;
/// nothing more to do on a second run; on a machine without the runs, a
/// larger budget continues the last phase from the checkpoint kept in the
/// bundle; a bad recipe is an error naming it. The second phase moves
/// the loss to the labelled nodes (a phase's `loss_nodes`).
#[test]
fn a_recipe_runs_its_phases_ships_the_bundle_and_continues_from_its_records() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("datadep");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("README.md"), "kept\n").unwrap();
    let recipe = |polish: u64| {
        serde_json::json!({
            "format": "programl-recipe", "version": 1, "task": "datadep",
            "settings": {"seed": 0, "steps": 15, "state_dropout": 0.0, "pos_weight": 1.0, "batch_nodes": 4000, "val_examples": 150, "val_every": 100,
                         "inference": {"steps": 9, "stop": {"tolerance": 0.05, "max_steps": 40}, "auto_dtype": "f32", "why": "chosen on validation"}},
            "phases": [
                {"name": "main", "lr": 0.01, "max_nodes": 10000, "budget": "200"},
                {"name": "polish", "lr": 0.002, "max_nodes": 10000, "budget": polish.to_string(), "loss_nodes": "labelled", "pos_weight": 3.0, "aggregation": "max", "val_examples": 120, "val_every": 50, "why": "a lower rate"}
            ]
        })
    };
    std::fs::write(model.join("recipe.json"), serde_json::to_string_pretty(&recipe(100)).unwrap()).unwrap();
    let runs = dir.path().join("runs");
    let cmd = |runs: &Path| {
        let mut c = trainer();
        c.arg("recipe").arg(&model).arg("--data").arg(data).arg("--runs").arg(runs).args(["--threads", "1", "--device", "cpu", "--quiet"]);
        c
    };
    run(&mut cmd(&runs));
    for f in [
        "config.json",
        "weights.safetensors",
        "vocabulary.json",
        "recipe.json",
        "README.md",
        "log.csv",
        "checkpoint/state.json",
        "polish/log.csv",
        "polish/checkpoint/state.json",
    ] {
        assert!(model.join(f).exists(), "{f} not shipped");
    }
    let state = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p.join("checkpoint/state.json")).unwrap()).unwrap()
    };
    assert!(state(&model)["examples_seen"].as_u64().unwrap() >= 200);
    assert!(state(&model.join("polish"))["examples_seen"].as_u64().unwrap() >= 100);
    assert_eq!(state(&model.join("polish"))["args"]["lr"].as_f64(), Some(0.002));
    // A phase's own loss_nodes and pos_weight; the other phase keeps the
    // settings' (all, 1).
    assert_eq!(state(&model.join("polish"))["args"]["loss_nodes"], "labelled");
    assert!(state(&model)["args"].get("loss_nodes").is_none(), "{}", state(&model)["args"]);
    assert_eq!(state(&model.join("polish"))["args"]["pos_weight"].as_f64(), Some(3.0));
    assert!(state(&model)["args"]["pos_weight"].as_f64().is_none_or(|w| w == 1.0), "{}", state(&model)["args"]);
    // A phase's own aggregation: the mean phase's weights start a max
    // model, and the bundle shipped is the max's.
    assert_eq!(state(&model.join("polish"))["args"]["aggregation"], "max");
    assert_eq!(state(&model.join("polish"))["args"]["val_examples"].as_u64(), Some(120));
    assert_eq!(state(&model)["args"]["val_examples"].as_u64(), Some(150));
    assert_eq!(state(&model.join("polish"))["args"]["val_every"].as_u64(), Some(50));
    assert_eq!(state(&model)["args"]["val_every"].as_u64(), Some(100), "{}", state(&model)["args"]);
    assert!(state(&model)["args"].get("aggregation").is_none(), "{}", state(&model)["args"]);
    assert!(
        state(&model.join("polish"))["init"]["from"].as_str().unwrap().ends_with("datadep-main/model"),
        "{}",
        state(&model.join("polish"))["init"]
    );
    let bundle = programl_infer::Model::open(&model).unwrap();
    assert_eq!(bundle.config.task, "datadep");
    // Trained at T = 15, shipped to run at the recipe's inference depth,
    // under its stopping rule, and FP32 at `auto`.
    assert_eq!(bundle.config.hyper.steps, 9);
    assert_eq!(bundle.config.hyper.stop, Some(programl_infer::config::Stop { tolerance: 0.05, max_steps: 40 }));
    assert_eq!(bundle.config.auto_dtype, Some(programl_infer::bundle::AutoDtype::F32));
    assert_eq!(bundle.config.hyper.aggregation, programl_infer::config::Aggregation::Max, "the last phase's aggregation");
    let trained: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(runs.join("datadep-polish/model/config.json")).unwrap()).unwrap();
    assert_eq!(trained["hyper"]["steps"].as_i64(), Some(15));
    let weights = std::fs::read(model.join("weights.safetensors")).unwrap();
    // Nothing more to do.
    run(&mut cmd(&runs));
    assert_eq!(std::fs::read(model.join("weights.safetensors")).unwrap(), weights);
    let parent: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(parent.iter().all(|n| !n.starts_with(".datadep")), "staging left behind: {parent:?}");
    // Another machine: no runs; the polish budget raised.
    let main_before = state(&model);
    std::fs::write(model.join("recipe.json"), serde_json::to_string_pretty(&recipe(220)).unwrap()).unwrap();
    run(&mut cmd(&dir.path().join("elsewhere")));
    let polish = state(&model.join("polish"));
    assert!(polish["examples_seen"].as_u64().unwrap() >= 220, "{}", polish["examples_seen"]);
    assert_eq!(state(&model), main_before, "phase one's budget was spent: untouched");
    let log = std::fs::read_to_string(model.join("polish/log.csv")).unwrap();
    assert!(log.lines().any(|l| l.starts_with("val,") && l.split(',').nth(1).unwrap().parse::<u64>().unwrap() >= 200), "{log}");
    // So does the bundle continued elsewhere.
    assert_eq!(programl_infer::Model::open(&model).unwrap().config.hyper.steps, 9);
    // A bad recipe names itself.
    std::fs::write(model.join("recipe.json"), r#"{"format": "programl-recipe", "version": 1, "task": "datadep", "phases": []}"#).unwrap();
    let out = cmd(&runs).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("recipe.json"), "{err}");
    let mut zero = recipe(220);
    zero["settings"]["inference"]["steps"] = serde_json::json!(0);
    std::fs::write(model.join("recipe.json"), zero.to_string()).unwrap();
    let out = cmd(&runs).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("recipe.json") && err.contains("settings.inference.steps 0"), "{err}");
    let mut never = recipe(220);
    never["settings"]["inference"]["stop"]["max_steps"] = serde_json::json!(0);
    std::fs::write(model.join("recipe.json"), never.to_string()).unwrap();
    let out = cmd(&runs).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("recipe.json") && err.contains("settings.inference.stop"), "{err}");
}

/// `--init B --extend-vocab`: a bundle whose vocabulary lacks texts of the
/// training split (here its last three, cut from the vocabulary and the
/// embedding) continues with those texts appended: its ids unchanged,
/// its embedding rows the start of the run's, the new texts with rows of
/// their own; the shipped bundle opens with the longer vocabulary.
#[test]
fn extending_the_vocabulary_keeps_the_bundles_ids_and_rows() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    run(trainer().args(train_args(data, &first, "150")));
    // The first run's bundle, less its last three texts.
    let small = dir.path().join("small");
    std::fs::create_dir_all(&small).unwrap();
    let mut vocab: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(first.join("model/vocabulary.json")).unwrap()).unwrap();
    let tokens = vocab["tokens"].as_array_mut().unwrap();
    let cut: Vec<String> = tokens.split_off(tokens.len() - 3).iter().map(|t| t["text"].as_str().unwrap().to_string()).collect();
    let rows = tokens.len() as i64 + 1;
    std::fs::write(small.join("vocabulary.json"), vocab.to_string()).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(first.join("model/config.json")).unwrap()).unwrap();
    config["hyper"]["vocab_size"] = serde_json::json!(rows);
    std::fs::write(small.join("config.json"), config.to_string()).unwrap();
    let tensors: Vec<(String, tch::Tensor)> = tch::Tensor::read_safetensors(first.join("model/weights.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(n, t)| if n == "embedding.weight" { (n, t.narrow(0, 0, rows)) } else { (n, t) })
        .collect();
    tch::Tensor::write_safetensors(&tensors, small.join("weights.safetensors")).unwrap();
    let embedding = tensors.iter().find(|(n, _)| n == "embedding.weight").unwrap().1.shallow_clone();

    let second = dir.path().join("second");
    let mut args = train_args(data, &second, "0");
    args.extend(["--init".into(), small.display().to_string(), "--extend-vocab".into()]);
    run(trainer().args(&args));
    let grown = programl::vocab::Vocabulary::load(second.join("vocabulary.json")).unwrap();
    let before = programl::vocab::Vocabulary::load(small.join("vocabulary.json")).unwrap();
    assert_eq!(grown.len(), before.len() + 3);
    for (i, (text, _)) in before.tokens().enumerate() {
        assert_eq!(grown.id(text), i as u32 + 1, "{text}");
    }
    let mut appended: Vec<String> = grown.tokens().skip(before.len() - 1).map(|(t, _)| t.to_string()).collect();
    appended.sort();
    let mut want = cut.clone();
    want.sort();
    assert_eq!(appended, want);
    // A budget of 0 trains nothing: the checkpoint's embedding starts
    // with the bundle's rows.
    let ckpt: Vec<(String, tch::Tensor)> = tch::Tensor::read_safetensors(second.join("checkpoint/weights.safetensors")).unwrap();
    let e = &ckpt.iter().find(|(n, _)| n == "embedding.weight").unwrap().1;
    assert_eq!(e.size()[0], grown.len() as i64);
    assert!(e.narrow(0, 0, rows).equal(&embedding), "the bundle's rows kept");
    assert!(programl_infer::Model::open(&second.join("model")).is_ok());
}

/// `eval --stop`: adaptive depth on the torch-free inference. A tolerance
/// no step exceeds stops every graph after one step, so the figures are
/// those of T = 1, and each example reports one step run beside its
/// analysis's own count; a tolerance of 0 runs to the cap unless a graph's
/// states stop moving exactly. A graph-level bundle or CUDA is refused.
#[test]
fn eval_with_a_stopping_rule_reports_the_steps_each_example_ran() {
    let (ir, _) = fixture();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/reachability");
    let eval = |extra: &[&str]| -> serde_json::Value {
        let out = run(trainer()
            .args(["eval", "--model"])
            .arg(&model)
            .arg("--data")
            .arg(ir.join("proj0"))
            .args(["--json", "--device", "cpu", "--threads", "1", "--dtype", "f32"])
            .args(extra));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let one = eval(&["--steps", "1"]);
    let loose = eval(&["--stop", "1e30", "--steps", "40"]);
    for k in ["tp", "fp", "fn", "examples"] {
        assert_eq!(one[k], loose[k], "{k}: T=1 {one} against stop {loose}");
    }
    assert_eq!(loose["steps"], serde_json::Value::Null);
    assert_eq!(loose["stop"]["max_steps"], 40);
    let buckets = loose["by_steps"].as_array().unwrap();
    assert!(!buckets.is_empty());
    for b in buckets {
        assert_eq!(b["mean_steps_run"].as_f64(), Some(1.0), "{b}");
        assert!(b["mean_steps_needed"].as_f64().unwrap() >= 1.0, "{b}");
    }
    let tight = eval(&["--stop", "0", "--steps", "6"]);
    for b in tight["by_steps"].as_array().unwrap() {
        let ran = b["mean_steps_run"].as_f64().unwrap();
        assert!((1.0..=6.0).contains(&ran), "{b}");
    }
    let refused = |model: &Path, extra: &[&str]| {
        let out = trainer().args(["eval", "--model"]).arg(model).arg("--data").arg(ir.join("proj0")).args(extra).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let poj = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/poj104");
    assert!(refused(&poj, &["--stop", "0.01", "--device", "cpu"]).contains("graph-level bundle"));
    assert!(refused(&model, &["--stop=-1", "--device", "cpu"]).contains("--stop -1: the tolerance is a finite value"));
    // A cap of 0 is refused by name, before the bundle is opened.
    assert!(refused(&model, &["--stop", "0.01", "--steps", "0", "--device", "cpu"]).contains("invalid value '0' for '--steps <STEPS>'"));
}

/// `eval --longer-than N` evaluates only the examples whose analysis
/// needs more than N steps (the tail where a stopping rule's cap binds):
/// 0 keeps every example, a larger N keeps fewer, every bucket it reports
/// needs more than N steps on average, and an N past every example is
/// refused by name.
#[test]
fn eval_longer_than_keeps_only_the_long_examples() {
    let (ir, _) = fixture();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/reachability-adaptive");
    let eval = |extra: &[&str]| {
        trainer()
            .args(["eval", "--model"])
            .arg(&model)
            .arg("--data")
            .arg(ir.join("proj0"))
            .args(["--json", "--device", "cpu", "--threads", "1", "--dtype", "f32"])
            .args(extra)
            .output()
            .unwrap()
    };
    let json = |extra: &[&str]| -> serde_json::Value {
        let out = eval(extra);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let all = json(&[]);
    // `--steps` caps the bundle's rule, and the report names that cap.
    let capped = json(&["--steps", "2"]);
    assert_eq!(capped["steps"], serde_json::Value::Null, "{capped}");
    assert_eq!(capped["stop"]["max_steps"], 2, "{capped}");
    assert_eq!(capped["stop"]["tolerance"], all["stop"]["tolerance"], "{capped}");
    assert_ne!(all["stop"]["max_steps"], 2, "{all}");
    for b in capped["by_steps"].as_array().unwrap() {
        assert!(b["mean_steps_run"].as_f64().unwrap() <= 2.0, "{b}");
    }
    let zero = json(&["--longer-than", "0"]);
    for k in ["tp", "fp", "fn", "examples"] {
        assert_eq!(all[k], zero[k], "{k}");
    }
    let tail = json(&["--longer-than", "3"]);
    let (n_all, n_tail) = (all["examples"].as_u64().unwrap(), tail["examples"].as_u64().unwrap());
    assert!(0 < n_tail && n_tail < n_all, "{n_tail} of {n_all} examples need more than 3 steps");
    assert_eq!(tail["examples_available"], n_tail);
    for b in tail["by_steps"].as_array().unwrap() {
        assert!(b["mean_steps_needed"].as_f64().unwrap() > 3.0, "{b}");
    }
    let sampled = json(&["--longer-than", "3", "--limit", "1"]);
    assert_eq!(sampled["examples"], 1);
    assert!(sampled["by_steps"][0]["mean_steps_needed"].as_f64().unwrap() > 3.0, "{sampled}");
    let out = eval(&["--longer-than", "1000000"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs more than 1000000 steps (--longer-than 1000000)"), "{err}");
}

/// `train --tape-segment N` checkpoints the unroll (the state entering
/// every N-step segment, each segment recomputed in the backward): the
/// same training as the full tape, to rounding, so the same validation
/// rows and the same weights. A zero segment, or one beside dropout, is
/// refused by name. `--longer-than N` trains on the examples that need
/// more than N steps only, and refuses a tail with none.
#[test]
fn a_checkpointed_tape_trains_as_the_full_one() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let adaptive = ["--subset", "ddf", "--stop-tolerance", "0.05", "--stop-max-steps", "40", "--extra-steps", "3", "--clip-norm", "5"];
    let train = |name: &str, extra: &[&str]| -> std::path::PathBuf {
        let out = dir.path().join(name);
        let mut args = train_args(data, &out, "200");
        args.extend(adaptive.iter().chain(extra).map(|s| s.to_string()));
        run(trainer().args(&args));
        out
    };
    let full = train("full", &[]);
    let cut = train("cut", &["--tape-segment", "3"]);
    let val_rows = |out: &std::path::Path| -> Vec<String> {
        let log = std::fs::read_to_string(out.join("log.csv")).unwrap();
        // kind, examples, (wall time), loss, precision, recall, f1, steps run, needed
        log.lines()
            .filter(|l| l.starts_with("val,"))
            .map(|l| l.split(',').enumerate().filter(|(i, _)| *i != 2 && *i != 3).map(|(_, c)| c).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert!(!val_rows(&full).is_empty());
    assert_eq!(val_rows(&full), val_rows(&cut));
    let weights = |out: &std::path::Path| {
        let mut w = tch::Tensor::read_safetensors(out.join("model/weights.safetensors")).unwrap();
        w.sort_by(|x, y| x.0.cmp(&y.0));
        w
    };
    let (a, b) = (weights(&full), weights(&cut));
    assert_eq!(a.len(), b.len());
    for ((name, x), (other, y)) in a.iter().zip(&b) {
        assert_eq!(name, other);
        assert!(x.allclose(y, 1e-4, 1e-6, false), "{name}");
    }
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(cut.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["args"]["tape_segment"], 3);

    let refused = |extra: &[&str]| train_refused(data, &dir.path().join("bad"), extra);
    // --longer-than trains on the long tail alone, and says how many
    // examples it left out.
    let tail = |n: &str| {
        let mut a = train_args(data, &dir.path().join(format!("tail{n}")), "20");
        a.retain(|x| x != "--quiet"); // for the summary line
        a.extend(adaptive.iter().copied().chain(["--longer-than", n]).map(String::from));
        trainer().args(&a).output().unwrap()
    };
    let kept_and_short = |o: &std::process::Output| -> (u64, u64) {
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        let line = text.lines().find(|l| l.starts_with("train: ")).unwrap_or_else(|| panic!("{text}"));
        let kept = line.split(", ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        let short = line
            .split(", ")
            .find(|p| p.contains(" for needing at most --longer-than 3;"))
            .map_or(0, |p| p.split(' ').next().unwrap().parse().unwrap());
        (kept, short)
    };
    let mut a = train_args(data, &dir.path().join("all"), "20");
    a.retain(|x| x != "--quiet");
    let (all, none) = kept_and_short(&run(trainer().args(&a).args(adaptive)));
    let (long, short) = kept_and_short(&tail("3"));
    assert_eq!(none, 0);
    assert!(long > 0 && short > 0 && long + short == all, "{long} + {short} of {all}");
    let o = tail("100000");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs more than 100000 steps (--longer-than)"));
    assert!(refused(&["--tape-segment", "0"]).contains("--tape-segment 0"));
    assert!(refused(&["--tape-segment", "4", "--state-dropout", "0.2"]).contains("--tape-segment 4 with --state-dropout 0.2"));
}

/// Adaptive depth (`train --stop-tolerance`): a run on every example
/// (`--subset ddf`) ships a bundle whose config carries the stopping rule,
/// validates by it (the log's validation rows), and `eval` then runs the
/// rule without `--steps`, each example's steps reported beside the ones
/// its analysis needs, within the cap; `--steps T` caps the rule at T.
/// Arguments out of range are refused by name.
#[test]
fn adaptive_training_ships_a_bundle_with_its_stopping_rule() {
    let (ir, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut args = train_args(data, &out, "300");
    args.extend(
        [
            "--subset",
            "ddf",
            "--stop-tolerance",
            "0.05",
            "--stop-max-steps",
            "40",
            "--extra-steps",
            "3",
            "--stability",
            "2",
            "--clip-norm",
            "5",
            "--until-settled",
        ]
        .map(String::from),
    );
    run(trainer().args(&args));
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("model/config.json")).unwrap()).unwrap();
    assert_eq!(config["hyper"]["stop"], serde_json::json!({"tolerance": 0.05, "max_steps": 40}), "{config}");
    let log = std::fs::read_to_string(out.join("log.csv")).unwrap();
    assert!(log.starts_with("kind,examples,wall_s,loss,precision,recall,f1,steps_run,steps_needed\n"), "{log}");
    let val = log.lines().find(|l| l.starts_with("val,")).unwrap_or_else(|| panic!("no validation row: {log}"));
    let cols: Vec<&str> = val.split(',').collect();
    let (ran, needed) = (cols[7].parse::<f64>().unwrap(), cols[8].parse::<f64>().unwrap());
    assert!((1.0..=40.0).contains(&ran) && needed >= 1.0, "{val}");
    let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("checkpoint/state.json")).unwrap()).unwrap();
    assert_eq!(state["args"]["subset"], "ddf");
    assert_eq!(state["args"]["stop_tolerance"], 0.05);
    assert_eq!(state["args"]["until_settled"], true);

    let eval = |extra: &[&str]| -> serde_json::Value {
        let o = run(trainer()
            .args(["eval", "--model"])
            .arg(out.join("model"))
            .arg("--data")
            .arg(ir.join("proj1"))
            .args(["--json", "--device", "cpu", "--threads", "1"])
            .args(extra));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let ruled = eval(&[]);
    assert_eq!(ruled["stop"]["max_steps"], 40, "{ruled}");
    let buckets = ruled["by_steps"].as_array().unwrap();
    assert!(!buckets.is_empty(), "{ruled}");
    for b in buckets {
        let ran = b["mean_steps_run"].as_f64().unwrap();
        assert!((1.0..=40.0).contains(&ran), "{b}");
    }
    let capped = eval(&["--steps", "3"]);
    for b in capped["by_steps"].as_array().unwrap() {
        let ran = b["mean_steps_run"].as_f64().unwrap();
        assert!((1.0..=3.0).contains(&ran), "--steps 3 caps the rule: {b}");
    }

    let refused = |extra: &[&str]| train_refused(data, &dir.path().join("bad"), extra);
    assert!(refused(&["--stop-tolerance=-1"]).contains("--stop-tolerance -1"));
    assert!(refused(&["--stop-tolerance", "0.1", "--stop-max-steps", "0"]).contains("--stop-max-steps 0"));
    assert!(refused(&["--subset", "ddf-7"]).contains("--subset 'ddf-7'"));
    assert!(refused(&["--clip-norm=-2"]).contains("--clip-norm -2"));
}

/// What a user's review of `eval` and `predict` found (2026-12-02), on the
/// shipped bundles: each an error naming its input, where there was a
/// panic, a crash, or a score of nothing.
#[test]
fn eval_and_predict_refuse_what_a_review_found() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let models = root.join("models");
    let dir = tempfile::tempdir().unwrap();
    let failed = |cmd: &mut Command| -> String {
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "{cmd:?} succeeded: {}", String::from_utf8_lossy(&out.stdout));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };
    // An --aux value that would make every probability NaN (was: a panic).
    let kernels = root.join("llvm-tests/Inputs/infer/two_kernels.cl");
    for bad in ["transfer=1e39,wgsize=256", "transfer=inf,wgsize=256", "transfer=NaN,wgsize=1", "transfer=-5,wgsize=1"] {
        let e = failed(trainer().args(["predict", "--model"]).arg(models.join("devmap-amd")).arg(&kernels).args(["--aux", bad]));
        assert!(e.contains("--aux transfer") && e.contains("is not a finite, non-negative number"), "{bad}: {e}");
    }
    // --threads past any machine (was: a stack overflow), --steps below 1.
    let e =
        failed(trainer().args(["eval", "--model"]).arg(models.join("dominance")).args(["--data", "/nonexistent", "--threads", "100000"]));
    assert!(e.contains("--threads 100000: from 1 to 1024"), "{e}");
    for steps in ["0", "-3", "10001"] {
        let e = failed(trainer().args(["eval", "--model"]).arg(models.join("reachability")).args([
            "--data",
            "/nonexistent",
            &format!("--steps={steps}"),
        ]));
        assert!(e.contains("'--steps <STEPS>'"), "{steps}: {e}");
    }
    // A module of declarations alone has no code to classify (was: class
    // 25 at p=0.996), as the learned pass says.
    let decl = dir.path().join("decl.ll");
    std::fs::write(&decl, "declare i32 @f(i32)\n@g = global i32 3\n").unwrap();
    let e = failed(trainer().args(["predict", "--device", "cpu", "--model"]).arg(models.join("poj104")).arg(&decl));
    assert!(e.contains("decl.ll: no function defined, nothing to classify"), "{e}");
    // A node-level bundle on a source file is told to compile it (was: an
    // IR parse error), and on a module without a root says so on stderr
    // (was: no output at all).
    let e = failed(trainer().args(["predict", "--device", "cpu", "--model"]).arg(models.join("reachability")).arg(&kernels));
    assert!(e.contains("two_kernels.cl: a source file, and a reachability bundle reads LLVM IR"), "{e}");
    let out = trainer().args(["predict", "--device", "cpu", "--model"]).arg(models.join("reachability")).arg(&decl).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && out.stdout.is_empty() && e.contains("decl.ll: no eligible reachability root, nothing to predict"),
        "{e}"
    );
    // A missing bundle's cause, once.
    let e = failed(trainer().args(["predict", "--model"]).arg(dir.path().join("none")).arg(&kernels));
    assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
    // Nothing to score is an error, not precision 1.0 or accuracy 0.
    let empty = dir.path().join("empty.ll");
    std::fs::write(&empty, "not IR\n").unwrap();
    let e = failed(trainer().args(["eval", "--model"]).arg(models.join("dominance")).arg("--data").arg(&empty));
    assert!(e.contains("no DDF example of dominance to evaluate"), "{e}");
    let bad = dir.path().join("bad");
    for (class, text) in [("1", "this is not C\n"), ("2", "nor this\n")] {
        std::fs::create_dir_all(bad.join(class)).unwrap();
        std::fs::write(bad.join(class).join("1.cpp"), text).unwrap();
    }
    let e = failed(trainer().args(["eval", "--model"]).arg(models.join("poj104")).arg("--data").arg(&bad));
    assert!(e.contains("none of its 2 programs compiled"), "{e}");
    // A class directory linked in from elsewhere is read (was: skipped).
    let linked = dir.path().join("linked");
    std::fs::create_dir_all(linked.join("1")).unwrap();
    std::fs::write(linked.join("1/1.cpp"), "int main() { int s = 0; for (int i = 0; i < 9; i++) s += i; return s; }\n").unwrap();
    std::os::unix::fs::symlink(linked.join("1"), linked.join("2")).unwrap();
    let out = run(trainer().args(["eval", "--model"]).arg(models.join("poj104")).arg("--data").arg(&linked).arg("--json"));
    let v: serde_json::Value = serde_json::from_slice(out.stdout.rsplit(|&b| b == b'\n').find(|l| !l.is_empty()).unwrap()).unwrap();
    assert_eq!(v["programs"], 2, "{v}");
    // A program whose file name is not UTF-8 is read and classified (was:
    // looked for under its lossy name).
    use std::os::unix::ffi::OsStrExt;
    let odd = dir.path().join("odd");
    std::fs::create_dir_all(odd.join("1")).unwrap();
    std::fs::write(
        odd.join("1").join(std::ffi::OsStr::from_bytes(b"\xff.cpp")),
        "int main() { int s = 1; for (int i = 1; i < 7; i++) s *= i; return s; }\n",
    )
    .unwrap();
    let out = run(trainer().args(["eval", "--model"]).arg(models.join("poj104")).arg("--data").arg(&odd).arg("--json"));
    let v: serde_json::Value = serde_json::from_slice(out.stdout.rsplit(|&b| b == b'\n').find(|l| !l.is_empty()).unwrap()).unwrap();
    assert_eq!((v["programs"].as_u64(), v["examples"].as_u64()), (Some(1), Some(1)), "{v}");
    // OpenCL to a bundle of another task: refused by name (was: compiled as
    // device mapping's kernels and classified).
    let e = failed(trainer().args(["predict", "--model"]).arg(models.join("poj104")).arg(&kernels));
    assert!(e.contains("an OpenCL kernel file, and") && e.contains("is a poj104 bundle"), "{e}");
    // A DevMap CSV value past f32's range, named with the record's own line.
    let csv = dir.path().join("rows.csv");
    std::fs::write(
        &csv,
        "benchmark,dataset,transfer,wgsize,oracle,src\nb-1,default,64,8,GPU,\"kernel void a(global int* x) {\n  x[0] = 1;\n}\"\nb-2,default,1e300,8,GPU,\"kernel void b(global int* x) { x[0] = 2; }\"\n",
    )
    .unwrap();
    let e = failed(trainer().args(["eval", "--model"]).arg(models.join("devmap-amd")).arg("--data").arg(&csv));
    assert!(e.contains("rows.csv:5: transfer '1e300' is not a non-negative number within f32's range"), "{e}");
    // Flags that select node-level examples are refused, not ignored.
    for flag in [["--limit", "1"], ["--longer-than", "3"]] {
        let e = failed(trainer().args(["eval", "--model"]).arg(models.join("poj104")).arg("--data").arg(&linked).args(flag));
        assert!(e.contains(&format!("{}: ", flag[0])) && e.contains("graph-level (poj104) bundle"), "{e}");
    }
}

/// What a probe of the trainer found (2026-12-02): settings that trained a
/// model of NaNs or scored nothing are refused; a run that diverges stops
/// and keeps nothing of the diverged state; two runs into one directory
/// are refused; an unwritable stdout is an error line, not a panic.
#[test]
fn a_probe_of_the_trainer_refuses_and_stops_as_it_should() {
    let (_, data) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let with = |out: &Path, set: &[(&str, &str)], budget: &str| -> Vec<String> {
        let mut a = train_args(data, out, budget);
        for (flag, value) in set {
            let at = a.iter().position(|x| x == flag).map(|i| i + 1);
            match at {
                Some(i) => a[i] = value.to_string(),
                None => a.extend([flag.to_string(), value.to_string()]),
            }
        }
        a
    };
    for (flag, value, why) in [
        ("--lr", "nan", "not a finite learning rate above 0"),
        ("--lr", "inf", "not a finite learning rate above 0"),
        ("--steps", "0", "0 is not in 1..=10000"),
        ("--steps", "10001", "10001 is not in 1..=10000"),
        ("--val-examples", "0", "at least 1"),
    ] {
        let o = trainer().args(with(&dir.path().join("bad"), &[(flag, value)], "10")).output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(flag) && e.contains(why), "{flag} {value}: {e}");
    }
    // A rate that makes the weights NaN: stopped at the validation, no
    // bundle or checkpoint of the NaN state (it shipped one as the best,
    // and its checkpoint could not be read back).
    let diverged = dir.path().join("diverged");
    let o = trainer().args(with(&diverged, &[("--lr", "1e30")], "800")).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    // (Caught by the training loss where the step's own loss is NaN, else
    // by the validation after it.)
    assert!(!o.status.success() && (e.contains("the model diverged at") || e.contains("the training loss is NaN")), "{e}");
    assert!(!diverged.join("model").exists() && !diverged.join("checkpoint/state.json").exists());
    // Two runs into one directory: the second is refused while the first
    // holds it.
    let shared = dir.path().join("shared");
    let mut first = trainer().args(with(&shared, &[], "1000000")).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let start = std::time::Instant::now();
    while !shared.join(".lock").exists() {
        assert!(start.elapsed().as_secs() < 60, "the first run never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The lock file appears just before the lock is taken.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let o = trainer().args(with(&shared, &[("--task", "dominance")], "10")).output().unwrap();
    first.kill().unwrap();
    first.wait().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("another programl-train run is writing this run directory"), "{e}");
    // A run started without --hidden resumes with --hidden at its default
    // (it was refused: "hidden: unset then, 34 now").
    let plain = dir.path().join("plain");
    run(trainer().args(with(&plain, &[], "200")));
    run(trainer().args(with(&plain, &[("--hidden", "34")], "400")));
    // A store whose training split is empty (its one program hashed into
    // val or test): said as such (it blamed --max-nodes).
    let (ir, _) = fixture();
    let one = dir.path().join("one-ir");
    std::fs::create_dir_all(&one).unwrap();
    let name = (0..1000)
        .map(|i| format!("p{i}.ll"))
        .find(|n| programl_dataset::split_of(&programl_dataset::split_key(Path::new(n))) != programl_dataset::Split::Train)
        .unwrap();
    let source = std::fs::read_dir(ir.join("proj0")).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|e| e == "ll"));
    std::fs::copy(source.unwrap(), one.join(&name)).unwrap();
    let store = dir.path().join("one-store");
    programl_dataset::Builder::open(programl_dataset::BuildConfig::new(&one, &store)).unwrap().run(&|_| {}).unwrap();
    let mut a = with(&dir.path().join("one-run"), &[], "10");
    let at = a.iter().position(|x| x == "--data").unwrap() + 1;
    a[at] = store.display().to_string();
    let o = trainer().args(&a).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("the training split holds no datadep"), "{e}");
    // Standard output that cannot be written.
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/poj104");
    let ll = dir.path().join("f.ll");
    std::fs::write(&ll, "define i32 @f(i32 %x) {\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n").unwrap();
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let o = trainer().args(["predict", "--device", "cpu", "--model"]).arg(&model).arg(&ll).stdout(full).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("<stdout>: cannot write: No space left on device") && !e.contains("panicked"), "{e}");
}
