//! The admin commands the controller serves itself: Identify, Get Log Page, Get/Set Features
//! and Keep Alive. Each completes at once; its data (at most one 4 KiB structure) is built here
//! and moved to the host by the dispatcher.

use sagessd_abi::identify::{
    CNS_ACTIVE_NAMESPACES, CNS_CONTROLLER, CNS_CSI_CONTROLLER, CNS_NAMESPACE,
    CNS_NAMESPACE_DESCRIPTORS, CSI_NVM, ControllerInfo, HealthLog, IDENTIFY_SIZE_BYTES,
    LOG_PAGE_BYTES, NamespaceInfo, encode_active_namespaces, encode_firmware_slot_log,
    encode_nvm_controller,
};
use sagessd_abi::ns_config::NsLimits;
use sagessd_abi::nvme::{AdminCommand, Status, feature, log_page};
use sagessd_abi::tunnel::TunnelWindow;

/// The namespace the device exposes.
pub(crate) const NSID: u32 = 1;
/// I/O queues the controller grants (any submission queue id is served; this is what Number of
/// Queues reports).
const MAX_IO_QUEUES: u32 = 64;
/// Its NGUID: fixed, since the device has one namespace.
const NGUID: [u8; 16] = *b"sagessd-ns-00001";
/// Features with a stored value, indexed by feature identifier.
const FEATURE_SLOTS: usize = 16;
/// Get Features select value 3: report capabilities (the value is changeable, not saveable).
const SELECT_CAPABILITIES: u8 = 3;
/// Capability bit: the feature is changeable.
const CHANGEABLE: u32 = 1 << 2;

/// What the controller knows about itself when it answers an admin command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts {
    /// Maximum data transfer size as a power of two of 4 KiB.
    pub mdts: u8,
    /// The NS_config limits.
    pub limits: NsLimits,
    /// Logical blocks of the namespace.
    pub namespace_blocks: u64,
    /// Logical blocks that hold data.
    pub used_blocks: u64,
    /// log2 of the logical block size.
    pub block_size_log2: u8,
    /// Spare flash left, as a percentage of the over-provisioned blocks.
    pub spare_percent: u8,
    /// The tunnel window, if served.
    pub tunnel: Option<TunnelWindow>,
}

/// Admin state that outlives one command: feature values and the health counters.
#[derive(Clone, Debug)]
pub(crate) struct Admin {
    features: [u32; FEATURE_SLOTS],
    /// Host read/write counters for the SMART / Health log.
    pub health: HealthLog,
}

impl Admin {
    /// Features at their defaults: every I/O queue granted, everything else 0.
    pub fn new() -> Self {
        let mut features = [0; FEATURE_SLOTS];
        features[usize::from(feature::NUMBER_OF_QUEUES)] = queues(MAX_IO_QUEUES, MAX_IO_QUEUES);
        Self {
            features,
            health: HealthLog::default(),
        }
    }

    /// Runs one admin command. `Ok((n, dw0))`: move the first `n` bytes of `out` to the host
    /// and complete with result `dw0`; `Err`: complete with this status.
    pub fn execute(
        &mut self,
        cmd: AdminCommand,
        facts: &Facts,
        out: &mut [u8; IDENTIFY_SIZE_BYTES],
    ) -> Result<(usize, u32), Status> {
        match cmd {
            AdminCommand::Identify { cns, nsid, csi } => {
                identify(cns, nsid, csi, facts, out)?;
                Ok((IDENTIFY_SIZE_BYTES, 0))
            }
            AdminCommand::GetLogPage {
                lid,
                len_bytes,
                offset,
            } => {
                let mut page = [0u8; LOG_PAGE_BYTES];
                let page_len = match lid {
                    log_page::ERROR_INFORMATION => 64,
                    log_page::SMART_HEALTH => {
                        HealthLog {
                            spare_percent: facts.spare_percent,
                            ..self.health
                        }
                        .encode(&mut page);
                        LOG_PAGE_BYTES
                    }
                    log_page::FIRMWARE_SLOT => {
                        encode_firmware_slot_log(env!("CARGO_PKG_VERSION"), &mut page);
                        LOG_PAGE_BYTES
                    }
                    _ => return Err(Status::INVALID_LOG_PAGE),
                };
                let start = usize::try_from(offset)
                    .ok()
                    .filter(|o| *o <= page_len && o % 4 == 0)
                    .ok_or(Status::INVALID_FIELD)?;
                // Bytes past the page's end read as zero, within one Identify-sized buffer.
                let n = (len_bytes as usize).min(IDENTIFY_SIZE_BYTES);
                out.fill(0);
                out[..page_len - start].copy_from_slice(&page[start..page_len]);
                Ok((n, 0))
            }
            AdminCommand::GetFeatures { fid, select } => {
                let slot = feature_slot(fid)?;
                Ok(match select {
                    SELECT_CAPABILITIES => (0, CHANGEABLE),
                    0 => (0, self.features[slot]),
                    _ => (0, Self::new().features[slot]),
                })
            }
            AdminCommand::SetFeatures { fid, value, save } => {
                let slot = feature_slot(fid)?;
                if save {
                    return Err(Status::FEATURE_NOT_SAVEABLE);
                }
                let stored = if fid == feature::NUMBER_OF_QUEUES {
                    let (sq, cq) = (value & 0xFFFF, value >> 16);
                    if sq == 0xFFFF || cq == 0xFFFF {
                        return Err(Status::INVALID_FIELD);
                    }
                    queues(sq + 1, cq + 1)
                } else {
                    value
                };
                self.features[slot] = stored;
                Ok((0, stored))
            }
            AdminCommand::KeepAlive => Ok((0, 0)),
            AdminCommand::AsyncEventRequest | AdminCommand::Unsupported(_) => {
                Err(Status::INVALID_OPCODE)
            }
        }
    }
}

/// The Number of Queues value granting `sq` submission and `cq` completion queues (capped).
fn queues(sq: u32, cq: u32) -> u32 {
    (sq.min(MAX_IO_QUEUES) - 1) | ((cq.min(MAX_IO_QUEUES) - 1) << 16)
}

/// Where a feature's value is kept; features the device does not have are Invalid Field
/// (Volatile Write Cache among them: writes complete once programmed, there is no cache).
fn feature_slot(fid: u8) -> Result<usize, Status> {
    match fid {
        feature::ARBITRATION
        | feature::POWER_MANAGEMENT
        | feature::TEMPERATURE_THRESHOLD
        | feature::ERROR_RECOVERY
        | feature::NUMBER_OF_QUEUES
        | feature::INTERRUPT_COALESCING
        | feature::WRITE_ATOMICITY
        | feature::ASYNC_EVENT_CONFIG
        | feature::KEEP_ALIVE_TIMER => Ok(usize::from(fid)),
        _ => Err(Status::INVALID_FIELD),
    }
}

fn identify(
    cns: u8,
    nsid: u32,
    csi: u8,
    facts: &Facts,
    out: &mut [u8; IDENTIFY_SIZE_BYTES],
) -> Result<(), Status> {
    let namespace = NamespaceInfo {
        block_count: facts.namespace_blocks,
        used_block_count: facts.used_blocks,
        block_size_log2: facts.block_size_log2,
        nguid: NGUID,
    };
    match cns {
        CNS_CONTROLLER => ControllerInfo {
            serial: "SAGESSD-0001",
            model: "sagessd computational SSD",
            firmware_revision: env!("CARGO_PKG_VERSION"),
            mdts: facts.mdts,
            namespace_count: 1,
            limits: facts.limits,
            tunnel: facts.tunnel,
        }
        .encode(out),
        CNS_NAMESPACE | CNS_NAMESPACE_DESCRIPTORS if nsid != NSID => {
            return Err(Status::INVALID_NAMESPACE);
        }
        CNS_NAMESPACE => namespace.encode(out),
        CNS_NAMESPACE_DESCRIPTORS => namespace.encode_descriptors(out),
        CNS_ACTIVE_NAMESPACES => encode_active_namespaces(1, nsid, out),
        CNS_CSI_CONTROLLER if csi == CSI_NVM => encode_nvm_controller(facts.mdts, out),
        _ => return Err(Status::INVALID_FIELD),
    }
    Ok(())
}
