//! What the CPU runs, and which path the kernels take.
//!
//! The kernels dispatch at run time on [`active`]: the best instruction
//! set this CPU has ([`detected`]), lowered by a cap the caller sets for
//! its thread ([`with_cap`]; `isa=` in `PROGRAML_INFER`, `--isa` in
//! `programl-train`). [`crate::threads::par_ranges`] carries the caller's
//! cap to the threads that run its ranges, so one call takes one path.
//! A cap above what the CPU has changes nothing: [`Isa::check`] says so.

use std::cell::Cell;
use std::fmt;
use std::str::FromStr;

/// An x86-64 kernel path, from the most portable up. Each includes the
/// ones below it, with one exception: AVX-VNNI (256-bit `vpdpbusd`, VEX
/// encoded) is a flag of its own, which CPUs with AVX-512 VNNI may lack
/// (Cascade Lake, Ice Lake, Zen 4) and CPUs without AVX-512 may have
/// (Alder Lake and later client cores, Sierra Forest). So a path is
/// [`Isa::supported`] where the CPU has its flags, and [`active`] falls
/// back from `avxvnni` to `avx2` where it does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust, any target (on x86-64: SSE2, FMAs as library calls).
    Portable,
    /// AVX2 and FMA (Haswell, Zen).
    Avx2,
    /// AVX2 and FMA with AVX-VNNI (`vpdpbusd` on 256 bits: Alder Lake,
    /// Sapphire Rapids, Zen 5): INT8 products at AVX2's width. Its FP32
    /// kernels are AVX2's.
    AvxVnni,
    /// AVX-512 F, BW and VL (Skylake-SP, Zen 4).
    Avx512,
    /// AVX-512 with VNNI (`vpdpbusd`: Cascade Lake, Zen 4): INT8 products.
    Vnni,
}

impl Isa {
    pub const ALL: [Isa; 5] = [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Vnni];

    /// The CPU flags this path needs, as `/proc/cpuinfo` names them.
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Isa::Portable => &[],
            Isa::Avx2 => &["avx2", "fma"],
            Isa::AvxVnni => &["avx2", "fma", "avx_vnni"],
            Isa::Avx512 => &["avx512f", "avx512bw", "avx512vl"],
            Isa::Vnni => &["avx512f", "avx512bw", "avx512vl", "avx512_vnni"],
        }
    }

    /// Whether this CPU runs the path: it has the path's flags.
    pub fn supported(self) -> bool {
        self.flags().iter().all(|f| has_flag(f))
    }

    /// `Ok` where the CPU runs the path; else why not, naming the flag.
    pub fn check(self) -> Result<(), String> {
        if self.supported() {
            return Ok(());
        }
        let missing: Vec<&str> = self.flags().iter().copied().filter(|f| !has_flag(f)).collect();
        Err(format!("isa={self}: this CPU lacks {}", missing.join(", ")))
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 => "avx512",
            Isa::Vnni => "vnni",
        })
    }
}

impl FromStr for Isa {
    type Err = String;
    fn from_str(s: &str) -> Result<Isa, String> {
        match s {
            "portable" => Ok(Isa::Portable),
            "avx2" => Ok(Isa::Avx2),
            "avxvnni" => Ok(Isa::AvxVnni),
            "avx512" => Ok(Isa::Avx512),
            "vnni" => Ok(Isa::Vnni),
            _ => Err(format!("isa '{s}' is not one of portable, avx2, avxvnni, avx512, vnni")),
        }
    }
}

/// Whether the CPU has one flag (names as `/proc/cpuinfo` spells them).
pub fn has_flag(flag: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match flag {
            "avx2" => std::is_x86_feature_detected!("avx2"),
            "fma" => std::is_x86_feature_detected!("fma"),
            "avx512f" => std::is_x86_feature_detected!("avx512f"),
            "avx512bw" => std::is_x86_feature_detected!("avx512bw"),
            "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
            "avx512dq" => std::is_x86_feature_detected!("avx512dq"),
            "avx512_vnni" => std::is_x86_feature_detected!("avx512vnni"),
            "avx_vnni" => std::is_x86_feature_detected!("avxvnni"),
            "avx512_bf16" => std::is_x86_feature_detected!("avx512bf16"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = flag;
        false
    }
}

/// The best path this CPU runs.
pub fn detected() -> Isa {
    static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *BEST.get_or_init(|| Isa::ALL.into_iter().rev().find(|&i| i.supported()).unwrap_or(Isa::Portable))
}

thread_local! {
    static CAP: Cell<Isa> = const { Cell::new(Isa::Vnni) };
}

/// This thread's cap ([`with_cap`]; the highest path by default).
pub fn cap() -> Isa {
    CAP.with(Cell::get)
}

/// The path the kernels take on this thread: the best the CPU runs, at
/// most the cap (`avxvnni` where the CPU lacks AVX-VNNI: `avx2`).
pub fn active() -> Isa {
    match detected().min(cap()) {
        Isa::AvxVnni if !Isa::AvxVnni.supported() => Isa::Avx2,
        isa => isa,
    }
}

/// The path the FP32 and BF16 kernels take on this thread: [`active`],
/// where AVX-VNNI (INT8 products only) runs AVX2's.
pub fn active_float() -> Isa {
    match active() {
        Isa::AvxVnni => Isa::Avx2,
        isa => isa,
    }
}

/// Whether the kernels may take `isa`'s path on this thread.
pub fn allows(isa: Isa) -> bool {
    active() >= isa
}

/// Sets this thread's cap, returning the one before (prefer [`with_cap`]).
pub fn set_cap(isa: Isa) -> Isa {
    CAP.with(|c| c.replace(isa))
}

/// Runs `f` with this thread's kernels capped at `isa` (restored after,
/// also on a panic).
pub fn with_cap<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    struct Restore(Isa);
    impl Drop for Restore {
        fn drop(&mut self) {
            CAP.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CAP.with(|c| c.replace(isa)));
    f()
}

/// Whether the CPU has native BF16 products (AVX512-BF16) on a path that
/// allows AVX-512.
pub fn bf16() -> bool {
    allows(Isa::Avx512) && has_flag("avx512_bf16")
}

/// The CPU's model name, from `/proc/cpuinfo` (for reports).
pub fn model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| info.lines().find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// For instruction-set tests: `true` where this CPU runs `isa`; else
/// prints `SKIP: cpu lacks <flags>: <test>` on stderr, past the test
/// harness's capture (`scripts/test.sh` counts it as skipped, also in CI:
/// the whole test when `test` is its name, one case of it when the name
/// ends in `[case]`), and returns `false`.
pub fn run_test_on(isa: Isa, test: &str) -> bool {
    if isa.supported() {
        return true;
    }
    let missing: Vec<&str> = isa.flags().iter().copied().filter(|f| !has_flag(f)).collect();
    say_skip(&missing.join(" "), test);
    false
}

/// [`run_test_on`] for one flag beyond a path's (`avx512_bf16`, `avx512dq`).
pub fn run_test_with(flag: &str, test: &str) -> bool {
    if has_flag(flag) {
        return true;
    }
    say_skip(flag, test);
    false
}

fn say_skip(missing: &str, test: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("SKIP: cpu lacks {missing}: {test}\n").as_bytes());
}
