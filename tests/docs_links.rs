//! The documentation's links and file paths exist.
//!
//! In README.md, ARCHITECTURE.md, passes/README.md, models/README.md and
//! docs/**/*.md: every relative Markdown link (`[text](path)`, resolved from
//! the file's directory, `#anchor` dropped) names a file or directory of the
//! repository, and every repository path written in backticks (a path
//! starting with one of the top-level directories below, resolved from the
//! repository root) exists. Links into `../shared/` (the specification and
//! the datasets beside a checkout) and web addresses are not checked.
//! Paths that are made at run time (`out/`, `target/`, `.venv`) or written
//! as patterns (`<name>`, `*`, `$VAR`, `{a,b}`) are not paths to check.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn documents() -> Vec<PathBuf> {
    let r = root();
    let mut out: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "passes/README.md", "models/README.md"].iter().map(|p| r.join(p)).collect();
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    walk(&r.join("docs"), &mut out);
    out
}

/// Top-level directories whose paths, in backticks, are checked.
const TREE: &[&str] = &["scripts/", "crates/", "docs/", "models/", "passes/", "llvm-tests/", "tests/", "examples/", "bench/", "cmake/", "src/"];

/// The Markdown links of `text` outside code blocks: (line, target).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// Repository paths written in backticks outside code blocks: (line, path).
fn code_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (k, span) in line.split('`').enumerate() {
            if k % 2 == 0 {
                continue;
            }
            let s = span.trim();
            if !TREE.iter().any(|t| s.starts_with(t))
                || s.contains(char::is_whitespace)
                || s.contains(['<', '>', '*', '$', '{', '}', '…', '|', '=', '?', '[', ']', '~'])
                || s.contains("...")
            {
                continue;
            }
            // `file.rs:12` and `file.rs::item` name a file.
            let path = s.split([':']).next().unwrap_or(s);
            out.push((n + 1, path.trim_end_matches(['.', ',', ';']).to_string()));
        }
    }
    out
}

#[test]
fn every_relative_link_and_path_in_the_docs_exists() {
    let r = root();
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let shown = doc.strip_prefix(&r).unwrap().display().to_string();
        for (line, target) in links(&text) {
            let target = target.split_whitespace().next().unwrap_or("").trim_matches(['<', '>']);
            if target.is_empty() || target.starts_with('#') || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let path = target.split('#').next().unwrap();
            let resolved = doc.parent().unwrap().join(path);
            // Links into ../shared/ (outside the checkout) are the reader's.
            if resolved.components().filter(|c| matches!(c, std::path::Component::ParentDir)).count() > 0
                && normalise(&resolved).strip_prefix(&r).is_err()
            {
                continue;
            }
            checked += 1;
            if !resolved.exists() {
                missing.push(format!("{shown}:{line}: link {target}"));
            }
        }
        for (line, path) in code_paths(&text) {
            checked += 1;
            if !r.join(&path).exists() && !generated(&r, &path) {
                missing.push(format!("{shown}:{line}: path `{path}`"));
            }
        }
    }
    assert!(checked > 100, "only {checked} links and paths found: is the parser right?");
    assert!(missing.is_empty(), "{} missing of {checked}:\n{}", missing.len(), missing.join("\n"));
}

/// Whether `path` is one the build writes (git ignores it, as
/// `llvm-tests/lit.site.cfg.py`): named in the docs, absent from a fresh
/// clone until the bootstrap runs.
fn generated(root: &Path, path: &str) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["check-ignore", "-q", "--no-index", path])
        .status()
        .is_ok_and(|s| s.success())
}

/// `path` with `.` and `..` resolved lexically.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn the_parsers_find_links_and_paths() {
    let text = "See [a](docs/x.md#y) and `scripts/test.sh`, `crates/model/src/lib.rs:12`.\n```sh\n[no](nope.md) `scripts/nope.sh`\n```\n`out/run` `models/<task>` [web](https://x.org)";
    assert_eq!(links(text), vec![(1, "docs/x.md#y".to_string()), (5, "https://x.org".to_string())]);
    assert_eq!(code_paths(text), vec![(1, "scripts/test.sh".to_string()), (1, "crates/model/src/lib.rs".to_string())]);
}
