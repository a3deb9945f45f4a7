//! Training throughput on this machine's CPU, by the wall clock (`sagessd bench train`): the
//! in-memory sampler's minibatches per second, GraphSAGE's training steps per second on
//! minibatches sampled and gathered beforehand, and the whole pipeline's minibatches per second
//! (sampling, feature gather from the dataset's file, training) with automatic workers and with
//! one worker per stage.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use sagessd_pipeline::{FileStages, Minibatch, Pipeline, PipelineConfig, PipelineError, Workers};
use sagessd_runtime::dataset::generate::{GenerateParams, generate};
use sagessd_runtime::dataset::{Dataset, Split};
use sagessd_runtime::minibatch::{Order, epoch_requests};
use sagessd_runtime::npy::Dtype;
use sagessd_runtime::ooc::features::FeatureFile;
use sagessd_runtime::registry::{
    CacheSettings, FeatureCache, FeatureGatherer, FileSource, SamplerKind,
};
use sagessd_runtime::sampler::{ReferenceSampler, Sampler};
use sagessd_train::{FeatureDtype, Mfg, ModelKind, TrainConfig, Trainer};

/// What to time.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Minibatches timed per measurement.
    pub batches: usize,
    /// Targets per minibatch.
    pub batch_size: usize,
    /// GraphSAGE's hidden width.
    pub hidden: i64,
    /// libtorch's CPU threads.
    pub threads: i32,
}

/// One fanout's figures.
#[derive(Clone, Debug)]
pub struct Row {
    /// Neighbours per hop.
    pub fanouts: Vec<u16>,
    /// The in-memory sampler alone, minibatches/s.
    pub sampled_per_s: f64,
    /// Forward, backward and Adam on minibatches sampled and gathered beforehand, steps/s.
    pub steps_per_s: f64,
    /// Building a minibatch's tensors, ms.
    pub copy_ms: f64,
    /// The pipeline (sampling, BGL-cache gather, training), one worker per stage, minibatches/s.
    pub pipeline_one_per_s: f64,
    /// The same with automatic workers, minibatches/s.
    pub pipeline_auto_per_s: f64,
    /// The sampling + gather workers the automatic pipeline chose.
    pub auto_workers: (usize, usize),
}

/// The generated dataset the benchmark uses without one (R-MAT of `scale`, edge factor 8, 64
/// f32 features, 8 classes) in `dir`, made once (`progress` says so).
pub fn generated(
    dir: &Path,
    scale: u32,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Dataset> {
    if let Ok(d) = Dataset::open(dir) {
        return Ok(d);
    }
    progress(&format!("generating {} (once)", dir.display()));
    let _ = std::fs::remove_dir_all(dir);
    Ok(generate(
        dir,
        &GenerateParams {
            name: format!("rmat-{scale}-8"),
            scale,
            edge_factor: 8,
            seed: 1,
            feature_dim: 64,
            feature_dtype: Dtype::F32,
            classes: 8,
        },
    )?)
}

/// Times `dataset` at fanouts 10,10,10 and 25,10.
pub fn measure(dataset: &Dataset, a: &Settings) -> anyhow::Result<Vec<Row>> {
    anyhow::ensure!(
        a.batches > 0 && a.batch_size > 0,
        "the batches and the batch size must be ≥ 1"
    );
    tch::set_num_threads(a.threads.max(1));
    let m = &dataset.manifest;
    let labels = dataset.labels()?.context("the dataset has no labels")?;
    let train = dataset
        .split(Split::Train)?
        .context("the dataset has no train split")?;
    let (dim, dtype) = dataset
        .feature_shape()?
        .context("the dataset has no features")?;
    let dtype = match dtype {
        Dtype::F16 => FeatureDtype::F16,
        _ => FeatureDtype::F32,
    };
    let graph = dataset.graph()?;
    let settings = CacheSettings {
        cache_bytes: 64 << 20,
        threshold: 2,
        block_bytes: 1 << 20,
    };
    let mut rows_out = Vec::new();
    for fanouts in [vec![10u16, 10, 10], vec![25, 10]] {
        let mut requests = epoch_requests(Order::Random, &train, a.batch_size, 1, 0, 0, None)
            .map_err(anyhow::Error::msg)?;
        requests.truncate(a.batches);
        let n = requests.len();
        // Sampling alone.
        let mut sampler = ReferenceSampler::new(&graph);
        let t = Instant::now();
        let subs = sampler.sample_many(&fanouts, &requests)?;
        let sampled_per_s = n as f64 / t.elapsed().as_secs_f64();
        // Training steps alone, on minibatches gathered beforehand.
        let mut gatherer =
            FeatureGatherer::new(FeatureCache::Bgl, FeatureFile::open(dataset)?, settings)
                .context("a gatherer")?;
        let rows = gatherer.gather(&subs)?;
        let prepared: Vec<Mfg> = subs
            .iter()
            .zip(&rows)
            .take(WARMUP_STEPS)
            .map(|(sub, rows)| mfg(sub, rows, &labels, dtype, dim))
            .collect::<anyhow::Result<_>>()?;
        let warm_trainer = || -> anyhow::Result<Trainer> {
            let mut t = new_trainer(dim, m.class_count.unwrap_or(1), fanouts.len(), a.hidden)?;
            for mfg in &prepared {
                t.train_step(mfg)?;
            }
            Ok(t)
        };
        let mut trainer = warm_trainer()?;
        let (mut copy_s, mut step_s) = (0.0, 0.0);
        for (sub, rows) in subs.iter().zip(&rows) {
            let t = Instant::now();
            let mfg = mfg(sub, rows, &labels, dtype, dim)?;
            copy_s += t.elapsed().as_secs_f64();
            let t = Instant::now();
            trainer.train_step(&mfg)?;
            step_s += t.elapsed().as_secs_f64();
        }
        // The pipeline end to end, one worker per stage and auto.
        let mut pipeline_per_s = Vec::new();
        let mut auto_workers = (0, 0);
        for workers in [
            Workers::Fixed {
                sample: 1,
                gather: 1,
            },
            Workers::Auto,
        ] {
            let stages = FileStages {
                source: FileSource {
                    dataset,
                    graph: Some(&graph),
                    layout: None,
                    buffer_bytes: 0,
                    prefetch: false,
                },
                kind: SamplerKind::Memory,
                cache: FeatureCache::Bgl,
                settings,
            };
            let f = fanouts.clone();
            let mut pipeline = Pipeline::new(
                PipelineConfig {
                    workers,
                    queue_depth: 4,
                    group_size: 1,
                    profile_groups: 4,
                    max_workers: std::thread::available_parallelism()
                        .map_or(1, |n| n.get().saturating_sub(1).max(1)),
                },
                Box::new(move |_| stages.sampler(&f)),
                Some(Box::new(move |_| {
                    stages
                        .gatherer()?
                        .ok_or_else(|| PipelineError::Config("no gatherer".into()))
                })),
            )?;
            let mut trainer =
                new_trainer(dim, m.class_count.unwrap_or(1), fanouts.len(), a.hidden)?;
            let t = Instant::now();
            let report = pipeline.run(&requests, &mut |mb: Minibatch| {
                let rows = mb.features.as_deref().unwrap_or_default();
                let step = mfg(&mb.subgraph, rows, &labels, dtype, dim)
                    .and_then(|mfg| Ok(trainer.train_step(&mfg)?));
                step.map(|_| ()).map_err(|e| PipelineError::Consumer {
                    index: mb.index,
                    message: e.to_string(),
                })
            })?;
            pipeline_per_s.push(n as f64 / t.elapsed().as_secs_f64());
            auto_workers = (report.sample_workers, report.gather_workers);
        }
        rows_out.push(Row {
            sampled_per_s,
            steps_per_s: n as f64 / step_s,
            copy_ms: 1e3 * copy_s / n as f64,
            pipeline_one_per_s: pipeline_per_s[0],
            pipeline_auto_per_s: pipeline_per_s[1],
            auto_workers,
            fanouts,
        });
    }
    Ok(rows_out)
}

/// Untimed training steps before each measurement (libtorch's first steps allocate and
/// initialise what the later ones reuse).
const WARMUP_STEPS: usize = 3;

/// A GraphSAGE trainer on the CPU with the bench's settings.
fn new_trainer(dim: usize, classes: u32, layers: usize, hidden: i64) -> anyhow::Result<Trainer> {
    Ok(Trainer::new(&TrainConfig {
        model: ModelKind::Sage,
        in_dim: dim as i64,
        hidden,
        classes: i64::from(classes),
        layers,
        heads: 1,
        dropout: 0.5,
        lr: 0.01,
        weight_decay: 0.0,
        seed: 1,
        device: tch::Device::Cpu,
    })?)
}

/// A minibatch's tensors on the CPU, its targets' labels from `labels`.
fn mfg(
    sub: &sagessd_runtime::sampler::SampledSubgraph,
    rows: &[u8],
    labels: &[i64],
    dtype: FeatureDtype,
    dim: usize,
) -> anyhow::Result<Mfg> {
    let view = sub.view();
    Ok(Mfg::from_labelled_subgraph(
        &view,
        rows,
        dtype,
        dim,
        labels,
        tch::Device::Cpu,
    )?)
}
