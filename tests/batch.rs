//! The model input (src/batch.rs) on real graphs: the IR under tests/data
//! and tests/analysis, and the C programs of tests/analysis and
//! tests/data/conformance compiled by clang at -O0 and -O1. Labels come from
//! the DeepDataFlow analyses, the vocabulary from the first half of the graphs
//! (so the others have unknown texts).
//!
//! Every check rebuilds what the arrays claim from the graphs themselves:
//! edges as multisets of (flow, source, target, position), texts through
//! `Vocabulary::text`, roots and positives as node sets.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use petgraph::visit::EdgeRef;
use programl::analysis::{Analyzer, Task};
use programl::batch::{permutation, plan, Batch, Batcher, EdgeType, GraphInput, InputError, Sample};
use programl::builder::{build_file, BuildOptions};
use programl::graph::{Edge, Flow, ProgramGraph};
use programl::vocab::{Counts, Vocabulary, UNKNOWN_ID};

/// One real graph with a few labelled examples.
struct Real {
    name: String,
    graph: ProgramGraph,
    /// (root, positives) of reachability and datadep examples.
    examples: Vec<(u32, Vec<u32>)>,
}

fn reals() -> &'static [Real] {
    static REALS: OnceLock<Vec<Real>> = OnceLock::new();
    REALS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = tempfile::tempdir().unwrap();
        let mut files: Vec<PathBuf> = Vec::new();
        for sub in ["tests/data", "tests/analysis", "tests/data/conformance"] {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(sub)).unwrap().flatten().map(|e| e.path()).collect();
            entries.sort();
            for p in entries {
                match p.extension().and_then(|x| x.to_str()) {
                    Some("ll") => files.push(p),
                    Some("c") => {
                        for opt in ["-O0", "-O1"] {
                            let out = dir.path().join(format!("{}{opt}.ll", p.file_stem().unwrap().to_string_lossy()));
                            let clang = Path::new(programl::LLVM_BINDIR).join("clang");
                            let status = Command::new(&clang).args(["-S", "-emit-llvm", "-w", opt]).arg(&p).arg("-o").arg(&out).status();
                            assert!(status.is_ok_and(|s| s.success()), "{} failed on {}", clang.display(), p.display());
                            files.push(out);
                        }
                    }
                    _ => {}
                }
            }
        }
        let reals: Vec<Real> = files
            .iter()
            .map(|f| {
                let graph = build_file(f, &BuildOptions::default()).unwrap_or_else(|e| panic!("{e}"));
                let mut analyzer = Analyzer::new(&graph);
                let mut examples = Vec::new();
                for task in [Task::Reachability, Task::DataDep] {
                    for r in analyzer.sampled_roots(task, 1) {
                        examples.push((r, analyzer.analyze(task, r).unwrap().positives));
                    }
                }
                Real { name: f.file_name().unwrap().to_string_lossy().into_owned(), graph, examples }
            })
            .collect();
        assert!(reals.len() >= 15, "only {} real graphs", reals.len());
        reals
    })
}

/// The vocabulary of the first half of the graphs (tests/data and most of
/// tests/analysis), and the texts it was built from.
fn vocabulary() -> &'static (Vocabulary, HashSet<String>) {
    static VOCAB: OnceLock<(Vocabulary, HashSet<String>)> = OnceLock::new();
    VOCAB.get_or_init(|| {
        let mut counts = Counts::default();
        for r in &reals()[..reals().len() / 2] {
            for n in r.graph.graph.node_weights() {
                *counts.texts.entry(n.text.clone()).or_default() += 1;
                counts.total += 1;
            }
        }
        let texts = counts.texts.keys().cloned().collect();
        (Vocabulary::from_counts(&counts, 1, None), texts)
    })
}

fn inputs() -> &'static [GraphInput] {
    static INPUTS: OnceLock<Vec<GraphInput>> = OnceLock::new();
    INPUTS.get_or_init(|| reals().iter().map(|r| GraphInput::new(&r.graph, &vocabulary().0).unwrap()).collect())
}

type EdgeKey = (Flow, i64, i64, i64);

/// The graph's edges as (flow, source, target, position), in edge order.
fn graph_edges(g: &ProgramGraph) -> Vec<EdgeKey> {
    g.graph
        .edge_references()
        .map(|e| (e.weight().flow, e.source().index() as i64, e.target().index() as i64, i64::from(e.weight().position)))
        .collect()
}

/// The forward edges of `g` as (flow, source, target, position), type by
/// type; each backward type checked to be its forward type reversed.
fn input_edges(g: &GraphInput) -> Vec<EdgeKey> {
    let mut out = Vec::new();
    for t in &EdgeType::ALL[..3] {
        let (f, b) = (g.edges(*t), g.edges(EdgeType::ALL[*t as usize + 3]));
        assert_eq!(
            (b.sources, b.targets, b.positions),
            (f.targets, f.sources, f.positions),
            "backward {} is not forward reversed",
            t.name()
        );
        assert!(f.sources.len() == f.len() && f.targets.len() == f.len());
        out.extend((0..f.len()).map(|k| (t.flow(), f.sources[k], f.targets[k], f.positions[k])));
    }
    out
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// Samples of every real graph, in graph order: one per example (its
/// positives only if `labelled`), plus a rootless one for each graph when
/// unlabelled, or when labelled and the graph has no example.
fn samples(labelled: bool) -> Vec<(usize, Sample<'static>)> {
    let mut out = Vec::new();
    for (i, (r, input)) in reals().iter().zip(inputs()).enumerate() {
        for (root, positives) in &r.examples {
            out.push((i, Sample { graph: input, root: Some(*root), positives: labelled.then_some(positives.as_slice()) }));
        }
        if r.examples.is_empty() || !labelled {
            out.push((i, Sample { graph: input, root: None, positives: labelled.then_some(&[][..]) }));
        }
    }
    out
}

#[test]
fn arrays_round_trip_to_the_graph() {
    let (vocab, known) = vocabulary();
    let (mut unknown, mut total) = (0, 0);
    for (r, input) in reals().iter().zip(inputs()) {
        let g = &r.graph;
        assert_eq!(input.node_count(), g.node_count(), "{}", r.name);
        assert_eq!(input.edge_count(), g.edge_count(), "{}", r.name);
        // Texts: known ones map back, the others are exactly the unknown id.
        for (n, &token) in g.graph.node_weights().zip(input.tokens()) {
            total += 1;
            if known.contains(&n.text) {
                assert_eq!(vocab.text(token as u32), Some(n.text.as_str()), "{}: token {token}", r.name);
            } else {
                assert_eq!(token, i64::from(UNKNOWN_ID), "{}: {:?}", r.name, n.text);
                unknown += 1;
            }
        }
        // Edges: the same multiset, each flow in the graph's edge order.
        let got = input_edges(input);
        let want = graph_edges(g);
        assert_eq!(sorted(got.clone()), sorted(want.clone()), "{}", r.name);
        for flow in [Flow::Control, Flow::Data, Flow::Call] {
            let pick = |v: &[EdgeKey]| v.iter().filter(|e| e.0 == flow).copied().collect::<Vec<_>>();
            assert_eq!(pick(&got), pick(&want), "{}: {flow} edges out of order", r.name);
        }
    }
    eprintln!("{unknown} of {total} nodes have unknown texts");
    assert!(unknown > 0 && unknown < total / 2, "{unknown} unknown of {total}: the vocabulary does not exercise both cases");
    assert!(reals().iter().any(|r| r.graph.edge_counts()[Flow::Call as usize] > 0), "no call edges in the real graphs");
}

#[test]
fn from_parts_is_what_the_graph_gives() {
    // The dataset store's form: texts and raw edges, no ProgramGraph.
    let vocab = &vocabulary().0;
    for (r, input) in reals().iter().zip(inputs()) {
        let texts = r.graph.graph.node_weights().map(|n| n.text.as_str());
        let edges = r.graph.graph.raw_edges().iter().map(|e| (e.source().index() as u32, e.target().index() as u32, e.weight));
        assert_eq!(&GraphInput::from_parts(texts, edges, vocab).unwrap(), input, "{}", r.name);
    }
}

#[test]
fn batches_are_offset_unions_in_order() {
    let samples = samples(true);
    let sizes: Vec<usize> = samples.iter().map(|(_, s)| s.graph.node_count()).collect();
    let mut by_size = sizes.clone();
    by_size.sort();
    let max_nodes = by_size[by_size.len() * 3 / 4];
    // An exact fit joins the batch: the first two samples (the same small
    // graph) fill a limit of their sum, and the third starts the next batch.
    assert!(sizes[2] > 0);
    assert_eq!(plan(sizes.iter().copied(), sizes[0] + sizes[1])[0], 0..2);
    for order in [(0..samples.len()).collect::<Vec<_>>(), permutation(samples.len(), 3)] {
        let mut batcher = Batcher::new(max_nodes);
        let mut batches = Vec::new();
        for &i in &order {
            batches.extend(batcher.push(samples[i].1).unwrap());
        }
        batches.extend(batcher.finish());
        // The same packing as plan().
        let planned = plan(order.iter().map(|&i| sizes[i]), max_nodes);
        assert_eq!(batches.iter().map(Batch::graph_count).collect::<Vec<_>>(), planned.iter().map(|r| r.len()).collect::<Vec<_>>());
        assert!(batches.iter().any(|b| b.graph_count() >= 3), "no batch packs several graphs");
        assert!(batches.iter().any(|b| b.node_count() > max_nodes), "no graph exceeds the limit");

        let mut next = 0; // position in `order` of the batch's first graph
        for (k, b) in batches.iter().enumerate() {
            let n = b.graph_count();
            assert!(n > 0);
            assert!(b.node_count() <= max_nodes || n == 1, "batch {k}: {} nodes in {n} graphs", b.node_count());
            // Greedy: the next graph would not have fitted.
            if let Some(&i) = order.get(next + n) {
                assert!(b.node_count() + sizes[i] > max_nodes, "batch {k} closed early");
            }
            assert_eq!(b.offsets().len(), n + 1);
            assert_eq!(b.offsets()[0], 0);
            assert_eq!(*b.offsets().last().unwrap() as usize, b.node_count());
            let members = &order[next..next + n];
            assert_eq!(b.node_count(), members.iter().map(|&i| sizes[i]).sum::<usize>());
            for t in EdgeType::ALL {
                let want: usize = members.iter().map(|&i| samples[i].1.graph.edges(t).len()).sum();
                assert_eq!(b.edges(t).len(), want, "batch {k}: {} edge count", t.name());
            }
            for (g, &i) in members.iter().enumerate() {
                let alone = Batch::from_samples(&[samples[i].1]).unwrap();
                assert_eq!((alone.offsets(), alone.graph_count()), (&[0, sizes[i] as i64][..], 1));
                assert_eq!(alone.tokens(), samples[i].1.graph.tokens());
                assert!(EdgeType::ALL.iter().all(|&t| alone.edges(t) == samples[i].1.graph.edges(t)), "a batch of one is not its graph");
                assert_eq!(graph_of(b, g), graph_of(&alone, 0), "batch {k}, graph {g} (sample {i}, {})", reals()[samples[i].0].name);
            }
            next += n;
        }
        assert_eq!(next, order.len(), "graphs missing from the batches");
    }
}

/// One graph's arrays, node ids relative to its first node.
#[derive(Debug, PartialEq)]
struct GraphArrays {
    tokens: Vec<i64>,
    selector: Vec<i64>,
    labels: Option<Vec<i64>>,
    /// Sources, targets and positions of each edge type.
    edges: Vec<(Vec<i64>, Vec<i64>, Vec<i64>)>,
}

/// Graph `g` of `b` cut out and shifted back to start at node 0, checking
/// on the way its graph index, that no edge leaves it and that its edges
/// are contiguous in every type.
fn graph_of(b: &Batch, g: usize) -> GraphArrays {
    let nodes = b.graph_nodes(g);
    let start = nodes.start as i64;
    assert!(b.graph_index()[nodes.clone()].iter().all(|&x| x == g as i64), "graph_index of graph {g}");
    let edges = EdgeType::ALL
        .iter()
        .map(|&t| {
            let e = b.edges(t);
            let inside: Vec<usize> = (0..e.len()).filter(|&k| nodes.contains(&(e.sources[k] as usize))).collect();
            if let (Some(first), Some(last)) = (inside.first(), inside.last()) {
                assert_eq!(last - first + 1, inside.len(), "{} edges of graph {g} are not contiguous", t.name());
            }
            for &k in &inside {
                assert!(nodes.contains(&(e.targets[k] as usize)), "{} edge {k} leaves graph {g}", t.name());
            }
            let shift = |v: &[i64]| inside.iter().map(|&k| v[k] - start).collect::<Vec<_>>();
            (shift(e.sources), shift(e.targets), inside.iter().map(|&k| e.positions[k]).collect())
        })
        .collect();
    GraphArrays {
        tokens: b.tokens()[nodes.clone()].to_vec(),
        selector: b.selector()[nodes.clone()].to_vec(),
        labels: b.labels().map(|l| l[nodes].to_vec()),
        edges,
    }
}

#[test]
fn selector_and_labels_mark_root_and_positives() {
    for labelled in [true, false] {
        let samples = samples(labelled);
        assert!(samples.iter().any(|(_, s)| s.root.is_none()) || labelled);
        let b = Batch::from_samples(&samples.iter().map(|(_, s)| *s).collect::<Vec<_>>()).unwrap();
        assert_eq!(b.graph_count(), samples.len());
        assert_eq!(b.labels().is_some(), labelled);
        for (g, (i, s)) in samples.iter().enumerate() {
            let nodes = b.graph_nodes(g);
            let ones: Vec<u32> = b.selector()[nodes.clone()].iter().enumerate().filter(|(_, &x)| x != 0).map(|(n, _)| n as u32).collect();
            assert!(b.selector()[nodes.clone()].iter().all(|&x| x == 0 || x == 1));
            assert_eq!(ones, s.root.into_iter().collect::<Vec<_>>(), "{}: selector", reals()[*i].name);
            if let (Some(labels), Some(positives)) = (b.labels(), s.positives) {
                let got: HashSet<u32> = labels[nodes.clone()].iter().enumerate().filter(|(_, &x)| x == 1).map(|(n, _)| n as u32).collect();
                assert!(labels[nodes].iter().all(|&x| x == 0 || x == 1));
                assert_eq!(got, positives.iter().copied().collect::<HashSet<_>>(), "{}: labels", reals()[*i].name);
            }
        }
        if labelled {
            let positives = b.labels().unwrap().iter().filter(|&&x| x == 1).count();
            assert!(positives > 0 && positives < b.node_count(), "{positives} positive nodes of {}", b.node_count());
        }
    }
}

#[test]
fn shuffle_is_a_seeded_permutation() {
    for n in [0, 1, 2, 3, 10, 1000] {
        let p = permutation(n, 11);
        assert_eq!(sorted(p.clone()), (0..n).collect::<Vec<_>>());
        assert_eq!(p, permutation(n, 11));
    }
    let seeds: Vec<Vec<usize>> = (0..20).map(|s| permutation(1000, s)).collect();
    let distinct: HashSet<&Vec<usize>> = seeds.iter().collect();
    assert_eq!(distinct.len(), seeds.len(), "two seeds gave the same permutation");
    assert!(seeds.iter().all(|p| *p != (0..1000).collect::<Vec<_>>()));
    // Every element lands everywhere about equally often: n = 4, 24,000
    // seeds, 6,000 expected per (element, place).
    let mut hits = HashMap::new();
    for seed in 0..24_000 {
        for (place, e) in permutation(4, seed).into_iter().enumerate() {
            *hits.entry((e, place)).or_insert(0) += 1;
        }
    }
    assert_eq!(hits.len(), 16);
    assert!(hits.values().all(|&c| (5_700..6_300).contains(&c)), "{hits:?}");
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let vocab = &vocabulary().0;
    let r = &reals()[0];
    let mut typed = r.graph.clone();
    let e = typed.add_edge(Flow::Type, 0, ProgramGraph::external(), ProgramGraph::external());
    assert_eq!(GraphInput::new(&typed, vocab), Err(InputError::TypeEdge { edge: e.index() }));
    let nodes = r.graph.node_count();
    let out = GraphInput::from_parts(["a", "b"], [(0, 2, Edge { flow: Flow::Data, position: 0 })], vocab);
    assert_eq!(out, Err(InputError::EdgeOutOfRange { edge: 0, from: 0, to: 2, nodes: 2 }));

    let input = &inputs()[0];
    let good = Sample { graph: input, root: Some(0), positives: Some(&[1]) };
    let far = nodes as u32;
    let mut batcher = Batcher::new(usize::MAX);
    assert_eq!(batcher.push(good), Ok(None));
    let bad_positives = [0, far];
    for (bad, err) in [
        (Sample { root: Some(far), ..good }, InputError::RootOutOfRange { root: far, nodes }),
        (Sample { positives: Some(&bad_positives), ..good }, InputError::PositiveOutOfRange { node: far, nodes }),
        (Sample { positives: None, ..good }, InputError::MixedLabels),
    ] {
        assert_eq!(batcher.push(bad), Err(err.clone()));
        let mut b = Batch::from_samples(&[good]).unwrap();
        assert_eq!(b.push(bad), Err(err));
        assert_eq!(b, Batch::from_samples(&[good]).unwrap(), "a failed push changed the batch");
    }
    assert_eq!(batcher.finish(), Some(Batch::from_samples(&[good]).unwrap()), "a failed push changed the batcher");
    // Unlabelled samples are fine in their own batch.
    assert!(Batch::from_samples(&[Sample { positives: None, ..good }; 2]).unwrap().labels().is_none());
}
