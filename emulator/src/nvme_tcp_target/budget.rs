//! The target-wide cap on command data held in memory ([`TargetOptions::max_outstanding_bytes`]).
//!
//! Every command that moves data by the transport takes a [`Grant`] for its length before any
//! buffer is allocated for it: a read when it goes to the device (released once its data has
//! been written to the socket), a write when its R2T goes out (released when the device has
//! completed it). A command that does not fit waits, in arrival order across all connections;
//! a released grant hands the freed bytes to the waiters at the front of the line, so a large
//! command is not starved by small ones behind it.
//!
//! [`TargetOptions::max_outstanding_bytes`]: super::TargetOptions::max_outstanding_bytes

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Where a granted wait is delivered: the waiting connection's event channel. A connection that
/// has gone drops the grant, which releases it.
pub(super) type Deliver = Box<dyn FnOnce(Grant) + Send>;

struct Waiter {
    bytes: usize,
    deliver: Deliver,
}

struct State {
    free_bytes: usize,
    waiting: VecDeque<Waiter>,
}

/// The byte budget shared by every connection of one target.
pub(super) struct Budget {
    total_bytes: usize,
    state: Mutex<State>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Budget")
            .field("total_bytes", &self.total_bytes)
            .field("free_bytes", &s.free_bytes)
            .field("waiting", &s.waiting.len())
            .finish()
    }
}

/// Bytes of the budget held by one command; dropping it gives them back.
#[derive(Debug)]
pub(super) struct Grant {
    bytes: usize,
    budget: Arc<Budget>,
}

impl Grant {
    /// Bytes this grant holds.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Budget {
    /// A budget of `total_bytes`.
    pub(super) fn new(total_bytes: usize) -> Arc<Self> {
        Arc::new(Self {
            total_bytes,
            state: Mutex::new(State {
                free_bytes: total_bytes,
                waiting: VecDeque::new(),
            }),
        })
    }

    /// Bytes not held by any grant.
    #[cfg(test)]
    fn free_bytes(&self) -> usize {
        self.lock().free_bytes
    }

    /// Bytes held by grants now.
    pub(super) fn held_bytes(&self) -> usize {
        self.total_bytes - self.lock().free_bytes
    }

    /// Takes `bytes` now if they are free and nobody waits before; otherwise joins the line and
    /// the delivery `deliver` makes (only then) gets the grant when the bytes are free (`None`
    /// here). At most the budget's total may be asked for.
    pub(super) fn take(
        self: &Arc<Self>,
        bytes: usize,
        deliver: impl FnOnce() -> Deliver,
    ) -> Option<Grant> {
        assert!(bytes <= self.total_bytes, "a grant larger than the budget");
        let mut s = self.lock();
        if s.waiting.is_empty() && bytes <= s.free_bytes {
            s.free_bytes -= bytes;
            return Some(self.grant(bytes));
        }
        s.waiting.push_back(Waiter {
            bytes,
            deliver: deliver(),
        });
        None
    }

    fn grant(self: &Arc<Self>, bytes: usize) -> Grant {
        Grant {
            bytes,
            budget: Arc::clone(self),
        }
    }

    /// Gives `bytes` back and serves the waiters at the front of the line that now fit.
    fn release(self: &Arc<Self>, bytes: usize) {
        let mut served = Vec::new();
        {
            let mut s = self.lock();
            s.free_bytes += bytes;
            debug_assert!(s.free_bytes <= self.total_bytes);
            while s.waiting.front().is_some_and(|w| w.bytes <= s.free_bytes) {
                let Some(w) = s.waiting.pop_front() else {
                    break;
                };
                s.free_bytes -= w.bytes;
                served.push(w);
            }
        }
        // Outside the lock: a connection that has gone drops its grant, which releases it (and
        // may serve the next waiter) through this function again.
        for w in served {
            (w.deliver)(self.grant(w.bytes));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update under the lock is a few field writes that cannot panic half-way.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn waiter(tx: &mpsc::Sender<Grant>) -> impl FnOnce() -> Deliver {
        let tx = tx.clone();
        move || {
            Box::new(move |g| {
                let _ = tx.send(g);
            })
        }
    }

    #[test]
    fn grants_wait_in_line_and_are_served_in_order_as_bytes_come_back() {
        let budget = Budget::new(100);
        let (tx, rx) = mpsc::channel();
        let a = budget.take(60, waiter(&tx)).expect("fits");
        let b = budget.take(40, waiter(&tx)).expect("fits exactly");
        assert_eq!(budget.free_bytes(), 0);
        // 50 waits; 10 would fit after `b` goes but waits behind 50 (no overtaking).
        assert!(budget.take(50, waiter(&tx)).is_none());
        assert!(budget.take(10, waiter(&tx)).is_none());
        drop(b);
        assert!(
            rx.try_recv().is_err(),
            "40 free: the 50 at the front does not fit"
        );
        drop(a);
        let first = rx.try_recv().expect("50 served");
        let second = rx.try_recv().expect("10 served behind it");
        assert_eq!((first.bytes(), second.bytes()), (50, 10));
        assert_eq!(budget.free_bytes(), 40);
        drop((first, second));
        assert_eq!(budget.free_bytes(), 100);
    }

    #[test]
    fn a_grant_for_a_connection_that_has_gone_is_released_to_the_next_waiter() {
        let budget = Budget::new(10);
        let held = budget.take(10, || Box::new(drop)).expect("fits");
        let (gone_tx, gone_rx) = mpsc::channel::<Grant>();
        drop(gone_rx);
        let (tx, rx) = mpsc::channel();
        assert!(budget.take(10, waiter(&gone_tx)).is_none());
        assert!(budget.take(7, waiter(&tx)).is_none());
        drop(held);
        let served = rx.try_recv().expect("served after the gone one");
        assert_eq!(served.bytes(), 7);
        assert_eq!(budget.free_bytes(), 3);
    }
}
