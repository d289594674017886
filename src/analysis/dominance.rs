//! Dominance (SPEC.md §2): with e the entry instruction of the root's
//! function, R the instructions reachable from e over control edges and A
//! those still reachable when the root is removed, the positives are R \ A:
//! every instruction that each control path from e passes the root to reach,
//! the root included. Roots must lie in R.
//!
//! Steps: the larger of the two BFS depths from e (over R, and over A), e at
//! depth 1: the synchronous rounds a message-passing network needs to see
//! both reachability sets settle, + 1. R and its depth are computed once per
//! function; A costs one BFS per root.

use rustc_hash::{FxHashMap, FxHashSet};

use super::FlowGraph;

/// What every root of one function shares.
pub(super) struct Reach {
    entry: u32,
    /// R: instructions reachable from the entry, ascending.
    reachable: Vec<u32>,
    /// BFS depth of R from the entry, the entry at 1.
    depth: u32,
}

impl Reach {
    fn compute(flow: &FlowGraph<'_>, entry: u32) -> Reach {
        let mut reachable = Vec::new();
        let depth = flow.control_bfs(entry, None, |n, _| reachable.push(n));
        reachable.sort_unstable();
        Reach { entry, reachable, depth }
    }

    pub(super) fn contains(&self, inst: u32) -> bool {
        self.reachable.binary_search(&inst).is_ok()
    }
}

/// [`Reach`] per function, computed on first use.
#[derive(Default)]
pub(super) struct Cache {
    functions: FxHashMap<u32, Option<Reach>>,
}

impl Cache {
    /// R of the root's function, if it has an entry.
    pub(super) fn reach<'a>(&'a mut self, flow: &FlowGraph<'_>, inst: u32) -> Option<&'a Reach> {
        let f = flow.function(inst)?;
        self.functions.entry(f).or_insert_with(|| flow.entry(f).map(|e| Reach::compute(flow, e))).as_ref()
    }

    /// Whether `inst` may be a dominance root: reachable from its entry.
    pub(super) fn is_root(&mut self, flow: &FlowGraph<'_>, inst: u32) -> bool {
        self.reach(flow, inst).is_some_and(|r| r.contains(inst))
    }

    /// Steps and positives; `None` if the root is not in R.
    pub(super) fn analyze(&mut self, flow: &FlowGraph<'_>, root: u32) -> Option<(u32, Vec<u32>)> {
        let reach = self.reach(flow, root)?;
        if !reach.contains(root) {
            return None;
        }
        let mut avoiding = FxHashSet::default();
        let depth_without = flow.control_bfs(reach.entry, Some(root), |n, _| {
            avoiding.insert(n);
        });
        let positives = reach.reachable.iter().copied().filter(|n| !avoiding.contains(n)).collect();
        Some((reach.depth.max(depth_without), positives))
    }
}
