//! Which targets each minibatch gets, and in what order: a seeded random permutation of a node
//! pool (the training nodes), or BGL's proximity-aware order of it. A minibatch is a (seed,
//! targets) request; its seed is a function of the run's seed and the minibatch's index over
//! the whole run, so every sampler, worker count and transport samples the same subgraphs.

use crate::compare::minibatch_seed;
use crate::ooc::features::bgl_order;
use crate::rng::SplitMix64;
use crate::sampler::HostGraph;

/// One minibatch to sample: the sampling seed and the targets.
pub type Request = (u64, Vec<u64>);

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
            Ok((minibatch_seed(seed, index), t.to_vec()))
        })
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
                e.iter().map(|r| r.1.len()).collect::<Vec<_>>(),
                [32, 32, 32, 4]
            );
            let mut all: Vec<u64> = e.iter().flat_map(|r| r.1.clone()).collect();
            all.sort_unstable();
            assert_eq!(all, pool);
        }
        assert_ne!(e0[0].1, e1[0].1);
        assert_ne!(e0[0].0, e1[0].0, "minibatch seeds follow the global index");
        assert_eq!(
            e0,
            epoch_requests(Order::Random, &pool, 32, 7, 0, 0, None).unwrap()
        );
        assert!(epoch_requests(Order::Bgl, &pool, 32, 7, 0, 0, None).is_err());
        assert!(epoch_requests(Order::Random, &pool, 0, 7, 0, 0, None).is_err());
    }
}
