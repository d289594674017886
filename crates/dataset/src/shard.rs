//! The shard file: a checksummed, zstd-compressed batch of records.
//!
//! ```text
//! offset  size  field
//!  0       8    magic  "PGMLDDF\0"
//!  8       4    format version (u32 LE, = FORMAT_VERSION)
//! 12       4    record count (u32 LE)
//! 16       8    payload length once decompressed (u64 LE)
//! 24       8    payload length as stored (u64 LE)
//! 32       4    CRC-32 (IEEE) of bytes 0..32 followed by the stored payload
//! 36       …    payload: one zstd frame
//! ```
//!
//! The decompressed payload is the records one after another, each a u32 LE
//! length followed by that many bytes of a postcard-encoded record. Node
//! texts are interned per record, node and edge fields are stored as
//! columns, and positives as ascending deltas, so zstd sees regular data.
//!
//! Reading checks, in order: length, magic, version, checksum, decompressed
//! length, record count, and every reference inside every record (node,
//! text, function, task names). Any failure is a
//! [`DatasetError::CorruptShard`] naming the file.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{DatasetError, Example, Record, Split, StoredEdge, StoredGraph, Task, FORMAT_VERSION};
use programl::fsutil::{write_bytes_atomically, Durability};
use programl::graph::{Flow, NodeKind};

/// The first eight bytes of every shard.
pub const MAGIC: [u8; 8] = *b"PGMLDDF\0";
/// Length of the fixed header.
pub const HEADER_LEN: usize = 36;
/// zstd level of the payload.
const LEVEL: i32 = 3;
/// Decompressed payloads larger than this are refused (a shard is meant to
/// be a few tens of MiB).
const MAX_RAW: u64 = 1 << 34;

/// A record as stored. Private: the dataset's boundary type.
#[derive(Serialize, Deserialize)]
struct WireRecord {
    path: String,
    key: String,
    split: u8,
    /// Distinct node texts, in order of first use.
    texts: Vec<String>,
    node_text: Vec<u32>,
    node_kind: Vec<u8>,
    /// 0 for none, function + 1 otherwise.
    node_function: Vec<u32>,
    edge_source: Vec<u32>,
    edge_target: Vec<u32>,
    edge_flow: Vec<u8>,
    edge_position: Vec<u32>,
    function_names: Vec<String>,
    /// 0 for none, the entry node id otherwise (never 0: node 0 is
    /// `[external]`).
    function_entries: Vec<u32>,
    tasks: Vec<WireTask>,
}

#[derive(Serialize, Deserialize)]
struct WireTask {
    task: String,
    examples: Vec<WireExample>,
}

#[derive(Serialize, Deserialize)]
struct WireExample {
    root: u32,
    steps: u32,
    /// Positives as differences from the previous one (the first from 0).
    positives: Vec<u32>,
}

/// Encodes one record (the bytes [`write_shard`] takes).
pub(crate) fn encode_record(record: &Record) -> Vec<u8> {
    let g = &record.graph;
    let mut interned: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    let mut texts = Vec::new();
    let node_text = g
        .texts
        .iter()
        .map(|t| {
            *interned.entry(t.as_str()).or_insert_with(|| {
                texts.push(t.clone());
                texts.len() as u32 - 1
            })
        })
        .collect();
    let wire = WireRecord {
        path: record.path.clone(),
        key: record.key.clone(),
        split: record.split as u8,
        texts,
        node_text,
        node_kind: g.kinds.iter().map(|k| *k as u8).collect(),
        node_function: g.functions.iter().map(|f| f.map_or(0, |f| f + 1)).collect(),
        edge_source: g.edges.iter().map(|e| e.source).collect(),
        edge_target: g.edges.iter().map(|e| e.target).collect(),
        edge_flow: g.edges.iter().map(|e| e.flow as u8).collect(),
        edge_position: g.edges.iter().map(|e| e.position).collect(),
        function_names: g.function_names.clone(),
        function_entries: g.function_entries.iter().map(|e| e.unwrap_or(0)).collect(),
        tasks: record
            .examples
            .iter()
            .map(|(task, examples)| WireTask {
                task: task.name().to_string(),
                examples: examples
                    .iter()
                    .map(|e| {
                        let mut prev = 0;
                        let positives = e
                            .positives
                            .iter()
                            .map(|&p| {
                                let d = p.wrapping_sub(prev);
                                prev = p;
                                d
                            })
                            .collect();
                        WireExample { root: e.root, steps: e.steps, positives }
                    })
                    .collect(),
            })
            .collect(),
    };
    // Serializing plain vectors and strings into memory cannot fail.
    postcard::to_allocvec(&wire).unwrap_or_default()
}

fn decode_record(bytes: &[u8]) -> Result<Record, String> {
    let w: WireRecord = postcard::from_bytes(bytes).map_err(|e| format!("undecodable record: {e}"))?;
    let name = &w.path;
    let n = w.node_kind.len();
    if w.node_text.len() != n || w.node_function.len() != n {
        return Err(format!("record {name}: node columns have different lengths"));
    }
    let m = w.edge_source.len();
    if w.edge_target.len() != m || w.edge_flow.len() != m || w.edge_position.len() != m {
        return Err(format!("record {name}: edge columns have different lengths"));
    }
    let split = Split::from_code(w.split).ok_or_else(|| format!("record {name}: unknown split {}", w.split))?;
    let mut kinds = Vec::with_capacity(n);
    let mut texts = Vec::with_capacity(n);
    let mut functions = Vec::with_capacity(n);
    for i in 0..n {
        kinds.push(
            NodeKind::from_code(w.node_kind[i] as i64)
                .ok_or_else(|| format!("record {name}: node {i} has unknown kind {}", w.node_kind[i]))?,
        );
        let t = w
            .texts
            .get(w.node_text[i] as usize)
            .ok_or_else(|| format!("record {name}: node {i} names text {} of {}", w.node_text[i], w.texts.len()))?;
        texts.push(t.clone());
        functions.push(w.node_function[i].checked_sub(1));
    }
    let mut edges = Vec::with_capacity(m);
    for i in 0..m {
        let (source, target) = (w.edge_source[i], w.edge_target[i]);
        if source as usize >= n || target as usize >= n {
            return Err(format!("record {name}: edge {i} ({source} -> {target}) names a node of {n}"));
        }
        let flow =
            Flow::from_code(w.edge_flow[i] as i64).ok_or_else(|| format!("record {name}: edge {i} has unknown flow {}", w.edge_flow[i]))?;
        edges.push(StoredEdge { source, target, flow, position: w.edge_position[i] });
    }
    if w.function_entries.len() != w.function_names.len() {
        return Err(format!("record {name}: function columns have different lengths"));
    }
    let mut function_entries = Vec::with_capacity(w.function_entries.len());
    for (f, &e) in w.function_entries.iter().enumerate() {
        if e as usize >= n {
            return Err(format!("record {name}: function {f} names entry {e} of {n} nodes"));
        }
        function_entries.push((e != 0).then_some(e));
    }
    if let Some((i, f)) = functions.iter().enumerate().find(|(_, f)| f.is_some_and(|f| f as usize >= w.function_names.len())) {
        return Err(format!("record {name}: node {i} names function {} of {}", f.unwrap_or(0), w.function_names.len()));
    }
    let mut examples = BTreeMap::new();
    for t in w.tasks {
        let task = Task::parse(&t.task).ok_or_else(|| format!("record {name}: unknown task {:?}", t.task))?;
        let mut list = Vec::with_capacity(t.examples.len());
        for e in t.examples {
            if e.root as usize >= n {
                return Err(format!("record {name}: {task} root {} names a node of {n}", e.root));
            }
            let mut positives = Vec::with_capacity(e.positives.len());
            let mut prev: u32 = 0;
            for (j, d) in e.positives.into_iter().enumerate() {
                let p = prev.checked_add(d).filter(|&p| (p as usize) < n && (j == 0 || d > 0));
                let p = p.ok_or_else(|| format!("record {name}: {task} root {}: positive #{j} out of range or order", e.root))?;
                positives.push(p);
                prev = p;
            }
            list.push(Example { root: e.root, steps: e.steps, positives });
        }
        if examples.insert(task, list).is_some() {
            return Err(format!("record {name}: task {task} stored twice"));
        }
    }
    Ok(Record {
        path: w.path,
        key: w.key,
        split,
        graph: StoredGraph { kinds, texts, functions, edges, function_names: w.function_names, function_entries },
        examples,
    })
}

/// What [`write_shard`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    /// File size.
    pub bytes: u64,
    /// The header's checksum.
    pub crc32: u32,
}

/// Builds the bytes of a shard holding `records` (each from [`encode_record`]).
pub(crate) fn shard_bytes(records: &[Vec<u8>]) -> std::io::Result<(Vec<u8>, u32)> {
    let raw_len: usize = records.iter().map(|r| 4 + r.len()).sum();
    let mut raw = Vec::with_capacity(raw_len);
    for r in records {
        raw.extend_from_slice(&(r.len() as u32).to_le_bytes());
        raw.extend_from_slice(r);
    }
    let payload = zstd::bulk::compress(&raw, LEVEL)?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u64).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out);
    crc.update(&payload);
    let crc = crc.finalize();
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&payload);
    Ok((out, crc))
}

/// Writes a shard atomically and durably (temporary file, fsync, rename,
/// fsync of the directory): a reader or a resumed build never sees a
/// partial shard under its final name.
pub(crate) fn write_shard(dir: &Path, name: &str, records: &[Vec<u8>]) -> Result<Written, DatasetError> {
    let path = dir.join(name);
    let (bytes, crc32) = shard_bytes(records).map_err(DatasetError::io(&path))?;
    write_bytes_atomically(&path, Durability::Synced, &bytes).map_err(DatasetError::io(&path))?;
    Ok(Written { bytes: bytes.len() as u64, crc32 })
}

/// The header fields of a shard that passed its checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Number of records.
    pub records: u32,
    /// The stored checksum.
    pub crc32: u32,
}

/// Decodes a shard's bytes; `path` only names it in errors.
pub fn decode_shard(bytes: &[u8], path: &Path) -> Result<(Header, Vec<Record>), DatasetError> {
    let corrupt = |detail: String| DatasetError::CorruptShard { shard: path.to_path_buf(), detail };
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(format!("{} bytes, shorter than the {HEADER_LEN}-byte header", bytes.len())));
    }
    if bytes[..8] != MAGIC {
        return Err(corrupt("bad magic: not a dataset shard".into()));
    }
    let u32_at = |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let u64_at = |o: usize| (u32_at(o) as u64) | ((u32_at(o + 4) as u64) << 32);
    let version = u32_at(8);
    if version != FORMAT_VERSION {
        return Err(corrupt(format!("format version {version}, expected {FORMAT_VERSION}")));
    }
    let count = u32_at(12);
    let raw_len = u64_at(16);
    let stored = u64_at(24);
    let payload = &bytes[HEADER_LEN..];
    if payload.len() as u64 != stored {
        let what = if (payload.len() as u64) < stored { "truncated" } else { "trailing bytes" };
        return Err(corrupt(format!("{what}: payload is {} bytes, header says {stored}", payload.len())));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[..32]);
    crc.update(payload);
    let (expected, actual) = (u32_at(32), crc.finalize());
    if expected != actual {
        return Err(corrupt(format!("checksum mismatch (stored {expected:08x}, computed {actual:08x})")));
    }
    if raw_len > MAX_RAW {
        return Err(corrupt(format!("decompressed length {raw_len} is implausible")));
    }
    let raw = zstd::bulk::decompress(payload, raw_len as usize).map_err(|e| corrupt(format!("zstd: {e}")))?;
    if raw.len() as u64 != raw_len {
        return Err(corrupt(format!("payload decompresses to {} bytes, header says {raw_len}", raw.len())));
    }
    let mut records = Vec::with_capacity(count as usize);
    let mut at = 0usize;
    while at < raw.len() {
        let len = raw.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let body = len.and_then(|len| raw.get(at + 4..at + 4 + len));
        let Some(body) = body else {
            return Err(corrupt(format!("record #{} overruns the payload", records.len())));
        };
        records.push(decode_record(body).map_err(|e| corrupt(format!("record #{}: {e}", records.len())))?);
        at += 4 + body.len();
    }
    if records.len() != count as usize {
        return Err(corrupt(format!("{} records, header says {count}", records.len())));
    }
    Ok((Header { records: count, crc32: expected }, records))
}

/// Reads and checks one shard file.
pub fn read_shard(path: &Path) -> Result<(Header, Vec<Record>), DatasetError> {
    let bytes = std::fs::read(path).map_err(DatasetError::io(path))?;
    decode_shard(&bytes, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split_of;

    pub(crate) fn sample(i: u32) -> Record {
        let n = 5 + i;
        let key = format!("dir/prog{i}");
        let mut examples = BTreeMap::new();
        examples.insert(Task::Reachability, vec![Example { root: 1, steps: 3 + i, positives: vec![1, 2, n - 1] }]);
        examples.insert(Task::Liveness, vec![]);
        Record {
            path: format!("{key}.O{}.ll", i % 4),
            split: split_of(&key),
            key,
            graph: StoredGraph {
                kinds: (0..n).map(|j| if j % 3 == 2 { NodeKind::Variable } else { NodeKind::Instruction }).collect(),
                texts: (0..n).map(|j| ["add", "i32", "br"][j as usize % 3].to_string()).collect(),
                functions: (0..n).map(|j| if j == 0 { None } else { Some(j % 2) }).collect(),
                function_names: vec!["f".into(), "g".into()],
                function_entries: vec![Some(1), Some(2)],
                edges: (1..n).map(|j| StoredEdge { source: j - 1, target: j, flow: Flow::Control, position: j % 2 }).collect(),
            },
            examples,
        }
    }

    #[test]
    fn round_trip() {
        let records: Vec<Record> = (0..7).map(sample).collect();
        let encoded: Vec<Vec<u8>> = records.iter().map(encode_record).collect();
        let (bytes, crc) = shard_bytes(&encoded).unwrap();
        let (header, back) = decode_shard(&bytes, Path::new("s.pgds")).unwrap();
        assert_eq!(header, Header { records: 7, crc32: crc });
        assert_eq!(back, records);
        let (_, empty) = decode_shard(&shard_bytes(&[]).unwrap().0, Path::new("e")).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_caught() {
        let encoded: Vec<Vec<u8>> = (0..3).map(|i| encode_record(&sample(i))).collect();
        let (bytes, _) = shard_bytes(&encoded).unwrap();
        let path = Path::new("data/shard-000007.pgds");
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            let e = decode_shard(&bad, path).expect_err("flipped byte accepted");
            assert!(matches!(&e, DatasetError::CorruptShard { shard, .. } if shard == path), "{e}");
            assert!(e.to_string().starts_with("data/shard-000007.pgds: corrupt shard"), "{e}");
        }
        for len in 0..bytes.len() {
            let e = decode_shard(&bytes[..len], path).expect_err("truncation accepted");
            assert!(e.to_string().contains("shard-000007"), "{e}");
        }
    }

    #[test]
    fn bad_references_are_refused_even_with_a_good_checksum() {
        let mut r = sample(1);
        r.graph.edges.push(StoredEdge { source: 0, target: 99, flow: Flow::Data, position: 0 });
        let (bytes, _) = shard_bytes(&[encode_record(&r)]).unwrap();
        let e = decode_shard(&bytes, Path::new("x")).unwrap_err().to_string();
        assert!(e.contains("edge") && e.contains("99"), "{e}");

        let mut r = sample(1);
        r.examples.get_mut(&Task::Reachability).unwrap()[0].positives = vec![2, 1];
        let (bytes, _) = shard_bytes(&[encode_record(&r)]).unwrap();
        assert!(decode_shard(&bytes, Path::new("x")).unwrap_err().to_string().contains("positive"));
    }
}
