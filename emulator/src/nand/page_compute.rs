//! Computed flash pages worked out ahead of their polls, on the machine's other cores.
//!
//! A synthetic graph's page costs ~16 ns an entry to compute (65 µs for a 16 KiB page), which
//! is most of the wall time of a simulation that reads many of them (mmap's read-around moves
//! tens of GiB at papers100M scale). The contents are a pure function of the page
//! ([`PageRead`]), so the array starts a [`PageJob`] when a read of a computed page is issued,
//! helper threads fill it while the simulation runs on, and the poll that delivers the page
//! takes the result — or, if no helper has started it yet, fills it itself.
//!
//! Pages read whole are also kept, up to a budget of memory that the process's devices share
//! ([`memo_budget_bytes`]): the samplers that read whole pages re-read them (mmap's evicted
//! read-around windows, AGNES's blocks once per hop and hyperbatch), and a kept page costs a
//! copy instead of a computation for any read of it. The pages kept are the first ones read
//! whole (a scan larger than the budget would flush an LRU before any reuse).
//!
//! Only wall time changes: which bytes a read returns and every modelled time are the same with
//! or without helpers and kept pages.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;

use rustc_hash::FxHashMap;

use sagessd_firmware::hal::Sectors;

use super::synthetic::PageRead;

/// Most helper threads a pool starts.
pub const MAX_HELPERS: usize = 8;

/// Where a job is.
#[derive(Debug)]
enum JobState {
    /// Waiting for a thread.
    Queued,
    /// Being filled by some thread.
    Running,
    /// Filled: a page window holding at least the read's sectors and the spare.
    Done(Arc<[u8]>),
    /// Delivered.
    Taken,
}

/// One computed page's read, on its way.
#[derive(Debug)]
pub struct PageJob {
    read: PageRead,
    window_bytes: usize,
    kept: Arc<KeptPages>,
    state: Mutex<JobState>,
    done: Condvar,
}

impl PageJob {
    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims the job if nobody has: `true` if the caller must now fill it.
    fn claim(&self) -> bool {
        let mut state = self.lock();
        let queued = matches!(*state, JobState::Queued);
        if queued {
            *state = JobState::Running;
        }
        queued
    }

    /// Fills the job's window (the caller claimed it) and wakes a waiting poll.
    fn run(&self) {
        let mut window = vec![0u8; self.window_bytes];
        self.read.fill(&mut window);
        let window: Arc<[u8]> = window.into();
        // Whole-page reads are kept: a sampler that reads whole pages (mmap's read-around
        // windows, AGNES's blocks) reads them again; column reads rarely (keeping their
        // pages measured slower than computing them again).
        if self.read.sectors() == Sectors::ALL {
            self.kept.keep(self.read.lpn(), &window);
        }
        *self.lock() = JobState::Done(window);
        self.done.notify_all();
    }

    /// The window, if filled (then the job is delivered).
    fn try_take(&self) -> Option<Arc<[u8]>> {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, JobState::Taken) {
            JobState::Done(window) => Some(window),
            other => {
                *state = other;
                None
            }
        }
    }
}

/// Whole computed pages kept by logical page, up to a budget of pages and, for the devices of
/// [`PagePool::for_this_machine`], within the process's budget of bytes.
#[derive(Debug)]
struct KeptPages {
    pages: Mutex<FxHashMap<u32, Arc<[u8]>>>,
    budget_pages: usize,
    process: Option<&'static ProcessBudget>,
}

impl KeptPages {
    fn lock(&self) -> MutexGuard<'_, FxHashMap<u32, Arc<[u8]>>> {
        self.pages.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Page `lpn`'s window, if kept.
    fn get(&self, lpn: u32) -> Option<Arc<[u8]>> {
        self.lock().get(&lpn).cloned()
    }

    /// Keeps page `lpn`'s whole `window` if there is room.
    fn keep(&self, lpn: u32, window: &Arc<[u8]>) {
        let mut pages = self.lock();
        if pages.len() < self.budget_pages
            && !pages.contains_key(&lpn)
            && self.process.is_none_or(|p| p.reserve(window.len() as u64))
        {
            pages.insert(lpn, Arc::clone(window));
        }
    }
}

impl Drop for KeptPages {
    fn drop(&mut self) {
        if let Some(process) = self.process {
            process.release(self.lock().values().map(|w| w.len() as u64).sum());
        }
    }
}

/// What every device of the process may keep together (so that devices built side by side,
/// as tests are, do not each take the budget).
#[derive(Debug)]
struct ProcessBudget {
    limit_bytes: u64,
    used_bytes: AtomicU64,
}

impl ProcessBudget {
    /// The process's budget: [`memo_budget_bytes`] when the first device asked.
    fn get() -> &'static Self {
        static BUDGET: OnceLock<ProcessBudget> = OnceLock::new();
        BUDGET.get_or_init(|| Self {
            limit_bytes: memo_budget_bytes(),
            used_bytes: AtomicU64::new(0),
        })
    }

    /// Takes `bytes` of the budget if they are left.
    fn reserve(&self, bytes: u64) -> bool {
        self.used_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.limit_bytes)
            })
            .is_ok()
    }

    /// Gives `bytes` back.
    fn release(&self, bytes: u64) {
        self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Most memory the computed pages of the process's devices keep by default, 1.5 GiB: so that an
/// experiment at papers100M scale fits a 4 GiB budget beside its graph (a run that can spare
/// more sets `SAGESSD_COMPUTED_PAGES_MIB`).
pub const DEFAULT_MEMO_CAP_BYTES: u64 = 1536 << 20;

/// The memory the computed pages of the process's devices may keep: `SAGESSD_COMPUTED_PAGES_MIB`
/// if set (0: none), else a quarter of the memory Linux reports available (`MemAvailable`) up to
/// [`DEFAULT_MEMO_CAP_BYTES`], else none.
pub fn memo_budget_bytes() -> u64 {
    if let Some(mib) = std::env::var("SAGESSD_COMPUTED_PAGES_MIB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return mib.saturating_mul(1 << 20);
    }
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| (kib * 1024 / 4).min(DEFAULT_MEMO_CAP_BYTES))
}

/// The queue the helpers share.
#[derive(Debug, Default)]
struct Queue {
    jobs: VecDeque<Arc<PageJob>>,
    closing: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A helper's loop: fill queued jobs until the pool closes.
    fn serve(&self) {
        loop {
            let job = {
                let mut queue = self.lock();
                loop {
                    if queue.closing {
                        return;
                    }
                    if let Some(job) = queue.jobs.pop_front() {
                        break job;
                    }
                    queue = self
                        .work
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            if job.claim() {
                job.run();
            }
        }
    }
}

/// Helper threads that fill computed pages ahead of their polls.
#[derive(Debug)]
pub struct PagePool {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    kept: Arc<KeptPages>,
}

impl PagePool {
    /// A pool of `helpers` threads (at most [`MAX_HELPERS`]; 0: every job is filled by the
    /// poll that takes it) that keeps up to `keep_pages` whole pages. A helper that cannot be
    /// spawned is left out.
    pub fn new(helpers: usize, keep_pages: usize) -> Self {
        Self::keeping(helpers, keep_pages, None)
    }

    /// A pool of `helpers` threads keeping up to `keep_pages` within `process`'s budget, if
    /// any.
    fn keeping(helpers: usize, keep_pages: usize, process: Option<&'static ProcessBudget>) -> Self {
        let shared = Arc::new(Shared::default());
        let helpers = (0..helpers.min(MAX_HELPERS))
            .filter_map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("sagessd-page-{i}"))
                    .spawn(move || shared.serve())
                    .ok()
            })
            .collect();
        let kept = Arc::new(KeptPages {
            pages: Mutex::default(),
            budget_pages: keep_pages,
            process,
        });
        Self {
            shared,
            helpers,
            kept,
        }
    }

    /// A pool with one helper per core beyond the caller's, keeping what is left of the
    /// process's budget ([`memo_budget_bytes`], shared by every device built so).
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        Self::keeping(cores - 1, usize::MAX, Some(ProcessBudget::get()))
    }

    /// Pages kept now.
    pub fn kept_count(&self) -> usize {
        self.kept.lock().len()
    }

    /// Helper threads running.
    pub fn helper_count(&self) -> usize {
        self.helpers.len()
    }

    /// Starts filling `read` into a window of `window_bytes`.
    pub fn start(&self, read: PageRead, window_bytes: usize) -> Arc<PageJob> {
        let kept = self.kept.get(read.lpn());
        let job = Arc::new(PageJob {
            state: Mutex::new(match &kept {
                Some(page) => JobState::Done(Arc::clone(page)),
                None => JobState::Queued,
            }),
            read,
            window_bytes,
            kept: Arc::clone(&self.kept),
            done: Condvar::new(),
        });
        if kept.is_none() && !self.helpers.is_empty() {
            self.shared.lock().jobs.push_back(Arc::clone(&job));
            self.shared.work.notify_one();
        }
        job
    }

    /// `job`'s page window (at least its sectors and the spare): filled here if no helper has
    /// started it; while a helper fills it, the caller fills queued jobs (the next reads'
    /// pages) instead of idling.
    pub fn take(&self, job: &PageJob) -> Arc<[u8]> {
        if job.claim() {
            job.run();
        }
        loop {
            if let Some(window) = job.try_take() {
                return window;
            }
            let next = self.shared.lock().jobs.pop_front();
            match next {
                Some(other) => {
                    if other.claim() {
                        other.run();
                    }
                }
                None => {
                    let state = job.lock();
                    if matches!(*state, JobState::Running) {
                        drop(job.done.wait(state).unwrap_or_else(PoisonError::into_inner));
                    }
                }
            }
        }
    }
}

impl Drop for PagePool {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.work.notify_all();
        for helper in self.helpers.drain(..) {
            let _ = helper.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nand::synthetic::SyntheticPages;
    use crate::nand::synthetic::fakes::{Offsets, geometry};
    use sagessd_firmware::hal::{SPARE_BYTES, Sectors};

    const PAGE: usize = 16384;

    fn pages() -> SyntheticPages {
        SyntheticPages::new(Arc::new(Offsets), geometry(), 3, 40).unwrap()
    }

    #[test]
    fn jobs_fill_what_a_direct_read_fills_whoever_runs_them() {
        let pages = pages();
        let window = PAGE + SPARE_BYTES;
        // Every computed page of dies 0 and 1, alternating whole and column reads.
        let reads: Vec<(u32, Sectors)> = (0..40u32)
            .map(|k| {
                (
                    k % 4 * 32 + k / 4,
                    Sectors(if k % 2 == 0 { 0xFFFF } else { 0x0F0 }),
                )
            })
            .filter(|&(ppn, _)| pages.holds(ppn))
            .collect();
        assert_eq!(reads.len(), 40);
        // Without kept pages, with room for some (the first read whole) and for all; each
        // read twice, so the second round finds kept pages where there are, column reads
        // included.
        for (helpers, keep) in [(0, 0), (1, 0), (3, 0), (0, 7), (1, 7), (3, 100)] {
            let pool = PagePool::new(helpers, keep);
            assert_eq!(pool.helper_count(), helpers);
            for round in 0..2 {
                // The second round reads one column of every page (of kept ones too).
                let round_reads: Vec<(u32, Sectors)> = reads
                    .iter()
                    .map(|&(ppn, s)| (ppn, if round == 0 { s } else { Sectors(0x0F0) }))
                    .collect();
                let jobs: Vec<_> = round_reads
                    .iter()
                    .map(|&(ppn, s)| pool.start(pages.page_read(ppn, s).unwrap(), window))
                    .collect();
                // Taken last first: the first takes find their jobs queued, filled or running.
                for (job, &(ppn, sectors)) in jobs.iter().zip(&round_reads).rev() {
                    let mut direct = vec![0u8; window];
                    assert!(pages.read(ppn, sectors, &mut direct));
                    let mut via_job = vec![0u8; window];
                    sectors.copy_window(PAGE, &pool.take(job), &mut via_job);
                    let at = format!("ppn {ppn}, {helpers} helpers, keep {keep}, round {round}");
                    assert_eq!(via_job, direct, "{at}");
                }
            }
            // Only whole-page reads are kept: half of them.
            assert_eq!(pool.kept_count(), keep.min(reads.len() / 2));
        }
    }

    #[test]
    fn devices_share_the_process_budget_and_return_it() {
        let pages = pages();
        let window = PAGE + SPARE_BYTES;
        let budget: &'static ProcessBudget = Box::leak(Box::new(ProcessBudget {
            limit_bytes: 3 * window as u64,
            used_bytes: AtomicU64::new(0),
        }));
        let read_whole = |pool: &PagePool, k: u32| {
            let read = pages.page_read(k % 4 * 32 + k / 4, Sectors::ALL).unwrap();
            let _ = pool.take(&pool.start(read, window));
        };
        let (a, b) = (
            PagePool::keeping(1, usize::MAX, Some(budget)),
            PagePool::keeping(0, usize::MAX, Some(budget)),
        );
        (0..2).for_each(|k| read_whole(&a, k));
        (2..6).for_each(|k| read_whole(&b, k));
        assert_eq!(
            (a.kept_count(), b.kept_count()),
            (2, 1),
            "three pages in all"
        );
        drop(a);
        (6..9).for_each(|k| read_whole(&b, k));
        assert_eq!(
            b.kept_count(),
            3,
            "the dropped pool's pages came back to the budget"
        );
        drop(b);
        assert_eq!(budget.used_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_wrong_kept_page_would_be_seen() {
        // The comparison above can fail: a page kept under another page's number is served.
        let pages = pages();
        let window = PAGE + SPARE_BYTES;
        let pool = PagePool::new(0, 10);
        let (first, second) = (
            pages.page_read(0, Sectors::ALL).unwrap(),
            pages.page_read(32, Sectors::ALL).unwrap(),
        );
        let _ = pool.take(&pool.start(first.clone(), window));
        let wrong = pool.kept.get(first.lpn()).unwrap();
        pool.kept.lock().insert(second.lpn(), wrong);
        let mut direct = vec![0u8; window];
        assert!(pages.read(32, Sectors::ALL, &mut direct));
        let job = pool.start(second, window);
        assert_ne!(&pool.take(&job)[..], &direct[..], "served the other page");
    }

    #[test]
    fn a_pool_dropped_with_jobs_queued_stops() {
        let pages = pages();
        let pool = PagePool::new(2, 0);
        for k in 0..10u32 {
            let ppn = k % 4 * 32 + k / 4;
            drop(pool.start(
                pages.page_read(ppn, Sectors::ALL).unwrap(),
                PAGE + SPARE_BYTES,
            ));
        }
        drop(pool);
    }
}
