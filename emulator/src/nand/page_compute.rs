//! Computed flash pages worked out ahead of their polls, on the machine's other cores.
//!
//! A synthetic graph's page costs ~16 ns an entry to compute (65 µs for a 16 KiB page), which
//! is most of the wall time of a simulation that reads many of them (mmap's read-around moves
//! tens of GiB at papers100M scale). The contents are a pure function of the page
//! ([`PageRead`]), so the array starts a [`PageJob`] when a read of a computed page is issued,
//! helper threads fill it while the simulation runs on, and the poll that delivers the page
//! takes the result — or, if no helper has started it yet, fills it itself. Only wall time
//! changes: which bytes a read returns and every modelled time are the same with or without
//! helpers.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

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
    /// Filled: the page window.
    Done(Box<[u8]>),
    /// Delivered.
    Taken,
}

/// One computed page's read, on its way.
#[derive(Debug)]
pub struct PageJob {
    read: PageRead,
    window_bytes: usize,
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
        let mut window = vec![0u8; self.window_bytes].into_boxed_slice();
        self.read.fill(&mut window);
        *self.lock() = JobState::Done(window);
        self.done.notify_all();
    }

    /// The window, if filled (then the job is delivered).
    fn try_take(&self) -> Option<Box<[u8]>> {
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
}

impl PagePool {
    /// A pool of `helpers` threads (at most [`MAX_HELPERS`]; 0: every job is filled by the
    /// poll that takes it). A helper that cannot be spawned is left out.
    pub fn new(helpers: usize) -> Self {
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
        Self { shared, helpers }
    }

    /// A pool with one helper per core beyond the caller's.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        Self::new(cores - 1)
    }

    /// Helper threads running.
    pub fn helper_count(&self) -> usize {
        self.helpers.len()
    }

    /// Starts filling `read` into a window of `window_bytes`.
    pub fn start(&self, read: PageRead, window_bytes: usize) -> Arc<PageJob> {
        let job = Arc::new(PageJob {
            read,
            window_bytes,
            state: Mutex::new(JobState::Queued),
            done: Condvar::new(),
        });
        if !self.helpers.is_empty() {
            self.shared.lock().jobs.push_back(Arc::clone(&job));
            self.shared.work.notify_one();
        }
        job
    }

    /// `job`'s page window: filled here if no helper has started it; while a helper fills
    /// it, the caller fills queued jobs (the next reads' pages) instead of idling.
    pub fn take(&self, job: &PageJob) -> Box<[u8]> {
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
        for helpers in [0, 1, 3] {
            let pool = PagePool::new(helpers);
            assert_eq!(pool.helper_count(), helpers);
            let jobs: Vec<_> = reads
                .iter()
                .map(|&(ppn, s)| pool.start(pages.page_read(ppn, s).unwrap(), window))
                .collect();
            // Taken last first: the first takes find their jobs queued, filled or running.
            for (job, &(ppn, sectors)) in jobs.iter().zip(&reads).rev() {
                let mut direct = vec![0u8; window];
                assert!(pages.read(ppn, sectors, &mut direct));
                let mut via_job = vec![0u8; window];
                sectors.copy_window(PAGE, &pool.take(job), &mut via_job);
                assert_eq!(via_job, direct, "ppn {ppn}, {helpers} helpers");
            }
        }
    }

    #[test]
    fn a_pool_dropped_with_jobs_queued_stops() {
        let pages = pages();
        let pool = PagePool::new(2);
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
