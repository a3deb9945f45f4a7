//! A time-ordered queue of simulation events with deterministic tie-breaking.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Items ordered by `(time, insertion sequence)`: the earliest time first, and among equal
/// times the one pushed first. The sequence makes every pop order a pure function of the pushes,
/// which is what keeps the simulation deterministic.
#[derive(Debug)]
pub(crate) struct EventQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
}

#[derive(Debug)]
struct Entry<T> {
    time_ns: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.time_ns, self.seq) == (other.time_ns, other.seq)
    }
}

impl<T> Eq for Entry<T> {}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and the earliest (time, seq) must come out first.
        (other.time_ns, other.seq).cmp(&(self.time_ns, self.seq))
    }
}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<T> EventQueue<T> {
    /// Schedules `item` at `time_ns`.
    pub(crate) fn push(&mut self, time_ns: u64, item: T) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { time_ns, seq, item });
    }

    /// Time of the earliest item.
    pub(crate) fn peek_time(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.time_ns)
    }

    /// Removes and returns the earliest item with its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, T)> {
        self.heap.pop().map(|e| (e.time_ns, e.item))
    }

    /// Number of items queued.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is queued.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = EventQueue::default();
        q.push(5, "c");
        q.push(1, "a");
        q.push(5, "d");
        q.push(1, "b");
        assert_eq!(q.len(), 4);
        assert_eq!(q.peek_time(), Some(1));
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(1, "a"), (1, "b"), (5, "c"), (5, "d")]);
        assert!(q.is_empty());
    }
}
