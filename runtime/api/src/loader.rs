//! The loader: a worker thread that owns the dataset, the storage target, the sampler and the
//! feature gatherer, samples the minibatches it is given (in groups: a hyperbatch, or ISP's jobs
//! in flight) ahead of the consumer, and hands back one [`Batch`] per minibatch, in order.
//!
//! The worker owns everything a sampler borrows (the graph, the AGNES layout, the device), so a
//! loader is a plain value that outlives its caller's stack frame (what a Python object needs),
//! and whoever consumes the batches — a training loop, the Python interpreter with its lock
//! released — overlaps with the sampling.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sagessd_host_driver::Returns;
use sagessd_runtime::dataset::Dataset;
use sagessd_runtime::npy::Dtype;
use sagessd_runtime::ooc::features::{FeatureFile, GatherStats};
use sagessd_runtime::ooc::{AgnesLayout, AgnesSampler, IoStats, SharedDevice};
use sagessd_runtime::registry::{
    CacheSettings, FeatureCache, FeatureGatherer, FileSource, ISP_JOBS_IN_FLIGHT, SamplerKind,
};
use sagessd_runtime::sampler::{SampledSubgraph, Sampler, validate_request};

use crate::placed::{FeatureSizing, PlacedDevice, Turn};
use crate::{Error, Storage};

/// One minibatch to sample: the sampling function's seed, and the target node ids.
pub use sagessd_runtime::minibatch::Request;

/// The most minibatches a loader samples ahead, or groups into a hyperbatch.
pub const MAX_AHEAD: usize = 4096;

/// What a loader samples, where, and how it gathers features.
#[derive(Clone, Debug)]
pub struct LoaderSpec {
    /// The sampler.
    pub sampler: SamplerKind,
    /// Neighbours per hop, from the targets outwards (1..=4 hops).
    pub fanouts: Vec<u16>,
    /// Where the dataset is read.
    pub storage: Storage,
    /// How the host samplers gather feature rows (in-storage sampling gathers them in the
    /// device unless this is [`FeatureCache::None`]).
    pub features: FeatureCache,
    /// The feature cache's size and policy, and the AGNES block size (of the graph layout
    /// and of the feature blocks).
    pub cache: CacheSettings,
    /// The AGNES samplers' graph buffer, bytes.
    pub graph_buffer_bytes: usize,
    /// Minibatches per hyperbatch (AGNES's, and in-storage ones).
    pub hyperbatch: usize,
    /// Minibatches the worker may sample ahead of the consumer.
    pub prefetch: usize,
    /// AGNES hyperbatches on files read each hop's blocks ahead through io_uring.
    pub read_ahead: bool,
    /// The most targets a minibatch will have: sizes the in-storage feature buffer of an
    /// emulated device.
    pub max_batch_size: u64,
    /// Return the labels of each minibatch's targets (the dataset's labels are then held in
    /// memory, 8 bytes a node).
    pub labels: bool,
}

impl LoaderSpec {
    /// `sampler` with `fanouts`, on this machine's files, without features; 64 MiB graph buffer
    /// and feature cache, 1 MiB AGNES blocks, hyperbatches of 8, eight minibatches ahead.
    pub fn new(sampler: SamplerKind, fanouts: &[u16]) -> Self {
        Self {
            sampler,
            fanouts: fanouts.to_vec(),
            storage: Storage::Files,
            features: FeatureCache::None,
            cache: CacheSettings {
                cache_bytes: 64 << 20,
                threshold: 2,
                block_bytes: 1 << 20,
            },
            graph_buffer_bytes: 64 << 20,
            hyperbatch: 8,
            prefetch: 8,
            read_ahead: true,
            max_batch_size: 1024,
            labels: false,
        }
    }

    /// Checks the options against each other before anything is opened.
    pub fn validate(&self) -> Result<(), Error> {
        validate_request(&self.fanouts, &[0], 1)?;
        let kind = self.sampler;
        if self.storage.is_device() && !kind.on_device() {
            return Err(Error::invalid(format!(
                "the {kind} sampler reads this machine's files, not a device (on a device: \
                 agnes, hyperbatch, isp, isp-hyperbatch)"
            )));
        }
        if !self.storage.is_device() && !kind.on_files() {
            return Err(Error::invalid(format!(
                "the {kind} sampler samples inside an SSD: it needs a device as its storage \
                 (`emulator`, or a device URI)"
            )));
        }
        let block = self.cache.block_bytes;
        if block == 0 || !block.is_multiple_of(4096) || block > 64 << 20 {
            return Err(Error::invalid(format!(
                "block size {block} bytes: must be a multiple of 4 KiB, at most 64 MiB"
            )));
        }
        if self.graph_buffer_bytes < block {
            return Err(Error::invalid(format!(
                "graph buffer {} bytes is smaller than one block ({block} bytes)",
                self.graph_buffer_bytes
            )));
        }
        // The channel of minibatches sampled ahead is allocated whole: its depth is bounded.
        for (value, most, what) in [
            (self.hyperbatch as u64, MAX_AHEAD as u64, "hyperbatch"),
            (self.prefetch as u64, MAX_AHEAD as u64, "prefetch"),
            (self.max_batch_size, u64::from(u32::MAX), "max_batch_size"),
        ] {
            if !(1..=most).contains(&value) {
                return Err(Error::invalid(format!("{what} {value}: 1..={most}")));
            }
        }
        Ok(())
    }
}

/// One sampled minibatch.
#[derive(Debug)]
pub struct Batch {
    /// Its seed.
    pub seed: u64,
    /// The message-flow graph: the unique nodes in first-seen order and, per hop, a CSC block
    /// over a prefix of them (`sagessd_abi::subgraph`; [`SampledSubgraph::view`] reads it).
    pub subgraph: SampledSubgraph,
    /// The feature rows of the subgraph's nodes, in node order (little-endian, see
    /// [`LoaderInfo::feature_dtype`]), when features are gathered.
    pub features: Option<Vec<u8>>,
    /// The labels of the targets (the first hop's destinations, in their order), when asked.
    pub labels: Option<Vec<i64>>,
}

impl Batch {
    /// The subgraph's node ids, in order (the targets first).
    pub fn nodes(&self) -> Vec<u64> {
        self.subgraph
            .view()
            .nodes()
            .iter()
            .map(|v| v.get())
            .collect()
    }
}

/// What the storage did for a loader so far, cumulative.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoaderStats {
    /// Minibatches handed back.
    pub minibatches: u64,
    /// Storage reads of the graph (host samplers), or NVMe commands (in-storage sampling).
    pub reads: u64,
    /// Bytes those moved.
    pub bytes_read: u64,
    /// Flash pages the device read, where it says.
    pub nand_pages_read: Option<u64>,
    /// Feature bytes handed back.
    pub feature_bytes: u64,
    /// Storage reads of the host's feature gatherer.
    pub feature_reads: u64,
    /// Modelled time of the emulated device (its virtual clock's advance), if it models time.
    pub device_ns: Option<u64>,
    /// Modelled host work on an emulated device: each NVMe command a synchronous I/O, and the
    /// host samplers' compute, with its `[host]` costs.
    pub host_ns: Option<u64>,
    /// This machine's wall clock spent sampling and gathering, in the worker.
    pub wall_ns: u64,
    /// Of it, gathering feature rows on the host.
    pub gather_wall_ns: u64,
    /// The host samplers' graph I/O in detail (reads by size and hop, buffer hits, waits,
    /// system calls, page faults).
    pub graph_io: IoStats,
    /// What the host's feature gatherer did (rows, cache hits, its I/O).
    pub gather: GatherStats,
}

/// What a loader opened: for printing, and for reading its feature rows.
#[derive(Clone, Debug)]
pub struct LoaderInfo {
    /// One line: the dataset, the sampler and the storage.
    pub description: String,
    /// Nodes of the graph.
    pub node_count: u64,
    /// Values per feature row (0 without features).
    pub feature_dim: usize,
    /// The rows' value type (`F32` or `F16`), with features.
    pub feature_dtype: Option<Dtype>,
}

/// A worker sampling minibatches: [`Loader::submit`] queues them, [`Loader::next_batch`] (or
/// iteration) takes them back in order. Dropping it stops the worker.
#[derive(Debug)]
pub struct Loader {
    info: LoaderInfo,
    jobs: Option<Sender<Vec<Request>>>,
    batches: Option<Receiver<Result<Batch, Error>>>,
    worker: Option<JoinHandle<()>>,
    pending: usize,
    stats: Arc<Mutex<LoaderStats>>,
}

impl Loader {
    /// Opens the dataset in `dir` on `spec`'s storage (writing it to the device first, for a
    /// device) and starts the worker; errors in the options, the files, the device or the
    /// placement come back here.
    pub fn open(dir: &Path, spec: LoaderSpec) -> Result<Self, Error> {
        spec.validate()?;
        if !spec.storage.is_device() {
            return Self::spawn(dir, spec, None);
        }
        let dataset = Dataset::open(dir)?;
        let sizing = (spec.features != FeatureCache::None).then(|| FeatureSizing {
            samplers: vec![spec.sampler],
            hyperbatch: spec.hyperbatch,
            max_batch_size: spec.max_batch_size,
            fanouts: spec.fanouts.clone(),
        });
        let placed = PlacedDevice::place(
            &dataset,
            &spec.storage,
            sizing.as_ref(),
            spec.cache.block_bytes,
        )?;
        Self::spawn(dir, spec, Some(placed))
    }

    /// Opens a loader on a dataset already on a device ([`PlacedDevice::place`]d from the
    /// dataset in `dir`); `spec`'s storage is that device's. Loaders on one device take turns
    /// (each command holds it), so they are opened one after another.
    pub fn on_device(
        dir: &Path,
        placed: &PlacedDevice,
        mut spec: LoaderSpec,
    ) -> Result<Self, Error> {
        spec.storage = Storage::Device {
            uri: placed.uri.clone(),
            hardware: Box::new(placed.hardware.clone()),
        };
        spec.validate()?;
        Self::spawn(dir, spec, Some(placed.clone()))
    }

    fn spawn(dir: &Path, spec: LoaderSpec, placed: Option<PlacedDevice>) -> Result<Self, Error> {
        let turn = placed.as_ref().map(PlacedDevice::take_turn).transpose()?;
        let (opened_tx, opened_rx) = channel();
        let (jobs_tx, jobs_rx) = channel();
        let (batches_tx, batches_rx) = sync_channel(spec.prefetch);
        let stats = Arc::new(Mutex::new(LoaderStats::default()));
        let worker = Worker {
            dir: dir.to_owned(),
            spec,
            placed,
            _turn: turn,
            opened: Some(opened_tx),
            jobs: jobs_rx,
            batches: batches_tx,
            stats: Arc::clone(&stats),
        };
        let handle = std::thread::Builder::new()
            .name("sagessd-loader".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::Worker(e.to_string()))?;
        let info = match opened_rx.recv() {
            Ok(result) => result?,
            Err(_) => {
                let why = match handle.join() {
                    Err(panic) => panic_text(&panic),
                    Ok(()) => "it exited while opening".into(),
                };
                return Err(Error::Worker(why));
            }
        };
        Ok(Self {
            info,
            jobs: Some(jobs_tx),
            batches: Some(batches_rx),
            worker: Some(handle),
            pending: 0,
            stats,
        })
    }

    /// What it opened.
    pub fn info(&self) -> &LoaderInfo {
        &self.info
    }

    /// Queues minibatches; they are sampled in order, ahead of [`Self::next_batch`].
    pub fn submit(&mut self, requests: Vec<Request>) -> Result<(), Error> {
        if requests.is_empty() {
            return Ok(());
        }
        let count = requests.len();
        self.jobs
            .as_ref()
            .ok_or_else(|| Error::Worker("the loader is closed".into()))?
            .send(requests)
            .map_err(|_| self.worker_gone())?;
        self.pending += count;
        Ok(())
    }

    /// The next minibatch submitted, or `None` once every one has been taken. A minibatch that
    /// failed is its error; the ones after it still come.
    pub fn next_batch(&mut self) -> Option<Result<Batch, Error>> {
        if self.pending == 0 {
            return None;
        }
        self.pending -= 1;
        let received = self.batches.as_ref()?.recv();
        Some(received.unwrap_or_else(|_| Err(self.worker_gone())))
    }

    /// Samples one minibatch now (nothing else may be pending).
    pub fn sample(&mut self, seed: u64, targets: Vec<u64>) -> Result<Batch, Error> {
        if self.pending != 0 {
            return Err(Error::invalid(format!(
                "{} submitted minibatches are still to be taken",
                self.pending
            )));
        }
        self.submit(vec![Request::new(seed, targets)])?;
        self.next_batch()
            .unwrap_or_else(|| Err(Error::Worker("no minibatch came back".into())))
    }

    /// Minibatches submitted and not yet taken.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// What the storage did so far.
    pub fn stats(&self) -> LoaderStats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Why the worker is gone: its panic's message, if it panicked.
    fn worker_gone(&mut self) -> Error {
        self.jobs = None;
        let why = match self.worker.take().map(JoinHandle::join) {
            Some(Err(panic)) => panic_text(&panic),
            _ => "it has exited".into(),
        };
        Error::Worker(why)
    }
}

impl Iterator for Loader {
    type Item = Result<Batch, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch()
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Closing both channels ends the worker, whether it waits for work or to hand back.
        self.jobs = None;
        self.batches = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .map_or_else(|| "it panicked".into(), |m| format!("it panicked: {m}"))
}

/// Samples one group of minibatches: their subgraphs, and their feature rows if gathered.
type Sampled = Vec<(SampledSubgraph, Option<Vec<u8>>)>;

/// The worker thread's state.
struct Worker {
    dir: PathBuf,
    spec: LoaderSpec,
    placed: Option<PlacedDevice>,
    /// The loader's turn on its device, given back when the worker ends.
    _turn: Option<Turn>,
    opened: Option<Sender<Result<LoaderInfo, Error>>>,
    jobs: Receiver<Vec<Request>>,
    batches: SyncSender<Result<Batch, Error>>,
    stats: Arc<Mutex<LoaderStats>>,
}

impl Worker {
    fn run(mut self) {
        let result = match Dataset::open(&self.dir) {
            Ok(dataset) => match self.placed.take() {
                None => self.on_files(&dataset),
                Some(placed) => self.on_device(&dataset, &placed),
            },
            Err(e) => Err(e.into()),
        };
        // An error before the loader opened is the opener's; later ones went to the batches.
        if let (Err(e), Some(opened)) = (result, self.opened.take()) {
            let _ = opened.send(Err(e));
        }
    }

    /// What the loader opened; `features`: whether its batches carry feature rows.
    fn info(&self, dataset: &Dataset, features: bool) -> Result<LoaderInfo, Error> {
        let shape = match self.spec.features {
            FeatureCache::None => None,
            _ if !features => None,
            _ => dataset.feature_shape()?,
        };
        Ok(LoaderInfo {
            description: format!(
                "dataset {} ({} nodes) on {}, sampler {}, fanouts {:?}, features {}",
                dataset.manifest.name,
                dataset.manifest.node_count,
                self.spec.storage,
                self.spec.sampler,
                self.spec.fanouts,
                if shape.is_some() {
                    self.spec.features.name()
                } else {
                    "none"
                },
            ),
            node_count: dataset.manifest.node_count,
            feature_dim: shape.map_or(0, |(dim, _)| dim),
            feature_dtype: shape.map(|(_, dtype)| dtype),
        })
    }

    /// Reports the loader open, then samples each group `sample` is given until the loader is
    /// dropped.
    fn serve(
        &mut self,
        info: LoaderInfo,
        labels: Option<Vec<i64>>,
        mut sample: impl FnMut(&[Request], &mut LoaderStats) -> Result<Sampled, Error>,
    ) -> Result<(), Error> {
        let node_count = info.node_count;
        let sized_for_batch = self.spec.sampler.gathers_in_storage() && info.feature_dim > 0;
        if let Some(opened) = self.opened.take()
            && opened.send(Ok(info)).is_err()
        {
            return Ok(());
        }
        // In-storage jobs are kept `ISP_JOBS_IN_FLIGHT` deep across a group as large as the
        // minibatches sampled ahead (the pipeline drains only between groups).
        let group_size = match self.spec.sampler {
            SamplerKind::Isp => self.spec.prefetch.max(ISP_JOBS_IN_FLIGHT),
            kind => kind.group_size(self.spec.hyperbatch),
        };
        while let Ok(requests) = self.jobs.recv() {
            for group in requests.chunks(group_size) {
                // A bad request is its own error (what the device would refuse, refused here
                // alike for every sampler); the group's others are sampled together.
                let checks: Vec<Result<(), Error>> = group
                    .iter()
                    .map(|Request { targets, .. }| {
                        validate_request(&self.spec.fanouts, targets, node_count)?;
                        // An in-storage feature buffer holds max_batch_size targets' rows.
                        if sized_for_batch && targets.len() as u64 > self.spec.max_batch_size {
                            return Err(Error::invalid(format!(
                                "{} targets: the device's feature buffer was sized for \
                                 max_batch_size {}",
                                targets.len(),
                                self.spec.max_batch_size
                            )));
                        }
                        Ok(())
                    })
                    .collect();
                let valid: Vec<Request>;
                let to_sample = if checks.iter().all(Result::is_ok) {
                    group
                } else {
                    valid = group
                        .iter()
                        .zip(&checks)
                        .filter(|(_, c)| c.is_ok())
                        .map(|(r, _)| r.clone())
                        .collect();
                    &valid[..]
                };
                let started = std::time::Instant::now();
                let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let result = if to_sample.is_empty() {
                    Ok(Vec::new())
                } else {
                    sample(to_sample, &mut stats)
                };
                stats.wall_ns += started.elapsed().as_nanos() as u64;
                let mut sampled = match result {
                    Ok(sampled) => {
                        stats.minibatches += sampled.len() as u64;
                        stats.feature_bytes += sampled
                            .iter()
                            .map(|(_, rows)| rows.as_ref().map_or(0, |r| r.len() as u64))
                            .sum::<u64>();
                        Ok(sampled.into_iter())
                    }
                    Err(e) => Err(e.to_string()),
                };
                *self.stats.lock().unwrap_or_else(|p| p.into_inner()) = stats;
                for (Request { seed, .. }, check) in group.iter().zip(checks) {
                    let result = check.and_then(|()| match &mut sampled {
                        Ok(each) => each
                            .next()
                            .map(|(subgraph, rows)| Batch {
                                seed: *seed,
                                labels: labels.as_deref().map(|all| targets_labels(&subgraph, all)),
                                subgraph,
                                features: rows,
                            })
                            .ok_or_else(|| {
                                Error::Sampling(
                                    "the sampler returned fewer minibatches than it was given"
                                        .into(),
                                )
                            }),
                        // Each minibatch of a failed group is that failure, so that the
                        // consumer takes as many results as it submitted.
                        Err(text) => Err(Error::Sampling(text.clone())),
                    });
                    if self.batches.send(result).is_err() {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    fn labels(&self, dataset: &Dataset) -> Result<Option<Vec<i64>>, Error> {
        if !self.spec.labels {
            return Ok(None);
        }
        match dataset.labels()? {
            Some(labels) => Ok(Some(labels)),
            None => Err(Error::invalid(format!(
                "labels asked for, but dataset {} has none",
                dataset.manifest.name
            ))),
        }
    }

    /// The host samplers on this machine's files.
    fn on_files(&mut self, dataset: &Dataset) -> Result<(), Error> {
        let spec = self.spec.clone();
        let kind = spec.sampler;
        let graph = (kind == SamplerKind::Memory)
            .then(|| dataset.graph())
            .transpose()?;
        let layout = kind
            .needs_layout()
            .then(|| AgnesLayout::for_dataset(dataset, spec.cache.block_bytes))
            .transpose()?
            .map(|(layout, _)| layout);
        let source = FileSource {
            dataset,
            graph: graph.as_ref(),
            layout: layout.as_ref(),
            buffer_bytes: spec.graph_buffer_bytes,
            prefetch: spec.read_ahead,
        };
        let mut sampler = source.open(kind)?;
        let mut gatherer = match spec.features {
            FeatureCache::None => None,
            _ if dataset.manifest.features.is_none() => None,
            cache => FeatureGatherer::new(cache, FeatureFile::open(dataset)?, spec.cache),
        };
        let info = self.info(dataset, gatherer.is_some())?;
        let labels = self.labels(dataset)?;
        self.serve(info, labels, |group, stats| {
            let subs = sampler.sample_many(&spec.fanouts, group)?;
            let rows = gather(gatherer.as_mut(), &subs, stats)?;
            let io = sampler.io();
            stats.reads = io.reads;
            stats.bytes_read = io.bytes_read;
            stats.graph_io = io;
            Ok(subs.into_iter().zip(rows).collect())
        })
    }

    /// The samplers of a device the dataset is on: AGNES reading its blocks there, in-storage
    /// sampling in its firmware.
    fn on_device(&mut self, dataset: &Dataset, placed: &PlacedDevice) -> Result<(), Error> {
        let spec = self.spec.clone();
        let kind = spec.sampler;
        let hw = &placed.hardware;
        let region = placed
            .placement
            .graph
            .features
            .filter(|_| spec.features != FeatureCache::None);
        let (t0, pages0, before) = {
            let d = placed.lock()?;
            // The device's own limits, named before anything is sampled.
            if kind.in_storage()
                && let Some(limits) = d.info().limits
                && let Some(f) = spec.fanouts.iter().find(|&&f| f > limits.max_fanout)
            {
                return Err(Error::invalid(format!(
                    "fanout {f} is above the device's limit of {} (its Identify data)",
                    limits.max_fanout
                )));
            }
            (
                d.now_ns(),
                d.device_counters().map(|c| c.nand_pages_read),
                d.stats(),
            )
        };
        let device = &*placed.device;
        let held = || placed.lock();
        let mut block_device = SharedDevice::new(device)?;
        let mut feature_device = SharedDevice::new(device)?;
        let n = placed.node_count;
        let mut gatherer = match region {
            Some(r) if !kind.gathers_in_storage() => FeatureGatherer::new(
                spec.features,
                FeatureFile::on_device(&mut feature_device, &r, n)?,
                spec.cache,
            ),
            _ => None,
        };
        let mut agnes = match kind {
            SamplerKind::Agnes | SamplerKind::Hyperbatch => Some(AgnesSampler::on_device(
                &placed.layout,
                spec.graph_buffer_bytes,
                &mut block_device,
                placed.placement.layout_slba,
            )?),
            _ => None,
        };
        let info = self.info(dataset, region.is_some())?;
        let labels = self.labels(dataset)?;
        let mut host_built_ns = 0u64;
        // isp-ids builds its subgraphs here; its node index is made at the first build.
        let mut builder = sagessd_runtime::sampler::host_build::HostBuilder::default();
        self.serve(info, labels, |group, stats| {
            let sampled: Sampled = match agnes.as_mut() {
                Some(sampler) => {
                    let subs = sampler.sample_many(&spec.fanouts, group)?;
                    host_built_ns += subs
                        .iter()
                        .map(|s| s.host_sampling_ns(&hw.host))
                        .sum::<u64>();
                    let rows = gather(gatherer.as_mut(), &subs, stats)?;
                    let io: IoStats = sampler.io_stats().clone();
                    stats.reads = io.reads;
                    stats.bytes_read = io.bytes_read;
                    stats.graph_io = io;
                    subs.into_iter().zip(rows).collect()
                }
                None if kind == SamplerKind::IspIds => {
                    let ids = {
                        let mut d = held()?;
                        let ids = d.sample_many_sampled_ids(&spec.fanouts, group, ISP_JOBS_IN_FLIGHT)?;
                        let delta = d.stats().since(&before);
                        stats.reads = delta.commands;
                        stats.bytes_read = delta.c2h_bytes;
                        ids
                    };
                    let subs = ids
                        .iter()
                        .zip(group)
                        .map(|(bytes, r)| {
                            let sub = builder.build(bytes, n, r.seed, &spec.fanouts, &r.targets)?;
                            host_built_ns += hw.host.host_build_ns(sub.edge_count());
                            Ok(sub)
                        })
                        .collect::<Result<Vec<_>, Error>>()?;
                    let rows = gather(gatherer.as_mut(), &subs, stats)?;
                    subs.into_iter().zip(rows).collect()
                }
                None => {
                    let mut d = held()?;
                    let with_features = region.is_some();
                    let out = if kind == SamplerKind::IspHyperbatch {
                        d.sample_hyperbatch(
                            &spec.fanouts,
                            group,
                            Returns::subgraph(with_features),
                        )?
                    } else if with_features {
                        d.sample_many_with_features(&spec.fanouts, group, ISP_JOBS_IN_FLIGHT)?
                    } else {
                        d.sample_many(&spec.fanouts, group, ISP_JOBS_IN_FLIGHT)?
                    };
                    let delta = d.stats().since(&before);
                    stats.reads = delta.commands;
                    stats.bytes_read = delta.c2h_bytes;
                    out.into_iter()
                        .map(|bytes| {
                            if with_features {
                                let (sub, rows) = SampledSubgraph::split_features(bytes)?;
                                let want = sub.node_count() as u64 * region.map_or(0, |r| u64::from(r.row_bytes));
                                if rows.len() as u64 != want {
                                    return Err(Error::Sampling(format!(
                                        "the device returned {} feature bytes for {} nodes, not {want}",
                                        rows.len(),
                                        sub.node_count()
                                    )));
                                }
                                Ok((sub, Some(rows)))
                            } else {
                                Ok((SampledSubgraph::from_bytes(bytes)?, None))
                            }
                        })
                        .collect::<Result<_, Error>>()?
                }
            };
            let d = held()?;
            stats.nand_pages_read = pages0
                .zip(d.device_counters())
                .map(|(p0, c)| c.nand_pages_read.saturating_sub(p0));
            stats.device_ns = t0.zip(d.now_ns()).map(|(t0, now)| now.saturating_sub(t0));
            let commands = d.stats().since(&before).commands;
            stats.host_ns = stats
                .device_ns
                .map(|_| host_built_ns + commands * hw.host.sync_io_ns());
            Ok(sampled)
        })
    }
}

/// The feature rows of `subs` (none without a gatherer), with what the gathering did and its
/// wall time added to `stats`.
fn gather(
    gatherer: Option<&mut FeatureGatherer<'_>>,
    subs: &[SampledSubgraph],
    stats: &mut LoaderStats,
) -> Result<Vec<Option<Vec<u8>>>, Error> {
    Ok(match gatherer {
        Some(g) => {
            let started = std::time::Instant::now();
            let rows = g.gather(subs)?;
            stats.gather_wall_ns += started.elapsed().as_nanos() as u64;
            stats.gather = g.stats().clone();
            stats.feature_reads = stats.gather.io.reads;
            rows.into_iter().map(Some).collect()
        }
        None => vec![None; subs.len()],
    })
}

/// The labels of a subgraph's targets (its first hop's destinations).
fn targets_labels(subgraph: &SampledSubgraph, labels: &[i64]) -> Vec<i64> {
    let view = subgraph.view();
    let targets = if view.layer_count() == 0 {
        0
    } else {
        view.layer(0).counts.dst_count as usize
    };
    view.nodes()[..targets]
        .iter()
        .map(|v| labels.get(v.get() as usize).copied().unwrap_or(-1))
        .collect()
}
