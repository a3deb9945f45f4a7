//! The training loop: epochs of minibatches from the pipeline, a [`Trainer`] step per
//! minibatch, evaluation on the validation and test splits, and per epoch the stage times (wall
//! clock) and, where the producers model time, the modelled epoch on one virtual timeline.

use std::time::Instant;

use sagessd_pipeline::{Minibatch, PipelineError, RunReport, Timeline};
use sagessd_runtime::graph::CsrGraph;
use sagessd_runtime::minibatch::{Order, Request, epoch_requests};

use crate::error::TrainError;
use crate::features::FeatureDtype;
use crate::mfg::Mfg;
use crate::step_model::StepModel;
use crate::trainer::{StepOutcome, Trainer};

/// Runs minibatches through a pipeline: the caller's samplers, gatherers and workers.
pub trait Feed {
    /// Prepares `requests` and hands each to `consume`, in order.
    fn run(
        &mut self,
        requests: &[Request],
        consume: &mut dyn FnMut(Minibatch) -> Result<(), PipelineError>,
    ) -> Result<RunReport, PipelineError>;

    /// The producers' modelled clock now, if they model time.
    fn modelled_now_ns(&self) -> Option<u64>;
}

/// The node data training reads (besides the minibatches).
#[derive(Clone, Copy, Debug)]
pub struct NodeData<'a> {
    /// Every node's label (`-1`: unlabelled).
    pub labels: &'a [i64],
    /// Training nodes.
    pub train: &'a [u64],
    /// Validation nodes.
    pub valid: &'a [u64],
    /// Test nodes.
    pub test: &'a [u64],
    /// The features' element type.
    pub dtype: FeatureDtype,
    /// Values per feature row.
    pub dim: usize,
    /// The graph in memory, for BGL's order and full-neighbourhood evaluation.
    pub graph: Option<&'a CsrGraph>,
    /// Every node's feature row, for full-neighbourhood evaluation.
    pub features: Option<&'a [u8]>,
}

/// How evaluation samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// Minibatches sampled with the training fanouts, through the same pipeline.
    Sampled,
    /// Every neighbour, on the whole graph at once (small graphs).
    Full,
}

/// The loop's settings.
#[derive(Clone, Copy, Debug)]
pub struct FitConfig {
    /// Epochs.
    pub epochs: u32,
    /// Targets per minibatch.
    pub batch_size: usize,
    /// Minibatch order of the training nodes.
    pub order: Order,
    /// Seed of the order and of sampling.
    pub seed: u64,
    /// GNN layers (the fanouts' count).
    pub layers: usize,
    /// How the splits are evaluated.
    pub evaluation: Evaluation,
    /// Minibatches the pipeline's queue holds (its depth × group size), which bounds how far
    /// the modelled producers run ahead of the trainer.
    pub queue_minibatches: usize,
    /// Where the producers model time: each step's modelled time on the `[trainer]`
    /// accelerator instead of its measured time on this machine (`None`: measured).
    pub step_model: Option<StepModel>,
}

/// Wall-clock seconds per stage over an epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct StageSeconds {
    /// Sampling, summed over its workers.
    pub sample_s: f64,
    /// Feature gather, summed over its workers.
    pub gather_s: f64,
    /// Building the minibatch's tensors and copying them to the training device.
    pub copy_s: f64,
    /// Forward, backward and optimizer step.
    pub step_s: f64,
    /// The trainer waiting for input.
    pub wait_s: f64,
}

/// Minibatches per second each stage could sustain over an epoch: its minibatches over its
/// busy time, times its workers (wall clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct StageThroughput {
    /// Sampling.
    pub sample_minibatches_per_s: f64,
    /// Feature gather (0 without a gather stage).
    pub gather_minibatches_per_s: f64,
    /// The trainer: copy and step.
    pub train_minibatches_per_s: f64,
}

/// The modelled epoch, where the producers model time.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ModelledEpoch {
    /// From the producers' clock at the epoch's start to the last step's end, seconds.
    pub epoch_s: f64,
    /// The trainer's idle share of it.
    pub idle_fraction: f64,
    /// The steps' time on the modelled timeline, seconds.
    pub train_s: f64,
    /// Whether that is the accelerator model's ([`FitConfig::step_model`]) rather than the
    /// steps' measured time on this machine.
    pub modelled_steps: bool,
}

/// One epoch, as reported.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EpochRecord {
    /// Epoch number, from 0.
    pub epoch: u32,
    /// Each step's loss, in order.
    pub losses: Vec<f64>,
    /// Mean training loss over the targets.
    pub loss: f64,
    /// Training accuracy (with dropout, as trained).
    pub train_accuracy: f64,
    /// Validation accuracy, if the dataset has a validation split.
    pub valid_accuracy: Option<f64>,
    /// Wall-clock time of the epoch's training pass, seconds.
    pub wall_s: f64,
    /// Its stages.
    pub stages: StageSeconds,
    /// What each stage could sustain.
    pub throughput: StageThroughput,
    /// The trainer's share of the pass spent waiting for input (wall clock).
    pub idle_fraction: f64,
    /// Sampling and gather workers.
    pub workers: (usize, usize),
    /// The modelled epoch.
    pub modelled: Option<ModelledEpoch>,
}

/// What a run of [`fit`] came to.
#[derive(Clone, Debug, PartialEq)]
pub struct FitOutcome {
    /// Every epoch.
    pub epochs: Vec<EpochRecord>,
    /// Test accuracy of the model of the epoch with the best validation accuracy (the last
    /// epoch's without a validation split), if the dataset has a test split.
    pub test_accuracy: Option<f64>,
    /// That epoch.
    pub selected_epoch: u32,
}

/// Why training stopped.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// The pipeline (a producer) failed.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The model or a minibatch's tensors failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// The settings or the data cannot train.
    #[error("{0}")]
    Invalid(String),
}

/// Seed offset of evaluation minibatches, so that they never repeat a training minibatch's.
const EVAL_SEED: u64 = 0x0e0a_1000_0000_0000;

/// Trains `trainer` for `config.epochs` epochs on minibatches of `data.train` from `feed`,
/// calling `on_step(done, total)` after each step and `on_epoch` after each epoch.
pub fn fit(
    trainer: &mut Trainer,
    feed: &mut dyn Feed,
    data: &NodeData<'_>,
    config: &FitConfig,
    on_step: &mut dyn FnMut(usize, usize),
    on_epoch: &mut dyn FnMut(&EpochRecord),
) -> Result<FitOutcome, FitError> {
    if data.train.is_empty() {
        return Err(FitError::Invalid("no training nodes".into()));
    }
    let full = match config.evaluation {
        Evaluation::Full => Some(full_graph_mfg(trainer, data, config)?),
        Evaluation::Sampled => None,
    };
    let mut epochs = Vec::new();
    // Model selection: the test split is scored whenever validation improves.
    let mut best: Option<(f64, u32, Option<f64>)> = None;
    let per_epoch = data.train.len().div_ceil(config.batch_size.max(1));
    for epoch in 0..config.epochs {
        // Every minibatch of the run needs its own index (its sampling seed comes from it).
        let first = u32::try_from(per_epoch as u64 * u64::from(epoch))
            .ok()
            .filter(|f| u64::from(*f) + per_epoch as u64 <= u64::from(u32::MAX))
            .ok_or_else(|| FitError::Invalid("too many minibatches for one run".into()))?;
        let requests = epoch_requests(
            config.order,
            data.train,
            config.batch_size,
            config.seed,
            epoch,
            first,
            data.graph.map(sagessd_runtime::graph::HostGraph::Csr),
        )
        .map_err(FitError::Invalid)?;
        let start_ns = feed.modelled_now_ns();
        let mut timeline = start_ns.map(|s| Timeline::starting_at(s, config.queue_minibatches));
        let mut losses = Vec::with_capacity(requests.len());
        let mut total = StepOutcome {
            loss: 0.0,
            correct: 0,
            count: 0,
        };
        let (mut copy_ns, mut step_ns) = (0u64, 0u64);
        let mut failure: Option<TrainError> = None;
        let started = Instant::now();
        let report = {
            let mut consume = |m: Minibatch| -> Result<(), PipelineError> {
                let index = m.index;
                let t = Instant::now();
                let step = to_mfg(&m, data, trainer.device()).and_then(|mfg| {
                    let copied = t.elapsed();
                    let out = trainer.train_step(&mfg)?;
                    Ok((copied, out))
                });
                let (copied, out) = match step {
                    Ok(v) => v,
                    Err(e) => {
                        let message = e.to_string();
                        failure = Some(e);
                        return Err(PipelineError::Consumer { index, message });
                    }
                };
                let took = t.elapsed();
                copy_ns += copied.as_nanos() as u64;
                step_ns += (took - copied).as_nanos() as u64;
                if let (Some(tl), Some(ready)) = (timeline.as_mut(), m.modelled_ready_ns) {
                    let step = match &config.step_model {
                        Some(model) => model.step_ns(&m.subgraph.view()),
                        None => took.as_nanos() as u64,
                    };
                    tl.step(ready, step);
                }
                losses.push(out.loss);
                total.loss += out.loss * out.count as f64;
                total.correct += out.correct;
                total.count += out.count;
                on_step(losses.len(), requests.len());
                Ok(())
            };
            feed.run(&requests, &mut consume)
        };
        let report = match (report, failure) {
            (_, Some(e)) => return Err(e.into()),
            (r, None) => r?,
        };
        let wall_s = started.elapsed().as_secs_f64();
        let valid_accuracy = match data.valid {
            [] => None,
            nodes => Some(evaluate(
                trainer,
                feed,
                data,
                config,
                full.as_ref(),
                nodes,
                1,
            )?),
        };
        let record = EpochRecord {
            epoch,
            loss: total.loss / total.count.max(1) as f64,
            losses,
            train_accuracy: total.accuracy(),
            valid_accuracy,
            wall_s,
            stages: StageSeconds {
                sample_s: report.sample.busy_ns as f64 / 1e9,
                gather_s: report.gather.busy_ns as f64 / 1e9,
                copy_s: copy_ns as f64 / 1e9,
                step_s: step_ns as f64 / 1e9,
                wait_s: report.wait_ns as f64 / 1e9,
            },
            throughput: StageThroughput {
                sample_minibatches_per_s: rate(
                    report.sample.items,
                    report.sample.busy_ns,
                    report.sample_workers,
                ),
                // A producer that gathers as it samples (on a device) gathers on its own worker.
                gather_minibatches_per_s: rate(
                    report.gather.items,
                    report.gather.busy_ns,
                    report.gather_workers.max(1),
                ),
                train_minibatches_per_s: rate(report.minibatches as u64, copy_ns + step_ns, 1),
            },
            idle_fraction: report.wait_ns as f64 / (report.wall_ns.max(1)) as f64,
            workers: (report.sample_workers, report.gather_workers),
            modelled: timeline.as_ref().zip(start_ns).map(|(t, s)| ModelledEpoch {
                epoch_s: (t.end_ns - s) as f64 / 1e9,
                idle_fraction: t.idle_fraction(),
                train_s: t.busy_ns as f64 / 1e9,
                modelled_steps: config.step_model.is_some(),
            }),
        };
        let improved = match (best, record.valid_accuracy) {
            (None, _) | (_, None) => true,
            (Some((b, _, _)), Some(v)) => v > b,
        };
        if improved {
            let test = match data.test {
                [] => None,
                nodes => Some(evaluate(
                    trainer,
                    feed,
                    data,
                    config,
                    full.as_ref(),
                    nodes,
                    2,
                )?),
            };
            best = Some((record.valid_accuracy.unwrap_or(0.0), epoch, test));
        }
        on_epoch(&record);
        epochs.push(record);
    }
    let (_, selected_epoch, test_accuracy) = best.unwrap_or((0.0, 0, None));
    Ok(FitOutcome {
        epochs,
        test_accuracy,
        selected_epoch,
    })
}

/// `items` over `busy_ns` (summed over `workers`), times the workers: per second.
fn rate(items: u64, busy_ns: u64, workers: usize) -> f64 {
    if busy_ns == 0 {
        0.0
    } else {
        items as f64 * 1e9 / busy_ns as f64 * workers as f64
    }
}

/// The whole graph as one full-neighbourhood minibatch on the trainer's device (built once per
/// run, for [`Evaluation::Full`]).
fn full_graph_mfg(
    trainer: &Trainer,
    data: &NodeData<'_>,
    config: &FitConfig,
) -> Result<Mfg, FitError> {
    let (graph, features) = data.graph.zip(data.features).ok_or_else(|| {
        FitError::Invalid(
            "full-neighbourhood evaluation needs the graph and its features in memory".into(),
        )
    })?;
    let indices: Vec<u64> = graph.indices().iter().map(|&v| u64::from(v)).collect();
    Ok(Mfg::full_graph(
        graph.indptr(),
        &indices,
        config.layers,
        features,
        data.dtype,
        data.dim,
        data.labels,
        trainer.device(),
    )?)
}

/// The accuracy on `nodes`: on the whole graph at once (`full`), or on minibatches sampled
/// through the feed.
fn evaluate(
    trainer: &Trainer,
    feed: &mut dyn Feed,
    data: &NodeData<'_>,
    config: &FitConfig,
    full: Option<&Mfg>,
    nodes: &[u64],
    split: u64,
) -> Result<f64, FitError> {
    let mut total = StepOutcome {
        loss: 0.0,
        correct: 0,
        count: 0,
    };
    match full {
        Some(mfg) => {
            let rows: Vec<i64> = nodes.iter().map(|&v| v as i64).collect();
            let rows = tch::Tensor::from_slice(&rows).to_device(trainer.device());
            total = trainer.evaluate(mfg, Some(&rows))?;
        }
        None => {
            let requests = epoch_requests(
                Order::Random,
                nodes,
                config.batch_size,
                config.seed ^ EVAL_SEED ^ split,
                0,
                0,
                None,
            )
            .map_err(FitError::Invalid)?;
            let mut failure = None;
            let report = feed.run(&requests, &mut |m| {
                let out =
                    to_mfg(&m, data, trainer.device()).and_then(|mfg| trainer.evaluate(&mfg, None));
                match out {
                    Ok(o) => {
                        total.correct += o.correct;
                        total.count += o.count;
                        Ok(())
                    }
                    Err(e) => {
                        let message = e.to_string();
                        failure = Some(e);
                        Err(PipelineError::Consumer {
                            index: m.index,
                            message,
                        })
                    }
                }
            });
            if let Some(e) = failure {
                return Err(e.into());
            }
            report?;
        }
    }
    Ok(total.accuracy())
}

/// A pipeline minibatch's tensors on `device`, with its targets' labels.
fn to_mfg(m: &Minibatch, data: &NodeData<'_>, device: tch::Device) -> Result<Mfg, TrainError> {
    let features = m.features.as_deref().ok_or(TrainError::Spec(
        "a minibatch came without features (training needs them)",
    ))?;
    let view = m.subgraph.view();
    Mfg::from_labelled_subgraph(&view, features, data.dtype, data.dim, data.labels, device)
}
