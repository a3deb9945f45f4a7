//! What booting costs on a configuration, measured rather than estimated: the firmware of that
//! configuration boots ([`sagessd_firmware::Firmware::recover`]) on in-memory flash that holds (a)
//! nothing, (b) data written before a clean stop, (c) data written since the last checkpoint when
//! the power was cut, once with N pages and once with 2N, so the growth with what a cut leaves to
//! replay shows. Times are modelled flash time (`sagessd device info` prints them); nothing here
//! touches a device image. The worst case, a whole checkpoint interval to replay, is this with N at
//! half the interval (memory: the in-memory flash holds every page written).

use sagessd_abi::nvme::SubmissionEntry;
use sagessd_firmware::BootReport;

use crate::config::HwConfig;
use crate::error::EmulatorError;
use crate::nand::NandArray;
use crate::ssd::Ssd;

/// One measured boot: what it found and did, how long it took, and the erases it left the
/// running firmware to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeasuredBoot {
    /// The firmware's own report of the boot.
    pub report: BootReport,
    /// Flash time from power-on to ready, in the NAND model's virtual time (the boot reads;
    /// it erases nothing).
    pub duration_ns: u64,
    /// Blocks the firmware erased once running, before it fell quiet: the free blocks a boot
    /// leaves are erased only as they are needed, one kept ready per die (the firmware's
    /// `lazy_erase`), so this is what a power cycle costs in P/E cycles.
    pub blocks_erased_after: u64,
    /// Flash time from ready until those erases had finished (in the background: commands are
    /// served meanwhile).
    pub erasing_after_ns: u64,
}

/// The boots [`measure`] ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootCosts {
    /// Flash pages written before each stop (a multiple of the largest write).
    pub pages_written: u64,
    /// Formatted (erased) flash.
    pub blank: MeasuredBoot,
    /// After `pages_written` pages and a clean stop (a checkpoint: nothing to replay).
    pub clean: MeasuredBoot,
    /// After a clean stop, `pages_written` more pages and a power cut.
    pub cut: MeasuredBoot,
    /// As `cut`, with twice as many pages written since the checkpoint.
    pub cut_twice: MeasuredBoot,
    /// The checkpoint interval in programmed pages: at most this many pages to replay.
    pub interval_pages: u64,
}

/// Boots `config`'s firmware on in-memory flash as [`BootCosts`] describes, writing
/// `pages_written` flash pages (rounded up to whole largest writes; at least one) before each
/// stop. Twice that stays below the checkpoint interval, so that no checkpoint falls between
/// the writes and the cut (`pages_written` is lowered to fit if need be).
pub fn measure(config: &HwConfig, pages_written: u64) -> Result<BootCosts, EmulatorError> {
    let (nand, dram) = Ssd::parts(config)?;
    let (mut ssd, blank) = boot(config, nand, dram)?;
    let interval_pages = ssd.checkpoints().1;
    let page_bytes = u64::from(config.nand.page_size_bytes);
    let command_pages = (u64::from(config.firmware.max_transfer_bytes) / page_bytes).max(1);
    // Two batches after the checkpoint must stay below one interval; each is whole commands.
    let most = (interval_pages.saturating_sub(1) / 2 / command_pages).max(1);
    let commands = pages_written.div_ceil(command_pages).clamp(1, most);
    let pages_written = commands * command_pages;

    let mut next_lba = 0;
    write(&mut ssd, commands, &mut next_lba)?;
    ssd.checkpoint()?;
    let (mut ssd, clean) = reboot(config, ssd)?;
    write(&mut ssd, commands, &mut next_lba)?;
    let (mut ssd, cut) = reboot(config, ssd)?;
    // Start again from a checkpoint (the boot replayed the first batch and may write one of
    // its own later); then twice as much to replay.
    ssd.checkpoint()?;
    write(&mut ssd, 2 * commands, &mut next_lba)?;
    let (_, cut_twice) = reboot(config, ssd)?;
    Ok(BootCosts {
        pages_written,
        blank,
        clean,
        cut,
        cut_twice,
        interval_pages,
    })
}

/// Cuts the power of `ssd` once it is quiet (nothing in flight: the cut tears nothing, it only
/// loses the DRAM) and boots it again from its flash.
fn reboot(config: &HwConfig, mut ssd: Ssd) -> Result<(Ssd, MeasuredBoot), EmulatorError> {
    ssd.settle()?;
    let (mut nand, mut dram) = ssd.into_firmware().into_parts();
    nand.power_cut(0);
    dram.fill(0);
    boot(config, nand, dram)
}

/// Boots from `nand`, timing it on the NAND model's clock, then runs the firmware until it is
/// quiet, counting the erases it does.
fn boot(
    config: &HwConfig,
    nand: NandArray,
    dram: Vec<u8>,
) -> Result<(Ssd, MeasuredBoot), EmulatorError> {
    let start_ns = nand.now_ns();
    let (firmware, report) = Ssd::recover(config, nand, dram, &|field, reason| {
        EmulatorError::CheckFailed(format!(
            "a boot from in-memory flash: {}{reason}",
            field.map_or(String::new(), |f| format!("{f} "))
        ))
    })?;
    let ready_ns = firmware.flash().now_ns();
    let erased = firmware.flash().stats().blocks_erased;
    let mut ssd = Ssd::around(config, firmware);
    ssd.settle()?;
    let nand = ssd.firmware().flash();
    let measured = MeasuredBoot {
        report,
        duration_ns: ready_ns - start_ns,
        blocks_erased_after: nand.stats().blocks_erased - erased,
        erasing_after_ns: nand.now_ns() - ready_ns,
    };
    Ok((ssd, measured))
}

/// Writes `commands` largest writes at consecutive LBAs from `next_lba`, eight in flight.
fn write(ssd: &mut Ssd, commands: u64, next_lba: &mut u64) -> Result<(), EmulatorError> {
    const DEPTH: u64 = 8;
    let bytes = ssd.max_transfer_bytes();
    let blocks = bytes / ssd.block_size_bytes();
    // Wrap around the namespace: what matters is pages programmed, not where.
    let span = ssd
        .namespace_block_count()
        .saturating_sub(u64::from(blocks))
        .max(1);
    let (mut sent, mut done) = (0u64, 0u64);
    while done < commands {
        while sent < commands && sent - done < DEPTH {
            let slba = *next_lba % span;
            *next_lba += u64::from(blocks);
            // Command ids wrap at 2^16; with eight in flight they never collide.
            let sqe = SubmissionEntry::read_write(true, sent as u16, 1, slba, blocks);
            ssd.submit(1, sqe, vec![0x5A; bytes as usize])?;
            sent += 1;
        }
        let completed = ssd.reap()?.ok_or(EmulatorError::Stalled {
            now_ns: ssd.now_ns(),
            outstanding: ssd.outstanding(),
        })?;
        if !completed.cqe.status().is_success() {
            return Err(EmulatorError::CheckFailed(format!(
                "a write before the measured boot failed: {:?}",
                completed.cqe.status()
            )));
        }
        done += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nand::NandTiming;
    use sagessd_firmware::hal::SPARE_BYTES;

    /// The small test device with blocks enough for a few checkpoint intervals.
    fn small_config() -> HwConfig {
        let mut c = crate::ssd::tests::small_config();
        c.nand.blocks_per_die = 64;
        c.nand.pages_per_block = 64;
        c.validate().expect("small test config is valid");
        c
    }

    #[test]
    fn a_cut_replays_what_was_written_since_the_checkpoint() {
        let config = small_config();
        let costs = measure(&config, 100).unwrap();
        let page_bytes = u64::from(config.nand.page_size_bytes);
        let command_pages = u64::from(config.firmware.max_transfer_bytes) / page_bytes;
        assert_eq!(costs.pages_written % command_pages, 0, "whole commands");
        assert!(costs.pages_written >= 100);

        assert!(costs.blank.report.blank);
        assert_eq!(costs.blank.report.pages_replayed, 0);
        assert!(!costs.clean.report.blank);
        assert!(costs.clean.report.checkpoint_id.is_some());
        assert_eq!(
            costs.clean.report.pages_replayed, 0,
            "a clean stop replays nothing"
        );
        assert_eq!(costs.cut.report.pages_replayed, costs.pages_written);
        assert_eq!(
            costs.cut_twice.report.pages_replayed,
            2 * costs.pages_written
        );

        // Bounds from the timing alone: the reads take at least one read time per page on
        // each die and plane in turn (the shortest read: the spare alone, a column read).
        let timing = NandTiming::from_config(&config.nand);
        let page_bytes = u64::from(config.nand.page_size_bytes);
        let spare_ns = timing.transfer_ns(SPARE_BYTES as u64, page_bytes);
        let spare_read_ns = timing.command_overhead_ns + timing.t_read_ns + spare_ns;
        let dies = u64::from(config.nand.channels * config.nand.ways * config.nand.dies_per_way);
        let units = dies * u64::from(config.nand.planes_per_die);
        for boot in [costs.blank, costs.clean, costs.cut, costs.cut_twice] {
            let reads = boot.report.pages_read.div_ceil(units);
            assert!(boot.duration_ns >= reads * spare_read_ns, "{boot:?}");
        }
        // Blank flash is not erased again; after a stop, one block per die is erased to have
        // one ready, and the rest of the free blocks only when they are needed.
        assert_eq!(costs.blank.blocks_erased_after, 0, "{:?}", costs.blank);
        let free = u64::from(config.nand.blocks_per_die) * dies / 2;
        for boot in [costs.clean, costs.cut, costs.cut_twice] {
            assert!(
                (1..=dies).contains(&boot.blocks_erased_after),
                "{} erases of ~{free} free blocks: {boot:?}",
                boot.blocks_erased_after
            );
            assert!(
                boot.erasing_after_ns >= timing.erase_latency_ns(),
                "{boot:?}"
            );
        }

        // The scan of blank flash (the spare of the first page of every block) keeps every die
        // busy: within a quarter of the slower of the die and channel bounds (blocks die by die
        // in turn).
        let pages = costs.blank.report.pages_read;
        let channels = u64::from(config.nand.channels);
        let ideal = (pages * (timing.command_overhead_ns + spare_ns) / channels)
            .max(pages.div_ceil(dies) * spare_read_ns);
        assert!(
            costs.blank.duration_ns * 4 <= ideal * 5,
            "{} ns to read {pages} pages; {ideal} ns with every die and channel busy",
            costs.blank.duration_ns
        );
    }

    #[test]
    fn the_batches_stay_inside_one_checkpoint_interval() {
        let config = small_config();
        let costs = measure(&config, u64::MAX).unwrap();
        assert!(2 * costs.pages_written < costs.interval_pages);
        assert_eq!(
            costs.cut_twice.report.pages_replayed,
            2 * costs.pages_written
        );
    }
}
