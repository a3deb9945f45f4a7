//! `sagessd bench train`: training throughput on this machine's CPU, by the wall clock: the
//! in-memory sampler's minibatches per second, GraphSAGE's training steps per second on
//! minibatches sampled and gathered beforehand, and the whole pipeline's minibatches per second
//! (sampling, feature gather from the dataset's file, training) with `--workers auto` and with
//! one worker per stage.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
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

/// Flags of `bench train`.
#[derive(Debug, Args)]
pub(crate) struct BenchTrainArgs {
    /// The dataset (features, labels, a train split); default: an R-MAT dataset of --scale
    /// generated once under target/bench/.
    #[arg(long, value_name = "DIR")]
    dataset: Option<PathBuf>,
    /// Without --dataset: R-MAT scale (edge factor 8, 64 f32 features, 8 classes).
    #[arg(long, default_value_t = 16)]
    scale: u32,
    /// Minibatches timed per measurement.
    #[arg(long, default_value_t = 20)]
    batches: usize,
    /// Targets per minibatch.
    #[arg(long, default_value_t = 1024)]
    batch_size: usize,
    /// GraphSAGE's hidden width.
    #[arg(long, default_value_t = 64)]
    hidden: i64,
    /// libtorch's CPU threads.
    #[arg(long, default_value_t = 1)]
    threads: i32,
}

/// `bench train`.
pub(crate) fn run_bench_train(a: BenchTrainArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.batches > 0 && a.batch_size > 0,
        "--batches and --batch-size must be ≥ 1"
    );
    tch::set_num_threads(a.threads.max(1));
    let dataset = match &a.dataset {
        Some(dir) => Dataset::open(dir)?,
        None => {
            let dir = PathBuf::from(format!("target/bench/rmat-{}-8-f64", a.scale));
            match Dataset::open(&dir) {
                Ok(d) => d,
                Err(_) => {
                    eprintln!("generating {} (once)", dir.display());
                    let _ = std::fs::remove_dir_all(&dir);
                    generate(
                        &dir,
                        &GenerateParams {
                            name: format!("rmat-{}-8", a.scale),
                            scale: a.scale,
                            edge_factor: 8,
                            seed: 1,
                            feature_dim: 64,
                            feature_dtype: Dtype::F32,
                            classes: 8,
                        },
                    )?
                }
            }
        }
    };
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
    println!(
        "bench train: {} ({} nodes, {} CSR entries, {dim} features, {} classes), GraphSAGE hidden {}, batch {}, {} minibatches per figure, {} libtorch thread(s); WALL CLOCK on this machine",
        m.name,
        m.node_count,
        m.edge_count,
        m.class_count.unwrap_or(0),
        a.hidden,
        a.batch_size,
        a.batches,
        a.threads.max(1)
    );
    println!(
        "{:<10} {:>16} {:>14} {:>14} {:>16} {:>16} {:>8}",
        "fanouts", "sampled mb/s", "steps/s", "copy ms/mb", "pipeline 1 mb/s", "auto mb/s", "auto"
    );
    let settings = CacheSettings {
        cache_bytes: 64 << 20,
        threshold: 2,
        block_bytes: 1 << 20,
    };
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
            FeatureGatherer::new(FeatureCache::Bgl, FeatureFile::open(&dataset)?, settings)
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
        let mut auto_workers = String::new();
        for workers in [
            Workers::Fixed {
                sample: 1,
                gather: 1,
            },
            Workers::Auto,
        ] {
            let stages = FileStages {
                source: FileSource {
                    dataset: &dataset,
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
            auto_workers = format!("{}+{}", report.sample_workers, report.gather_workers);
        }
        println!(
            "{:<10} {:>16.1} {:>14.2} {:>14.2} {:>16.2} {:>16.2} {:>8}",
            fanouts
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(","),
            sampled_per_s,
            n as f64 / step_s,
            1e3 * copy_s / n as f64,
            pipeline_per_s[0],
            pipeline_per_s[1],
            auto_workers,
        );
    }
    println!(
        "sampled mb/s: the in-memory sampler alone; steps/s: forward, backward and Adam on minibatches sampled and gathered beforehand (after 3 untimed steps, as before each pipeline run); copy: building a minibatch's tensors; pipeline: sampling, feature gather (BGL cache over the features file) and training, 1 worker per stage or --workers auto (sampling+gather workers chosen)"
    );
    Ok(ExitCode::SUCCESS)
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
