//! Fault injection in the NAND model, seeded and deterministic: media failures of reads,
//! programs and erases, latency spikes, and power cuts.
//!
//! Every draw is a hash of the plan's seed and the operation's number (operations are numbered
//! in submission order), so the same calls give the same faults on every run. A failed program
//! consumes its page, which then fails its reads until the block is erased; a failed erase
//! leaves every page of its block failing; a failed read is transient (the next read of the
//! page may succeed, as a controller's read-retry expects). A program may also succeed yet
//! leave its page *uncorrectable*: every read of its data fails until the block is erased,
//! while its spare area, protected by a codeword of its own, still reads (so a boot still
//! learns which logical page it held, and reports it unreadable rather than mapping an older
//! copy).
//!
//! [`NandArray::power_cut`] is what a power loss does to the array at the current instant: an
//! operation already finished keeps its effect; on each die the operations whose array phase
//! had begun (a read's sense, a program's tPROG, an erase's tBERS) either completed or are torn
//! (a torn program's page fails its reads; a torn erase leaves its block failing until erased
//! again); everything else (queued, staged, or still moving data over the channel) never
//! happened. Afterwards nothing is in flight and the clock stands where it was.

use std::collections::BTreeSet;

use rustc_hash::FxHashSet;

use sagessd_abi::sample::mix;

use sagessd_firmware::hal::Sectors;

use super::{NandArray, OpKind};

/// A fault plan: rates in parts per million of operations, and a seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NandFaults {
    /// Seed of every draw.
    pub seed: u64,
    /// Reads that fail transiently, per million.
    pub read_fail_ppm: u32,
    /// Programs that leave their page's data uncorrectable (every read of it fails until the
    /// block is erased), per million.
    pub uncorrectable_ppm: u32,
    /// Programs that fail, per million.
    pub program_fail_ppm: u32,
    /// Erases that fail, per million.
    pub erase_fail_ppm: u32,
    /// Operations whose array phase takes `spike_ns` longer, per million.
    pub spike_ppm: u32,
    /// Extra array time of a spiked operation.
    pub spike_ns: u64,
}

/// What a power cut did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Operations that never happened (queued, staged, or still on the channel).
    pub lost: u32,
    /// Operations in their array phase that completed.
    pub completed: u32,
    /// Programs left torn.
    pub torn_programs: u32,
    /// Erases left torn.
    pub torn_erases: u32,
}

/// The pages left uncorrectable by [`NandFaults::uncorrectable_ppm`].
#[derive(Debug, Default)]
pub(super) struct UncorrectablePages(FxHashSet<u32>);

impl UncorrectablePages {
    /// Whether a read of `sectors` of `ppn` fails: any data of an uncorrectable page does.
    fn fails(&self, ppn: u32, sectors: Sectors) -> bool {
        !sectors.is_empty() && self.0.contains(&ppn)
    }

    /// The `count` pages from `first` were erased: they are sound again.
    pub(super) fn erased(&mut self, first: u32, count: u32) {
        if !self.0.is_empty() {
            for p in first..first + count {
                self.0.remove(&p);
            }
        }
    }
}

impl NandFaults {
    /// Whether draw `salt` of operation `op_id` falls under `ppm`.
    fn hits(&self, op_id: u64, salt: u64, ppm: u32) -> bool {
        let draw = mix(self.seed ^ mix(op_id.wrapping_mul(8).wrapping_add(salt)));
        ppm > 0 && draw % 1_000_000 < u64::from(ppm)
    }
}

impl NandArray {
    /// The same array with `faults` injected.
    pub fn with_faults(mut self, faults: NandFaults) -> Self {
        self.faults = Some(faults);
        self
    }

    /// Replaces the fault plan (`None`: no faults).
    pub fn set_faults(&mut self, faults: Option<NandFaults>) {
        self.faults = faults;
    }

    /// Whether operation `op_id` fails (a failed read is counted).
    pub(super) fn fails(&mut self, op_id: u64, kind: &OpKind) -> bool {
        if let OpKind::Read { ppn, sectors, .. } = kind {
            let failed = self.uncorrectable.fails(*ppn, *sectors)
                || self
                    .faults
                    .is_some_and(|f| f.hits(op_id, 1, f.read_fail_ppm));
            self.stats.read_failures += u64::from(failed);
            return failed;
        }
        let Some(f) = &self.faults else {
            return false;
        };
        match kind {
            OpKind::Read { .. } => false,
            OpKind::Program { .. } => f.hits(op_id, 2, f.program_fail_ppm),
            OpKind::Erase { .. } => f.hits(op_id, 3, f.erase_fail_ppm),
        }
    }

    /// After program `op_id` of `ppn` succeeded: whether the faults leave the page
    /// uncorrectable.
    pub(super) fn maybe_uncorrectable(&mut self, op_id: u64, ppn: u32) {
        if let Some(f) = &self.faults
            && f.hits(op_id, 5, f.uncorrectable_ppm)
        {
            self.uncorrectable.0.insert(ppn);
            self.stats.uncorrectable_pages += 1;
        }
    }

    /// Extra array time of operation `op_id`.
    pub(super) fn spike_ns(&self, op_id: u64) -> u64 {
        match &self.faults {
            Some(f) if f.hits(op_id, 4, f.spike_ppm) => f.spike_ns,
            _ => 0,
        }
    }

    /// Applies a media failure of `kind` at page or block `at`.
    pub(super) fn fail_media(&mut self, kind: &OpKind, at: u32) {
        let ppb = self.geometry.pages_per_block;
        match kind {
            OpKind::Read { .. } => {}
            OpKind::Program { .. } => {
                let _ = self.store.tear(at);
            }
            OpKind::Erase { .. } => {
                for p in at * ppb..(at + 1) * ppb {
                    let _ = self.store.tear(p);
                }
            }
        }
    }

    /// Cuts the power now (see the module documentation); `seed` draws whether each operation
    /// in its array phase completed or was torn.
    pub fn power_cut(&mut self, seed: u64) -> CutReport {
        let mut report = CutReport::default();
        let mut rng = seed | 1;
        let ppb = self.geometry.pages_per_block;
        let mut in_array = BTreeSet::new();
        for g in self.die_group.iter().flatten() {
            if g.ungranted == 0 && g.started_ns.is_some() {
                in_array.extend(g.members.iter().copied());
            }
        }
        // Blocks whose program pointer a lost operation moved: it is set back from what the
        // block really holds.
        let mut touched = BTreeSet::new();
        let mut ids: Vec<u64> = self.ops.keys().copied().collect();
        ids.sort_unstable();
        for op_id in ids {
            let Some(op) = self.ops.remove(&op_id) else {
                continue;
            };
            let running = in_array.contains(&op_id);
            rng = mix(rng);
            let completes = rng.is_multiple_of(2);
            match op.kind {
                OpKind::Program { ppn, data } if running => {
                    if completes && self.store.program(ppn, data).is_ok() {
                        report.completed += 1;
                    } else {
                        let _ = self.store.tear(ppn);
                        report.torn_programs += 1;
                    }
                }
                OpKind::Erase { block } if running => {
                    let _ = self.store.erase(block * ppb, ppb);
                    self.uncorrectable.erased(block * ppb, ppb);
                    // Completed or torn, the block no longer holds its computed pages.
                    if let Some(synthetic) = &mut self.synthetic {
                        synthetic.erase(block);
                    }
                    if completes {
                        report.completed += 1;
                    } else {
                        for p in block * ppb..(block + 1) * ppb {
                            let _ = self.store.tear(p);
                        }
                        self.next_page[block as usize] = ppb;
                        report.torn_erases += 1;
                    }
                }
                OpKind::Program { ppn, .. } => {
                    touched.insert(ppn / ppb);
                    report.lost += 1;
                }
                OpKind::Erase { block } => {
                    touched.insert(block);
                    report.lost += 1;
                }
                OpKind::Read { .. } => report.lost += 1,
            }
        }
        if !touched.is_empty() {
            let pointers = self.store.program_pointers(&self.geometry);
            for block in touched {
                self.next_page[block as usize] = pointers[block as usize];
            }
        }
        self.staged.clear();
        self.noted = None;
        self.events = Default::default();
        self.finished.clear();
        self.computing.clear();
        for g in &mut self.die_group {
            *g = None;
        }
        for q in &mut self.die_queue {
            q.clear();
        }
        for c in &mut self.channels {
            *c = Default::default();
        }
        report
    }
}
