//! Liveness: the variables live on exit from the root instruction.
//!
//! uses(n) are the variable nodes with a data edge into n, defs(n) those
//! with a data edge out of n (constants are not variables);
//! LiveOut(n) = ∪ LiveIn(s) over n's control successors, and
//! LiveIn(n) = uses(n) ∪ (LiveOut(n) − defs(n)), the least fixed point,
//! computed once per function by passes in post-order (then the
//! instructions unreachable from the entry, ascending). Steps: the passes
//! until one changed nothing, that pass included.

use fixedbitset::FixedBitSet;
use rustc_hash::FxHashMap;

use super::FlowGraph;
use crate::graph::NodeKind;

pub(super) struct Liveness {
    pub(super) passes: u32,
    /// Local variable index → node id.
    vars: Vec<u32>,
    /// Instruction node → its live-out set over local variable indices.
    live_out: FxHashMap<u32, FixedBitSet>,
}

impl Liveness {
    pub(super) fn compute(flow: &FlowGraph<'_>, instructions: &[u32]) -> Liveness {
        let Some(&entry) = instructions.first() else {
            return Liveness { passes: 0, vars: Vec::new(), live_out: FxHashMap::default() };
        };
        let mut var_index: FxHashMap<u32, u32> = FxHashMap::default();
        let mut vars = Vec::new();
        let mut local = |v: u32, vars: &mut Vec<u32>| {
            *var_index.entry(v).or_insert_with(|| {
                vars.push(v);
                vars.len() as u32 - 1
            })
        };
        let n = instructions.len();
        let inst_index: FxHashMap<u32, usize> = instructions.iter().enumerate().map(|(i, &x)| (x, i)).collect();
        let mut uses: Vec<Vec<u32>> = Vec::with_capacity(n);
        let mut defs: Vec<Vec<u32>> = Vec::with_capacity(n);
        for &inst in instructions {
            let u = flow.data_pred.nodes(inst).filter(|&v| flow.kind(v) == NodeKind::Variable).map(|v| local(v, &mut vars)).collect();
            let d = flow.data_succ.nodes(inst).filter(|&v| flow.kind(v) == NodeKind::Variable).map(|v| local(v, &mut vars)).collect();
            uses.push(u);
            defs.push(d);
        }
        let width = vars.len();
        let succs: Vec<Vec<usize>> =
            instructions.iter().map(|&i| flow.successors(i).filter_map(|s| inst_index.get(&s).copied()).collect()).collect();

        let mut order: Vec<usize> = flow.post_order(entry).into_iter().filter_map(|x| inst_index.get(&x).copied()).collect();
        let mut reached = vec![false; n];
        for &i in &order {
            reached[i] = true;
        }
        order.extend((0..n).filter(|&i| !reached[i]));

        let mut live_in = vec![FixedBitSet::with_capacity(width); n];
        let mut live_out = vec![FixedBitSet::with_capacity(width); n];
        let mut scratch = FixedBitSet::with_capacity(width);
        let mut passes = 0;
        loop {
            passes += 1;
            let mut changed = false;
            for &i in &order {
                scratch.clear();
                for &s in &succs[i] {
                    scratch.union_with(&live_in[s]);
                }
                if scratch != live_out[i] {
                    live_out[i].clone_from(&scratch);
                    changed = true;
                }
                for &d in &defs[i] {
                    scratch.set(d as usize, false);
                }
                for &u in &uses[i] {
                    scratch.insert(u as usize);
                }
                if scratch != live_in[i] {
                    std::mem::swap(&mut live_in[i], &mut scratch);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let live_out = instructions.iter().copied().zip(live_out).collect();
        Liveness { passes, vars, live_out }
    }

    /// Live-out variables of an instruction, ascending node ids.
    pub(super) fn live_out(&self, inst: u32) -> Vec<u32> {
        let mut out: Vec<u32> = self.live_out.get(&inst).map(|s| s.ones().map(|v| self.vars[v]).collect()).unwrap_or_default();
        out.sort_unstable();
        out
    }

    fn has_live_out(&self, inst: u32) -> bool {
        self.live_out.get(&inst).is_some_and(|s| s.count_ones(..) > 0)
    }
}

/// Liveness per function, computed on first use.
#[derive(Default)]
pub(super) struct Cache {
    functions: FxHashMap<u32, Liveness>,
}

impl Cache {
    pub(super) fn get<'a>(&'a mut self, flow: &FlowGraph<'_>, function: u32) -> Option<&'a Liveness> {
        let instructions = flow.function_instructions.get(function as usize)?;
        Some(self.functions.entry(function).or_insert_with(|| Liveness::compute(flow, instructions)))
    }

    pub(super) fn has_live_out(&mut self, flow: &FlowGraph<'_>, inst: u32) -> bool {
        flow.function(inst).and_then(|f| self.get(flow, f)).is_some_and(|l| l.has_live_out(inst))
    }

    pub(super) fn analyze(&mut self, flow: &FlowGraph<'_>, root: u32) -> (u32, Vec<u32>) {
        match flow.function(root).and_then(|f| self.get(flow, f)) {
            Some(l) => (l.passes, l.live_out(root)),
            None => (0, Vec::new()),
        }
    }
}
