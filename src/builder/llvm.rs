//! Thin, safe-by-construction access to the parts of an LLVM module the
//! builder reads, over the C API (`inkwell::llvm_sys`) and the C++ shim.
//!
//! inkwell's safe API panics on metadata operands and indirect calls, so the
//! builder uses raw value handles. Every handle here comes from a live
//! `inkwell::module::Module` borrowed for the whole build, which is why
//! these crate-private helpers take raw handles without being `unsafe fn`.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::CStr;
use std::os::raw::c_char;

use inkwell::llvm_sys::core::*;
use inkwell::llvm_sys::prelude::*;
use inkwell::llvm_sys::{LLVMOpcode, LLVMValueKind};

extern "C" {
    fn programl_printer_new(module: LLVMModuleRef, compat: i32) -> *mut std::ffi::c_void;
    fn programl_printer_free(printer: *mut std::ffi::c_void);
    fn programl_print_value(printer: *mut std::ffi::c_void, value: LLVMValueRef, len: *mut usize) -> *const c_char;
    fn programl_print_operand(printer: *mut std::ffi::c_void, value: LLVMValueRef, len: *mut usize) -> *const c_char;
    fn programl_type_text(printer: *mut std::ffi::c_void, ty: LLVMTypeRef, len: *mut usize) -> *const c_char;
    fn programl_opcode_name(inst: LLVMValueRef) -> *const c_char;
    fn programl_shuffle_mask(inst: LLVMValueRef) -> LLVMValueRef;
}

/// The operands of an instruction as LLVM 10 saw them: a shufflevector's
/// mask was its third operand (now an immediate).
pub fn legacy_operands(inst: LLVMValueRef) -> impl Iterator<Item = LLVMValueRef> {
    let mask = unsafe { programl_shuffle_mask(inst) };
    operands(inst).chain((!mask.is_null()).then_some(mask))
}

/// Prints values and types of one module, numbering unnamed values once per
/// function (see `shim.cc`).
pub struct Printer {
    raw: *mut std::ffi::c_void,
}

impl Printer {
    /// # Safety
    /// `module` must outlive the printer.
    pub unsafe fn new(module: LLVMModuleRef, compat: bool) -> Printer {
        Printer { raw: programl_printer_new(module, compat as i32) }
    }

    fn take(ptr: *const c_char, len: usize) -> String {
        let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
        String::from_utf8_lossy(bytes).into_owned()
    }

    /// `Value::print`, leading indentation and trailing newlines removed.
    pub fn value(&mut self, v: LLVMValueRef) -> String {
        let mut len = 0;
        let p = unsafe { programl_print_value(self.raw, v, &mut len) };
        let s = Self::take(p, len);
        let t = s.trim_start().trim_end_matches('\n');
        if t.len() == s.len() {
            s
        } else {
            t.to_string()
        }
    }

    /// The operand spelling of a value without its type: `%3`, `@g`.
    pub fn operand(&mut self, v: LLVMValueRef) -> String {
        let mut len = 0;
        let p = unsafe { programl_print_operand(self.raw, v, &mut len) };
        Self::take(p, len)
    }

    /// The node text of a type (`i32`, `ptr`, `struct*`).
    pub fn type_text(&mut self, ty: LLVMTypeRef) -> String {
        let mut len = 0;
        let p = unsafe { programl_type_text(self.raw, ty, &mut len) };
        Self::take(p, len)
    }

    /// LLVM's own spelling of a type (`%struct.S*`, `ptr`).
    pub fn llvm_type(&mut self, ty: LLVMTypeRef) -> String {
        unsafe {
            let p = LLVMPrintTypeToString(ty);
            let s = CStr::from_ptr(p).to_string_lossy().into_owned();
            LLVMDisposeMessage(p);
            s
        }
    }
}

impl Drop for Printer {
    fn drop(&mut self) {
        unsafe { programl_printer_free(self.raw) }
    }
}

pub fn opcode_name(inst: LLVMValueRef) -> &'static str {
    unsafe { CStr::from_ptr(programl_opcode_name(inst)).to_str().unwrap_or("unknown") }
}

/// How an operand takes part in the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Instruction,
    Argument,
    Function,
    /// Any other constant: literals, globals, constant expressions.
    Constant,
    /// Basic blocks, metadata and inline asm: no data edge, but they count
    /// in the operand index.
    Skipped,
}

pub fn classify(v: LLVMValueRef) -> Operand {
    use LLVMValueKind::*;
    match unsafe { LLVMGetValueKind(v) } {
        LLVMInstructionValueKind => Operand::Instruction,
        LLVMArgumentValueKind => Operand::Argument,
        LLVMFunctionValueKind => Operand::Function,
        LLVMBasicBlockValueKind
        | LLVMMetadataAsValueValueKind
        | LLVMInlineAsmValueKind
        | LLVMMemoryUseValueKind
        | LLVMMemoryDefValueKind
        | LLVMMemoryPhiValueKind => Operand::Skipped,
        _ => Operand::Constant,
    }
}

pub fn functions(m: LLVMModuleRef) -> impl Iterator<Item = LLVMValueRef> {
    let mut f = unsafe { LLVMGetFirstFunction(m) };
    std::iter::from_fn(move || {
        let cur = f;
        if cur.is_null() {
            return None;
        }
        f = unsafe { LLVMGetNextFunction(cur) };
        Some(cur)
    })
}

pub fn blocks(f: LLVMValueRef) -> impl Iterator<Item = LLVMBasicBlockRef> {
    let mut b = unsafe { LLVMGetFirstBasicBlock(f) };
    std::iter::from_fn(move || {
        let cur = b;
        if cur.is_null() {
            return None;
        }
        b = unsafe { LLVMGetNextBasicBlock(cur) };
        Some(cur)
    })
}

pub fn instructions(b: LLVMBasicBlockRef) -> impl Iterator<Item = LLVMValueRef> {
    let mut i = unsafe { LLVMGetFirstInstruction(b) };
    std::iter::from_fn(move || {
        let cur = i;
        if cur.is_null() {
            return None;
        }
        i = unsafe { LLVMGetNextInstruction(cur) };
        Some(cur)
    })
}

pub fn params(f: LLVMValueRef) -> impl Iterator<Item = LLVMValueRef> {
    let n = unsafe { LLVMCountParams(f) };
    (0..n).map(move |i| unsafe { LLVMGetParam(f, i) })
}

pub fn operands(v: LLVMValueRef) -> impl Iterator<Item = LLVMValueRef> {
    let n = unsafe { LLVMGetNumOperands(v) }.max(0) as u32;
    (0..n).map(move |i| unsafe { LLVMGetOperand(v, i) })
}

/// Successor blocks of a terminator, in successor order.
pub fn successors(term: LLVMValueRef) -> impl Iterator<Item = LLVMBasicBlockRef> {
    let n = if term.is_null() || unsafe { LLVMIsATerminatorInst(term) }.is_null() { 0 } else { unsafe { LLVMGetNumSuccessors(term) } };
    (0..n).map(move |i| unsafe { LLVMGetSuccessor(term, i) })
}

pub fn is_declaration(f: LLVMValueRef) -> bool {
    unsafe { LLVMIsDeclaration(f) != 0 }
}

/// Whether `v` is a function named `llvm.dbg.*` (`llvm.dbg.declare`,
/// `llvm.dbg.value`, `llvm.dbg.assign`, `llvm.dbg.label`).
pub fn is_debug_intrinsic(v: LLVMValueRef) -> bool {
    if unsafe { LLVMGetValueKind(v) } != LLVMValueKind::LLVMFunctionValueKind {
        return false;
    }
    let mut len = 0;
    let p = unsafe { LLVMGetValueName2(v, &mut len) };
    !p.is_null() && unsafe { std::slice::from_raw_parts(p as *const u8, len) }.starts_with(b"llvm.dbg.")
}

/// Whether `inst` calls a debug-info intrinsic.
pub fn is_debug_intrinsic_call(inst: LLVMValueRef) -> bool {
    called_value(inst).is_some_and(is_debug_intrinsic)
}

pub fn name(v: LLVMValueRef) -> String {
    let mut len = 0;
    let p = unsafe { LLVMGetValueName2(v, &mut len) };
    if p.is_null() {
        return String::new();
    }
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p as *const u8, len) }).into_owned()
}

pub fn opcode(inst: LLVMValueRef) -> LLVMOpcode {
    unsafe { LLVMGetInstructionOpcode(inst) }
}

pub fn type_of(v: LLVMValueRef) -> LLVMTypeRef {
    unsafe { LLVMTypeOf(v) }
}

pub fn is_void(ty: LLVMTypeRef) -> bool {
    unsafe { LLVMGetTypeKind(ty) == inkwell::llvm_sys::LLVMTypeKind::LLVMVoidTypeKind }
}

pub fn has_uses(v: LLVMValueRef) -> bool {
    unsafe { !LLVMGetFirstUse(v).is_null() }
}

/// The called operand of a call, invoke or callbr; `None` for other
/// instructions.
pub fn called_value(inst: LLVMValueRef) -> Option<LLVMValueRef> {
    match opcode(inst) {
        LLVMOpcode::LLVMCall | LLVMOpcode::LLVMInvoke | LLVMOpcode::LLVMCallBr => {
            let v = unsafe { LLVMGetCalledValue(inst) };
            (!v.is_null()).then_some(v)
        }
        _ => None,
    }
}

/// Looks through pointer casts (`bitcast (@f to ...)`, common in typed-pointer
/// IR) to the function a constant callee names, if any.
pub fn strip_to_function(mut v: LLVMValueRef) -> Option<LLVMValueRef> {
    for _ in 0..8 {
        match unsafe { LLVMGetValueKind(v) } {
            LLVMValueKind::LLVMFunctionValueKind => return Some(v),
            LLVMValueKind::LLVMConstantExprValueKind => {
                let op = unsafe { LLVMGetConstOpcode(v) };
                if matches!(op, LLVMOpcode::LLVMBitCast | LLVMOpcode::LLVMAddrSpaceCast) {
                    v = unsafe { LLVMGetOperand(v, 0) };
                } else {
                    return None;
                }
            }
            LLVMValueKind::LLVMGlobalAliasValueKind => {
                v = unsafe { LLVMAliasGetAliasee(v) };
            }
            _ => return None,
        }
    }
    None
}

pub fn is_inline_asm(v: LLVMValueRef) -> bool {
    unsafe { LLVMGetValueKind(v) == LLVMValueKind::LLVMInlineAsmValueKind }
}

/// Whether a function can be called from outside the module.
pub fn externally_visible(f: LLVMValueRef) -> bool {
    use inkwell::llvm_sys::LLVMLinkage::*;
    !matches!(unsafe { LLVMGetLinkage(f) }, LLVMInternalLinkage | LLVMPrivateLinkage)
}

pub fn module_source_name(m: LLVMModuleRef) -> String {
    let mut len = 0;
    let p = unsafe { LLVMGetSourceFileName(m, &mut len) };
    if p.is_null() {
        return String::new();
    }
    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p as *const u8, len) }).into_owned()
}

pub fn target_triple(m: LLVMModuleRef) -> String {
    unsafe { CStr::from_ptr(LLVMGetTarget(m)).to_string_lossy().into_owned() }
}

pub fn data_layout(m: LLVMModuleRef) -> String {
    unsafe { CStr::from_ptr(LLVMGetDataLayoutStr(m)).to_string_lossy().into_owned() }
}

pub fn terminator(b: LLVMBasicBlockRef) -> LLVMValueRef {
    unsafe { LLVMGetBasicBlockTerminator(b) }
}

pub fn entry_block(f: LLVMValueRef) -> LLVMBasicBlockRef {
    unsafe { LLVMGetEntryBasicBlock(f) }
}
