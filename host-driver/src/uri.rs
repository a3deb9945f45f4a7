//! Device URIs: one string names a device, the transport that reaches it, and how sampling is
//! carried, everywhere in the CLI (`--device URI`).
//!
//! * `local:` — an emulated SSD in this process (the built-in hardware description, or the one
//!   the caller passes);
//! * `tcp://HOST:PORT/NQN` — an NVMe/TCP subsystem (the emulator's target, or any NVMe-oF
//!   target); `digest=1` turns header and data digests on, `hostnqn=NQN` presents that host
//!   NQN (a target may allow only some hosts), `dhchap_secret=DHHC-1:…` authenticates with
//!   that secret when the target asks (DH-HMAC-CHAP), and `dhchap_ctrl_secret=DHHC-1:…` makes
//!   the target prove it knows that one (a URI prints its secrets as `<secret>`, so that a
//!   printed URI never carries them);
//! * `passthru:/dev/nvme0n1` or `passthru:/dev/ng0n1` — a namespace through Linux NVMe
//!   passthrough; on the character device I/O goes through io_uring (`uring=0`: ioctls).
//!
//! Any of them takes `?tunnel=1`: in-storage sampling then goes in Writes and Reads to the
//! device's tunnel window instead of vendor commands. Options are joined with `&`.

use std::path::PathBuf;

#[cfg(feature = "local")]
use sagessd_emulator::HwConfig;

#[cfg(feature = "local")]
use crate::LocalTransport;
use crate::transport::Transport;
use crate::{Device, DhchapSecrets, DriverError, PassthruTransport, TcpOptions, TcpTransport};
use sagessd_abi::auth::secret::Secret;

/// Where a device is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
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
        /// The host NQN to present (`None`: the initiator's own).
        host_nqn: Option<String>,
        /// The DH-HMAC-CHAP secrets, for a target that asks the host to authenticate.
        dhchap: Option<DhchapSecrets>,
    },
    /// A Linux NVMe namespace device node.
    Passthru {
        /// `/dev/nvmeXnY` or `/dev/ngXnY`.
        path: PathBuf,
        /// I/O through io_uring on a character device (`uring=0` turns it off).
        uring: bool,
    },
}

impl Endpoint {
    /// An NVMe/TCP endpoint's address and how to connect to it (its subsystem, host NQN,
    /// digests and secrets; one I/O queue), or `None` for another kind.
    pub fn tcp_options(&self) -> Option<(&str, TcpOptions)> {
        let Endpoint::Tcp {
            addr,
            nqn,
            digests,
            host_nqn,
            dhchap,
        } = self
        else {
            return None;
        };
        let defaults = TcpOptions::new(nqn);
        let options = TcpOptions {
            digests: *digests,
            host_nqn: host_nqn.clone().unwrap_or(defaults.host_nqn.clone()),
            dhchap: dhchap.clone(),
            ..defaults
        };
        Some((addr, options))
    }
}

/// A parsed device URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceUri {
    /// Where the device is.
    pub endpoint: Endpoint,
    /// Sample through the tunnel window.
    pub tunnel: bool,
}

impl std::fmt::Display for DeviceUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut options = Vec::new();
        match &self.endpoint {
            Endpoint::Local => write!(f, "local:")?,
            Endpoint::Tcp {
                addr,
                nqn,
                digests,
                host_nqn,
                dhchap,
            } => {
                write!(f, "tcp://{addr}/{nqn}")?;
                if *digests {
                    options.push("digest=1".to_string());
                }
                if let Some(host) = host_nqn {
                    options.push(format!("hostnqn={host}"));
                }
                if let Some(secrets) = dhchap {
                    options.push("dhchap_secret=<secret>".to_string());
                    if secrets.ctrl.is_some() {
                        options.push("dhchap_ctrl_secret=<secret>".to_string());
                    }
                }
            }
            Endpoint::Passthru { path, uring } => {
                write!(f, "passthru:{}", path.display())?;
                if !uring {
                    options.push("uring=0".to_string());
                }
            }
        }
        if self.tunnel {
            options.push("tunnel=1".to_string());
        }
        if !options.is_empty() {
            write!(f, "?{}", options.join("&"))?;
        }
        Ok(())
    }
}

impl std::str::FromStr for DeviceUri {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (base, query) = s.split_once('?').unwrap_or((s, ""));
        let mut digests = false;
        let mut tunnel = false;
        let mut uring = None;
        let mut host_nqn = None;
        let (mut host_secret, mut ctrl_secret) = (None, None);
        let secret = |value: &str, name: &str| {
            Secret::parse(value).map_err(|e| format!("{s:?}: {name}=: {e}"))
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair {
                _ if pair.starts_with("dhchap_secret=") => {
                    host_secret = Some(secret(&pair["dhchap_secret=".len()..], "dhchap_secret")?);
                }
                _ if pair.starts_with("dhchap_ctrl_secret=") => {
                    let value = &pair["dhchap_ctrl_secret=".len()..];
                    ctrl_secret = Some(secret(value, "dhchap_ctrl_secret")?);
                }
                _ if pair.starts_with("hostnqn=") => {
                    let host = &pair["hostnqn=".len()..];
                    if host.is_empty() || host.len() > 223 {
                        return Err(format!("{s:?}: hostnqn= takes an NQN of 1 to 223 bytes"));
                    }
                    host_nqn = Some(host.to_owned());
                }
                "digest=1" | "digest=0" => digests = pair.ends_with('1'),
                "tunnel=1" | "tunnel=0" => tunnel = pair.ends_with('1'),
                "uring=1" | "uring=0" => uring = Some(pair.ends_with('1')),
                other => {
                    return Err(format!(
                        "{s:?}: unknown option {other:?} (digest=0|1, hostnqn=NQN, \
                         dhchap_secret=DHHC-1:…, dhchap_ctrl_secret=DHHC-1:…, tunnel=0|1, uring=0|1)"
                    ));
                }
            }
        }
        let endpoint = if base == "local:" || base == "local" {
            Endpoint::Local
        } else if let Some(path) = base.strip_prefix("passthru:") {
            if path.is_empty() {
                return Err(format!("{s:?}: passthru: needs a device path"));
            }
            Endpoint::Passthru {
                path: path.into(),
                uring: uring.unwrap_or(true),
            }
        } else if let Some(rest) = base.strip_prefix("tcp://") {
            if ctrl_secret.is_some() && host_secret.is_none() {
                return Err(format!(
                    "{s:?}: dhchap_ctrl_secret= goes with dhchap_secret= (the host authenticates first)"
                ));
            }
            let (addr, nqn) = rest
                .split_once('/')
                .filter(|(a, n)| a.contains(':') && !n.is_empty())
                .ok_or_else(|| format!("{s:?}: expected tcp://HOST:PORT/NQN"))?;
            Endpoint::Tcp {
                addr: addr.to_owned(),
                nqn: nqn.to_owned(),
                digests,
                host_nqn: host_nqn.clone(),
                dhchap: host_secret.clone().map(|host| DhchapSecrets {
                    host,
                    ctrl: ctrl_secret.clone(),
                }),
            }
        } else {
            return Err(format!(
                "{s:?}: unknown device URI (local:, tcp://HOST:PORT/NQN, passthru:/dev/...)"
            ));
        };
        let tcp_only =
            digests || host_nqn.is_some() || host_secret.is_some() || ctrl_secret.is_some();
        if tcp_only && !matches!(endpoint, Endpoint::Tcp { .. }) {
            return Err(format!(
                "{s:?}: digest=, hostnqn= and dhchap_*secret= are NVMe/TCP options"
            ));
        }
        if uring.is_some() && !matches!(endpoint, Endpoint::Passthru { .. }) {
            return Err(format!("{s:?}: uring= is a passthru: option"));
        }
        Ok(Self { endpoint, tunnel })
    }
}

/// Opens the device a URI names (`hw` describes the device for `local:`): its transport, the
/// namespace, and the tunnel if asked for.
#[cfg(feature = "local")]
pub fn open_device(
    uri: &DeviceUri,
    hw: &HwConfig,
) -> Result<Device<Box<dyn Transport + Send>>, DriverError> {
    match &uri.endpoint {
        Endpoint::Local => with_tunnel(Box::new(LocalTransport::from_config(hw)?), uri),
        _ => open_remote_device(uri),
    }
}

/// Opens a real or remote device (NVMe/TCP, Linux passthrough) a URI names; `local:` needs
/// [`open_device`] (feature `local`) and is an error here.
pub fn open_remote_device(
    uri: &DeviceUri,
) -> Result<Device<Box<dyn Transport + Send>>, DriverError> {
    let transport: Box<dyn Transport + Send> = match (uri.endpoint.tcp_options(), &uri.endpoint) {
        (Some((addr, options)), _) => Box::new(TcpTransport::connect(addr, &options)?),
        (None, Endpoint::Passthru { path, uring }) => {
            Box::new(PassthruTransport::open(path, *uring)?)
        }
        (None, _) => {
            return Err(DriverError::InvalidArgument(
                "local: is the in-process emulator, which this open does not build (open_device, feature local)".into(),
            ));
        }
    };
    with_tunnel(transport, uri)
}

/// The device behind `transport`, identified, with the tunnel the URI asks for.
fn with_tunnel(
    transport: Box<dyn Transport + Send>,
    uri: &DeviceUri,
) -> Result<Device<Box<dyn Transport + Send>>, DriverError> {
    let mut device = Device::open(transport)?;
    device.set_tunnel(uri.tunnel)?;
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_print_back_and_bad_ones_say_why() {
        for good in [
            "local:",
            "local:?tunnel=1",
            "tcp://127.0.0.1:4420/nqn.x?digest=1&tunnel=1",
            "passthru:/dev/ng0n1",
            "passthru:/dev/ng0n1?tunnel=1",
            "passthru:/dev/ng0n1?uring=0",
            "tcp://h:1/n?digest=1&hostnqn=nqn.2014-08.org.nvmexpress:uuid:1234&tunnel=1",
        ] {
            let uri: DeviceUri = good.parse().expect(good);
            assert_eq!(uri.to_string(), good);
        }
        assert_eq!(
            "tcp://h:1/n?digest=1"
                .parse::<DeviceUri>()
                .unwrap()
                .endpoint,
            Endpoint::Tcp {
                addr: "h:1".into(),
                nqn: "n".into(),
                digests: true,
                host_nqn: None,
                dhchap: None,
            }
        );
        // Secrets are taken, checked, and never printed.
        let key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        let uri: DeviceUri = format!("tcp://h:1/n?dhchap_secret={key}&dhchap_ctrl_secret={key}")
            .parse()
            .unwrap();
        let Endpoint::Tcp {
            dhchap: Some(secrets),
            ..
        } = &uri.endpoint
        else {
            panic!("{uri:?}");
        };
        assert_eq!(
            secrets.ctrl.as_ref().map(Secret::to_string).as_deref(),
            Some(key)
        );
        assert_eq!(
            uri.to_string(),
            "tcp://h:1/n?dhchap_secret=<secret>&dhchap_ctrl_secret=<secret>"
        );
        for bad in [
            "tcp://host/nqn",
            "tcp://h:1/",
            "tcp://h:1/n?x=2",
            "passthru:",
            "passthru:/dev/x?digest=1",
            "passthru:/dev/x?hostnqn=a",
            "tcp://h:1/n?hostnqn=",
            "tcp://h:1/n?dhchap_secret=DHHC-1:00:AAAA:",
            "tcp://h:1/n?dhchap_ctrl_secret=DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
            "passthru:/dev/x?dhchap_secret=DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
            "local:?uring=1",
            "nvme0",
        ] {
            assert!(bad.parse::<DeviceUri>().is_err(), "{bad}");
        }
    }
}
