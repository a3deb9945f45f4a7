//! The tunnel window: the NS_SUBMIT / NS_COLLECT exchange carried in ordinary Write and Read
//! commands, for hosts whose stack (or a device's stock firmware) refuses vendor opcodes.
//!
//! The LBAs just past the namespace's end (the namespace reports its size without them) form
//! `slots` slots of `slot_blocks` blocks each: block devices never reach them, passthrough and
//! fabrics commands do. A Write that starts at a slot's first LBA submits the NS_config it
//! carries (padding after the targets is ignored) as that slot's job. A Read inside a slot
//! returns the job's subgraph from the byte at its offset in the slot, zero-filled past the end.
//! It waits while the job runs, and the job ends once a Read reaches the subgraph's last byte.
//! The subgraph header's `total_size_bytes` tells the host how far to read. The window never
//! reaches flash; the device reports it in its Identify Controller vendor area.

use crate::ns_config::{MAX_LAYERS, ns_config_size_bytes};

/// Where the tunnel window lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunnelWindow {
    /// First LBA of slot 0.
    pub base_lba: u64,
    /// Blocks per slot.
    pub slot_blocks: u32,
    /// Number of slots.
    pub slots: u16,
}

/// Where a Read or Write falls relative to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelAccess {
    /// Wholly outside the window: an ordinary Read or Write.
    Outside,
    /// Wholly inside slot `slot`, starting `offset_blocks` into it.
    Slot {
        /// The slot.
        slot: usize,
        /// Blocks from the slot's first LBA.
        offset_blocks: u32,
    },
    /// Partly inside the window, or across two slots: refused (Invalid Field).
    Straddles,
}

impl TunnelWindow {
    /// The window at the end of `namespace_blocks` logical blocks of `block_size_bytes` (the
    /// namespace then ends at [`Self::base_lba`]), with
    /// `slots` sampling slots whose NS_configs hold up to `max_targets` targets and whose
    /// subgraphs hold up to `max_nodes` nodes and `max_edges` edges; `None` if it does not fit
    /// in half the namespace.
    pub fn new(
        namespace_blocks: u64,
        block_size_bytes: u32,
        slots: u16,
        max_targets: u32,
        max_nodes: u32,
        max_edges: u32,
    ) -> Option<Self> {
        let layers = MAX_LAYERS as u64;
        let result = 32
            + 16 * layers
            + 8 * u64::from(max_nodes)
            + 4 * layers * (u64::from(max_nodes) + 1)
            + 4 * u64::from(max_edges);
        let config = ns_config_size_bytes(max_targets as usize) as u64;
        let slot_blocks = result
            .max(config)
            .div_ceil(u64::from(block_size_bytes.max(1)));
        let window = slot_blocks.checked_mul(u64::from(slots))?;
        if slots == 0 || window > namespace_blocks / 2 {
            return None;
        }
        Some(Self {
            base_lba: namespace_blocks - window,
            slot_blocks: u32::try_from(slot_blocks).ok()?,
            slots,
        })
    }

    /// The first LBA of `slot`.
    pub fn slot_lba(&self, slot: usize) -> u64 {
        self.base_lba + slot as u64 * u64::from(self.slot_blocks)
    }

    /// Where `block_count` blocks from `slba` fall.
    pub fn locate(&self, slba: u64, block_count: u32) -> TunnelAccess {
        let end = slba.saturating_add(u64::from(block_count));
        if end <= self.base_lba {
            return TunnelAccess::Outside;
        }
        if slba < self.base_lba {
            return TunnelAccess::Straddles;
        }
        let slot_blocks = u64::from(self.slot_blocks);
        let slot = (slba - self.base_lba) / slot_blocks;
        let offset = (slba - self.base_lba) % slot_blocks;
        if slot >= u64::from(self.slots) || offset + u64::from(block_count) > slot_blocks {
            return TunnelAccess::Straddles;
        }
        TunnelAccess::Slot {
            slot: slot as usize,
            offset_blocks: offset as u32,
        }
    }

    /// Writes the window into Identify Controller's vendor area (`area` starts at its
    /// tunnel fields).
    pub fn encode(&self, area: &mut [u8]) {
        area[0..8].copy_from_slice(&self.base_lba.to_le_bytes());
        area[8..12].copy_from_slice(&self.slot_blocks.to_le_bytes());
        area[12..14].copy_from_slice(&self.slots.to_le_bytes());
    }

    /// Reads it back (`None`: no window, all zero).
    pub fn decode(area: &[u8]) -> Option<Self> {
        let w = Self {
            base_lba: u64::from_le_bytes(area.get(0..8)?.try_into().ok()?),
            slot_blocks: u32::from_le_bytes(area.get(8..12)?.try_into().ok()?),
            slots: u16::from_le_bytes(area.get(12..14)?.try_into().ok()?),
        };
        (w.slots > 0 && w.slot_blocks > 0).then_some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_are_classified_and_the_window_round_trips() {
        let w = TunnelWindow::new(1 << 30, 4096, 2, 4096, 1 << 20, 1 << 22).unwrap();
        assert_eq!(w.base_lba + 2 * u64::from(w.slot_blocks), 1 << 30);
        assert_eq!(w.locate(0, 8), TunnelAccess::Outside);
        assert_eq!(w.locate(w.base_lba - 1, 2), TunnelAccess::Straddles);
        assert_eq!(
            w.locate(w.slot_lba(1) + 3, 5),
            TunnelAccess::Slot {
                slot: 1,
                offset_blocks: 3
            }
        );
        assert_eq!(w.locate(w.slot_lba(1) - 1, 2), TunnelAccess::Straddles);
        assert_eq!(w.locate(1 << 30, 1), TunnelAccess::Straddles);
        let mut area = [0u8; 14];
        w.encode(&mut area);
        assert_eq!(TunnelWindow::decode(&area), Some(w));
        assert_eq!(TunnelWindow::decode(&[0; 14]), None);
        assert_eq!(TunnelWindow::new(1000, 4096, 2, 64, 1 << 20, 1 << 22), None);
    }
}
