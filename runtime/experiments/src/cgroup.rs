//! What `sagessd validate host` needs from the Linux kernel to run a real sampler in a known
//! amount of page cache: a memory cgroup (v1: `/sys/fs/cgroup/memory`) with a limit, dropped
//! caches, and the block device's `read_ahead_kb`. All of them need root; [`available`] says
//! why not when they cannot be used, so callers can refuse (or skip, loudly).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where the cgroup v1 memory controller is mounted.
pub const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// Whether memory cgroups can be made here: `Err(why)` if not (not root, no v1 memory
/// controller).
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: memory cgroups and drop_caches need root".into());
    }
    if !Path::new(MEMORY_ROOT)
        .join("memory.limit_in_bytes")
        .exists()
    {
        return Err(format!(
            "no cgroup v1 memory controller at {MEMORY_ROOT} (memory.limit_in_bytes missing)"
        ));
    }
    Ok(())
}

/// A memory cgroup with a limit on what its processes may hold (anonymous memory and page
/// cache together), removed when dropped.
#[derive(Debug)]
pub struct MemoryCgroup {
    path: PathBuf,
    limit_bytes: u64,
}

impl MemoryCgroup {
    /// Creates cgroup `name` under [`MEMORY_ROOT`] with a limit of `limit_bytes`.
    pub fn create(name: &str, limit_bytes: u64) -> io::Result<Self> {
        let path = Path::new(MEMORY_ROOT).join(name);
        std::fs::create_dir_all(&path)?;
        let cg = Self { path, limit_bytes };
        std::fs::write(
            cg.path.join("memory.limit_in_bytes"),
            limit_bytes.to_string(),
        )?;
        Ok(cg)
    }

    /// The file a process joins the group through (write its pid).
    pub fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// A counter of `memory.stat` (bytes), e.g. `cache` or `rss`.
    pub fn stat(&self, key: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.path.join("memory.stat")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// What its processes hold now, page cache included (`memory.usage_in_bytes`).
    pub fn usage(&self) -> Option<u64> {
        std::fs::read_to_string(self.path.join("memory.usage_in_bytes"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The page cache the group held while the kernel had to reclaim to stay under the limit:
    /// the mean of `memory.stat`'s `cache` over samples taken every `period` until `done` is
    /// set, counting only those in which the usage was within [`AT_LIMIT_SLACK_BYTES`] of the
    /// limit; `None` if fewer than [`MIN_SAMPLES_AT_LIMIT`] were (the cache never had to give
    /// pages up, or too briefly for a mean to stand for the run). This, not the
    /// cache left when the processes are gone, is the size an LRU of fixed size stands for:
    /// a process whose anonymous memory grows as it runs shrinks the cache under it, and frees
    /// room at its end that its last faults fill.
    pub fn mean_cache_at_limit(&self, period: Duration, done: &AtomicBool) -> Option<u64> {
        let floor = self.limit_bytes.saturating_sub(AT_LIMIT_SLACK_BYTES);
        let (mut sum, mut samples) = (0u128, 0u64);
        while !done.load(Ordering::Acquire) {
            if self.usage().is_some_and(|u| u >= floor)
                && let Some(cache) = self.stat("cache")
            {
                sum += u128::from(cache);
                samples += 1;
            }
            std::thread::sleep(period);
        }
        (samples >= MIN_SAMPLES_AT_LIMIT).then(|| (sum / u128::from(samples)) as u64)
    }
}

/// How near its limit a group's usage must be for [`MemoryCgroup::mean_cache_at_limit`] to
/// count it as reclaiming: reclaim frees pages in batches (32 at a time) ahead of the charges
/// that need them, so the usage of a group at its limit stays a little under it (measured
/// here: within 256 KiB in nearly every 5 ms sample of an r = 8 run).
pub const AT_LIMIT_SLACK_BYTES: u64 = 2 << 20;

/// Fewest samples at the limit for [`MemoryCgroup::mean_cache_at_limit`] to give a mean.
pub const MIN_SAMPLES_AT_LIMIT: u64 = 10;

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Its processes have exited; what they cached moves to the parent on removal.
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Writes dirty pages back and drops the clean page cache, dentries and inodes
/// (`/proc/sys/vm/drop_caches`), so that the next run starts cold.
pub fn drop_caches() -> io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
}

/// The `read_ahead_kb` file of the block device holding `file` (its queue, or its parent
/// disk's for a partition).
pub fn read_ahead_file(file: &Path) -> io::Result<PathBuf> {
    let dev = std::fs::metadata(file)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    [
        sys.join("queue/read_ahead_kb"),
        sys.join("../queue/read_ahead_kb"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no read_ahead_kb for device {major}:{minor} of {}",
                file.display()
            ),
        )
    })
}

/// A device's `read_ahead_kb` set for a while: restored when dropped.
#[derive(Debug)]
pub struct ReadAheadGuard {
    path: PathBuf,
    old: String,
}

impl ReadAheadGuard {
    /// Sets `path` (a `read_ahead_kb` file) to `kb`, remembering what it was.
    pub fn set(path: PathBuf, kb: u32) -> io::Result<Self> {
        let old = std::fs::read_to_string(&path)?.trim().to_owned();
        std::fs::write(&path, kb.to_string())?;
        Ok(Self { path, old })
    }
}

impl Drop for ReadAheadGuard {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.old);
    }
}

/// The `read_ahead_kb` in `path` now.
pub fn read_ahead_kb(path: &Path) -> io::Result<u32> {
    std::fs::read_to_string(path)?.trim().parse().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}
