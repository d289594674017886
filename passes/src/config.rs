//! What the graph pass writes, and where: pass parameters and environment.
//!
//! In an `opt` pipeline the pass takes LLVM-style parameters,
//! `programl-graph<out=DIR;format=FMT;compat=MODE>`, any subset in any
//! order. `clang` has no pipeline text, so the same settings also come from
//! the environment; a parameter overrides its variable.
//!
//! | parameter | variable | values | default |
//! |---|---|---|---|
//! | `out` | `PROGRAML_GRAPH_DIR` | a directory (created if missing), or `-` for stdout | `.` |
//! | `format` | `PROGRAML_GRAPH_FORMAT` | `pb`, `pbtxt`, `json`, `dot` | `pb` |
//! | `compat` | `PROGRAML_GRAPH_COMPAT` | `paper` (or `none`), `programl-0.3` | `paper` |
//! | — | `PROGRAML_GRAPH_AUTO` | `1`/`on`, `0`/`off` | `1` |
//!
//! `PROGRAML_GRAPH_AUTO` only concerns the instance at the `OptimizerLast`
//! extension point (the one `clang -fpass-plugin` runs). An empty variable
//! counts as unset. A bad parameter fails pipeline parsing; a bad variable is
//! a warning and no graph, never a failed compile.
//!
//! `PROGRAML_GRAPH_PANIC_FOR_TESTING`, when set, makes the pass panic before
//! it builds anything, so the tests can check that a panic is contained.

use std::fmt;
use std::path::PathBuf;

use programl::builder::Mode;
use programl::format::Format;

/// The pass's name in a pipeline.
pub const PASS_NAME: &str = "programl-graph";

pub const ENV_DIR: &str = "PROGRAML_GRAPH_DIR";
pub const ENV_FORMAT: &str = "PROGRAML_GRAPH_FORMAT";
pub const ENV_COMPAT: &str = "PROGRAML_GRAPH_COMPAT";
pub const ENV_AUTO: &str = "PROGRAML_GRAPH_AUTO";
pub const ENV_PANIC_FOR_TESTING: &str = "PROGRAML_GRAPH_PANIC_FOR_TESTING";

const FORMATS: &str = "pb, pbtxt, json or dot";
const MODES: &str = "paper or programl-0.3";
const SWITCH: &str = "1, on, yes, true, 0, off, no or false (any case)";

/// Where graphs go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A directory; each module gets its own file ([`crate::graph::file_name`]).
    Dir(PathBuf),
    /// Standard output (`out=-`), for piping into FileCheck or a viewer.
    Stdout,
}

/// Settings given as pass parameters; `None` defers to the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    pub out: Option<Output>,
    pub format: Option<Format>,
    pub mode: Option<Mode>,
}

/// The settings of one run: parameters, else environment, else defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub out: Output,
    pub format: Format,
    pub mode: Mode,
}

/// A parameter or variable that cannot be used. Each names its culprit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    UnknownParameter { name: String },
    MissingValue { name: String },
    BadParameter { name: String, value: String, expected: &'static str },
    BadVariable { name: &'static str, value: String, expected: &'static str },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::UnknownParameter { name } => {
                write!(f, "unknown parameter '{name}' (expected out=DIR, format=FMT or compat=MODE)")
            }
            ConfigError::MissingValue { name } => {
                write!(f, "parameter '{name}' needs a value ({name}=...)")
            }
            ConfigError::BadParameter { name, value, expected } => {
                write!(f, "parameter {name}='{value}' is not valid (expected {expected})")
            }
            ConfigError::BadVariable { name, value, expected } => {
                write!(f, "{name}='{value}' is not valid (expected {expected}); no graph written")
            }
        }
    }
}

/// Parses a pipeline element. `None`: not this pass. `Some(Err)`: this pass
/// with parameters that cannot be used.
///
/// Accepts `programl-graph`, `programl-graph<>` and
/// `programl-graph<key=value;...>`; a later key overrides an earlier one.
pub fn parse_pass_name(name: &str) -> Option<Result<Params, ConfigError>> {
    let rest = name.strip_prefix(PASS_NAME)?;
    if rest.is_empty() {
        return Some(Ok(Params::default()));
    }
    let inner = rest.strip_prefix('<')?.strip_suffix('>')?;
    Some(parse_params(inner))
}

fn parse_params(text: &str) -> Result<Params, ConfigError> {
    let mut params = Params::default();
    for item in text.split(';').filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, v),
            None => (item, ""),
        };
        if !matches!(key, "out" | "format" | "compat") {
            return Err(ConfigError::UnknownParameter { name: key.to_string() });
        }
        if value.is_empty() {
            return Err(ConfigError::MissingValue { name: key.to_string() });
        }
        let bad = |expected| ConfigError::BadParameter { name: key.to_string(), value: value.to_string(), expected };
        match key {
            "out" => params.out = Some(parse_output(value)),
            "format" => params.format = Some(Format::parse(value).ok_or_else(|| bad(FORMATS))?),
            _ => params.mode = Some(Mode::parse(value).ok_or_else(|| bad(MODES))?),
        }
    }
    Ok(params)
}

fn parse_output(value: &str) -> Output {
    if value == "-" {
        Output::Stdout
    } else {
        Output::Dir(PathBuf::from(value))
    }
}

/// Fills what `params` leaves open from the environment, then defaults.
/// Variables that a parameter overrides are not read, so a bad one is
/// harmless there.
pub fn resolve(params: &Params) -> Result<Settings, ConfigError> {
    let mut settings = resolve_with(params, |name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))?;
    // A directory is bytes, not text: one whose name is not UTF-8 is used
    // as given (its lossy text would be another directory).
    if params.out.is_none() {
        if let Some(dir) = std::env::var_os(ENV_DIR).filter(|v| v.to_str().is_none()) {
            settings.out = Output::Dir(PathBuf::from(dir));
        }
    }
    Ok(settings)
}

/// [`resolve`] with the environment as a function, for tests.
pub fn resolve_with(params: &Params, env: impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty());
    let out = match &params.out {
        Some(out) => out.clone(),
        None => var(ENV_DIR).map_or_else(|| Output::Dir(PathBuf::from(".")), |v| parse_output(&v)),
    };
    let format = match params.format {
        Some(format) => format,
        None => match var(ENV_FORMAT) {
            None => Format::Pb,
            Some(v) => Format::parse(&v).ok_or(ConfigError::BadVariable { name: ENV_FORMAT, value: v, expected: FORMATS })?,
        },
    };
    let mode = match params.mode {
        Some(mode) => mode,
        None => match var(ENV_COMPAT) {
            None => Mode::Paper,
            Some(v) => Mode::parse(&v).ok_or(ConfigError::BadVariable { name: ENV_COMPAT, value: v, expected: MODES })?,
        },
    };
    Ok(Settings { out, format, mode })
}

/// Whether any `PROGRAML_GRAPH_*` variable is set (not empty). With
/// `PROGRAML_INFER` set and none of these, the extension-point instance
/// writes no graph: the user asked for predictions, not graphs.
pub fn any_graph_variable() -> bool {
    [ENV_DIR, ENV_FORMAT, ENV_COMPAT, ENV_AUTO].iter().any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// Whether the extension-point instance runs (`PROGRAML_GRAPH_AUTO`).
pub fn auto_enabled() -> Result<bool, ConfigError> {
    // A value that is not UTF-8 is a bad value, not an unset variable.
    auto_enabled_with(std::env::var_os(ENV_AUTO).map(|v| v.to_str().map_or_else(|| v.to_string_lossy().into_owned(), str::to_string)))
}

fn auto_enabled_with(value: Option<String>) -> Result<bool, ConfigError> {
    let Some(v) = value else { return Ok(true) };
    match v.to_ascii_lowercase().as_str() {
        "" | "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => Err(ConfigError::BadVariable { name: ENV_AUTO, value: v, expected: SWITCH }),
    }
}

/// Whether the extension-point instance writes a graph: on unless
/// `PROGRAML_GRAPH_AUTO` is off, and not beside the learned pass's
/// environment instance unless a `PROGRAML_GRAPH_*` variable asks for it.
pub fn extension_enabled() -> Result<bool, ConfigError> {
    Ok(auto_enabled()? && !(crate::infer::params::env_enabled() && !any_graph_variable()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_name(name: &str, expected: Option<Result<Params, ConfigError>>) {
        assert_eq!(parse_pass_name(name), expected, "{name}");
    }

    #[test]
    fn pass_names() {
        check_name("verify", None);
        check_name("programl-graphs", None);
        check_name("programl-graph<out=x", None);
        check_name("programl-graph", Some(Ok(Params::default())));
        check_name("programl-graph<>", Some(Ok(Params::default())));
        check_name(
            "programl-graph<out=d;format=json;compat=programl-0.3>",
            Some(Ok(Params { out: Some(Output::Dir("d".into())), format: Some(Format::Json), mode: Some(Mode::Programl03) })),
        );
        check_name("programl-graph<out=->", Some(Ok(Params { out: Some(Output::Stdout), ..Params::default() })));
        check_name("programl-graph<colour=red>", Some(Err(ConfigError::UnknownParameter { name: "colour".into() })));
        check_name("programl-graph<format>", Some(Err(ConfigError::MissingValue { name: "format".into() })));
        check_name(
            "programl-graph<format=xml>",
            Some(Err(ConfigError::BadParameter { name: "format".into(), value: "xml".into(), expected: FORMATS })),
        );
    }

    #[test]
    fn environment_fills_gaps_and_parameters_win() {
        let env = |name: &str| match name {
            ENV_DIR => Some("/g".to_string()),
            ENV_FORMAT => Some("xml".to_string()),
            ENV_COMPAT => Some(String::new()),
            _ => None,
        };
        let bad = resolve_with(&Params::default(), env).unwrap_err();
        assert!(bad.to_string().starts_with("PROGRAML_GRAPH_FORMAT='xml' is not valid"), "{bad}");
        let params = Params { format: Some(Format::Json), ..Params::default() };
        assert_eq!(resolve_with(&params, env), Ok(Settings { out: Output::Dir("/g".into()), format: Format::Json, mode: Mode::Paper }));
    }

    #[test]
    fn auto_switch() {
        assert_eq!(auto_enabled_with(None), Ok(true));
        assert_eq!(auto_enabled_with(Some("0".into())), Ok(false));
        assert!(auto_enabled_with(Some("maybe".into())).is_err());
        for (value, on) in [("On", true), ("TRUE", true), ("yes", true), ("Off", false), ("NO", false), ("false", false)] {
            assert_eq!(auto_enabled_with(Some(value.into())), Ok(on), "{value}");
        }
        // Not UTF-8: refused by name (lossily shown), never taken as on.
        assert!(auto_enabled_with(Some("\u{fffd}".into())).is_err());
    }
}
