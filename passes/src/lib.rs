//! `programl-passes`: ProGraML program graphs, and a learned pass, from
//! inside `opt` and `clang`.
//!
//! One LLVM pass plugin (new pass manager), built as a cdylib:
//!
//! ```text
//! opt-16 -load-pass-plugin=libprograml_passes.so -passes=programl-graph x.ll -disable-output
//! opt-16 -load-pass-plugin=libprograml_passes.so \
//!     -passes='programl-graph<out=graphs;format=json;compat=programl-0.3>' x.ll -disable-output
//! PROGRAML_GRAPH_DIR=graphs clang-16 -fpass-plugin=libprograml_passes.so -O2 -c x.c
//! ```
//!
//! The pass `programl-graph` builds the graph of the whole module
//! ([`programl::builder::build`]) and writes it to a file; it only reads the
//! IR and preserves all analyses. It is reachable two ways:
//!
//! - by name in an `opt -passes=` pipeline, with optional parameters
//!   `programl-graph<out=DIR;format=FMT;compat=MODE>` ([`config::Params`]);
//! - at the `OptimizerLast` extension point, which LLVM 16 runs at every
//!   optimisation level, `-O0` included, so `clang -fpass-plugin=` gets one
//!   graph per module of its final IR. That instance is configured by the
//!   environment only ([`config`]), skips itself when the pipeline also
//!   names `programl-graph` (so a module never gets two graphs), and is off
//!   when `PROGRAML_GRAPH_AUTO=0`. `opt -passes=verify` builds no default
//!   pipeline, so it never runs there.
//!
//! The pass `programl-infer` ([`infer`]) runs a trained GGNN bundle on the
//! module's graph and writes its predictions into the IR as metadata: by
//! name (`programl-infer<model=DIR;...>`), and with `PROGRAML_INFER` set at
//! `OptimizerLast` and at the full-LTO extension point. On the CPU it
//! predicts in-process with `programl-infer`'s torch-free inference; only
//! CUDA opens the model runtime (`libprograml_runtime_cuda.so`, which links
//! libtorch), on first use.
//!
//! **Architecture invariants:** registration does no work beyond
//! registering callbacks (loading the plugin must stay cheap, and the plugin
//! never links libtorch: the learned pass `dlopen`s its runtime); nothing a
//! pass does can abort the compiler — panics are caught at the pass boundary
//! ([`guard`]) and every failure is a one-line `programl-graph: ...` or
//! `programl-infer: ...` warning on stderr.

pub mod config;
pub mod graph;
pub mod guard;
pub mod infer;
pub mod logger;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};

use inkwell::llvm_sys::prelude::LLVMModuleRef;
use inkwell::module::Module;

/// Set once a pipeline names `programl-graph`: the extension-point instance
/// then stands down, so a module never gets two graphs.
static NAMED_IN_PIPELINE: AtomicBool = AtomicBool::new(false);
/// The same for `programl-infer`.
static INFER_NAMED_IN_PIPELINE: AtomicBool = AtomicBool::new(false);

// src/shim.cc: registration and the passes' C++ classes, which call back
// into the `programl_passes_*` functions below.
extern "C" {
    fn programl_passes_register(builder: *mut c_void);
    fn programl_passes_api_version() -> u32;
    fn programl_passes_llvm_major() -> u32;
}

/// What LLVM's `PassPlugin.h` expects of a plugin (`llvm::PassPluginLibraryInfo`).
#[repr(C)]
pub struct PassPluginLibraryInfo {
    api_version: u32,
    plugin_name: *const c_char,
    plugin_version: *const c_char,
    register: unsafe extern "C" fn(*mut c_void),
}

/// The plugin's entry: `opt -load-pass-plugin`, `clang -fpass-plugin`, and
/// `lld --load-pass-plugin` call it once. Registration does no other work.
/// Loaded into another LLVM than the one it was built for (whose plugin
/// API version is the same, so LLVM cannot tell), the plugin registers
/// nothing and says so: its C++ would read that LLVM's objects with this
/// one's layouts, and crash the compiler.
#[no_mangle]
pub extern "C" fn llvmGetPassPluginInfo() -> PassPluginLibraryInfo {
    // SAFETY: returns a constant.
    let ours = unsafe { programl_passes_llvm_major() };
    let foreign = match guard::catch(host_llvm).ok().flatten() {
        Some((HostLlvm::Major(major), path)) if major != ours => Some((format!("LLVM {major}"), format!("llvm{major}"), path)),
        // Only a plugin for 16 on can tell: it knows its own LLVM has one.
        Some((HostLlvm::Before16, path)) if ours >= 16 => Some(("an LLVM before 16".into(), "llvm14 or llvm15".into(), path)),
        _ => None,
    };
    let register: unsafe extern "C" fn(*mut c_void) = match foreign {
        None => programl_passes_register,
        Some((theirs, feature, path)) => {
            let _ = FOREIGN.set(format!(
                "programl: this plugin is built for LLVM {ours}, and this compiler runs {theirs} ({path}): no pass registered (build the plugin for its LLVM: cargo build --release -p programl-passes --no-default-features --features {feature})"
            ));
            register_nothing
        }
    };
    PassPluginLibraryInfo {
        // SAFETY: returns a constant.
        api_version: unsafe { programl_passes_api_version() },
        plugin_name: c"programl".as_ptr(),
        plugin_version: concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast(),
        register,
    }
}

/// Why the plugin registered nothing (another LLVM's compiler).
static FOREIGN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

unsafe extern "C" fn register_nothing(_: *mut c_void) {
    if let Some(message) = FOREIGN.get() {
        guard::warn_line(message);
    }
}

/// What [`host_llvm`] tells of the compiler's LLVM.
#[derive(Debug, PartialEq)]
enum HostLlvm {
    /// Its major version.
    Major(u32),
    /// An object that holds LLVM's C API without its own `LLVMGetVersion`
    /// (which every LLVM from 16 defines beside `LLVMContextCreate`) and
    /// without a version in its name: an LLVM before 16, linked into the
    /// compiler and exported for plugins (as LLVM's release builds of `opt`
    /// and `clang` are).
    Before16,
}

/// The LLVM the compiler runs, and the path of the object that holds it;
/// `None` where that cannot be told.
///
/// The compiler's LLVM is the one the process's global symbol scope
/// resolves LLVM's C API to (`LLVMContextCreate`, in every LLVM). That
/// scope is ordered: the executable, the preloaded libraries, the
/// libraries the executable was linked with, then what was opened later
/// with `RTLD_GLOBAL`, this plugin and the libLLVM it links among them (a
/// graphics driver's libLLVM, opened so, comes after the compiler's too).
/// Its version: its own `LLVMGetVersion` (LLVM 16 on), else its file name
/// (`libLLVM-14.so.1`), else [`HostLlvm::Before16`]. A compiler with LLVM
/// linked in statically and its symbols not exported leaves the scope to
/// this plugin's libLLVM, and is not told apart (docs/dev/robustness.md).
fn host_llvm() -> Option<(HostLlvm, String)> {
    type GetVersion = unsafe extern "C" fn(*mut c_uint, *mut c_uint, *mut c_uint);
    // The loaded object that holds `address`: its load base and path, from
    // the loader's program headers. (Not dladdr: it also finds the nearest
    // symbol, a walk over libLLVM's whole symbol table that cost 2.9 million
    // instructions, a millisecond, on every compile.)
    fn object_of(address: *mut c_void) -> Option<(usize, String)> {
        unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
            // SAFETY: the loader hands over a valid record; `data` is ours.
            let (info, found) = unsafe { (&*info, &mut *data.cast::<(usize, Option<(usize, String)>)>()) };
            if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
                return 0;
            }
            let base = info.dlpi_addr as usize;
            // SAFETY: `dlpi_phnum` headers at `dlpi_phdr`, alive during the call.
            let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
            let inside = headers.iter().any(|h| {
                let start = base.wrapping_add(h.p_vaddr as usize);
                h.p_type == libc::PT_LOAD && (start..start.wrapping_add(h.p_memsz as usize)).contains(&found.0)
            });
            if !inside {
                return 0;
            }
            let path = if info.dlpi_name.is_null() {
                String::new()
            } else {
                // SAFETY: a NUL-terminated path, alive during the call.
                unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
            };
            found.1 = Some((base, path));
            1
        }
        if address.is_null() {
            return None;
        }
        let mut found: (usize, Option<(usize, String)>) = (address as usize, None);
        // SAFETY: `visit` only reads the records and writes `found`.
        unsafe { libc::dl_iterate_phdr(Some(visit), (&mut found as *mut (usize, Option<(usize, String)>)).cast()) };
        found.1
    }
    // SAFETY: looking a name up in the global scope has no side effect.
    let context_create = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"LLVMContextCreate".as_ptr()) };
    let (base, path) = object_of(context_create)?;
    // The executable's own path reads as "" (or its argv[0]).
    let path = if path.is_empty() || !path.contains('/') {
        std::fs::read_link("/proc/self/exe").map(|p| p.display().to_string()).unwrap_or(path)
    } else {
        path
    };
    // SAFETY: as above.
    let get_version = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"LLVMGetVersion".as_ptr()) };
    // Only the host's own: an LLVM before 16 has none, and the scope's
    // next one would be this plugin's.
    if object_of(get_version).is_some_and(|(b, _)| b == base) {
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: LLVM's `void LLVMGetVersion(unsigned *, unsigned *, unsigned *)`.
        unsafe { std::mem::transmute::<*mut c_void, GetVersion>(get_version)(&mut major, &mut minor, &mut patch) };
        return Some((HostLlvm::Major(major), path));
    }
    Some((llvm_major_of(&path).map_or(HostLlvm::Before16, HostLlvm::Major), path))
}

/// The major version in a libLLVM's file name: `libLLVM-16.so.1`,
/// `libLLVM-16.so` (up to LLVM 17), `libLLVM.so.18.1` (from 18).
fn llvm_major_of(path: &str) -> Option<u32> {
    let file = path.rsplit('/').next()?;
    let rest = file.strip_prefix("libLLVM")?;
    let version = rest.strip_prefix('-').or_else(|| rest.strip_prefix(".so."))?;
    let digits = &version[..version.find(|c: char| !c.is_ascii_digit()).unwrap_or(version.len())];
    digits.parse().ok()
}

/// One pass of the plugin, as its C++ class (shim.cc) holds it.
struct Pass {
    kind: Kind,
    /// Its element in a printed pipeline (`-print-pipeline-passes`), which
    /// `opt` parses back: as named, or what the environment configured.
    text: String,
}

enum Kind {
    /// `programl-graph` as named in a pipeline, with its parameters.
    Graph(config::Params),
    /// `programl-graph` at the `OptimizerLast` extension point (clang).
    GraphAtOptimizerLast,
    /// `programl-infer` as named in a pipeline, with its parameters.
    Infer(infer::params::Params),
    /// `programl-infer` configured by `PROGRAML_INFER`, at `OptimizerLast`
    /// (clang at every -O level, opt's default pipelines) and at the
    /// full-LTO extension point (lld's `-flto` link, opt's `lto<...>`);
    /// stands down when the pipeline names the pass itself. The second
    /// field: whether the pipeline optimises (its level above -O0; `None`
    /// when parsed back from a printed pipeline).
    InferFromEnvironment(infer::Site, Option<bool>),
}

impl Kind {
    /// shim.cc's class for it: 0 `programl-graph`, 1 `programl-infer`.
    fn class(&self) -> c_uint {
        match self {
            Kind::Graph(_) | Kind::GraphAtOptimizerLast => 0,
            Kind::Infer(_) | Kind::InferFromEnvironment(..) => 1,
        }
    }
}

fn into_raw(pass: Pass) -> *mut c_void {
    Box::into_raw(Box::new(pass)).cast()
}

/// One element of a pipeline (`opt -passes=`): 0 not ours, 1 ours (the
/// pass and its class set), 2 ours and refused (reported on stderr).
/// `nested`: whether the element carries a nested pipeline (`name(...)`),
/// which neither pass takes.
///
/// # Safety
/// `name` points to `len` readable bytes; `class` and `pass` are writable.
#[no_mangle]
pub unsafe extern "C" fn programl_passes_parse(
    name: *const c_char,
    len: usize,
    nested: c_int,
    class: *mut c_uint,
    pass: *mut *mut c_void,
) -> c_int {
    if name.is_null() || len == 0 {
        return 0;
    }
    // SAFETY: as the caller promises (and not null).
    let bytes = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) };
    let Ok(name) = std::str::from_utf8(bytes) else { return 0 };
    // LLVM calls in through `extern "C"`: a panic here would abort.
    let parsed = guard::catch(|| parse_nested_element(name, nested != 0)).unwrap_or_else(|panic| {
        guard::report_pipeline_error("programl", name, &format_args!("internal error: {panic}"));
        Err(())
    });
    match parsed {
        Ok(None) => 0,
        Ok(Some(kind)) => {
            // SAFETY: as the caller promises.
            unsafe {
                *class = kind.class();
                *pass = into_raw(Pass { kind, text: name.to_string() });
            }
            1
        }
        Err(()) => 2,
    }
}

/// How a printed pipeline spells the extension points' instances, which
/// parse back as those instances (configured by the environment, standing
/// down when the pipeline names the pass).
const GRAPH_AUTO: &str = "programl-graph<auto>";
const INFER_AUTO: &str = "programl-infer<auto>";

/// [`parse_pipeline_element`], refusing a nested pipeline after either
/// name (`programl-graph(instcombine)`): LLVM hands the nested elements to
/// the callback, which would otherwise drop them without a word.
fn parse_nested_element(name: &str, nested: bool) -> Result<Option<Kind>, ()> {
    let parsed = parse_pipeline_element(name)?;
    if nested && parsed.is_some() {
        let pass = if parsed.as_ref().is_some_and(|k| k.class() == 1) { infer::params::PASS_NAME } else { "programl-graph" };
        guard::report_pipeline_error(
            pass,
            name,
            &format_args!("takes no nested pipeline (`{name}(...)`): its settings go in <...>, and the passes to run before it go before it, comma-separated"),
        );
        return Err(());
    }
    Ok(parsed)
}

/// Ours (`Some`), another's (`None`), or ours and refused (reported).
fn parse_pipeline_element(name: &str) -> Result<Option<Kind>, ()> {
    match name {
        GRAPH_AUTO => return Ok(Some(Kind::GraphAtOptimizerLast)),
        INFER_AUTO => return Ok(Some(Kind::InferFromEnvironment(infer::Site::OptimizerLast, None))),
        _ => {}
    }
    if let Some(parsed) = infer::params::parse_pass_name(name) {
        return match parsed {
            Ok(params) => {
                INFER_NAMED_IN_PIPELINE.store(true, Ordering::Relaxed);
                Ok(Some(Kind::Infer(params)))
            }
            Err(error) => {
                guard::report_pipeline_error(infer::params::PASS_NAME, name, &error);
                Err(())
            }
        };
    }
    match config::parse_pass_name(name) {
        None => Ok(None),
        Some(Ok(params)) => {
            NAMED_IN_PIPELINE.store(true, Ordering::Relaxed);
            Ok(Some(Kind::Graph(params)))
        }
        Some(Err(error)) => {
            // opt then fails with "unknown pass name" and exits non-zero.
            guard::report_parse_error(name, &error);
            Err(())
        }
    }
}

/// The passes an extension point adds (`site` 0: `OptimizerLast`, 1: full
/// LTO's last), each only where the environment turns it on (or sets it
/// wrong, which it then reports), so that a pipeline of a plugin the
/// environment leaves off prints and runs as without it.
///
/// # Safety
/// `graph` and `infer` are writable.
#[no_mangle]
pub unsafe extern "C" fn programl_passes_extension(site: c_uint, optimised: c_int, graph: *mut *mut c_void, infer: *mut *mut c_void) {
    let (g, i) = guard::catch(|| extension_passes(site, optimised != 0)).unwrap_or_else(|panic| {
        guard::warn(&format_args!("internal error, no pass added: {panic}"));
        (None, None)
    });
    // SAFETY: as the caller promises.
    unsafe {
        *graph = g.map_or(std::ptr::null_mut(), into_raw);
        *infer = i.map_or(std::ptr::null_mut(), into_raw);
    }
}

fn extension_passes(site: c_uint, optimised: bool) -> (Option<Pass>, Option<Pass>) {
    let infer = infer::params::env_enabled().then(|| {
        let site = if site == 0 { infer::Site::OptimizerLast } else { infer::Site::FullLto };
        Pass { kind: Kind::InferFromEnvironment(site, Some(optimised)), text: INFER_AUTO.to_string() }
    });
    // The graph's instance: at OptimizerLast only; a bad variable adds it,
    // to say so when it runs.
    let graph_on = site == 0 && config::extension_enabled().unwrap_or(true);
    let graph = graph_on.then(|| Pass { kind: Kind::GraphAtOptimizerLast, text: GRAPH_AUTO.to_string() });
    (graph, infer)
}

/// Runs a pass on a module: 1 when it preserved every analysis. Never
/// unwinds: the passes catch their own panics ([`guard`]).
///
/// # Safety
/// `pass` came from this file and is alive; `module` is valid for the call.
#[no_mangle]
pub unsafe extern "C" fn programl_passes_run(pass: *mut c_void, module: LLVMModuleRef) -> c_int {
    // SAFETY: as the caller promises.
    let pass = unsafe { &*pass.cast::<Pass>() };
    // Borrowed from the pass manager: never disposed here.
    // SAFETY: as the caller promises.
    let borrowed = ManuallyDrop::new(unsafe { Module::new(module) });
    let all = match &pass.kind {
        Kind::Graph(params) => {
            guard::run(|| graph::write_module_graph(&borrowed, params));
            true
        }
        Kind::GraphAtOptimizerLast => {
            if !NAMED_IN_PIPELINE.load(Ordering::Relaxed) {
                guard::run(|| {
                    // Rechecked here: a variable may be set wrong, and a
                    // pipeline printed and parsed back adds it regardless.
                    if config::extension_enabled()? {
                        graph::write_module_graph(&borrowed, &config::Params::default())?;
                    }
                    Ok::<(), graph::GraphError>(())
                });
            }
            true
        }
        Kind::Infer(params) => {
            // SAFETY: as above.
            unsafe { infer::run_pass(module, params, infer::Site::Pipeline, None) };
            false
        }
        Kind::InferFromEnvironment(site, optimised) => run_from_environment(module, *site, *optimised),
    };
    all as c_int
}

fn run_from_environment(module: LLVMModuleRef, site: infer::Site, optimised: Option<bool>) -> bool {
    if INFER_NAMED_IN_PIPELINE.load(Ordering::Relaxed) {
        return true;
    }
    let read = guard::catch(|| infer::params::from_env().map(|r| r.map_err(|e| e.to_string())))
        .unwrap_or_else(|panic| Some(Err(format!("internal error: {panic}"))));
    match read {
        None => true,
        Some(Ok(params)) => {
            // SAFETY: the pass manager hands over a valid module for this call.
            unsafe { infer::run_pass(module, &params, site, optimised) };
            false
        }
        Some(Err(error)) => {
            let _ = guard::catch(logger::init);
            log::warn!(target: infer::params::PASS_NAME, "{}: {error}; no prediction", infer::params::ENV_INFER);
            true
        }
    }
}

/// The pass's element in a printed pipeline, as UTF-8 (valid while it lives).
///
/// # Safety
/// `pass` came from this file and is alive; `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn programl_passes_text(pass: *mut c_void, len: *mut usize) -> *const c_char {
    // SAFETY: as the caller promises.
    let pass = unsafe { &*pass.cast::<Pass>() };
    // SAFETY: as the caller promises.
    unsafe { *len = pass.text.len() };
    pass.text.as_ptr().cast()
}

/// Frees a pass (its C++ class's destructor).
///
/// # Safety
/// `pass` came from this file and is not used again.
#[no_mangle]
pub unsafe extern "C" fn programl_passes_drop(pass: *mut c_void) {
    if !pass.is_null() {
        // SAFETY: as the caller promises.
        let pass = unsafe { Box::from_raw(pass.cast::<Pass>()) };
        let _ = guard::catch(move || drop(pass));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_libllvm_names_its_major_version() {
        assert_eq!(llvm_major_of("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"), Some(16));
        assert_eq!(llvm_major_of("/usr/lib/llvm-14/lib/libLLVM-14.so"), Some(14));
        assert_eq!(llvm_major_of("/opt/llvm/lib/libLLVM.so.18.1"), Some(18));
        assert_eq!(llvm_major_of("libLLVM-9.so"), Some(9));
        for other in ["/usr/lib/libLLVMSupport.so", "/usr/lib/libclang-cpp.so.16", "", "/usr/lib/libLLVM.so", "libLLVM-.so"] {
            assert_eq!(llvm_major_of(other), None, "{other}");
        }
    }

    /// This test process links the libLLVM the core links: the plugin's own,
    /// told by its `LLVMGetVersion` (16 on) or its file name.
    #[test]
    fn the_host_llvm_of_a_process_that_links_ours_is_ours() {
        // SAFETY: returns a constant.
        let ours = unsafe { programl_passes_llvm_major() };
        assert_eq!(host_llvm().map(|(host, _)| host), Some(HostLlvm::Major(ours)));
    }

    #[test]
    fn the_extension_instances_parse_back_as_themselves() {
        assert!(matches!(parse_pipeline_element(GRAPH_AUTO), Ok(Some(Kind::GraphAtOptimizerLast))));
        assert!(matches!(parse_pipeline_element(INFER_AUTO), Ok(Some(Kind::InferFromEnvironment(_, None)))));
        assert!(parse_pipeline_element("programl-graph<auto;format=json>").is_err());
    }
}
