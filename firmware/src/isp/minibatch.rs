//! One minibatch of a job: where its nodes, rows and edges sit in the job's result buffers.
//!
//! A job samples one minibatch or a hyperbatch of several, in lockstep: per hop, one gather
//! reads each page once for all of them, then each minibatch's passes run in minibatch order.
//! Their results share the slot's buffers, so each minibatch's node list is in pieces, one
//! *segment* per phase (phase 0 its targets, phase `l + 1` the nodes layer `l` added), each
//! contiguous because a minibatch's pass runs whole before the next minibatch's. Its `indptr`
//! rows and its edges of each layer are contiguous for the same reason. The state lives in the
//! slot's `minibatches` region of DRAM and is read into a [`MinibatchState`] for each step.

use sagessd_abi::ns_config::MAX_LAYERS;
use sagessd_abi::subgraph::LayerCounts;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::config::MINIBATCH_STATE_BYTES;
use crate::dram::Region;

/// Phases of a minibatch's node list: its targets, then one per layer.
pub(crate) const PHASES: usize = MAX_LAYERS + 1;

/// A minibatch's state, as it sits in DRAM (native-endian words: the arena is the firmware's
/// own).
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub(crate) struct MinibatchState {
    /// Seed of the sampling function.
    pub seed: u64,
    /// Word index of its first target id in the slot's config region.
    pub target_word: u32,
    /// Its number of targets.
    pub target_count: u32,
    /// Position in the slot's node list of each phase's segment.
    pub segment_start: [u32; PHASES],
    /// Nodes of each phase's segment (0 for phases not run yet).
    pub segment_len: [u32; PHASES],
    /// Per layer: word offset of its local `indptr` row in the slot's `indptr` region.
    pub indptr_row: [u32; MAX_LAYERS],
    /// Per layer: index of its first edge in the slot's `indices` region.
    pub edge_start: [u32; MAX_LAYERS],
    /// Per layer: sampled edges. (Its destinations are the nodes of phases `0..=l`, its
    /// sources those of phases `0..=l + 1`: [`Self::layers`].)
    pub edge_count: [u32; MAX_LAYERS],
    /// Its first destination's index among the running layer's destinations, all minibatches
    /// together (item `2 ×` that is its first bounds item).
    pub dst_first: u32,
    /// Its first edge's index among the running layer's sampled edges, all minibatches
    /// together.
    pub edge_first: u32,
}

/// Bytes of one [`MinibatchState`] in DRAM (the arena's layout takes the size from
/// [`MINIBATCH_STATE_BYTES`], checked here).
pub(crate) const STATE_BYTES: usize = core::mem::size_of::<MinibatchState>();
const _: () = assert!(STATE_BYTES == MINIBATCH_STATE_BYTES);
// The footprint report (`crate::dram`) states the size.
const _: () = assert!(STATE_BYTES == 112);

impl MinibatchState {
    /// Minibatch `m`'s state in the slot's `minibatches` region.
    pub fn load(region: Region, dram: &[u8], m: usize) -> Self {
        let bytes = region.sub(m * STATE_BYTES, STATE_BYTES).bytes(dram);
        // The sub-region has exactly the struct's size.
        Self::read_from_bytes(bytes).unwrap_or_default()
    }

    /// Writes it back as minibatch `m`'s state.
    pub fn store(&self, region: Region, dram: &mut [u8], m: usize) {
        region
            .sub(m * STATE_BYTES, STATE_BYTES)
            .bytes_mut(dram)
            .copy_from_slice(self.as_bytes());
    }

    /// Nodes in its list so far (all phases).
    pub fn node_count(&self) -> u32 {
        self.segment_len.iter().sum()
    }

    /// Nodes of phases `0..=phase` (the destinations of layer `phase`).
    pub fn nodes_through(&self, phase: usize) -> u32 {
        self.segment_len[..=phase].iter().sum()
    }

    /// The local id of the node at `position` of the slot's node list, if it is this
    /// minibatch's (another minibatch of the hyperbatch may hold the same node elsewhere).
    pub fn local_id(&self, position: u32) -> Option<u32> {
        let mut before = 0;
        for p in 0..PHASES {
            let start = self.segment_start[p];
            if (start..start + self.segment_len[p]).contains(&position) {
                return Some(before + (position - start));
            }
            before += self.segment_len[p];
        }
        None
    }

    /// The subgraph's counts of its first `layer_count` layers (once they are sampled).
    pub fn layers(&self, layer_count: usize) -> [LayerCounts; MAX_LAYERS] {
        let mut out = [LayerCounts::default(); MAX_LAYERS];
        for (l, counts) in out.iter_mut().enumerate().take(layer_count) {
            *counts = LayerCounts {
                dst_count: self.nodes_through(l),
                src_count: self.nodes_through(l + 1),
                edge_count: self.edge_count[l],
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ids_run_over_the_segments_in_phase_order() {
        let mut s = MinibatchState::default();
        // Targets at 10..13, layer 0's new nodes at 20..22, layer 1's at 40..44.
        s.segment_start[..3].copy_from_slice(&[10, 20, 40]);
        s.segment_len[..3].copy_from_slice(&[3, 2, 4]);
        assert_eq!(s.node_count(), 9);
        assert_eq!(s.nodes_through(1), 5);
        // Local ids run over the segments in phase order.
        let positions = [10, 11, 12, 20, 21, 40, 41, 42, 43];
        for (local, p) in positions.into_iter().enumerate() {
            assert_eq!(s.local_id(p), Some(local as u32), "local {local} at {p}");
        }
        for foreign in [0, 9, 13, 19, 22, 39, 44] {
            assert_eq!(s.local_id(foreign), None, "{foreign}");
        }
    }
}
