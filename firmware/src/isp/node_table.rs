//! A sampling lane's node table: node id → the node's position in its job's node list, as an
//! open-addressing hash table with linear probing in the lane's `node_table` region.
//!
//! An entry holds the node id itself, so a probe reads one cache line (the node list is not
//! touched to compare), and the generation of the job that wrote it, so a job starts with an
//! empty table without clearing it: an entry of another generation is free. The generation
//! grows by one per job; only when it wraps, after 2^32 − 1 jobs, is the table wiped.
//!
//! A hyperbatch's minibatches share the table, each minibatch's nodes keyed apart: a node's
//! probe starts at a home that depends on the minibatch, and a hit counts only if the
//! position found is the minibatch's own (its caller checks).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// One entry: 16 bytes, so an entry never straddles a cache line.
#[repr(C)]
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug, Default)]
pub(crate) struct Entry {
    /// The node id.
    node: u32,
    /// Its position in the job's node list.
    position: u32,
    /// The job that wrote the entry (0: never written).
    generation: u32,
    reserved: u32,
}

const _: () = assert!(core::mem::size_of::<Entry>() == crate::dram::NODE_TABLE_ENTRY_BYTES);

/// Where a probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The node is in the table at this position of the node list.
    Found(u32),
    /// It is not; this entry is free for it.
    Free(usize),
}

/// The table's shape and the generation of the job it serves now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeTable {
    /// Bits of an entry index (the table has `1 << bits` entries).
    bits: u32,
    generation: u32,
}

impl NodeTable {
    /// A table of `entries` entries (a power of two of at least 2) that boot zeroed.
    pub fn new(entries: usize) -> Self {
        Self {
            bits: entries.trailing_zeros().max(1),
            generation: 0,
        }
    }

    /// Empties the table for a new job: a new generation (and, once in 2^32 − 1 jobs, a wipe
    /// of every entry).
    pub fn begin_job(&mut self, entries: &mut [Entry]) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            entries.fill(Entry::default());
            self.generation = 1;
        }
    }

    /// What minibatch `m` mixes into its nodes' hash (0 for minibatch 0: a plain NS_config
    /// keys on the node alone).
    pub fn salt(m: u32) -> u32 {
        m.wrapping_mul(0x85EB_CA6B)
    }

    /// The entry where the probe for `node` of the minibatch with `salt` starts: a
    /// multiplicative hash, its top bits.
    #[inline(always)]
    pub fn home(&self, node: u32, salt: u32) -> usize {
        ((node ^ salt).wrapping_mul(0x9E37_79B1) >> (32 - self.bits)) as usize
    }

    /// Probes for `node` from `home`; a hit must satisfy `ours` (its position is the
    /// minibatch's own). The table always has a free entry: it holds at most half as many
    /// nodes as entries.
    #[inline(always)]
    pub fn probe(
        &self,
        entries: &[Entry],
        node: u32,
        home: usize,
        ours: impl Fn(u32) -> bool,
    ) -> Probe {
        let mask = (1usize << self.bits) - 1;
        let mut h = home;
        loop {
            let e = entries[h];
            if e.generation != self.generation {
                return Probe::Free(h);
            }
            if e.node == node && ours(e.position) {
                return Probe::Found(e.position);
            }
            h = (h + 1) & mask;
        }
    }

    /// Writes `node` at `position` into the free entry a probe found.
    #[inline(always)]
    pub fn insert(&self, entries: &mut [Entry], at: usize, node: u32, position: u32) {
        entries[at] = Entry {
            node,
            position,
            generation: self.generation,
            reserved: 0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn a_new_job_finds_nothing_of_the_last_and_wraps_cleanly() {
        let mut entries = vec![Entry::default(); 16];
        let mut t = NodeTable::new(16);
        t.begin_job(&mut entries);
        let all = |_| true;
        for node in [5u32, 21, 37] {
            let h = t.home(node, NodeTable::salt(0));
            let Probe::Free(at) = t.probe(&entries, node, h, all) else {
                panic!("{node} found in an empty table");
            };
            t.insert(&mut entries, at, node, node + 100);
        }
        assert_eq!(
            t.probe(&entries, 21, t.home(21, NodeTable::salt(0)), all),
            Probe::Found(121)
        );
        // A hit that is not the caller's (another minibatch's position) is passed over.
        assert!(matches!(
            t.probe(&entries, 21, t.home(21, NodeTable::salt(0)), |p| p != 121),
            Probe::Free(_)
        ));
        t.begin_job(&mut entries);
        assert!(matches!(
            t.probe(&entries, 21, t.home(21, NodeTable::salt(0)), all),
            Probe::Free(_)
        ));
        // The generation wraps: the table is wiped, and nothing old is found.
        t.generation = u32::MAX;
        let h = t.home(9, NodeTable::salt(0));
        let Probe::Free(at) = t.probe(&entries, 9, h, all) else {
            panic!()
        };
        t.insert(&mut entries, at, 9, 1);
        t.begin_job(&mut entries);
        assert_eq!(t.generation, 1);
        assert!(matches!(t.probe(&entries, 9, h, all), Probe::Free(_)));
        // Minibatches start their probes apart.
        assert_ne!(t.home(9, NodeTable::salt(0)), t.home(9, NodeTable::salt(1)));
    }
}
