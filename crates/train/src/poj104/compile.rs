//! Student C/C++ sources to LLVM IR, as POJ-104's programs need.
//!
//! The programs were written for old, lenient compilers, and the dataset
//! stripped their preprocessor lines (`#include`, `#define`). Every source
//! is compiled as C++98 with GNU extensions ([`flags`]) after a forced
//! [`PRELUDE`] (the C and C++ standard headers such programs use, and
//! `using namespace std;`), with `-Wno-error=return-type` (a bare
//! `return;` in a non-void function was accepted once). The prelude is
//! compiled once into a precompiled header per flag set, which makes a
//! compile about 8x faster (0.05 s instead of 0.4 s).
//!
//! What clang still rejects is repaired from its own diagnostics, one
//! round at a time, and nothing else is touched ([`repair`]):
//! - `'main' must return 'int'`: `void main` becomes `int main`;
//! - `a type specifier is required for all declarations` (implicit `int`,
//!   e.g. `main()`): `int ` is inserted where clang points;
//! - `use of undeclared identifier 'X'` (a stripped `#define`): `X`
//!   becomes `#define X(...) 0` where it is called, else `#define X 100`;
//! - `reference to 'X' is ambiguous` (a program's own `max` or `count`
//!   against `std::`'s): the program's `X` is renamed `X_`.
//!
//! A program that still fails is counted under its first error, with
//! quoted names replaced by `X` (the cause). Results are cached per
//! harness (compiler, flags, prelude, [`HARNESS_VERSION`]) and source text,
//! so a second run, or `eval` on the same programs, compiles nothing.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use programl::fsutil::{write_bytes_atomically, Durability};
use programl::hash::Fnv1a;
use regex::Regex;

/// The compiler (`PROGRAML_CLANG` overrides it).
pub const CLANG: &str = "clang-16";
/// Bumped whenever [`repair`] changes what it does: cached results of an
/// older harness are not reused.
pub const HARNESS_VERSION: u32 = 1;
/// Rounds of repair before a program counts as failed.
const REPAIR_ROUNDS: usize = 8;

/// Forced before every program.
pub const PRELUDE: &str = "\
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cctype>
#include <climits>
#include <cfloat>
#include <ctime>
#include <cassert>
#include <iostream>
#include <iomanip>
#include <sstream>
#include <fstream>
#include <string>
#include <vector>
#include <list>
#include <deque>
#include <map>
#include <set>
#include <queue>
#include <stack>
#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>
using namespace std;
";

/// The optimisation levels a run compiles at (`--levels`) and `eval
/// --level` takes.
pub const LEVELS: [&str; 6] = ["O0", "O1", "O2", "O3", "Os", "Oz"];

/// The flags for optimisation level `level` (`O0`, `O1`, `O2`, `O3`, `Os`,
/// `Oz`), without the prelude and the output.
pub fn flags(level: &str) -> Vec<String> {
    ["-x", "c++", "-std=gnu++98", "-w", "-Wno-error=return-type", "-fno-color-diagnostics"]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("-{level}"), "-S".into(), "-emit-llvm".into()])
        .collect()
}

/// The compiler to run: `PROGRAML_CLANG`, else [`CLANG`] on the PATH.
pub fn clang() -> PathBuf {
    std::env::var_os("PROGRAML_CLANG").map_or_else(|| PathBuf::from(CLANG), PathBuf::from)
}

pub use crate::harness::Compiled;

/// One compiler configuration and its cache directory.
pub struct Harness {
    clang: PathBuf,
    flags: Vec<String>,
    dir: PathBuf,
    /// `-include-pch FILE`, or `-include prelude.h` where no PCH could be built.
    include: [String; 2],
}

impl Harness {
    /// A harness compiling with `flags` after `prelude`, caching under
    /// `cache/<key>/`. Builds the precompiled prelude once (atomically).
    pub fn new(clang: &Path, flags: &[String], prelude: &str, cache: &Path) -> Result<Harness> {
        let mut h = Fnv1a::default();
        h.write(&HARNESS_VERSION.to_le_bytes());
        h.write(clang.as_os_str().as_encoded_bytes());
        for f in flags {
            h.write(f.as_bytes());
            h.write_u8(0);
        }
        h.write(prelude.as_bytes());
        let dir = cache.join(format!("{:016x}", h.finish()));
        std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
        let header = dir.join("prelude.h");
        if std::fs::read_to_string(&header).ok().as_deref() != Some(prelude) {
            write_bytes_atomically(&header, Durability::Atomic, prelude.as_bytes())?;
        }
        let pch = dir.join("prelude.pch");
        if !pch.exists() {
            let tmp =
                tempfile::Builder::new().suffix(".pch").tempfile_in(&dir).with_context(|| format!("{}: cannot write", dir.display()))?;
            // The header's flags: the same language, standard and macros.
            let header_flags: Vec<&str> = flags
                .iter()
                .map(String::as_str)
                .filter(|f| !matches!(*f, "-S" | "-emit-llvm"))
                .map(|f| if f == "c++" { "c++-header" } else { f })
                .collect();
            let run = crate::harness::clang_command(clang)
                .args(&header_flags)
                .arg(&header)
                .arg("-o")
                .arg(tmp.path())
                .output()
                .with_context(|| format!("cannot run {} (set PROGRAML_CLANG to clang 16)", clang.display()))?;
            if run.status.success() {
                tmp.persist(&pch).with_context(|| format!("{}: cannot write", pch.display()))?;
            } else {
                eprintln!(
                    "programl-train: {}: the prelude does not precompile ({}); compiling without it",
                    pch.display(),
                    first_error(&String::from_utf8_lossy(&run.stderr))
                );
            }
        }
        let include = if pch.exists() {
            ["-include-pch".into(), pch.display().to_string()]
        } else {
            ["-include".into(), header.display().to_string()]
        };
        Ok(Harness { clang: clang.to_path_buf(), flags: flags.to_vec(), dir, include })
    }

    /// Compiles `source` (a program's bytes; invalid UTF-8 is replaced),
    /// repairing as the module docs say. Cached results are reused; files
    /// are written atomically. An error only when clang cannot be run or
    /// the cache cannot be written.
    pub fn compile(&self, source: &[u8]) -> Result<Compiled> {
        struct Program<'a> {
            harness: &'a Harness,
            src: String,
            defines: Vec<String>,
        }
        impl Repairs for Program<'_> {
            fn attempt(&mut self, work: &Path) -> Result<std::process::Output> {
                let input = work.join("prog.cpp");
                let text = if self.defines.is_empty() {
                    self.src.clone()
                } else {
                    format!("{}\n#line 1 \"prog.cpp\"\n{}", self.defines.join("\n"), self.src)
                };
                std::fs::write(&input, text).with_context(|| format!("{}: cannot write", input.display()))?;
                let h = self.harness;
                crate::harness::clang_command(&h.clang)
                    .args(&h.flags)
                    .args(&h.include)
                    .args(["-o", "prog.ll", "prog.cpp"]) // diagnostics name `prog.cpp`
                    .current_dir(work)
                    .output()
                    .with_context(|| format!("cannot run {} (set PROGRAML_CLANG to clang 16)", h.clang.display()))
            }
            fn repair(&mut self, stderr: &str) -> bool {
                repair(stderr, &mut self.src, &mut self.defines)
            }
            fn record(&self) -> String {
                self.defines.join("\n")
            }
        }
        let mut h = Fnv1a::default();
        h.write(source);
        let key = format!("{:016x}", h.finish());
        let mut program = Program { harness: self, src: String::from_utf8_lossy(source).into_owned(), defines: Vec::new() };
        Cache::new(&self.dir, true).compile(&key, REPAIR_ROUNDS, "prog.ll", &mut program)
    }
}

use crate::harness::{first_error, offset, Cache, Repairs};

/// One round of repairs from clang's `stderr` on `prog.cpp`: edits `src`
/// and adds to `defines`. False if nothing applies.
pub fn repair(stderr: &str, src: &mut String, defines: &mut Vec<String>) -> bool {
    static DIAG: OnceLock<Regex> = OnceLock::new();
    let diag = DIAG.get_or_init(|| Regex::new(r"(?m)^prog\.cpp:(\d+):(\d+): error: (.*)$").unwrap());
    static NAME: OnceLock<Regex> = OnceLock::new();
    let name = NAME.get_or_init(|| Regex::new(r"'(\w+)'").unwrap());
    let mut changed = false;
    // Edits at offsets, applied from the end so earlier offsets hold.
    let mut edits: Vec<(usize, usize, &str)> = Vec::new();
    let mut renames: Vec<String> = Vec::new();
    for c in diag.captures_iter(stderr) {
        let (line, column, message) = (c[1].parse().unwrap_or(0), c[2].parse().unwrap_or(0), &c[3]);
        let at = offset(src, line, column);
        let quoted = name.captures(message).map(|n| n[1].to_string());
        if message.starts_with("'main' must return 'int'") {
            if let Some(at) = at.filter(|&a| src[a..].starts_with("void")) {
                edits.push((at, at + 4, "int"));
            }
        } else if message.starts_with("a type specifier is required for all declarations") {
            if let Some(at) = at {
                edits.push((at, at, "int "));
            }
        } else if message.starts_with("use of undeclared identifier") {
            let Some(x) = quoted else { continue };
            let called = Regex::new(&format!(r"\b{x}\s*\(")).unwrap().is_match(src);
            let define = if called { format!("#define {x}(...) 0") } else { format!("#define {x} 100") };
            if !defines.contains(&define) {
                defines.push(define);
                changed = true;
            }
        } else if message.starts_with("reference to") && message.ends_with("is ambiguous") {
            if let Some(x) = quoted {
                if !renames.contains(&x) {
                    renames.push(x);
                }
            }
        }
    }
    edits.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    edits.dedup_by_key(|e| e.0);
    for (start, end, text) in edits {
        src.replace_range(start..end, text);
        changed = true;
    }
    for x in renames {
        // Every use of the program's own X, not std::X.
        let re = Regex::new(&format!(r"(^|[^:\w])({x})\b")).unwrap();
        let renamed = re.replace_all(src, format!("${{1}}{x}_")).into_owned();
        if renamed != *src {
            *src = renamed;
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repaired(src: &str, stderr: &str) -> (String, Vec<String>, bool) {
        let (mut s, mut d) = (src.to_string(), Vec::new());
        let changed = repair(stderr, &mut s, &mut d);
        (s, d, changed)
    }

    #[test]
    fn void_main_and_implicit_int_are_repaired_where_clang_points() {
        let src = "void main()\n{\n}\nf(int x) { return x; }\n";
        let err = "prog.cpp:1:1: error: 'main' must return 'int'\nprog.cpp:4:1: error: a type specifier is required for all declarations\n";
        let (s, d, changed) = repaired(src, err);
        assert!(changed && d.is_empty());
        assert_eq!(s, "int main()\n{\n}\nint f(int x) { return x; }\n");
    }

    #[test]
    fn undeclared_names_become_defines_called_or_not() {
        let src = "int a[N]; int main() { return LEN + sq(2); }";
        let err = "prog.cpp:1:7: error: use of undeclared identifier 'N'\nprog.cpp:1:31: error: use of undeclared identifier 'LEN'\nprog.cpp:1:37: error: use of undeclared identifier 'sq'\n";
        let (s, d, changed) = repaired(src, err);
        assert!(changed);
        assert_eq!(s, src);
        assert_eq!(d, ["#define N 100", "#define LEN 100", "#define sq(...) 0"]);
        // The same errors again: nothing new to do.
        let mut s2 = s.clone();
        let mut d2 = d.clone();
        assert!(!repair(err, &mut s2, &mut d2));
    }

    #[test]
    fn an_ambiguous_name_is_renamed_but_not_stds() {
        let src = "int max;\nint main() { max = std::max(1, 2); return max; }";
        let err = "prog.cpp:2:14: error: reference to 'max' is ambiguous\n";
        let (s, _, changed) = repaired(src, err);
        assert!(changed);
        assert_eq!(s, "int max_;\nint main() { max_ = std::max(1, 2); return max_; }");
    }

    #[test]
    fn other_errors_are_not_touched() {
        let (s, d, changed) = repaired("int main() { x y z }", "prog.cpp:1:16: error: expected ';' after expression\n");
        assert!(!changed && d.is_empty());
        assert_eq!(s, "int main() { x y z }");
        assert_eq!(first_error("prog.cpp:1:1: error: unknown type name 'foo'\n"), "unknown type name X");
        assert!(flags("O2").contains(&"-O2".to_string()));
    }
}
