//! Upstream ProGraML's `ProgramGraphFeaturesList` (`proto/program_graph_features.proto`):
//! feature records that refer to a graph's nodes by position, as its data
//! flow analyses write their labels. This project writes and reads the part
//! its labels need: int64 node feature lists and int64 graph features, one
//! value per entry, as [`GraphFeatures`].
//!
//! The binary layout is the one upstream's C++ writes: a
//! `ProgramGraphFeatures` per entry of the list (field `graph`), node feature
//! lists under `node_features`, graph features under `features`, each value
//! an `int64_list` of one element. Map entries are written in key order, so
//! the output is deterministic (generated map fields are hash maps, so this
//! module lays the maps out itself).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use protobuf::{CodedOutputStream, Message};

use super::pb::features::{feature, Feature, Int64List};
use super::pb::program_graph_features as pb;
use super::FormatError;

/// Node feature: 1 on the example's root node, 0 elsewhere.
pub const DATA_FLOW_ROOT_NODE: &str = "data_flow_root_node";
/// Node feature: the example's label, 1 on positive nodes, 0 elsewhere.
pub const DATA_FLOW_VALUE: &str = "data_flow_value";
/// Graph feature: the example's step count.
pub const DATA_FLOW_STEP_COUNT: &str = "data_flow_step_count";
/// Graph feature: the number of positive nodes.
pub const DATA_FLOW_ACTIVE_NODE_COUNT: &str = "data_flow_active_node_count";

// Field numbers (proto/program_graph_features.proto and features.proto).
const LIST_GRAPH: u32 = 2;
const GRAPH_NODE_FEATURES: u32 = 1;
const GRAPH_FEATURES: u32 = 5;
/// `FeatureLists.feature_list` and `Features.feature`: the map field.
const MAP_FIELD: u32 = 1;
const MAP_KEY: u32 = 1;
const MAP_VALUE: u32 = 2;
/// `FeatureList.feature`.
const LIST_FEATURE: u32 = 1;

/// One `ProgramGraphFeatures` message restricted to int64 values: node
/// feature lists (one value per node, in node order) and graph features.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphFeatures {
    /// Node feature lists by key.
    pub node: BTreeMap<String, Vec<i64>>,
    /// Graph features by key.
    pub graph: BTreeMap<String, i64>,
}

impl GraphFeatures {
    /// One data flow example as upstream's analyses record it: node lists
    /// [`DATA_FLOW_ROOT_NODE`] and [`DATA_FLOW_VALUE`] over `node_count`
    /// nodes, graph features [`DATA_FLOW_STEP_COUNT`] (`steps`) and
    /// [`DATA_FLOW_ACTIVE_NODE_COUNT`] (the number of distinct positives).
    /// Fails if the root or a positive is not a node id below `node_count`.
    pub fn data_flow(node_count: usize, root: u32, positives: &[u32], steps: u32) -> Result<GraphFeatures, FormatError> {
        let check = |what: &str, id: u32| {
            if (id as usize) < node_count {
                Ok(id as usize)
            } else {
                Err(FormatError::OutOfRange { what: format!("{what} of a graph of {node_count} nodes"), value: id.into() })
            }
        };
        let mut roots = vec![0i64; node_count];
        roots[check("the root node", root)?] = 1;
        let mut values = vec![0i64; node_count];
        for &p in positives {
            values[check("a positive node", p)?] = 1;
        }
        let active = values.iter().sum::<i64>();
        let mut f = GraphFeatures::default();
        f.node.insert(DATA_FLOW_ROOT_NODE.to_string(), roots);
        f.node.insert(DATA_FLOW_VALUE.to_string(), values);
        f.graph.insert(DATA_FLOW_STEP_COUNT.to_string(), steps.into());
        f.graph.insert(DATA_FLOW_ACTIVE_NODE_COUNT.to_string(), active);
        Ok(f)
    }
}

fn int64_feature(value: i64) -> Feature {
    let mut f = Feature::new();
    f.kind = Some(feature::Kind::Int64List(Int64List { value: vec![value], ..Default::default() }));
    f
}

/// Serialized `Feature`s of one int64 each, cached: label lists repeat a
/// handful of small values (0 and 1), which skip the hash map.
#[derive(Default)]
struct FeatureCache {
    small: [Option<Vec<u8>>; 2],
    other: HashMap<i64, Vec<u8>>,
}

impl FeatureCache {
    fn get(&mut self, value: i64) -> protobuf::Result<&[u8]> {
        let slot = match usize::try_from(value).ok().and_then(|i| self.small.get_mut(i)) {
            Some(slot) => slot,
            None => match self.other.entry(value) {
                std::collections::hash_map::Entry::Occupied(e) => return Ok(e.into_mut()),
                std::collections::hash_map::Entry::Vacant(e) => return Ok(e.insert(int64_feature(value).write_to_bytes()?)),
            },
        };
        if slot.is_none() {
            *slot = Some(int64_feature(value).write_to_bytes()?);
        }
        Ok(slot.as_deref().unwrap_or_default())
    }
}

/// Runs `write` on a stream into a fresh buffer.
fn encode(write: impl FnOnce(&mut CodedOutputStream<'_>) -> protobuf::Result<()>) -> protobuf::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut os = CodedOutputStream::vec(&mut buf);
    write(&mut os)?;
    os.flush()?;
    drop(os);
    Ok(buf)
}

/// One map entry (`key`, serialized `value` message), as a map field item.
fn write_map_entry(os: &mut CodedOutputStream<'_>, key: &str, value: &[u8]) -> protobuf::Result<()> {
    let entry = encode(|e| {
        e.write_string(MAP_KEY, key)?;
        e.write_bytes(MAP_VALUE, value)
    })?;
    os.write_bytes(MAP_FIELD, &entry)
}

fn graph_message(g: &GraphFeatures, cache: &mut FeatureCache) -> protobuf::Result<Vec<u8>> {
    encode(|os| {
        if !g.node.is_empty() {
            let lists = encode(|lists| {
                for (key, values) in &g.node {
                    let list = encode(|l| {
                        for &v in values {
                            l.write_bytes(LIST_FEATURE, cache.get(v)?)?;
                        }
                        Ok(())
                    })?;
                    write_map_entry(lists, key, &list)?;
                }
                Ok(())
            })?;
            os.write_bytes(GRAPH_NODE_FEATURES, &lists)?;
        }
        if !g.graph.is_empty() {
            let features = encode(|fs| {
                for (key, &v) in &g.graph {
                    write_map_entry(fs, key, cache.get(v)?)?;
                }
                Ok(())
            })?;
            os.write_bytes(GRAPH_FEATURES, &features)?;
        }
        Ok(())
    })
}

/// Writes `list` as a binary `ProgramGraphFeaturesList`, one
/// `ProgramGraphFeatures` per element, in order (no `context`).
pub fn write_features_list(list: &[GraphFeatures], out: &mut dyn Write) -> io::Result<()> {
    let mut cache = FeatureCache::default();
    let mut os = CodedOutputStream::new(out);
    for g in list {
        let m = graph_message(g, &mut cache).map_err(io::Error::other)?;
        os.write_bytes(LIST_GRAPH, &m).map_err(io::Error::other)?;
    }
    os.flush().map_err(io::Error::other)
}

/// [`write_features_list`] into a buffer.
pub fn features_list_bytes(list: &[GraphFeatures]) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    write_features_list(list, &mut out).expect("writing to memory");
    out
}

/// The single int64 of a feature, or why there is none.
fn single_int64(f: &Feature) -> Result<i64, String> {
    match &f.kind {
        Some(feature::Kind::Int64List(list)) => match list.value.as_slice() {
            [one] => Ok(*one),
            values => Err(format!("holds {} values, not 1", values.len())),
        },
        Some(feature::Kind::BytesList(_)) => Err("is a bytes_list, not an int64_list".to_string()),
        Some(feature::Kind::FloatList(_)) => Err("is a float_list, not an int64_list".to_string()),
        None => Err("is empty, not an int64_list".to_string()),
    }
}

/// Reads a binary `ProgramGraphFeaturesList` of int64 node feature lists
/// and graph features (upstream's data flow labels). Edge, function and
/// module features and `context` are refused rather than dropped.
pub fn read_features_list(bytes: &[u8]) -> Result<Vec<GraphFeatures>, FormatError> {
    let m = pb::ProgramGraphFeaturesList::parse_from_bytes(bytes).map_err(|source| FormatError::FeaturesPb { len: bytes.len(), source })?;
    let unsupported = |owner: String, what: &str| FormatError::BadFeature {
        owner,
        key: what.to_string(),
        problem: "is not supported (node feature lists and graph features only)".to_string(),
    };
    if m.context.as_ref().is_some_and(|c| !c.feature.is_empty()) {
        return Err(unsupported("the list".to_string(), "context"));
    }
    let mut out = Vec::with_capacity(m.graph.len());
    for (i, g) in m.graph.into_iter().enumerate() {
        let owner = || format!("graph {i}");
        for (what, lists) in
            [("edge_features", &g.edge_features), ("function_features", &g.function_features), ("module_features", &g.module_features)]
        {
            if lists.as_ref().is_some_and(|l| !l.feature_list.is_empty()) {
                return Err(unsupported(owner(), what));
            }
        }
        let mut f = GraphFeatures::default();
        if let Some(lists) = g.node_features.as_ref() {
            for (key, list) in &lists.feature_list {
                let values = list
                    .feature
                    .iter()
                    .enumerate()
                    .map(|(n, v)| {
                        single_int64(v).map_err(|problem| FormatError::BadFeature {
                            owner: format!("graph {i} node {n}"),
                            key: key.clone(),
                            problem,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                f.node.insert(key.clone(), values);
            }
        }
        if let Some(features) = g.features.as_ref() {
            for (key, v) in &features.feature {
                let value = single_int64(v).map_err(|problem| FormatError::BadFeature { owner: owner(), key: key.clone(), problem })?;
                f.graph.insert(key.clone(), value);
            }
        }
        out.push(f);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::pb::features::{FeatureList, Features};

    fn example() -> Vec<GraphFeatures> {
        vec![
            GraphFeatures::data_flow(5, 1, &[1, 2, 4], 3).unwrap(),
            GraphFeatures::data_flow(5, 4, &[], 0).unwrap(),
            GraphFeatures::default(),
        ]
    }

    #[test]
    fn data_flow_examples_have_upstreams_fields() {
        let bytes = features_list_bytes(&example());
        let m = pb::ProgramGraphFeaturesList::parse_from_bytes(&bytes).unwrap();
        assert_eq!(m.graph.len(), 3);
        let ints = |g: &pb::ProgramGraphFeatures, key: &str| -> Vec<i64> {
            g.node_features.feature_list[key].feature.iter().map(|f| single_int64(f).unwrap()).collect()
        };
        let scalar = |g: &pb::ProgramGraphFeatures, key: &str| single_int64(&g.features.feature[key]).unwrap();
        let g = &m.graph[0];
        assert_eq!(ints(g, DATA_FLOW_ROOT_NODE), [0, 1, 0, 0, 0]);
        assert_eq!(ints(g, DATA_FLOW_VALUE), [0, 1, 1, 0, 1]);
        assert_eq!(scalar(g, DATA_FLOW_STEP_COUNT), 3);
        assert_eq!(scalar(g, DATA_FLOW_ACTIVE_NODE_COUNT), 3);
        let g = &m.graph[1];
        assert_eq!(ints(g, DATA_FLOW_ROOT_NODE), [0, 0, 0, 0, 1]);
        assert_eq!(ints(g, DATA_FLOW_VALUE), [0; 5]);
        assert_eq!(scalar(g, DATA_FLOW_ACTIVE_NODE_COUNT), 0);
        assert!(m.graph[2].node_features.is_none() && m.graph[2].features.is_none());
        assert!(m.context.is_none());
    }

    #[test]
    fn round_trips_deterministically() {
        let list = example();
        let bytes = features_list_bytes(&list);
        assert_eq!(features_list_bytes(&list), bytes);
        let back = read_features_list(&bytes).unwrap();
        assert_eq!(back, list);
        assert_eq!(features_list_bytes(&back), bytes);
        assert_eq!(read_features_list(&[]).unwrap(), Vec::<GraphFeatures>::new());
    }

    #[test]
    fn wire_bytes_are_pinned() {
        // Worked out by hand from the field numbers: list.graph (2) →
        // node_features (1) → map entry {key 1, value 2} → FeatureList.feature
        // (1) → Feature.int64_list (3) → packed value (1); features (5).
        let mut f = GraphFeatures::default();
        f.node.insert("a".into(), vec![1]);
        f.graph.insert("b".into(), 2);
        let expected: Vec<u8> = [
            &[0x12, 0x1e][..],
            &[0x0a, 0x0e, 0x0a, 0x0c, 0x0a, 0x01, b'a', 0x12, 0x07, 0x0a, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x01],
            &[0x2a, 0x0c, 0x0a, 0x0a, 0x0a, 0x01, b'b', 0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x02],
        ]
        .concat();
        assert_eq!(features_list_bytes(&[f.clone()]), expected);

        // The same as the generated code's encoding (one map entry each, so
        // its hash-map order does not matter).
        let mut m = pb::ProgramGraphFeatures::new();
        let mut list = FeatureList::new();
        list.feature.push(int64_feature(1));
        m.node_features.mut_or_insert_default().feature_list.insert("a".into(), list);
        let mut fs = Features::new();
        fs.feature.insert("b".into(), int64_feature(2));
        m.features = protobuf::MessageField::some(fs);
        let mut l = pb::ProgramGraphFeaturesList::new();
        l.graph.push(m);
        assert_eq!(l.write_to_bytes().unwrap(), expected);
    }

    #[test]
    fn bad_input_is_named() {
        let e = GraphFeatures::data_flow(3, 3, &[], 1).unwrap_err().to_string();
        assert_eq!(e, "the root node of a graph of 3 nodes is 3, out of range");
        let e = GraphFeatures::data_flow(3, 0, &[1, 7], 1).unwrap_err().to_string();
        assert_eq!(e, "a positive node of a graph of 3 nodes is 7, out of range");
        let e = read_features_list(b"\x12\x05garbage").unwrap_err().to_string();
        assert!(e.starts_with("not a binary ProgramGraphFeaturesList protocol buffer (9 bytes)"), "{e}");
        // A bytes_list where an int64 is expected.
        let mut l = pb::ProgramGraphFeaturesList::new();
        let mut g = pb::ProgramGraphFeatures::new();
        let mut f = Feature::new();
        f.kind = Some(feature::Kind::BytesList(Default::default()));
        let mut list = FeatureList::new();
        list.feature.push(int64_feature(0));
        list.feature.push(f);
        g.node_features.mut_or_insert_default().feature_list.insert(DATA_FLOW_VALUE.into(), list);
        l.graph.push(g);
        let e = read_features_list(&l.write_to_bytes().unwrap()).unwrap_err().to_string();
        assert_eq!(e, "graph 0 node 1: feature \"data_flow_value\" is a bytes_list, not an int64_list");
    }
}
