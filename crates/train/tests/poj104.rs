//! `programl-train poj104` and `eval --data DIR` end to end on a small
//! POJ-104-style tree written here: three problems, programs in the
//! dataset's style (no `#include`, `void main`, implicit `int`, stripped
//! `#define`s, a global `max` against `std::max`), one that cannot
//! compile. Checks the compile harness's repairs and failure count, the
//! bundle (graph head, classes, compiler, flags and prelude recorded), a
//! resumed run, and eval's JSON on programs the model never saw.

use std::path::Path;
use std::process::Command;

use programl_model::bundle::{Bundle, Head};

/// Program `i` of problem `class`: each problem has its own algorithm and
/// varies names, constants and one legacy quirk with `i`.
fn program(class: usize, i: usize) -> String {
    let v = ["a", "b", "x", "n", "k", "t", "m", "q"][i % 8];
    let main = match i % 3 {
        0 => "void main()",
        1 => "main()",
        _ => "int main()",
    };
    let ret = if main.starts_with("void") { "" } else { "return 0;" };
    match class {
        // Sum of a series: one loop, arithmetic.
        0 => format!("{main}\n{{\n  int {v}, s = 0, i;\n  scanf(\"%d\", &{v});\n  for (i = 1; i <= {v}; i++) s += i * {};\n  printf(\"%d\\n\", s);\n  {ret}\n}}\n", i + 1),
        // Bubble sort of an array sized by a stripped #define.
        1 => {
            let a = format!("{v}{v}");
            format!(
                "int max;\nint {a}[N];\n{main}\n{{\n  int n, i, j, t;\n  cin >> n;\n  for (i = 0; i < n; i++) cin >> {a}[i];\n  for (i = 0; i < n; i++)\n    for (j = 0; j + 1 < n - i; j++)\n      if ({a}[j] > {a}[j + 1]) {{ t = {a}[j]; {a}[j] = {a}[j + 1]; {a}[j + 1] = t; }}\n  max = {a}[n - 1];\n  for (i = 0; i < n; i++) cout << {a}[i] << \" \";\n  cout << max + {i} << endl;\n  {ret}\n}}\n"
            )
        }
        // Recursion over a string.
        _ => format!(
            "int f{i}(char *s, int {v})\n{{\n  if (s[{v}] == 0) return 0;\n  return (s[{v}] == 'a') + f{i}(s, {v} + 1);\n}}\n{main}\n{{\n  char s[100];\n  gets(s);\n  printf(\"%d\\n\", f{i}(s, 0) * strlen(s));\n  {ret}\n}}\n"
        ),
    }
}

fn write_tree(dir: &Path, range: std::ops::Range<usize>, broken: bool) {
    for class in 0..3 {
        let sub = dir.join(format!("{}", class + 1));
        std::fs::create_dir_all(&sub).unwrap();
        for i in range.clone() {
            std::fs::write(sub.join(format!("{i}.cpp")), program(class, i)).unwrap();
        }
    }
    if broken {
        std::fs::write(dir.join("2").join("999.cpp"), "int main() { int a = ; }\n").unwrap();
    }
}

fn train_cmd(data: &Path, cache: &Path, out: &Path, epochs: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_programl-train"));
    cmd.args(["poj104", "--epochs", epochs, "--steps", "4", "--lr", "5e-3", "--batch-nodes", "2000", "--threads", "1", "--device", "cpu"])
        .args(["--checkpoint-every", "0"])
        .arg("--data")
        .arg(data)
        .arg("--cache")
        .arg(cache)
        .arg("--out")
        .arg(out)
        .env("PROGRAML_CLANG", Path::new(programl::LLVM_BINDIR).join("clang"));
    cmd
}

#[test]
fn trains_a_bundle_resumes_and_evaluates_unseen_programs() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, cache, run, unseen) = (tmp.path().join("data"), tmp.path().join("cache"), tmp.path().join("run"), tmp.path().join("unseen"));
    write_tree(&data, 0..16, true);

    // Compile only: every quirk repaired, the broken program counted.
    let out = train_cmd(&data, &cache, &run, "1").args(["--compile-only", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["programs"], 49, "{report}");
    assert_eq!(report["failed"], 1, "{report}");
    assert_eq!(report["causes"]["expected expression"], 1, "{report}");
    assert!(report["repaired"].as_u64().unwrap() >= 32, "void main, implicit int, N and max are repaired: {report}");

    // Twelve epochs; the same run with other settings is refused (they are
    // its identity), but its epoch count may grow.
    let out = train_cmd(&data, &cache, &run, "12").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["epochs"], 12, "{results}");
    assert_eq!(results["compile_failures"], 1);
    let log = std::fs::read_to_string(run.join("log.csv")).unwrap();
    assert_eq!(log.lines().count(), 13, "{log}");
    let out = train_cmd(&data, &cache, &run, "12").args(["--pool", "sum"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("other settings"), "{}", String::from_utf8_lossy(&out.stderr));
    // IR that gives the same sizes but another vocabulary (another clang
    // or prelude; here two texts swapped in the run's record) is refused:
    // the embedding rows would be read as other texts'.
    let vocab_path = run.join("model/vocabulary.json");
    let kept = std::fs::read(&vocab_path).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&kept).unwrap();
    let tokens = v["tokens"].as_array_mut().unwrap();
    let first = tokens[0]["text"].clone();
    tokens[0]["text"] = tokens[1]["text"].clone();
    tokens[1]["text"] = first;
    std::fs::write(&vocab_path, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = train_cmd(&data, &cache, &run, "12").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another vocabulary"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(&vocab_path, kept).unwrap();
    // The same command again: nothing left to train, the same test figures.
    let out = train_cmd(&data, &cache, &run, "12").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(again["accuracy"], results["accuracy"]);
    // Its figures per level: here only -O0, the top level's.
    assert_eq!(results["by_level"]["O0"]["accuracy"], results["accuracy"], "{results}");
    // --test-only tests the current bundle and trains nothing.
    let out = train_cmd(&data, &cache, &run, "12").args(["--test-only"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let partial: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(partial["by_level"]["O0"], results["by_level"]["O0"], "{partial}");
    assert_eq!(std::fs::read_to_string(run.join("log.csv")).unwrap(), log, "--test-only trained nothing");
    // Several levels: each is tested on its own graphs.
    let levels = tmp.path().join("levels");
    let out = train_cmd(&data, &cache, &levels, "1").args(["--levels", "O0,O2", "--json", "--hidden", "10"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let both: serde_json::Value = serde_json::from_slice(&std::fs::read(levels.join("results.json")).unwrap()).unwrap();
    // ... at the width asked for (libtorch's operations), recorded in the
    // bundle; an odd width is refused by name.
    assert_eq!(Bundle::load(&levels.join("model"), tch::Device::Cpu).unwrap().config.hyper.hidden, 10);
    let out = train_cmd(&data, &cache, &tmp.path().join("odd"), "1").args(["--hidden", "7"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hidden 7"), "{}", String::from_utf8_lossy(&out.stderr));
    for level in ["O0", "O2"] {
        let l = &both["by_level"][level];
        assert_eq!(l["examples"].as_u64(), both["examples"].as_u64(), "{both}");
        assert!((0.0..=1.0).contains(&l["error"].as_f64().unwrap()), "{both}");
    }
    assert_eq!(both["by_level"]["O0"]["error"], both["error"], "the top-level figures are the first level's: {both}");

    // Extended by one epoch: one more line of log, from where it stopped.
    let copy = tmp.path().join("extended");
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["checkpoint", "model", "log.csv"] {
        assert!(Command::new("cp").arg("-r").arg(run.join(f)).arg(&copy).status().unwrap().success());
    }
    std::fs::copy(run.join("results.json"), copy.join("results.json")).unwrap();
    // --ship: the run's record replaces a directory whole, while the run
    // is under way (its checkpoint, to continue elsewhere) and once done.
    let shipped = tmp.path().join("shipped");
    std::fs::create_dir_all(&shipped).unwrap();
    std::fs::write(shipped.join("stale.txt"), "from an older bundle").unwrap();
    let out = train_cmd(&data, &cache, &copy, "13").args(["--budget", "0.01s"]).arg("--ship").arg(&shipped).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!copy.join("results.json").exists(), "a run in progress has no test figures");
    assert!(!shipped.join("stale.txt").exists() && !shipped.join("results.json").exists());
    assert!(shipped.join("checkpoint/state.json").exists() && shipped.join("weights.safetensors").exists());
    assert_eq!(std::fs::read_to_string(shipped.join("log.csv")).unwrap(), std::fs::read_to_string(copy.join("log.csv")).unwrap());
    let compile: serde_json::Value = serde_json::from_slice(&std::fs::read(shipped.join("compile.json")).unwrap()).unwrap();
    assert_eq!(compile["failed"], 1, "{compile}");
    let out = train_cmd(&data, &cache, &copy, "13").arg("--ship").arg(&shipped).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let extended = std::fs::read_to_string(copy.join("log.csv")).unwrap();
    assert_eq!(extended.lines().count(), 14, "{extended}");
    assert!(extended.starts_with(&log), "the first 12 epochs are kept:\n{extended}");
    assert_eq!(std::fs::read_to_string(shipped.join("log.csv")).unwrap(), extended);
    assert_eq!(std::fs::read(shipped.join("results.json")).unwrap(), std::fs::read(copy.join("results.json")).unwrap());
    assert_eq!(Bundle::load(&shipped, tch::Device::Cpu).unwrap().config.task, "poj104");
    // --ship-if-better replaces a directory only with a better validation:
    // not the same run's record again, but a directory with none.
    std::fs::write(shipped.join("marker"), "kept").unwrap();
    let better = tmp.path().join("better");
    let out = train_cmd(&data, &cache, &copy, "13").arg("--ship-if-better").arg(&shipped).arg("--ship-if-better").arg(&better).output();
    assert!(!out.unwrap().status.success(), "one --ship-if-better");
    let out = train_cmd(&data, &cache, &copy, "13").arg("--ship-if-better").arg(&shipped).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not shipped there"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(shipped.join("marker").exists());
    let out = train_cmd(&data, &cache, &copy, "13").arg("--ship-if-better").arg(&better).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(better.join("log.csv")).unwrap(), extended);
    // Before its first epoch ends, a run ships its checkpoint alone (to be
    // continued elsewhere), and is better than nothing nowhere.
    let (early, early_shipped, nowhere) = (tmp.path().join("early"), tmp.path().join("early-shipped"), tmp.path().join("nowhere"));
    let out = train_cmd(&data, &cache, &early, "2")
        .args(["--budget", "0.01s"])
        .arg("--ship")
        .arg(&early_shipped)
        .arg("--ship-if-better")
        .arg(&nowhere)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!early.join("log.csv").exists(), "one batch is not an epoch");
    assert!(early_shipped.join("checkpoint/state.json").exists() && !early_shipped.join("config.json").exists());
    assert!(!nowhere.exists());
    let leftovers: Vec<_> =
        std::fs::read_dir(tmp.path()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".shipped")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Interrupted by a budget again and again, a run ends where the
    // uninterrupted one did: same validation curve, same test figures.
    let resumed = tmp.path().join("resumed");
    let mut sessions = 0;
    while !resumed.join("results.json").exists() {
        sessions += 1;
        assert!(sessions < 200, "no progress after {sessions} sessions");
        let out = train_cmd(&data, &cache, &resumed, "12").args(["--budget", "0.1s"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(sessions > 2, "the budget did not interrupt the run ({sessions} sessions)");
    // Validation and the training loss: an epoch split across sessions
    // logs the loss of all its batches.
    let curve = |run: &Path| -> Vec<String> {
        std::fs::read_to_string(run.join("log.csv")).unwrap().lines().map(|l| l.split(',').skip(3).collect::<Vec<_>>().join(",")).collect()
    };
    assert_eq!(curve(&resumed), curve(&run));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(resumed.join("results.json")).unwrap()).unwrap();
    assert_eq!(r["accuracy"], results["accuracy"]);
    assert_eq!(r["examples_seen"], results["examples_seen"]);

    // The test split as a directory of sources: what results.json counted.
    let exported = tmp.path().join("test-split");
    let out = train_cmd(&data, &cache, &run, "12").arg("--export-test").arg(&exported).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files: usize = std::fs::read_dir(&exported).unwrap().map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count()).sum();
    assert_eq!(files as u64, results["test_programs"].as_u64().unwrap());

    // The bundle: a graph head over the three problems, with how to compile.
    let bundle = Bundle::load(&run.join("model"), tch::Device::Cpu).unwrap();
    assert_eq!(bundle.config.task, "poj104");
    assert_eq!(bundle.config.head, Head::Graph);
    assert_eq!(bundle.config.classes, ["1", "2", "3"]);
    let source = bundle.config.source.as_ref().unwrap();
    assert!(source.flags.contains(&"-O0".to_string()) && source.flags.contains(&"c++".to_string()), "{:?}", source.flags);
    assert!(source.prelude.as_deref().unwrap().contains("using namespace std;"));

    // eval on programs the model never saw (and one that does not compile).
    write_tree(&unseen, 100..106, true);
    let eval = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_programl-train"))
            .args(["eval", "--json", "--threads", "1", "--device", "cpu", "--model"])
            .arg(run.join("model"))
            .arg("--data")
            .arg(dir)
            .env("PROGRAML_CLANG", Path::new(programl::LLVM_BINDIR).join("clang"))
            .env("PROGRAML_CACHE", &cache)
            .output()
            .unwrap()
    };
    let out = eval(&unseen);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["examples"], 18, "{e}");
    assert_eq!(e["compile_failures"], 1, "{e}");
    let (acc, err, all) = (e["accuracy"].as_f64().unwrap(), e["error"].as_f64().unwrap(), e["error_all"].as_f64().unwrap());
    assert!((acc + err - 1.0).abs() < 1e-9);
    assert!((all - (1.0 - acc * 18.0 / 19.0)).abs() < 1e-9, "{e}");
    // Three algorithms this different are told apart after 12 epochs.
    assert!(acc >= 0.66, "accuracy {acc} on unseen programs: {e}");
    assert_eq!(e["level"], "O0", "the level the bundle records: {e}");

    // --level compiles at another level (the same programs compile), and
    // a level that is none is refused by name.
    let at = |level: &str| {
        Command::new(env!("CARGO_BIN_EXE_programl-train"))
            .args(["eval", "--json", "--threads", "1", "--device", "cpu", "--level", level, "--model"])
            .arg(run.join("model"))
            .arg("--data")
            .arg(&unseen)
            .env("PROGRAML_CLANG", Path::new(programl::LLVM_BINDIR).join("clang"))
            .env("PROGRAML_CACHE", &cache)
            .output()
            .unwrap()
    };
    let out = at("O2");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let o2: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&o2["level"], &o2["examples"], &o2["compile_failures"]), (&"O2".into(), &18.into(), &1.into()), "{o2}");
    let out = at("O5");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--level O5: not one of O0 O1 O2 O3 Os Oz"));

    // A class the bundle does not know is an error naming it.
    std::fs::create_dir_all(unseen.join("105")).unwrap();
    std::fs::write(unseen.join("105").join("1.cpp"), program(0, 1)).unwrap();
    let out = eval(&unseen);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("class '105'") && stderr.contains("unseen/105"), "{stderr}");
}
