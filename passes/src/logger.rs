//! The plugin's `log` backend: one line per record on stderr, never stdout.
//!
//! `PROGRAML_LOG` sets the level: `off`, `error`, `warn` (the default),
//! `info`, `debug` or `trace`; an empty variable counts as unset. A value
//! that is none of these is reported once, as a warning, and the default
//! applies. Lines read `<target>: <message>` at `warn` and `error` (the
//! target being the pass, `programl-infer`), and `<target> [<level>]:
//! <message>` below, so a build log shows which pass said what.
//!
//! Writing never panics (`eprintln!` would, on a closed stderr): errors are
//! ignored.

use std::io::Write;
use std::sync::Once;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The variable holding the level.
pub const ENV_LOG: &str = "PROGRAML_LOG";

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let target = record.target();
        let target = if target.starts_with("programl_passes") { "programl" } else { target };
        let mut err = std::io::stderr().lock();
        let _ = match record.level() {
            Level::Error | Level::Warn => writeln!(err, "{target}: {}", record.args()),
            level => writeln!(err, "{target} [{}]: {}", level.as_str().to_lowercase(), record.args()),
        };
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The level a `PROGRAML_LOG` value names, if it names one.
pub fn parse_level(value: &str) -> Option<LevelFilter> {
    match value.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => Some(LevelFilter::Off),
        "error" => Some(LevelFilter::Error),
        "warn" | "warning" => Some(LevelFilter::Warn),
        "info" => Some(LevelFilter::Info),
        "debug" => Some(LevelFilter::Debug),
        "trace" => Some(LevelFilter::Trace),
        _ => None,
    }
}

/// Installs the logger with the level from `PROGRAML_LOG`, once per
/// process. Later calls do nothing. If the host already installed a `log`
/// logger in this plugin's copy of the crate (it cannot: the copy is
/// private to the plugin), that one stays.
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let value = std::env::var(ENV_LOG).ok().filter(|v| !v.trim().is_empty());
        let level = value.as_deref().map(parse_level);
        let filter = match level {
            Some(Some(level)) => level,
            _ => LevelFilter::Warn,
        };
        if log::set_logger(&StderrLogger).is_ok() {
            log::set_max_level(filter);
        }
        if let (Some(value), Some(None)) = (value, level) {
            log::warn!(target: "programl", "{ENV_LOG}='{value}' is not one of off, error, warn, info, debug, trace; using warn");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(parse_level("DEBUG"), Some(LevelFilter::Debug));
        assert_eq!(parse_level("warn"), Some(LevelFilter::Warn));
        assert_eq!(parse_level(" off "), Some(LevelFilter::Off));
        assert_eq!(parse_level("loud"), None);
    }
}
