//! The calibration workloads of `sagessd firmware calibrate`.
//!
//! The emulator prices firmware work by what the firmware counts ([`WorkCounters`]: commands,
//! flash operations, page lookups, pages and edges the ISP engine scanned, edges it sampled,
//! targets, node-table clears, sort-key moves, ...) times a cycle cost per unit from the
//! hardware description. This crate measures those costs. It boots the firmware — the same
//! crate that ships in `libsagessd_fw.a` — on a full-size device of the description (a
//! [`SparseFlash`] keeps only the pages written), stores two graphs, and runs [`workloads`]
//! that each do mostly one unit of work; for each it reports the work counted.
//!
//! It runs in two places. Built into a bare-metal Cortex-A9 image (`sagessd-calibrate-board`)
//! it runs under QEMU with a profiling plugin, and [`Marks`] tell the plugin which
//! instructions are the firmware's (the harness here stands in for the host, the DMA engines
//! and the NAND, which a board does in hardware); the CLI then fits cycles per unit to the
//! instructions and modelled cache misses of each workload. Built for the host, the same
//! workloads run natively, which is how the test suite checks what each one isolates.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

pub mod device;
pub mod graphs;
pub mod plan;
pub mod sparse_flash;
pub mod workloads;

pub use device::{CalibrateError, Device};
pub use plan::{Plan, PlanError, PlanWire};
pub use sagessd_firmware::work::WorkCounters;
pub use sparse_flash::SparseFlash;

/// Where the calibration image expects its plan (QEMU `-device loader,addr=`): the last MiB
/// of a 1 GiB vexpress-a9 RAM.
pub const PLAN_ADDRESS: u32 = 0x9FF0_0000;
/// Where the calibration image's marker words are ([`Marks`]), just below the plan.
pub const MARKS_ADDRESS: u32 = 0x9FEF_F000;
/// Bytes of host buffer the calibration image gives the workloads: a check minibatch's
/// subgraph (1,024 targets, fanouts 25,10: at most 282,624 nodes and 281,600 edges, under
/// 4 MiB) with room to spare.
pub const HOST_BUFFER_BYTES: usize = 16 << 20;
/// Guest RAM the calibration image runs with (QEMU `-m`).
pub const RAM_MIB: u32 = 1024;

/// Tells a profiler what the running code is. The harness calls [`Marks::enter`] before each
/// call into the firmware and [`Marks::leave`] after it; its stand-ins for hardware do the
/// opposite around their own work when the firmware calls them; [`Marks::segment`] ends one
/// workload's measurement.
pub trait Marks: Copy {
    /// The firmware starts running.
    fn enter(self);
    /// The firmware stops running (the harness runs).
    fn leave(self);
    /// The current measurement segment ends.
    fn segment(self);
}

/// No profiler: the host build.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMarks;

impl Marks for NoMarks {
    fn enter(self) {}
    fn leave(self) {}
    fn segment(self) {}
}
