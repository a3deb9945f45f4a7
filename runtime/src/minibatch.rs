//! Minibatch drawing, in one place: which targets each minibatch gets and in what order, and
//! its sampling seed. A run's minibatches are drawn at random from the graph's nodes
//! ([`minibatch_requests`]: what compare, sample, validate, the footprints and the experiments
//! sample); a training epoch's are a seeded random permutation of a node pool (the training
//! nodes) or BGL's proximity-aware order of it ([`epoch_requests`], [`bgl_order`]). A
//! minibatch's seed is a function of the run's seed and its index over the whole run, so every
//! sampler, worker count and transport samples the same subgraphs.

use std::collections::{HashSet, VecDeque};

use sagessd_abi::ns_config::MinibatchRequest;
use sagessd_abi::sample::mix;

use crate::graph::HostGraph;
use crate::rng::SplitMix64;

/// One minibatch to sample: its sampling seed and its targets.
/// Ordered as the (seed, targets) pair is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    /// The sampling seed.
    pub seed: u64,
    /// The target nodes.
    pub targets: Vec<u64>,
}

impl Request {
    /// The minibatch of `targets` sampled with `seed`.
    pub fn new(seed: u64, targets: Vec<u64>) -> Self {
        Self { seed, targets }
    }
}

/// How the host driver encodes it into an NS_config, with no copy of its targets.
impl MinibatchRequest for Request {
    fn seed(&self) -> u64 {
        self.seed
    }

    fn targets(&self) -> &[u64] {
        &self.targets
    }
}

/// BFS sequences BGL's order interleaves.
pub const BGL_SEQUENCES: usize = 8;

/// The order in which a pool's nodes become minibatch targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Order {
    /// A seeded random permutation per epoch.
    Random,
    /// BGL's proximity-aware order (randomised BFS sequences, round robin), new each epoch.
    Bgl,
}

impl Order {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::Bgl => "bgl",
        }
    }

    /// Whether it needs the graph (BGL's BFS does, as BGL computes it offline): in memory, or
    /// a synthetic graph computed where it is read.
    pub fn needs_graph(self) -> bool {
        self == Self::Bgl
    }
}

/// The requests of epoch `epoch`: `pool` in this order, cut into minibatches of `batch_size`
/// (the last one shorter), the first minibatch's global index `first_index` (its seed comes
/// from it). `graph` is needed for [`Order::Bgl`]; `None` there is an error.
pub fn epoch_requests(
    order: Order,
    pool: &[u64],
    batch_size: usize,
    seed: u64,
    epoch: u32,
    first_index: u32,
    graph: Option<HostGraph<'_>>,
) -> Result<Vec<Request>, String> {
    if batch_size == 0 {
        return Err("a minibatch needs at least one target".into());
    }
    let epoch_seed = SplitMix64::stream(seed, u64::from(epoch)).next_u64();
    let nodes = match order {
        Order::Random => {
            let mut nodes = pool.to_vec();
            SplitMix64::new(epoch_seed).shuffle(&mut nodes);
            nodes
        }
        Order::Bgl => {
            let graph = graph.ok_or("BGL's order needs the graph")?;
            bgl_order(graph, pool, BGL_SEQUENCES, epoch_seed)
        }
    };
    nodes
        .chunks(batch_size)
        .enumerate()
        .map(|(i, t)| {
            let index = u32::try_from(i)
                .ok()
                .and_then(|i| first_index.checked_add(i))
                .ok_or("more minibatches than 32-bit indices")?;
            Ok(Request::new(minibatch_seed(seed, index), t.to_vec()))
        })
        .collect()
}

/// The sampling seed of minibatch `batch` under the run seed `seed`.
pub fn minibatch_seed(seed: u64, batch: u32) -> u64 {
    mix(seed ^ mix(u64::from(batch) + 1))
}

/// The `batches` minibatches of a run with seed `seed` over a graph of `node_count` nodes: each
/// one's [`minibatch_seed`] and [`minibatch_targets`]. Every command that samples "the run's
/// minibatches" (compare, sample, validate, footprint, the experiments) draws them here.
pub fn minibatch_requests(
    seed: u64,
    batches: u32,
    batch_size: u32,
    node_count: u64,
) -> Vec<Request> {
    (0..batches)
        .map(|b| Request {
            seed: minibatch_seed(seed, b),
            targets: minibatch_targets(seed, b, batch_size, node_count),
        })
        .collect()
}

/// The targets of minibatch `batch`: `batch_size` nodes drawn from `0..node_count` with the run
/// seed, distinct while the graph has enough nodes (then the distinct draw repeats cyclically).
pub fn minibatch_targets(seed: u64, batch: u32, batch_size: u32, node_count: u64) -> Vec<u64> {
    let mut rng = SplitMix64::stream(seed, u64::from(batch));
    let distinct = u64::from(batch_size).min(node_count) as usize;
    let mut drawn: Vec<u64> = Vec::with_capacity(batch_size as usize);
    if distinct as u64 * 2 > node_count {
        let mut all: Vec<u64> = (0..node_count).collect();
        rng.shuffle(&mut all);
        drawn.extend_from_slice(&all[..distinct]);
    } else {
        let mut seen = HashSet::with_capacity(distinct);
        while drawn.len() < distinct {
            let v = rng.below(node_count);
            if seen.insert(v) {
                drawn.push(v);
            }
        }
    }
    let mut out = drawn.clone();
    while out.len() < batch_size as usize && !drawn.is_empty() {
        let need = batch_size as usize - out.len();
        out.extend_from_slice(&drawn[..need.min(drawn.len())]);
    }
    out
}

/// BGL's proximity-aware order of `nodes` (the training nodes): `sequences` BFS traversals of
/// `graph` from random roots each claim the nodes they reach first; the order takes one node
/// from each sequence in turn (round robin), each sequence rotated by a random shift, so that a
/// minibatch of consecutive nodes holds a few neighbourhoods rather than scattered nodes.
pub fn bgl_order(graph: HostGraph<'_>, nodes: &[u64], sequences: usize, seed: u64) -> Vec<u64> {
    let n = graph.node_count() as usize;
    let mut wanted = vec![false; n];
    for &v in nodes {
        if let Some(w) = wanted.get_mut(v as usize) {
            *w = true;
        }
    }
    let mut rng = SplitMix64::new(seed);
    let mut seen = vec![false; n];
    let sequences = sequences.max(1);
    let mut seqs: Vec<Vec<u64>> = vec![Vec::new(); sequences];
    let mut queues: Vec<VecDeque<u64>> = vec![VecDeque::new(); sequences];
    let mut list = Vec::new();
    let mut left: Vec<u64> = nodes.to_vec();
    rng.shuffle(&mut left);
    let mut next_root = left.into_iter();
    // The traversals advance in lockstep, one node each per step, so they claim comparable
    // regions; a sequence whose queue empties restarts from an unseen node.
    loop {
        let mut progressed = false;
        for s in 0..sequences {
            if queues[s].is_empty() {
                match next_root
                    .by_ref()
                    .find(|r| seen.get(*r as usize).is_some_and(|s| !s))
                {
                    Some(r) => {
                        seen[r as usize] = true;
                        queues[s].push_back(r);
                    }
                    None => continue,
                }
            }
            if let Some(v) = queues[s].pop_front() {
                progressed = true;
                if wanted[v as usize] {
                    seqs[s].push(v);
                }
                graph.neighbours_into(v, &mut list);
                for &u in &list {
                    if !seen[u as usize] {
                        seen[u as usize] = true;
                        queues[s].push_back(u64::from(u));
                    }
                }
            }
        }
        if !progressed {
            break;
        }
    }
    for seq in &mut seqs {
        if !seq.is_empty() {
            let shift = (rng.next_u64() % seq.len() as u64) as usize;
            seq.rotate_left(shift);
        }
    }
    let longest = seqs.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| seqs.iter().filter_map(move |s| s.get(i).copied()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pool_node_is_a_target_once_per_epoch_and_epochs_differ() {
        let pool: Vec<u64> = (10..110).collect();
        let e0 = epoch_requests(Order::Random, &pool, 32, 7, 0, 0, None).unwrap();
        let e1 = epoch_requests(Order::Random, &pool, 32, 7, 1, 4, None).unwrap();
        for e in [&e0, &e1] {
            assert_eq!(
                e.iter().map(|r| r.targets.len()).collect::<Vec<_>>(),
                [32, 32, 32, 4]
            );
            let mut all: Vec<u64> = e.iter().flat_map(|r| r.targets.clone()).collect();
            all.sort_unstable();
            assert_eq!(all, pool);
        }
        assert_ne!(e0[0].targets, e1[0].targets);
        assert_ne!(
            e0[0].seed, e1[0].seed,
            "minibatch seeds follow the global index"
        );
        assert_eq!(
            e0,
            epoch_requests(Order::Random, &pool, 32, 7, 0, 0, None).unwrap()
        );
        assert!(epoch_requests(Order::Bgl, &pool, 32, 7, 0, 0, None).is_err());
        assert!(epoch_requests(Order::Random, &pool, 0, 7, 0, 0, None).is_err());
    }

    #[test]
    fn targets_are_deterministic_distinct_and_in_range() {
        let a = minibatch_targets(3, 0, 100, 1000);
        assert_eq!(a, minibatch_targets(3, 0, 100, 1000));
        assert_ne!(a, minibatch_targets(3, 1, 100, 1000));
        assert_eq!(a.len(), 100);
        assert_eq!(a.iter().collect::<HashSet<_>>().len(), 100);
        assert!(a.iter().all(|t| *t < 1000));
        // More targets than nodes: every node once, then repeats.
        let b = minibatch_targets(3, 0, 10, 4);
        assert_eq!(b.len(), 10);
        assert_eq!(b[..4].iter().collect::<HashSet<_>>().len(), 4);
        assert_eq!(&b[4..8], &b[..4]);
        // The dense path (more than half the nodes).
        let c = minibatch_targets(3, 2, 60, 100);
        assert_eq!(c.iter().collect::<HashSet<_>>().len(), 60);
    }

    #[test]
    fn bgl_order_is_a_permutation_with_neighbourhoods_together() {
        let g = crate::rmat::generate(&crate::rmat::RmatParams::graph500(10, 4, 4)).unwrap();
        let train: Vec<u64> = (0..g.node_count()).filter(|v| g.degree(*v) > 0).collect();
        let order = bgl_order(HostGraph::Csr(&g), &train, 4, 9);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, train);
        assert_eq!(
            order,
            bgl_order(HostGraph::Csr(&g), &train, 4, 9),
            "deterministic"
        );
    }

    /// Over a synthetic graph (computed where it is read, as at papers100M's size) the order is
    /// the one over the same lists held as a CSR, and another BFS seed gives another order.
    #[test]
    fn bgl_order_over_a_synthetic_graph_equals_it_over_its_csr() {
        use sagessd_emulator::synthetic_graph::{SyntheticGraph, SyntheticSpec};
        let syn = SyntheticGraph::new(SyntheticSpec::cnr_2000_like(5_000, 3)).unwrap();
        let mut edges = Vec::new();
        let mut list = Vec::new();
        for v in 0..syn.node_count() {
            syn.neighbours_into(v, &mut list);
            edges.extend(list.iter().map(|&u| (v as u32, u)));
        }
        let csr = crate::graph::CsrGraph::from_edges(syn.node_count(), &edges).unwrap();
        let train: Vec<u64> = (0..syn.node_count()).step_by(3).collect();
        let order = bgl_order(HostGraph::Synthetic(&syn), &train, 8, 1);
        assert_eq!(order, bgl_order(HostGraph::Csr(&csr), &train, 8, 1));
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, train);
        assert_ne!(order, bgl_order(HostGraph::Synthetic(&syn), &train, 8, 2));
    }
}
