//! sagessd firmware: an NVMe SSD controller that samples GNN neighbourhoods inside the drive.
//!
//! `#![no_std]`, no allocator, poll-driven, no clock. The firmware reacts to two things only: an
//! NVMe command handed to [`Firmware::submit`], and flash completions collected by
//! [`Firmware::poll`]. It talks to NAND only through the [`hal::Flash`] trait and to the host only
//! through [`host::HostInterface`], so the same code runs in the emulator, over the in-memory
//! `fake::MemFlash` in tests, and on an OpenSSD-class board.
//!
//! ```plain
//!  submit(SQE) ─► dispatch ─┬─ admin (Identify, logs, features) / Flush / Dataset Management
//!                           ├─ Read / Write ────────────► page buffer ─► FTL ─► Flash HAL
//!                           └─ GRAPH_ATTACH / NS_SUBMIT /
//!                              NS_COLLECT ─► ISP control unit ─► subgraph generator ─┘
//! ```
//!
//! All sizeable state (mapping tables, page buffer, sampling buffers) lives in one DRAM arena the
//! integrator provides; [`dram_size_bytes`] says how big it must be for a
//! configuration. Small bookkeeping (command slots, job slots) has compile-time bounds.
//! Nothing that arrives from the host can make the firmware panic: every bad field becomes an
//! NVMe status.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod admin;
mod backend;
mod checkpoint;
mod checkpoint_layout;
mod config;
mod dispatch;
mod dram;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod flash_queue;
mod ftl;
pub mod hal;
pub mod host;
mod isp;
mod oob;
mod page_buffer;
mod read_retry;
mod recovery;
mod trim_log;
pub mod work;

#[cfg(test)]
mod tests;

pub use checkpoint::{CHECKPOINT_MAGIC, CHECKPOINT_VERSION, CheckpointStats};
pub use config::{
    ConfigError, FirmwareConfig, MAX_COMMANDS, MAX_ISP_LANES, MAX_ISP_SLOTS, MAX_LANE_WINDOW_PAGES,
};
pub use dispatch::{Busy, Firmware, dram_regions, dram_size_bytes};
pub use dram::{DRAM_REGION_ALIGN_BYTES, DramRegion, DramRegions};
pub use ftl::FtlStats;
pub use oob::data_page_spare;
pub use read_retry::ReadRetryStats;
pub use recovery::{BootReport, RestoreError};
pub use trim_log::TrimLogStats;
