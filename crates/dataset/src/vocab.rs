//! The node-text vocabulary of a dataset: texts counted over the train
//! split only, with the coverage of every split (the share of its node
//! occurrences whose text has an id of its own). The vocabulary itself and
//! its file format live in the core ([`programl::vocab`]), so the compiler
//! plugin maps texts exactly as training did.

use programl::vocab::{Counts, Vocabulary};

use crate::{Dataset, DatasetError, Split};

/// Coverage figures of a vocabulary on a dataset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VocabReport {
    /// Per split: (occurrences whose text has an id, all occurrences).
    pub covered: Vec<(Split, u64, u64)>,
}

impl VocabReport {
    /// Share of the occurrences of `split` covered, if it has any.
    pub fn coverage(&self, split: Split) -> Option<f64> {
        self.covered.iter().find(|c| c.0 == split).filter(|c| c.2 > 0).map(|c| c.1 as f64 / c.2 as f64)
    }
}

/// Counts node texts per split over the whole dataset. Fails on the first
/// unreadable shard: a vocabulary from part of the data would be silently
/// different.
pub fn count(dataset: &Dataset) -> Result<[Counts; 3], DatasetError> {
    let mut counts: [Counts; 3] = Default::default();
    for r in dataset.records() {
        let r = r?;
        let c = &mut counts[r.split as usize];
        for t in &r.graph.texts {
            match c.texts.get_mut(t) {
                Some(n) => *n += 1,
                None => {
                    c.texts.insert(t.clone(), 1);
                }
            }
        }
        c.total += r.graph.texts.len() as u64;
    }
    Ok(counts)
}

/// Builds the vocabulary of `dataset`'s train split and measures its
/// coverage of every split.
pub fn build(dataset: &Dataset, min_count: u64, max_size: Option<usize>) -> Result<(Vocabulary, VocabReport), DatasetError> {
    let counts = count(dataset)?;
    let vocab = Vocabulary::from_counts(&counts[Split::Train as usize], min_count, max_size);
    let covered = Split::ALL.iter().map(|&s| (s, vocab.covered(&counts[s as usize]), counts[s as usize].total)).collect();
    Ok((vocab, VocabReport { covered }))
}
