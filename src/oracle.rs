//! Tooling around the reference implementation (ProGraML 0.3.2's
//! `llvm2graph-10`): locating it, rewriting IR so LLVM 10 can read it, and
//! comparing graphs as multisets. Used by the conformance test and the
//! construction benchmark.
