//! Hyperbatches inside the device: one NS_config carrying several minibatches, each flash page
//! read once per gather for all of them, each minibatch's subgraph what a single NS_config with
//! its seed and targets returns.

use std::collections::BTreeMap;
use std::vec;
use std::vec::Vec;

use sagessd_abi::ns_config::{encode_hyperbatch, hyperbatch_size_bytes};
use sagessd_abi::nvme::{Status, SubmissionEntry, VendorStatus, io_opcode};

use super::{
    Device, ns_collect, ns_submit, ring_with_hub, small_config, small_geometry, store_graph,
};
use crate::FirmwareConfig;

const FANOUTS: [u16; 3] = [4, 3, 2];

/// Five minibatches: the hub (whose list spans pages), a repeated target, the isolated node,
/// and targets shared between minibatches.
fn minibatches() -> Vec<(u64, Vec<u64>)> {
    vec![
        (11, vec![1500, 3, 900]),
        (12, vec![10, 11, 12, 13]),
        (13, vec![7, 7, 1501]),
        (14, vec![1499, 0, 750, 1500]),
        (15, vec![3, 10, 900]),
    ]
}

fn device(config: FirmwareConfig) -> Device {
    let mut d = Device::new(small_geometry(), config, 8);
    let (indptr, indices) = ring_with_hub(1500);
    store_graph(&mut d, indptr, indices);
    d
}

fn config(isp_slots: u8, max_subgraph_nodes: u32) -> FirmwareConfig {
    let mut c = FirmwareConfig {
        isp_slots,
        max_subgraph_nodes,
        ..small_config()
    };
    c.limits.max_minibatches = 5;
    c
}

fn hyperbatch(minibatches: &[(u64, Vec<u64>)]) -> Vec<u8> {
    let targets = minibatches.iter().map(|(_, t)| t.len()).sum();
    let mut cfg = vec![0u8; hyperbatch_size_bytes(minibatches.len(), targets)];
    encode_hyperbatch(&FANOUTS, minibatches, &mut cfg).unwrap();
    cfg
}

/// Each minibatch sampled alone (one NS_config each).
fn singles(config: FirmwareConfig) -> Vec<Vec<u8>> {
    let mut d = device(config);
    minibatches()
        .iter()
        .map(|(seed, targets)| {
            let (s, tag) = ns_submit(&mut d, *seed, &FANOUTS, targets);
            assert!(s.is_success(), "{s:?}");
            let (s, _, data) = ns_collect(&mut d, tag, 1 << 16);
            assert!(s.is_success(), "{s:?}");
            data
        })
        .collect()
}

/// Submits the hyperbatch of every minibatch and polls until it is sampled, logging which
/// physical pages each gather (layer, gather) read. Returns its tag and that log.
fn sample_hyperbatch(d: &mut Device) -> (u32, BTreeMap<(usize, usize, u32), u32>) {
    let cfg = hyperbatch(&minibatches());
    let sqe = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, cfg.len() as u32, 0);
    d.fw.flash_mut().log_reads();
    let id = d.submit(1, sqe, cfg);
    let mut reads = BTreeMap::new();
    for step in 0.. {
        if d.is_complete(id) && !d.fw.isp_busy() {
            break;
        }
        assert!(step < 1_000_000, "never finished\n{}", d.fw.describe());
        // A gather ends only once its reads have landed: whatever lands in this poll was
        // asked for by the gather running as it starts.
        let at = d.fw.isp_lane_gather(0);
        d.poll_once();
        for ppn in d.fw.flash_mut().take_read_log() {
            let (layer, gather) = at.expect("a flash read while no job ran");
            *reads.entry((layer, gather, ppn)).or_insert(0) += 1;
        }
    }
    let (_, cqe) = d
        .host
        .completions
        .iter()
        .find(|(c, _)| *c == id)
        .copied()
        .unwrap();
    (cqe.result.get(), reads)
}

fn collect_minibatch(d: &mut Device, tag: u32, m: u32) -> (Status, Vec<u8>) {
    let (s, _, data) = ns_collect(d, tag | m << 24, 1 << 16);
    (s, data)
}

#[test]
fn a_hyperbatch_reads_each_page_once_per_gather_and_returns_each_minibatchs_subgraph() {
    let alone = singles(config(2, 4096));
    let mut d = device(config(1, 4096));
    let (tag, reads) = sample_hyperbatch(&mut d);
    // Per hop: the bounds gather reads indptr pages, the neighbour gather indices pages (the
    // graph puts them on different pages), each page once.
    let mut per_hop: BTreeMap<(usize, u32), u32> = BTreeMap::new();
    for ((layer, _, ppn), n) in &reads {
        *per_hop.entry((*layer, *ppn)).or_insert(0) += n;
    }
    let twice: Vec<_> = per_hop.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "pages read more than once in a hop: {twice:?}"
    );
    let gathers: std::collections::BTreeSet<_> = reads.keys().map(|(l, g, _)| (*l, *g)).collect();
    assert_eq!(gathers.len(), 2 * FANOUTS.len(), "{gathers:?}");
    // Each minibatch collected on its own; the single slot stays taken until the last one is.
    let count = minibatches().len() as u32;
    for m in 0..count {
        if m == count - 1 {
            let (s, _) = ns_submit(&mut d, 1, &[2], &[1]);
            assert_eq!(VendorStatus::from_status(s), Some(VendorStatus::NoFreeSlot));
        }
        let (s, data) = collect_minibatch(&mut d, tag, m);
        assert!(s.is_success(), "minibatch {m}: {s:?}");
        assert!(
            data == alone[m as usize],
            "minibatch {m} differs from its single NS_config"
        );
        let (s, _) = collect_minibatch(&mut d, tag, m);
        assert_eq!(VendorStatus::from_status(s), Some(VendorStatus::UnknownTag));
    }
    let (s, _) = collect_minibatch(&mut d, tag, count);
    assert_eq!(VendorStatus::from_status(s), Some(VendorStatus::UnknownTag));
    let (s, tag) = ns_submit(&mut d, 1, &[2], &[1]);
    assert!(s.is_success(), "the slot came back: {s:?}");
    assert!(collect_minibatch(&mut d, tag, 0).0.is_success());
}

#[test]
fn a_hyperbatch_too_large_fails_every_minibatch_and_leaves_the_device_clean() {
    // Each minibatch fits alone (19 to 40 nodes), all five together (148) do not.
    let alone = singles(config(2, 100));
    let mut d = device(config(2, 100));
    let (tag, _) = sample_hyperbatch(&mut d);
    for m in 0..minibatches().len() as u32 {
        let (s, _) = collect_minibatch(&mut d, tag, m);
        assert_eq!(
            VendorStatus::from_status(s),
            Some(VendorStatus::ResultTooLarge),
            "minibatch {m}"
        );
    }
    // The node table was cleared of every minibatch's nodes: singles sample as before.
    for (m, (seed, targets)) in minibatches().iter().enumerate() {
        let (s, tag) = ns_submit(&mut d, *seed, &FANOUTS, targets);
        assert!(s.is_success());
        let (s, _, data) = ns_collect(&mut d, tag, 1 << 16);
        assert!(
            s.is_success() && data == alone[m],
            "minibatch {m} after the failure"
        );
    }
    // More minibatches than the device takes are refused at submit.
    let mut six = minibatches();
    six.push((16, vec![1]));
    let cfg = hyperbatch(&six);
    let sqe = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, cfg.len() as u32, 0);
    let (cqe, _) = d.exec(1, sqe, cfg);
    assert_eq!(
        VendorStatus::from_status(cqe.status()),
        Some(VendorStatus::BadMinibatchCount)
    );
}
