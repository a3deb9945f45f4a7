use super::*;

use sagessd_emulator::HwConfig;

use crate::graph::CsrGraph;
use crate::rmat::{RmatParams, generate};
use crate::sampler::ReferenceSampler;

const MODES: [SamplerKind; 3] = [SamplerKind::Mmap, SamplerKind::Direct, SamplerKind::Uring];

fn loaded_device(g: &CsrGraph) -> (Device<LocalTransport>, GraphDescriptor) {
    let transport = LocalTransport::from_config(&HwConfig::cosmos_plus()).unwrap();
    let mut dev = Device::open(transport).unwrap();
    let desc = crate::load::load_graph(&mut dev, g, 7).unwrap();
    (dev, desc)
}

fn sampler(g: &CsrGraph, mode: SamplerKind, host: HostStackConfig) -> HostIoSampler {
    let (dev, desc) = loaded_device(g);
    HostIoSampler::new(dev, desc, mode, host).unwrap()
}

fn star() -> CsrGraph {
    CsrGraph::from_edges(
        20_001,
        &(1..20_001u32)
            .flat_map(|i| [(0, i), (i, 0)])
            .collect::<Vec<_>>(),
    )
    .unwrap()
}

const REQUESTS: [(u64, &[u16]); 4] = [
    (1, &[10, 10, 10]),
    (2, &[25, 10]),
    (3, &[3, 2, 2, 2]),
    (4, &[64]),
];

fn targets(seed: u64, n: u64) -> Vec<u64> {
    let mut t: Vec<u64> = (0..50).map(|i| (i * 37 + seed * 11) % n).collect();
    t.push(t[3]);
    t.push(0);
    t
}

#[test]
fn every_mode_equals_the_reference() {
    let tiny_cache = HostStackConfig {
        page_cache_bytes: 4 * PAGE_SIZE_BYTES,
        ..HostStackConfig::default()
    };
    for g in [generate(&RmatParams::graph500(9, 8, 5)).unwrap(), star()] {
        let mut reference = ReferenceSampler::new(&g);
        let mut samplers: Vec<HostIoSampler> = MODES
            .iter()
            .map(|&m| sampler(&g, m, HostStackConfig::default()))
            .collect();
        samplers.push(sampler(&g, SamplerKind::Mmap, tiny_cache.clone()));
        for (seed, fanouts) in REQUESTS {
            let t = targets(seed, g.node_count());
            let r = reference.sample(seed, fanouts, &t).unwrap();
            for s in &mut samplers {
                let got = s.sample(seed, fanouts, &t).unwrap();
                assert!(
                    got == r,
                    "{} differs: seed {seed} fanouts {fanouts:?}",
                    s.name()
                );
            }
        }
        for s in &samplers {
            let (h, st) = (s.host_stats(), s.stats());
            assert_eq!(st.minibatches, 4);
            assert_eq!(st.edges, reference.stats().edges);
            assert_eq!(h.ios, st.driver.reads);
            assert_eq!(st.driver.commands, st.driver.reads);
            assert_eq!(h.bytes_read, st.driver.c2h_bytes);
            assert!(
                h.bytes_used > 0 && h.bytes_used <= h.bytes_read || s.mode() == SamplerKind::Mmap
            );
            assert!(h.modelled_time_ns > 0);
            assert_eq!(st.modelled_time_ns, Some(h.modelled_time_ns));
            assert!(h.host_cpu_ns > 0 && h.host_cpu_ns <= h.modelled_time_ns);
        }
        // The tiny cache stays within its budget and evicts.
        let tiny = &samplers[3];
        let m = tiny.shared().mmap.as_ref().unwrap();
        assert!(m.cache.len() <= 4 && m.pages.len() == m.cache.len());
        assert!(tiny.host_stats().page_cache.evictions > 0);
    }
}

#[test]
fn modes_charge_what_they_should() {
    let g = generate(&RmatParams::graph500(13, 8, 3)).unwrap();
    let host = HostStackConfig::default();
    let t: Vec<u64> = (0..256).map(|i| i * 31 % g.node_count()).collect();
    let run = |mode| {
        let mut s = sampler(&g, mode, host.clone());
        s.sample(9, &[10, 10], &t).unwrap();
        s
    };
    let (direct, uring) = (run(SamplerKind::Direct), run(SamplerKind::Uring));
    let (d, a) = (direct.host_stats(), uring.host_stats());
    // The same reads, but async batches them: fewer syscalls, less time.
    assert_eq!(
        (d.ios, d.bytes_read, d.bytes_used),
        (a.ios, a.bytes_read, a.bytes_used)
    );
    assert_eq!(d.syscalls, d.ios);
    assert!(a.syscalls < d.syscalls && a.syscalls >= d.ios.div_ceil(32));
    assert!(a.modelled_time_ns < d.modelled_time_ns, "{a:?} vs {d:?}");
    // Direct is QD 1: each I/O costs at least its host overheads, serially.
    let per_io = host.sync_read_submit_ns() + host.blocking_completion_ns();
    assert!(d.modelled_time_ns > d.ios * per_io);
    assert!(d.host_cpu_ns >= d.ios * per_io);
    // Direct reads whole blocks of which a few entries are used.
    assert!(d.read_efficiency() < 1.0 && d.read_efficiency() > 0.0);

    // mmap: a warm, large cache serves a repeated minibatch without I/O.
    let mut mmap = sampler(&g, SamplerKind::Mmap, host.clone());
    mmap.sample(9, &[10, 10], &t).unwrap();
    let cold = mmap.host_stats();
    // Each major fault reads at least its own page; the rest of its window reads too.
    assert!(cold.page_cache.misses > 0 && cold.ios >= cold.page_cache.misses);
    assert_eq!(cold.syscalls, 0);
    mmap.sample(9, &[10, 10], &t).unwrap();
    let warm = mmap.host_stats();
    assert_eq!(warm.ios, cold.ios);
    assert_eq!(warm.page_cache.misses, cold.page_cache.misses);
    let second_ns = warm.modelled_time_ns - cold.modelled_time_ns;
    let lines = warm.memory_lines - cold.memory_lines;
    let compute = warm.compute_ns - cold.compute_ns;
    // All hits (or minor faults of read-ahead pages already counted in the first run), one
    // memory access per cache line, and the same sampling compute as the first run.
    assert_eq!(compute, cold.compute_ns);
    assert_eq!(
        second_ns,
        lines * host.memory_access_ns
            + (warm.page_cache.minor_faults - cold.page_cache.minor_faults) * host.minor_fault_ns
            + compute
    );
    // Fewer lines than entries (indptr[v], indptr[v+1] share one), but at least one per node.
    let accesses = warm.page_cache.accesses() - cold.page_cache.accesses();
    assert!(
        lines < accesses && lines * 2 > accesses / 2,
        "{lines} lines, {accesses} loads"
    );
    // Sampling compute is charged in every host mode, the same for the same minibatch.
    assert_eq!(d.compute_ns, cold.compute_ns);
    assert_eq!(a.compute_ns, cold.compute_ns);
    assert_eq!(d.memory_lines, a.memory_lines);
    assert!(warm.page_cache.hit_rate() > cold.page_cache.hit_rate());
    // Every used entry went through the page cache.
    assert_eq!(cold.bytes_used, d.bytes_used);
}

#[test]
fn direct_and_async_read_only_the_blocks_they_need() {
    // 2000 nodes: indptr spans 4 blocks; node 511's entries straddle blocks 0 and 1.
    let mut edges: Vec<(u32, u32)> = (0..2000u32)
        .flat_map(|i| [(i, (i + 1) % 2000), ((i + 1) % 2000, i)])
        .collect();
    edges.sort_unstable();
    let g = CsrGraph::from_edges(2000, &edges).unwrap();
    for mode in [SamplerKind::Direct, SamplerKind::Uring] {
        let mut host = sampler(&g, mode, HostStackConfig::default());
        // Target 511, one layer: indptr LBAs 7 and 8 (one 2-block run), then the one indices
        // block holding positions 1022 and 1023.
        host.sample(1, &[2], &[511]).unwrap();
        let s = host.stats();
        assert_eq!(s.driver.reads, 2, "{mode:?}");
        assert_eq!(s.driver.c2h_bytes, 3 * 4096, "{mode:?}");
        // Target 0, one layer: one indptr block, one indices block.
        host.sample(1, &[2], &[0]).unwrap();
        let s = host.stats();
        assert_eq!(s.driver.reads, 4, "{mode:?}");
        assert_eq!(s.driver.c2h_bytes, 5 * 4096, "{mode:?}");
    }
}

fn path_graph(n: u32) -> CsrGraph {
    let mut edges: Vec<(u32, u32)> = (0..n)
        .flat_map(|i| [(i, (i + 1) % n), ((i + 1) % n, i)])
        .collect();
    edges.sort_unstable();
    CsrGraph::from_edges(u64::from(n), &edges).unwrap()
}

#[test]
fn read_around_covers_a_small_file_in_one_fault() {
    // A path graph whose files span 12 pages each; sampling every node's full list scans them.
    let n = 6000u32;
    let g = path_graph(n);
    let host = HostStackConfig::default();
    let mut s = sampler(&g, SamplerKind::Mmap, host.clone());
    let all: Vec<u64> = (0..u64::from(n)).collect();
    let r = ReferenceSampler::new(&g).sample(1, &[2], &all).unwrap();
    assert!(s.sample(1, &[2], &all).unwrap() == r);
    let h = s.host_stats();
    let m = s.shared().mmap.as_ref().unwrap();
    // The first fault of each file reads the whole (12-page) file: 32-page read-around (one
    // worker: one mapping).
    assert_eq!(m.readahead.len(), 1);
    for ra in &m.readahead[0] {
        assert_eq!((ra.around_reads, ra.single_page_reads), (1, 0));
    }
    assert_eq!(h.ios, 2, "{h:?}");
    assert!(h.page_cache.hit_rate() > 0.99);
}

#[test]
fn a_fault_reads_the_window_centred_on_it() {
    // 60 000 nodes: indptr spans 118 pages. One target in the middle of the file.
    let g = path_graph(60_000);
    let host = HostStackConfig::default();
    let mut s = sampler(&g, SamplerKind::Mmap, host.clone());
    let v = 30_000u64;
    let r = ReferenceSampler::new(&g).sample(1, &[2], &[v]).unwrap();
    assert!(s.sample(1, &[2], &[v]).unwrap() == r);
    let bs = u64::from(s.device().info().block_size_bytes);
    let sh = s.shared();
    let m = sh.mmap.as_ref().unwrap();
    let first = sh.graph.indptr.slba * bs / PAGE_SIZE_BYTES;
    let fault = (sh.graph.indptr.slba * bs + 8 * v) / PAGE_SIZE_BYTES;
    let half = u64::from(host.ra_pages() / 2);
    assert!(fault - first > half, "the window must not be clipped here");
    // Pages fault − 16 .. fault + 16 are cached, nothing outside.
    for p in fault - half..fault + half {
        assert!(m.cache.contains(p), "page {p} (fault {fault})");
    }
    assert!(!m.cache.contains(fault - half - 1) && !m.cache.contains(fault + half));
    // One fault per file, each one 32-page read (the indices file is larger still).
    let h = s.host_stats();
    assert_eq!(h.ios, 2);
    assert_eq!(h.bytes_read, 2 * 32 * PAGE_SIZE_BYTES);
    assert_eq!(h.page_cache.misses, 2);
    // indptr[v], indptr[v+1]: one cache line; the two neighbours: one more.
    assert_eq!(h.memory_lines, 2);
    assert_eq!(h.compute_ns, host.node_ns + 2 * host.edge_sampled_ns);
}

#[test]
fn two_identical_runs_have_identical_timelines() {
    let g = generate(&RmatParams::graph500(9, 8, 5)).unwrap();
    let tiny_cache = HostStackConfig {
        page_cache_bytes: 16 * PAGE_SIZE_BYTES,
        ..HostStackConfig::default()
    };
    let run = |mode, host: &HostStackConfig| {
        let mut s = sampler(&g, mode, host.clone());
        let mut sum = FNV_OFFSET;
        for (seed, fanouts) in REQUESTS {
            let sg = s
                .sample(seed, fanouts, &targets(seed, g.node_count()))
                .unwrap();
            sum = fnv1a(sum, sg.as_bytes());
        }
        (
            s.host_stats(),
            s.stats(),
            s.device().transport().ssd().stats(),
            sum,
        )
    };
    let mut hashes = Vec::new();
    for mode in MODES {
        for host in [HostStackConfig::default(), tiny_cache.clone()] {
            let a = run(mode, &host);
            let b = run(mode, &host);
            assert_eq!(a, b, "{mode:?}");
            hashes.push(a.0.timeline_hash);
        }
    }
    // Different modes produce different timelines.
    assert_ne!(hashes[0], hashes[2]);
    assert_ne!(hashes[2], hashes[4]);
}

#[test]
fn bad_host_configs_are_refused() {
    let g = generate(&RmatParams::graph500(6, 4, 1)).unwrap();
    let (dev, desc) = loaded_device(&g);
    let bad = HostStackConfig {
        uring_queue_depth: 0,
        ..HostStackConfig::default()
    };
    let e = HostIoSampler::new(dev, desc, SamplerKind::Uring, bad).unwrap_err();
    assert!(e.to_string().contains("host.uring_queue_depth"), "{e}");
}

fn requests(n: u64, node_count: u64) -> Vec<Request> {
    (0..n)
        .map(|i| Request {
            seed: 100 + i,
            targets: targets(i, node_count),
        })
        .collect()
}

#[test]
fn isp_mode_equals_the_reference_and_charges_two_ioctls() {
    let g = generate(&RmatParams::graph500(9, 8, 5)).unwrap();
    let mut s = sampler(&g, SamplerKind::Isp, HostStackConfig::default());
    let mut reference = ReferenceSampler::new(&g);
    for (seed, fanouts) in REQUESTS {
        let t = targets(seed, g.node_count());
        assert!(
            s.sample(seed, fanouts, &t).unwrap() == reference.sample(seed, fanouts, &t).unwrap()
        );
    }
    let (h, st) = (s.host_stats(), s.stats());
    assert_eq!((st.driver.ns_submits, st.driver.ns_collects), (4, 4));
    assert_eq!(h.syscalls, 8);
    let per = HostStackConfig::default().sync_read_submit_ns()
        + HostStackConfig::default().blocking_completion_ns();
    assert_eq!(h.host_cpu_ns, 8 * per);
    // The device samples: no host sampling compute, no host memory loads.
    assert_eq!((h.compute_ns, h.memory_lines), (0, 0));
}

#[test]
fn isp_workers_beyond_the_sampling_slots_wait_for_one() {
    let g = generate(&RmatParams::graph500(10, 8, 5)).unwrap();
    let reqs = requests(24, g.node_count());
    let fanouts = [10u16, 5];
    let slots = usize::from(HwConfig::cosmos_plus().firmware.isp_slots);
    let run = |workers: usize| {
        let mut s = sampler(&g, SamplerKind::Isp, HostStackConfig::default());
        let r = s.run_workers(workers, &fanouts, &reqs).unwrap();
        (r, s.host_stats(), s.stats())
    };
    let (at_slots, h_slots, _) = run(slots);
    let (beyond, h_beyond, st) = run(2 * slots);
    // The same subgraphs; the device refused submissions while its slots were full, and each
    // refused worker slept until a job was collected, then got one.
    assert_eq!(beyond.subgraphs, at_slots.subgraphs);
    assert_eq!(h_slots.slot_waits, 0);
    assert!(h_beyond.slot_waits > 0, "{h_beyond:?}");
    // One NS_SUBMIT per job plus one per refusal; a worker that finds others queued waits
    // without submitting.
    let submits = st.driver.ns_submits;
    assert!(
        submits > reqs.len() as u64 && submits <= reqs.len() as u64 + h_beyond.slot_waits,
        "{submits} submits, {} waits",
        h_beyond.slot_waits
    );
    assert_eq!(st.driver.ns_collects, reqs.len() as u64);
    // Slots go to the workers in the order they were refused: every worker's first minibatch
    // is done before any worker's last (worker w takes w, w + 8 and w + 16).
    let workers = 2 * slots;
    let first_done = (0..workers).map(|w| beyond.done_ns[w]).max().unwrap();
    let last_done = (0..workers)
        .map(|w| beyond.done_ns[w + 2 * workers])
        .min()
        .unwrap();
    assert!(first_done < last_done, "{:?}", beyond.done_ns);
    // Twice the workers cannot sample faster than the slots allow by more than their host
    // overhead overlapping: no worker count beats the device.
    assert!(
        beyond.makespan_ns * 10 >= at_slots.makespan_ns * 9,
        "{} vs {}",
        beyond.makespan_ns,
        at_slots.makespan_ns
    );
}

#[test]
fn worker_processes_map_the_file_each_and_threads_share_it() {
    use sagessd_emulator::host_stack::MmapWorkers;
    let g = generate(&RmatParams::graph500(10, 8, 5)).unwrap();
    let reqs = requests(16, g.node_count());
    let fanouts = [10u16, 5];
    let run = |workers: usize, kind: MmapWorkers| {
        let host = HostStackConfig {
            mmap_workers: kind,
            ..HostStackConfig::default()
        };
        let mut s = sampler(&g, SamplerKind::Mmap, host);
        let r = s.run_workers(workers, &fanouts, &reqs).unwrap();
        (r, s.host_stats())
    };
    // One worker: one mapping either way.
    let (t1, ht1) = run(1, MmapWorkers::Threads);
    let (p1, hp1) = run(1, MmapWorkers::Processes);
    assert_eq!(
        (t1.makespan_ns, ht1.page_cache),
        (p1.makespan_ns, hp1.page_cache)
    );
    // Four: the same subgraphs; each process faults in for itself the pages the others
    // brought (minor faults), where threads find them mapped.
    let (t4, ht4) = run(4, MmapWorkers::Threads);
    let (p4, hp4) = run(4, MmapWorkers::Processes);
    assert_eq!(p4.subgraphs, t4.subgraphs);
    assert!(
        hp4.page_cache.minor_faults > ht4.page_cache.minor_faults,
        "{:?} vs {:?}",
        hp4.page_cache,
        ht4.page_cache
    );
    assert!(hp4.page_cache.hits < ht4.page_cache.hits);
}

#[test]
fn several_workers_sample_what_one_does_deterministically() {
    let g = generate(&RmatParams::graph500(10, 8, 5)).unwrap();
    let reqs = requests(8, g.node_count());
    let fanouts = [10u16, 5];
    let small_cache = HostStackConfig {
        page_cache_bytes: 32 * PAGE_SIZE_BYTES,
        ..HostStackConfig::default()
    };
    for mode in SamplerKind::modelled() {
        let host = if mode == SamplerKind::Mmap {
            small_cache.clone()
        } else {
            HostStackConfig::default()
        };
        // Hyperbatches of two: worker w takes the requests of hyperbatches w, w + 4, ….
        let group = if mode == SamplerKind::IspHyperbatch {
            2
        } else {
            1
        };
        let run = |workers| {
            let mut s = sampler(&g, mode, host.clone());
            s.set_hyperbatch(group);
            let r = s.run_workers(workers, &fanouts, &reqs).unwrap();
            (r, s.host_stats(), s.device().transport().ssd().stats())
        };
        let (one, ..) = run(1);
        let (a, ha, da) = run(4);
        let (b, hb, db) = run(4);
        // Each request is done when its worker's clock says, in the worker's order; a worker's
        // last request ends it.
        assert_eq!(a.done_ns.len(), reqs.len());
        for w in 0..4 {
            let mine: Vec<u64> = a
                .done_ns
                .iter()
                .enumerate()
                .filter(|(i, _)| (i / group) % 4 == w)
                .map(|(_, t)| *t)
                .collect();
            assert!(mine.windows(2).all(|p| p[0] <= p[1]), "{mode:?} worker {w}");
            assert_eq!(mine.last().copied(), Some(a.worker_end_ns[w]), "{mode:?}");
        }
        assert_eq!(a.subgraphs, one.subgraphs, "{mode:?}");
        assert_eq!(b.subgraphs, a.subgraphs);
        assert_eq!(
            (a.makespan_ns, &a.worker_end_ns),
            (b.makespan_ns, &b.worker_end_ns)
        );
        assert_eq!(
            ha, hb,
            "{mode:?}: identical completion-time hash and counters"
        );
        assert_eq!(da, db);
        assert_eq!(a.worker_end_ns.len(), 4);
        // Four workers overlap their I/O: the makespan is shorter than one worker's.
        assert!(
            a.makespan_ns < one.makespan_ns,
            "{mode:?}: {} vs {}",
            a.makespan_ns,
            one.makespan_ns
        );
    }
}

#[test]
fn mmap_workers_touch_the_page_cache_in_time_order() {
    // A small cache, so that faults, evictions and pending pages interleave between workers.
    let g = generate(&RmatParams::graph500(11, 8, 5)).unwrap();
    let reqs = requests(6, g.node_count());
    let fanouts = [10u16, 5];
    let host = HostStackConfig {
        page_cache_bytes: 24 * PAGE_SIZE_BYTES,
        ..HostStackConfig::default()
    };
    let one = sampler(&g, SamplerKind::Mmap, host.clone())
        .run_workers(1, &fanouts, &reqs)
        .unwrap();
    for workers in [2, 3] {
        let mut s = sampler(&g, SamplerKind::Mmap, host.clone());
        let run = s.run_workers(workers, &fanouts, &reqs).unwrap();
        assert_eq!(run.subgraphs, one.subgraphs);
        let h = s.host_stats();
        assert!(h.page_cache.evictions > 0 && h.page_cache.misses > 0);
        // Every page-cache access and insertion happened at a virtual time no earlier than the
        // previous one: the shared LRU and pending pages see the workers in time order.
        assert_eq!(h.cache_order_violations, 0, "{workers} workers: {h:?}");
        assert_eq!(h.submit_lag_ns, 0);
    }
}

#[test]
fn dram_mode_equals_the_reference_with_no_io_and_costs_what_a_warm_mmap_does() {
    let g = generate(&RmatParams::graph500(11, 8, 3)).unwrap();
    let host = HostStackConfig::default();
    let mut reference = ReferenceSampler::new(&g);
    let mut dram = sampler(&g, SamplerKind::Memory, host.clone());
    let mut mmap = sampler(&g, SamplerKind::Mmap, host.clone());
    for (seed, fanouts) in REQUESTS {
        let t = targets(seed, g.node_count());
        let r = reference.sample(seed, fanouts, &t).unwrap();
        let before = dram.host_stats().modelled_time_ns;
        assert!(dram.sample(seed, fanouts, &t).unwrap() == r, "seed {seed}");
        let dram_ns = dram.host_stats().modelled_time_ns - before;
        // The same minibatch twice through mmap: the second pass finds every page cached and
        // mapped, so it pays exactly the loads and the compute, as the DRAM mode does.
        mmap.sample(seed, fanouts, &t).unwrap();
        let before = mmap.host_stats().modelled_time_ns;
        mmap.sample(seed, fanouts, &t).unwrap();
        assert_eq!(
            mmap.host_stats().modelled_time_ns - before,
            dram_ns,
            "seed {seed}"
        );
        // At least the sampling compute of every destination and sampled neighbour.
        let v = r.view();
        let dst: u64 = (0..v.layer_count())
            .map(|l| u64::from(v.layer(l).counts.dst_count))
            .sum();
        assert!(dram_ns >= dst * host.node_ns + r.edge_count() * host.edge_sampled_ns);
    }
    let (h, st) = (dram.host_stats(), dram.stats());
    assert_eq!((h.ios, h.syscalls, h.bytes_read), (0, 0, 0));
    assert_eq!(st.driver.commands, 0, "no NVMe command during the runs");
    assert_eq!(
        h.host_cpu_ns, h.modelled_time_ns,
        "all of it is host CPU time"
    );
    assert_eq!(dram.name(), "host DRAM");
    assert_eq!(SamplerKind::from_name("dram"), Some(SamplerKind::Memory));
}

/// A computed graph's bytes worked out by the host (the page cache and the resident copy keep
/// none) give the same subgraphs, the same modelled times and the same counts as the bytes the
/// device returned; content that is not the device's is an error, not a sample.
#[test]
fn computed_graph_bytes_change_nothing_but_memory() {
    use sagessd_emulator::Ssd;
    use sagessd_emulator::synthetic_graph::{SyntheticGraph, SyntheticSpec};
    use sagessd_emulator::synthetic_image::csr_content;
    use std::sync::Arc;

    let graph =
        |seed| Arc::new(SyntheticGraph::new(SyntheticSpec::cnr_2000_like(5_000, seed)).unwrap());
    let g = graph(3);
    let hw = HwConfig::cosmos_plus();
    let bs = hw.firmware.block_size_bytes;
    // A page cache of 32 pages: the graph's ~100 pages are read, evicted and read again.
    let host = HostStackConfig {
        page_cache_bytes: 32 * PAGE_SIZE_BYTES,
        ..HostStackConfig::default()
    };
    let open = |mode, content: Option<&Arc<SyntheticGraph>>| {
        let (ssd, desc, _) = Ssd::with_synthetic_graph(&hw, g.clone(), 0).unwrap();
        let dev = Device::open(LocalTransport::new(ssd)).unwrap();
        let bytes = content.map_or(GraphBytes::Kept, |c| {
            GraphBytes::Computed(Arc::new(csr_content(c, &desc, bs).unwrap()))
        });
        HostIoSampler::with_graph_bytes(dev, desc, mode, host.clone(), bytes).unwrap()
    };
    let requests: Vec<Request> = (0..6)
        .map(|i| Request {
            seed: i,
            targets: targets(i, g.node_count()),
        })
        .collect();
    let fanouts = [10, 5];
    for mode in [SamplerKind::Memory, SamplerKind::Mmap] {
        let (mut kept, mut computed) = (open(mode, None), open(mode, Some(&g)));
        let a = kept.run_workers(2, &fanouts, &requests).unwrap();
        let b = computed.run_workers(2, &fanouts, &requests).unwrap();
        assert_eq!(a.subgraphs, b.subgraphs, "{mode}");
        assert_eq!(
            (a.makespan_ns, a.worker_end_ns, a.done_ns),
            (b.makespan_ns, b.worker_end_ns, b.done_ns),
            "{mode}"
        );
        assert_eq!(kept.host_stats(), computed.host_stats(), "{mode}");
        if mode == SamplerKind::Mmap {
            assert!(
                kept.host_stats().ios > 1,
                "the cache thrashes: {:?}",
                kept.host_stats()
            );
        }
    }
    // The host's content is another graph's: the first page read is refused.
    let other = graph(4);
    let e = open(SamplerKind::Mmap, Some(&other))
        .run_workers(1, &fanouts, &requests)
        .unwrap_err();
    assert!(e.to_string().contains("not the graph's"), "{e}");
}
