//! BGL's feature cache (§3.2): the cache hit ratio and the gather I/O against the cache's size,
//! for random minibatch order and BGL's proximity-aware order (randomised BFS sequences), with
//! BGL's FIFO cache and AGNES's access-count-threshold cache, at ogbn-papers100M's size (the
//! `papers100m` synthetic graph, its training share of nodes, a computed table of 128 `f32`
//! features a node: 57 GB that no disk holds); and, with training built in, the
//! stage-throughput profile and the worker allocation that BGL-style resource isolation chooses
//! on this machine (§3.4), on a generated dataset small enough to train.
//!
//! The cache figures are counts (rows gathered, hits, reads, bytes), so two runs write
//! identical CSVs; the profile is wall clock and says so.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use sagessd_emulator::synthetic_features::SyntheticFeatures;
use sagessd_runtime::graph_spec::{GraphSpec, WorkloadGraph};
use sagessd_runtime::minibatch::{Order, Request, epoch_requests};
use sagessd_runtime::npy;
use sagessd_runtime::ooc::features::{FeatureFile, GatherStats};
use sagessd_runtime::registry::{CacheSettings, FeatureCache, FeatureGatherer};
use sagessd_runtime::sampler::{FNV_OFFSET, ReferenceSampler, SampledSubgraph, Sampler, fnv1a};

use super::plot::{Figure, Series};
use crate::record::Record;

/// The sweep.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sweep {
    /// The graph the caches serve.
    pub graph: GraphSpec,
    /// Its training nodes, a share of all (each node drawn by a keyed hash).
    pub train_share: f64,
    /// Feature width (f32) of the computed table.
    pub feature_dim: u32,
    /// R-MAT scale of the generated dataset the stage profile trains on (edge factor 8,
    /// [`PROFILE_FEATURE_DIM`] features).
    pub profile_scale: u32,
    /// Targets per minibatch.
    pub batch_size: usize,
    /// Fanouts, hop order.
    pub fanouts: Vec<u16>,
    /// Whole epochs gathered through each cache before the counted minibatches (not counted):
    /// the caches are then warm, as in a run of many epochs.
    pub warmup_epochs: u32,
    /// Minibatches counted per point: the first of the epoch after the warm-up.
    pub minibatches: usize,
    /// Cache sizes, percent of the feature table.
    pub cache_percent: Vec<u32>,
    /// Minibatches AGNES gathers together (its hyperbatch).
    pub hyperbatch: usize,
    /// AGNES: accesses after which a row is kept.
    pub threshold: u32,
    /// AGNES: bytes per feature block read.
    pub block_bytes: usize,
}

impl Sweep {
    /// The full sweep, at ogbn-papers100M's size: its node count, training share (1,207,179
    /// of 111,059,956 nodes: Hu et al., NeurIPS 2020, Table 1) and feature width (128), BGL's
    /// minibatches of 1,000 targets (§5.1); one warm-up epoch (1,207 minibatches), then the
    /// first 256 minibatches of the next (21 % of an epoch) counted.
    pub(crate) fn full() -> Self {
        Self {
            graph: GraphSpec::parse("papers100m").expect("a valid graph word"),
            train_share: PAPERS100M_TRAIN_SHARE,
            feature_dim: 128,
            profile_scale: 17,
            batch_size: 1000,
            fanouts: vec![10, 5],
            warmup_epochs: 1,
            minibatches: 256,
            cache_percent: vec![1, 5, 10, 25, 50],
            hyperbatch: 8,
            threshold: 2,
            block_bytes: 64 << 10,
        }
    }

    /// The reduced sweep of the test suite.
    pub(crate) fn quick() -> Self {
        Self {
            graph: GraphSpec::parse("synthetic:20000").expect("a valid graph word"),
            train_share: 0.1,
            feature_dim: 16,
            profile_scale: 11,
            batch_size: 16,
            fanouts: vec![5, 5],
            warmup_epochs: 1,
            minibatches: 32,
            cache_percent: vec![5, 25],
            hyperbatch: 4,
            threshold: 2,
            block_bytes: 16 << 10,
        }
    }
}

/// ogbn-papers100M's training nodes as a share of its nodes (1,207,179 of 111,059,956).
pub(crate) const PAPERS100M_TRAIN_SHARE: f64 = 1_207_179.0 / 111_059_956.0;

/// Feature width of the stage profile's generated dataset.
pub(crate) const PROFILE_FEATURE_DIM: u32 = 64;

/// The graph, training nodes and computed feature table the cache sweep runs on.
#[derive(Debug)]
pub(crate) struct Workload {
    /// The graph, as [`Sweep::graph`] builds it.
    pub graph: WorkloadGraph,
    /// Its training nodes, ascending.
    pub train: Vec<u64>,
    /// The feature table, computed where it is read.
    pub features: Arc<SyntheticFeatures>,
}

impl Workload {
    /// The sweep's graph, its training nodes (node `v` when a hash of `(seed, v)` falls in the
    /// lowest `train_share` of 64-bit values) and a `feature_dim`-wide table from `seed`.
    pub(crate) fn new(sweep: &Sweep, seed: u64) -> anyhow::Result<Self> {
        let graph = sweep.graph.build().map_err(anyhow::Error::msg)?;
        Self::over(graph, sweep.train_share, sweep.feature_dim, seed)
    }

    /// `graph`, its training nodes (node `v` when a hash of `(seed, v)` falls in the lowest
    /// `train_share` of 64-bit values) and a `feature_dim`-wide table from `seed`.
    pub(crate) fn over(
        graph: WorkloadGraph,
        train_share: f64,
        feature_dim: u32,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let n = graph.host().node_count();
        anyhow::ensure!(
            train_share > 0.0 && train_share <= 1.0,
            "training share {train_share} is outside (0, 1]"
        );
        let below = (train_share * 2f64.powi(64)).min(u64::MAX as f64) as u64;
        let key = sagessd_abi::sample::mix(seed ^ TRAIN_KEY);
        let train: Vec<u64> = (0..n)
            .filter(|&v| sagessd_abi::sample::mix(key ^ v) <= below)
            .collect();
        anyhow::ensure!(!train.is_empty(), "no training nodes in {n} nodes");
        let features =
            Arc::new(SyntheticFeatures::new(n, feature_dim, seed).context("the feature table")?);
        Ok(Self {
            graph,
            train,
            features,
        })
    }

    /// The feature table as a file's would be read: its reads counted as those of a
    /// `features.npy` holding it.
    pub(crate) fn feature_file(&self) -> anyhow::Result<FeatureFile<'static>> {
        Ok(FeatureFile::computed(
            Arc::clone(&self.features),
            self.npy_data_offset(),
        )?)
    }

    /// Where a `features.npy` of the table would start its rows (after the header
    /// [`npy::NpyWriter`] writes): reads of the computed table are counted as that file's.
    fn npy_data_offset(&self) -> u64 {
        npy::data_offset(
            npy::Dtype::F32,
            &[self.features.rows(), u64::from(self.features.dim())],
        )
    }

    /// The feature table's bytes.
    pub(crate) fn table_bytes(&self) -> u64 {
        self.features.rows() * self.features.row_bytes()
    }
}

/// Keys the training split apart from the other hashes of the same seed.
const TRAIN_KEY: u64 = 0x7472_6169_6e5f_7370;

/// One cache policy, order and size: what gathering the minibatches' features did.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Point {
    /// The cache.
    pub cache: FeatureCache,
    /// The minibatch order.
    pub order: Order,
    /// Cache size, percent of the feature table.
    pub cache_percent: u32,
    /// Cache size, bytes.
    pub cache_bytes: usize,
    /// Minibatches gathered before the counted ones (the warm-up epochs).
    pub warmup_minibatches: usize,
    /// Minibatches counted (fewer than the sweep's if an epoch is shorter).
    pub minibatches: usize,
    /// What the gatherer counted.
    pub stats: GatherStats,
}

/// The policy's name in the reports.
pub(crate) fn policy(cache: FeatureCache) -> &'static str {
    match cache {
        FeatureCache::Bgl => "BGL FIFO",
        FeatureCache::Agnes => "AGNES threshold",
        FeatureCache::None => "none",
    }
}

/// Gathers `sweep.warmup_epochs` whole epochs of `w`'s training nodes, then the first
/// `sweep.minibatches` minibatches of the next epoch (the counted ones), in each order, through
/// each cache at each size. Every policy and size must return the same
/// rows (checked): they differ only in what they read.
pub(crate) fn run(
    w: &Workload,
    sweep: &Sweep,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<Point>> {
    let table_bytes = usize::try_from(w.table_bytes()).context("the feature table's size")?;
    let mut sampler = ReferenceSampler::over(w.graph.host());
    let mut points = Vec::new();
    for order in [Order::Random, Order::Bgl] {
        progress(&format!("  {} order", order.name()));
        // The warm-up epochs whole, then the counted minibatches of the next epoch.
        let mut warmup = Vec::new();
        let mut first_index = 0u32;
        let mut counted = Vec::new();
        for epoch in 0..=sweep.warmup_epochs {
            let requests = epoch_requests(
                order,
                &w.train,
                sweep.batch_size,
                1,
                epoch,
                first_index,
                Some(w.graph.host()),
            )
            .map_err(anyhow::Error::msg)?;
            first_index = u32::try_from(requests.len())
                .ok()
                .and_then(|n| first_index.checked_add(n))
                .context("more minibatches than 32-bit indices")?;
            let take = if epoch < sweep.warmup_epochs {
                requests.len()
            } else {
                sweep.minibatches
            };
            let subs = requests
                .iter()
                .take(take)
                .map(|Request { seed, targets }| sampler.sample(*seed, &sweep.fanouts, targets))
                .collect::<Result<Vec<_>, _>>()?;
            if epoch < sweep.warmup_epochs {
                warmup.extend(subs);
            } else {
                counted = subs;
            }
        }
        let mut rows_checksum: Option<u64> = None;
        for &pct in &sweep.cache_percent {
            for cache in [FeatureCache::Bgl, FeatureCache::Agnes] {
                let settings = CacheSettings {
                    cache_bytes: table_bytes / 100 * pct as usize,
                    threshold: sweep.threshold,
                    block_bytes: sweep.block_bytes,
                };
                let group = match cache {
                    FeatureCache::Agnes => sweep.hyperbatch.max(1),
                    _ => 1,
                };
                let features = w.feature_file()?;
                let (stats, sum) =
                    gather_counts(features, &warmup, &counted, cache, settings, group)?;
                anyhow::ensure!(
                    *rows_checksum.get_or_insert(sum) == sum,
                    "{} at {pct} % gathered other rows than the first cache did ({} order)",
                    policy(cache),
                    order.name()
                );
                points.push(Point {
                    cache,
                    order,
                    cache_percent: pct,
                    cache_bytes: settings.cache_bytes,
                    warmup_minibatches: warmup.len(),
                    minibatches: counted.len(),
                    stats,
                });
            }
        }
    }
    Ok(points)
}

/// Gathers the rows of every subgraph of `warmup` (not counted), then of `subs`, from
/// `features` through a fresh `cache` with `settings`, `group` subgraphs at a time (AGNES's
/// hyperbatch; 1 for BGL): what it did for `subs`, and a checksum of the rows it returned for
/// them (equal for every cache that works).
pub(crate) fn gather_counts(
    features: FeatureFile<'static>,
    warmup: &[SampledSubgraph],
    subs: &[SampledSubgraph],
    cache: FeatureCache,
    settings: CacheSettings,
    group: usize,
) -> anyhow::Result<(GatherStats, u64)> {
    let mut g = FeatureGatherer::new(cache, features, settings).context("a feature cache")?;
    for chunk in warmup.chunks(group.max(1)) {
        g.gather(chunk)?;
    }
    g.take_stats();
    let mut sum = FNV_OFFSET;
    for chunk in subs.chunks(group.max(1)) {
        for rows in g.gather(chunk)? {
            sum = fnv1a(sum, &rows);
        }
    }
    Ok((g.stats().clone(), sum))
}

/// The figure's rows, each with the graph's size and the feature table's.
pub(crate) fn records(points: &[Point], w: &Workload) -> Vec<Record> {
    points
        .iter()
        .map(|p| {
            let s = &p.stats;
            Record::new("bgl.feature_cache")
                .with("graph_nodes", w.graph.host().node_count())
                .with("training_nodes", w.train.len())
                .with("feature_table_bytes", w.table_bytes())
                .with("cache", policy(p.cache))
                .with("order", p.order.name())
                .with("cache_percent_of_features", p.cache_percent)
                .with("cache_bytes", p.cache_bytes)
                .with("warmup_minibatches", p.warmup_minibatches)
                .with("minibatches", p.minibatches)
                .with("rows_gathered", s.rows)
                .with("cache_hit_ratio", s.hit_ratio())
                .with("storage_reads", s.io.reads)
                .with("bytes_read", s.io.bytes_read)
                .with("bytes_used", s.io.bytes_used)
                .with(
                    "bytes_read_per_row_gathered",
                    s.io.bytes_read as f64 / s.rows.max(1) as f64,
                )
                .with("timing", "counts")
        })
        .collect()
}

/// One line per cache and order of `value` against the cache size.
fn lines(points: &[Point], value: fn(&Point) -> f64) -> Vec<Series> {
    let mut out = Vec::new();
    for cache in [FeatureCache::Bgl, FeatureCache::Agnes] {
        for order in [Order::Random, Order::Bgl] {
            out.push(Series {
                label: format!("{}, {} order", policy(cache), order.name()),
                points: points
                    .iter()
                    .filter(|p| p.cache == cache && p.order == order)
                    .map(|p| (f64::from(p.cache_percent), value(p)))
                    .collect(),
                paper: false,
            });
        }
    }
    out
}

/// The two figures: hit ratio and bytes read against the cache size.
pub(crate) fn plots(points: &[Point], sweep: &Sweep) -> Vec<(&'static str, Figure)> {
    let x = "feature cache (percent of the feature table)".to_string();
    let what = format!(
        "{} minibatches of {} targets, fanouts {:?} (counts)",
        sweep.minibatches, sweep.batch_size, sweep.fanouts
    );
    vec![
        (
            "bgl_hit_ratio",
            Figure {
                title: format!("BGL §3.2: feature-cache hit ratio, {what}"),
                x_label: x.clone(),
                y_label: "cache hit ratio (fraction of rows gathered)".into(),
                series: lines(points, |p| p.stats.hit_ratio()),
            },
        ),
        (
            "bgl_bytes_read",
            Figure {
                title: format!("BGL §3.2: feature bytes read from storage, {what}"),
                x_label: x,
                y_label: "bytes read (MiB)".into(),
                series: lines(points, |p| {
                    p.stats.io.bytes_read as f64 / f64::from(1 << 20)
                }),
            },
        ),
    ]
}

fn hit(points: &[Point], cache: FeatureCache, order: Order, pct: u32) -> Option<f64> {
    points
        .iter()
        .find(|p| p.cache == cache && p.order == order && p.cache_percent == pct)
        .map(|p| p.stats.hit_ratio())
}

/// The report: the workload, the claims of BGL §3.2.2 checked at every size, the table.
pub(crate) fn report(
    points: &[Point],
    sweep: &Sweep,
    w: &Workload,
    quick: bool,
    profile: &str,
) -> String {
    use sagessd::compare::human_bytes;
    use std::fmt::Write as _;
    let mut r = String::new();
    let _ = writeln!(
        r,
        "# BGL: feature cache and minibatch order (§3.2), stage profile (§3.4)\n\n\
         `sagessd experiment bgl{}`. The graph: {} ({} nodes, {} CSR entries), {} training \
         nodes ({:.2} % of them, drawn by a keyed hash); its feature table computed where it \
         is read ({} f32 values a row, {}: no disk holds it; rows read as from a \
         `features.npy` of it, and the caches keep which rows they hold, not their bytes). \
         Minibatches of {} training targets each, fanouts {:?}, sampled in memory; each cache \
         gathers {} whole epoch(s) first to warm up ({} minibatches, not counted), then the \
         first {} minibatches of the next epoch (counted), at each size: BGL's FIFO \
         cache, minibatch by minibatch, reading a minibatch's missed rows in runs of adjacent \
         sectors; AGNES's access-count-threshold cache (threshold {}), hyperbatches of {}, \
         reading missed rows' {} blocks. Orders: a seeded random permutation, and BGL's \
         proximity-aware order. **Counts**, not times: two runs write identical CSVs. Every \
         cache returned the same rows (checked).\n",
        if quick { " --quick" } else { "" },
        sweep.graph.describe(),
        w.graph.host().node_count(),
        w.graph.host().edge_count(),
        w.train.len(),
        100.0 * w.train.len() as f64 / w.graph.host().node_count() as f64,
        sweep.feature_dim,
        human_bytes(w.table_bytes()),
        sweep.batch_size,
        sweep.fanouts,
        sweep.warmup_epochs,
        points.first().map_or(0, |p| p.warmup_minibatches),
        sweep.minibatches,
        sweep.threshold,
        sweep.hyperbatch,
        human_bytes(sweep.block_bytes as u64)
    );
    let _ = writeln!(
        r,
        "## BGL's claims (§3.2.2), checked at every cache size\n\n| claim | holds at |\n|---|---|"
    );
    let sizes = &sweep.cache_percent;
    let count = |f: &dyn Fn(u32) -> Option<bool>| -> String {
        let held: Vec<String> = sizes
            .iter()
            .filter(|&&p| f(p) == Some(true))
            .map(|p| format!("{p} %"))
            .collect();
        if held.is_empty() {
            format!("0 of {} sizes", sizes.len())
        } else {
            format!(
                "{} of {} sizes ({})",
                held.len(),
                sizes.len(),
                held.join(", ")
            )
        }
    };
    let (fifo, agnes) = (FeatureCache::Bgl, FeatureCache::Agnes);
    let _ = writeln!(
        r,
        "| proximity-aware order raises FIFO's hit ratio over random order | {} |",
        count(&|p| Some(hit(points, fifo, Order::Bgl, p)? > hit(points, fifo, Order::Random, p)?))
    );
    let _ = writeln!(
        r,
        "| FIFO with proximity-aware order has the highest hit ratio of the candidates | {} |",
        count(&|p| {
            let best = hit(points, fifo, Order::Bgl, p)?;
            Some(
                [
                    hit(points, fifo, Order::Random, p)?,
                    hit(points, agnes, Order::Random, p)?,
                    hit(points, agnes, Order::Bgl, p)?,
                ]
                .iter()
                .all(|&o| best >= o),
            )
        })
    );
    let _ = writeln!(
        r,
        "\nThe paper's candidates are static, LRU, LFU and FIFO caches; ours are FIFO and AGNES's \
         threshold cache, which keeps a row once it has been asked for {} times.\n",
        sweep.threshold
    );
    let _ = writeln!(
        r,
        "## Hit ratio and gather I/O\n\n| cache | order | cache size | hit ratio | storage reads | read | used | read per row gathered |\n|---|---|---|---|---|---|---|---|"
    );
    for p in points {
        let s = &p.stats;
        let _ = writeln!(
            r,
            "| {} | {} | {} % ({}) | {:.1} % | {} | {} | {} | {:.0} B |",
            policy(p.cache),
            p.order.name(),
            p.cache_percent,
            human_bytes(p.cache_bytes as u64),
            100.0 * s.hit_ratio(),
            s.io.reads,
            human_bytes(s.io.bytes_read),
            human_bytes(s.io.bytes_used),
            s.io.bytes_read as f64 / s.rows.max(1) as f64
        );
    }
    let _ = writeln!(r, "\n{profile}");
    let _ = writeln!(
        r,
        "## Files\n\n`bgl_feature_cache.csv`: one row per cache, order and size, units in the \
         column names. Plots (SVG and PNG): `bgl_hit_ratio.svg`, `bgl_bytes_read.svg`."
    );
    r
}

/// The stage profile of one training epoch on this machine's files, BGL order and FIFO cache,
/// `--workers auto` (wall clock), as a report section and a record; without training built in,
/// a section that says so.
pub(crate) fn profile(
    dataset_dir: &Path,
    sweep: &Sweep,
    cache_bytes: usize,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<(String, Option<Record>)> {
    #[cfg(not(feature = "train"))]
    {
        let _ = (dataset_dir, sweep, cache_bytes);
        progress(
            "experiment bgl: the stage profile SKIPPED: this sagessd was built without the `train` feature (libtorch)",
        );
        Ok((
            "## Stage profile (§3.4)\n\n**Not run**: this sagessd was built without the `train` feature (libtorch).\n".into(),
            None,
        ))
    }
    #[cfg(feature = "train")]
    {
        progress("experiment bgl: the stage profile (one training epoch, workers profiled)");
        let mut spec = sagessd::training::TrainSpec::new(dataset_dir);
        spec.sampler = sagessd::SamplerKind::Direct;
        spec.order = Order::Bgl;
        spec.features = FeatureCache::Bgl;
        // The cache in whole MiB, as `--feature-cache` takes it (the report quotes the command).
        spec.cache.cache_bytes = cache_bytes.div_ceil(1 << 20).max(1) << 20;
        spec.workers = sagessd::training::Workers::Auto;
        let batch = u32::try_from(sweep.batch_size).context("the batch size")?;
        let (command, run) = super::train_quietly(spec, None, 1, batch, &sweep.fanouts)?;
        let e = run.outcome.epochs.first().context("the profile's epoch")?;
        let t = &e.throughput;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let section = format!(
            "## Stage profile (§3.4), wall clock\n\n`{command}`: one epoch on this machine's \
             files (direct I/O sampling, BGL order, FIFO feature cache). Profiled on one worker \
             per stage, then given workers in proportion to each stage's time per minibatch \
             over the trainer's (BGL's resource isolation, by profiling). Over the epoch the \
             stages sustained, with their workers: sampling {:.0} minibatches/s, gather {:.0}, \
             training {:.0}; **{} sampling and {} gather workers** chosen (at most {} \
             producer workers: this machine's {} cores less the trainer's), trainer idle \
             {:.1} %. Wall clock on this machine: another machine chooses differently.\n",
            t.sample_minibatches_per_s,
            t.gather_minibatches_per_s,
            t.train_minibatches_per_s,
            e.workers.0,
            e.workers.1,
            cores.saturating_sub(1).max(1),
            cores,
            100.0 * e.idle_fraction
        );
        let record = Record::new("bgl.profile")
            .with("sample_minibatches_per_s", t.sample_minibatches_per_s)
            .with("gather_minibatches_per_s", t.gather_minibatches_per_s)
            .with("train_minibatches_per_s", t.train_minibatches_per_s)
            .with("sample_workers", e.workers.0)
            .with("gather_workers", e.workers.1)
            .with("trainer_idle_fraction", e.idle_fraction)
            .with("timing", "wall clock");
        Ok((section, Some(record)))
    }
}
