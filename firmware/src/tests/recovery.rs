//! Booting from flash: clean stops, torn checkpoints, power cuts with commands in flight, and
//! failed programs, over the in-memory flash fake. The randomised power-cut campaign over the
//! emulator's NAND model lives in `sagessd_emulator::crash_sim`.

use std::vec;
use std::vec::Vec;

use sagessd_abi::nvme::Status;

use super::{Device, ns_submit, ring_with_hub, small_config, small_geometry, store_graph};
use crate::FirmwareConfig;
use crate::hal::{Geometry, PhysPage};

/// Small pages, so that a checkpoint spans many pages (and can be torn half-way).
fn small_page_geometry() -> Geometry {
    Geometry {
        channels: 2,
        ways: 2,
        dies_per_way: 1,
        blocks_per_die: 32,
        pages_per_block: 16,
        page_size_bytes: 512,
    }
}

fn small_page_config() -> FirmwareConfig {
    FirmwareConfig {
        max_transfer_bytes: 4096,
        ..small_config()
    }
}

/// Contents of LBA `lba` written in round `round` (every byte names both).
fn pattern(lba: u64, round: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * 512)
        .map(|i| (lba as u8).wrapping_mul(31) ^ round ^ (i / 512) as u8)
        .collect()
}

#[test]
fn a_clean_stop_boots_with_nothing_to_replay_and_keeps_data_trims_and_the_graph() {
    let mut d = Device::new(small_geometry(), small_config(), 11);
    let (indptr, indices) = ring_with_hub(600);
    store_graph(&mut d, indptr, indices);
    let n = d.fw.namespace_block_count();
    // Overwrite the upper half several times so GC has moved pages and erased blocks.
    for round in 0u8..5 {
        for lba in (n / 2..n - 8).step_by(8) {
            assert!(d.write(lba, &pattern(lba, round, 8)).is_success());
        }
    }
    let trimmed = n / 2 + 64;
    let (sqe, ranges) = super::dsm(trimmed, 16);
    assert!(d.exec(1, sqe, ranges).0.status().is_success());
    d.fw.request_checkpoint();
    d.settle();
    assert!(d.fw.ftl_stats().blocks_erased > 0, "GC ran");
    let expected: Vec<(u64, Vec<u8>)> = (n / 2..n - 8)
        .step_by(8)
        .map(|lba| (lba, d.read(lba, 8).1))
        .collect();

    let mut back = d.power_cycle(1).expect("boots");
    let report = back.fw.boot_report();
    assert!(report.checkpoint_id.is_some(), "{report:?}");
    assert_eq!(report.pages_replayed, 0, "{report:?}");
    assert_eq!(back.fw.ftl_stats(), d.fw.ftl_stats());
    for (lba, data) in &expected {
        assert_eq!(&back.read(*lba, 8).1, data, "lba {lba}");
    }
    assert_eq!(
        back.read(trimmed, 16).1,
        vec![0u8; 16 * 512],
        "the trim holds"
    );
    // The graph is attached again: a sampling job runs without a new GRAPH_ATTACH.
    assert!(ns_submit(&mut back, 3, &[4, 4], &[1, 2, 3]).0.is_success());
    // And it keeps working: writes after the boot land and survive the next one.
    assert!(back.write(n / 2, &pattern(n / 2, 99, 8)).is_success());
    let again = back.power_cycle(2).expect("boots again");
    let mut again = again;
    assert_eq!(again.read(n / 2, 8).1, pattern(n / 2, 99, 8));
}

#[test]
fn writes_since_the_last_checkpoint_are_replayed_and_a_torn_checkpoint_is_skipped() {
    let mut d = Device::new(small_page_geometry(), small_page_config(), 5);
    let n = d.fw.namespace_block_count();
    for lba in (0..n / 2).step_by(4) {
        assert!(d.write(lba, &pattern(lba, 1, 4)).is_success());
    }
    d.fw.request_checkpoint();
    d.settle();
    let first = d.fw.checkpoint_stats();
    assert_eq!(first.written, 1);
    assert!(first.pages_per_checkpoint > 4, "{first:?}");
    // Writes after it: only replay can bring them back.
    for lba in (0..n / 4).step_by(4) {
        assert!(d.write(lba, &pattern(lba, 2, 4)).is_success());
    }
    // Start a second checkpoint and cut the power while its pages are being programmed.
    d.settle();
    let before = d.fw.checkpoint_stats();
    d.fw.request_checkpoint();
    let mut polls = 0;
    while d.fw.flash().pending_count() < first.pages_per_checkpoint as usize / 2 {
        d.poll_once();
        polls += 1;
        assert!(polls < 1_000, "the checkpoint never started programming");
    }
    let mut back = d.power_cycle(7).expect("boots");
    let report = back.fw.boot_report();
    assert_eq!(report.torn_checkpoints, 1, "{report:?}");
    assert_eq!(report.checkpoint_id, Some(before.written), "{report:?}");
    assert!(report.pages_replayed > 0, "{report:?}");
    for lba in (0..n / 2).step_by(4) {
        let round = if lba < n / 4 { 2 } else { 1 };
        assert_eq!(back.read(lba, 4).1, pattern(lba, round, 4), "lba {lba}");
    }
    // The next checkpoint goes to the torn slot, not over the good one.
    back.fw.request_checkpoint();
    back.settle();
    let mut third = back.power_cycle(8).expect("boots");
    assert_eq!(third.fw.boot_report().pages_replayed, 0);
    assert_eq!(third.read(0, 4).1, pattern(0, 2, 4));
}

#[test]
fn power_cuts_with_writes_in_flight_keep_every_completed_write() {
    for seed in 0..40u64 {
        let mut d = Device::new(small_page_geometry(), small_page_config(), seed);
        let n = d.fw.namespace_block_count();
        let lbas: Vec<u64> = (0..n - 8).step_by(8).collect();
        for (i, lba) in lbas.iter().enumerate() {
            assert!(d.write(*lba, &pattern(*lba, i as u8, 8)).is_success());
        }
        // Overwrites in flight: submitted, polled a seed-dependent number of times, then cut.
        let pending: Vec<_> = lbas
            .iter()
            .take(6)
            .map(|lba| (*lba, d.submit_write(*lba, &pattern(*lba, 200, 8))))
            .collect();
        for _ in 0..(seed * 7) % 60 {
            d.poll_once();
        }
        let completed: Vec<bool> = pending.iter().map(|(_, id)| d.is_complete(*id)).collect();
        let mut back = d.power_cycle(seed).expect("boots");
        for (i, lba) in lbas.iter().enumerate() {
            let old = pattern(*lba, i as u8, 8);
            let new = pattern(*lba, 200, 8);
            let got = back.read(*lba, 8).1;
            match pending.iter().position(|(l, _)| l == lba) {
                Some(k) if completed[k] => assert_eq!(got, new, "seed {seed} lba {lba}"),
                // In flight at the cut: each flash page is old or new, never anything else.
                Some(_) => {
                    for (page, chunk) in got.chunks(512).enumerate() {
                        let range = page * 512..(page + 1) * 512;
                        assert!(
                            chunk == &old[range.clone()] || chunk == &new[range],
                            "seed {seed} lba {lba} page {page}"
                        );
                    }
                }
                None => assert_eq!(got, old, "seed {seed} lba {lba}"),
            }
        }
    }
}

#[test]
fn a_failed_program_is_written_elsewhere_and_its_block_retired() {
    let mut d = Device::new(small_geometry(), small_config(), 9);
    // Fail the first page of every block: whichever the next write lands on fails once.
    let g = small_geometry();
    for b in 0..g.block_count() {
        d.fw.flash_mut()
            .fail_program_of(PhysPage(b * g.pages_per_block));
    }
    for lba in (0..64u64).step_by(4) {
        assert_eq!(d.write(lba, &pattern(lba, 3, 4)), Status::SUCCESS);
    }
    assert!(d.fw.ftl_stats().media_failures > 0);
    for lba in (0..64u64).step_by(4) {
        assert_eq!(d.read(lba, 4).1, pattern(lba, 3, 4), "lba {lba}");
    }
    let mut back = d.power_cycle(4).expect("boots");
    for lba in (0..64u64).step_by(4) {
        assert_eq!(
            back.read(lba, 4).1,
            pattern(lba, 3, 4),
            "after boot, lba {lba}"
        );
    }
}

#[test]
fn a_checkpoint_of_another_capacity_is_refused_with_the_field_named() {
    let mut d = Device::new(small_geometry(), small_config(), 1);
    assert!(d.write(0, &pattern(0, 1, 4)).is_success());
    d.fw.request_checkpoint();
    d.settle();
    let flash = d.fw.flash().clone();
    let other = FirmwareConfig {
        over_provisioning_percent: 20,
        ..small_config()
    };
    assert_eq!(
        Device::boot(other, flash).err(),
        Some(crate::RestoreError::Invalid("checkpoint logical_pages"))
    );
}

#[test]
fn a_boot_erases_nothing_and_a_free_block_is_erased_only_before_it_is_opened() {
    let mut d = Device::new(small_geometry(), small_config(), 27);
    let n = d.fw.namespace_block_count() / 16 * 8;
    for lba in (0..n).step_by(8) {
        assert!(d.write(lba, &pattern(lba, 1, 8)).is_success());
    }
    d.fw.request_checkpoint();
    d.settle();
    let mut flash = d.fw.flash().clone();
    flash.power_cut(5, d.fw.dram_bytes());
    let erased = flash.stats.erases;
    let config = *d.fw.config();
    let size = crate::dram_size_bytes(&config, &small_geometry()).unwrap();
    let (fw, _) = super::Fw::recover(config, flash, vec![0u8; size], &mut |_| {}).unwrap();
    assert_eq!(fw.flash().stats.erases, erased, "the boot erased blocks");
    let mut d = Device::from_firmware(fw);
    d.settle();
    // One block per die is erased to have one ready, though half the blocks are free.
    let dies = u64::from(small_geometry().die_count());
    let after_boot = d.fw.flash().stats.erases - erased;
    assert!((1..=dies).contains(&after_boot), "{after_boot} erases");
    // Every block the boot left free (the fake refuses a program into one not erased) takes
    // data again, and what was there before the stop is still there.
    for round in 2u8..4 {
        for lba in (n..2 * n).step_by(8) {
            assert!(d.write(lba, &pattern(lba, round, 8)).is_success());
        }
    }
    for lba in (0..n).step_by(8) {
        assert!(
            d.read(lba, 8) == (Status::SUCCESS, pattern(lba, 1, 8)),
            "lba {lba}"
        );
    }
    for lba in (n..2 * n).step_by(8) {
        assert!(
            d.read(lba, 8) == (Status::SUCCESS, pattern(lba, 3, 8)),
            "lba {lba}"
        );
    }
}

#[test]
fn a_trim_is_on_flash_when_it_completes_without_a_checkpoint_and_a_later_write_wins() {
    let mut d = Device::new(small_geometry(), small_config(), 28);
    for lba in (0..256).step_by(8) {
        assert!(d.write(lba, &pattern(lba, 1, 8)).is_success());
    }
    d.fw.request_checkpoint();
    d.settle();
    let checkpoints = d.fw.checkpoint_stats().written;
    // A deallocate, a deallocating Write Zeroes, then a write into the first trimmed range.
    let (sqe, ranges) = super::dsm(16, 32);
    assert!(d.exec(1, sqe, ranges).0.status().is_success());
    let wz = super::write_zeroes(64, 16, true);
    assert!(d.exec(1, wz, Vec::new()).0.status().is_success());
    assert!(d.write(24, &pattern(24, 2, 8)).is_success());
    assert_eq!(
        d.fw.checkpoint_stats().written,
        checkpoints,
        "no checkpoint"
    );
    assert!(
        d.fw.trim_log_stats().records >= 2,
        "{:?}",
        d.fw.trim_log_stats()
    );
    // An overwrite (same data) tells the flash the old version's data is dead (the fake
    // poisons it).
    assert!(d.write(0, &pattern(0, 1, 8)).is_success());
    assert!(d.fw.flash().stats.forgotten > 0);
    // The boot replays the records (its report counts them) ...
    let mut flash = d.fw.flash().clone();
    flash.power_cut(6, d.fw.dram_bytes());
    let config = *d.fw.config();
    let size = crate::dram_size_bytes(&config, &small_geometry()).unwrap();
    let (_, report) = super::Fw::recover(config, flash, vec![0u8; size], &mut |_| {}).unwrap();
    assert!(report.trim_records >= 2, "{report:?}");
    // ... and what it recovers reads as trimmed.
    let mut d = d.power_cycle(6).unwrap();
    let zero = |blocks: usize| vec![0u8; blocks * 512];
    assert!(d.read(16, 8) == (Status::SUCCESS, zero(8)), "trimmed");
    assert!(
        d.read(24, 8) == (Status::SUCCESS, pattern(24, 2, 8)),
        "rewritten"
    );
    assert!(d.read(32, 16) == (Status::SUCCESS, zero(16)), "trimmed");
    assert!(d.read(64, 16) == (Status::SUCCESS, zero(16)), "zeroed");
    for lba in [0, 8, 48, 56, 80, 248] {
        assert!(
            d.read(lba, 8) == (Status::SUCCESS, pattern(lba, 1, 8)),
            "lba {lba}"
        );
    }
    // The records are replayed again by a second boot (no checkpoint was written since).
    let mut d = d.power_cycle(7).unwrap();
    assert!(
        d.read(16, 8) == (Status::SUCCESS, zero(8)),
        "trimmed, second boot"
    );
    assert!(
        d.read(24, 8) == (Status::SUCCESS, pattern(24, 2, 8)),
        "rewritten, 2nd boot"
    );
}
