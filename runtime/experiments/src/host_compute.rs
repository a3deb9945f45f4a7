//! The host's sampling compute costs (`[host] node_ns` and `edge_sampled_ns`) measured from
//! this machine's host sampler, the same way the firmware's calibration measures the
//! firmware's (what `sagessd validate host-compute` prints).
//!
//! Every host sampler builds its subgraphs with the one [`build_subgraph`] loop (the mmap,
//! direct and io_uring samplers feed it from the modelled page cache; the model charges their
//! compute as `node_ns` per destination and `edge_sampled_ns` per sampled neighbour, and their
//! graph loads apart, as memory accesses and page-cache work). This module runs that loop over
//! workloads that mix the two units in different proportions, on a graph whose adjacency is
//! computed rather than loaded (so that only the sampler's own work is measured), and:
//!
//! * counts the instructions of the sampling alone, exactly, under `valgrind --tool=callgrind`
//!   (repeatable whatever else the machine does), with callgrind's cache simulation of this
//!   machine's L1s and L2;
//! * turns them into time with [`HostTiming`]: a cost per instruction and per L2 miss;
//! * fits the cost per destination node and per sampled edge by least squares, and predicts a
//!   check workload it did not fit;
//! * times the same workloads natively (best of several runs), for the wall-clock fit beside the
//!   modelled one and a refit of [`HostTiming`]'s two costs.
//!
//! It needs the release build: a debug build's instructions are not the shipped sampler's.

use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;
use sagessd_emulator::HwConfig;
use sagessd_runtime::sampler::{
    EdgeRange, NeighbourSource, SampledSubgraph, SamplerError, build_subgraph,
};

use crate::calibrate_fit::{Equation, relative_least_squares};

/// How callgrind's counts become time on the host: a cost per instruction and per L2 miss
/// (callgrind simulates the L1s and, as its last level, the core's L2; every workload's data
/// fits in the L3, so an L2 miss is an L3 hit, which an out-of-order core partly overlaps). A
/// DRAM miss of the graph is the model's `memory_access_ns`, charged apart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostTiming {
    /// The core, for reports.
    pub cpu: &'static str,
    /// Bytes of each L1 (instruction, data).
    pub l1_bytes: u32,
    /// Ways of each L1.
    pub l1_ways: u32,
    /// Bytes of the core's private L2 (callgrind's last level).
    pub l2_bytes: u32,
    /// Ways of the L2.
    pub l2_ways: u32,
    /// Cache line bytes.
    pub line_bytes: u32,
    /// Nanoseconds per instruction when nothing misses the L2.
    pub ns_per_instruction: f64,
    /// Nanoseconds an L2 miss adds.
    pub ns_per_l2_miss: f64,
}

impl HostTiming {
    /// This project's machine kind: an AMD EPYC of family 25 model 17 (Zen 4, "Genoa") in a
    /// KVM guest; caches from `lscpu` (32 KiB L1I and L1D and 1 MiB L2 per core, 32 MiB L3) and
    /// AMD's Zen 4 figures (8-way L1s and L2, 64 B lines). The two costs are measured: the
    /// least-squares fit of the fitted workloads' best native runs to their instructions and L2
    /// misses on this machine kind (every workload within 13 % when they were set; the command
    /// refits them each run and prints the fit beside these).
    pub const ZEN4: Self = Self {
        cpu: "AMD EPYC (Zen 4)",
        l1_bytes: 32 << 10,
        l1_ways: 8,
        l2_bytes: 1 << 20,
        l2_ways: 8,
        line_bytes: 64,
        ns_per_instruction: 0.0713,
        ns_per_l2_miss: 6.35,
    };

    /// Nanoseconds of `run`.
    pub fn ns(&self, run: &Callgrind) -> f64 {
        run.instructions as f64 * self.ns_per_instruction
            + run.l2_misses as f64 * self.ns_per_l2_miss
    }
}

/// The neighbour lists of a calibration workload's graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Degree {
    /// Every node has this many neighbours.
    Uniform(u64),
    /// 1 to 127 neighbours, varying from node to node.
    Varied,
}

/// Whether a workload is fitted or held out to check the fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aim {
    /// Fitted.
    Fit,
    /// Held out: predicted by the fit.
    Check,
}

/// One calibration workload: one minibatch of `targets` random targets (large enough that a
/// minibatch's fixed cost, ~9 µs, is lost in it).
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Its name.
    pub name: &'static str,
    degree: Degree,
    fanouts: &'static [u16],
    targets: usize,
    /// Fitted, or held out.
    pub aim: Aim,
}

/// The workloads: one to fifty sampled edges per destination, on one to four hops, lists
/// shorter than their fanout (taken whole), and a held-out check shaped like training
/// (GraphSAGE's 15,10,5 on varied degrees). Each minibatch deduplicates 0.2–0.5 M nodes, as a
/// training minibatch on a large graph does: the deduplication table's cache misses are part of
/// the cost per unit, so every workload has a realistic one.
pub const WORKLOADS: [Workload; 7] = [
    Workload {
        name: "smartsage_minibatch",
        degree: Degree::Uniform(64),
        fanouts: &[25, 10],
        targets: 1024,
        aim: Aim::Fit,
    },
    Workload {
        name: "one_edge_per_node",
        degree: Degree::Uniform(64),
        fanouts: &[1, 1],
        targets: 65536,
        aim: Aim::Fit,
    },
    Workload {
        name: "two_edges_per_node",
        degree: Degree::Uniform(64),
        fanouts: &[2, 2],
        targets: 32768,
        aim: Aim::Fit,
    },
    Workload {
        name: "wide_fanout",
        degree: Degree::Uniform(64),
        fanouts: &[50],
        targets: 4096,
        aim: Aim::Fit,
    },
    Workload {
        name: "four_hops",
        degree: Degree::Uniform(64),
        fanouts: &[4, 4, 4, 4],
        targets: 512,
        aim: Aim::Fit,
    },
    Workload {
        name: "short_lists_taken_whole",
        degree: Degree::Uniform(4),
        fanouts: &[25, 25],
        targets: 16384,
        aim: Aim::Fit,
    },
    Workload {
        name: "check_graphsage_minibatch",
        degree: Degree::Varied,
        fanouts: &[15, 10, 5],
        targets: 512,
        aim: Aim::Check,
    },
];

/// Nodes of every workload's graph: enough that random targets and neighbours rarely repeat
/// (deduplication tables as large as a real graph's).
pub const NODE_COUNT: u64 = 1 << 24;

/// SplitMix64's finaliser: a node's degree and a position's neighbour, and the targets.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A graph whose adjacency is computed, not loaded: node `n`'s list starts at `n × 128` and a
/// position's neighbour is a hash of it. Its loads are a few instructions each, so the
/// sampler's own work is what a workload measures.
#[derive(Debug)]
struct ComputedGraph {
    degree: Degree,
}

impl ComputedGraph {
    fn degree_of(&self, node: u64) -> u64 {
        match self.degree {
            Degree::Uniform(d) => d,
            Degree::Varied => 1 + mix(node) % 127,
        }
    }
}

impl NeighbourSource for ComputedGraph {
    fn node_count(&self) -> u64 {
        NODE_COUNT
    }

    fn edge_ranges(&mut self, nodes: &[u64]) -> Result<Vec<EdgeRange>, SamplerError> {
        Ok(nodes
            .iter()
            .map(|&n| EdgeRange {
                start: n * 128,
                degree: self.degree_of(n),
            })
            .collect())
    }

    fn neighbours_at(&mut self, positions: &[u64]) -> Result<Vec<u64>, SamplerError> {
        Ok(positions.iter().map(|&p| mix(p) % NODE_COUNT).collect())
    }
}

/// The region callgrind counts (`--toggle-collect` names it): the workload's minibatch
/// sampled, as a host sampler's worker samples it.
#[inline(never)]
fn host_compute_measured_region(
    graph: &mut ComputedGraph,
    fanouts: &[u16],
    targets: &[u64],
) -> Result<SampledSubgraph, SamplerError> {
    build_subgraph(graph, 1, fanouts, targets)
}

/// What one run of a workload did, as its child process reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Destination nodes.
    pub dst_nodes: u64,
    /// Sampled edges.
    pub edges_sampled: u64,
    /// Wall-clock nanoseconds of each repetition.
    pub wall_ns: Vec<u64>,
}

impl Counts {
    /// The line a child prints.
    pub fn line(&self) -> String {
        let wall: Vec<String> = self.wall_ns.iter().map(u64::to_string).collect();
        format!(
            "dst_nodes={} edges_sampled={} wall_ns={}",
            self.dst_nodes,
            self.edges_sampled,
            wall.join(",")
        )
    }

    /// Reads [`Self::line`] back.
    pub fn parse(line: &str) -> anyhow::Result<Self> {
        let mut c = Counts::default();
        for field in line.split_whitespace() {
            let (key, value) = field
                .split_once('=')
                .with_context(|| format!("no key=value in {field:?}"))?;
            let number = |v: &str| -> anyhow::Result<u64> {
                v.parse().with_context(|| format!("{key}={v:?}"))
            };
            match key {
                "dst_nodes" => c.dst_nodes = number(value)?,
                "edges_sampled" => c.edges_sampled = number(value)?,
                "wall_ns" => {
                    c.wall_ns = value.split(',').map(number).collect::<Result<_, _>>()?;
                }
                _ => anyhow::bail!("unknown field {key:?} in {line:?}"),
            }
        }
        anyhow::ensure!(
            c.dst_nodes > 0 && !c.wall_ns.is_empty(),
            "incomplete workload report {line:?}"
        );
        Ok(c)
    }
}

/// The workload's random targets, the same in every run.
fn targets(w: &Workload) -> Vec<u64> {
    (0..w.targets as u64)
        .map(|t| mix(t ^ 0x5eed) % NODE_COUNT)
        .collect()
}

/// Runs workload `name` `repeat` times in this process (what the child that
/// [`measure_all`]'s `workload_command` starts must do, printing [`Counts::line`] last).
pub fn run_workload(name: &str, repeat: u32) -> anyhow::Result<Counts> {
    let w = WORKLOADS
        .iter()
        .find(|w| w.name == name)
        .with_context(|| format!("no host-compute workload {name:?}"))?;
    let targets = targets(w);
    let mut graph = ComputedGraph { degree: w.degree };
    let mut counts = Counts::default();
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        let subgraph = host_compute_measured_region(&mut graph, w.fanouts, &targets)?;
        counts.wall_ns.push(started.elapsed().as_nanos() as u64);
        counts.dst_nodes = subgraph.dst_node_count();
        counts.edges_sampled = subgraph.edge_count();
    }
    Ok(counts)
}

/// What callgrind counted in the measured region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Callgrind {
    /// Instructions.
    pub instructions: u64,
    /// L1 instruction, data-read and data-write misses.
    pub l1_misses: u64,
    /// L2 (callgrind's last level) misses of the three.
    pub l2_misses: u64,
}

impl Callgrind {
    /// Reads a callgrind output file's `events:` and `totals:` (or `summary:`) lines.
    fn parse(text: &str) -> anyhow::Result<Self> {
        let events: Vec<&str> = text
            .lines()
            .find_map(|l| l.strip_prefix("events:"))
            .context("no events: line")?
            .split_whitespace()
            .collect();
        let totals: Vec<u64> = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("totals:")
                    .or_else(|| l.strip_prefix("summary:"))
            })
            .context("no totals: line")?
            .split_whitespace()
            .map(|v| v.parse().with_context(|| format!("total {v:?}")))
            .collect::<anyhow::Result<_>>()?;
        let get = |name: &str| -> anyhow::Result<u64> {
            let i = events
                .iter()
                .position(|e| *e == name)
                .with_context(|| format!("no {name} event (cache simulation off?)"))?;
            // Trailing zero totals may be left out.
            Ok(totals.get(i).copied().unwrap_or(0))
        };
        let c = Callgrind {
            instructions: get("Ir")?,
            l1_misses: get("I1mr")? + get("D1mr")? + get("D1mw")?,
            l2_misses: get("ILmr")? + get("DLmr")? + get("DLmw")?,
        };
        anyhow::ensure!(
            c.instructions > 0,
            "callgrind counted no instructions in the measured region"
        );
        Ok(c)
    }
}

/// Runs workload `name` natively (`runs` repetitions) and under callgrind (one), each in the
/// child `workload_command(name, runs)` gives.
fn measure(
    workload_command: &dyn Fn(&str, u32) -> Command,
    name: &str,
    runs: u32,
    timing: &HostTiming,
) -> anyhow::Result<(Counts, Callgrind)> {
    let child = |cmd: &mut Command| -> anyhow::Result<Counts> {
        let out = cmd
            .output()
            .with_context(|| format!("running {:?}", cmd.get_program()))?;
        anyhow::ensure!(
            out.status.success(),
            "workload {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        Counts::parse(stdout.lines().last().unwrap_or_default())
    };
    let native = child(&mut workload_command(name, runs))?;
    let once = workload_command(name, 1);
    let dir = std::env::temp_dir().join(format!("sagessd-host-compute-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{name}.callgrind"));
    let cache = |bytes: u32, ways: u32| format!("{bytes},{ways},{}", timing.line_bytes);
    let traced = child(
        Command::new("valgrind")
            .args([
                "--tool=callgrind",
                "--cache-sim=yes",
                "--collect-atstart=no",
            ])
            .arg("--toggle-collect=*host_compute_measured_region*")
            .arg(format!("--I1={}", cache(timing.l1_bytes, timing.l1_ways)))
            .arg(format!("--D1={}", cache(timing.l1_bytes, timing.l1_ways)))
            .arg(format!("--LL={}", cache(timing.l2_bytes, timing.l2_ways)))
            .arg(format!("--callgrind-out-file={}", file.display()))
            .arg(once.get_program())
            .args(once.get_args()),
    )
    .context("valgrind (Debian's valgrind; scripts/setup.sh installs it)")?;
    anyhow::ensure!(
        (traced.dst_nodes, traced.edges_sampled) == (native.dst_nodes, native.edges_sampled),
        "workload {name} did different work under callgrind"
    );
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let profile = Callgrind::parse(&text).with_context(|| format!("{}", file.display()))?;
    Ok((native, profile))
}

/// One workload's measurement.
#[derive(Debug)]
pub struct Measured {
    /// The workload.
    pub workload: &'static Workload,
    /// What it did.
    pub counts: Counts,
    /// What callgrind counted.
    pub profile: Callgrind,
    /// Modelled from the profile.
    pub ns: f64,
    /// The best native run.
    pub wall_ns: f64,
}

/// Least squares over the fitted workloads: the costs of the units `units` counts that best
/// make `y` (relative error, every workload weighing the same).
fn fit<const K: usize>(
    measured: &[Measured],
    units: impl Fn(&Measured) -> [f64; K],
    y: impl Fn(&Measured) -> f64,
) -> anyhow::Result<[f64; K]> {
    let rows: Vec<Equation> = measured
        .iter()
        .filter(|m| m.workload.aim == Aim::Fit)
        .map(|m| Equation {
            counts: units(m).to_vec(),
            value: y(m),
            scale: y(m),
        })
        .collect();
    let c = relative_least_squares(&rows)?;
    Ok(std::array::from_fn(|i| c[i]))
}

/// A workload's destination nodes and sampled edges: the units `[host]` prices.
fn sampling_units(m: &Measured) -> [f64; 2] {
    [m.counts.dst_nodes as f64, m.counts.edges_sampled as f64]
}

/// `m`'s units priced at `costs` (per destination node, per sampled edge).
pub fn priced(m: &Measured, costs: &[f64; 2]) -> f64 {
    let [nodes, edges] = sampling_units(m);
    nodes * costs[0] + edges * costs[1]
}

/// What [`measure_all`] measured and fitted.
#[derive(Debug)]
pub struct HostCompute {
    /// How counts became time.
    pub timing: HostTiming,
    /// Each workload.
    pub measured: Vec<Measured>,
    /// [`HostTiming`]'s two costs (per instruction, per L2 miss) refitted to this run's best
    /// native times, ns.
    pub live_timing: [f64; 2],
    /// The costs per destination node and per sampled edge fitted to the modelled times, ns.
    pub modelled: [f64; 2],
    /// The same fitted to the wall clock, ns.
    pub wall: [f64; 2],
    /// The same in instructions.
    pub instructions: [f64; 2],
    /// The description's `node_ns` and `edge_sampled_ns`.
    pub configured: [u64; 2],
    /// The costs the description holds more than 5 % (and 1 ns) off the measured ones.
    pub stale: Vec<String>,
}

/// Measures every workload (natively `runs` times, and under callgrind) in the children
/// `workload_command(name, runs)` gives, which run [`run_workload`] in the build to be measured
/// (it must be a release build), and fits the costs against `hw`'s.
pub fn measure_all(
    hw: &HwConfig,
    runs: u32,
    workload_command: &dyn Fn(&str, u32) -> Command,
) -> anyhow::Result<HostCompute> {
    anyhow::ensure!(
        !cfg!(debug_assertions),
        "validate host-compute measures the release build's sampler: run it from \
         `cargo build --release -p sagessd-cli` (target/release/sagessd)"
    );
    anyhow::ensure!(runs >= 1, "runs must be at least 1");
    let timing = HostTiming::ZEN4;
    let mut measured = Vec::with_capacity(WORKLOADS.len());
    for w in &WORKLOADS {
        let (counts, profile) = measure(workload_command, w.name, runs, &timing)?;
        let wall_ns = *counts.wall_ns.iter().min().expect("parsed non-empty") as f64;
        measured.push(Measured {
            workload: w,
            counts,
            ns: timing.ns(&profile),
            profile,
            wall_ns,
        });
    }
    let profile_units = |m: &Measured| [m.profile.instructions as f64, m.profile.l2_misses as f64];
    let live_timing = fit(&measured, profile_units, |m| m.wall_ns)?;
    let modelled = fit(&measured, sampling_units, |m| m.ns)?;
    let wall = fit(&measured, sampling_units, |m| m.wall_ns)?;
    let instructions = fit(&measured, sampling_units, |m| m.profile.instructions as f64)?;
    let configured = [hw.host.node_ns, hw.host.edge_sampled_ns];
    let stale = ["host.node_ns", "host.edge_sampled_ns"]
        .iter()
        .enumerate()
        .filter_map(|(i, field)| {
            let m = modelled[i].round().max(0.0) as u64;
            let c = configured[i];
            (m.abs_diff(c) > 1 && m.abs_diff(c) * 100 > 5 * m)
                .then(|| format!("{field} = {c} (measured {m})"))
        })
        .collect();
    Ok(HostCompute {
        timing,
        measured,
        live_timing,
        modelled,
        wall,
        instructions,
        configured,
        stale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_report_reads_back() {
        let c = run_workload("four_hops", 2).unwrap();
        assert_eq!(c.wall_ns.len(), 2);
        // 512 targets, then each hop's new nodes, are the hops' destinations: 4 edges each.
        assert!(c.dst_nodes > 512 * (1 + 4 + 16 + 64));
        assert_eq!(c.edges_sampled, 4 * c.dst_nodes);
        assert_eq!(Counts::parse(&c.line()).unwrap(), c);
        assert!(Counts::parse("dst_nodes=1 wall_ns=").is_err());
        assert!(Counts::parse("dst_nodes=1 bogus=2 wall_ns=5").is_err());
        assert!(run_workload("nope", 1).is_err());
    }

    #[test]
    fn every_workload_is_named_once_and_the_fit_has_enough_of_them() {
        for (i, w) in WORKLOADS.iter().enumerate() {
            assert!(
                WORKLOADS[..i].iter().all(|o| o.name != w.name),
                "{}",
                w.name
            );
        }
        let fitted = WORKLOADS.iter().filter(|w| w.aim == Aim::Fit).count();
        assert!(fitted > 2 && WORKLOADS.iter().any(|w| w.aim == Aim::Check));
    }

    #[test]
    fn callgrind_totals_are_read_by_event_name() {
        let text = "version: 1\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n\
                    fn=foo\n0 1 2\ntotals: 1000 300 100 5 40 10 1 7\n";
        let c = Callgrind::parse(text).unwrap();
        // DLmw is left out of the totals: zero.
        assert_eq!(
            c,
            Callgrind {
                instructions: 1000,
                l1_misses: 55,
                l2_misses: 8
            }
        );
        let t = HostTiming::ZEN4;
        assert_eq!(
            t.ns(&c),
            1000.0 * t.ns_per_instruction + 8.0 * t.ns_per_l2_miss
        );
        assert!(Callgrind::parse("events: Ir\ntotals: 10\n").is_err());
        assert!(Callgrind::parse("events: Ir I1mr D1mr D1mw ILmr DLmr DLmw\ntotals: 0\n").is_err());
    }

    #[test]
    fn the_workloads_tell_nodes_from_edges() {
        // The workloads' real counts, priced at known costs: the fit must find them again.
        let truth = [40.0, 25.0];
        let measured: Vec<Measured> = WORKLOADS
            .iter()
            .map(|w| {
                let counts = run_workload(w.name, 1).unwrap();
                let ns =
                    counts.dst_nodes as f64 * truth[0] + counts.edges_sampled as f64 * truth[1];
                Measured {
                    workload: w,
                    counts,
                    profile: Callgrind::default(),
                    ns,
                    wall_ns: ns,
                }
            })
            .collect();
        let got = fit(&measured, sampling_units, |m| m.ns).unwrap();
        for (g, t) in got.iter().zip(truth) {
            assert!((g - t).abs() < 1e-6 * t, "{got:?} vs {truth:?}");
        }
    }
}
