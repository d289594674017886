//! What the learned pass adds to a build: per translation unit, one clang
//! process per unit as a build runs it, and amortised over the modules of
//! one ThinLTO link. Not a test: it prints figures (README.md, "The learned
//! pass", records them with this command).
//!
//! ```text
//! cargo build --release -p programl-passes
//! cargo bench -p programl-passes --bench infer_overhead
//! ```
//!
//! Real code: the C translation units of zlib, bzip2 and Lua 5.4 from the
//! corpus sources (`scripts/corpus.sh` unpacks them into
//! `$PROGRAML_CACHE/corpus-src`), compiled with `clang-16 -O2 -c` and the
//! flags `corpus.sh` gives them. Per unit, interleaved, `PROGRAML_BENCH_REPS`
//! times (default 3, medians):
//!
//! - `clang -O2 -c` alone, and with the plugin loaded doing nothing
//!   (`PROGRAML_GRAPH_AUTO=0`);
//! - with `PROGRAML_INFER='model=M;device=cpu'` (default roots: the sampled
//!   ones, at most 10; the bundle's T), whose `PROGRAML_LOG=info` line gives
//!   the pass's own split: runtime load (CUDA only: the CPU inference is in
//!   the plugin), bundle open (reading, checking and packing the weights),
//!   graph build, featurisation (model input and roots), inference,
//!   annotation;
//! - with one root (`roots=all;max_roots=1`), the inference a single
//!   decision costs;
//! - at the default `dtype=auto` (INT8 where the CPU has AVX-512 VNNI,
//!   else FP32) on the best kernel path the CPU runs; then both
//!   again with each other setting that the CPU runs ([`variants`]):
//!   `dtype=f32` where the default is INT8 (`dtype=int8` where it is FP32:
//!   the AVX2 or portable INT8 step), `dtype=bf16` where the CPU has BF16
//!   instructions, and every lower kernel path (`isa=avx512`,
//!   `isa=avxvnni;dtype=int8`: AVX-VNNI's INT8 step, `isa=avx2`,
//!   `isa=portable`).
//!
//! Then `opt -passes=verify` with and without the plugin loaded (the cost
//! of loading it, wall and CPU), and a ThinLTO link of Lua with the plugin
//! loaded in lld and `PROGRAML_INFER` set: one process, every module
//! through the pass, the bundle opened once.
//!
//! Environment: `PROGRAML_BENCH_VARIANTS` (which of the settings above to
//! measure beside the default, e.g. `isa=portable`; `none`),
//! `PROGRAML_BENCH_MODEL` (default `models/reachability`),
//! `PROGRAML_BENCH_REPS` (3), `PROGRAML_BENCH_PROJECTS` (`zlib,bzip2,lua`),
//! `PROGRAML_BENCH_OPT_RUNS` (1000), `PROGRAML_BENCH_INPUT` (`c`, the
//! default: the C sources; `ll`: each unit first compiled to -O0 IR,
//! `clang -O0 -S -emit-llvm -Xclang -disable-O0-optnone`, and the measured
//! compile is `clang -O2 -c x.ll`, as datasets of -O0 IR are compiled).
//!
//! GPU: on a machine with one, build `-p programl-runtime-cuda` too and run
//! with `PROGRAML_BENCH_DEVICE=cuda` (the pass then opens
//! `libprograml_runtime_cuda.so`; its load includes the CUDA libraries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use programl_infer::cpu::{self, Isa};

/// A project: directory under corpus-src, source globs (relative), flags.
struct Project {
    name: &'static str,
    package: &'static str,
    sources: &'static [&'static str],
    exclude: &'static [&'static str],
    flags: &'static [&'static str],
}

const PROJECTS: &[Project] = &[
    Project {
        name: "zlib",
        package: "zlib",
        sources: &["."],
        exclude: &[],
        flags: &["-I.", "-D_LARGEFILE64_SOURCE=1", "-DHAVE_UNISTD_H", "-DHAVE_STDARG_H"],
    },
    Project { name: "bzip2", package: "bzip2", sources: &["."], exclude: &[], flags: &["-I.", "-D_FILE_OFFSET_BITS=64"] },
    Project { name: "lua", package: "lua5.4", sources: &["src"], exclude: &[], flags: &["-Isrc", "-DLUA_COMPAT_5_3", "-DLUA_USE_LINUX"] },
];

struct Unit {
    project: &'static str,
    dir: PathBuf,
    file: PathBuf,
    flags: Vec<String>,
}

/// The pass's `PROGRAML_LOG=info` line, parsed.
#[derive(Clone, Debug, Default)]
struct Split {
    roots: f64,
    nodes: f64,
    runtime: f64,
    bundle: f64,
    graph: f64,
    features: f64,
    inference: f64,
    annotate: f64,
    total: f64,
}

fn parse_info(stderr: &str) -> Vec<Split> {
    let mut out = Vec::new();
    for line in stderr.lines().filter(|l| l.starts_with("programl-infer [info]:") && l.contains(" ms: ")) {
        let mut s = Split::default();
        let number = |word: &str| word.trim_end_matches([',', ';']).parse::<f64>().unwrap_or(f64::NAN);
        let words: Vec<&str> = line.split_whitespace().collect();
        for w in words.windows(2) {
            match w[1].trim_end_matches([',', ';']) {
                "roots" => s.roots = number(w[0]),
                "nodes" => s.nodes = number(w[0]),
                _ => {}
            }
        }
        for w in &words {
            if let Some((k, v)) = w.split_once('=') {
                let v = number(v);
                match k {
                    "runtime" => s.runtime = v,
                    "bundle" => s.bundle = v,
                    "graph" => s.graph = v,
                    "features" => s.features = v,
                    "inference" => s.inference = v,
                    "annotate" => s.annotate = v,
                    "total" => s.total = v,
                    _ => {}
                }
            }
        }
        out.push(s);
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn profile_dir() -> PathBuf {
    // target/release/deps/infer_overhead-HASH
    std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn cache_dir() -> PathBuf {
    programl::fsutil::cache_dir()
}

fn units(projects: &[String]) -> Vec<Unit> {
    let src = cache_dir().join("corpus-src");
    let mut out = Vec::new();
    for p in PROJECTS.iter().filter(|p| projects.iter().any(|n| n == p.name)) {
        let Some(dir) = std::fs::read_dir(src.join(p.package)).ok().and_then(|d| d.flatten().map(|e| e.path()).find(|e| e.is_dir())) else {
            eprintln!("{}: no sources under {} (run scripts/corpus.sh); skipped", p.name, src.join(p.package).display());
            continue;
        };
        for sub in p.sources {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(sub))
                .map(|d| d.flatten().map(|e| e.path()).filter(|f| f.extension().is_some_and(|x| x == "c")).collect())
                .unwrap_or_default();
            files.retain(|f| !p.exclude.iter().any(|x| f.ends_with(x)));
            files.sort();
            for file in files {
                out.push(Unit { project: p.name, dir: dir.clone(), file, flags: p.flags.iter().map(|s| s.to_string()).collect() });
            }
        }
    }
    out
}

/// Each unit compiled to -O0 IR in `dir` (without `optnone`, so that the
/// measured `-O2 -c x.ll` optimises it), as a unit of its own; units that
/// fail to compile are left out.
fn to_ir(units: Vec<Unit>, dir: &Path) -> Vec<Unit> {
    std::fs::create_dir_all(dir).unwrap();
    let clang = Path::new(programl::LLVM_BINDIR).join("clang");
    units
        .into_iter()
        .filter_map(|u| {
            let sub = dir.join(u.project);
            std::fs::create_dir_all(&sub).ok()?;
            let ll = sub.join(u.file.file_stem()?).with_extension("ll");
            let ok = Command::new(&clang)
                .current_dir(&u.dir)
                .args(["-O0", "-S", "-emit-llvm", "-w", "-Xclang", "-disable-O0-optnone"])
                .args(&u.flags)
                .arg(&u.file)
                .arg("-o")
                .arg(&ll)
                .status()
                .ok()?
                .success();
            ok.then(|| Unit { project: u.project, dir: u.dir, file: ll, flags: Vec::new() })
        })
        .collect()
}

/// Runs `cmd` and returns (wall ms, success, stderr).
fn timed(cmd: &mut Command) -> (f64, bool, String) {
    let start = Instant::now();
    let out = cmd.stdin(Stdio::null()).stdout(Stdio::null()).output().expect("running a tool");
    (start.elapsed().as_secs_f64() * 1e3, out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn clang(unit: &Unit, extra: &[&str], env: &[(&str, &str)], plugin: Option<&Path>) -> Command {
    let mut c = Command::new(Path::new(programl::LLVM_BINDIR).join("clang"));
    c.current_dir(&unit.dir).args(["-O2", "-c", "-w"]).args(&unit.flags).args(extra).arg(&unit.file).args(["-o", "/dev/null"]);
    if let Some(p) = plugin {
        c.arg(format!("-fpass-plugin={}", p.display()));
    }
    clean_env(&mut c);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// No PROGRAML_* variable of the caller reaches the measured tools.
fn clean_env(c: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("PROGRAML_") {
            c.env_remove(k);
        }
    }
}

#[derive(Default)]
struct UnitFigures {
    plain: Vec<f64>,
    plugin: Vec<f64>,
    infer: Vec<f64>,
    single: Vec<f64>,
    split: Vec<Split>,
    single_split: Vec<Split>,
    /// The same two runs with each other setting ([`variants`]).
    reduced_split: Vec<Vec<Split>>,
    reduced_single_split: Vec<Vec<Split>>,
}

/// Whether the CPU has BF16 products (`dtype=bf16` runs them natively).
fn cpu_has_bf16() -> bool {
    cpu::has_flag("avx512_bf16")
}

/// What the default (`dtype=auto`) runs on this CPU: INT8 where it is the
/// fastest precision (AVX-512 VNNI), else FP32.
fn auto_dtype() -> &'static str {
    if programl_infer::int8_preferred() {
        "int8"
    } else {
        "f32"
    }
}

/// The settings measured beside the default: FP32 where the default is
/// INT8 (INT8 where it is FP32), BF16 where the CPU has it natively, and every kernel path below
/// the best the CPU runs; `PROGRAML_BENCH_VARIANTS` (a comma-separated
/// list of them, or `none`) keeps those it names.
fn variants() -> Vec<&'static str> {
    let all = all_variants();
    match std::env::var("PROGRAML_BENCH_VARIANTS") {
        Ok(keep) => all.into_iter().filter(|v| keep.split(',').any(|k| k.trim() == *v)).collect(),
        Err(_) => all,
    }
}

fn all_variants() -> Vec<&'static str> {
    let mut out = Vec::new();
    if auto_dtype() != "f32" {
        out.push("dtype=f32");
    } else {
        out.push("dtype=int8");
    }
    if cpu_has_bf16() {
        out.push("dtype=bf16");
    }
    if Isa::Vnni.supported() {
        out.push("isa=avx512");
    }
    // What AVX-VNNI adds is INT8 products (its FP32 is `isa=avx2`'s, and
    // `auto` is FP32 there).
    if Isa::AvxVnni.supported() && cpu::detected() > Isa::AvxVnni {
        out.push("isa=avxvnni;dtype=int8");
    }
    if cpu::detected() > Isa::Avx2 {
        out.push("isa=avx2");
    }
    if Isa::Avx2.supported() {
        out.push("isa=portable");
    }
    out
}

fn main() {
    let plugin = profile_dir().join("libprograml_passes.so");
    assert!(plugin.exists(), "{} missing: cargo build --release -p programl-passes", plugin.display());
    let model = std::env::var("PROGRAML_BENCH_MODEL").map(PathBuf::from).unwrap_or_else(|_| workspace().join("models/reachability"));
    let reps: usize = std::env::var("PROGRAML_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    let opt_runs: usize = std::env::var("PROGRAML_BENCH_OPT_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000).max(2);
    let device = std::env::var("PROGRAML_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    let projects: Vec<String> = std::env::var("PROGRAML_BENCH_PROJECTS")
        .unwrap_or_else(|_| "zlib,bzip2,lua".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let mut units = units(&projects);
    assert!(!units.is_empty(), "no translation unit found");
    let ir_dir = std::env::temp_dir().join(format!("programl-bench-ll-{}", std::process::id()));
    let input = std::env::var("PROGRAML_BENCH_INPUT").unwrap_or_else(|_| "c".into());
    match input.as_str() {
        "c" => {}
        "ll" => units = to_ir(units, &ir_dir),
        other => {
            eprintln!("PROGRAML_BENCH_INPUT={other}: expected c or ll");
            std::process::exit(2);
        }
    }
    // A graph-level bundle (device mapping, POJ-104) makes one decision per
    // module (or kernel): it has no roots, so no single-root run.
    let config = model.join("config.json");
    let config: serde_json::Value = std::fs::read_to_string(&config)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_else(|| panic!("{}: not a readable bundle config", config.display()));
    let graph_level = config["head"] == "graph";
    let infer = format!("model={};device={device}", model.display());
    let single = format!("{infer};roots=all;max_roots=1");
    let reduced = variants();
    println!(
        "Learned pass overhead: {} C translation units ({}), clang-16 -O2 -c{}, model {}, device {device}, dtype auto ({} on this CPU), {reps} reps, {} cores of {}",
        units.len(),
        projects.join(", "),
        if input == "ll" { " of each unit's -O0 IR (.ll)" } else { "" },
        model.display(),
        auto_dtype(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu::model_name()
    );

    let mut figures: Vec<UnitFigures> = units
        .iter()
        .map(|_| UnitFigures {
            reduced_split: vec![Vec::new(); reduced.len()],
            reduced_single_split: vec![Vec::new(); reduced.len()],
            ..Default::default()
        })
        .collect();
    let mut failed = BTreeMap::new();
    for rep in 0..reps {
        for (u, f) in units.iter().zip(figures.iter_mut()) {
            let (t, ok, err) = timed(&mut clang(u, &[], &[], None));
            if !ok {
                failed.insert(u.file.clone(), err.lines().next().unwrap_or("").to_string());
                continue;
            }
            f.plain.push(t);
            f.plugin.push(timed(&mut clang(u, &[], &[("PROGRAML_GRAPH_AUTO", "0")], Some(&plugin))).0);
            let (t, _, err) = timed(&mut clang(u, &[], &[("PROGRAML_INFER", &infer), ("PROGRAML_LOG", "info")], Some(&plugin)));
            f.infer.push(t);
            f.split.extend(parse_info(&err));
            if !graph_level {
                let (t, _, err) = timed(&mut clang(u, &[], &[("PROGRAML_INFER", &single), ("PROGRAML_LOG", "info")], Some(&plugin)));
                f.single.push(t);
                f.single_split.extend(parse_info(&err));
            }
            for (d, dtype) in reduced.iter().enumerate() {
                let (with, single_with) = (format!("{infer};{dtype}"), format!("{single};{dtype}"));
                let (_, _, err) = timed(&mut clang(u, &[], &[("PROGRAML_INFER", &with), ("PROGRAML_LOG", "info")], Some(&plugin)));
                f.reduced_split[d].extend(parse_info(&err));
                if !graph_level {
                    let (_, _, err) =
                        timed(&mut clang(u, &[], &[("PROGRAML_INFER", &single_with), ("PROGRAML_LOG", "info")], Some(&plugin)));
                    f.reduced_single_split[d].extend(parse_info(&err));
                }
            }
        }
        eprintln!("rep {}/{reps} done", rep + 1);
    }
    for (file, why) in &failed {
        eprintln!("does not compile, left out: {}: {why}", file.display());
    }
    let measured: Vec<(usize, &UnitFigures)> =
        figures.iter().enumerate().filter(|(_, f)| !f.plain.is_empty() && !f.split.is_empty()).collect();
    assert!(!measured.is_empty(), "no unit measured");

    let m = |v: &[f64]| median(v.to_vec());
    let field = |f: &UnitFigures, g: fn(&Split) -> f64| median(f.split.iter().map(g).collect());
    // The median unit by its -O2 compile time; the largest by graph nodes.
    let mut by_time: Vec<(f64, usize)> = measured.iter().map(|(i, f)| (m(&f.plain), *i)).collect();
    by_time.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median_unit = by_time[by_time.len() / 2].1;
    let largest_unit = measured.iter().max_by(|a, b| field(a.1, |s| s.nodes).total_cmp(&field(b.1, |s| s.nodes))).unwrap().0;

    println!();
    println!("{:<34} {:>9} {:>9}", "per translation unit (ms, medians)", "median", "largest");
    let row = |name: &str, g: &dyn Fn(&UnitFigures) -> f64| {
        println!("{name:<34} {:>9.1} {:>9.1}", g(&figures[median_unit]), g(&figures[largest_unit]));
    };
    let name = |i: usize| format!("{}/{}", units[i].project, units[i].file.file_name().unwrap().to_string_lossy());
    println!("{:<34} {:>9} {:>9}", "unit", name(median_unit), name(largest_unit));
    row("graph nodes", &|f| field(f, |s| s.nodes));
    if !graph_level {
        row("roots (sampled)", &|f| field(f, |s| s.roots));
    }
    row("clang -O2 -c", &|f| m(&f.plain));
    row("  + plugin loaded, idle", &|f| m(&f.plugin));
    row("  + programl-infer (wall)", &|f| m(&f.infer));
    row("pass: runtime load (CUDA only)", &|f| field(f, |s| s.runtime));
    row("pass: bundle open", &|f| field(f, |s| s.bundle));
    row("pass: graph build", &|f| field(f, |s| s.graph));
    row("pass: featurisation", &|f| field(f, |s| s.features));
    if graph_level {
        row("pass: inference (graph-level)", &|f| field(f, |s| s.inference));
    } else {
        row("pass: inference, sampled roots", &|f| field(f, |s| s.inference));
        row("pass: inference, 1 root", &|f| median(f.single_split.iter().map(|s| s.inference).collect()));
    }
    for (d, dtype) in reduced.iter().enumerate() {
        let med = |v: &[Split]| median(v.iter().map(|s| s.inference).collect());
        if graph_level {
            row(&format!("pass: inference, {dtype}"), &|f| med(&f.reduced_split[d]));
        } else {
            row(&format!("pass: inference, sampled, {dtype}"), &|f| med(&f.reduced_split[d]));
            row(&format!("pass: inference, 1 root, {dtype}"), &|f| med(&f.reduced_single_split[d]));
        }
    }
    row("pass: annotation", &|f| field(f, |s| s.annotate));
    row("pass: total", &|f| field(f, |s| s.total));
    row("added wall time", &|f| m(&f.infer) - m(&f.plain));
    let o2 = m(&figures[median_unit].plain);
    println!();
    if graph_level {
        let inference = field(&figures[median_unit], |s| s.inference);
        println!(
            "median unit, dtype=auto ({}): graph-level inference is {:.1}% of its -O2 compile ({inference:.1} of {o2:.1} ms)",
            auto_dtype(),
            100.0 * inference / o2
        );
    } else {
        let one_root = median(figures[median_unit].single_split.iter().map(|s| s.inference).collect());
        println!(
            "median unit, dtype=auto ({}): inference for one root is {:.1}% of its -O2 compile ({one_root:.1} of {o2:.1} ms); for the sampled roots {:.1}%",
            auto_dtype(),
            100.0 * one_root / o2,
            100.0 * field(&figures[median_unit], |s| s.inference) / o2
        );
    }
    for (d, dtype) in reduced.iter().enumerate() {
        let unit = &figures[median_unit];
        let inference =
            median(if graph_level { &unit.reduced_split[d] } else { &unit.reduced_single_split[d] }.iter().map(|s| s.inference).collect());
        println!(
            "median unit, {dtype}: {} inference is {:.1}% of its -O2 compile ({inference:.1} of {o2:.1} ms)",
            if graph_level { "graph-level" } else { "one root's" },
            100.0 * inference / o2
        );
    }
    // Per unit, the inference the target counts (one root; a graph-level
    // bundle's one decision) against the unit's own -O2 compile, over all
    // units: the median unit above is one unit, and which one it is moves
    // with the host's load (units of 668 to 1,697 nodes took that place in
    // three runs of one evening).
    // `splits`: a unit's inference times, in ms.
    let ratios = |splits: &dyn Fn(&UnitFigures) -> Vec<f64>| -> Vec<f64> {
        let mut r: Vec<f64> = measured.iter().map(|(_, f)| 100.0 * median(splits(f)) / m(&f.plain)).filter(|x| x.is_finite()).collect();
        r.sort_by(|a, b| a.total_cmp(b));
        r
    };
    let quartiles =
        |r: &[f64]| if r.is_empty() { (f64::NAN, f64::NAN, f64::NAN) } else { (r[r.len() / 4], median(r.to_vec()), r[r.len() * 3 / 4]) };
    let what = if graph_level { "graph-level inference" } else { "one root's inference" };
    let times = |v: &[Split]| v.iter().map(|s| s.inference).collect::<Vec<f64>>();
    let (q1, q2, q3) = quartiles(&ratios(&|f| times(if graph_level { &f.split } else { &f.single_split })));
    println!(
        "over all {} units, dtype=auto ({}): {what} / the unit's -O2 compile: median {q2:.1}% (quartiles {q1:.1}% and {q3:.1}%)",
        measured.len(),
        auto_dtype()
    );
    for (d, dtype) in reduced.iter().enumerate() {
        let (q1, q2, q3) = quartiles(&ratios(&|f| times(if graph_level { &f.reduced_split[d] } else { &f.reduced_single_split[d] })));
        println!(
            "over all {} units, {dtype}: {what} / the unit's -O2 compile: median {q2:.1}% (quartiles {q1:.1}% and {q3:.1}%)",
            measured.len()
        );
    }
    // The whole process with the pass (default roots) against the same
    // compile without the plugin: what a build pays, per unit.
    let mut added: Vec<f64> = measured.iter().map(|(_, f)| 100.0 * (m(&f.infer) - m(&f.plain)) / m(&f.plain)).collect();
    added.sort_by(|a, b| a.total_cmp(b));
    let (q1, q2, q3) = quartiles(&added);
    println!(
        "over all {} units, dtype=auto ({}): added wall time of the whole clang process / the unit's -O2 compile: median {q2:.1}% (quartiles {q1:.1}% and {q3:.1}%)",
        measured.len(),
        auto_dtype()
    );
    let all = |g: fn(&Split) -> f64| median(measured.iter().flat_map(|(_, f)| f.split.iter().map(g)).collect());
    println!(
        "over all {} units: runtime load (CUDA only) {:.1} ms, bundle open {:.1} ms, pass total {:.1} ms, added wall {:.1} ms, plugin idle {:+.1} ms (medians)",
        measured.len(),
        all(|s| s.runtime),
        all(|s| s.bundle),
        all(|s| s.total),
        median(measured.iter().map(|(_, f)| m(&f.infer) - m(&f.plain)).collect()),
        median(measured.iter().map(|(_, f)| m(&f.plugin) - m(&f.plain)).collect()),
    );

    opt_load_cost(&plugin, opt_runs);
    thin_lto(&plugin, &infer, &units);
}

/// Children's user + system CPU time so far, ms.
fn children_cpu_ms() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(r.ru_utime) + ms(r.ru_stime)
}

/// `opt -passes=verify` with and without the plugin, interleaved: wall and
/// CPU time.
fn opt_load_cost(plugin: &Path, runs: usize) {
    let tmp = std::env::temp_dir().join(format!("programl-bench-{}.ll", std::process::id()));
    std::fs::write(&tmp, "define i32 @f(i32 %x) {\n  %y = add i32 %x, 1\n  ret i32 %y\n}\n").unwrap();
    let opt = Path::new(programl::LLVM_BINDIR).join("opt");
    let (mut plain, mut loaded, mut plain_cpu, mut loaded_cpu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let c = children_cpu_ms();
        plain.push(timed(Command::new(&opt).args(["-passes=verify", "-disable-output"]).arg(&tmp)).0);
        let d = children_cpu_ms();
        loaded.push(
            timed(
                Command::new(&opt)
                    .arg(format!("-load-pass-plugin={}", plugin.display()))
                    .args(["-passes=verify", "-disable-output"])
                    .arg(&tmp),
            )
            .0,
        );
        plain_cpu.push(d - c);
        loaded_cpu.push(children_cpu_ms() - d);
    }
    let _ = std::fs::remove_file(&tmp);
    let (p, l, pc, lc) = (median(plain), median(loaded), median(plain_cpu), median(loaded_cpu));
    println!();
    println!(
        "opt -passes=verify, {runs} interleaved runs (medians): plain {p:.2} ms wall / {pc:.2} ms CPU; plugin loaded {l:.2} / {lc:.2} ms ({:+.2} ms wall, {:+.2} ms CPU)",
        l - p,
        lc - pc
    );
}

/// One ThinLTO link of Lua (its interpreter: every unit but luac.c), the
/// plugin loaded in lld: every module goes through the pass in one process.
fn thin_lto(plugin: &Path, infer: &str, units: &[Unit]) {
    let lua: Vec<&Unit> = units.iter().filter(|u| u.project == "lua" && u.file.file_stem().is_none_or(|s| s != "luac")).collect();
    if lua.is_empty() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("programl-bench-lto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let clang = Path::new(programl::LLVM_BINDIR).join("clang");
    let mut objects = Vec::new();
    for u in &lua {
        let o = dir.join(u.file.file_stem().unwrap()).with_extension("o");
        let out = Command::new(&clang)
            .current_dir(&u.dir)
            .args(["-O2", "-flto=thin", "-c", "-w"])
            .args(&u.flags)
            .arg(&u.file)
            .arg("-o")
            .arg(&o)
            .env("PROGRAML_GRAPH_AUTO", "0")
            .output()
            .unwrap();
        if out.status.success() {
            objects.push(o);
        }
    }
    let link = |with_pass: bool| {
        let mut c = Command::new(&clang);
        clean_env(&mut c);
        c.args(["-O2", "-flto=thin", "-fuse-ld=lld", "-Wl,--thinlto-jobs=1"])
            .arg(format!("-Wl,--load-pass-plugin={}", plugin.display()))
            .args(&objects)
            .args(["-lm", "-ldl", "-o"])
            .arg(dir.join("lua"))
            .env("PROGRAML_GRAPH_AUTO", "0");
        if with_pass {
            c.env("PROGRAML_INFER", infer).env("PROGRAML_LOG", "info");
        }
        timed(&mut c)
    };
    let (plain, ok, err) = link(false);
    if !ok {
        println!("ThinLTO link failed, no amortised figure: {}", err.lines().next().unwrap_or(""));
        return;
    }
    let (with, ok, err) = link(true);
    let splits = parse_info(&err);
    let _ = std::fs::remove_dir_all(&dir);
    if !ok || splits.is_empty() {
        println!("ThinLTO link with the pass: no per-module figures (exit ok: {ok}): {}", err.lines().next().unwrap_or(""));
        return;
    }
    let n = splits.len() as f64;
    let load: f64 = splits.iter().map(|s| s.runtime + s.bundle).sum();
    let in_pass: f64 = splits.iter().map(|s| s.total - s.runtime - s.bundle).sum();
    let inference: f64 = splits.iter().map(|s| s.inference).sum();
    println!();
    println!(
        "ThinLTO link of Lua ({} modules, one lld process, --thinlto-jobs=1): {:.0} ms plain, {:.0} ms with the pass (+{:.0} ms)",
        splits.len(),
        plain,
        with,
        with - plain
    );
    println!(
        "  runtime + bundle open once: {load:.1} ms; then per module: {:.1} ms in the pass (inference {:.1} ms); amortised with the load: {:.1} ms per module",
        in_pass / n,
        inference / n,
        (load + in_pass) / n
    );
}
