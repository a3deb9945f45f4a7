//! The `sagessd compare` experiment: the host sampling modes (mmap, direct I/O, io_uring-style
//! async I/O) and in-storage sampling (ISP), each with one or several host workers, on the same
//! emulated device model, checked byte for byte against the in-memory reference.
//!
//! Steps: generate the R-MAT graph of `sagessd demo` (same generator and flags); sample every
//! minibatch with the in-memory reference; then, per (workers, mode), build a fresh emulated SSD
//! from the hardware description, load the graph with the same WRITE sequence, empty the
//! controller's DRAM page buffer, and sample the same minibatches with a
//! [`HostIoSampler`] ([`HostIoSampler::run_workers`]: worker `w` takes minibatches `w`,
//! `w + N`, …). Every figure is virtual (modelled) time or a counter of the sampling phase;
//! nothing reads the wall clock, so two runs print the same report.
//!
//! Per mode the report gives: modelled time per minibatch (makespan / minibatches), speedup
//! against mmap with the same worker count, NVMe commands, PCIe payload bytes each way, flash
//! pages read, page-cache hit rate (mmap; direct and async bypass the page cache), embedded-core
//! utilisation (firmware core busy time / makespan, from `DeviceStats`), host CPU time charged
//! per minibatch, and the submission lag of the multi-worker scheduler.

use sagessd_emulator::{DeviceStats, HwConfig};
use sagessd_host_driver::{Device, DriverError, LocalTransport};

use crate::demo::{DemoError, DemoEvent, human_bytes, minibatch_seed, minibatch_targets};
use crate::graph::{CsrGraph, DegreeStats};
use crate::host_io::{HostIoMode, HostIoSampler, Request};
use crate::load::load_graph_with_progress;
use crate::rmat::{RmatParams, generate};
use crate::sampler::{FNV_OFFSET, ReferenceSampler, SampledSubgraph, Sampler, fnv1a};

/// Everything `sagessd compare` needs.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareConfig {
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
    /// The emulated device (and, in `[host]`, the host I/O stack).
    pub hw: HwConfig,
    /// The modes to run, in order.
    pub modes: Vec<HostIoMode>,
    /// The worker counts to run each mode with.
    pub workers: Vec<usize>,
}

/// One mode with one worker count.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeResult {
    /// The mode.
    pub mode: HostIoMode,
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
    /// Host CPU time charged by the host stack model, all workers.
    pub host_cpu_ns: u64,
    /// Total submission lag of the scheduler (0 with one worker).
    pub submit_lag_ns: u64,
    /// FNV-1a 64 over the completion times, in handling order.
    pub timeline_hash: u64,
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
}

/// The first minibatch on which a mode disagreed with the reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompareMismatch {
    /// The mode.
    pub mode: HostIoMode,
    /// Its worker count.
    pub workers: usize,
    /// The minibatch.
    pub batch: usize,
}

/// What `sagessd compare` measured.
#[derive(Clone, Debug)]
pub struct CompareReport {
    /// The configuration.
    pub config: CompareConfig,
    /// The graph's degree statistics.
    pub graph: DegreeStats,
    /// Bytes of the graph on the device (indptr + indices blocks).
    pub graph_bytes: u64,
    /// One entry per (workers, mode), workers-major.
    pub results: Vec<ModeResult>,
    /// FNV-1a 64 over the reference subgraphs.
    pub checksum: u64,
    /// The first disagreement, if any.
    pub mismatch: Option<CompareMismatch>,
}

fn validate(c: &CompareConfig) -> Result<(), DemoError> {
    let bad = |m: &str| Err(DemoError::Config(m.into()));
    if c.batches == 0 {
        return bad("--batches must be at least 1");
    }
    if c.batch_size == 0 {
        return bad("--batch-size must be at least 1");
    }
    if c.fanouts.is_empty()
        || c.fanouts.len() > sagessd_abi::ns_config::MAX_LAYERS
        || c.fanouts.contains(&0)
    {
        return bad("--fanouts needs 1..=4 layers, each at least 1");
    }
    if c.modes.is_empty() {
        return bad("--mode needs at least one mode");
    }
    if c.workers.is_empty() || c.workers.contains(&0) {
        return bad("--workers needs counts of at least 1");
    }
    Ok(())
}

fn loaded_device(
    hw: &HwConfig,
    graph: &CsrGraph,
    name: &str,
    events: &mut dyn FnMut(DemoEvent<'_>),
) -> Result<(Device<LocalTransport>, sagessd_abi::graph::GraphDescriptor), DemoError> {
    let transport = LocalTransport::from_config(hw).map_err(DriverError::from)?;
    let mut device = Device::open(transport)?;
    let bs = device.info().block_size_bytes;
    let plan = crate::load::plan_layout(graph, 0, bs);
    events(DemoEvent::Phase {
        name,
        total: (plan.indptr.block_count + plan.indices.block_count) * u64::from(bs),
        bytes: true,
    });
    let d = load_graph_with_progress(&mut device, graph, 0, &mut |done, _| {
        events(DemoEvent::Progress { done })
    })?;
    events(DemoEvent::PhaseDone);
    // Sample from a cold device, as `demo` does.
    device.transport_mut().ssd_mut().drop_caches();
    Ok((device, d))
}

/// Runs the comparison.
pub fn run(
    config: &CompareConfig,
    events: &mut dyn FnMut(DemoEvent<'_>),
) -> Result<CompareReport, DemoError> {
    validate(config)?;
    events(DemoEvent::Phase {
        name: "generating R-MAT graph",
        total: 0,
        bytes: false,
    });
    let graph = generate(&RmatParams::graph500(
        config.scale,
        config.edge_factor,
        config.graph_seed,
    ))?;
    events(DemoEvent::PhaseDone);
    let n = graph.node_count();
    let requests: Vec<Request> = (0..config.batches)
        .map(|b| Request {
            seed: minibatch_seed(config.seed, b),
            targets: minibatch_targets(config.seed, b, config.batch_size, n),
        })
        .collect();
    let mut reference = ReferenceSampler::new(&graph);
    let expected: Vec<SampledSubgraph> = requests
        .iter()
        .enumerate()
        .map(|(b, r)| {
            reference
                .sample(r.seed, &config.fanouts, &r.targets)
                .map_err(|source| DemoError::Sample {
                    sampler: "in-memory",
                    batch: b as u32,
                    source,
                })
        })
        .collect::<Result<_, _>>()?;
    let checksum = expected
        .iter()
        .fold(FNV_OFFSET, |h, s| fnv1a(h, s.as_bytes()));

    let mut results = Vec::new();
    let mut mismatch = None;
    let mut graph_bytes = 0;
    for &workers in &config.workers {
        for &mode in &config.modes {
            let (device, desc) = loaded_device(&config.hw, &graph, "loading graph", events)?;
            if let Some(limits) = device.info().limits
                && mode == HostIoMode::Isp
                && config.batch_size > limits.max_targets
            {
                return Err(DemoError::Config(format!(
                    "--batch-size {} exceeds the device's {} targets per NS_config",
                    config.batch_size, limits.max_targets
                )));
            }
            let bs = u64::from(device.info().block_size_bytes);
            graph_bytes = (desc.indptr.block_count + desc.indices.block_count) * bs;
            let before: DeviceStats = device.transport().ssd().stats();
            let mut s = HostIoSampler::new(device, desc, mode, config.hw.host.clone()).map_err(
                |source| DemoError::Sample {
                    sampler: mode.name(),
                    batch: 0,
                    source,
                },
            )?;
            events(DemoEvent::Phase {
                name: "sampling minibatches",
                total: 0,
                bytes: false,
            });
            let run = s
                .run_workers(workers, &config.fanouts, &requests)
                .map_err(|source| DemoError::Sample {
                    sampler: mode.name(),
                    batch: 0,
                    source,
                })?;
            events(DemoEvent::PhaseDone);
            if mismatch.is_none()
                && let Some(batch) = (0..expected.len()).find(|&b| run.subgraphs[b] != expected[b])
            {
                mismatch = Some(CompareMismatch {
                    mode,
                    workers,
                    batch,
                });
            }
            let after = s.device().transport().ssd().stats();
            let h = s.host_stats();
            results.push(ModeResult {
                mode,
                workers,
                minibatches: requests.len() as u64,
                makespan_ns: run.makespan_ns,
                commands: after.commands_submitted - before.commands_submitted,
                pcie_h2c_bytes: after.pcie_h2c_bytes - before.pcie_h2c_bytes,
                pcie_c2h_bytes: after.pcie_c2h_bytes - before.pcie_c2h_bytes,
                nand_pages_read: after.nand_pages_read - before.nand_pages_read,
                page_cache_hit_rate: (mode == HostIoMode::Mmap).then(|| h.page_cache.hit_rate()),
                core_busy_ns: after.core_busy_ns - before.core_busy_ns,
                host_cpu_ns: h.host_cpu_ns,
                submit_lag_ns: h.submit_lag_ns,
                timeline_hash: h.timeline_hash,
            });
        }
    }
    Ok(CompareReport {
        config: config.clone(),
        graph: graph.degree_stats(),
        graph_bytes,
        results,
        checksum,
        mismatch,
    })
}

impl CompareReport {
    /// The result for `mode` with `workers`, if it ran.
    pub fn result(&self, mode: HostIoMode, workers: usize) -> Option<&ModeResult> {
        self.results
            .iter()
            .find(|r| r.mode == mode && r.workers == workers)
    }

    /// Time per minibatch of mmap divided by that of `r` (same worker count), if mmap ran.
    pub fn speedup_vs_mmap(&self, r: &ModeResult) -> Option<f64> {
        let m = self.result(HostIoMode::Mmap, r.workers)?;
        Some(m.time_per_minibatch_ns() / r.time_per_minibatch_ns())
    }

    /// The report as `sagessd compare` prints it: deterministic (virtual time and counters).
    pub fn render(&self) -> String {
        let c = &self.config;
        let g = &self.graph;
        let fanouts: Vec<String> = c.fanouts.iter().map(u16::to_string).collect();
        let host = &c.hw.host;
        let mut out = String::new();
        out.push_str(&format!(
            "graph: R-MAT scale {} edge factor {} seed {}: {} nodes, {} stored edges, {} on the device\n",
            c.scale,
            c.edge_factor,
            c.graph_seed,
            g.node_count,
            g.edge_count,
            human_bytes(self.graph_bytes)
        ));
        out.push_str(&format!(
            "device: {}; controller page buffer {}; host page cache {}, readahead {}..{} pages, io_uring depth {}\n",
            c.hw.device.name,
            human_bytes(
                u64::from(c.hw.firmware.page_buffer_pages) * u64::from(c.hw.nand.page_size_bytes)
            ),
            human_bytes(host.page_cache_bytes),
            host.readahead_min_pages,
            host.readahead_max_pages,
            host.uring_queue_depth,
        ));
        out.push_str(&format!(
            "workload: {} minibatches × {} targets, fanouts {}, seed {}; each mode on its own freshly loaded device, controller page buffer emptied; sampling phase only\n\n",
            c.batches,
            c.batch_size,
            fanouts.join(","),
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
                    format!("{:.1}%", 100.0 * r.core_utilisation()),
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
             core util: firmware core busy time / makespan; host CPU/mb: host CPU time charged per minibatch (all workers)\n\
             sched lag: time commands reached the device later than their worker's clock, / makespan (a check: 0 when the interleaving is exact)\n",
        );
        match &self.mismatch {
            None => out.push_str(&format!(
                "samples identical to the in-memory reference: yes ({} minibatches × {} runs, checksum {:#018x})\n",
                c.batches,
                self.results.len(),
                self.checksum
            )),
            Some(m) => out.push_str(&format!(
                "samples identical to the in-memory reference: NO — {} with {} workers differs on minibatch {}\n",
                m.mode.name(),
                m.workers,
                m.batch
            )),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> CompareConfig {
        CompareConfig {
            scale: 10,
            edge_factor: 8,
            graph_seed: 3,
            batches: 6,
            batch_size: 64,
            fanouts: vec![5, 5],
            seed: 11,
            hw: HwConfig::cosmos_plus(),
            modes: HostIoMode::ALL.to_vec(),
            workers: vec![1, 3],
        }
    }

    #[test]
    fn compare_is_identical_and_deterministic() {
        let a = run(&small(), &mut |_| {}).unwrap();
        let b = run(&small(), &mut |_| {}).unwrap();
        assert!(a.mismatch.is_none(), "{:?}", a.mismatch);
        assert_eq!(a.results.len(), 8);
        assert_eq!(a.results, b.results);
        assert_eq!(a.render(), b.render());
        let text = a.render();
        assert!(
            text.contains("identical to the in-memory reference: yes"),
            "{text}"
        );
        let mmap = a.result(HostIoMode::Mmap, 1).unwrap();
        assert_eq!(a.speedup_vs_mmap(mmap), Some(1.0));
        assert!(mmap.page_cache_hit_rate.is_some());
        let isp = a.result(HostIoMode::Isp, 1).unwrap();
        assert_eq!(isp.commands, 2 * 6);
        assert!(isp.core_utilisation() > 0.0 && isp.core_utilisation() <= 1.0);
        for r in &a.results {
            assert!(r.makespan_ns > 0 && r.host_cpu_ns > 0, "{r:?}");
            // The scheduler interleaves workers and device completions exactly.
            assert_eq!(r.submit_lag_ns, 0, "{r:?}");
        }
    }

    #[test]
    fn bad_configurations_are_refused() {
        for patch in [
            |c: &mut CompareConfig| c.modes.clear(),
            |c: &mut CompareConfig| c.workers = vec![0],
            |c: &mut CompareConfig| c.batches = 0,
        ] {
            let mut c = small();
            patch(&mut c);
            assert!(matches!(run(&c, &mut |_| {}), Err(DemoError::Config(_))));
        }
    }
}
