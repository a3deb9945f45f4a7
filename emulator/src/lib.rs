//! sagessd emulator: an NVMe SSD — the sagessd firmware, a NAND array, a PCIe link and
//! embedded cores — as a deterministic discrete-event simulation in virtual nanoseconds.
//!
//! ```plain
//!  host ── submit(SQE, buffer) / reap() ──►  Ssd                       (ssd)
//!                                             │ doorbell, SQE fetch, DMAs, CQE, interrupt
//!                                             ├─ PcieLink: one FIFO per direction    (pcie)
//!                                             ├─ CoreModel: work counters → time     (cores)
//!                                             └─ Firmware ── Flash HAL ── NandArray  (nand)
//!                                                            dies and channels busy-until
//! ```
//!
//! * [`HwConfig`] ([`config`]) describes the hardware in TOML; [`HwConfig::cosmos_plus`] is the
//!   Cosmos+ OpenSSD, every number sourced in `hw-configs/cosmos-plus.toml`.
//! * [`Ssd`] ([`ssd`]) is the device: an in-process NVMe queue pair whose completions carry
//!   their modelled completion time.
//! * [`NandArray`] ([`nand`]) is the flash: sparse storage, program-order rules, and dies and
//!   channels as resources that are busy, not a constant latency.
//! * [`PcieLink`] ([`pcie`]) and [`CoreModel`] ([`cores`]) time the link and the firmware.
//! * [`Ssd::open_image`] / [`Ssd::close_image`] ([`image`]) keep a device's flash in a file,
//!   written through as pages are programmed, so it survives the emulator being killed.
//! * [`trainer_model::TrainerConfig`] prices a GNN training step on the host's accelerator, for
//!   modelled training epochs.
//! * [`Target`] ([`target`]) serves an [`Ssd`] over NVMe/TCP, for the Linux kernel's initiator
//!   and the host driver's TCP transport.
//!
//! Time is simulated, never read: no wall clock, no unseeded randomness, so the same inputs
//! give the same timeline bit for bit.
//!
//! ```
//! use sagessd_abi::nvme::{SubmissionEntry, Status};
//! use sagessd_emulator::{HwConfig, Ssd};
//!
//! let mut ssd = Ssd::new(&HwConfig::cosmos_plus())?;
//! let block = ssd.block_size_bytes() as usize;
//! let write = SubmissionEntry::read_write(true, 1, 1, 0, 1);
//! ssd.submit(1, write, vec![0x5A; block])?;
//! let done = ssd.reap()?.expect("one command outstanding");
//! assert_eq!(done.cqe.status(), Status::SUCCESS);
//! assert!(done.completed_at_ns > done.submitted_at_ns);
//! # Ok::<(), sagessd_emulator::EmulatorError>(())
//! ```

pub mod boot_cost;
pub mod check;
pub mod config;
pub mod cores;
pub mod crash_sim;
pub mod dram;
pub mod error;
mod event_queue;
pub mod host_stack;
pub mod image;
pub mod nand;
pub mod nvme_tcp_target;
pub mod pcie;
pub mod ssd;
pub mod synthetic_features;
pub mod synthetic_graph;
pub mod synthetic_image;
pub mod trainer_model;

pub use config::HwConfig;
pub use cores::CoreModel;
pub use error::EmulatorError;
pub use nand::{NandArray, NandStats, NandTiming};
pub use nvme_tcp_target::subsystem::AllowedHosts;
pub use nvme_tcp_target::{Target, TargetOptions};
pub use pcie::{Direction, PcieLink};
pub use ssd::{Completed, DeviceStats, Ssd};
