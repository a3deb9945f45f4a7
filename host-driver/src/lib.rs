//! sagessd host driver: how the host runtime talks NVMe to a sagessd device.
//!
//! ```plain
//!  runtime samplers ─► Device<T> ─ identify · read/write (split, pipelined) · GRAPH_ATTACH ·
//!                         │        sample = one NS_SUBMIT + one NS_COLLECT
//!                         ▼
//!                   Transport (trait) ─► LocalTransport (in-process) │ TcpTransport (NVMe/TCP) │ PassthruTransport (Linux ioctls)
//! ```
//!
//! * [`Transport`] moves submission entries and data buffers to a device and brings completions
//!   back, with the modelled completion time when the transport has one.
//! * [`Device`] owns command-id allocation and completion multiplexing, identifies the namespace,
//!   splits block I/O at the maximum transfer size with several commands in flight, attaches
//!   graphs, and coalesces a minibatch's in-storage sampling into one `NS_SUBMIT` and one
//!   `NS_COLLECT`. It counts commands and bytes per direction ([`DriverStats`]).
//! * Device errors surface as [`DriverError::Command`] with the NVMe status and the decoded
//!   sagessd vendor status.

mod device;
mod error;
mod fabrics_auth;
pub mod load;
#[cfg(feature = "local")]
mod local;
pub mod ns;
mod nvme;
mod passthru;
mod tcp;
mod transport;
mod uri;

pub use device::{
    DEFAULT_COLLECT_CAP_BYTES, DEFAULT_QUEUE_DEPTH, Device, DeviceInfo, DriverStats,
    FALLBACK_MAX_TRANSFER_BYTES,
};
pub use error::{DriverError, describe_status, opcode_name};
pub use fabrics_auth::DhchapSecrets;
#[cfg(feature = "local")]
pub use local::LocalTransport;
pub use ns::{Returns, subgraph_size_bound};
pub use nvme::{ADMIN_QUEUE, IO_QUEUE, NAMESPACE_ID};
pub use passthru::PassthruTransport;
pub use tcp::{TcpOptions, TcpTransport};
pub use transport::{Completion, DeviceCounters, Transport, TransportError};
#[cfg(feature = "local")]
pub use uri::open_device;
pub use uri::{DeviceUri, Endpoint, open_remote_device};
