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

mod spec;

use std::sync::atomic::{AtomicU64, Ordering};

use sagessd_pipeline::{
    DeviceSampler, DeviceStage, FileStages, Minibatch, ModelledHostStage, Pipeline, PipelineConfig,
    PipelineError, RunReport, SampleStage, modelled_clock_ns,
};
use sagessd_runtime::host_io::HostIoSampler;
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
pub use spec::{EvalChoice, FULL_EVAL_MAX_NODES, TrainSpec, default_batch_size, default_epochs};

use crate::{Dataset, Error, FeatureSizing, PlacedDevice, SamplerKind, Split, Storage};

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
