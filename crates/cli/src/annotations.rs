//! `programl annotations`: the learned pass's metadata (schema 1,
//! passes/README.md) read back from annotated IR as JSON, one object per
//! file on stdout:
//!
//! ```json
//! {"file": "x.ll", "schema": "1",
//!  "models": [{"task": "reachability", "format": "programl-model", "version": 1, "head": "node", "steps": 30,
//!              "graph": "5c0f…"}],
//!  "predictions": {"reachability": [{"root": 12, "function": "main", "positives": [[14, 0.93], ...]}]},
//!  "functions": [{"name": "main", "args": [3, -1], "roots": {"reachability": [12]}}],
//!  "instructions": [{"function": "main", "node": 14, "value": 15, "text": "%5 = add ...", "reachability": [[12, 0.93]]}]}
//! ```
//!
//! `predictions` regroups the per-instruction pairs by root: for each root
//! (from the functions' `!programl.TASK.roots`), the positive nodes with
//! their probabilities, ascending, as graph node ids: the instruction's
//! node (`!programl.node`), or for liveness the variable (the
//! instruction's `!programl.value`, or an argument's id from
//! `!programl.args`). Graph-level annotations appear as `device` on
//! functions and `class` on the module. A file without annotations gives
//! an object with `"schema": null` and empty lists.
//!
//! Never links libtorch: this reads metadata through LLVM's C API only.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;
use inkwell::llvm_sys::core::*;
use inkwell::llvm_sys::prelude::*;
use programl::analysis::Task;
use serde_json::{json, Value};

#[derive(Args)]
pub struct AnnotationsArgs {
    /// Annotated .ll or .bc files (written by `programl-infer`, e.g. with
    /// `opt -S` or `clang -S -emit-llvm`).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// One metadata operand.
#[derive(Clone, Debug)]
enum Operand {
    Int(i64),
    Real(f64),
    Text(String),
    Other,
}

impl Operand {
    fn json(&self) -> Value {
        match self {
            Operand::Int(i) => json!(i),
            Operand::Real(r) => json!(r),
            Operand::Text(s) => json!(s),
            Operand::Other => Value::Null,
        }
    }
}

/// The operands of an MDNode given as a value (`MetadataAsValue`).
unsafe fn operands(node: LLVMValueRef) -> Vec<Operand> {
    let n = LLVMGetMDNodeNumOperands(node) as usize;
    let mut values = vec![std::ptr::null_mut(); n];
    if n > 0 {
        LLVMGetMDNodeOperands(node, values.as_mut_ptr());
    }
    values.into_iter().map(|v| operand(v)).collect()
}

unsafe fn operand(v: LLVMValueRef) -> Operand {
    if v.is_null() {
        return Operand::Other;
    }
    if !LLVMIsAConstantInt(v).is_null() {
        return Operand::Int(LLVMConstIntGetSExtValue(v));
    }
    if !LLVMIsAConstantFP(v).is_null() {
        let mut loses = 0;
        return Operand::Real(LLVMConstRealGetDouble(v, &mut loses));
    }
    if !LLVMIsAMDString(v).is_null() {
        let mut len = 0u32;
        let p = LLVMGetMDString(v, &mut len);
        if !p.is_null() {
            return Operand::Text(String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len as usize)).into_owned());
        }
    }
    Operand::Other
}

fn ints(ops: &[Operand]) -> Vec<i64> {
    ops.iter().filter_map(|o| if let Operand::Int(i) = o { Some(*i) } else { None }).collect()
}

/// (root, probability) pairs of a `!programl.TASK` node.
fn pairs(ops: &[Operand]) -> Vec<(i64, f64)> {
    ops.chunks_exact(2)
        .filter_map(|c| match (&c[0], &c[1]) {
            (Operand::Int(r), Operand::Real(p)) => Some((*r, *p)),
            _ => None,
        })
        .collect()
}

/// A probability as the `float` it is in the IR: its shortest f32 text
/// (0.97897184, not 0.9789718389511108).
fn round(p: f64) -> Value {
    json!((p as f32).to_string().parse::<f64>().unwrap_or(p))
}

struct Kinds {
    node: u32,
    value: u32,
    args: u32,
    device: u32,
    tasks: Vec<(Task, u32, u32, u32)>, // task, programl.TASK, .roots, .args
}

unsafe fn kind(context: LLVMContextRef, name: &str) -> u32 {
    LLVMGetMDKindIDInContext(context, name.as_ptr().cast(), name.len() as u32)
}

unsafe fn named(module: LLVMModuleRef, name: &str) -> Vec<Vec<Operand>> {
    let c = std::ffi::CString::new(name).unwrap();
    let n = LLVMGetNamedMetadataNumOperands(module, c.as_ptr()) as usize;
    let mut values = vec![std::ptr::null_mut(); n];
    if n > 0 {
        LLVMGetNamedMetadataOperands(module, c.as_ptr(), values.as_mut_ptr());
    }
    values.into_iter().map(|v| operands(v)).collect()
}

unsafe fn value_name(v: LLVMValueRef) -> String {
    let mut len = 0usize;
    let p = LLVMGetValueName2(v, &mut len);
    if p.is_null() {
        String::new()
    } else {
        String::from_utf8_lossy(std::slice::from_raw_parts(p.cast::<u8>(), len)).into_owned()
    }
}

/// The instruction's text without the schema's own attachments
/// (`, !programl.KIND !N`).
unsafe fn printed(v: LLVMValueRef) -> String {
    let p = LLVMPrintValueToString(v);
    let s = std::ffi::CStr::from_ptr(p).to_string_lossy().trim().to_string();
    LLVMDisposeMessage(p);
    without_attachments(&s)
}

fn without_attachments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(", !programl.") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        // `!programl.KIND !N`: skip the kind, the space and the node.
        let kind_end = after.find(' ').unwrap_or(after.len());
        let node = &after[kind_end..].trim_start();
        let node_end = node.find(|c: char| c == ',' || c.is_whitespace()).unwrap_or(node.len());
        rest = &node[node_end..];
    }
    out.push_str(rest);
    out
}

/// The JSON of one annotated module.
///
/// # Safety
/// `module` is valid.
pub unsafe fn read_module(module: LLVMModuleRef, file: &str) -> Value {
    let context = LLVMGetModuleContext(module);
    let k = Kinds {
        node: kind(context, "programl.node"),
        value: kind(context, "programl.value"),
        args: kind(context, "programl.args"),
        device: kind(context, "programl.device"),
        tasks: Task::ALL
            .iter()
            .map(|&t| {
                let n = t.name();
                (
                    t,
                    kind(context, &format!("programl.{n}")),
                    kind(context, &format!("programl.{n}.roots")),
                    kind(context, &format!("programl.{n}.args")),
                )
            })
            .collect(),
    };
    let schema = named(module, "programl.schema").into_iter().flatten().find_map(|o| if let Operand::Text(s) = o { Some(s) } else { None });
    let field = |ops: &[Operand], i: usize| ops.get(i).map_or(Value::Null, Operand::json);
    let models: Vec<Value> = named(module, "programl.model")
        .iter()
        .map(|m| json!({"task": field(m, 0), "format": field(m, 1), "version": field(m, 2), "head": field(m, 3), "steps": field(m, 4), "graph": field(m, 5)}))
        .collect();
    let classes: Vec<Value> = named(module, "programl.class").iter().map(|c| json!({"class": field(c, 0), "p": field(c, 1)})).collect();

    let mut functions = Vec::new();
    let mut instructions = Vec::new();
    // task → root → (function, positives)
    let mut by_root: BTreeMap<&str, BTreeMap<i64, (String, Vec<(i64, f64)>)>> = BTreeMap::new();
    let mut f = LLVMGetFirstFunction(module);
    while !f.is_null() {
        let fname = value_name(f);
        let mut fjson = serde_json::Map::new();
        let mut args: Vec<i64> = Vec::new();
        let mut count = 0usize;
        let entries = LLVMGlobalCopyAllMetadata(f, &mut count);
        let mut attached: Vec<(u32, Vec<Operand>)> = (0..count as u32)
            .map(|i| {
                let md = LLVMValueMetadataEntriesGetMetadata(entries, i);
                (LLVMValueMetadataEntriesGetKind(entries, i), operands(LLVMMetadataAsValue(context, md)))
            })
            .collect();
        if !entries.is_null() {
            LLVMDisposeValueMetadataEntries(entries);
        }
        // The arguments first: argument predictions refer to them.
        attached.sort_by_key(|(kind_id, _)| *kind_id != k.args);
        for (kind_id, ops) in attached {
            let kind_id = kind_id;
            if kind_id == k.args {
                args = ints(&ops);
                fjson.insert("args".into(), json!(args));
            } else if kind_id == k.device {
                fjson.insert("device".into(), json!({"device": field(&ops, 0), "p": field(&ops, 1)}));
            }
            for &(task, _, roots_kind, args_kind) in &k.tasks {
                if kind_id == roots_kind {
                    let roots = ints(&ops);
                    for &r in &roots {
                        by_root.entry(task.name()).or_default().entry(r).or_insert_with(|| (fname.clone(), Vec::new()));
                    }
                    let m = fjson.entry("roots").or_insert_with(|| json!({}));
                    m[task.name()] = json!(roots);
                } else if kind_id == args_kind {
                    let triples: Vec<(i64, i64, f64)> = ops
                        .chunks_exact(3)
                        .filter_map(|c| match (&c[0], &c[1], &c[2]) {
                            (Operand::Int(r), Operand::Int(a), Operand::Real(p)) => Some((*r, *a, *p)),
                            _ => None,
                        })
                        .collect();
                    fjson.insert(
                        format!("{}_args", task.name()),
                        json!(triples.iter().map(|&(r, a, p)| json!([r, a, round(p)])).collect::<Vec<_>>()),
                    );
                    // Positives among the arguments, as their variable ids.
                    for &(r, a, p) in &triples {
                        if let Some(&var) = args.get(a as usize).filter(|&&v| v >= 0) {
                            by_root
                                .entry(task.name())
                                .or_default()
                                .entry(r)
                                .or_insert_with(|| (fname.clone(), Vec::new()))
                                .1
                                .push((var, p));
                        }
                    }
                }
            }
        }
        if !fjson.is_empty() {
            fjson.insert("name".into(), json!(fname));
            functions.push(Value::Object(fjson));
        }
        let mut b = LLVMGetFirstBasicBlock(f);
        while !b.is_null() {
            let mut inst = LLVMGetFirstInstruction(b);
            while !inst.is_null() {
                let get = |kind_id: u32| {
                    let md = LLVMGetMetadata(inst, kind_id);
                    (!md.is_null()).then(|| operands(md))
                };
                let node = get(k.node).and_then(|o| ints(&o).first().copied());
                let value = get(k.value).and_then(|o| ints(&o).first().copied());
                let mut ijson = serde_json::Map::new();
                for &(task, task_kind, _, _) in &k.tasks {
                    if let Some(ops) = get(task_kind) {
                        let ps = pairs(&ops);
                        ijson.insert(task.name().into(), json!(ps.iter().map(|&(r, p)| json!([r, round(p)])).collect::<Vec<_>>()));
                        // Liveness positives are variables: the value.
                        let positive = if task == Task::Liveness { value } else { node };
                        if let Some(n) = positive {
                            for &(r, p) in &ps {
                                by_root
                                    .entry(task.name())
                                    .or_default()
                                    .entry(r)
                                    .or_insert_with(|| (fname.clone(), Vec::new()))
                                    .1
                                    .push((n, p));
                            }
                        }
                    }
                }
                if node.is_some() || !ijson.is_empty() {
                    ijson.insert("function".into(), json!(fname));
                    ijson.insert("node".into(), json!(node));
                    ijson.insert("value".into(), json!(value));
                    ijson.insert("text".into(), json!(printed(inst)));
                    instructions.push(Value::Object(ijson));
                }
                inst = LLVMGetNextInstruction(inst);
            }
            b = LLVMGetNextBasicBlock(b);
        }
        f = LLVMGetNextFunction(f);
    }
    let predictions: serde_json::Map<String, Value> = by_root
        .into_iter()
        .map(|(task, roots)| {
            let list: Vec<Value> = roots
                .into_iter()
                .map(|(root, (function, mut positives))| {
                    positives.sort_by_key(|x| x.0);
                    json!({"root": root, "function": function, "positives": positives.iter().map(|&(n, p)| json!([n, round(p)])).collect::<Vec<_>>()})
                })
                .collect();
            (task.to_string(), json!(list))
        })
        .collect();
    let mut out = json!({"file": file, "schema": schema, "models": models, "predictions": predictions, "functions": functions, "instructions": instructions});
    if !classes.is_empty() {
        out["class"] = json!(classes);
    }
    out
}

pub fn run(args: &AnnotationsArgs) -> Result<bool> {
    let mut out = crate::stdout();
    let mut ok = true;
    for file in &args.files {
        let context = inkwell::context::Context::create();
        let module = match programl::ir::load_module(&context, file) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("programl: {e}");
                ok = false;
                continue;
            }
        };
        // SAFETY: the module lives until the end of this iteration.
        let value = unsafe { read_module(module.as_mut_ptr(), &file.display().to_string()) };
        serde_json::to_writer(&mut out, &value).context("writing JSON")?;
        out.write_all(b"\n")?;
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    #[test]
    fn attachments_are_removed() {
        let t = "%5 = add i32 %1, 2, !tbaa !3, !programl.node !13, !programl.value !14, !programl.reachability !15";
        assert_eq!(super::without_attachments(t), "%5 = add i32 %1, 2, !tbaa !3");
        assert_eq!(super::without_attachments("ret void, !programl.root !0, !dbg !9"), "ret void, !dbg !9");
        assert_eq!(super::without_attachments("br label %4"), "br label %4");
    }
}
