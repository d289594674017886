//! Reachability: every instruction reachable from the root over control
//! edges, the root included. Steps: the BFS depth in nodes, the root at 1
//! (synchronous rounds + 1).

use super::FlowGraph;

pub(super) fn analyze(flow: &FlowGraph<'_>, root: u32) -> (u32, Vec<u32>) {
    let mut positives = Vec::new();
    let steps = flow.control_bfs(root, None, |n, _| {
        if flow.is_instruction(n) {
            positives.push(n);
        }
    });
    positives.sort_unstable();
    (steps, positives)
}
