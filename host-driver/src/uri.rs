//! Device URIs: one string names a device and the transport that reaches it, everywhere in the
//! CLI (`--device URI`).
//!
//! * `local:` — an emulated SSD in this process (the built-in hardware description, or the one
//!   the caller passes);
//! * `tcp://HOST:PORT/NQN[?digest=1]` — an NVMe/TCP subsystem (the emulator's target, or any
//!   NVMe-oF target), with header and data digests if asked;
//! * `passthru:/dev/nvme0n1` or `passthru:/dev/ng0n1` — a namespace through Linux NVMe
//!   passthrough.

use std::path::PathBuf;

use sagessd_emulator::HwConfig;

use crate::transport::{Transport, TransportError};
use crate::{LocalTransport, PassthruTransport, TcpOptions, TcpTransport};

/// A parsed device URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceUri {
    /// An in-process emulated SSD.
    Local,
    /// An NVMe/TCP subsystem.
    Tcp {
        /// `HOST:PORT`.
        addr: String,
        /// Subsystem NQN.
        nqn: String,
        /// Header and data digests on.
        digests: bool,
    },
    /// A Linux NVMe namespace device node.
    Passthru {
        /// `/dev/nvmeXnY` or `/dev/ngXnY`.
        path: PathBuf,
    },
}

impl std::str::FromStr for DeviceUri {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "local:" || s == "local" {
            return Ok(Self::Local);
        }
        if let Some(path) = s.strip_prefix("passthru:") {
            if path.is_empty() {
                return Err(format!("{s:?}: passthru: needs a device path"));
            }
            return Ok(Self::Passthru { path: path.into() });
        }
        if let Some(rest) = s.strip_prefix("tcp://") {
            let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
            let (addr, nqn) = rest
                .split_once('/')
                .ok_or_else(|| format!("{s:?}: expected tcp://HOST:PORT/NQN"))?;
            if addr.is_empty() || !addr.contains(':') || nqn.is_empty() {
                return Err(format!("{s:?}: expected tcp://HOST:PORT/NQN"));
            }
            let mut digests = false;
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                match pair {
                    "digest=1" => digests = true,
                    "digest=0" => digests = false,
                    other => return Err(format!("{s:?}: unknown option {other:?} (digest=0|1)")),
                }
            }
            return Ok(Self::Tcp {
                addr: addr.to_owned(),
                nqn: nqn.to_owned(),
                digests,
            });
        }
        Err(format!(
            "{s:?}: unknown device URI (local:, tcp://HOST:PORT/NQN, passthru:/dev/...)"
        ))
    }
}

/// Opens the transport a URI names; `hw` describes the device for `local:`.
pub fn open_transport(
    uri: &DeviceUri,
    hw: &HwConfig,
) -> Result<Box<dyn Transport + Send>, TransportError> {
    Ok(match uri {
        DeviceUri::Local => Box::new(LocalTransport::from_config(hw)?),
        DeviceUri::Tcp { addr, nqn, digests } => {
            let options = TcpOptions {
                digests: *digests,
                ..TcpOptions::new(nqn)
            };
            Box::new(TcpTransport::connect(addr.as_str(), &options)?)
        }
        DeviceUri::Passthru { path } => Box::new(PassthruTransport::open(path)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_and_bad_ones_say_why() {
        assert_eq!("local:".parse(), Ok(DeviceUri::Local));
        assert_eq!(
            "tcp://127.0.0.1:4420/nqn.x?digest=1".parse(),
            Ok(DeviceUri::Tcp {
                addr: "127.0.0.1:4420".into(),
                nqn: "nqn.x".into(),
                digests: true
            })
        );
        assert_eq!(
            "passthru:/dev/ng0n1".parse(),
            Ok(DeviceUri::Passthru {
                path: "/dev/ng0n1".into()
            })
        );
        for bad in [
            "tcp://host/nqn",
            "tcp://h:1/",
            "tcp://h:1/n?x=2",
            "passthru:",
            "nvme0",
        ] {
            assert!(bad.parse::<DeviceUri>().is_err(), "{bad}");
        }
    }
}
