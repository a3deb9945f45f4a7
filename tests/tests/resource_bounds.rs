//! Memory that must stay bounded however long a device runs: regressions of what an
//! independent campaign measured growing (issue 12).

use sagessd_abi::nvme::{Status, SubmissionEntry};
use sagessd_emulator::{HwConfig, Ssd};

/// 4 KiB random reads on cosmos-plus (a sampling-lane core that stays idle) once grew the
/// controller DRAM's calendar by one interval per read, never pruned (~40 B per read of RSS).
#[test]
fn the_dram_calendar_stays_bounded_while_the_isp_core_idles() {
    let hw = HwConfig::cosmos_plus();
    assert!(
        hw.isp_lane_cores() > 0,
        "the case needs a core that runs only a sampling lane"
    );
    let mut ssd = Ssd::new(&hw).expect("device");
    let block = ssd.block_size_bytes() as usize;
    let blocks = (4096 / block) as u32;
    let region = 256u64;
    for i in 0..region {
        let sqe = SubmissionEntry::read_write(true, 1, 1, i * u64::from(blocks), blocks);
        let done = ssd.execute(1, sqe, vec![i as u8; 4096]).expect("write");
        assert_eq!(done.cqe.status(), Status::SUCCESS);
    }
    let mut most = 0;
    let mut x = 1u64;
    for n in 0..20_000u32 {
        x = sagessd_abi::sample::mix(x);
        let slba = x % region * u64::from(blocks);
        let cid = (n % 1000) as u16 + 2;
        let done = ssd
            .execute(
                1,
                SubmissionEntry::read_write(false, cid, 1, slba, blocks),
                vec![0; 4096],
            )
            .expect("read");
        assert_eq!(done.cqe.status(), Status::SUCCESS);
        if n > 1000 {
            most = most.max(ssd.dram_calendar_len());
        }
    }
    assert!(
        most < 64,
        "the calendar held {most} intervals after 20,000 reads"
    );
}

/// Without `--image` the NAND model keeps pages in memory: every programmed page until its
/// block was erased, so a write load on a big device grew RSS by a page per write (19 GB in
/// three minutes of 64 × QD128, issue 25). A page the firmware overwrites is now freed.
#[test]
fn the_in_memory_flash_holds_the_live_data_not_every_page_written() {
    let hw = HwConfig::cosmos_plus();
    let mut ssd = Ssd::new(&hw).expect("device");
    let block = ssd.block_size_bytes() as usize;
    let blocks = (4096 / block) as u32;
    let page_bytes = hw.nand.page_size_bytes as usize;
    // 1 MiB of LBAs, overwritten 4 KiB at a time in random order, 4,000 times.
    let region = 256u64;
    let live_pages = region as usize * 4096 / page_bytes;
    let mut x = 7u64;
    for n in 0..4_000u32 {
        x = sagessd_abi::sample::mix(x);
        let slba = x % region * u64::from(blocks);
        let cid = (n % 1000) as u16 + 1;
        let sqe = SubmissionEntry::read_write(true, cid, 1, slba, blocks);
        let done = ssd.execute(1, sqe, vec![n as u8; 4096]).expect("write");
        assert_eq!(done.cqe.status(), Status::SUCCESS);
    }
    let held = ssd.stored_data_pages();
    assert!(
        held <= live_pages,
        "{held} pages of data held for {live_pages} live pages after 4,000 writes"
    );
}
