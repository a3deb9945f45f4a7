//! Training a GNN (GraphSAGE, GCN or GAT, with libtorch) on minibatches from any sampler, on
//! this machine's files or on an NVMe device, through the producer/consumer pipeline: what
//! `sagessd train` and the experiments run. Feature `train` (the only part of this crate that
//! links libtorch).
//!
//! A [`TrainSpec`] says what to train and on what; [`train`] opens the dataset and the storage,
//! builds the pipeline's producers for the sampler, trains, and tells a [`TrainObserver`] what
//! it set up, each step and each epoch.
//!
//! ```no_run
//! use sagessd::training::{TrainSpec, train};
//! use sagessd::{SamplerKind, Storage};
//!
//! # fn main() -> Result<(), sagessd::Error> {
//! let mut spec = TrainSpec::new("target/examples/cora"); // GraphSAGE, fanouts 10,10
//! spec.sampler = SamplerKind::Isp; // in-storage sampling…
//! spec.storage = Storage::parse("emulator")?; // …on the in-process emulated Cosmos+
//! let run = train(&spec, &mut ())?; // `()` hears nothing; a TrainObserver hears each epoch
//! println!("test accuracy {:?}", run.outcome.test_accuracy);
//! println!("the same from the shell: {}", spec.command_line(None));
//! # Ok(())
//! # }
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sagessd_host_driver::Endpoint;
use sagessd_pipeline::{
    DeviceSampler, DeviceStage, FileStages, Minibatch, ModelledHostStage, Pipeline, PipelineConfig,
    PipelineError, RunReport, SampleStage, modelled_clock_ns,
};
use sagessd_runtime::host_io::{HostIoMode, HostIoSampler};
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::npy::Dtype;
use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler, SharedDevice};
use sagessd_runtime::registry::{FeatureGatherer, FileSource};
use sagessd_train::{Feed, FitConfig, NodeData, TrainConfig, Trainer};

pub use sagessd_pipeline::Workers;
pub use sagessd_runtime::minibatch::Order;
pub use sagessd_train::{
    DeviceChoice, EpochRecord, Evaluation, FitError, FitOutcome, ModelKind, StepModel,
};

use crate::{
    CacheSettings, Dataset, Error, FeatureCache, FeatureSizing, PlacedDevice, SamplerKind,
};
use crate::{Split, Storage};

/// How the validation and test splits are evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvalChoice {
    /// Full neighbourhoods for graphs of at most [`FULL_EVAL_MAX_NODES`] nodes, else sampled.
    Auto,
    /// Minibatches sampled with the training fanouts, through the same pipeline.
    Sampled,
    /// Every neighbour, the whole graph at once (it must fit in memory).
    Full,
}

/// The largest graph [`EvalChoice::Auto`] evaluates on full neighbourhoods.
pub const FULL_EVAL_MAX_NODES: u64 = 200_000;

impl EvalChoice {
    /// The evaluation for a graph of `node_count` nodes.
    pub fn resolve(self, node_count: u64) -> Evaluation {
        match self {
            Self::Sampled => Evaluation::Sampled,
            Self::Full => Evaluation::Full,
            Self::Auto if node_count <= FULL_EVAL_MAX_NODES => Evaluation::Full,
            Self::Auto => Evaluation::Sampled,
        }
    }
}

/// What to train, on what.
#[derive(Clone, Debug)]
pub struct TrainSpec {
    /// The dataset folder (features, labels and a train split needed).
    pub dataset: PathBuf,
    /// The GNN.
    pub model: ModelKind,
    /// Width of the hidden layers.
    pub hidden: i64,
    /// GAT's attention heads (dividing `hidden`).
    pub heads: i64,
    /// Neighbours per hop from the targets; their count is the number of GNN layers.
    pub fanouts: Vec<u16>,
    /// Targets per minibatch (`None`: [`default_batch_size`]).
    pub batch_size: Option<usize>,
    /// Epochs (`None`: [`default_epochs`]); the test split is scored on the epoch with the best
    /// validation accuracy.
    pub epochs: Option<u32>,
    /// Adam's learning rate.
    pub lr: f64,
    /// Adam's L2 weight decay.
    pub weight_decay: f64,
    /// Dropout probability.
    pub dropout: f64,
    /// The sampler. On a device: agnes, hyperbatch, isp or isp-hyperbatch; on the in-process
    /// emulator also memory, mmap, direct and uring, through its modelled host I/O stack.
    pub sampler: SamplerKind,
    /// Minibatches per hyperbatch (AGNES's and in-storage ones).
    pub hyperbatch: usize,
    /// Minibatch order of the training nodes.
    pub order: Order,
    /// Sampling and gather workers. On a device one producer drives it (its clock is one
    /// timeline); on the emulator's modelled host, `Fixed { sample: n, .. }` is n modelled
    /// host workers side by side in virtual time.
    pub workers: Workers,
    /// Groups (minibatches, or hyperbatches) alive in the pipeline at once.
    pub queue_depth: usize,
    /// Seed of the weights, the order and sampling.
    pub seed: u64,
    /// Where the model trains.
    pub compute: DeviceChoice,
    /// libtorch's CPU threads (fixed, so that CPU runs are deterministic).
    pub threads: i32,
    /// How the validation and test splits are evaluated.
    pub eval: EvalChoice,
    /// Price each step of a modelled epoch on the hardware description's `[trainer]`
    /// accelerator instead of its measured time here (the in-process emulator only).
    pub modelled_steps: bool,
    /// With in-storage sampling on the in-process emulator: the feature rows come from host
    /// memory (SmartSAGE's DRAM-resident feature table) and each NS_SUBMIT / NS_COLLECT is a
    /// synchronous ioctl of the modelled host; otherwise the device gathers them too.
    pub host_features: bool,
    /// Where the dataset is read.
    pub storage: Storage,
    /// The host samplers' feature path (training needs one: AGNES or BGL).
    pub features: FeatureCache,
    /// The feature cache's size and policy, and the AGNES block size.
    pub cache: CacheSettings,
    /// The AGNES samplers' graph buffer, bytes.
    pub graph_buffer_bytes: usize,
}

impl TrainSpec {
    /// GraphSAGE on `dataset` with the in-memory sampler, as `sagessd train` defaults: fanouts
    /// 10,10, hidden 64, Adam lr 0.01 with weight decay 5e-4, dropout 0.5, seed 1, the AGNES
    /// feature cache (64 MiB, threshold 2, 1 MiB blocks), one libtorch thread.
    pub fn new(dataset: impl Into<PathBuf>) -> Self {
        Self {
            dataset: dataset.into(),
            model: ModelKind::Sage,
            hidden: 64,
            heads: 4,
            fanouts: vec![10, 10],
            batch_size: None,
            epochs: None,
            lr: 0.01,
            weight_decay: 5e-4,
            dropout: 0.5,
            sampler: SamplerKind::Memory,
            hyperbatch: 8,
            order: Order::Random,
            workers: Workers::Auto,
            queue_depth: 4,
            seed: 1,
            compute: DeviceChoice::Auto,
            threads: 1,
            eval: EvalChoice::Auto,
            modelled_steps: false,
            host_features: false,
            storage: Storage::Files,
            features: FeatureCache::Agnes,
            cache: CacheSettings {
                cache_bytes: 64 << 20,
                threshold: 2,
                block_bytes: 1 << 20,
            },
            graph_buffer_bytes: 64 << 20,
        }
    }

    /// The modelled host I/O stack the sampler runs on (memory, mmap, direct and uring on a
    /// device, and isp with host features): `None` where it samples on files or on the device.
    fn modelled_host(&self) -> Option<HostIoMode> {
        if !self.storage.is_device() {
            return None;
        }
        self.sampler
            .modelled_host_mode()
            .or((self.sampler == SamplerKind::Isp && self.host_features).then_some(HostIoMode::Isp))
    }

    /// The in-process emulated device, if that is the storage.
    fn emulated(&self) -> bool {
        matches!(&self.storage, Storage::Device { uri, .. } if uri.endpoint == Endpoint::Local)
    }

    /// The `sagessd train` command that runs this spec (each option that differs from
    /// [`TrainSpec::new`]'s as its flag), `hardware` naming the file the device's description
    /// was read from (`--config`; without it the command gets the built-in Cosmos+): what an
    /// experiment's report quotes, so that a reader can rerun one point.
    pub fn command_line(&self, hardware: Option<&Path>) -> String {
        let d = Self::new(&self.dataset);
        let mut c = format!("sagessd train --dataset {}", quoted(&self.dataset));
        let mut flag = |differs: bool, name: &str, value: &dyn std::fmt::Display| {
            if differs {
                let _ = write!(c, " --{name} {value}");
            }
        };
        let on_device = |c: &mut String| {
            if let Storage::Device { uri, .. } = &self.storage {
                c.push_str(" --on-device");
                if uri.endpoint != Endpoint::Local || uri.tunnel {
                    let _ = write!(c, " --device {uri}");
                }
                if let Some(path) = hardware {
                    let _ = write!(c, " --config {}", quoted(path));
                }
            }
            if self.modelled_steps {
                c.push_str(" --modelled-steps");
            }
            if self.host_features {
                c.push_str(" --host-features");
            }
        };
        flag(self.model != d.model, "model", &self.model.name());
        flag(self.hidden != d.hidden, "hidden", &self.hidden);
        flag(self.heads != d.heads, "heads", &self.heads);
        let fanouts: Vec<String> = self.fanouts.iter().map(u16::to_string).collect();
        flag(self.fanouts != d.fanouts, "fanouts", &fanouts.join(","));
        if let Some(b) = self.batch_size {
            flag(true, "batch-size", &b);
        }
        if let Some(e) = self.epochs {
            flag(true, "epochs", &e);
        }
        flag(self.lr != d.lr, "lr", &self.lr);
        flag(
            self.weight_decay != d.weight_decay,
            "weight-decay",
            &self.weight_decay,
        );
        flag(self.dropout != d.dropout, "dropout", &self.dropout);
        flag(self.sampler != d.sampler, "sampler", &self.sampler);
        flag(
            self.hyperbatch != d.hyperbatch,
            "hyperbatch",
            &self.hyperbatch,
        );
        flag(self.order != d.order, "order", &self.order.name());
        if let Workers::Fixed { sample, .. } = self.workers {
            flag(true, "workers", &sample);
        }
        flag(
            self.queue_depth != d.queue_depth,
            "queue-depth",
            &self.queue_depth,
        );
        flag(self.seed != d.seed, "seed", &self.seed);
        let compute = match self.compute {
            DeviceChoice::Cpu => "cpu",
            DeviceChoice::Cuda => "cuda",
            DeviceChoice::Auto => "auto",
        };
        flag(self.compute != d.compute, "compute", &compute);
        flag(self.threads != d.threads, "threads", &self.threads);
        let eval = match self.eval {
            EvalChoice::Auto => "auto",
            EvalChoice::Sampled => "sampled",
            EvalChoice::Full => "full",
        };
        flag(self.eval != d.eval, "eval", &eval);
        let (cache, default) = (&self.cache, &d.cache);
        flag(self.features != d.features, "features", &self.features);
        flag(
            cache.cache_bytes != default.cache_bytes,
            "feature-cache",
            &(cache.cache_bytes >> 20),
        );
        flag(
            cache.threshold != default.threshold,
            "feature-threshold",
            &cache.threshold,
        );
        flag(
            cache.block_bytes != default.block_bytes,
            "block-size",
            &(cache.block_bytes >> 10),
        );
        let buffer_mib = self.graph_buffer_bytes >> 20;
        flag(
            self.graph_buffer_bytes != d.graph_buffer_bytes,
            "graph-buffer",
            &buffer_mib,
        );
        on_device(&mut c);
        c
    }

    /// Checks the options against each other before anything is opened.
    pub fn validate(&self) -> Result<(), Error> {
        sagessd_runtime::sampler::validate_request(&self.fanouts, &[0], 1)?;
        let fail = |text: String| Err(Error::Invalid(text));
        if self.batch_size == Some(0) || self.epochs == Some(0) {
            return fail("the batch size and the epochs must be ≥ 1".into());
        }
        if let Workers::Fixed { sample: 0, .. } = self.workers {
            return fail("workers: at least one".into());
        }
        if self.features == FeatureCache::None {
            return fail("training needs features: the agnes or bgl feature cache".into());
        }
        let kind = self.sampler;
        let device = self.storage.is_device();
        let modelled_host = self.modelled_host();
        if device
            && modelled_host.is_none()
            && !matches!(
                self.workers,
                Workers::Auto | Workers::Fixed { sample: 1, .. }
            )
        {
            return fail(
                "several workers on a device: one producer drives it (its clock is one timeline)"
                    .into(),
            );
        }
        if self.host_features && !(kind == SamplerKind::Isp && device) {
            return fail("host features are for in-storage sampling (sampler isp) on a device (the samplers on the host always take their features from host memory)".into());
        }
        if self.modelled_steps && !self.emulated() {
            return fail("modelled steps price the steps of a modelled epoch: train on the in-process emulator (storage local: / emulator), the only device that models time".into());
        }
        if self.host_features && !self.emulated() {
            return fail("host features: in-storage sampling from the in-process emulator's modelled host (local:); on a real device ISP gathers the features in storage".into());
        }
        if device {
            if !kind.on_device() && modelled_host.is_none() {
                return fail(format!(
                    "sampler {kind} does not run on a device (agnes, hyperbatch, isp, isp-hyperbatch do; memory, mmap, direct and uring on the in-process emulator's modelled host)"
                ));
            }
            if modelled_host.is_some() && !self.emulated() {
                return fail(format!(
                    "sampler {kind} on a device is the modelled host I/O stack of the in-process emulator (local:); a real device's host path is the sampler on files"
                ));
            }
        } else if !kind.on_files() {
            return fail(format!("sampler {kind} needs a device"));
        }
        Ok(())
    }
}

/// `path` as a shell word: quoted where it holds a character the shell would split or expand.
fn quoted(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// Targets per minibatch without a batch size (SmartSAGE's and AGNES's minibatches).
const DEFAULT_BATCH_SIZE: usize = 1024;
/// Minibatches an epoch has at least without a batch size.
const DEFAULT_MIN_MINIBATCHES: usize = 4;
/// Training steps the default number of epochs gives at least.
const DEFAULT_MIN_STEPS: usize = 200;
/// Epochs the default gives at least.
const DEFAULT_MIN_EPOCHS: u32 = 5;

/// The minibatch size without one: [`DEFAULT_BATCH_SIZE`] targets, or fewer for a training
/// split too small for [`DEFAULT_MIN_MINIBATCHES`] of them (Cora's 140 nodes: 35), so that
/// each epoch draws its minibatches anew, as PyG's and DGL's examples do with their small
/// batches on small graphs.
pub fn default_batch_size(train_nodes: usize) -> usize {
    train_nodes
        .div_ceil(DEFAULT_MIN_MINIBATCHES)
        .clamp(1, DEFAULT_BATCH_SIZE)
}

/// The epochs without a count: enough for [`DEFAULT_MIN_STEPS`] steps of minibatches of
/// `batch_size` over `train_nodes`, and at least [`DEFAULT_MIN_EPOCHS`]. Without it a small
/// training split trained a handful of steps (Cora's 140 nodes: 5 steps in 5 epochs) and
/// stopped far from its accuracy.
pub fn default_epochs(train_nodes: usize, batch_size: usize) -> u32 {
    let per_epoch = train_nodes.div_ceil(batch_size.max(1)).max(1);
    let epochs = DEFAULT_MIN_STEPS.div_ceil(per_epoch);
    u32::try_from(epochs)
        .unwrap_or(u32::MAX)
        .max(DEFAULT_MIN_EPOCHS)
}

/// What a training run tells its caller as it goes (each method does nothing by default).
pub trait TrainObserver {
    /// The run's epochs and minibatch size (the defaults resolved), before the first epoch.
    fn planned(&mut self, _epochs: u32, _batch_size: usize) {}
    /// What was set up: the dataset, the model, the storage and the clock.
    fn note(&mut self, _text: &str) {}
    /// `done` of the epoch's (or evaluation's) `total` minibatches have been stepped.
    fn step(&mut self, _done: usize, _total: usize) {}
    /// An epoch ended.
    fn epoch(&mut self, _record: &EpochRecord) {}
}

/// An observer that ignores everything.
impl TrainObserver for () {}

/// What [`train`] trained.
#[derive(Debug)]
pub struct TrainRun {
    /// Every epoch and the test accuracy.
    pub outcome: FitOutcome,
    /// How the splits were evaluated.
    pub evaluation: Evaluation,
    /// The minibatch size used.
    pub batch_size: usize,
    /// The epochs run.
    pub epochs: u32,
}

/// Trains as `spec` says, telling `observer` what it sets up and each step and epoch.
pub fn train(spec: &TrainSpec, observer: &mut dyn TrainObserver) -> Result<TrainRun, Error> {
    spec.validate()?;
    tch::set_num_threads(spec.threads.max(1));
    let compute = sagessd_train::select_device(spec.compute).map_err(FitError::from)?;
    let dataset = Dataset::open(&spec.dataset)?;
    let m = &dataset.manifest;
    let path = spec.dataset.display();
    let missing = |what: &str| Error::Invalid(format!("{path}: no {what}"));
    let labels = dataset.labels()?.ok_or_else(|| missing("labels"))?;
    let classes = i64::from(m.class_count.unwrap_or(0));
    let train = dataset
        .split(Split::Train)?
        .ok_or_else(|| missing("train split"))?;
    let valid = dataset.split(Split::Valid)?.unwrap_or_default();
    let test = dataset.split(Split::Test)?.unwrap_or_default();
    let batch_size = spec
        .batch_size
        .unwrap_or_else(|| default_batch_size(train.len()));
    let (dim, feature_dtype) = dataset
        .feature_shape()?
        .ok_or_else(|| missing("features"))?;
    let dtype = match feature_dtype {
        Dtype::F32 => sagessd_train::FeatureDtype::F32,
        Dtype::F16 => sagessd_train::FeatureDtype::F16,
        other => {
            return Err(Error::Invalid(format!(
                "{path}: features of dtype {} (f32 or f16 train)",
                other.descr()
            )));
        }
    };
    let evaluation = spec.eval.resolve(m.node_count);
    let on_device = spec.storage.is_device();
    let modelled_host = spec.modelled_host();
    // The rows are read into memory only where they are needed whole: for full-neighbourhood
    // evaluation, or for the modelled host's copy. Samplers on files gather them from storage;
    // a device gets them from the dataset's files when it is placed.
    let rows = (evaluation == Evaluation::Full || modelled_host.is_some())
        .then(|| dataset.feature_rows())
        .transpose()?
        .flatten();
    let graph = (spec.order.needs_graph()
        || evaluation == Evaluation::Full
        || spec.sampler == SamplerKind::Memory
        || modelled_host.is_some())
    .then(|| dataset.graph())
    .transpose()?;
    let layout = (!on_device && spec.sampler.needs_layout())
        .then(|| AgnesLayout::for_dataset(&dataset, spec.cache.block_bytes).map(|(l, _)| l))
        .transpose()?;
    // The modelled host's workers, all in the one producer's virtual time.
    let host_workers = match spec.workers {
        Workers::Fixed { sample, .. } => sample,
        Workers::Auto => 1,
    };
    let config = PipelineConfig {
        workers: spec.workers,
        queue_depth: spec.queue_depth.max(1),
        group_size: if modelled_host.is_some() {
            host_workers
        } else {
            spec.sampler.group_size(spec.hyperbatch)
        },
        profile_groups: 4,
        max_workers: std::thread::available_parallelism()
            .map_or(1, |n| n.get().saturating_sub(1).max(1)),
    };
    let mut trainer = Trainer::new(&TrainConfig {
        model: spec.model,
        in_dim: dim as i64,
        hidden: spec.hidden,
        classes,
        layers: spec.fanouts.len(),
        heads: spec.heads,
        dropout: spec.dropout,
        lr: spec.lr,
        weight_decay: spec.weight_decay,
        seed: spec.seed,
        device: compute,
    })
    .map_err(FitError::from)?;
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
    let epochs = spec
        .epochs
        .unwrap_or_else(|| default_epochs(train.len(), batch_size));
    let hardware = match &spec.storage {
        Storage::Device { hardware, .. } => Some(&**hardware),
        Storage::Files => None,
    };
    let fit = FitConfig {
        epochs,
        batch_size,
        order: spec.order,
        seed: spec.seed,
        layers: spec.fanouts.len(),
        evaluation,
        queue_minibatches: config.queue_depth * config.group_size,
        step_model: hardware
            .filter(|_| spec.modelled_steps)
            .map(|hw| StepModel {
                accelerator: hw.trainer,
                model: spec.model,
                in_dim: dim as u64,
                hidden: spec.hidden as u64,
                classes: classes as u64,
                heads: spec.heads as u64,
                // The rows cross as f32 (f16 features are widened on the host).
                feature_row_bytes: (dim * 4) as u64,
            }),
    };
    observer.planned(epochs, batch_size);
    observer.note(&format!(
        "train: {} on {} ({} nodes, {} CSR entries, {} classes, {} {} features), {} train / {} valid / {} test nodes; fanouts {:?}, batch {}, {} epochs, lr {}, seed {}; on {}",
        spec.model.name(),
        m.name,
        m.node_count,
        m.edge_count,
        classes,
        dim,
        feature_dtype.descr(),
        train.len(),
        valid.len(),
        test.len(),
        spec.fanouts,
        batch_size,
        epochs,
        spec.lr,
        spec.seed,
        match compute {
            tch::Device::Cpu => format!("the CPU ({} libtorch threads)", spec.threads.max(1)),
            d => format!("{d:?}"),
        },
    ));
    let outcome = {
        let observer = std::cell::RefCell::new(&mut *observer);
        // Every producer's run ends the same way: the training loop over its feed.
        let mut train_on = |feed: &mut dyn Feed| {
            sagessd_train::fit(
                &mut trainer,
                feed,
                &data,
                &fit,
                &mut |done, total| observer.borrow_mut().step(done, total),
                &mut |r| observer.borrow_mut().epoch(r),
            )
        };
        let note = |text: String| observer.borrow_mut().note(&text);
        if let (Some(mode), Some(hw)) = (modelled_host, hardware) {
            if mode == HostIoMode::Isp && !hw.firmware.isp {
                return Err(Error::Invalid(format!(
                    "sampler isp: {} has no in-storage processing (firmware.isp = false)",
                    hw.device.name
                )));
            }
            if mode == HostIoMode::Isp && host_workers > usize::from(hw.firmware.isp_slots) {
                return Err(Error::Invalid(format!(
                    "{host_workers} workers with in-storage sampling: {} has {} sampling slots (one job in flight per worker)",
                    hw.device.name, hw.firmware.isp_slots
                )));
            }
            let graph = graph.as_ref().ok_or_else(|| missing("graph"))?;
            let rows = rows.as_ref().ok_or_else(|| missing("feature rows"))?;
            let mut device = sagessd_host_driver::Device::open(
                sagessd_host_driver::LocalTransport::from_config(hw)
                    .map_err(sagessd_host_driver::DriverError::from)?,
            )?;
            let written = if hw.firmware.isp {
                sagessd_runtime::load::load_graph(&mut device, graph, 0)
            } else {
                sagessd_runtime::load::write_graph_with_progress(
                    &mut device,
                    graph,
                    0,
                    &mut |_, _| {},
                )
            };
            let desc = written.map_err(|e| Error::Placement(e.to_string()))?;
            sagessd_host_driver::Transport::drop_caches(device.transport_mut());
            note(format!(
                "on {}: the graph written from LBA 0, read through the modelled host I/O stack ({}, {} modelled host worker{}); features from host memory (their copy not modelled); modelled epochs from the device and host models",
                hw.device.name,
                mode.name(),
                host_workers,
                if host_workers == 1 { "" } else { "s" },
            ));
            let clock_ns = AtomicU64::new(0);
            let mut stage = Some(ModelledHostStage {
                sampler: HostIoSampler::new(device, desc, mode, hw.host.clone())?,
                fanouts: spec.fanouts.clone(),
                rows: &rows.bytes,
                row_bytes: rows.row_bytes(),
                clock_ns: &clock_ns,
                workers: host_workers,
            });
            let pipeline = one_producer(config, move || stage.take())?;
            let clock = || Some(clock_ns.load(Ordering::SeqCst));
            train_on(&mut PipelineFeed {
                pipeline,
                clock: Some(&clock),
            })?
        } else if on_device {
            let sizing = FeatureSizing {
                samplers: vec![spec.sampler],
                hyperbatch: spec.hyperbatch,
                max_batch_size: batch_size as u64,
                fanouts: spec.fanouts.clone(),
            };
            let placed = PlacedDevice::place(
                &dataset,
                &spec.storage,
                Some(&sizing),
                spec.cache.block_bytes,
            )?;
            let _turn = placed.take_turn()?;
            let modelled = placed.is_emulated();
            note(format!(
                "on {}: the dataset written from LBA 0 (CSR, features, AGNES layout at LBA {}); {}",
                if modelled {
                    placed.hardware().device.name.clone()
                } else {
                    placed.uri().to_string()
                },
                placed.placement().layout_slba,
                if modelled {
                    "modelled epochs from the device model"
                } else {
                    "wall-clock time only"
                }
            ));
            let device = &*placed.device;
            let mut blocks = SharedDevice::new(device)?;
            let mut feature_device = SharedDevice::new(device)?;
            let sampler = match spec.sampler {
                SamplerKind::Isp | SamplerKind::IspHyperbatch => DeviceSampler::Isp {
                    features: true,
                    hyperbatch: spec.sampler == SamplerKind::IspHyperbatch,
                },
                _ => DeviceSampler::Blocks {
                    sampler: Box::new(AgnesSampler::on_device(
                        placed.layout(),
                        spec.graph_buffer_bytes,
                        &mut blocks,
                        placed.placement().layout_slba,
                    )?),
                    gatherer: FeatureGatherer::new(
                        spec.features,
                        sagessd_runtime::ooc::features::FeatureFile::on_device(
                            &mut feature_device,
                            placed
                                .placement()
                                .graph
                                .features
                                .as_ref()
                                .ok_or_else(|| missing("feature region on the device"))?,
                            m.node_count,
                        )?,
                        spec.cache,
                    )
                    .map(Box::new),
                },
            };
            let host_ns = AtomicU64::new(0);
            let mut stage = Some(DeviceStage {
                device,
                sampler,
                fanouts: spec.fanouts.clone(),
                host: modelled.then(|| placed.hardware().host.clone()),
                isp_depth: spec.sampler.group_size(spec.hyperbatch),
                host_ns: &host_ns,
            });
            let pipeline = one_producer(config, move || stage.take())?;
            let clock = || modelled_clock_ns(device, &host_ns);
            train_on(&mut PipelineFeed {
                pipeline,
                clock: modelled.then_some(&clock as &dyn Fn() -> Option<u64>),
            })?
        } else {
            let stages = FileStages {
                source: FileSource {
                    dataset: &dataset,
                    graph: graph.as_ref(),
                    layout: layout.as_ref(),
                    buffer_bytes: spec.graph_buffer_bytes,
                    prefetch: true,
                },
                kind: spec.sampler,
                cache: spec.features,
                settings: spec.cache,
            };
            let fanouts = spec.fanouts.clone();
            let pipeline = Pipeline::new(
                config,
                Box::new(move |_| stages.sampler(&fanouts)),
                Some(Box::new(move |_| {
                    stages
                        .gatherer()?
                        .ok_or_else(|| PipelineError::Config("no feature cache".into()))
                })),
            )?;
            train_on(&mut PipelineFeed {
                pipeline,
                clock: None,
            })?
        }
    };
    Ok(TrainRun {
        outcome,
        evaluation,
        batch_size,
        epochs,
    })
}

/// Training's feed: one pipeline for the whole run (its workers, caches and profile kept
/// across epochs and evaluations), and on an emulated device the modelled clock.
struct PipelineFeed<'a, 'c> {
    pipeline: Pipeline<'a>,
    clock: Option<&'c dyn Fn() -> Option<u64>>,
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn options_that_do_not_go_together_are_refused_before_anything_opens() {
        let refused = |edit: &dyn Fn(&mut TrainSpec), want: &str| {
            let mut spec = TrainSpec::new("/nonexistent");
            edit(&mut spec);
            let err = spec.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{want:?} not in {err:?}");
        };
        refused(
            &|s| s.sampler = SamplerKind::Isp,
            "sampler isp needs a device",
        );
        refused(
            &|s| s.features = FeatureCache::None,
            "training needs features",
        );
        refused(&|s| s.fanouts = vec![0], "fanout 0");
        refused(&|s| s.epochs = Some(0), "must be ≥ 1");
        refused(&|s| s.modelled_steps = true, "in-process emulator");
        refused(
            &|s| {
                s.sampler = SamplerKind::Agnes;
                s.storage = Storage::emulator(crate::HwConfig::cosmos_plus());
                s.host_features = true;
            },
            "host features are for in-storage sampling",
        );
        refused(
            &|s| {
                s.sampler = SamplerKind::Mmap;
                s.storage = Storage::parse("tcp://127.0.0.1:1/nqn.x").unwrap();
            },
            "modelled host I/O stack of the in-process emulator",
        );
        refused(
            &|s| {
                s.sampler = SamplerKind::Agnes;
                s.storage = Storage::emulator(crate::HwConfig::cosmos_plus());
                s.workers = Workers::Fixed {
                    sample: 2,
                    gather: 2,
                };
            },
            "one producer drives it",
        );
        let mut good = TrainSpec::new("/nonexistent");
        good.validate().unwrap();
        good.sampler = SamplerKind::Isp;
        good.storage = Storage::emulator(crate::HwConfig::cosmos_plus());
        good.validate().unwrap();
    }
}
