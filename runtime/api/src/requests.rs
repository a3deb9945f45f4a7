//! Which minibatches a run samples: seeded random targets from all nodes (the comparisons'
//! workload), or BGL's proximity-aware order of the training nodes; and one worker's share of
//! them (worker `w` of `n` takes minibatches `w`, `w + n`, …, as modelled workers do).

use sagessd_runtime::dataset::{Dataset, Split};
use sagessd_runtime::graph::HostGraph;
use sagessd_runtime::minibatch::{Order, epoch_requests, minibatch_requests};

use crate::{Error, Request};

/// `batches` minibatches of `batch_size` targets drawn from the `node_count` nodes with `seed`
/// (minibatch `b`'s sampling seed and targets depend on `seed` and `b` only).
pub fn random(seed: u64, batches: u32, batch_size: u32, node_count: u64) -> Vec<Request> {
    minibatch_requests(seed, batches, batch_size, node_count)
}

/// The run's `batches` minibatches of `batch_size` targets: for [`Order::Random`], [`random`]
/// ones from all nodes (the comparisons' workload, splits ignored); for BGL's order, the first
/// of an epoch over the training nodes (all nodes without a split), which reads the graph into
/// memory.
pub fn in_order(
    dataset: &Dataset,
    order: Order,
    batches: u32,
    batch_size: u32,
    seed: u64,
) -> Result<Vec<Request>, Error> {
    if order == Order::Random {
        return Ok(random(
            seed,
            batches,
            batch_size,
            dataset.manifest.node_count,
        ));
    }
    let graph = order.needs_graph().then(|| dataset.graph()).transpose()?;
    let train = match dataset.split(Split::Train)? {
        Some(ids) => ids,
        None => (0..dataset.manifest.node_count).collect(),
    };
    let mut requests = epoch_requests(
        order,
        &train,
        batch_size as usize,
        seed,
        0,
        0,
        graph.as_ref().map(HostGraph::Csr),
    )
    .map_err(Error::Invalid)?;
    requests.truncate(batches as usize);
    Ok(requests)
}

/// Worker `offset`'s share of `requests` among `stride` workers; an error names the flags
/// when the share is empty.
pub fn share(requests: Vec<Request>, stride: u32, offset: u32) -> Result<Vec<Request>, Error> {
    if stride == 0 || offset >= stride {
        return Err(Error::invalid(format!(
            "--batch-offset {offset} must be below --batch-stride {stride} (≥ 1)"
        )));
    }
    let total = requests.len();
    let mine: Vec<Request> = requests
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 % u64::from(stride) == u64::from(offset))
        .map(|(_, r)| r)
        .collect();
    if mine.is_empty() {
        return Err(Error::invalid(format!(
            "--batch-offset {offset} of --batch-stride {stride} selects none of the {total} \
             minibatches"
        )));
    }
    Ok(mine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_partition_the_minibatches() {
        let all = random(3, 10, 4, 100);
        assert_eq!(all, random(3, 10, 4, 100));
        assert_ne!(all, random(4, 10, 4, 100));
        let mut union: Vec<Request> = (0..3)
            .flat_map(|w| share(all.clone(), 3, w).unwrap())
            .collect();
        assert_eq!(union.len(), 10);
        union.sort();
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(union, sorted);
        assert_eq!(share(all.clone(), 3, 1).unwrap()[0], all[1]);
        assert!(share(all.clone(), 3, 3).is_err());
        let e = share(all[..1].to_vec(), 2, 1).unwrap_err().to_string();
        assert!(e.contains("selects none"), "{e}");
    }
}
