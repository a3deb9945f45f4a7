//! In-storage hyperbatches end to end: one NS_SUBMIT carrying several minibatches returns, for
//! each, the subgraph the in-memory reference samples; the driver keeps to the device's limits
//! (several NS_configs) and samples a hyperbatch that does not fit the device's result buffers
//! as two halves; and on a graph larger than the page buffer a hyperbatch reads far fewer flash
//! pages than an NS_config per minibatch.

use proptest::prelude::*;
use sagessd::compare::{self, CompareConfig};
use sagessd_host_driver::Returns;
use sagessd_runtime::graph::CsrGraph;
use sagessd_runtime::graph_spec::GraphSpec;
use sagessd_runtime::load::load_graph;
use sagessd_runtime::registry::SamplerKind;
use sagessd_runtime::sampler::host_build::HostBuilder;
use sagessd_runtime::sampler::{ReferenceSampler, Sampler};
use sagessd_tests::{hub_graph, open, small_config};

/// A random graph of `n` nodes with a hub (node 0) whose list spans three flash pages.
fn graph(n: u32, m: usize, seed: u64) -> CsrGraph {
    hub_graph(n, m, 1500, seed)
}

/// Minibatches of up to 40 targets drawn from a small id range, so that they overlap.
fn minibatches(node_count: u64) -> impl Strategy<Value = Vec<(u64, Vec<u64>)>> {
    let one = (
        any::<u64>(),
        proptest::collection::vec(0..node_count.min(300), 1..40),
    );
    proptest::collection::vec(one, 1..7)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn each_minibatch_of_a_hyperbatch_is_the_reference_subgraph(
        (seed, fanouts, requests, most) in (
            any::<u64>(),
            proptest::collection::vec(1u16..=12, 1..=3),
            minibatches(2000),
            1u16..=4,
        )
    ) {
        let g = graph(2000, 9000, seed);
        let mut hw = small_config();
        hw.firmware.max_minibatches = most;
        let mut device = open(&hw);
        let descriptor = load_graph(&mut device, &g, 0).expect("load");
        device.attach_graph(&descriptor).expect("attach");
        let before = device.stats();
        let got = device.sample_hyperbatch(&fanouts, &requests, Returns::Subgraph).expect("sampled");
        let d = device.stats().since(&before);
        prop_assert_eq!(got.len(), requests.len());
        let mut reference = ReferenceSampler::new(&g);
        for (m, (s, targets)) in requests.iter().enumerate() {
            let want = reference.sample(*s, &fanouts, targets).expect("reference");
            prop_assert!(got[m] == want.as_bytes(), "minibatch {} of {}", m, requests.len());
        }
        // As many NS_configs as the device's limit needs (none split: the buffers are large).
        prop_assert_eq!(d.ns_submits, requests.len().div_ceil(usize::from(most)) as u64);
        prop_assert_eq!(d.hyperbatch_splits, 0);
        // A collect (or several windows of one transfer each) per minibatch.
        prop_assert!(d.ns_collects >= requests.len() as u64);
        // The same hyperbatch returning sampled ids, each built on the host: the same bytes.
        let ids = device.sample_hyperbatch(&fanouts, &requests, Returns::SampledIds).expect("ids");
        let mut host = HostBuilder::new(g.node_count());
        for (m, ((s, targets), bytes)) in requests.iter().zip(&ids).enumerate() {
            let built = host.build(bytes, g.node_count(), *s, &fanouts, targets).expect("built");
            prop_assert!(built.as_bytes() == got[m], "host-built minibatch {} of {}", m, requests.len());
        }
    }
}

#[test]
fn a_hyperbatch_past_the_result_buffers_is_sampled_as_halves() {
    let g = graph(3000, 20_000, 5);
    let requests: Vec<(u64, Vec<u64>)> = (0..8u64)
        .map(|b| (b + 100, (0..30).map(|t| (t * 97 + b * 13) % 3000).collect()))
        .collect();
    let fanouts = [10, 5];
    let mut reference = ReferenceSampler::new(&g);
    let want: Vec<Vec<u8>> = requests
        .iter()
        .map(|(s, t)| reference.sample(*s, &fanouts, t).unwrap().into_bytes())
        .collect();
    let nodes: Vec<usize> = want
        .iter()
        .map(|b| {
            sagessd_abi::subgraph::SubgraphView::parse(b)
                .unwrap()
                .nodes()
                .len()
        })
        .collect();
    let (largest, total) = (*nodes.iter().max().unwrap(), nodes.iter().sum::<usize>());
    // Room for any two minibatches, not for all eight.
    let mut hw = small_config();
    hw.firmware.max_subgraph_nodes = (2 * largest) as u32;
    assert!(total > 2 * largest, "the hyperbatch must overflow: {total}");
    let mut device = open(&hw);
    let descriptor = load_graph(&mut device, &g, 0).expect("load");
    device.attach_graph(&descriptor).expect("attach");
    let got = device
        .sample_hyperbatch(&fanouts, &requests, Returns::Subgraph)
        .expect("sampled, split");
    assert!(got == want, "a split hyperbatch changed a subgraph");
    let splits = device.stats().hyperbatch_splits;
    assert!(splits >= 1, "no split");
    // And the device is left clean: it samples the same again.
    let again = device.sample_hyperbatch(&fanouts, &requests[..2], Returns::Subgraph);
    assert!(again.expect("two fit") == want[..2]);
}

#[test]
fn hyperbatches_read_fewer_flash_pages_than_a_config_per_minibatch() {
    // A graph several times the 32-page (64 KiB) page buffer: an NS_config per minibatch reads
    // the pages its minibatches share again, a hyperbatch once per hop.
    let config = CompareConfig {
        graph: GraphSpec::parse("rmat:13").unwrap(),
        batches: 8,
        warmup_batches: 0,
        batch_size: 32,
        fanouts: vec![10, 5],
        seed: 4,
        hw: small_config(),
        modes: vec![SamplerKind::Isp, SamplerKind::IspHyperbatch],
        workers: vec![1],
        hyperbatch: 8,
    };
    let report = compare::run(&config, None, &mut |_| {}).expect("comparison runs");
    assert!(report.identical(), "a subgraph differs from the reference");
    let one = report.result(SamplerKind::Isp, 1).unwrap();
    let hb = report.result(SamplerKind::IspHyperbatch, 1).unwrap();
    assert!(
        2 * hb.nand_pages_read < one.nand_pages_read,
        "hyperbatch {} pages, one NS_config each {}",
        hb.nand_pages_read,
        one.nand_pages_read
    );
    assert_eq!(hb.commands, 1 + 8, "one NS_SUBMIT, a collect per minibatch");
}
