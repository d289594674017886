//! `programl analyze`: run one DeepDataFlow analysis on one IR file.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use serde::Serialize;

use programl::analysis::{Analyzer, Task};
use programl::builder::{build_file, BuildOptions};

#[derive(Args)]
pub struct AnalyzeArgs {
    /// reachability, dominance, datadep, liveness or subexpressions.
    #[arg(long, value_parser = parse_task)]
    task: Task,
    /// Root node id in the graph the models see (`programl graph`'s, with
    /// debug intrinsics left out: the same ids on IR built without `-g`);
    /// default: the sampled roots that `programl dataset build` labels.
    #[arg(long)]
    root: Option<u32>,
    /// Seed of the root sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Subexpressions only: instead of the labels, one line counting the
    /// roots' positives and their lookalikes, the instructions no model
    /// reading the graph can tell from a positive (its precision's bound).
    #[arg(long)]
    lookalikes: bool,
    file: PathBuf,
}

fn parse_task(s: &str) -> Result<Task, String> {
    Task::parse(s)
        .ok_or_else(|| format!("unknown task '{s}' (expected {})", Task::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")))
}

#[derive(Serialize)]
struct Line<'a> {
    task: &'a str,
    root: u32,
    steps: u32,
    positives: &'a [u32],
}

pub fn run(args: &AnalyzeArgs) -> Result<bool> {
    // An input that does not read is a failed input (exit 1), as for
    // `graph` and `convert`; 2 is for a command that cannot run at all.
    let graph = match build_file(&args.file, &BuildOptions::MODEL) {
        Ok(graph) => graph,
        Err(e) => {
            eprintln!("programl: {}", crate::message(&e.into()));
            return Ok(false);
        }
    };
    let mut analyzer = Analyzer::new(&graph);
    let roots = match args.root {
        Some(r) => vec![r],
        None => analyzer.sampled_roots(args.task, args.seed),
    };
    let mut out = crate::stdout();
    if args.lookalikes {
        if args.task != Task::Subexpressions {
            anyhow::bail!("--lookalikes is for --task subexpressions, not {}", args.task.name());
        }
        // A --root is checked as without --lookalikes (one not in the
        // graph, or not a subexpressions root, is an error naming why).
        if let Some(root) = args.root {
            analyzer.analyze(args.task, root).with_context(|| format!("{}", args.file.display()))?;
        }
        let (positives, lookalikes) = analyzer.subexpression_lookalikes(&roots);
        let line = serde_json::json!({
            "file": args.file.display().to_string(),
            "roots": roots.len(),
            "positives": positives,
            "lookalikes": lookalikes,
        });
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
        return Ok(true);
    }
    for root in roots {
        let labels = analyzer.analyze(args.task, root).with_context(|| format!("{}", args.file.display()))?;
        let line = Line { task: args.task.name(), root, steps: labels.steps, positives: &labels.positives };
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(true)
}
