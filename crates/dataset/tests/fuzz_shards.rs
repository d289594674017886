//! Fuzzing the shard reader with damaged shards of a real dataset (built
//! from generated C programs compiled by clang-16 at -O0 and -O2, several
//! shards): truncations, bit flips, byte-level mutations, and mutations
//! beneath the checksum (the payload decompressed, mutated, recompressed
//! and the header's lengths and CRC made consistent again, as a writer bug
//! or a deliberate edit would leave it).
//!
//! Properties: reading never panics; a damaged shard read through
//! [`Dataset`] is always refused with `DatasetError::CorruptShard` naming
//! that shard (the manifest commits each shard's CRC, so even a shard with
//! a consistent header but other bytes is refused: no wrong data is
//! accepted silently), and the other shards still read; the decoder alone
//! (`shard::decode_shard`), given a consistent header over a mutated
//! payload, returns records whose every reference is in range or an error
//! naming the shard.
//!
//! `PROGRAML_FUZZ_ITERS=N` damaged shards (default 2000),
//! `PROGRAML_FUZZ_SEED` another base seed; `--nocapture` prints the tally.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use programl_dataset::shard::{decode_shard, HEADER_LEN};
use programl_dataset::{BuildConfig, Builder, Dataset, DatasetError, Record};
use programl_testkit::fuzz::{self, Mutator};

const PROGRAMS: usize = 12;

/// The dataset, built once per test binary in cargo's scratch directory:
/// (directory, every shard's bytes, every shard's records).
fn dataset() -> &'static (PathBuf, Vec<Vec<u8>>, Vec<Vec<Record>>) {
    static DATA: OnceLock<(PathBuf, Vec<Vec<u8>>, Vec<Vec<Record>>)> = OnceLock::new();
    DATA.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-shards");
        let _ = std::fs::remove_dir_all(&root);
        let ir = root.join("ir");
        std::fs::create_dir_all(&ir).unwrap();
        let clang = Path::new(programl::LLVM_BINDIR).join("clang");
        for i in 0..PROGRAMS {
            let c = ir.join(format!("prog{i}.c"));
            std::fs::write(&c, programl_testkit::c_program(i)).unwrap();
            for level in ["-O0", "-O2"] {
                let ll = ir.join(format!("prog{i}{level}.ll"));
                let out = Command::new(&clang)
                    .args(["-S", "-emit-llvm", "-w", level, "-o"])
                    .arg(&ll)
                    .arg(&c)
                    .output()
                    .unwrap_or_else(|e| panic!("{}: {e} (run scripts/bootstrap.sh)", clang.display()));
                assert!(out.status.success(), "clang {}: {}", c.display(), String::from_utf8_lossy(&out.stderr));
            }
            std::fs::remove_file(&c).unwrap();
        }
        let data = root.join("data");
        let config = BuildConfig { jobs: 2, shard_records: 5, ..BuildConfig::new(&ir, &data) };
        Builder::open(config).unwrap().run(&|_| {}).unwrap();
        let dataset = Dataset::open(&data).unwrap();
        assert!(dataset.shards().len() >= 4, "{} shards", dataset.shards().len());
        let bytes: Vec<Vec<u8>> = dataset.shards().iter().map(|s| std::fs::read(&s.path).unwrap()).collect();
        let records: Vec<Vec<Record>> = (0..dataset.shards().len()).map(|i| dataset.read_shard(i).unwrap()).collect();
        (data, bytes, records)
    })
}

/// `bytes` with a consistent header over `raw` as the decompressed
/// payload: lengths and CRC recomputed.
fn reseal(bytes: &[u8], raw: &[u8]) -> Vec<u8> {
    let payload = zstd::bulk::compress(raw, 3).unwrap();
    let mut out = bytes[..HEADER_LEN - 4].to_vec();
    out[16..24].copy_from_slice(&(raw.len() as u64).to_le_bytes());
    out[24..32].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out);
    crc.update(&payload);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

fn raw_payload(bytes: &[u8]) -> Vec<u8> {
    let raw_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    zstd::bulk::decompress(&bytes[HEADER_LEN..], raw_len).unwrap()
}

/// Every reference of a decoded record is in range (what the decoder
/// promises of anything it returns).
fn references_in_range(r: &Record) -> Result<(), String> {
    let g = &r.graph;
    let n = g.kinds.len() as u32;
    if g.texts.len() != g.kinds.len() || g.functions.len() != g.kinds.len() {
        return Err("node columns differ in length".into());
    }
    if let Some(e) = g.edges.iter().find(|e| e.source >= n || e.target >= n) {
        return Err(format!("edge {e:?} out of range"));
    }
    if g.functions.iter().flatten().any(|&f| f as usize >= g.function_names.len()) {
        return Err("a node names a missing function".into());
    }
    if g.function_entries.iter().flatten().any(|&e| e >= n) {
        return Err("an entry out of range".into());
    }
    for (task, examples) in &r.examples {
        for e in examples {
            if e.root >= n || e.positives.iter().any(|&p| p >= n) || !e.positives.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!("{task} example out of range or order"));
            }
        }
    }
    Ok(())
}

/// How a damaged shard was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Damage {
    Truncated,
    BitFlips,
    Mutated,
    /// Mutated payload, consistent header.
    Resealed,
}

#[test]
fn damaged_shards_are_refused_by_name_and_never_panic() {
    let (data, shards, records) = dataset();
    let iters = fuzz::iterations(2000);
    let seed = fuzz::base_seed();
    // A copy of the dataset the damaged shards are written into.
    let work = tempfile::tempdir().unwrap();
    let copy = work.path().join("data");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(data).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
    }
    let dataset = Dataset::open(&copy).unwrap();
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-shards-failures");
    let raws: Vec<Vec<u8>> = shards.iter().map(|b| raw_payload(b)).collect();
    let mut m = Mutator::new(seed, &[]);
    let mut failures: Vec<String> = Vec::new();
    // (damage, outcome) -> count
    let mut tally: BTreeMap<(Damage, &str), usize> = BTreeMap::new();
    for i in 0..iters {
        let s = m.below(shards.len());
        let original = &shards[s];
        let (damage, bytes, what) = match i % 4 {
            0 => {
                let len = m.below(original.len());
                (Damage::Truncated, original[..len].to_vec(), format!("truncated to {len} of {} bytes", original.len()))
            }
            1 => {
                let mut b = original.clone();
                let flips = 1 + m.below(8);
                for _ in 0..flips {
                    let at = m.below(b.len());
                    b[at] ^= 1 << m.below(8);
                }
                (Damage::BitFlips, b, format!("{flips} bit flip(s)"))
            }
            2 => {
                let other = &shards[m.below(shards.len())];
                let (b, what) = m.mutate(original, other);
                (Damage::Mutated, b, what)
            }
            _ => {
                let other = &raws[m.below(raws.len())];
                let (raw, what) = m.mutate(&raws[s], other);
                (Damage::Resealed, reseal(original, &raw), format!("payload: {what}"))
            }
        };
        let path = &dataset.shards()[s].path;
        let mut problems = Vec::new();
        // The decoder alone.
        match fuzz::no_panic(|| decode_shard(&bytes, path)) {
            Err(panic) => problems.push(format!("decode_shard panicked: {panic}")),
            Ok(Ok((_, decoded))) => {
                if damage != Damage::Resealed && bytes != *original {
                    problems.push("decode_shard accepted damaged bytes with a bad checksum".into());
                }
                if let Some(e) = decoded.iter().find_map(|r| references_in_range(r).err()) {
                    problems.push(format!("decode_shard returned a record with {e}"));
                }
                *tally.entry((damage, "decoded")).or_default() += 1;
            }
            Ok(Err(e)) => {
                if !matches!(&e, DatasetError::CorruptShard { shard, .. } if shard == path) {
                    problems.push(format!("decode_shard: an error not naming the shard: {e}"));
                }
                *tally.entry((damage, "refused by the decoder")).or_default() += 1;
            }
        }
        // Through the dataset, as every reader sees it.
        std::fs::write(path, &bytes).unwrap();
        match fuzz::no_panic(|| dataset.read_shard(s)) {
            Err(panic) => problems.push(format!("Dataset::read_shard panicked: {panic}")),
            Ok(Ok(read)) => {
                if bytes != *original || read != records[s] {
                    problems.push("Dataset::read_shard accepted a damaged shard".into());
                }
            }
            Ok(Err(e)) => {
                let message = e.to_string();
                let named = matches!(&e, DatasetError::CorruptShard { shard, .. } if shard == path);
                if !named || !message.starts_with(&format!("{}: corrupt shard: ", path.display())) {
                    problems.push(format!("Dataset::read_shard: an error not naming the shard: {message}"));
                }
                *tally.entry((damage, "refused by the dataset")).or_default() += 1;
            }
        }
        // Now and then: the other shards still read, and the damaged one
        // is one error in the iteration over all records.
        if i % 50 == 0 && bytes != *original {
            let results: Vec<Result<Record, DatasetError>> = dataset.records().collect();
            let errors: Vec<&DatasetError> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            let good = results.iter().filter(|r| r.is_ok()).count();
            let expected = records.iter().enumerate().filter(|(j, _)| *j != s).map(|(_, r)| r.len()).sum::<usize>();
            if errors.len() != 1 || good != expected {
                problems.push(format!("records(): {} errors and {good} records, expected 1 and {expected}", errors.len()));
            }
        }
        std::fs::write(path, original).unwrap();
        if !problems.is_empty() {
            let file = fuzz::keep_failure(&keep, &format!("{seed}-{i}-{}", path.file_name().unwrap().to_string_lossy()), &bytes);
            failures.push(format!("#{i} {damage:?} ({what}): {}; kept as {}", problems.join("; "), file.display()));
        }
    }
    let lines: Vec<String> = tally.iter().map(|((d, o), n)| format!("{d:?} {o} {n}")).collect();
    println!(
        "fuzz shards: {iters} damaged shards ({} shards of {} records, {} bytes): {}; {} failures",
        shards.len(),
        records.iter().map(Vec::len).sum::<usize>(),
        shards.iter().map(Vec::len).sum::<usize>(),
        lines.join(", "),
        failures.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.iter().take(20).cloned().collect::<Vec<_>>().join("\n"));
    // Everything made through the dataset was refused.
    for damage in [Damage::Truncated, Damage::BitFlips, Damage::Resealed] {
        assert!(tally.get(&(damage, "refused by the dataset")).copied().unwrap_or(0) > 0, "{damage:?}: {lines:?}");
    }
}
