//! Real SIGKILLs (what `sagessd device kill-test` runs): the NVMe/TCP target serving a device
//! image is killed at random moments under a write load, restarted on the same image, and
//! every write it acknowledged must read back. The power-cut campaign (`device crash-test`)
//! cuts a simulated device at chosen points inside the firmware; this one kills the real
//! process, so what it checks is the whole path: the NVMe/TCP target, the device thread, the
//! image file and the boot from it.
//!
//! Each write fills one block with a pattern of its LBA and a version number, one write in
//! flight at a time (a Flush every [`FLUSH_EVERY`] writes). After a restart each LBA written
//! must hold its last acknowledged version, or the version in flight when the process died
//! (neither the device nor the host knows whether that one was programmed).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use sagessd_host_driver::{Device, TcpOptions, TcpTransport};
use sagessd_runtime::rng::SplitMix64;

/// Writes between Flushes.
pub const FLUSH_EVERY: u64 = 64;

/// A target process the campaign can start on its image and kill.
pub trait KillableTarget {
    /// Starts the target on its device image (booting from it if it exists); returns the
    /// address it serves NVMe/TCP on.
    fn start(&mut self) -> anyhow::Result<String>;
    /// Kills it with SIGKILL (no clean stop) and waits until it is gone.
    fn kill(&mut self) -> anyhow::Result<()>;
}

/// How the campaign runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Kills.
    pub kills: u32,
    /// Seed of the LBAs written and of the moments of the kills.
    pub seed: u64,
    /// LBAs the writes fall in, from LBA 0.
    pub lbas: u64,
    /// Each run's load lasts between these before its kill.
    pub run_between: (Duration, Duration),
    /// The subsystem NQN the target serves.
    pub nqn: String,
}

/// What the campaign did and found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Kills done (each followed by a restart and a check).
    pub kills: u32,
    /// Writes the target acknowledged, in all.
    pub writes_acknowledged: u64,
    /// Flushes it acknowledged.
    pub flushes: u64,
    /// Kills with a write in flight.
    pub in_flight_at_kill: u64,
    /// LBAs read back and checked, over all restarts.
    pub lbas_checked: u64,
    /// Acknowledged writes not found after a restart: "kill K: LBA L holds …".
    pub lost: Vec<String>,
}

/// The writes' state, shared with the writer thread.
#[derive(Debug, Default)]
struct Written {
    /// Per LBA, the last acknowledged version (0: never written).
    acked: Vec<u32>,
    /// The write in flight: (LBA, version).
    in_flight: Option<(u64, u32)>,
    writes: u64,
    flushes: u64,
}

/// The block of `lba` at `version` (`block_bytes` long): 8-byte words of the seed, LBA and
/// version mixed with the word's index, so that no two blocks or versions match.
fn pattern(seed: u64, lba: u64, version: u32, block_bytes: usize) -> Vec<u8> {
    let key = sagessd_abi::sample::mix(seed ^ (lba << 20) ^ u64::from(version));
    (0..block_bytes / 8)
        .flat_map(|i| sagessd_abi::sample::mix(key ^ i as u64).to_le_bytes())
        .collect()
}

fn connect(addr: &str, nqn: &str) -> anyhow::Result<Device<TcpTransport>> {
    let options = TcpOptions {
        command_timeout: Some(Duration::from_secs(30)),
        ..TcpOptions::new(nqn)
    };
    let transport =
        TcpTransport::connect(addr, &options).with_context(|| format!("connecting to {addr}"))?;
    Ok(Device::open(transport)?)
}

/// Runs the campaign on `target`, telling `progress` after each kill.
pub fn run(
    target: &mut dyn KillableTarget,
    s: &Settings,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<KillReport> {
    anyhow::ensure!(s.lbas > 0, "no LBAs to write");
    anyhow::ensure!(
        s.run_between.0 <= s.run_between.1,
        "the shortest run is longer than the longest"
    );
    let lbas = usize::try_from(s.lbas).context("the LBAs")?;
    let written = Arc::new(Mutex::new(Written {
        acked: vec![0; lbas],
        ..Written::default()
    }));
    let mut rng = SplitMix64::new(s.seed);
    let mut report = KillReport::default();
    let mut addr = target.start()?;
    for kill in 1..=s.kills {
        // The load: one write in flight, from a thread that ends at the first error (the
        // target is gone).
        let device = connect(&addr, &s.nqn)?;
        let block_bytes = device.info().block_size_bytes as usize;
        anyhow::ensure!(
            s.lbas <= device.info().block_count,
            "{} LBAs asked for; the namespace has {}",
            s.lbas,
            device.info().block_count
        );
        let writer = {
            let (written, seed, writer_seed) = (Arc::clone(&written), s.seed, rng.next_u64());
            std::thread::spawn(move || {
                write_until_gone(device, &written, seed, writer_seed, block_bytes)
            })
        };
        let span = s.run_between.1 - s.run_between.0;
        let ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        let wait = s.run_between.0 + Duration::from_millis(rng.next_u64() % ms.saturating_add(1));
        std::thread::sleep(wait);
        target.kill()?;
        let _ = writer.join();
        let in_flight = lock(&written).in_flight.take();
        report.in_flight_at_kill += u64::from(in_flight.is_some());
        // Restart on the image, read back every LBA written.
        addr = target.start()?;
        let mut device = connect(&addr, &s.nqn)?;
        let acked = lock(&written).acked.clone();
        // The region read back in transfers of the largest size, then checked block by block.
        let chunk = u64::from(device.info().max_transfer_blocks());
        let mut region = Vec::with_capacity(acked.len() * block_bytes);
        for start in (0..s.lbas).step_by(chunk as usize) {
            region.extend(device.read(start, chunk.min(s.lbas - start))?);
        }
        for (lba, (&version, got)) in acked.iter().zip(region.chunks(block_bytes)).enumerate() {
            let lba = lba as u64;
            let flying = in_flight.filter(|f| f.0 == lba).map(|f| f.1);
            if version == 0 && flying.is_none() {
                continue;
            }
            report.lbas_checked += 1;
            let matches = |v: u32| got == pattern(s.seed, lba, v, block_bytes);
            let unwritten = version == 0 && got.iter().all(|b| *b == 0);
            if matches(version) || flying.is_some_and(matches) || unwritten {
                // A write in flight that did land is now the LBA's version.
                if let Some(v) = flying.filter(|v| matches(*v)) {
                    lock(&written).acked[lba as usize] = v;
                }
                continue;
            }
            report.lost.push(format!(
                "kill {kill}: LBA {lba} does not hold its acknowledged version {version}{}",
                flying.map_or(String::new(), |v| format!(" (nor version {v}, in flight)"))
            ));
        }
        drop(device);
        report.kills = kill;
        let w = lock(&written);
        report.writes_acknowledged = w.writes;
        report.flushes = w.flushes;
        progress(&format!(
            "kill {kill}/{}: after {:.0} ms of load; {} writes acknowledged so far, {} LBAs checked, {} lost",
            s.kills,
            wait.as_secs_f64() * 1e3,
            w.writes,
            report.lbas_checked,
            report.lost.len()
        ));
    }
    target.kill()?;
    Ok(report)
}

fn lock(w: &Mutex<Written>) -> std::sync::MutexGuard<'_, Written> {
    w.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes random LBAs, one at a time, until the target is gone.
fn write_until_gone(
    mut device: Device<TcpTransport>,
    written: &Mutex<Written>,
    seed: u64,
    writer_seed: u64,
    block_bytes: usize,
) {
    let mut rng = SplitMix64::new(writer_seed);
    loop {
        let (lba, version) = {
            let mut w = lock(written);
            let lba = rng.next_u64() % w.acked.len() as u64;
            let version = w.acked[lba as usize] + 1;
            w.in_flight = Some((lba, version));
            (lba, version)
        };
        if device
            .write(lba, &pattern(seed, lba, version, block_bytes))
            .is_err()
        {
            return;
        }
        let mut w = lock(written);
        w.acked[lba as usize] = version;
        w.in_flight = None;
        w.writes += 1;
        if w.writes.is_multiple_of(FLUSH_EVERY) {
            drop(w);
            if device.flush().is_err() {
                return;
            }
            lock(written).flushes += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sagessd_emulator::{HwConfig, Ssd, Target, TargetOptions};

    /// An in-process target whose "kill" stops it and whose restart serves either the same
    /// device (nothing lost) or a blank one (every write lost): the campaign must tell them.
    struct InProcess {
        target: Option<Target>,
        kept: Option<Ssd>,
        forget: bool,
    }

    impl KillableTarget for InProcess {
        fn start(&mut self) -> anyhow::Result<String> {
            let ssd = match self.kept.take() {
                Some(ssd) if !self.forget => ssd,
                _ => Ssd::new(&HwConfig::cosmos_plus())?,
            };
            let target = Target::start(ssd, "127.0.0.1:0", TargetOptions::default())?;
            let addr = target.local_addr().to_string();
            self.target = Some(target);
            Ok(addr)
        }

        fn kill(&mut self) -> anyhow::Result<()> {
            if let Some(t) = self.target.take() {
                self.kept = Some(t.stop());
            }
            Ok(())
        }
    }

    fn campaign(forget: bool) -> KillReport {
        let mut target = InProcess {
            target: None,
            kept: None,
            forget,
        };
        let settings = Settings {
            kills: 2,
            seed: 3,
            lbas: 256,
            run_between: (Duration::from_millis(30), Duration::from_millis(60)),
            nqn: TargetOptions::default().nqn,
        };
        run(&mut target, &settings, &mut |_| {}).unwrap()
    }

    #[test]
    fn a_target_that_keeps_its_writes_passes_and_one_that_forgets_them_is_caught() {
        let kept = campaign(false);
        assert_eq!(kept.kills, 2);
        assert!(
            kept.writes_acknowledged > 0 && kept.lbas_checked > 0,
            "{kept:?}"
        );
        assert!(kept.lost.is_empty(), "{:?}", kept.lost);
        let forgot = campaign(true);
        assert!(
            !forgot.lost.is_empty(),
            "a blank device after each kill: {forgot:?}"
        );
    }

    #[test]
    fn patterns_differ_by_lba_and_version() {
        let a = pattern(1, 5, 1, 512);
        assert_eq!(a.len(), 512);
        assert_ne!(a, pattern(1, 5, 2, 512));
        assert_ne!(a, pattern(1, 6, 1, 512));
        assert_eq!(a, pattern(1, 5, 1, 512));
    }
}
