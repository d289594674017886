//! Data dependencies: the instructions from which the root variable is
//! reachable along data edges, found by walking data edges backwards.
//! Steps: the largest, over those instructions, of the fewest data edges
//! walked backwards from the root to reach them (the root's defining
//! instruction is at 1; operands' definitions at 3, and so on); 0 when there
//! is none.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::FlowGraph;

pub(super) fn analyze(flow: &FlowGraph<'_>, root: u32) -> (u32, Vec<u32>) {
    let mut depth: FxHashMap<u32, u32> = FxHashMap::default();
    depth.insert(root, 0);
    let mut queue = VecDeque::from([root]);
    let mut positives = Vec::new();
    let mut steps = 0;
    while let Some(n) = queue.pop_front() {
        let d = depth[&n];
        if flow.is_instruction(n) {
            positives.push(n);
            steps = steps.max(d);
        }
        for p in flow.data_pred.nodes(n) {
            if let std::collections::hash_map::Entry::Vacant(e) = depth.entry(p) {
                e.insert(d + 1);
                queue.push_back(p);
            }
        }
    }
    positives.sort_unstable();
    (steps, positives)
}
