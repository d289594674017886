//! Reading LLVM IR files (`.ll` text or `.bc` bitcode) into modules.
//!
//! LLVM 15 and 16 read typed-pointer IR (`i32*`) by silently turning every
//! pointer into `ptr`, unless the context is told to keep typed pointers.
//! Graph texts of typed-pointer input must keep their pointer types (upstream
//! ProGraML reads LLVM 10 IR), so [`load_module`] detects the pointer flavour
//! of the input and sets up the context to match, without a flag.

use std::path::Path;

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;

/// Whether a path names an IR file by its extension (`.ll` or `.bc`).
pub fn is_ir_file(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("ll" | "bc"))
}

/// The `.ll` and `.bc` files under `dir`, recursively, sorted. Symbolic links
/// to files are followed, to directories not (no cycles). An unreadable
/// directory is an error naming it.
pub fn find_ir_files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: cannot list directory: {e}", d.display()));
        for entry in std::fs::read_dir(&d).map_err(named)? {
            let entry = entry.map_err(named)?;
            let path = entry.path();
            if entry.file_type().map_err(named)?.is_dir() {
                stack.push(path);
            } else if is_ir_file(&path) && path.is_file() {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Why a file could not be read as an LLVM module.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: not valid LLVM IR: {message}")]
    Parse { path: String, message: String },
}

/// Pointer flavour of an IR file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pointers {
    Typed,
    Opaque,
}

#[cfg(any(feature = "llvm15", feature = "llvm16"))]
extern "C" {
    fn LLVMContextSetOpaquePointers(c: inkwell::llvm_sys::prelude::LLVMContextRef, opaque: i32);
}

/// Tells `context` which pointer flavour to parse into. Must run before the
/// context has created any pointer type. Without effect on LLVM 14 (typed
/// unless the IR says `ptr`) and LLVM 17+ (opaque only).
pub fn set_pointers(context: &Context, pointers: Pointers) {
    #[cfg(any(feature = "llvm15", feature = "llvm16"))]
    unsafe {
        LLVMContextSetOpaquePointers(context.raw(), (pointers == Pointers::Opaque) as i32);
    }
    #[cfg(not(any(feature = "llvm15", feature = "llvm16")))]
    let _ = (context, pointers);
}

/// Guesses the pointer flavour of textual IR: opaque iff the `ptr` type
/// keyword appears outside strings, comments and identifiers.
pub fn detect_text_pointers(text: &[u8]) -> Pointers {
    let mut i = 0;
    let n = text.len();
    while i < n {
        match text[i] {
            b'"' => {
                i += 1;
                while i < n && text[i] != b'"' {
                    i += 1;
                }
            }
            b';' => {
                while i < n && text[i] != b'\n' {
                    i += 1;
                }
            }
            b'p' if text[i..].starts_with(b"ptr") => {
                let before = if i == 0 { b' ' } else { text[i - 1] };
                let after = text.get(i + 3).copied().unwrap_or(b' ');
                let ident = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$' | b'-' | b'%' | b'@' | b'!' | b'#');
                if !ident(before) && !ident(after) && after != b':' {
                    return Pointers::Opaque;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Pointers::Typed
}

/// Reads `path` into a module of `context`, keeping typed pointers when the
/// input has them. A context holds one pointer flavour for its lifetime, so
/// use a fresh context per file.
pub fn load_module<'ctx>(context: &'ctx Context, path: &Path) -> Result<Module<'ctx>, LoadError> {
    let bytes = std::fs::read(path).map_err(|e| LoadError::Read { path: path.display().to_string(), message: e.to_string() })?;
    // LLVM reads an empty buffer as an empty text module: right for an
    // empty `.ll`, but an empty `.bc` is a compile that failed or was cut
    // short, not a module without code.
    if bytes.is_empty() && path.extension().is_some_and(|e| e == "bc") {
        return Err(LoadError::Parse { path: path.display().to_string(), message: "an empty file (0 bytes) is not LLVM bitcode".into() });
    }
    parse_module(context, &bytes, &path.display().to_string())
}

/// What this process is reading now: for a fatal-signal handler (the CLI's)
/// to name the input on which LLVM's reader killed the process (it
/// segfaults on some damaged bitcode). One slot per parse in progress; a
/// handler reads them with [`for_each_reading`], lock- and allocation-free.
mod reading {
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    const SLOTS: usize = 256;
    /// A slot being filled in (its length not yet stored).
    const CLAIMED: *mut u8 = std::ptr::dangling_mut::<u8>();
    static NAMES: [AtomicPtr<u8>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
    static LENS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

    /// Holds a slot while a parse runs; frees it when dropped.
    pub struct Reading {
        slot: Option<usize>,
        _text: Box<[u8]>,
    }

    pub fn start(name: &str) -> Reading {
        let mut text: Box<[u8]> = format!("  {name}\n").into_bytes().into_boxed_slice();
        let ptr = text.as_mut_ptr();
        let slot =
            (0..SLOTS).find(|&i| NAMES[i].compare_exchange(std::ptr::null_mut(), CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_ok());
        if let Some(i) = slot {
            LENS[i].store(text.len(), Ordering::Release);
            NAMES[i].store(ptr, Ordering::Release);
        }
        Reading { slot, _text: text }
    }

    impl Drop for Reading {
        fn drop(&mut self) {
            if let Some(i) = self.slot {
                NAMES[i].store(std::ptr::null_mut(), Ordering::Release);
            }
        }
    }

    /// Calls `f` with each name being read (`  NAME\n`): atomic loads only,
    /// so a signal handler may call it.
    pub fn for_each(mut f: impl FnMut(&[u8])) {
        for i in 0..SLOTS {
            let p = NAMES[i].load(Ordering::Acquire);
            if !p.is_null() && p != CLAIMED {
                // SAFETY: a published slot points at its guard's live text of
                // LENS[i] bytes until the guard clears it.
                f(unsafe { std::slice::from_raw_parts(p, LENS[i].load(Ordering::Acquire)) });
            }
        }
    }
}

pub use reading::for_each as for_each_reading;

/// Parses IR text or bitcode held in memory; `name` names it in errors and
/// becomes the module identifier.
pub fn parse_module<'ctx>(context: &'ctx Context, bytes: &[u8], name: &str) -> Result<Module<'ctx>, LoadError> {
    let _reading = reading::start(name);
    let is_bitcode = bytes.starts_with(b"BC\xC0\xDE") || bytes.starts_with(&[0xDE, 0xC0, 0x17, 0x0B]);
    // Bitcode says nothing cheap about its pointers: try typed first, since
    // typed-mode parsing rejects opaque-pointer bitcode outright rather than
    // changing it, then fall back.
    let first = if is_bitcode { Pointers::Typed } else { detect_text_pointers(bytes) };
    set_pointers(context, first);
    match parse_in(context, bytes, name) {
        Ok(m) => Ok(m),
        Err(first_error) => {
            // A wrong guess shows as an error about pointers (typed mode
            // rejects `ptr` and opaque-pointer bitcode). Switch and retry:
            // the pointer types the failed parse made are never used again.
            if first_error.contains("pointer") && !first_error.starts_with("invalid module") {
                let other = if first == Pointers::Typed { Pointers::Opaque } else { Pointers::Typed };
                set_pointers(context, other);
                return parse_in(context, bytes, name).map_err(|message| LoadError::Parse { path: name.to_string(), message });
            }
            Err(LoadError::Parse { path: name.to_string(), message: first_error })
        }
    }
}

fn parse_in<'ctx>(context: &'ctx Context, bytes: &[u8], name: &str) -> Result<Module<'ctx>, String> {
    let buffer = MemoryBuffer::create_from_memory_range_copy(bytes, name);
    let module = context.create_module_from_ir(buffer).map_err(|e| first_line(&e.to_string()))?;
    // The parser accepts some invalid modules (uses not dominated by their
    // definition, say); the builder should only ever see valid ones.
    module.verify().map_err(|e| format!("invalid module: {}", first_line(&e.to_string())))?;
    Ok(module)
}

fn first_line(message: &str) -> String {
    let m = message.trim();
    // LLVM's parse errors read "<name>:LINE:COL: error: ..." plus the source
    // line and a caret; keep the message and the position.
    m.lines().next().unwrap_or(m).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_pointer_flavour() {
        assert_eq!(detect_text_pointers(b"define void @f(ptr %p) {\n ret void\n}"), Pointers::Opaque);
        assert_eq!(detect_text_pointers(b"define void @f(i32* %ptr) {\nptr:\n ret void\n}"), Pointers::Typed);
        assert_eq!(detect_text_pointers(b"@s = constant [4 x i8] c\"ptr\\00\" ; ptr\n@ptr = global i8* null"), Pointers::Typed);
        assert_eq!(detect_text_pointers(b"%x = load ptr, ptr %p"), Pointers::Opaque);
    }
}
