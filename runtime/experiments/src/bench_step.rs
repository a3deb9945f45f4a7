//! The `[trainer]` step model set beside GraphSAGE training steps timed on a real GPU (what
//! `sagessd bench step` prints).
//!
//! The modelled epoch prices every step by a roofline (`emulator/src/trainer_model.rs`). This
//! module samples minibatches from a graph (`papers100m` by default), prices each one's step
//! on an accelerator, and writes their shapes (`export`) for `scripts/gpu/sage_step.py`,
//! which builds blocks of exactly those sizes, runs this project's GraphSAGE
//! (`runtime/train/src/model/sage.rs`: the same operations in PyTorch) forward, backward and
//! Adam on a GPU, and times each step with CUDA events. Given that script's output
//! ([`read_measured`]), the command prints measured · modelled · ratio per minibatch. The step is compared
//! without the input's copy to the GPU (the script times it apart), as SALIENT's "Train" is.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sagessd_abi::subgraph::LayerCounts;
use sagessd_runtime::graph_spec::GraphSpec;
use sagessd_train::StepModel;

#[cfg(test)]
use sagessd_emulator::trainer_model::TrainerConfig;
#[cfg(test)]
use sagessd_train::ModelKind;

/// What the script measured (the fields of its output this command reads).
#[derive(Debug)]
pub struct Measured {
    /// The GPU's name.
    pub device: String,
    /// Each minibatch's step (forward, loss read back, backward, Adam), ms, in export order.
    pub step_ms: Vec<f64>,
    /// Each minibatch's input copied from pinned host memory, ms.
    pub copy_ms: Vec<f64>,
    /// The GPU's FP32 matrix product rate, TFLOP/s.
    pub gemm_fp32_tflop_per_s: f64,
    /// Its device-to-device copy rate (bytes read and written), GB/s.
    pub copy_d2d_gb_per_s: f64,
}

/// The layer counts (hop order) of `batches` minibatches of `batch_size` targets sampled from
/// `graph` with `fanouts` (`progress` hears when the graph is tabulated).
pub fn sampled(
    graph: &GraphSpec,
    fanouts: &[u16],
    batch_size: u32,
    batches: u32,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<Vec<LayerCounts>>> {
    progress(&format!("bench step: tabulating {}", graph.describe()));
    let built = graph.build().map_err(anyhow::Error::msg)?;
    let host = built.host();
    sagessd_runtime::minibatch::minibatch_requests(1, batches, batch_size, host.node_count())
        .iter()
        .map(|q| {
            let sub = host.sample(q.seed, fanouts, &q.targets)?;
            let view = sub.view();
            Ok((0..view.layer_count())
                .map(|l| view.layer(l).counts)
                .collect())
        })
        .collect()
}

/// Each minibatch's modelled step and its input's copy, ms.
pub fn modelled(model: &StepModel, shapes: &[Vec<LayerCounts>]) -> Vec<(f64, f64)> {
    shapes
        .iter()
        .map(|c| {
            let step = model.accelerator.step_ns(&model.layers_of(c), 0) as f64 / 1e6;
            let with_copy = model.step_ns_of(c) as f64 / 1e6;
            (step, with_copy - step)
        })
        .collect()
}

/// The shapes and widths `scripts/gpu/sage_step.py` builds its blocks from.
pub fn export(
    graph: &GraphSpec,
    fanouts: &[u16],
    batch_size: u32,
    filled: bool,
    model: &StepModel,
    shapes: &[Vec<LayerCounts>],
) -> serde_json::Value {
    serde_json::json!({
        "graph": graph.word(),
        "fanouts": fanouts,
        "batch_size": batch_size,
        "filled": filled,
        "in_dim": model.in_dim,
        "hidden": model.hidden,
        "classes": model.classes,
        "minibatches": shapes.iter().map(|c| c.iter().map(|l| {
            [l.dst_count, l.src_count, l.edge_count]
        }).collect::<Vec<_>>()).collect::<Vec<_>>(),
    })
}

/// The layer counts (hop order) of a minibatch of `batch_size` targets whose every fanout is
/// filled by new nodes.
pub fn filled(batch_size: u32, fanouts: &[u16]) -> anyhow::Result<Vec<LayerCounts>> {
    let mut dst = batch_size;
    let mut out = Vec::new();
    for &f in fanouts {
        let edges = dst
            .checked_mul(u32::from(f))
            .context("a filled minibatch over 2^32 edges")?;
        let src = dst
            .checked_add(edges)
            .context("a filled minibatch over 2^32 nodes")?;
        out.push(LayerCounts {
            dst_count: dst,
            src_count: src,
            edge_count: edges,
        });
        dst = src;
    }
    Ok(out)
}

/// The script's output at `path`, checked to be of `minibatches` (the shapes it echoes) and to
/// hold one step and one copy per minibatch.
pub fn read_measured(
    path: &Path,
    shapes: &[Vec<LayerCounts>],
) -> anyhow::Result<(Measured, PathBuf)> {
    let minibatches = shapes.len();
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_slice(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let field = |name: &str| {
        json.get(name).with_context(|| {
            format!(
                "{}: no field {name:?} (not the output of scripts/gpu/sage_step.py?)",
                path.display()
            )
        })
    };
    let number = |name: &str| -> anyhow::Result<f64> {
        field(name)?
            .as_f64()
            .with_context(|| format!("{}: {name} is not a number", path.display()))
    };
    let numbers = |name: &str| -> anyhow::Result<Vec<f64>> {
        let list = field(name)?
            .as_array()
            .with_context(|| format!("{}: {name} is not a list", path.display()))?;
        let values = list
            .iter()
            .map(serde_json::Value::as_f64)
            .collect::<Option<Vec<f64>>>()
            .with_context(|| format!("{}: {name} holds a non-number", path.display()))?;
        anyhow::ensure!(
            values.len() == minibatches,
            "{}: {name} has {} entries for {minibatches} minibatches (measured on other shapes?)",
            path.display(),
            values.len()
        );
        Ok(values)
    };
    let echoed: Vec<Vec<[u64; 3]>> = serde_json::from_value(field("minibatches")?.clone())
        .with_context(|| format!("{}: minibatches is not a list of shapes", path.display()))?;
    let ours: Vec<Vec<[u64; 3]>> = shapes
        .iter()
        .map(|c| {
            c.iter()
                .map(|l| {
                    [
                        u64::from(l.dst_count),
                        u64::from(l.src_count),
                        u64::from(l.edge_count),
                    ]
                })
                .collect()
        })
        .collect();
    anyhow::ensure!(
        echoed == ours,
        "{}: measured on other minibatches than these (other --graph, --fanouts, --batch-size, \
         --batches or --filled?)",
        path.display()
    );
    let m = Measured {
        device: field("device")?
            .as_str()
            .with_context(|| format!("{}: device is not a string", path.display()))?
            .to_string(),
        step_ms: numbers("step_ms")?,
        copy_ms: numbers("copy_ms")?,
        gemm_fp32_tflop_per_s: number("gemm_fp32_tflop_per_s")?,
        copy_d2d_gb_per_s: number("copy_d2d_gb_per_s")?,
    };
    Ok((m, path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_minibatch_grows_by_its_fanouts_and_refuses_overflow() {
        let c = filled(1024, &[15, 10, 5]).unwrap();
        let shape: Vec<(u32, u32, u32)> = c
            .iter()
            .map(|l| (l.dst_count, l.src_count, l.edge_count))
            .collect();
        // 1,024 → +15,360 → +163,840 → +901,120 nodes.
        assert_eq!(
            shape,
            [
                (1024, 16_384, 15_360),
                (16_384, 180_224, 163_840),
                (180_224, 1_081_344, 901_120)
            ]
        );
        assert!(filled(1 << 20, &[60_000, 60_000]).is_err());
    }

    /// The mean modelled step over the mean measured one for the GPU measurement `name` in
    /// `docs/experiments/gpu/` (its shapes and widths from `shapes/<name>.json`).
    fn modelled_over_measured(accelerator: TrainerConfig, name: &str) -> f64 {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/experiments/gpu");
        let read = |p: PathBuf| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
        };
        let shape = read(dir.join("shapes").join(format!("{name}.json")));
        let width = |k: &str| shape[k].as_u64().unwrap();
        let shapes: Vec<Vec<[u32; 3]>> =
            serde_json::from_value(shape["minibatches"].clone()).unwrap();
        let counts: Vec<Vec<LayerCounts>> = shapes
            .iter()
            .map(|m| {
                m.iter()
                    .map(|&[dst_count, src_count, edge_count]| LayerCounts {
                        dst_count,
                        src_count,
                        edge_count,
                    })
                    .collect()
            })
            .collect();
        let (measured, _) = read_measured(&dir.join(format!("{name}.json")), &counts).unwrap();
        let model = StepModel {
            accelerator,
            model: ModelKind::Sage,
            in_dim: width("in_dim"),
            hidden: width("hidden"),
            classes: width("classes"),
            heads: 1,
            feature_row_bytes: 4 * width("in_dim"),
        };
        let modelled: f64 = counts
            .iter()
            .map(|c| accelerator.step_ns(&model.layers_of(c), 0) as f64 / 1e6)
            .sum();
        modelled / measured.step_ms.iter().sum::<f64>()
    }

    /// The shipped fixed costs reproduce the steps measured on an H200 (an oracle apart from
    /// this code: CUDA events on a GPU) within 15 %, each of the five; the estimate they
    /// replaced (300 µs a step, nothing a layer) misses every one by more than 3×.
    #[test]
    fn the_fixed_costs_reproduce_the_steps_measured_on_a_gpu() {
        let cases = ["salient", "salient_filled", "ours", "ours_filled", "tiny"];
        let h200 = TrainerConfig::nvidia_h200_sxm();
        for name in cases {
            let ratio = modelled_over_measured(h200, name);
            assert!(
                (0.85..=1.15).contains(&ratio),
                "{name}: modelled / measured {ratio:.3}"
            );
        }
        let estimate = TrainerConfig {
            step_overhead_ns: 300_000,
            layer_overhead_ns: 0,
            ..h200
        };
        for name in cases {
            let ratio = modelled_over_measured(estimate, name);
            assert!(
                ratio < 1.0 / 3.0,
                "{name}: the estimate passes ({ratio:.3})"
            );
        }
    }

    #[test]
    fn measurements_of_other_shapes_are_refused() {
        let dir = std::env::temp_dir().join(format!("sagessd-bench-step-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.json");
        let shapes = vec![filled(4, &[2]).unwrap(), filled(2, &[3]).unwrap()];
        let write = |minibatches: &str, steps: &str| {
            let json = format!(
                r#"{{"device": "x", "minibatches": {minibatches}, "step_ms": {steps},
                    "copy_ms": [0.1, 0.2], "gemm_fp32_tflop_per_s": 50.0,
                    "copy_d2d_gb_per_s": 4000.0}}"#
            );
            std::fs::write(&path, json).unwrap();
        };
        let ours = "[[[4, 12, 8]], [[2, 8, 6]]]";
        write(ours, "[1.0, 2.0]");
        let (m, _) = read_measured(&path, &shapes).unwrap();
        assert_eq!(m.step_ms, [1.0, 2.0]);
        write(ours, "[1.0, 2.0, 3.0]");
        let err = read_measured(&path, &shapes).unwrap_err().to_string();
        assert!(err.contains("step_ms") && err.contains("m.json"), "{err}");
        write("[[[4, 12, 8]], [[2, 8, 7]]]", "[1.0, 2.0]");
        let err = read_measured(&path, &shapes).unwrap_err().to_string();
        assert!(err.contains("other minibatches"), "{err}");
        std::fs::write(&path, "{}").unwrap();
        let err = read_measured(&path, &shapes).unwrap_err().to_string();
        assert!(err.contains("m.json") && err.contains("no field"), "{err}");
        std::fs::write(&path, "[1,").unwrap();
        let err = read_measured(&path, &shapes).unwrap_err().to_string();
        assert!(err.contains("not JSON"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
