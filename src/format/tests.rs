//! Unit tests of the readers and writers on small hand-made graphs; the
//! integration tests (`tests/formats.rs`) cover built graphs and the
//! upstream tools.

use super::pb::program_graph as pb;
use super::*;
use crate::graph::{Flow, Function, Module, Node, NodeKind};
use protobuf::Message;

fn sample() -> ProgramGraph {
    let mut g = ProgramGraph::new();
    let mut m = Module { name: "m.c".into(), ..Default::default() };
    m.features.insert("llvm_target_triple".into(), "x86_64-pc-linux-gnu".into());
    m.features.insert("llvm_data_layout".into(), "e-m:e".into());
    m.features.insert("a_first".into(), "".into());
    g.modules.push(m);
    g.functions.push(Function { name: "f".into(), module: 0, entry: None });
    let node = |kind, text: &str, full: &str, function| Node { kind, text: text.into(), full_text: Some(full.into()), function, block: 1 };
    let ret = g.add_node(node(NodeKind::Instruction, "ret", "ret i32 %x", Some(0)));
    let x = g.add_node(node(NodeKind::Variable, "i32", "i32 %x", Some(0)));
    let c = g.add_node(node(NodeKind::Constant, "[3 x i8]", "[3 x i8] c\"\\22\\0A\\00\"\n\t\u{7f}é\"", None));
    g.add_edge(Flow::Call, 0, ProgramGraph::external(), ret);
    g.add_edge(Flow::Data, 0, x, ret);
    g.add_edge(Flow::Data, 1, x, ret);
    g.add_edge(Flow::Data, 7, c, ret);
    g
}

fn write(g: &ProgramGraph, format: Format) -> Vec<u8> {
    let mut out = Vec::new();
    write_graph(g, format, &mut out).unwrap();
    out
}

fn assert_same(a: &ProgramGraph, b: &ProgramGraph) {
    let nodes = |g: &ProgramGraph| g.graph.node_weights().cloned().collect::<Vec<_>>();
    let edges =
        |g: &ProgramGraph| g.graph.raw_edges().iter().map(|e| (e.source().index(), e.target().index(), e.weight)).collect::<Vec<_>>();
    assert_eq!(nodes(a), nodes(b));
    assert_eq!(edges(a), edges(b));
    assert_eq!(a.functions, b.functions);
    assert_eq!(a.modules, b.modules);
}

fn read_err(bytes: &[u8], format: Format) -> String {
    match read_graph(bytes, format) {
        Ok(_) => panic!("{format} input was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn format_round_trips() {
    let g = sample();
    for format in [Format::Pb, Format::PbTxt, Format::Json] {
        let bytes = write(&g, format);
        let back = read_graph(&bytes, format).unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_same(&g, &back);
        assert_eq!(write(&back, format), bytes, "{format} output differs after a round trip");
    }
}

#[test]
fn format_output_is_deterministic() {
    // Module features live in hash maps in the generated code: the writers
    // must order them, in every process.
    let g = sample();
    for format in Format::ALL {
        let first = write(&g, format);
        for _ in 0..8 {
            assert_eq!(write(&g, format), first, "{format}");
        }
    }
    let text = String::from_utf8(write(&g, Format::PbTxt)).unwrap();
    let keys: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("key: ")).collect();
    assert_eq!(
        keys,
        ["\"full_text\""; 3].into_iter().chain(["\"a_first\"", "\"llvm_data_layout\"", "\"llvm_target_triple\""]).collect::<Vec<_>>()
    );
}

#[test]
fn format_pbtxt_layout_matches_upstream() {
    let mut g = ProgramGraph::new();
    let mut m = Module { name: "a.c".into(), ..Default::default() };
    m.features.insert("llvm_target_triple".into(), "x86_64".into());
    g.modules.push(m);
    g.functions.push(Function { name: "main".into(), module: 0, entry: None });
    let v =
        g.add_node(Node { kind: NodeKind::Variable, text: "i32".into(), full_text: Some("i32 %2".into()), function: Some(0), block: 1 });
    g.add_edge(Flow::Data, 1, v, ProgramGraph::external());
    let text = String::from_utf8(write(&g, Format::PbTxt)).unwrap();
    let expected = r#"node {
  text: "[external]"
}
node {
  type: VARIABLE
  text: "i32"
  block: 1
  features {
    feature {
      key: "full_text"
      value {
        bytes_list {
          value: "i32 %2"
        }
      }
    }
  }
}
edge {
  flow: DATA
  position: 1
  source: 1
}
function {
  name: "main"
}
module {
  name: "a.c"
  features {
    feature {
      key: "llvm_target_triple"
      value {
        bytes_list {
          value: "x86_64"
        }
      }
    }
  }
}
"#;
    assert_eq!(text, expected);
}

#[test]
fn format_pb_matches_generated_encoding() {
    // Our hand-laid module encoding parses back to the same message.
    let g = sample();
    let m = pb::ProgramGraph::parse_from_bytes(&write(&g, Format::Pb)).unwrap();
    assert_eq!(m.node.len(), 4);
    assert!(m.node[0].features.is_none(), "[external] has no features");
    assert_eq!(m.node[3].function, 0, "a constant has function 0");
    assert_eq!(m.module.len(), 1);
    let features = &m.module[0].features.feature;
    assert_eq!(features.len(), 3);
    assert_eq!(features["llvm_data_layout"].bytes_list().value, [b"e-m:e".to_vec()]);
}

#[test]
fn format_rejects_truncated_pb() {
    let bytes = write(&sample(), Format::Pb);
    let err = read_err(&bytes[..bytes.len() - 5], Format::Pb);
    let prefix = format!("not a binary ProgramGraph protocol buffer ({} bytes): ", bytes.len() - 5);
    assert!(err.starts_with(&prefix), "{err}");
    assert!(err.to_lowercase().contains("eof"), "{err}");
}

#[test]
fn format_rejects_dangling_edges() {
    let mut doc: serde_json::Value = serde_json::from_slice(&write(&sample(), Format::Json)).unwrap();
    doc["links"][2]["target"] = 900.into();
    let err = read_err(&serde_json::to_vec(&doc).unwrap(), Format::Json);
    assert_eq!(err, "edge 2 names node 900 of 4");

    doc["links"][2]["target"] = (-1).into();
    assert_eq!(read_err(&serde_json::to_vec(&doc).unwrap(), Format::Json), "edge 2 names node -1 of 4");

    let mut m = pb::ProgramGraph::parse_from_bytes(&write(&sample(), Format::Pb)).unwrap();
    m.edge[3].source = 4;
    assert_eq!(read_err(&m.write_to_bytes().unwrap(), Format::Pb), "edge 3 names node 4 of 4");
    let text = protobuf::text_format::print_to_string(&m);
    assert_eq!(read_err(text.as_bytes(), Format::PbTxt), "edge 3 names node 4 of 4");
}

#[test]
fn format_rejects_bad_references_and_values() {
    let json = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut doc: serde_json::Value = serde_json::from_slice(&write(&sample(), Format::Json)).unwrap();
        edit(&mut doc);
        read_err(&serde_json::to_vec(&doc).unwrap(), Format::Json)
    };
    assert_eq!(json(&|d| d["nodes"][1]["function"] = 3.into()), "node 1 names function 3 of 1");
    assert_eq!(json(&|d| d["graph"]["function"][0]["module"] = 1.into()), "function 0 names module 1 of 1");
    assert_eq!(json(&|d| d["nodes"][2]["type"] = 9.into()), "node 2 has unknown type 9");
    assert_eq!(json(&|d| d["links"][0]["flow"] = 5.into()), "edge 0 has unknown flow 5");
    assert_eq!(json(&|d| d["nodes"][2]["block"] = (-2).into()), "node 2 block is -2, out of range");
    assert_eq!(json(&|d| d["nodes"][2]["id"] = 7.into()), "node at position 2 has id 7; node ids must be 0, 1, 2, ... in order");
    assert_eq!(
        json(&|d| d["nodes"][1]["features"]["full_text"] = serde_json::json!(["a", "b"])),
        "node 1: feature \"full_text\" holds 2 values, not 1"
    );
    assert_eq!(
        json(&|d| d["graph"]["module"][0]["features"]["x"] = serde_json::json!([3])),
        "module 0: feature \"x\" holds 3, not a string"
    );
    let err = json(&|d| d["nodes"] = "none".into());
    assert!(err.starts_with("not node-link JSON of a program graph: invalid type"), "{err}");

    let mut m = pb::ProgramGraph::parse_from_bytes(&write(&sample(), Format::Pb)).unwrap();
    m.node[1].features.as_mut().unwrap().feature.get_mut("full_text").unwrap().mut_int64_list().value.push(1);
    assert_eq!(read_err(&m.write_to_bytes().unwrap(), Format::Pb), "node 1: feature \"full_text\" is an int64_list, not a bytes_list");
}

#[test]
fn format_rejects_bad_text_and_dot() {
    let err = read_err(b"node { text: 3 }", Format::PbTxt);
    assert!(err.starts_with("not a text ProgramGraph protocol buffer: "), "{err}");
    let err = read_err(b"node { nonsense: 1 }", Format::PbTxt);
    assert!(err.contains("nonsense"), "{err}");
    assert_eq!(read_err(b"digraph {}", Format::Dot), "the dot format is write-only and cannot be read");
}

#[test]
fn format_reads_upstream_json_keys_and_empty_input() {
    // graph2json writes key 0 for every link, parallel or not.
    let mut doc: serde_json::Value = serde_json::from_slice(&write(&sample(), Format::Json)).unwrap();
    for link in doc["links"].as_array_mut().unwrap() {
        link["key"] = 0.into();
    }
    let g = read_graph(&serde_json::to_vec(&doc).unwrap(), Format::Json).unwrap();
    assert_same(&g, &sample());
    // An empty message decodes, but holds no graph: not even `[external]`.
    assert_eq!(read_err(b"", Format::Pb), "not a valid program graph: node 0 is not the [external] instruction");
}

#[test]
fn format_returns_only_valid_graphs() {
    // Every reference resolves, but a data edge runs from a variable to a
    // constant and a second edge fills operand 1 of `ret`: the reader
    // refuses the graph, naming the first problem and counting the rest.
    let mut doc: serde_json::Value = serde_json::from_slice(&write(&sample(), Format::Json)).unwrap();
    doc["links"][1]["target"] = 3.into();
    doc["links"][3]["position"] = 1.into();
    let err = read_err(&serde_json::to_vec(&doc).unwrap(), Format::Json);
    assert!(
        err.starts_with("not a valid program graph: data edge 2 (variable \"i32\") -> 3 (constant \"[3 x i8]\") breaks the schema"),
        "{err}"
    );
    assert!(err.ends_with(" (and 1 more problems)"), "{err}");
    let mut m = pb::ProgramGraph::parse_from_bytes(&write(&sample(), Format::Pb)).unwrap();
    m.node[1].function = 5;
    assert_eq!(read_err(&m.write_to_bytes().unwrap(), Format::Pb), "node 1 names function 5 of 1");
}

/// `bytes` as one `ProgramGraphList.graph` item: tag 0x12 (field 2, length
/// delimited), the length as a varint, the bytes.
fn list_item(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0x12];
    let mut n = bytes.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        out.push(if n > 0 { byte | 0x80 } else { byte });
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(bytes);
    out
}

#[test]
fn format_graph_list_round_trips_and_frames_each_graph_as_field_2() {
    let a = sample();
    let mut b = sample();
    b.modules[0].name = "other.c".into();
    let mut bytes = Vec::new();
    write_graph_list([&a, &b], &mut bytes).unwrap();
    // The wire layout of `repeated ProgramGraph graph = 2`: tag 0x12, the
    // length, then the graph's own `pb` bytes (read by the generated type
    // below too).
    let (pa, pb_) = (write(&a, Format::Pb), write(&b, Format::Pb));
    assert!(pa.len() > 128, "two-byte lengths in this check");
    let expected = [list_item(&pa), list_item(&pb_)].concat();
    assert_eq!(bytes, expected);
    let generated = super::pb::program_graph_list::ProgramGraphList::parse_from_bytes(&bytes).unwrap();
    assert_eq!(generated.graph.len(), 2);

    let back = read_graph_list(&bytes).unwrap();
    assert_eq!(back.len(), 2);
    assert_same(&a, &back[0]);
    assert_same(&b, &back[1]);
    assert!(read_graph_list(&[]).unwrap().is_empty(), "an empty list is an empty message");
}

#[test]
fn format_graph_list_names_the_bad_graph() {
    let good = write(&sample(), Format::Pb);
    let mut m = pb::ProgramGraph::parse_from_bytes(&good).unwrap();
    m.edge[3].source = 4;
    let bad = m.write_to_bytes().unwrap();
    let bytes = [list_item(&good), list_item(&bad)].concat();
    let err = read_graph_list(&bytes).unwrap_err().to_string();
    assert_eq!(err, "graph 1 of 2: edge 3 names node 4 of 4");
    let err = read_graph_list(&bytes[..bytes.len() - 3]).unwrap_err().to_string();
    assert!(err.starts_with(&format!("not a binary ProgramGraphList protocol buffer ({} bytes): ", bytes.len() - 3)), "{err}");
}

#[test]
fn graphs_are_equal_and_hash_alike_when_they_are_the_same_graph() {
    use std::hash::{BuildHasher, RandomState};
    let a = sample();
    let back = read_graph(&write(&a, Format::Pb), Format::Pb).unwrap();
    let hasher = RandomState::new();
    assert!(a == back && hasher.hash_one(&a) == hasher.hash_one(&back));
    let mut renamed = sample();
    renamed.modules[0].name = "other.c".into();
    let mut moved = sample();
    moved.add_edge(Flow::Data, 3, 2.into(), 1.into());
    assert!(a != renamed && a != moved);
}
