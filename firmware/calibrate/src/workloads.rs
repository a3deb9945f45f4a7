//! The workloads: one for each unit of counted work that calibration measures, each designed
//! so that the fit learns that unit's cost from it; and checks kept out of the fit (a
//! realistic minibatch mix, and other mixes of the same units) that the fitted costs must
//! predict.
//!
//! A run boots the device, stores [`UnitGraph`], [`SkewedGraph`], [`UniformGraph`] and a plain
//! data region, and
//! then runs every workload in [`WORKLOADS`] order. Each workload's firmware work is one
//! profiling segment ([`Marks::segment`] before and after it); what the harness does between
//! workloads (warming or emptying the page buffer) falls in segments no workload claims. For
//! each workload the run prints one line:
//!
//! ```plain
//! calibrate workload <name> segment <k> commands <n> flash_ops <n> ... parked_checked <n>
//! ```
//!
//! (every [`WorkCounters::NAMES`] with the work the firmware counted in that segment), and at
//! the end `calibrate done segments <n>`.

use core::fmt::Write;

use sagessd_abi::ns_config::{MAX_LAYERS, NS_CONFIG_MAGIC, NS_CONFIG_VERSION, NsConfigHeader};
use sagessd_firmware::work::WorkCounters;
use zerocopy::IntoBytes;

use crate::graphs::{Graph, SkewedGraph, UniformGraph, UnitGraph, mix, store};
use crate::{CalibrateError, Device, Marks, Plan};

/// What a workload is meant to measure: a counted unit, a realistic mix, or a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aim {
    /// Mostly this unit of [`WorkCounters::NAMES`]: where the fit learns its cost.
    Unit(&'static str),
    /// A realistic mix of the units, fitted too: it keeps the costs true to work that is not
    /// one unit at a time (the caches see several tables at once).
    Mix,
    /// Not fitted: the fitted costs must predict it (a realistic mix, or another mix of the
    /// units than the fitted workloads').
    Check,
}

/// One workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Its name in reports.
    pub name: &'static str,
    /// What it measures.
    pub aim: Aim,
    /// What it does, in words.
    pub what: &'static str,
}

/// Every workload, in run order.
pub const WORKLOADS: [Workload; 27] = [
    Workload {
        name: "idle_polls",
        aim: Aim::Unit("polls"),
        what: "4,096 polls of an idle firmware",
    },
    Workload {
        name: "buffered_reads",
        aim: Aim::Unit("commands"),
        what: "1,024 Reads of one block from pages in the page buffer",
    },
    Workload {
        name: "buffered_straddling_reads",
        aim: Aim::Check,
        what: "1,024 Reads of two blocks on either side of a page boundary, in the page buffer",
    },
    Workload {
        name: "buffered_large_reads",
        aim: Aim::Unit("page_lookups"),
        what: "64 Reads of the largest transfer (33 pages each) from pages in the page buffer",
    },
    Workload {
        name: "flash_reads",
        aim: Aim::Check,
        what: "512 Reads of one block, each from another page, after the page buffer was emptied",
    },
    Workload {
        name: "flash_page_reads",
        aim: Aim::Unit("flash_ops"),
        what: "256 Reads of a whole page each (4 blocks), after the page buffer was emptied",
    },
    Workload {
        name: "isp_repeated_targets",
        aim: Aim::Unit("targets_deduplicated"),
        what: "4 jobs of max_targets copies of one degree-0 node, fanout 1",
    },
    Workload {
        name: "isp_distinct_targets",
        aim: Aim::Unit("destinations"),
        what: "4 jobs of 16,000 degree-0 nodes, every fourth of the first 32 pages' bounds, \
               fanout 1",
    },
    Workload {
        name: "isp_high_ids",
        aim: Aim::Unit("sort_key_moves"),
        what: "the same of a never-written graph of 2^23 nodes, ids past 2^22 (three radix \
               passes, not two)",
    },
    Workload {
        name: "isp_local_sampling",
        aim: Aim::Unit("edges_drawn"),
        what: "4 jobs of 1,024 nodes of degree 32 with neighbours among 64 nodes, fanout 16",
    },
    Workload {
        name: "isp_local_narrow",
        aim: Aim::Unit("edges_drawn"),
        what: "the same with fanout 4",
    },
    Workload {
        name: "isp_spread_sampling",
        aim: Aim::Unit("nodes_added"),
        what: "4 jobs of 4,096 nodes of degree 32 with neighbours all over, fanout 16 (new nodes, \
               a minibatch's worth)",
    },
    Workload {
        name: "isp_spread_pages",
        aim: Aim::Unit("flash_ops"),
        what: "4 jobs of 512 degree-0 nodes whose bounds lie on 512 pages, fanout 1",
    },
    Workload {
        name: "isp_warm_pages",
        aim: Aim::Unit("pages_scanned"),
        what: "the same 4 jobs with their pages in the page buffer (no flash reads)",
    },
    Workload {
        name: "isp_one_page_gathers",
        aim: Aim::Unit("edges_sampled"),
        what: "4 jobs of the nodes whose lists fill one page, fanout 32 (every list whole)",
    },
    Workload {
        name: "isp_whole_lists",
        aim: Aim::Unit("edges_sampled"),
        what: "4 jobs of 256 consecutive nodes of degree 32, fanout 32 (every list whole)",
    },
    Workload {
        name: "isp_repeated_neighbours",
        aim: Aim::Unit("stale_repeats"),
        what: "4 jobs of 4,096 nodes of degree 32 with neighbours among 32,768, fanout 32 (each \
               neighbour found again, mostly not in the caches)",
    },
    Workload {
        name: "isp_tiny_jobs",
        aim: Aim::Unit("radix_passes"),
        what: "64 jobs of 2 degree-0 nodes whose bounds lie 256 pages apart, fanout 1",
    },
    Workload {
        name: "isp_emitted_uniform",
        aim: Aim::Unit("edges_emitted"),
        what: "2 jobs of 16,384 random nodes of the uniform graph, fanout 10, returning sampled \
               ids: a minibatch's last layer's worth of neighbours emitted, none deduplicated",
    },
    Workload {
        name: "uniform_minibatch",
        aim: Aim::Mix,
        what: "2 jobs of 1,024 random nodes of a uniform graph, fanouts 10,10",
    },
    Workload {
        name: "skewed_minibatch",
        aim: Aim::Mix,
        what: "2 jobs of 1,024 random nodes of a skewed graph, fanouts 25,10 (other seeds than \
               the check's)",
    },
    Workload {
        name: "skewed_sampled_ids",
        aim: Aim::Mix,
        what: "skewed_minibatch's jobs returning sampled ids",
    },
    Workload {
        name: "uniform_wide_fanout",
        aim: Aim::Mix,
        what: "1 job of 1,024 random nodes of the uniform graph, fanouts 25,10",
    },
    Workload {
        name: "uniform_three_layer_mix",
        aim: Aim::Mix,
        what: "1 job of 256 random nodes of the uniform graph, fanouts 10,10,10 (other seeds \
               than the check's)",
    },
    Workload {
        name: "uniform_three_layers",
        aim: Aim::Check,
        what: "2 jobs of 256 random nodes of the uniform graph, fanouts 10,10,10",
    },
    Workload {
        name: "check_minibatch",
        aim: Aim::Check,
        what: "4 jobs of 1,024 random nodes of a skewed graph, fanouts 25,10 (SmartSAGE's)",
    },
    Workload {
        name: "check_sampled_ids",
        aim: Aim::Check,
        what: "check_minibatch's jobs returning sampled ids, for the host to build the subgraph",
    },
];

/// Whether workload `name`'s jobs return their sampled ids ([`sagessd_abi::sampled_ids`])
/// instead of their subgraphs.
fn returns_sampled_ids(name: &str) -> bool {
    matches!(
        name,
        "isp_emitted_uniform" | "skewed_sampled_ids" | "check_sampled_ids"
    )
}

/// Jobs per ISP workload, but for `isp_tiny_jobs` and the minibatches.
const JOBS: u32 = 4;
/// Jobs of `check_minibatch` (each one SmartSAGE minibatch).
pub const CHECK_JOBS: u32 = JOBS;
/// The check minibatch's fanouts (SmartSAGE's).
pub const CHECK_FANOUTS: [u16; 2] = [25, 10];
/// Targets of each check minibatch.
pub const CHECK_TARGETS: u64 = 1024;

/// The seed of ISP job `job` of a workload (the check minibatch's among them).
pub fn job_seed(job: u32) -> u64 {
    0x5A9E_0000 + u64::from(job)
}

/// Target `i` of the check minibatch with `seed`: a node of [`SkewedGraph`] (what its floor is
/// derived from, too).
pub fn check_target(seed: u64, i: u64) -> u64 {
    mix(seed << 32 | i) % SkewedGraph.node_count()
}
/// Jobs of `isp_tiny_jobs`.
const TINY_JOBS: u32 = 64;
/// Jobs of the fitted and checked minibatches but `check_minibatch`.
const MIX_JOBS: u32 = 2;
/// Targets of `isp_distinct_targets` and `isp_high_ids`: a layer's worth of destinations.
const DESTINATION_TARGETS: u64 = 16_000;
/// Nodes of the never-written graph `isp_high_ids` samples: 2^23, so that ids near the top
/// take three radix passes of 11 bits.
const ZERO_GRAPH_NODES: u64 = 1 << 23;
/// Targets of `isp_emitted_uniform`: about as many destinations as a SmartSAGE minibatch's last
/// layer has (1,024 targets and their 25 neighbours each), so that its arrays outgrow the L2 as
/// that layer's do.
const EMITTED_TARGETS: u64 = 16_384;
/// Bytes of the plain data region the read workloads use.
const READ_REGION_BYTES: u64 = 8 << 20;

/// Where the run keeps its data on the namespace.
#[derive(Clone, Copy, Debug)]
struct Layout {
    unit: sagessd_abi::graph::GraphDescriptor,
    skewed: sagessd_abi::graph::GraphDescriptor,
    uniform: sagessd_abi::graph::GraphDescriptor,
    /// [`ZERO_GRAPH_NODES`] nodes of degree 0 whose `indptr` is never written (its pages are
    /// unmapped, so they read as zeros): targets with ids past 2^22, whose keys sort in three
    /// radix passes.
    zeros: sagessd_abi::graph::GraphDescriptor,
    /// First block of the read region.
    reads: u64,
    /// Blocks per flash page.
    blocks_per_page: u64,
    /// Blocks of the read region kept in the page buffer.
    warm_blocks: u64,
}

/// Runs every workload on the plan's device in `memory`, printing to `out`. `host_bytes` of
/// `memory` (after the arena) become the host buffer: it must hold a minibatch's subgraph.
pub fn run<K: Marks, W: Write>(
    plan: &Plan,
    memory: &mut [u8],
    host_bytes: usize,
    marks: K,
    out: &mut W,
) -> Result<(), CalibrateError> {
    let mut device = Device::boot(plan, memory, host_bytes, marks)?;
    let chunk = plan.config.max_transfer_bytes as usize;
    let bs = u64::from(device.block_size_bytes());
    let page = u64::from(plan.geometry.page_size_bytes);
    let round_up = |lba: u64| lba.div_ceil(page / bs) * (page / bs);
    let unit = store(&mut device, &UnitGraph, 0, page / bs, chunk)?;
    let skewed_at = round_up(unit.indices.slba + unit.indices.block_count);
    let skewed = store(&mut device, &SkewedGraph, skewed_at, page / bs, chunk)?;
    let uniform_at = round_up(skewed.indices.slba + skewed.indices.block_count);
    let uniform = store(&mut device, &UniformGraph, uniform_at, page / bs, chunk)?;
    let reads = round_up(uniform.indices.slba + uniform.indices.block_count);
    let zeros_at = round_up(reads + READ_REGION_BYTES / bs);
    let zeros = sagessd_abi::graph::GraphDescriptor::csr_layout(
        ZERO_GRAPH_NODES,
        0,
        zeros_at,
        device.block_size_bytes(),
    )
    .ok_or(CalibrateError::HostBuffer)?;
    for lba in (0..READ_REGION_BYTES / bs).step_by(chunk / bs as usize) {
        fill(device.buffer(), lba);
        device.write(reads + lba, chunk)?;
    }
    let buffered = u64::from(plan.config.page_buffer_pages / 2) * page;
    let layout = Layout {
        unit,
        skewed,
        uniform,
        zeros,
        reads,
        blocks_per_page: page / bs,
        warm_blocks: buffered.clamp(chunk as u64, 2 << 20) / bs,
    };
    for (k, w) in WORKLOADS.iter().enumerate() {
        prepare(&mut device, &layout, plan, w.name, chunk)?;
        marks.segment();
        let before = device.work();
        perform(&mut device, &layout, plan, w.name, chunk)?;
        let work = device.work().since(&before);
        marks.segment();
        let _ = write!(
            out,
            "calibrate workload {} segment {}",
            w.name,
            segment_of_index(k)
        );
        for (name, value) in WorkCounters::NAMES.iter().zip(work.values()) {
            let _ = write!(out, " {name} {value}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "calibrate done segments {}", 2 * WORKLOADS.len());
    Ok(())
}

/// The profiling segment workload `k` of [`WORKLOADS`] runs in: each workload's preparation has
/// a segment, then the workload its own.
fn segment_of_index(k: usize) -> usize {
    2 * k + 1
}

/// The profiling segment the workload named `name` runs in (what [`run`] reports for it), so
/// that a profiler can be told before the run which segment to look at in detail.
pub fn segment_of(name: &str) -> Option<usize> {
    WORKLOADS
        .iter()
        .position(|w| w.name == name)
        .map(segment_of_index)
}

/// Parses a line [`run`] printed for a workload: its name, its profiling segment and the work
/// the firmware counted in it; `None` if the line is not one.
pub fn parse_report(line: &str) -> Option<(&str, usize, WorkCounters)> {
    let mut words = line.split_whitespace();
    let mut expect = |word: &str| (words.next()? == word).then_some(());
    expect("calibrate")?;
    expect("workload")?;
    let name = words.next()?;
    if words.next()? != "segment" {
        return None;
    }
    let segment = words.next()?.parse().ok()?;
    let mut values = [0u64; WorkCounters::COUNT];
    for (value, key) in values.iter_mut().zip(WorkCounters::NAMES) {
        if words.next()? != key {
            return None;
        }
        *value = words.next()?.parse().ok()?;
    }
    words
        .next()
        .is_none()
        .then_some((name, segment, WorkCounters::from_values(values)))
}

/// Distinct bytes for block `lba` of the read region.
fn fill(buffer: &mut [u8], lba: u64) {
    for (i, word) in buffer.chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&mix(lba << 20 | i as u64).to_le_bytes());
    }
}

/// What the harness does before a workload's segment: attach its graph, warm or empty the
/// page buffer.
fn prepare<K: Marks>(
    device: &mut Device<'_, K>,
    layout: &Layout,
    plan: &Plan,
    name: &str,
    chunk: usize,
) -> Result<(), CalibrateError> {
    match name {
        "buffered_reads" | "buffered_straddling_reads" | "buffered_large_reads" => {
            let step = chunk as u64 / u64::from(device.block_size_bytes());
            for lba in (0..layout.warm_blocks).step_by(step as usize) {
                device.read(layout.reads + lba, step as u32)?;
            }
        }
        "isp_repeated_targets" | "isp_local_sampling" => device.attach(&layout.unit)?,
        "isp_high_ids" => device.attach(&layout.zeros)?,
        "isp_warm_pages" => {
            // Its pages in the page buffer: the first job's, read here.
            let len = job_config(device, plan, name, 0)?;
            device.sample(len)?;
            return Ok(());
        }
        "skewed_minibatch" | "skewed_sampled_ids" | "check_minibatch" | "check_sampled_ids" => {
            device.attach(&layout.skewed)?
        }
        "isp_emitted_uniform"
        | "uniform_minibatch"
        | "uniform_wide_fanout"
        | "uniform_three_layer_mix"
        | "uniform_three_layers" => device.attach(&layout.uniform)?,
        _ => {}
    }
    if !name.starts_with("buffered") {
        device.drop_page_buffer();
    }
    Ok(())
}

/// The workload's own work.
fn perform<K: Marks>(
    device: &mut Device<'_, K>,
    layout: &Layout,
    plan: &Plan,
    name: &str,
    chunk: usize,
) -> Result<(), CalibrateError> {
    let bs = u64::from(device.block_size_bytes());
    match name {
        "idle_polls" => {
            for _ in 0..4096 {
                device.poll();
            }
        }
        "buffered_straddling_reads" => {
            // The last block of a page and the first of the next.
            let pages = layout.warm_blocks / layout.blocks_per_page;
            for i in 0..1024u64 {
                let boundary = (1 + mix(i) % (pages - 1)) * layout.blocks_per_page;
                device.read(layout.reads + boundary - 1, 2)?;
            }
        }
        "buffered_reads" => {
            for i in 0..1024u64 {
                device.read(layout.reads + mix(i) % layout.warm_blocks, 1)?;
            }
        }
        "buffered_large_reads" => {
            let blocks = chunk as u64 / bs;
            let starts = layout.warm_blocks - blocks + 1;
            for i in 0..64u64 {
                device.read(layout.reads + mix(i) % starts, blocks as u32)?;
            }
        }
        "flash_reads" => {
            let pages = READ_REGION_BYTES / bs / layout.blocks_per_page;
            for i in 0..512u64.min(pages) {
                device.read(layout.reads + i * layout.blocks_per_page, 1)?;
            }
        }
        "flash_page_reads" => {
            let pages = READ_REGION_BYTES / bs / layout.blocks_per_page;
            for i in 0..256u64.min(pages) {
                device.read(
                    layout.reads + i * layout.blocks_per_page,
                    layout.blocks_per_page as u32,
                )?;
            }
        }
        _ => {
            let jobs = match name {
                "isp_tiny_jobs" => TINY_JOBS,
                "isp_emitted_uniform"
                | "uniform_minibatch"
                | "skewed_minibatch"
                | "skewed_sampled_ids"
                | "uniform_three_layers" => MIX_JOBS,
                "uniform_wide_fanout" | "uniform_three_layer_mix" => 1,
                _ => JOBS,
            };
            for job in 0..jobs {
                let len = job_config(device, plan, name, job)?;
                device.sample(len)?;
                if name != "isp_warm_pages" {
                    device.drop_page_buffer();
                }
            }
        }
    }
    Ok(())
}

/// Writes the NS_config of job `job` of ISP workload `name` into the host buffer; returns its
/// length.
fn job_config<K: Marks>(
    device: &mut Device<'_, K>,
    plan: &Plan,
    name: &str,
    job: u32,
) -> Result<usize, CalibrateError> {
    let len = job_targets(device, plan, name, job)?;
    if returns_sampled_ids(name) {
        sagessd_abi::ns_config::request_sampled_ids(&mut device.buffer()[..len]);
    }
    Ok(len)
}

/// [`job_config`]'s NS_config, its flags aside.
fn job_targets<K: Marks>(
    device: &mut Device<'_, K>,
    plan: &Plan,
    name: &str,
    job: u32,
) -> Result<usize, CalibrateError> {
    let max_targets = u64::from(plan.config.limits.max_targets);
    let seed = job_seed(job);
    // A list of the unit graph is 128 B: a page holds this many.
    let lists_per_page = u64::from(plan.geometry.page_size_bytes) / 128;
    match name {
        "isp_repeated_targets" => {
            ns_config(device, seed, &[1], max_targets, |_| UnitGraph::ISOLATED)
        }
        "isp_distinct_targets" | "isp_high_ids" => {
            // Every fourth node of indptr (8 B an entry), so that each target's bounds lie in a
            // cache line of their own, as a random minibatch's do, and as many as a layer of a
            // real minibatch has (its records and sort keys as far out of the caches): those
            // of the unit graph's first 32 pages sort in two radix passes, those of the
            // never-written graph past 2^22 in three.
            let count = DESTINATION_TARGETS;
            if name == "isp_high_ids" {
                let first = ZERO_GRAPH_NODES - 4 * count * (1 + u64::from(job));
                ns_config(device, seed, &[1], count, |i| first + 4 * i)
            } else {
                ns_config(device, seed, &[1], count, |i| 4 * i)
            }
        }
        "isp_local_sampling" => ns_config(device, seed, &[16], 1024, |i| UnitGraph::LOCAL + i),
        "isp_local_narrow" => ns_config(device, seed, &[4], 1024, |i| UnitGraph::LOCAL + i),
        "isp_spread_sampling" => {
            let first = UnitGraph::SPREAD + 4096 * u64::from(job % 2);
            ns_config(device, seed, &[16], 4096, |i| first + i)
        }
        "isp_spread_pages" | "isp_warm_pages" => {
            // An indptr entry is 8 B: one target's bounds per page.
            let per_page = u64::from(plan.geometry.page_size_bytes) / 8;
            let t = |i: u64| UnitGraph::ISOLATED + (i * per_page + 1) % UnitGraph::ISOLATED_NODES;
            ns_config(device, seed, &[1], 512, t)
        }
        "isp_one_page_gathers" => {
            // The lists of one page, whose bounds share a page too: nothing to sort.
            let first = UnitGraph::LOCAL + lists_per_page * u64::from(job);
            ns_config(device, seed, &[32], lists_per_page, |i| first + i)
        }
        "isp_whole_lists" => {
            let first = UnitGraph::LOCAL + 256 * u64::from(job);
            ns_config(device, seed, &[32], 256, |i| first + i)
        }
        "isp_tiny_jobs" => {
            let far = UnitGraph::ISOLATED_NODES / 2;
            ns_config(device, seed, &[1], 2, |i| i * far + u64::from(job))
        }
        "isp_emitted_uniform" => {
            let n = UniformGraph.node_count();
            ns_config(device, seed, &[10], EMITTED_TARGETS, |i| {
                mix(seed << 32 | i) % n
            })
        }
        "uniform_minibatch" => {
            let n = UniformGraph.node_count();
            ns_config(device, seed, &[10, 10], 1024, |i| mix(seed << 32 | i) % n)
        }
        "uniform_three_layers" => {
            let n = UniformGraph.node_count();
            ns_config(device, seed, &[10, 10, 10], 256, |i| {
                mix(seed << 32 | i) % n
            })
        }
        "uniform_wide_fanout" => {
            let n = UniformGraph.node_count();
            ns_config(device, seed, &[25, 10], 1024, |i| mix(seed << 32 | i) % n)
        }
        "isp_repeated_neighbours" => {
            let first = UnitGraph::REPEAT + 4096 * u64::from(job % 2);
            ns_config(device, seed, &[32], 4096, |i| first + i)
        }
        "skewed_minibatch" | "skewed_sampled_ids" => {
            // Other seeds than the check minibatch's (0x5A9E_0000 on).
            let seed = seed ^ 0x7777_0000;
            let n = SkewedGraph.node_count();
            ns_config(device, seed, &[25, 10], 1024, |i| mix(seed << 32 | i) % n)
        }
        _ => ns_config(device, seed, &CHECK_FANOUTS, CHECK_TARGETS, |i| {
            check_target(seed, i)
        }),
    }
}

/// Writes an NS_config of `count` targets (`target(i)`) into the host buffer; returns its
/// length.
fn ns_config<K: Marks>(
    device: &mut Device<'_, K>,
    seed: u64,
    fanouts: &[u16],
    count: u64,
    target: impl Fn(u64) -> u64,
) -> Result<usize, CalibrateError> {
    let mut header = NsConfigHeader {
        magic: NS_CONFIG_MAGIC,
        version: NS_CONFIG_VERSION.into(),
        layer_count: fanouts.len() as u8,
        flags: 0,
        seed: seed.into(),
        fanouts: Default::default(),
        target_count: (count as u32).into(),
        minibatch_count: 0.into(),
    };
    for (slot, f) in header.fanouts.iter_mut().zip(fanouts).take(MAX_LAYERS) {
        *slot = (*f).into();
    }
    let head = header.as_bytes();
    let len = head.len() + 8 * count as usize;
    let buffer = device.buffer();
    if buffer.len() < len {
        return Err(CalibrateError::HostBuffer);
    }
    buffer[..head.len()].copy_from_slice(head);
    for i in 0..count {
        let at = head.len() + 8 * i as usize;
        buffer[at..at + 8].copy_from_slice(&target(i).to_le_bytes());
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoMarks;
    use sagessd_abi::ns_config::NsLimits;
    use sagessd_firmware::FirmwareConfig;
    use sagessd_firmware::hal::Geometry;
    use std::string::String;
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn every_workload_runs_and_reports() {
        let plan = Plan {
            arena_offset_bytes: 0,
            geometry: Geometry {
                channels: 8,
                ways: 8,
                dies_per_way: 1,
                blocks_per_die: 64,
                pages_per_block: 256,
                page_size_bytes: 16384,
            },
            config: FirmwareConfig {
                page_buffer_pages: 1024,
                isp_slots: 2,
                limits: NsLimits {
                    max_targets: 16_384,
                    max_fanout: 64,
                    max_minibatches: 1,
                },
                max_subgraph_nodes: 1 << 20,
                max_subgraph_edges: 1 << 21,
                max_transfer_bytes: 512 << 10,
                tunnel: false,
                ..FirmwareConfig::default()
            },
        };
        let mut memory = vec![0u8; 600 << 20];
        let mut out = String::new();
        run(&plan, &mut memory, 16 << 20, NoMarks, &mut out).unwrap();
        assert!(out.ends_with("calibrate done segments 54\n"), "{out}");
        // Each workload's line reads back, in order, with the segment after its preparation's.
        let reports: Vec<_> = out.lines().filter_map(parse_report).collect();
        assert_eq!(reports.len(), WORKLOADS.len());
        for (k, ((name, segment, work), w)) in reports.iter().zip(WORKLOADS).enumerate() {
            assert_eq!((*name, *segment), (w.name, 2 * k + 1));
            assert_eq!(segment_of(name), Some(*segment));
            assert!(work.values().iter().any(|v| *v > 0), "{name} did no work");
        }
        assert_eq!(
            parse_report("calibrate workload x segment 1 commands 2"),
            None
        );
    }
}
