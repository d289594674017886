//! The runtime's C ABI, called as the plugin calls it (through the same
//! `extern "C"` functions, linked from the rlib): a shipped bundle opens and
//! predicts probabilities that agree with the model crate's; every kind of
//! bad input is an error code with a message naming what is wrong, never a
//! crash; a panic inside is caught.

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::Mutex;

use programl::batch::{Batch, EdgeType, GraphInput, Sample};
use programl_runtime::abi::{RtDtype, RtEdges, RtInput, RtModel, RtOptions, ABI_VERSION};
use programl_runtime::*;

/// The tests share libtorch's process-wide state and an environment
/// variable: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn bundle() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/reachability").canonicalize().unwrap()
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(programl_runtime_last_error()) }.to_string_lossy().into_owned()
}

fn open(dir: &str, device: &str) -> *mut RtModel {
    let (d, v) = (CString::new(dir).unwrap(), CString::new(device).unwrap());
    unsafe { programl_runtime_open(d.as_ptr(), v.as_ptr()) }
}

/// One call's options: the bundle's steps, one thread, `dtype`.
fn options(dtype: RtDtype) -> RtOptions {
    RtOptions { steps: 0, threads: 1, dtype }
}

/// `programl_runtime_predict` under `opts`: its status, and the precision
/// it ran at.
fn predict_with(model: *mut RtModel, batch: &RtInput, opts: &RtOptions, out: &mut [f32]) -> (i32, RtDtype) {
    let mut in_effect = RtDtype(-1);
    let status = unsafe { programl_runtime_predict(model, batch, opts, out.as_mut_ptr(), out.len(), &mut in_effect) };
    (status, in_effect)
}

fn edges(b: &Batch, t: EdgeType) -> RtEdges {
    let e = b.edges(t);
    RtEdges { sources: e.sources.as_ptr(), targets: e.targets.as_ptr(), positions: e.positions.as_ptr(), len: e.len() }
}

fn input(b: &Batch) -> RtInput {
    RtInput {
        nodes: b.node_count(),
        tokens: b.tokens().as_ptr(),
        selector: b.selector().as_ptr(),
        graphs: b.graph_count(),
        offsets: b.offsets().as_ptr(),
        edges: [edges(b, EdgeType::Control), edges(b, EdgeType::Data), edges(b, EdgeType::Call)],
    }
}

/// A real module's graph, two roots, as the pass would batch it.
fn real_batch(vocab: &programl::vocab::Vocabulary) -> Batch {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../llvm-tests/Inputs/infer/prog.c");
    let dir = tempfile::tempdir().unwrap();
    let ll = dir.path().join("prog.ll");
    let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
    let ok = std::process::Command::new(clang).args(["-O1", "-S", "-emit-llvm"]).arg(&src).arg("-o").arg(&ll).status().unwrap();
    assert!(ok.success());
    let graph = programl::builder::build_file(&ll, &Default::default()).unwrap();
    let g = GraphInput::new(&graph, vocab).unwrap();
    Batch::from_samples(&[Sample { graph: &g, root: Some(5), positives: None }, Sample { graph: &g, root: Some(9), positives: None }])
        .unwrap()
}

#[test]
fn open_describe_predict_close() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(programl_runtime_abi_version(), ABI_VERSION);
    let dir = bundle();
    let model = open(dir.to_str().unwrap(), "cpu");
    assert!(!model.is_null(), "{}", last_error());
    let info: serde_json::Value = serde_json::from_str(&unsafe { CStr::from_ptr(programl_runtime_info(model)) }.to_string_lossy()).unwrap();
    assert_eq!(
        (info["abi"].as_u64(), info["task"].as_str(), info["device"].as_str()),
        (Some(u64::from(ABI_VERSION)), Some("reachability"), Some("cpu"))
    );
    assert_eq!(info["classes"].as_array().unwrap().len(), 2);
    // One intra-op thread from the first call on, before any prediction
    // asks (libtorch's default, every core, left a spinning OpenMP worker
    // behind the bundle's warm-up).
    assert_eq!(programl_model::tch::get_num_threads(), 1, "the runtime's default is one thread");

    let reference = programl_model::bundle::Bundle::load(&dir, programl_model::tch::Device::Cpu).unwrap();
    let batch = real_batch(&reference.vocabulary);
    let mut out = vec![0f32; batch.node_count() * 2];
    let (status, in_effect) = predict_with(model, &input(&batch), &options(RtDtype::F32), &mut out);
    assert_eq!((status, in_effect), (0, RtDtype::F32), "{}", last_error());
    assert_eq!(last_error(), "");
    for pair in out.chunks(2) {
        assert!((pair[0] + pair[1] - 1.0).abs() < 1e-5, "{pair:?} is not a distribution");
    }
    let expected = programl_model::node_probabilities(&reference.model, &batch, reference.model.hyper().steps);
    let worst = out.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-5, "the runtime and the model crate differ by {worst}");
    // The two copies of the graph differ only by their root.
    let n = batch.node_count() / 2;
    assert_ne!(out[..2 * n], out[2 * n..], "the root makes no difference");
    // The batch again, at the bundle's steps, at a precision.
    let predict = |dtype: RtDtype| {
        let mut p = vec![0f32; out.len()];
        let (status, in_effect) = predict_with(model, &input(&batch), &options(dtype), &mut p);
        assert_eq!(status, 0, "{}", last_error());
        (p, in_effect.0)
    };

    // BF16 products where the CPU has them: probabilities within BF16's
    // rounding of FP32's, and the model crate's under the same precision
    // (what `programl-train predict --dtype bf16` prints); FP32 again after.
    let (reduced, bf16) = predict(RtDtype::BF16);
    assert_eq!(bf16, programl_model::cpu_has_bf16() as i32, "{}", last_error());
    let drift = reduced.iter().zip(&out).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    if bf16 == 1 {
        assert!(drift > 0.0 && drift < 0.02, "BF16 against FP32: {drift}");
        let expected = programl_model::node_probabilities(&reference.model, &batch, reference.model.hyper().steps);
        let worst = reduced.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-5, "under BF16 the runtime and the model crate differ by {worst}");
    } else {
        assert_eq!(drift, 0.0, "no BF16 on this CPU: FP32's probabilities");
    }
    // INT8 products on every CPU (the kernels' best INT8 path): within
    // INT8's error of FP32, and the model crate's under the same precision.
    let (bytes, int8) = predict(RtDtype::INT8);
    assert_eq!(int8, 2, "{}", last_error());
    let drift = bytes.iter().zip(&out).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(drift > 0.0 && drift < 0.05, "INT8 against FP32: {drift}");
    let expected = programl_model::node_probabilities(&reference.model, &batch, reference.model.hyper().steps);
    assert_eq!(bytes, expected, "under INT8 the runtime and the model crate differ");
    assert_eq!(predict(RtDtype::F32), (out.clone(), 0), "FP32 again");
    let auto = if programl_model::int8_preferred() { 2 } else { 0 };
    assert_eq!(predict(RtDtype::AUTO).1, auto, "auto is INT8 where the CPU has VNNI, else FP32");
    let mut scratch = vec![0f32; out.len()];
    assert_eq!(predict_with(model, &input(&batch), &options(RtDtype(4)), &mut scratch).0, -1);
    assert!(last_error().contains("dtype 4"), "{}", last_error());
    // Per call: two threads for one call, and the next call's one thread.
    let two = RtOptions { threads: 2, ..options(RtDtype::F32) };
    assert_eq!(predict_with(model, &input(&batch), &two, &mut scratch).0, 0, "{}", last_error());
    assert!(scratch.iter().zip(&out).all(|(a, b)| (a - b).abs() < 1e-6), "two threads, other probabilities");
    assert_eq!(predict(RtDtype::F32).0, out);
    assert_eq!(programl_model::tch::get_num_threads(), 1, "a call's threads are its own");

    // steps > 0 overrides the bundle's.
    let mut few = vec![0f32; out.len()];
    let steps2 = RtOptions { steps: 2, ..options(RtDtype::F32) };
    assert_eq!(predict_with(model, &input(&batch), &steps2, &mut few).0, 0);
    assert_ne!(few, out);
    unsafe { programl_runtime_close(model) };
    unsafe { programl_runtime_close(std::ptr::null_mut()) };
}

#[test]
fn bad_input_is_an_error_naming_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = bundle();
    assert!(open("/nowhere/at/all", "cpu").is_null());
    assert!(last_error().contains("/nowhere/at/all"), "{}", last_error());
    assert!(open(dir.to_str().unwrap(), "tpu").is_null());
    assert!(last_error().contains("device 'tpu' is not one of cpu, cuda, auto"), "{}", last_error());
    assert!(unsafe { programl_runtime_open(std::ptr::null(), std::ptr::null()) }.is_null());
    assert_eq!(last_error(), "the bundle directory is NULL");
    assert!(open(dir.to_str().unwrap(), "cuda").is_null());
    assert!(last_error().contains("device=cuda"), "{}", last_error());
    let model = open(dir.to_str().unwrap(), "cpu");
    assert!(!model.is_null(), "{}", last_error());
    let reference = programl_model::bundle::Bundle::load(&dir, programl_model::tch::Device::Cpu).unwrap();
    let batch = real_batch(&reference.vocabulary);
    let mut out = vec![0f32; batch.node_count() * 2];
    let predict = |i: &RtInput, out: &mut [f32]| predict_with(model, i, &options(RtDtype::F32), out).0;
    let zero = RtOptions { threads: 0, ..options(RtDtype::F32) };
    assert_eq!(predict_with(model, &input(&batch), &zero, &mut out).0, -1);
    assert!(last_error().contains("threads=0"), "{}", last_error());
    let status = unsafe { programl_runtime_predict(model, &input(&batch), std::ptr::null(), out.as_mut_ptr(), out.len(), std::ptr::null_mut()) };
    assert_eq!(status, -1);
    assert_eq!(last_error(), "the options are NULL");

    assert_eq!(predict(&input(&batch), &mut out[1..]), -1);
    assert!(last_error().contains("the output holds"), "{}", last_error());
    let mut wrong = input(&batch);
    let bad_offsets = [0i64, 3, 1, batch.node_count() as i64];
    wrong.offsets = bad_offsets.as_ptr();
    wrong.graphs = 3;
    assert_eq!(predict(&wrong, &mut out), -1);
    assert!(last_error().starts_with("not a model input batch: offsets"), "{}", last_error());
    let mut wrong = input(&batch);
    wrong.tokens = std::ptr::null();
    assert_eq!(predict(&wrong, &mut out), -1);
    assert!(last_error().contains("tokens is NULL"), "{}", last_error());
    let mut wrong = input(&batch);
    let far = [batch.node_count() as i64 + 7];
    wrong.edges[1] = RtEdges { sources: far.as_ptr(), targets: far.as_ptr(), positions: far.as_ptr(), len: 1 };
    assert_eq!(predict(&wrong, &mut out), -1);
    assert!(last_error().contains("data edge 0"), "{}", last_error());
    assert_eq!(predict_with(std::ptr::null_mut(), &input(&batch), &options(RtDtype::F32), &mut out).0, -1);
    assert_eq!(last_error(), "the model is NULL");

    // A panic inside (forced for the test) is an error, not an abort.
    std::env::set_var("PROGRAML_RUNTIME_PANIC_FOR_TESTING", "1");
    assert_eq!(predict(&input(&batch), &mut out), -1);
    std::env::remove_var("PROGRAML_RUNTIME_PANIC_FOR_TESTING");
    assert!(last_error().starts_with("internal error: PROGRAML_RUNTIME_PANIC_FOR_TESTING is set at"), "{}", last_error());
    // And the model still works.
    assert_eq!(predict(&input(&batch), &mut out), 0, "{}", last_error());
    unsafe { programl_runtime_close(model) };
}

/// A graph-level bundle (device mapping, shipped in models/devmap-amd):
/// one class distribution per graph, equal to the model crate's, with the
/// auxiliary inputs the bundle names; each predict function refuses the
/// other kind of bundle.
#[test]
fn graph_level_bundles_predict_per_graph() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/devmap-amd").canonicalize().unwrap();
    let model = open(dir.to_str().unwrap(), "cpu");
    assert!(!model.is_null(), "{}", last_error());
    let info: serde_json::Value = serde_json::from_str(&unsafe { CStr::from_ptr(programl_runtime_info(model)) }.to_string_lossy()).unwrap();
    assert_eq!((info["head"].as_str(), info["aux"].clone()), (Some("graph"), serde_json::json!(["transfer", "wgsize"])));

    // The test kernel, compiled as the bundle's sources were.
    let reference = programl_model::bundle::Bundle::load(&dir, programl_model::tch::Device::Cpu).unwrap();
    let source = reference.config.source.clone().expect("a device-mapping bundle records how its kernels were compiled");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../llvm-tests/Inputs/infer/kernel.cl");
    let tmp = tempfile::tempdir().unwrap();
    let ll = tmp.path().join("kernel.ll");
    let clang = PathBuf::from(programl::LLVM_BINDIR).join("clang");
    let ok = std::process::Command::new(clang).args(&source.flags).arg("-o").arg(&ll).arg(&src).status().unwrap();
    assert!(ok.success());
    let graph = programl::builder::build_file(&ll, &Default::default()).unwrap();
    let g = GraphInput::new(&graph, &reference.vocabulary).unwrap();
    let batch =
        Batch::from_samples(&[Sample { graph: &g, root: None, positives: None }, Sample { graph: &g, root: None, positives: None }])
            .unwrap();
    // Two copies of the kernel, moving 1 KiB and 1 GiB.
    let aux = [1024f32, 64.0, 1073741824.0, 64.0];
    let mut out = [0f32; 4];
    let opts = options(RtDtype::F32);
    let predict_graph = |aux: &[f32], out: &mut [f32]| unsafe {
        programl_runtime_predict_graph(model, &input(&batch), aux.as_ptr(), aux.len(), &opts, out.as_mut_ptr(), out.len(), std::ptr::null_mut())
    };
    assert_eq!(predict_graph(&aux, &mut out), 0, "{}", last_error());
    for pair in out.chunks(2) {
        assert!((pair[0] + pair[1] - 1.0).abs() < 1e-5, "{pair:?} is not a distribution");
    }
    let expected = programl_model::graph_probabilities(&reference.model, &batch, Some(&aux), reference.model.hyper().steps);
    let worst = out.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-5, "the runtime and the model crate differ by {worst}");
    assert_ne!(out[..2], out[2..], "the auxiliary inputs make no difference");

    assert_eq!(predict_graph(&aux[..3], &mut out), -1);
    assert!(last_error().contains("3 auxiliary inputs given; 2 graphs × 2 inputs need 4"), "{}", last_error());
    assert_eq!(predict_graph(&[1.0, f32::NAN, 1.0, 1.0], &mut out), -1);
    assert!(last_error().contains("not a finite non-negative number"), "{}", last_error());
    assert_eq!(predict_graph(&aux, &mut out[..3]), -1);
    assert!(last_error().contains("2 graphs × 2 classes need 4"), "{}", last_error());
    let mut per_node = vec![0f32; batch.node_count() * 2];
    assert_eq!(predict_with(model, &input(&batch), &opts, &mut per_node).0, -1);
    assert!(last_error().contains("a graph-level bundle"), "{}", last_error());
    unsafe { programl_runtime_close(model) };

    let node_level = open(bundle().to_str().unwrap(), "cpu");
    assert!(!node_level.is_null(), "{}", last_error());
    let status = unsafe {
        programl_runtime_predict_graph(node_level, &input(&batch), aux.as_ptr(), aux.len(), &opts, out.as_mut_ptr(), out.len(), std::ptr::null_mut())
    };
    assert_eq!(status, -1);
    assert!(last_error().contains("a node-level bundle"), "{}", last_error());
    unsafe { programl_runtime_close(node_level) };
}
