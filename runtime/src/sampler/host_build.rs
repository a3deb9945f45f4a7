//! The host's half of in-storage sampling with sampled ids ([`sagessd_abi::sampled_ids`]): the
//! device returns each layer's sampled neighbours as global ids, and the host deduplicates them,
//! relabels them to local ids and lays out the subgraph, through the same [`SubgraphBuilder`]
//! every host sampler uses, so the result is byte-identical to the reference's.

use sagessd_abi::sampled_ids::{SampledCounts, SampledIdsLayout, SampledIdsView};
use sagessd_abi::subgraph::SubgraphError;

use super::{NodeIndex, SampledSubgraph, SamplerError, SubgraphBuilder};

/// Builds subgraphs from sampled ids, keeping its node index and buffers from one minibatch to
/// the next (so that they stop growing after the first).
#[derive(Debug, Default)]
pub struct HostBuilder {
    index: Option<NodeIndex>,
    indptr: Vec<u32>,
    ids: Vec<u64>,
}

impl HostBuilder {
    /// A builder for minibatches of a graph of `node_count` nodes.
    pub fn new(node_count: u64) -> Self {
        Self {
            index: Some(NodeIndex::for_minibatches(node_count)),
            ..Self::default()
        }
    }

    /// The subgraph of the minibatch (`seed`, `fanouts`, `targets`) of a graph of `node_count`
    /// nodes whose sampled ids are `bytes`. An error if the bytes are not valid sampled ids of
    /// that request: another seed or layer count, a layer whose destinations are not the ones
    /// the targets and the earlier layers give, a row longer than its fanout, an id past the
    /// node count.
    pub fn build(
        &mut self,
        bytes: &[u8],
        node_count: u64,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let view = SampledIdsView::parse(bytes).map_err(SamplerError::Subgraph)?;
        if view.seed() != seed || view.layer_count() != fanouts.len() {
            return Err(SamplerError::Subgraph(SubgraphError::Inconsistent(
                "seed/layers",
            )));
        }
        let index = self
            .index
            .take()
            .unwrap_or_else(|| NodeIndex::for_minibatches(node_count));
        let mut b = SubgraphBuilder::with_index(node_count, seed, fanouts, targets, index)?;
        for l in 0..view.layer_count() {
            let layer = view.layer(l);
            let dst = b.destinations().map_or(0, <[u64]>::len);
            if layer.counts.dst_count as usize != dst {
                return Err(SamplerError::Subgraph(SubgraphError::Inconsistent(
                    "dst_count",
                )));
            }
            self.indptr.clear();
            self.indptr.extend(layer.indptr.iter().map(|p| p.get()));
            self.ids.clear();
            self.ids
                .extend(layer.ids.iter().map(|id| u64::from(id.get())));
            b.set_sampled(&self.indptr, &self.ids)?;
        }
        let (result, index) = b.finish_with_index();
        self.index = Some(index);
        result
    }
}

/// The sampled ids a device returns for the minibatch whose subgraph is `sub`: each layer's
/// `indptr` as it is, and each local source index replaced by its node's global id. Written
/// from the subgraph's own node list, independently of [`HostBuilder`] (its inverse): what
/// benchmarks and tests feed the build without a device.
pub fn sampled_ids_of(sub: &SampledSubgraph) -> Result<Vec<u8>, SamplerError> {
    let v = sub.view();
    let nodes = v.nodes();
    let counts: Vec<SampledCounts> = (0..v.layer_count())
        .map(|l| SampledCounts {
            dst_count: v.layer(l).counts.dst_count,
            edge_count: v.layer(l).counts.edge_count,
        })
        .collect();
    let too_large = || SamplerError::Subgraph(SubgraphError::Inconsistent("total_size_bytes"));
    let layout = SampledIdsLayout::new(&counts).ok_or_else(too_large)?;
    let mut out = vec![0u8; layout.total_size_bytes()];
    layout
        .write_head(v.seed(), &mut out)
        .ok_or_else(too_large)?;
    for l in 0..v.layer_count() {
        let layer = v.layer(l);
        let mut at = layout.indptr_offset(l);
        let ids = layer.indices.iter().map(|i| {
            // A parsed subgraph's indices are below its node count, and the device's ids fit
            // 32 bits.
            nodes
                .get(i.get() as usize)
                .map_or(u32::MAX, |n| n.get() as u32)
        });
        for w in layer.indptr.iter().map(|p| p.get()).chain(ids) {
            out[at..at + 4].copy_from_slice(&w.to_le_bytes());
            at += 4;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::CsrGraph;
    use crate::sampler::{ReferenceSampler, Sampler};

    fn graph() -> CsrGraph {
        crate::rmat::generate(&crate::rmat::RmatParams::graph500(10, 8, 7)).unwrap()
    }

    #[test]
    fn the_host_build_is_byte_identical_to_the_reference() {
        let g = graph();
        let mut reference = ReferenceSampler::new(&g);
        let mut host = HostBuilder::new(g.node_count());
        for (seed, fanouts, targets) in [
            (1u64, vec![5u16, 3], vec![0u64, 7, 7, 900, 3]),
            (2, vec![10], vec![1]),
            (3, vec![2, 2, 2], (0..64).collect()),
        ] {
            let want = reference.sample(seed, &fanouts, &targets).unwrap();
            let bytes = sampled_ids_of(&want).unwrap();
            let got = host
                .build(&bytes, g.node_count(), seed, &fanouts, &targets)
                .unwrap();
            assert!(want == got, "seed {seed}");
        }
    }

    #[test]
    fn sampled_ids_of_another_request_or_a_corrupt_device_are_refused() {
        let g = graph();
        let (seed, fanouts, targets) = (5u64, vec![4u16, 2], vec![3u64, 9, 11]);
        let want = ReferenceSampler::new(&g)
            .sample(seed, &fanouts, &targets)
            .unwrap();
        let good = sampled_ids_of(&want).unwrap();
        let n = g.node_count();
        let mut host = HostBuilder::new(n);
        let build = |host: &mut HostBuilder, bytes: &[u8], seed, fanouts: &[u16], t: &[u64]| {
            host.build(bytes, n, seed, fanouts, t).map(|_| ())
        };
        assert!(build(&mut host, &good, seed, &fanouts, &targets).is_ok());
        // Another seed, fanouts of another length, other targets (another destination count).
        assert!(build(&mut host, &good, seed + 1, &fanouts, &targets).is_err());
        assert!(build(&mut host, &good, seed, &fanouts[..1], &targets).is_err());
        assert!(build(&mut host, &good, seed, &fanouts, &targets[..2]).is_err());
        // An id past the node count (the first id of layer 0).
        let v = want.view();
        let first_id = 32 + 8 * 2 + 4 * (v.layer(0).counts.dst_count as usize + 1);
        let mut past = good.clone();
        past[first_id..first_id + 4].copy_from_slice(&(n as u32).to_le_bytes());
        assert!(matches!(
            build(&mut host, &past, seed, &fanouts, &targets),
            Err(SamplerError::GraphCorrupt(_))
        ));
        // The builder recovers: the next minibatch is right again.
        assert!(build(&mut host, &good, seed, &fanouts, &targets).is_ok());
        // A row longer than its fanout, and too few rows.
        let mut b = SubgraphBuilder::new(n, seed, &fanouts, &targets).unwrap();
        let dst = b.destinations().unwrap().len();
        let five: Vec<u32> = std::iter::once(0)
            .chain(std::iter::repeat_n(5, dst))
            .collect();
        assert!(matches!(
            b.set_sampled(&five, &[1, 2, 3, 4, 5]),
            Err(SamplerError::GraphCorrupt(_))
        ));
        assert!(matches!(
            b.set_sampled(&[0, 1], &[1]),
            Err(SamplerError::GraphCorrupt(_))
        ));
    }

    #[test]
    fn a_wrong_relabelling_is_caught_by_the_reference() {
        // What the byte-identity tests rely on: a host build that relabels one edge wrongly
        // gives bytes the reference does not.
        let g = graph();
        let (seed, fanouts, targets) = (9u64, vec![6u16, 3], vec![2u64, 40, 41]);
        let want = ReferenceSampler::new(&g)
            .sample(seed, &fanouts, &targets)
            .unwrap();
        let mut bytes = sampled_ids_of(&want).unwrap();
        // Swap the first two ids of layer 0 whose nodes differ.
        let v = want.view();
        let base = 32 + 8 * 2 + 4 * (v.layer(0).counts.dst_count as usize + 1);
        let (a, b) = (base, base + 4);
        assert_ne!(
            bytes[a..a + 4],
            bytes[b..b + 4],
            "pick a graph with distinct ids"
        );
        let tmp: Vec<u8> = bytes[a..a + 4].to_vec();
        bytes.copy_within(b..b + 4, a);
        bytes[b..b + 4].copy_from_slice(&tmp);
        let got = HostBuilder::new(g.node_count())
            .build(&bytes, g.node_count(), seed, &fanouts, &targets)
            .unwrap();
        assert!(want != got);
    }
}
