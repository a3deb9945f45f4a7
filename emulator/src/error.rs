//! The one error type of the emulator crate boundary.

use std::path::PathBuf;

/// Everything that can go wrong when building or running an emulated SSD.
///
/// Bad host *commands* are not errors here: the firmware answers them with an NVMe status, as a
/// real device would. These errors are about the emulator itself: its configuration, its input
/// files, and simulations that cannot make progress.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// A hardware-configuration field has a value the model cannot use.
    #[error("invalid hw config field {field}: {reason}")]
    InvalidConfig {
        /// The field, as `section.name` (e.g. `nand.page_size_bytes`).
        field: &'static str,
        /// What is wrong with it, including the value that was given.
        reason: String,
    },
    /// The configuration text is not valid TOML for [`crate::HwConfig`] (syntax error, unknown
    /// field, missing field, wrong type); the message names the offending field.
    #[error("cannot parse hw config: {0}")]
    ParseConfig(String),
    /// A configuration file could not be read.
    #[error("cannot read hw config {path}: {source}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A submission queue already holds the most commands an NVMe queue can (65,535).
    #[error("submission queue {sq_id} is full ({outstanding} commands outstanding)")]
    QueueFull {
        /// The queue.
        sq_id: u16,
        /// Commands submitted on it and not yet reaped.
        outstanding: usize,
    },
    /// Commands are outstanding, but the firmware makes no progress and no flash operation or
    /// command arrival is pending: the simulation would wait forever.
    #[error(
        "simulation stalled at {now_ns} ns: {outstanding} commands outstanding, \
         the firmware makes no progress and no flash operation is pending"
    )]
    Stalled {
        /// Virtual time of the stall.
        now_ns: u64,
        /// Commands submitted and not completed.
        outstanding: usize,
    },
    /// The firmware reported progress again and again without virtual time advancing.
    #[error("firmware livelock at {now_ns} ns: {calls} calls without time advancing")]
    Livelock {
        /// Virtual time at which it spins.
        now_ns: u64,
        /// Consecutive calls that made "progress" at that instant.
        calls: u64,
    },
    /// A device image is not one this configuration can boot from.
    #[error("device image {path}: {field}: {reason}")]
    Image {
        /// The image file.
        path: PathBuf,
        /// The field that is wrong.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A device image could not be read or written.
    #[error("device image {path}: {source}")]
    ImageIo {
        /// The image file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A validation or measurement workload ([`crate::check`], [`crate::boot_cost`]) saw a
    /// command or a boot fail.
    #[error("validation workload failed: {0}")]
    CheckFailed(String),
}
