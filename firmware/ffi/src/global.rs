//! [`Global`]: a statically allocated value with a re-entrancy guard, the library's only shared
//! state.
//!
//! The board is single-threaded (one firmware thread on core 0, no calls from interrupt
//! handlers), so the guard is not a lock that waits: [`Global::with`] either gets exclusive
//! access at once or reports that someone holds it (a C callback calling back into the library,
//! or a second thread on a hosted build), and the C function returns `SAGESSD_ERR_STATE`. No
//! `&mut` to the value ever coexists with another reference to it.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// A value in a `static`, handed out as `&mut` to one caller at a time.
pub(crate) struct Global<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: every access to `value` goes through `with`, which hands out the `&mut` only while it
// holds the `held` flag, so there is never more than one reference. The values stored are the
// firmware state and pointers into memory the integrator gave the library for its whole life
// (C buffers, the DRAM arena); they may be used from whichever thread holds the flag.
unsafe impl<T> Sync for Global<T> {}

impl<T> Global<T> {
    /// A global holding `value`.
    pub const fn new(value: T) -> Self {
        Self {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` with exclusive access to the value; `None` (without running `f`) if the value is
    /// held already.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if !self.try_hold() {
            return None;
        }
        // SAFETY: `try_hold` set the flag, which was clear: nobody else holds a reference to the
        // value until the flag is cleared below, after the last use of this one.
        let value = unsafe { &mut *self.value.get() };
        let result = f(value);
        self.held.store(false, Ordering::Release);
        Some(result)
    }

    /// Sets the flag if it was clear. On a hosted build this is an atomic swap, so two threads
    /// cannot both win.
    #[cfg(not(target_os = "none"))]
    fn try_hold(&self) -> bool {
        !self.held.swap(true, Ordering::Acquire)
    }

    /// Sets the flag if it was clear. On bare metal the library is called from one thread only,
    /// and the flag only has to catch re-entry from a callback; a plain load and store is
    /// enough and avoids exclusive loads and stores (LDREX/STREX), whose behaviour on the
    /// strongly-ordered memory of a Cortex-A9 running with its MMU off is implementation defined.
    #[cfg(target_os = "none")]
    fn try_hold(&self) -> bool {
        if self.held.load(Ordering::Acquire) {
            return false;
        }
        self.held.store(true, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_entry_is_refused_and_the_value_released_afterwards() {
        static G: Global<u32> = Global::new(1);
        let inner = G.with(|v| {
            *v += 1;
            G.with(|w| *w += 100)
        });
        assert_eq!(inner, Some(None));
        assert_eq!(G.with(|v| *v), Some(2));
    }
}
