// What the learned pass needs of LLVM that its C API lacks: removing a
// named metadata node (the schema's module-level annotations are replaced
// as a whole when a module is annotated again, e.g. by full LTO).
#include <llvm-c/Core.h>
#include <llvm/IR/Module.h>

extern "C" void programl_passes_erase_named_metadata(LLVMModuleRef module, const char *name) {
  llvm::Module *m = llvm::unwrap(module);
  if (llvm::NamedMDNode *node = m->getNamedMetadata(name))
    m->eraseNamedMetadata(node);
}
