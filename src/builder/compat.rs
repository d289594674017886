//! The ProGraML 0.3.2 builder (`--compat programl-0.3`).
//!
//! Reproduces the reference `llvm2graph` output node for node (up to the
//! order of hash-ordered nodes), including its quirks:
//!
//! - a fresh variable node for every use of an instruction's result, placed
//!   in the consumer's block; argument nodes are shared and created after the
//!   function's blocks;
//! - function operands make no edge at all (neither as callee nor as value);
//! - only `call` instructions with a function callee get call edges:
//!   `invoke`, `callbr` and indirect calls get none;
//! - control edges between blocks are added by a breadth-first walk from the
//!   entry, so unreachable blocks get none, and a function's exits are the
//!   reachable blocks without successors (`ret`, `unreachable`, `resume`);
//! - `[external]` is linked to every function, declarations included;
//! - constants are created last, with the final block count as their block;
//! - a shufflevector's mask is its operand 2, as before LLVM 11;
//! - instruction texts and intrinsic names read as LLVM 10 printed them
//!   ([`llvm10_text`]);
//! - variable and constant texts spell a (pointer to) struct as `struct*`.

use std::collections::VecDeque;

use inkwell::llvm_sys::prelude::*;
use inkwell::llvm_sys::LLVMOpcode;
use petgraph::graph::NodeIndex;
use rustc_hash::{FxHashMap, FxHashSet};

use super::llvm::{self, Operand, Printer};
use crate::graph::{Flow, Function, Node, NodeKind, ProgramGraph};

type Id = NodeIndex<u32>;

pub(super) unsafe fn build(module: LLVMModuleRef, mut g: ProgramGraph) -> ProgramGraph {
    let mut p = Printer::new(module, true);
    let mut bodies: Vec<(LLVMValueRef, Id, Vec<Id>)> = Vec::new();
    let mut body_of: FxHashMap<LLVMValueRef, usize> = FxHashMap::default();
    let mut call_sites: Vec<(Id, LLVMValueRef)> = Vec::new();
    // Constant uses, in first-use order.
    let mut constants: Vec<(LLVMValueRef, Vec<(Id, u32)>)> = Vec::new();
    let mut constant_index: FxHashMap<LLVMValueRef, usize> = FxHashMap::default();
    let mut block_count = 0u32;

    let mut insts: FxHashMap<LLVMValueRef, Id> = FxHashMap::default();
    let mut deferred: Vec<(LLVMValueRef, Id)> = Vec::new();
    let mut arguments: Vec<(LLVMValueRef, Vec<(Id, u32)>)> = Vec::new();
    let mut block_ends: FxHashMap<LLVMBasicBlockRef, (Id, Id)> = FxHashMap::default();

    for f in llvm::functions(module) {
        let fid = g.functions.len() as u32;
        g.functions.push(Function { name: llvm10_intrinsic_name(&llvm::name(f)).to_string(), module: 0, entry: None });
        if llvm::is_declaration(f) {
            let node = super::declaration_node(&mut g, fid);
            body_of.insert(f, bodies.len());
            bodies.push((f, node, vec![node]));
            continue;
        }
        insts.clear();
        deferred.clear();
        arguments.clear();
        block_ends.clear();

        for b in llvm::blocks(f) {
            let mut first = None;
            let mut prev: Option<Id> = None;
            for inst in llvm::instructions(b) {
                let opcode = llvm::opcode_name(inst);
                let node = g.add_node(Node {
                    kind: NodeKind::Instruction,
                    text: opcode.to_string(),
                    full_text: Some(llvm10_text(opcode, p.value(inst))),
                    function: Some(fid),
                    block: block_count,
                });
                insts.insert(inst, node);
                if let Some(prev) = prev {
                    g.add_edge(Flow::Control, 0, prev, node);
                }
                if llvm::opcode(inst) == LLVMOpcode::LLVMCall {
                    if let Some(callee) = llvm::called_value(inst) {
                        if llvm::classify(callee) == Operand::Function {
                            call_sites.push((node, callee));
                        }
                    }
                }
                for (pos, op) in llvm::legacy_operands(inst).enumerate() {
                    let pos = pos as u32;
                    match llvm::classify(op) {
                        Operand::Function | Operand::Skipped => {}
                        Operand::Constant => {
                            let i = *constant_index.entry(op).or_insert_with(|| {
                                constants.push((op, Vec::new()));
                                constants.len() - 1
                            });
                            constants[i].1.push((node, pos));
                        }
                        Operand::Instruction => {
                            let ty = p.type_text(llvm::type_of(op));
                            let full_text = format!("{ty} {}", p.operand(op));
                            let var = g.add_node(Node {
                                kind: NodeKind::Variable,
                                text: ty,
                                full_text: Some(full_text),
                                function: Some(fid),
                                block: block_count,
                            });
                            g.add_edge(Flow::Data, pos, var, node);
                            deferred.push((op, var));
                        }
                        Operand::Argument => match arguments.iter_mut().find(|(a, _)| *a == op) {
                            Some((_, uses)) => uses.push((node, pos)),
                            None => arguments.push((op, vec![(node, pos)])),
                        },
                    }
                }
                first.get_or_insert(node);
                prev = Some(node);
            }
            if let (Some(first), Some(last)) = (first, prev) {
                block_ends.insert(b, (first, last));
            }
            block_count += 1;
        }

        for (arg, uses) in arguments.drain(..) {
            let node = g.add_node(Node {
                kind: NodeKind::Variable,
                text: p.type_text(llvm::type_of(arg)),
                full_text: Some(p.value(arg)),
                function: Some(fid),
                block: block_count,
            });
            for (user, pos) in uses {
                g.add_edge(Flow::Data, pos, node, user);
            }
        }
        for &(producer, var) in &deferred {
            if let Some(&node) = insts.get(&producer) {
                g.add_edge(Flow::Data, 0, node, var);
            }
        }

        // Breadth-first over the blocks reachable from the entry.
        let entry = llvm::entry_block(f);
        let Some(&(entry_node, _)) = block_ends.get(&entry) else { continue };
        let mut exits = Vec::new();
        let mut visited: FxHashSet<LLVMBasicBlockRef> = FxHashSet::default();
        visited.insert(entry);
        let mut queue = VecDeque::from([entry]);
        while let Some(b) = queue.pop_front() {
            let Some(&(_, last)) = block_ends.get(&b) else { continue };
            let mut n = 0;
            for (i, succ) in llvm::successors(llvm::terminator(b)).enumerate() {
                n += 1;
                if let Some(&(first, _)) = block_ends.get(&succ) {
                    g.add_edge(Flow::Control, i as u32, last, first);
                }
                if visited.insert(succ) {
                    queue.push_back(succ);
                }
            }
            if n == 0 {
                exits.push(last);
            }
        }
        body_of.insert(f, bodies.len());
        bodies.push((f, entry_node, exits));
    }

    for (_, entry, exits) in &bodies {
        super::link_call(&mut g, ProgramGraph::external(), *entry, exits);
    }
    for (site, f) in call_sites {
        if let Some(&i) = body_of.get(&f) {
            let (_, entry, exits) = &bodies[i];
            super::link_call(&mut g, site, *entry, exits);
        }
    }
    for (c, uses) in constants {
        let node = g.add_node(Node {
            kind: NodeKind::Constant,
            text: p.type_text(llvm::type_of(c)),
            full_text: Some(p.value(c)),
            function: None,
            block: block_count,
        });
        for (user, pos) in uses {
            g.add_edge(Flow::Data, pos, node, user);
        }
    }
    g
}

/// Spells an instruction as LLVM 10 printed it, where LLVM 16 reads the
/// same IR into something it prints differently: the type LLVM 12+ attaches
/// to `sret`, `inalloca`, `preallocated` (`sret(T)` was plain `sret`), the
/// `elementtype(T)` LLVM 14+ adds to inline-asm memory operands, and the
/// alignment LLVM 11+ prints on `atomicrmw` and `cmpxchg`. Quoted text
/// (inline asm, names) is left alone.
pub(crate) fn llvm10_text(opcode: &str, mut text: String) -> String {
    if text.contains("@llvm.powi.") {
        text = rename_powi(&text);
    }
    let atomic = matches!(opcode, "atomicrmw" | "cmpxchg");
    if !(atomic || ["sret(", "elementtype(", "inalloca(", "preallocated("].iter().any(|k| text.contains(k))) {
        return text;
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if bytes[i] == b'"' {
            // Copy a quoted string whole, escapes included.
            let end = rest[1..].find('"').map_or(rest.len(), |e| e + 2);
            out.push_str(&rest[..end]);
            i += end;
            continue;
        }
        let word_start = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if word_start {
            if let Some(keep) = ["sret(", "inalloca(", "preallocated("].iter().find(|k| rest.starts_with(**k)) {
                out.push_str(&keep[..keep.len() - 1]);
                i += keep.len() - 1 + skip_parenthesized(&rest[keep.len() - 1..]);
                continue;
            }
            if rest.starts_with("elementtype(") {
                i += "elementtype".len() + skip_parenthesized(&rest["elementtype".len()..]);
                if text[i..].starts_with(' ') {
                    i += 1;
                }
                continue;
            }
        }
        if atomic && rest.starts_with(", align ") {
            let digits = rest[", align ".len()..].bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                i += ", align ".len() + digits;
                continue;
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// LLVM 13+ overloads `llvm.powi` on its exponent type too
/// (`llvm.powi.f64.i32`); LLVM 10 read that as, and printed, `llvm.powi.f64`.
fn llvm10_intrinsic_name(name: &str) -> &str {
    match name.strip_prefix("llvm.powi.").and_then(|rest| rest.strip_suffix(".i32")) {
        Some(_) => &name[..name.len() - ".i32".len()],
        None => name,
    }
}

fn rename_powi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("@llvm.powi.") {
        out.push_str(&rest[..at + 1]);
        rest = &rest[at + 1..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_')).unwrap_or(rest.len());
        out.push_str(llvm10_intrinsic_name(&rest[..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The length of a balanced `( ... )` group at the start of `s` (0 if `s`
/// does not start with one).
fn skip_parenthesized(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ if depth == 0 => return 0,
            _ => {}
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::llvm10_text;

    #[test]
    fn llvm10_spelling() {
        let t = |op: &str, s: &str| llvm10_text(op, s.to_string());
        assert_eq!(
            t("atomicrmw", "%10 = atomicrmw add i32* @hits, i32 %9 seq_cst, align 4"),
            "%10 = atomicrmw add i32* @hits, i32 %9 seq_cst"
        );
        assert_eq!(
            t("cmpxchg", "%3 = cmpxchg i32* @hits, i32 0, i32 5 seq_cst seq_cst, align 4, !tbaa !3"),
            "%3 = cmpxchg i32* @hits, i32 0, i32 5 seq_cst seq_cst, !tbaa !3"
        );
        assert_eq!(
            t("call", "call void @make_big(%struct.big* sret(%struct.big) align 8 %4, i64 3)"),
            "call void @make_big(%struct.big* sret align 8 %4, i64 3)"
        );
        assert_eq!(t("call", "call void @f({ i32 (i8)* }* sret({ i32 (i8)* }) %p)"), "call void @f({ i32 (i8)* }* sret %p)");
        assert_eq!(
            t("call", "call void asm \"sret(x)\", \"=*m\"(i32* elementtype(i32) %3, i32* elementtype(i32) %3), !srcloc !6"),
            "call void asm \"sret(x)\", \"=*m\"(i32* %3, i32* %3), !srcloc !6"
        );
        assert_eq!(
            t("call", "%1 = call double @llvm.powi.f64.i32(double %x, i32 %n)"),
            "%1 = call double @llvm.powi.f64(double %x, i32 %n)"
        );
        assert_eq!(
            t("call", "%1 = call <2 x float> @llvm.powi.v2f32.i32(<2 x float> %x, i32 3)"),
            "%1 = call <2 x float> @llvm.powi.v2f32(<2 x float> %x, i32 3)"
        );
        // Left alone: other opcodes' alignment, names containing the words.
        assert_eq!(t("load", "%1 = load i32, i32* %p, align 4"), "%1 = load i32, i32* %p, align 4");
        assert_eq!(t("call", "call void @my_sret(i32 1)"), "call void @my_sret(i32 1)");
    }
}
