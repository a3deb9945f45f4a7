//! [`Device`]: one NVMe namespace of a sagessd device behind any [`Transport`].
//!
//! The device owns command-id allocation and completion multiplexing, so callers never see a
//! command id. Block I/O is split at the device's maximum data transfer size and pipelined with
//! up to [`Device::queue_depth`] commands in flight. The in-storage sampling call coalesces a
//! whole minibatch into exactly one `NS_SUBMIT` and one `NS_COLLECT`.

use std::collections::BTreeMap;

use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::identify::{
    CNS_CONTROLLER, CNS_NAMESPACE, ControllerInfo, IDENTIFY_SIZE_BYTES, NamespaceInfo,
};
use sagessd_abi::ns_config::NsLimits;
use sagessd_abi::nvme::{DataDirection, SubmissionEntry, admin_opcode, io_opcode};
use sagessd_abi::tunnel::TunnelWindow;

use crate::error::DriverError;
use crate::nvme::{ADMIN_QUEUE, IO_QUEUE, NAMESPACE_ID, check};
use crate::transport::{Completion, DeviceCounters, Transport};

/// Commands kept in flight by pipelined block I/O unless changed with
/// [`Device::set_queue_depth`].
pub const DEFAULT_QUEUE_DEPTH: usize = 32;
/// Largest transfer used when Identify reports no limit (MDTS = 0).
pub const FALLBACK_MAX_TRANSFER_BYTES: u32 = 128 * 1024;
/// Largest first `NS_COLLECT` buffer unless changed with [`Device::set_collect_cap_bytes`]; a
/// bigger subgraph costs one retry with the exact size the device reports.
pub const DEFAULT_COLLECT_CAP_BYTES: usize = 8 << 20;
/// The NVM command set's largest block count per Read/Write (a 16-bit 0-based field).
const MAX_NLB: u32 = 1 << 16;

/// What Identify reported about the controller and namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Serial number (trailing spaces removed).
    pub serial: String,
    /// Model number (trailing spaces removed).
    pub model: String,
    /// Firmware revision (trailing spaces removed).
    pub firmware_revision: String,
    /// Logical block size of the namespace.
    pub block_size_bytes: u32,
    /// Namespace size in logical blocks.
    pub block_count: u64,
    /// Largest data transfer of one Read/Write (from MDTS, or
    /// [`FALLBACK_MAX_TRANSFER_BYTES`] when unlimited).
    pub max_transfer_bytes: u32,
    /// The in-storage sampling limits, if the controller reports them (the `SAGE` vendor area).
    pub limits: Option<NsLimits>,
    /// The tunnel window, if the controller serves one.
    pub tunnel: Option<TunnelWindow>,
}

impl DeviceInfo {
    /// Largest number of logical blocks one Read/Write moves.
    pub fn max_transfer_blocks(&self) -> u32 {
        (self.max_transfer_bytes / self.block_size_bytes).clamp(1, MAX_NLB)
    }
}

/// Commands issued and bytes moved by a [`Device`], cumulative.
///
/// Host→device bytes count every payload handed to the transport; device→host bytes count the
/// data successful commands returned (for `NS_COLLECT`, the subgraph size, not the buffer size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Every command submitted.
    pub commands: u64,
    /// Admin commands (Identify).
    pub admin_commands: u64,
    /// NVM Reads.
    pub reads: u64,
    /// NVM Writes.
    pub writes: u64,
    /// `NS_SUBMIT` commands.
    pub ns_submits: u64,
    /// `NS_COLLECT` commands.
    pub ns_collects: u64,
    /// Other I/O commands (Flush, `GRAPH_ATTACH`, …).
    pub other_commands: u64,
    /// Commands that completed with an error status.
    pub failed_commands: u64,
    /// Payload bytes host→device.
    pub h2c_bytes: u64,
    /// Payload bytes device→host.
    pub c2h_bytes: u64,
    /// In-storage hyperbatches sampled again as two halves because their subgraphs did not
    /// fit the device's result buffers.
    pub hyperbatch_splits: u64,
}

impl DriverStats {
    /// The counts accumulated since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            commands: self.commands - earlier.commands,
            admin_commands: self.admin_commands - earlier.admin_commands,
            reads: self.reads - earlier.reads,
            writes: self.writes - earlier.writes,
            ns_submits: self.ns_submits - earlier.ns_submits,
            ns_collects: self.ns_collects - earlier.ns_collects,
            other_commands: self.other_commands - earlier.other_commands,
            failed_commands: self.failed_commands - earlier.failed_commands,
            h2c_bytes: self.h2c_bytes - earlier.h2c_bytes,
            c2h_bytes: self.c2h_bytes - earlier.c2h_bytes,
            hyperbatch_splits: self.hyperbatch_splits - earlier.hyperbatch_splits,
        }
    }
}

/// One namespace of a device, reached through transport `T`.
#[derive(Debug)]
pub struct Device<T: Transport> {
    transport: T,
    pub(crate) info: DeviceInfo,
    queue_depth: usize,
    pub(crate) collect_cap_bytes: usize,
    next_cid: [u16; 2],
    /// Outstanding commands: (queue, cid) → opcode.
    in_flight: BTreeMap<(u16, u16), u8>,
    /// Reaped completions not yet claimed by their waiter.
    ready: BTreeMap<(u16, u16), Completion>,
    pub(crate) stats: DriverStats,
    pub(crate) attached: Option<GraphDescriptor>,
    last_completed_at_ns: Option<u64>,
    /// Sample through the tunnel window (Writes and Reads) instead of the vendor opcodes.
    pub(crate) use_tunnel: bool,
    pub(crate) next_tunnel_slot: usize,
}

impl<T: Transport> Device<T> {
    /// Opens namespace [`NAMESPACE_ID`] over `transport`: identifies the controller and the
    /// namespace (block size, block count, maximum transfer size, sampling limits).
    pub fn open(transport: T) -> Result<Self, DriverError> {
        let mut dev = Self {
            transport,
            info: DeviceInfo {
                serial: String::new(),
                model: String::new(),
                firmware_revision: String::new(),
                block_size_bytes: 0,
                block_count: 0,
                max_transfer_bytes: 0,
                limits: None,
                tunnel: None,
            },
            use_tunnel: false,
            next_tunnel_slot: 0,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            collect_cap_bytes: DEFAULT_COLLECT_CAP_BYTES,
            next_cid: [0; 2],
            in_flight: BTreeMap::new(),
            ready: BTreeMap::new(),
            stats: DriverStats::default(),
            attached: None,
            last_completed_at_ns: None,
        };
        dev.info = dev.identify()?;
        Ok(dev)
    }

    /// Runs Identify Controller and Identify Namespace and decodes what the driver needs.
    pub fn identify(&mut self) -> Result<DeviceInfo, DriverError> {
        let ctrl = self.identify_raw(CNS_CONTROLLER, 0)?;
        let ns = self.identify_raw(CNS_NAMESPACE, NAMESPACE_ID)?;
        let ascii = |b: &[u8]| String::from_utf8_lossy(b).trim_end().to_string();
        let ns = NamespaceInfo::decode(&ns).ok_or(DriverError::Identify("namespace data"))?;
        if !(9..=16).contains(&ns.block_size_log2) {
            return Err(DriverError::Identify("LBA format block size"));
        }
        if ns.block_count == 0 {
            return Err(DriverError::Identify("namespace size"));
        }
        let block_size_bytes = 1u32 << ns.block_size_log2;
        let mdts = ctrl[77];
        let max_transfer_bytes = if mdts == 0 {
            FALLBACK_MAX_TRANSFER_BYTES
        } else {
            // MDTS is a power of two of the minimum memory page size (4 KiB).
            4096u64
                .checked_shl(u32::from(mdts))
                .unwrap_or(u64::MAX)
                .min(u64::from(MAX_NLB) * u64::from(block_size_bytes))
                .min(u64::from(u32::MAX)) as u32
        };
        Ok(DeviceInfo {
            serial: ascii(&ctrl[4..24]),
            model: ascii(&ctrl[24..64]),
            firmware_revision: ascii(&ctrl[64..72]),
            block_size_bytes,
            block_count: ns.block_count,
            max_transfer_bytes: max_transfer_bytes.max(block_size_bytes),
            limits: ControllerInfo::decode_limits(&ctrl),
            tunnel: ControllerInfo::decode_tunnel(&ctrl),
        })
    }

    /// Carries [`Self::sample`]'s NS_SUBMIT and NS_COLLECT in Writes and Reads to the device's
    /// tunnel window (`on`), or in the vendor commands (the default). Fails if `on` and the
    /// device reports no window.
    pub fn set_tunnel(&mut self, on: bool) -> Result<(), DriverError> {
        if on && self.info.tunnel.is_none() {
            return Err(DriverError::InvalidArgument(
                "the device reports no tunnel window".into(),
            ));
        }
        self.use_tunnel = on;
        Ok(())
    }

    fn identify_raw(&mut self, cns: u8, nsid: u32) -> Result<Vec<u8>, DriverError> {
        let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, 0, nsid);
        sqe.cdw10 = u32::from(cns).into();
        let c = self.execute(ADMIN_QUEUE, sqe, vec![0; IDENTIFY_SIZE_BYTES])?;
        if c.data.len() < IDENTIFY_SIZE_BYTES {
            return Err(DriverError::Identify("short Identify data"));
        }
        Ok(c.data)
    }

    /// What Identify reported when the device was opened.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Commands issued and bytes moved so far.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// The transport's modelled time in nanoseconds, if it models time.
    pub fn now_ns(&self) -> Option<u64> {
        self.transport.now_ns()
    }

    /// The modelled completion time of the latest completion reaped, if the transport models
    /// time.
    pub fn last_completed_at_ns(&self) -> Option<u64> {
        self.last_completed_at_ns
    }

    /// Device-side counters (flash pages, link bytes), if the transport can read them.
    pub fn device_counters(&self) -> Option<DeviceCounters> {
        self.transport.device_counters()
    }

    /// The graph last attached through this device handle.
    pub fn attached_graph(&self) -> Option<&GraphDescriptor> {
        self.attached.as_ref()
    }

    /// Commands kept in flight by pipelined block I/O.
    pub fn queue_depth(&self) -> usize {
        self.queue_depth
    }

    /// Sets the number of commands pipelined block I/O keeps in flight (at least 1).
    pub fn set_queue_depth(&mut self, depth: usize) {
        self.queue_depth = depth.max(1);
    }

    /// Sets the largest first `NS_COLLECT` buffer (rounded up to a dword multiple).
    pub fn set_collect_cap_bytes(&mut self, cap_bytes: usize) {
        self.collect_cap_bytes = cap_bytes.max(4).next_multiple_of(4);
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably. Commands submitted directly bypass the driver's bookkeeping.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Gives the transport back.
    pub fn into_transport(self) -> T {
        self.transport
    }

    fn alloc_cid(&mut self, sq_id: u16) -> u16 {
        let slot = usize::from(sq_id != ADMIN_QUEUE);
        loop {
            let cid = self.next_cid[slot];
            self.next_cid[slot] = cid.wrapping_add(1);
            let key = (sq_id, cid);
            if !self.in_flight.contains_key(&key) && !self.ready.contains_key(&key) {
                return cid;
            }
        }
    }

    /// Submits one command on queue `sq_id` with a driver-allocated command id, which it
    /// returns; the command's completion comes from [`Self::wait`].
    pub fn submit(
        &mut self,
        sq_id: u16,
        mut sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<u16, DriverError> {
        let cid = self.alloc_cid(sq_id);
        sqe.cid = cid.into();
        let opcode = sqe.opcode;
        let payload = data.len() as u64;
        self.transport.submit(sq_id, sqe, data)?;
        self.in_flight.insert((sq_id, cid), opcode);
        let s = &mut self.stats;
        s.commands += 1;
        if sq_id == ADMIN_QUEUE {
            s.admin_commands += 1;
        } else {
            match opcode {
                io_opcode::READ => s.reads += 1,
                io_opcode::WRITE => s.writes += 1,
                io_opcode::NS_SUBMIT => s.ns_submits += 1,
                io_opcode::NS_COLLECT => s.ns_collects += 1,
                _ => s.other_commands += 1,
            }
        }
        if matches!(
            DataDirection::of(opcode),
            DataDirection::HostToDevice | DataDirection::Bidirectional
        ) {
            s.h2c_bytes += payload;
        }
        Ok(cid)
    }

    /// Reaps one completion from the transport and does the bookkeeping.
    fn reap_one(&mut self, awaited: (u16, u16)) -> Result<Completion, DriverError> {
        let c = self
            .transport
            .reap()?
            .ok_or(crate::TransportError::NothingOutstanding {
                sq_id: awaited.0,
                cid: awaited.1,
            })?;
        self.settle(c)
    }

    /// The driver's bookkeeping for a completion the transport handed over: the command leaves
    /// the in-flight table and its bytes and status are counted.
    fn settle(&mut self, c: Completion) -> Result<Completion, DriverError> {
        let key = (c.sq_id(), c.cid());
        let opcode =
            self.in_flight
                .remove(&key)
                .ok_or(crate::TransportError::UnexpectedCompletion {
                    sq_id: key.0,
                    cid: key.1,
                })?;
        if let Some(t) = c.completed_at_ns {
            self.last_completed_at_ns = Some(self.last_completed_at_ns.map_or(t, |l| l.max(t)));
        }
        if c.cqe.status().is_success() {
            if matches!(
                DataDirection::of(opcode),
                DataDirection::DeviceToHost | DataDirection::Bidirectional
            ) {
                let moved = if key.0 != ADMIN_QUEUE && opcode == io_opcode::NS_COLLECT {
                    u64::from(c.cqe.result.get()).min(c.data.len() as u64)
                } else {
                    c.data.len() as u64
                };
                self.stats.c2h_bytes += moved;
            }
        } else {
            self.stats.failed_commands += 1;
        }
        Ok(c)
    }

    /// Waits for the completion of command `cid` on queue `sq_id` and returns it whatever its
    /// status. Completions of other commands that arrive meanwhile are kept for their waiters.
    pub fn wait(&mut self, sq_id: u16, cid: u16) -> Result<Completion, DriverError> {
        loop {
            if let Some(c) = self.ready.remove(&(sq_id, cid)) {
                return Ok(c);
            }
            if !self.in_flight.contains_key(&(sq_id, cid)) {
                return Err(crate::TransportError::NothingOutstanding { sq_id, cid }.into());
            }
            let c = self.reap_one((sq_id, cid))?;
            if (c.sq_id(), c.cid()) == (sq_id, cid) {
                return Ok(c);
            }
            self.ready.insert((c.sq_id(), c.cid()), c);
        }
    }

    /// Reaps the next completion of any outstanding command, in the transport's completion
    /// order (completions kept for other waiters first), with the driver's bookkeeping;
    /// `None` when nothing is outstanding. For callers that multiplex several streams of
    /// commands themselves.
    pub fn wait_next(&mut self) -> Result<Option<Completion>, DriverError> {
        if let Some(key) = self.ready.keys().next().copied() {
            return Ok(self.ready.remove(&key));
        }
        match self.in_flight.keys().next().copied() {
            None => Ok(None),
            Some(any) => self.reap_one(any).map(Some),
        }
    }

    /// For transports that model time: the next completion, of any outstanding command, that
    /// the host learns of no later than `t_ns` (completions kept for other waiters first, the
    /// earliest of them); `None` if nothing completes by then. With it, several simulated host
    /// workers interleave their submissions and the device's completions in time order.
    pub fn wait_next_until(&mut self, t_ns: u64) -> Result<Option<Completion>, DriverError> {
        let kept = self
            .ready
            .iter()
            .filter_map(|(k, c)| Some((c.completed_at_ns?, *k)))
            .filter(|(t, _)| *t <= t_ns)
            .min();
        if let Some((_, key)) = kept {
            return Ok(self.ready.remove(&key));
        }
        match self.transport.reap_until(t_ns)? {
            Some(c) => self.settle(c).map(Some),
            None => Ok(None),
        }
    }

    /// Waits for whichever of `cids` (on `sq_id`) completes first.
    fn wait_any(
        &mut self,
        sq_id: u16,
        cids: &BTreeMap<u16, usize>,
    ) -> Result<Completion, DriverError> {
        loop {
            if let Some(cid) = cids
                .keys()
                .find(|cid| self.ready.contains_key(&(sq_id, **cid)))
            {
                let key = (sq_id, *cid);
                return Ok(self.ready.remove(&key).expect("checked above"));
            }
            let awaited = (sq_id, cids.keys().next().copied().unwrap_or(0));
            let c = self.reap_one(awaited)?;
            if c.sq_id() == sq_id && cids.contains_key(&c.cid()) {
                return Ok(c);
            }
            self.ready.insert((c.sq_id(), c.cid()), c);
        }
    }

    /// Submits one command, waits for it, and turns an error status into
    /// [`DriverError::Command`].
    pub fn execute(
        &mut self,
        sq_id: u16,
        sqe: SubmissionEntry,
        data: Vec<u8>,
    ) -> Result<Completion, DriverError> {
        let opcode = sqe.opcode;
        let cid = self.submit(sq_id, sqe, data)?;
        let c = self.wait(sq_id, cid)?;
        check(sq_id, opcode, c)
    }

    /// Runs I/O-queue commands with up to [`Self::queue_depth`] in flight, calling `on_done`
    /// with each command's index and successful completion. On the first failure no further
    /// command is submitted, the ones in flight are drained, and the failure is returned.
    fn pipeline<I, F>(&mut self, commands: I, mut on_done: F) -> Result<(), DriverError>
    where
        I: IntoIterator<Item = (SubmissionEntry, Vec<u8>)>,
        F: FnMut(usize, Completion) -> Result<(), DriverError>,
    {
        let mut commands = commands.into_iter().enumerate();
        let mut outstanding: BTreeMap<u16, (usize, u8)> = BTreeMap::new();
        let mut cids: BTreeMap<u16, usize> = BTreeMap::new();
        let mut first_err: Option<DriverError> = None;
        loop {
            while first_err.is_none() && outstanding.len() < self.queue_depth {
                let Some((i, (sqe, data))) = commands.next() else {
                    break;
                };
                let opcode = sqe.opcode;
                match self.submit(IO_QUEUE, sqe, data) {
                    Ok(cid) => {
                        outstanding.insert(cid, (i, opcode));
                        cids.insert(cid, i);
                    }
                    Err(e) => first_err = Some(e),
                }
            }
            if outstanding.is_empty() {
                break;
            }
            let c = self.wait_any(IO_QUEUE, &cids)?;
            let (i, opcode) = outstanding.remove(&c.cid()).expect("awaited command");
            cids.remove(&c.cid());
            if first_err.is_some() {
                continue;
            }
            if let Err(e) = check(IO_QUEUE, opcode, c).and_then(|c| on_done(i, c)) {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Reads `block_count` blocks starting at `slba`.
    pub fn read(&mut self, slba: u64, block_count: u64) -> Result<Vec<u8>, DriverError> {
        Ok(self
            .read_runs(&[LbaRange { slba, block_count }])?
            .pop()
            .unwrap_or_default())
    }

    /// Reads several block runs, one buffer per run, with one Read per run (split at the maximum
    /// transfer size) and up to [`Self::queue_depth`] Reads in flight.
    pub fn read_runs(&mut self, runs: &[LbaRange]) -> Result<Vec<Vec<u8>>, DriverError> {
        let bs = u64::from(self.info.block_size_bytes);
        let max_blocks = u64::from(self.info.max_transfer_blocks());
        let mut out = Vec::with_capacity(runs.len());
        // (run index, byte offset in the run's buffer, slba, blocks)
        let mut chunks: Vec<(usize, usize, u64, u32)> = Vec::new();
        for (r, run) in runs.iter().enumerate() {
            if run.block_count == 0 {
                return Err(DriverError::InvalidArgument(format!(
                    "read of 0 blocks at LBA {}",
                    run.slba
                )));
            }
            let len = run
                .block_count
                .checked_mul(bs)
                .and_then(|l| usize::try_from(l).ok())
                .ok_or_else(|| DriverError::InvalidArgument("read too large".into()))?;
            out.push(vec![0u8; len]);
            let mut done = 0;
            while done < run.block_count {
                let n = (run.block_count - done).min(max_blocks);
                chunks.push((r, (done * bs) as usize, run.slba + done, n as u32));
                done += n;
            }
        }
        let commands = chunks.iter().map(|&(_, _, slba, n)| {
            (
                SubmissionEntry::read_write(false, 0, NAMESPACE_ID, slba, n),
                vec![0u8; n as usize * bs as usize],
            )
        });
        self.pipeline(commands, |i, c| {
            let (r, offset, _, n) = chunks[i];
            let len = n as usize * bs as usize;
            let src = c.data.get(..len).ok_or_else(|| {
                DriverError::InvalidArgument(format!(
                    "transport returned {} bytes for a {len}-byte read",
                    c.data.len()
                ))
            })?;
            out[r][offset..offset + len].copy_from_slice(src);
            Ok(())
        })?;
        Ok(out)
    }

    /// Writes `data` (a non-empty multiple of the block size) starting at `slba`, split at the
    /// maximum transfer size with up to [`Self::queue_depth`] Writes in flight.
    pub fn write(&mut self, slba: u64, data: &[u8]) -> Result<(), DriverError> {
        let bs = self.info.block_size_bytes as usize;
        if data.is_empty() || !data.len().is_multiple_of(bs) {
            return Err(DriverError::InvalidArgument(format!(
                "write of {} bytes is not a non-empty multiple of the {bs}-byte block",
                data.len()
            )));
        }
        let chunk_bytes = self.info.max_transfer_blocks() as usize * bs;
        let commands = data.chunks(chunk_bytes).enumerate().map(|(i, chunk)| {
            let lba = slba + (i * chunk_bytes / bs) as u64;
            (
                SubmissionEntry::read_write(true, 0, NAMESPACE_ID, lba, (chunk.len() / bs) as u32),
                chunk.to_vec(),
            )
        });
        self.pipeline(commands, |_, _| Ok(()))
    }

    /// Flushes the device's volatile write cache.
    pub fn flush(&mut self) -> Result<(), DriverError> {
        self.execute(
            IO_QUEUE,
            SubmissionEntry::new(io_opcode::FLUSH, 0, NAMESPACE_ID),
            Vec::new(),
        )?;
        Ok(())
    }

    /// Registers a graph stored on the namespace with `GRAPH_ATTACH`.
    pub fn attach_graph(&mut self, graph: &GraphDescriptor) -> Result<(), DriverError> {
        let mut wire = [0u8; 128];
        let len = graph.encode(&mut wire);
        let payload = wire[..len].to_vec();
        let sqe = SubmissionEntry::vendor(
            io_opcode::GRAPH_ATTACH,
            0,
            NAMESPACE_ID,
            payload.len() as u32,
            0,
        );
        self.execute(IO_QUEUE, sqe, payload)?;
        self.attached = Some(*graph);
        Ok(())
    }
}

#[cfg(all(test, feature = "local"))]
mod tests {
    use super::*;
    use crate::LocalTransport;
    use crate::ns::subgraph_size_bound;
    use sagessd_abi::nvme::Status;
    use sagessd_abi::nvme::VendorStatus;
    use sagessd_abi::subgraph::SubgraphView;
    use sagessd_emulator::HwConfig;

    fn device() -> Device<LocalTransport> {
        Device::open(LocalTransport::from_config(&HwConfig::cosmos_plus()).unwrap()).unwrap()
    }

    fn pattern(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ salt ^ (i >> 12) as u8)
            .collect()
    }

    #[test]
    fn identify_reports_the_namespace_and_limits() {
        let dev = device();
        let info = dev.info();
        assert_eq!(info.block_size_bytes, 4096);
        assert!(info.block_count > 1 << 20);
        assert_eq!(info.max_transfer_bytes, 512 * 1024);
        assert_eq!(info.max_transfer_blocks(), 128);
        assert_eq!(
            info.limits,
            Some(NsLimits {
                max_targets: 16_384,
                max_fanout: 64,
                max_minibatches: 16,
            })
        );
        assert_eq!(dev.stats().admin_commands, 2);
        assert!(dev.now_ns().unwrap() > 0);
    }

    #[test]
    fn writes_and_reads_round_trip_across_split_transfers() {
        let mut dev = device();
        // 300 blocks: three Writes of ≤ 128 blocks each.
        let data = pattern(300 * 4096, 7);
        dev.write(10, &data).unwrap();
        assert_eq!(dev.stats().writes, 3);
        assert!(dev.read(10, 300).unwrap() == data, "read back differs");
        assert_eq!(dev.stats().reads, 3);
        let runs = dev
            .read_runs(&[
                LbaRange {
                    slba: 12,
                    block_count: 1,
                },
                LbaRange {
                    slba: 180,
                    block_count: 130,
                },
                LbaRange {
                    slba: 11,
                    block_count: 2,
                },
            ])
            .unwrap();
        assert!(runs[0] == data[2 * 4096..3 * 4096], "run 0 differs");
        assert!(runs[1] == data[170 * 4096..], "run 1 differs");
        assert!(runs[2] == data[4096..3 * 4096], "run 2 differs");
        let s = dev.stats();
        assert_eq!(s.reads, 3 + 1 + 2 + 1);
        assert_eq!(s.h2c_bytes, 300 * 4096);
        assert_eq!(s.c2h_bytes, 2 * 4096 + (300 + 133) * 4096);
        // Unwritten blocks read back as zeroes.
        assert!(dev.read(5000, 1).unwrap().iter().all(|b| *b == 0));
    }

    #[test]
    fn device_errors_and_bad_arguments_surface() {
        let mut dev = device();
        let end = dev.info().block_count;
        let e = dev.read(end - 1, 2).unwrap_err();
        assert_eq!(e.status(), Some(Status::LBA_OUT_OF_RANGE));
        assert!(
            e.to_string().contains("Read failed: LBA Out of Range"),
            "{e}"
        );
        assert!(matches!(
            dev.write(0, &[0u8; 100]),
            Err(DriverError::InvalidArgument(_))
        ));
        assert!(matches!(
            dev.read(0, 0),
            Err(DriverError::InvalidArgument(_))
        ));
        let e = dev.sample(1, &[2], &[0]).unwrap_err();
        assert_eq!(e.vendor_status(), Some(VendorStatus::NoGraphAttached));
        assert!(e.to_string().contains("NoGraphAttached"), "{e}");
        assert!(matches!(
            dev.sample(1, &[1, 1, 1, 1, 1], &[0]),
            Err(DriverError::InvalidArgument(_))
        ));
        // The device keeps serving after errors.
        dev.write(0, &[1u8; 4096]).unwrap();
        assert_eq!(dev.read(0, 1).unwrap(), vec![1u8; 4096]);
        assert!(dev.stats().failed_commands >= 2);
    }

    /// A 4-node graph: 0-1, 0-2, 1-2, 2-3 (symmetric CSR), written by hand.
    fn attach_tiny_graph(dev: &mut Device<LocalTransport>) -> GraphDescriptor {
        let indptr: [u64; 5] = [0, 2, 4, 7, 8];
        let indices: [u32; 8] = [1, 2, 0, 2, 0, 1, 3, 2];
        let mut block = vec![0u8; 4096];
        for (i, v) in indptr.iter().enumerate() {
            block[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        dev.write(100, &block).unwrap();
        let mut block = vec![0u8; 4096];
        for (i, v) in indices.iter().enumerate() {
            block[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        dev.write(101, &block).unwrap();
        let g = GraphDescriptor {
            node_count: 4,
            edge_count: 8,
            id_width_bytes: 4,
            indptr: LbaRange {
                slba: 100,
                block_count: 1,
            },
            indices: LbaRange {
                slba: 101,
                block_count: 1,
            },
            features: None,
        };
        dev.attach_graph(&g).unwrap();
        g
    }

    /// A ring of `n` nodes (each linked to both neighbours) written at LBA 200 and attached.
    fn attach_ring(dev: &mut Device<LocalTransport>, n: u32) {
        let indptr: Vec<u8> = (0..=u64::from(n))
            .flat_map(|v| (2 * v).to_le_bytes())
            .collect();
        let indices: Vec<u8> = (0..n)
            .flat_map(|v| [(v + n - 1) % n, (v + 1) % n])
            .flat_map(u32::to_le_bytes)
            .collect();
        let blocks = |b: &[u8]| b.len().div_ceil(4096) as u64;
        let (ip, ix) = (blocks(&indptr), blocks(&indices));
        let pad = |mut b: Vec<u8>| {
            b.resize(b.len().next_multiple_of(4096), 0);
            b
        };
        dev.write(200, &pad(indptr)).unwrap();
        dev.write(200 + ip, &pad(indices)).unwrap();
        let g = GraphDescriptor {
            node_count: u64::from(n),
            edge_count: 2 * u64::from(n),
            id_width_bytes: 4,
            indptr: LbaRange {
                slba: 200,
                block_count: ip,
            },
            indices: LbaRange {
                slba: 200 + ip,
                block_count: ix,
            },
            features: None,
        };
        dev.attach_graph(&g).unwrap();
    }

    #[test]
    fn a_subgraph_bigger_than_the_first_buffer_costs_one_retry() {
        let mut dev = device();
        attach_ring(&mut dev, 1024);
        let targets: Vec<u64> = (0..600).map(|i| 3 * i % 1024).collect();
        let whole = dev.sample(9, &[2], &targets).unwrap();
        assert!(
            whole.len() > 4096,
            "the subgraph must not fit the first buffer"
        );
        dev.set_collect_cap_bytes(64);
        let before = dev.stats();
        assert_eq!(dev.sample(9, &[2], &targets).unwrap(), whole);
        let d = dev.stats().since(&before);
        assert_eq!((d.ns_submits, d.ns_collects, d.failed_commands), (1, 2, 1));
    }

    #[test]
    fn sampling_is_one_submit_and_one_collect() {
        let mut dev = device();
        attach_tiny_graph(&mut dev);
        let before = dev.stats();
        let bytes = dev.sample(5, &[10, 10], &[3, 3, 0]).unwrap();
        let d = dev.stats().since(&before);
        assert_eq!((d.commands, d.ns_submits, d.ns_collects), (2, 1, 1));
        assert_eq!(d.c2h_bytes, bytes.len() as u64);
        let view = SubgraphView::parse(&bytes).unwrap();
        let nodes: Vec<u64> = view.nodes().iter().map(|n| n.get()).collect();
        // Targets 3, 0 (deduplicated); 3's neighbour 2, 0's neighbours 1, 2 → [3, 0, 2, 1].
        assert_eq!(nodes, vec![3, 0, 2, 1]);
        assert!((bytes.len() as u64) <= subgraph_size_bound(&[10, 10], 3, Some(4)));

        // A first buffer is whole 4 KiB units however small the cap: this subgraph fits one.
        dev.set_collect_cap_bytes(64);
        let before = dev.stats();
        assert_eq!(dev.sample(5, &[10, 10], &[3, 3, 0]).unwrap(), bytes);
        let d = dev.stats().since(&before);
        assert_eq!((d.ns_submits, d.ns_collects, d.failed_commands), (1, 1, 0));

        // Invalid requests come back as decoded vendor statuses.
        let e = dev.sample(5, &[10], &[4]).unwrap_err();
        assert_eq!(e.vendor_status(), Some(VendorStatus::NodeOutOfRange));
        let e = dev.sample(5, &[65], &[0]).unwrap_err();
        assert_eq!(e.vendor_status(), Some(VendorStatus::BadFanout));
        let e = dev.sample(5, &[1], &[]).unwrap_err();
        assert_eq!(e.vendor_status(), Some(VendorStatus::BadTargetCount));
    }

    #[test]
    fn transport_execute_runs_one_command() {
        let mut t = LocalTransport::from_config(&HwConfig::cosmos_plus()).unwrap();
        let mut sqe = SubmissionEntry::new(admin_opcode::IDENTIFY, 9, 0);
        sqe.cdw10 = u32::from(CNS_CONTROLLER).into();
        let c = t
            .execute(ADMIN_QUEUE, sqe, vec![0; IDENTIFY_SIZE_BYTES])
            .unwrap();
        assert_eq!(c.cid(), 9);
        assert!(c.cqe.status().is_success());
        assert!(c.completed_at_ns.unwrap() > c.submitted_at_ns.unwrap());
        assert!(ControllerInfo::decode_limits(&c.data).is_some());
        assert!(t.device_counters().unwrap().pcie_c2h_bytes >= 4096);
        assert!(t.reap().unwrap().is_none());
    }
}
