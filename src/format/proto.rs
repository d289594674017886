//! ProGraML's `ProgramGraph` protocol buffer, binary and text, field for
//! field as upstream `llvm2graph` writes it:
//!
//! - node: `type`, `text`, `function` (0 when none), `block`, and the
//!   features map `{"full_text": bytes_list[1]}`, left out when the node has
//!   no `full_text` (the `[external]` node);
//! - edge: `flow`, `position`, `source`, `target`;
//! - function: `name`, `module`;
//! - module: `name` and one single-value bytes_list feature per string
//!   feature.
//!
//! Both writers stream one node, edge, function and module at a time, and
//! write module features in key order (upstream sorts map keys in text
//! format; generated map fields are hash maps, so the writers lay out those
//! maps themselves). The output is deterministic.

use std::collections::BTreeMap;
use std::io::{self, Write};

use petgraph::visit::EdgeRef;
use protobuf::{CodedOutputStream, EnumOrUnknown, Message, MessageField};

use super::pb::features::{feature, BytesList, Feature, Features, Int64List};
use super::pb::program_graph as pb;
use super::raw::{RawEdge, RawFunction, RawGraph, RawNode};
use super::FormatError;
use crate::graph::{self, ProgramGraph};

/// Node feature key of the printed IR.
const FULL_TEXT: &str = "full_text";

// Field numbers of `ProgramGraph` and `Module` (proto/program_graph.proto).
const GRAPH_NODE: u32 = 1;
const GRAPH_EDGE: u32 = 2;
const GRAPH_FUNCTION: u32 = 4;
const GRAPH_MODULE: u32 = 5;
const MODULE_FEATURES: u32 = 2;

fn int32(what: &str, index: usize, value: impl TryInto<i32> + Copy + std::fmt::Display) -> io::Result<i32> {
    value.try_into().map_err(|_| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{what} {index}: {value} does not fit the protocol buffer's int32"))
    })
}

fn bytes_feature(value: &str) -> Feature {
    let mut f = Feature::new();
    f.kind = Some(feature::Kind::BytesList(BytesList { value: vec![value.as_bytes().to_vec()], ..Default::default() }));
    f
}

/// A features map of one bytes_list feature.
fn one_feature(key: &str, value: &str) -> Features {
    let mut fs = Features::new();
    fs.feature.insert(key.to_string(), bytes_feature(value));
    fs
}

fn node_message(index: usize, n: &graph::Node) -> io::Result<pb::Node> {
    let mut m = pb::Node::new();
    m.type_ = EnumOrUnknown::from_i32(n.kind as i32);
    m.text.clone_from(&n.text);
    m.function = int32("node", index, n.function.unwrap_or(0))?;
    m.block = int32("node", index, n.block)?;
    if let Some(text) = &n.full_text {
        m.features = MessageField::some(one_feature(FULL_TEXT, text));
    }
    Ok(m)
}

fn edge_message(index: usize, flow: graph::Flow, position: u32, source: usize, target: usize) -> io::Result<pb::Edge> {
    let mut m = pb::Edge::new();
    m.flow = EnumOrUnknown::from_i32(flow as i32);
    m.position = int32("edge", index, position)?;
    m.source = int32("edge", index, source)?;
    m.target = int32("edge", index, target)?;
    Ok(m)
}

fn function_message(index: usize, f: &graph::Function) -> io::Result<pb::Function> {
    let mut m = pb::Function::new();
    m.name.clone_from(&f.name);
    m.module = int32("function", index, f.module)?;
    if let Some(entry) = f.entry {
        let mut feature = Feature::new();
        feature.kind = Some(feature::Kind::Int64List(Int64List { value: vec![entry.into()], ..Default::default() }));
        let mut fs = Features::new();
        fs.feature.insert(super::ENTRY_NODE.to_string(), feature);
        m.features = MessageField::some(fs);
    }
    Ok(m)
}

/// A module without its features.
fn module_name_message(m: &graph::Module) -> pb::Module {
    let mut message = pb::Module::new();
    message.name.clone_from(&m.name);
    message
}

/// Calls `item` with every top-level field of the graph's message, in field
/// order; modules come without features, which the caller lays out.
fn for_each_message(g: &ProgramGraph, mut item: impl FnMut(Item<'_>) -> io::Result<()>) -> io::Result<()> {
    for id in g.graph.node_indices() {
        item(Item::Node(node_message(id.index(), &g.graph[id])?))?;
    }
    for e in g.graph.edge_references() {
        let w = e.weight();
        item(Item::Edge(edge_message(e.id().index(), w.flow, w.position, e.source().index(), e.target().index())?))?;
    }
    for (i, f) in g.functions.iter().enumerate() {
        item(Item::Function(function_message(i, f)?))?;
    }
    for m in &g.modules {
        item(Item::Module(module_name_message(m), &m.features))?;
    }
    Ok(())
}

enum Item<'a> {
    Node(pb::Node),
    Edge(pb::Edge),
    Function(pb::Function),
    Module(pb::Module, &'a BTreeMap<String, String>),
}

fn pb_error(e: protobuf::Error) -> io::Error {
    io::Error::other(e)
}

/// Writes the binary protocol buffer.
pub(super) fn write_pb(g: &ProgramGraph, out: &mut dyn Write) -> io::Result<()> {
    let mut os = CodedOutputStream::new(out);
    let mut buf = Vec::new();
    for_each_message(g, |item| {
        match item {
            Item::Node(m) => os.write_message(GRAPH_NODE, &m),
            Item::Edge(m) => os.write_message(GRAPH_EDGE, &m),
            Item::Function(m) => os.write_message(GRAPH_FUNCTION, &m),
            Item::Module(m, features) => {
                // A serialized map is its entries one after another; writing
                // one single-entry map per key fixes their order.
                let mut entries = Vec::new();
                for (k, v) in features {
                    one_feature(k, v).write_to_vec(&mut entries)?;
                }
                buf.clear();
                m.write_to_vec(&mut buf)?;
                if !features.is_empty() {
                    let mut module = CodedOutputStream::vec(&mut buf);
                    module.write_bytes(MODULE_FEATURES, &entries)?;
                    module.flush()?;
                }
                os.write_bytes(GRAPH_MODULE, &buf)
            }
        }
        .map_err(pb_error)
    })?;
    os.flush().map_err(pb_error)
}

/// Appends `text` (lines ending in newlines) indented by `levels` steps of
/// two spaces. Quoted strings hold no raw newlines, so this is safe.
fn push_indented(out: &mut String, text: &str, levels: usize) {
    for line in text.lines() {
        for _ in 0..levels {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
}

fn push_field(out: &mut String, name: &str, m: &dyn protobuf::MessageDyn, levels: usize) {
    push_indented(out, &format!("{name} {{"), levels);
    push_indented(out, &protobuf::text_format::print_to_string_pretty(m), levels + 1);
    push_indented(out, "}", levels);
}

/// Writes the text protocol buffer, laid out as upstream's C++ printer does
/// (two-space indents, default values left out, map entries by key).
pub(super) fn write_pbtxt(g: &ProgramGraph, out: &mut dyn Write) -> io::Result<()> {
    let mut text = String::new();
    for_each_message(g, |item| {
        text.clear();
        match item {
            Item::Node(m) => push_field(&mut text, "node", &m, 0),
            Item::Edge(m) => push_field(&mut text, "edge", &m, 0),
            Item::Function(m) => push_field(&mut text, "function", &m, 0),
            Item::Module(m, features) => {
                text.push_str("module {\n");
                push_indented(&mut text, &protobuf::text_format::print_to_string_pretty(&m), 1);
                if !features.is_empty() {
                    text.push_str("  features {\n");
                    for (k, v) in features {
                        push_indented(&mut text, &protobuf::text_format::print_to_string_pretty(&one_feature(k, v)), 2);
                    }
                    text.push_str("  }\n");
                }
                text.push_str("}\n");
            }
        }
        out.write_all(text.as_bytes())
    })
}

/// The single string of a bytes_list feature, or why there is none.
fn single_string(f: &Feature) -> Result<String, String> {
    match &f.kind {
        Some(feature::Kind::BytesList(list)) => match list.value.as_slice() {
            [one] => String::from_utf8(one.clone()).map_err(|e| format!("is not UTF-8: {e}")),
            values => Err(format!("holds {} values, not 1", values.len())),
        },
        Some(feature::Kind::Int64List(_)) => Err("is an int64_list, not a bytes_list".to_string()),
        Some(feature::Kind::FloatList(_)) => Err("is a float_list, not a bytes_list".to_string()),
        None => Err("is empty, not a bytes_list".to_string()),
    }
}

fn raw_graph(m: pb::ProgramGraph) -> Result<RawGraph, FormatError> {
    let mut raw = RawGraph::default();
    for (i, n) in m.node.into_iter().enumerate() {
        let full_text = match n.features.as_ref().and_then(|fs| fs.feature.get(FULL_TEXT)) {
            None => None,
            Some(f) => Some(single_string(f).map_err(|problem| FormatError::BadFeature {
                owner: format!("node {i}"),
                key: FULL_TEXT.to_string(),
                problem,
            })?),
        };
        raw.nodes.push(RawNode {
            kind: n.type_.value().into(),
            text: n.text,
            full_text,
            function: n.function.into(),
            block: n.block.into(),
        });
    }
    raw.edges = m
        .edge
        .into_iter()
        .map(|e| RawEdge { flow: e.flow.value().into(), position: e.position.into(), source: e.source.into(), target: e.target.into() })
        .collect();
    for (i, f) in m.function.into_iter().enumerate() {
        let entry = match f.features.as_ref().and_then(|fs| fs.feature.get(super::ENTRY_NODE)) {
            None => None,
            Some(feature) => match &feature.kind {
                Some(feature::Kind::Int64List(list)) if list.value.len() == 1 => Some(list.value[0]),
                _ => {
                    return Err(FormatError::BadFeature {
                        owner: format!("function {i}"),
                        key: super::ENTRY_NODE.to_string(),
                        problem: "is not an int64_list of one node id".to_string(),
                    })
                }
            },
        };
        raw.functions.push(RawFunction { name: f.name, module: f.module.into(), entry });
    }
    for (i, module) in m.module.into_iter().enumerate() {
        let mut features = BTreeMap::new();
        if let Some(fs) = module.features.as_ref() {
            for (k, f) in &fs.feature {
                let value = single_string(f).map_err(|problem| FormatError::BadFeature {
                    owner: format!("module {i}"),
                    key: k.clone(),
                    problem,
                })?;
                features.insert(k.clone(), value);
            }
        }
        raw.modules.push(graph::Module { name: module.name, features });
    }
    Ok(raw)
}

/// Reads the binary protocol buffer.
pub(super) fn read_pb(bytes: &[u8]) -> Result<ProgramGraph, FormatError> {
    let m = pb::ProgramGraph::parse_from_bytes(bytes).map_err(|source| FormatError::Pb { len: bytes.len(), source })?;
    raw_graph(m)?.into_graph()
}

/// A parsed message as a graph, checked as [`super::read_graph`] checks one
/// (a `ProgramGraphList`'s items).
pub(super) fn graph_from_message(m: pb::ProgramGraph) -> Result<ProgramGraph, FormatError> {
    let graph = raw_graph(m)?.into_graph()?;
    super::validated(graph)
}

/// Reads the text protocol buffer.
pub(super) fn read_pbtxt(bytes: &[u8]) -> Result<ProgramGraph, FormatError> {
    let text = std::str::from_utf8(bytes).map_err(|e| FormatError::PbTxt(format!("not UTF-8: {e}")))?;
    let m = protobuf::text_format::parse_from_str::<pb::ProgramGraph>(text).map_err(|e| FormatError::PbTxt(e.to_string()))?;
    raw_graph(m)?.into_graph()
}
