//! LLVM module → [`ProgramGraph`].
//!
//! Two builders share one front end ([`llvm`]):
//!
//! - [`Mode::Paper`] (the default) follows the ProGraML paper: one variable
//!   node per SSA value, one constant node per distinct constant, direct and
//!   indirect calls (`invoke` included) linked, every block's successors
//!   linked, and `[external]` linked to the externally visible functions.
//! - [`Mode::Programl03`] reproduces ProGraML 0.3.2's `llvm2graph` node for
//!   node, quirks included, for checks against the reference tools and for
//!   interoperation with models trained on its graphs.
//!
//! **Architecture invariant:** the builder never fails on a module that LLVM
//! accepted, and never panics; it only reads the module.

mod check;
mod compat;
mod llvm;
mod paper;

pub use check::check;

use inkwell::llvm_sys::prelude::{LLVMModuleRef, LLVMValueRef};
use inkwell::module::Module;

use crate::graph::{self, ProgramGraph};

/// Which graph construction to follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The paper's graphs (SPEC.md §1); see the module docs.
    #[default]
    Paper,
    /// ProGraML 0.3.2's graphs: per-use variable nodes and its quirks.
    Programl03,
}

impl Mode {
    /// The spelling used by `--compat` and the pass's `compat=` parameter.
    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "" | "none" | "paper" => Some(Mode::Paper),
            "programl-0.3" | "programl-0.3.2" => Some(Mode::Programl03),
            _ => None,
        }
    }
}

/// Options of a build.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct BuildOptions {
    pub mode: Mode,
    /// Leave out the debug-info intrinsics (calls of `llvm.dbg.*`, and the
    /// declarations of those functions). They describe source variables,
    /// not the program, and LLVM requires that they change no generated
    /// code; kept, they are a quarter of the instructions of a `-g -O2`
    /// unit. Paper mode only: compat mode reproduces ProGraML 0.3.2, which
    /// keeps them.
    pub drop_debug_intrinsics: bool,
    /// Leave every node's `full_text` empty (`Some("")`, node 0's `None`):
    /// for a caller that reads only kinds, texts and edges, such as a
    /// graph-level model inside the compiler. Printing each value is most
    /// of the graph's cost there. Paper mode only; the subexpressions
    /// analysis reads `full_text`, so a graph for analyses keeps it.
    pub skip_full_text: bool,
}

impl BuildOptions {
    /// The graphs the models are trained on and predict from: paper mode
    /// without debug intrinsics ([`BuildOptions::drop_debug_intrinsics`]),
    /// so a `-g` build featurises exactly as the same build without `-g`
    /// (the training corpora have no debug info), and the learned pass
    /// decides alike. Every path from IR to a model uses it: dataset
    /// building, training and evaluation on IR files, and the pass.
    pub const MODEL: BuildOptions = BuildOptions { mode: Mode::Paper, drop_debug_intrinsics: true, skip_full_text: false };
}

/// Whether `f` is a debug-info intrinsic (a function named `llvm.dbg.*`),
/// which [`BuildOptions::drop_debug_intrinsics`] leaves out with its calls.
///
/// # Safety
/// `f` is a valid value.
pub unsafe fn is_debug_intrinsic(f: LLVMValueRef) -> bool {
    llvm::is_debug_intrinsic(f)
}

/// Whether `inst` calls a debug-info intrinsic.
///
/// # Safety
/// `inst` is a valid instruction.
pub unsafe fn is_debug_intrinsic_call(inst: LLVMValueRef) -> bool {
    llvm::is_debug_intrinsic_call(inst)
}

/// Builds the program graph of `module`.
pub fn build(module: &Module<'_>, options: &BuildOptions) -> ProgramGraph {
    // SAFETY: the module is borrowed for the whole call.
    unsafe { build_raw(module.as_mut_ptr(), options) }
}

/// Reads an IR file (`.ll` or `.bc`, verified) into a fresh LLVM context and
/// builds its program graph. Errors name the file.
pub fn build_file(path: &std::path::Path, options: &BuildOptions) -> Result<ProgramGraph, crate::ir::LoadError> {
    let context = inkwell::context::Context::create();
    let module = crate::ir::load_module(&context, path)?;
    Ok(build(&module, options))
}

/// Builds the program graph of a raw module handle.
///
/// # Safety
/// `module` must be a valid module that stays alive and unchanged during the
/// call.
pub unsafe fn build_raw(module: LLVMModuleRef, options: &BuildOptions) -> ProgramGraph {
    let mut g = ProgramGraph::new();
    let mut m = graph::Module { name: llvm::module_source_name(module), ..Default::default() };
    m.features.insert(graph::FEATURE_TARGET_TRIPLE.to_string(), llvm::target_triple(module));
    m.features.insert(graph::FEATURE_DATA_LAYOUT.to_string(), llvm::data_layout(module));
    g.modules.push(m);
    match options.mode {
        Mode::Paper => paper::build(module, g, options.drop_debug_intrinsics, options.skip_full_text),
        Mode::Programl03 => compat::build(module, g),
    }
}

/// The `full_text` of a function that is only declared.
const UNDEFINED_FULL_TEXT: &str = "";

fn declaration_node(g: &mut ProgramGraph, function: graph::FunctionId) -> petgraph::graph::NodeIndex<u32> {
    g.add_node(graph::Node {
        kind: graph::NodeKind::Instruction,
        text: graph::UNDEFINED_FUNCTION_TEXT.to_string(),
        full_text: Some(UNDEFINED_FULL_TEXT.to_string()),
        function: Some(function),
        block: 0,
    })
}

/// Links a call site to its callee: site → entry, each exit → site.
fn link_call(
    g: &mut ProgramGraph,
    site: petgraph::graph::NodeIndex<u32>,
    entry: petgraph::graph::NodeIndex<u32>,
    exits: &[petgraph::graph::NodeIndex<u32>],
) {
    g.add_edge(graph::Flow::Call, 0, site, entry);
    for &exit in exits {
        g.add_edge(graph::Flow::Call, 0, exit, site);
    }
}
