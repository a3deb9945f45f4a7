//! The NVM subsystem the target exposes: its NQN, its controllers (dynamic model: each admin
//! queue Connect creates one) and each controller's registers.

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};

use sagessd_abi::fabrics::{
    CNTLID_DYNAMIC, Capabilities, ConnectData, cc, connect_status, csts, property,
};
use sagessd_abi::nvme::Status;

use super::budget::Budget;

/// NVMe version the controllers report (VS property and Identify VER): 1.3.
pub const VERSION: u32 = 0x0001_0300;
/// Highest I/O queue id a controller accepts.
pub const MAX_IO_QUEUE_ID: u16 = 64;
/// Lowest and highest controller ids handed out.
const CNTLID_RANGE: (u16, u16) = (1, 0xFFEF);

/// A Connect that was refused: the status, and the result dword naming the bad field
/// (bit 16: in the data, not the command; bits 15:0: its byte offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The status.
    pub status: Status,
    /// Completion dword 0.
    pub dw0: u32,
}

impl Refused {
    fn parameter(in_data: bool, offset: u16) -> Self {
        Self {
            status: connect_status::INVALID_PARAMETERS,
            dw0: (u32::from(in_data) << 16) | u32::from(offset),
        }
    }
}

/// One controller's state.
#[derive(Debug)]
struct Controller {
    /// Tells this controller from an earlier one with the same id.
    generation: u64,
    host_id: [u8; 16],
    hostnqn: String,
    cc: u32,
    csts: u32,
    /// Its share of the target's budget, taken by every queue of it.
    share: Arc<Budget>,
    /// Its I/O queues, and their connections (shut down when the controller goes).
    io_queues: Vec<(u16, Option<TcpStream>)>,
}

/// Which controller a queue belongs to: its id and generation (ids are reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerRef {
    /// Controller id (CNTLID).
    pub cntlid: u16,
    /// Generation of that id.
    pub generation: u64,
}

/// Which hosts may connect, by host NQN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AllowedHosts {
    /// Any host, and the target listens on loopback only (the default): a target that would
    /// listen beyond this machine refuses to start with it, so that exposing the namespace is
    /// always a choice made explicitly.
    #[default]
    AnyOnLoopback,
    /// Any host that reaches the port, wherever the target listens.
    Any,
    /// Only these host NQNs; a Connect from another gets Connect Invalid Host, as Linux's
    /// target answers it.
    Only(Vec<String>),
}

impl AllowedHosts {
    /// Whether `hostnqn` may connect.
    pub fn allows(&self, hostnqn: &str) -> bool {
        match self {
            Self::AnyOnLoopback | Self::Any => true,
            Self::Only(hosts) => hosts.iter().any(|h| h == hostnqn),
        }
    }
}

/// The subsystem: shared by every connection.
#[derive(Debug)]
pub struct Subsystem {
    nqn: String,
    queue_entries: u16,
    hosts: AllowedHosts,
    /// Bytes of command data one controller (one host's admin and I/O queues together) may
    /// hold of the target's budget: half of it, so that a host that stops reading cannot take
    /// what another host's commands need.
    controller_share_bytes: usize,
    controllers: Mutex<HashMap<u16, Controller>>,
    generations: std::sync::atomic::AtomicU64,
}

impl Subsystem {
    /// A subsystem named `nqn` whose queues hold at most `queue_entries` commands, open to
    /// `hosts`, each controller holding at most `controller_share_bytes` of command data.
    pub fn new(
        nqn: &str,
        queue_entries: u16,
        hosts: AllowedHosts,
        controller_share_bytes: usize,
    ) -> Self {
        Self {
            nqn: nqn.to_owned(),
            queue_entries,
            hosts,
            controller_share_bytes,
            controllers: Mutex::new(HashMap::new()),
            generations: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// The subsystem NQN.
    pub fn nqn(&self) -> &str {
        &self.nqn
    }

    /// Most commands one queue holds (MQES + 1).
    pub fn queue_entries(&self) -> u16 {
        self.queue_entries
    }

    fn controllers(&self) -> std::sync::MutexGuard<'_, HashMap<u16, Controller>> {
        // A connection thread that panicked cannot leave the map half-updated (every update is
        // one insert or remove), so a poisoned lock is still consistent.
        self.controllers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Connect for queue `qid` with `sqsize` (0-based) and the Connect data: returns the
    /// controller, creating one for an admin queue. An I/O queue's `socket` (a clone of its
    /// connection) is shut down when its controller goes.
    pub fn connect(
        &self,
        qid: u16,
        sqsize: u16,
        data: &ConnectData,
        socket: Option<TcpStream>,
    ) -> Result<ControllerRef, Refused> {
        if data.subnqn() != Some(self.nqn.as_str()) {
            return Err(Refused::parameter(true, 256));
        }
        let hostnqn = data.hostnqn().filter(|n| !n.is_empty());
        let hostnqn = hostnqn.ok_or(Refused::parameter(true, 512))?;
        if !self.hosts.allows(hostnqn) {
            tracing::warn!("refused a Connect from host {hostnqn:?}: not an allowed host");
            return Err(Refused {
                status: connect_status::INVALID_HOST,
                dw0: 0,
            });
        }
        if sqsize == 0 || sqsize >= self.queue_entries {
            return Err(Refused::parameter(false, 44));
        }
        let cntlid = data.cntlid.get();
        let mut controllers = self.controllers();
        if qid == 0 {
            if cntlid != CNTLID_DYNAMIC {
                return Err(Refused::parameter(true, 16));
            }
            let id = (CNTLID_RANGE.0..=CNTLID_RANGE.1)
                .find(|id| !controllers.contains_key(id))
                .ok_or(Refused {
                    status: connect_status::CONTROLLER_BUSY,
                    dw0: 0,
                })?;
            let generation = self
                .generations
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            controllers.insert(
                id,
                Controller {
                    generation,
                    host_id: data.host_id,
                    hostnqn: hostnqn.to_owned(),
                    cc: 0,
                    csts: 0,
                    io_queues: Vec::new(),
                    share: Budget::new(self.controller_share_bytes),
                },
            );
            return Ok(ControllerRef {
                cntlid: id,
                generation,
            });
        }
        let ctrl = controllers
            .get_mut(&cntlid)
            .filter(|c| c.hostnqn == hostnqn && c.host_id == data.host_id)
            .ok_or(Refused::parameter(true, 16))?;
        if ctrl.csts & csts::RDY == 0 {
            return Err(Refused {
                status: Status::COMMAND_SEQUENCE_ERROR,
                dw0: 0,
            });
        }
        if qid > MAX_IO_QUEUE_ID || ctrl.io_queues.iter().any(|(q, _)| *q == qid) {
            return Err(Refused::parameter(false, 42));
        }
        ctrl.io_queues.push((qid, socket));
        Ok(ControllerRef {
            cntlid,
            generation: ctrl.generation,
        })
    }

    /// Queue `qid` of controller `ctrl` is gone. The admin queue takes its controller along,
    /// and the controller's I/O connections with it.
    pub fn disconnect(&self, ctrl: ControllerRef, qid: u16) {
        let mut controllers = self.controllers();
        let Some(c) = controllers
            .get_mut(&ctrl.cntlid)
            .filter(|c| c.generation == ctrl.generation)
        else {
            return;
        };
        if qid != 0 {
            c.io_queues.retain(|(q, _)| *q != qid);
            return;
        }
        if let Some(c) = controllers.remove(&ctrl.cntlid) {
            for socket in c.io_queues.into_iter().filter_map(|(_, s)| s) {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
    }

    /// Controller `ctrl`'s share of the target's budget, while it exists.
    pub(super) fn share_of(&self, ctrl: ControllerRef) -> Option<Arc<Budget>> {
        self.controllers()
            .get(&ctrl.cntlid)
            .filter(|c| c.generation == ctrl.generation)
            .map(|c| Arc::clone(&c.share))
    }

    /// Whether controller `ctrl` still exists, enabled and ready (commands other than Fabrics
    /// ones may run).
    pub fn ready(&self, ctrl: ControllerRef) -> bool {
        self.controllers()
            .get(&ctrl.cntlid)
            .is_some_and(|c| c.generation == ctrl.generation && c.csts & csts::RDY != 0)
    }

    /// Property Get.
    pub fn get_property(&self, c: ControllerRef, offset: u32, wide: bool) -> Result<u64, Status> {
        let controllers = self.controllers();
        let ctrl = controllers
            .get(&c.cntlid)
            .filter(|x| x.generation == c.generation)
            .ok_or(Status::COMMAND_SEQUENCE_ERROR)?;
        match (offset, wide) {
            (property::CAP, true) => Ok(Capabilities {
                mqes: self.queue_entries - 1,
                timeout_500ms: 10,
            }
            .encode()),
            (property::VS, false) => Ok(u64::from(VERSION)),
            (property::CC, false) => Ok(u64::from(ctrl.cc)),
            (property::CSTS, false) => Ok(u64::from(ctrl.csts)),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Property Set: only CC is writable. Enabling makes the controller ready at once; a
    /// shutdown notification completes at once (nothing is volatile); clearing EN resets it.
    pub fn set_property(
        &self,
        c: ControllerRef,
        offset: u32,
        value: u64,
        wide: bool,
    ) -> Result<(), Status> {
        let mut controllers = self.controllers();
        let ctrl = controllers
            .get_mut(&c.cntlid)
            .filter(|x| x.generation == c.generation)
            .ok_or(Status::COMMAND_SEQUENCE_ERROR)?;
        if offset != property::CC || wide {
            return Err(Status::INVALID_FIELD);
        }
        let value = value as u32;
        ctrl.cc = value;
        ctrl.csts = if value & cc::EN != 0 { csts::RDY } else { 0 };
        if value & cc::SHN_MASK != 0 {
            ctrl.csts |= csts::SHST_COMPLETE;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(cntlid: u16, subnqn: &str) -> ConnectData {
        ConnectData::new([3; 16], cntlid, subnqn, "nqn.host")
    }

    #[test]
    fn admin_then_io_connect_follows_enable() {
        let s = Subsystem::new("nqn.t", 128, AllowedHosts::AnyOnLoopback, 1 << 20);
        let c = s
            .connect(0, 31, &data(CNTLID_DYNAMIC, "nqn.t"), None)
            .unwrap();
        let id = c.cntlid;
        // An I/O queue before the controller is enabled is a sequence error.
        assert_eq!(
            s.connect(1, 127, &data(id, "nqn.t"), None)
                .unwrap_err()
                .status,
            Status::COMMAND_SEQUENCE_ERROR
        );
        s.set_property(c, property::CC, 0x46_0001, false).unwrap();
        assert_eq!(s.get_property(c, property::CSTS, false), Ok(1));
        assert_eq!(s.connect(1, 127, &data(id, "nqn.t"), None), Ok(c));
        // Same queue twice, queue too large, unknown controller, wrong subsystem, bad size.
        let refused = |qid, sqsize, cntlid, nqn| {
            s.connect(qid, sqsize, &data(cntlid, nqn), None)
                .unwrap_err()
                .dw0
        };
        assert_eq!(refused(1, 127, id, "nqn.t"), 42);
        assert_eq!(refused(1, 128, id, "nqn.t"), 44);
        assert_eq!(refused(2, 127, id + 1, "nqn.t"), (1 << 16) | 16);
        assert_eq!(refused(0, 31, CNTLID_DYNAMIC, "nqn.other"), (1 << 16) | 256);
        s.set_property(c, property::CC, 0x46_4001, false).unwrap();
        assert_eq!(s.get_property(c, property::CSTS, false), Ok(0b1001));
        assert_eq!(
            s.get_property(c, property::CAP, false),
            Err(Status::INVALID_FIELD)
        );
        s.disconnect(c, 0);
        assert!(!s.ready(c));
        // The id is handed out again, to a controller the old queues do not reach.
        let again = s
            .connect(0, 31, &data(CNTLID_DYNAMIC, "nqn.t"), None)
            .unwrap();
        assert_eq!(again.cntlid, id);
        s.set_property(again, property::CC, 1, false).unwrap();
        assert!(s.ready(again) && !s.ready(c));
    }
}
