//! The one function that does the work: module → graph → file.
//!
//! A module's graph is `<stem>.<hash>.<ext>`, where `stem` is the source
//! file's stem and `hash` eight hex digits of an FNV-1a hash of the source
//! file's absolute path, the module identifier and the output file the
//! compiler was asked to write (`-o FILE` on its command line, absolute;
//! none when it has no `-o`). So two `x.c` in different directories, and
//! one `x.c` compiled into two objects (two targets, two -O levels), get
//! two graphs, and compiling an object again (a rebuild) replaces its
//! graph instead of leaving the old one beside it. Files are written to a
//! temporary name in the same directory and renamed, so a reader never
//! sees half a graph, and two compiles of one object at once leave one
//! whole graph.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use inkwell::module::Module;
use programl::builder::{build, BuildOptions};
use programl::format::{write_graph, Format};
use programl::fsutil::{check_size_limit, write_bytes_atomically, Durability};
use programl::hash::Fnv1a;

use crate::config::{self, ConfigError, Output, Params};

/// Why no graph was written.
#[derive(Debug)]
pub enum GraphError {
    Config(ConfigError),
    /// Rendering the graph in its format failed (before any write).
    Render(io::Error),
    /// Writing to standard output failed.
    Stdout(io::Error),
    /// Writing the graph file failed; the error (from
    /// [`programl::fsutil`]) names the file or directory and what failed.
    File(io::Error),
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::Config(e) => e.fmt(f),
            GraphError::Render(e) => write!(f, "rendering the graph: {e}"),
            GraphError::Stdout(e) => write!(f, "writing <stdout>: {e}"),
            GraphError::File(e) => e.fmt(f),
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
    let graph = build(module, &BuildOptions { mode: settings.mode, ..Default::default() });
    // Rendered first, so that its size is known before a byte is written:
    // past a file size limit (`ulimit -f`) a write would raise SIGXFSZ and
    // fail the compile.
    let mut bytes = Vec::new();
    write_graph(&graph, settings.format, &mut bytes).map_err(GraphError::Render)?;
    match &settings.out {
        Output::Stdout => {
            stdout_may_take(bytes.len() as u64).map_err(GraphError::Stdout)?;
            let stdout = io::stdout();
            let mut lock = stdout.lock();
            lock.write_all(&bytes).and_then(|()| lock.flush()).map_err(GraphError::Stdout)
        }
        Output::Dir(dir) => {
            let identifier = module.get_name().to_string_lossy();
            let source = module.get_source_file_name().to_string_lossy();
            let path = dir.join(file_name(&source, &identifier, process_output(), settings.format));
            check_size_limit(bytes.len() as u64)
                .map_err(|e| GraphError::File(io::Error::new(e.kind(), format!("{}: {e}", path.display()))))?;
            write_bytes_atomically(&path, Durability::Atomic, &bytes).map_err(GraphError::File)
        }
    }
}

/// Whether standard output may take `len` more bytes: where it is a regular
/// file, under the file size limit from its current offset.
fn stdout_may_take(len: u64) -> io::Result<()> {
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat and lseek on descriptor 1, which the process owns.
    let regular = unsafe { libc::fstat(1, &mut stat) } == 0 && (stat.st_mode & libc::S_IFMT) == libc::S_IFREG;
    if !regular {
        return Ok(());
    }
    // SAFETY: as above; SEEK_CUR with 0 only reads the offset.
    let offset = unsafe { libc::lseek(1, 0, libc::SEEK_CUR) };
    check_size_limit(offset.max(0) as u64 + len)
}

/// The output file this process was asked to write, absolute: the last
/// `-o FILE` (or `--output=FILE`, `--output FILE`) on its command line,
/// which is clang's own (the compiler job runs in the driver's process) or
/// cc1's, opt's or the linker's. Read once.
fn process_output() -> Option<&'static Path> {
    static OUTPUT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    OUTPUT
        .get_or_init(|| {
            let line = std::fs::read("/proc/self/cmdline").ok()?;
            let args: Vec<&[u8]> = line.split(|&b| b == 0).collect();
            output_argument(&args).map(|o| {
                use std::os::unix::ffi::OsStrExt;
                let o = Path::new(std::ffi::OsStr::from_bytes(o));
                if o.is_absolute() {
                    o.to_path_buf()
                } else {
                    std::env::current_dir().unwrap_or_default().join(o)
                }
            })
        })
        .as_deref()
}

/// The last output argument of `args`; `-` (standard output) is none.
fn output_argument<'a>(args: &[&'a [u8]]) -> Option<&'a [u8]> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        match args[i] {
            b"-o" | b"--output" if i + 1 < args.len() => {
                found = Some(args[i + 1]);
                i += 1;
            }
            a if a.starts_with(b"--output=") => found = Some(&a[b"--output=".len()..]),
            _ => {}
        }
        i += 1;
    }
    found.filter(|o| !o.is_empty() && *o != b"-")
}

/// The longest stem a graph file name keeps: with the hash and the
/// extension (and `write_atomically`'s temporary name around it), the name
/// stays under the 255 bytes a file name may have; the hash keeps two long
/// names apart.
const MAX_STEM: usize = 120;

/// The graph file name of a module written by a compile whose output is
/// `output`; see the module docs.
pub fn file_name(source_file: &str, identifier: &str, output: Option<&Path>, format: Format) -> String {
    let named = if source_file.is_empty() { identifier } else { source_file };
    let stem: String = Path::new(named)
        .file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+') { c } else { '_' })
        .collect();
    // A name starting with '-' (clang's "-" for standard input) would read
    // as an option to the tools that get it next.
    let stem = if stem.is_empty() || stem.starts_with('.') {
        format!("module{stem}")
    } else if stem == "-" {
        "stdin".to_string()
    } else if stem.starts_with('-') {
        format!("_{stem}")
    } else {
        stem
    };
    // ASCII by now: cut anywhere.
    let stem = if stem.len() > MAX_STEM { stem[..MAX_STEM].to_string() } else { stem };
    let absolute =
        if Path::new(named).is_absolute() { PathBuf::from(named) } else { std::env::current_dir().unwrap_or_default().join(named) };
    let mut hash = Fnv1a::default();
    hash.write(absolute.to_string_lossy().as_bytes());
    hash.write(&[0]);
    hash.write(identifier.as_bytes());
    if let Some(output) = output {
        use std::os::unix::ffi::OsStrExt;
        hash.write(&[0]);
        hash.write(output.as_os_str().as_bytes());
    }
    let hash = hash.finish();
    format!("{stem}.{:08x}.{}", hash as u32 ^ (hash >> 32) as u32, format.extension())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_starts_with_a_dash() {
        assert!(file_name("-", "-", None, Format::Pb).starts_with("stdin."));
        assert!(file_name("-x.c", "-x.c", None, Format::Pb).starts_with("_-x."));
    }

    #[test]
    fn names_differ_by_directory_and_output_and_stay_for_a_rebuild() {
        let (o1, o2) = (Path::new("/build/x.o"), Path::new("/build/x-O2.o"));
        let a = file_name("/src/a/x.c", "/src/a/x.c", Some(o1), Format::Json);
        let b = file_name("/src/b/x.c", "/src/b/x.c", Some(o1), Format::Json);
        let c = file_name("/src/a/x.c", "/src/a/x.c", Some(o2), Format::Json);
        let d = file_name("/src/a/x.c", "/src/a/x.c", None, Format::Json);
        assert!(a.starts_with("x.") && a.ends_with(".json") && a.matches('.').count() == 2, "{a}");
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        // The same compile again (a rebuild, another process): the same name.
        assert_eq!(a, file_name("/src/a/x.c", "/src/a/x.c", Some(o1), Format::Json));
    }

    #[test]
    fn the_output_is_the_last_o_on_the_command_line() {
        let out = |args: &[&str]| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            output_argument(&args).map(|o| String::from_utf8_lossy(o).into_owned())
        };
        assert_eq!(out(&["clang", "-c", "x.c", "-o", "x.o"]).as_deref(), Some("x.o"));
        assert_eq!(out(&["ld.lld", "-o", "a", "--output=app", "x.o"]).as_deref(), Some("app"));
        assert_eq!(out(&["opt", "-passes=verify", "x.ll", "-o", "-"]), None);
        assert_eq!(out(&["clang", "-c", "x.c"]), None);
        assert_eq!(out(&["clang", "-c", "x.c", "-o"]), None);
        // clang's options that merely start with -o are not outputs.
        assert_eq!(out(&["clang", "-objcmt-migrate-all", "-c", "x.m"]), None);
    }

    #[test]
    fn odd_names_get_a_safe_stem() {
        assert!(file_name("", "<stdin>", None, Format::Pb).starts_with("_stdin_."));
        assert!(file_name("", "", None, Format::Pb).starts_with("module."));
        assert!(file_name("dir/my file.cc", "", None, Format::Dot).starts_with("my_file."));
    }

    /// A source name at the file system's limit still gives a graph name
    /// under it (with room for the temporary name), and two such names
    /// that differ only past the cut still differ.
    #[test]
    fn a_long_source_name_is_cut_to_a_writable_name() {
        let a = format!("/src/{}a.c", "x".repeat(250));
        let b = format!("/src/{}b.c", "x".repeat(250));
        let (na, nb) = (file_name(&a, &a, None, Format::PbTxt), file_name(&b, &b, None, Format::PbTxt));
        assert!(na.len() + 12 <= 255, "{} bytes: {na}", na.len());
        assert!(na.starts_with(&"x".repeat(MAX_STEM)), "{na}");
        assert_ne!(na, nb);
    }
}
