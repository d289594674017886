//! Names the inputs being read when the process is killed by a fatal
//! signal. LLVM's bitcode reader segfaults (or aborts, "out of memory") on
//! some damaged files; nothing can catch that, but the user can be told
//! which file it was: the handler writes the names that
//! [`programl::ir::for_each_reading`] holds, then hands the signal to what
//! was there before (Rust's stack-overflow report for SIGSEGV and SIGBUS,
//! else the default), so the process still dies by it.

use std::sync::OnceLock;

const SIGNALS: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// The actions replaced, in [`SIGNALS`]' order.
static PREVIOUS: OnceLock<[libc::sigaction; 5]> = OnceLock::new();

/// Installs the handler; call once, before any thread starts.
pub fn install() {
    let mut previous: [libc::sigaction; 5] = unsafe { std::mem::zeroed() };
    for (i, &sig) in SIGNALS.iter().enumerate() {
        // SAFETY: a zeroed sigaction with a handler and an empty mask is
        // valid; `previous[i]` receives the action it replaces.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, &mut previous[i]);
        }
    }
    let _ = PREVIOUS.set(previous);
}

fn write_all(bytes: &[u8]) {
    // SAFETY: write(2) is async-signal-safe; a short or failed write loses
    // only the message.
    unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
}

extern "C" fn on_fatal(sig: libc::c_int, _info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    let mut any = false;
    programl::ir::for_each_reading(|name| {
        if !any {
            // The signal's number in decimal, without formatting machinery.
            let mut digits = [0u8; 10];
            let (mut n, mut at) = (sig.unsigned_abs(), digits.len());
            loop {
                at -= 1;
                digits[at] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            write_all(b"programl: killed by signal ");
            write_all(&digits[at..]);
            write_all(b" while reading (LLVM's reader crashes on some damaged bitcode):\n");
            any = true;
        }
        write_all(name);
    });
    // Hand over: restore what was there and return; the fault happens again
    // (or abort raises again) under the earlier action.
    if let (Some(previous), Some(i)) = (PREVIOUS.get(), SIGNALS.iter().position(|&s| s == sig)) {
        // SAFETY: sigaction(2) is async-signal-safe.
        unsafe { libc::sigaction(sig, &previous[i], std::ptr::null_mut()) };
    } else {
        // SAFETY: as above.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}
