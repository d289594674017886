//! Dominance: the instructions of the root's function, reachable from its
//! entry, that every control path from the entry passes the root to reach
//! (the root itself included when reachable). Unreachable instructions are
//! negative.
//!
//! Dominator trees come from the iterative algorithm of Cooper, Harvey and
//! Kennedy ("A Simple, Fast Dominance Algorithm") over the instruction-level
//! control-flow graph in reverse post-order, once per function. Steps: the
//! passes it made until one changed nothing, that pass included.

use rustc_hash::FxHashMap;

use super::FlowGraph;

const UNDEFINED: u32 = u32::MAX;

/// The dominator tree of one function, over reverse post-order indices.
pub(super) struct Dominators {
    pub(super) passes: u32,
    /// Reverse post-order of the reachable instructions; index 0 is the entry.
    pub(super) rpo: Vec<u32>,
    /// Node id → reverse post-order index.
    index: FxHashMap<u32, u32>,
    /// Immediate dominator of each reverse post-order index (the entry's is
    /// itself).
    pub(super) idom: Vec<u32>,
}

impl Dominators {
    pub(super) fn compute(flow: &FlowGraph<'_>, entry: u32) -> Dominators {
        let mut rpo = flow.post_order(entry);
        rpo.reverse();
        let index: FxHashMap<u32, u32> = rpo.iter().enumerate().map(|(i, &n)| (n, i as u32)).collect();
        let mut idom = vec![UNDEFINED; rpo.len()];
        idom[0] = 0;
        let mut passes = 0;
        loop {
            passes += 1;
            let mut changed = false;
            for i in 1..rpo.len() {
                let mut new = UNDEFINED;
                for p in flow.predecessors(rpo[i]) {
                    let Some(&p) = index.get(&p) else { continue };
                    if idom[p as usize] == UNDEFINED {
                        continue;
                    }
                    new = if new == UNDEFINED { p } else { intersect(&idom, p, new) };
                }
                if idom[i] != new {
                    idom[i] = new;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        Dominators { passes, rpo, index, idom }
    }

    /// Every node the given node dominates, itself included, ascending.
    fn dominated_by(&self, root: u32) -> Vec<u32> {
        let Some(&r) = self.index.get(&root) else { return Vec::new() };
        // In reverse post-order a dominator precedes what it dominates, so
        // one forward sweep marks the dominator subtree of r.
        let mut inside = vec![false; self.rpo.len()];
        inside[r as usize] = true;
        let mut out = vec![root];
        for i in (r as usize + 1)..self.rpo.len() {
            if inside[self.idom[i] as usize] {
                inside[i] = true;
                out.push(self.rpo[i]);
            }
        }
        out.sort_unstable();
        out
    }
}

fn intersect(idom: &[u32], mut a: u32, mut b: u32) -> u32 {
    while a != b {
        while a > b {
            a = idom[a as usize];
        }
        while b > a {
            b = idom[b as usize];
        }
    }
    a
}

/// Dominator trees per function, computed on first use.
#[derive(Default)]
pub(super) struct Cache {
    functions: FxHashMap<u32, Dominators>,
}

impl Cache {
    pub(super) fn get<'a>(&'a mut self, flow: &FlowGraph<'_>, function: u32) -> Option<&'a Dominators> {
        let entry = *flow.function_instructions.get(function as usize)?.first()?;
        Some(self.functions.entry(function).or_insert_with(|| Dominators::compute(flow, entry)))
    }

    pub(super) fn analyze(&mut self, flow: &FlowGraph<'_>, root: u32) -> (u32, Vec<u32>) {
        let Some(f) = flow.function(root) else { return (0, Vec::new()) };
        match self.get(flow, f) {
            Some(d) => (d.passes, d.dominated_by(root)),
            None => (0, Vec::new()),
        }
    }
}
