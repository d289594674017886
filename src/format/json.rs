//! networkx node-link JSON, field for field as upstream `graph2json` prints
//! it: `{"directed", "multigraph", "graph": {"function", "module",
//! "features"?}, "nodes": [...], "links": [...]}` with node features as lists
//! (`"full_text": ["..."]`) and each link's `key` counting the parallel edges
//! before it between the same two nodes (upstream `graph2json` writes 0 for
//! every `key`; networkx needs distinct keys to keep parallel edges).
//!
//! The reader takes both, ignores `key` and graph-level features, and
//! requires node ids to count 0, 1, 2, ... in order.

use std::collections::BTreeMap;
use std::io::{self, Write};

use petgraph::visit::EdgeRef;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::raw::{RawEdge, RawFunction, RawGraph, RawNode};
use super::FormatError;
use crate::graph::{Module, ProgramGraph};

#[derive(Serialize)]
struct NodeLink<'a> {
    directed: bool,
    multigraph: bool,
    graph: GraphAttrs<'a>,
    nodes: Vec<JsonNode<'a>>,
    links: Vec<JsonLink>,
}

#[derive(Serialize)]
struct GraphAttrs<'a> {
    function: Vec<JsonFunction<'a>>,
    module: Vec<JsonModule<'a>>,
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    name: &'a str,
    module: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    features: Option<FunctionFeatures>,
}

#[derive(Serialize)]
struct FunctionFeatures {
    /// [`super::ENTRY_NODE`]
    entry_node: [u32; 1],
}

#[derive(Serialize)]
struct JsonModule<'a> {
    name: &'a str,
    features: FxHashMap<&'a str, [&'a str; 1]>,
}

#[derive(Serialize)]
struct JsonNode<'a> {
    id: usize,
    #[serde(rename = "type")]
    kind: u32,
    text: &'a str,
    function: u32,
    block: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    features: Option<NodeFeatures<'a>>,
}

#[derive(Serialize)]
struct NodeFeatures<'a> {
    full_text: [&'a str; 1],
}

#[derive(Serialize)]
struct JsonLink {
    source: usize,
    target: usize,
    flow: u32,
    position: u32,
    key: u32,
}

pub(super) fn write(g: &ProgramGraph, out: &mut dyn Write) -> io::Result<()> {
    let nodes = g
        .graph
        .node_indices()
        .map(|id| {
            let n = &g.graph[id];
            JsonNode {
                id: id.index(),
                kind: n.kind as u32,
                text: &n.text,
                function: n.function.unwrap_or(0),
                block: n.block,
                features: n.full_text.as_deref().map(|t| NodeFeatures { full_text: [t] }),
            }
        })
        .collect();
    let mut parallel: FxHashMap<(usize, usize), u32> = FxHashMap::default();
    let links = g
        .graph
        .edge_references()
        .map(|e| {
            let (s, t) = (e.source().index(), e.target().index());
            let key = parallel.entry((s, t)).or_insert(0);
            let link = JsonLink { source: s, target: t, flow: e.weight().flow as u32, position: e.weight().position, key: *key };
            *key += 1;
            link
        })
        .collect();
    let doc = NodeLink {
        directed: true,
        multigraph: true,
        graph: GraphAttrs {
            function: g
                .functions
                .iter()
                .map(|f| JsonFunction { name: &f.name, module: f.module, features: f.entry.map(|e| FunctionFeatures { entry_node: [e] }) })
                .collect(),
            module: g
                .modules
                .iter()
                .map(|m| JsonModule { name: &m.name, features: m.features.iter().map(|(k, v)| (k.as_str(), [v.as_str()])).collect() })
                .collect(),
        },
        nodes,
        links,
    };
    serde_json::to_writer(&mut *out, &doc)?;
    out.write_all(b"\n")
}

#[derive(Deserialize)]
struct InDoc {
    graph: InGraphAttrs,
    nodes: Vec<InNode>,
    links: Vec<InLink>,
}

#[derive(Deserialize)]
struct InGraphAttrs {
    function: Vec<InFunction>,
    module: Vec<InModule>,
}

#[derive(Deserialize)]
struct InFunction {
    name: String,
    module: i64,
    #[serde(default)]
    features: BTreeMap<String, Vec<serde_json::Value>>,
}

#[derive(Deserialize)]
struct InModule {
    name: String,
    #[serde(default)]
    features: BTreeMap<String, Vec<serde_json::Value>>,
}

#[derive(Deserialize)]
struct InNode {
    id: i64,
    #[serde(rename = "type")]
    kind: i64,
    text: String,
    function: i64,
    block: i64,
    #[serde(default)]
    features: BTreeMap<String, Vec<serde_json::Value>>,
}

#[derive(Deserialize)]
struct InLink {
    source: i64,
    target: i64,
    flow: i64,
    position: i64,
}

/// The single string of a feature list, or why there is none.
fn single_string(values: Vec<serde_json::Value>) -> Result<String, String> {
    match <[serde_json::Value; 1]>::try_from(values) {
        Ok([serde_json::Value::String(s)]) => Ok(s),
        Ok([other]) => Err(format!("holds {other}, not a string")),
        Err(values) => Err(format!("holds {} values, not 1", values.len())),
    }
}

pub(super) fn read(bytes: &[u8]) -> Result<ProgramGraph, FormatError> {
    let doc: InDoc = serde_json::from_slice(bytes).map_err(FormatError::Json)?;
    let mut raw = RawGraph::default();
    for (i, mut n) in doc.nodes.into_iter().enumerate() {
        if n.id != i as i64 {
            return Err(FormatError::NodeId { position: i, id: n.id });
        }
        let full_text = match n.features.remove("full_text") {
            None => None,
            Some(values) => Some(single_string(values).map_err(|problem| FormatError::BadFeature {
                owner: format!("node {i}"),
                key: "full_text".to_string(),
                problem,
            })?),
        };
        raw.nodes.push(RawNode { kind: n.kind, text: n.text, full_text, function: n.function, block: n.block });
    }
    raw.edges = doc.links.into_iter().map(|l| RawEdge { flow: l.flow, position: l.position, source: l.source, target: l.target }).collect();
    for (i, mut f) in doc.graph.function.into_iter().enumerate() {
        let entry = match f.features.remove(super::ENTRY_NODE) {
            None => None,
            Some(values) => match values.as_slice() {
                [v] if v.as_i64().is_some() => v.as_i64(),
                _ => {
                    return Err(FormatError::BadFeature {
                        owner: format!("function {i}"),
                        key: super::ENTRY_NODE.to_string(),
                        problem: "is not a list of one node id".to_string(),
                    })
                }
            },
        };
        raw.functions.push(RawFunction { name: f.name, module: f.module, entry });
    }
    for (i, m) in doc.graph.module.into_iter().enumerate() {
        let mut features = BTreeMap::new();
        for (key, values) in m.features {
            let value = single_string(values).map_err(|problem| FormatError::BadFeature {
                owner: format!("module {i}"),
                key: key.clone(),
                problem,
            })?;
            features.insert(key, value);
        }
        raw.modules.push(Module { name: m.name, features });
    }
    raw.into_graph()
}
