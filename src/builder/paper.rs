//! The default builder: the paper's graphs (SPEC.md §1).
//!
//! Per defined function, in layout order: one node per instruction, one
//! variable node per argument and per instruction result that has uses
//! (created next to its definition), and one constant node per distinct
//! constant in the module (created at its first use). Operand edges are
//! added once every value of the function has its node, so forward
//! references (phis) need no deferral lists.
//!
//! Calls: a call, invoke or callbr whose callee is a function (through
//! pointer casts and aliases) links to that function; any other callee but
//! inline asm is an indirect call, linked to and from `[external]`, and its
//! callee value keeps its data edge. Function exits are `ret` instructions.

use inkwell::llvm_sys::prelude::*;
use inkwell::llvm_sys::LLVMOpcode;
use petgraph::graph::NodeIndex;
use rustc_hash::FxHashMap;

use super::llvm::{self, Operand, Printer};
use crate::graph::{Flow, Function, Node, NodeKind, ProgramGraph};

type Id = NodeIndex<u32>;

pub(super) unsafe fn build(module: LLVMModuleRef, mut g: ProgramGraph, drop_debug: bool, skip_full_text: bool) -> ProgramGraph {
    let mut p = Printer::new(module, false);
    // `full_text`, or the empty text where it is not wanted.
    let text = |print: &mut dyn FnMut() -> String| Some(if skip_full_text { String::new() } else { print() });
    // Variable and constant node of each value.
    let mut values: FxHashMap<LLVMValueRef, Id> = FxHashMap::default();
    // Entry and exits of each function.
    let mut bodies: FxHashMap<LLVMValueRef, (Id, Vec<Id>)> = FxHashMap::default();
    let mut call_sites: Vec<(Id, LLVMValueRef)> = Vec::new();
    let mut indirect_sites: Vec<Id> = Vec::new();
    let mut visible: Vec<LLVMValueRef> = Vec::new();
    let mut block_count = 0u32;

    let mut insts: Vec<(LLVMValueRef, Id)> = Vec::new();
    let mut block_ends: FxHashMap<LLVMBasicBlockRef, (Id, Id)> = FxHashMap::default();

    for f in llvm::functions(module) {
        if drop_debug && llvm::is_debug_intrinsic(f) {
            continue;
        }
        let fid = g.functions.len() as u32;
        g.functions.push(Function { name: llvm::name(f), module: 0, entry: None });
        if llvm::is_declaration(f) {
            let node = super::declaration_node(&mut g, fid);
            bodies.insert(f, (node, vec![node]));
            continue;
        }
        if llvm::externally_visible(f) {
            visible.push(f);
        }
        insts.clear();
        block_ends.clear();
        let mut exits = Vec::new();

        for arg in llvm::params(f) {
            if llvm::has_uses(arg) {
                let ty = llvm::type_of(arg);
                let node = g.add_node(Node {
                    kind: NodeKind::Variable,
                    text: p.type_text(ty),
                    full_text: text(&mut || p.value(arg)),
                    function: Some(fid),
                    block: block_count,
                });
                values.insert(arg, node);
            }
        }

        for b in llvm::blocks(f) {
            let mut first = None;
            let mut prev: Option<Id> = None;
            for inst in llvm::instructions(b) {
                if drop_debug && llvm::is_debug_intrinsic_call(inst) {
                    continue;
                }
                let node = g.add_node(Node {
                    kind: NodeKind::Instruction,
                    text: llvm::opcode_name(inst).to_string(),
                    full_text: text(&mut || p.value(inst)),
                    function: Some(fid),
                    block: block_count,
                });
                if let Some(prev) = prev {
                    g.add_edge(Flow::Control, 0, prev, node);
                }
                first.get_or_insert(node);
                prev = Some(node);
                insts.push((inst, node));
                let ty = llvm::type_of(inst);
                if !llvm::is_void(ty) && llvm::has_uses(inst) {
                    let full_text = text(&mut || format!("{} {}", p.llvm_type(ty), p.operand(inst)));
                    let var = g.add_node(Node {
                        kind: NodeKind::Variable,
                        text: p.type_text(ty),
                        full_text,
                        function: Some(fid),
                        block: block_count,
                    });
                    g.add_edge(Flow::Data, 0, node, var);
                    values.insert(inst, var);
                }
                if llvm::opcode(inst) == LLVMOpcode::LLVMRet {
                    exits.push(node);
                }
            }
            if let (Some(first), Some(last)) = (first, prev) {
                block_ends.insert(b, (first, last));
            }
            block_count += 1;
        }

        // Operands, now that every value of the function has its node.
        for &(inst, node) in &insts {
            let callee = llvm::called_value(inst);
            let direct = callee.and_then(llvm::strip_to_function);
            let n_ops = unsafe { inkwell::llvm_sys::core::LLVMGetNumOperands(inst) }.max(0) as u32;
            for (pos, op) in llvm::operands(inst).enumerate() {
                let pos = pos as u32;
                let is_callee = callee.is_some() && pos + 1 == n_ops;
                if is_callee && direct.is_some() {
                    continue; // the call edge stands for it
                }
                let source = match llvm::classify(op) {
                    Operand::Instruction | Operand::Argument => match values.get(&op) {
                        Some(&v) => v,
                        None => continue, // a use of a value from another function: invalid IR
                    },
                    Operand::Function | Operand::Constant => {
                        *values.entry(op).or_insert_with(|| constant_node(&mut g, &mut p, op, block_count, skip_full_text))
                    }
                    Operand::Skipped => continue,
                };
                g.add_edge(Flow::Data, pos, source, node);
            }
            match (callee, direct) {
                (_, Some(f)) => call_sites.push((node, f)),
                (Some(c), None) if !llvm::is_inline_asm(c) => indirect_sites.push(node),
                _ => {}
            }
        }

        // Control flow between blocks, unreachable blocks included.
        for b in llvm::blocks(f) {
            let Some(&(_, last)) = block_ends.get(&b) else { continue };
            for (i, succ) in llvm::successors(llvm::terminator(b)).enumerate() {
                if let Some(&(first, _)) = block_ends.get(&succ) {
                    g.add_edge(Flow::Control, i as u32, last, first);
                }
            }
        }
        let entry = block_ends.get(&llvm::entry_block(f)).map(|e| e.0);
        if let Some(entry) = entry {
            g.functions[fid as usize].entry = Some(entry.index() as u32);
            bodies.insert(f, (entry, exits));
        }
    }

    // Constants belong to the module; give them the block after the last.
    for v in values.values() {
        let n = &mut g.graph[*v];
        if n.kind == NodeKind::Constant {
            n.block = block_count;
        }
    }

    for f in visible {
        if let Some((entry, exits)) = bodies.get(&f) {
            super::link_call(&mut g, ProgramGraph::external(), *entry, exits);
        }
    }
    for (site, f) in call_sites {
        if let Some((entry, exits)) = bodies.get(&f) {
            super::link_call(&mut g, site, *entry, exits);
        }
    }
    for site in indirect_sites {
        g.add_edge(Flow::Call, 0, site, ProgramGraph::external());
        g.add_edge(Flow::Call, 0, ProgramGraph::external(), site);
    }
    g
}

fn constant_node(g: &mut ProgramGraph, p: &mut Printer, c: LLVMValueRef, block: u32, skip_full_text: bool) -> Id {
    let ty = llvm::type_of(c);
    // Printing a function prints its whole body: name it as an operand.
    let full_text = if skip_full_text {
        String::new()
    } else if llvm::classify(c) == Operand::Function {
        format!("{} {}", p.llvm_type(ty), p.operand(c))
    } else {
        p.value(c)
    };
    g.add_node(Node { kind: NodeKind::Constant, text: p.type_text(ty), full_text: Some(full_text), function: None, block })
}
