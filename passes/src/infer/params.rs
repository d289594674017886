//! `programl-infer`'s settings: pipeline parameters, or `PROGRAML_INFER`.
//!
//! ```text
//! opt -passes='programl-infer<model=DIR;device=auto;roots=sample>'
//! PROGRAML_INFER='model=DIR;device=cpu' clang-16 -fpass-plugin=... -O2 -c x.c
//! ```
//!
//! Both take the same `;`-separated `key=value` list, any subset in any
//! order, a later key overriding an earlier one (in `PROGRAML_INFER`, `,`
//! separates too: a CMake list cannot hold a `;`, and LLVM splits a
//! pipeline at `,` before the pass sees it):
//!
//! | key | values | default |
//! |---|---|---|
//! | `model` | a bundle directory (required) | — |
//! | `device` | `auto`, `cpu`, `cuda` | `auto` |
//! | `roots` | `sample`, `all`, `marked` | `sample` |
//! | `steps` | message-passing steps, ≥ 1 | the bundle's |
//! | `threads` | threads of one prediction, ≥ 1 | 1 |
//! | `dtype` | `auto` (`int8` where the CPU has AVX-512 VNNI, else `f32`), `f32`, `bf16` (BF16 products where the CPU has them) or `int8` (INT8 products on every CPU: the VNNI, AVX-VNNI, AVX2 or portable INT8 step) | `auto` |
//! | `isa` | the highest CPU kernel path: `vnni`, `avx512`, `avxvnni`, `avx2`, `portable` (for tests and benchmarks; a path the CPU lacks is an error) | the best the CPU runs |
//! | `max_roots` | roots for `roots=all`, ≥ 1 | 1000 |
//! | `max_nodes` | the largest module graph to predict for, ≥ 1 (past it: one warning, the module unchanged) | 100000 |
//! | `verify` | flag (or `verify=1`/`0`) | off |
//! | `sidecar` | a file to append decisions to | none |
//! | `transfer`, `wgsize` | device mapping's auxiliary inputs (bytes, work-group size) | none |
//!
//! A pipeline's parameters cannot contain `,`, `(` or `)` (LLVM's pipeline
//! syntax); use `PROGRAML_INFER` for such paths.

use std::fmt;
use std::path::PathBuf;

/// The pass's name in a pipeline.
pub const PASS_NAME: &str = "programl-infer";
/// The variable that enables the pass under clang and lld.
pub const ENV_INFER: &str = "PROGRAML_INFER";
/// Where the runtime library is, whatever the device.
pub const ENV_RUNTIME: &str = "PROGRAML_RUNTIME";

/// `device=`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CUDA runtime if a GPU is present (`/dev/nvidia0`) and the
    /// module's work repays its start ([`super::runtime::AUTO_CUDA_MIN_WORK`]),
    /// else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// `dtype=`: the precision of the model's products (the inference crate's
/// type; the CUDA runtime's ABI has its own code for it).
pub use programl_infer::Dtype;

/// `roots=`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Roots {
    /// The dataset's rule (`Analyzer::sampled_roots`, seed 0): at most 10.
    #[default]
    Sample,
    /// Every eligible root, up to `max_roots` (the first by node id).
    All,
    /// The instructions carrying `!programl.root !{}`.
    Marked,
}

/// The settings of one `programl-infer` instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    pub model: PathBuf,
    pub device: Device,
    pub roots: Roots,
    pub steps: Option<i64>,
    pub threads: i32,
    /// `dtype`: the products' precision; BF16 and INT8 where the CPU has
    /// their instructions, FP32 elsewhere (said once).
    pub dtype: Dtype,
    /// `isa`: the highest CPU kernel path (`None`: the best the CPU runs).
    pub isa: Option<programl_infer::Isa>,
    pub max_roots: usize,
    /// `max_nodes`: a module whose graph has more nodes is left unchanged,
    /// with one warning. Inference holds its states, products and messages
    /// for every node at once (about 2.5 KB a node with the shipped
    /// bundles, 34 or 66 wide), so this bounds the pass's memory.
    pub max_nodes: usize,
    pub verify: bool,
    pub sidecar: Option<PathBuf>,
    pub transfer: Option<u64>,
    pub wgsize: Option<u64>,
}

pub const DEFAULT_MAX_ROOTS: usize = 1000;
/// `max_nodes`' default: about 250 MB of inference memory at most (a
/// node-level bundle's per-root probabilities beside, which `max_roots`
/// bounds), the order of clang's own for a unit of that size (a graph of 100,000 nodes
/// is a C file of about 15,000 dense lines); the time, at most about a
/// second for a graph-level bundle on one thread (docs/perf/learned-pass.md).
pub const DEFAULT_MAX_NODES: usize = 100_000;

/// Settings that cannot be used; each names its culprit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamError {
    Unknown {
        name: String,
    },
    MissingValue {
        name: String,
    },
    Bad {
        name: String,
        value: String,
        expected: &'static str,
    },
    NoModel,
    /// `PROGRAML_INFER` holds bytes that are not UTF-8.
    NotUtf8,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::Unknown { name } => write!(
                f,
                "unknown parameter '{name}' (expected model, device, roots, steps, threads, dtype, isa, max_roots, max_nodes, verify, sidecar, transfer or wgsize)"
            ),
            ParamError::MissingValue { name } => write!(f, "parameter '{name}' needs a value ({name}=...)"),
            ParamError::Bad { name, value, expected } => write!(f, "{name}='{value}' is not valid (expected {expected})"),
            ParamError::NoModel => write!(f, "model=DIR is required (a bundle directory, e.g. models/reachability)"),
            ParamError::NotUtf8 => write!(f, "{ENV_INFER} is not UTF-8 text"),
        }
    }
}

/// Parses a pipeline element. `None`: not this pass. `Some(Err)`: this pass
/// with settings that cannot be used.
pub fn parse_pass_name(name: &str) -> Option<Result<Params, ParamError>> {
    let rest = name.strip_prefix(PASS_NAME)?;
    if rest.is_empty() {
        return Some(parse(""));
    }
    let inner = rest.strip_prefix('<')?.strip_suffix('>')?;
    Some(parse(inner))
}

/// Parses `key=value;...` (a pipeline's parameters or `PROGRAML_INFER`).
pub fn parse(text: &str) -> Result<Params, ParamError> {
    let mut model = None;
    let mut p = Params {
        model: PathBuf::new(),
        device: Device::Auto,
        roots: Roots::Sample,
        steps: None,
        threads: 1,
        dtype: Dtype::Auto,
        isa: None,
        max_roots: DEFAULT_MAX_ROOTS,
        max_nodes: DEFAULT_MAX_NODES,
        verify: false,
        sidecar: None,
        transfer: None,
        wgsize: None,
    };
    // `;` separates; in a list without any (`PROGRAML_INFER` from a CMake
    // list), `,` does. So a path with `,` is given in a `;` list.
    let separator = if text.contains(';') { ';' } else { ',' };
    for item in text.split(separator).map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item, None),
        };
        if key == "verify" {
            p.verify = match value {
                None | Some("1" | "on" | "true" | "yes") => true,
                Some("0" | "off" | "false" | "no") => false,
                Some(v) => return Err(ParamError::Bad { name: key.into(), value: v.into(), expected: "no value, 1 or 0" }),
            };
            continue;
        }
        if !matches!(
            key,
            "model"
                | "device"
                | "roots"
                | "steps"
                | "threads"
                | "dtype"
                | "isa"
                | "max_roots"
                | "max_nodes"
                | "sidecar"
                | "transfer"
                | "wgsize"
        ) {
            return Err(ParamError::Unknown { name: key.to_string() });
        }
        let value = value.filter(|v| !v.is_empty()).ok_or_else(|| ParamError::MissingValue { name: key.to_string() })?;
        let bad = |expected| ParamError::Bad { name: key.to_string(), value: value.to_string(), expected };
        let positive = |expected| value.parse::<u64>().ok().filter(|&n| n >= 1).ok_or_else(|| bad(expected));
        match key {
            "model" => model = Some(PathBuf::from(value)),
            "device" => {
                p.device = match value {
                    "auto" => Device::Auto,
                    "cpu" => Device::Cpu,
                    "cuda" => Device::Cuda,
                    _ => return Err(bad("auto, cpu or cuda")),
                }
            }
            "roots" => {
                p.roots = match value {
                    "sample" => Roots::Sample,
                    "all" => Roots::All,
                    "marked" => Roots::Marked,
                    _ => return Err(bad("sample, all or marked")),
                }
            }
            "steps" => {
                p.steps = Some(
                    positive("a number of steps, 1 to 10000")?
                        .try_into()
                        .ok()
                        .filter(|&n| n <= programl_infer::bundle::MAX_STEPS)
                        .ok_or_else(|| bad("a number of steps, 1 to 10000"))?,
                )
            }
            "threads" => p.threads = positive("a number of threads, at least 1")?.min(1024) as i32,
            "dtype" => {
                p.dtype = value.parse().map_err(|_| bad("auto, f32, bf16 or int8"))?;
            }
            "isa" => p.isa = Some(value.parse().map_err(|_| bad("vnni, avx512, avxvnni, avx2 or portable"))?),
            "max_roots" => p.max_roots = positive("a number of roots, at least 1")? as usize,
            "max_nodes" => p.max_nodes = positive("a number of nodes, at least 1")?.try_into().unwrap_or(usize::MAX),
            "sidecar" => p.sidecar = Some(PathBuf::from(value)),
            "transfer" => p.transfer = Some(value.parse().map_err(|_| bad("a number of bytes"))?),
            _ => p.wgsize = Some(positive("a work-group size, at least 1")?),
        }
    }
    p.model = model.ok_or(ParamError::NoModel)?;
    Ok(p)
}

/// `PROGRAML_INFER`, if set and not blank (what [`env_enabled`] says); a
/// value that is not UTF-8 is an error, so that it gets its warning.
pub fn from_env() -> Option<Result<Params, ParamError>> {
    from_value(std::env::var_os(ENV_INFER))
}

fn from_value(value: Option<std::ffi::OsString>) -> Option<Result<Params, ParamError>> {
    match value?.into_string() {
        Ok(text) if text.trim().is_empty() => None,
        Ok(text) => Some(parse(&text)),
        Err(_) => Some(Err(ParamError::NotUtf8)),
    }
}

/// Whether `PROGRAML_INFER` is set and not blank: the learned pass then
/// runs (or warns why not), and the graph pass's environment instance
/// stands down unless a `PROGRAML_GRAPH_*` variable is set too. A blank
/// value counts as unset for both.
pub fn env_enabled() -> bool {
    from_value(std::env::var_os(ENV_INFER)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters() {
        let p = parse("model=m;device=cpu;roots=all;steps=7;threads=2;max_roots=5;max_nodes=9;verify;sidecar=s.jsonl;transfer=64;wgsize=8")
            .unwrap();
        assert_eq!(p.max_nodes, 9);
        assert_eq!(p.model, PathBuf::from("m"));
        assert_eq!((p.device, p.roots, p.steps, p.threads, p.max_roots), (Device::Cpu, Roots::All, Some(7), 2, 5));
        assert!(p.verify);
        assert_eq!((p.sidecar.as_deref(), p.transfer, p.wgsize), (Some("s.jsonl".as_ref()), Some(64), Some(8)));
        let d = parse(" model = models/x ; ").unwrap();
        assert_eq!((d.device, d.roots, d.steps, d.threads, d.max_roots, d.verify), (Device::Auto, Roots::Sample, None, 1, 1000, false));
        assert_eq!(d.max_nodes, 100_000);
        assert_eq!(parse("model=m;max_nodes=18446744073709551615").unwrap().max_nodes, usize::MAX);
        assert_eq!(parse("model=a;model=b;verify=0").unwrap().model, PathBuf::from("b"));
        assert_eq!(d.dtype, Dtype::Auto);
        assert_eq!(parse("model=m;dtype=f32").unwrap().dtype, Dtype::F32);
        assert_eq!(parse("model=m;dtype=bf16").unwrap().dtype, Dtype::Bf16);
        assert_eq!(parse("model=m;dtype=int8").unwrap().dtype, Dtype::Int8);
        assert_eq!(parse("model=m;dtype=bf16;dtype=f32").unwrap().dtype, Dtype::F32);
        assert_eq!(d.isa, None);
        assert_eq!(parse("model=m;isa=avx2").unwrap().isa, Some(programl_infer::Isa::Avx2));
        assert_eq!(parse("model=m;isa=portable").unwrap().isa, Some(programl_infer::Isa::Portable));
        assert_eq!(parse("model=m;isa=avxvnni").unwrap().isa, Some(programl_infer::Isa::AvxVnni));
        assert!(parse("model=m;isa=sse").unwrap_err().to_string().contains("vnni, avx512, avxvnni, avx2 or portable"));
        let c = parse("model=m,device=cpu,verify").unwrap();
        assert_eq!((c.model.to_str(), c.device, c.verify), (Some("m"), Device::Cpu, true));
        // In a `;` list, `,` belongs to the values: a path may hold one.
        let comma = parse("model=/tmp/m,1;sidecar=a,b.jsonl;device=cpu").unwrap();
        assert_eq!(
            (comma.model.to_str(), comma.sidecar.as_deref(), comma.device),
            (Some("/tmp/m,1"), Some("a,b.jsonl".as_ref()), Device::Cpu)
        );
        assert_eq!(parse("model=m;steps=10000").unwrap().steps, Some(10_000));
    }

    /// PROGRAML_INFER: unset or blank is off (the graph pass runs as
    /// without it); set, it is parsed; not UTF-8, it is an error to warn
    /// about, never silence.
    #[test]
    fn the_environment_value() {
        use std::ffi::OsString;
        assert!(from_value(None).is_none());
        assert!(from_value(Some(OsString::new())).is_none());
        assert!(from_value(Some(OsString::from(" \t"))).is_none());
        assert_eq!(from_value(Some(OsString::from("model=m"))).unwrap().unwrap().model, PathBuf::from("m"));
        assert_eq!(from_value(Some(OsString::from("device=cpu"))), Some(Err(ParamError::NoModel)));
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt;
            let bytes = OsString::from_vec(b"model=/tmp/\xff".to_vec());
            assert_eq!(from_value(Some(bytes)), Some(Err(ParamError::NotUtf8)));
            assert!(ParamError::NotUtf8.to_string().contains("PROGRAML_INFER is not UTF-8"));
        }
    }

    #[test]
    fn bad_settings_name_their_culprit() {
        assert_eq!(parse(""), Err(ParamError::NoModel));
        assert_eq!(parse("model=m;colour=red"), Err(ParamError::Unknown { name: "colour".into() }));
        assert_eq!(parse("model"), Err(ParamError::MissingValue { name: "model".into() }));
        assert_eq!(
            parse("model=m;device=tpu"),
            Err(ParamError::Bad { name: "device".into(), value: "tpu".into(), expected: "auto, cpu or cuda" })
        );
        assert!(matches!(parse("model=m;steps=0"), Err(ParamError::Bad { .. })));
        // Past any bundle's limit (bundle::MAX_STEPS): refused by name, not a
        // compile that runs for hours.
        assert!(parse("model=m;steps=300000")
            .unwrap_err()
            .to_string()
            .contains("steps='300000' is not valid (expected a number of steps, 1 to 10000)"));
        assert!(matches!(parse("model=m;threads=-1"), Err(ParamError::Bad { .. })));
        assert!(parse("model=m;max_nodes=0")
            .unwrap_err()
            .to_string()
            .contains("max_nodes='0' is not valid (expected a number of nodes, at least 1)"));
        assert!(matches!(parse("model=m;max_nodes=1e6"), Err(ParamError::Bad { .. })));
        assert!(matches!(parse("model=m;verify=maybe"), Err(ParamError::Bad { .. })));
        assert!(parse("model=m;roots=some").unwrap_err().to_string().contains("sample, all or marked"));
        assert!(parse("model=m;dtype=f16").unwrap_err().to_string().contains("auto, f32, bf16 or int8"));
    }

    #[test]
    fn pass_names() {
        assert!(parse_pass_name("programl-graph").is_none());
        assert!(parse_pass_name("programl-infer<model=m").is_none());
        assert_eq!(parse_pass_name("programl-infer"), Some(Err(ParamError::NoModel)));
        assert_eq!(parse_pass_name("programl-infer<model=m;roots=marked>").unwrap().unwrap().roots, Roots::Marked);
    }
}
