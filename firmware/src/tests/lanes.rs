//! Sampling lanes: several NS_configs sampled at once, each lane stepped on its own (as a core
//! per lane would), reading ahead in their passes or not, every subgraph byte-identical to what
//! one lane produces.

use std::vec;
use std::vec::Vec;

use sagessd_abi::ns_config::{encode_ns_config, ns_config_size_bytes};
use sagessd_abi::nvme::{SubmissionEntry, io_opcode};

use super::{Device, ns_collect, ring_with_hub, small_config, small_geometry, store_graph};
use crate::FirmwareConfig;
use crate::host::CommandId;

/// Five jobs: different seeds, depths, fanouts and target sets (one with the hub, whose list
/// spans pages; one repeating a target).
fn jobs() -> Vec<(u64, Vec<u16>, Vec<u64>)> {
    vec![
        (1, vec![5, 3], vec![1500, 3, 900]),
        (2, vec![4, 4, 2], vec![10, 11, 12, 13]),
        (3, vec![8], (0..40).map(|v| v * 37).collect()),
        (4, vec![2, 2], vec![7, 7, 1501]),
        (5, vec![6, 6], vec![1499, 0, 750, 1500]),
    ]
}

/// Samples every job of [`jobs`] on a device with `lanes` lanes, whose passes read ahead if
/// `read_ahead`; `order(step)` names the lanes stepped after each I/O poll, in order. Returns
/// the subgraphs in job order, the most lanes that ran a job at once, and whether any lane
/// pinned more than its share of the window; and checks that the passes read ahead when asked
/// to and that nothing stays pinned once every job is collected.
fn sample(
    lanes: u8,
    read_ahead: bool,
    order: &dyn Fn(usize) -> Vec<usize>,
) -> (Vec<Vec<u8>>, usize, bool) {
    let config = FirmwareConfig {
        isp_slots: 5,
        isp_lanes: lanes,
        isp_read_ahead: read_ahead,
        ..small_config()
    };
    let mut d = Device::new(small_geometry(), config, 21);
    let (indptr, indices) = ring_with_hub(1500);
    store_graph(&mut d, indptr, indices);
    let submits: Vec<CommandId> = jobs()
        .iter()
        .map(|(seed, fanouts, targets)| {
            let mut cfg = vec![0u8; ns_config_size_bytes(targets.len())];
            encode_ns_config(*seed, fanouts, targets, &mut cfg).unwrap();
            let sqe = SubmissionEntry::vendor(io_opcode::NS_SUBMIT, 0, 1, cfg.len() as u32, 0);
            d.submit(1, sqe, cfg)
        })
        .collect();
    let (mut most_running, mut over_share) = (0, false);
    for step in 0.. {
        let submitted = submits.iter().all(|id| d.is_complete(*id));
        if submitted && !d.fw.isp_busy() {
            break;
        }
        assert!(
            step < 1_000_000,
            "the jobs never finished: submitted {submitted}, busy {}, lanes {:?}\n{}",
            d.fw.isp_busy(),
            d.fw.isp_lane_state(),
            d.fw.describe()
        );
        d.fw.poll_io(&mut d.host);
        for lane in order(step) {
            d.fw.poll_isp_lane(lane);
            let (running, pinned, share) = d.fw.isp_lane_state();
            most_running = most_running.max(running);
            over_share |= pinned > share;
        }
    }
    let subgraphs: Vec<Vec<u8>> = submits
        .iter()
        .map(|id| {
            let (_, cqe) = d
                .host
                .completions
                .iter()
                .find(|(c, _)| c == id)
                .copied()
                .expect("submitted");
            let (status, _, data) = ns_collect(&mut d, cqe.result.get(), 1 << 16);
            assert!(status.is_success(), "{status:?}");
            data
        })
        .collect();
    d.settle();
    let (read_aheads, pinned) = d.fw.isp_read_aheads_and_pins();
    assert_eq!(read_aheads > 0, read_ahead, "{read_aheads} read-aheads");
    assert_eq!(pinned, 0, "{pinned} page-buffer slots still pinned");
    (subgraphs, most_running, over_share)
}

#[test]
fn lanes_sample_jobs_at_once_and_each_subgraph_is_what_one_lane_makes() {
    let (one, most, over) = sample(1, false, &|_| vec![0]);
    assert_eq!((most, over), (1, false));
    let (ahead, ..) = sample(1, true, &|_| vec![0]);
    assert_eq!(ahead, one, "reading ahead changed a subgraph");
    // Two lanes, stepped in either order; four lanes in a rotating order, some skipped.
    let reversed: &dyn Fn(usize) -> Vec<usize> = &|_| vec![1, 0];
    let rotating: &dyn Fn(usize) -> Vec<usize> = &|step| {
        (0..4)
            .map(|k| (step + k) % 4)
            .filter(|lane| (step + lane) % 3 != 0)
            .collect()
    };
    for (lanes, order) in [(2, reversed), (4, rotating)] {
        let (many, most, over) = sample(lanes, true, order);
        assert_eq!(many, one, "{lanes} lanes changed a subgraph");
        assert_eq!(
            most,
            usize::from(lanes),
            "{lanes} lanes never all ran at once"
        );
        assert!(!over, "a lane pinned more than its share of the window");
    }
    // A lane the configuration does not have does nothing.
    let config = FirmwareConfig {
        isp_slots: 2,
        isp_lanes: 2,
        ..small_config()
    };
    let mut d = Device::new(small_geometry(), config, 3);
    assert!(!d.fw.poll_isp_lane(2) && !d.fw.isp_lane_busy(2));
    assert_eq!(d.fw.isp_lanes(), 2);
}
