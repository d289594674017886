//! GraphViz DOT, for people: instructions are boxes, variables ellipses,
//! constants diamonds; edges are coloured by flow (control blue, data red,
//! call green) and labelled with their position when it is not 0. A node's
//! label is its `text`, its tooltip its `full_text`; a function's recorded
//! entry instruction has a double border. Nodes and edges appear in graph
//! order, so the output is deterministic.

use std::fmt::Write as _;
use std::io::{self, Write};

use petgraph::visit::EdgeRef;

use crate::graph::{Flow, NodeKind, ProgramGraph};

fn node_style(kind: NodeKind) -> &'static str {
    match kind {
        NodeKind::Instruction => r##"shape=box, style=filled, fillcolor="#3c78d8", fontcolor="#ffffff""##,
        NodeKind::Variable => r##"shape=ellipse, style=filled, fillcolor="#f4cccc", color="#990000""##,
        NodeKind::Constant => r##"shape=diamond, style=filled, fillcolor="#e99c9c", color="#990000""##,
        NodeKind::Type => r##"shape=octagon, style=filled, fillcolor="#cccccc""##,
    }
}

fn edge_color(flow: Flow) -> &'static str {
    match flow {
        Flow::Control => "#345393",
        Flow::Data => "#990000",
        Flow::Call => "#65ae4d",
        Flow::Type => "#999999",
    }
}

/// `s` as a DOT double-quoted string whose text GraphViz shows as is: quotes
/// and backslashes escaped (so `\l`, `\N` and friends stay literal), line
/// breaks as centred `\n` breaks, other control characters as `\xNN`.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' => out.push_str("\\n"),
            '\t' => out.push(' '),
            c if c.is_control() => {
                let _ = write!(out, "\\\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(super) fn write(g: &ProgramGraph, out: &mut dyn Write) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    writeln!(out, "digraph programl {{")?;
    writeln!(out, "  node [fontname=\"monospace\", margin=0.05];")?;
    writeln!(out, "  edge [fontname=\"monospace\"];")?;
    let mut entries: Vec<u32> = g.functions.iter().filter_map(|f| f.entry).collect();
    entries.sort_unstable();
    for id in g.graph.node_indices() {
        let n = &g.graph[id];
        write!(out, "  {} [{}, label={}", id.index(), node_style(n.kind), quote(&n.text))?;
        if entries.binary_search(&(id.index() as u32)).is_ok() {
            write!(out, ", peripheries=2")?;
        }
        if let Some(full_text) = &n.full_text {
            write!(out, ", tooltip={}", quote(full_text))?;
        }
        writeln!(out, "];")?;
    }
    for e in g.graph.edge_references() {
        let w = e.weight();
        let color = edge_color(w.flow);
        write!(out, "  {} -> {} [color=\"{color}\", fontcolor=\"{color}\"", e.source().index(), e.target().index())?;
        if w.position != 0 {
            write!(out, ", label=\"{}\"", w.position)?;
        }
        writeln!(out, "];")?;
    }
    writeln!(out, "}}")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Node;

    #[test]
    fn quote_escapes_quotes_backslashes_and_newlines() {
        assert_eq!(quote("plain"), r#""plain""#);
        assert_eq!(quote(r#"c"a\"b""#), r#""c\"a\\\"b\"""#);
        assert_eq!(quote(r"c\0A\l"), r#""c\\0A\\l""#);
        assert_eq!(quote("a\nb\r\nc"), r#""a\nb\nc""#);
        assert_eq!(quote("a\tb\u{1}"), r#""a b\\x01""#);
        assert_eq!(quote("ünï"), "\"ünï\"");
    }

    #[test]
    fn shapes_colours_and_positions() {
        let mut g = ProgramGraph::new();
        let v = g.add_node(Node {
            kind: NodeKind::Variable,
            text: "i8*".into(),
            full_text: Some("i8* %p".into()),
            function: Some(0),
            block: 0,
        });
        let c = g.add_node(Node {
            kind: NodeKind::Constant,
            text: "[4 x i8]".into(),
            full_text: Some(r#"[4 x i8] c"a\22\0A\00""#.into()),
            function: None,
            block: 0,
        });
        let i = g.add_node(Node {
            kind: NodeKind::Instruction,
            text: "ret".into(),
            full_text: Some("ret void".into()),
            function: Some(0),
            block: 0,
        });
        g.functions.push(crate::graph::Function { name: "f".into(), module: 0, entry: Some(i.index() as u32) });
        g.add_edge(Flow::Data, 0, c, ProgramGraph::external());
        g.add_edge(Flow::Data, 2, v, ProgramGraph::external());
        g.add_edge(Flow::Call, 0, ProgramGraph::external(), ProgramGraph::external());
        let mut out = Vec::new();
        write(&g, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("digraph programl {\n") && text.ends_with("}\n"), "{text}");
        assert!(text.contains(r#"  0 [shape=box,"#), "{text}");
        assert!(text.contains(r#"label="[external]"];"#), "{text}");
        assert!(text.contains(r#"  1 [shape=ellipse,"#), "{text}");
        assert!(text.contains(r#"  2 [shape=diamond,"#), "{text}");
        assert!(text.contains(r#"label="ret", peripheries=2, tooltip="ret void"];"#), "{text}");
        assert_eq!(text.matches("peripheries").count(), 1, "{text}");
        assert!(text.contains(r#"tooltip="[4 x i8] c\"a\\22\\0A\\00\"""#), "{text}");
        assert!(text.contains("  2 -> 0 [color=\"#990000\", fontcolor=\"#990000\"];\n"), "{text}");
        assert!(text.contains("  1 -> 0 [color=\"#990000\", fontcolor=\"#990000\", label=\"2\"];\n"), "{text}");
        assert!(text.contains("  0 -> 0 [color=\"#65ae4d\""), "{text}");
    }
}
