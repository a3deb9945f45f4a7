//! Concurrent in-storage sampling: a device samples as many NS_configs at once as it has
//! sampling lanes (one per ISP core), each job's work charged to its own core; and within a
//! job, the passes read ahead so that the flash works while the core does. Every subgraph stays
//! byte-identical to the in-memory reference (the comparison checks each one).

use sagessd::compare::{self, CompareConfig, CompareReport};
use sagessd_emulator::HwConfig;
use sagessd_runtime::graph_spec::GraphSpec;
use sagessd_runtime::registry::SamplerKind;

/// In-storage sampling of `batches` minibatches of `batch_size` targets (fanouts 10,10) on an
/// R-MAT of `scale` with `hw`, by each of `workers` worker counts; every subgraph checked.
fn isp(
    hw: HwConfig,
    scale: u32,
    batches: u32,
    batch_size: u32,
    workers: &[usize],
) -> CompareReport {
    hw.validate().expect("valid description");
    let config = CompareConfig {
        graph: GraphSpec::parse(&format!("rmat:{scale}")).unwrap(),
        batches,
        warmup_batches: 0,
        batch_size,
        fanouts: vec![10, 10],
        seed: 3,
        hw,
        modes: vec![SamplerKind::Isp],
        workers: workers.to_vec(),
        hyperbatch: 1,
    };
    let report = compare::run(&config, None, &mut |_| {}).expect("comparison runs");
    assert!(report.identical(), "a subgraph differs from the reference");
    report
}

/// ISP with one and with four host workers (each keeping one NS_config in flight) on a
/// Newport-class device with `isp_cores` cores dedicated to sampling.
fn isp_with_workers(isp_cores: u32) -> CompareReport {
    let mut hw = HwConfig::newport();
    hw.cores.count = isp_cores + 1;
    hw.cores.isp_cores = isp_cores;
    assert_eq!(u32::from(hw.isp_lanes()), isp_cores);
    isp(hw, 14, 8, 256, &[1, 4])
}

/// Modelled time per minibatch with four workers over that with one.
fn four_over_one(report: &CompareReport) -> f64 {
    let per = |w| {
        report
            .result(SamplerKind::Isp, w)
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
        let m = r.result(SamplerKind::Isp, 4).expect("ran");
        m.isp_core_busy_ns as f64 / m.makespan_ns as f64
    };
    assert!(util(&four_cores) > 2.5, "{}", util(&four_cores));
    assert!(util(&one_core) <= 1.0, "{}", util(&one_core));
}

/// ISP time per minibatch and flash pages read, one worker, on a Cosmos+ whose page buffer
/// holds a sixteenth of the graph (so every gather reads flash), with or without the passes'
/// read-ahead.
fn flash_bound_isp(read_ahead: bool) -> (f64, u64) {
    let mut hw = HwConfig::cosmos_plus();
    hw.firmware.page_buffer_pages = 128;
    hw.firmware.isp_read_ahead = read_ahead;
    let report = isp(hw, 15, 4, 512, &[1]);
    let r = report.result(SamplerKind::Isp, 1).expect("ran");
    (r.time_per_minibatch_ns(), r.nand_pages_read)
}

/// The passes' read-ahead changes no subgraph, and reads each page it reads ahead whole, so the
/// gathers find what they need without a second read: it reads about as many flash pages as
/// the gathers alone. (Its time is reported, not asserted: with the measured core costs a job
/// is core-bound and the read-ahead does not pay, which is why it is off by default.)
#[test]
fn reading_ahead_in_the_passes_keeps_the_subgraphs_and_the_flash_reads() {
    let ((with_ns, with_pages), (without_ns, without_pages)) =
        (flash_bound_isp(true), flash_bound_isp(false));
    println!(
        "read-ahead: {with_ns:.0} ns a minibatch, {with_pages} flash pages in all; without: \
         {without_ns:.0} ns, {without_pages} pages"
    );
    assert!(
        with_pages <= without_pages + without_pages / 10,
        "read-ahead read {with_pages} flash pages, the gathers alone {without_pages}"
    );
}
