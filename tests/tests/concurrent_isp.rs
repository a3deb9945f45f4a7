//! Concurrent in-storage sampling: a device samples as many NS_configs at once as it has
//! sampling lanes (one per ISP core), each job's work charged to its own core, and every
//! subgraph stays byte-identical to the in-memory reference (the comparison checks each one).

use sagessd_emulator::HwConfig;
use sagessd_runtime::compare::{self, CompareConfig, CompareReport};
use sagessd_runtime::graph_spec::GraphSpec;
use sagessd_runtime::host_io::HostIoMode;

/// ISP with one and with four host workers (each keeping one NS_config in flight) on a
/// Newport-class device with `isp_cores` cores dedicated to sampling.
fn isp_with_workers(isp_cores: u32) -> CompareReport {
    let mut hw = HwConfig::newport();
    hw.cores.count = isp_cores + 1;
    hw.cores.isp_cores = isp_cores;
    hw.validate().expect("valid description");
    assert_eq!(u32::from(hw.isp_lanes()), isp_cores);
    let config = CompareConfig {
        graph: GraphSpec::parse("rmat:14").unwrap(),
        batches: 8,
        warmup_batches: 0,
        batch_size: 256,
        fanouts: vec![10, 10],
        seed: 3,
        hw,
        modes: vec![HostIoMode::Isp],
        workers: vec![1, 4],
    };
    let report = compare::run(&config, None, &mut |_| {}).expect("comparison runs");
    assert!(report.identical(), "a subgraph differs from the reference");
    report
}

/// Modelled time per minibatch with four workers over that with one.
fn four_over_one(report: &CompareReport) -> f64 {
    let per = |w| {
        report
            .result(HostIoMode::Isp, w)
            .expect("ran")
            .time_per_minibatch_ns()
    };
    per(4) / per(1)
}

#[test]
fn four_isp_cores_sample_four_jobs_in_about_a_quarter_of_the_time() {
    let four_cores = isp_with_workers(4);
    let ratio = four_over_one(&four_cores);
    // Core-bound: the embedded cores' time is most of a job's, so four lanes take about a
    // quarter of the time: a little more for the flash and the firmware core they share, a
    // little less where a lone worker's own round trips (its submit, its collect's transfer)
    // overlap with the others' too.
    assert!(
        (0.17..0.35).contains(&ratio),
        "four workers on four ISP cores: {ratio:.3} of one worker's time per minibatch"
    );
    // One ISP core runs one job at a time: four workers only queue behind each other.
    let one_core = isp_with_workers(1);
    let ratio = four_over_one(&one_core);
    assert!(
        ratio > 0.9,
        "four workers on one ISP core: {ratio:.3} of one worker's time per minibatch"
    );
    // Each core is busy with its own job: the four cores together did about as much as the
    // one (the same jobs), within the makespan of four cores.
    let util = |r: &CompareReport| {
        let m = r.result(HostIoMode::Isp, 4).expect("ran");
        m.isp_core_busy_ns as f64 / m.makespan_ns as f64
    };
    assert!(util(&four_cores) > 2.5, "{}", util(&four_cores));
    assert!(util(&one_core) <= 1.0, "{}", util(&one_core));
}
