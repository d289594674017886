//! Data dependencies: the instructions from which the root variable is
//! reachable along data edges, found by walking data edges backwards. Steps:
//! the BFS depth of that walk, the root at 0, each hop (through variables,
//! constants and instructions alike) counting one.

use std::collections::VecDeque;

use super::FlowGraph;
use crate::graph::NodeKind;

pub(super) fn analyze(flow: &FlowGraph<'_>, root: u32) -> (u32, Vec<u32>) {
    let mut depth = vec![u32::MAX; flow.node_count()];
    depth[root as usize] = 0;
    let mut queue = VecDeque::from([root]);
    let mut positives = Vec::new();
    let mut steps = 0;
    while let Some(n) = queue.pop_front() {
        let d = depth[n as usize];
        steps = steps.max(d);
        if n != 0 && flow.kind(n) == NodeKind::Instruction {
            positives.push(n);
        }
        for p in flow.data_pred.nodes(n) {
            if depth[p as usize] == u32::MAX {
                depth[p as usize] = d + 1;
                queue.push_back(p);
            }
        }
    }
    positives.sort_unstable();
    (steps, positives)
}
