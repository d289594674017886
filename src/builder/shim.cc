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
#include <llvm/ADT/DenseMap.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/AssemblyAnnotationWriter.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Instruction.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/ModuleSlotTracker.h>
#include <llvm/IR/Type.h>
#include <llvm/Support/FormattedStream.h>
#include <llvm/Support/raw_ostream.h>

#include <memory>
#include <string>

using namespace llvm;

namespace {

// Where each instruction's text lies in one printing of a whole function
// or module. LLVM's writer calls emitInstructionAnnot just before an
// instruction (before its indentation) and printInfoComment just after it
// (before the newline), with the same printInstruction between that
// Value::print runs: the text between the two is what Value::print writes
// for the instruction with that printing's numbering.
class Spans : public AssemblyAnnotationWriter {
public:
  DenseMap<const Instruction *, std::pair<uint64_t, uint64_t>> at;
  // A global variable's definition is one line, and the writer calls
  // printInfoComment at its end (printGlobal, as Value::print runs it):
  // where the line ends.
  DenseMap<const GlobalVariable *, uint64_t> global_end;

  void emitInstructionAnnot(const Instruction *inst, formatted_raw_ostream &os) override {
    current = inst;
    start = os.tell();
  }

  void printInfoComment(const Value &v, formatted_raw_ostream &os) override {
    if (&v == current)
      at[current] = {start, os.tell()};
    else if (auto *gv = dyn_cast<GlobalVariable>(&v))
      global_end[gv] = os.tell();
    current = nullptr;
  }

private:
  const Instruction *current = nullptr;
  uint64_t start = 0;
};

// One printing and its spans.
struct Printed {
  std::string text;
  Spans spans;

  // The instruction's text into `out`; false if this printing has none.
  bool get(const Instruction *inst, std::string &out) const {
    auto it = spans.at.find(inst);
    if (it == spans.at.end())
      return false;
    out.assign(text, it->second.first, it->second.second - it->second.first);
    return true;
  }

  // The global variable's definition line into `out`; false if none.
  bool get(const GlobalVariable *gv, std::string &out) const {
    auto it = spans.global_end.find(gv);
    if (it == spans.global_end.end() || it->second == 0 || it->second > text.size())
      return false;
    size_t end = it->second;
    size_t nl = text.rfind('\n', end - 1);
    size_t start = nl == std::string::npos ? 0 : nl + 1;
    out.assign(text, start, end - start);
    return true;
  }
};

// Value::print makes an AssemblyWriter for every call, and its constructor
// walks every global object of the module (for comdats): printing the
// instructions one by one is quadratic in the module's size (16 s for a
// module of 3,000 functions and 180,000 instructions, 0.2 s for a tenth
// of it; each global variable's definition likewise). Instructions are
// therefore read from one printing of the module (its own numbering,
// `whole`'s) or, in compat mode, of their function (Function::print
// numbers as a tracker that has seen the module header and that function,
// `per_function`'s), and global variables from the module's: linear.
// (Aliases and ifuncs, rare, are still printed one by one.)
// A Module or a Function, printed whole with its spans.
template <typename Whole> std::unique_ptr<Printed> printWhole(const Whole &w) {
  auto p = std::make_unique<Printed>();
  raw_string_ostream os(p->text);
  w.print(os, &p->spans);
  os.flush();
  return p;
}

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
  // Instructions' texts: the module printed once, and (compat mode) the
  // last function printed (the builder takes a function's instructions
  // together).
  std::unique_ptr<Printed> module_text;
  std::unique_ptr<Printed> function_text;
  const Function *function_text_for = nullptr;
  std::string buf;

  const Printed &moduleText() {
    if (!module_text)
      module_text = printWhole(*module);
    return *module_text;
  }

  const Printed &functionText(const Function *f) {
    if (function_text_for != f || !function_text) {
      function_text = printWhole(*f);
      function_text_for = f;
    }
    return *function_text;
  }

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

// A call whose call-site function attributes print as an attribute group
// (`#N`).
bool hasCallSiteAttributeGroup(const Instruction &inst) {
  auto *call = dyn_cast<CallBase>(&inst);
  return call && call->getAttributes().getFnAttrs().hasAttributes();
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
  if (auto *inst = dyn_cast<Instruction>(v)) {
    bool whole = !p->compat || hasMetadataOperand(*inst);
    // Compat mode, an instruction with metadata operands and a call-site
    // attribute group: upstream numbered its metadata as the whole module
    // but its attribute groups as the module header and its function
    // alone, which neither printing gives. LLVM's own Value::print does
    // exactly that (a fresh tracker each call); such calls are rare.
    if (p->compat && whole && hasCallSiteAttributeGroup(*inst)) {
      v->print(os);
      os.flush();
      return finish(p, len);
    }
    if (f && (whole ? p->moduleText() : p->functionText(f)).get(inst, p->buf))
      return finish(p, len);
  } else if (auto *gv = dyn_cast<GlobalVariable>(v)) {
    // Printed with the whole-module numbering in both modes, as below.
    if (p->moduleText().get(gv, p->buf))
      return finish(p, len);
  }
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
