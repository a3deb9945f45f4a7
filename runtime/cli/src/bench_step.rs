//! `sagessd bench step`: its flags and table (the model, the shapes and the measurements' reader
//! are `sagessd_experiments::bench_step`'s): the `[trainer]` step model set beside GraphSAGE
//! training steps timed on a real GPU.
//!
//! The modelled epoch prices every step by a roofline (`emulator/src/trainer_model.rs`). This
//! command samples minibatches from a graph (`papers100m` by default), prices each one's step
//! on an accelerator, and can write their shapes (`--export`) for `scripts/gpu/sage_step.py`,
//! which builds blocks of exactly those sizes, runs this project's GraphSAGE
//! (`runtime/train/src/model/sage.rs`: the same operations in PyTorch) forward, backward and
//! Adam on a GPU, and times each step with CUDA events. Given that script's output
//! (`--measured`), it prints measured · modelled · ratio per minibatch. The step is compared
//! without the input's copy to the GPU (the script times it apart), as SALIENT's "Train" is.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};
use sagessd::training::{ModelKind, StepModel};
use sagessd_emulator::trainer_model::TrainerConfig;
use sagessd_experiments::bench_step;
use sagessd_runtime::graph_spec::GraphSpec;

/// A named accelerator, instead of the hardware description's `[trainer]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Accelerator {
    /// The default `[trainer]`: an NVIDIA V100 PCIe.
    V100,
    /// An NVIDIA H200 SXM ([`TrainerConfig::nvidia_h200_sxm`]).
    H200,
}

/// Flags of `bench step`.
#[derive(Debug, Args)]
pub(crate) struct BenchStepArgs {
    /// The graph the minibatches are sampled from (a `--graph` word, as `compare` takes).
    #[arg(long, default_value = "papers100m")]
    graph: String,
    /// Fanouts in hop order (GraphSAGE has one layer per hop).
    #[arg(long, value_delimiter = ',', default_value = "15,10,5")]
    fanouts: Vec<u16>,
    /// Targets per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: u32,
    /// Minibatches.
    #[arg(long, default_value_t = 8)]
    batches: u32,
    /// Input feature width.
    #[arg(long, default_value_t = 128)]
    in_dim: u64,
    /// Hidden width.
    #[arg(long, default_value_t = 256)]
    hidden: u64,
    /// Output width (classes).
    #[arg(long, default_value_t = 172)]
    classes: u64,
    /// One minibatch whose every fanout is filled by new nodes, instead of sampled ones (the
    /// shape a graph of high degrees without shared neighbours gives).
    #[arg(long)]
    filled: bool,
    /// The accelerator (default: the hardware description's `[trainer]`).
    #[arg(long, value_enum)]
    accelerator: Option<Accelerator>,
    /// Hardware description (default: the built-in Cosmos+).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Writes the minibatches' shapes and widths as JSON, for `scripts/gpu/sage_step.py`.
    #[arg(long, value_name = "FILE")]
    export: Option<PathBuf>,
    /// Reads the script's measurements (JSON) and sets them beside the model.
    #[arg(long, value_name = "FILE")]
    measured: Option<PathBuf>,
}

/// `bench step`: samples (or fills) the minibatches, prices each step, writes their shapes
/// with `--export`, and prints the model beside `--measured`'s figures.
pub(crate) fn run_bench_step(a: BenchStepArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        !a.fanouts.is_empty() && a.batches > 0 && a.batch_size > 0,
        "bench step: --fanouts, --batches and --batch-size must not be empty or zero"
    );
    let hw = crate::load_hw(a.config.as_ref())?;
    let accelerator = match a.accelerator {
        None => hw.trainer,
        Some(Accelerator::V100) => TrainerConfig::default(),
        Some(Accelerator::H200) => TrainerConfig::nvidia_h200_sxm(),
    };
    let model = StepModel {
        accelerator,
        model: ModelKind::Sage,
        in_dim: a.in_dim,
        hidden: a.hidden,
        classes: a.classes,
        heads: 1,
        feature_row_bytes: a
            .in_dim
            .checked_mul(4)
            .context("bench step: --in-dim too large")?,
    };
    let spec = GraphSpec::parse(&a.graph).map_err(anyhow::Error::msg)?;
    let minibatches = if a.filled {
        vec![bench_step::filled(a.batch_size, &a.fanouts)?]
    } else {
        bench_step::sampled(&spec, &a.fanouts, a.batch_size, a.batches, &mut |line| {
            eprintln!("{line}")
        })?
    };
    let modelled = bench_step::modelled(&model, &minibatches);
    if let Some(path) = &a.export {
        let json = bench_step::export(
            &spec,
            &a.fanouts,
            a.batch_size,
            a.filled,
            &model,
            &minibatches,
        );
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let measured = a
        .measured
        .as_ref()
        .map(|p| bench_step::read_measured(p, &minibatches))
        .transpose()?;
    println!(
        "bench step: GraphSAGE {} → {} → {} ({} layers), {} ({}), batch {}, fanouts {:?}; accelerator {} (MODELLED){}",
        a.in_dim,
        a.hidden,
        a.classes,
        a.fanouts.len(),
        if a.filled {
            "every fanout filled by new nodes"
        } else {
            "minibatches sampled from"
        },
        spec.word(),
        a.batch_size,
        a.fanouts,
        accelerator.describe(),
        measured.as_ref().map_or(String::new(), |(m, p)| format!(
            "; measured on {} ({}: FP32 products at {:.1} TFLOP/s, device copies at {:.0} GB/s)",
            m.device,
            p.display(),
            m.gemm_fp32_tflop_per_s,
            m.copy_d2d_gb_per_s
        ))
    );
    println!(
        "{:>3} {:>28} {:>14} {:>14} {:>14} {:>14} {:>9}",
        "mb",
        "edges per layer",
        "modelled ms",
        "measured ms",
        "copy mod. ms",
        "copy meas. ms",
        "ratio"
    );
    let (mut sum_model, mut sum_measured) = (0.0, 0.0);
    for (i, (c, (step, copy))) in minibatches.iter().zip(&modelled).enumerate() {
        let edges = c
            .iter()
            .map(|l| l.edge_count.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let (m_step, m_copy) = measured
            .as_ref()
            .map_or((f64::NAN, f64::NAN), |(m, _)| (m.step_ms[i], m.copy_ms[i]));
        sum_model += step;
        sum_measured += m_step;
        println!(
            "{i:>3} {edges:>28} {step:>14.3} {m_step:>14.3} {copy:>14.3} {m_copy:>14.3} {:>8.2}×",
            m_step / step
        );
    }
    let n = minibatches.len() as f64;
    println!(
        "mean: modelled {:.3} ms, measured {:.3} ms, measured / modelled {:.2}× (the step: forward, loss read back, backward and Adam; copies apart)",
        sum_model / n,
        sum_measured / n,
        sum_measured / sum_model
    );
    Ok(ExitCode::SUCCESS)
}
