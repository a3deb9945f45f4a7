//! `sagessd train`: a GNN trained on minibatches from any sampler, on files or on an NVMe
//! device, through the producer/consumer pipeline: its flags and what it prints. The training
//! itself is the library's (`sagessd::training`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use sagessd::training::{
    DeviceChoice, EpochRecord, EvalChoice, Evaluation, ModelKind, Order, TrainObserver, TrainSpec,
    Workers,
};
use sagessd::{SamplerKind, Storage};

use crate::load_hw;

/// Where the model trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Compute {
    /// The CPU.
    Cpu,
    /// The first CUDA device (an error where there is none).
    Cuda,
    /// CUDA when libtorch sees a device, else the CPU.
    Auto,
}

/// How the validation and test splits are evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Eval {
    /// Full neighbourhoods for graphs of at most 200,000 nodes, else sampled.
    Auto,
    /// Minibatches sampled with the training fanouts, through the same pipeline.
    Sampled,
    /// Every neighbour, the whole graph at once (needs it in memory).
    Full,
}

/// Flags of `train`.
#[derive(Debug, Args)]
pub(crate) struct TrainArgs {
    /// The dataset folder (features, labels and a train split needed).
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// The GNN.
    #[arg(long, value_enum, default_value_t = Model::Sage)]
    model: Model,
    /// Width of the hidden layers.
    #[arg(long, default_value_t = 64)]
    hidden: i64,
    /// GAT: attention heads (dividing --hidden).
    #[arg(long, default_value_t = 4)]
    heads: i64,
    /// Fanouts in hop order from the targets; their count is the number of GNN layers
    /// (default: 10 per layer, two layers).
    #[arg(long, value_delimiter = ',')]
    fanouts: Option<Vec<u16>>,
    /// GNN layers (must equal the fanouts' count when both are given; alone: fanout 10 each).
    #[arg(long)]
    layers: Option<usize>,
    /// Targets per minibatch (default: 1,024, or a quarter of a training split smaller than
    /// 4,096 nodes, so that an epoch has at least four minibatches).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Epochs (default: enough for at least 200 training steps, and no fewer than 5: a small
    /// training split such as Cora's 140 nodes gets 200 epochs of one minibatch, as PyG's and
    /// DGL's examples train; the test split is scored on the epoch with the best validation
    /// accuracy).
    #[arg(long)]
    epochs: Option<u32>,
    /// Adam's learning rate.
    #[arg(long, default_value_t = 0.01)]
    lr: f64,
    /// Adam's L2 weight decay.
    #[arg(long, default_value_t = 5e-4)]
    weight_decay: f64,
    /// Dropout probability.
    #[arg(long, default_value_t = 0.5)]
    dropout: f64,
    /// The sampler (on a device: agnes, hyperbatch, isp or isp-hyperbatch; on the in-process
    /// emulator's modelled host also memory, mmap, direct and uring).
    #[arg(long, value_enum, default_value_t = SamplerKind::Memory)]
    sampler: SamplerKind,
    /// Minibatches per hyperbatch (--sampler hyperbatch and isp-hyperbatch).
    #[arg(long, default_value_t = 8)]
    hyperbatch: usize,
    /// Minibatch order of the training nodes.
    #[arg(long, value_enum, default_value_t = Order::Random)]
    order: Order,
    /// Sampling and gather workers: auto (profile the stages, BGL-style), or N (N sampling
    /// and N gather workers). On a device, one producer drives it (its clock is one timeline);
    /// on the in-process emulator's modelled host (memory, mmap, direct, uring, isp with
    /// --host-features) N is the modelled host workers sampling side by side in virtual time
    /// (auto: 1).
    #[arg(long, default_value = "auto")]
    workers: String,
    /// Groups (minibatches, or hyperbatches) alive in the pipeline at once.
    #[arg(long, default_value_t = 4)]
    queue_depth: usize,
    /// Seed of the weights, the order and sampling.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the model trains.
    #[arg(long, value_enum, default_value_t = Compute::Auto)]
    compute: Compute,
    /// libtorch's CPU threads (fixed, so CPU runs are deterministic).
    #[arg(long, default_value_t = 1)]
    threads: i32,
    /// How the validation and test splits are evaluated.
    #[arg(long, value_enum, default_value_t = Eval::Auto)]
    eval: Eval,
    /// Modelled epochs (on the in-process emulator) price each training step on the hardware
    /// description's `[trainer]` accelerator (default: an NVIDIA V100) instead of its measured
    /// time on this machine: the same modelled epoch on every run.
    #[arg(long)]
    modelled_steps: bool,
    /// With --sampler isp on the in-process emulator: the feature rows come from host memory (a
    /// DRAM-resident feature table, as in SmartSAGE, where only the graph is on the SSD), and
    /// each NS_SUBMIT / NS_COLLECT is a synchronous ioctl of the modelled host; without it, the
    /// device gathers them too.
    #[arg(long)]
    host_features: bool,
    /// Also write each epoch (and the test accuracy) as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    metrics_out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    target: crate::storage::TargetArgs,
    #[command(flatten)]
    cache: crate::storage::CacheArgs,
    #[command(flatten)]
    output: crate::records::FormatArgs,
}

/// The GNN, on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Model {
    /// GraphSAGE, mean aggregator.
    Sage,
    /// GCN.
    Gcn,
    /// GAT, multi-head attention.
    Gat,
}

impl Model {
    fn kind(self) -> ModelKind {
        match self {
            Self::Sage => ModelKind::Sage,
            Self::Gcn => ModelKind::Gcn,
            Self::Gat => ModelKind::Gat,
        }
    }
}

/// The library's training spec for these flags (`--layers` and `--fanouts` reconciled, the
/// storage opened from `--on-device`, `--device` and `--config`).
fn spec(a: &TrainArgs) -> anyhow::Result<TrainSpec> {
    let fanouts = match (a.layers, a.fanouts.clone()) {
        (None, None) => vec![10; 2],
        (None, Some(f)) => f,
        (Some(l), None) => vec![10; l],
        (Some(l), Some(f)) if f.len() == l => f,
        (Some(l), Some(f)) => anyhow::bail!("--layers {l} but {} fanouts", f.len()),
    };
    let storage = if a.target.on_device {
        Storage::Device {
            uri: a.target.device.clone(),
            hardware: Box::new(load_hw(a.target.config.as_ref())?),
        }
    } else {
        Storage::Files
    };
    Ok(TrainSpec {
        dataset: a.dataset.clone(),
        model: a.model.kind(),
        hidden: a.hidden,
        heads: a.heads,
        fanouts,
        batch_size: a.batch_size,
        epochs: a.epochs,
        lr: a.lr,
        weight_decay: a.weight_decay,
        dropout: a.dropout,
        sampler: a.sampler,
        hyperbatch: a.hyperbatch,
        order: a.order,
        workers: parse_workers(&a.workers)?,
        queue_depth: a.queue_depth,
        seed: a.seed,
        compute: match a.compute {
            Compute::Cpu => DeviceChoice::Cpu,
            Compute::Cuda => DeviceChoice::Cuda,
            Compute::Auto => DeviceChoice::Auto,
        },
        threads: a.threads,
        eval: match a.eval {
            Eval::Auto => EvalChoice::Auto,
            Eval::Sampled => EvalChoice::Sampled,
            Eval::Full => EvalChoice::Full,
        },
        modelled_steps: a.modelled_steps,
        host_features: a.host_features,
        storage,
        features: a.cache.features,
        cache: a.cache.settings(),
        graph_buffer_bytes: a.cache.buffer_bytes(),
    })
}

/// What `train` prints as it goes: the notes, a progress bar over each epoch's minibatches,
/// each epoch (a line, or a record), and each epoch as a JSON line to `--metrics-out`.
struct Printer {
    out: crate::records::Output,
    bar: ProgressBar,
    metrics: Option<std::io::BufWriter<std::fs::File>>,
    epochs: u32,
    /// The first failure to write an epoch (`--metrics-out`, or a record to stdout).
    failed: Option<anyhow::Error>,
}

impl TrainObserver for Printer {
    fn planned(&mut self, epochs: u32, _batch_size: usize) {
        self.epochs = epochs;
    }

    fn note(&mut self, text: &str) {
        self.out.note(text);
    }

    fn step(&mut self, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
    }

    fn epoch(&mut self, r: &EpochRecord) {
        self.bar.reset();
        let out = &mut self.out;
        if out.human() {
            let line = epoch_line(r, self.epochs);
            self.bar.suspend(|| println!("{line}"));
        } else if let Err(e) = serde_json::to_value(r)
            .map_err(std::io::Error::from)
            .and_then(|v| out.record(crate::records::Record::from_json("train.epoch", &v)))
        {
            self.failed.get_or_insert(
                anyhow::Error::new(e).context("writing the epoch records to stdout"),
            );
        }
        if let Some(w) = self.metrics.as_mut()
            // One JSON object a line (serde_json writes a diverged NaN loss as null).
            && let Err(e) = serde_json::to_writer(&mut *w, r)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(w))
        {
            self.failed
                .get_or_insert(anyhow::Error::new(e).context("writing --metrics-out"));
        }
    }
}

/// `train`: trains through [`sagessd::training::train`], printing its notes and epochs (and
/// writing them to `--metrics-out`), then the test accuracy.
pub(crate) fn run_train(a: TrainArgs) -> anyhow::Result<ExitCode> {
    let spec = spec(&a)?;
    spec.validate()?;
    let metrics = a
        .metrics_out
        .as_ref()
        .map(|p| std::fs::File::create(p).with_context(|| format!("creating {}", p.display())))
        .transpose()?
        .map(std::io::BufWriter::new);
    let mut printer = Printer {
        out: crate::records::Output::new(a.output.format()),
        bar: progress(a.quiet),
        metrics,
        epochs: 0,
        failed: None,
    };
    let run = sagessd::training::train(&spec, &mut printer)?;
    printer.bar.finish_and_clear();
    if let Some(e) = printer.failed {
        return Err(e);
    }
    let (outcome, evaluation) = (&run.outcome, run.evaluation);
    if let Some(w) = printer.metrics.as_mut() {
        let last = serde_json::json!({
            "test_accuracy": outcome.test_accuracy,
            "selected_epoch": outcome.selected_epoch,
        });
        writeln!(w, "{last}")?;
        w.flush()?;
    }
    let mut out = printer.out;
    match outcome.test_accuracy {
        Some(acc) => out.text(format!(
            "test accuracy {acc:.4} (the model of epoch {}, best validation accuracy; {} evaluation)\n",
            outcome.selected_epoch + 1,
            eval_name(evaluation)
        )),
        None => out.text("test accuracy: the dataset has no test split\n"),
    }
    out.record(
        crate::records::Record::new("train.result")
            .with("test_accuracy", outcome.test_accuracy)
            .with("selected_epoch", outcome.selected_epoch)
            .with("evaluation", eval_name(evaluation)),
    )?;
    out.note(format!(
        "times: wall clock, except 'modelled' (the producers' device-model time and {} on one timeline); idle = the trainer waiting for input",
        if a.modelled_steps {
            "the [trainer] accelerator's modelled steps"
        } else {
            "the trainer's measured steps"
        }
    ));
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

fn eval_name(e: Evaluation) -> &'static str {
    match e {
        Evaluation::Sampled => "sampled",
        Evaluation::Full => "full-neighbourhood",
    }
}

/// `auto`, or one number for both stages' workers.
fn parse_workers(s: &str) -> anyhow::Result<Workers> {
    if s == "auto" {
        return Ok(Workers::Auto);
    }
    let n: usize = s
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .with_context(|| format!("--workers {s:?}: auto or a number ≥ 1"))?;
    Ok(Workers::Fixed {
        sample: n,
        gather: n,
    })
}

/// One epoch's line.
fn epoch_line(r: &EpochRecord, epochs: u32) -> String {
    let s = &r.stages;
    format!(
        "epoch {}/{epochs}: loss {:.4}, train acc {:.4}, val acc {}, {:.2} s (sample {:.2} s, gather {:.2} s, copy {:.2} s, step {:.2} s, wait {:.2} s; mb/s sample {:.0}, gather {:.0}, train {:.0}), trainer idle {:.1}%, workers {}+{}{}",
        r.epoch + 1,
        r.loss,
        r.train_accuracy,
        r.valid_accuracy.map_or("-".into(), |v| format!("{v:.4}")),
        r.wall_s,
        s.sample_s,
        s.gather_s,
        s.copy_s,
        s.step_s,
        s.wait_s,
        r.throughput.sample_minibatches_per_s,
        r.throughput.gather_minibatches_per_s,
        r.throughput.train_minibatches_per_s,
        100.0 * r.idle_fraction,
        r.workers.0,
        r.workers.1,
        r.modelled.map_or(String::new(), |m| format!(
            "; modelled epoch {:.4} s, trainer idle {:.1}% (modelled), {}",
            m.epoch_s,
            100.0 * m.idle_fraction,
            if m.modelled_steps {
                "steps on the [trainer] accelerator"
            } else {
                "steps as measured here"
            }
        )),
    )
}

/// A progress bar over an epoch's minibatches (hidden with --quiet).
fn progress(quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{prefix}[{bar:40}] {pos}/{len} minibatches {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library's training spec for the flags of `sagessd train` in `argv` (without the
    /// program and subcommand names).
    fn spec_from_argv(argv: &[&str]) -> anyhow::Result<TrainSpec> {
        use clap::Parser;
        /// `train`'s flags alone.
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            args: TrainArgs,
        }
        spec(&Only::try_parse_from(std::iter::once("train").chain(argv.iter().copied()))?.args)
    }

    #[test]
    fn the_command_line_a_spec_renders_parses_back_into_the_same_spec() {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../hw-configs/newport.toml");
        let mut s = TrainSpec::new("/data/my graph");
        s.model = ModelKind::Gat;
        s.hidden = 32;
        s.heads = 2;
        s.fanouts = vec![15, 10, 5];
        s.batch_size = Some(100);
        s.epochs = Some(7);
        s.lr = 0.003;
        s.weight_decay = 0.0;
        s.dropout = 0.25;
        s.sampler = SamplerKind::Mmap;
        s.hyperbatch = 3;
        s.order = Order::Bgl;
        s.workers = Workers::Fixed {
            sample: 2,
            gather: 2,
        };
        s.queue_depth = 6;
        s.seed = 9;
        s.compute = DeviceChoice::Cpu;
        s.threads = 2;
        s.eval = EvalChoice::Sampled;
        s.modelled_steps = true;
        s.storage = Storage::emulator(load_hw(Some(&PathBuf::from(config))).unwrap());
        s.features = sagessd::FeatureCache::Bgl;
        s.cache.cache_bytes = 3 << 20;
        s.cache.threshold = 5;
        s.cache.block_bytes = 256 << 10;
        s.graph_buffer_bytes = 8 << 20;
        let line = s.command_line(Some(std::path::Path::new(config)));
        assert!(line.contains("--dataset '/data/my graph'"), "{line}");
        // The dataset's path is quoted for the shell; the other words split on spaces.
        let rest = line
            .strip_prefix("sagessd train --dataset '/data/my graph' ")
            .unwrap();
        let mut argv = vec!["--dataset", "/data/my graph"];
        argv.extend(rest.split(' '));
        let parsed = spec_from_argv(&argv).unwrap();
        assert_eq!(format!("{parsed:?}"), format!("{s:?}"), "{line}");
        // And the comparison sees a flag the line lost.
        let without: Vec<&str> = argv
            .iter()
            .copied()
            .filter(|w| *w != "--modelled-steps")
            .collect();
        let lost = spec_from_argv(&without).unwrap();
        assert_ne!(format!("{lost:?}"), format!("{s:?}"));
        // The defaults render as the dataset alone.
        assert_eq!(
            TrainSpec::new("/d").command_line(None),
            "sagessd train --dataset /d"
        );
    }
}
