//! Giving a per-pod table's memory back once most of its pods are gone.
//!
//! A `HashMap` keeps the capacity it once needed, as Go's maps do in the kubelet: after a
//! burst of pods has come and gone, the status manager's, the results cache's, the views' and
//! the syncer's tables would stay sized for the burst for the agent's whole life
//! (docs/memory.md, "Churn"). Their owners call [`ShrinkAfterRemoval::shrink_after_removal`]
//! after removing entries.
//!
//! The table is asked to shrink to room for twice what it holds ([`shrink_target`]), which
//! `hashbrown` does only when that fits in fewer buckets than the table has: so it shrinks
//! once it is about a quarter full, by its buckets (what it holds in memory) rather than by
//! `capacity()`, which the slots left by removals make look smaller. A table just grown has
//! more than half of its new room in use, which never asks for fewer buckets, so a table that
//! fills and empties does not rehash back and forth; and each shrink at least halves the table,
//! so the rehashes are paid for by the removals before them. Tables of up to [`KEEP`] entries'
//! room are not shrunk further.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// The room a table keeps however few entries it holds (a table with room for 64 entries has
/// 128 buckets): a few KB, and the sets that empty and fill on every sync round (queued, in
/// flight) stay within it in ordinary use.
pub const KEEP: usize = 64;

/// The room to ask a table of `len` entries to shrink to: twice what it holds, at least
/// [`KEEP`]. Asking costs a comparison when the table would not get fewer buckets.
pub fn shrink_target(len: usize) -> usize {
    len.saturating_mul(2).saturating_add(1).max(KEEP)
}

/// A table that can give back the room its removed entries left.
pub trait ShrinkAfterRemoval {
    /// Shrinks the table when most of it is empty (see the module doc).
    fn shrink_after_removal(&mut self);
}

impl<K: Eq + Hash, V, S: BuildHasher> ShrinkAfterRemoval for HashMap<K, V, S> {
    fn shrink_after_removal(&mut self) {
        self.shrink_to(shrink_target(self.len()));
    }
}

impl<T: Eq + Hash, S: BuildHasher> ShrinkAfterRemoval for HashSet<T, S> {
    fn shrink_after_removal(&mut self) {
        self.shrink_to(shrink_target(self.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_twice_what_is_held_and_never_below_keep() {
        assert_eq!(shrink_target(0), KEEP);
        assert_eq!(shrink_target(10), KEEP);
        assert_eq!(shrink_target(448), 897);
        assert_eq!(shrink_target(usize::MAX), usize::MAX);
    }

    #[test]
    fn a_drained_table_shrinks_when_a_quarter_full() {
        let mut map: HashMap<u32, u32> = (0..1_792).map(|i| (i, i)).collect();
        let full = map.capacity();
        let mut first_shrink = None;
        for i in 0..1_792 {
            map.remove(&i);
            // `capacity()` also falls as removals leave deleted slots: a shrink is a change
            // across the call.
            let before = map.capacity();
            map.shrink_after_removal();
            if first_shrink.is_none() && map.capacity() != before {
                first_shrink = Some(map.len());
            }
        }
        // With today's hashbrown: 2,048 buckets (room for 1,792), and room for 2 x 447 + 1
        // fits in 1,024 of them. A rule on `capacity()` waited until about 92 % were gone.
        let first_shrink = first_shrink.unwrap_or(0);
        assert!((full / 5..=full / 4).contains(&first_shrink), "first shrink at {first_shrink} of {full}");
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
        assert!(shrinks <= 3 * 6, "{shrinks} shrinks in three rounds of 4,096 removals");
    }

    #[test]
    fn a_steady_churn_never_rehashes_back_and_forth() {
        // One in, one out at a steady size: the slots removals leave make the table clean up
        // or grow now and then, and a grown table must not be shrunk straight back. These sizes
        // are where a rule on `capacity()` (len x 4 <= capacity) did exactly that.
        for len in [20_u32, 56, 112, 224, 448, 896, 1_000, 3_000] {
            let mut map: HashMap<u32, u32> = (0..len).map(|i| (i, i)).collect();
            map.shrink_after_removal();
            let mut shrinks = 0;
            for i in len..len + 50_000 {
                map.insert(i, i);
                map.remove(&(i - len));
                let before = map.capacity();
                map.shrink_after_removal();
                shrinks += usize::from(map.capacity() != before);
            }
            assert_eq!(shrinks, 0, "shrinks at a steady {len} entries");
        }
    }
}
