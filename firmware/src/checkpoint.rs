//! The firmware's persistent state: what must survive a power cycle besides the flash pages
//! themselves. That is the FTL's mapping and block tables, its counters, and the attached
//! graph. [`Firmware::save_state`] writes it when the device is quiet;
//! [`Firmware::restore`] boots from it. The emulator keeps it in its device image next to the
//! NAND contents. A board would write it to reserved flash blocks at shutdown.
//!
//! Format, all little-endian: magic `SGFWSTAT`, version, the geometry and logical capacity it
//! belongs to, the FTL's scalars, the attached graph (flag + 128 bytes: descriptor and feature region), then the FTL's
//! DRAM tables byte for byte. Restoring checks every field a later lookup trusts, so a damaged
//! state is an error naming the field, never a panic.

use sagessd_abi::graph::GraphDescriptor;

use crate::config::{ConfigError, FirmwareConfig};
use crate::dispatch::Firmware;
use crate::hal::Flash;

/// Magic of a saved firmware state.
pub const STATE_MAGIC: [u8; 8] = *b"SGFWSTAT";
/// Bytes kept for the attached graph: its descriptor and feature region.
const GRAPH_STATE_BYTES: usize = 128;

/// Version of the state format.
pub const STATE_VERSION: u32 = 2;

/// Why a saved state cannot be restored. Each variant names what is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// The configuration itself is invalid (as [`Firmware::new`] would say).
    Config(ConfigError),
    /// The state ends before `field`.
    Truncated(&'static str),
    /// `field` has a value this firmware cannot use (magic, version, geometry, a table entry).
    Invalid(&'static str),
}

/// [`Firmware::save_state`] was called while commands, flash operations or garbage collection
/// were under way; the state would not be consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotQuiet;

/// Reads little-endian fields off a byte slice, naming the field that is missing.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], RestoreError> {
        if self.bytes.len() < n {
            return Err(RestoreError::Truncated(field));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32, RestoreError> {
        let b = self.take(4, field)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self, field: &'static str) -> Result<u64, RestoreError> {
        Ok(u64::from(self.u32(field)?) | (u64::from(self.u32(field)?) << 32))
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Fails with `Invalid(field)` unless `ok`.
pub(crate) fn require(ok: bool, field: &'static str) -> Result<(), RestoreError> {
    if ok {
        Ok(())
    } else {
        Err(RestoreError::Invalid(field))
    }
}

impl<F: Flash, M: AsRef<[u8]> + AsMut<[u8]>> Firmware<F, M> {
    /// Writes the persistent state to `sink`, in pieces. Fails (writing nothing) unless the
    /// firmware is quiet: no command parked, no flash operation queued or in flight, no garbage
    /// collection under way.
    pub fn save_state(&self, sink: &mut dyn FnMut(&[u8])) -> Result<(), NotQuiet> {
        if !self.is_quiet() {
            return Err(NotQuiet);
        }
        sink(&STATE_MAGIC);
        sink(&STATE_VERSION.to_le_bytes());
        let mut wire = [0u8; GRAPH_STATE_BYTES];
        match self.graph() {
            Some(g) => {
                g.encode(&mut wire);
                sink(&1u32.to_le_bytes());
            }
            None => sink(&0u32.to_le_bytes()),
        }
        sink(&wire);
        self.ftl().save(self.dram_bytes(), sink);
        Ok(())
    }

    /// Boots from a state [`Self::save_state`] wrote, over `flash` holding the pages it
    /// describes. `dram` must be zeroed, as for [`Self::new`].
    pub fn restore(
        config: FirmwareConfig,
        flash: F,
        dram: M,
        state: &[u8],
    ) -> Result<Self, RestoreError> {
        let mut fw = Self::new(config, flash, dram).map_err(RestoreError::Config)?;
        let mut r = Reader::new(state);
        require(r.take(8, "magic")? == STATE_MAGIC, "magic")?;
        require(r.u32("version")? == STATE_VERSION, "version")?;
        let has_graph = r.u32("graph flag")?;
        let wire = r.take(GRAPH_STATE_BYTES, "graph")?;
        let graph = match has_graph {
            0 => None,
            1 => Some(
                GraphDescriptor::parse(wire, fw.block_size_bytes(), fw.namespace_block_count())
                    .map_err(|_| RestoreError::Invalid("graph"))?,
            ),
            _ => return Err(RestoreError::Invalid("graph flag")),
        };
        fw.restore_ftl(&mut r)?;
        require(r.is_empty(), "length")?;
        fw.set_graph(graph);
        Ok(fw)
    }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use crate::tests::{Device, small_config, small_geometry};

    use super::*;

    #[test]
    fn a_restored_device_reads_what_was_written_and_damage_is_named() {
        let mut d = Device::new(small_geometry(), small_config(), 3);
        // Enough overwrites that GC has moved pages and erased blocks.
        let block = 512;
        for round in 0u8..6 {
            for lba in (0..600u64).step_by(8) {
                let data: Vec<u8> = (0..8 * block)
                    .map(|i| (i as u8) ^ round ^ lba as u8)
                    .collect();
                assert!(d.write(lba, &data).is_success());
            }
        }
        d.settle();
        assert!(d.fw.ftl_stats().blocks_erased > 0, "GC ran");
        let mut state = Vec::new();
        d.fw.save_state(&mut |b| state.extend_from_slice(b))
            .expect("quiet");
        let expected: Vec<Vec<u8>> = (0..600u64).step_by(8).map(|lba| d.read(lba, 8).1).collect();

        let mut restored = d.reboot(&state).expect("restores");
        assert_eq!(restored.fw.ftl_stats(), d.fw.ftl_stats());
        for (i, lba) in (0..600u64).step_by(8).enumerate() {
            assert_eq!(restored.read(lba, 8).1, expected[i], "lba {lba}");
        }
        // It keeps working: more overwrites, then the same check.
        let data = std::vec![0xEEu8; 8 * block];
        assert!(restored.write(0, &data).is_success());
        assert_eq!(restored.read(0, 8).1, data);

        let mut bad_magic = state.clone();
        bad_magic[0] ^= 1;
        assert_eq!(
            d.reboot(&bad_magic).err(),
            Some(RestoreError::Invalid("magic"))
        );
        assert_eq!(
            d.reboot(&state[..state.len() - 1]).err(),
            Some(RestoreError::Truncated("dies"))
        );
        let mut long = state.clone();
        long.push(0);
        assert_eq!(d.reboot(&long).err(), Some(RestoreError::Invalid("length")));

        // Damage anywhere is refused or boots a device that still answers every command.
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..300 {
            rng = sagessd_abi::sample::mix(rng);
            let mut damaged = state.clone();
            let at = (rng % damaged.len() as u64) as usize;
            damaged[at] ^= (rng >> 32) as u8 | 1;
            if let Ok(mut dev) = d.reboot(&damaged) {
                let _ = dev.read(0, 8);
                let _ = dev.write(8, &std::vec![1u8; 8 * block]);
                let _ = dev.read(8, 8);
            }
        }
    }
}
