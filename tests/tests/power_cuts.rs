//! The power-cut campaign of the test suite: 1,000 seeded runs of a random workload over the
//! emulator's NAND model with media faults (failed programs and erases, transient read faults
//! the firmware must retry past, pages left uncorrectable), each cut at a random instant (mid-program,
//! mid-erase, mid-GC, mid-checkpoint), booted from the flash and checked LBA by LBA against a
//! model of what the host was promised (`sagessd_emulator::crash_sim`). A longer run:
//! `sagessd device crash-test --seeds N`.

use sagessd_emulator::crash_sim::run_campaign;

#[test]
fn a_thousand_power_cuts_lose_no_completed_write() {
    let c = run_campaign(0, 1000);
    let failures: Vec<String> = c.failures.iter().map(ToString::to_string).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(c.seeds, 1000);
    // The campaign reaches the places that matter, or it proves nothing.
    assert!(c.torn_programs > 100, "{c:?}");
    assert!(c.torn_erases > 5, "{c:?}");
    assert!(c.torn_checkpoints > 0, "{c:?}");
    assert!(c.seeds_with_gc > 200, "{c:?}");
    assert!(c.pages_replayed > 1000, "{c:?}");
    assert!(c.in_flight_at_cut > 1000, "{c:?}");
    // Read faults happened, were retried, and only uncorrectable pages reached the host (a
    // transient one that did fails its seed).
    assert!(c.media_read_failures > 1000, "{c:?}");
    assert!(c.read_retries >= c.media_read_failures / 2, "{c:?}");
    assert!(c.uncorrectable_pages > 0 && c.unrecovered > 0, "{c:?}");
    println!(
        "1000 power cuts: {} writes completed and kept, {} commands in flight at the cuts, \
         {} programs and {} erases torn, {} checkpoints torn, {} pages replayed, \
         {} media read failures, {} reads retried, {} unrecovered",
        c.writes_completed,
        c.in_flight_at_cut,
        c.torn_programs,
        c.torn_erases,
        c.torn_checkpoints,
        c.pages_replayed,
        c.media_read_failures,
        c.read_retries,
        c.unrecovered
    );
}
