//! Giving a per-pod table's memory back once most of its pods are gone.
//!
//! A `HashMap` keeps the capacity it once needed, as Go's maps do in the kubelet: after a
//! burst of pods has come and gone, the status manager's, the results cache's, the views' and
//! the syncer's tables would stay sized for the burst for the agent's whole life
//! (docs/memory.md, "Churn"). Their owners call [`ShrinkAfterRemoval::shrink_after_removal`]
//! after removing entries. A table shrinks only when three quarters of it are empty, to twice
//! what it holds, so a table that grows again soon does not rehash back and forth, and the
//! rehash a shrink costs is paid for by the removals before it. Small tables are left alone.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// A table of at most this many entries is never shrunk: it costs a few KB, and the sets that
/// empty and fill on every sync round (queued, in flight) stay below it in ordinary use.
pub const KEEP: usize = 64;

/// The capacity to shrink a table of `len` entries and `capacity` slots to, if it should be.
pub fn shrunk_capacity(len: usize, capacity: usize) -> Option<usize> {
    (capacity > KEEP && len.saturating_mul(4) <= capacity).then(|| len.saturating_mul(2).max(KEEP))
}

/// A table that can give back the room its removed entries left.
pub trait ShrinkAfterRemoval {
    /// Shrinks the table when most of it is empty (see the module doc).
    fn shrink_after_removal(&mut self);
}

impl<K: Eq + Hash, V, S: BuildHasher> ShrinkAfterRemoval for HashMap<K, V, S> {
    fn shrink_after_removal(&mut self) {
        if let Some(capacity) = shrunk_capacity(self.len(), self.capacity()) {
            self.shrink_to(capacity);
        }
    }
}

impl<T: Eq + Hash, S: BuildHasher> ShrinkAfterRemoval for HashSet<T, S> {
    fn shrink_after_removal(&mut self) {
        if let Some(capacity) = shrunk_capacity(self.len(), self.capacity()) {
            self.shrink_to(capacity);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_shrinks_only_when_three_quarters_are_empty() {
        assert_eq!(shrunk_capacity(0, KEEP), None);
        assert_eq!(shrunk_capacity(0, 896), Some(KEEP));
        assert_eq!(shrunk_capacity(224, 896), Some(448));
        assert_eq!(shrunk_capacity(225, 896), None);
        assert_eq!(shrunk_capacity(10, 2 * KEEP), Some(KEEP));
    }

    #[test]
    fn a_map_emptied_after_a_burst_gives_its_room_back() {
        let mut map: HashMap<u32, [u8; 100]> = (0..10_000).map(|i| (i, [0; 100])).collect();
        let burst = map.capacity();
        for i in 0..9_990 {
            map.remove(&i);
            map.shrink_after_removal();
        }
        assert_eq!(map.len(), 10);
        assert!(map.capacity() <= 2 * KEEP, "{} of {burst} kept", map.capacity());
        // What is left is all there.
        assert!((9_990..10_000).all(|i| map.contains_key(&i)));
    }

    #[test]
    fn a_set_emptied_after_a_burst_gives_its_room_back() {
        let mut set: HashSet<u32> = (0..5_000).collect();
        set.retain(|i| *i < 3);
        set.shrink_after_removal();
        assert!(set.capacity() <= 2 * KEEP, "{} kept", set.capacity());
    }

    #[test]
    fn a_table_that_grows_again_is_not_shrunk_on_every_removal() {
        // Filled to its capacity and emptied one by one: each shrink at least halves the
        // table, so there are few of them however many removals come.
        let mut map: HashMap<u32, u32> = HashMap::new();
        let mut shrinks = 0;
        for round in 0..3 {
            for i in 0..4_096 {
                map.insert(i, round);
            }
            for i in 0..4_096 {
                map.remove(&i);
                let before = map.capacity();
                map.shrink_after_removal();
                shrinks += usize::from(map.capacity() < before);
            }
        }
        assert!(shrinks <= 3 * 8, "{shrinks} shrinks in three rounds of 4,096 removals");
    }
}
