//! The one clang harness the graph-level tasks get their inputs through:
//! unpacking a dataset's tarball into the cache once; the compile cache
//! ([`Cache`]: per source, its IR, or the cause it failed with, and the
//! repairs that made it compile) with the repair loop every task runs
//! ([`Repairs`]: a task says how to run clang once and how to repair from
//! its errors); and reading clang's diagnostics (the first error as a
//! failure's cause; a diagnostic's place in the source).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};
use programl::fsutil::{write_bytes_atomically, Durability};
use regex::Regex;

/// Progress of a parallel loop of `total` items on stderr, every 25 items
/// and at the end, with the rate and the time left: `PREFIX: compiled
/// n/total WHAT (rate/s, ETA s)`.
pub struct Progress {
    prefix: &'static str,
    what: &'static str,
    total: usize,
    done: std::sync::atomic::AtomicUsize,
    start: std::time::Instant,
    quiet: bool,
}

impl Progress {
    pub fn new(prefix: &'static str, what: &'static str, total: usize, quiet: bool) -> Progress {
        Progress { prefix, what, total, done: Default::default(), start: std::time::Instant::now(), quiet }
    }

    /// One more item done.
    pub fn tick(&self) {
        let n = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if !self.quiet && (n % 25 == 0 || n == self.total) {
            let rate = n as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "{}: compiled {n}/{} {} ({rate:.1}/s, ETA {:.0}s)",
                self.prefix,
                self.total,
                self.what,
                (self.total - n) as f64 / rate
            );
        }
    }
}

/// The CPU seconds one clang run may take (`PROGRAML_CLANG_CPU_LIMIT`,
/// default 60): a dataset's sources compile in milliseconds each, but one
/// pathological program at -O3 can take clang hours, and a compile of
/// 200,000 programs would wait on it. A run over the limit is stopped by
/// the kernel (`RLIMIT_CPU`) and counts as failed, under
/// [`CPU_LIMIT_CAUSE`].
pub fn clang_cpu_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| match std::env::var("PROGRAML_CLANG_CPU_LIMIT") {
        Err(_) => 60,
        Ok(v) => v.trim().parse().ok().filter(|&s: &u64| s > 0).unwrap_or_else(|| {
            eprintln!("warning: PROGRAML_CLANG_CPU_LIMIT={v:?} is not a positive number of seconds; using 60");
            60
        }),
    })
}

/// The cause a run stopped by [`clang_cpu_limit`] counts under.
pub const CPU_LIMIT_CAUSE: &str = "clang ran past its CPU time limit (PROGRAML_CLANG_CPU_LIMIT)";

/// `clang` as a command whose process may use at most
/// [`clang_cpu_limit`] seconds of CPU.
pub fn clang_command(clang: &Path) -> std::process::Command {
    limited_command(clang, clang_cpu_limit())
}

/// `program` as a command whose process may use at most `seconds` of CPU.
fn limited_command(program: &Path, seconds: u64) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let seconds = seconds as libc::rlim_t;
        // SAFETY: between fork and exec only setrlimit runs, which is
        // async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(move || {
                // Soft limit: SIGXCPU; the hard limit a little later: SIGKILL.
                let limit = libc::rlimit { rlim_cur: seconds, rlim_max: seconds + 5 };
                if libc::setrlimit(libc::RLIMIT_CPU, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

/// Whether a clang run was stopped by its CPU time limit.
pub fn over_cpu_limit(status: &std::process::ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        matches!(status.signal(), Some(libc::SIGXCPU) | Some(libc::SIGKILL))
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        false
    }
}

/// Runs `clang FLAGS OPTIONS -o OUTPUT INPUT` (in `cwd` if given) and
/// returns its output; an error only when clang cannot be started.
pub fn run_clang(
    clang: &Path,
    cwd: Option<&Path>,
    flags: &[&str],
    options: &[String],
    output: &Path,
    input: &Path,
) -> Result<std::process::Output> {
    let mut cmd = clang_command(clang);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    cmd.args(flags)
        .args(options)
        .arg("-o")
        .arg(output)
        .arg(input)
        .output()
        .with_context(|| format!("cannot run {} (set PROGRAML_CLANG to clang 16)", clang.display()))
}

/// What became of one source.
#[derive(Clone, Debug, PartialEq)]
pub enum Compiled {
    /// Its IR, and whether it needed repairs.
    Ir { path: PathBuf, repaired: bool },
    /// clang's first error, with quoted names replaced by `X` (the cause).
    Failed { cause: String },
}

/// How a task compiles one source: clang once on the text as it stands,
/// and a repair from clang's errors before the next round.
pub trait Repairs {
    /// Writes the text into `work` and runs clang once, its IR to
    /// `work/OUTPUT` ([`Cache::compile`]'s `output`); an error only when
    /// clang cannot be run or the file cannot be written.
    fn attempt(&mut self, work: &Path) -> Result<std::process::Output>;
    /// Edits the text from clang's `stderr`; false when nothing applies.
    fn repair(&mut self, stderr: &str) -> bool;
    /// What the repairs added, kept beside a module they made compile.
    fn record(&self) -> String;
}

/// A compile cache: per key (a hash of what decides the result: source,
/// flags, options), `<key>.ll` (the IR), `<key>.fail` (the cause) and,
/// for IR that needed repairs, `<key>.repaired` (what they added). Every
/// file is written atomically, so a killed compile leaves nothing a later
/// run takes for a result.
pub struct Cache {
    dir: PathBuf,
    /// Keys live under `dir/<first two hex digits>/` (large caches).
    sharded: bool,
}

impl Cache {
    pub fn new(dir: &Path, sharded: bool) -> Cache {
        Cache { dir: dir.to_path_buf(), sharded }
    }

    fn dir_of(&self, key: &str) -> PathBuf {
        if self.sharded {
            self.dir.join(&key[..2.min(key.len())])
        } else {
            self.dir.clone()
        }
    }

    /// The cached result for `key`, if any.
    pub fn lookup(&self, key: &str) -> Option<Compiled> {
        let dir = self.dir_of(key);
        let ir = dir.join(format!("{key}.ll"));
        if ir.exists() {
            return Some(Compiled::Ir { repaired: dir.join(format!("{key}.repaired")).exists(), path: ir });
        }
        let cause = std::fs::read_to_string(dir.join(format!("{key}.fail"))).ok()?;
        Some(Compiled::Failed { cause: cause.trim().to_string() })
    }

    /// The result for `key`: cached, or compiled in up to `rounds` rounds
    /// (the first as the source is, each later one after a repair), in a
    /// fresh directory, the IR read from its `output`. A source that still
    /// fails counts under the first round's first error. An error only
    /// when clang cannot be run or the cache cannot be written.
    pub fn compile(&self, key: &str, rounds: usize, output: &str, task: &mut impl Repairs) -> Result<Compiled> {
        if let Some(done) = self.lookup(key) {
            return Ok(done);
        }
        let dir = self.dir_of(key);
        std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        let work = tempfile::tempdir_in(&dir).with_context(|| format!("{}: cannot create a temporary directory", dir.display()))?;
        let (ir, fail) = (dir.join(format!("{key}.ll")), dir.join(format!("{key}.fail")));
        let mut first = String::new();
        for round in 0..rounds.max(1) {
            let run = task.attempt(work.path())?;
            if run.status.success() {
                if round > 0 {
                    let mark = dir.join(format!("{key}.repaired"));
                    write_bytes_atomically(&mark, Durability::Atomic, format!("{}\n", task.record()).as_bytes())?;
                }
                let out = work.path().join(output);
                std::fs::rename(&out, &ir).with_context(|| format!("{}: cannot write", ir.display()))?;
                return Ok(Compiled::Ir { path: ir, repaired: round > 0 });
            }
            if over_cpu_limit(&run.status) {
                // No repair makes it faster.
                first = if round == 0 { CPU_LIMIT_CAUSE.to_string() } else { first };
                break;
            }
            let stderr = String::from_utf8_lossy(&run.stderr);
            if round == 0 {
                first = first_error(&stderr);
            }
            if round + 1 == rounds || !task.repair(&stderr) {
                break;
            }
        }
        let cause = if first.is_empty() { "clang failed without an error message".to_string() } else { first };
        write_bytes_atomically(&fail, Durability::Atomic, format!("{cause}\n").as_bytes())?;
        Ok(Compiled::Failed { cause })
    }
}

/// The first `error:` of clang's output, quoted names replaced by `X`: a
/// failure's cause, counted across sources.
pub fn first_error(stderr: &str) -> String {
    static QUOTED: OnceLock<Regex> = OnceLock::new();
    let quoted = QUOTED.get_or_init(|| Regex::new(r"'[^']*'").unwrap());
    stderr
        .lines()
        .find_map(|l| l.split_once("error: ").map(|(_, m)| m))
        .map(|m| quoted.replace_all(m, "X").into_owned())
        .unwrap_or_default()
}

/// Byte offset of (line, column), both 1-based as clang counts them, in
/// `text`; `None` past the text or inside a character (clang's columns
/// are bytes, so a diagnostic after a multi-byte character of another
/// encoding may not land on one).
pub fn offset(text: &str, line: usize, column: usize) -> Option<usize> {
    let start: usize = text.split_inclusive('\n').take(line.checked_sub(1)?).map(str::len).sum();
    let at = start + column.checked_sub(1)?;
    (at <= text.len() && text.is_char_boundary(at)).then_some(at)
}

/// `cache/<name>`: the directory `<name>/` of the tarball `tar`, unpacked
/// there once (into a temporary directory, then renamed, so a killed
/// unpack leaves nothing half-written). Later calls return it as it is.
pub fn unpack_tar(tar: &Path, cache: &Path, name: &str) -> Result<PathBuf> {
    let dir = cache.join(name);
    if dir.is_dir() {
        return Ok(dir);
    }
    if !tar.is_file() {
        bail!("{}: not found", tar.display());
    }
    std::fs::create_dir_all(cache).with_context(|| format!("{}: cannot create", cache.display()))?;
    let tmp = tempfile::tempdir_in(cache).with_context(|| format!("{}: cannot create a temporary directory", cache.display()))?;
    eprintln!("unpacking {} into {}", tar.display(), cache.display());
    let status = std::process::Command::new("tar").arg("-xJf").arg(tar).arg("-C").arg(tmp.path()).status().context("cannot run tar")?;
    if !status.success() || !tmp.path().join(name).is_dir() {
        bail!("{}: tar -xJf failed or held no {name}/ directory", tar.display());
    }
    std::fs::rename(tmp.path().join(name), &dir).with_context(|| format!("{}: cannot write", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_bytes_and_never_split_a_character() {
        let text = "ab\nxé y\n";
        assert_eq!(offset(text, 1, 1), Some(0));
        assert_eq!(offset(text, 2, 1), Some(3));
        assert_eq!(offset(text, 2, 2), Some(4), "the é starts at byte 4");
        assert_eq!(offset(text, 2, 3), None, "byte 5 is inside the é");
        assert_eq!(offset(text, 2, 4), Some(6));
        assert_eq!(offset(text, 2, 20), None, "past the end");
        assert_eq!(offset(text, 0, 1), None);
    }

    #[test]
    fn a_run_past_its_cpu_limit_is_stopped_and_recognised() {
        let start = std::time::Instant::now();
        let out = limited_command(Path::new("sh"), 1).args(["-c", "while :; do :; done"]).output().unwrap();
        assert!(over_cpu_limit(&out.status), "{:?}", out.status);
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "stopped after {:?}", start.elapsed());
        let fine = limited_command(Path::new("sh"), 1).args(["-c", "exit 3"]).output().unwrap();
        assert!(!over_cpu_limit(&fine.status) && fine.status.code() == Some(3));
    }

    #[test]
    fn the_cause_is_the_first_error_with_names_hidden() {
        let stderr = "k.cl:1:2: warning: unused 'x'\nk.cl:3:4: error: use of undeclared identifier 'foo'\nk.cl:5:1: error: other\n";
        assert_eq!(first_error(stderr), "use of undeclared identifier X");
        assert_eq!(first_error("no errors\n"), "");
    }
}
