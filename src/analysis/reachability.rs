//! Reachability: every instruction reachable from the root over control
//! edges, the root included. Steps: the BFS depth, the root at depth 1.

use std::collections::VecDeque;

use super::FlowGraph;

pub(super) fn analyze(flow: &FlowGraph<'_>, root: u32) -> (u32, Vec<u32>) {
    let mut depth = vec![0u32; flow.node_count()];
    depth[root as usize] = 1;
    let mut queue = VecDeque::from([root]);
    let mut positives = Vec::new();
    let mut steps = 1;
    while let Some(n) = queue.pop_front() {
        positives.push(n);
        steps = steps.max(depth[n as usize]);
        for s in flow.successors(n) {
            if depth[s as usize] == 0 {
                depth[s as usize] = depth[n as usize] + 1;
                queue.push_back(s);
            }
        }
    }
    positives.sort_unstable();
    (steps, positives)
}
