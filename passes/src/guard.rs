//! The pass boundary: nothing that happens inside may abort the compiler.
//!
//! [`catch`] turns a panic into an error message; [`run`] (the graph pass)
//! turns that, like every other failure, into one warning line
//! `programl-graph: ...` on stderr. While a pass runs, a panic
//! hook (installed on first use, in this plugin's own copy of std) records
//! the panic message instead of printing Rust's multi-line report; outside a
//! pass it defers to the previous hook.
//!
//! Writing to stderr never panics here: `eprintln!` would, on a closed
//! stderr, so warnings go through `write!` and ignore errors.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::fmt::Display;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, Once};

use crate::config::{ConfigError, PASS_NAME};

thread_local! {
    static INSIDE_PASS: Cell<bool> = const { Cell::new(false) };
    static PANIC_MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `work`; a failure or panic becomes a warning. Never unwinds.
pub fn run<E: Display>(work: impl FnOnce() -> Result<(), E>) {
    match catch(work) {
        Ok(Ok(())) => {}
        Ok(Err(error)) => warn(&error),
        Err(message) => warn(&format_args!("internal error, no graph written: {message}")),
    }
}

/// Runs `work`, turning a panic into `Err` with the panic's message and
/// location. Never unwinds. Every pass of the plugin runs its work in here.
pub fn catch<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    let was_inside = INSIDE_PASS.with(|c| c.replace(true));
    let outcome = panic::catch_unwind(AssertUnwindSafe(work));
    INSIDE_PASS.with(|c| c.set(was_inside));
    outcome.map_err(|payload| {
        let message = PANIC_MESSAGE.with(|m| m.borrow_mut().take()).unwrap_or_else(|| payload_text(payload.as_ref()));
        // Dropping the payload could itself panic; leak it instead.
        std::mem::forget(payload);
        message
    })
}

/// Prints `programl-graph: <message>` on stderr.
pub fn warn(message: &dyn Display) {
    let _ = writeln!(std::io::stderr().lock(), "{PASS_NAME}: {message}");
}

/// Prints `message` as one line on stderr, as it is.
pub fn warn_line(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
}

/// Reports a bad pipeline element once: LLVM may offer the same name to the
/// parsing callback more than once (first to classify it, then to parse it).
pub fn report_parse_error(name: &str, error: &ConfigError) {
    report_pipeline_error(PASS_NAME, name, error);
}

/// [`report_parse_error`] for any pass: `<pass>: in '<name>': <error>`.
pub fn report_pipeline_error(pass: &str, name: &str, error: &dyn Display) {
    static REPORTED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let first = match REPORTED.lock() {
        Ok(mut seen) => seen.get_or_insert_with(HashSet::new).insert(name.to_string()),
        Err(_) => true,
    };
    if first {
        let _ = writeln!(std::io::stderr().lock(), "{pass}: in '{name}': {error}");
    }
}

fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if INSIDE_PASS.with(|c| c.get()) {
                let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
                let message = format!("{}{location}", payload_text(info.payload()));
                PANIC_MESSAGE.with(|m| {
                    if let Ok(mut slot) = m.try_borrow_mut() {
                        *slot = Some(message);
                    }
                });
            } else {
                previous(info);
            }
        }));
    });
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_are_contained() {
        run(|| -> Result<(), String> { panic!("boom") });
        run(|| Err("plain failure"));
        // Still usable afterwards, and the flag is cleared.
        assert!(!INSIDE_PASS.with(|c| c.get()));
        let mut ran = false;
        run(|| -> Result<(), String> {
            ran = true;
            Ok(())
        });
        assert!(ran);
    }
}
