//! Where a loader reads the dataset: this machine's files, or an NVMe device the dataset is
//! written to from LBA 0 (the in-process emulated SSD, or a real or remote one by URI).

use std::path::Path;

use sagessd_emulator::HwConfig;
use sagessd_host_driver::{DeviceUri, Endpoint};

use crate::Error;

/// A storage target.
#[derive(Clone, Debug)]
pub enum Storage {
    /// The dataset's files on this machine, read by the host samplers (the wall clock times
    /// them).
    Files,
    /// An NVMe device: the dataset is written to it from LBA 0, AGNES reads its blocks there
    /// and in-storage sampling runs in its firmware. `hardware` describes the in-process
    /// emulated SSD (`local:`), whose time is modelled; a real or remote device is timed by the
    /// wall clock and its description only sizes the host's buffers.
    Device {
        /// Which device.
        uri: DeviceUri,
        /// The emulated SSD's description (the built-in Cosmos+ unless one is named).
        hardware: Box<HwConfig>,
    },
}

impl Storage {
    /// Parses a target: `files`; `emulator` or `emulator:PATH.toml` (the in-process emulated
    /// SSD, built-in Cosmos+ or that hardware description); or a device URI, `local:`,
    /// `tcp://HOST:PORT/NQN`, `passthru:/dev/ngXnY` (with `?tunnel=1` and the other options
    /// [`DeviceUri`] reads).
    pub fn parse(text: &str) -> Result<Self, Error> {
        if text == "files" {
            return Ok(Self::Files);
        }
        if text == "emulator" || text == "emulator:" {
            return Ok(Self::emulator(HwConfig::cosmos_plus()));
        }
        if let Some(path) = text.strip_prefix("emulator:") {
            return Ok(Self::emulator(HwConfig::load(Path::new(path))?));
        }
        let uri: DeviceUri = text.parse().map_err(|e: String| {
            Error::invalid(format!(
                "storage {text:?}: not `files`, `emulator[:HW.toml]` or a device URI ({e})"
            ))
        })?;
        Ok(Self::Device {
            uri,
            hardware: Box::new(HwConfig::cosmos_plus()),
        })
    }

    /// The in-process emulated SSD described by `hardware`.
    pub fn emulator(hardware: HwConfig) -> Self {
        Self::Device {
            uri: DeviceUri {
                endpoint: Endpoint::Local,
                tunnel: false,
            },
            hardware: Box::new(hardware),
        }
    }

    /// Whether the dataset is read from a device (not from this machine's files).
    pub fn is_device(&self) -> bool {
        matches!(self, Self::Device { .. })
    }
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Files => f.write_str("files"),
            Self::Device { uri, hardware } if uri.endpoint == Endpoint::Local => {
                write!(f, "emulator ({})", hardware.device.name)
            }
            Self::Device { uri, .. } => write!(f, "{uri}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_a_bad_one_is_named() {
        assert!(matches!(Storage::parse("files"), Ok(Storage::Files)));
        let emulated = Storage::parse("emulator").unwrap();
        assert!(emulated.to_string().starts_with("emulator ("), "{emulated}");
        let hw = concat!(env!("CARGO_MANIFEST_DIR"), "/../../hw-configs/newport.toml");
        match Storage::parse(&format!("emulator:{hw}")).unwrap() {
            Storage::Device { hardware, .. } => assert!(hardware.device.name.contains("ewport")),
            other => panic!("{other}"),
        }
        let tcp = Storage::parse("tcp://127.0.0.1:4420/nqn.x").unwrap();
        assert_eq!(tcp.to_string(), "tcp://127.0.0.1:4420/nqn.x");
        assert!(Storage::parse("passthru:/dev/ng0n1").unwrap().is_device());
        let bad = Storage::parse("floppy").unwrap_err().to_string();
        assert!(bad.contains("\"floppy\""), "{bad}");
        let missing = Storage::parse("emulator:/no/such.toml")
            .unwrap_err()
            .to_string();
        assert!(missing.contains("/no/such.toml"), "{missing}");
    }
}
