//! A journal of the inputs being read, for tools that read many IR files
//! into one output directory (`programl graph -o DIR`, `programl dataset
//! build`).
//!
//! LLVM's bitcode reader crashes the process on some damaged files
//! (SIGSEGV, or an abort on "out of memory"), where no Rust code can catch
//! it, so a resumed run would die on the same file again. The journal is a
//! file of lines, each written in one `write` before and after an input is
//! read:
//!
//! - `S\tINPUT`: started beside others;
//! - `A\tINPUT`: started alone;
//! - `F\tINPUT`: done with (read, or failed in an orderly way);
//! - `C\tINPUT`: known to crash the reader (carried from run to run by
//!   tools that keep no other record of failures).
//!
//! An input started and not done is one a run died reading. The next run
//! reads those first, one at a time; the one it dies on alone is the
//! culprit ([`Journal::read`]).

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// The journal's file name in the output directory.
pub const JOURNAL: &str = ".inflight";

/// What a journal says of the run that wrote it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The input the run died reading alone: the culprit.
    pub died_alone: Option<String>,
    /// Inputs the run died reading beside others: read them alone next.
    pub in_flight: HashSet<String>,
    /// Inputs recorded as crashing the reader (`C` lines).
    pub crashed: BTreeSet<String>,
}

/// An open journal; lines are appended as inputs start and finish.
pub struct Journal {
    file: Mutex<std::fs::File>,
}

impl Journal {
    /// A new journal at `path`, replacing any, holding a `C` line for each
    /// of `crashed`.
    pub fn create<'a>(path: &Path, crashed: impl IntoIterator<Item = &'a str>) -> std::io::Result<Journal> {
        let mut file = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        let mut head = String::new();
        for input in crashed {
            head.push_str(&format!("C\t{input}\n"));
        }
        if !head.is_empty() {
            file.write_all(head.as_bytes())?;
            file.sync_data()?;
        }
        Ok(Journal { file: Mutex::new(file) })
    }

    /// One line, in one write. Best effort: the journal only narrows down
    /// what a crash hit.
    pub fn note(&self, tag: char, input: &str) {
        let line = format!("{tag}\t{input}\n");
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let _ = file.write_all(line.as_bytes());
    }

    /// What the journal at `path` says (an empty record if there is none).
    pub fn read(path: &Path) -> std::io::Result<Record> {
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::default()),
            Err(e) => return Err(e),
        };
        let mut started: Vec<(char, &str)> = Vec::new();
        let mut finished = HashSet::new();
        let mut crashed = BTreeSet::new();
        // A line cut short by the crash has no newline: left out.
        for line in text.split_inclusive('\n').filter_map(|l| l.strip_suffix('\n')) {
            match line.split_once('\t') {
                Some(("F", r)) => {
                    finished.insert(r);
                }
                Some(("S", r)) => started.push(('S', r)),
                Some(("A", r)) => started.push(('A', r)),
                Some(("C", r)) => {
                    crashed.insert(r.to_string());
                }
                _ => {}
            }
        }
        let died_alone = started.iter().rev().find(|(t, _)| *t == 'A').map(|&(_, r)| r).filter(|r| !finished.contains(r));
        let in_flight =
            started.iter().map(|&(_, r)| r).filter(|r| !finished.contains(r) && Some(*r) != died_alone).map(String::from).collect();
        Ok(Record { died_alone: died_alone.map(String::from), in_flight, crashed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_tells_the_culprit_and_the_suspects() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".inflight");
        assert_eq!(Journal::read(&path).unwrap(), Record::default());
        let j = Journal::create(&path, ["old.bc"]).unwrap();
        for (tag, input) in [('S', "a.ll"), ('S', "b.ll"), ('F', "a.ll"), ('S', "c.ll")] {
            j.note(tag, input);
        }
        drop(j);
        let r = Journal::read(&path).unwrap();
        assert_eq!(r.died_alone, None);
        assert_eq!(r.in_flight, HashSet::from(["b.ll".to_string(), "c.ll".to_string()]));
        assert_eq!(r.crashed, BTreeSet::from(["old.bc".to_string()]));

        // The next run: the suspects alone; it dies on c.ll. A line cut
        // short by the crash counts for nothing.
        let j = Journal::create(&path, ["old.bc"]).unwrap();
        for (tag, input) in [('A', "b.ll"), ('F', "b.ll"), ('A', "c.ll")] {
            j.note(tag, input);
        }
        drop(j);
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"S\td.l").unwrap();
        let r = Journal::read(&path).unwrap();
        assert_eq!(r.died_alone.as_deref(), Some("c.ll"));
        assert!(r.in_flight.is_empty(), "{:?}", r.in_flight);
        assert_eq!(r.crashed.len(), 1);
    }
}
