//! Ctrl-C (SIGINT) and SIGTERM while a run trains: the run ends the batch
//! it is on, saves its checkpoint and then ends by the same signal (so a
//! shell script stops as it would have; 130 or 143 where raising it
//! cannot end the process, as PID 1 in a container), so that nothing
//! trained since the last periodic checkpoint (`--checkpoint-every`, 2
//! minutes) is lost and the same command continues. The handler says so at
//! once. A second signal, while the first is being acted on, ends the
//! process at once as the default action would (the last checkpoint stays
//! whole: every checkpoint is written atomically).
//!
//! Only the training loops are [`armed`]. Anywhere else (compiling a
//! corpus, evaluating) the signals keep their default action: a clang
//! child that the terminal's Ctrl-C killed is never recorded as a failed
//! compile by a parent that lived on. A signal that the parent process
//! ignores (a job started with `&` by a shell without job control ignores
//! SIGINT) stays ignored.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Once;

/// A training loop is running.
static ARMED: AtomicBool = AtomicBool::new(false);
/// The signal caught while armed; 0 for none.
static CAUGHT: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// While alive, SIGINT and SIGTERM are [`caught`] instead of ending the
/// process.
pub struct Armed(());

impl Drop for Armed {
    fn drop(&mut self) {
        ARMED.store(false, Ordering::SeqCst);
    }
}

/// Catches SIGINT and SIGTERM until the guard is dropped. The handlers are
/// installed once per process (signal-hook's, which chain to any other);
/// unarmed, they run the signal's default action.
pub fn armed() -> Armed {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        for signal in SIGNALS {
            if ignored(signal) {
                continue;
            }
            let said: &'static [u8] = match signal {
                libc::SIGINT => {
                    b"programl-train: SIGINT: stopping after this batch to save the checkpoint (another SIGINT stops at once)\n"
                }
                _ => b"programl-train: SIGTERM: stopping after this batch to save the checkpoint (another SIGTERM stops at once)\n",
            };
            // SAFETY: the action touches only atomics and calls write(2),
            // signal(2), raise(3) and _exit(2), all async-signal-safe.
            let installed = unsafe {
                signal_hook::low_level::register(signal, move || {
                    if ARMED.load(Ordering::SeqCst) && CAUGHT.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                        libc::write(2, said.as_ptr().cast(), said.len());
                        return;
                    }
                    end_by(signal);
                })
            };
            if let Err(e) = installed {
                // Training goes on without it: a signal then ends the
                // process as before, losing at most --checkpoint-every.
                eprintln!("programl-train: cannot catch {}: {e}", name(signal));
            }
        }
    });
    // A signal caught by an earlier loop of this process and not acted on
    // stays caught: the next batch boundary sees it.
    ARMED.store(true, Ordering::SeqCst);
    Armed(())
}

/// Ends the process by `signal`'s default action; where that does not end
/// it (PID 1 ignores it), exits with 128 + its number. Async-signal-safe.
pub fn end_by(signal: i32) -> ! {
    // SAFETY: signal(2), raise(3) and _exit(2) are async-signal-safe.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
        libc::_exit(128 + signal)
    }
}

/// The signal caught since the loop was [`armed`], if any.
pub fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Whether the process inherited `signal` as ignored.
fn ignored(signal: libc::c_int) -> bool {
    // SAFETY: a query (no new action); `old` is written by the call.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

pub fn name(signal: i32) -> &'static str {
    signal_hook::low_level::signal_name(signal).unwrap_or("a signal")
}

/// The run stopped on a signal after saving its checkpoint: `main` says so
/// and ends by the signal ([`end_by`]).
#[derive(Debug)]
pub struct Interrupted {
    pub signal: i32,
    /// Where the checkpoint stands, in the run's own terms.
    pub at: String,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: stopped; the checkpoint holds {}; run the same command to continue", name(self.signal), self.at)
    }
}

impl std::error::Error for Interrupted {}

/// Said when the loop sees the signal, at a batch's end, before it saves.
pub fn saying(signal: i32) {
    eprintln!("programl-train: {}: saving the checkpoint", name(signal));
}
