//! ProGraML program graphs from LLVM IR.
//!
//! A *program graph* (SPEC.md §1) has one node per instruction, variable and
//! constant of an LLVM module, and edges for control flow (instruction to
//! instruction), data flow (value to user, instruction to the value it
//! defines) and calls (call site to callee and back). It is the input
//! representation of the ProGraML graph neural networks.
//!
//! Data flows one way through the crate:
//!
//! - [`ir`] reads `.ll`/`.bc` files into LLVM modules (typed or opaque
//!   pointers, detected);
//! - [`builder`] turns a module into a [`graph::ProgramGraph`];
//! - [`format`] writes graphs as ProGraML protobuf, networkx JSON or DOT;
//! - [`analysis`] labels graphs with the five DeepDataFlow analyses;
//! - [`vocab`] maps node texts to ids, as the model's embedding sees them;
//! - [`batch`] turns graphs (and roots, and labels) into the model's input
//!   arrays and packs them into batches, for training and inference alike.
//!
//! ```no_run
//! use programl::{builder::{build, BuildOptions}, format::{write_graph, Format}, ir};
//! let context = inkwell::context::Context::create();
//! let module = ir::load_module(&context, "example.ll".as_ref()).unwrap();
//! let graph = build(&module, &BuildOptions::default());
//! write_graph(&graph, Format::Json, &mut std::io::stdout()).unwrap();
//! ```
//!
//! This is the torch-free core: the plugin links it and nothing else of the
//! workspace. It never links libtorch, zstd or plotters (the dataset store,
//! the CLI and the model are crates of their own), so the graph path stays
//! fast enough to run inside the compiler.

pub mod analysis;
pub mod batch;
pub mod builder;
pub mod format;
pub mod fsutil;
pub mod graph;
pub mod hash;
pub mod ir;
pub mod journal;
pub mod metrics;
pub mod vocab;

pub use graph::ProgramGraph;

/// The major version of the LLVM this crate was built against.
pub const LLVM_MAJOR: &str = env!("PROGRAML_LLVM_MAJOR");
/// The `bin` directory of that LLVM (opt, clang, FileCheck).
pub const LLVM_BINDIR: &str = env!("PROGRAML_LLVM_BINDIR");

/// The stack of a thread that reads IR and builds graphs (the CLI's and the
/// dataset builder's workers): LLVM's reader and the builder recurse on
/// nested types, and IR that the main thread's 8 MiB reads overflowed a
/// worker's default 2 MiB (a type nested 8,000 deep). Address space only,
/// until touched.
pub const WORKER_STACK: usize = 64 << 20;

/// An error and its causes on one line, `outer: inner`, as anyhow's `{:#}`
/// prints them, without a cause the text before it already ends with
/// (errors that name a file and quote their source would otherwise say it
/// twice). What the `programl` and `programl-train` binaries print.
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let part = c.to_string();
        if text.is_empty() {
            text = part;
        } else if !text.ends_with(&part) {
            text = format!("{text}: {part}");
        }
        cause = c.source();
    }
    text
}
