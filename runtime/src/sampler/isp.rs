//! The in-storage sampler: the device samples each minibatch (or hyperbatch) through the host
//! driver; the host may build the subgraph from sampled ids.

use crate::minibatch::Request;
use sagessd_host_driver::{Device, DeviceCounters, DriverStats, Returns, Transport};

use super::host_build::HostBuilder;
use super::{SampledSubgraph, Sampler, SamplerError, SamplerStats};

/// Measures the driver, device and clock around one minibatch.
struct Meter {
    driver: DriverStats,
    device: Option<DeviceCounters>,
    start_ns: Option<u64>,
}

impl Meter {
    fn start<T: Transport>(device: &Device<T>) -> Self {
        Self {
            driver: device.stats(),
            device: device.device_counters(),
            start_ns: device.now_ns(),
        }
    }

    fn finish<T: Transport>(self, device: &Device<T>, stats: &mut SamplerStats) {
        let d = device.stats().since(&self.driver);
        stats.add_counters(&d, self.device.zip(device.device_counters()));
        if let (Some(start), Some(end)) = (self.start_ns, device.last_completed_at_ns())
            && d.commands > 0
        {
            let elapsed = end.saturating_sub(start);
            stats.modelled_time_ns = Some(stats.modelled_time_ns.unwrap_or(0) + elapsed);
        }
    }
}

/// The in-storage (ISP) sampler: the device samples the whole minibatch; the host sends one
/// `NS_SUBMIT` and one `NS_COLLECT` (plus one retry if its first buffer was too small). With
/// hyperbatches ([`Self::with_hyperbatch`]), [`Sampler::sample_many`] sends one `NS_SUBMIT` per
/// hyperbatch, so that the device reads each flash page once per hop for all its minibatches.
///
/// With [`Self::with_host_build`], the device returns each minibatch's sampled ids
/// ([`sagessd_abi::sampled_ids`]) and the host builds the subgraph from them
/// ([`crate::sampler::host_build`]): the same bytes, with the last layer's deduplication and the
/// relabelling moved from the device's core to the host's.
#[derive(Debug)]
pub struct IspSampler<T: Transport> {
    device: Device<T>,
    stats: SamplerStats,
    hyperbatch: usize,
    host_build: Option<HostBuilder>,
}

impl<T: Transport> IspSampler<T> {
    /// A sampler over `device`, on which a graph must be attached.
    pub fn new(device: Device<T>) -> Self {
        Self {
            device,
            stats: SamplerStats::default(),
            hyperbatch: 1,
            host_build: None,
        }
    }

    /// The same sampler, with the host building each subgraph from the sampled ids the device
    /// returns instead of the device building it.
    pub fn with_host_build(mut self) -> Self {
        let node_count = self.device.attached_graph().map_or(0, |g| g.node_count);
        self.host_build = Some(HostBuilder::new(node_count));
        self
    }

    /// Turns what the device returned for `requests` into subgraphs (building them on the host
    /// from sampled ids, with [`Self::with_host_build`]), counting them.
    fn finish(
        &mut self,
        fanouts: &[u16],
        requests: &[Request],
        results: Vec<Vec<u8>>,
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        let node_count = self.device.attached_graph().map_or(0, |g| g.node_count);
        let mut out = Vec::with_capacity(results.len());
        for (Request { seed, targets }, bytes) in requests.iter().zip(results) {
            self.stats.collected_bytes += bytes.len() as u64;
            let s = match &mut self.host_build {
                Some(host) => {
                    let t = std::time::Instant::now();
                    let s = host.build(&bytes, node_count, *seed, fanouts, targets);
                    self.stats.host_build_ns += t.elapsed().as_nanos() as u64;
                    s?
                }
                None => SampledSubgraph::from_bytes(bytes)?,
            };
            self.stats.add_subgraph(&s);
            out.push(s);
        }
        Ok(out)
    }

    /// The same sampler, whose [`Sampler::sample_many`] samples up to `minibatches` at once as
    /// an in-storage hyperbatch (1: one NS_config per minibatch).
    pub fn with_hyperbatch(mut self, minibatches: usize) -> Self {
        self.hyperbatch = minibatches.max(1);
        self
    }

    /// The device.
    pub fn device(&self) -> &Device<T> {
        &self.device
    }

    /// Gives the device back.
    pub fn into_device(self) -> Device<T> {
        self.device
    }
}

impl<T: Transport + Send> Sampler for IspSampler<T> {
    fn name(&self) -> &'static str {
        match (self.hyperbatch > 1, self.host_build.is_some()) {
            (true, true) => "ISP hyperbatch, host-built",
            (true, false) => "ISP hyperbatch",
            (false, true) => "ISP, host-built",
            (false, false) => "ISP",
        }
    }

    fn sample(
        &mut self,
        seed: u64,
        fanouts: &[u16],
        targets: &[u64],
    ) -> Result<SampledSubgraph, SamplerError> {
        let request = [Request::new(seed, targets.to_vec())];
        let meter = Meter::start(&self.device);
        let result = if self.host_build.is_some() {
            self.device.sample_many_sampled_ids(fanouts, &request, 1)
        } else {
            self.device.sample(seed, fanouts, targets).map(|b| vec![b])
        };
        meter.finish(&self.device, &mut self.stats);
        let mut out = self.finish(fanouts, &request, result?)?;
        out.pop()
            .ok_or_else(|| SamplerError::InvalidRequest("no subgraph came back".into()))
    }

    fn sample_many(
        &mut self,
        fanouts: &[u16],
        requests: &[Request],
    ) -> Result<Vec<SampledSubgraph>, SamplerError> {
        if self.hyperbatch == 1 {
            return requests
                .iter()
                .map(|Request { seed, targets }| self.sample(*seed, fanouts, targets))
                .collect();
        }
        let returns = if self.host_build.is_some() {
            Returns::SampledIds
        } else {
            Returns::Subgraph
        };
        let mut out = Vec::with_capacity(requests.len());
        for group in requests.chunks(self.hyperbatch) {
            let meter = Meter::start(&self.device);
            let result = self.device.sample_hyperbatch(fanouts, group, returns);
            meter.finish(&self.device, &mut self.stats);
            out.extend(self.finish(fanouts, group, result?)?);
        }
        Ok(out)
    }

    fn stats(&self) -> SamplerStats {
        self.stats
    }
}
