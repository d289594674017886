//! Reading a dataset: records and examples, filtered by task, split and
//! step-count subset, one shard in memory at a time.
//!
//! Only the shards the manifest names are read (orphans of a killed build
//! never are). A shard that fails its checks yields one
//! [`DatasetError::CorruptShard`] naming it, and iteration goes on with the
//! next shard: the caller decides whether to stop or skip.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::manifest::Manifest;
use super::shard;
use super::{DatasetError, Example, Record, Split, Subset, Task};

/// The parameters a dataset was built with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetInfo {
    /// The dataset format version.
    pub format: u32,
    /// The root-sampling seed.
    pub seed: u64,
    /// The IR directory (absolute) the inputs are relative to.
    pub ir: PathBuf,
    /// The corpus manifests (`scripts/corpus.sh`'s) the IR directory held
    /// when the build began; empty for a dataset built before they existed,
    /// or from IR of no corpus set.
    pub corpus: Vec<super::corpus::CorpusRef>,
}

/// A committed shard, as the manifest records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// The shard's path.
    pub path: PathBuf,
    /// Records in it.
    pub records: u32,
    /// Its size in bytes.
    pub bytes: u64,
    /// The relative paths of its inputs, in record order.
    pub inputs: Vec<String>,
    crc32: u32,
}

/// An input the build could not label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Its path relative to the IR directory.
    pub input: String,
    /// The error, naming the file.
    pub error: String,
}

/// An open dataset (see the [module docs](super)).
#[derive(Clone, Debug)]
pub struct Dataset {
    dir: PathBuf,
    info: DatasetInfo,
    shards: Vec<ShardInfo>,
    failures: Vec<Failure>,
}

/// Which examples to read. The default reads every example.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// Only this task (all tasks if `None`).
    pub task: Option<Task>,
    /// Only this split (all splits if `None`).
    pub split: Option<Split>,
    /// Only examples of this subset by step count.
    pub subset: Subset,
}

/// One example with the record (graph) it belongs to.
#[derive(Clone, Debug)]
pub struct ExampleItem {
    /// The record, shared by all examples of the file.
    pub record: Arc<Record>,
    /// The example's task.
    pub task: Task,
    /// Index into `record.examples(task)`.
    pub index: usize,
}

impl ExampleItem {
    /// The example.
    pub fn example(&self) -> &Example {
        &self.record.examples(self.task)[self.index]
    }
}

impl Dataset {
    /// Opens the dataset in `dir` by reading its manifest. Shards are read
    /// lazily, by the iterators. A dataset that a build is still writing can
    /// be opened: it shows the shards committed so far.
    pub fn open(dir: impl AsRef<Path>) -> Result<Dataset, DatasetError> {
        let dir = dir.as_ref().to_path_buf();
        let m = Manifest::read(&dir)?;
        let shards = m
            .shards
            .iter()
            .map(|s| ShardInfo { path: dir.join(&s.file), records: s.records, bytes: s.bytes, inputs: s.inputs.clone(), crc32: s.crc32 })
            .collect::<Vec<_>>();
        let recorded: std::collections::HashSet<&str> = shards.iter().flat_map(|s| s.inputs.iter().map(String::as_str)).collect();
        // A failure later retried successfully is no longer a failure; one
        // retried and failed again is reported once, with its latest error.
        let mut failures: Vec<Failure> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for (input, error) in &m.failures {
            if recorded.contains(input.as_str()) {
                continue;
            }
            match index.get(input) {
                Some(&i) => failures[i] = Failure { input: input.clone(), error: error.clone() },
                None => {
                    index.insert(input.clone(), failures.len());
                    failures.push(Failure { input: input.clone(), error: error.clone() });
                }
            }
        }
        let info = DatasetInfo { format: super::FORMAT_VERSION, seed: m.seed, ir: PathBuf::from(&m.ir), corpus: m.corpus.clone() };
        Ok(Dataset { dir, info, shards, failures })
    }

    /// The dataset directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The build parameters.
    pub fn info(&self) -> &DatasetInfo {
        &self.info
    }

    /// The committed shards, in commit order.
    pub fn shards(&self) -> &[ShardInfo] {
        &self.shards
    }

    /// The inputs that failed, each once.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// Records, per the manifest (no shard read).
    pub fn record_count(&self) -> usize {
        self.shards.iter().map(|s| s.records as usize).sum()
    }

    /// Reads and checks shard `i`: its checksum, its records, and that it is
    /// the shard the manifest committed (checksum and inputs).
    pub fn read_shard(&self, i: usize) -> Result<Vec<Record>, DatasetError> {
        let info = &self.shards[i];
        let corrupt = |detail: String| DatasetError::CorruptShard { shard: info.path.clone(), detail };
        let (header, records) = shard::read_shard(&info.path).map_err(|e| match e {
            DatasetError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => corrupt(format!(
                "missing: the manifest committed it with {} record(s); `programl dataset build` with the dataset's --ir builds them again",
                info.records
            )),
            e => e,
        })?;
        if header.crc32 != info.crc32 {
            return Err(corrupt(format!("checksum {:08x}, the manifest committed {:08x}", header.crc32, info.crc32)));
        }
        if records.len() != info.inputs.len() || records.iter().zip(&info.inputs).any(|(r, i)| &r.path != i) {
            return Err(corrupt("its records are not the inputs the manifest lists".into()));
        }
        Ok(records)
    }

    /// Every record, shard by shard. A shard that cannot be read yields one
    /// error naming it; iteration continues with the next shard.
    pub fn records(&self) -> Records<'_> {
        Records { dataset: self, next_shard: 0, current: Vec::new().into_iter(), split: None }
    }

    /// The records of one split.
    pub fn records_in(&self, split: Split) -> Records<'_> {
        Records { split: Some(split), ..self.records() }
    }

    /// The examples selected by `query`, with their records. Shard errors
    /// are passed through as in [`Dataset::records`].
    pub fn examples(&self, query: Query) -> impl Iterator<Item = Result<ExampleItem, DatasetError>> + '_ {
        let records = Records { split: query.split, ..self.records() };
        records.flat_map(move |r| -> Box<dyn Iterator<Item = Result<ExampleItem, DatasetError>>> {
            match r {
                Err(e) => Box::new(std::iter::once(Err(e))),
                Ok(record) => {
                    let record = Arc::new(record);
                    let tasks: Vec<Task> = match query.task {
                        Some(t) => vec![t],
                        None => Task::ALL.to_vec(),
                    };
                    let mut items = Vec::new();
                    for task in tasks {
                        for (index, e) in record.examples(task).iter().enumerate() {
                            if query.subset.contains(e.steps) {
                                items.push(Ok(ExampleItem { record: Arc::clone(&record), task, index }));
                            }
                        }
                    }
                    Box::new(items.into_iter())
                }
            }
        })
    }
}

/// Iterator over records (see [`Dataset::records`]).
#[derive(Debug)]
pub struct Records<'d> {
    dataset: &'d Dataset,
    next_shard: usize,
    current: std::vec::IntoIter<Record>,
    split: Option<Split>,
}

impl Iterator for Records<'_> {
    type Item = Result<Record, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            for r in self.current.by_ref() {
                if self.split.is_none_or(|s| s == r.split) {
                    return Some(Ok(r));
                }
            }
            if self.next_shard >= self.dataset.shards.len() {
                return None;
            }
            let i = self.next_shard;
            self.next_shard += 1;
            match self.dataset.read_shard(i) {
                Ok(records) => self.current = records.into_iter(),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
