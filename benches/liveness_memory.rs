//! Peak memory and time of the analyses on one very large function.
//!
//! ```text
//! cargo bench --bench liveness_memory                  # 200,000 instructions
//! PROGRAML_BENCH_INSTRUCTIONS=50000 cargo bench --bench liveness_memory
//! ```
//!
//! Builds a synthetic default-mode graph of one function shaped like
//! compiled code: basic blocks of 2–12 instructions, forward branches,
//! properly nested loops (up to six deep), every use dominated by its
//! definition: each instruction defines a value used by one to three later
//! instructions of its block, and a 256-instruction entry block's values and
//! 64 arguments are read throughout (one instruction in four). Then, as `programl dataset build` does for one graph and
//! one task: the eligible liveness roots (a sweep over the whole function),
//! ten sampled roots and their labels (a second sweep). Peak resident
//! memory is read from /proc/self/status (VmHWM), reset after the graph is
//! built (`/proc/self/clear_refs`), so the figure is the analysis's own.
//! For comparison it prints what two dense bitsets per instruction over the
//! function's variables (the previous implementation) would take.

use std::time::Instant;

use petgraph::graph::NodeIndex;
use programl::analysis::{Analyzer, Task};
use programl::graph::{Flow, Function, Module, Node, NodeKind, ProgramGraph};

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        programl::hash::mix(self.0)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn synthetic(instructions: usize, seed: u64) -> ProgramGraph {
    let mut rng = Rng(seed);
    let mut g = ProgramGraph::new();
    g.modules.push(Module { name: "synthetic".to_string(), ..Module::default() });
    g.functions.push(Function { name: "huge".to_string(), module: 0, entry: None });
    let node = |g: &mut ProgramGraph, kind: NodeKind, text: &str, full: String| {
        g.add_node(Node { kind, text: text.to_string(), full_text: Some(full), function: Some(0), block: 0 }).index() as u32
    };
    let args: Vec<u32> = (0..64).map(|a| node(&mut g, NodeKind::Variable, "i64", format!("i64 %arg{a}"))).collect();
    let mut insts = Vec::with_capacity(instructions);
    let mut block_starts = Vec::new();
    let mut i = 0;
    while i < instructions {
        block_starts.push(insts.len());
        // The entry block holds 256 instructions (an -O0 entry's allocas).
        let len = if i == 0 { 256 } else { 2 + rng.below(11) as usize }.min(instructions - i);
        for _ in 0..len {
            insts.push(node(&mut g, NodeKind::Instruction, "add", format!("%v{i} = add i64 %a, %b")));
            i += 1;
        }
    }
    g.functions[0].entry = Some(insts[0]);
    let ix = |n: u32| NodeIndex::new(n as usize);
    // Structured control flow, as compilers emit it: fall through within a
    // block and to the next block; properly nested loops (a back edge from
    // a loop's last block to its header, closing the innermost open loop);
    // forward branches over one to three blocks (if/else, early exits)
    // that never leave the innermost loop.
    let mut open: Vec<usize> = Vec::new(); // headers of the open loops
    let nb = block_starts.len();
    for (b, &start) in block_starts.iter().enumerate() {
        let end = block_starts.get(b + 1).copied().unwrap_or(insts.len());
        for k in start..end - 1 {
            g.add_edge(Flow::Control, 0, ix(insts[k]), ix(insts[k + 1]));
        }
        if b > 0 && open.len() < 6 && rng.below(10) == 0 {
            open.push(b);
        }
        let last = insts[end - 1];
        let mut pos = 0;
        if b + 1 < nb {
            g.add_edge(Flow::Control, pos, ix(last), ix(insts[block_starts[b + 1]]));
            pos += 1;
        }
        let closes = open.last().is_some_and(|&h| b > h && (rng.below(8) == 0 || b + 1 == nb));
        if closes {
            let header = open.pop().unwrap();
            g.add_edge(Flow::Control, pos, ix(last), ix(insts[block_starts[header]]));
        } else if b + 4 < nb && rng.below(4) == 0 {
            g.add_edge(Flow::Control, pos, ix(last), ix(insts[block_starts[b + 2 + rng.below(3) as usize]]));
        }
    }
    // Values, every use dominated by its definition (SSA): each
    // instruction defines one, used by one to three later instructions of
    // its block; the entry block's values and the arguments are used
    // anywhere.
    let block_of_end: Vec<usize> = {
        let mut ends = vec![0; insts.len()];
        for (b, &start) in block_starts.iter().enumerate() {
            let end = block_starts.get(b + 1).copied().unwrap_or(insts.len());
            ends[start..end].fill(end);
        }
        ends
    };
    let entry_end = block_of_end[0];
    let mut operands = vec![0u32; insts.len()];
    let mut values = Vec::with_capacity(insts.len());
    for k in 0..insts.len() {
        let v = node(&mut g, NodeKind::Variable, "i64", format!("i64 %v{k}"));
        g.add_edge(Flow::Data, 0, ix(insts[k]), ix(v));
        values.push(v);
        for _ in 0..1 + rng.below(3) {
            let user = k + 1 + rng.below(8) as usize;
            if user < block_of_end[k] {
                g.add_edge(Flow::Data, operands[user], ix(v), ix(insts[user]));
                operands[user] += 1;
            }
        }
    }
    for k in entry_end..insts.len() {
        let value = match rng.below(8) {
            0 => Some(values[rng.below(entry_end as u64) as usize]),
            1 => Some(args[rng.below(args.len() as u64) as usize]),
            _ => None,
        };
        if let Some(value) = value {
            g.add_edge(Flow::Data, operands[k], ix(value), ix(insts[k]));
            operands[k] += 1;
        }
    }
    g
}

fn main() {
    let n: usize = std::env::var("PROGRAML_BENCH_INSTRUCTIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let t = Instant::now();
    let g = synthetic(n, 1);
    if let Err(e) = g.validate() {
        panic!("synthetic graph is invalid: {:?}", &e[..e.len().min(5)]);
    }
    let [inst, var, cons, _] = g.node_counts();
    println!(
        "graph: 1 function, {inst} instructions, {var} variables, {cons} constants, {} edges (built in {:.1} s)",
        g.edge_count(),
        t.elapsed().as_secs_f64()
    );
    let rss_graph = status_kib("VmRSS:");
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    println!("resident after building the graph: {:.0} MiB", mib(rss_graph));

    let t = Instant::now();
    let mut analyzer = Analyzer::new(&g);
    let eligible = analyzer.eligible_roots(Task::Liveness);
    let t_eligible = t.elapsed();
    let roots = analyzer.sampled_roots(Task::Liveness, 0);
    let mut steps = Vec::new();
    let mut positives = 0;
    for &r in &roots {
        let l = analyzer.analyze(Task::Liveness, r).expect("liveness");
        steps.push(l.steps);
        positives += l.positives.len();
    }
    let t_all = t.elapsed();
    let peak = status_kib("VmHWM:");
    println!(
        "liveness: {} eligible roots in {:.2} s; {} sampled roots labelled (steps {:?}, {} live-out values) in {:.2} s total",
        eligible.len(),
        t_eligible.as_secs_f64(),
        roots.len(),
        steps,
        positives,
        t_all.as_secs_f64()
    );
    if reset {
        println!(
            "peak resident during the analysis: {:.0} MiB, i.e. {:.0} MiB above the graph alone",
            mib(peak),
            mib(peak.saturating_sub(rss_graph))
        );
    } else {
        println!("peak resident (process, /proc/self/clear_refs not writable): {:.0} MiB", mib(peak));
    }
    let dense = 2.0 * inst as f64 * (var as f64) / 8.0 / (1u64 << 30) as f64;
    println!("two dense bitsets per instruction over {var} variables would take {dense:.1} GiB");
}
