//! The comparison engine behind `sagessd compare` and the sampling experiments: the host
//! sampling modes (the graph in DRAM, mmap, direct I/O, io_uring-style async I/O) and in-storage
//! sampling (ISP), each with one or several host workers, on the same emulated device model,
//! every subgraph checked byte for byte against the in-memory reference. `compare` runs one and
//! four workers by default and prints [`CompareReport::render`].
//!
//! Steps: generate an R-MAT graph; sample every minibatch with the in-memory reference (the
//! oracle); then, per (workers, mode), build a fresh emulated SSD from the hardware description,
//! load the graph with the same WRITE sequence (so every mode starts from identical device
//! state), empty the controller's DRAM page buffer, and sample the same minibatches with a
//! [`HostIoSampler`] ([`HostIoSampler::run_workers`]: worker `w` takes minibatches `w`,
//! `w + N`, …). Every subgraph of every run is compared with the reference's, so ISP and each
//! host mode are byte-identical to the reference and to each other. Every figure is virtual
//! (modelled) time or a counter of the sampling phase (graph loading is excluded); nothing reads
//! the wall clock, so two runs print the same report.
//!
//! Per mode the report gives: modelled time per minibatch (makespan / minibatches), speedup
//! against mmap with the same worker count, NVMe commands, PCIe payload bytes each way, flash
//! pages read, page-cache hit rate (mmap; direct and async bypass the page cache), embedded-core
//! utilisation (firmware core busy time / makespan, from `DeviceStats`), host CPU time charged
//! per minibatch, and the submission lag of the multi-worker scheduler; then ISP's speedup over
//! each host mode, the subgraphs' mean size, and whether the samples were identical (with a
//! checksum of them).

use sagessd_abi::graph::GraphDescriptor;
use sagessd_abi::ns_config::MAX_LAYERS;
use sagessd_abi::sample::MAX_FANOUT;
use sagessd_emulator::{DeviceStats, HwConfig};
use sagessd_host_driver::{Device, DeviceInfo, DriverError, LocalTransport, Transport};

use sagessd_emulator::Ssd;

use crate::footprint::Footprint;
use sagessd_emulator::synthetic_image::csr_content;
use sagessd_runtime::graph::DegreeStats;
use sagessd_runtime::graph_spec::{GraphSpec, WorkloadGraph};
use sagessd_runtime::host_io::{GraphBytes, HostIoSampler, check_modelled};
use sagessd_runtime::load::{LoadError, load_graph_with_progress, write_graph_with_progress};
use sagessd_runtime::minibatch::{Request, minibatch_requests};
use sagessd_runtime::registry::SamplerKind;
use sagessd_runtime::sampler::{
    FNV_OFFSET, ReferenceSampler, SampledSubgraph, Sampler, SamplerError, SamplerStats, fnv1a,
};

/// Everything a comparison needs.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareConfig {
    /// The graph (`--graph`; an R-MAT from `--scale`, `--edge-factor` and `--graph-seed`
    /// otherwise).
    pub graph: GraphSpec,
    /// Number of minibatches.
    pub batches: u32,
    /// Minibatches each mode samples first, on the same device and host state, and does not
    /// count (`--warmup-batches`): the page cache and the controller's page buffer are then
    /// warm, as in a run of many minibatches. Drawn like the counted ones, after them in the
    /// run's sequence, so the counted minibatches are the same with or without a warm-up.
    pub warmup_batches: u32,
    /// Targets per minibatch.
    pub batch_size: u32,
    /// Fanout per layer, hop order.
    pub fanouts: Vec<u16>,
    /// Seed of target selection and of the sampling function.
    pub seed: u64,
    /// The emulated device (and, in `[host]`, the host I/O stack).
    pub hw: HwConfig,
    /// The modes to run, in order.
    pub modes: Vec<SamplerKind>,
    /// The worker counts to run each mode with.
    pub workers: Vec<usize>,
    /// Minibatches per in-storage hyperbatch ([`SamplerKind::IspHyperbatch`]; `--hyperbatch`).
    pub hyperbatch: usize,
}

/// Progress notifications for a user interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A phase starts; `total` units of work (0: unknown).
    Phase {
        /// What the phase does.
        name: &'a str,
        /// Units of work in it.
        total: u64,
        /// Whether the units are bytes (otherwise minibatches).
        bytes: bool,
    },
    /// `done` units of the current phase are complete.
    Progress {
        /// Units complete so far.
        done: u64,
    },
    /// The current phase is over.
    PhaseDone,
}

/// Why a comparison could not run (a mismatch is not an error: it is reported in
/// [`CompareReport`]).
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The configuration is unusable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The graph could not be built (generated, tabulated or read).
    #[error("graph could not be built: {0}")]
    Graph(String),
    /// The device could not be created or opened.
    #[error("device bring-up failed: {0}")]
    Device(#[from] DriverError),
    /// The graph could not be loaded.
    #[error("graph load failed: {0}")]
    Load(#[from] LoadError),
    /// A sampler failed.
    #[error("{sampler} failed: {source}")]
    Sample {
        /// Which sampler (and minibatch or worker count).
        sampler: String,
        /// Why.
        source: SamplerError,
    },
}

/// One mode with one worker count.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeResult {
    /// The mode.
    pub mode: SamplerKind,
    /// Host workers.
    pub workers: usize,
    /// Minibatches sampled.
    pub minibatches: u64,
    /// Virtual time from the first worker's start to the last worker's end.
    pub makespan_ns: u64,
    /// NVMe commands the device received.
    pub commands: u64,
    /// PCIe payload bytes host→device (SQEs, NS_configs).
    pub pcie_h2c_bytes: u64,
    /// PCIe payload bytes device→host (read data, subgraphs, CQEs).
    pub pcie_c2h_bytes: u64,
    /// Flash pages read.
    pub nand_pages_read: u64,
    /// Page-cache hit rate (hits and minor faults over accesses); mmap only.
    pub page_cache_hit_rate: Option<f64>,
    /// Firmware core busy time during the sampling phase.
    pub core_busy_ns: u64,
    /// Busy time of the cores that run only sampling lanes during the sampling phase, summed
    /// over them (0 without any: see the emulator's `cores` module).
    pub isp_core_busy_ns: u64,
    /// How many cores run only sampling lanes (`HwConfig::isp_lane_cores`).
    pub isp_lane_cores: u32,
    /// Host CPU time charged by the host stack model, all workers.
    pub host_cpu_ns: u64,
    /// Total submission lag of the scheduler (0 with one worker).
    pub submit_lag_ns: u64,
    /// In-storage hyperbatches sampled again as two halves (their subgraphs did not fit the
    /// device's result buffers).
    pub hyperbatch_splits: u64,
    /// FNV-1a 64 over the completion times, in handling order.
    pub timeline_hash: u64,
    /// When each minibatch's subgraph was done, relative to the sampling phase's start, in
    /// minibatch order (what a modelled trainer's timeline takes as its input's ready times).
    pub done_ns: Vec<u64>,
}

impl ModeResult {
    /// Modelled time per minibatch: makespan / minibatches.
    pub fn time_per_minibatch_ns(&self) -> f64 {
        self.makespan_ns as f64 / self.minibatches.max(1) as f64
    }

    /// Firmware core busy time over the makespan.
    pub fn core_utilisation(&self) -> f64 {
        self.core_busy_ns as f64 / self.makespan_ns.max(1) as f64
    }

    /// The sampling-lane cores' mean busy time over the makespan (0 without any).
    pub fn isp_core_utilisation(&self) -> f64 {
        self.isp_core_busy_ns as f64
            / self.makespan_ns.max(1) as f64
            / f64::from(self.isp_lane_cores.max(1))
    }
}

/// The first minibatch on which a mode disagreed with the reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompareMismatch {
    /// The mode.
    pub mode: SamplerKind,
    /// Its worker count.
    pub workers: usize,
    /// The minibatch.
    pub batch: usize,
    /// Sizes of the mode's and the reference's subgraphs.
    pub sizes_bytes: (usize, usize),
    /// First byte offset at which they differ.
    pub first_difference_bytes: usize,
    /// The command line that replays the failing run alone.
    pub replay: String,
}

/// What a comparison measured.
#[derive(Clone, Debug)]
pub struct CompareReport {
    /// The configuration.
    pub config: CompareConfig,
    /// The graph's degree statistics.
    pub graph: DegreeStats,
    /// What the minibatches read of the graph's CSR (distinct pages).
    pub footprint: Footprint,
    /// Where the graph lives on each device.
    pub descriptor: GraphDescriptor,
    /// What Identify reported.
    pub device: DeviceInfo,
    /// The in-memory reference sampler's statistics (subgraph sizes).
    pub reference: SamplerStats,
    /// Each minibatch's layer counts (hop order), as the reference sampled it (every mode's
    /// subgraphs are these when the samples are identical): what a step model prices.
    pub minibatch_layers: Vec<Vec<sagessd_abi::subgraph::LayerCounts>>,
    /// One entry per (workers, mode), workers-major.
    pub results: Vec<ModeResult>,
    /// FNV-1a 64 over the reference subgraphs' bytes, in minibatch order (equal to every mode's
    /// when the samples are identical).
    pub checksum: u64,
    /// The first disagreement, if any.
    pub mismatch: Option<CompareMismatch>,
}

/// The index of the first differing byte of `a` and `b` (their common length if one is a prefix
/// of the other).
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

/// Formats a byte count with binary units, two decimals.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

fn join<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl CompareConfig {
    /// The `sagessd compare` command line that reproduces this configuration (the hardware
    /// description is named by `config_arg`, e.g. a path, or `None` for the built-in Cosmos+).
    pub fn command_line(&self, config_arg: Option<&str>) -> String {
        let modes: Vec<&str> = self.modes.iter().map(|m| m.name()).collect();
        let mut s = format!(
            "sagessd compare --graph {} --batches {} --batch-size {} --fanouts {} --seed {} --mode {} --workers {}",
            self.graph.word(),
            self.batches,
            self.batch_size,
            join(&self.fanouts),
            self.seed,
            modes.join(","),
            join(&self.workers),
        );
        if self.warmup_batches > 0 {
            s.push_str(&format!(" --warmup-batches {}", self.warmup_batches));
        }
        if self.modes.contains(&SamplerKind::IspHyperbatch) {
            s.push_str(&format!(" --hyperbatch {}", self.hyperbatch));
        }
        if let Some(c) = config_arg {
            s.push_str(&format!(" --config {c}"));
        }
        s
    }

    fn validate(&self) -> Result<(), CompareError> {
        let bad = |m: String| Err(CompareError::Config(m));
        if self.batches == 0 {
            return bad("--batches must be at least 1".into());
        }
        if self.batches.checked_add(self.warmup_batches).is_none() {
            return bad("--batches plus --warmup-batches exceeds 32 bits".into());
        }
        if self.batch_size == 0 {
            return bad("--batch-size must be at least 1".into());
        }
        if self.fanouts.is_empty() || self.fanouts.len() > MAX_LAYERS {
            return bad(format!("--fanouts needs 1..={MAX_LAYERS} layers"));
        }
        if let Some(f) = self.fanouts.iter().find(|f| **f == 0 || **f > MAX_FANOUT) {
            return bad(format!("fanout {f} outside 1..={MAX_FANOUT}"));
        }
        if self.modes.is_empty() {
            return bad("--mode needs at least one mode".into());
        }
        if let Some(m) = self
            .modes
            .iter()
            .enumerate()
            .find_map(|(i, m)| self.modes[..i].contains(m).then_some(m.name()))
        {
            return bad(format!("--mode lists {m} twice"));
        }
        if let Err(e) = self.modes.iter().try_for_each(|&m| check_modelled(m)) {
            return bad(e.to_string());
        }
        if self.modes.iter().any(|m| m.in_storage()) && !self.hw.firmware.isp {
            return bad(format!(
                "{} does not sample in storage (firmware.isp = false): drop isp, isp-ids and \
                 isp-hyperbatch from --mode, e.g. --mode mmap,direct,uring",
                self.hw.device.name
            ));
        }
        if self.hyperbatch == 0 {
            return bad("--hyperbatch must be at least 1".into());
        }
        if self.workers.is_empty() || self.workers.contains(&0) {
            return bad("--workers needs counts of at least 1".into());
        }
        if let Some(w) = self
            .workers
            .iter()
            .enumerate()
            .find_map(|(i, w)| self.workers[..i].contains(w).then_some(w))
        {
            return bad(format!("--workers lists {w} twice"));
        }
        Ok(())
    }

    /// Refuses up front what the device would refuse in ISP mode (it reports its limits in
    /// Identify), rather than failing after the host modes have run.
    fn check_device_limits(&self, info: &DeviceInfo) -> Result<(), CompareError> {
        if !self.modes.iter().any(|m| m.in_storage()) {
            return Ok(());
        }
        let Some(limits) = info.limits else {
            return Ok(());
        };
        if self.modes.contains(&SamplerKind::IspHyperbatch) {
            let targets = u64::from(self.batch_size) * self.hyperbatch as u64;
            if self.hyperbatch > usize::from(limits.max_minibatches)
                || targets > u64::from(limits.max_targets)
            {
                return Err(CompareError::Config(format!(
                    "--hyperbatch {} of --batch-size {} ({targets} targets) exceeds the device's \
                     {} minibatches and {} targets per NS_config",
                    self.hyperbatch, self.batch_size, limits.max_minibatches, limits.max_targets
                )));
            }
        }
        if self.batch_size > limits.max_targets {
            return Err(CompareError::Config(format!(
                "--batch-size {} exceeds the device's {} targets per NS_config",
                self.batch_size, limits.max_targets
            )));
        }
        if let Some(f) = self.fanouts.iter().find(|f| **f > limits.max_fanout) {
            return Err(CompareError::Config(format!(
                "fanout {f} exceeds the device's maximum fanout {}",
                limits.max_fanout
            )));
        }
        Ok(())
    }
}

/// How the modelled host holds `graph`'s bytes: a computed graph's from the content its
/// device's flash computes from (so that the page cache and the memory mode's copy hold no
/// bytes), a stored graph's as the device returned them.
fn host_graph_bytes(graph: &WorkloadGraph, desc: &GraphDescriptor, block_size: u32) -> GraphBytes {
    match graph {
        WorkloadGraph::Synthetic(g) => csr_content(g, desc, block_size)
            .map_or(GraphBytes::Kept, |c| {
                GraphBytes::Computed(std::sync::Arc::new(c))
            }),
        WorkloadGraph::Csr(_) => GraphBytes::Kept,
    }
}

fn loaded_device(
    hw: &HwConfig,
    graph: &WorkloadGraph,
    name: &str,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<(Device<LocalTransport>, GraphDescriptor), CompareError> {
    let graph = match graph {
        WorkloadGraph::Csr(g) => g,
        WorkloadGraph::Synthetic(g) => {
            // The flash computes the graph: the device boots holding it (no load), cold.
            events(Event::Phase {
                name,
                total: 0,
                bytes: false,
            });
            let (ssd, desc, _) = Ssd::with_synthetic_graph(hw, g.clone(), 0)
                .map_err(|e| CompareError::Config(format!("synthetic image: {e}")))?;
            let mut device = Device::open(LocalTransport::new(ssd))?;
            if hw.firmware.isp {
                device.attach_graph(&desc)?;
            }
            events(Event::PhaseDone);
            return Ok((device, desc));
        }
    };
    let transport = LocalTransport::from_config(hw).map_err(DriverError::from)?;
    let mut device = Device::open(transport)?;
    let bs = device.info().block_size_bytes;
    let plan = sagessd_runtime::load::plan_layout(graph, 0, bs);
    events(Event::Phase {
        name,
        total: (plan.indptr.block_count + plan.indices.block_count) * u64::from(bs),
        bytes: true,
    });
    // A device without in-storage sampling (`firmware.isp = false`) refuses GRAPH_ATTACH: the
    // host modes only need the graph written.
    let mut progress = |done, _| events(Event::Progress { done });
    let d = if hw.firmware.isp {
        load_graph_with_progress(&mut device, graph, 0, &mut progress)?
    } else {
        write_graph_with_progress(&mut device, graph, 0, &mut progress)?
    };
    events(Event::PhaseDone);
    // Sample from a cold device: the pages the load left in the controller's DRAM would
    // otherwise serve the first minibatches without touching NAND.
    device.transport_mut().drop_caches();
    Ok((device, d))
}

fn workers_label(workers: usize) -> String {
    format!("{workers} worker{}", if workers == 1 { "" } else { "s" })
}

/// The graph, the minibatches, and their in-memory reference samples.
struct Reference {
    graph: WorkloadGraph,
    requests: Vec<Request>,
    /// The warm-up's minibatches (sampled before `requests`, not counted).
    warmup: Vec<Request>,
    expected: Vec<SampledSubgraph>,
    stats: SamplerStats,
    footprint: Footprint,
}

/// Generates the graph and samples every minibatch with the in-memory reference.
fn reference(
    config: &CompareConfig,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Reference, CompareError> {
    config.validate()?;
    events(Event::Phase {
        name: "building the graph",
        total: 0,
        bytes: false,
    });
    let graph = config.graph.build().map_err(CompareError::Graph)?;
    events(Event::PhaseDone);
    let host = graph.host();
    tracing::info!(
        nodes = host.node_count(),
        edges = host.edge_count(),
        "graph built"
    );
    let n = host.node_count();
    if n == 0 {
        return Err(CompareError::Config("empty graph".into()));
    }
    let mut requests = minibatch_requests(
        config.seed,
        config.batches + config.warmup_batches,
        config.batch_size,
        n,
    );
    let warmup = requests.split_off(config.batches as usize);

    events(Event::Phase {
        name: "sampling (in-memory reference)",
        total: u64::from(config.batches),
        bytes: false,
    });
    let mut reference = ReferenceSampler::over(host);
    let mut expected: Vec<SampledSubgraph> = Vec::with_capacity(requests.len());
    for (b, r) in requests.iter().enumerate() {
        let s = reference
            .sample(r.seed, &config.fanouts, &r.targets)
            .map_err(|source| CompareError::Sample {
                sampler: format!("the in-memory reference on minibatch {b}"),
                source,
            })?;
        expected.push(s);
        events(Event::Progress { done: b as u64 + 1 });
    }
    events(Event::PhaseDone);

    let stats = reference.stats();
    let footprint =
        crate::footprint::measure(graph.host(), &requests, &config.fanouts).map_err(|source| {
            CompareError::Sample {
                sampler: "the footprint of the reference's reads".into(),
                source,
            }
        })?;
    Ok(Reference {
        graph,
        requests,
        warmup,
        stats,
        expected,
        footprint,
    })
}

/// Runs the comparison. `config_arg` names the hardware description in the replay command
/// printed on a mismatch.
pub fn run(
    config: &CompareConfig,
    config_arg: Option<&str>,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<CompareReport, CompareError> {
    let Reference {
        graph,
        requests,
        warmup,
        expected,
        stats: reference_stats,
        footprint,
    } = reference(config, events)?;
    let checksum = expected
        .iter()
        .fold(FNV_OFFSET, |h, s| fnv1a(h, s.as_bytes()));
    let minibatch_layers = expected
        .iter()
        .map(|s| {
            let view = s.view();
            (0..view.layer_count())
                .map(|l| view.layer(l).counts)
                .collect()
        })
        .collect();
    let mut results = Vec::new();
    let mut mismatch = None;
    let mut layout: Option<(DeviceInfo, GraphDescriptor)> = None;
    for &workers in &config.workers {
        for &mode in &config.modes {
            let label = format!("{}, {}", mode.name(), workers_label(workers));
            let (device, desc) = loaded_device(
                &config.hw,
                &graph,
                &format!("loading graph ({label})"),
                events,
            )?;
            if layout.is_none() {
                config.check_device_limits(device.info())?;
                layout = Some((device.info().clone(), desc));
            }
            let sample_error = |source| CompareError::Sample {
                sampler: format!("{} with {}", mode.name(), workers_label(workers)),
                source,
            };
            let bytes = host_graph_bytes(&graph, &desc, device.info().block_size_bytes);
            let mut s =
                HostIoSampler::with_graph_bytes(device, desc, mode, config.hw.host.clone(), bytes)
                    .map_err(sample_error)?;
            s.set_hyperbatch(config.hyperbatch);
            if !warmup.is_empty() {
                events(Event::Phase {
                    name: &format!("warm-up ({label})"),
                    total: warmup.len() as u64,
                    bytes: false,
                });
                s.run_workers_with_progress(workers, &config.fanouts, &warmup, &mut |done| {
                    events(Event::Progress { done })
                })
                .map_err(sample_error)?;
                events(Event::PhaseDone);
            }
            // After the sampler's set-up and the warm-up: the DRAM mode's read of the graph
            // into host memory is part of the load, not of sampling, and the warm-up is not
            // counted.
            let before: DeviceStats = s.device().transport().ssd().stats();
            let host_before = s.host_stats();
            events(Event::Phase {
                name: &format!("sampling ({label})"),
                total: u64::from(config.batches),
                bytes: false,
            });
            let run = s
                .run_workers_with_progress(workers, &config.fanouts, &requests, &mut |done| {
                    events(Event::Progress { done })
                })
                .map_err(sample_error)?;
            events(Event::PhaseDone);
            if mismatch.is_none()
                && let Some(batch) = (0..expected.len()).find(|&b| run.subgraphs[b] != expected[b])
            {
                let (a, b) = (run.subgraphs[batch].as_bytes(), expected[batch].as_bytes());
                let replay = CompareConfig {
                    modes: vec![mode],
                    workers: vec![workers],
                    ..config.clone()
                };
                mismatch = Some(CompareMismatch {
                    mode,
                    workers,
                    batch,
                    sizes_bytes: (a.len(), b.len()),
                    first_difference_bytes: first_difference(a, b),
                    replay: replay.command_line(config_arg),
                });
            }
            let after = s.device().transport().ssd().stats();
            tracing::info!(
                mode = mode.name(),
                workers,
                "device statistics since creation (load included):\n{after}"
            );
            let h = s.host_stats();
            let page_cache = h.page_cache.since(&host_before.page_cache);
            results.push(ModeResult {
                mode,
                workers,
                minibatches: requests.len() as u64,
                makespan_ns: run.makespan_ns,
                commands: after.commands_submitted - before.commands_submitted,
                pcie_h2c_bytes: after.pcie_h2c_bytes - before.pcie_h2c_bytes,
                pcie_c2h_bytes: after.pcie_c2h_bytes - before.pcie_c2h_bytes,
                nand_pages_read: after.nand_pages_read - before.nand_pages_read,
                page_cache_hit_rate: (mode == SamplerKind::Mmap).then(|| page_cache.hit_rate()),
                core_busy_ns: after.core_busy_ns - before.core_busy_ns,
                isp_core_busy_ns: after.isp_core_busy_ns - before.isp_core_busy_ns,
                isp_lane_cores: config.hw.isp_lane_cores(),
                host_cpu_ns: h.host_cpu_ns - host_before.host_cpu_ns,
                submit_lag_ns: h.submit_lag_ns - host_before.submit_lag_ns,
                hyperbatch_splits: h.hyperbatch_splits - host_before.hyperbatch_splits,
                timeline_hash: h.timeline_hash,
                done_ns: run.done_ns,
            });
        }
    }
    let (device, descriptor) = layout.expect("validated: at least one mode and worker count");
    Ok(CompareReport {
        config: config.clone(),
        graph: graph.degree_stats(),
        footprint,
        descriptor,
        device,
        reference: reference_stats,
        minibatch_layers,
        results,
        checksum,
        mismatch,
    })
}

/// Sampling jobs `run_on_device` keeps in flight (the device answers "no free slot" beyond
/// what it holds, and the driver then keeps to that).
const DEVICE_JOBS_IN_FLIGHT: usize = 4;

/// What sampling through a real transport (`sagessd compare --device URI`) measured: no modelled
/// time exists there, so only correctness and wall-clock time.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceRunReport {
    /// The device, as its URI was given.
    pub device: String,
    /// Minibatches sampled.
    pub minibatches: u32,
    /// FNV-1a over the subgraphs the device returned (equal to the in-process run's checksum
    /// when they are byte-identical).
    pub checksum: u64,
    /// The first minibatch whose subgraph differs from the in-memory reference.
    pub mismatch: Option<usize>,
    /// Wall-clock time per minibatch (one NS_SUBMIT + NS_COLLECT), nanoseconds.
    pub wall_ns_per_minibatch: f64,
    /// Subgraph bytes returned.
    pub subgraph_bytes: u64,
}

impl DeviceRunReport {
    /// The report as `sagessd compare --device` prints it.
    pub fn render(&self) -> String {
        let mut out = format!(
            "in-storage sampling on {}: {} minibatches, {} of subgraphs\n",
            self.device,
            self.minibatches,
            human_bytes(self.subgraph_bytes)
        );
        out += &format!(
            "  wall-clock time per minibatch   {:.3} ms   (WALL CLOCK, not modelled)\n",
            self.wall_ns_per_minibatch * 1e-6
        );
        out += &match self.mismatch {
            None => format!(
                "samples identical: yes (each byte-identical to the in-memory reference; checksum {:#018x})\n",
                self.checksum
            ),
            Some(b) => format!(
                "samples identical: NO (minibatch {b} differs; checksum {:#018x})\n",
                self.checksum
            ),
        };
        out
    }
}

/// Writes the graph to `device`, attaches it, and samples every minibatch in storage (one
/// NS_SUBMIT + NS_COLLECTs each, several jobs in flight), checking each subgraph against the
/// in-memory reference: the comparison for devices behind a real transport (NVMe/TCP, Linux
/// passthrough).
pub fn run_on_device<T: Transport>(
    config: &CompareConfig,
    device: &mut Device<T>,
    uri: &str,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<DeviceRunReport, CompareError> {
    let r = reference(config, events)?;
    config.check_device_limits(device.info())?;
    let WorkloadGraph::Csr(graph) = &r.graph else {
        return Err(CompareError::Config(format!(
            "{} is computed by the emulator's flash; a real device needs a graph the host \
             writes (an R-MAT or a dataset)",
            config.graph.describe()
        )));
    };
    let plan = sagessd_runtime::load::plan_layout(graph, 0, device.info().block_size_bytes);
    events(Event::Phase {
        name: "writing and attaching the graph",
        total: (plan.indptr.block_count + plan.indices.block_count)
            * u64::from(device.info().block_size_bytes),
        bytes: true,
    });
    load_graph_with_progress(device, graph, 0, &mut |done, _| {
        events(Event::Progress { done })
    })?;
    events(Event::PhaseDone);
    events(Event::Phase {
        name: "sampling in storage",
        total: r.requests.len() as u64,
        bytes: false,
    });
    let started = std::time::Instant::now();
    let batches: Vec<(u64, Vec<u64>)> = r
        .requests
        .iter()
        .map(|q| (q.seed, q.targets.clone()))
        .collect();
    let subgraphs = device
        .sample_many(&config.fanouts, &batches, DEVICE_JOBS_IN_FLIGHT)
        .map_err(|e| CompareError::Sample {
            sampler: format!("in-storage sampling on {uri}"),
            source: SamplerError::Driver(e),
        })?;
    let mut checksum = FNV_OFFSET;
    let mut mismatch = None;
    let mut subgraph_bytes = 0;
    for (b, got) in subgraphs.iter().enumerate() {
        checksum = fnv1a(checksum, got);
        subgraph_bytes += got.len() as u64;
        if mismatch.is_none() && got[..] != *r.expected[b].as_bytes() {
            mismatch = Some(b);
        }
    }
    events(Event::Progress {
        done: r.requests.len() as u64,
    });
    let wall_ns = started.elapsed().as_nanos() as f64;
    events(Event::PhaseDone);
    Ok(DeviceRunReport {
        device: uri.to_owned(),
        minibatches: config.batches,
        checksum,
        mismatch,
        wall_ns_per_minibatch: wall_ns / f64::from(config.batches.max(1)),
        subgraph_bytes,
    })
}

impl CompareReport {
    /// The result for `mode` with `workers`, if it ran.
    pub fn result(&self, mode: SamplerKind, workers: usize) -> Option<&ModeResult> {
        self.results
            .iter()
            .find(|r| r.mode == mode && r.workers == workers)
    }

    /// Whether every mode's every minibatch was byte-identical to the reference's.
    pub fn identical(&self) -> bool {
        self.mismatch.is_none()
    }

    /// Time per minibatch of mmap divided by that of `r` (same worker count), if mmap ran.
    pub fn speedup_vs_mmap(&self, r: &ModeResult) -> Option<f64> {
        let m = self.result(SamplerKind::Mmap, r.workers)?;
        Some(m.time_per_minibatch_ns() / r.time_per_minibatch_ns())
    }

    /// Time per minibatch of host mode `mode` divided by ISP's, with `workers`, if both ran.
    pub fn isp_speedup(&self, mode: SamplerKind, workers: usize) -> Option<f64> {
        let host = self.result(mode, workers)?;
        let isp = self.result(SamplerKind::Isp, workers)?;
        let t = isp.time_per_minibatch_ns();
        (t > 0.0).then(|| host.time_per_minibatch_ns() / t)
    }

    /// Adds `other`'s results to this report: the same comparison (graph, minibatches,
    /// worker counts, hardware) run with another host page cache, whose modes do not read
    /// through the page cache (everything but mmap). A page-cache sweep runs those modes once
    /// and mmap at every size. Results stay workers-major in [`SamplerKind::ALL`] order.
    pub fn merge_page_cache_free(&mut self, other: CompareReport) -> Result<(), CompareError> {
        let refuse = |why: &str| Err(CompareError::Config(format!("cannot merge reports: {why}")));
        let (a, b) = (&self.config, &other.config);
        let mut b_hw = b.hw.clone();
        b_hw.host.page_cache_bytes = a.hw.host.page_cache_bytes;
        if (
            &a.graph,
            a.batches,
            a.batch_size,
            &a.fanouts,
            a.seed,
            &a.workers,
        ) != (
            &b.graph,
            b.batches,
            b.batch_size,
            &b.fanouts,
            b.seed,
            &b.workers,
        ) || a.hw != b_hw
        {
            return refuse("they compare different workloads or hardware");
        }
        if self.checksum != other.checksum || self.descriptor != other.descriptor {
            return refuse("their reference samples or graph layouts differ");
        }
        if b.modes.contains(&SamplerKind::Mmap) {
            return refuse(
                "mmap reads through the page cache: its results belong to their own size",
            );
        }
        if let Some(m) = b.modes.iter().find(|m| a.modes.contains(m)) {
            return refuse(&format!("both ran {}", m.name()));
        }
        self.mismatch = self.mismatch.take().or(other.mismatch);
        self.results.extend(other.results);
        let order = |m: SamplerKind| SamplerKind::ALL.iter().position(|&x| x == m);
        self.results.sort_by_key(|r| (r.workers, order(r.mode)));
        self.config.modes.extend(other.config.modes);
        self.config.modes.sort_by_key(|&m| order(m));
        Ok(())
    }

    /// Bytes of the graph on the device (its `indptr` and `indices` blocks).
    pub fn graph_bytes(&self) -> u64 {
        (self.descriptor.indptr.block_count + self.descriptor.indices.block_count)
            * u64::from(self.device.block_size_bytes)
    }

    /// The report as `sagessd compare` prints it: deterministic for a
    /// configuration (virtual time and counters only).
    pub fn render(&self) -> String {
        let c = &self.config;
        let g = &self.graph;
        let d = &self.descriptor;
        let host = &c.hw.host;
        let graph_bytes = self.graph_bytes();
        let buffer_bytes =
            u64::from(c.hw.firmware.page_buffer_pages) * u64::from(c.hw.nand.page_size_bytes);
        let mut out = String::new();
        out.push_str(&format!(
            "graph: {}: {} nodes, {} stored edges{}, degree max {} mean {:.2} median {}, {} isolated; {} on the device (LBAs {}..{} indptr, {}..{} indices)\n",
            c.graph.describe(),
            g.node_count,
            g.edge_count,
            if matches!(c.graph, GraphSpec::Rmat(_)) {
                " (symmetric)"
            } else {
                ""
            },
            g.max,
            g.mean,
            g.median,
            g.isolated,
            human_bytes(graph_bytes),
            d.indptr.slba,
            d.indptr.slba + d.indptr.block_count,
            d.indices.slba,
            d.indices.slba + d.indices.block_count,
        ));
        out.push_str(&format!(
            "device: {} ({} LBAs of {} B, max transfer {}, controller page buffer {}); host: page cache {}, mmap fault read-around {} pages, sampling {} ns/node + {} ns/edge, io_uring depth {}\n",
            c.hw.device.name,
            self.device.block_count,
            self.device.block_size_bytes,
            human_bytes(u64::from(self.device.max_transfer_bytes)),
            human_bytes(buffer_bytes),
            human_bytes(host.page_cache_bytes),
            host.ra_pages(),
            host.node_ns,
            host.edge_sampled_ns,
            host.uring_queue_depth,
        ));
        let fits = |cache: u64| {
            if graph_bytes <= cache {
                "fits"
            } else {
                "does not fit"
            }
        };
        out.push_str(&format!(
            "graph vs caches: {} vs controller page buffer {} ({}) and host page cache {} ({}); {}\n",
            human_bytes(graph_bytes),
            human_bytes(buffer_bytes),
            fits(buffer_bytes),
            human_bytes(host.page_cache_bytes),
            fits(host.page_cache_bytes),
            if graph_bytes <= buffer_bytes.min(host.page_cache_bytes) {
                "after first touch, pages come from DRAM, not NAND (a larger --scale, e.g. 20, exceeds both)"
            } else {
                "evicted pages are read from NAND again"
            },
        ));
        let f = &self.footprint;
        out.push_str(&format!(
            "memory regime: graph / host page cache r = {:.2}; a minibatch reads {:.0} distinct 4 KiB pages of the CSR ({}), {:.1} % of the page cache\n",
            graph_bytes as f64 / host.page_cache_bytes.max(1) as f64,
            f.pages_per_minibatch(),
            human_bytes(f.bytes_per_minibatch() as u64),
            100.0 * f.share_of(host.page_cache_bytes),
        ));
        let devices = if matches!(c.graph, GraphSpec::Synthetic(..)) {
            "each mode on its own device booted holding the graph (its flash computes it; the controller page buffer cold)"
        } else {
            "each mode on its own freshly loaded device (same hardware description and WRITE sequence, controller page buffer emptied after the load)"
        };
        let warmup = if c.warmup_batches > 0 {
            format!(
                "; each first samples {} warm-up minibatches (not counted: the caches are warm)",
                c.warmup_batches
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "workload: {} minibatches × {} targets, fanouts {}, seed {}; {devices}{warmup}; sampling phase only\n\n",
            c.batches,
            c.batch_size,
            join(&c.fanouts),
            c.seed
        ));
        let header = [
            "mode",
            "workers",
            "time/minibatch",
            "vs mmap",
            "NVMe cmds",
            "PCIe host→dev",
            "PCIe dev→host",
            "NAND pages",
            "page-cache hits",
            "core util",
            "host CPU/mb",
            "sched lag",
        ];
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .map(|r| {
                vec![
                    r.mode.name().to_string(),
                    r.workers.to_string(),
                    format!("{:.3} ms", r.time_per_minibatch_ns() / 1e6),
                    self.speedup_vs_mmap(r)
                        .map_or("-".into(), |s| format!("{s:.2}x")),
                    r.commands.to_string(),
                    human_bytes(r.pcie_h2c_bytes),
                    human_bytes(r.pcie_c2h_bytes),
                    r.nand_pages_read.to_string(),
                    r.page_cache_hit_rate
                        .map_or("-".into(), |h| format!("{:.1}%", 100.0 * h)),
                    if r.isp_core_busy_ns > 0 {
                        format!(
                            "{:.1}% + ISP {:.1}%",
                            100.0 * r.core_utilisation(),
                            100.0 * r.isp_core_utilisation()
                        )
                    } else {
                        format!("{:.1}%", 100.0 * r.core_utilisation())
                    },
                    format!(
                        "{:.3} ms",
                        r.host_cpu_ns as f64 / r.minibatches.max(1) as f64 / 1e6
                    ),
                    format!(
                        "{:.2}%",
                        100.0 * r.submit_lag_ns as f64 / r.makespan_ns.max(1) as f64
                    ),
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].chars().count())
                    .chain([header[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let pad = widths[i] - cell.chars().count();
                if i == 0 {
                    l.push_str(cell);
                    l.push_str(&" ".repeat(pad));
                } else {
                    l.push_str("  ");
                    l.push_str(&" ".repeat(pad));
                    l.push_str(cell);
                }
            }
            l.push('\n');
            l
        };
        out.push_str(&line(&header.map(String::from)));
        out.push_str(&line(
            &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
        ));
        for r in &rows {
            out.push_str(&line(r));
        }
        out.push_str(
            "time: modelled (virtual) makespan of the workers / minibatches: host stack costs ([host]), NVMe queues, PCIe, firmware cores, NAND\n\
             vs mmap: mmap's time per minibatch / this mode's, same worker count\n\
             NVMe cmds, PCIe payload bytes (SQEs and CQEs included), NAND pages: totals over the sampling phase\n\
             core util: firmware core busy time / makespan; host CPU/mb: host CPU time charged per minibatch (all workers)\n\
             sched lag: time commands reached the device later than their worker's clock, / makespan (a check: 0 when the interleaving is exact)\n",
        );
        if self.results.iter().any(|r| r.isp_core_busy_ns > 0) {
            out.push_str(
                "core util \"A% + ISP B%\": firmware core A (with sampling lane 0 when sampling time-shares the cores, [cores] isp_cores = 0), the cores that only sample B (their mean), each busy time / makespan\n",
            );
        }
        let host_modes: Vec<SamplerKind> = c
            .modes
            .iter()
            .copied()
            .filter(|m| !m.in_storage())
            .collect();
        if !c.modes.contains(&SamplerKind::Isp) {
            out.push_str("ISP speedup: n/a (isp mode not run)\n");
        } else if host_modes.is_empty() {
            out.push_str("ISP speedup: n/a (no host mode run)\n");
        } else {
            for &w in &c.workers {
                let ratios: Vec<String> = host_modes
                    .iter()
                    .map(|&m| {
                        self.isp_speedup(m, w)
                            .map_or(format!("n/a over {}", m.name()), |x| {
                                format!("{x:.2}x over {}", m.name())
                            })
                    })
                    .collect();
                out.push_str(&format!(
                    "ISP speedup (modelled time per minibatch, host mode's / ISP's), {}: {}\n",
                    workers_label(w),
                    ratios.join(", ")
                ));
            }
        }
        for &w in &c.workers {
            if let (Some(one), Some(hb)) = (
                self.result(SamplerKind::Isp, w),
                self.result(SamplerKind::IspHyperbatch, w),
            ) {
                out.push_str(&format!(
                    "ISP hyperbatches of {}, {}: {:.2}x ISP's time per minibatch, {:.2}x its NAND pages read ({} vs {}){}\n",
                    c.hyperbatch,
                    workers_label(w),
                    hb.time_per_minibatch_ns() / one.time_per_minibatch_ns().max(1.0),
                    hb.nand_pages_read as f64 / one.nand_pages_read.max(1) as f64,
                    hb.nand_pages_read,
                    one.nand_pages_read,
                    if hb.hyperbatch_splits > 0 {
                        format!(
                            "; {} hyperbatches split in two (their subgraphs did not fit the device's result buffers)",
                            hb.hyperbatch_splits
                        )
                    } else {
                        String::new()
                    }
                ));
            }
        }
        let r = &self.reference;
        let per = |x: u64| x.checked_div(r.minibatches).unwrap_or(0);
        out.push_str(&format!(
            "subgraphs: {} nodes, {} edges, {} on average per minibatch\n",
            per(r.nodes),
            per(r.edges),
            human_bytes(per(r.subgraph_bytes))
        ));
        match &self.mismatch {
            None => out.push_str(&format!(
                "samples identical: yes ({} minibatches × {} runs, each byte-identical to the in-memory reference; checksum {:#018x})\n",
                c.batches,
                self.results.len(),
                self.checksum
            )),
            Some(m) => out.push_str(&format!(
                "samples identical: NO — {} with {}, minibatch {}: differs from the in-memory reference at byte {} (sizes {} vs {} bytes); replay: {}\n",
                m.mode.name(),
                workers_label(m.workers),
                m.batch,
                m.first_difference_bytes,
                m.sizes_bytes.0,
                m.sizes_bytes.1,
                m.replay
            )),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_runtime::rmat::RmatParams;

    fn small() -> CompareConfig {
        CompareConfig {
            graph: GraphSpec::Rmat(RmatParams::graph500(10, 8, 3)),
            batches: 6,
            warmup_batches: 0,
            batch_size: 64,
            fanouts: vec![5, 5],
            seed: 11,
            hw: HwConfig::cosmos_plus(),
            modes: SamplerKind::modelled().collect(),
            workers: vec![1, 3],
            hyperbatch: 3,
        }
    }

    #[test]
    fn only_mmap_reads_through_the_page_cache_and_sweeps_merge() {
        let with_cache = |bytes: u64, modes: Vec<SamplerKind>| {
            let mut c = small();
            c.hw.host.page_cache_bytes = bytes;
            c.modes = modes;
            run(&c, None, &mut |_| {}).unwrap()
        };
        use SamplerKind::{Direct, Isp, IspHyperbatch, IspIds, Memory, Mmap, Uring};
        let free = vec![Memory, Direct, Uring, Isp, IspIds, IspHyperbatch];
        // The modes that bypass the page cache do not notice its size (a tiny cache against
        // one holding the graph); mmap does.
        let tiny = with_cache(8192, free.clone());
        let large = with_cache(64 << 20, free.clone());
        assert_eq!(tiny.results, large.results);
        let mmap_tiny = with_cache(8192, vec![Mmap]);
        let mmap_large = with_cache(64 << 20, vec![Mmap]);
        assert_ne!(mmap_tiny.results, mmap_large.results);
        // mmap at the tiny cache plus the rest from the large one is the full run at the tiny one.
        let mut merged = mmap_tiny.clone();
        merged.merge_page_cache_free(large.clone()).unwrap();
        let full = with_cache(8192, SamplerKind::modelled().collect());
        assert_eq!(merged.results, full.results);
        assert_eq!(merged.config, full.config);
        assert_eq!(merged.render(), full.render());
        // What cannot be merged is refused: mmap from another size, a mode twice, another
        // workload.
        let mut m = mmap_tiny.clone();
        assert!(m.merge_page_cache_free(mmap_large).is_err());
        let mut m = merged.clone();
        assert!(m.merge_page_cache_free(large.clone()).is_err());
        let mut other = small();
        other.seed += 1;
        other.modes = free;
        let mut m = mmap_tiny;
        assert!(
            m.merge_page_cache_free(run(&other, None, &mut |_| {}).unwrap())
                .is_err()
        );
    }

    #[test]
    fn human_bytes_formats() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(3 << 20), "3.00 MiB");
    }

    #[test]
    fn compare_is_identical_and_deterministic() {
        let mut phases = Vec::new();
        let mut last_progress = 0;
        let a = run(&small(), None, &mut |e| match e {
            Event::Phase { name, .. } => phases.push(name.to_string()),
            Event::Progress { done } => last_progress = done,
            Event::PhaseDone => {}
        })
        .unwrap();
        // Generation, the reference, then a load and a sampling phase per (workers, mode).
        assert_eq!(phases.len(), 2 + 2 * 14, "{phases:?}");
        assert_eq!(
            phases.last().unwrap(),
            "sampling (isp-hyperbatch, 3 workers)"
        );
        assert_eq!(last_progress, 6);
        let b = run(&small(), None, &mut |_| {}).unwrap();
        assert!(a.identical(), "{:?}", a.mismatch);
        assert_eq!(a.results.len(), 14);
        assert_eq!(a.results, b.results);
        assert_eq!(a.render(), b.render());
        let text = a.render();
        assert!(
            text.contains("samples identical: yes (6 minibatches × 14 runs"),
            "{text}"
        );
        // Hyperbatches of three: an NS_SUBMIT each, a collect per minibatch, and a line
        // against an NS_config each.
        let hb = a.result(SamplerKind::IspHyperbatch, 1).unwrap();
        assert_eq!(hb.commands, 2 + 6);
        assert!(text.contains("ISP hyperbatches of 3, 1 worker: "), "{text}");
        assert!(text.contains(&format!("checksum {:#018x}", a.checksum)));
        for w in ["1 worker:", "3 workers:"] {
            assert!(
                text.contains(&format!(
                    "ISP speedup (modelled time per minibatch, host mode's / ISP's), {w}"
                )),
                "{text}"
            );
        }
        let mmap = a.result(SamplerKind::Mmap, 1).unwrap();
        assert_eq!(a.speedup_vs_mmap(mmap), Some(1.0));
        assert!(mmap.page_cache_hit_rate.is_some());
        let isp = a.result(SamplerKind::Isp, 1).unwrap();
        assert_eq!(isp.commands, 2 * 6);
        // Sampled ids: the same commands, fewer bytes to the host, the host's build charged.
        let ids = a.result(SamplerKind::IspIds, 1).unwrap();
        assert_eq!(ids.commands, isp.commands);
        assert!(ids.pcie_c2h_bytes < isp.pcie_c2h_bytes, "{ids:?}");
        assert!(ids.host_cpu_ns > isp.host_cpu_ns, "{ids:?}");
        assert!(isp.core_utilisation() > 0.0 && isp.core_utilisation() <= 1.0);
        // The graph in DRAM makes no I/O: its only NVMe commands are the load's.
        let dram = a.result(SamplerKind::Memory, 1).unwrap();
        assert_eq!(dram.commands, 0, "{dram:?}");
        assert!(dram.time_per_minibatch_ns() < mmap.time_per_minibatch_ns());
        let direct = a.result(SamplerKind::Direct, 1).unwrap();
        assert_eq!(
            a.isp_speedup(SamplerKind::Direct, 1),
            Some(direct.time_per_minibatch_ns() / isp.time_per_minibatch_ns())
        );
        for r in &a.results {
            assert!(r.makespan_ns > 0 && r.host_cpu_ns > 0, "{r:?}");
            // The scheduler interleaves workers and device completions exactly.
            assert_eq!(r.submit_lag_ns, 0, "{r:?}");
        }
        assert_eq!(a.reference.minibatches, 6);
    }

    #[test]
    fn a_warm_up_is_sampled_first_and_not_counted() {
        let cold = CompareConfig {
            modes: vec![SamplerKind::Mmap],
            workers: vec![1],
            ..small()
        };
        let warm = CompareConfig {
            warmup_batches: 12,
            ..cold.clone()
        };
        let (a, b) = (
            run(&cold, None, &mut |_| {}).unwrap(),
            run(&warm, None, &mut |_| {}).unwrap(),
        );
        // The same counted minibatches, each byte-identical to the reference, either way.
        assert!(a.identical() && b.identical());
        assert_eq!(a.checksum, b.checksum);
        let (ra, rb) = (&a.results[0], &b.results[0]);
        assert_eq!((ra.minibatches, rb.minibatches), (6, 6));
        // Warm, the counted minibatches find more of the graph in the page cache: fewer flash
        // pages, more hits, less time.
        assert!(rb.nand_pages_read < ra.nand_pages_read, "{rb:?} vs {ra:?}");
        assert!(rb.page_cache_hit_rate > ra.page_cache_hit_rate);
        assert!(rb.makespan_ns < ra.makespan_ns);
        assert!(b.render().contains("12 warm-up minibatches"));
        assert!(!a.render().contains("warm-up"));
        assert!(warm.command_line(None).contains("--warmup-batches 12"));
        let overflow = CompareConfig {
            batches: u32::MAX,
            warmup_batches: 1,
            ..cold
        };
        assert!(matches!(
            run(&overflow, None, &mut |_| {}),
            Err(CompareError::Config(m)) if m.contains("--warmup-batches")
        ));
    }

    #[test]
    fn a_subset_of_modes_reports_what_ran() {
        let c = CompareConfig {
            modes: vec![SamplerKind::Direct, SamplerKind::Isp],
            workers: vec![1],
            batches: 2,
            ..small()
        };
        let a = run(&c, None, &mut |_| {}).unwrap();
        let text = a.render();
        assert_eq!(a.results.len(), 2);
        assert!(a.speedup_vs_mmap(&a.results[0]).is_none());
        assert!(
            text.contains(
                "ISP speedup (modelled time per minibatch, host mode's / ISP's), 1 worker: "
            ) && text.contains("x over direct\n"),
            "{text}"
        );
        let isp_only = CompareConfig {
            modes: vec![SamplerKind::Isp],
            ..c.clone()
        };
        let text = run(&isp_only, None, &mut |_| {}).unwrap().render();
        assert!(
            text.contains("ISP speedup: n/a (no host mode run)"),
            "{text}"
        );
        let host_only = CompareConfig {
            modes: vec![SamplerKind::Uring],
            ..c
        };
        let text = run(&host_only, None, &mut |_| {}).unwrap().render();
        assert!(
            text.contains("ISP speedup: n/a (isp mode not run)"),
            "{text}"
        );
        // A device without ISP (it refuses GRAPH_ATTACH) serves the host modes.
        let mut no_isp = host_only;
        no_isp.hw.firmware.isp = false;
        assert!(run(&no_isp, None, &mut |_| {}).unwrap().identical());
    }

    #[test]
    fn a_mismatch_is_reported_with_a_replay_command() {
        let c = CompareConfig {
            modes: vec![SamplerKind::Isp],
            workers: vec![1],
            batches: 1,
            ..small()
        };
        let mut bad = run(&c, Some("x.toml"), &mut |_| {}).unwrap();
        let replay = c.command_line(Some("x.toml"));
        bad.mismatch = Some(CompareMismatch {
            mode: SamplerKind::Isp,
            workers: 1,
            batch: 0,
            sizes_bytes: (10, 12),
            first_difference_bytes: 4,
            replay,
        });
        assert!(!bad.identical());
        let text = bad.render();
        assert!(
            text.contains(
                "samples identical: NO — isp with 1 worker, minibatch 0: differs from the in-memory reference at byte 4"
            ),
            "{text}"
        );
        assert!(
            text.contains("replay: sagessd compare --graph rmat:10:8:3"),
            "{text}"
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        for patch in [
            |c: &mut CompareConfig| c.modes.clear(),
            |c: &mut CompareConfig| c.modes = vec![SamplerKind::Isp, SamplerKind::Isp],
            // A sampler the modelled host does not run.
            |c: &mut CompareConfig| c.modes = vec![SamplerKind::Hyperbatch],
            |c: &mut CompareConfig| c.workers = vec![0],
            |c: &mut CompareConfig| c.workers = vec![2, 2],
            |c: &mut CompareConfig| c.batches = 0,
            |c: &mut CompareConfig| c.batch_size = 0,
            |c: &mut CompareConfig| c.fanouts.clear(),
            |c: &mut CompareConfig| c.fanouts = vec![1; 5],
            |c: &mut CompareConfig| c.fanouts = vec![3, 0],
            // Beyond the device's limits (refused before any sampling).
            |c: &mut CompareConfig| c.batch_size = c.hw.firmware.max_targets + 1,
            |c: &mut CompareConfig| c.fanouts = vec![c.hw.firmware.max_fanout + 1],
            |c: &mut CompareConfig| c.hyperbatch = 0,
            |c: &mut CompareConfig| c.hyperbatch = usize::from(c.hw.firmware.max_minibatches) + 1,
            |c: &mut CompareConfig| {
                c.batch_size = c.hw.firmware.max_targets / 2;
                c.hyperbatch = 3;
            },
            // ISP on a device without it.
            |c: &mut CompareConfig| c.hw.firmware.isp = false,
        ] {
            let mut c = small();
            patch(&mut c);
            let e = run(&c, None, &mut |_| {});
            assert!(matches!(e, Err(CompareError::Config(_))), "{c:?}: {e:?}");
        }
        let c = CompareConfig {
            graph: GraphSpec::Rmat(RmatParams::graph500(0, 8, 3)),
            ..small()
        };
        assert!(matches!(
            run(&c, None, &mut |_| {}),
            Err(CompareError::Graph(_))
        ));
    }

    #[test]
    fn the_replay_command_names_every_flag() {
        assert_eq!(
            small().command_line(Some("x.toml")),
            "sagessd compare --graph rmat:10:8:3 --batches 6 --batch-size 64 \
             --fanouts 5,5 --seed 11 --mode memory,mmap,direct,uring,isp,isp-ids,isp-hyperbatch \
             --workers 1,3 --hyperbatch 3 --config x.toml"
        );
    }
}
