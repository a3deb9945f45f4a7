use super::*;
use sagessd_firmware::hal::{PhysBlock, PhysPage};

const PAGE: usize = 4096;
/// A page's DRAM window: its data, then its spare area.
const WINDOW: usize = PAGE + sagessd_firmware::hal::SPARE_BYTES;

/// 2 channels × 2 ways × 1 die, 4 blocks of 4 pages, round timings.
fn array() -> NandArray {
    let geometry = Geometry {
        channels: 2,
        ways: 2,
        dies_per_way: 1,
        blocks_per_die: 4,
        pages_per_block: 4,
        page_size_bytes: PAGE as u32,
    };
    let timing = NandTiming {
        t_read_ns: 50_000,
        t_program_ns: 500_000,
        t_erase_ns: 3_000_000,
        page_transfer_ns: 10_000,
        command_overhead_ns: 1_000,
    };
    NandArray::with_timing(geometry, timing)
}

/// First page of block `block` of die `die` (16 pages per die).
fn ppn(die: u32, page: u32) -> PhysPage {
    PhysPage(die * 16 + page)
}

fn run(nand: &mut NandArray, dram: &mut [u8]) -> Vec<(u32, u64, Result<(), FlashError>)> {
    nand.issue_staged(nand.now_ns());
    let mut out = Vec::new();
    while let Some(t) = nand.process_next_event() {
        while let Some(c) = nand.poll(dram) {
            out.push((c.tag, t, c.result));
        }
    }
    out
}

fn read(die: u32, page: u32, slot: usize) -> FlashOp {
    read_sectors(die, page, slot, Sectors::ALL)
}

fn read_sectors(die: u32, page: u32, slot: usize, sectors: Sectors) -> FlashOp {
    FlashOp::Read {
        ppn: ppn(die, page),
        dram_offset_bytes: slot * WINDOW,
        sectors,
    }
}

#[test]
fn erased_pages_read_ff_and_programs_round_trip() {
    let mut nand = array();
    let mut dram = vec![0u8; 4 * WINDOW];
    dram[..WINDOW].fill(0xAB);
    nand.submit(1, read(0, 0, 1), &dram).unwrap();
    let program = FlashOp::Program {
        ppn: ppn(0, 0),
        dram_offset_bytes: 0,
    };
    nand.submit(2, program, &dram).unwrap();
    nand.submit(3, read(0, 0, 2), &dram).unwrap();
    let done = run(&mut nand, &mut dram);
    assert_eq!(done.iter().map(|d| d.0).collect::<Vec<_>>(), vec![1, 2, 3]);
    // Data and spare both: erased reads 0xFF, a program stores the whole window.
    assert!(dram[WINDOW..2 * WINDOW].iter().all(|b| *b == 0xFF));
    assert!(dram[2 * WINDOW..3 * WINDOW].iter().all(|b| *b == 0xAB));
    assert_eq!(nand.stats().pages_read, 2);
    assert_eq!(nand.stats().pages_programmed, 1);
}

#[test]
fn a_forgotten_page_keeps_its_spare_and_frees_its_data_in_memory_and_in_a_file() {
    let dir = std::env::temp_dir().join(format!("sagessd-forget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let format = ImageFormat {
        block_size_bytes: 512,
        over_provisioning_percent: 7,
    };
    let file = array().with_file(&dir.join("flash"), format).unwrap();
    for (mut nand, in_memory) in [(array(), true), (file, false)] {
        let mut dram = vec![0u8; 3 * WINDOW];
        dram[..PAGE].fill(0xAB);
        dram[PAGE..WINDOW].fill(0x5C);
        for page in 0..2 {
            let program = FlashOp::Program {
                ppn: ppn(0, page),
                dram_offset_bytes: 0,
            };
            nand.submit(page, program, &dram).unwrap();
        }
        run(&mut nand, &mut dram);
        nand.forget(ppn(0, 0));
        nand.submit(3, read(0, 0, 1), &dram).unwrap();
        nand.submit(4, read(0, 1, 2), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        assert!(done.iter().all(|d| d.2.is_ok()));
        // The forgotten page: zeros, its spare intact; the other: as programmed.
        assert!(dram[WINDOW..WINDOW + PAGE].iter().all(|b| *b == 0));
        assert!(dram[WINDOW + PAGE..2 * WINDOW].iter().all(|b| *b == 0x5C));
        assert_eq!(dram[2 * WINDOW..3 * WINDOW], dram[..WINDOW]);
        assert_eq!(nand.stats().pages_forgotten, 1);
        // In memory, only the other page's data is still held (a file's data is on disk).
        assert_eq!(nand.stored_data_pages(), usize::from(in_memory));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_computed_read_keeps_the_page_it_read_when_an_erase_follows_before_the_poll() {
    let mut nand = array();
    let pages =
        SyntheticPages::new(Arc::new(synthetic::fakes::Offsets), nand.geometry, 0, 4).unwrap();
    let mut expected = vec![0u8; WINDOW];
    assert!(pages.read(ppn(0, 0).0, Sectors::ALL, &mut expected));
    assert!(expected[..PAGE].iter().any(|b| *b != 0xFF));
    nand = nand.with_synthetic(pages);
    let mut dram = vec![0u8; 2 * WINDOW];
    nand.submit(1, read(0, 0, 0), &dram).unwrap();
    nand.submit(
        2,
        FlashOp::Erase {
            block: PhysBlock(0),
        },
        &dram,
    )
    .unwrap();
    nand.submit(3, read(0, 0, 1), &dram).unwrap();
    // Every operation completes before the first poll: the erase has run by then.
    nand.issue_staged(nand.now_ns());
    while nand.process_next_event().is_some() {}
    let mut tags = Vec::new();
    while let Some(c) = nand.poll(&mut dram) {
        assert_eq!(c.result, Ok(()));
        tags.push(c.tag);
    }
    assert_eq!(tags, vec![1, 2, 3]);
    assert_eq!(&dram[..WINDOW], &expected[..], "read before the erase");
    assert!(
        dram[WINDOW..].iter().all(|b| *b == 0xFF),
        "read after the erase"
    );
    assert!(nand.computing.is_empty());
}

#[test]
fn an_erase_cut_in_its_array_phase_leaves_no_computed_page() {
    for seed in [1, 2, 3, 4] {
        let mut nand = array();
        let pages =
            SyntheticPages::new(Arc::new(synthetic::fakes::Offsets), nand.geometry, 0, 4).unwrap();
        let mut computed = vec![0u8; WINDOW];
        assert!(pages.read(ppn(0, 0).0, Sectors::ALL, &mut computed));
        nand = nand.with_synthetic(pages);
        let mut dram = vec![0u8; WINDOW];
        nand.submit(
            1,
            FlashOp::Erase {
                block: PhysBlock(0),
            },
            &dram,
        )
        .unwrap();
        nand.issue_staged(nand.now_ns());
        while !nand.die_group[0]
            .as_ref()
            .is_some_and(|g| g.ungranted == 0 && g.started_ns.is_some())
        {
            nand.process_next_event()
                .expect("the erase reaches its array phase");
        }
        nand.power_cut(seed);
        nand.submit(2, read(0, 0, 0), &dram).unwrap();
        let done = run(&mut nand, &mut dram);
        assert_eq!(done.len(), 1);
        // Erased (0xFF) or torn (a media error), never the page that was there.
        assert!(
            done[0].2.is_err() || dram.iter().all(|b| *b == 0xFF),
            "seed {seed}"
        );
        assert_ne!(dram, computed, "seed {seed}");
    }
}

#[test]
fn a_column_read_moves_only_its_sectors_and_the_spare() {
    let mut nand = array();
    let mut dram = vec![0u8; 3 * WINDOW];
    dram[..WINDOW].fill(0xAB);
    let program = FlashOp::Program {
        ppn: ppn(0, 0),
        dram_offset_bytes: 0,
    };
    nand.submit(1, program, &dram).unwrap();
    run(&mut nand, &mut dram);
    let start = nand.now_ns();
    dram[WINDOW..].fill(0x11);
    // Sectors 1 and 2 (256 B each of a 4 KiB page) into slot 1; the spare alone into slot 2.
    nand.submit(2, read_sectors(0, 0, 1, Sectors(0b110)), &dram)
        .unwrap();
    let done = run(&mut nand, &mut dram);
    let t = *nand.timing();
    // cmd + tR + 2/16 of the page's transfer, on an idle die and channel.
    let two_sectors = (t.page_transfer_ns * 2).div_ceil(16);
    assert_eq!(
        done[0].1 - start,
        t.command_overhead_ns + t.t_read_ns + two_sectors
    );
    let w = &dram[WINDOW..2 * WINDOW];
    assert!(w[..256].iter().all(|b| *b == 0x11), "sector 0 untouched");
    assert!(
        w[256..768].iter().all(|b| *b == 0xAB),
        "sectors 1 and 2 read"
    );
    assert!(
        w[768..PAGE].iter().all(|b| *b == 0x11),
        "sectors 3.. untouched"
    );
    assert!(
        w[PAGE..].iter().all(|b| *b == 0xAB),
        "the spare comes along"
    );
    let before = nand.stats().total_channel_bytes();
    let start = nand.now_ns();
    nand.submit(3, read_sectors(0, 0, 2, Sectors::NONE), &dram)
        .unwrap();
    let done = run(&mut nand, &mut dram);
    let spare_ns = (t.page_transfer_ns * SPARE_BYTES as u64).div_ceil(PAGE as u64);
    assert_eq!(
        done[0].1 - start,
        t.command_overhead_ns + t.t_read_ns + spare_ns
    );
    assert!(
        dram[2 * WINDOW..2 * WINDOW + PAGE]
            .iter()
            .all(|b| *b == 0x11)
    );
    assert!(dram[2 * WINDOW + PAGE..].iter().all(|b| *b == 0xAB));
    assert_eq!(
        nand.stats().total_channel_bytes() - before,
        SPARE_BYTES as u64
    );
}

#[test]
fn program_order_and_erase_are_enforced() {
    let mut nand = array();
    let dram = vec![0u8; WINDOW];
    let program = |page| FlashOp::Program {
        ppn: ppn(1, page),
        dram_offset_bytes: 0,
    };
    nand.submit(1, program(1), &dram).unwrap();
    assert_eq!(
        nand.submit(2, program(0), &dram),
        Err(FlashError::NotErased)
    );
    assert_eq!(
        nand.submit(3, program(1), &dram),
        Err(FlashError::NotErased)
    );
    nand.submit(4, program(3), &dram).unwrap();
    nand.submit(
        5,
        FlashOp::Erase {
            block: PhysBlock(4),
        },
        &dram,
    )
    .unwrap();
    nand.submit(6, program(0), &dram).unwrap();
    let oob = FlashOp::Read {
        ppn: PhysPage(64),
        dram_offset_bytes: 0,
        sectors: Sectors::ALL,
    };
    assert_eq!(nand.submit(7, oob, &dram), Err(FlashError::OutOfRange));
    assert_eq!(
        nand.submit(8, read(0, 0, 1), &dram),
        Err(FlashError::OutOfRange),
        "DRAM window past the arena"
    );
    let erase = FlashOp::Erase {
        block: PhysBlock(16),
    };
    assert_eq!(nand.submit(9, erase, &dram), Err(FlashError::OutOfRange));
    let mut dram = dram;
    let done = run(&mut nand, &mut dram);
    assert_eq!(
        done.iter().map(|d| d.0).collect::<Vec<_>>(),
        vec![1, 4, 5, 6]
    );
    assert_eq!(
        nand.programmed_page_count(),
        1,
        "the erase dropped pages 1 and 3"
    );
}

#[test]
fn reads_on_different_channels_overlap_completely() {
    let mut nand = array();
    let mut dram = vec![0u8; 2 * WINDOW];
    nand.submit(1, read(0, 0, 0), &dram).unwrap(); // die 0, channel 0
    nand.submit(2, read(1, 0, 1), &dram).unwrap(); // die 1, channel 1
    let done = run(&mut nand, &mut dram);
    let lat = nand.timing().read_latency_ns();
    assert_eq!(done[0].1, lat);
    assert_eq!(done[1].1, lat);
}

#[test]
fn reads_on_one_die_serialise() {
    let mut nand = array();
    let mut dram = vec![0u8; 2 * WINDOW];
    nand.submit(1, read(0, 0, 0), &dram).unwrap();
    nand.submit(2, read(0, 1, 1), &dram).unwrap();
    let done = run(&mut nand, &mut dram);
    let lat = nand.timing().read_latency_ns();
    assert_eq!((done[0].0, done[0].1), (1, lat));
    assert_eq!((done[1].0, done[1].1), (2, 2 * lat));
}

#[test]
fn ways_on_one_channel_interleave_but_contend_for_the_bus() {
    let mut nand = array();
    let mut dram = vec![0u8; 2 * WINDOW];
    let t = *nand.timing();
    // Dies 0 and 2 are ways 0 and 1 of channel 0.
    nand.submit(1, read(0, 0, 0), &dram).unwrap();
    nand.submit(2, read(2, 0, 1), &dram).unwrap();
    let done = run(&mut nand, &mut dram);
    // The second command waits for the first one's command cycles, the two senses overlap,
    // and the second data-out waits for the first.
    assert_eq!(done[0].1, t.read_latency_ns());
    let second_sense_end = 2 * t.command_overhead_ns + t.t_read_ns;
    let expect = second_sense_end.max(t.read_latency_ns()) + t.page_transfer_ns;
    assert_eq!(done[1].1, expect);
    assert!(done[1].1 < 2 * t.read_latency_ns(), "senses overlap");
    assert!(done[1].1 > t.read_latency_ns(), "the channel is shared");
    assert_eq!(nand.stats().channel_bytes, vec![2 * PAGE as u64, 0]);
}

#[test]
fn program_holds_the_channel_only_for_its_data_in() {
    let mut nand = array();
    let mut dram = vec![0u8; 2 * WINDOW];
    let t = *nand.timing();
    let program = FlashOp::Program {
        ppn: ppn(0, 0),
        dram_offset_bytes: 0,
    };
    nand.submit(1, program, &dram).unwrap();
    nand.submit(2, read(2, 0, 1), &dram).unwrap(); // same channel, other way
    let done = run(&mut nand, &mut dram);
    assert_eq!(done[0].0, 2, "the read finishes during the program");
    let read_start = t.command_overhead_ns + t.page_transfer_ns;
    assert_eq!(done[0].1, read_start + t.read_latency_ns());
    assert_eq!(done[1].1, t.program_latency_ns());
}

#[test]
fn operations_on_a_die_complete_in_submission_order() {
    let mut nand = array();
    let mut dram = vec![0u8; 2 * WINDOW];
    let program = FlashOp::Program {
        ppn: ppn(3, 0),
        dram_offset_bytes: 0,
    };
    nand.submit(
        10,
        FlashOp::Erase {
            block: PhysBlock(12),
        },
        &dram,
    )
    .unwrap();
    nand.submit(11, read(3, 2, 1), &dram).unwrap();
    nand.submit(12, program, &dram).unwrap();
    nand.submit(13, read(3, 0, 1), &dram).unwrap();
    let done = run(&mut nand, &mut dram);
    let tags: Vec<u32> = done.iter().map(|d| d.0).collect();
    assert_eq!(tags, vec![10, 11, 12, 13]);
    assert!(done.windows(2).all(|w| w[0].1 < w[1].1));
}

#[test]
fn reads_on_different_planes_of_a_die_share_one_sense() {
    let mut nand = array().with_planes(2);
    let mut dram = vec![0u8; 3 * WINDOW];
    let t = *nand.timing();
    // Die 0: pages 0 and 4 are in blocks 0 and 1 (planes 0 and 1), page 8 in block 2
    // (plane 0 again).
    nand.submit(1, read(0, 0, 0), &dram).unwrap();
    nand.submit(2, read(0, 4, 1), &dram).unwrap();
    nand.submit(3, read(0, 8, 2), &dram).unwrap();
    let done = run(&mut nand, &mut dram);
    let sense_end = 2 * t.command_overhead_ns + t.t_read_ns;
    assert_eq!((done[0].0, done[0].1), (1, sense_end + t.page_transfer_ns));
    assert_eq!(
        (done[1].0, done[1].1),
        (2, sense_end + 2 * t.page_transfer_ns)
    );
    // Plane 0 was taken: the third read runs alone after the pair.
    assert_eq!((done[2].0, done[2].1), (3, done[1].1 + t.read_latency_ns()));
    assert!(done[1].1 < 2 * t.read_latency_ns());
}

#[test]
fn programs_on_different_planes_share_one_tprog() {
    let mut nand = array().with_planes(2);
    let mut dram = vec![0u8; WINDOW];
    let t = *nand.timing();
    let program = |page| FlashOp::Program {
        ppn: ppn(0, page),
        dram_offset_bytes: 0,
    };
    nand.submit(1, program(0), &dram).unwrap(); // block 0, plane 0
    nand.submit(2, program(4), &dram).unwrap(); // block 1, plane 1
    nand.submit(3, read(0, 1, 0), &dram).unwrap(); // a read does not join
    let done = run(&mut nand, &mut dram);
    let both = 2 * (t.command_overhead_ns + t.page_transfer_ns) + t.t_program_ns;
    assert_eq!(done[0], (1, both, Ok(())));
    assert_eq!(done[1], (2, both, Ok(())));
    assert_eq!((done[2].0, done[2].1), (3, both + t.read_latency_ns()));
    assert_eq!(nand.stats().die_busy_ns, done[2].1);
}

#[test]
fn one_plane_never_groups() {
    let mut nand = array();
    let mut dram = vec![0u8; 2 * WINDOW];
    nand.submit(1, read(0, 0, 0), &dram).unwrap();
    nand.submit(2, read(0, 4, 1), &dram).unwrap();
    let done = run(&mut nand, &mut dram);
    assert_eq!(done[1].1, 2 * nand.timing().read_latency_ns());
}

#[test]
fn issue_time_and_advance_bound_what_poll_returns() {
    let mut nand = array();
    let mut dram = vec![0u8; WINDOW];
    nand.submit(1, read(0, 0, 0), &dram).unwrap();
    nand.issue_staged(1_000_000);
    let lat = nand.timing().read_latency_ns();
    nand.advance_to(1_000_000 + lat - 1);
    assert!(nand.poll(&mut dram).is_none());
    assert_eq!(nand.pending_ops(), 1);
    nand.advance_to(1_000_000 + lat);
    assert_eq!(nand.poll(&mut dram).map(|c| c.tag), Some(1));
    assert_eq!(nand.pending_ops(), 0);
    assert_eq!(nand.next_event_ns(), None);
}
