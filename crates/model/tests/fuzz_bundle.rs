//! Fuzzing the model bundle loader (`Bundle::load`) with corrupt copies of
//! a shipped bundle (`models/reachability`): its three files mutated one
//! at a time.
//!
//! - `config.json`: byte-level mutations (with the format's keys and
//!   values as the dictionary), and structure-aware ones: any value of the
//!   JSON tree replaced by an interesting one (integers at the edges of
//!   their widths, negatives, fractions, strings, null, arrays), a key
//!   deleted or added;
//! - `weights.safetensors`: truncations and bit flips anywhere, byte-level
//!   mutations of the header, and edits of the header's JSON written back
//!   with a consistent length prefix: a tensor's dtype, shape (a dimension
//!   changed, added, removed, dimensions swapped, with or without offsets
//!   that agree), offsets, name, or a tensor removed or duplicated;
//! - `vocabulary.json`: byte-level mutations.
//!
//! Property: every load returns an error naming a file of the bundle, or a
//! bundle that is valid (vocabulary as large as the embedding, every
//! parameter with its shape, finite) and runs: one prediction on a real
//! graph. Never a panic; never an abort (libtorch's, or an allocation's:
//! the mutant being loaded is in `target/.../fuzz-bundle-work/` when the
//! process dies).
//!
//! `PROGRAML_FUZZ_ITERS=N` mutants (default 500), `PROGRAML_FUZZ_SEED`
//! another base seed; `--nocapture` prints the tally.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use programl::batch::{Batch, GraphInput, Sample};
use programl_model::bundle::{self, Bundle};
use programl_testkit::fuzz::{self, Mutator};
use serde_json::{json, Value};
use tch::{Device, Kind};

fn source_bundle() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/reachability")
}

const FILES: [&str; 3] = [bundle::CONFIG_FILE, bundle::WEIGHTS_FILE, bundle::VOCABULARY_FILE];

/// Keys and values of the three files, for the byte-level mutator.
const DICTIONARY: &[&str] = &[
    "\"format\"",
    "\"version\"",
    "\"task\"",
    "\"head\"",
    "\"node\"",
    "\"graph\"",
    "\"classes\"",
    "\"hyper\"",
    "\"vocab_size\"",
    "\"positions\"",
    "\"selector_value\"",
    "\"steps\"",
    "\"state_dropout\"",
    "\"provenance\"",
    "\"tokens\"",
    "\"id\"",
    "\"text\"",
    "\"count\"",
    "\"unknown\"",
    "\"dtype\"",
    "\"shape\"",
    "\"data_offsets\"",
    "\"F32\"",
    "\"F64\"",
    "\"F16\"",
    "\"I64\"",
    "\"BOOL\"",
    "null",
    "[]",
    "{}",
    "1e999",
    "-1",
];

/// Values a structure-aware edit puts in place of another.
fn interesting_values() -> Vec<Value> {
    vec![
        json!(0),
        json!(1),
        json!(-1),
        json!(2),
        json!(3),
        json!(1023),
        json!(65537),
        json!(2147483647i64),
        json!(4294967296i64),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(0.5),
        json!(-0.0),
        json!(1e300),
        json!(""),
        json!("graph"),
        json!("node"),
        json!("F64"),
        json!("programl-model"),
        Value::Null,
        json!(true),
        json!([]),
        json!({}),
        json!(["negative"]),
        json!(["a", "b", "c"]),
    ]
}

/// Every value of `v` by JSON pointer, the root included.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(x, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// One structure-aware edit of a JSON document.
fn edit_json(m: &mut Mutator, text: &[u8]) -> (Vec<u8>, String) {
    let mut v: Value = serde_json::from_slice(text).unwrap();
    let mut all = Vec::new();
    pointers(&v, String::new(), &mut all);
    let at = all[m.below(all.len())].clone();
    let what = match m.below(4) {
        0 | 1 => {
            let values = interesting_values();
            let new = values[m.below(values.len())].clone();
            let what = format!("{at} = {new}");
            *v.pointer_mut(&at).unwrap() = new;
            what
        }
        2 => {
            let (parent, key) = at.rsplit_once('/').unwrap_or(("", ""));
            match v.pointer_mut(parent) {
                Some(Value::Object(o)) => {
                    o.remove(&key.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(a)) if !a.is_empty() => {
                    let i: usize = key.parse().unwrap_or(0).min(a.len() - 1);
                    a.remove(i);
                }
                _ => {}
            }
            format!("delete {at}")
        }
        _ => {
            match v.pointer_mut(&at) {
                Some(Value::Object(o)) => {
                    o.insert("extra".into(), json!(1));
                }
                Some(Value::Array(a)) => a.push(json!(1)),
                _ => {}
            }
            format!("add to {at}")
        }
    };
    (serde_json::to_vec_pretty(&v).unwrap(), what)
}

/// The safetensors header (JSON) and the data after it.
fn split_safetensors(bytes: &[u8]) -> (Value, &[u8]) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), &bytes[8 + n..])
}

fn join_safetensors(header: &Value, data: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(data);
    out
}

const DIMS: [u64; 11] = [0, 1, 2, 33, 34, 35, 108, 1 << 31, 1 << 32, 1 << 62, u64::MAX];
const DTYPES: [&str; 14] = ["F32", "F64", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "U64", "F8_E4M3", "f32", "X"];

/// One edit of a tensor entry of the header, written back with a
/// consistent length prefix.
fn edit_header(m: &mut Mutator, bytes: &[u8]) -> (Vec<u8>, String) {
    let (mut header, data) = split_safetensors(bytes);
    let names: Vec<String> = header.as_object().unwrap().keys().filter(|k| *k != "__metadata__").cloned().collect();
    let name = names[m.below(names.len())].clone();
    let obj = header.as_object_mut().unwrap();
    let entry = obj.get_mut(&name).unwrap();
    let shape: Vec<u64> = entry["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
    let (start, end) = (entry["data_offsets"][0].as_u64().unwrap(), entry["data_offsets"][1].as_u64().unwrap());
    let what = match m.below(10) {
        0 | 1 => {
            let d = DTYPES[m.below(DTYPES.len())];
            entry["dtype"] = json!(d);
            format!("{name}: dtype {d}")
        }
        2 | 3 => {
            let mut s = shape.clone();
            let i = m.below(s.len());
            s[i] = DIMS[m.below(DIMS.len())];
            entry["shape"] = json!(s);
            format!("{name}: shape {s:?}")
        }
        4 => {
            let mut s = shape.clone();
            if m.below(2) == 0 {
                s.push(1);
            } else {
                s.pop();
            }
            entry["shape"] = json!(s);
            format!("{name}: shape {s:?}")
        }
        5 => {
            // Same element count: the file stays consistent, the model does not.
            let mut s = shape.clone();
            s.reverse();
            if s.len() == 1 {
                s = vec![1, s[0]];
            }
            entry["shape"] = json!(s);
            format!("{name}: shape {s:?} (same size)")
        }
        6 => {
            let (a, b) = (start + [0, 1, 4][m.below(3)], end.saturating_sub([0, 1, 4][m.below(3)]));
            entry["data_offsets"] = json!([a, b]);
            format!("{name}: offsets [{a}, {b}]")
        }
        7 => {
            let e = obj.remove(&name).unwrap();
            obj.insert(format!("{name}x"), e);
            format!("{name}: renamed")
        }
        8 => {
            obj.remove(&name);
            format!("{name}: removed")
        }
        _ => {
            let e = obj[&name].clone();
            obj.insert("extra".into(), e);
            format!("{name}: duplicated as 'extra'")
        }
    };
    (join_safetensors(&header, data), what)
}

/// How a mutant was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Damage {
    ConfigBytes,
    ConfigJson,
    WeightsTruncated,
    WeightsBitFlips,
    WeightsHeaderBytes,
    WeightsHeaderJson,
    VocabularyBytes,
}

/// What a loaded bundle must be: consistent and usable.
fn check_valid(b: &Bundle, graph: &programl::ProgramGraph) -> Result<(), String> {
    let hyper = b.model.hyper();
    if b.vocabulary.len() != hyper.vocab_size {
        return Err(format!("vocabulary {} ids, embedding {} rows", b.vocabulary.len(), hyper.vocab_size));
    }
    for ((name, t), (expected_name, shape)) in b.model.named_parameters().into_iter().zip(hyper.parameter_shapes()) {
        if name != expected_name || t.size() != shape || t.kind() != Kind::Float {
            return Err(format!("{name}: {:?} {:?}", t.size(), t.kind()));
        }
        if !bool::try_from(t.isfinite().all()).unwrap_or(false) {
            return Err(format!("{name}: not finite"));
        }
    }
    let input = GraphInput::new(graph, &b.vocabulary).map_err(|e| e.to_string())?;
    let batch = Batch::from_samples(&[Sample { graph: &input, root: Some(1), positives: None }]).map_err(|e| e.to_string())?;
    let probs = programl_model::node_probabilities(&b.model, &batch, 2);
    if probs.len() != graph.node_count() * hyper.classes as usize {
        return Err(format!("{} probabilities for {} nodes", probs.len(), graph.node_count()));
    }
    Ok(())
}

#[test]
fn corrupt_bundles_are_refused_by_name_or_load_valid_never_panic() {
    let iters = fuzz::iterations(500);
    let seed = fuzz::base_seed();
    let originals: Vec<Vec<u8>> = FILES.iter().map(|f| std::fs::read(source_bundle().join(f)).unwrap()).collect();
    let graph = programl::builder::build_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/branches.ll"),
        &programl::builder::BuildOptions::default(),
    )
    .unwrap();
    // The original loads and is valid: the baseline the mutants differ from.
    let original = Bundle::load(&source_bundle(), Device::Cpu).unwrap();
    check_valid(&original, &graph).unwrap();

    // A fixed directory, not a temporary one: if libtorch or an allocation
    // aborts the process, the mutant that did it is still here.
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-bundle-work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-bundle-failures");
    let header_len = 8 + u64::from_le_bytes(originals[1][..8].try_into().unwrap()) as usize;

    let mut m = Mutator::new(seed, DICTIONARY);
    let mut tally: BTreeMap<(Damage, String), usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for i in 0..iters {
        let kind = [
            Damage::ConfigBytes,
            Damage::ConfigJson,
            Damage::WeightsTruncated,
            Damage::WeightsBitFlips,
            Damage::WeightsHeaderBytes,
            Damage::WeightsHeaderJson,
            Damage::VocabularyBytes,
        ][i % 7];
        let (file, (bytes, what)) = match kind {
            Damage::ConfigBytes => (0, m.mutate(&originals[0], &originals[2])),
            Damage::ConfigJson => (0, edit_json(&mut m, &originals[0])),
            Damage::WeightsTruncated => {
                let at = m.below(originals[1].len());
                (1, (originals[1][..at].to_vec(), format!("truncate to {at} bytes")))
            }
            Damage::WeightsBitFlips => {
                let mut b = originals[1].clone();
                let flips = 1 + m.below(8);
                // Half of the flips land in the header, where they matter most.
                let mut at = Vec::new();
                for _ in 0..flips {
                    let i = if m.below(2) == 0 { m.below(header_len) } else { m.below(b.len()) };
                    b[i] ^= 1 << m.below(8);
                    at.push(i);
                }
                (1, (b, format!("flip bits at {at:?}")))
            }
            Damage::WeightsHeaderBytes => {
                let (mut header, what) = m.mutate(&originals[1][8..header_len], &originals[0]);
                let mut b = if m.below(2) == 0 {
                    // Length prefix kept consistent.
                    (header.len() as u64).to_le_bytes().to_vec()
                } else {
                    originals[1][..8].to_vec()
                };
                b.append(&mut header);
                b.extend_from_slice(&originals[1][header_len..]);
                (1, (b, format!("header: {what}")))
            }
            Damage::WeightsHeaderJson => (1, edit_header(&mut m, &originals[1])),
            Damage::VocabularyBytes => (2, m.mutate(&originals[2], &originals[0])),
        };
        if bytes == originals[file] {
            *tally.entry((kind, "unchanged".into())).or_default() += 1;
            continue;
        }
        for (f, original) in FILES.iter().zip(&originals) {
            std::fs::write(work.join(f), original).unwrap();
        }
        std::fs::write(work.join(FILES[file]), &bytes).unwrap();
        let outcome = fuzz::no_panic(|| Bundle::load(&work, Device::Cpu).map(|b| check_valid(&b, &graph)));
        let label = match outcome {
            Ok(Ok(Ok(()))) => "loaded, valid".to_string(),
            Ok(Ok(Err(problem))) => {
                let kept = fuzz::keep_failure(&keep, &format!("{i}-{}", FILES[file]), &bytes);
                failures.push(format!("mutant {i} ({kind:?}: {what}; {}): loaded but invalid: {problem}", kept.display()));
                "loaded, INVALID".into()
            }
            Ok(Err(e)) => {
                let text = e.to_string();
                if !FILES.iter().any(|f| text.contains(&work.join(f).display().to_string())) {
                    failures.push(format!("mutant {i} ({kind:?}: {what}): the error names no file of the bundle: {text}"));
                }
                let variant = format!("{e:?}");
                format!("refused: {}", variant.split([' ', '{', '(']).next().unwrap_or(""))
            }
            Err(panic) => {
                let kept = fuzz::keep_failure(&keep, &format!("{i}-{}", FILES[file]), &bytes);
                failures.push(format!("mutant {i} ({kind:?}: {what}; {}): panicked: {panic}", kept.display()));
                "PANIC".into()
            }
        };
        *tally.entry((kind, label)).or_default() += 1;
    }
    let summary: Vec<String> = tally.iter().map(|((k, o), n)| format!("{k:?} {o} {n}")).collect();
    println!("fuzz bundle: {iters} mutants of models/reachability (seed {seed}): {}; {} failures", summary.join(", "), failures.len());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    // Each kind of damage reached the loader's checks, not only a parser.
    for kind in [Damage::ConfigJson, Damage::WeightsHeaderJson] {
        let refused_later: usize =
            tally.iter().filter(|((k, o), _)| *k == kind && (o.contains("Invalid") || o.contains("Vocabulary"))).map(|(_, n)| n).sum();
        assert!(refused_later > 0, "{kind:?}: no mutant got past the parser: {summary:?}");
    }
}

/// What the fuzzer found, kept as plain cases: numbers of `config.json`
/// that `Ggnn::new` or inference would act on before any weight is read.
#[test]
fn the_fuzzers_findings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for f in FILES {
        std::fs::copy(source_bundle().join(f), dir.path().join(f)).unwrap();
    }
    let config = dir.path().join(bundle::CONFIG_FILE);
    let original = std::fs::read_to_string(&config).unwrap();
    for (from, to, expected) in [
        // Was: "memory allocation of 584115552256 bytes failed", SIGABRT.
        ("\"positions\": 1024", "\"positions\": 4294967296", "hyper.positions 4294967296 is above 65536"),
        // Was: a bundle whose every prediction runs 2^62 steps by default.
        ("\"steps\": 30", "\"steps\": 4611686018427387904", "hyper.steps 4611686018427387904 is outside 1..=10000"),
        ("\"steps\": 30", "\"steps\": 0", "hyper.steps 0 is outside 1..=10000"),
    ] {
        assert!(original.contains(from), "{from} not in {original}");
        std::fs::write(&config, original.replace(from, to)).unwrap();
        match Bundle::load(dir.path(), Device::Cpu) {
            Ok(_) => panic!("{to}: loaded"),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains(&config.display().to_string()) && text.contains(expected), "{to}: {text}");
            }
        }
    }
    std::fs::write(&config, original.replace("\"positions\": 1024", "\"positions\": 65536")).unwrap();
    assert_eq!(Bundle::load(dir.path(), Device::Cpu).unwrap().model.gate_table().size(), [65536, 34]);
}
