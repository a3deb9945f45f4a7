//! Malformed requests through the whole stack: each gets its NVMe status back through the host
//! driver, decoded, and the device goes on serving.

use sagessd_abi::graph::{GraphDescriptor, LbaRange};
use sagessd_abi::ns_config::{encode_ns_config, ns_config_size_bytes};
use sagessd_abi::nvme::{Status, SubmissionEntry, VendorStatus, io_opcode};
use sagessd_host_driver::{Device, LocalTransport};
use sagessd_runtime::graph::CsrGraph;
use sagessd_runtime::load::load_graph;
use sagessd_tests::{open, small_config};

fn status_of(device: &mut Device<LocalTransport>, sqe: SubmissionEntry, data: Vec<u8>) -> Status {
    match device.execute(1, sqe, data) {
        Ok(c) => c.cqe.status(),
        Err(e) => e.status().expect("the device answered with a status"),
    }
}

fn submit(device: &mut Device<LocalTransport>, config: Vec<u8>, len: u32) -> Status {
    status_of(
        device,
        SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, len, 0),
        config,
    )
}

#[test]
fn every_malformed_ns_config_is_answered_and_the_device_keeps_serving() {
    let mut device = open(&small_config());
    let good = {
        let mut c = vec![0u8; ns_config_size_bytes(2)];
        encode_ns_config(5, &[4, 2], &[1, 3], &mut c).expect("encode");
        c
    };
    let len = good.len() as u32;
    assert_eq!(
        VendorStatus::from_status(submit(&mut device, good.clone(), len)),
        Some(VendorStatus::NoGraphAttached)
    );
    let g = CsrGraph::from_edges(10, &[(1, 2), (2, 1), (3, 4), (4, 3), (1, 3)]).expect("graph");
    load_graph(&mut device, &g, 0).expect("load");
    let patched = |offset: usize, bytes: &[u8]| {
        let mut c = good.clone();
        c[offset..offset + bytes.len()].copy_from_slice(bytes);
        c
    };
    let limits = device.info().limits.expect("the device reports its limits");
    let too_many = (limits.max_targets + 1).to_le_bytes();
    let too_wide = (limits.max_fanout + 1).to_le_bytes();
    let cases = [
        (
            "bad magic",
            patched(0, b"NOPE"),
            len,
            VendorStatus::BadMagic,
        ),
        (
            "bad version",
            patched(4, &[2, 0]),
            len,
            VendorStatus::BadVersion,
        ),
        (
            "no layers",
            patched(6, &[0]),
            len,
            VendorStatus::BadLayerCount,
        ),
        (
            "five layers",
            patched(6, &[5]),
            len,
            VendorStatus::BadLayerCount,
        ),
        (
            "fanout 0",
            patched(16, &[0, 0]),
            len,
            VendorStatus::BadFanout,
        ),
        (
            "fanout too large",
            patched(16, &too_wide),
            len,
            VendorStatus::BadFanout,
        ),
        (
            "no targets",
            patched(24, &[0, 0, 0, 0]),
            len,
            VendorStatus::BadTargetCount,
        ),
        (
            "too many targets",
            patched(24, &too_many),
            len,
            VendorStatus::BadTargetCount,
        ),
        (
            "node id ≥ node count",
            patched(32, &[10]),
            len,
            VendorStatus::NodeOutOfRange,
        ),
        ("truncated", good.clone(), len - 8, VendorStatus::Truncated),
        (
            "reserved flag",
            patched(7, &[1]),
            len,
            VendorStatus::ReservedField,
        ),
    ];
    for (what, config, len, want) in cases {
        let status = submit(&mut device, config, len);
        assert_eq!(VendorStatus::from_status(status), Some(want), "{what}");
        let sample = device
            .sample(1, &[2, 2], &[1, 4])
            .expect("the device keeps serving");
        assert!(!sample.is_empty(), "{what}");
    }
    // Unknown tags and opcodes, LBAs past the namespace.
    let sqe = SubmissionEntry::vendor(io_opcode::NS_COLLECT, 0, 1, 4096, 0xFFFF);
    assert_eq!(
        VendorStatus::from_status(status_of(&mut device, sqe, vec![0; 4096])),
        Some(VendorStatus::UnknownTag)
    );
    assert_eq!(
        status_of(&mut device, SubmissionEntry::new(0xC5, 0, 1), vec![]),
        Status::INVALID_OPCODE
    );
    let blocks = device.info().block_count;
    let sqe = SubmissionEntry::read_write(false, 0, 1, blocks, 1);
    assert_eq!(
        status_of(&mut device, sqe, vec![0; 512]),
        Status::LBA_OUT_OF_RANGE
    );
    // A descriptor whose ranges overlap is refused, and the old graph stays attached.
    let overlapping = GraphDescriptor {
        node_count: 4,
        edge_count: 4,
        id_width_bytes: 4,
        indptr: LbaRange {
            slba: 0,
            block_count: 1,
        },
        indices: LbaRange {
            slba: 0,
            block_count: 1,
        },
        features: None,
    };
    let err = device
        .attach_graph(&overlapping)
        .expect_err("overlap refused");
    assert_eq!(err.vendor_status(), Some(VendorStatus::BadDescriptor));
    assert!(device.sample(1, &[2], &[1]).is_ok());
}
