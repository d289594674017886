//! One kernel's graph out of a module with several: the kernel and what it
//! calls (`ProgramGraph::call_closure`, `functions_subgraph`), the other
//! kernels left out, is the graph of the module compiled with that kernel
//! alone (same nodes and edges as multisets), for each kernel of a real
//! OpenCL file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use petgraph::visit::EdgeRef;
use programl::builder::{build_file, BuildOptions, Mode};
use programl::graph::ProgramGraph;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `source` compiled as OpenCL C for spir64 at -O1 (as device mapping
/// compiles kernels), with `-D` flags, into a graph.
fn compile(source: &Path, defines: &[&str]) -> ProgramGraph {
    let dir = tempfile::tempdir().unwrap();
    let ll = dir.path().join("k.ll");
    let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
    let status = Command::new(clang)
        .args(["-x", "cl", "-cl-std=CL1.2", "-Xclang", "-finclude-default-header", "-target", "spir64", "-O1", "-S", "-emit-llvm", "-w"])
        .args(defines)
        .arg(source)
        .arg("-o")
        .arg(&ll)
        .status()
        .unwrap();
    assert!(status.success(), "clang {}", source.display());
    build_file(&ll, &BuildOptions { mode: Mode::Paper, ..Default::default() }).unwrap()
}

/// `full_text` without the numbers of attribute groups (` #4`) and
/// metadata (`!12`): they depend on what else the module holds.
fn without_attribute_groups(text: &str) -> String {
    let text = attribute_groups_dropped(text);
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '!' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
            out.push('N');
        }
    }
    out
}

fn attribute_groups_dropped(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(" #") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 2..];
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            out.push_str(" #");
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// Nodes as (kind, text, full text, function name) and edges as (flow,
/// position, source's and target's node keys), counted.
type Multisets = (BTreeMap<String, usize>, BTreeMap<String, usize>);

fn multisets(g: &ProgramGraph) -> Multisets {
    let key = |i: usize| {
        let n = &g.graph[petgraph::graph::NodeIndex::new(i)];
        let f = n.function.map_or("-".to_string(), |f| g.functions[f as usize].name.clone());
        format!("{:?}|{}|{}|{}", n.kind, n.text, without_attribute_groups(n.full_text.as_deref().unwrap_or("")), f)
    };
    let mut nodes = BTreeMap::new();
    for i in 0..g.node_count() {
        *nodes.entry(key(i)).or_insert(0) += 1;
    }
    let mut edges = BTreeMap::new();
    for e in g.graph.edge_references() {
        let k = format!("{:?}|{}|{}|{}", e.weight().flow, e.weight().position, key(e.source().index()), key(e.target().index()));
        *edges.entry(k).or_insert(0) += 1;
    }
    (nodes, edges)
}

#[test]
fn a_kernels_subgraph_is_the_kernel_compiled_alone() {
    // The file with both kernels, and each kernel alone (the other one
    // left out by the preprocessor).
    let source = root().join("llvm-tests/Inputs/infer/two_kernels.cl");
    let both = compile(&source, &[]);
    let guarded = source.clone();
    let id = |g: &ProgramGraph, name: &str| g.functions.iter().position(|f| f.name == name).unwrap() as u32;
    let kernels = [id(&both, "saxpy"), id(&both, "squash")];
    for (name, other) in [("saxpy", "-DNO_SQUASH"), ("squash", "-DNO_SAXPY")] {
        let k = id(&both, name);
        let exclude: Vec<u32> = kernels.iter().copied().filter(|&x| x != k).collect();
        let closure = both.call_closure(k, &exclude);
        let sub = both.functions_subgraph(&closure);
        assert!(sub.validate().is_ok(), "{name}: {:?}", sub.validate());
        let alone = compile(&guarded, &[other]);
        // The lone kernel's module still defines the unused helper (a
        // definition clang keeps); the subgraph leaves it out.
        let called: std::collections::BTreeSet<u32> = alone
            .functions
            .iter()
            .enumerate()
            .filter(|(_, f)| sub.functions.iter().any(|s| s.name == f.name))
            .map(|(i, _)| i as u32)
            .collect();
        let alone = alone.functions_subgraph(&called);
        assert_eq!(multisets(&sub), multisets(&alone), "{name}: its subgraph against it compiled alone");
        assert!(sub.node_count() < both.node_count(), "{name}: {} of {} nodes", sub.node_count(), both.node_count());
        let names: Vec<&str> = sub.functions.iter().map(|f| f.name.as_str()).collect();
        assert!(names.contains(&name) && !names.contains(&if name == "saxpy" { "squash" } else { "saxpy" }), "{names:?}");
    }
    // squash calls clampish and scale; saxpy only scale (at -O1 the
    // helpers may be inlined: then the kernel alone).
    let saxpy = both.call_closure(id(&both, "saxpy"), &[id(&both, "squash")]);
    assert!(!saxpy.contains(&id(&both, "clampish")));
}

/// The graph of the functions `keep` alone, as it was first written: a
/// walk over every node and edge of the graph (quadratic over a module's
/// kernels, one subgraph each). [`programl::graph::FunctionIndex::subgraph`]
/// must give exactly this, node for node and edge for edge, in order.
fn subgraph_by_whole_walks(g: &ProgramGraph, keep: &std::collections::BTreeSet<u32>) -> ProgramGraph {
    use petgraph::graph::{DiGraph, NodeIndex};
    let n = g.node_count();
    let mut kept = vec![false; n];
    for id in g.graph.node_indices() {
        kept[id.index()] = id.index() == 0 || g.graph[id].function.is_some_and(|f| keep.contains(&f));
    }
    for e in g.graph.edge_references() {
        let (s, t) = (e.source().index(), e.target().index());
        for (a, b) in [(s, t), (t, s)] {
            if a != 0 && kept[b] && b != 0 && g.graph[NodeIndex::new(a)].function.is_none() {
                kept[a] = true;
            }
        }
    }
    let function_ids: BTreeMap<u32, u32> = keep.iter().enumerate().map(|(i, &f)| (f, i as u32)).collect();
    let mut out = ProgramGraph { graph: DiGraph::default(), functions: Vec::new(), modules: g.modules.clone() };
    let mut new_id = vec![u32::MAX; n];
    for id in g.graph.node_indices() {
        if kept[id.index()] {
            let mut node = g.graph[id].clone();
            node.function = node.function.and_then(|f| function_ids.get(&f).copied());
            new_id[id.index()] = out.graph.add_node(node).index() as u32;
        }
    }
    for e in g.graph.edge_references() {
        let (s, t) = (new_id[e.source().index()], new_id[e.target().index()]);
        if s != u32::MAX && t != u32::MAX {
            out.graph.add_edge(NodeIndex::new(s as usize), NodeIndex::new(t as usize), *e.weight());
        }
    }
    out.functions = keep
        .iter()
        .filter_map(|&f| g.functions.get(f as usize))
        .map(|f| programl::graph::Function { entry: f.entry.map(|e| new_id[e as usize]).filter(|&e| e != u32::MAX), ..f.clone() })
        .collect();
    out
}

#[test]
fn the_function_index_gives_the_whole_walks_subgraph_and_closure() {
    // Every IR file of the tests, and C compiled at -O0 and -O2 (globals,
    // constants shared by functions, calls, declarations, recursion).
    let mut graphs = Vec::new();
    for dir in ["tests/data", "tests/analysis", "llvm-tests"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "ll") {
                if let Ok(g) = build_file(&path, &BuildOptions::default()) {
                    graphs.push((path.display().to_string(), g));
                }
            }
        }
    }
    let scratch = tempfile::tempdir().unwrap();
    let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
    for program in [7, 11] {
        for level in ["-O0", "-O2"] {
            let c = scratch.path().join(format!("p{program}.c"));
            std::fs::write(&c, programl_testkit::c_program(program)).unwrap();
            let ll = scratch.path().join(format!("p{program}{level}.ll"));
            let ok = Command::new(&clang).args(["-S", "-emit-llvm", "-w", level, "-o"]).arg(&ll).arg(&c).status().unwrap().success();
            assert!(ok, "clang {level}");
            graphs.push((format!("c_program({program}) {level}"), build_file(&ll, &BuildOptions::default()).unwrap()));
        }
    }
    let source = root().join("llvm-tests/Inputs/infer/two_kernels.cl");
    graphs.push(("two_kernels.cl".into(), compile(&source, &[])));
    let mut compared = 0;
    for (name, g) in &graphs {
        let index = g.function_index();
        let functions = g.functions.len() as u32;
        for f in 0..functions {
            let others: Vec<u32> = (0..functions).filter(|&x| x != f && x % 2 == 0).collect();
            let closure = index.call_closure(f, &|x| others.contains(&x));
            assert_eq!(closure, g.call_closure(f, &others), "{name}: function {f}");
            assert!(closure.contains(&f));
            for keep in [closure, [f].into_iter().collect(), (0..functions).filter(|x| x % 2 == 1).collect()] {
                let fast = index.subgraph(&keep);
                assert!(fast == subgraph_by_whole_walks(g, &keep), "{name}: functions {keep:?}");
                assert!(fast.validate().is_ok(), "{name}: {:?}", fast.validate());
                compared += 1;
            }
        }
    }
    assert!(compared > 50, "{compared} subgraphs compared");
}
