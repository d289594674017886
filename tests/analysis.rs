//! DeepDataFlow analyses (src/analysis/) tested hard (SPEC.md §2):
//!
//! 1. Property tests (proptest) on small random graphs against brute-force
//!    references written from the spec's definitions, not from the
//!    analyses' code: random instruction-level CFGs of 1–40 instructions in
//!    1–3 functions (interleaved node ids, self-loops, multi-edges,
//!    unreachable code), random variables with def/use edges (some never
//!    defined, some defined twice, a few used from another function),
//!    constants and call edges (which every analysis must ignore); and
//!    random expression graphs for subexpressions, whose keys the generator
//!    knows without parsing any text. Root sampling too.
//! 2. Dominance on real IR (C programs in tests/analysis/*.c at several
//!    optimisation levels, plus a bounded sample of the IR corpus under
//!    `$PROGRAML_CACHE/corpus` when present) cross-checked against LLVM's own
//!    dominator tree (`opt -passes='print<domtree>'`), for every instruction
//!    root of every function (functions over 3000 instructions: every
//!    block's first instruction and a sample of the others).
//! 3. Liveness on the same files against a worklist reference over HashSets.
//! 4. Reachability, DataDep and Subexpressions sanity on the same files
//!    (brute-force DFS/closure; reachable blocks = the blocks in LLVM's
//!    dominator tree).
//!
//! Knobs (environment):
//! - `PROGRAML_PROPTEST_CASES`: random graphs per property (default 10000 in
//!   release builds, 1000 in debug builds);
//! - `PROGRAML_ANALYSIS_CORPUS_FILES`: corpus files sampled (default 100;
//!   `all` for every file, 0 for none);
//! - `PROGRAML_ANALYSIS_CORPUS_MAX_BYTES`: skip larger corpus files
//!   (default 400000);
//! - `PROGRAML_CACHE`: the cache holding `corpus/` (default
//!   `${XDG_CACHE_HOME:-$HOME/.cache}/programl-rs`).
//!
//! Run with `--nocapture` to see how much each real-file test compared.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;
use programl::analysis::{root_count, sample_roots, AnalysisError, Analyzer, Labels, Task};
use programl::graph::{Flow, Function, Module, Node, NodeKind, ProgramGraph, UNDEFINED_FUNCTION_TEXT};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

// ---------------------------------------------------------------------------
// Configuration

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) if v.trim() == "all" => usize::MAX,
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn cases() -> u32 {
    env_usize("PROGRAML_PROPTEST_CASES", if cfg!(debug_assertions) { 1000 } else { 10_000 }).min(u32::MAX as usize) as u32
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: cases(), failure_persistence: None, max_shrink_iters: 10_000, ..ProptestConfig::default() }
}

// ---------------------------------------------------------------------------
// A plain view of a graph, built straight from petgraph's edges (not from the
// analyses' FlowGraph), for the references.

struct Plain {
    kind: Vec<NodeKind>,
    function: Vec<Option<u32>>,
    /// Control successors, in (position, insertion) order.
    csucc: Vec<Vec<u32>>,
    cpred: Vec<Vec<u32>>,
    /// Data-edge sources into each node.
    dpred: Vec<Vec<u32>>,
    /// Data-edge targets out of each node.
    dsucc: Vec<Vec<u32>>,
    /// Instruction nodes (not `[external]`) of each function, ascending.
    funcs: Vec<Vec<u32>>,
    /// Each function's entry: the recorded one, else the lowest-id
    /// instruction without a control predecessor (derived here, not by
    /// the library).
    entries: Vec<Option<u32>>,
    /// Body instructions: not `[external]`, not a placeholder.
    body: Vec<bool>,
}

impl Plain {
    fn new(g: &ProgramGraph) -> Plain {
        let n = g.node_count();
        let mut p = Plain {
            kind: g.graph.node_weights().map(|w| w.kind).collect(),
            function: g.graph.node_weights().map(|w| w.function).collect(),
            csucc: vec![Vec::new(); n],
            cpred: vec![Vec::new(); n],
            dpred: vec![Vec::new(); n],
            dsucc: vec![Vec::new(); n],
            funcs: vec![Vec::new(); g.functions.len()],
            entries: Vec::new(),
            body: vec![false; n],
        };
        let mut control: Vec<(u32, u32, u32, usize)> = Vec::new();
        for (i, e) in g.graph.edge_references().enumerate() {
            let (s, t) = (e.source().index() as u32, e.target().index() as u32);
            match e.weight().flow {
                Flow::Control => control.push((s, e.weight().position, t, i)),
                Flow::Data => {
                    p.dpred[t as usize].push(s);
                    p.dsucc[s as usize].push(t);
                }
                _ => {}
            }
        }
        control.sort_by_key(|&(s, pos, _, i)| (s, pos, i));
        for (s, _, t, _) in control {
            p.csucc[s as usize].push(t);
            p.cpred[t as usize].push(s);
        }
        for i in 1..n {
            if p.kind[i] == NodeKind::Instruction && g.graph[ix(i as u32)].text != UNDEFINED_FUNCTION_TEXT {
                if let Some(f) = p.function[i] {
                    p.funcs[f as usize].push(i as u32);
                    p.body[i] = true;
                }
            }
        }
        p.entries = g
            .functions
            .iter()
            .enumerate()
            .map(|(f, func)| func.entry.or_else(|| p.funcs[f].iter().copied().find(|&i| p.cpred[i as usize].is_empty())))
            .collect();
        p
    }

    fn n(&self) -> usize {
        self.kind.len()
    }

    fn is_inst(&self, n: u32) -> bool {
        self.body[n as usize]
    }

    fn instructions(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.n() as u32).filter(|&n| self.is_inst(n))
    }

    fn variables(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.n() as u32).filter(|&n| self.kind[n as usize] == NodeKind::Variable)
    }

    /// Nodes reachable from `from` over control edges without entering
    /// `avoid` (nothing if `from` is `avoid`).
    fn reach(&self, from: u32, avoid: Option<u32>) -> Vec<bool> {
        let mut seen = vec![false; self.n()];
        if Some(from) == avoid {
            return seen;
        }
        seen[from as usize] = true;
        let mut stack = vec![from];
        while let Some(x) = stack.pop() {
            for &s in &self.csucc[x as usize] {
                if !seen[s as usize] && Some(s) != avoid {
                    seen[s as usize] = true;
                    stack.push(s);
                }
            }
        }
        seen
    }

    /// Entry instruction of a node's function.
    fn entry_of(&self, n: u32) -> Option<u32> {
        self.function[n as usize].and_then(|f| self.entries[f as usize])
    }

    fn uses(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        self.dpred[n as usize].iter().copied().filter(|&v| self.kind[v as usize] == NodeKind::Variable)
    }

    fn defs(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        self.dsucc[n as usize].iter().copied().filter(|&v| self.kind[v as usize] == NodeKind::Variable)
    }
}

// ---------------------------------------------------------------------------
// Brute-force references, straight from SPEC.md §2.

/// Dominance by deletion: m is dominated by r iff m is reachable from the
/// entry and deleting r makes m unreachable (r itself iff reachable).
fn ref_dominance(p: &Plain, root: u32) -> Vec<u32> {
    let Some(entry) = p.entry_of(root) else { return Vec::new() };
    let f = p.function[root as usize].unwrap();
    let all = p.reach(entry, None);
    let without = p.reach(entry, Some(root));
    p.funcs[f as usize].iter().copied().filter(|&m| all[m as usize] && (m == root || !without[m as usize])).collect()
}

/// The synchronous recurrence "reached" over control edges from `start`,
/// never entering `avoid`: each round adds every successor of what is
/// reached, all at once. Returns the reached set and the number of rounds
/// that added something (nothing and 0 if `start` is `avoid`).
fn sync_reach(p: &Plain, start: u32, avoid: Option<u32>) -> (BTreeSet<u32>, u32) {
    if Some(start) == avoid {
        return (BTreeSet::new(), 0);
    }
    let mut set = BTreeSet::from([start]);
    let mut rounds = 0;
    loop {
        let next: BTreeSet<u32> = set
            .iter()
            .flat_map(|&x| p.csucc[x as usize].iter().copied())
            .filter(|&s| Some(s) != avoid)
            .chain(set.iter().copied())
            .collect();
        if next == set {
            return (set, rounds);
        }
        set = next;
        rounds += 1;
    }
}

/// Reachability: the recurrence's set; steps = its rounds + 1 (SPEC.md §2
/// counts nodes, the root at 1).
fn ref_reachability(p: &Plain, root: u32) -> (u32, Vec<u32>) {
    let (set, rounds) = sync_reach(p, root, None);
    (rounds + 1, set.into_iter().collect())
}

/// Dominance steps: the larger of the two recurrences' rounds + 1, from the
/// entry over R, and over A with the root removed (no A when the root is
/// the entry).
fn ref_dominance_steps(p: &Plain, root: u32) -> u32 {
    let entry = p.entry_of(root).unwrap();
    let (_, r) = sync_reach(p, entry, None);
    let a = if root == entry { 0 } else { sync_reach(p, entry, Some(root)).1 + 1 };
    (r + 1).max(a)
}

/// DataDep: the synchronous backward walk over data edges from the root,
/// round by round; steps = the last round that labelled a new instruction.
fn ref_datadep(p: &Plain, root: u32) -> (u32, Vec<u32>) {
    let mut set: BTreeSet<u32> = BTreeSet::from([root]);
    let (mut round, mut steps) = (0, 0);
    loop {
        let more: BTreeSet<u32> = set.iter().flat_map(|&x| p.dpred[x as usize].iter().copied()).filter(|y| !set.contains(y)).collect();
        if more.is_empty() {
            break;
        }
        round += 1;
        if more.iter().any(|&x| p.is_inst(x)) {
            steps = round;
        }
        set.extend(more);
    }
    (steps, set.into_iter().filter(|&x| p.is_inst(x)).collect())
}

/// Liveness as the synchronous recurrence: LiveIn_0 = uses, LiveOut_0 = ∅;
/// round k computes every LiveOut_k from LiveIn_{k-1}, then LiveIn_k.
/// Returns each instruction's final LiveOut and the last round that
/// changed it (0 if none): the example's step count.
fn ref_liveness_sync(p: &Plain) -> HashMap<u32, (BTreeSet<u32>, u32)> {
    let insts: Vec<u32> = p.instructions().collect();
    let mut live_in: HashMap<u32, BTreeSet<u32>> = insts.iter().map(|&n| (n, p.uses(n).collect())).collect();
    let mut out: HashMap<u32, (BTreeSet<u32>, u32)> = insts.iter().map(|&n| (n, (BTreeSet::new(), 0))).collect();
    let mut round = 0;
    loop {
        round += 1;
        let new_out: HashMap<u32, BTreeSet<u32>> = insts
            .iter()
            .map(|&n| (n, p.csucc[n as usize].iter().flat_map(|s| live_in.get(s).into_iter().flatten().copied()).collect()))
            .collect();
        let mut changed = false;
        for &n in &insts {
            let o = &new_out[&n];
            let defs: BTreeSet<u32> = p.defs(n).collect();
            let mut inn: BTreeSet<u32> = o.difference(&defs).copied().collect();
            inn.extend(p.uses(n));
            if *o != out[&n].0 {
                out.insert(n, (o.clone(), round));
                changed = true;
            }
            if inn != live_in[&n] {
                live_in.insert(n, inn);
                changed = true;
            }
        }
        if !changed {
            return out;
        }
    }
}

/// Liveness: the spec's equations over every instruction of the graph at
/// once (not per function), iterated naively in the given order until
/// nothing changes. Returns LiveOut of every instruction.
fn ref_liveness(p: &Plain, order: &[u32]) -> HashMap<u32, HashSet<u32>> {
    let mut live_in: HashMap<u32, HashSet<u32>> = order.iter().map(|&n| (n, HashSet::new())).collect();
    let mut live_out: HashMap<u32, HashSet<u32>> = order.iter().map(|&n| (n, HashSet::new())).collect();
    loop {
        let mut changed = false;
        for &n in order {
            let out: HashSet<u32> = p.csucc[n as usize].iter().flat_map(|s| live_in.get(s).into_iter().flatten().copied()).collect();
            let defs: HashSet<u32> = p.defs(n).collect();
            let mut inn: HashSet<u32> = out.difference(&defs).copied().collect();
            inn.extend(p.uses(n));
            if out != live_out[&n] {
                live_out.insert(n, out);
                changed = true;
            }
            if inn != live_in[&n] {
                live_in.insert(n, inn);
                changed = true;
            }
        }
        if !changed {
            return live_out;
        }
    }
}

/// Liveness by a worklist over predecessors (for real files; any order
/// reaches the same least fixed point).
fn ref_liveness_worklist(p: &Plain) -> HashMap<u32, HashSet<u32>> {
    let insts: Vec<u32> = p.instructions().collect();
    let mut live_in: HashMap<u32, HashSet<u32>> = HashMap::new();
    let mut live_out: HashMap<u32, HashSet<u32>> = insts.iter().map(|&n| (n, HashSet::new())).collect();
    let mut queued: HashSet<u32> = insts.iter().copied().collect();
    let mut work: VecDeque<u32> = insts.iter().rev().copied().collect();
    while let Some(n) = work.pop_front() {
        queued.remove(&n);
        let out: HashSet<u32> = p.csucc[n as usize].iter().flat_map(|s| live_in.get(s).into_iter().flatten().copied()).collect();
        let defs: HashSet<u32> = p.defs(n).collect();
        let mut inn: HashSet<u32> = out.difference(&defs).copied().collect();
        inn.extend(p.uses(n));
        live_out.insert(n, out);
        if live_in.get(&n) != Some(&inn) {
            live_in.insert(n, inn);
            for &q in &p.cpred[n as usize] {
                if queued.insert(q) {
                    work.push_back(q);
                }
            }
        }
    }
    live_out
}

fn sorted<I: IntoIterator<Item = u32>>(it: I) -> Vec<u32> {
    let mut v: Vec<u32> = it.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    v
}

// ---------------------------------------------------------------------------
// Random control-flow graphs

/// Successor lists (local indices) of one function's instructions; local 0
/// is the entry (edges into it are dropped: an entry block has no
/// predecessors).
type FuncSpec = Vec<Vec<usize>>;

#[derive(Clone, Debug)]
struct CfgSpec {
    funcs: Vec<FuncSpec>,
    /// (home function, defining instructions, using instructions), raw.
    vars: Vec<(u16, Vec<u16>, Vec<u16>)>,
    /// Using instructions of each constant, raw.
    consts: Vec<Vec<u16>>,
    /// Call edges between instructions, raw.
    calls: Vec<(u16, u16)>,
    /// Creation-order keys: node ids interleave functions and values.
    keys: Vec<u32>,
    /// Whether each function records its entry (else it is derived).
    record_entry: Vec<bool>,
}

fn func_strategy(sizes: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = FuncSpec> {
    sizes.prop_flat_map(|n| {
        // Wild: any successors, self-loops and duplicates included.
        let wild = prop::collection::vec(prop::collection::vec(0..n, 0..=3), n);
        // Structured: fallthrough, returns, conditional and two-way jumps.
        let structured = prop::collection::vec((0u8..6, 0..n, 0..n), n).prop_map(move |v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (k, a, b))| {
                    let next: Vec<usize> = if i + 1 < n { vec![i + 1] } else { Vec::new() };
                    match k {
                        0 => Vec::new(),
                        1 | 2 => next,
                        3 => next.into_iter().chain([a]).collect(),
                        4 => vec![a],
                        _ => vec![a, b],
                    }
                })
                .collect()
        });
        prop_oneof![wild, structured]
    })
}

fn cfg_strategy() -> impl Strategy<Value = CfgSpec> {
    (
        // One function of up to 40 instructions, or two or three of up to 13.
        prop_oneof![prop::collection::vec(func_strategy(1..=40), 1..=1), prop::collection::vec(func_strategy(1..=13), 2..=3),],
        prop::collection::vec(
            (any::<u16>(), prop::collection::vec(any::<u16>(), 0..=2), prop::collection::vec(any::<u16>(), 0..=4)),
            0..=14,
        ),
        prop::collection::vec(prop::collection::vec(any::<u16>(), 1..=3), 0..=3),
        prop::collection::vec((any::<u16>(), any::<u16>()), 0..=4),
        prop::collection::vec(any::<u32>(), 64),
        prop::collection::vec(any::<bool>(), 3),
    )
        .prop_map(|(funcs, vars, consts, calls, keys, record_entry)| CfgSpec { funcs, vars, consts, calls, keys, record_entry })
}

struct Built {
    g: ProgramGraph,
    /// Node id of each function's local instruction.
    ids: Vec<Vec<u32>>,
}

fn new_graph(functions: usize) -> ProgramGraph {
    let mut g = ProgramGraph::new();
    g.modules.push(Module { name: "random".to_string(), ..Module::default() });
    for f in 0..functions {
        g.functions.push(Function { name: format!("f{f}"), module: 0, entry: None });
    }
    g
}

fn ix(n: u32) -> NodeIndex<u32> {
    NodeIndex::new(n as usize)
}

fn build_cfg(spec: &CfgSpec) -> Built {
    #[derive(Clone, Copy)]
    enum Item {
        Inst(usize),
        Var(usize),
        Const(usize),
    }
    let mut items: Vec<Item> = Vec::new();
    for (f, func) in spec.funcs.iter().enumerate() {
        items.extend(std::iter::repeat_n(Item::Inst(f), func.len()));
    }
    items.extend((0..spec.vars.len()).map(Item::Var));
    items.extend((0..spec.consts.len()).map(Item::Const));
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&k| (spec.keys[k % spec.keys.len()], k));

    let nf = spec.funcs.len();
    let mut g = new_graph(nf);
    let mut ids: Vec<Vec<u32>> = vec![Vec::new(); nf];
    let mut var_ids = vec![0u32; spec.vars.len()];
    let mut const_ids = vec![0u32; spec.consts.len()];
    for k in order {
        match items[k] {
            Item::Inst(f) => {
                let local = ids[f].len();
                let id = g.add_node(Node {
                    kind: NodeKind::Instruction,
                    text: if spec.funcs[f][local].is_empty() { "ret" } else { "br" }.to_string(),
                    full_text: Some(format!("inst f{f}.{local}")),
                    function: Some(f as u32),
                    block: local as u32,
                });
                ids[f].push(id.index() as u32);
            }
            Item::Var(v) => {
                let home = spec.vars[v].0 as usize % nf;
                let id = g.add_node(Node {
                    kind: NodeKind::Variable,
                    text: "i32".to_string(),
                    full_text: Some(format!("i32 %v{v}")),
                    function: Some(home as u32),
                    block: 0,
                });
                var_ids[v] = id.index() as u32;
            }
            Item::Const(c) => {
                let id = g.add_node(Node {
                    kind: NodeKind::Constant,
                    text: "i32".to_string(),
                    full_text: Some(format!("i32 {c}")),
                    function: None,
                    block: 0,
                });
                const_ids[c] = id.index() as u32;
            }
        }
    }
    let all: Vec<u32> = ids.iter().flatten().copied().collect();
    for (f, func) in spec.funcs.iter().enumerate() {
        for (i, succ) in func.iter().enumerate() {
            for (pos, &t) in succ.iter().enumerate().filter(|&(_, &t)| t != 0) {
                g.add_edge(Flow::Control, pos as u32, ix(ids[f][i]), ix(ids[f][t]));
            }
        }
        // Local 0 is the function's first-created instruction, so the
        // derivation (lowest id without a control predecessor) finds it too.
        if spec.record_entry[f] {
            g.functions[f].entry = Some(ids[f][0]);
        }
        // [external] → each entry, as the builder does for visible functions.
        g.add_edge(Flow::Call, 0, ProgramGraph::external(), ix(ids[f][0]));
    }
    let mut operand_count: HashMap<u32, u32> = HashMap::new();
    let mut use_edge = |g: &mut ProgramGraph, value: u32, inst: u32| {
        let pos = operand_count.entry(inst).or_insert(0);
        g.add_edge(Flow::Data, *pos, ix(value), ix(inst));
        *pos += 1;
    };
    for (v, (home, defs, uses)) in spec.vars.iter().enumerate() {
        let home = &ids[*home as usize % nf];
        for &d in defs {
            g.add_edge(Flow::Data, 0, ix(home[d as usize % home.len()]), ix(var_ids[v]));
        }
        for &u in uses {
            // Mostly uses in the home function; one in seven anywhere.
            let inst = if u % 7 == 0 { all[(u as usize / 7) % all.len()] } else { home[u as usize % home.len()] };
            use_edge(&mut g, var_ids[v], inst);
        }
    }
    for (c, uses) in spec.consts.iter().enumerate() {
        for &u in uses {
            use_edge(&mut g, const_ids[c], all[u as usize % all.len()]);
        }
    }
    for &(a, b) in &spec.calls {
        g.add_edge(Flow::Call, 0, ix(all[a as usize % all.len()]), ix(all[b as usize % all.len()]));
    }
    g.validate().unwrap_or_else(|e| panic!("generator made an invalid graph: {e:?}"));
    Built { g, ids }
}

fn all_labels(g: &ProgramGraph, task: Task, roots: &[u32]) -> Vec<Labels> {
    let mut a = Analyzer::new(g);
    roots.iter().map(|&r| a.analyze(task, r).unwrap_or_else(|e| panic!("{task} from {r}: {e}"))).collect()
}

/// Same labels from a fresh analyzer visiting the roots in reverse order
/// (per-function caches must not depend on which root came first).
fn check_deterministic(g: &ProgramGraph, task: Task, roots: &[u32], labels: &[Labels]) -> Result<(), TestCaseError> {
    let rev: Vec<u32> = roots.iter().rev().copied().collect();
    let mut again = all_labels(g, task, &rev);
    again.reverse();
    prop_assert_eq!(labels, &again[..], "{} is not deterministic", task);
    Ok(())
}

/// The library's entries (recorded or derived) are local 0 of each function.
fn check_entries(b: &Built) -> Result<(), TestCaseError> {
    let want: Vec<Option<u32>> = b.ids.iter().map(|ids| Some(ids[0])).collect();
    prop_assert_eq!(b.g.entries(), want.clone(), "entries");
    prop_assert_eq!(b.g.derived_entries(), want, "derived entries");
    Ok(())
}

fn check_dominance(b: &Built) -> Result<(), TestCaseError> {
    check_entries(b)?;
    let p = Plain::new(&b.g);
    // Roots: the instructions reachable from their function's entry.
    let roots: Vec<u32> = sorted(b.ids.iter().flat_map(|ids| sync_reach(&p, ids[0], None).0));
    let mut a = Analyzer::new(&b.g);
    prop_assert_eq!(a.eligible_roots(Task::Dominance), roots.clone(), "dominance roots");
    for r in p.instructions().filter(|r| roots.binary_search(r).is_err()) {
        prop_assert!(
            matches!(a.analyze(Task::Dominance, r), Err(AnalysisError::NotARoot { .. })),
            "unreachable {} accepted as a dominance root",
            r
        );
    }
    let labels = all_labels(&b.g, Task::Dominance, &roots);
    for (&r, l) in roots.iter().zip(&labels) {
        prop_assert_eq!(&l.positives, &ref_dominance(&p, r), "dominance from {}", r);
        prop_assert_eq!(l.steps, ref_dominance_steps(&p, r), "dominance steps from {}", r);
    }
    check_deterministic(&b.g, Task::Dominance, &roots, &labels)
}

fn check_reachability(b: &Built) -> Result<(), TestCaseError> {
    let p = Plain::new(&b.g);
    let roots: Vec<u32> = p.instructions().collect();
    let labels = all_labels(&b.g, Task::Reachability, &roots);
    for (&r, l) in roots.iter().zip(&labels) {
        let (steps, positives) = ref_reachability(&p, r);
        prop_assert_eq!(&l.positives, &positives, "reachability from {}", r);
        prop_assert_eq!(l.steps, steps, "reachability steps from {}", r);
        prop_assert_eq!((l.root, l.task), (r, Task::Reachability));
    }
    check_deterministic(&b.g, Task::Reachability, &roots, &labels)
}

fn check_datadep(b: &Built) -> Result<(), TestCaseError> {
    let p = Plain::new(&b.g);
    let roots: Vec<u32> = p.variables().collect();
    let mut a = Analyzer::new(&b.g);
    prop_assert_eq!(a.eligible_roots(Task::DataDep), roots.clone());
    let labels = all_labels(&b.g, Task::DataDep, &roots);
    for (&r, l) in roots.iter().zip(&labels) {
        let (steps, positives) = ref_datadep(&p, r);
        prop_assert_eq!(&l.positives, &positives, "datadep from {}", r);
        prop_assert_eq!(l.steps, steps, "datadep steps from {}", r);
        prop_assert_eq!(l.steps == 0, l.positives.is_empty(), "datadep steps {} with positives {:?}", l.steps, l.positives);
    }
    check_deterministic(&b.g, Task::DataDep, &roots, &labels)
}

fn check_liveness(b: &Built) -> Result<(), TestCaseError> {
    let p = Plain::new(&b.g);
    let insts: Vec<u32> = p.instructions().collect();
    let live = ref_liveness(&p, &insts);
    // The reference itself: the least fixed point is order-independent, and
    // the synchronous recurrence reaches it too.
    let rev: Vec<u32> = insts.iter().rev().copied().collect();
    assert_eq!(live, ref_liveness(&p, &rev), "reference liveness depends on order");
    let sync = ref_liveness_sync(&p);
    for &i in &insts {
        prop_assert_eq!(sorted(live[&i].iter().copied()), sync[&i].0.iter().copied().collect::<Vec<u32>>(), "sync liveness at {}", i);
    }
    // Every instruction analysed, one sweep per root (no `prepare`) ...
    let labels = all_labels(&b.g, Task::Liveness, &insts);
    for (&r, l) in insts.iter().zip(&labels) {
        prop_assert_eq!(&l.positives, &sorted(live[&r].iter().copied()), "liveness from {}", r);
        prop_assert_eq!(l.steps, sync[&r].1, "liveness steps from {}", r);
    }
    // ... and announced all at once: the same answers from one sweep.
    let mut a = Analyzer::new(&b.g);
    a.prepare(Task::Liveness, &insts);
    let batched: Vec<Labels> = insts.iter().map(|&r| a.analyze(Task::Liveness, r).unwrap()).collect();
    prop_assert_eq!(&batched, &labels, "prepared liveness differs");
    let mut a = Analyzer::new(&b.g);
    let eligible = sorted(insts.iter().copied().filter(|i| !live[i].is_empty()));
    prop_assert_eq!(a.eligible_roots(Task::Liveness), eligible, "liveness roots");
    check_deterministic(&b.g, Task::Liveness, &insts, &labels)
}

fn check_sampled_roots(g: &ProgramGraph, seed: u64) -> Result<(), TestCaseError> {
    let mut a = Analyzer::new(g);
    let copy = g.clone();
    let mut b = Analyzer::new(&copy);
    for task in Task::ALL {
        let eligible = a.eligible_roots(task);
        let want = g.node_count().div_ceil(10).min(10).min(eligible.len());
        let roots = a.sampled_roots(task, seed);
        prop_assert_eq!(roots.len(), want, "{} sampled {:?} of {:?}", task, roots, eligible);
        prop_assert!(roots.windows(2).all(|w| w[0] < w[1]), "{} roots not ascending and distinct: {:?}", task, roots);
        prop_assert!(roots.iter().all(|r| eligible.binary_search(r).is_ok()), "{} roots not eligible", task);
        prop_assert_eq!(&roots, &b.sampled_roots(task, seed), "{} sampling is not deterministic", task);
        for &r in &roots {
            prop_assert!(a.analyze(task, r).is_ok(), "{} sampled root {} fails", task, r);
        }
        if eligible.len() > want && want > 0 {
            // The seed must matter. With two eligible roots and one sampled,
            // 16 seeds all agree with probability 2^-15, which a CI run of
            // this property met once; 64 seeds put that at 2^-63.
            let distinct: BTreeSet<Vec<u32>> =
                (0..64u64).map(|s| a.sampled_roots(task, seed.wrapping_add(s.wrapping_mul(0x9E37_79B9)))).collect();
            prop_assert!(distinct.len() > 1, "{}: 64 seeds all sampled {:?} of {:?}", task, roots, eligible);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_dominance_matches_deletion_reference(spec in cfg_strategy()) {
        check_dominance(&build_cfg(&spec))?;
    }

    #[test]
    fn prop_reachability_matches_dfs_and_bfs_depth(spec in cfg_strategy()) {
        check_reachability(&build_cfg(&spec))?;
    }

    #[test]
    fn prop_datadep_matches_transitive_closure(spec in cfg_strategy()) {
        check_datadep(&build_cfg(&spec))?;
    }

    #[test]
    fn prop_liveness_matches_naive_fixed_point(spec in cfg_strategy()) {
        check_liveness(&build_cfg(&spec))?;
    }

    #[test]
    fn prop_sampled_roots_are_eligible_and_deterministic(spec in cfg_strategy(), seed in any::<u64>()) {
        check_sampled_roots(&build_cfg(&spec).g, seed)?;
    }

    #[test]
    fn prop_sample_roots_counts_and_determinism(
        nodes in 1usize..400,
        mask in prop::collection::vec(any::<bool>(), 0..400),
        seed in any::<u64>(),
    ) {
        let eligible: Vec<u32> = mask.iter().enumerate().filter(|(_, &b)| b).map(|(i, _)| i as u32).collect();
        let n = root_count(nodes);
        prop_assert_eq!(n, nodes.div_ceil(10).min(10));
        let roots = sample_roots(&eligible, nodes, seed);
        prop_assert_eq!(roots.len(), n.min(eligible.len()));
        prop_assert!(roots.windows(2).all(|w| w[0] < w[1]), "not ascending and distinct: {:?}", roots);
        prop_assert!(roots.iter().all(|r| eligible.binary_search(r).is_ok()));
        prop_assert_eq!(&roots, &sample_roots(&eligible, nodes, seed));
        if eligible.len() > n {
            let distinct: BTreeSet<Vec<u32>> =
                (1..=16u64).map(|s| sample_roots(&eligible, nodes, seed ^ s.wrapping_mul(0x9E37_79B9_7F4A_7C15))).collect();
            prop_assert!(distinct.len() > 1, "16 seeds gave the same {:?}", roots);
        }
    }
}

// ---------------------------------------------------------------------------
// Random expression graphs for subexpressions

/// One random instruction: (opcode choice, shape choice, operand choices,
/// decorations: flags and a metadata attachment).
type ExprSpec = (u8, u8, Vec<u8>, u8);

#[derive(Clone, Debug)]
struct SubSpec {
    /// Variables (true) and constants (false) of the operand pool.
    pool: Vec<bool>,
    insts: Vec<ExprSpec>,
    /// Order in which data edges are added.
    edge_keys: Vec<u32>,
}

fn sub_strategy() -> impl Strategy<Value = SubSpec> {
    (
        prop::collection::vec(any::<bool>(), 1..=4),
        prop::collection::vec((0u8..32, 0u8..3, prop::collection::vec(any::<u8>(), 3), any::<u8>()), 1..=40),
        prop::collection::vec(any::<u32>(), 32),
    )
        .prop_map(|(pool, insts, edge_keys)| SubSpec { pool, insts, edge_keys })
}

/// What the generator knows about an instruction: the opcode, its full text,
/// its operands in position order, and, for a pure one, its expression key
/// (opcode, shape, operand ids sorted if commutative).
struct Expr {
    opcode: &'static str,
    text: String,
    operands: Vec<u32>,
    key: Option<(String, String, Vec<u32>)>,
}

fn make_expr(spec: &ExprSpec, name: usize, pool: &[(u32, String)]) -> Expr {
    let (op, shape, choices, deco) = spec;
    let opnd = |i: usize| &pool[choices[i] as usize % pool.len()];
    let (a, b, c) = (&opnd(0).1, &opnd(1).1, &opnd(2).1);
    let s = *shape as usize;
    let flag = |f: &str| if deco & 1 == 1 { format!("{f} ") } else { String::new() };
    // (opcode, commutative, shape, operand count, text after "%rN = ")
    let (opcode, commutative, shape, arity, rhs): (&'static str, bool, String, usize, String) = match op {
        0 => ("add", true, String::new(), 2, format!("add {}i32 {a}, {b}", flag("nsw"))),
        1 => ("sub", false, String::new(), 2, format!("sub {}i32 {a}, {b}", flag("nuw"))),
        2 => ("mul", true, String::new(), 2, format!("mul i32 {a}, {b}")),
        3 => ("xor", true, String::new(), 2, format!("xor i32 {a}, {b}")),
        4 => ("fadd", true, String::new(), 2, format!("fadd {}float {a}, {b}", flag("fast"))),
        5 => ("udiv", false, String::new(), 2, format!("udiv {}i32 {a}, {b}", flag("exact"))),
        6 | 7 => {
            let pred = ["slt", "eq", "ugt"][s];
            ("icmp", false, pred.to_string(), 2, format!("icmp {pred} i32 {a}, {b}"))
        }
        8 => {
            let pred = ["olt", "une", "true"][s];
            ("fcmp", false, pred.to_string(), 2, format!("fcmp {}{pred} float {a}, {b}", flag("nnan ninf")))
        }
        9 | 10 => {
            let ty = ["i64", "i32", "<2 x i16>"][s];
            ("zext", false, ty.to_string(), 1, format!("zext i8 {a} to {ty}"))
        }
        11 => {
            let ty = ["i8", "i16", "i1"][s];
            ("trunc", false, ty.to_string(), 1, format!("trunc i64 {a} to {ty}"))
        }
        12 | 13 => {
            let ty = ["%struct.S", "[4 x i8]", "{ i32, <2 x float> }"][s];
            ("getelementptr", false, ty.to_string(), 2, format!("getelementptr {}{ty}, ptr {a}, i64 {b}", flag("inbounds")))
        }
        14 => {
            let idx = ["0", "1, 0", "1"][s];
            ("extractvalue", false, idx.to_string(), 1, format!("extractvalue {{ i32, {{ i8, i8 }} }} {a}, {idx}"))
        }
        15 => {
            let idx = ["0", "1", "1, 1"][s];
            ("insertvalue", false, idx.to_string(), 2, format!("insertvalue {{ i32, {{ i32, i32 }} }} {a}, i32 {b}, {idx}"))
        }
        16 => {
            let mask = ["<i32 0, i32 5>", "<i32 1, i32 1>", "zeroinitializer"][s];
            ("shufflevector", false, mask.to_string(), 2, format!("shufflevector <2 x i32> {a}, <2 x i32> {b}, <2 x i32> {mask}"))
        }
        17 => ("select", false, String::new(), 3, format!("select i1 {a}, i32 {b}, i32 {c}")),
        18 => ("extractelement", false, String::new(), 2, format!("extractelement <4 x i32> {a}, i32 {b}")),
        19 => ("fneg", false, String::new(), 1, format!("fneg float {a}")),
        // Impure: never expressions, whatever their operands.
        20 => ("load", false, String::new(), 1, format!("load i32, ptr {a}")),
        21 => ("call", false, String::new(), 2, format!("call i32 @f(i32 {a}, i32 {b})")),
        22 => ("phi", false, String::new(), 2, format!("phi i32 [ {a}, %x ], [ {b}, %y ]")),
        23 => ("freeze", false, String::new(), 1, format!("freeze i32 {a}")),
        24 => ("and", true, String::new(), 2, format!("and i32 {a}, {b}")),
        25 => ("or", true, String::new(), 2, format!("or i32 {a}, {b}")),
        26 => ("fmul", true, String::new(), 2, format!("fmul {}double {a}, {b}", flag("reassoc nsz"))),
        27 => ("fsub", false, String::new(), 2, format!("fsub double {a}, {b}")),
        28 => ("shl", false, String::new(), 2, format!("shl i32 {a}, {b}")),
        29 => ("insertelement", false, String::new(), 3, format!("insertelement <4 x i32> {a}, i32 {b}, i32 {c}")),
        30 => {
            let (opcode, ty) = [("sext", "i64"), ("bitcast", "<4 x i8>"), ("sitofp", "double")][s];
            (opcode, false, ty.to_string(), 1, format!("{opcode} i32 {a} to {ty}"))
        }
        _ => {
            let pred = ["oeq", "ord", "ule"][s];
            ("fcmp", false, pred.to_string(), 2, format!("fcmp fast {pred} <2 x double> {a}, {b}"))
        }
    };
    let mut text = format!("%r{name} = {rhs}");
    if deco & 2 == 2 {
        text.push_str(", !dbg !12");
    }
    let operands: Vec<u32> = (0..arity).map(|i| opnd(i).0).collect();
    let pure = !matches!(opcode, "load" | "call" | "phi" | "freeze");
    let key = pure.then(|| {
        let mut ops = operands.clone();
        if commutative {
            ops.sort_unstable();
        }
        (opcode.to_string(), shape, ops)
    });
    Expr { opcode, text, operands, key }
}

fn build_sub(spec: &SubSpec) -> (ProgramGraph, Vec<(u32, Expr)>) {
    let mut g = new_graph(1);
    let mut pool: Vec<(u32, String)> = Vec::new();
    for (i, &var) in spec.pool.iter().enumerate() {
        let (kind, name, function) =
            if var { (NodeKind::Variable, format!("%a{i}"), Some(0)) } else { (NodeKind::Constant, format!("{i}"), None) };
        let id = g.add_node(Node { kind, text: "i32".to_string(), full_text: Some(format!("i32 {name}")), function, block: 0 });
        pool.push((id.index() as u32, name));
    }
    let mut insts = Vec::new();
    let mut edges: Vec<(u32, u32, u32)> = Vec::new();
    for (i, s) in spec.insts.iter().enumerate() {
        // The pool grows with every instruction's result: later instructions
        // may use earlier ones (and so share operands that are variables).
        let e = make_expr(s, i, &pool);
        let id = g.add_node(Node {
            kind: NodeKind::Instruction,
            text: e.opcode.to_string(),
            full_text: Some(e.text.clone()),
            function: Some(0),
            block: 0,
        });
        let id = id.index() as u32;
        for (pos, &o) in e.operands.iter().enumerate() {
            edges.push((o, id, pos as u32));
        }
        if i % 3 == 0 {
            let v = g.add_node(Node {
                kind: NodeKind::Variable,
                text: "i32".to_string(),
                full_text: Some(format!("i32 %r{i}")),
                function: Some(0),
                block: 0,
            });
            g.add_edge(Flow::Data, 0, ix(id), v);
            pool.push((v.index() as u32, format!("%r{i}")));
        }
        insts.push((id, e));
    }
    // Add the operand edges in a scrambled order: keys must follow positions.
    let mut order: Vec<usize> = (0..edges.len()).collect();
    order.sort_by_key(|&k| (spec.edge_keys[k % spec.edge_keys.len()], k));
    for k in order {
        let (from, to, pos) = edges[k];
        g.add_edge(Flow::Data, pos, ix(from), ix(to));
    }
    // Straight-line control flow, so the graph looks like a function.
    for w in insts.windows(2) {
        g.add_edge(Flow::Control, 0, ix(w[0].0), ix(w[1].0));
    }
    g.validate().unwrap_or_else(|e| panic!("generator made an invalid graph: {e:?}"));
    (g, insts)
}

fn check_subexpressions(spec: &SubSpec) -> Result<(), TestCaseError> {
    let (g, insts) = build_sub(spec);
    let mut classes: BTreeMap<&(String, String, Vec<u32>), Vec<u32>> = BTreeMap::new();
    for (id, e) in &insts {
        if let Some(k) = &e.key {
            classes.entry(k).or_default().push(*id);
        }
    }
    let mut a = Analyzer::new(&g);
    for (id, e) in &insts {
        let l = a.analyze(Task::Subexpressions, *id).unwrap();
        prop_assert_eq!(l.steps, 2);
        match &e.key {
            Some(k) => prop_assert_eq!(&l.positives, &classes[k], "class of {} `{}`", id, e.text),
            None => prop_assert!(l.positives.iter().all(|p| p == id), "impure `{}` has positives {:?}", e.text, l.positives),
        }
    }
    let shared = sorted(classes.values().filter(|c| c.len() > 1).flatten().copied());
    prop_assert_eq!(a.eligible_roots(Task::Subexpressions), shared, "subexpression roots");
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_subexpressions_match_generator_keys(spec in sub_strategy()) {
        check_subexpressions(&spec)?;
    }
}

// ---------------------------------------------------------------------------
// Small fixed cases

/// entry → a → b → exit; entry → b; b → a (a loop with two entries into b).
fn diamond() -> (ProgramGraph, [u32; 4]) {
    let mut g = new_graph(1);
    let mk = |g: &mut ProgramGraph, t: &str| {
        g.add_node(Node { kind: NodeKind::Instruction, text: "br".into(), full_text: Some(t.into()), function: Some(0), block: 0 }).index()
            as u32
    };
    let (e, a, b, x) = (mk(&mut g, "e"), mk(&mut g, "a"), mk(&mut g, "b"), mk(&mut g, "x"));
    for (from, pos, to) in [(e, 0, a), (e, 1, b), (a, 0, b), (b, 0, a), (b, 1, x)] {
        g.add_edge(Flow::Control, pos, ix(from), ix(to));
    }
    (g, [e, a, b, x])
}

#[test]
fn errors_for_bad_roots() {
    let (mut g, [e, ..]) = diamond();
    let v = g
        .add_node(Node { kind: NodeKind::Variable, text: "i32".into(), full_text: Some("i32 %v".into()), function: Some(0), block: 0 })
        .index() as u32;
    g.add_edge(Flow::Data, 0, ix(e), ix(v));
    let n = g.node_count();
    let mut a = Analyzer::new(&g);
    for task in Task::ALL {
        assert_eq!(a.analyze(task, n as u32), Err(AnalysisError::NoSuchNode { root: n as u32, nodes: n }));
        assert!(matches!(a.analyze(task, 0), Err(AnalysisError::NotARoot { root: 0, .. })), "{task} from [external]");
        for r in 0..n as u32 {
            assert!(!a.eligible_roots(task).contains(&0));
            if let Ok(l) = a.analyze(task, r) {
                assert!(!l.positives.contains(&0), "{task} labels [external]");
            }
        }
    }
    for task in [Task::Reachability, Task::Dominance, Task::Liveness, Task::Subexpressions] {
        assert!(matches!(a.analyze(task, v), Err(AnalysisError::NotARoot { .. })), "{task} from a variable");
    }
    assert!(matches!(a.analyze(Task::DataDep, e), Err(AnalysisError::NotARoot { .. })), "datadep from an instruction");
    assert_eq!(a.analyze(Task::DataDep, v).unwrap().positives, vec![e]);
}

#[test]
fn dominance_of_a_two_entry_loop() {
    let (g, [e, a, b, x]) = diamond();
    let mut an = Analyzer::new(&g);
    let dom = |an: &mut Analyzer, r| an.analyze(Task::Dominance, r).unwrap().positives;
    assert_eq!(dom(&mut an, e), vec![e, a, b, x]);
    assert_eq!(dom(&mut an, a), vec![a]);
    assert_eq!(dom(&mut an, b), vec![b, x]);
    assert_eq!(dom(&mut an, x), vec![x]);
    let r = an.analyze(Task::Reachability, a).unwrap();
    assert_eq!((r.positives, r.steps), (vec![a, b, x], 3));
}

#[test]
fn sample_roots_is_roughly_uniform() {
    let eligible: Vec<u32> = (1..=50).collect();
    let mut counts = [0u32; 51];
    let trials = 20_000u64;
    for seed in 0..trials {
        let roots = sample_roots(&eligible, 100, seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xabcdef);
        assert_eq!(roots.len(), 10);
        for r in roots {
            counts[r as usize] += 1;
        }
    }
    // Each root is expected 4000 times (sd ≈ 57); allow ±10%.
    for (r, &c) in counts.iter().enumerate().skip(1) {
        assert!((3600..=4400).contains(&c), "root {r} sampled {c} times of an expected 4000");
    }
    assert_eq!(root_count(0), 0);
    assert_eq!(root_count(1), 1);
    assert_eq!(root_count(10), 1);
    assert_eq!(root_count(11), 2);
    assert_eq!(root_count(95), 10);
    assert_eq!(root_count(1_000_000), 10);
    assert!(sample_roots(&[], 100, 1).is_empty());
}

// ---------------------------------------------------------------------------
// Real IR: C programs compiled here, plus a sample of the corpus.

fn tool(name: &str) -> PathBuf {
    let p = Path::new(programl::LLVM_BINDIR).join(name);
    if p.exists() {
        p
    } else {
        PathBuf::from(format!("{name}-{}", programl::LLVM_MAJOR))
    }
}

fn run(cmd: &mut Command) -> Result<std::process::Output, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!("{cmd:?}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

/// A block of LLVM's dominator tree: its parent's name (None for the root).
type DomTree = HashMap<String, Option<String>>;

struct RealFile {
    label: String,
    /// The IR after `instnamer` (every block named), optnone removed.
    ll: PathBuf,
    /// LLVM's dominator tree of each function, by function name.
    domtrees: HashMap<String, DomTree>,
}

/// `%name` or `%"quoted\22name"` as printed by LLVM → the raw name.
fn unescape_name(s: &str) -> String {
    let s = s.strip_prefix('%').unwrap_or(s);
    let Some(q) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) else { return s.to_string() };
    let b = q.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&q[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses the stderr of `opt -passes='print<domtree>'`.
fn parse_domtrees(text: &str) -> Result<HashMap<String, DomTree>, String> {
    let mut out: HashMap<String, DomTree> = HashMap::new();
    let mut current: Option<String> = None;
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("DominatorTree for function: ") {
            current = Some(name.to_string());
            out.insert(name.to_string(), DomTree::new());
            stack.clear();
            continue;
        }
        let t = line.trim_start();
        if !t.starts_with('[') || !t.contains("] %") {
            continue;
        }
        let f = current.as_ref().ok_or_else(|| format!("tree line before any function: {line}"))?;
        let close = t.find("] ").unwrap();
        let level: usize = t[1..close].parse().map_err(|_| format!("bad level in {line}"))?;
        let rest = &t[close + 2..];
        let end = rest.rfind(" {").ok_or_else(|| format!("no DFS numbers in {line}"))?;
        let name = unescape_name(&rest[..end]);
        while stack.last().is_some_and(|(l, _)| *l >= level) {
            stack.pop();
        }
        let parent = stack.last().map(|(_, n)| n.clone());
        if parent.is_none() != (level == 1) || stack.last().is_some_and(|(l, _)| *l != level - 1) {
            return Err(format!("malformed tree at {line}"));
        }
        out.get_mut(f).unwrap().insert(name.clone(), parent);
        stack.push((level, name));
    }
    Ok(out)
}

fn prepare(dir: &Path, label: &str, ll_text: &str) -> Result<RealFile, String> {
    let stem: String = label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let raw = dir.join(format!("{stem}.raw.ll"));
    let named = dir.join(format!("{stem}.ll"));
    // print<domtree> and instnamer skip optnone functions (clang -O0).
    std::fs::write(&raw, ll_text.replace(" optnone", "")).map_err(|e| e.to_string())?;
    run(Command::new(tool("opt")).arg("-passes=instnamer").arg("-S").arg(&raw).arg("-o").arg(&named))?;
    let out = run(Command::new(tool("opt")).arg("-passes=print<domtree>").arg("-disable-output").arg(&named))?;
    let domtrees = parse_domtrees(&String::from_utf8_lossy(&out.stderr))?;
    Ok(RealFile { label: label.to_string(), ll: named, domtrees })
}

fn corpus_dir() -> PathBuf {
    let cache = std::env::var_os("PROGRAML_CACHE").map(PathBuf::from).unwrap_or_else(|| {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
        base.join("programl-rs")
    });
    cache.join("corpus")
}

fn fnv(s: &str) -> u64 {
    programl::hash::fnv1a(s.as_bytes())
}

/// The real files every real-IR test shares, prepared once per process.
fn real_files() -> &'static [RealFile] {
    static FILES: OnceLock<(tempfile::TempDir, Vec<RealFile>)> = OnceLock::new();
    &FILES
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let mut files = Vec::new();
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/analysis");
            let mut sources: Vec<PathBuf> =
                std::fs::read_dir(&src).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "c")).collect();
            sources.sort();
            assert!(sources.len() >= 3, "C programs missing from {}", src.display());
            for c in &sources {
                for flags in [&["-O0", "-fno-discard-value-names"][..], &["-O0"], &["-O1"], &["-O2"], &["-Os", "-fno-discard-value-names"]]
                {
                    let stem = c.file_stem().unwrap().to_string_lossy();
                    let label = format!("{stem}{}", flags.join(""));
                    let out = dir.path().join(format!("{label}.clang.ll"));
                    run(Command::new(tool("clang")).args(["-S", "-emit-llvm", "-w"]).args(flags).arg(c).arg("-o").arg(&out))
                        .unwrap_or_else(|e| panic!("{e}"));
                    let text = std::fs::read_to_string(&out).unwrap();
                    files.push(prepare(dir.path(), &label, &text).unwrap_or_else(|e| panic!("{label}: {e}")));
                }
            }
            // Hand-written IR: unreachable blocks, irreducible loops.
            let mut handwritten: Vec<PathBuf> =
                std::fs::read_dir(&src).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "ll")).collect();
            handwritten.sort();
            for ll in &handwritten {
                let label = ll.file_name().unwrap().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(ll).unwrap();
                files.push(prepare(dir.path(), &label, &text).unwrap_or_else(|e| panic!("{label}: {e}")));
            }
            // A deterministic sample of the corpus, if there is one.
            let want = env_usize("PROGRAML_ANALYSIS_CORPUS_FILES", 100);
            let max_bytes = env_usize("PROGRAML_ANALYSIS_CORPUS_MAX_BYTES", 400_000) as u64;
            let root = corpus_dir();
            let mut corpus = programl::ir::find_ir_files(&root).unwrap_or_default();
            if want > 0 && corpus.is_empty() {
                programl_testkit::skip_unless_ci(
                    "analysis tests on real files (corpus sample)",
                    &format!("no IR corpus in {}: build it with `bash scripts/corpus.sh`", root.display()),
                );
            }
            corpus.retain(|p| std::fs::metadata(p).is_ok_and(|m| m.len() <= max_bytes));
            corpus.sort_by_key(|p| (fnv(&p.to_string_lossy()), p.clone()));
            let (mut taken, mut skipped) = (0, 0);
            for p in corpus {
                if taken >= want {
                    break;
                }
                let label = p.strip_prefix(&root).unwrap_or(&p).to_string_lossy().into_owned();
                // Outside CI the corpus may be being written right now: a
                // file that fails is skipped, visibly. In CI it fails.
                match std::fs::read_to_string(&p).map_err(|e| e.to_string()).and_then(|t| prepare(dir.path(), &label, &t)) {
                    Ok(f) => {
                        files.push(f);
                        taken += 1;
                    }
                    Err(e) => {
                        skipped += 1;
                        programl_testkit::skip_unless_ci(&format!("analysis tests on corpus file {label}"), e.lines().next().unwrap_or(""));
                    }
                }
            }
            eprintln!(
                "real files: {} compiled here, {} hand-written, {taken} from {} ({skipped} skipped)",
                sources.len() * 5,
                handwritten.len(),
                root.display()
            );
            (dir, files)
        })
        .1
}

/// One defined function of a real module, in our graph's terms.
struct RealFunction {
    name: String,
    /// Instruction node ids of each block, ascending, in layout order, with
    /// the block's name.
    blocks: Vec<(String, Vec<u32>)>,
}

/// Loads a prepared file, builds its graph and maps every defined
/// function's blocks (by name, from the module) onto instruction nodes (by
/// the `block` index: one counter over the module's defined blocks).
fn with_real_graph<R>(file: &RealFile, f: impl FnOnce(&ProgramGraph, Vec<(u32, RealFunction)>) -> R) -> R {
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, &file.ll).unwrap_or_else(|e| panic!("{e}"));
    let g = programl::builder::build(&module, &programl::builder::BuildOptions::default());
    programl::builder::check(&module, &g, programl::builder::Mode::Paper)
        .unwrap_or_else(|e| panic!("{}: invalid graph: {e:#?}", file.label));
    let mut by_block: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for id in g.graph.node_indices() {
        let n = &g.graph[id];
        if id.index() != 0 && n.kind == NodeKind::Instruction && n.full_text.as_deref() != Some("") {
            by_block.entry(n.block).or_default().push(id.index() as u32);
        }
    }
    let mut functions = Vec::new();
    let mut block = 0u32;
    for (fi, func) in module.get_functions().enumerate() {
        if func.count_basic_blocks() == 0 {
            continue;
        }
        let name = func.get_name().to_string_lossy().into_owned();
        assert_eq!(g.functions[fi].name, name, "{}: function order", file.label);
        let mut blocks = Vec::new();
        for bb in func.get_basic_blocks() {
            let insts = by_block.remove(&block).unwrap_or_else(|| panic!("{}: block {block} has no instructions", file.label));
            for &i in &insts {
                assert_eq!(g.graph[ix(i)].function, Some(fi as u32), "{}: node {i} in block {block}", file.label);
            }
            blocks.push((bb.get_name().to_string_lossy().into_owned(), insts));
            block += 1;
        }
        functions.push((fi as u32, RealFunction { name, blocks }));
    }
    assert!(by_block.is_empty(), "{}: instructions outside every defined block: {:?}", file.label, by_block.keys());
    f(&g, functions)
}

/// Functions larger than this get every block's first instruction and a
/// sample of other roots checked, not every root.
const ALL_ROOTS_UP_TO: usize = 3000;

fn sample_of(ids: &[u32], limit: usize) -> Vec<u32> {
    if ids.len() <= limit {
        return ids.to_vec();
    }
    let stride = ids.len().div_ceil(limit);
    ids.iter().step_by(stride).copied().collect()
}

#[test]
fn real_dominance_matches_llvm_domtree() {
    let (mut functions, mut blocks, mut unreachable, mut roots, mut steps_checked) = (0, 0, 0, 0usize, 0usize);
    let mut deepest = 0;
    let mut failures = Vec::new();
    for file in real_files() {
        with_real_graph(file, |g, funcs| {
            let mut a = Analyzer::new(g);
            let p = Plain::new(g);
            let (entries, derived) = (g.entries(), g.derived_entries());
            for (fi, func) in funcs {
                // The builder records the entry; the derivation agrees.
                let entry = func.blocks[0].1[0];
                assert_eq!(g.functions[fi as usize].entry, Some(entry), "{}: {}: recorded entry", file.label, func.name);
                assert_eq!((entries[fi as usize], derived[fi as usize]), (Some(entry), Some(entry)), "{}: {}", file.label, func.name);
                let tree = file.domtrees.get(&func.name).unwrap_or_else(|| panic!("{}: no domtree for {}", file.label, func.name));
                // Ancestors-or-self of each block in LLVM's tree.
                let ancestors = |b: &str| -> Option<Vec<String>> {
                    let mut out = vec![b.to_string()];
                    let mut cur = tree.get(b)?.clone();
                    while let Some(p) = cur {
                        out.push(p.clone());
                        cur = tree[&p].clone();
                    }
                    Some(out)
                };
                let names: HashSet<&str> = func.blocks.iter().map(|(n, _)| n.as_str()).collect();
                assert!(tree.keys().all(|k| names.contains(k.as_str())), "{}: {}: LLVM names unknown blocks", file.label, func.name);
                // Instructions in blocks strictly dominated by each block.
                let mut below: HashMap<&str, Vec<u32>> = HashMap::new();
                for (b, insts) in &func.blocks {
                    if let Some(anc) = ancestors(b) {
                        for d in &anc[1..] {
                            below.entry(func.blocks.iter().find(|(n, _)| n == d).unwrap().0.as_str()).or_default().extend(insts);
                        }
                    } else {
                        unreachable += 1;
                    }
                }
                let size: usize = func.blocks.iter().map(|(_, i)| i.len()).sum();
                let sampled: HashSet<u32> = if size <= ALL_ROOTS_UP_TO {
                    HashSet::new()
                } else {
                    sample_of(&func.blocks.iter().flat_map(|(_, i)| i.iter().copied()).collect::<Vec<_>>(), 300).into_iter().collect()
                };
                for (b, insts) in &func.blocks {
                    for (pos, &r) in insts.iter().enumerate() {
                        if size > ALL_ROOTS_UP_TO && pos > 0 && !sampled.contains(&r) {
                            continue;
                        }
                        let expected = if tree.contains_key(b) {
                            let mut e: Vec<u32> = insts[pos..].to_vec();
                            e.extend(below.get(b.as_str()).into_iter().flatten());
                            e.sort_unstable();
                            e
                        } else {
                            Vec::new()
                        };
                        let got = match a.analyze(Task::Dominance, r) {
                            Ok(got) => got,
                            Err(AnalysisError::NotARoot { .. }) if !tree.contains_key(b) => continue,
                            Err(e) => panic!("{}: {}: root {r}: {e}", file.label, func.name),
                        };
                        assert!(tree.contains_key(b), "{}: {}: unreachable {r} accepted as a root", file.label, func.name);
                        if size <= 400 {
                            assert_eq!(got.steps, ref_dominance_steps(&p, r), "{}: {}: dominance steps from {r}", file.label, func.name);
                            steps_checked += 1;
                        }
                        deepest = deepest.max(got.steps);
                        roots += 1;
                        if got.positives != expected && failures.len() < 10 {
                            failures.push(format!(
                                "{}: {}: root {r} (block {b}, position {pos}): analysis {:?}, LLVM {:?}",
                                file.label, func.name, got.positives, expected
                            ));
                        }
                    }
                }
                functions += 1;
                blocks += func.blocks.len();
            }
        });
    }
    eprintln!(
        "dominance vs LLVM: {functions} functions, {blocks} blocks ({unreachable} unreachable), {roots} instruction roots \
         ({steps_checked} step counts against the recurrence), deepest {deepest} steps"
    );
    assert!(failures.is_empty(), "dominance disagrees with LLVM:\n{}", failures.join("\n"));
    assert!(functions >= 20 && unreachable > 0 && steps_checked > 1000 && deepest > 30);
}

#[test]
fn real_liveness_matches_worklist_reference() {
    let (mut functions, mut checked, mut live_roots, mut steps_checked) = (0, 0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for file in real_files() {
        with_real_graph(file, |g, funcs| {
            let p = Plain::new(g);
            let live = ref_liveness_worklist(&p);
            // Step counts from the synchronous recurrence, on graphs small
            // enough for its sets.
            let sync = (p.instructions().count() <= 1500).then(|| ref_liveness_sync(&p));
            let mut a = Analyzer::new(g);
            let eligible: BTreeSet<u32> = a.eligible_roots(Task::Liveness).into_iter().collect();
            for (_, func) in &funcs {
                for &r in func.blocks.iter().flat_map(|(_, i)| i) {
                    let l = a.analyze(Task::Liveness, r).unwrap();
                    let want = sorted(live[&r].iter().copied());
                    if l.positives != want && failures.len() < 10 {
                        failures
                            .push(format!("{}: {}: LiveOut({r}): analysis {:?}, reference {:?}", file.label, func.name, l.positives, want));
                    }
                    if eligible.contains(&r) == want.is_empty() && failures.len() < 10 {
                        failures.push(format!("{}: {}: {r} eligible: {}", file.label, func.name, eligible.contains(&r)));
                    }
                    if let Some(sync) = &sync {
                        assert_eq!(l.steps, sync[&r].1, "{}: {}: liveness steps from {r}", file.label, func.name);
                        steps_checked += 1;
                    }
                    assert_eq!(l.steps == 0, want.is_empty(), "{}: {}: {r}: steps {} for {want:?}", file.label, func.name, l.steps);
                    checked += 1;
                    live_roots += !want.is_empty() as usize;
                }
                functions += 1;
            }
        });
    }
    eprintln!(
        "liveness vs reference: {functions} functions, {checked} instructions ({live_roots} with live-out values, \
         {steps_checked} step counts against the recurrence)"
    );
    assert!(failures.is_empty(), "liveness disagrees with the reference:\n{}", failures.join("\n"));
    assert!(functions >= 20 && live_roots > 0 && steps_checked > 1000);
}

#[test]
fn real_reachability_and_datadep_sanity() {
    let (mut functions, mut reach_roots, mut vars, mut sampled) = (0, 0usize, 0usize, 0usize);
    for file in real_files() {
        with_real_graph(file, |g, funcs| {
            let p = Plain::new(g);
            let mut a = Analyzer::new(g);
            for (fi, func) in &funcs {
                let tree = &file.domtrees[&func.name];
                let block_of: HashMap<u32, &str> =
                    func.blocks.iter().flat_map(|(n, insts)| insts.iter().map(move |&i| (i, n.as_str()))).collect();
                let entry = func.blocks[0].1[0];
                // From the entry: exactly the blocks in LLVM's dominator tree.
                let l = a.analyze(Task::Reachability, entry).unwrap();
                let blocks: BTreeSet<&str> = l.positives.iter().map(|i| block_of[i]).collect();
                let llvm: BTreeSet<&str> = tree.keys().map(|k| k.as_str()).collect();
                assert_eq!(blocks, llvm, "{}: {}: blocks reachable from the entry", file.label, func.name);
                let all: Vec<u32> = func.blocks.iter().flat_map(|(_, i)| i.iter().copied()).collect();
                for r in sample_of(&all, 400) {
                    let l = a.analyze(Task::Reachability, r).unwrap();
                    let (steps, want) = ref_reachability(&p, r);
                    assert_eq!(l.positives, want, "{}: {}: reachable from {r}", file.label, func.name);
                    assert_eq!(l.steps, steps, "{}: {}: reachability steps from {r}", file.label, func.name);
                    assert!(l.positives.iter().all(|i| block_of.contains_key(i)), "reachability left the function");
                    reach_roots += 1;
                }
                // DataDep from the function's variables.
                let fvars: Vec<u32> = p.variables().filter(|&v| p.function[v as usize] == Some(*fi)).collect();
                for v in sample_of(&fvars, 400) {
                    let l = a.analyze(Task::DataDep, v).unwrap();
                    let (steps, want) = ref_datadep(&p, v);
                    assert_eq!(l.positives, want, "{}: {}: datadep from {v}", file.label, func.name);
                    assert_eq!(l.steps, steps, "{}: {}: datadep steps from {v}", file.label, func.name);
                    assert!(l.positives.iter().all(|i| block_of.contains_key(i)), "datadep left the function");
                    // The defining instruction (none for arguments) is a dependency.
                    for &d in &p.dpred[v as usize] {
                        assert!(l.positives.contains(&d), "{}: datadep from {v} misses its definition {d}", file.label);
                    }
                    vars += 1;
                }
                functions += 1;
            }
            // Root sampling on real graphs.
            let want = g.node_count().div_ceil(10).min(10);
            for task in Task::ALL {
                let eligible = a.eligible_roots(task);
                let roots = a.sampled_roots(task, 7);
                assert_eq!(roots.len(), want.min(eligible.len()), "{}: {task} roots", file.label);
                assert!(roots.iter().all(|r| eligible.binary_search(r).is_ok()), "{}: {task} roots not eligible", file.label);
                assert_eq!(roots, Analyzer::new(g).sampled_roots(task, 7), "{}: {task} sampling not deterministic", file.label);
                sampled += roots.len();
            }
        });
    }
    eprintln!(
        "reachability/datadep on real files: {functions} functions, {reach_roots} reachability roots, {vars} datadep roots; \
         {sampled} sampled roots"
    );
    assert!(functions >= 20 && vars > 0);
}

/// Subexpressions on real IR: every class is one opcode over one operand
/// list (sorted for the commutative ones) with one predicate / result type,
/// and instructions of one function with identical right-hand sides share a
/// class.
#[test]
fn real_subexpressions_sanity() {
    let (mut classes_seen, mut shared) = (0usize, 0usize);
    for file in real_files() {
        with_real_graph(file, |g, _| {
            let p = Plain::new(g);
            let mut a = Analyzer::new(g);
            let operands = |i: u32| -> Vec<u32> {
                let mut v: Vec<(u32, u32)> = g
                    .graph
                    .edges_directed(ix(i), petgraph::Direction::Incoming)
                    .filter(|e| e.weight().flow == Flow::Data)
                    .map(|e| (e.weight().position, e.source().index() as u32))
                    .collect();
                v.sort_unstable();
                v.into_iter().map(|(_, s)| s).collect()
            };
            let rhs = |i: u32| -> String {
                let t = g.graph[ix(i)].full_text.clone().unwrap_or_default();
                let t = t.split_once(" = ").map_or(t.clone(), |(_, r)| r.to_string());
                t.split(", !").next().unwrap().to_string()
            };
            let mut done: HashSet<u32> = HashSet::new();
            let mut by_rhs: HashMap<(Option<u32>, String), u32> = HashMap::new();
            for i in p.instructions() {
                let l = a.analyze(Task::Subexpressions, i).unwrap();
                assert_eq!(l.steps, 2);
                let text = &g.graph[ix(i)].text;
                if l.positives.is_empty() {
                    continue;
                }
                assert!(l.positives.contains(&i), "{}: {i} `{text}` not in its own class", file.label);
                let pure = !["load", "store", "call", "phi", "alloca", "br", "ret", "switch", "invoke", "freeze", "va_arg"]
                    .contains(&text.as_str());
                assert!(pure, "{}: impure `{text}` has an expression class", file.label);
                // Identical right-hand sides within a function → one class.
                let first = *by_rhs.entry((p.function[i as usize], rhs(i))).or_insert(i);
                assert!(
                    l.positives.contains(&first),
                    "{}: `{}` and `{}` not in one class",
                    file.label,
                    g.graph[ix(i)].full_text.as_deref().unwrap(),
                    g.graph[ix(first)].full_text.as_deref().unwrap()
                );
                if !done.insert(l.positives[0]) {
                    continue;
                }
                classes_seen += 1;
                shared += (l.positives.len() > 1) as usize;
                let commutative = ["add", "fadd", "mul", "fmul", "and", "or", "xor"].contains(&text.as_str());
                let norm = |j: u32| {
                    let mut o = operands(j);
                    if commutative {
                        o.sort_unstable();
                    }
                    let words: Vec<String> = rhs(j).split_whitespace().map(str::to_string).collect();
                    let detail = match text.as_str() {
                        "icmp" => words.get(1).cloned(),
                        "fcmp" => words
                            .iter()
                            .skip(1)
                            .find(|w| !["fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc"].contains(&w.as_str()))
                            .cloned(),
                        _ if rhs(j).contains(" to ") && !text.starts_with("getelementptr") => {
                            rhs(j).rsplit_once(" to ").map(|(_, t)| t.to_string())
                        }
                        _ => None,
                    };
                    (g.graph[ix(j)].text.clone(), o, detail)
                };
                let want = norm(i);
                for &j in &l.positives {
                    assert_eq!(
                        norm(j),
                        want,
                        "{}: `{}` and `{}` share a class",
                        file.label,
                        g.graph[ix(i)].full_text.as_deref().unwrap(),
                        g.graph[ix(j)].full_text.as_deref().unwrap()
                    );
                }
            }
            let eligible = a.eligible_roots(Task::Subexpressions);
            for r in eligible {
                assert!(a.analyze(Task::Subexpressions, r).unwrap().positives.len() > 1);
            }
        });
    }
    eprintln!("subexpressions on real files: {classes_seen} classes, {shared} shared by two or more instructions");
    assert!(shared > 0);
}

/// Subexpressions' lookalikes: instructions that differ from the root's
/// expression only where the graph shows nothing (an `icmp`'s predicate, a
/// `getelementptr`'s source element type) are counted as lookalikes, not
/// positives; a cast's result type shows (its result node's text), so a
/// cast to another type is neither; the same expression twice is two
/// positives per root. (Every result is used: an unused one has no
/// variable node, which the graph shows.)
#[test]
fn subexpression_lookalikes_are_what_the_graph_cannot_tell_apart() {
    let ir = r#"
%struct.A = type { i32, i32 }
%struct.B = type { i64, i64 }

define i32 @f(i32 %a, i32 %b, ptr %p) {
  %eq1 = icmp eq i32 %a, %b
  %eq2 = icmp eq i32 %a, %b
  %lt = icmp slt i32 %a, %b
  %ga = getelementptr inbounds %struct.A, ptr %p, i64 0, i32 1
  %gb = getelementptr inbounds %struct.B, ptr %p, i64 0, i32 1
  %w1 = zext i32 %a to i64
  %w2 = zext i32 %a to i128
  %s1 = select i1 %eq1, i32 %a, i32 %b
  %s2 = select i1 %eq2, i32 %a, i32 %b
  %x = add i32 %s1, %s2
  call void @use(i1 %lt, ptr %ga, ptr %gb, i64 %w1, i128 %w2)
  ret i32 %x
}

declare void @use(i1, ptr, ptr, i64, i128)
"#;
    let dir = tempfile::tempdir().unwrap();
    let ll = dir.path().join("lookalikes.ll");
    std::fs::write(&ll, ir).unwrap();
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, &ll).unwrap_or_else(|e| panic!("{e}"));
    let g = programl::builder::build(&module, &programl::builder::BuildOptions::default());
    let node = |name: &str| {
        let at = format!("%{name} = ");
        g.graph.node_indices().find(|&i| g.graph[i].full_text.as_deref().is_some_and(|t| t.starts_with(&at))).unwrap().index() as u32
    };
    let a = Analyzer::new(&g);
    // eq1: itself and eq2 are positives, slt a lookalike (predicate unseen).
    assert_eq!(a.subexpression_lookalikes(&[node("eq1")]), (2, 1));
    assert_eq!(a.subexpression_lookalikes(&[node("lt")]), (1, 2));
    // The two getelementptrs differ only in their source element type.
    assert_eq!(a.subexpression_lookalikes(&[node("ga")]), (1, 1));
    // Casts to i64 and i128 differ in their result node's text.
    assert_eq!(a.subexpression_lookalikes(&[node("w1")]), (1, 0));
    // s1 and s2 read different compares: neither a positive nor alike.
    assert_eq!(a.subexpression_lookalikes(&[node("s1")]), (1, 0));
    // Sums over roots; a non-pure root (the add is pure; ret is not) adds nothing.
    assert_eq!(a.subexpression_lookalikes(&[node("eq1"), node("ga"), node("w1")]), (4, 2));
}
