//! SmartSAGE's neighbour sampling figures: one worker's sampling time with mmap, direct I/O
//! (SmartSAGE(SW)) and in-storage sampling (SmartSAGE(HW/SW)) (Fig. 14), ISP as the minibatch is
//! split over more NS_configs (Fig. 15), the same with 1…N workers contending for the device
//! (Fig. 16), and ISP's speedup over direct I/O as workers are added (Fig. 17); each at several
//! ratios r of graph size to host page cache, since the seed's graphs are many times larger than
//! host memory.
//!
//! The regime is the seeds' own: a graph of ogbn-papers100M's size (`papers100m`, 7.79 GiB of
//! CSR that the emulated flash computes) on the hardware description's own controller (its DRAM,
//! page buffer and ISP window, never scaled), with only the host page cache varying: graph/r.
//! Direct I/O and in-storage sampling do not read through the page cache, so they run once per
//! worker count and their rows repeat at every r; mmap runs at every r
//! ([`CompareReport::merge_page_cache_free`] checks that the runs compare the same thing).
//! Every figure is modelled (virtual time of the hardware description), so two runs write
//! byte-identical CSVs.

use sagessd::compare::{self, CompareConfig, CompareReport, ModeResult};
use sagessd_emulator::HwConfig;
use sagessd_runtime::graph_spec::GraphSpec;
use sagessd_runtime::registry::SamplerKind;

use super::paper;
use super::plot::{Figure, Series};
use crate::record::Record;

/// The sweep: the graph, the minibatches, the page-cache ratios and worker counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// The graph on the device.
    pub graph: GraphSpec,
    /// Minibatches of one design point.
    pub batches: u32,
    /// Minibatches each design point samples first and does not count (page cache and page
    /// buffer warm, as in a run of many minibatches: a cold page cache makes mmap's first
    /// minibatches at r = 1 seven times slower than its later ones).
    pub warmup_batches: u32,
    /// Targets per minibatch.
    pub batch_size: u32,
    /// Fanouts, hop order.
    pub fanouts: Vec<u16>,
    /// Graph bytes over host page-cache bytes.
    pub ratios: Vec<u32>,
    /// Host worker counts.
    pub workers: Vec<usize>,
    /// Fig. 15: targets per NS_config, from the whole minibatch down (each must divide the
    /// batch size).
    pub targets_per_config: Vec<u32>,
    /// Fig. 15's ratio, for its mmap baseline (one of `ratios`; none: no Fig. 15).
    pub coalescing_ratio: u32,
}

impl Sweep {
    /// The full sweep: papers100M's size, SmartSAGE's minibatches (1,024 targets, fanouts
    /// 25,10), r = 1 to 16.
    pub fn full() -> Self {
        Self {
            graph: GraphSpec::parse("papers100m").expect("a valid graph word"),
            batches: 16,
            warmup_batches: 32,
            batch_size: 1024,
            fanouts: vec![25, 10],
            ratios: vec![1, 2, 4, 8, 16],
            workers: vec![1, 4, 8],
            targets_per_config: vec![1024, 256, 64, 16, 4, 1],
            coalescing_ratio: 8,
        }
    }

    /// The README's main job (`sagessd demo`): a synthetic graph of 16 Mi nodes (1.12 GiB of
    /// CSR) at r = 8, eight workers, no Fig. 15.
    pub fn demo() -> Self {
        Self {
            graph: GraphSpec::parse("synthetic:16M").expect("a valid graph word"),
            batches: 16,
            // Cold, to keep the demo within two minutes. At r = 8 that flatters mmap: in the
            // papers100M sweep a warm page cache made it 14 % slower (docs/experiments.md).
            warmup_batches: 0,
            batch_size: 1024,
            fanouts: vec![25, 10],
            ratios: vec![8],
            workers: vec![8],
            targets_per_config: Vec::new(),
            coalescing_ratio: 0,
        }
    }

    /// The reduced sweep the test suite runs (every output, small numbers): a synthetic graph
    /// of 400,000 nodes (about 28 MiB, larger than the controller's page buffer).
    pub fn quick() -> Self {
        Self {
            graph: GraphSpec::parse("synthetic:400000").expect("a valid graph word"),
            batches: 2,
            warmup_batches: 2,
            batch_size: 256,
            fanouts: vec![25, 10],
            ratios: vec![1, 8],
            workers: vec![1, 2],
            targets_per_config: vec![256, 16],
            coalescing_ratio: 8,
        }
    }
}

/// One device at one page-cache ratio: what the comparison measured.
#[derive(Debug)]
pub struct Point {
    /// The device's name.
    pub device: String,
    /// Graph bytes over host page-cache bytes.
    pub ratio: u32,
    /// The comparison (its hardware's `host.page_cache_bytes` is this ratio's page cache).
    pub report: CompareReport,
    /// Fig. 15, at the coalescing ratio only: for each targets-per-NS_config, in-storage
    /// sampling's modelled time per whole minibatch (one worker).
    pub coalescing: Vec<(u32, f64)>,
}

impl Point {
    /// Fig. 15's points: targets per NS_config, in-storage sampling's modelled time per whole
    /// minibatch, and its speedup over one mmap worker (when mmap ran).
    pub fn coalescing_speedups(&self) -> impl Iterator<Item = (u32, f64, Option<f64>)> + '_ {
        let mmap = self
            .report
            .result(SamplerKind::Mmap, 1)
            .map(ModeResult::time_per_minibatch_ns);
        self.coalescing
            .iter()
            .map(move |&(g, ns)| (g, ns, mmap.map(|m| m / ns)))
    }
}

/// `hw` with the host page cache holding `1/ratio` of `graph_bytes` (whole 4 KiB pages); the
/// controller is the description's own.
pub fn with_page_cache(hw: &HwConfig, graph_bytes: u64, ratio: u32) -> HwConfig {
    let mut hw = hw.clone();
    let bytes = graph_bytes / u64::from(ratio.max(1));
    hw.host.page_cache_bytes = (bytes / 4096).max(1) * 4096;
    hw
}

/// Runs the sweep on `hw`: direct I/O and in-storage sampling once (every worker count), then
/// mmap at each ratio's page cache, merged into one comparison per ratio.
pub fn run(
    hw: &HwConfig,
    sweep: &Sweep,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<Point>> {
    let config =
        |hw: HwConfig, batches: u32, modes: Vec<SamplerKind>, workers: Vec<usize>| CompareConfig {
            graph: sweep.graph.clone(),
            batches,
            warmup_batches: sweep.warmup_batches,
            batch_size: sweep.batch_size,
            fanouts: sweep.fanouts.clone(),
            seed: 1,
            hw,
            modes,
            workers,
            hyperbatch: sagessd_runtime::host_io::DEFAULT_HYPERBATCH,
        };
    // In storage, a worker beyond the device's sampling slots waits for one (the device
    // refuses its NS_SUBMIT until another job is collected).
    let workers = sweep.workers.clone();
    let checked = |report: CompareReport, what: &str| -> anyhow::Result<CompareReport> {
        anyhow::ensure!(
            report.identical(),
            "the samples of {} ({what}) differ from the in-memory reference",
            hw.device.name
        );
        Ok(report)
    };
    progress(&format!(
        "  direct I/O and in-storage sampling, workers {workers:?}"
    ));
    let free = checked(
        compare::run(
            &config(
                hw.clone(),
                sweep.batches,
                vec![SamplerKind::Direct, SamplerKind::Isp],
                workers.clone(),
            ),
            None,
            &mut |_| {},
        )?,
        "direct and ISP",
    )?;
    let graph_bytes = free.graph_bytes();
    let mut points = Vec::new();
    for &ratio in &sweep.ratios {
        progress(&format!("  mmap at r = {ratio}"));
        let at_ratio = with_page_cache(hw, graph_bytes, ratio);
        let mut report = checked(
            compare::run(
                &config(
                    at_ratio.clone(),
                    sweep.batches,
                    vec![SamplerKind::Mmap],
                    workers.clone(),
                ),
                None,
                &mut |_| {},
            )?,
            &format!("mmap at r = {ratio}"),
        )?;
        report.merge_page_cache_free(free.clone())?;
        let coalescing = if ratio == sweep.coalescing_ratio {
            coalescing(&at_ratio, sweep, &config)?
        } else {
            Vec::new()
        };
        points.push(Point {
            device: hw.device.name.clone(),
            ratio,
            report,
            coalescing,
        });
    }
    Ok(points)
}

/// Fig. 15: in-storage sampling with `g` targets per NS_config for each `g` of the sweep, one
/// worker. A minibatch of B targets becomes B/g NS_configs, each sampled and collected before the
/// next: modelled as B/g times as many requests of g random targets each (as the whole
/// minibatch's targets are random, its g-target slices are too), every subgraph checked against
/// the in-memory reference. Returns (g, modelled time per whole minibatch).
fn coalescing(
    hw: &HwConfig,
    sweep: &Sweep,
    config: &dyn Fn(HwConfig, u32, Vec<SamplerKind>, Vec<usize>) -> CompareConfig,
) -> anyhow::Result<Vec<(u32, f64)>> {
    let batch = sweep.batch_size;
    let mut out = Vec::new();
    for &g in &sweep.targets_per_config {
        anyhow::ensure!(
            g > 0 && batch.is_multiple_of(g),
            "{g} targets per NS_config do not divide minibatches of {batch}"
        );
        let per_batch = batch / g;
        let mut c = config(
            hw.clone(),
            sweep.batches * per_batch,
            vec![SamplerKind::Isp],
            vec![1],
        );
        c.batch_size = g;
        let report = compare::run(&c, None, &mut |_| {})?;
        anyhow::ensure!(
            report.identical(),
            "in-storage samples of {g}-target NS_configs differ from the in-memory reference"
        );
        let isp = report
            .result(SamplerKind::Isp, 1)
            .ok_or_else(|| anyhow::anyhow!("no ISP result"))?;
        out.push((g, isp.time_per_minibatch_ns() * f64::from(per_batch)));
    }
    Ok(out)
}

/// Fig. 15: in-storage sampling's speedup over mmap (one worker, whole minibatches) against
/// the targets per NS_config.
pub fn fig15(points: &[Point]) -> Vec<Record> {
    let mut rows = Vec::new();
    for p in points {
        for (g, ns, speedup) in p.coalescing_speedups() {
            rows.push(
                point_head("smartsage.fig15", p)
                    .with("targets_per_ns_config", g)
                    .with(
                        "ns_configs_per_minibatch",
                        p.report.config.batch_size / g.max(1),
                    )
                    .with("time_per_minibatch_ns", ns)
                    .with("hwsw_speedup_vs_mmap", speedup)
                    .with("timing", "modelled"),
            );
        }
    }
    rows
}

/// Fig. 15 of one device: ISP's speedup over mmap against the targets per NS_config.
pub fn fig15_plot(points: &[Point]) -> Figure {
    let series = points
        .iter()
        .filter(|p| !p.coalescing.is_empty())
        .map(|p| Series {
            label: format!("SmartSAGE(HW/SW), ratio {}, ours", p.ratio),
            points: p
                .coalescing_speedups()
                .map(|(g, _, x)| (f64::from(g).log2(), x.unwrap_or(f64::NAN)))
                .collect(),
            paper: false,
        })
        .collect();
    Figure {
        title: format!(
            "SmartSAGE Fig. 15 on {}: coalescing granularity, one worker (modelled)",
            points.first().map_or("", |p| p.device.as_str())
        ),
        x_label: "targets per NS_config, log2 (0 = one target; the whole minibatch at the right)"
            .into(),
        y_label: "SmartSAGE(HW/SW) speedup over SSD(mmap) (×)".into(),
        series,
    }
}

/// The paper's names of the modes.
pub fn design(mode: SamplerKind) -> &'static str {
    match mode {
        SamplerKind::Mmap => "SSD(mmap)",
        SamplerKind::Direct => "SmartSAGE(SW)",
        SamplerKind::Isp => "SmartSAGE(HW/SW)",
        _ => mode.name(),
    }
}

/// A row of `kind` about point `p`: its device, r and memory regime.
fn point_head(kind: &'static str, p: &Point) -> Record {
    crate::compare_rows::regime_fields(
        Record::new(kind)
            .with("device", p.device.as_str())
            .with("r", p.ratio),
        &p.report,
    )
}

fn mode_row(kind: &'static str, p: &Point, r: &ModeResult) -> Record {
    let head = point_head(kind, p).with("design", design(r.mode));
    crate::compare_rows::mode_fields(head, &p.report, r)
}

/// `kind` rows of every design at the worker counts `keep` accepts.
fn mode_rows(points: &[Point], kind: &'static str, keep: fn(usize) -> bool) -> Vec<Record> {
    points
        .iter()
        .flat_map(|p| {
            p.report
                .results
                .iter()
                .filter(move |r| keep(r.workers))
                .map(move |r| mode_row(kind, p, r))
        })
        .collect()
}

/// Fig. 14: one worker, every design.
pub fn fig14(points: &[Point]) -> Vec<Record> {
    mode_rows(points, "smartsage.fig14", |w| w == 1)
}

/// Fig. 16: every worker count, every design.
pub fn fig16(points: &[Point]) -> Vec<Record> {
    mode_rows(points, "smartsage.fig16", |_| true)
}

/// Fig. 17: ISP's speedup over direct I/O per worker count.
pub fn fig17(points: &[Point]) -> Vec<Record> {
    let mut rows = Vec::new();
    for p in points {
        for &w in &p.report.config.workers {
            rows.push(point_head("smartsage.fig17", p).with("workers", w).with(
                "hwsw_speedup_vs_sw",
                p.report.isp_speedup(SamplerKind::Direct, w),
            ));
        }
    }
    rows
}

/// Our value of each of the paper's keys for one device's points: means and maxima over the
/// memory ratios (the paper's are over its datasets, each at its own ratio), and for "several
/// workers" over every worker count above one.
pub fn ours(points: &[Point], key: &str) -> Option<f64> {
    use SamplerKind::{Direct, Isp, Mmap};
    // `mode`'s speedup over `over` at every worker count of the points, one worker or several.
    let speedups = |mode: SamplerKind, over: SamplerKind, one_worker: bool| -> Vec<f64> {
        points
            .iter()
            .flat_map(|p| {
                p.report
                    .config
                    .workers
                    .iter()
                    .filter(move |&&w| (w == 1) == one_worker)
                    .filter_map(move |&w| match (mode, over) {
                        (Isp, host) => p.report.isp_speedup(host, w),
                        (_, Mmap) => p.report.speedup_vs_mmap(p.report.result(mode, w)?),
                        _ => None,
                    })
            })
            .collect()
    };
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let max = |v: Vec<f64>| v.into_iter().reduce(f64::max);
    match key {
        "fig14.sw_vs_mmap.mean" => mean(speedups(Direct, Mmap, true)),
        "fig14.hwsw_vs_mmap.mean" => mean(speedups(Isp, Mmap, true)),
        "fig14.hwsw_vs_mmap.max" => max(speedups(Isp, Mmap, true)),
        "fig14.hwsw_vs_sw.mean" => mean(speedups(Isp, Direct, true)),
        "fig14.hwsw_vs_sw.max" => max(speedups(Isp, Direct, true)),
        "fig16.hwsw_vs_mmap.mean" => mean(speedups(Isp, Mmap, false)),
        "fig16.hwsw_vs_mmap.max" => max(speedups(Isp, Mmap, false)),
        _ => None,
    }
}

fn ratios_text(points: &[Point]) -> String {
    points
        .iter()
        .map(|p| p.ratio.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn paper_line(key: &str, label: &str) -> Option<Series> {
    let v = paper::SMARTSAGE.iter().find(|v| v.key == key)?;
    Some(Series {
        label: format!("{label}, paper ({}: {}×)", v.figure, v.value),
        points: vec![(f64::NAN, v.value)],
        paper: true,
    })
}

/// Fig. 14 of one device: speedup over mmap against the memory ratio, one worker.
pub fn fig14_plot(points: &[Point]) -> Figure {
    let line = |mode: SamplerKind| Series {
        label: format!("{}, ours", design(mode)),
        points: points
            .iter()
            .filter_map(|p| {
                let r = p.report.result(mode, 1)?;
                Some((f64::from(p.ratio), p.report.speedup_vs_mmap(r)?))
            })
            .collect(),
        paper: false,
    };
    let mut series = vec![line(SamplerKind::Direct), line(SamplerKind::Isp)];
    series.extend(paper_line("fig14.sw_vs_mmap.mean", "SmartSAGE(SW)"));
    series.extend(paper_line("fig14.hwsw_vs_mmap.mean", "SmartSAGE(HW/SW)"));
    Figure {
        title: format!(
            "SmartSAGE Fig. 14 on {}: one worker, graph-to-memory ratios {} (modelled)",
            points.first().map_or("", |p| p.device.as_str()),
            ratios_text(points)
        ),
        x_label: "graph-to-memory ratio (graph bytes / host page cache bytes)".into(),
        y_label: "sampling speedup over SSD(mmap) (×)".into(),
        series,
    }
}

/// Fig. 16 (`isp_over` = Mmap) or Fig. 17 (`isp_over` = Direct) of one device: ISP's speedup
/// against the worker count, a line per memory ratio.
pub fn workers_plot(points: &[Point], isp_over: SamplerKind) -> Figure {
    let mut series: Vec<Series> = points
        .iter()
        .map(|p| Series {
            label: format!("SmartSAGE(HW/SW), ratio {}", p.ratio),
            points: p
                .report
                .config
                .workers
                .iter()
                .filter_map(|&w| Some((w as f64, p.report.isp_speedup(isp_over, w)?)))
                .collect(),
            paper: false,
        })
        .collect();
    let (figure, over) = match isp_over {
        SamplerKind::Mmap => {
            series.extend(paper_line("fig16.hwsw_vs_mmap.mean", "several workers"));
            ("Fig. 16", "SSD(mmap)")
        }
        _ => ("Fig. 17", "SmartSAGE(SW)"),
    };
    Figure {
        title: format!(
            "SmartSAGE {figure} on {}: workers, graph-to-memory ratios {} (modelled)",
            points.first().map_or("", |p| p.device.as_str()),
            ratios_text(points)
        ),
        x_label: "host workers".into(),
        y_label: format!("SmartSAGE(HW/SW) speedup over {over} (×)"),
        series,
    }
}

/// What the model can tell about a point: where ISP's and the host's time goes.
pub fn diagnosis(p: &Point) -> String {
    let one = |m| p.report.result(m, 1);
    let mut parts = Vec::new();
    if let (Some(mmap), Some(direct)) = (one(SamplerKind::Mmap), one(SamplerKind::Direct)) {
        parts.push(format!(
            "mmap reads {:.1}× the NAND pages direct I/O reads ({} vs {}; page-cache hit ratio {:.1} %, fault read-around up to {} pages into a cache of 1/{} of the graph)",
            mmap.nand_pages_read as f64 / direct.nand_pages_read.max(1) as f64,
            mmap.nand_pages_read,
            direct.nand_pages_read,
            100.0 * mmap.page_cache_hit_rate.unwrap_or(0.0),
            p.report.config.hw.host.ra_pages(),
            p.ratio
        ));
    }
    // One worker has one job in flight: it runs on lane 0, on the firmware core when sampling
    // time-shares the cores, on the first ISP core otherwise.
    let isp_cores = p.report.config.hw.cores.isp_cores;
    if let Some(isp) = one(SamplerKind::Isp) {
        let (where_, busy) = if isp_cores == 0 {
            ("the firmware core it time-shares", isp.core_utilisation())
        } else {
            // The one job's core: all the ISP cores' busy time is its.
            (
                "its ISP core",
                isp.isp_core_busy_ns as f64 / isp.makespan_ns.max(1) as f64,
            )
        };
        parts.push(format!(
            "in-storage sampling keeps {where_} busy {:.0} % of its time (firmware core {:.0} %): {}",
            100.0 * busy,
            100.0 * isp.core_utilisation(),
            if busy > 0.7 {
                "bound by the embedded core's sampling compute"
            } else {
                "bound by flash and transfers more than by the core"
            }
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_cache_is_one_rth_of_the_graph_and_the_controller_is_untouched() {
        let hw = HwConfig::cosmos_plus();
        let c = with_page_cache(&hw, 64 << 20, 8);
        assert_eq!(c.host.page_cache_bytes, 8 << 20);
        assert_eq!(c.firmware, hw.firmware);
        assert_eq!(
            with_page_cache(&hw, 64 << 20, 1 << 30)
                .host
                .page_cache_bytes,
            4096
        );
    }
}
