//! What the emulated device has done since it was built ([`DeviceStats`]).

use std::fmt;

use sagessd_firmware::work::WorkCounters;

use crate::nand::DmaBytes;

/// What the emulated device has done since it was built; all counts are cumulative.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Commands submitted by the host.
    pub commands_submitted: u64,
    /// Commands reaped by the host.
    pub commands_completed: u64,
    /// Times the firmware answered a submit with "busy" (the command was retried later).
    pub busy_retries: u64,
    /// Completions the firmware posted for commands the host did not have outstanding.
    pub spurious_completions: u64,
    /// Firmware calls (submit and poll) simulated.
    pub firmware_calls: u64,
    /// Virtual time the firmware core spent executing calls.
    pub core_busy_ns: u64,
    /// Calls of sampling lanes on cores of their own (every lane with `[cores] isp_cores` ≥ 1;
    /// all but lane 0 when sampling time-shares the cores, lane 0's work then being in the
    /// firmware core's calls).
    pub isp_calls: u64,
    /// Virtual time the cores of their own spent executing sampling lanes' calls, summed over
    /// those cores (0 without any).
    pub isp_core_busy_ns: u64,
    /// Polls that found nothing to do (the last pass of the poll loop before it idles). Their
    /// cost is in `core_busy_ns`; their counts are in `work.polls`.
    pub idle_polls: u64,
    /// Parked commands looked at by the polls of `idle_polls` (also in `work.parked_checked`).
    pub idle_poll_parked_checked: u64,
    /// The firmware's own work counters.
    pub work: WorkCounters,
    /// Flash pages read.
    pub nand_pages_read: u64,
    /// Flash pages programmed.
    pub nand_pages_programmed: u64,
    /// Flash blocks erased.
    pub nand_blocks_erased: u64,
    /// Data bytes moved over the flash channels (all channels).
    pub nand_channel_bytes: u64,
    /// Page data flash reads brought into DRAM (their named sectors) and programs took from it
    /// ([`crate::nand::NandStats::dma`]).
    pub nand_dma: DmaBytes,
    /// Core time charged for keeping that DMA coherent with the cores' caches
    /// (`[cores] cycles_per_kib_flash_read`, `cycles_per_kib_flash_program`), included in
    /// `core_busy_ns` and `isp_core_busy_ns`.
    pub flash_dma_core_ns: u64,
    /// Sum over dies of their busy time.
    pub nand_die_busy_ns: u64,
    /// Payload bytes moved host→device over PCIe (SQEs, write data, vendor payloads).
    pub pcie_h2c_bytes: u64,
    /// Payload bytes moved device→host over PCIe (CQEs, read data, subgraphs).
    pub pcie_c2h_bytes: u64,
    /// Wire bytes host→device, including TLP overhead.
    pub pcie_h2c_wire_bytes: u64,
    /// Wire bytes device→host, including TLP overhead.
    pub pcie_c2h_wire_bytes: u64,
    /// Payload bytes copied SSD→FPGA over the internal `[p2p]` link (0 without one).
    pub p2p_bytes: u64,
    /// Page copies made over the `[p2p]` link.
    pub p2p_transfers: u64,
    /// Virtual time firmware calls waited for their SSD→FPGA page copies (start' − start).
    pub p2p_wait_ns: u64,
    /// Bytes moved into or out of the controller DRAM (host DMA data, flash pages, SSD→FPGA
    /// copies).
    pub dram_bytes: u64,
    /// Time the controller DRAM spent moving them.
    pub dram_busy_ns: u64,
    /// Virtual time of the last event the device has simulated.
    pub simulated_ns: u64,
}

impl fmt::Display for DeviceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "commands: {} submitted, {} completed, {} busy retries",
            self.commands_submitted, self.commands_completed, self.busy_retries
        )?;
        writeln!(
            f,
            "firmware: {} calls, {} ns core busy ({} ns of it keeping flash DMA coherent)",
            self.firmware_calls, self.core_busy_ns, self.flash_dma_core_ns
        )?;
        writeln!(
            f,
            "nand: {} pages read, {} pages programmed, {} blocks erased, {} channel bytes \
             ({} B DMA'd into DRAM by reads, {} B out by programs)",
            self.nand_pages_read,
            self.nand_pages_programmed,
            self.nand_blocks_erased,
            self.nand_channel_bytes,
            self.nand_dma.read,
            self.nand_dma.program
        )?;
        write!(
            f,
            "pcie: {} B host→device, {} B device→host (payload)",
            self.pcie_h2c_bytes, self.pcie_c2h_bytes
        )
    }
}
