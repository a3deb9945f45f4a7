//! `sagessd train`: a GNN trained on minibatches from any sampler, on files or on an NVMe
//! device, through the producer/consumer pipeline.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use sagessd_host_driver::Endpoint;
use sagessd_pipeline::{
    DeviceSampler, DeviceStage, FileStages, Minibatch, ModelledHostStage, Pipeline, PipelineConfig,
    PipelineError, RunReport, SampleStage, SharedNvme, Workers, modelled_clock_ns,
};
use sagessd_runtime::dataset::{Dataset, Split};
use sagessd_runtime::host_io::HostIoSampler;
use sagessd_runtime::minibatch::{Order, Request};
use sagessd_runtime::npy::Dtype;
use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler, SharedDevice};
use sagessd_runtime::registry::{FeatureCache, FeatureGatherer, FileSource, SamplerKind};
use sagessd_train::{
    DeviceChoice, EpochRecord, Evaluation, Feed, FitConfig, ModelKind, NodeData, TrainConfig,
    Trainer,
};

use crate::{hw_source, load_hw};

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

/// `train`.
pub(crate) fn run_train(a: TrainArgs) -> anyhow::Result<ExitCode> {
    let out = std::cell::RefCell::new(crate::records::Output::new(a.output.format()));
    let run = fit_run(&a, &out)?;
    let (outcome, evaluation) = (&run.outcome, run.evaluation);
    let mut out = out.into_inner();
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

/// What [`fit_run`] trained.
pub(crate) struct TrainRun {
    /// Every epoch and the test accuracy.
    pub outcome: sagessd_train::FitOutcome,
    /// How the splits were evaluated.
    pub evaluation: Evaluation,
}

/// The flags of `sagessd train` parsed from `argv` (without the program and subcommand names),
/// for callers that run training as that command would (the experiments).
pub(crate) fn parse_args(argv: &[String]) -> anyhow::Result<TrainArgs> {
    use clap::Parser;
    /// `train`'s flags alone.
    #[derive(Parser)]
    #[command(name = "sagessd train")]
    struct Only {
        #[command(flatten)]
        args: TrainArgs,
    }
    Ok(
        Only::try_parse_from(std::iter::once("train".to_string()).chain(argv.iter().cloned()))?
            .args,
    )
}

/// Targets per minibatch without `--batch-size` (SmartSAGE's and AGNES's minibatches).
const DEFAULT_BATCH_SIZE: usize = 1024;
/// Minibatches an epoch has at least without `--batch-size`.
const DEFAULT_MIN_MINIBATCHES: usize = 4;

/// The minibatch `train` samples without `--batch-size`: [`DEFAULT_BATCH_SIZE`] targets, or
/// fewer for a training split too small for [`DEFAULT_MIN_MINIBATCHES`] of them (Cora's 140
/// nodes: 35), so that each epoch draws its minibatches anew, as PyG's and DGL's examples do
/// with their small batches on small graphs.
fn default_batch_size(train_nodes: usize) -> usize {
    train_nodes
        .div_ceil(DEFAULT_MIN_MINIBATCHES)
        .clamp(1, DEFAULT_BATCH_SIZE)
}

/// Training steps the default number of epochs gives at least.
const DEFAULT_MIN_STEPS: usize = 200;
/// Epochs the default gives at least.
const DEFAULT_MIN_EPOCHS: u32 = 5;

/// The epochs `train` runs without `--epochs`: enough for [`DEFAULT_MIN_STEPS`] steps of
/// minibatches of `batch_size` over `train_nodes`, and at least [`DEFAULT_MIN_EPOCHS`]. Without
/// it a small training split trained a handful of steps (Cora's 140 nodes: 5 steps in 5
/// epochs) and stopped far from its accuracy.
fn default_epochs(train_nodes: usize, batch_size: usize) -> u32 {
    let per_epoch = train_nodes.div_ceil(batch_size.max(1)).max(1);
    let epochs = DEFAULT_MIN_STEPS.div_ceil(per_epoch);
    u32::try_from(epochs)
        .unwrap_or(u32::MAX)
        .max(DEFAULT_MIN_EPOCHS)
}

/// Trains as `a` says, printing its notes and epochs to `out` (and `--metrics-out`).
pub(crate) fn fit_run(
    a: &TrainArgs,
    out: &std::cell::RefCell<crate::records::Output>,
) -> anyhow::Result<TrainRun> {
    let fanouts = match (a.layers, a.fanouts.clone()) {
        (None, None) => vec![10; 2],
        (None, Some(f)) => f,
        (Some(l), None) => vec![10; l],
        (Some(l), Some(f)) if f.len() == l => f,
        (Some(l), Some(f)) => anyhow::bail!("--layers {l} but {} fanouts", f.len()),
    };
    sagessd_runtime::sampler::validate_request(&fanouts, &[0], 1)?;
    anyhow::ensure!(
        a.batch_size != Some(0) && a.epochs != Some(0),
        "--batch-size and --epochs must be ≥ 1"
    );
    let workers = parse_workers(&a.workers)?;
    // memory, mmap, direct and uring on a device (and isp with --host-features): the modelled
    // host I/O stack over an in-process emulated SSD (page cache, faults, system calls), for
    // modelled epochs against ISP's.
    let modelled_host = a
        .sampler
        .modelled_host_mode()
        .or((a.sampler == SamplerKind::Isp && a.host_features)
            .then_some(sagessd_runtime::host_io::HostIoMode::Isp))
        .filter(|_| a.target.on_device);
    anyhow::ensure!(
        !a.target.on_device
            || modelled_host.is_some()
            || matches!(workers, Workers::Auto | Workers::Fixed { sample: 1, .. }),
        "--workers {} with --on-device: one producer drives the device (its clock is one timeline)",
        a.workers
    );
    // The modelled host's workers, all in the one producer's virtual time.
    let host_workers = match workers {
        Workers::Fixed { sample, .. } => sample,
        Workers::Auto => 1,
    };
    anyhow::ensure!(
        !a.host_features || (a.sampler == SamplerKind::Isp && a.target.on_device),
        "--host-features is for --sampler isp --on-device (the samplers on the host always take their features from host memory)"
    );
    anyhow::ensure!(
        !a.modelled_steps || (a.target.on_device && a.target.device.endpoint == Endpoint::Local),
        "--modelled-steps prices the steps of a modelled epoch: add --on-device on the in-process emulator (local:), the only device that models time"
    );
    anyhow::ensure!(
        !a.host_features || a.target.device.endpoint == Endpoint::Local,
        "--host-features runs in-storage sampling from the in-process emulator's modelled host (local:); on a real device, ISP gathers the features in storage"
    );
    if a.target.on_device {
        anyhow::ensure!(
            a.sampler.on_device() || modelled_host.is_some(),
            "sampler {} does not run on a device (agnes, hyperbatch, isp, isp-hyperbatch do; memory, mmap, direct and uring on the in-process emulator's modelled host)",
            a.sampler
        );
        anyhow::ensure!(
            modelled_host.is_none() || a.target.device.endpoint == Endpoint::Local,
            "--sampler {} on a device is the modelled host I/O stack of the in-process emulator (local:); a real device's host path is the sampler on files",
            a.sampler
        );
    } else {
        anyhow::ensure!(
            a.sampler.on_files(),
            "sampler {} needs a device: add --on-device",
            a.sampler
        );
    }
    tch::set_num_threads(a.threads.max(1));
    let compute = sagessd_train::select_device(match a.compute {
        Compute::Cpu => DeviceChoice::Cpu,
        Compute::Cuda => DeviceChoice::Cuda,
        Compute::Auto => DeviceChoice::Auto,
    })?;

    let dataset = Dataset::open(&a.dataset)?;
    let m = &dataset.manifest;
    let path = a.dataset.display();
    let labels = dataset
        .labels()?
        .with_context(|| format!("{path}: no labels"))?;
    let classes = i64::from(m.class_count.unwrap_or(0));
    let train = dataset
        .split(Split::Train)?
        .with_context(|| format!("{path}: no train split"))?;
    let valid = dataset.split(Split::Valid)?.unwrap_or_default();
    let test = dataset.split(Split::Test)?.unwrap_or_default();
    let batch_size = a
        .batch_size
        .unwrap_or_else(|| default_batch_size(train.len()));
    let (dim, feature_dtype) = dataset
        .feature_shape()?
        .with_context(|| format!("{path}: no features"))?;
    let dtype = match feature_dtype {
        Dtype::F32 => sagessd_train::FeatureDtype::F32,
        Dtype::F16 => sagessd_train::FeatureDtype::F16,
        other => anyhow::bail!(
            "{path}: features of dtype {} (f32 or f16 train)",
            other.descr()
        ),
    };
    let evaluation = match a.eval {
        Eval::Sampled => Evaluation::Sampled,
        Eval::Full => Evaluation::Full,
        Eval::Auto if m.node_count <= 200_000 => Evaluation::Full,
        Eval::Auto => Evaluation::Sampled,
    };
    // The rows themselves are read into memory only where they are needed whole: for
    // full-neighbourhood evaluation, or to write them onto a device. Samplers on files gather
    // them from storage.
    let rows = (evaluation == Evaluation::Full || a.target.on_device)
        .then(|| dataset.feature_rows())
        .transpose()?
        .flatten();
    let graph = (a.order.needs_graph()
        || evaluation == Evaluation::Full
        || a.sampler == SamplerKind::Memory
        || a.target.on_device)
        .then(|| dataset.graph())
        .transpose()?;
    let block_bytes = a.cache.block_bytes();
    let layout = (a.sampler.needs_layout())
        .then(|| AgnesLayout::for_dataset(&dataset, block_bytes).map(|(l, _)| l))
        .transpose()?;
    let config = PipelineConfig {
        workers,
        queue_depth: a.queue_depth.max(1),
        group_size: if modelled_host.is_some() {
            host_workers
        } else {
            a.sampler.group_size(a.hyperbatch)
        },
        profile_groups: 4,
        max_workers: std::thread::available_parallelism()
            .map_or(1, |n| n.get().saturating_sub(1).max(1)),
    };
    let settings = a.cache.settings();
    let cache = if a.cache.features == FeatureCache::None {
        anyhow::bail!("training needs features: --features agnes or bgl");
    } else {
        a.cache.features
    };

    let mut trainer = Trainer::new(&TrainConfig {
        model: a.model.kind(),
        in_dim: dim as i64,
        hidden: a.hidden,
        classes,
        layers: fanouts.len(),
        heads: a.heads,
        dropout: a.dropout,
        lr: a.lr,
        weight_decay: a.weight_decay,
        seed: a.seed,
        device: compute,
    })?;
    let data = NodeData {
        labels: &labels,
        train: &train,
        valid: &valid,
        test: &test,
        dtype,
        dim,
        graph: graph.as_ref(),
        features: rows
            .as_ref()
            .filter(|_| evaluation == Evaluation::Full)
            .map(|r| r.bytes.as_slice()),
    };
    let epochs = a
        .epochs
        .unwrap_or_else(|| default_epochs(train.len(), batch_size));
    let fit = FitConfig {
        epochs,
        batch_size,
        order: a.order,
        seed: a.seed,
        layers: fanouts.len(),
        evaluation,
        queue_minibatches: config.queue_depth * config.group_size,
        step_model: a
            .modelled_steps
            .then(|| -> anyhow::Result<_> {
                Ok(sagessd_train::StepModel {
                    accelerator: load_hw(a.target.config.as_ref())?.trainer,
                    model: a.model.kind(),
                    in_dim: dim as u64,
                    hidden: a.hidden as u64,
                    classes: classes as u64,
                    heads: a.heads as u64,
                    // The rows cross as f32 (f16 features are widened on the host).
                    feature_row_bytes: (dim * 4) as u64,
                })
            })
            .transpose()?,
    };
    out.borrow().note(format!(
        "train: {} on {} ({} nodes, {} CSR entries, {} classes, {} {} features), {} train / {} valid / {} test nodes; fanouts {:?}, batch {}, {} epochs, lr {}, seed {}; on {}",
        a.model.kind().name(),
        m.name,
        m.node_count,
        m.edge_count,
        classes,
        dim,
        feature_dtype.descr(),
        train.len(),
        valid.len(),
        test.len(),
        fanouts,
        batch_size,
        epochs,
        a.lr,
        a.seed,
        match compute {
            tch::Device::Cpu => format!("the CPU ({} libtorch threads)", a.threads.max(1)),
            d => format!("{d:?}"),
        },
    ));
    let mut metrics = a
        .metrics_out
        .as_ref()
        .map(|p| std::fs::File::create(p).with_context(|| format!("creating {}", p.display())))
        .transpose()?
        .map(std::io::BufWriter::new);
    let bar = progress(a.quiet);
    let mut on_step = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let mut write_err: Option<std::io::Error> = None;
    let mut record_err: Option<std::io::Error> = None;
    let mut on_epoch = |r: &EpochRecord| {
        bar.reset();
        let mut out = out.borrow_mut();
        if out.human() {
            bar.suspend(|| println!("{}", epoch_line(r, epochs)));
        } else if let Err(e) = serde_json::to_value(r)
            .map_err(std::io::Error::from)
            .and_then(|v| out.record(crate::records::Record::from_json("train.epoch", &v)))
        {
            record_err = Some(e);
        }
        if let Some(w) = metrics.as_mut()
            // One JSON object a line (serde_json writes a diverged NaN loss as null).
            && let Err(e) = serde_json::to_writer(&mut *w, r)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(w))
        {
            write_err = Some(e);
        }
    };
    // Every producer's run ends the same way: the training loop over its feed.
    let mut train_on = |feed: &mut dyn Feed| {
        sagessd_train::fit(&mut trainer, feed, &data, &fit, &mut on_step, &mut on_epoch)
    };
    let outcome = if let Some(mode) = modelled_host {
        let hw = load_hw(a.target.config.as_ref())?;
        anyhow::ensure!(
            mode != sagessd_runtime::host_io::HostIoMode::Isp || hw.firmware.isp,
            "--sampler isp: {} has no in-storage processing (firmware.isp = false)",
            hw.device.name
        );
        anyhow::ensure!(
            mode != sagessd_runtime::host_io::HostIoMode::Isp
                || host_workers <= usize::from(hw.firmware.isp_slots),
            "--workers {host_workers} with in-storage sampling: {} has {} sampling slots (one job in flight per worker)",
            hw.device.name,
            hw.firmware.isp_slots
        );
        let graph = graph.as_ref().context("the graph")?;
        let rows = rows.as_ref().context("the feature rows")?;
        let mut device = sagessd_host_driver::Device::open(
            sagessd_host_driver::LocalTransport::from_config(&hw)?,
        )?;
        let desc = if hw.firmware.isp {
            sagessd_runtime::load::load_graph(&mut device, graph, 0)?
        } else {
            sagessd_runtime::load::write_graph_with_progress(&mut device, graph, 0, &mut |_, _| {})?
        };
        sagessd_host_driver::Transport::drop_caches(device.transport_mut());
        out.borrow().note(format!(
            "on {} ({}): the graph written from LBA 0, read through the modelled host I/O stack ({}, {} modelled host worker{}); features from host memory (their copy not modelled); modelled epochs from the device and host models",
            hw.device.name,
            hw_source(a.target.config.as_ref()),
            mode.name(),
            host_workers,
            if host_workers == 1 { "" } else { "s" },
        ));
        let clock_ns = AtomicU64::new(0);
        let mut stage = Some(ModelledHostStage {
            sampler: HostIoSampler::new(device, desc, mode, hw.host.clone())?,
            fanouts: fanouts.clone(),
            rows: &rows.bytes,
            row_bytes: rows.row_bytes(),
            clock_ns: &clock_ns,
            workers: host_workers,
        });
        let pipeline = one_producer(config, move || stage.take())?;
        let clock = || Some(clock_ns.load(Ordering::SeqCst));
        let mut feed = PipelineFeed {
            pipeline,
            clock: Some(&clock),
        };
        train_on(&mut feed)?
    } else if a.target.on_device {
        let mut hw = load_hw(a.target.config.as_ref())?;
        sagessd::FeatureSizing {
            samplers: vec![a.sampler],
            hyperbatch: a.hyperbatch,
            max_batch_size: batch_size as u64,
            fanouts: fanouts.clone(),
        }
        .apply(
            &mut hw,
            m.node_count,
            (dim * feature_dtype.size_bytes()) as u64,
        );
        let graph = graph.as_ref().context("the graph")?;
        let layout = match layout {
            Some(l) => l,
            None => AgnesLayout::for_dataset(&dataset, block_bytes)?.0,
        };
        let mut device = sagessd_host_driver::open_device(&a.target.device, &hw)?;
        let placed = sagessd_runtime::placement::place(&mut device, graph, rows.as_ref(), &layout)
            .map_err(|e| anyhow::anyhow!(e))?;
        device.transport_mut().drop_caches();
        let modelled = device.now_ns().is_some();
        out.borrow().note(format!(
            "on {}: the dataset written from LBA 0 (CSR, features, AGNES layout at LBA {}); {}",
            match a.target.device.endpoint {
                Endpoint::Local => format!(
                    "{} ({})",
                    hw.device.name,
                    hw_source(a.target.config.as_ref())
                ),
                _ => a.target.device.to_string(),
            },
            placed.layout_slba,
            if modelled {
                "modelled epochs from the device model"
            } else {
                "wall-clock time only"
            }
        ));
        let device: SharedNvme = Mutex::new(device);
        let mut blocks = SharedDevice::new(&device)?;
        let mut feature_device = SharedDevice::new(&device)?;
        let sampler = match a.sampler {
            SamplerKind::Isp | SamplerKind::IspHyperbatch => DeviceSampler::Isp {
                features: true,
                hyperbatch: a.sampler == SamplerKind::IspHyperbatch,
            },
            _ => DeviceSampler::Blocks {
                sampler: Box::new(AgnesSampler::on_device(
                    &layout,
                    a.cache.buffer_bytes(),
                    &mut blocks,
                    placed.layout_slba,
                )?),
                gatherer: FeatureGatherer::new(
                    cache,
                    sagessd_runtime::ooc::features::FeatureFile::on_device(
                        &mut feature_device,
                        placed
                            .graph
                            .features
                            .as_ref()
                            .context("no feature region")?,
                        m.node_count,
                    )?,
                    settings,
                )
                .map(Box::new),
            },
        };
        let host_ns = AtomicU64::new(0);
        let mut stage = Some(DeviceStage {
            device: &device,
            sampler,
            fanouts: fanouts.clone(),
            host: modelled.then(|| hw.host.clone()),
            isp_depth: a.sampler.group_size(a.hyperbatch),
            host_ns: &host_ns,
        });
        let pipeline = one_producer(config, move || stage.take())?;
        let clock = || modelled_clock_ns(&device, &host_ns);
        let mut feed = PipelineFeed {
            pipeline,
            clock: modelled.then_some(&clock as &dyn Fn() -> Option<u64>),
        };
        train_on(&mut feed)?
    } else {
        let stages = FileStages {
            source: FileSource {
                dataset: &dataset,
                graph: graph.as_ref(),
                layout: layout.as_ref(),
                buffer_bytes: a.cache.buffer_bytes(),
                prefetch: true,
            },
            kind: a.sampler,
            cache,
            settings,
        };
        let fanouts = fanouts.clone();
        let pipeline = Pipeline::new(
            config,
            Box::new(move |_| stages.sampler(&fanouts)),
            Some(Box::new(move |_| {
                stages
                    .gatherer()?
                    .ok_or_else(|| PipelineError::Config("no feature cache".into()))
            })),
        )?;
        let mut feed = PipelineFeed {
            pipeline,
            clock: None,
        };
        train_on(&mut feed)?
    };
    bar.finish_and_clear();
    if let Some(e) = write_err {
        return Err(e).context("writing --metrics-out");
    }
    if let Some(e) = record_err {
        return Err(e).context("writing the epoch records to stdout");
    }
    if let Some(w) = metrics.as_mut() {
        let last = serde_json::json!({
            "test_accuracy": outcome.test_accuracy,
            "selected_epoch": outcome.selected_epoch,
        });
        writeln!(w, "{last}")?;
        w.flush()?;
    }
    Ok(TrainRun {
        outcome,
        evaluation,
    })
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

/// Training's feed: one pipeline for the whole run (its workers, caches and profile kept
/// across epochs and evaluations), and on an emulated device the modelled clock.
struct PipelineFeed<'a, 'c> {
    pipeline: Pipeline<'a>,
    clock: Option<&'c dyn Fn() -> Option<u64>>,
}

/// A pipeline of one producer, `stage()` (its only call gives the stage): a device is driven
/// by one producer, so that its clock is one deterministic timeline.
fn one_producer<'a, S: SampleStage + 'a>(
    config: PipelineConfig,
    mut stage: impl FnMut() -> Option<S> + 'a,
) -> Result<Pipeline<'a>, PipelineError> {
    Pipeline::new(
        PipelineConfig {
            workers: Workers::Fixed {
                sample: 1,
                gather: 0,
            },
            ..config
        },
        Box::new(move |_| {
            let s = stage()
                .ok_or_else(|| PipelineError::Config("one producer drives the device".into()))?;
            Ok(Box::new(s) as Box<dyn SampleStage>)
        }),
        None,
    )
}

impl Feed for PipelineFeed<'_, '_> {
    fn run(
        &mut self,
        requests: &[Request],
        consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    ) -> Result<RunReport, PipelineError> {
        self.pipeline.run(requests, consume)
    }

    fn modelled_now_ns(&self) -> Option<u64> {
        self.clock.and_then(|c| c())
    }
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
    use super::{default_batch_size, default_epochs};

    #[test]
    fn the_defaults_give_two_hundred_steps_at_least_five_epochs_of_four_minibatches() {
        // Cora's 140 training nodes: four minibatches of 35 an epoch, 50 epochs.
        assert_eq!(default_batch_size(140), 35);
        assert_eq!(default_epochs(140, 35), 50);
        assert_eq!(default_epochs(140, 1024), 200);
        assert_eq!(default_batch_size(10_000), 1024);
        assert_eq!(default_epochs(10_000, 1024), 20);
        assert_eq!(default_batch_size(600_000), 1024);
        assert_eq!(default_epochs(600_000, 1024), 5);
        assert_eq!(default_batch_size(0), 1);
    }
}
