//! A fixed-capacity LRU set of block keys: one simulated worker's KV cache.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

const NONE: u32 = u32::MAX;

/// A key an insert pushed out, and how long it had gone unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    pub key: u64,
    pub age_ms: u64,
}

#[derive(Debug, Clone)]
struct Slot {
    key: u64,
    prev: u32,
    next: u32,
    used_ms: u64,
    /// In the recency list (false while pinned: then it cannot be evicted).
    listed: bool,
}

/// An LRU set of at most `capacity` keys, O(1) per operation (a hash map into an
/// intrusive doubly linked list; the slot of an evicted key is reused in place). A pinned
/// key leaves the list until its last pin goes, so eviction never looks at it; when every
/// key is pinned, the cache grows.
#[derive(Debug, Clone)]
pub struct Lru {
    capacity: usize,
    map: HashMap<u64, u32, FxBuildHasher>,
    slots: Vec<Slot>,
    /// Most recently used.
    head: u32,
    /// Least recently used: the next to go.
    tail: u32,
    /// Keys in use by running requests (counted): never evicted while pinned.
    pinned: HashMap<u64, u32, FxBuildHasher>,
}

impl Lru {
    /// An empty cache of `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.clamp(1, NONE as usize - 1);
        Self {
            capacity,
            map: HashMap::default(),
            slots: Vec::new(),
            head: NONE,
            tail: NONE,
            pinned: HashMap::default(),
        }
    }

    /// Pins `key` (held or not) once more: while pinned it is never evicted.
    pub fn pin(&mut self, key: u64) {
        let n = self.pinned.entry(key).or_default();
        *n += 1;
        if *n == 1 {
            if let Some(&i) = self.map.get(&key) {
                self.unlink(i);
            }
        }
    }

    /// Takes one pin off `key`; its last pin puts it back as the most recent.
    pub fn unpin(&mut self, key: u64) {
        if let Some(n) = self.pinned.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.pinned.remove(&key);
                if let Some(&i) = self.map.get(&key) {
                    self.push_front(i);
                }
            }
        }
    }

    /// Forgets everything, pins included (a restarted engine).
    pub fn clear(&mut self) {
        *self = Self::new(self.capacity);
    }

    /// Whether `key` is held (does not count as a use).
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    /// Uses `key` at `now_ms`: makes it the most recent, inserting it if absent. Returns
    /// the key it evicted, if any, and how long that key had gone unused (ms).
    pub fn touch(&mut self, key: u64, now_ms: u64) -> Option<Evicted> {
        if let Some(&i) = self.map.get(&key) {
            self.slots[i as usize].used_ms = now_ms;
            if self.slots[i as usize].listed {
                self.unlink(i);
                self.push_front(i);
            }
            return None;
        }
        let mut evicted = None;
        // Every key pinned (none listed): the cache grows.
        let i = if self.slots.len() < self.capacity || self.tail == NONE {
            self.slots.push(Slot {
                key,
                prev: NONE,
                next: NONE,
                used_ms: now_ms,
                listed: false,
            });
            (self.slots.len() - 1) as u32
        } else {
            let i = self.tail;
            self.unlink(i);
            let slot = &mut self.slots[i as usize];
            self.map.remove(&slot.key);
            evicted = Some(Evicted {
                key: slot.key,
                age_ms: now_ms.saturating_sub(slot.used_ms),
            });
            slot.key = key;
            slot.used_ms = now_ms;
            i
        };
        self.map.insert(key, i);
        if !self.pinned.contains_key(&key) {
            self.push_front(i);
        }
        evicted
    }

    /// Takes slot `i` out of the recency list (if it is in it).
    fn unlink(&mut self, i: u32) {
        let Slot {
            prev, next, listed, ..
        } = self.slots[i as usize];
        if !listed {
            return;
        }
        self.slots[i as usize].listed = false;
        match prev {
            NONE => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NONE => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    /// Puts slot `i` (not in the list) at the list's front.
    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let s = &mut self.slots[i as usize];
            s.prev = NONE;
            s.next = old;
            s.listed = true;
        }
        match old {
            NONE => self.tail = i,
            o => self.slots[o as usize].prev = i,
        }
        self.head = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used() {
        let mut lru = Lru::new(3);
        for k in 1..=3 {
            assert_eq!(lru.touch(k, k * 10), None);
        }
        assert_eq!(lru.touch(1, 40), None); // 1 is now the most recent
        assert_eq!(lru.touch(4, 50), Some(Evicted { key: 2, age_ms: 30 })); // unused since t=20
        assert!(!lru.contains(2));
        assert!(lru.contains(1) && lru.contains(3) && lru.contains(4));
        assert_eq!(lru.touch(5, 60).map(|e| e.key), Some(3));
        assert_eq!(lru.touch(6, 70).map(|e| e.age_ms), Some(30)); // evicts 1
        assert_eq!((1..=6).filter(|&k| lru.contains(k)).count(), 3);
    }

    #[test]
    fn matches_a_naive_model() {
        let mut lru = Lru::new(5);
        let mut model: Vec<u64> = Vec::new(); // most recent last
        let mut rng = approx_kv_rng::SplitMix64::new(3);
        for t in 0..5000 {
            let k = rng.below(12);
            lru.touch(k, t);
            model.retain(|&x| x != k);
            model.push(k);
            if model.len() > 5 {
                model.remove(0);
            }
            assert!((0..12).all(|x| lru.contains(x) == model.contains(&x)));
        }
    }

    #[test]
    fn pinned_keys_are_never_evicted() {
        let mut lru = Lru::new(2);
        lru.touch(1, 0);
        lru.pin(1);
        lru.touch(2, 1);
        lru.touch(3, 2); // evicts 2, not the pinned 1
        assert!(lru.contains(1) && lru.contains(3) && !lru.contains(2));
        lru.pin(3);
        lru.touch(4, 3); // all pinned: the cache grows
        assert!(lru.contains(1) && lru.contains(3) && lru.contains(4));
        lru.unpin(1);
        lru.unpin(3);
        lru.touch(5, 4);
        assert!(lru.contains(5));
        lru.clear();
        assert!(!lru.contains(5));
    }

    #[test]
    fn pins_match_a_naive_model() {
        let mut lru = Lru::new(4);
        let mut order: Vec<u64> = Vec::new(); // least recent first
        let mut pins: HashMap<u64, u32> = HashMap::new();
        let mut rng = approx_kv_rng::SplitMix64::new(5);
        for t in 0..20_000 {
            let k = rng.below(10);
            match rng.below(4) {
                0 => {
                    lru.pin(k);
                    *pins.entry(k).or_default() += 1;
                }
                1 if pins.contains_key(&k) => {
                    lru.unpin(k);
                    let n = pins.get_mut(&k).unwrap();
                    *n -= 1;
                    if *n == 0 {
                        pins.remove(&k);
                        if let Some(p) = order.iter().position(|&x| x == k) {
                            order.remove(p);
                            order.push(k); // the most recent once free again
                        }
                    }
                }
                _ => {
                    let evicted = lru.touch(k, t).map(|e| e.key);
                    let expected = if let Some(p) = order.iter().position(|&x| x == k) {
                        order.remove(p);
                        None
                    } else if order.len() < 4 || order.iter().all(|x| pins.contains_key(x)) {
                        None
                    } else {
                        let p = order.iter().position(|x| !pins.contains_key(x)).unwrap();
                        Some(order.remove(p))
                    };
                    order.push(k);
                    assert_eq!(evicted, expected, "step {t}");
                }
            }
            assert!((0..10).all(|x| lru.contains(x) == order.contains(&x)));
        }
    }
}
