//! The `sagessd demo` experiment: host-over-device sampling versus in-storage sampling on the
//! same emulated device model, checked byte for byte against the in-memory reference.
//!
//! Steps: generate an R-MAT graph; build two emulated SSDs from the same hardware description and
//! load the graph onto each with the same WRITE sequence (so both start from identical device
//! state); sample the same minibatches with the host-over-device sampler on one and the ISP
//! sampler on the other, and with the in-memory reference; compare the bytes; report modelled
//! figures for the sampling phase only (graph loading is excluded).
//!
//! Every figure in [`DemoReport::render`] is a pure function of the configuration: it reads the
//! emulator's virtual clock and counters, never the wall clock.

use std::collections::HashSet;

use sagessd_abi::graph::GraphDescriptor;
use sagessd_emulator::HwConfig;
use sagessd_host_driver::{Device, DeviceInfo, DriverError, LocalTransport};

use crate::graph::{CsrGraph, DegreeStats};
use crate::load::{LoadError, load_graph_with_progress};
use crate::rmat::{RmatError, RmatParams, generate};
use sagessd_abi::sample::mix;

use crate::rng::SplitMix64;
use crate::sampler::{
    FNV_OFFSET, HostDeviceSampler, IspSampler, ReferenceSampler, Sampler, SamplerError,
    SamplerStats, fnv1a,
};

/// Everything the demo needs to know.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoConfig {
    /// R-MAT scale (log2 of the node count).
    pub scale: u32,
    /// R-MAT edges drawn per node.
    pub edge_factor: u32,
    /// Seed of the graph.
    pub graph_seed: u64,
    /// Number of minibatches.
    pub batches: u32,
    /// Targets per minibatch.
    pub batch_size: u32,
    /// Fanout per layer, hop order.
    pub fanouts: Vec<u16>,
    /// Seed of target selection and of the sampling function.
    pub seed: u64,
    /// The emulated device.
    pub hw: HwConfig,
}

/// Progress notifications for a user interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DemoEvent<'a> {
    /// A phase starts; `total` units of work (0: unknown).
    Phase {
        /// What the phase does.
        name: &'a str,
        /// Units of work in it.
        total: u64,
        /// Whether the units are bytes (otherwise items).
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

/// Why the demo could not run (a mismatch is not an error: it is reported in [`DemoReport`]).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The configuration is unusable.
    #[error("invalid demo configuration: {0}")]
    Config(String),
    /// The graph could not be generated.
    #[error("graph generation failed: {0}")]
    Rmat(#[from] RmatError),
    /// The device could not be created or opened.
    #[error("device bring-up failed: {0}")]
    Device(#[from] DriverError),
    /// The graph could not be loaded.
    #[error("graph load failed: {0}")]
    Load(#[from] LoadError),
    /// A sampler failed on a minibatch.
    #[error("{sampler} failed on minibatch {batch}: {source}")]
    Sample {
        /// Which sampler.
        sampler: &'static str,
        /// Which minibatch.
        batch: u32,
        /// Why.
        source: SamplerError,
    },
}

/// The first minibatch on which two samplers disagreed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The minibatch index.
    pub batch: u32,
    /// The sampler compared against the reference (or against the other device sampler).
    pub sampler: &'static str,
    /// The sampler it was compared with.
    pub against: &'static str,
    /// Sizes of the two subgraphs.
    pub sizes_bytes: (usize, usize),
    /// First byte offset at which they differ.
    pub first_difference_bytes: usize,
    /// The command line that replays the run.
    pub replay: String,
}

/// What the demo measured.
#[derive(Clone, Debug)]
pub struct DemoReport {
    /// The configuration it ran with.
    pub config: DemoConfig,
    /// The generated graph's degree statistics.
    pub graph: DegreeStats,
    /// Where the graph lives on each device.
    pub descriptor: GraphDescriptor,
    /// What Identify reported.
    pub device: DeviceInfo,
    /// The in-memory reference sampler's statistics.
    pub reference: SamplerStats,
    /// The host-over-device sampler's statistics (sampling phase only).
    pub host: SamplerStats,
    /// The ISP sampler's statistics (sampling phase only).
    pub isp: SamplerStats,
    /// FNV-1a 64 over every minibatch's subgraph bytes (the ISP ones), in order.
    pub checksum: u64,
    /// The first disagreement, if any.
    pub mismatch: Option<Mismatch>,
}

/// The sampling seed of minibatch `batch` under the run seed `seed`.
pub fn minibatch_seed(seed: u64, batch: u32) -> u64 {
    mix(seed ^ mix(u64::from(batch) + 1))
}

/// The targets of minibatch `batch`: `batch_size` nodes drawn from `0..node_count` with the run
/// seed, distinct while the graph has enough nodes (then the distinct draw repeats cyclically).
pub fn minibatch_targets(seed: u64, batch: u32, batch_size: u32, node_count: u64) -> Vec<u64> {
    let mut rng = SplitMix64::stream(seed, u64::from(batch));
    let distinct = u64::from(batch_size).min(node_count) as usize;
    let mut drawn: Vec<u64> = Vec::with_capacity(batch_size as usize);
    if distinct as u64 * 2 > node_count {
        let mut all: Vec<u64> = (0..node_count).collect();
        rng.shuffle(&mut all);
        drawn.extend_from_slice(&all[..distinct]);
    } else {
        let mut seen = HashSet::with_capacity(distinct);
        while drawn.len() < distinct {
            let v = rng.below(node_count);
            if seen.insert(v) {
                drawn.push(v);
            }
        }
    }
    let mut out = drawn.clone();
    while out.len() < batch_size as usize && !drawn.is_empty() {
        let need = batch_size as usize - out.len();
        out.extend_from_slice(&drawn[..need.min(drawn.len())]);
    }
    out
}

/// The index of the first differing byte of `a` and `b` (their common length if one is a prefix
/// of the other).
fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

impl DemoConfig {
    /// The `sagessd demo` arguments that reproduce this configuration (the hardware description
    /// is named by `config_arg`, e.g. a path, or `None` for the built-in Cosmos+).
    pub fn command_line(&self, config_arg: Option<&str>) -> String {
        let fanouts: Vec<String> = self.fanouts.iter().map(u16::to_string).collect();
        let mut s = format!(
            "sagessd demo --scale {} --edge-factor {} --graph-seed {} --batches {} --batch-size {} --fanouts {} --seed {}",
            self.scale,
            self.edge_factor,
            self.graph_seed,
            self.batches,
            self.batch_size,
            fanouts.join(","),
            self.seed
        );
        if let Some(c) = config_arg {
            s.push_str(&format!(" --config {c}"));
        }
        s
    }

    fn validate(&self) -> Result<(), DemoError> {
        if self.batches == 0 {
            return Err(DemoError::Config("--batches must be at least 1".into()));
        }
        if self.batch_size == 0 {
            return Err(DemoError::Config("--batch-size must be at least 1".into()));
        }
        if self.fanouts.is_empty() || self.fanouts.len() > sagessd_abi::ns_config::MAX_LAYERS {
            return Err(DemoError::Config(format!(
                "--fanouts needs 1..={} layers",
                sagessd_abi::ns_config::MAX_LAYERS
            )));
        }
        if self.fanouts.contains(&0) {
            return Err(DemoError::Config("every fanout must be at least 1".into()));
        }
        Ok(())
    }
}

fn open_device(hw: &HwConfig) -> Result<Device<LocalTransport>, DemoError> {
    let transport = LocalTransport::from_config(hw).map_err(DriverError::from)?;
    Ok(Device::open(transport)?)
}

/// Runs the demo. `replay_config_arg` names the hardware description in the replay command
/// printed on a mismatch.
pub fn run(
    config: &DemoConfig,
    replay_config_arg: Option<&str>,
    events: &mut dyn FnMut(DemoEvent<'_>),
) -> Result<DemoReport, DemoError> {
    config.validate()?;
    events(DemoEvent::Phase {
        name: "generating R-MAT graph",
        total: 0,
        bytes: false,
    });
    let graph: CsrGraph = generate(&RmatParams::graph500(
        config.scale,
        config.edge_factor,
        config.graph_seed,
    ))?;
    events(DemoEvent::PhaseDone);
    tracing::info!(
        nodes = graph.node_count(),
        edges = graph.edge_count(),
        "graph generated"
    );

    let mut devices = Vec::with_capacity(2);
    let mut descriptor = None;
    for name in [
        "loading graph (host-over-device device)",
        "loading graph (ISP device)",
    ] {
        let mut device = open_device(&config.hw)?;
        let bs = u64::from(device.info().block_size_bytes);
        let total = crate::load::plan_layout(&graph, 0, bs as u32);
        let total_bytes = (total.indptr.block_count + total.indices.block_count) * bs;
        events(DemoEvent::Phase {
            name,
            total: total_bytes,
            bytes: true,
        });
        let d = load_graph_with_progress(&mut device, &graph, 0, &mut |done, _| {
            events(DemoEvent::Progress { done })
        })?;
        events(DemoEvent::PhaseDone);
        // Sample from a cold device: the pages the load left in the controller's DRAM would
        // otherwise serve the first minibatches without touching NAND.
        device.transport_mut().ssd_mut().drop_caches();
        descriptor = Some(d);
        devices.push(device);
    }
    let descriptor = descriptor.expect("two devices loaded");
    let isp_device = devices.pop().expect("two devices");
    let host_device = devices.pop().expect("two devices");
    let device_info = host_device.info().clone();
    // Refuse up front what the device would refuse (it reports its limits in Identify), rather
    // than failing after the host sampler has run.
    if let Some(limits) = device_info.limits {
        if u64::from(config.batch_size) > u64::from(limits.max_targets) {
            return Err(DemoError::Config(format!(
                "--batch-size {} exceeds the device's {} targets per NS_config",
                config.batch_size, limits.max_targets
            )));
        }
        if let Some(f) = config.fanouts.iter().find(|f| **f > limits.max_fanout) {
            return Err(DemoError::Config(format!(
                "fanout {f} exceeds the device's maximum fanout {}",
                limits.max_fanout
            )));
        }
    }
    if descriptor.node_count == 0 {
        return Err(DemoError::Config("empty graph".into()));
    }

    let mut reference = ReferenceSampler::new(&graph);
    let mut host = HostDeviceSampler::new(host_device, descriptor);
    let mut isp = IspSampler::new(isp_device);

    events(DemoEvent::Phase {
        name: "sampling minibatches",
        total: u64::from(config.batches),
        bytes: false,
    });
    let mut checksum = FNV_OFFSET;
    let mut mismatch = None;
    for batch in 0..config.batches {
        let targets = minibatch_targets(config.seed, batch, config.batch_size, graph.node_count());
        let seed = minibatch_seed(config.seed, batch);
        let run_one = |s: &mut dyn Sampler| {
            s.sample(seed, &config.fanouts, &targets)
                .map_err(|source| DemoError::Sample {
                    sampler: s.name(),
                    batch,
                    source,
                })
        };
        let r = run_one(&mut reference)?;
        let h = run_one(&mut host)?;
        let i = run_one(&mut isp)?;
        checksum = fnv1a(checksum, i.as_bytes());
        if mismatch.is_none() {
            for (s, against, a, b) in [
                (host.name(), reference.name(), &h, &r),
                (isp.name(), reference.name(), &i, &r),
                (isp.name(), host.name(), &i, &h),
            ] {
                if a != b {
                    mismatch = Some(Mismatch {
                        batch,
                        sampler: s,
                        against,
                        sizes_bytes: (a.as_bytes().len(), b.as_bytes().len()),
                        first_difference_bytes: first_difference(a.as_bytes(), b.as_bytes()),
                        replay: config.command_line(replay_config_arg),
                    });
                    break;
                }
            }
        }
        events(DemoEvent::Progress {
            done: u64::from(batch) + 1,
        });
    }
    events(DemoEvent::PhaseDone);
    for (name, ssd) in [
        (host.name(), host.device().transport().ssd()),
        (isp.name(), isp.device().transport().ssd()),
    ] {
        let s = ssd.stats();
        tracing::info!(
            mode = name,
            core_busy_ns = s.core_busy_ns,
            firmware_calls = s.firmware_calls,
            work = ?s.work,
            "device statistics since creation (load included):\n{s}"
        );
    }

    Ok(DemoReport {
        config: config.clone(),
        graph: graph.degree_stats(),
        descriptor,
        device: device_info,
        reference: reference.stats(),
        host: host.stats(),
        isp: isp.stats(),
        checksum,
        mismatch,
    })
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

/// Formats nanoseconds as milliseconds with three decimals.
fn ms(ns: f64) -> String {
    format!("{:.3} ms", ns / 1e6)
}

impl DemoReport {
    /// Whether every minibatch was byte-identical across the three samplers.
    pub fn identical(&self) -> bool {
        self.mismatch.is_none()
    }

    /// Modelled time per minibatch of a device sampler, in nanoseconds.
    pub fn time_per_minibatch_ns(stats: &SamplerStats) -> Option<f64> {
        let t = stats.modelled_time_ns?;
        (stats.minibatches > 0).then(|| t as f64 / stats.minibatches as f64)
    }

    /// Host-over-device modelled time divided by ISP modelled time.
    pub fn isp_speedup(&self) -> Option<f64> {
        let h = Self::time_per_minibatch_ns(&self.host)?;
        let i = Self::time_per_minibatch_ns(&self.isp)?;
        (i > 0.0).then(|| h / i)
    }

    /// The report as printed by `sagessd demo`: deterministic for a configuration (virtual time
    /// and counters only).
    pub fn render(&self) -> String {
        let c = &self.config;
        let g = &self.graph;
        let fanouts: Vec<String> = c.fanouts.iter().map(u16::to_string).collect();
        let mut out = String::new();
        out.push_str(&format!(
            "graph: R-MAT scale {} edge factor {} seed {}: {} nodes, {} stored edges (symmetric), degree max {} mean {:.2} median {}, {} isolated\n",
            c.scale, c.edge_factor, c.graph_seed, g.node_count, g.edge_count, g.max, g.mean, g.median, g.isolated
        ));
        let bs = u64::from(self.device.block_size_bytes);
        let graph_bytes =
            (self.descriptor.indptr.block_count + self.descriptor.indices.block_count) * bs;
        let buffer_bytes =
            u64::from(c.hw.firmware.page_buffer_pages) * u64::from(c.hw.nand.page_size_bytes);
        out.push_str(&format!(
            "device: {} ({} LBAs of {} B, max transfer {}); graph at LBAs {}..{} (indptr) and {}..{} (indices), {}\n",
            c.hw.device.name,
            self.device.block_count,
            bs,
            human_bytes(u64::from(self.device.max_transfer_bytes)),
            self.descriptor.indptr.slba,
            self.descriptor.indptr.slba + self.descriptor.indptr.block_count,
            self.descriptor.indices.slba,
            self.descriptor.indices.slba + self.descriptor.indices.block_count,
            human_bytes(graph_bytes),
        ));
        out.push_str(&format!(
            "graph vs device DRAM page buffer: {} vs {} ({}); a larger --scale makes both modes read NAND throughout\n",
            human_bytes(graph_bytes),
            human_bytes(buffer_bytes),
            if graph_bytes <= buffer_bytes {
                "the graph fits: after first touch, both modes are served from controller DRAM"
            } else {
                "the graph does not fit: pages are evicted and read from NAND again"
            },
        ));
        out.push_str(&format!(
            "workload: {} minibatches × {} targets, fanouts {}, seed {}; each mode on its own freshly loaded device \
             (identical hardware description and load sequence, controller DRAM page buffer emptied \
             after the load), sampling phase only\n\n",
            c.batches,
            c.batch_size,
            fanouts.join(","),
            c.seed
        ));
        let header = [
            "mode",
            "time/minibatch",
            "NVMe cmds",
            "PCIe host→dev",
            "PCIe dev→host",
            "flash pages read",
        ];
        let mut rows: Vec<[String; 6]> = Vec::new();
        for (name, s) in [
            ("host-over-device", &self.host),
            ("ISP (in-storage)", &self.isp),
        ] {
            let (h2c, c2h) = match s.device {
                Some(d) => (d.pcie_h2c_bytes, d.pcie_c2h_bytes),
                None => (s.driver.h2c_bytes, s.driver.c2h_bytes),
            };
            rows.push([
                name.to_string(),
                Self::time_per_minibatch_ns(s).map_or("n/a".into(), ms),
                s.driver.commands.to_string(),
                human_bytes(h2c),
                human_bytes(c2h),
                s.device
                    .map_or("n/a".into(), |d| d.nand_pages_read.to_string()),
            ]);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].chars().count())
                    .chain([header[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| -> String {
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
            "time: modelled (virtual) time per minibatch, first submission to last completion: NVMe queues, \
             PCIe link, firmware cores and NAND; the host CPU's own sampling work is not modelled\n",
        );
        out.push_str(&format!(
            "NVMe commands, PCIe payload bytes (SQEs and CQEs included) and flash pages read: totals over {} minibatches\n",
            c.batches
        ));
        match self.isp_speedup() {
            Some(x) => out.push_str(&format!("ISP speedup (modelled time): {x:.2}x\n")),
            None => out.push_str("ISP speedup (modelled time): n/a\n"),
        }
        let subgraph_avg = self
            .isp
            .subgraph_bytes
            .checked_div(self.isp.minibatches)
            .unwrap_or(0);
        out.push_str(&format!(
            "subgraphs: {} nodes, {} edges, {} on average per minibatch\n",
            self.isp.nodes / self.isp.minibatches.max(1),
            self.isp.edges / self.isp.minibatches.max(1),
            human_bytes(subgraph_avg)
        ));
        match &self.mismatch {
            None => out.push_str(&format!(
                "samples identical: yes ({} minibatches, checksum {:#018x})\n",
                c.batches, self.checksum
            )),
            Some(m) => out.push_str(&format!(
                "samples identical: NO — minibatch {}: {} differs from {} at byte {} (sizes {} vs {} bytes); replay: {}\n",
                m.batch,
                m.sampler,
                m.against,
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

    #[test]
    fn targets_are_deterministic_distinct_and_in_range() {
        let a = minibatch_targets(3, 0, 100, 1000);
        assert_eq!(a, minibatch_targets(3, 0, 100, 1000));
        assert_ne!(a, minibatch_targets(3, 1, 100, 1000));
        assert_eq!(a.len(), 100);
        assert_eq!(a.iter().collect::<HashSet<_>>().len(), 100);
        assert!(a.iter().all(|t| *t < 1000));
        // More targets than nodes: every node once, then repeats.
        let b = minibatch_targets(3, 0, 10, 4);
        assert_eq!(b.len(), 10);
        assert_eq!(b[..4].iter().collect::<HashSet<_>>().len(), 4);
        assert_eq!(&b[4..8], &b[..4]);
        // The dense path (more than half the nodes).
        let c = minibatch_targets(3, 2, 60, 100);
        assert_eq!(c.iter().collect::<HashSet<_>>().len(), 60);
    }

    #[test]
    fn human_bytes_formats() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(3 << 20), "3.00 MiB");
    }
    fn small_config() -> DemoConfig {
        DemoConfig {
            scale: 9,
            edge_factor: 8,
            graph_seed: 3,
            batches: 3,
            batch_size: 32,
            fanouts: vec![5, 5],
            seed: 11,
            hw: HwConfig::cosmos_plus(),
        }
    }

    #[test]
    fn demo_is_identical_and_deterministic() {
        let mut phases = Vec::new();
        let a = run(&small_config(), None, &mut |e| {
            if let DemoEvent::Phase { name, .. } = e {
                phases.push(name.to_string())
            }
        })
        .unwrap();
        assert!(a.identical(), "{:?}", a.mismatch);
        assert_eq!(phases.len(), 4);
        let b = run(&small_config(), None, &mut |_| {}).unwrap();
        assert_eq!(a.render(), b.render());
        let text = a.render();
        assert!(
            text.contains("samples identical: yes (3 minibatches"),
            "{text}"
        );
        assert!(text.contains("ISP speedup"), "{text}");
        assert_eq!(a.isp.driver.commands, 6);
        assert!(a.isp_speedup().is_some());
        // A mismatch is reported with its minibatch and the replay command.
        let mut bad = a.clone();
        bad.mismatch = Some(Mismatch {
            batch: 2,
            sampler: "ISP",
            against: "in-memory",
            sizes_bytes: (10, 12),
            first_difference_bytes: 4,
            replay: small_config().command_line(None),
        });
        assert!(!bad.identical());
        let text = bad.render();
        assert!(
            text.contains(
                "samples identical: NO — minibatch 2: ISP differs from in-memory at byte 4"
            ),
            "{text}"
        );
        assert!(text.contains("replay: sagessd demo --scale 9"), "{text}");
    }

    #[test]
    fn bad_configurations_are_refused() {
        for patch in [
            |c: &mut DemoConfig| c.batches = 0,
            |c: &mut DemoConfig| c.batch_size = 0,
            |c: &mut DemoConfig| c.fanouts.clear(),
            |c: &mut DemoConfig| c.fanouts = vec![1; 5],
            |c: &mut DemoConfig| c.fanouts = vec![3, 0],
        ] {
            let mut c = small_config();
            patch(&mut c);
            assert!(matches!(
                run(&c, None, &mut |_| {}),
                Err(DemoError::Config(_))
            ));
        }
        let c = DemoConfig {
            scale: 0,
            ..small_config()
        };
        assert!(matches!(
            run(&c, None, &mut |_| {}),
            Err(DemoError::Rmat(_))
        ));
    }

    #[test]
    fn the_replay_command_names_every_flag() {
        assert_eq!(
            small_config().command_line(Some("x.toml")),
            "sagessd demo --scale 9 --edge-factor 8 --graph-seed 3 --batches 3 --batch-size 32 \
             --fanouts 5,5 --seed 11 --config x.toml"
        );
    }
}
