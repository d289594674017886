// The version of a libtorch, from the directory above its `lib/`: a pip
// wheel's `torch/version.py` (`__version__ = '2.13.0+cu130'`) or the
// standalone archive's `build-version`. Shared with `include!` by build.rs
// (the version built against) and src/libtorch.rs (the one loaded).
fn libtorch_version_at(root: &std::path::Path) -> Option<String> {
    if let Ok(text) = std::fs::read_to_string(root.join("version.py")) {
        let line = text.lines().find(|l| l.trim_start().starts_with("__version__"))?;
        let value = line.split_once('=')?.1.trim().trim_matches(|c| c == '\'' || c == '"');
        return Some(value.to_string());
    }
    std::fs::read_to_string(root.join("build-version")).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}
