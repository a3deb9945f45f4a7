//! Tests of AGNES's layout and sampler.

use super::buffer::PREFETCH_DEPTH;
use super::*;
use crate::dataset::generate::{GenerateParams, generate};
use crate::ooc::DirectSampler;
use crate::sampler::{ReferenceSampler, Sampler};

/// A generated dataset (R-MAT `scale`, edge factor `edge_factor`, `feature_dim` f32
/// features) in a fresh temporary directory named after `tag`; the directory and dataset.
fn generated(
    tag: &str,
    scale: u32,
    edge_factor: u32,
    seed: u64,
    feature_dim: u32,
) -> (std::path::PathBuf, crate::dataset::Dataset) {
    let dir = std::env::temp_dir().join(format!("sagessd-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let params = GenerateParams {
        name: tag.into(),
        scale,
        edge_factor,
        seed,
        feature_dim,
        feature_dtype: Dtype::F32,
        classes: 2,
    };
    let dataset = generate(&dir, &params).unwrap();
    (dir, dataset)
}

#[test]
fn damaged_files_are_errors_not_panics() {
    let (dir, dataset) = generated("damaged", 8, 4, 1, 4);
    let (layout, _) = AgnesLayout::for_dataset(&dataset, 4096).unwrap();
    let layout_dir = layout.dir().unwrap().to_owned();
    drop(layout);

    // A broken indptr entry (the 10th from the end, node n - 10's end): the file samplers
    // read indptr as they sample, and refuse that node's range, naming the file.
    let indptr = dir.join("indptr.npy");
    let good = fs::read(&indptr).unwrap();
    let mut bad = good.clone();
    let at = bad.len() - 8 * 10;
    bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    fs::write(&indptr, &bad).unwrap();
    let node = dataset.manifest.node_count - 10;
    let samplers: [Box<dyn Sampler>; 3] = [
        Box::new(DirectSampler::open(&dataset, false).unwrap()),
        Box::new(DirectSampler::open(&dataset, true).unwrap()),
        Box::new(crate::ooc::MmapSampler::open(&dataset).unwrap()),
    ];
    for mut s in samplers {
        let err = s.sample(1, &[2], &[node]).unwrap_err().to_string();
        assert!(
            err.contains("indptr.npy") && err.contains(&format!("node {node}")),
            "{err}"
        );
    }
    fs::write(&indptr, &good).unwrap();

    // A truncated blocks file and an index pointing past the blocks.
    let blocks = layout_dir.join("blocks.bin");
    let full = fs::read(&blocks).unwrap();
    fs::write(&blocks, &full[..full.len() - 4096]).unwrap();
    assert!(
        AgnesLayout::open(&layout_dir)
            .unwrap_err()
            .to_string()
            .contains("blocks.bin")
    );
    fs::write(&blocks, &full).unwrap();
    let index = layout_dir.join("index.npy");
    let good_index = fs::read(&index).unwrap();
    let mut bad_index = good_index.clone();
    let at = bad_index.len() - 8;
    bad_index[at..].copy_from_slice(&(1u64 << 62).to_le_bytes()); // a degree of 2^62
    fs::write(&index, &bad_index).unwrap();
    assert!(
        AgnesLayout::open(&layout_dir)
            .unwrap_err()
            .to_string()
            .contains("index.npy")
    );
    fs::write(&index, &good_index).unwrap();
    // A graph buffer smaller than one block.
    let layout = AgnesLayout::open(&layout_dir).unwrap();
    assert!(AgnesSampler::new(&layout, 100, false).is_err());

    // A neighbour id past the node count: writing the layout names the file and the entry.
    let indices = dir.join("indices.npy");
    let good_indices = fs::read(&indices).unwrap();
    let mut bad_indices = good_indices.clone();
    let at = bad_indices.len() - 4;
    bad_indices[at..].copy_from_slice(&1000u32.to_le_bytes());
    fs::write(&indices, &bad_indices).unwrap();
    let err = AgnesLayout::write(&dataset, &dir.join("rewritten"), 4096)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("indices.npy") && err.contains("entry"),
        "{err}"
    );
    fs::write(&indices, &good_indices).unwrap();

    // An .npy whose shape does not fit 64 bits.
    let huge = dir.join("huge.npy");
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    file.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    file.extend_from_slice(padded.as_bytes());
    fs::write(&huge, &file).unwrap();
    let err = npy::read_header(&huge).unwrap_err().to_string();
    assert!(err.contains("shape") && err.contains("too large"), "{err}");
    let _ = fs::remove_dir_all(&dir);
}

/// A pass serves the blocks already in the buffer before it reads (AGNES pins them): with
/// a buffer of half the blocks, a second pass over every block reads only the half that is
/// not buffered, where an LRU swept in block order would evict each buffered block before
/// reaching it and read them all again.
#[test]
fn a_pass_uses_the_buffered_blocks_before_it_reads() {
    let (dir, dataset) = generated("agnes-pin", 10, 8, 3, 0);
    let (layout, _) = AgnesLayout::for_dataset(&dataset, 4096).unwrap();
    let blocks = layout.manifest.block_count;
    assert!(blocks >= 8, "{blocks} blocks");
    let held = blocks / 2;
    let mut buffer = GraphBuffer::new(&layout, held as usize * 4096, false, None).unwrap();
    // One position in each block (its first entry).
    let positions: Vec<u64> = (0..blocks).map(|b| b * 1024).collect();
    let mut first = vec![0u32; positions.len()];
    buffer.resolve(&positions, &mut first).unwrap();
    assert_eq!(buffer.io.reads, blocks);
    let mut second = vec![0u32; positions.len()];
    buffer.resolve(&positions, &mut second).unwrap();
    assert_eq!(second, first);
    assert_eq!(buffer.io.reads - blocks, blocks - held);
    assert_eq!(buffer.io.buffer_hits, held);
    let _ = fs::remove_dir_all(&dir);
}

/// The buffer evicts the least recently used block: checked against a list kept in use
/// order (most recent last) over a seeded stream of block lookups.
#[test]
fn the_buffer_evicts_the_least_recently_used_block() {
    let (dir, dataset) = generated("agnes-lru", 10, 8, 5, 0);
    let (layout, _) = AgnesLayout::for_dataset(&dataset, 4096).unwrap();
    let blocks = layout.manifest.block_count;
    let held = 5usize;
    let mut buffer = GraphBuffer::new(&layout, held * 4096, false, None).unwrap();
    let mut order: Vec<u64> = Vec::new();
    let (mut reads, mut hits) = (0u64, 0u64);
    let mut rng = crate::rng::SplitMix64::new(11);
    for _ in 0..2_000 {
        // Mostly a few hot blocks, sometimes any block.
        let b = if rng.next_u64().is_multiple_of(4) {
            rng.next_u64() % blocks
        } else {
            rng.next_u64() % 7
        };
        if let Some(k) = order.iter().position(|&x| x == b) {
            order.remove(k);
            hits += 1;
        } else {
            reads += 1;
            if order.len() == held {
                order.remove(0);
            }
        }
        order.push(b);
        buffer.block(b).unwrap();
        assert_eq!(buffer.io.reads, reads, "block {b}");
        assert_eq!(buffer.io.buffer_hits, hits, "block {b}");
    }
    let mut buffered: Vec<u64> = buffer.blocks.keys().copied().collect();
    buffered.sort_unstable();
    order.sort_unstable();
    assert_eq!(buffered, order);
    assert!(hits > 500 && reads > 200, "{hits} hits, {reads} reads");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn every_sampler_matches_the_reference_and_hyperbatches_read_less() {
    let (dir, dataset) = generated("agnes", 14, 8, 2, 0);
    let graph = dataset.graph().unwrap();
    let block = 4096;
    let (layout, written) = AgnesLayout::for_dataset(&dataset, block).unwrap();
    assert!(written);
    // Every edge is found exactly once through the object index; hubs span blocks.
    let blocks = fs::read(layout.dir().unwrap().join("blocks.bin")).unwrap();
    for v in 0..graph.node_count() {
        let r = layout.range(v);
        let got: Vec<u32> = (0..r.degree)
            .map(|k| {
                let at = 4 * (r.start + k) as usize;
                u32::from_le_bytes(blocks[at..at + 4].try_into().unwrap())
            })
            .collect();
        assert_eq!(got, graph.neighbours(v), "node {v}");
    }
    assert!(layout.manifest.split_nodes > 0, "a hub larger than a block");
    let graph_bytes = layout.manifest.block_count * layout.manifest.block_bytes;
    let buffer = (graph_bytes / 8) as usize;

    let requests: Vec<crate::minibatch::Request> = (0..8u64)
        .map(|b| {
            crate::minibatch::Request::new(
                b,
                (0..64)
                    .map(|i| (i * 97 + b * 13) % graph.node_count())
                    .collect(),
            )
        })
        .collect();
    let fanouts = [10, 5];
    let mut reference = ReferenceSampler::new(&graph);
    let expected: Vec<SampledSubgraph> = requests
        .iter()
        .map(|r| reference.sample(r.seed, &fanouts, &r.targets).unwrap())
        .collect();
    let mut direct = DirectSampler::open(&dataset, false).unwrap();
    let mut uring = DirectSampler::open(&dataset, true).unwrap();
    let mut mapped = crate::ooc::MmapSampler::open(&dataset).unwrap();
    let mut blocks = AgnesSampler::new(&layout, buffer, false).unwrap();
    for (
        crate::minibatch::Request {
            seed: s,
            targets: t,
        },
        e,
    ) in requests.iter().zip(&expected)
    {
        assert_eq!(&direct.sample(*s, &fanouts, t).unwrap(), e);
        assert_eq!(&uring.sample(*s, &fanouts, t).unwrap(), e);
        assert_eq!(&mapped.sample(*s, &fanouts, t).unwrap(), e);
        assert_eq!(&blocks.sample(*s, &fanouts, t).unwrap(), e);
    }
    let mut hyper = AgnesSampler::new(&layout, buffer, false).unwrap();
    assert_eq!(
        hyper.sample_hyperbatch(&fanouts, &requests).unwrap(),
        expected
    );
    let mut ahead = AgnesSampler::new(&layout, buffer, true).unwrap();
    assert_eq!(
        ahead.sample_hyperbatch(&fanouts, &requests).unwrap(),
        expected
    );
    // Blocks read ahead count against the buffer: the prefetching sampler's LRU holds
    // PREFETCH_DEPTH blocks fewer, and reads what a sampler with that smaller buffer reads.
    let depth = PREFETCH_DEPTH.min(buffer / block / 2);
    let mut smaller = AgnesSampler::new(&layout, buffer - depth * block, false).unwrap();
    assert_eq!(
        smaller.sample_hyperbatch(&fanouts, &requests).unwrap(),
        expected
    );
    // What was read, apart from how (system calls) and how long it took.
    let counts = |io: &IoStats| IoStats {
        io_wait_ns: 0,
        syscalls: 0,
        hops: io.hops.map(|h| crate::ooc::HopIo { io_wait_ns: 0, ..h }),
        ..io.clone()
    };
    assert_eq!(
        counts(ahead.io_stats()),
        counts(smaller.io_stats()),
        "the same reads, issued ahead"
    );

    // The same layout written to an emulated SSD and read there, in modelled time.
    let transport = sagessd_host_driver::LocalTransport::from_config(
        &sagessd_emulator::HwConfig::cosmos_plus(),
    )
    .unwrap();
    let mut device = sagessd_host_driver::Device::open(transport).unwrap();
    layout.write_to_device(&mut device, 4096).unwrap();
    let before = device.now_ns().unwrap();
    {
        let mut on_device = AgnesSampler::on_device(&layout, buffer, &mut device, 4096).unwrap();
        assert_eq!(
            on_device.sample_hyperbatch(&fanouts, &requests).unwrap(),
            expected
        );
        assert_eq!(on_device.io_stats().reads, hyper.io_stats().reads);
    }
    {
        let mut per_batch = AgnesSampler::on_device(&layout, buffer, &mut device, 4096).unwrap();
        for (
            crate::minibatch::Request {
                seed: s,
                targets: t,
            },
            e,
        ) in requests.iter().zip(&expected)
        {
            assert_eq!(&per_batch.sample(*s, &fanouts, t).unwrap(), e);
        }
    }
    assert!(
        device.now_ns().unwrap() > before,
        "the reads took modelled time"
    );
    assert_eq!(
        counts(uring.io_stats()),
        counts(direct.io_stats()),
        "the same reads, in flight together"
    );
    // Every read is some hop's.
    for io in [
        direct.io_stats(),
        uring.io_stats(),
        hyper.io_stats(),
        blocks.io_stats(),
    ] {
        let per_hop = io.hops.iter().map(|h| (h.reads, h.bytes_read));
        let (reads, bytes) = per_hop.fold((0, 0), |(r, b), (hr, hb)| (r + hr, b + hb));
        assert_eq!((reads, bytes), (io.reads, io.bytes_read), "{io:?}");
        assert!(io.hops[0].reads > 0 && io.hops[2..].iter().all(|h| h.reads == 0));
    }
    assert!(
        hyper.io_stats().reads <= blocks.io_stats().reads,
        "hyperbatch {} reads, per minibatch {}",
        hyper.io_stats().reads,
        blocks.io_stats().reads
    );
    let _ = fs::remove_dir_all(&dir);
}
