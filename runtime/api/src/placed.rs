//! A dataset written to an NVMe device once, for the loaders opened on it one after another: its
//! CSR (with the feature rows as its feature region) from LBA 0, then its AGNES block layout.
//! Placing a large dataset on the emulated SSD takes a while, so a comparison of samplers
//! places it once ([`crate::Loader::on_device`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sagessd_emulator::HwConfig;
use sagessd_host_driver::{Device, DeviceUri, Endpoint, Transport};
use sagessd_runtime::dataset::Dataset;
use sagessd_runtime::ooc::AgnesLayout;
use sagessd_runtime::placement::Placement;
use sagessd_runtime::registry::SamplerKind;

use crate::{Error, Storage};

/// The device behind any transport.
pub type AnyDevice = Device<Box<dyn Transport + Send>>;

/// What the in-storage feature buffer of an emulated device is sized for (its description
/// names none): the largest job the loaders on it will submit.
#[derive(Clone, Debug)]
pub struct FeatureSizing {
    /// The samplers that will run (an `isp-hyperbatch` job holds several minibatches' rows).
    pub samplers: Vec<SamplerKind>,
    /// Minibatches per in-storage hyperbatch.
    pub hyperbatch: usize,
    /// The most targets a minibatch has.
    pub max_batch_size: u64,
    /// Neighbours per hop.
    pub fanouts: Vec<u16>,
}

impl FeatureSizing {
    /// Gives `hw` an in-storage feature buffer that holds the largest job's rows (`row_bytes`
    /// each, of a graph of `node_count` nodes), where its description names none.
    pub fn apply(&self, hw: &mut HwConfig, node_count: u64, row_bytes: u64) {
        if hw.firmware.max_feature_bytes != 0 {
            return;
        }
        // In-storage hyperbatches gather their minibatches' rows into one job's buffer.
        let minibatches = if self.samplers.contains(&SamplerKind::IspHyperbatch) {
            self.hyperbatch
                .min(usize::from(hw.firmware.max_minibatches))
        } else {
            1
        };
        hw.firmware.max_feature_bytes = sagessd_runtime::placement::feature_buffer_bytes(
            node_count,
            hw.firmware.max_subgraph_nodes,
            minibatches as u64,
            self.max_batch_size,
            &self.fanouts,
            row_bytes,
        );
    }
}

/// A dataset on a device, shared by the loaders opened on it.
#[derive(Clone)]
pub struct PlacedDevice {
    pub(crate) device: Arc<Mutex<AnyDevice>>,
    pub(crate) layout: Arc<AgnesLayout>,
    pub(crate) placement: Placement,
    pub(crate) hardware: HwConfig,
    pub(crate) uri: DeviceUri,
    pub(crate) node_count: u64,
    /// Whether a loader is open on it: loaders take turns, so that each one's counts (device
    /// time, flash pages, commands) are its own.
    in_use: Arc<AtomicBool>,
}

/// A loader's turn on a [`PlacedDevice`]: the next loader may open once it is dropped (when
/// the loader's worker ends).
#[derive(Debug)]
pub(crate) struct Turn(Arc<AtomicBool>);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl std::fmt::Debug for PlacedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedDevice")
            .field("uri", &self.uri)
            .field("device", &self.hardware.device.name)
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}

impl PlacedDevice {
    /// Writes `dataset` to the device `storage` names (an error for [`Storage::Files`]), its
    /// feature rows too when `features` (sized for `sizing` on an emulated device), and its
    /// AGNES layout of `block_bytes` blocks; the device's caches are then dropped, where the
    /// transport can, so that sampling starts cold.
    pub fn place(
        dataset: &Dataset,
        storage: &Storage,
        features: Option<&FeatureSizing>,
        block_bytes: usize,
    ) -> Result<Self, Error> {
        let Storage::Device { uri, hardware } = storage else {
            return Err(Error::invalid(
                "the dataset's files are not a device: nothing to place",
            ));
        };
        let rows = match features {
            Some(_) => dataset.feature_rows()?,
            None => None,
        };
        let mut hw = (**hardware).clone();
        if let (Some(rows), Some(sizing)) = (&rows, features) {
            sizing.apply(
                &mut hw,
                dataset.manifest.node_count,
                rows.row_bytes() as u64,
            );
        }
        let mut device = sagessd_host_driver::open_device(uri, &hw)?;
        let graph = dataset.graph()?;
        let (layout, _) = AgnesLayout::for_dataset(dataset, block_bytes)?;
        let placement =
            sagessd_runtime::placement::place(&mut device, &graph, rows.as_ref(), &layout)
                .map_err(|e| Error::Placement(e.to_string()))?;
        device.transport_mut().drop_caches();
        Ok(Self {
            device: Arc::new(Mutex::new(device)),
            layout: Arc::new(layout),
            placement,
            hardware: hw,
            uri: uri.clone(),
            node_count: dataset.manifest.node_count,
            in_use: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Takes the device for one loader; an error while another loader is open on it.
    pub(crate) fn take_turn(&self) -> Result<Turn, Error> {
        if self.in_use.swap(true, Ordering::AcqRel) {
            return Err(Error::invalid(
                "another loader is open on this device: loaders on one placed device take \
                 turns (drop the other first)",
            ));
        }
        Ok(Turn(Arc::clone(&self.in_use)))
    }

    /// Where the graph, its feature region and the AGNES layout are.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The AGNES layout on the device.
    pub fn layout(&self) -> &AgnesLayout {
        &self.layout
    }

    /// The hardware description the device runs (its in-storage feature buffer sized).
    pub fn hardware(&self) -> &HwConfig {
        &self.hardware
    }

    /// Whether it is the in-process emulated SSD (whose time is modelled).
    pub fn is_emulated(&self) -> bool {
        self.uri.endpoint == Endpoint::Local
    }

    /// Which device.
    pub fn uri(&self) -> &DeviceUri {
        &self.uri
    }

    /// The device, for what a loader does not say (its model, counters, clock). Hold the guard
    /// only briefly, and never while taking a loader's minibatches: its worker needs the device.
    pub fn lock(&self) -> Result<MutexGuard<'_, AnyDevice>, Error> {
        self.device
            .lock()
            .map_err(|_| Error::Worker("a reader of the device panicked".into()))
    }

    /// Drops the device's caches where the transport can (`false` where it cannot), so that
    /// the next loader starts cold.
    pub fn drop_caches(&self) -> Result<bool, Error> {
        Ok(self.lock()?.transport_mut().drop_caches())
    }
}
