//! networkx node-link JSON, field for field as upstream `graph2json` prints
//! it: `{"directed", "multigraph", "graph": {"function", "module",
//! "features"?}, "nodes": [...], "links": [...]}` with node features as lists
//! (`"full_text": ["..."]`) and each link's `key` counting the parallel edges
//! before it between the same two nodes.

use std::io::{self, Write};

use petgraph::visit::EdgeRef;
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::graph::ProgramGraph;

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
            function: g.functions.iter().map(|f| JsonFunction { name: &f.name, module: f.module }).collect(),
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
