//! `programl-train devmap` end to end on slices of the real DevMap data
//! (`../shared/datasets/devmap/`, read in place). From the CSV's sources,
//! plus one row whose kernel cannot compile: cross-validation figures with
//! the failed row counted as an error, the static baseline, the protocols,
//! and a bundle the model crate loads as a graph-level device-mapping
//! model. From the programs' own files (the default input) and from NCC's
//! IR: every row of the slice compiles, each to its own kernel's graph.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use programl_model::bundle::{Bundle, Head};

fn dataset() -> Option<PathBuf> {
    let csv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets/devmap/amd.csv");
    if csv.exists() {
        Some(csv)
    } else {
        programl_testkit::skip_unless_ci("devmap", &format!("{} is missing (the shared datasets)", csv.display()));
        None
    }
}

/// The rows of the first `kernels` distinct sources of `csv`, then one row
/// whose source is broken; returns the CPU/GPU counts.
fn slice(csv: &Path, out: &Path, kernels: usize) -> (usize, usize) {
    let mut reader = csv::Reader::from_path(csv).unwrap();
    let headers = reader.headers().unwrap().clone();
    let src = headers.iter().position(|h| h == "src").unwrap();
    let oracle = headers.iter().position(|h| h == "oracle").unwrap();
    let mut writer = csv::Writer::from_path(out).unwrap();
    writer.write_record(&headers).unwrap();
    let mut seen: Vec<String> = Vec::new();
    let mut last = None;
    let (mut cpu, mut gpu) = (0, 0);
    for record in reader.records() {
        let record = record.unwrap();
        let s = record[src].to_string();
        if !seen.contains(&s) {
            if seen.len() == kernels {
                continue;
            }
            seen.push(s);
        }
        if &record[oracle] == "GPU" {
            gpu += 1;
        } else {
            cpu += 1;
        }
        writer.write_record(&record).unwrap();
        last = Some(record);
    }
    let mut broken: Vec<String> = last.unwrap().iter().map(str::to_string).collect();
    broken[src] = "__kernel void A(__global int* a) { a[0] = ; }".into();
    broken[oracle] = "CPU".into();
    writer.write_record(&broken).unwrap();
    writer.flush().unwrap();
    (cpu + 1, gpu)
}

fn devmap(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_programl-train"))
        .arg("devmap")
        .args(["--platform", "amd", "--epochs", "2", "--steps", "2", "--threads", "1", "--device", "cpu", "--json", "--quiet"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// `programl-train eval --model MODEL --data DATA` on the CPU at FP32 with
/// `PROGRAML_CACHE` set to `cache` (if given): its last JSON line.
fn eval_json(model: &Path, data: &Path, cache: Option<&Path>) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_programl-train"));
    cmd.args(["eval", "--model"]).arg(model).arg("--data").arg(data).args(["--device", "cpu", "--dtype", "f32", "--json"]);
    if let Some(c) = cache {
        cmd.env("PROGRAML_CACHE", c);
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(out.stdout.split(|&c| c == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap()
}

#[test]
fn cross_validation_counts_failed_rows_and_the_bundle_loads() {
    let Some(csv) = dataset() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (cpu, gpu) = slice(&csv, &data.join("amd.csv"), 12);
    let rows = cpu + gpu;
    let cache = tmp.path().join("cache");
    let bundle = tmp.path().join("bundle");
    let (d, c, b) = (data.to_str().unwrap(), cache.to_str().unwrap(), bundle.to_str().unwrap());

    let j = devmap(&["--input", "csv", "--data", d, "--cache", c, "--folds", "3", "--protocol", "all", "--out", b]);
    assert_eq!((j["platform"].as_str(), j["folds"].as_u64(), j["aux"].as_bool()), (Some("amd"), Some(3), Some(true)));
    assert_eq!(j["rows"].as_u64(), Some(rows as u64));
    assert_eq!((j["rows_failed"].as_u64(), j["kernels_failed"].as_u64()), (Some(1), Some(1)), "{j}");
    assert_eq!(j["compile_failures"]["expected expression"].as_u64(), Some(1), "{j}");
    for key in ["error", "error_grouped", "error_perfograph", "static_error", "precision", "recall", "f1"] {
        let v = j[key].as_f64().unwrap_or_else(|| panic!("{key} missing: {j}"));
        assert!((0.0..=1.0).contains(&v), "{key} = {v}");
    }
    // Grouped by kernel, no test row's kernel was trained on; stratified,
    // the seen and unseen parts add up to the whole.
    let g = &j["protocols"]["grouped"];
    assert_eq!(g["rows_unseen_kernel"], g["rows_tested"], "{g}");
    assert_eq!((g["error_unseen_kernel"].as_f64(), g["error_seen_kernel"].as_f64()), (g["error"].as_f64(), None), "{g}");
    let st = &j["protocols"]["stratified"];
    let (n, unseen) = (st["rows_tested"].as_f64().unwrap(), st["rows_unseen_kernel"].as_f64().unwrap());
    let part = |k: &str| st[k].as_f64().unwrap_or(0.0);
    let whole = part("error_seen_kernel") * (n - unseen) + part("error_unseen_kernel") * unseen;
    assert!((whole - st["error"].as_f64().unwrap() * n).abs() < 1e-6, "{st}");
    // The failed row is an error wherever it is tested.
    assert!(j["error"].as_f64().unwrap() >= 1.0 / rows as f64);
    let folds = j["per_fold"].as_array().unwrap();
    assert_eq!(folds.len(), 3);
    assert_eq!(folds.iter().map(|f| f["rows"].as_u64().unwrap()).sum::<u64>(), rows as u64);
    assert_eq!(folds.iter().map(|f| f["rows_failed"].as_u64().unwrap()).sum::<u64>(), 1);
    // Static mapping: the training folds' majority device, here always the
    // same one (the slice is far from balanced), so its error is the
    // minority's share.
    assert!(cpu.abs_diff(gpu) * 3 > rows, "the slice should be unbalanced: {cpu} CPU, {gpu} GPU");
    let minority = cpu.min(gpu) as f64 / rows as f64;
    assert!((j["static_error"].as_f64().unwrap() - minority).abs() < 1e-9, "{j}");

    // Two splits at a time (--threads 2, each split on one thread) give
    // the same figures, split for split.
    let cache2 = tmp.path().join("cache2");
    let out = Command::new(env!("CARGO_BIN_EXE_programl-train"))
        .arg("devmap")
        .args(["--platform", "amd", "--epochs", "2", "--steps", "2", "--threads", "2", "--device", "cpu", "--json", "--quiet"])
        .args(["--input", "csv", "--data", d, "--cache", cache2.to_str().unwrap(), "--folds", "3", "--protocol", "all"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let two: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["error", "error_grouped", "error_perfograph", "per_fold", "per_fold_grouped", "per_split_perfograph"] {
        assert_eq!(two[key], j[key], "{key} with two workers");
    }

    // Each finished split kept its test predictions: a second run reads
    // them instead of training (here they are rewritten to say "GPU" for
    // every row, so the rerun's error is the CPU rows' share), and the
    // seconds each split took, which the rerun sums as the protocol's
    // `split_s` (here rewritten to 1.5 s a split).
    for p in ["stratified", "grouped", "perfograph"] {
        let (wall, split) = (j["protocols"][p]["wall_s"].as_f64().unwrap(), j["protocols"][p]["split_s"].as_f64().unwrap());
        assert!(split > 0.0 && split <= wall + 1e-6, "{p}: split_s {split}, wall_s {wall} on one worker");
    }
    let kept_files: Vec<PathBuf> = std::fs::read_dir(cache.join("cv")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(kept_files.len(), 3 + 3 + 10, "{kept_files:?}");
    for f in &kept_files {
        let split: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        assert!(split["seconds"].as_f64().is_some_and(|s| s > 0.0), "{split}");
        let pairs: Vec<(usize, f64)> = serde_json::from_value(split["probs"].clone()).unwrap();
        let all_gpu: Vec<(usize, f64)> = pairs.iter().map(|&(r, _)| (r, 1.0)).collect();
        std::fs::write(f, serde_json::json!({"probs": all_gpu, "seconds": 1.5}).to_string()).unwrap();
    }
    // Held-out rows choose the epoch kept: the lowest error on them (the
    // later epoch on a tie).
    let held = tmp.path().join("held");
    let out = Command::new(env!("CARGO_BIN_EXE_programl-train"))
        .arg("devmap")
        .args(["--platform", "amd", "--epochs", "3", "--steps", "2", "--threads", "1", "--device", "cpu", "--quiet"])
        .args(["--input", "csv", "--data", d, "--cache", c, "--no-cv", "--val-share", "0.3", "--out", held.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = text.lines().find_map(|l| l.strip_prefix("held-out rows' error by epoch: ")).unwrap_or_else(|| panic!("{text}"));
    let (curve, kept) = line.split_once("; kept epoch ").unwrap();
    let curve: Vec<f64> = curve.split(' ').map(|v| v.parse().unwrap()).collect();
    let kept: usize = kept.trim().parse().unwrap();
    assert_eq!(curve.len(), 3, "{line}");
    let best = curve.iter().cloned().fold(f64::INFINITY, f64::min);
    assert_eq!(kept, curve.iter().rposition(|&e| e == best).unwrap() + 1, "{line}");
    // The bundle holds that epoch's weights: a run that stops there saves
    // the same bytes (training is deterministic on one thread).
    let short = tmp.path().join("short");
    let out = Command::new(env!("CARGO_BIN_EXE_programl-train"))
        .arg("devmap")
        .args(["--platform", "amd", "--epochs", &kept.to_string(), "--steps", "2", "--threads", "1", "--device", "cpu", "--quiet"])
        .args(["--input", "csv", "--data", d, "--cache", c, "--no-cv", "--val-share", "0.3", "--out", short.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let weights = |b: &Path| std::fs::read(b.join("weights.safetensors")).unwrap();
    assert!(weights(&held) == weights(&short), "epoch {kept}'s weights: {line}");
    // A wider state (--hidden), recorded in the bundle; a bundle of another
    // width cannot seed it.
    let wide = tmp.path().join("wide");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_programl-train"))
            .arg("devmap")
            .args(["--platform", "amd", "--epochs", "1", "--steps", "2", "--threads", "1", "--device", "cpu", "--quiet", "--hidden", "10"])
            .args(["--input", "csv", "--data", d, "--cache", c, "--no-cv", "--out", wide.to_str().unwrap()])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(Bundle::load(&wide, tch::Device::Cpu).unwrap().config.hyper.hidden, 10);
    let out = run(&["--init", short.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the bundle's state is 34 wide, this run's 10"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again = devmap(&["--input", "csv", "--data", d, "--cache", c, "--folds", "3"]);
    assert!((again["error"].as_f64().unwrap() - cpu as f64 / rows as f64).abs() < 1e-9, "{again}");
    // By default: the stratified and grouped protocols, not PERFOGRAPH's.
    assert!(again["error_grouped"].is_f64() && again["error_perfograph"].is_null(), "{again}");
    for p in ["stratified", "grouped"] {
        assert_eq!(again["protocols"][p]["split_s"].as_f64(), Some(4.5), "{again}");
    }
    // An ensemble's first member is the single model (its kept splits are
    // read, not retrained); the others train and keep theirs.
    let ens = devmap(&["--input", "csv", "--data", d, "--cache", c, "--folds", "3", "--ensemble", "2"]);
    assert_eq!(ens["ensemble"].as_u64(), Some(2), "{ens}");
    let now: Vec<PathBuf> = std::fs::read_dir(cache.join("cv")).unwrap().map(|e| e.unwrap().path()).collect();
    let second: Vec<&PathBuf> = now.iter().filter(|f| !kept_files.contains(f)).collect();
    assert_eq!(second.len(), 3 + 3, "one new kept split per stratified and grouped split: {second:?}");
    // The members' GPU probabilities are averaged: 0.9 and 0.0 make 0.45,
    // the CPU for every row, where the first member alone says the GPU.
    let rewrite = |f: &Path, p: f64| {
        let split: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let pairs: Vec<(usize, f64)> = serde_json::from_value(split["probs"].clone()).unwrap();
        let probs: Vec<(usize, f64)> = pairs.iter().map(|&(r, _)| (r, p)).collect();
        std::fs::write(f, serde_json::json!({"probs": probs, "seconds": 1.0}).to_string()).unwrap();
    };
    kept_files.iter().for_each(|f| rewrite(f, 0.9));
    second.iter().for_each(|f| rewrite(f, 0.0));
    let ens = devmap(&["--input", "csv", "--data", d, "--cache", c, "--folds", "3", "--ensemble", "2"]);
    assert!((ens["error"].as_f64().unwrap() - (gpu + 1) as f64 / rows as f64).abs() < 1e-9, "all CPU, and the failed row wrong: {ens}");
    assert_eq!(ens["protocols"]["stratified"]["split_s"].as_f64(), Some(6.0), "{ens}");
    let one = devmap(&["--input", "csv", "--data", d, "--cache", c, "--folds", "3"]);
    assert!((one["error"].as_f64().unwrap() - cpu as f64 / rows as f64).abs() < 1e-9, "the first member alone: {one}");

    let loaded = Bundle::load(&bundle, programl_model::tch::Device::Cpu).unwrap();
    assert_eq!((loaded.config.head, loaded.config.task.as_str()), (Head::Graph, "devmap-amd"));
    assert_eq!(loaded.config.classes, ["cpu", "gpu"]);
    assert_eq!(loaded.model.hyper().graph.as_ref().unwrap().aux, ["transfer", "wgsize"]);
    // The default head: gated pooling, its state joining the auxiliary inputs.
    let head = loaded.model.hyper().graph.clone().unwrap();
    assert_eq!((head.pool, head.join), (programl_model::Pool::Gated, programl_model::Join::State));
    assert_eq!(j["join"].as_str(), Some("state"), "{j}");
    assert!(loaded.config.source.unwrap().flags.iter().any(|f| f == "spir64"));
    // Every compiled row, once per epoch.
    assert_eq!(loaded.config.provenance.examples_seen, 2 * (rows as u64 - 1));

    // eval on the CSV: every row through the torch-free inference, the
    // failed row counted as the wrong device, the static mapping the CSV's
    // majority.
    let e = eval_json(&bundle, &data.join("amd.csv"), None);
    assert_eq!(
        (e["rows"].as_u64(), e["rows_failed"].as_u64(), e["task"].as_str()),
        (Some(rows as u64), Some(1), Some("devmap-amd")),
        "{e}"
    );
    assert!((e["static_error"].as_f64().unwrap() - minority).abs() < 1e-9, "{e}");
    let error = e["error"].as_f64().unwrap();
    assert!(error >= 1.0 / rows as f64 && (e["accuracy"].as_f64().unwrap() + error - 1.0).abs() < 1e-9, "{e}");
    // A directory of kernels has no transfer or work-group sizes: this
    // bundle, which needs them, refuses it by name.
    let not_csv = Command::new(env!("CARGO_BIN_EXE_programl-train")).args(["eval", "--model", b, "--data", d]).output().unwrap();
    let err = String::from_utf8_lossy(&not_csv.stderr);
    assert!(!not_csv.status.success() && err.contains("needs the auxiliary inputs") && err.contains("noaux"), "{err}");
    let missing =
        Command::new(env!("CARGO_BIN_EXE_programl-train")).args(["eval", "--model", b, "--data", "/no/such.csv"]).output().unwrap();
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("evaluates a DevMap CSV"));

    // Without the auxiliary inputs, one protocol; the kernels come from the cache.
    let noaux = tmp.path().join("noaux");
    let n = devmap(&[
        "--input",
        "csv",
        "--data",
        d,
        "--cache",
        c,
        "--folds",
        "3",
        "--no-aux",
        "--protocol",
        "grouped",
        "--out",
        noaux.to_str().unwrap(),
    ]);
    assert_eq!(n["aux"].as_bool(), Some(false));
    assert!(n["error"].is_null() && n["error_grouped"].is_f64() && n["error_perfograph"].is_null(), "{n}");
    assert_eq!(n["protocols"].as_object().map(|p| p.keys().cloned().collect::<Vec<_>>()), Some(vec!["grouped".to_string()]), "{n}");

    // A bundle without auxiliary inputs evaluates a directory of kernels
    // labelled by subdirectory: a file of two kernels gives two examples,
    // each its own graph; a file that does not compile counts as wrong.
    let kernels = tmp.path().join("kernels");
    for sub in ["cpu", "gpu"] {
        std::fs::create_dir_all(kernels.join(sub)).unwrap();
    }
    std::fs::write(
        kernels.join("gpu/two.cl"),
        "float h(float x) { return x * 2.0f; }\n__kernel void a(__global float *p) { p[get_global_id(0)] = h(p[0]); }\n__kernel void b(__global int *q) { q[0] += 1; }\n",
    )
    .unwrap();
    std::fs::write(kernels.join("cpu/one.cl"), "__kernel void c(__global int *q) { for (int i = 0; i < 64; i++) q[i] *= q[i]; }\n")
        .unwrap();
    std::fs::write(kernels.join("cpu/broken.cl"), "__kernel void d(__global int *q) { q[0] = ; }\n").unwrap();
    let e = eval_json(&noaux, &kernels, Some(&cache));
    assert_eq!(
        (e["input"].as_str(), e["files"].as_u64(), e["rows"].as_u64(), e["rows_failed"].as_u64()),
        (Some("directory"), Some(3), Some(4), Some(1)),
        "{e}"
    );
    assert_eq!(e["kernel_failures"]["expected expression"].as_u64(), Some(1), "{e}");
    // 2 GPU and 2 CPU examples: the static mapping is wrong on half.
    assert!((e["static_error"].as_f64().unwrap() - 0.5).abs() < 1e-9, "{e}");
    // A bundle with auxiliary inputs and a noaux/ model (as every shipped
    // devmap bundle): the directory is decided by noaux/, as `predict`
    // and the learned pass decide without the sizes.
    assert!(Command::new("cp").arg("-r").arg(&noaux).arg(bundle.join("noaux")).status().unwrap().success());
    let by_noaux = eval_json(&bundle, &kernels, Some(&cache));
    for key in ["rows", "rows_failed", "error", "files"] {
        assert_eq!(by_noaux[key], e[key], "{key}: {by_noaux} against {e}");
    }
    // A file without a kernel is counted by its cause and is no row (it has
    // nothing to map); a name that is not UTF-8 is a failed row, by its
    // cause (the compile cache keys a file by its name as text).
    std::fs::write(kernels.join("cpu/helpers.cl"), "float twice(float x) { return x * 2.0f; }\n").unwrap();
    use std::os::unix::ffi::OsStrExt;
    std::fs::write(kernels.join("gpu").join(std::ffi::OsStr::from_bytes(b"\xff.cl")), "__kernel void e(__global int *q) { q[1] = 2; }\n")
        .unwrap();
    let more = eval_json(&noaux, &kernels, Some(&cache));
    assert_eq!((more["files"].as_u64(), more["rows"].as_u64(), more["rows_failed"].as_u64()), (Some(5), Some(5), Some(2)), "{more}");
    assert_eq!(more["kernel_failures"]["no kernel in the file"].as_u64(), Some(1), "{more}");
    assert_eq!(more["kernel_failures"]["file name is not UTF-8"].as_u64(), Some(1), "{more}");
    // Files that compile and hold no kernel are no data: an error naming
    // the directory and why, not an accuracy over nothing.
    let helpers = tmp.path().join("helpers");
    std::fs::create_dir_all(helpers.join("cpu")).unwrap();
    std::fs::copy(kernels.join("cpu/helpers.cl"), helpers.join("cpu/helpers.cl")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_programl-train"))
        .args(["eval", "--model"])
        .arg(&noaux)
        .arg("--data")
        .arg(&helpers)
        .args(["--device", "cpu", "--json"])
        .env("PROGRAML_CACHE", &cache)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("helpers: no kernel to evaluate in its 1 .cl files (1 no kernel in the file)"), "{stderr}");
}

/// The rows of the first `programs` distinct programs (the benchmark's
/// `<suite>-<program>`) of `csv`; returns the row count.
fn slice_programs(csv: &Path, out: &Path, programs: &[&str]) -> usize {
    let mut reader = csv::Reader::from_path(csv).unwrap();
    let headers = reader.headers().unwrap().clone();
    let benchmark = headers.iter().position(|h| h == "benchmark").unwrap();
    let mut writer = csv::Writer::from_path(out).unwrap();
    writer.write_record(&headers).unwrap();
    let mut n = 0;
    for record in reader.records() {
        let record = record.unwrap();
        if programs.iter().any(|p| record[benchmark].starts_with(&format!("{p}-"))) {
            writer.write_record(&record).unwrap();
            n += 1;
        }
    }
    writer.flush().unwrap();
    n
}

/// The shipped build table resolves every row of both CSVs to a program
/// file that exists in the sources (SHOC Triad's inside its host code).
#[test]
fn the_build_table_resolves_every_row_to_a_file() {
    let Some(csv) = dataset() else { return };
    let shared = csv.parent().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new("tar").arg("-xJf").arg(shared.join("gpgpu-sources.tar.xz")).arg("-C").arg(tmp.path()).status().unwrap();
    assert!(status.success());
    let table: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/devmap-builds.json")).unwrap())
            .unwrap();
    let programs = table["programs"].as_array().unwrap();
    for platform in ["amd", "nvidia"] {
        let mut reader = csv::Reader::from_path(shared.join(format!("{platform}.csv"))).unwrap();
        let benchmark = reader.headers().unwrap().iter().position(|h| h == "benchmark").unwrap();
        let mut rows = 0;
        for record in reader.records() {
            let b = record.unwrap()[benchmark].to_string();
            let p = programs
                .iter()
                .filter(|p| b.strip_prefix(p["program"].as_str().unwrap()).is_some_and(|r| r.starts_with('-')))
                .max_by_key(|p| p["program"].as_str().unwrap().len())
                .unwrap_or_else(|| panic!("{platform}: {b}: no program"));
            let kernel = &b[p["program"].as_str().unwrap().len() + 1..];
            let file = p["kernels"][kernel].as_str().unwrap_or_else(|| panic!("{platform}: {b}: no file for {kernel}"));
            let path = tmp.path().join("gpgpu").join(p["dir"].as_str().unwrap()).join(file);
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).into_owned();
            let defined = regex::Regex::new(&format!(r"void\s+{}\s*\(", regex::escape(kernel))).unwrap();
            assert!(defined.is_match(&text), "{}: no kernel {kernel}", path.display());
            rows += 1;
        }
        assert_eq!(rows, 680, "{platform}");
    }
}

/// The default input: each row's kernel from its program's own file, with
/// the build options of the shipped table (NPB's class per row, a
/// program of several kernels each with its own graph); and NCC's IR.
#[test]
fn kernels_compile_from_their_programs_sources_and_from_ncc_ir() {
    let Some(csv) = dataset() else { return };
    let shared = csv.parent().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for f in ["gpgpu-sources.tar.xz", "ncc-task_devmap.zip"] {
        std::os::unix::fs::symlink(shared.join(f), data.join(f)).unwrap();
    }
    // NPB CG: eight kernels in two files, built per class; Rodinia's
    // particle filter, single precision; SHOC's Triad, a string in host code.
    let rows = slice_programs(&csv, &data.join("amd.csv"), &["npb-3.3-CG", "rodinia-3.1-particlefilter", "shoc-1.1.5-Triad"]);
    assert!(rows > 30, "{rows}");
    let cache = tmp.path().join("cache");
    let (d, c) = (data.to_str().unwrap(), cache.to_str().unwrap());
    let bundle = tmp.path().join("bundle");
    let b = bundle.to_str().unwrap();
    let j = devmap(&["--data", d, "--cache", c, "--folds", "3", "--protocol", "stratified", "--out", b]);
    assert_eq!(j["input"].as_str(), Some("sources"));
    assert_eq!((j["rows"].as_u64(), j["rows_failed"].as_u64()), (Some(rows as u64), Some(0)), "{j}");
    assert_eq!(j["kernels_repaired"].as_u64(), Some(0));
    assert!(j["error"].as_f64().is_some_and(|e| (0.0..=1.0).contains(&e)), "{j}");
    // More graphs than kernel names: NPB's classes build differently.
    let names = {
        let mut r = csv::Reader::from_path(data.join("amd.csv")).unwrap();
        let mut v: Vec<String> = r.records().map(|x| x.unwrap()[1].to_string()).collect();
        v.sort();
        v.dedup();
        v.len() as u64
    };
    assert!(j["kernels"].as_u64().unwrap() > names, "{j} ({names} kernel names)");
    // eval reads the sources beside the CSV, as the bundle was trained.
    let e = eval_json(&bundle, &data.join("amd.csv"), Some(&cache));
    assert_eq!((e["input"].as_str(), e["rows"].as_u64(), e["rows_failed"].as_u64()), (Some("sources"), Some(rows as u64), Some(0)), "{e}");
    let n = devmap(&["--input", "ncc", "--data", d, "--cache", c, "--no-cv"]);
    assert_eq!((n["input"].as_str(), n["rows_failed"].as_u64()), (Some("ncc"), Some(0)), "{n}");
}

#[test]
fn bad_arguments_and_data_are_errors_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = |args: &[&str], expect: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_programl-train")).arg("devmap").args(args).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(expect), "{args:?}: {err}");
    };
    let d = tmp.path().to_str().unwrap();
    bad(&["--platform", "intel", "--data", d], "--platform 'intel': expected amd or nvidia");
    bad(&["--platform", "amd", "--data", d], "amd.csv: cannot open");
    std::fs::write(tmp.path().join("amd.csv"), "benchmark,dataset,transfer,wgsize,oracle,src\nb,d,12,4,TPU,x\n").unwrap();
    bad(&["--platform", "amd", "--data", d], "amd.csv:2: oracle 'TPU' is neither CPU nor GPU");
    std::fs::write(tmp.path().join("amd.csv"), "benchmark,dataset,transfer,wgsize,oracle,src\nb,d,-3,4,GPU,x\n").unwrap();
    bad(&["--platform", "amd", "--data", d], "amd.csv:2: transfer '-3' is not a non-negative number");
    std::fs::write(tmp.path().join("amd.csv"), "benchmark,dataset,wgsize,oracle,src\n").unwrap();
    bad(&["--platform", "amd", "--data", d], "no column 'transfer'");
    bad(&["--platform", "amd", "--data", d, "--folds", "1"], "--folds 1: at least 2");
    std::fs::write(tmp.path().join("amd.csv"), "benchmark,dataset,transfer,wgsize,oracle,src\nb,d,3,4,GPU,x\n").unwrap();
    bad(&["--platform", "amd", "--data", d, "--input", "llvm9"], "--input 'llvm9': expected sources, csv or ncc");
    bad(&["--platform", "amd", "--data", d, "--protocol", "loo"], "--protocol 'loo': expected stratified, grouped or perfograph");
    bad(
        &["--platform", "amd", "--data", d, "--pool", "mean", "--join", "state"],
        "--join state joins the gated pooling's state: it needs --pool gated",
    );
    bad(&["--platform", "amd", "--data", d, "--join", "nodes"], "--join 'nodes': expected logits or state");
    bad(&["--platform", "amd", "--data", d, "--hidden", "7"], "--hidden 7 is not an even width in 4..=");
    bad(&["--platform", "amd", "--data", d, "--refit-head", "some"], "--refit-head 'some': expected a number of steps or off");
    // Nothing unpacked in this cache, and no archive beside the CSV.
    let c = tmp.path().join("cache");
    let c = c.to_str().unwrap();
    bad(&["--platform", "amd", "--data", d, "--cache", c], "gpgpu-sources.tar.xz: not found");
    bad(&["--platform", "amd", "--data", d, "--cache", c, "--input", "ncc"], "ncc-task_devmap.zip: cannot open");
}
