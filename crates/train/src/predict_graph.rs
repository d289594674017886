//! `programl-train predict` with a graph-level bundle (device mapping,
//! POJ-104, any graph head): one class per graph of one file.
//!
//! The file is IR (`.ll`, `.bc`), an OpenCL kernel file (`.cl`, compiled as
//! DevMap's sources are) or a source the bundle records how to compile
//! (`config.json` `source`: POJ-104's C/C++). A device-mapping bundle
//! decides per kernel, each from its own graph (the kernel and what it
//! calls, the module's other kernels left out), as the learned pass does;
//! other bundles decide once for the module.
//!
//! A head with auxiliary inputs reads them from `--aux name=value,...`;
//! without `--aux`, the bundle's `noaux/` variant decides (the pass's rule).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use programl::batch::GraphInput;
use programl::builder::{build_file, BuildOptions};
use programl::ProgramGraph;
use programl_model::bundle::Bundle;
use tch::Device;

use crate::devmap::sources;
use crate::graphtask::{self, Examples, Item};

/// Parses `--aux transfer=4194304,wgsize=256` in the order of `names`.
fn aux_values(text: &str, names: &[String]) -> Result<Vec<f32>> {
    let mut values = vec![None; names.len()];
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (name, value) = part.split_once('=').with_context(|| format!("--aux: '{part}' is not name=value"))?;
        let i = names
            .iter()
            .position(|n| n == name.trim())
            .with_context(|| format!("--aux: '{}' is not one of the bundle's auxiliary inputs ({})", name.trim(), names.join(", ")))?;
        // A value past f32's range, NaN or an infinity makes every
        // probability NaN; a negative one reads as 0.
        let number = value.trim().parse::<f32>().ok().filter(|v| v.is_finite() && *v >= 0.0);
        values[i] =
            Some(number.with_context(|| format!("--aux {}: '{}' is not a finite, non-negative number", name.trim(), value.trim()))?);
    }
    values
        .into_iter()
        .zip(names)
        .map(|(v, n)| v.with_context(|| format!("--aux: '{n}' is missing (the bundle needs {})", names.join(", "))))
        .collect()
}

/// The graphs to decide for `file`, each with its name.
fn graphs(bundle: &Bundle, file: &Path) -> Result<Vec<(String, ProgramGraph)>> {
    let ext = file.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
    let name = file.display().to_string();
    let per_kernel = bundle.config.task.starts_with("devmap");
    let cache = programl::fsutil::cache_dir();
    let (graph, kernels) = match ext.as_str() {
        "ll" | "bc" => {
            // One load: the graph and, for device mapping, the kernels' names.
            let context = inkwell::context::Context::create();
            let module = programl::ir::load_module(&context, file).map_err(|e| anyhow::anyhow!("{e}"))?;
            let graph = programl::builder::build(&module, &BuildOptions::MODEL);
            let kernels = if per_kernel { sources::kernel_names(&module.print_to_string().to_string()) } else { Vec::new() };
            (graph, kernels)
        }
        // OpenCL is device mapping's input; another task's bundle was not
        // trained on such code, nor does it record how to compile it.
        "cl" if !per_kernel => bail!(
            "{name}: an OpenCL kernel file, and {} is a {} bundle: give it IR (.ll, .bc){}",
            bundle.dir.display(),
            bundle.config.task,
            bundle.config.source.as_ref().map_or(String::new(), |s| format!(" or a source its compiler takes ({})", s.compiler))
        ),
        "cl" => {
            let root = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let unit = sources::Unit {
                dir: ".".into(),
                file: file.file_name().unwrap().to_string_lossy().into_owned(),
                options: vec!["-I.".into()],
                embedded: false,
                kernel: String::new(),
            };
            match sources::module_graph(
                &unit,
                root,
                &cache.join("devmap").join("sources"),
                &crate::devmap::clang(),
                &crate::devmap::bundle_flags(&bundle.config),
            )? {
                Ok((graph, kernels)) => (graph, if per_kernel { kernels } else { Vec::new() }),
                Err(cause) => bail!("{name}: does not compile: {cause}"),
            }
        }
        _ => {
            let source = bundle.config.source.as_ref().with_context(|| {
                format!("{name}: not IR (.ll, .bc) or OpenCL (.cl), and {} records no compiler for sources", bundle.dir.display())
            })?;
            let clang = std::env::var_os("PROGRAML_CLANG").map_or_else(|| PathBuf::from(&source.compiler), PathBuf::from);
            let harness = crate::poj104::compile::Harness::new(
                &clang,
                &source.flags,
                source.prelude.as_deref().unwrap_or(""),
                &cache.join("poj104").join("ir"),
            )?;
            let bytes = std::fs::read(file).with_context(|| format!("{name}: cannot read"))?;
            match harness.compile(&bytes)? {
                crate::poj104::compile::Compiled::Ir { path, .. } => {
                    (build_file(&path, &BuildOptions::MODEL).map_err(|e| anyhow::anyhow!("{name}: {e}"))?, Vec::new())
                }
                crate::poj104::compile::Compiled::Failed { cause } => bail!("{name}: does not compile: {cause}"),
            }
        }
    };
    if !per_kernel {
        if !graph.has_code() {
            bail!("{name}: no function defined, nothing to classify");
        }
        return Ok(vec![(name, graph)]);
    }
    if kernels.is_empty() {
        bail!("{name}: no kernel (spir_kernel function) to map to a device");
    }
    kernels
        .iter()
        .map(|k| {
            let g = sources::kernel_subgraph(&graph, k, &kernels)
                .with_context(|| format!("{name}: kernel {k} is not in the module's graph"))?;
            Ok((format!("{name}:{k}"), g))
        })
        .collect()
}

/// `predict --model DIR FILE` for a graph-level bundle. `cpu`: the
/// torch-free inference's options (on the CPU), else the libtorch model on
/// `device`.
pub fn run(
    dir: &Path,
    file: &Path,
    aux: Option<&str>,
    steps: Option<i64>,
    cpu: Option<programl_infer::Options>,
    device: Device,
    json: bool,
) -> Result<()> {
    let mut bundle = Bundle::load(dir, device)?;
    let needs = bundle.config.hyper.graph.as_ref().map_or(Vec::new(), |h| h.aux.clone());
    let aux = match (needs.is_empty(), aux) {
        (true, Some(_)) => bail!("--aux: {} has no auxiliary inputs", dir.display()),
        (true, None) => Vec::new(),
        (false, Some(text)) => aux_values(text, &needs)?,
        (false, None) => {
            let noaux = dir.join("noaux");
            if !noaux.join("config.json").exists() {
                bail!("{}: needs --aux {}", dir.display(), needs.iter().map(|n| format!("{n}=N")).collect::<Vec<_>>().join(","));
            }
            eprintln!("predict: no --aux; {} decides (trained without {})", noaux.display(), needs.join(", "));
            bundle = Bundle::load(&noaux, device)?;
            Vec::new()
        }
    };
    let graphs = graphs(&bundle, file)?;
    let inputs = graphs
        .iter()
        .map(|(name, g)| GraphInput::new(g, &bundle.vocabulary).map_err(|e| anyhow::anyhow!("{name}: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let data = Examples { inputs, items: (0..graphs.len()).map(|graph| Item { graph, label: 0, aux: aux.clone() }).collect() };
    let items: Vec<usize> = (0..graphs.len()).collect();
    let steps = steps.unwrap_or(bundle.config.hyper.steps);
    let probabilities = match cpu {
        Some(options) => {
            let model = programl_infer::Model::open(&bundle.dir)?;
            graphtask::probabilities_cpu(&model, &programl_infer::Options { steps: Some(steps), ..options }, &data, &items, usize::MAX)?
        }
        None => graphtask::probabilities(&bundle.model, &data, &items, steps, usize::MAX),
    };
    let classes = &bundle.config.classes;
    let decided: Vec<serde_json::Value> = graphs
        .iter()
        .zip(&probabilities)
        .map(|((name, g), p)| {
            let (best, pb) = graphtask::argmax(p);
            let by_class: serde_json::Map<String, serde_json::Value> =
                classes.iter().zip(p).map(|(c, &v)| (c.clone(), serde_json::json!(v))).collect();
            serde_json::json!({"name": name, "nodes": g.node_count(), "class": classes[best], "probability": pb, "probabilities": by_class})
        })
        .collect();
    if json {
        println!(
            "{}",
            serde_json::json!({"model": bundle.dir.display().to_string(), "task": bundle.config.task, "steps": steps, "graphs": decided})
        );
    } else {
        for d in &decided {
            println!(
                "{}: {} (p={:.3}, {} nodes)",
                d["name"].as_str().unwrap(),
                d["class"].as_str().unwrap(),
                d["probability"].as_f64().unwrap_or(f64::NAN),
                d["nodes"]
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aux_values_come_in_the_heads_order_and_bad_ones_are_named() {
        let names = ["transfer".to_string(), "wgsize".to_string()];
        assert_eq!(aux_values("wgsize=256, transfer=4096", &names).unwrap(), [4096.0, 256.0]);
        let err = |t: &str| aux_values(t, &names).unwrap_err().to_string();
        assert!(err("transfer=1").contains("'wgsize' is missing"));
        assert!(err("transfer=1,wg=2").contains("'wg' is not one of the bundle's auxiliary inputs (transfer, wgsize)"));
        assert!(err("transfer=x,wgsize=2").contains("'x' is not a finite, non-negative number"));
        assert!(err("transfer=1e39,wgsize=2").contains("'1e39' is not a finite, non-negative number"));
        assert!(err("transfer").contains("not name=value"));
    }
}
