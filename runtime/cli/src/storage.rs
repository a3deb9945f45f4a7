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
    /// AGNES block size in KiB (a multiple of 4).
    #[arg(long, default_value_t = 1024)]
    pub block_size: usize,
    /// Graph buffer of the AGNES samplers, MiB.
    #[arg(long, default_value_t = 64)]
    pub graph_buffer: usize,
    /// The subgraphs' features: agnes (access-count-threshold cache, block reads), bgl (FIFO
    /// cache, row reads), or none. ISP on a device gathers them in storage instead.
    #[arg(long, value_enum, default_value_t = FeatureCache::Agnes)]
    pub features: FeatureCache,
    /// Feature cache, MiB.
    #[arg(long, default_value_t = 64)]
    pub feature_cache: usize,
    /// Accesses after which the AGNES cache keeps a node's features.
    #[arg(long, default_value_t = 2)]
    pub feature_threshold: u32,
}

impl CacheArgs {
    /// The AGNES block size, bytes.
    pub fn block_bytes(&self) -> usize {
        self.block_size * 1024
    }

    /// The AGNES graph buffer, bytes.
    pub fn buffer_bytes(&self) -> usize {
        self.graph_buffer << 20
    }

    /// The feature caches' settings.
    pub fn settings(&self) -> CacheSettings {
        CacheSettings {
            cache_bytes: self.feature_cache << 20,
            threshold: self.feature_threshold,
            block_bytes: self.block_bytes(),
        }
    }
}
