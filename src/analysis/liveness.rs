//! Liveness: the variables live on exit from the root instruction.
//!
//! uses(n) are the variable nodes with a data edge into n, defs(n) those
//! with a data edge out of n (constants are not variables);
//! LiveOut(n) = ∪ LiveIn(s) over n's control successors, and
//! LiveIn(n) = uses(n) ∪ (LiveOut(n) − defs(n)), the least fixed point.
//!
//! Computed one variable at a time, never as a set per instruction: for a
//! variable v, D(n) = the fewest control edges from n to a use of v with no
//! definition of v before it (0 at a use; a definition that is not a use
//! stops the walk) is a multi-source breadth-first search backwards from
//! v's uses. v ∈ LiveIn(n) iff D(n) is finite, so v ∈ LiveOut(p) iff some
//! successor s of p has a finite D(s), and the example's step count for v
//! is 1 + the least such D(s) (SPEC.md §2: the root may itself be the use,
//! around a loop). One sweep over a function's variables costs memory
//! linear in the function's size, whatever the number of variables, and
//! time proportional to the total size of the variables' live ranges.
//!
//! A sweep answers two questions at once: which instructions have a
//! non-empty LiveOut (the eligible roots) and, for the roots it is asked
//! about, LiveOut and the step count. [`Cache::expect`] collects the roots
//! about to be analysed so that one sweep per function answers them all.

use rustc_hash::{FxHashMap, FxHashSet};

use super::FlowGraph;
use crate::graph::NodeKind;

/// The answer for one root: (steps, live-out variables ascending).
type Answer = (u32, Vec<u32>);

struct Sweep {
    /// Instructions of the function with a non-empty LiveOut, ascending.
    has_live_out: Vec<u32>,
    answers: FxHashMap<u32, Answer>,
}

fn sweep(flow: &FlowGraph<'_>, instructions: &[u32], roots: &FxHashSet<u32>) -> Sweep {
    let n = instructions.len();
    let local: FxHashMap<u32, u32> = instructions.iter().enumerate().map(|(i, &x)| (x, i as u32)).collect();
    // Control predecessors by local index (compressed rows), so the inner
    // loop below does no hashing.
    let mut pred_start = Vec::with_capacity(n + 1);
    let mut preds = Vec::new();
    for &inst in instructions {
        pred_start.push(preds.len() as u32);
        preds.extend(flow.predecessors(inst).filter_map(|q| local.get(&q).copied()));
    }
    pred_start.push(preds.len() as u32);
    let is_root: Vec<bool> = instructions.iter().map(|i| roots.contains(i)).collect();
    let mut vars: Vec<u32> =
        instructions.iter().flat_map(|&i| flow.data_pred.nodes(i)).filter(|&v| flow.kind(v) == NodeKind::Variable).collect();
    vars.sort_unstable();
    vars.dedup();

    // Per local instruction: the stamp of the variable that last reached it
    // (index + 1), its distance D for that variable, and the stamp of the
    // last variable found live out of it.
    let mut reached = vec![0u32; n];
    let mut dist = vec![0u32; n];
    let mut live_out_seen = vec![0u32; n];
    let mut answers: FxHashMap<u32, Answer> = roots.iter().map(|&r| (r, (0, Vec::new()))).collect();
    let mut queue: Vec<u32> = Vec::new();
    let mut defs: Vec<u32> = Vec::new();

    for (vi, &v) in vars.iter().enumerate() {
        let stamp = vi as u32 + 1;
        defs.clear();
        defs.extend(flow.data_pred.nodes(v).filter_map(|d| local.get(&d).copied()));
        queue.clear();
        for u in flow.data_succ.nodes(v) {
            if let Some(&l) = local.get(&u) {
                if reached[l as usize] != stamp {
                    reached[l as usize] = stamp;
                    dist[l as usize] = 0;
                    queue.push(l);
                }
            }
        }
        // Breadth-first: `queue` grows while it is read, in order of D.
        let mut head = 0;
        while head < queue.len() {
            let s = queue[head] as usize;
            head += 1;
            let d = dist[s];
            for &q in &preds[pred_start[s] as usize..pred_start[s + 1] as usize] {
                let qi = q as usize;
                // v is live out of q: D(s) is finite and s succeeds q. The
                // first such s (least D) gives q's step count for v.
                if live_out_seen[qi] != stamp {
                    live_out_seen[qi] = stamp;
                    if is_root[qi] {
                        let answer = answers.get_mut(&instructions[qi]).expect("a root has an answer");
                        answer.0 = answer.0.max(d + 1);
                        answer.1.push(v);
                    }
                }
                if reached[qi] != stamp && !defs.contains(&q) {
                    reached[qi] = stamp;
                    dist[qi] = d + 1;
                    queue.push(q);
                }
            }
        }
    }
    // An instruction ever stamped has a non-empty LiveOut.
    let has_live_out = instructions.iter().zip(&live_out_seen).filter(|&(_, &seen)| seen != 0).map(|(&i, _)| i).collect();
    Sweep { has_live_out, answers }
}

#[derive(Default)]
struct Function {
    /// Set by the first sweep of the function.
    has_live_out: Option<Vec<u32>>,
    answers: FxHashMap<u32, Answer>,
}

/// Liveness per function, computed on first use.
#[derive(Default)]
pub(super) struct Cache {
    functions: FxHashMap<u32, Function>,
    /// Roots announced by [`Cache::expect`] and not yet answered.
    expected: FxHashSet<u32>,
}

impl Cache {
    /// Announces roots about to be analysed, so that the next sweep of each
    /// of their functions answers all of them.
    pub(super) fn expect(&mut self, roots: &[u32]) {
        self.expected.extend(roots);
    }

    fn run(&mut self, flow: &FlowGraph<'_>, f: u32, extra: Option<u32>) {
        let Some(instructions) = flow.function_instructions.get(f as usize) else { return };
        let mut roots: FxHashSet<u32> = self.expected.iter().copied().filter(|&r| flow.function(r) == Some(f)).collect();
        roots.extend(extra);
        let done = sweep(flow, instructions, &roots);
        for r in &roots {
            self.expected.remove(r);
        }
        let entry = self.functions.entry(f).or_default();
        entry.has_live_out.get_or_insert(done.has_live_out);
        entry.answers.extend(done.answers);
    }

    pub(super) fn has_live_out(&mut self, flow: &FlowGraph<'_>, inst: u32) -> bool {
        let Some(f) = flow.function(inst) else { return false };
        if self.functions.get(&f).is_none_or(|x| x.has_live_out.is_none()) {
            self.run(flow, f, None);
        }
        self.functions[&f].has_live_out.as_ref().is_some_and(|s| s.binary_search(&inst).is_ok())
    }

    pub(super) fn analyze(&mut self, flow: &FlowGraph<'_>, root: u32) -> Answer {
        let Some(f) = flow.function(root) else { return (0, Vec::new()) };
        if !self.functions.get(&f).is_some_and(|x| x.answers.contains_key(&root)) {
            self.run(flow, f, Some(root));
        }
        let (steps, mut live) = self.functions.get(&f).and_then(|x| x.answers.get(&root)).cloned().unwrap_or_default();
        live.sort_unstable();
        (steps, live)
    }
}
