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

/// A machine QEMU emulates for the calibration image: where its RAM is, and so where the
/// host loads the plan and the image keeps its marker words. The image is built for one of
/// them ([`IMAGE_BOARD`]); the host runs the one a description's core asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Board {
    /// QEMU's machine and CPU (`-M`, `-cpu`) and its system emulator.
    pub qemu: &'static str,
    /// `-M`.
    pub machine: &'static str,
    /// `-cpu`.
    pub cpu: &'static str,
    /// The Rust target the image is built for.
    pub target: &'static str,
    /// Where RAM starts.
    pub ram_base: u64,
}

impl Board {
    /// Where the image expects its plan (QEMU `-device loader,addr=`): the last MiB of
    /// [`RAM_MIB`] of RAM.
    pub const fn plan_address(&self) -> u64 {
        self.ram_base + ((RAM_MIB as u64) << 20) - (1 << 20)
    }

    /// Where the image's marker words are ([`Marks`]), just below the plan.
    pub const fn marks_address(&self) -> u64 {
        self.plan_address() - 0x1000
    }
}

/// QEMU's vexpress-a9 with a Cortex-A9: the Cosmos+ OpenSSD's core, in ARM state (ARMv7-A).
pub const VEXPRESS_A9: Board = Board {
    qemu: "qemu-system-arm",
    machine: "vexpress-a9",
    cpu: "cortex-a9",
    target: "armv7a-none-eabi",
    ram_base: 0x6000_0000,
};

/// QEMU's virt with a Cortex-A53 in AArch64: a Newport-class SSD's ISP cores.
pub const VIRT_A53: Board = Board {
    qemu: "qemu-system-aarch64",
    machine: "virt",
    cpu: "cortex-a53",
    target: "aarch64-unknown-none",
    ram_base: 0x4000_0000,
};

/// The board this build of the image runs on.
#[cfg(target_arch = "aarch64")]
pub const IMAGE_BOARD: Board = VIRT_A53;
/// The board this build of the image runs on.
#[cfg(not(target_arch = "aarch64"))]
pub const IMAGE_BOARD: Board = VEXPRESS_A9;

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
