//! Examples in memory: graphs encoded once by the core's input pipeline
//! ([`GraphInput`]), each example a root, its positives and its step count.
//! From a dataset store, or from a directory of IR files labelled on the fly.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use programl::analysis::{Analyzer, Task};
use programl::batch::{Batch, EdgeType, GraphInput, Sample};
use programl::builder::{build, BuildOptions};
use programl::graph::NodeKind;
use programl::hash::Fnv1a;
use programl::vocab::{Vocabulary, UNKNOWN_ID};
use programl_dataset::{Dataset, Split, Subset};
use rayon::prelude::*;

/// One graph: its model input and the nodes that carry a label for the task.
pub struct Graph {
    pub input: GraphInput,
    /// Labelled node ids, ascending: the task's node kind (variables for
    /// liveness, instructions otherwise), never `[external]` nor a
    /// `; undefined function` placeholder.
    pub labelled: Vec<u32>,
}

/// One example.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// Index into [`Examples::graphs`].
    pub graph: u32,
    pub root: u32,
    pub steps: u32,
    /// Positive node ids, ascending.
    pub positives: Vec<u32>,
}

/// Examples of one task, with their graphs.
#[derive(Default)]
pub struct Examples {
    pub graphs: Vec<Graph>,
    pub examples: Vec<Example>,
    /// Nodes of the graphs whose text has a vocabulary id, and all nodes.
    pub known_nodes: u64,
    pub all_nodes: u64,
}

pub use programl::analysis::labelled_nodes;

impl Examples {
    /// The examples of `task` in `split` and `subset` of a dataset store,
    /// graphs in the order of their records' paths: the shard order of a
    /// store depends on its build's scheduling, and this order (and with it
    /// the training order and [`Examples::fingerprint`]) must not, so that a
    /// rebuilt store on another machine resumes the same run.
    pub fn from_dataset(dataset: &Dataset, task: Task, split: Split, subset: Subset, vocab: &Vocabulary) -> Result<Examples> {
        let mut loaded: Vec<(String, Graph, Vec<Example>)> = Vec::new();
        for record in dataset.records_in(split) {
            let record = record?;
            let chosen: Vec<Example> = record
                .examples(task)
                .iter()
                .filter(|e| subset.contains(e.steps))
                .map(|e| Example { graph: 0, root: e.root, steps: e.steps, positives: e.positives.clone() })
                .collect();
            if chosen.is_empty() {
                continue;
            }
            let g = &record.graph;
            let input = g.model_input(vocab).with_context(|| format!("{}: not model input", record.path))?;
            let labelled = g.labelled(task);
            loaded.push((record.path.clone(), Graph { labelled, input }, chosen));
        }
        loaded.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = loaded.windows(2).find(|w| w[0].0 == w[1].0) {
            bail!("{}: the store holds {} twice", dataset.dir().display(), w[0].0);
        }
        let mut out = Examples::default();
        for (_, graph, examples) in loaded {
            let index = out.graphs.len() as u32;
            out.examples.extend(examples.into_iter().map(|e| Example { graph: index, ..e }));
            out.add_graph(graph);
        }
        Ok(out)
    }

    /// A 64-bit FNV-1a fingerprint of everything a model sees of these
    /// examples: every graph's tokens, edges and labelled nodes, and every
    /// example's root, step count and positives, in order. Two stores built
    /// from the same IR (on any machine, in any shard order) give the same
    /// value.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv1a::default();
        let ints = |h: &mut Fnv1a, xs: &mut dyn Iterator<Item = i64>| {
            let mut n = 0u64;
            for x in xs {
                h.write(&x.to_le_bytes());
                n += 1;
            }
            h.write(&n.to_le_bytes());
        };
        for g in &self.graphs {
            ints(&mut h, &mut g.input.tokens().iter().copied());
            for t in EdgeType::ALL.into_iter().filter(|t| !t.is_backward()) {
                let e = g.input.edges(t);
                ints(&mut h, &mut e.sources.iter().copied());
                ints(&mut h, &mut e.targets.iter().copied());
                ints(&mut h, &mut e.positions.iter().copied());
            }
            ints(&mut h, &mut g.labelled.iter().map(|&x| i64::from(x)));
        }
        for e in &self.examples {
            ints(&mut h, &mut [i64::from(e.graph), i64::from(e.root), i64::from(e.steps)].into_iter());
            ints(&mut h, &mut e.positives.iter().map(|&x| i64::from(x)));
        }
        h.finish()
    }

    /// Graphs and labels computed on the fly from the `.ll`/`.bc` files under
    /// `dir` (or one file), roots sampled by the dataset's rule with `seed`;
    /// only examples in `subset`. Files that fail to load are reported and
    /// skipped.
    pub fn from_ir(path: &Path, task: Task, subset: Subset, vocab: &Vocabulary, seed: u64) -> Result<Examples> {
        let files: Vec<PathBuf> = if path.is_dir() {
            programl::ir::find_ir_files(path).with_context(|| format!("{}: cannot list IR files", path.display()))?
        } else {
            vec![path.to_path_buf()]
        };
        if files.is_empty() {
            bail!("{}: no .ll or .bc files", path.display());
        }
        let labelled: Vec<Result<Option<(Graph, Vec<Example>)>, String>> = files
            .par_iter()
            .map(|file| {
                let context = inkwell::context::Context::create();
                let module = programl::ir::load_module(&context, file).map_err(|e| e.to_string())?;
                let graph = build(&module, &BuildOptions::MODEL);
                let mut analyzer = Analyzer::new(&graph);
                let mut examples = Vec::new();
                for root in analyzer.sampled_roots(task, seed) {
                    let labels = analyzer.analyze(task, root).map_err(|e| format!("{}: {e}", file.display()))?;
                    if subset.contains(labels.steps) {
                        examples.push(Example { graph: 0, root, steps: labels.steps, positives: labels.positives });
                    }
                }
                if examples.is_empty() {
                    return Ok(None);
                }
                let kinds: Vec<NodeKind> = graph.graph.node_weights().map(|n| n.kind).collect();
                let g = Graph {
                    labelled: labelled_nodes(task, &kinds, graph.graph.node_weights().map(|n| n.text.as_str())),
                    input: GraphInput::new(&graph, vocab).map_err(|e| format!("{}: {e}", file.display()))?,
                };
                Ok(Some((g, examples)))
            })
            .collect();
        let mut out = Examples::default();
        for r in labelled {
            match r {
                Err(e) => eprintln!("warning: {e}; skipped"),
                Ok(None) => {}
                Ok(Some((g, examples))) => {
                    let index = out.graphs.len() as u32;
                    out.examples.extend(examples.into_iter().map(|e| Example { graph: index, ..e }));
                    out.add_graph(g);
                }
            }
        }
        Ok(out)
    }

    fn add_graph(&mut self, g: Graph) {
        self.all_nodes += g.input.node_count() as u64;
        self.known_nodes += g.input.tokens().iter().filter(|&&t| t != i64::from(UNKNOWN_ID)).count() as u64;
        self.graphs.push(g);
    }

    /// Nodes of example `i`'s graph.
    pub fn size(&self, i: usize) -> usize {
        self.graphs[self.examples[i].graph as usize].input.node_count()
    }

    /// The batch of examples `ids`, in order, labelled.
    pub fn batch(&self, ids: &[usize]) -> Batch {
        let samples: Vec<Sample<'_>> = ids
            .iter()
            .map(|&i| {
                let e = &self.examples[i];
                Sample { graph: &self.graphs[e.graph as usize].input, root: Some(e.root), positives: Some(&e.positives) }
            })
            .collect();
        Batch::from_samples(&samples).expect("examples index their own graphs")
    }

    /// 1 for each node of [`Examples::batch`]`(ids)` that carries the
    /// task's label ([`Graph::labelled`]), 0 for the rest, in the batch's
    /// node order: `train --loss-nodes labelled`'s loss weights.
    pub fn labelled_mask(&self, ids: &[usize]) -> Vec<f32> {
        let mut mask = Vec::new();
        for &i in ids {
            let graph = &self.graphs[self.examples[i].graph as usize];
            let start = mask.len();
            mask.resize(start + graph.input.node_count(), 0.0);
            for &v in &graph.labelled {
                mask[start + v as usize] = 1.0;
            }
        }
        mask
    }

    /// The instructions of example `i`'s graph that read one of its root's
    /// operands (a data edge from a node with a data edge into the root),
    /// the root and its positives excluded: the negatives that look most
    /// like positives to a model that marks the root's operands.
    pub fn near_negatives(&self, i: usize) -> Vec<u32> {
        let e = &self.examples[i];
        let data = self.graphs[e.graph as usize].input.edges(EdgeType::Data);
        let n = self.graphs[e.graph as usize].input.node_count();
        let mut operand = vec![false; n];
        for (&s, &t) in data.sources.iter().zip(data.targets) {
            if t == i64::from(e.root) {
                operand[s as usize] = true;
            }
        }
        let mut near = vec![false; n];
        for (&s, &t) in data.sources.iter().zip(data.targets) {
            if operand[s as usize] {
                near[t as usize] = true;
            }
        }
        near[e.root as usize] = false;
        for &p in &e.positives {
            near[p as usize] = false;
        }
        (0..n as u32).filter(|&v| near[v as usize]).collect()
    }

    /// [`Examples::labelled_mask`] (or 1 for every node when not
    /// `labelled_only`) with each example's [`Examples::near_negatives`]
    /// weighted `near`: `train --near-weight`'s loss weights.
    pub fn near_weighted_mask(&self, ids: &[usize], labelled_only: bool, near: f32) -> Vec<f32> {
        let mut mask = if labelled_only { self.labelled_mask(ids) } else { vec![1.0; ids.iter().map(|&i| self.size(i)).sum()] };
        let mut start = 0;
        for &i in ids {
            for v in self.near_negatives(i) {
                mask[start + v as usize] *= near;
            }
            start += self.size(i);
        }
        mask
    }

    /// The fraction of the graphs' nodes whose text is in the vocabulary.
    pub fn vocab_coverage(&self) -> f64 {
        if self.all_nodes == 0 {
            1.0
        } else {
            self.known_nodes as f64 / self.all_nodes as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use programl::graph::{Edge, Flow};
    use programl::vocab::Counts;

    /// Two GEPs and a load reading the root GEP's base pointer, an add
    /// reading none of its operands: the look-alikes are the readers of
    /// the root's operands, less the root and its positives.
    #[test]
    fn near_negatives_read_the_roots_operands() {
        let texts = ["getelementptr", "getelementptr", "load", "add", "ptr", "i64", "i32"];
        let mut counts = Counts::default();
        for t in texts {
            *counts.texts.entry(t.to_string()).or_default() += 1;
            counts.total += 1;
        }
        let vocab = Vocabulary::from_counts(&counts, 1, None);
        let d = |position| Edge { flow: Flow::Data, position };
        // 4 (ptr) and 5 (i64) feed the root 0; 4 feeds 1 and 2; 6 feeds 3.
        let edges = [(4, 0, d(0)), (5, 0, d(1)), (4, 1, d(0)), (6, 1, d(1)), (4, 2, d(0)), (6, 3, d(0)), (0, 3, d(1))];
        let input = GraphInput::from_parts(texts, edges, &vocab).unwrap();
        let mut examples = Examples::default();
        examples.add_graph(Graph { input, labelled: vec![0, 1, 2, 3] });
        examples.examples.push(Example { graph: 0, root: 0, steps: 2, positives: vec![0, 2] });
        assert_eq!(examples.near_negatives(0), vec![1], "1 reads the root's pointer; 2 is a positive; 3 reads none of its operands");
        let both = examples.near_weighted_mask(&[0, 0], false, 5.0);
        assert_eq!(both, [[1.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0]; 2].concat());
        let labelled = examples.near_weighted_mask(&[0], true, 5.0);
        assert_eq!(labelled, [1.0, 5.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    }
}
