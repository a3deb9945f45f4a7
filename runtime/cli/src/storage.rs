//! The flags `sample` and `train` share: where the dataset is read (its files, or an NVMe
//! device) and the AGNES layout and feature cache the host samplers read it through.

use std::path::PathBuf;

use clap::Args;
use sagessd_host_driver::DeviceUri;
use sagessd_runtime::registry::{CacheSettings, FeatureCache};

/// Where the samplers read the dataset.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// Run on an NVMe device instead of this machine's files (an emulated SSD unless --device
    /// says otherwise): the dataset is written to it from LBA 0; agnes and hyperbatch read it
    /// there, isp samples (and gathers features) in storage.
    #[arg(long)]
    pub on_device: bool,
    /// With --on-device: the hardware description (default: the built-in Cosmos+).
    #[arg(long, value_name = "PATH", requires = "on_device")]
    pub config: Option<PathBuf>,
    /// With --on-device: the device, `local:` (an in-process emulated SSD, modelled time), or
    /// tcp://HOST:PORT/NQN or passthru:/dev/ngXnY (a real or remote device, wall-clock time);
    /// it is overwritten from LBA 0.
    #[arg(
        long,
        value_name = "URI",
        default_value = "local:",
        requires = "on_device"
    )]
    pub device: DeviceUri,
}

/// The AGNES layout, graph buffer and feature cache of the host samplers.
#[derive(Debug, Args)]
pub(crate) struct CacheArgs {
    /// AGNES block size in KiB (a multiple of 4, at most 64 MiB).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(4..=65536))]
    pub block_size: u32,
    /// Graph buffer of the AGNES samplers, MiB (per sampling worker).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..4096))]
    pub graph_buffer: u32,
    /// The subgraphs' features: agnes (access-count-threshold cache, block reads), bgl (FIFO
    /// cache, row reads), or none. ISP on a device gathers them in storage instead.
    #[arg(long, value_enum, default_value_t = FeatureCache::Agnes)]
    pub features: FeatureCache,
    /// Feature cache, MiB (per gather worker).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..4096))]
    pub feature_cache: u32,
    /// Accesses after which the AGNES cache keeps a node's features.
    #[arg(long, default_value_t = 2)]
    pub feature_threshold: u32,
}

// The flags' ranges keep every size below 4 GiB, so they fit a 32-bit `usize` too.
impl CacheArgs {
    /// The AGNES block size, bytes.
    pub fn block_bytes(&self) -> usize {
        self.block_size as usize * 1024
    }

    /// The AGNES graph buffer, bytes.
    pub fn buffer_bytes(&self) -> usize {
        (self.graph_buffer as usize) << 20
    }

    /// The feature cache, bytes.
    pub fn cache_bytes(&self) -> usize {
        (self.feature_cache as usize) << 20
    }

    /// The feature caches' settings.
    pub fn settings(&self) -> CacheSettings {
        CacheSettings {
            cache_bytes: self.cache_bytes(),
            threshold: self.feature_threshold,
            block_bytes: self.block_bytes(),
        }
    }
}
