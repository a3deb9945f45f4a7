//! The rows of a comparison (`sagessd compare`, and the experiments' sampling figures): one per
//! mode and worker count with its modelled figures, and the memory regime every row states.

use sagessd::compare::{CompareReport, ModeResult};

use crate::record::Record;

/// One `compare.mode` record per mode and worker count (modelled figures), then the
/// `compare.summary` record: the workload, the graph against the caches, and the verdict.
pub fn compare_records(report: &CompareReport) -> Vec<Record> {
    let c = &report.config;
    let mut rows: Vec<Record> = report
        .results
        .iter()
        .map(|r| {
            let head = Record::new("compare.mode").with("device", c.hw.device.name.as_str());
            mode_fields(head, report, r)
        })
        .collect();
    rows.push(
        regime_fields(
            Record::new("compare.summary")
                .with("device", c.hw.device.name.as_str())
                .with("graph_nodes", report.graph.node_count)
                .with("graph_edges", report.graph.edge_count),
            report,
        )
        .with("minibatches", c.batches)
        .with("batch_size", c.batch_size)
        .with("fanouts", join_fanouts(&c.fanouts))
        .with("seed", c.seed)
        .with("checksum", format!("{:#018x}", report.checksum))
        .with("samples_identical", report.identical())
        .with("timing", "modelled"),
    );
    rows
}

/// `head` with the memory regime of a comparison: the graph's size, the controller's page buffer,
/// the host page cache, r = graph / page cache, and the minibatch footprint (distinct CSR bytes)
/// as a share of the page cache. Every row of `compare` and the experiments states them.
pub fn regime_fields(head: Record, report: &CompareReport) -> Record {
    let hw = &report.config.hw;
    let buffer_bytes =
        u64::from(hw.firmware.page_buffer_pages) * u64::from(hw.nand.page_size_bytes);
    head.with("graph_bytes", report.graph_bytes())
        .with("controller_buffer_bytes", buffer_bytes)
        .with("host_page_cache_bytes", hw.host.page_cache_bytes)
        .with(
            "graph_to_page_cache_ratio",
            report.graph_bytes() as f64 / hw.host.page_cache_bytes.max(1) as f64,
        )
        .with(
            "footprint_bytes_per_minibatch",
            report.footprint.bytes_per_minibatch(),
        )
        .with(
            "footprint_share_of_page_cache",
            report.footprint.share_of(hw.host.page_cache_bytes),
        )
        .with("warmup_minibatches", report.config.warmup_batches)
}

/// `head` with one mode's modelled figures (`compare.mode` and the experiments' rows).
pub fn mode_fields(head: Record, report: &CompareReport, r: &ModeResult) -> Record {
    head.with("mode", r.mode.name())
        .with("workers", r.workers)
        .with("minibatches", r.minibatches)
        .with("makespan_ns", r.makespan_ns)
        .with("time_per_minibatch_ns", r.time_per_minibatch_ns())
        .with("speedup_vs_mmap", report.speedup_vs_mmap(r))
        .with("commands", r.commands)
        .with("pcie_h2c_bytes", r.pcie_h2c_bytes)
        .with("pcie_c2h_bytes", r.pcie_c2h_bytes)
        .with("nand_pages_read", r.nand_pages_read)
        .with("page_cache_hit_ratio", r.page_cache_hit_rate)
        .with("firmware_core_busy_ratio", r.core_utilisation())
        .with("isp_core_busy_ratio", r.isp_core_utilisation())
        .with("host_cpu_ns", r.host_cpu_ns)
        .with("submit_lag_ns", r.submit_lag_ns)
        .with("timing", "modelled")
}

/// Fanouts as the flags take them, `10,10,10`.
pub fn join_fanouts(fanouts: &[u16]) -> String {
    fanouts
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
