//! Inputs shared by the model's test binaries (each uses some of them).
#![allow(dead_code)]

use programl::batch::GraphInput;
use programl::graph::{Edge, Flow};
use programl::vocab::{Counts, Vocabulary};

/// A vocabulary of `texts`, each seen once.
pub fn vocabulary(texts: &[&str]) -> Vocabulary {
    let mut counts = Counts::default();
    for t in texts {
        *counts.texts.entry(t.to_string()).or_default() += 1;
        counts.total += 1;
    }
    Vocabulary::from_counts(&counts, 1, None)
}

/// Five nodes: 0 → 1 → 2 (control), 3 ⇒ 1 at position 1 and 4 ⇒ 2 at
/// position 2 (data), 2 → 0 (call).
pub fn five_nodes(vocab: &Vocabulary) -> GraphInput {
    let texts = ["br", "add", "ret", "i32", "i64"];
    let e = |flow, position| Edge { flow, position };
    let edges = [
        (0, 1, e(Flow::Control, 0)),
        (1, 2, e(Flow::Control, 0)),
        (3, 1, e(Flow::Data, 1)),
        (4, 2, e(Flow::Data, 2)),
        (2, 0, e(Flow::Call, 0)),
    ];
    GraphInput::from_parts(texts, edges, vocab).unwrap()
}

/// This CPU's flags, as the kernel reports them in `/proc/cpuinfo` (none
/// where there is no such file).
pub fn cpu_flags() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines().find(|l| l.starts_with("flags")).map_or(vec![], |l| l.split_whitespace().map(String::from).collect())
}
