//! Where each graph node of a module is in its IR: the anchors that
//! metadata hangs on.
//!
//! The models' builder (`programl::builder`, `BuildOptions::MODEL`: paper
//! mode without debug intrinsics) numbers nodes as it walks the module:
//! functions in module order, debug intrinsics left out (a declaration
//! gets one `; undefined function` placeholder), and in each defined
//! function its arguments that have uses (variable nodes), then every
//! instruction in block and layout order but the calls of debug
//! intrinsics (`llvm.dbg.*`), each followed by the variable
//! node of its result when the result has uses (linked by a data edge
//! instruction → variable, the only data edges that leave an instruction);
//! constants come in between. So the body instructions, taken in node-id
//! order, are the module's instructions in walk order; an instruction's
//! variable is its data successor; and the remaining variables of a
//! function are its used arguments, in argument order.
//!
//! [`Anchors::new`] pairs them up and checks, function by function, that
//! the counts agree, so a builder that numbered differently would be an
//! error here, never a misplaced annotation.

use std::collections::HashMap;

use inkwell::llvm_sys::core::*;
use inkwell::llvm_sys::prelude::*;
use petgraph::graph::NodeIndex;
use petgraph::visit::EdgeRef;
use programl::graph::{Flow, NodeKind, ProgramGraph};

/// Where a variable node is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Def {
    /// The result of the instruction node `inst`.
    Inst(u32),
    /// Argument `index` of graph function `function`.
    Arg { function: u32, index: u32 },
}

/// The IR place of every body instruction, variable and function.
pub struct Anchors {
    /// Body instruction node → LLVM instruction.
    pub insts: HashMap<u32, LLVMValueRef>,
    /// Instruction node → the variable node of its result.
    pub result: HashMap<u32, u32>,
    /// Variable node → its definition.
    pub defs: HashMap<u32, Def>,
    /// Graph function id → LLVM function (module order).
    pub functions: Vec<LLVMValueRef>,
    /// Graph function id → the variable node of each argument, in argument
    /// order (`None`: an argument without uses has no node).
    pub args: Vec<Vec<Option<u32>>>,
}

/// The functions of `module` that the graph has, in order: all but the
/// debug intrinsics.
///
/// # Safety
/// `module` is valid.
pub unsafe fn functions(module: LLVMModuleRef) -> Vec<LLVMValueRef> {
    let mut out = Vec::new();
    let mut f = LLVMGetFirstFunction(module);
    while !f.is_null() {
        if !programl::builder::is_debug_intrinsic(f) {
            out.push(f);
        }
        f = LLVMGetNextFunction(f);
    }
    out
}

/// The instructions of `f` that the graph has, in block and layout order:
/// all but the calls of debug intrinsics.
///
/// # Safety
/// `f` is a valid function.
pub unsafe fn instructions(f: LLVMValueRef) -> Vec<LLVMValueRef> {
    let mut out = Vec::new();
    let mut b = LLVMGetFirstBasicBlock(f);
    while !b.is_null() {
        let mut i = LLVMGetFirstInstruction(b);
        while !i.is_null() {
            if !programl::builder::is_debug_intrinsic_call(i) {
                out.push(i);
            }
            i = LLVMGetNextInstruction(i);
        }
        b = LLVMGetNextBasicBlock(b);
    }
    out
}

fn mismatch(detail: String) -> String {
    format!("the module's graph does not line up with its IR ({detail}); no annotation written")
}

impl Anchors {
    /// Pairs the models' graph of `module` with its IR.
    ///
    /// # Safety
    /// `graph` was built from `module` (unchanged since) with
    /// `BuildOptions::MODEL`.
    pub unsafe fn new(module: LLVMModuleRef, graph: &ProgramGraph) -> Result<Anchors, String> {
        let functions = functions(module);
        if functions.len() != graph.functions.len() {
            return Err(mismatch(format!("{} functions in the IR, {} in the graph", functions.len(), graph.functions.len())));
        }
        let g = &graph.graph;
        let mut result = HashMap::new();
        let mut defs = HashMap::new();
        for e in g.edge_references() {
            if e.weight().flow == Flow::Data && g[e.source()].kind == NodeKind::Instruction && g[e.target()].kind == NodeKind::Variable {
                result.insert(e.source().index() as u32, e.target().index() as u32);
                defs.insert(e.target().index() as u32, Def::Inst(e.source().index() as u32));
            }
        }
        // Body instructions and argument variables by function, in id order.
        let mut body: Vec<Vec<u32>> = vec![Vec::new(); functions.len()];
        let mut arg_vars: Vec<Vec<u32>> = vec![Vec::new(); functions.len()];
        for i in g.node_indices() {
            let id = i.index() as u32;
            let node = &g[i];
            let Some(f) = node.function.map(|f| f as usize).filter(|&f| f < functions.len()) else { continue };
            if graph.is_body_instruction(id) {
                body[f].push(id);
            } else if node.kind == NodeKind::Variable && !defs.contains_key(&id) {
                arg_vars[f].push(id);
            }
        }
        let mut insts = HashMap::new();
        let mut args = Vec::with_capacity(functions.len());
        for (fi, &f) in functions.iter().enumerate() {
            let ir = if LLVMIsDeclaration(f) != 0 { Vec::new() } else { instructions(f) };
            if ir.len() != body[fi].len() {
                return Err(mismatch(format!(
                    "function {}: {} instructions in the IR, {} in the graph",
                    graph.functions[fi].name,
                    ir.len(),
                    body[fi].len()
                )));
            }
            insts.extend(body[fi].iter().copied().zip(ir));
            let params = LLVMCountParams(f);
            let mut vars = arg_vars[fi].iter().copied();
            let mut slots = Vec::with_capacity(params as usize);
            for index in 0..params {
                let used = LLVMIsDeclaration(f) == 0 && !LLVMGetFirstUse(LLVMGetParam(f, index)).is_null();
                let var = if used { vars.next() } else { None };
                if used && var.is_none() {
                    return Err(mismatch(format!("function {}: argument {index} has no variable node", graph.functions[fi].name)));
                }
                if let Some(v) = var {
                    defs.insert(v, Def::Arg { function: fi as u32, index });
                }
                slots.push(var);
            }
            if let Some(extra) = vars.next() {
                return Err(mismatch(format!(
                    "function {}: variable node {extra} is neither a result nor an argument",
                    graph.functions[fi].name
                )));
            }
            args.push(slots);
        }
        Ok(Anchors { insts, result, defs, functions, args })
    }

    /// The function (graph id) a node belongs to.
    pub fn function_of(graph: &ProgramGraph, node: u32) -> Option<u32> {
        graph.graph.node_weight(NodeIndex::new(node as usize)).and_then(|n| n.function)
    }
}
