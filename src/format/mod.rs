//! Graph serialization: the only place that knows file formats.
//!
//! - [`Format::Pb`] / [`Format::PbTxt`]: ProGraML's `ProgramGraph` protocol
//!   buffer, binary and text, readable by the upstream `programl` tools;
//! - [`Format::Json`]: networkx node-link JSON, as upstream `graph2json`
//!   prints it;
//! - [`Format::Dot`]: GraphViz, for people.

mod json;

use std::io::{self, Write};

use crate::graph::ProgramGraph;

/// An output (or input) format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Pb,
    PbTxt,
    Json,
    Dot,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Pb, Format::PbTxt, Format::Json, Format::Dot];

    /// The name used on the command line and in pass parameters.
    pub fn name(self) -> &'static str {
        match self {
            Format::Pb => "pb",
            Format::PbTxt => "pbtxt",
            Format::Json => "json",
            Format::Dot => "dot",
        }
    }

    /// File extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Pb => "pb",
            Format::PbTxt => "pbtxt",
            Format::Json => "json",
            Format::Dot => "dot",
        }
    }

    pub fn parse(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Writes `graph` to `out` in `format`.
pub fn write_graph(graph: &ProgramGraph, format: Format, out: &mut dyn Write) -> io::Result<()> {
    match format {
        Format::Json => json::write(graph, out),
        Format::Pb | Format::PbTxt | Format::Dot => {
            Err(io::Error::new(io::ErrorKind::Unsupported, format!("format {format} is not written yet")))
        }
    }
}
