//! The one function that does the work: module → graph → file.
//!
//! File names never collide in a parallel build: a module's graph is
//! `<stem>.<hash>.<pid>.<ext>`, where `stem` is the source file's stem,
//! `hash` eight hex digits of an FNV-1a hash of the source file's absolute
//! path and the module identifier (two `x.c` in different directories differ),
//! and `pid` the compiler's process id (the same file compiled twice at once
//! differs). Files are written to a temporary name in the same directory and
//! renamed, so a reader never sees half a graph.

use std::fmt;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use llvm_plugin::inkwell::module::Module;
use programl::builder::{build, BuildOptions};
use programl::format::{write_graph, Format};

use crate::config::{self, ConfigError, Output, Params};

/// Why no graph was written.
#[derive(Debug)]
pub enum GraphError {
    Config(ConfigError),
    Io { path: PathBuf, action: &'static str, source: io::Error },
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::Config(e) => e.fmt(f),
            GraphError::Io { path, action, source } => write!(f, "{action} {}: {source}", path.display()),
        }
    }
}

impl From<ConfigError> for GraphError {
    fn from(e: ConfigError) -> Self {
        GraphError::Config(e)
    }
}

/// Builds the graph of `module` and writes it where `params` (then the
/// environment) say.
pub fn write_module_graph(module: &Module<'_>, params: &Params) -> Result<(), GraphError> {
    if std::env::var_os(config::ENV_PANIC_FOR_TESTING).is_some() {
        panic!("{} is set", config::ENV_PANIC_FOR_TESTING);
    }
    let settings = config::resolve(params)?;
    let graph = build(module, &BuildOptions { mode: settings.mode });
    let write = |out: &mut dyn Write| write_graph(&graph, settings.format, out);
    match &settings.out {
        Output::Stdout => {
            let stdout = io::stdout();
            let mut lock = stdout.lock();
            write(&mut lock).and_then(|()| lock.flush()).map_err(|source| GraphError::Io {
                path: "<stdout>".into(),
                action: "writing",
                source,
            })
        }
        Output::Dir(dir) => {
            let identifier = module.get_name().to_string_lossy();
            let source = module.get_source_file_name().to_string_lossy();
            let path = dir.join(file_name(&source, &identifier, std::process::id(), settings.format));
            write_atomically(&path, write)
        }
    }
}

/// The graph file name of a module; see the module docs.
pub fn file_name(source_file: &str, identifier: &str, pid: u32, format: Format) -> String {
    let named = if source_file.is_empty() { identifier } else { source_file };
    let stem: String = Path::new(named)
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+') { c } else { '_' })
        .collect();
    let stem = if stem.is_empty() || stem.starts_with('.') { format!("module{stem}") } else { stem };
    let absolute =
        if Path::new(named).is_absolute() { PathBuf::from(named) } else { std::env::current_dir().unwrap_or_default().join(named) };
    let mut hash = Fnv1a::default();
    hash.write(absolute.to_string_lossy().as_bytes());
    hash.write(&[0]);
    hash.write(identifier.as_bytes());
    format!("{stem}.{:08x}.{pid}.{}", hash.0 as u32 ^ (hash.0 >> 32) as u32, format.extension())
}

/// Writes through a temporary file in `path`'s directory, then renames.
fn write_atomically(path: &Path, write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<(), GraphError> {
    fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> GraphError + 'a {
        move |source| GraphError::Io { path: path.to_path_buf(), action, source }
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io("creating directory", dir))?;
    let mut temporary = path.as_os_str().to_os_string();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let result = (|| {
        let mut out = BufWriter::new(fs::File::create(&temporary).map_err(io("creating", &temporary))?);
        write(&mut out).and_then(|()| out.flush()).map_err(io("writing", path))?;
        drop(out);
        fs::rename(&temporary, path).map_err(io("renaming to", path))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    result
}

/// 64-bit FNV-1a: tiny, stable across Rust releases (unlike `DefaultHasher`).
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_by_directory_and_process() {
        let a = file_name("/src/a/x.c", "/src/a/x.c", 7, Format::Json);
        let b = file_name("/src/b/x.c", "/src/b/x.c", 7, Format::Json);
        let c = file_name("/src/a/x.c", "/src/a/x.c", 8, Format::Json);
        assert!(a.starts_with("x.") && a.ends_with(".7.json"), "{a}");
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, file_name("/src/a/x.c", "/src/a/x.c", 7, Format::Json));
    }

    #[test]
    fn odd_names_get_a_safe_stem() {
        assert!(file_name("", "<stdin>", 1, Format::Pb).starts_with("_stdin_."));
        assert!(file_name("", "", 1, Format::Pb).starts_with("module."));
        assert!(file_name("dir/my file.cc", "", 1, Format::Dot).starts_with("my_file."));
    }
}
