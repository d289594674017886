// The plugin's LLVM side, what LLVM's C API cannot do:
//
// - registration (`programl_passes_register`, which lib.rs's
//   `llvmGetPassPluginInfo` hands LLVM): the pipeline-parsing callback and
//   the `OptimizerLast` and full-LTO extension points;
// - the two passes as LLVM sees them: C++ classes named `programl-graph`
//   and `programl-infer`, so that `-debug-pass-manager`, `-time-passes`,
//   `-print-after=programl-infer` and `-print-pipeline-passes` name them,
//   and `opt` can parse a printed pipeline back. Their work is Rust's
//   (lib.rs), reached through the `programl_passes_*` functions declared
//   below, each of which catches its panics;
// - removing a named metadata node (the schema's module-level annotations
//   are replaced as a whole when a module is annotated again, e.g. by full
//   LTO).
#include <llvm-c/Core.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassInstrumentation.h>
#include <llvm/IR/PassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/PassPlugin.h>
#include <llvm/Support/raw_ostream.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

extern "C" {
// A pipeline element: 0 when it is not ours, 1 when it is (then *kind
// and *pass are set), 2 when it is ours but refused (already reported on
// stderr; opt then fails on the unknown name).
// `nested`: whether the element has a nested pipeline (`name(...)`), which
// neither pass takes.
int programl_passes_parse(const char *name, size_t len, int nested, unsigned *kind, void **pass);
// The passes an extension point adds (site 0: OptimizerLast, 1: full LTO's
// last): each of *graph and *infer is a pass, or null when the environment
// leaves it off.
void programl_passes_extension(unsigned site, int optimised, void **graph, void **infer);
// Runs `pass` on `module`: 1 when it preserved every analysis.
int programl_passes_run(void *pass, LLVMModuleRef module);
// The pass's element in a printed pipeline (valid while the pass lives).
const char *programl_passes_text(void *pass, size_t *len);
void programl_passes_drop(void *pass);
}

namespace {

constexpr unsigned kGraph = 0;
constexpr unsigned kInfer = 1;

struct GraphName {
  static constexpr const char *value = "programl-graph";
};
struct InferName {
  static constexpr const char *value = "programl-infer";
};

// One of the Rust passes, under its own name. PassInfoMixin's name() would
// be the C++ type's; LLVM asks PassT::name() and calls printPipeline, both
// hidden here.
template <typename Name> struct NamedPass : llvm::PassInfoMixin<NamedPass<Name>> {
  explicit NamedPass(void *pass) : Pass(pass, programl_passes_drop) {}

  static llvm::StringRef name() { return Name::value; }

  // Their output is the point, as a printer's is: -opt-bisect-limit and
  // optnone never skip them.
  static bool isRequired() { return true; }

  llvm::PreservedAnalyses run(llvm::Module &M, llvm::ModuleAnalysisManager &) {
    return programl_passes_run(Pass.get(), llvm::wrap(&M)) ? llvm::PreservedAnalyses::all()
                                                            : llvm::PreservedAnalyses::none();
  }

  void printPipeline(llvm::raw_ostream &OS, llvm::function_ref<llvm::StringRef(llvm::StringRef)>) {
    size_t Len = 0;
    const char *Text = programl_passes_text(Pass.get(), &Len);
    OS << llvm::StringRef(Text, Len);
  }

  std::unique_ptr<void, void (*)(void *)> Pass;
};

void add(llvm::ModulePassManager &MPM, unsigned Kind, void *Pass) {
  if (!Pass)
    return;
  if (Kind == kGraph)
    MPM.addPass(NamedPass<GraphName>(Pass));
  else
    MPM.addPass(NamedPass<InferName>(Pass));
}

// Whether the pipeline so far holds an extension instance of ours: the
// plugin loaded twice (`-fpass-plugin=P -fpass-plugin=P`, as build systems
// that add flags at two levels do) registers its extension callbacks twice,
// and LLVM calls them in load order, another plugin's perhaps in between
// (P, Q, P). Once is enough, or every pass would run twice. The pipeline an
// extension point hands over is that point's own (OptimizerLast's is the
// optimisation pipeline, full LTO's the LTO pipeline), where only these
// callbacks add an `<auto>` instance.
bool holdsOurs(llvm::ModulePassManager &MPM) {
  if (MPM.isEmpty())
    return false;
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  MPM.printPipeline(OS, [](llvm::StringRef ClassName) { return ClassName; });
  OS.flush();
  llvm::StringRef Printed(Text);
  return Printed.contains("programl-graph<auto>") || Printed.contains("programl-infer<auto>");
}

void addExtension(llvm::ModulePassManager &MPM, unsigned Site, llvm::OptimizationLevel Level) {
  if (holdsOurs(MPM))
    return;
  void *Graph = nullptr;
  void *Infer = nullptr;
  programl_passes_extension(Site, Level == llvm::OptimizationLevel::O0 ? 0 : 1, &Graph, &Infer);
  add(MPM, kGraph, Graph);
  add(MPM, kInfer, Infer);
}

} // namespace

extern "C" uint32_t programl_passes_api_version() { return LLVM_PLUGIN_API_VERSION; }

extern "C" uint32_t programl_passes_llvm_major() { return LLVM_VERSION_MAJOR; }

extern "C" void programl_passes_register(llvm::PassBuilder &PB) {
  // -print-after= and -print-before= match a pass by the name the
  // instrumentation maps its class to.
  if (llvm::PassInstrumentationCallbacks *PIC = PB.getPassInstrumentationCallbacks()) {
    PIC->addClassToPassName(GraphName::value, GraphName::value);
    PIC->addClassToPassName(InferName::value, InferName::value);
  }
  PB.registerPipelineParsingCallback(
      [](llvm::StringRef Name, llvm::ModulePassManager &MPM,
         llvm::ArrayRef<llvm::PassBuilder::PipelineElement> Nested) {
        unsigned Kind = 0;
        void *Pass = nullptr;
        if (programl_passes_parse(Name.data(), Name.size(), Nested.empty() ? 0 : 1, &Kind, &Pass) != 1)
          return false;
        add(MPM, Kind, Pass);
        return true;
      });
#if LLVM_VERSION_MAJOR >= 20
  // From LLVM 20 the callback is also told the LTO phase; the extension
  // point, and what the pass does there, are the same.
  PB.registerOptimizerLastEPCallback(
      [](llvm::ModulePassManager &MPM, llvm::OptimizationLevel Level, llvm::ThinOrFullLTOPhase) {
        addExtension(MPM, 0, Level);
      });
#else
  PB.registerOptimizerLastEPCallback(
      [](llvm::ModulePassManager &MPM, llvm::OptimizationLevel Level) { addExtension(MPM, 0, Level); });
#endif
#if LLVM_VERSION_MAJOR >= 15
  PB.registerFullLinkTimeOptimizationLastEPCallback(
      [](llvm::ModulePassManager &MPM, llvm::OptimizationLevel Level) { addExtension(MPM, 1, Level); });
#endif
}

extern "C" void programl_passes_erase_named_metadata(LLVMModuleRef module, const char *name) {
  llvm::Module *m = llvm::unwrap(module);
  if (llvm::NamedMDNode *node = m->getNamedMetadata(name))
    m->eraseNamedMetadata(node);
}
