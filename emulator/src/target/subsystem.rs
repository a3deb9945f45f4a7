//! The NVM subsystem the target exposes: its NQN, its controllers (dynamic model: each admin
//! queue Connect creates one) and each controller's registers.

use std::collections::HashMap;
use std::sync::Mutex;

use sagessd_abi::fabrics::{
    CNTLID_DYNAMIC, Capabilities, ConnectData, cc, connect_status, csts, property,
};
use sagessd_abi::nvme::Status;

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
    host_id: [u8; 16],
    hostnqn: String,
    cc: u32,
    csts: u32,
    io_queues: Vec<u16>,
}

/// The subsystem: shared by every connection.
#[derive(Debug)]
pub struct Subsystem {
    nqn: String,
    queue_entries: u16,
    controllers: Mutex<HashMap<u16, Controller>>,
}

impl Subsystem {
    /// A subsystem named `nqn` whose queues hold at most `queue_entries` commands.
    pub fn new(nqn: &str, queue_entries: u16) -> Self {
        Self {
            nqn: nqn.to_owned(),
            queue_entries,
            controllers: Mutex::new(HashMap::new()),
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
    /// controller id, creating a controller for an admin queue.
    pub fn connect(&self, qid: u16, sqsize: u16, data: &ConnectData) -> Result<u16, Refused> {
        if data.subnqn() != Some(self.nqn.as_str()) {
            return Err(Refused::parameter(true, 256));
        }
        let hostnqn = data.hostnqn().filter(|n| !n.is_empty());
        let hostnqn = hostnqn.ok_or(Refused::parameter(true, 512))?;
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
            controllers.insert(
                id,
                Controller {
                    host_id: data.host_id,
                    hostnqn: hostnqn.to_owned(),
                    cc: 0,
                    csts: 0,
                    io_queues: Vec::new(),
                },
            );
            return Ok(id);
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
        if qid > MAX_IO_QUEUE_ID || ctrl.io_queues.contains(&qid) {
            return Err(Refused::parameter(false, 42));
        }
        ctrl.io_queues.push(qid);
        Ok(cntlid)
    }

    /// Queue `qid` of controller `cntlid` is gone; the admin queue takes its controller along.
    pub fn disconnect(&self, cntlid: u16, qid: u16) {
        let mut controllers = self.controllers();
        if qid == 0 {
            controllers.remove(&cntlid);
        } else if let Some(c) = controllers.get_mut(&cntlid) {
            c.io_queues.retain(|q| *q != qid);
        }
    }

    /// Whether controller `cntlid` is enabled and ready (commands other than Fabrics ones may
    /// run).
    pub fn ready(&self, cntlid: u16) -> bool {
        self.controllers()
            .get(&cntlid)
            .is_some_and(|c| c.csts & csts::RDY != 0)
    }

    /// Property Get.
    pub fn get_property(&self, cntlid: u16, offset: u32, wide: bool) -> Result<u64, Status> {
        let controllers = self.controllers();
        let ctrl = controllers
            .get(&cntlid)
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
        cntlid: u16,
        offset: u32,
        value: u64,
        wide: bool,
    ) -> Result<(), Status> {
        let mut controllers = self.controllers();
        let ctrl = controllers
            .get_mut(&cntlid)
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
        let s = Subsystem::new("nqn.t", 128);
        let id = s.connect(0, 31, &data(CNTLID_DYNAMIC, "nqn.t")).unwrap();
        // An I/O queue before the controller is enabled is a sequence error.
        assert_eq!(
            s.connect(1, 127, &data(id, "nqn.t")).unwrap_err().status,
            Status::COMMAND_SEQUENCE_ERROR
        );
        s.set_property(id, property::CC, 0x46_0001, false).unwrap();
        assert_eq!(s.get_property(id, property::CSTS, false), Ok(1));
        assert_eq!(s.connect(1, 127, &data(id, "nqn.t")), Ok(id));
        // Same queue twice, queue too large, unknown controller, wrong subsystem, bad size.
        assert_eq!(s.connect(1, 127, &data(id, "nqn.t")).unwrap_err().dw0, 42);
        assert_eq!(s.connect(1, 128, &data(id, "nqn.t")).unwrap_err().dw0, 44);
        assert_eq!(
            s.connect(2, 127, &data(id + 1, "nqn.t")).unwrap_err().dw0,
            (1 << 16) | 16
        );
        assert_eq!(
            s.connect(0, 31, &data(CNTLID_DYNAMIC, "nqn.other"))
                .unwrap_err()
                .dw0,
            (1 << 16) | 256
        );
        s.set_property(id, property::CC, 0x46_4001, false).unwrap();
        assert_eq!(s.get_property(id, property::CSTS, false), Ok(0b1001));
        assert_eq!(
            s.get_property(id, property::CAP, false),
            Err(Status::INVALID_FIELD)
        );
        s.disconnect(id, 0);
        assert!(!s.ready(id));
    }
}
