//! Builder tests on small hand-written IR (tests/data/*.ll) and on IR that
//! clang-16 produces, in both modes.
//!
//! Each graph is rendered as lines `flow position: source -> target`, where a
//! node is named by the first line of its full_text (`[external]` by its
//! text, declarations as `decl <name>`), and the tests assert which lines
//! are (and are not) present, and how often.

use std::collections::BTreeMap;
use std::path::Path;

use petgraph::visit::EdgeRef;
use programl::builder::{build, BuildOptions, Mode};
use programl::graph::{Flow, NodeKind, ProgramGraph};

fn graph_of_file(path: &Path, mode: Mode) -> ProgramGraph {
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, path).unwrap_or_else(|e| panic!("{e}"));
    let g = build(&module, &BuildOptions { mode, ..Default::default() });
    programl::builder::check(&module, &g, mode).unwrap_or_else(|e| panic!("{}: invalid graph: {e:#?}", path.display()));
    g
}

fn data(name: &str, mode: Mode) -> ProgramGraph {
    graph_of_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name), mode)
}

fn label(g: &ProgramGraph, id: petgraph::graph::NodeIndex<u32>) -> String {
    let n = &g.graph[id];
    match n.full_text.as_deref() {
        None => n.text.clone(),
        Some("") => format!("decl {}", g.functions[n.function.unwrap() as usize].name),
        Some(t) => t.lines().next().unwrap().to_string(),
    }
}

/// Edge lines with their multiplicity.
fn edges(g: &ProgramGraph) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in g.graph.edge_references() {
        let line = format!("{} {}: {} -> {}", e.weight().flow, e.weight().position, label(g, e.source()), label(g, e.target()));
        *out.entry(line).or_insert(0) += 1;
    }
    out
}

#[track_caller]
fn assert_edge(g: &ProgramGraph, line: &str, times: usize) {
    let all = edges(g);
    let got = all.get(line).copied().unwrap_or(0);
    assert_eq!(
        got,
        times,
        "edge `{line}`: expected {times}, found {got}; all edges:\n{}",
        all.keys().cloned().collect::<Vec<_>>().join("\n")
    );
}

fn nodes_with_text(g: &ProgramGraph, kind: NodeKind, full_text: &str) -> usize {
    g.graph.node_weights().filter(|n| n.kind == kind && n.full_text.as_deref() == Some(full_text)).count()
}

#[test]
fn conditional_branch_successor_positions() {
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = data("branches.ll", mode);
        assert_edge(&g, "control 0: br i1 %neg, label %negative, label %dispatch -> br label %exit", 1);
        assert_edge(&g, "control 1: br i1 %neg, label %negative, label %dispatch -> switch i32 %x, label %other [", 1);
    }
}

#[test]
fn switch_successors_and_case_operands() {
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = data("branches.ll", mode);
        // Successor 0 is the default destination, then the cases in order.
        assert_edge(&g, "control 0: switch i32 %x, label %other [ -> %big = mul i32 %x, 2", 1);
        assert_edge(&g, "control 1: switch i32 %x, label %other [ -> br label %exit", 1);
        assert_edge(&g, "control 2: switch i32 %x, label %other [ -> br label %exit", 1);
        // Operands: 0 condition, 1 default label, 2 case 0, 3 its label, 4 case 1.
        assert_edge(&g, "data 2: i32 0 -> switch i32 %x, label %other [", 1);
        assert_edge(&g, "data 4: i32 1 -> switch i32 %x, label %other [", 1);
    }
}

#[test]
fn phi_operands_keep_their_positions() {
    let phi = "%r = phi i32 [ -1, %negative ], [ 0, %zero ], [ 1, %one ], [ %big, %other ], [ %never, %dead ]";
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = data("branches.ll", mode);
        assert_edge(&g, &format!("data 0: i32 -1 -> {phi}"), 1);
        assert_edge(&g, &format!("data 3: i32 %big -> {phi}"), 1);
        assert_edge(&g, &format!("data 4: i32 %never -> {phi}"), 1);
        assert_edge(&g, "data 0: %big = mul i32 %x, 2 -> i32 %big", 1);
    }
}

#[test]
fn one_variable_per_value_in_paper_mode_one_per_use_in_compat() {
    // %x is used 4 times: icmp, switch, mul and add.
    let paper = data("branches.ll", Mode::Paper);
    assert_eq!(nodes_with_text(&paper, NodeKind::Variable, "i32 %x"), 1);
    assert_edge(&paper, "data 0: i32 %x -> switch i32 %x, label %other [", 1);
    let compat = data("branches.ll", Mode::Programl03);
    // Arguments are shared even upstream.
    assert_eq!(nodes_with_text(&compat, NodeKind::Variable, "i32 %x"), 1);

    let g = data("calls.ll", Mode::Paper);
    // %a is used by the indirect call and by the second printf.
    assert_eq!(nodes_with_text(&g, NodeKind::Variable, "i32 %a"), 1);
    let g = data("calls.ll", Mode::Programl03);
    assert_eq!(nodes_with_text(&g, NodeKind::Variable, "i32 %a"), 2);
}

#[test]
fn unreachable_blocks() {
    let paper = data("branches.ll", Mode::Paper);
    assert_edge(
        &paper,
        "control 0: br label %exit -> %r = phi i32 [ -1, %negative ], [ 0, %zero ], [ 1, %one ], [ %big, %other ], [ %never, %dead ]",
        5,
    );
    // Upstream links only the blocks reachable from the entry.
    let compat = data("branches.ll", Mode::Programl03);
    assert_edge(
        &compat,
        "control 0: br label %exit -> %r = phi i32 [ -1, %negative ], [ 0, %zero ], [ 1, %one ], [ %big, %other ], [ %never, %dead ]",
        4,
    );
    // The dead block's instructions are still nodes.
    for g in [&paper, &compat] {
        assert_eq!(nodes_with_text(g, NodeKind::Instruction, "%never = add i32 %x, 7"), 1);
    }
}

#[test]
fn control_edges_stay_inside_functions() {
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = data("calls.ll", mode);
        let mut parts = petgraph::unionfind::UnionFind::<usize>::new(g.node_count());
        for e in g.graph.edge_references().filter(|e| e.weight().flow == Flow::Control) {
            assert_eq!(g.graph[e.source()].function, g.graph[e.target()].function);
            parts.union(e.source().index(), e.target().index());
        }
        // One control-connected part per defined function.
        let defined: std::collections::BTreeSet<_> = g
            .graph
            .node_indices()
            .filter(|&n| g.graph[n].kind == NodeKind::Instruction && g.graph[n].full_text.as_deref().is_some_and(|t| !t.is_empty()))
            .map(|n| parts.find(n.index()))
            .collect();
        assert_eq!(defined.len(), 3, "{mode:?}");
    }
}

#[test]
fn calls_to_defined_declared_and_indirect_functions() {
    let g = data("calls.ll", Mode::Paper);
    // Defined: call site -> entry, return -> call site.
    assert_edge(&g, "call 0: %a = call i32 @inc(i32 %argc) -> %c = load i32, ptr @counter, align 4", 1);
    assert_edge(&g, "call 0: ret i32 %n -> %a = call i32 @inc(i32 %argc)", 1);
    // Declared (varargs): one node standing for the body.
    assert_edge(&g, "call 0: %p = call i32 (ptr, ...) @printf(ptr @fmt, i32 %b) -> decl printf", 1);
    assert_edge(&g, "call 0: decl printf -> %p = call i32 (ptr, ...) @printf(ptr @fmt, i32 %b)", 1);
    // Indirect: through [external], and the callee value is data.
    assert_edge(&g, "call 0: %b = call i32 %fp(i32 %a) -> [external]", 1);
    assert_edge(&g, "call 0: [external] -> %b = call i32 %fp(i32 %a)", 1);
    assert_edge(&g, "data 1: ptr %fp -> %b = call i32 %fp(i32 %a)", 1);
    // The callee of a direct call is no data edge.
    assert!(!edges(&g).keys().any(|l| l.starts_with("data") && l.contains(": ptr @inc ->")), "{:#?}", edges(&g));
    // [external] reaches the externally visible functions only: not @inc.
    assert_edge(&g, "call 0: [external] -> %d = shl i32 %v, 1", 1);
    assert_edge(&g, "call 0: [external] -> %c = load i32, ptr @counter, align 4", 0);

    let c = data("calls.ll", Mode::Programl03);
    assert_edge(&c, "call 0: %a = call i32 @inc(i32 %argc) -> %c = load i32, ptr @counter, align 4", 1);
    // Upstream: no call edges for indirect calls; [external] to every function.
    assert_edge(&c, "call 0: %b = call i32 %fp(i32 %a) -> [external]", 0);
    assert_edge(&c, "call 0: [external] -> %c = load i32, ptr @counter, align 4", 1);
    assert_edge(&c, "call 0: [external] -> decl printf", 1);
}

#[test]
fn intrinsics_are_declared_functions() {
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = data("calls.ll", mode);
        let site = "call void @llvm.memset.p0.i64(ptr %buf, i8 0, i64 16, i1 false)";
        assert_edge(&g, &format!("call 0: {site} -> decl llvm.memset.p0.i64"), 1);
        assert_edge(&g, &format!("data 3: i1 false -> {site}"), 1);
        assert!(g.functions.iter().any(|f| f.name == "llvm.memset.p0.i64"));
    }
}

#[test]
fn globals_are_shared_constants_and_constant_expressions_are_nodes() {
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = data("calls.ll", mode);
        // One node for @counter, used in two functions.
        assert_eq!(nodes_with_text(&g, NodeKind::Constant, "@counter = global i32 0"), 1);
        assert_edge(&g, "data 0: @counter = global i32 0 -> %c = load i32, ptr @counter, align 4", 1);
        assert_edge(&g, "data 0: @counter = global i32 0 -> %g = load i32, ptr @counter, align 4", 1);
        let gep = "ptr getelementptr inbounds ([4 x i8], ptr @fmt, i64 0, i64 1)";
        assert_eq!(nodes_with_text(&g, NodeKind::Constant, gep), 1, "{mode:?}");
        let users: Vec<_> = g.graph.node_indices().filter(|&n| g.graph[n].full_text.as_deref() == Some(gep)).collect();
        assert_eq!(g.graph.edges(users[0]).count(), 1);
    }
}

#[test]
fn invoke_and_landingpad() {
    let g = data("invoke.ll", Mode::Paper);
    let invoke = "invoke void @thrower(i32 %x)";
    assert_edge(&g, &format!("control 0: {invoke} -> ret i32 0"), 1);
    assert_edge(&g, &format!("control 1: {invoke} -> %lp = landingpad {{ ptr, i32 }}"), 1);
    assert_edge(&g, &format!("call 0: {invoke} -> call void @may_throw(i32 %x)"), 1);
    assert_edge(&g, &format!("call 0: ret void -> {invoke}"), 1);
    assert_edge(&g, "data 0: { ptr, i32 } %lp -> resume { ptr, i32 } %lp", 1);
    // Upstream gives invoke no call edges.
    let c = data("invoke.ll", Mode::Programl03);
    assert_edge(&c, &format!("call 0: {invoke} -> call void @may_throw(i32 %x)"), 0);
    assert_edge(&c, &format!("control 1: {invoke} -> %lp = landingpad {{ ptr, i32 }}"), 1);
}

/// Compiles C source with clang-16 to IR text.
fn clang(source: &str, flags: &[&str]) -> tempfile::TempPath {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("input.c");
    std::fs::write(&c, source).unwrap();
    let ll = tempfile::Builder::new().suffix(".ll").tempfile().unwrap().into_temp_path();
    let clang = Path::new(programl::LLVM_BINDIR).join("clang");
    let status = std::process::Command::new(&clang)
        .args(flags)
        .args(["-S", "-emit-llvm", "-o"])
        .arg(&ll)
        .arg(&c)
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", clang.display()));
    assert!(status.success());
    ll
}

const LOOP_C: &str = r#"
#include <stdio.h>
struct point { int x, y; };
int sum(struct point *p, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += p[i].x * p[i].y;
    return s;
}
int main(void) {
    struct point ps[4] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
    printf("%d\n", sum(ps, 4));
    return 0;
}
"#;

#[test]
fn metadata_operands_of_debug_info_make_no_edges() {
    let ll = clang(LOOP_C, &["-g", "-O0"]);
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = graph_of_file(&ll, mode);
        // llvm.dbg.declare takes metadata operands only: its node has no
        // incoming data edges, but the call edge to its declaration.
        let declares: Vec<_> = g
            .graph
            .node_indices()
            .filter(|&n| g.graph[n].full_text.as_deref().is_some_and(|t| t.starts_with("call void @llvm.dbg.declare")))
            .collect();
        assert!(!declares.is_empty());
        for d in declares {
            let data_in = g.graph.edges_directed(d, petgraph::Direction::Incoming).filter(|e| e.weight().flow == Flow::Data).count();
            assert_eq!(data_in, 0);
        }
        // Instructions keep their !dbg attachments in full_text.
        assert!(g.graph.node_weights().any(|n| n.full_text.as_deref().is_some_and(|t| t.contains("!dbg !"))));
    }
}

#[test]
fn typed_pointer_input_keeps_pointer_types() {
    let ll = clang(LOOP_C, &["-O0", "-Xclang", "-no-opaque-pointers"]);
    let g = graph_of_file(&ll, Mode::Programl03);
    assert!(nodes_with_text(&g, NodeKind::Variable, "struct* %3") + g.graph.node_weights().filter(|n| n.text == "struct*").count() > 0);
    assert!(g.graph.node_weights().any(|n| n.text == "i32*"));
    assert!(!g.graph.node_weights().any(|n| n.text == "ptr"));
    // The same source with opaque pointers has none of them.
    let ll = clang(LOOP_C, &["-O0"]);
    let g = graph_of_file(&ll, Mode::Programl03);
    assert!(g.graph.node_weights().any(|n| n.text == "ptr"));
    assert!(!g.graph.node_weights().any(|n| n.text.ends_with('*')));
}

#[test]
fn module_features_and_function_list() {
    let ll = clang(LOOP_C, &["-O1"]);
    let g = graph_of_file(&ll, Mode::Paper);
    let m = &g.modules[0];
    assert!(m.name.ends_with("input.c"));
    assert!(m.features["llvm_target_triple"].starts_with("x86_64"));
    assert!(m.features["llvm_data_layout"].starts_with("e-m:e"));
    let names: Vec<_> = g.functions.iter().map(|f| f.name.as_str()).collect();
    assert!(names.contains(&"sum") && names.contains(&"main") && names.contains(&"printf"), "{names:?}");
    // Every non-[external] node belongs to a function, but constants.
    for n in g.graph.node_weights().skip(1) {
        assert_eq!(n.function.is_none(), n.kind == NodeKind::Constant, "{n:?}");
    }
}

#[test]
fn variables_are_defined_by_their_instruction() {
    let ll = clang(LOOP_C, &["-O2"]);
    let g = graph_of_file(&ll, Mode::Paper);
    for v in g.graph.node_indices().filter(|&n| g.graph[n].kind == NodeKind::Variable) {
        let defs: Vec<_> = g.graph.edges_directed(v, petgraph::Direction::Incoming).collect();
        let is_argument = defs.is_empty();
        if !is_argument {
            assert_eq!(defs.len(), 1, "{:?}", g.graph[v]);
            assert_eq!(defs[0].weight().flow, Flow::Data);
        }
        // Every variable is used.
        assert!(g.graph.edges(v).count() > 0, "{:?}", g.graph[v]);
    }
}

/// `programl::builder::check` against the module: a graph with an operand
/// position off the end, a dropped operand edge, two operands swapped, or
/// instructions out of order is refused, with the node named.
#[test]
fn check_catches_what_validate_cannot() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/calls.ll");
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, &path).unwrap();
    for mode in [Mode::Paper, Mode::Programl03] {
        let g = build(&module, &BuildOptions { mode, ..Default::default() });
        programl::builder::check(&module, &g, mode).unwrap();
        // `store i32 %n, ptr @counter`: operand 0 is an i32, operand 1 a ptr.
        let store = g
            .graph
            .node_indices()
            .find(|&n| g.graph[n].full_text.as_deref().is_some_and(|t| t.starts_with("store i32 %n, ptr @counter")))
            .unwrap();
        let operands: Vec<_> = g
            .graph
            .edges_directed(store, petgraph::Direction::Incoming)
            .filter(|e| e.weight().flow == Flow::Data)
            .map(|e| e.id())
            .collect();
        assert_eq!(operands.len(), 2, "{mode:?}");
        let errors = |g: &ProgramGraph| programl::builder::check(&module, g, mode).expect_err("a broken graph passed").join("\n");
        let s = store.index();

        let mut bad = g.clone();
        let e = operands[0];
        bad.graph[e].position = 2;
        let text = errors(&bad);
        assert!(text.contains(&format!("-> {s} (\"store\") has position 2, but the instruction has 2 operand(s)")), "{mode:?}: {text}");

        let mut bad = g.clone();
        bad.graph.remove_edge(operands[1]);
        let text = errors(&bad);
        assert!(text.contains(&format!("node {s} (\"store\"): data edges at operand positions")), "{mode:?}: {text}");

        let mut bad = g.clone();
        for &e in &operands {
            bad.graph[e].position = 1 - bad.graph[e].position;
        }
        let text = errors(&bad);
        assert!(text.contains("at position 0: operand 0 is of type \"i32\""), "{mode:?}: {text}");
        assert!(text.contains("at position 1: operand 1 is of type \"ptr\""), "{mode:?}: {text}");

        // The first two instructions of @inc (load, add) trade places.
        let mut bad = g.clone();
        let body: Vec<u32> = (0..g.node_count() as u32).filter(|&i| g.is_body_instruction(i)).take(2).collect();
        let (a, b) = (petgraph::graph::NodeIndex::new(body[0] as usize), petgraph::graph::NodeIndex::new(body[1] as usize));
        let (na, nb) = (bad.graph[a].clone(), bad.graph[b].clone());
        assert_eq!((na.text.as_str(), nb.text.as_str()), ("load", "add"), "{mode:?}");
        bad.graph[a] = nb;
        bad.graph[b] = na;
        let text = errors(&bad);
        assert!(text.contains("instructions out of layout order"), "{mode:?}: {text}");
    }
}

/// The models' graphs (`BuildOptions::MODEL`) leave out the debug
/// intrinsics and their declarations, so that a `-g` build featurises
/// exactly as the same build without `-g`: the same nodes (kind and text),
/// in the same order, with the same edges. The default graphs keep them.
#[test]
fn model_graphs_leave_out_debug_intrinsics() {
    let structure = |g: &ProgramGraph| {
        let nodes: Vec<(NodeKind, String)> = g.graph.node_weights().map(|n| (n.kind, n.text.clone())).collect();
        let mut edges: Vec<(u32, u32, Flow, u32)> =
            g.graph.edge_references().map(|e| (e.source().index() as u32, e.target().index() as u32, e.weight().flow, e.weight().position)).collect();
        edges.sort_unstable_by_key(|&(s, t, f, p)| (s, t, f as u8, p));
        let functions: Vec<String> = g.functions.iter().map(|f| f.name.clone()).collect();
        (nodes, edges, functions)
    };
    let is_dbg_call = |g: &ProgramGraph| g.graph.node_weights().any(|n| n.full_text.as_deref().is_some_and(|t| t.contains("@llvm.dbg.")));
    for level in ["-O0", "-O2"] {
        let with_g = clang(LOOP_C, &[level, "-g"]);
        let without = clang(LOOP_C, &[level]);
        assert!(std::fs::read_to_string(&with_g).unwrap().contains("call void @llvm.dbg."), "{level} -g has no debug intrinsics");
        let load = |path: &Path, options: &BuildOptions| {
            let context = inkwell::context::Context::create();
            let module = programl::ir::load_module(&context, path).unwrap();
            build(&module, options)
        };
        let kept = load(&with_g, &BuildOptions::default());
        assert!(is_dbg_call(&kept), "{level}: the default graph keeps the debug intrinsics");
        assert!(kept.functions.iter().any(|f| f.name.starts_with("llvm.dbg.")));
        let dropped = load(&with_g, &BuildOptions::MODEL);
        assert!(!is_dbg_call(&dropped) && !dropped.functions.iter().any(|f| f.name.starts_with("llvm.dbg.")), "{level}");
        assert!(dropped.node_count() < kept.node_count());
        dropped.validate().unwrap_or_else(|e| panic!("{level}: {e:?}"));
        let plain = load(&without, &BuildOptions::MODEL);
        assert!(structure(&dropped) == structure(&plain), "{level}: -g changes the models' graph");
        // Without debug info, the models' graph is the default one.
        assert!(structure(&plain) == structure(&load(&without, &BuildOptions::default())), "{level}");
    }
}

/// `skip_full_text` changes nothing a model reads (kinds, texts, edges,
/// functions): only every `full_text` is empty. And the graph still
/// validates.
#[test]
fn skipping_full_text_keeps_the_models_input() {
    let ll = clang(LOOP_C, &["-O2"]);
    let context = inkwell::context::Context::create();
    let module = programl::ir::load_module(&context, &ll).unwrap();
    let full = build(&module, &BuildOptions::MODEL);
    let bare = build(&module, &BuildOptions { skip_full_text: true, ..BuildOptions::MODEL });
    let shape = |g: &ProgramGraph| {
        let nodes: Vec<_> = g.graph.node_weights().map(|n| (n.kind, n.text.clone(), n.function, n.block)).collect();
        let edges: Vec<_> = g.graph.edge_references().map(|e| (e.source(), e.target(), e.weight().flow, e.weight().position)).collect();
        (nodes, edges, g.functions.iter().map(|f| f.name.clone()).collect::<Vec<_>>())
    };
    assert!(shape(&full) == shape(&bare));
    assert!(full.graph.node_weights().skip(1).all(|n| n.full_text.as_deref().is_some_and(|t| !t.is_empty() || n.text == "; undefined function")));
    assert!(bare.graph.node_weights().skip(1).all(|n| n.full_text.as_deref() == Some("")));
    bare.validate().unwrap();
}

/// Several functions with debug info, TBAA, loop metadata, structs, an
/// anonymous struct, global variables and call-site attributes: the metadata numbering and
/// the attribute groups differ between a function's and the module's
/// printing.
const PRINTING_C: &str = r#"
#include <string.h>
struct node { struct node *next; int value; };
static struct { long a; double b; } pair;
const char *names[2] = {"left", "right"};
int walk(struct node *n) { int s = 0; for (; n; n = n->next) s += n->value; return s; }
double mix(double *xs, int n) { double t = pair.b; for (int i = 0; i < n; i++) t = t * 0.5 + xs[i]; return t; }
void fill(char *buf, int n) { memset(buf, n & 0x7f, (unsigned)n); pair.a += n; }
int main(int argc, char **argv) {
    struct node b = {0, argc}, a = {&b, 2};
    double xs[8];
    char buf[32];
    for (int i = 0; i < 8; i++) xs[i] = i * argc;
    fill(buf, argc);
    return walk(&a) + (int)mix(xs, 8) + buf[1] + (int)strlen(argv[0]) + (int)strlen(names[argc & 1]);
}
"#;

/// Every instruction node's `full_text` is the instruction as LLVM prints
/// it: in compat mode, as `LLVMPrintValueToString` prints it alone (what
/// upstream ProGraML did, one value at a time: the metadata numbered as
/// the module header and that function, or, for an instruction with
/// metadata operands, all of the module's metadata); in paper mode, a line
/// of the module's own textual form. The builder reads the texts from one
/// printing of each function or of the module (shim.cc), not value by
/// value (quadratic in the module's size); this pins the two together.
/// A call with a metadata operand and a call-site attribute group, after
/// another function's call-site group: upstream numbered the groups as the
/// module header and the one function (`#1` here), the metadata as the
/// whole module.
const ATTRIBUTE_GROUPS_LL: &str = r#"
declare void @g()
declare i64 @llvm.read_register.i64(metadata)

define void @f1() {
  call void @g() cold
  ret void
}

define i64 @f2() {
  %r = call i64 @llvm.read_register.i64(metadata !0) noinline
  ret i64 %r
}

!llvm.named.register.rsp = !{!0}
!0 = !{!"rsp"}
"#;

#[test]
fn instruction_texts_are_llvms_printing() {
    use inkwell::llvm_sys::core::{LLVMDisposeMessage, LLVMPrintModuleToString, LLVMPrintValueToString};
    use inkwell::values::AsValueRef;
    fn owned(p: *mut std::ffi::c_char) -> String {
        // SAFETY: a message LLVM allocated, freed once here.
        let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned();
        unsafe { LLVMDisposeMessage(p) };
        s
    }
    let hand = tempfile::Builder::new().suffix(".ll").tempfile().unwrap().into_temp_path();
    std::fs::write(&hand, ATTRIBUTE_GROUPS_LL).unwrap();
    let inputs = [
        ("-O2 -g", clang(PRINTING_C, &["-O2", "-g"]), 2, 100),
        ("-O0 -g", clang(PRINTING_C, &["-O0", "-g"]), 2, 100),
        ("-O1", clang(PRINTING_C, &["-O1"]), 2, 100),
        ("attribute groups", hand, 0, 4),
    ];
    for (what, ll, min_globals, min_instructions) in &inputs {
        let context = inkwell::context::Context::create();
        let module = programl::ir::load_module(&context, ll).unwrap();
        // Every instruction printed alone, in module order.
        let mut alone = Vec::new();
        for f in module.get_functions() {
            for b in f.get_basic_block_iter() {
                for i in b.get_instructions() {
                    // SAFETY: a valid instruction of the module.
                    let text = owned(unsafe { LLVMPrintValueToString(i.as_value_ref()) });
                    alone.push(text.trim_start().trim_end_matches('\n').to_string());
                }
            }
        }
        assert!(alone.len() >= *min_instructions, "{what}: {} instructions", alone.len());
        // Global variables' definitions, printed alone (no two alike).
        let globals: std::collections::BTreeSet<String> = module
            .get_globals()
            // SAFETY: a valid global of the module.
            .map(|g| owned(unsafe { LLVMPrintValueToString(g.as_value_ref()) }).trim_end_matches('\n').to_string())
            .collect();
        // SAFETY: the module is valid.
        let whole = owned(unsafe { LLVMPrintModuleToString(module.as_mut_ptr()) });
        let lines: Vec<&str> = whole.lines().map(str::trim_start).collect();
        for mode in [Mode::Programl03, Mode::Paper] {
            let g = build(&module, &BuildOptions { mode, ..Default::default() });
            let defined: Vec<&str> =
                g.graph.node_weights().filter_map(|n| n.full_text.as_deref()).filter(|t| t.starts_with('@') && t.contains(" = ")).collect();
            assert!(defined.len() >= *min_globals, "{what} {mode:?}: global variable nodes {defined:?}");
            for t in &defined {
                assert!(globals.contains(*t) && lines.contains(t), "{what} {mode:?}: global {t:?} is not LLVM's printing of it");
            }
            // The instruction nodes, in node order (the builder's walk of
            // the module, as LLVM's); a declared function's node has no text.
            let texts: Vec<&str> = g
                .graph
                .node_weights()
                .filter(|n| n.kind == NodeKind::Instruction && n.function.is_some())
                .filter_map(|n| n.full_text.as_deref())
                .filter(|t| !t.is_empty())
                .collect();
            assert_eq!(texts.len(), alone.len(), "{what} {mode:?}: one node per instruction");
            match mode {
                Mode::Programl03 => {
                    for (k, (got, want)) in texts.iter().zip(&alone).enumerate() {
                        assert_eq!(got, want, "{what}: instruction {k}, compat text against LLVMPrintValueToString's");
                    }
                }
                _ => {
                    // Each, in order, a line of the module's own printing.
                    let mut at = 0;
                    for t in &texts {
                        let found = lines[at..].iter().position(|l| l == t);
                        assert!(found.is_some(), "{what}: {t:?} is not a line of the module's printing after line {at}");
                        at += found.unwrap_or(0) + 1;
                    }
                }
            }
        }
    }
}
