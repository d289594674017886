//! `programl-passes`: ProGraML program graphs, and a learned pass, from
//! inside `opt` and `clang`.
//!
//! One LLVM pass plugin (new pass manager), built as a cdylib:
//!
//! ```text
//! opt-16 -load-pass-plugin=libprograml_passes.so -passes=programl-graph x.ll -disable-output
//! opt-16 -load-pass-plugin=libprograml_passes.so \
//!     -passes='programl-graph<out=graphs;format=json;compat=programl-0.3>' x.ll -disable-output
//! PROGRAML_GRAPH_DIR=graphs clang-16 -fpass-plugin=libprograml_passes.so -O2 -c x.c
//! ```
//!
//! The pass `programl-graph` builds the graph of the whole module
//! ([`programl::builder::build`]) and writes it to a file; it only reads the
//! IR and preserves all analyses. It is reachable two ways:
//!
//! - by name in an `opt -passes=` pipeline, with optional parameters
//!   `programl-graph<out=DIR;format=FMT;compat=MODE>` ([`config::Params`]);
//! - at the `OptimizerLast` extension point, which LLVM 16 runs at every
//!   optimisation level, `-O0` included, so `clang -fpass-plugin=` gets one
//!   graph per module of its final IR. That instance is configured by the
//!   environment only ([`config`]), skips itself when the pipeline also
//!   names `programl-graph` (so a module never gets two graphs), and is off
//!   when `PROGRAML_GRAPH_AUTO=0`. `opt -passes=verify` builds no default
//!   pipeline, so it never runs there.
//!
//! The pass `programl-infer` ([`infer`]) runs a trained GGNN bundle on the
//! module's graph and writes its predictions into the IR as metadata: by
//! name (`programl-infer<model=DIR;...>`), and with `PROGRAML_INFER` set at
//! `OptimizerLast` and at the full-LTO extension point. On the CPU it
//! predicts in-process with `programl-infer`'s torch-free inference; only
//! CUDA opens the model runtime (`libprograml_runtime_cuda.so`, which links
//! libtorch), on first use.
//!
//! **Architecture invariants:** registration does no work beyond
//! registering callbacks (loading the plugin must stay cheap, and the plugin
//! never links libtorch: the learned pass `dlopen`s its runtime); nothing a
//! pass does can abort the compiler — panics are caught at the pass boundary
//! ([`guard`]) and every failure is a one-line `programl-graph: ...` or
//! `programl-infer: ...` warning on stderr.

pub mod config;
pub mod graph;
pub mod guard;
pub mod infer;
pub mod logger;

use std::sync::atomic::{AtomicBool, Ordering};

use llvm_plugin::inkwell::module::Module;
use llvm_plugin::{LlvmModulePass, ModuleAnalysisManager, OptimizationLevel, PassBuilder, PipelineParsing, PreservedAnalyses};

/// Set once a pipeline names `programl-graph`: the extension-point instance
/// then stands down, so a module never gets two graphs.
static NAMED_IN_PIPELINE: AtomicBool = AtomicBool::new(false);
/// The same for `programl-infer`.
static INFER_NAMED_IN_PIPELINE: AtomicBool = AtomicBool::new(false);

#[llvm_plugin::plugin(name = "programl", version = "0.1.0")]
fn plugin_registrar(builder: &mut PassBuilder) {
    builder.add_module_pipeline_parsing_callback(|name, manager| {
        // LLVM calls in through `extern "C"`: a panic here would abort.
        guard::catch(|| parse_pipeline_element(name, manager)).unwrap_or_else(|panic| {
            guard::report_pipeline_error("programl", name, &format_args!("internal error: {panic}"));
            PipelineParsing::NotParsed
        })
    });
    // The pipeline's level says whether the IR the pass sees is optimised.
    builder.add_optimizer_last_ep_callback(|manager, level| {
        manager.add_pass(GraphAtOptimizerLast);
        manager.add_pass(InferFromEnvironment(infer::Site::OptimizerLast, Some(!matches!(level, OptimizationLevel::O0))));
    });
    builder.add_full_lto_last_ep_callback(|manager, level| {
        manager.add_pass(InferFromEnvironment(infer::Site::FullLto, Some(!matches!(level, OptimizationLevel::O0))));
    });
}

/// One element of an `opt -passes=` pipeline: ours (parsed, or a
/// reported error), or another's.
fn parse_pipeline_element(name: &str, manager: &mut llvm_plugin::ModulePassManager) -> PipelineParsing {
    if let Some(parsed) = infer::params::parse_pass_name(name) {
        return match parsed {
            Ok(params) => {
                INFER_NAMED_IN_PIPELINE.store(true, Ordering::Relaxed);
                manager.add_pass(InferPass(params));
                PipelineParsing::Parsed
            }
            Err(error) => {
                guard::report_pipeline_error(infer::params::PASS_NAME, name, &error);
                PipelineParsing::NotParsed
            }
        };
    }
    match config::parse_pass_name(name) {
        None => PipelineParsing::NotParsed,
        Some(Ok(params)) => {
            NAMED_IN_PIPELINE.store(true, Ordering::Relaxed);
            manager.add_pass(GraphPass(params));
            PipelineParsing::Parsed
        }
        Some(Err(error)) => {
            // opt then fails with "unknown pass name" and exits non-zero.
            guard::report_parse_error(name, &error);
            PipelineParsing::NotParsed
        }
    }
}

/// `programl-graph` as named in a pipeline, with its parameters.
struct GraphPass(config::Params);

impl LlvmModulePass for GraphPass {
    fn run_pass(&self, module: &mut Module<'_>, _: &ModuleAnalysisManager) -> PreservedAnalyses {
        guard::run(|| graph::write_module_graph(module, &self.0));
        PreservedAnalyses::All
    }
}

/// `programl-graph` added at the `OptimizerLast` extension point (clang).
struct GraphAtOptimizerLast;

impl LlvmModulePass for GraphAtOptimizerLast {
    fn run_pass(&self, module: &mut Module<'_>, _: &ModuleAnalysisManager) -> PreservedAnalyses {
        if !NAMED_IN_PIPELINE.load(Ordering::Relaxed) {
            guard::run(|| {
                if config::auto_enabled()? && !(infer::params::env_enabled() && !config::any_graph_variable()) {
                    graph::write_module_graph(module, &config::Params::default())?;
                }
                Ok::<(), graph::GraphError>(())
            });
        }
        PreservedAnalyses::All
    }
}

/// `programl-infer` as named in a pipeline, with its parameters.
struct InferPass(infer::params::Params);

impl LlvmModulePass for InferPass {
    fn run_pass(&self, module: &mut Module<'_>, _: &ModuleAnalysisManager) -> PreservedAnalyses {
        // SAFETY: the pass manager hands over a valid module for this call.
        unsafe { infer::run_pass(module.as_mut_ptr(), &self.0, infer::Site::Pipeline, None) };
        PreservedAnalyses::None
    }
}

/// `programl-infer` configured by `PROGRAML_INFER`, at `OptimizerLast`
/// (clang at every -O level, opt's default pipelines) and at the full-LTO
/// extension point (lld's `-flto` link, opt's `lto<...>`). Does nothing
/// unless the variable is set, or when the pipeline names the pass itself.
/// The second field: whether the pipeline optimises (its level above -O0).
struct InferFromEnvironment(infer::Site, Option<bool>);

impl LlvmModulePass for InferFromEnvironment {
    fn run_pass(&self, module: &mut Module<'_>, _: &ModuleAnalysisManager) -> PreservedAnalyses {
        if INFER_NAMED_IN_PIPELINE.load(Ordering::Relaxed) {
            return PreservedAnalyses::All;
        }
        let read = guard::catch(|| infer::params::from_env().map(|r| r.map_err(|e| e.to_string())))
            .unwrap_or_else(|panic| Some(Err(format!("internal error: {panic}"))));
        match read {
            None => PreservedAnalyses::All,
            Some(Ok(params)) => {
                // SAFETY: as above.
                unsafe { infer::run_pass(module.as_mut_ptr(), &params, self.0, self.1) };
                PreservedAnalyses::None
            }
            Some(Err(error)) => {
                logger::init();
                log::warn!(target: infer::params::PASS_NAME, "{}: {error}; no prediction", infer::params::ENV_INFER);
                PreservedAnalyses::All
            }
        }
    }
}
