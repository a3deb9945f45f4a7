//! The modelled host against the real kernel (`sagessd validate host`): the counts Linux reports
//! for a real-file sampler (pages read, major and minor faults, reads) and the counts the host
//! model predicts for the same graph, minibatches, page cache and `read_ahead_kb`.
//!
//! The real side runs `sagessd sample` in a memory cgroup (the CLI does that, [`crate::cgroup`]);
//! this module holds the model's side and the comparison.

use std::sync::Arc;

use sagessd_emulator::host_stack::{HostStackConfig, PAGE_SIZE_BYTES};
use sagessd_emulator::synthetic_graph::SyntheticGraph;
use sagessd_emulator::{HwConfig, Ssd};
use sagessd_host_driver::{Device, LocalTransport};

use sagessd_runtime::host_io::HostIoSampler;
use sagessd_runtime::minibatch::Request;
use sagessd_runtime::registry::SamplerKind;
use sagessd_runtime::sampler::SamplerError;

/// What a sampler's storage I/O amounted to, as the kernel (or the model) counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounts {
    /// 4 KiB pages read from storage.
    pub pages_read: u64,
    /// Reads (I/O requests) issued.
    pub reads: u64,
    /// Major page faults (mmap only).
    pub major_faults: Option<u64>,
    /// Minor page faults (mmap only).
    pub minor_faults: Option<u64>,
}

/// The model's counts for sampling `requests` (fanouts `fanouts`, `workers` workers, minibatch
/// `i` on worker `i mod workers`) with `mode` on a device of `hw` holding the synthetic `graph`,
/// the host being `host` (its page cache, `read_ahead_kb` and `mmap_workers` set to the real
/// run's).
pub fn modelled(
    hw: &HwConfig,
    graph: Arc<SyntheticGraph>,
    mode: SamplerKind,
    host: HostStackConfig,
    fanouts: &[u16],
    requests: &[Request],
    workers: usize,
) -> Result<IoCounts, SamplerError> {
    let corrupt = |e: String| SamplerError::GraphCorrupt(e);
    let (ssd, desc, _) =
        Ssd::with_synthetic_graph(hw, graph, 0).map_err(|e| corrupt(e.to_string()))?;
    let device = Device::open(LocalTransport::new(ssd))?;
    let mut s = HostIoSampler::new(device, desc, mode, host)?;
    s.run_workers(workers.max(1), fanouts, requests)?;
    let st = s.host_stats();
    let mmap = mode == SamplerKind::Mmap;
    Ok(IoCounts {
        pages_read: st.bytes_read / PAGE_SIZE_BYTES,
        reads: st.ios,
        major_faults: mmap.then_some(st.page_cache.misses),
        minor_faults: mmap.then_some(st.page_cache.minor_faults),
    })
}

impl IoCounts {
    /// Both runs' counts together (several processes' shares of one run).
    pub fn plus(self, other: Self) -> Self {
        Self {
            pages_read: self.pages_read + other.pages_read,
            reads: self.reads + other.reads,
            major_faults: sum_present(self.major_faults, other.major_faults),
            minor_faults: sum_present(self.minor_faults, other.minor_faults),
        }
    }
}

/// The sum of two counts where either may be absent (absent + x = x; both absent: absent).
pub fn sum_present(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, y) => x.or(y),
    }
}

/// `modelled / real` (1 when both are 0; `None` when only the real one is).
pub fn ratio(real: u64, modelled: u64) -> Option<f64> {
    match (real, modelled) {
        (0, 0) => Some(1.0),
        (0, _) => None,
        (r, m) => Some(m as f64 / r as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_emulator::synthetic_graph::SyntheticSpec;
    use sagessd_runtime::minibatch::minibatch_requests;

    /// The model's counts are its statistics: a direct run reads whole blocks of what it needs,
    /// an mmap run's faults read whole windows (here the graph fits the cache: every page once).
    #[test]
    fn modelled_counts_come_from_the_host_model() {
        let hw = HwConfig::cosmos_plus();
        let g = Arc::new(SyntheticGraph::new(SyntheticSpec::cnr_2000_like(50_000, 1)).unwrap());
        let requests = minibatch_requests(1, 2, 64, g.node_count());
        let csr_pages = (g.indptr_bytes() + g.indices_bytes()).div_ceil(PAGE_SIZE_BYTES);
        let host = HostStackConfig {
            page_cache_bytes: 1 << 30,
            ..HostStackConfig::default()
        };
        let m = modelled(
            &hw,
            g.clone(),
            SamplerKind::Mmap,
            host.clone(),
            &[10, 5],
            &requests,
            1,
        )
        .unwrap();
        assert!(m.major_faults.unwrap() > 0 && m.reads >= m.major_faults.unwrap());
        assert!(
            m.pages_read <= csr_pages + 2,
            "{m:?}: a page is read at most once"
        );
        let d = modelled(&hw, g, SamplerKind::Direct, host, &[10, 5], &requests, 1).unwrap();
        assert_eq!((d.major_faults, d.minor_faults), (None, None));
        assert!(d.pages_read >= d.reads && d.reads > 0);
        assert_eq!(ratio(0, 0), Some(1.0));
        assert_eq!(ratio(0, 3), None);
        assert_eq!(ratio(4, 3), Some(0.75));
    }
}
