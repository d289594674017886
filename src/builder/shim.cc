// C++ helpers for the graph builder: the parts of LLVM's printer that the C
// API does not expose.
//
// The C API's LLVMPrintValueToString builds a fresh ModuleSlotTracker for
// every call, which renumbers the whole function (and walks the module) each
// time: quadratic in function size. Here one tracker serves a whole module,
// so printing every instruction is linear.
//
// In compat mode the metadata numbering of upstream ProGraML 0.3.2 is kept:
// it printed every value on its own, so an instruction's metadata slots were
// numbered as if only the module header and that instruction's function had
// been seen (unless the instruction has metadata operands, for which LLVM
// numbers all of the module's metadata). A tracker per function reproduces
// that exactly.

#include <llvm-c/Core.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instruction.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/ModuleSlotTracker.h>
#include <llvm/IR/Type.h>
#include <llvm/Support/raw_ostream.h>

#include <memory>
#include <string>

using namespace llvm;

namespace {

struct Printer {
  const Module *module;
  bool compat;
  // Numbers all metadata up front, in module order: the numbering of the
  // module's own textual form.
  std::unique_ptr<ModuleSlotTracker> whole;
  // Compat mode: a tracker that has seen only the module header and one
  // function.
  std::unique_ptr<ModuleSlotTracker> per_function;
  const Function *per_function_for = nullptr;
  std::string buf;

  ModuleSlotTracker &wholeModule() {
    if (!whole)
      whole = std::make_unique<ModuleSlotTracker>(module, /*ShouldInitializeAllMetadata=*/true);
    return *whole;
  }

  ModuleSlotTracker &forFunction(const Function *f) {
    if (per_function_for != f || !per_function) {
      per_function = std::make_unique<ModuleSlotTracker>(module, /*ShouldInitializeAllMetadata=*/false);
      per_function_for = f;
    }
    return *per_function;
  }
};

bool hasMetadataOperand(const Instruction &inst) {
  for (const Use &op : inst.operands())
    if (auto *md = dyn_cast_or_null<MetadataAsValue>(op.get()))
      if (isa<MDNode>(md->getMetadata()))
        return true;
  return false;
}

const Function *functionOf(const Value *v) {
  if (auto *inst = dyn_cast<Instruction>(v))
    return inst->getFunction();
  if (auto *arg = dyn_cast<Argument>(v))
    return arg->getParent();
  return nullptr;
}

const char *finish(Printer *p, size_t *len) {
  *len = p->buf.size();
  return p->buf.data();
}

}  // namespace

extern "C" {

void *programl_printer_new(LLVMModuleRef module, int compat) {
  auto *p = new Printer;
  p->module = unwrap(module);
  p->compat = compat != 0;
  return p;
}

void programl_printer_free(void *printer) { delete static_cast<Printer *>(printer); }

// Prints a value as LLVM's `Value::print` does: a whole instruction, a
// global's definition line, a typed constant, or "<type> %name" for an
// argument. The text stays valid until the next call on this printer.
const char *programl_print_value(void *printer, LLVMValueRef value, size_t *len) {
  auto *p = static_cast<Printer *>(printer);
  const Value *v = unwrap(value);
  p->buf.clear();
  raw_string_ostream os(p->buf);
  const Function *f = functionOf(v);
  ModuleSlotTracker *mst = &p->wholeModule();
  if (p->compat && f) {
    auto *inst = dyn_cast<Instruction>(v);
    if (!(inst && hasMetadataOperand(*inst)))
      mst = &p->forFunction(f);
  }
  if (f)
    mst->incorporateFunction(*f);
  if (isa<Argument>(v))
    v->printAsOperand(os, /*PrintType=*/true, *mst);
  else
    v->print(os, *mst);
  os.flush();
  return finish(p, len);
}

// Prints a value as an operand without its type: "%3", "@g", "%name".
const char *programl_print_operand(void *printer, LLVMValueRef value, size_t *len) {
  auto *p = static_cast<Printer *>(printer);
  const Value *v = unwrap(value);
  p->buf.clear();
  raw_string_ostream os(p->buf);
  ModuleSlotTracker &mst = p->wholeModule();
  if (const Function *f = functionOf(v))
    mst.incorporateFunction(*f);
  v->printAsOperand(os, /*PrintType=*/false, mst);
  os.flush();
  return finish(p, len);
}

// The node text of a value of this type, as ProGraML spells it: the printed
// type, except that a struct, or a (typed) pointer chain ending in a struct,
// is "struct" followed by one '*' per pointer level.
const char *programl_type_text(void *printer, LLVMTypeRef type, size_t *len) {
  auto *p = static_cast<Printer *>(printer);
  const Type *t = unwrap(type);
  p->buf.clear();
  int depth = 0;
  const Type *base = t;
#if LLVM_VERSION_MAJOR < 17
  while (auto *ptr = dyn_cast<PointerType>(base)) {
    if (ptr->isOpaque())
      break;
    base = ptr->getNonOpaquePointerElementType();
    ++depth;
  }
#endif
  if (base->isStructTy()) {
    p->buf = "struct";
    p->buf.append(depth, '*');
  } else {
    raw_string_ostream os(p->buf);
    t->print(os);
    os.flush();
  }
  return finish(p, len);
}

// The mask of a shufflevector as the constant operand it was before LLVM 11
// (operand 2); null for other instructions.
LLVMValueRef programl_shuffle_mask(LLVMValueRef inst) {
  if (auto *shuffle = dyn_cast<ShuffleVectorInst>(unwrap(inst)))
    return wrap(shuffle->getShuffleMaskForBitcode());
  return nullptr;
}

const char *programl_opcode_name(LLVMValueRef inst) {
  return unwrap<Instruction>(inst)->getOpcodeName();
}

}  // extern "C"
