//! Simulated flash page reads per wall-clock second (what `sagessd device bench` prints): how
//! fast this machine runs the emulated SSD, beside the ceiling of the copies alone.

use std::time::Instant;

use sagessd_abi::nvme::{Status, SubmissionEntry};
use sagessd_emulator::{HwConfig, Ssd};
use sagessd_firmware::hal::SPARE_BYTES;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Flash pages written once and then read at random.
    pub region_pages: u64,
    /// Reads in flight.
    pub queue_depth: usize,
    /// Wall-clock seconds to read for.
    pub seconds: f64,
}

/// What the run measured.
#[derive(Clone, Copy, Debug)]
pub struct DeviceBench {
    /// The queue depth run.
    pub queue_depth: usize,
    /// Pages of the region read.
    pub region_pages: u64,
    /// Read commands completed.
    pub commands: u64,
    /// Flash pages the device read.
    pub flash_pages_read: u64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Virtual (modelled) seconds simulated.
    pub virtual_s: f64,
    /// The copies alone, per wall-clock second: this machine's ceiling.
    pub copies_alone_per_wall_s: f64,
}

/// Writes the region once at QD1, drops the caches, then reads 4 KiB at random at the queue
/// depth for the seconds asked.
pub fn run(hw: &HwConfig, a: &Settings) -> anyhow::Result<DeviceBench> {
    let mut ssd = Ssd::new(hw)?;
    let block = u64::from(ssd.block_size_bytes());
    let page = u64::from(hw.nand.page_size_bytes);
    let blocks_per_page = page / block;
    let max_blocks = u64::from(hw.firmware.max_transfer_bytes) / block;
    let region_blocks = a
        .region_pages
        .saturating_mul(blocks_per_page)
        .min(ssd.namespace_block_count());
    anyhow::ensure!(region_blocks > 0, "empty region");
    // Write the region once (max-size writes at QD1), then start cold.
    let mut lba = 0;
    let mut cid: u16 = 0;
    while lba < region_blocks {
        let n = max_blocks.min(region_blocks - lba);
        cid = cid.wrapping_add(1);
        let sqe = SubmissionEntry::read_write(true, cid, 1, lba, n as u32);
        let done = ssd.execute(1, sqe, vec![0x5A; (n * block) as usize])?;
        anyhow::ensure!(done.cqe.status() == Status::SUCCESS, "write failed");
        lba += n;
    }
    ssd.drop_caches();

    let read_blocks = (4096 / block).max(1);
    let slots = region_blocks / read_blocks;
    anyhow::ensure!(slots > 0, "the region holds no {read_blocks}-block read");
    let mut rng = sagessd_runtime::rng::SplitMix64::new(1);
    let mut next_read = |cid: u16| {
        let slba = rng.next_u64() % slots * read_blocks;
        SubmissionEntry::read_write(false, cid, 1, slba, read_blocks as u32)
    };
    let before = ssd.stats();
    let sim_start_ns = ssd.now_ns();
    let buffer = (read_blocks * block) as usize;
    let started = Instant::now();
    let mut completed = 0u64;
    for _ in 0..a.queue_depth.max(1) {
        cid = cid.wrapping_add(1);
        ssd.submit(1, next_read(cid), vec![0; buffer])?;
    }
    let mut stop = false;
    while let Some(done) = ssd.reap()? {
        anyhow::ensure!(done.cqe.status() == Status::SUCCESS, "read failed");
        completed += 1;
        if completed.is_multiple_of(4096) && started.elapsed().as_secs_f64() >= a.seconds {
            stop = true;
        }
        if !stop {
            cid = cid.wrapping_add(1);
            // The completed command's buffer carries the next read (no allocation per command).
            ssd.submit(1, next_read(cid), done.data)?;
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let after = ssd.stats();
    let pages = after.nand_pages_read - before.nand_pages_read;
    let sim_s = (ssd.now_ns() - sim_start_ns) as f64 * 1e-9;
    drop(ssd);
    let ceiling = copy_ceiling_per_s(
        region_blocks / blocks_per_page,
        page as usize,
        buffer,
        hw.firmware.page_buffer_pages as usize * (page as usize + SPARE_BYTES),
        a.seconds.min(1.0),
    );
    Ok(DeviceBench {
        queue_depth: a.queue_depth.max(1),
        region_pages: region_blocks / blocks_per_page,
        commands: completed,
        flash_pages_read: pages,
        wall_s,
        virtual_s: sim_s,
        copies_alone_per_wall_s: ceiling,
    })
}

/// The most reads a second this machine could serve if a simulated read cost nothing but its
/// copies: `read_bytes` (a sector run) and a spare area from a random one of `pages` pages of
/// `page_bytes` into a window of a `buffer_bytes` page buffer (the next, round robin), then into a
/// host buffer, for `seconds`. What the flash model, the firmware and the queues add is the
/// distance from it.
fn copy_ceiling_per_s(
    pages: u64,
    page_bytes: usize,
    read_bytes: usize,
    buffer_bytes: usize,
    seconds: f64,
) -> f64 {
    let window = page_bytes + SPARE_BYTES;
    let read_bytes = read_bytes.min(page_bytes);
    let store: Vec<Box<[u8]>> = (0..pages.max(1))
        .map(|p| vec![p as u8; window].into_boxed_slice())
        .collect();
    let slots = (buffer_bytes / window).max(1);
    let mut dram = vec![0u8; slots * window];
    let mut host = vec![0u8; read_bytes];
    let mut rng = sagessd_runtime::rng::SplitMix64::new(2);
    let started = Instant::now();
    let mut copies = 0u64;
    while started.elapsed().as_secs_f64() < seconds {
        for _ in 0..1024 {
            let page = &store[(rng.next_u64() % store.len() as u64) as usize];
            let at = (rng.next_u64() as usize % (page_bytes / read_bytes)) * read_bytes;
            let slot = &mut dram[(copies as usize % slots) * window..][..window];
            slot[at..at + read_bytes].copy_from_slice(&page[at..at + read_bytes]);
            slot[page_bytes..].copy_from_slice(&page[page_bytes..]);
            host.copy_from_slice(&slot[at..at + read_bytes]);
            copies += 1;
        }
    }
    std::hint::black_box(&host);
    copies as f64 / started.elapsed().as_secs_f64()
}
