//! The byte-identity oracle at the seeds' scale: a papers100M-sized synthetic graph (111 M
//! nodes, 1.87 G entries, 7.8 GiB) that the emulated flash computes, sampled in storage and by
//! the host over the device, equals the in-memory reference computed from the same function on
//! the host, minibatch by minibatch.

use std::sync::Arc;

use sagessd_emulator::synthetic_graph::{SyntheticGraph, SyntheticSpec};
use sagessd_emulator::{HwConfig, Ssd};
use sagessd_host_driver::{Device, LocalTransport};
use sagessd_runtime::host_io::HostIoSampler;
use sagessd_runtime::minibatch::{minibatch_seed, minibatch_targets};
use sagessd_runtime::registry::SamplerKind;
use sagessd_runtime::sampler::{IspSampler, ReferenceSampler, Sampler};

#[test]
fn papers100m_sized_graph_samples_identically_in_storage_and_on_the_host() {
    let hw = HwConfig::cosmos_plus();
    let graph = Arc::new(SyntheticGraph::new(SyntheticSpec::papers100m_size(1)).expect("graph"));
    assert!(graph.edge_count() >= 1_500_000_000);
    let boot = |attach: bool| {
        let (ssd, desc, report) =
            Ssd::with_synthetic_graph(&hw, graph.clone(), 0).expect("synthetic image");
        // Every flash page of the graph was found and mapped by the firmware's own boot.
        let page = u64::from(hw.nand.page_size_bytes);
        let bytes = (desc.indices.slba + desc.indices.block_count)
            * u64::from(hw.firmware.block_size_bytes);
        assert_eq!(report.pages_replayed, bytes.div_ceil(page));
        let mut device = Device::open(LocalTransport::new(ssd)).expect("open");
        if attach {
            device.attach_graph(&desc).expect("attach");
        }
        (device, desc)
    };
    let (isp_device, _) = boot(true);
    let mut isp = IspSampler::new(isp_device);
    let (direct_device, desc) = boot(false);
    let mut direct = HostIoSampler::new(direct_device, desc, SamplerKind::Direct, hw.host.clone())
        .expect("direct");
    let mut reference = ReferenceSampler::synthetic(&graph);
    let fanouts = [25, 10];
    for b in 0..2 {
        let seed = minibatch_seed(7, b);
        let targets = minibatch_targets(7, b, 1024, graph.node_count());
        let want = reference
            .sample(seed, &fanouts, &targets)
            .expect("reference");
        assert!(
            want.edge_count() > 10_000,
            "a real minibatch: {} edges",
            want.edge_count()
        );
        assert_eq!(
            isp.sample(seed, &fanouts, &targets).expect("isp"),
            want,
            "ISP, minibatch {b}"
        );
        assert_eq!(
            direct.sample(seed, &fanouts, &targets).expect("direct"),
            want,
            "direct I/O, minibatch {b}"
        );
    }
}

/// The graph is a function of its spec alone: built twice (in two threads), it has the same
/// bytes; another seed gives another graph.
#[test]
fn a_synthetic_graph_is_a_function_of_its_spec() {
    let spec = SyntheticSpec::cnr_2000_like(3_000_000, 5);
    let a = SyntheticGraph::new(spec.clone()).unwrap();
    let b = std::thread::scope(|s| {
        s.spawn(|| SyntheticGraph::new(spec.clone()).unwrap())
            .join()
    })
    .unwrap();
    let c = SyntheticGraph::new(SyntheticSpec::cnr_2000_like(3_000_000, 6)).unwrap();
    assert_eq!(a.edge_count(), b.edge_count());
    let read = |g: &SyntheticGraph, at: u64| {
        let mut v = vec![0u8; 1 << 16];
        g.fill_indices(at, &mut v);
        let mut p = vec![0u8; 1 << 12];
        g.fill_indptr(at % g.indptr_bytes(), &mut p);
        (v, p)
    };
    for at in [
        0,
        12_345 * 4,
        a.indices_bytes() / 2,
        a.indices_bytes() - 100,
    ] {
        assert_eq!(read(&a, at), read(&b, at));
    }
    assert_ne!(read(&a, 4096), read(&c, 4096));
}
