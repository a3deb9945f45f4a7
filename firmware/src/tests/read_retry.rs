//! Read-retry (`crate::read_retry`): transient read faults are read past — by the page buffer's
//! fills, a read-modify-write, garbage collection and the boot — and only a page that fails
//! every attempt is reported unrecoverable; a checkpoint is read back before it counts, and a
//! loss GC found outlives a power cut.

use std::vec;
use std::vec::Vec;

use sagessd_abi::nvme::Status;

use super::{
    Device, Fw, fill_with_page_zero_marked, overwrite_until, small_config, small_geometry,
};
use crate::hal::PhysPage;
use crate::read_retry::READ_RETRIES;

/// The physical page whose data starts with `byte` (each test writes one such page).
fn page_starting_with(d: &Device, byte: u8) -> PhysPage {
    (0..small_geometry().page_count() as u32)
        .map(PhysPage)
        .find(|p| d.fw.flash().page(*p)[0] == byte)
        .expect("the page was programmed")
}

/// Reads enough other pages through the 16-page buffer that page 0's copy is evicted.
fn evict(d: &mut Device) {
    for slba in (64..64 + 4 * 64).step_by(4) {
        assert!(d.read(slba, 4).0.is_success());
    }
}

#[test]
fn a_transient_fault_is_read_past_and_a_page_failing_every_attempt_is_reported() {
    let mut d = Device::new(small_geometry(), small_config(), 21);
    let data: Vec<u8> = (0..2048).map(|i| (i * 7 + 0x5A) as u8).collect();
    assert_eq!(d.write(0, &data), Status::SUCCESS);
    let ppn = page_starting_with(&d, data[0]);
    evict(&mut d);
    // Three failures: the fourth attempt succeeds.
    d.fw.flash_mut().fail_next_reads_of(ppn, 3);
    let before = d.fw.read_retry_stats();
    assert_eq!(d.read(0, 4), (Status::SUCCESS, data.clone()));
    let after = d.fw.read_retry_stats();
    assert_eq!(after.retries - before.retries, 3);
    assert_eq!(after.unrecovered, 0);
    // One failure more than that: every attempt fails, and the host is told.
    evict(&mut d);
    d.fw.flash_mut()
        .fail_next_reads_of(ppn, u32::from(READ_RETRIES) + 1);
    assert_eq!(d.read(0, 4).0, Status::UNRECOVERED_READ_ERROR);
    assert_eq!(d.fw.read_retry_stats().unrecovered, 1);
    // The fault has passed: the page reads again.
    assert_eq!(d.read(0, 4), (Status::SUCCESS, data));
    d.settle();
}

#[test]
fn a_read_modify_write_gets_past_a_transient_fault() {
    let mut d = Device::new(small_geometry(), small_config(), 22);
    let mut page = vec![0x6Bu8; 2048];
    assert_eq!(d.write(0, &page), Status::SUCCESS);
    let ppn = page_starting_with(&d, 0x6B);
    evict(&mut d);
    d.fw.flash_mut().fail_next_reads_of(ppn, 2);
    // One block of the four: the other three come from the old page, read twice in vain first.
    assert_eq!(d.write(1, &[0x7C; 512]), Status::SUCCESS);
    page[512..1024].fill(0x7C);
    assert_eq!(d.read(0, 4), (Status::SUCCESS, page));
    assert_eq!(d.fw.read_retry_stats().retries, 2);
}

#[test]
fn garbage_collection_reads_past_a_transient_fault_and_loses_nothing() {
    let mut d = Device::new(small_geometry(), small_config(), 23);
    let ppn = fill_with_page_zero_marked(&mut d);
    d.fw.flash_mut().fail_next_reads_of(ppn, 3);
    // Overwrite other pages until GC has copied logical page 0 (its retries show it).
    overwrite_until(&mut d, 0x9E37_79B9_7F4A_7C15, |d| {
        d.fw.read_retry_stats().retries >= 3
    });
    d.settle();
    let stats = d.fw.read_retry_stats();
    assert_eq!(stats.retries, 3, "GC read the page");
    assert_eq!((stats.unrecovered, d.fw.ftl_stats().media_failures), (0, 0));
    assert_eq!(d.read(0, 4), (Status::SUCCESS, vec![0x5A; 2048]));
}

#[test]
fn the_boot_reads_past_a_transient_fault_and_replays_the_page() {
    let mut d = Device::new(small_geometry(), small_config(), 24);
    // Written after the last checkpoint: the boot learns of it only by reading its page.
    assert_eq!(d.write(0, &[0x4D; 2048]), Status::SUCCESS);
    d.settle();
    let ppn = page_starting_with(&d, 0x4D);
    let mut flash = d.fw.flash().clone();
    flash.power_cut(1, d.fw.dram_bytes());
    flash.fail_next_reads_of(ppn, 2);
    let config = *d.fw.config();
    let size = crate::dram_size_bytes(&config, &small_geometry()).unwrap();
    let (fw, report) = Fw::recover(config, flash, vec![0u8; size], &mut |_| {}).unwrap();
    assert!(
        report.pages_replayed >= 1 && report.read_retries >= 2,
        "{report:?}"
    );
    let mut d = Device::from_firmware(fw);
    assert_eq!(d.read(0, 4), (Status::SUCCESS, vec![0x4D; 2048]));
}

#[test]
fn a_checkpoint_page_that_does_not_read_back_is_written_again_before_it_counts() {
    let mut d = Device::new(small_geometry(), small_config(), 25);
    assert_eq!(d.write(0, &[0x3C; 8 * 512]), Status::SUCCESS);
    let (sqe, ranges) = super::dsm(0, 4);
    assert!(d.exec(1, sqe, ranges).0.status().is_success());
    d.settle();
    // Page 0 of either slot fails every read of the first attempt's read-back.
    let layout = d.fw.checkpointer().layout;
    for slot in 0..2 {
        d.fw.flash_mut()
            .fail_next_reads_of(layout.page(slot, 0), u32::from(READ_RETRIES) + 1);
    }
    let before = d.fw.checkpoint_stats();
    d.fw.request_checkpoint();
    d.settle();
    let after = d.fw.checkpoint_stats();
    assert_eq!(after.failed - before.failed, 1, "{after:?}");
    assert_eq!(after.written - before.written, 1, "{after:?}");
    // The boot takes the second attempt, with the trim it holds.
    let mut d = d.power_cycle(3).unwrap();
    assert_eq!(d.read(0, 4), (Status::SUCCESS, vec![0; 2048]));
    assert_eq!(d.read(4, 4), (Status::SUCCESS, vec![0x3C; 2048]));
}

#[test]
fn a_page_gc_could_not_copy_still_reads_as_an_error_after_a_power_cut() {
    let mut d = Device::new(small_geometry(), small_config(), 26);
    let ppn = fill_with_page_zero_marked(&mut d);
    d.fw.flash_mut().fail_reads_of(ppn);
    overwrite_until(&mut d, 0x2545_F491_4F6C_DD1D, |d| {
        d.fw.ftl_stats().media_failures > 0
    });
    assert!(
        d.fw.read_retry_stats().unrecovered > 0,
        "GC never read the page"
    );
    // The power goes the moment GC has erased the page's block: only a checkpoint still knows
    // the page is lost.
    for _ in 0..1_000_000 {
        if d.fw.flash().page(ppn)[0] != 0x5A {
            break;
        }
        d.poll_once();
    }
    assert_ne!(d.fw.flash().page(ppn)[0], 0x5A, "GC erased the victim");
    assert_eq!(d.read(0, 4).0, Status::UNRECOVERED_READ_ERROR);
    let mut d = d.power_cycle(4).unwrap();
    assert_eq!(d.read(0, 4).0, Status::UNRECOVERED_READ_ERROR);
    assert!(d.read(4, 4).0.is_success());
}
