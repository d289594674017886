//! Graph construction time: this project against ProGraML 0.3.2's
//! `llvm2graph-10`, on the same real IR files in one run.
//!
//! ```text
//! cargo bench -p programl-cli --bench construction             # whole corpus
//! PROGRAML_BENCH_FILES=300 cargo bench -p programl-cli --bench construction   # fixed sample
//! ```
//!
//! Needs the corpus (`bash scripts/corpus.sh`) and the reference binaries
//! (`bash scripts/bootstrap.sh`). Every corpus file is rewritten for LLVM 10
//! (`oracle::rewrite_for_llvm10`) into a temporary directory, which
//! `llvm2graph-10` reads; our tools read the same rewrite with the typed
//! attributes LLVM 16 requires kept (`oracle::Rewrite::FOR_LLVM16`). Then:
//!
//! 1. in process, one thread: `ir::parse_module` + `build` per file, both
//!    modes (per-file median and total; build alone too);
//! 2. `programl graph` once over the whole directory, all cores, compat and
//!    default mode (total wall time);
//! 3. `programl graph` one process per file, sequential (as upstream is
//!    used): per-file median and total;
//! 4. `llvm2graph-10 --stdout_fmt=pb`, one process per file, sequential
//!    (it is single-threaded): per-file median and total;
//! 5. the same through `xargs -P <cores>`, for a fair whole-directory
//!    comparison with item 2.
//!
//! All graphs are written as binary protobuf into the temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use programl::builder::{build, BuildOptions, Mode};
use programl_testkit::{self as oracle, Oracle, Rewrite};

fn corpus_files(dir: &Path) -> Vec<PathBuf> {
    programl::ir::find_ir_files(dir).unwrap_or_default()
}

fn median(times: &mut [Duration]) -> Duration {
    if times.is_empty() {
        return Duration::ZERO;
    }
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Row {
    tool: String,
    median: Option<Duration>,
    total: Duration,
    files: usize,
}

fn progress(label: &str, i: usize, n: usize, start: Instant) {
    if (i + 1).is_multiple_of((n / 10).max(1)) || i + 1 == n {
        eprintln!("  {label}: {}/{n} files ({:.1} s)", i + 1, start.elapsed().as_secs_f64());
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let corpus = std::env::var_os("PROGRAML_CORPUS").map(PathBuf::from).unwrap_or_else(|| oracle::cache_dir().join("corpus"));
    let mut files = corpus_files(&corpus);
    if files.is_empty() {
        eprintln!("no IR corpus in {}: run `bash scripts/corpus.sh` first", corpus.display());
        std::process::exit(2);
    }
    if let Some(n) = std::env::var("PROGRAML_BENCH_FILES").ok().and_then(|v| v.parse::<usize>().ok()) {
        if n < files.len() {
            let all = std::mem::take(&mut files);
            files = (0..n).map(|i| all[i * all.len() / n].clone()).collect();
        }
    }
    let oracle = match Oracle::locate() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let programl = PathBuf::from(env!("CARGO_BIN_EXE_programl"));
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir10 = tmp.path().join("ir-llvm10");
    let dir16 = tmp.path().join("ir-llvm16");
    let out = tmp.path().join("out");
    for d in [&dir10, &dir16, &out] {
        std::fs::create_dir_all(d).expect("creating temp dirs");
    }

    // Rewritten inputs, flat names.
    eprintln!("construction bench: {} IR files from {}, {cores} cores", files.len(), corpus.display());
    let mut inputs: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut bytes = 0usize;
    for f in &files {
        let rel = f.strip_prefix(&corpus).unwrap_or(f).to_string_lossy().replace('/', "__");
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        bytes += text.len();
        let (a, b) = (dir10.join(&rel), dir16.join(&rel));
        std::fs::write(&a, oracle::rewrite_for_llvm10(&text)).expect("writing rewritten IR");
        std::fs::write(&b, Rewrite::FOR_LLVM16.apply(&text)).expect("writing rewritten IR");
        inputs.push((a, b));
    }
    let n = inputs.len();
    eprintln!("  {n} files, {:.1} MB of IR", bytes as f64 / 1e6);
    let mut rows: Vec<Row> = Vec::new();

    // 1. In process, single thread.
    for (mode, label) in [(Mode::Programl03, "programl-0.3"), (Mode::Paper, "paper")] {
        let mut per_file = Vec::with_capacity(n);
        let mut build_only = Vec::with_capacity(n);
        let (mut nodes, mut edges, mut failed) = (0usize, 0usize, 0usize);
        let start = Instant::now();
        for (i, (_, f16)) in inputs.iter().enumerate() {
            let Ok(text) = std::fs::read(f16) else { continue };
            let t0 = Instant::now();
            let context = inkwell::context::Context::create();
            let name = f16.display().to_string();
            match programl::ir::parse_module(&context, &text, &name) {
                Ok(module) => {
                    let t1 = Instant::now();
                    let g = build(&module, &BuildOptions { mode, ..Default::default() });
                    build_only.push(t1.elapsed());
                    nodes += g.node_count();
                    edges += g.edge_count();
                }
                Err(_) => failed += 1,
            }
            per_file.push(t0.elapsed());
            progress(&format!("in-process {label}"), i, n, start);
        }
        let total = start.elapsed();
        let ok = n - failed;
        eprintln!(
            "  in-process {label}: {failed} failed to load; mean graph {:.0} nodes, {:.0} edges",
            nodes as f64 / ok.max(1) as f64,
            edges as f64 / ok.max(1) as f64
        );
        rows.push(Row {
            tool: format!("ours in-process, parse+build, {label}, 1 thread"),
            median: Some(median(&mut per_file)),
            total,
            files: n,
        });
        let build_total = build_only.iter().sum();
        rows.push(Row {
            tool: format!("ours in-process, build only, {label}, 1 thread"),
            median: Some(median(&mut build_only)),
            total: build_total,
            files: ok,
        });
    }

    // 2. The CLI over the directory, all cores; best of two runs.
    for (args, label) in [(&["--compat", "programl-0.3"][..], "programl-0.3"), (&[][..], "paper")] {
        let mut best: Option<Duration> = None;
        for run in 0..2 {
            let o = out.join(format!("cli-{label}-{run}"));
            let start = Instant::now();
            let status = Command::new(&programl)
                .arg("graph")
                .args(["--format", "pb"])
                .args(args)
                .arg("-o")
                .arg(&o)
                .arg(&dir16)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let total = start.elapsed();
            match status {
                Ok(s) if s.success() => best = Some(best.map_or(total, |b| b.min(total))),
                Ok(s) => eprintln!("  programl graph ({label}) failed: {s}; is the CLI built? `cargo build --release`"),
                Err(e) => eprintln!("  programl graph ({label}): {e}"),
            }
            let _ = std::fs::remove_dir_all(&o);
        }
        eprintln!("  programl graph dir ({label}): {:.2} s (best of 2)", best.unwrap_or_default().as_secs_f64());
        if let Some(total) = best {
            rows.push(Row { tool: format!("ours `programl graph` dir, {label}, {cores} threads"), median: None, total, files: n });
        }
    }

    // 3 and 4. One process per file, sequential.
    let run_per_file = |label: &str, tool: &Path, mk: &dyn Fn(&Path, &Path) -> Command, pick16: bool| {
        let mut times = Vec::with_capacity(n);
        let mut failed = 0;
        let start = Instant::now();
        for (i, (f10, f16)) in inputs.iter().enumerate() {
            let input = if pick16 { f16 } else { f10 };
            let target = out.join(format!("{label}-{i}.pb"));
            let t0 = Instant::now();
            let ok = mk(input, &target).status().map(|s| s.success()).unwrap_or(false);
            times.push(t0.elapsed());
            let _ = std::fs::remove_file(&target);
            if !ok {
                failed += 1;
            }
            progress(label, i, n, start);
        }
        let total = start.elapsed();
        if failed > 0 {
            eprintln!("  {label}: {failed} files failed ({})", tool.display());
        }
        (median(&mut times), total)
    };
    let ours_cli = |input: &Path, target: &Path| {
        let mut c = Command::new(&programl);
        c.args(["graph", "--compat", "programl-0.3", "--format", "pb", "-j", "1", "-o"]).arg(target).arg(input);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    };
    let (m, t) = run_per_file("programl-per-file", &programl, &ours_cli, true);
    rows.push(Row { tool: "ours `programl graph` per file, programl-0.3, sequential".into(), median: Some(m), total: t, files: n });
    let llvm2graph = oracle.llvm2graph();
    let upstream = |input: &Path, target: &Path| {
        let mut c = Command::new(oracle.llvm2graph());
        c.arg("--stdout_fmt=pb");
        c.stdin(std::fs::File::open(input).map(Stdio::from).unwrap_or(Stdio::null()));
        c.stdout(std::fs::File::create(target).map(Stdio::from).unwrap_or(Stdio::null()));
        c.stderr(Stdio::null());
        c
    };
    let (m, t) = run_per_file("llvm2graph-10", &llvm2graph, &upstream, false);
    rows.push(Row { tool: "llvm2graph-10 per file, sequential".into(), median: Some(m), total: t, files: n });

    // 5. Upstream in parallel through xargs.
    let xo = out.join("xargs");
    std::fs::create_dir_all(&xo).ok();
    let script = format!(
        "ls {dir} | xargs -P {cores} -I{{}} sh -c '{bin} --stdout_fmt=pb < {dir}/{{}} > {xo}/{{}}.pb 2>/dev/null'",
        dir = dir10.display(),
        bin = llvm2graph.display(),
        xo = xo.display()
    );
    let start = Instant::now();
    let status = Command::new("sh").arg("-c").arg(&script).status();
    let total = start.elapsed();
    if status.is_ok() {
        rows.push(Row { tool: format!("llvm2graph-10 per file, xargs -P {cores}"), median: None, total, files: n });
    }

    // Report.
    println!();
    println!("Graph construction, {n} real IR files ({:.1} MB), {cores} cores", bytes as f64 / 1e6);
    println!("{:<62} {:>12} {:>10} {:>9}", "tool", "median/file", "total", "ms/file");
    for r in &rows {
        let med = r.median.map_or("-".to_string(), |m| format!("{:.2} ms", ms(m)));
        println!("{:<62} {:>12} {:>8.2} s {:>9.2}", r.tool, med, r.total.as_secs_f64(), ms(r.total) / r.files.max(1) as f64);
    }
    let find = |p: &str| rows.iter().find(|r| r.tool.starts_with(p));
    println!();
    if let (Some(up), Some(ours)) = (find("llvm2graph-10 per file, seq"), find("ours in-process, parse+build, programl-0.3")) {
        println!(
            "per-file median: llvm2graph-10 {:.2} ms vs ours in-process {:.2} ms (compat): {:.1}x",
            ms(up.median.unwrap_or_default()),
            ms(ours.median.unwrap_or_default()),
            up.median.unwrap_or_default().as_secs_f64() / ours.median.unwrap_or_default().as_secs_f64().max(1e-9)
        );
    }
    if let (Some(up), Some(ours)) = (find("llvm2graph-10 per file, seq"), find("ours `programl graph` per file")) {
        println!(
            "per-process median: llvm2graph-10 {:.2} ms vs `programl graph` {:.2} ms: {:.1}x",
            ms(up.median.unwrap_or_default()),
            ms(ours.median.unwrap_or_default()),
            up.median.unwrap_or_default().as_secs_f64() / ours.median.unwrap_or_default().as_secs_f64().max(1e-9)
        );
    }
    if let (Some(up), Some(ours)) = (find("llvm2graph-10 per file, xargs"), find("ours `programl graph` dir, programl-0.3")) {
        println!(
            "whole directory on {cores} cores: llvm2graph-10 (xargs) {:.2} s vs `programl graph` {:.2} s: {:.1}x",
            up.total.as_secs_f64(),
            ours.total.as_secs_f64(),
            up.total.as_secs_f64() / ours.total.as_secs_f64().max(1e-9)
        );
    }
    println!("paper's figure: 10.72 ms per file (mean construction time)");
    println!(
        "reproduce: bash scripts/bootstrap.sh && bash scripts/corpus.sh && {}cargo bench -p programl-cli --bench construction",
        std::env::var("PROGRAML_BENCH_FILES").map(|v| format!("PROGRAML_BENCH_FILES={v} ")).unwrap_or_default()
    );
}
