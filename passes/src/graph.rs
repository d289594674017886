//! The one function that does the work: module → graph → file.
//!
//! A module's graph is `<stem>.<hash>.<ext>`, where `stem` is the source
//! file's stem and `hash` eight hex digits of an FNV-1a hash of the source
//! file's absolute path, the module identifier and the output file the
//! compiler was asked to write (`-o FILE` on its command line, absolute;
//! the working directory when it has no `-o`; [`process_output`]). So two `x.c` in different directories, and
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

/// What a graph's name is keyed on besides its module: the output file the
/// compile was asked for (the last `-o FILE`, `-oFILE`, `--output=FILE` on
/// the process's command line, response files expanded), absolute and
/// lexically normalised; without one, the working directory (clang then
/// writes `<stem>.o` there). A cc1 that clang's driver started as a process
/// of its own (compile and link in one command, `-fembed-bitcode`,
/// `-no-integrated-as`) writes one of the driver's temporary files: the
/// driver's own output is the key then. Read once.
fn process_output() -> Option<&'static Path> {
    static OUTPUT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    OUTPUT
        .get_or_init(|| {
            let cwd = std::env::current_dir().ok()?;
            let args = command_line("/proc/self/cmdline", &cwd)?;
            let mut out = output_argument(&args).map(|o| cwd.join(o));
            let cc1 = args.get(1).is_some_and(|a| a == b"-cc1");
            if cc1 && out.as_ref().is_some_and(|o| o.starts_with(std::env::temp_dir())) {
                out = parent_id()
                    .and_then(|p| command_line(&format!("/proc/{p}/cmdline"), &cwd))
                    .and_then(|a| output_argument(&a).map(|o| cwd.join(o)));
            }
            Some(normalised(&out.unwrap_or(cwd)))
        })
        .as_deref()
}

/// A process's arguments from its `/proc/<pid>/cmdline`, `@file` response
/// files expanded (relative to `cwd`, GNU quoting, as clang reads them).
fn command_line(path: &str, cwd: &Path) -> Option<Vec<Vec<u8>>> {
    let line = std::fs::read(path).ok()?;
    let mut args = Vec::new();
    for a in line.split(|&b| b == 0).filter(|a| !a.is_empty()) {
        expand(a, cwd, &mut args, 0);
    }
    Some(args)
}

fn expand(arg: &[u8], cwd: &Path, out: &mut Vec<Vec<u8>>, depth: usize) {
    use std::os::unix::ffi::OsStrExt;
    let text = match arg.strip_prefix(b"@") {
        Some(file) if depth < 8 => std::fs::read(cwd.join(std::ffi::OsStr::from_bytes(file))).ok(),
        _ => None,
    };
    let Some(text) = text else {
        out.push(arg.to_vec());
        return;
    };
    // GNU quoting: whitespace separates; '…' and "…" group; a backslash
    // takes the next byte as it is (outside single quotes).
    let (mut word, mut quote, mut any, mut bytes) = (Vec::new(), None, false, text.iter().copied());
    while let Some(b) = bytes.next() {
        match (quote, b) {
            (Some(q), b) if b == q => quote = None,
            (Some(b'\''), b) => word.push(b),
            (_, b'\\') => word.extend(bytes.next()),
            (Some(_), b) => word.push(b),
            (None, b'\'' | b'"') => {
                quote = Some(b);
                any = true;
            }
            (None, b) if b.is_ascii_whitespace() => {
                if !word.is_empty() || any {
                    expand(&std::mem::take(&mut word), cwd, out, depth + 1);
                }
                any = false;
            }
            (None, b) => word.push(b),
        }
    }
    if !word.is_empty() || any {
        expand(&word, cwd, out, depth + 1);
    }
}

/// This process's parent, from `/proc/self/stat` (the field after the
/// command's closing parenthesis and the state).
fn parent_id() -> Option<u32> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// `path` without `.` components and with `..` taken back lexically.
fn normalised(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The last output argument of `args`; `-` (standard output) is none. The
/// joined `-oFILE` is read on clang's driver only, where no other option
/// starts with `-o` but `-obj…` (cc1, opt and the linkers have options
/// that do, and take `-o FILE`).
fn output_argument(args: &[Vec<u8>]) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let driver = args
        .first()
        .is_some_and(|a| Path::new(std::ffi::OsStr::from_bytes(a)).file_name().is_some_and(|n| n.as_bytes().starts_with(b"clang")))
        && args.get(1).is_none_or(|a| a != b"-cc1");
    let mut found: Option<&[u8]> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_slice();
        match a {
            b"-o" | b"--output" if i + 1 < args.len() => {
                found = Some(&args[i + 1]);
                i += 1;
            }
            a if a.starts_with(b"--output=") => found = Some(&a[b"--output=".len()..]),
            a if driver && a.len() > 2 && a.starts_with(b"-o") && !a.starts_with(b"-obj") => found = Some(&a[2..]),
            _ => {}
        }
        i += 1;
    }
    found.filter(|o| !o.is_empty() && *o != b"-").map(|o| std::ffi::OsStr::from_bytes(o).to_os_string())
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
            let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            output_argument(&args).map(|o| o.to_string_lossy().into_owned())
        };
        assert_eq!(out(&["clang", "-c", "x.c", "-o", "x.o"]).as_deref(), Some("x.o"));
        assert_eq!(out(&["/usr/bin/clang-16", "-c", "x.c", "-ox-O2.o"]).as_deref(), Some("x-O2.o"));
        assert_eq!(out(&["ld.lld", "-o", "a", "--output=app", "x.o"]).as_deref(), Some("app"));
        assert_eq!(out(&["opt", "-passes=verify", "x.ll", "-o", "-"]), None);
        assert_eq!(out(&["clang", "-c", "x.c"]), None);
        assert_eq!(out(&["clang", "-c", "x.c", "-o"]), None);
        // Options that merely start with -o are not outputs: clang's -obj…,
        // and anything of cc1's or opt's.
        assert_eq!(out(&["clang", "-objcmt-migrate-all", "-c", "x.m"]), None);
        assert_eq!(out(&["opt", "-opaque-pointers=0", "x.ll"]), None);
        assert_eq!(out(&["clang", "-cc1", "-opt-record-file", "x.yaml"]), None);
    }

    #[test]
    fn response_files_are_read_with_gnu_quoting() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.rsp"), "-c 'my file.c' -o \"out dir/x.o\" @b.rsp\n").unwrap();
        std::fs::write(dir.path().join("b.rsp"), "-O2 back\\ slash ''\n").unwrap();
        let mut args = Vec::new();
        expand(b"@a.rsp", dir.path(), &mut args, 0);
        let args: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        assert_eq!(args, ["-c", "my file.c", "-o", "out dir/x.o", "-O2", "back slash", ""]);
        let mut kept = Vec::new();
        expand(b"@missing.rsp", dir.path(), &mut kept, 0);
        assert_eq!(kept, [b"@missing.rsp".to_vec()]);
    }

    #[test]
    fn paths_are_normalised_lexically() {
        assert_eq!(normalised(Path::new("/b/./x.o")), Path::new("/b/x.o"));
        assert_eq!(normalised(Path::new("/b/sub/../x.o")), Path::new("/b/x.o"));
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
