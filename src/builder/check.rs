//! Checks a built graph against the module it was built from: the graph
//! invariants only LLVM can decide (see [`check`]).

use std::collections::{BTreeSet, HashMap};

use inkwell::llvm_sys::prelude::*;
use petgraph::visit::EdgeRef;

use super::llvm::{self, Operand, Printer};
use super::Mode;
use crate::graph::{Flow, NodeKind, ProgramGraph};

/// Checks `graph`, built by [`super::build`] from `module` in `mode`:
/// [`ProgramGraph::validate`], and against the module:
///
/// - the body instruction nodes are the module's instructions in layout
///   order (same opcode, same function);
/// - every data edge into an instruction has a position below that
///   instruction's operand count as `mode` numbers operands (compat mode
///   counts a shufflevector's mask as operand 2, as LLVM 10 did), and its
///   source node has the type of that operand;
/// - every operand the mode turns into a data edge has exactly one: all
///   but basic blocks, metadata and inline asm, and, in the paper's graphs,
///   a direct callee (its call edge stands for it); in compat mode, no
///   function operand.
///
/// Every violation is reported, each naming the node, edge or function.
pub fn check(module: &inkwell::module::Module<'_>, graph: &ProgramGraph, mode: Mode) -> Result<(), Vec<String>> {
    let mut errors = graph.validate().err().unwrap_or_default();
    // SAFETY: the module is borrowed for the whole call, and only read.
    unsafe { check_operands(module.as_mut_ptr(), graph, mode, &mut errors) };
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The operands of `inst` as `mode` numbers them.
fn operands_of(inst: LLVMValueRef, mode: Mode) -> Vec<LLVMValueRef> {
    match mode {
        Mode::Paper => llvm::operands(inst).collect(),
        Mode::Programl03 => llvm::legacy_operands(inst).collect(),
    }
}

/// Whether `mode` gives operand `pos` of `inst` a data edge.
fn has_edge(inst: LLVMValueRef, operands: &[LLVMValueRef], pos: usize, mode: Mode) -> bool {
    match (mode, llvm::classify(operands[pos])) {
        (_, Operand::Skipped) => false,
        (Mode::Programl03, Operand::Function) => false,
        (Mode::Programl03, _) => true,
        (Mode::Paper, _) => {
            // The callee is the last operand of a call, invoke or callbr.
            let callee = llvm::called_value(inst);
            // (In this mode `operands` are LLVM's own.)
            let is_callee = callee.is_some() && pos + 1 == operands.len();
            !(is_callee && callee.and_then(llvm::strip_to_function).is_some())
        }
    }
}

unsafe fn check_operands(module: LLVMModuleRef, graph: &ProgramGraph, mode: Mode, errors: &mut Vec<String>) {
    let mut p = Printer::new(module, mode == Mode::Programl03);
    // The body instructions of the graph, in id order, beside the module's.
    let nodes: Vec<u32> = (0..graph.node_count() as u32).filter(|&i| graph.is_body_instruction(i)).collect();
    let mut insts: Vec<(LLVMValueRef, u32)> = Vec::with_capacity(nodes.len());
    for (fid, f) in llvm::functions(module).enumerate() {
        for b in llvm::blocks(f) {
            insts.extend(llvm::instructions(b).map(|i| (i, fid as u32)));
        }
    }
    if nodes.len() != insts.len() {
        errors.push(format!("the graph has {} body instructions, the module {}", nodes.len(), insts.len()));
        return;
    }
    // Each instruction node's instruction and its operands as `mode` numbers them.
    let mut of_node: HashMap<u32, (LLVMValueRef, Vec<LLVMValueRef>)> = HashMap::with_capacity(nodes.len());
    for (&node, &(inst, fid)) in nodes.iter().zip(&insts) {
        let n = graph.node(node.into());
        let opcode = llvm::opcode_name(inst);
        if n.text != opcode || n.function != Some(fid) {
            errors.push(format!(
                "node {node} ({:?} of function {:?}) stands where the module has {opcode:?} of function {fid}: instructions out of layout order",
                n.text, n.function
            ));
            return;
        }
        of_node.insert(node, (inst, operands_of(inst, mode)));
    }
    // Operand positions with an edge, per instruction node.
    let mut seen: HashMap<u32, BTreeSet<u32>> = HashMap::new();
    for e in graph.graph.edge_references() {
        let (source, target) = (e.source().index() as u32, e.target().index() as u32);
        if e.weight().flow != Flow::Data {
            continue;
        }
        let Some((_, operands)) = of_node.get(&target) else { continue };
        let position = e.weight().position;
        let Some(&operand) = operands.get(position as usize) else {
            errors.push(format!(
                "data edge {source} -> {target} ({:?}) has position {position}, but the instruction has {} operand(s)",
                graph.node(target.into()).text,
                operands.len()
            ));
            continue;
        };
        seen.entry(target).or_default().insert(position);
        let source_node = graph.node(source.into());
        let expected = p.type_text(llvm::type_of(operand));
        if source_node.kind == NodeKind::Instruction || source_node.text != expected {
            errors.push(format!(
                "data edge {source} ({} {:?}) -> {target} ({:?}) at position {position}: operand {position} is of type {expected:?}",
                source_node.kind,
                source_node.text,
                graph.node(target.into()).text
            ));
        }
    }
    for (&node, (inst, operands)) in &of_node {
        let expected: BTreeSet<u32> = (0..operands.len()).filter(|&i| has_edge(*inst, operands, i, mode)).map(|i| i as u32).collect();
        let empty = BTreeSet::new();
        let found = seen.get(&node).unwrap_or(&empty);
        if *found != expected {
            errors.push(format!(
                "node {node} ({:?}): data edges at operand positions {found:?}, expected {expected:?}",
                graph.node(node.into()).text
            ));
        }
    }
}
