//! The emulated SSD end to end through its queue pair: NVMe answers, data round trips, and the
//! time model's parts (die overlap, a read's cost as the sum of its parts, ISP cores, the
//! SmartSSD's SSD→FPGA copies).

use super::*;
use crate::nand::NandTiming;
use sagessd_abi::identify::{
    CNS_CONTROLLER, CNS_NAMESPACE, ControllerInfo, IDENTIFY_SIZE_BYTES, NamespaceInfo,
};
use sagessd_abi::nvme::{Status, admin_opcode};
use sagessd_firmware::work::WorkCounters;

const NSID: u32 = 1;
const BLOCK: usize = 4096;

/// The Cosmos+ description shrunk to a few dies and blocks, so tests build in milliseconds.
pub(crate) fn small_config() -> HwConfig {
    let mut c = HwConfig::cosmos_plus();
    c.nand.channels = 2;
    c.nand.ways = 2;
    c.nand.blocks_per_die = 16;
    c.nand.pages_per_block = 16;
    c.firmware.page_buffer_pages = 16;
    c.firmware.isp_slots = 1;
    c.firmware.max_targets = 64;
    c.firmware.max_subgraph_nodes = 4096;
    c.firmware.max_subgraph_edges = 4096;
    c.firmware.max_transfer_bytes = 64 * 1024;
    c.validate().expect("small test config is valid");
    c
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn write(ssd: &mut Ssd, cid: u16, lba: u64, data: Vec<u8>) -> Completed {
    let blocks = (data.len() / BLOCK) as u32;
    let sqe = SubmissionEntry::read_write(true, cid, NSID, lba, blocks);
    let done = ssd.execute(1, sqe, data).unwrap();
    assert_eq!(done.cqe.status(), Status::SUCCESS, "write of LBA {lba}");
    done
}

fn read(ssd: &mut Ssd, cid: u16, lba: u64, blocks: u32) -> Completed {
    let sqe = SubmissionEntry::read_write(false, cid, NSID, lba, blocks);
    ssd.execute(1, sqe, vec![0; blocks as usize * BLOCK])
        .unwrap()
}

/// Writes 32 flash pages at logical pages 16..48, pushing older pages out of the test
/// configuration's 16-slot page buffer so that reading them takes flash reads.
fn evict_page_buffer(ssd: &mut Ssd) {
    for i in 0..32u16 {
        write(ssd, 500 + i, 64 + u64::from(i) * 4, pattern(2, 4 * BLOCK));
    }
}

fn identify(cns: u8, cid: u16) -> SubmissionEntry {
    let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, cid, NSID);
    sqe.cdw10 = u32::from(cns).into();
    sqe
}

#[test]
fn identify_reports_the_namespace_and_the_sampling_limits() {
    let config = small_config();
    let mut ssd = Ssd::new(&config).unwrap();
    let ctrl = ssd
        .execute(0, identify(CNS_CONTROLLER, 1), vec![0; IDENTIFY_SIZE_BYTES])
        .unwrap();
    assert_eq!(ctrl.cqe.status(), Status::SUCCESS);
    let limits = ControllerInfo::decode_limits(&ctrl.data).expect("vendor area");
    assert_eq!(limits.max_targets, config.firmware.max_targets);
    assert_eq!(limits.max_fanout, config.firmware.max_fanout);
    assert_eq!(ctrl.data[77], 4, "MDTS: 64 KiB = 4 KiB × 2^4");

    let ns = ssd
        .execute(0, identify(CNS_NAMESPACE, 2), vec![0; IDENTIFY_SIZE_BYTES])
        .unwrap();
    assert_eq!(ns.cqe.status(), Status::SUCCESS);
    let info = NamespaceInfo::decode(&ns.data).unwrap();
    assert_eq!(info.block_count, ssd.namespace_block_count());
    assert_eq!(1u32 << info.block_size_log2, ssd.block_size_bytes());
    assert!(ns.submitted_at_ns >= ctrl.completed_at_ns);
    assert!(ns.latency_ns() > 0);
}

#[test]
fn write_then_read_round_trips() {
    let mut ssd = Ssd::new(&small_config()).unwrap();
    let data = pattern(7, 3 * BLOCK);
    // Blocks 6, 7 and 8: unaligned to the 4-block flash pages, so two read-modify-writes.
    write(&mut ssd, 1, 6, data.clone());
    let back = read(&mut ssd, 2, 6, 3);
    assert_eq!(back.cqe.status(), Status::SUCCESS);
    assert_eq!(back.data, data);
    let part = read(&mut ssd, 3, 7, 1);
    assert_eq!(part.data, data[BLOCK..2 * BLOCK]);
    let stats = ssd.stats();
    assert_eq!(stats.commands_submitted, 3);
    assert_eq!(stats.commands_completed, 3);
    assert_eq!(stats.nand_pages_programmed, 2);
    // SQEs and write data in; CQEs and read data out.
    assert_eq!(stats.pcie_h2c_bytes, 3 * 64 + 3 * BLOCK as u64);
    assert_eq!(stats.pcie_c2h_bytes, 3 * 16 + 4 * BLOCK as u64);
    assert!(stats.core_busy_ns > 0);
    assert_eq!(ssd.reap().unwrap(), None);
}

#[test]
fn unknown_opcodes_are_answered_and_later_commands_still_work() {
    let mut ssd = Ssd::new(&small_config()).unwrap();
    let admin = ssd
        .execute(0, SubmissionEntry::new(0x7F, 1, 0), Vec::new())
        .unwrap();
    assert_eq!(admin.cqe.status(), Status::INVALID_OPCODE);
    let io = ssd
        .execute(1, SubmissionEntry::new(0xC4, 2, NSID), vec![0; 512])
        .unwrap();
    assert_eq!(io.cqe.status(), Status::INVALID_OPCODE);
    assert_eq!(io.cqe.cid.get(), 2);
    let data = pattern(3, BLOCK);
    write(&mut ssd, 3, 0, data.clone());
    assert_eq!(read(&mut ssd, 4, 0, 1).data, data);
}

#[test]
fn a_device_without_isp_refuses_vendor_opcodes_before_the_firmware() {
    use sagessd_abi::nvme::io_opcode;
    let mut config = small_config();
    config.firmware.isp = false;
    let mut ssd = Ssd::new(&config).unwrap();
    for (cid, opcode) in [
        (1, io_opcode::GRAPH_ATTACH),
        (2, io_opcode::NS_SUBMIT),
        (3, io_opcode::NS_COLLECT),
        (4, 0xC4),
    ] {
        let before = ssd.stats();
        let done = ssd
            .execute(
                1,
                SubmissionEntry::vendor(opcode, cid, NSID, 4096, 0),
                vec![0; 4096],
            )
            .unwrap();
        assert_eq!(
            done.cqe.status(),
            Status::INVALID_OPCODE,
            "opcode {opcode:#x}"
        );
        assert_eq!(done.cqe.cid.get(), cid);
        let after = ssd.stats();
        // The firmware never saw it: only its poll loop ran (the idle pass after the call).
        let work = after.work.since(&before.work);
        assert_eq!(
            WorkCounters {
                polls: 0,
                parked_checked: 0,
                ..work
            },
            WorkCounters::default(),
            "the firmware never saw it"
        );
        assert_eq!(
            after.core_busy_ns - before.core_busy_ns,
            ssd.cores().cycles_to_ns(config.cores.cycles_per_command) + ssd.cores().ns(&work)
        );
    }
    // Ordinary I/O still works.
    let data = pattern(5, BLOCK);
    write(&mut ssd, 10, 0, data.clone());
    assert_eq!(read(&mut ssd, 11, 0, 1).data, data);
}

#[test]
fn many_outstanding_commands_all_complete_in_time_order() {
    let mut ssd = Ssd::new(&small_config()).unwrap();
    // More commands than the firmware has slots (64): some are answered busy and retried.
    for i in 0..100u16 {
        let lba = u64::from(i % 40) * 4;
        let sqe = SubmissionEntry::read_write(true, i, NSID, lba, 4);
        ssd.submit(1, sqe, pattern(i as u8, 4 * BLOCK)).unwrap();
    }
    let mut last = 0;
    let mut cids = Vec::new();
    while let Some(done) = ssd.reap().unwrap() {
        assert_eq!(done.cqe.status(), Status::SUCCESS);
        assert!(
            done.completed_at_ns >= last,
            "completions come in time order"
        );
        last = done.completed_at_ns;
        assert_eq!(ssd.now_ns(), last);
        cids.push(done.cqe.cid.get());
    }
    cids.sort_unstable();
    assert_eq!(cids, (0..100).collect::<Vec<_>>());
    assert!(ssd.stats().busy_retries > 0);
    assert_eq!(ssd.outstanding(), 0);
    // The newest write of each LBA wins (writes to one page are applied in order).
    for lba_page in 0..40u16 {
        let newest = lba_page + 80;
        let newest = if newest < 100 { newest } else { lba_page + 40 };
        let back = read(&mut ssd, 1000 + lba_page, u64::from(lba_page) * 4, 4);
        assert_eq!(
            back.data,
            pattern(newest as u8, 4 * BLOCK),
            "page {lba_page}"
        );
    }
}

#[test]
fn a_duplicate_command_id_is_rejected_without_losing_the_first() {
    let mut ssd = Ssd::new(&small_config()).unwrap();
    let data = pattern(9, BLOCK);
    write(&mut ssd, 1, 8, data.clone());
    // Push the page out of the page buffer so the read has to wait for flash.
    evict_page_buffer(&mut ssd);
    let first = SubmissionEntry::read_write(false, 5, NSID, 8, 1);
    ssd.submit(1, first, vec![0; BLOCK]).unwrap();
    ssd.submit(1, first, vec![0; BLOCK]).unwrap();
    let a = ssd.reap().unwrap().unwrap();
    let b = ssd.reap().unwrap().unwrap();
    assert_eq!(
        a.cqe.status(),
        Status::generic(0x03, true),
        "command id conflict"
    );
    assert_eq!(b.cqe.status(), Status::SUCCESS);
    assert_eq!(b.data, data);
}

/// Latency of reading two flash pages written together, after evicting them from the page
/// buffer, and the flash reads it took.
fn two_page_read_latency(config: &HwConfig) -> (u64, u64) {
    let mut ssd = Ssd::new(config).unwrap();
    write(&mut ssd, 1, 0, pattern(1, 8 * BLOCK));
    evict_page_buffer(&mut ssd);
    let before = ssd.stats().nand_pages_read;
    let done = read(&mut ssd, 99, 0, 8);
    assert_eq!(done.data, pattern(1, 8 * BLOCK));
    (done.latency_ns(), ssd.stats().nand_pages_read - before)
}

#[test]
fn reads_on_different_dies_overlap_and_on_one_die_serialise() {
    let mut one_die = small_config();
    one_die.nand.channels = 1;
    one_die.nand.ways = 1;
    one_die.nand.blocks_per_die = 32;
    one_die.nand.t_read_ns = 1_000_000; // make the flash dominate the host-side overheads
    let mut two_dies = one_die.clone();
    two_dies.nand.channels = 2;
    let read_ns = NandTiming::from_config(&one_die.nand).read_latency_ns();

    let (serial, reads) = two_page_read_latency(&one_die);
    assert_eq!(reads, 2);
    let (parallel, reads) = two_page_read_latency(&two_dies);
    assert_eq!(reads, 2);
    // One die: the two page reads run back to back.
    assert!(serial >= 2 * read_ns, "serial {serial} < 2 × {read_ns}");
    // Two dies on two channels: they overlap; only host-side overheads come on top.
    assert!(parallel >= read_ns, "parallel {parallel} < {read_ns}");
    assert!(
        parallel < read_ns + read_ns / 4,
        "parallel {parallel} vs {read_ns}"
    );
    assert!(serial - parallel >= read_ns - read_ns / 4);
}

fn scripted_run() -> (Vec<Completed>, DeviceStats) {
    let mut ssd = Ssd::new(&small_config()).unwrap();
    let mut log = Vec::new();
    for round in 0..3u16 {
        for i in 0..6u16 {
            let cid = round * 100 + i;
            let lba = u64::from((i * 7 + round) % 30) * 2;
            let sqe = if i % 3 == 2 {
                SubmissionEntry::read_write(false, cid, NSID, lba, 3)
            } else {
                SubmissionEntry::read_write(true, cid, NSID, lba, 3)
            };
            ssd.submit(1, sqe, pattern(cid as u8, 3 * BLOCK)).unwrap();
            ssd.advance_to_ns(ssd.now_ns() + 1_000);
        }
        for _ in 0..3 {
            let d = ssd.reap().unwrap().unwrap();
            log.push(d);
        }
    }
    while let Some(d) = ssd.reap().unwrap() {
        log.push(d);
    }
    (log, ssd.stats())
}

#[test]
fn identical_runs_give_identical_timelines() {
    let (log_a, stats_a) = scripted_run();
    let (log_b, stats_b) = scripted_run();
    assert_eq!(log_a.len(), 18);
    assert_eq!(log_a, log_b);
    assert_eq!(stats_a, stats_b);
    assert!(stats_a.nand_pages_programmed > 0);
}

#[test]
fn a_single_read_costs_what_its_parts_add_up_to() {
    let config = small_config();
    let mut ssd = Ssd::new(&config).unwrap();
    write(&mut ssd, 1, 0, pattern(4, 4 * BLOCK));
    evict_page_buffer(&mut ssd);
    let before = ssd.stats().nand_pages_read;
    let done = read(&mut ssd, 2, 0, 1);
    assert_eq!(ssd.stats().nand_pages_read - before, 1);
    // A column read: the block's sectors cross the channel, not the whole page.
    let t = NandTiming::from_config(&config.nand);
    let flash = t.command_overhead_ns
        + t.t_read_ns
        + t.transfer_ns(BLOCK as u64, u64::from(config.nand.page_size_bytes));
    let link = PcieLink::new(&config.pcie);
    let fixed = config.controller.doorbell_ns
        + config.pcie.dma_read_setup_ns
        + link.transfer_ns(64)
        + config.pcie.posted_write_setup_ns
        + link.transfer_ns(BLOCK as u64)
        + link.transfer_ns(16)
        + config.controller.interrupt_ns;
    let lat = done.latency_ns();
    assert!(
        lat >= flash + fixed,
        "latency {lat} below flash {flash} + fixed {fixed}"
    );
    // Firmware time on top is a few microseconds at 1 GHz, and the glue's upkeep of the
    // block's lines in the caches (twice 4 KiB at 1,280 cycles a KiB: 5.1 us) on top of that.
    let glue = ssd
        .cores()
        .cycles_to_ns(ssd.cores().flash_dma_cycles(crate::nand::DmaBytes {
            read: BLOCK as u64,
            program: 0,
        }));
    assert!(glue > 0, "Cosmos+'s flash DMA is not coherent");
    assert!(lat >= flash + fixed + glue, "latency {lat}");
    assert!(lat < flash + fixed + glue + 20_000, "latency {lat}");
    assert_eq!(
        format!("{}", ssd.stats()).lines().count(),
        4,
        "Display prints one line per subsystem"
    );
}

#[test]
fn reap_with_nothing_outstanding_is_none() {
    let mut ssd = Ssd::new(&small_config()).unwrap();
    assert_eq!(ssd.reap().unwrap(), None);
    ssd.advance_to_ns(5_000);
    assert_eq!(ssd.now_ns(), 5_000);
    ssd.advance_to_ns(1_000);
    assert_eq!(ssd.now_ns(), 5_000, "time never goes back");
}

#[test]
fn in_storage_sampling_runs_through_the_queue_pair() {
    let (before, after, submitted, collected) = sample_in_storage(&small_config());
    let work = after.work.since(&before.work);
    assert!(work.pages_scanned > 0 && work.edges_sampled > 0, "{work:?}");
    // Each unit counted once for what it is: the five targets, the sampled edges of the
    // subgraph's layers, and one node-table clear per node of its node list.
    let size = collected.cqe.result.get() as usize;
    let view = sagessd_abi::subgraph::SubgraphView::parse(&collected.data[..size]).unwrap();
    let edges: u64 = (0..view.layer_count())
        .map(|l| u64::from(view.layer(l).counts.edge_count))
        .sum();
    assert_eq!(work.targets_deduplicated, 5);
    assert_eq!(work.edges_sampled, edges);
    assert_eq!(work.nodes_added, view.nodes().len() as u64);
    assert!(
        after.nand_pages_read > before.nand_pages_read,
        "the sampler read flash"
    );
    assert!(after.core_busy_ns > before.core_busy_ns);
    assert!(collected.completed_at_ns > submitted.completed_at_ns);
    assert_eq!(after.p2p_bytes, 0, "no [p2p] link, no SSD→FPGA copies");
}

#[test]
fn the_glue_keeping_flash_dma_coherent_is_charged_to_the_core_that_issued_it() {
    for isp_cores in [0, 1] {
        let mut config = small_config();
        config.cores.isp_cores = isp_cores;
        let (before, after, _, _) = sample_in_storage(&config);
        let dma = after.nand_dma.since(before.nand_dma);
        assert!(dma.read > 0, "the job read flash");
        let cores = crate::cores::CoreModel::new(&config.cores);
        let want = cores.cycles_to_ns(cores.flash_dma_cycles(dma));
        let charged = after.flash_dma_core_ns - before.flash_dma_core_ns;
        // Each call's share is rounded up to a whole nanosecond on its own.
        let calls =
            (after.firmware_calls - before.firmware_calls) + (after.isp_calls - before.isp_calls);
        assert!(
            charged + calls >= want && charged <= want + calls,
            "isp_cores {isp_cores}: charged {charged} ns for {want} ns of upkeep over {calls} calls"
        );
        // Without the upkeep (a coherent DMA) nothing is charged.
        let mut coherent = config.clone();
        coherent.cores.cycles_per_kib_flash_read = None;
        coherent.cores.cycles_per_kib_flash_program = None;
        let (b, a, _, _) = sample_in_storage(&coherent);
        assert_eq!(a.flash_dma_core_ns - b.flash_dma_core_ns, 0);
        assert!(a.nand_dma.since(b.nand_dma).read > 0);
    }
}

#[test]
fn an_isp_core_takes_the_sampling_work_off_the_firmware_core() {
    let mut shared = small_config();
    shared.cores.isp_cores = 0;
    let mut split = shared.clone();
    split.cores.isp_cores = 1;
    let (b0, a0, _, c0) = sample_in_storage(&shared);
    let (b1, a1, _, c1) = sample_in_storage(&split);
    assert_eq!(a0.isp_core_busy_ns, 0);
    assert_eq!(a0.isp_calls, 0);
    assert!(a1.isp_calls > 0 && a1.isp_core_busy_ns > b1.isp_core_busy_ns);
    assert!(
        a1.core_busy_ns - b1.core_busy_ns < a0.core_busy_ns - b0.core_busy_ns,
        "the firmware core no longer runs the sampler"
    );
    assert_eq!(c0.data, c1.data, "the same subgraph");
    assert_eq!(
        a1.work.since(&b1.work).edges_sampled,
        a0.work.since(&b0.work).edges_sampled
    );
}

/// `small_config`'s shrinking applied to the shipped SmartSSD description.
fn small_smartssd_config() -> HwConfig {
    let mut c =
        HwConfig::from_toml_str(include_str!("../../../hw-configs/smartssd-fpga.toml")).unwrap();
    let small = small_config();
    c.nand.channels = small.nand.channels;
    c.nand.ways = small.nand.ways;
    c.nand.blocks_per_die = small.nand.blocks_per_die;
    c.nand.pages_per_block = small.nand.pages_per_block;
    c.firmware = small.firmware.clone();
    c.firmware.block_size_bytes = 4096;
    c.validate().expect("small SmartSSD config is valid");
    c
}

#[test]
fn fpga_csd_sampling_pays_an_ssd_to_fpga_copy_per_scanned_page() {
    let config = small_smartssd_config();
    let (before, after, submitted, collected) = sample_in_storage(&config);
    let work = after.work.since(&before.work);
    assert!(work.pages_scanned > 0, "{work:?}");
    let page = u64::from(config.nand.page_size_bytes);
    assert_eq!(
        after.p2p_bytes - before.p2p_bytes,
        work.pages_scanned * page,
        "p2p link bytes = pages scanned × page size"
    );
    assert_eq!(
        after.p2p_transfers - before.p2p_transfers,
        work.pages_scanned
    );
    assert!(
        after.p2p_wait_ns > before.p2p_wait_ns,
        "the kernel waited for copies"
    );
    // Host-facing traffic stays on the host link; the copies are not host traffic.
    assert!(after.pcie_c2h_bytes - before.pcie_c2h_bytes < after.p2p_bytes - before.p2p_bytes);

    // The same device without the link: the same work, and ISP is faster by the copies.
    let mut no_link = config.clone();
    no_link.p2p = None;
    let (b2, a2, s2, c2) = sample_in_storage(&no_link);
    assert_eq!(
        a2.work.since(&b2.work),
        work,
        "the copy changes time, not work"
    );
    assert_eq!(a2.p2p_bytes, 0);
    let with = collected.completed_at_ns - submitted.submitted_at_ns;
    let without = c2.completed_at_ns - s2.submitted_at_ns;
    // Each page copy occupies the link for at least its transfer time.
    let link = PcieLink::new(&config.p2p.as_ref().unwrap().to_pcie_config());
    assert!(
        with > without && with - without >= link.transfer_ns(page),
        "with p2p {with} ns, without {without} ns"
    );
}

/// Writes a 200-node graph, attaches it, samples 5 targets in storage and collects the
/// subgraph; returns the stats before the submit and after the collect, and the two
/// completions.
fn sample_in_storage(config: &HwConfig) -> (DeviceStats, DeviceStats, Completed, Completed) {
    use sagessd_abi::graph::{GraphDescriptor, LbaRange};
    use sagessd_abi::ns_config::{encode_ns_config, ns_config_size_bytes};
    use sagessd_abi::nvme::io_opcode;
    use sagessd_abi::subgraph::SubgraphView;
    use zerocopy::IntoBytes;

    let mut ssd = Ssd::new(config).unwrap();
    // A 200-node graph; node v has v % 13 neighbours (some have none).
    let nodes = 200u64;
    let mut indptr = vec![0u64];
    let mut indices = Vec::new();
    for v in 0..nodes {
        for k in 0..v % 13 {
            indices.push(((v * 7 + k * 31 + 1) % nodes) as u32);
        }
        indptr.push(indices.len() as u64);
    }
    let blocks = |bytes: usize| bytes.div_ceil(BLOCK) as u64;
    let mut indptr_bytes = indptr.as_bytes().to_vec();
    indptr_bytes.resize(blocks(indptr_bytes.len()) as usize * BLOCK, 0);
    let mut indices_bytes = indices.as_bytes().to_vec();
    indices_bytes.resize(blocks(indices_bytes.len()) as usize * BLOCK, 0);
    let indices_slba = 16;
    let (indptr_blocks, indices_blocks) = (blocks(indptr_bytes.len()), blocks(indices_bytes.len()));
    write(&mut ssd, 1, 0, indptr_bytes);
    write(&mut ssd, 2, indices_slba, indices_bytes);
    evict_page_buffer(&mut ssd);

    let graph = GraphDescriptor {
        node_count: nodes,
        edge_count: indices.len() as u64,
        id_width_bytes: 4,
        indptr: LbaRange {
            slba: 0,
            block_count: indptr_blocks,
        },
        indices: LbaRange {
            slba: indices_slba,
            block_count: indices_blocks,
        },
        features: None,
    };
    let wire = graph.to_wire().as_bytes().to_vec();
    let attach = SubmissionEntry::vendor(io_opcode::GRAPH_ATTACH, 3, NSID, wire.len() as u32, 0);
    let attached = ssd.execute(1, attach, wire).unwrap();
    assert_eq!(attached.cqe.status(), Status::SUCCESS);

    let targets = [3u64, 12, 25, 199, 0];
    let mut config = vec![0u8; ns_config_size_bytes(targets.len())];
    encode_ns_config(42, &[4, 3], &targets, &mut config).unwrap();
    let submit = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 4, NSID, config.len() as u32, 0);
    let before = ssd.stats();
    let submitted = ssd.execute(1, submit, config).unwrap();
    assert_eq!(submitted.cqe.status(), Status::SUCCESS);
    let tag = submitted.cqe.result.get();

    let len = 64 * 1024;
    let collect = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 5, NSID, len as u32, tag);
    let collected = ssd.execute(1, collect, vec![0; len]).unwrap();
    assert_eq!(collected.cqe.status(), Status::SUCCESS);
    let size = collected.cqe.result.get() as usize;
    let view = SubgraphView::parse(&collected.data[..size]).unwrap();
    assert_eq!(view.layer_count(), 2);
    let first: Vec<u64> = view.nodes()[..targets.len()]
        .iter()
        .map(|n| n.get())
        .collect();
    assert_eq!(first, targets);
    (before, ssd.stats(), submitted, collected)
}
