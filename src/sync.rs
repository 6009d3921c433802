//! The synchronisation primitives the lock-free paths use, in one place so that the loom
//! models (`src/loom_models`) can swap them for loom's.
//!
//! Normal builds re-export the real thing: std atomics, `parking_lot::Mutex`,
//! `dashmap::DashMap`, `crossbeam_queue::SegQueue`. Under `--cfg loom` (with
//! `--cfg crossbeam_loom`, which makes crossbeam-epoch loom-aware too) the atomics are
//! loom's, and the locks and containers are loom-aware stand-ins with the subset of the
//! real APIs this crate calls. They must be: a thread that loom preempts while it holds a
//! lock loom cannot see would leave the others spinning forever, and loom would not know
//! the happens-before edges such a lock creates.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(not(loom))]
pub(crate) use crossbeam_queue::SegQueue;
#[cfg(not(loom))]
pub(crate) use dashmap::DashMap;
#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(loom)]
pub(crate) use loom::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};
#[cfg(loom)]
pub(crate) use stand_ins::{AtomicPtr, DashMap, Mutex, RwLock, SegQueue};

#[cfg(loom)]
pub(crate) use loom::thread::yield_now;
/// Lets other threads run while this one waits for them (loom's, under loom: a spin loop
/// must tell loom it yields, or loom would explore it for ever).
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

/// Loom-aware stand-ins. Each is coarser than what it stands for (one lock where the
/// real one is lock-free or sharded), so it adds happens-before edges the real one may
/// lack: a model passing with them shows the protocol around them is right, given that
/// the real type is linearizable, which is its own crate's business.
#[cfg(loom)]
mod stand_ins {
    use std::collections::{HashMap, VecDeque};
    use std::hash::{BuildHasher, Hash};
    use std::ops::{Deref, DerefMut};

    use loom::sync::{MutexGuard, RwLock as LoomRwLock, RwLockReadGuard, RwLockWriteGuard};

    /// `std::sync::atomic::AtomicPtr`, with the `get_mut` that loom's lacks.
    #[derive(Debug)]
    pub(crate) struct AtomicPtr<T>(loom::sync::atomic::AtomicPtr<T>);

    impl<T> AtomicPtr<T> {
        pub(crate) fn new(p: *mut T) -> Self {
            Self(loom::sync::atomic::AtomicPtr::new(p))
        }

        /// The value, read through exclusive access (only ever read, never written through).
        pub(crate) fn get_mut(&mut self) -> Exclusive<*mut T> {
            Exclusive(self.0.with_mut(|p| *p))
        }
    }

    impl<T> Deref for AtomicPtr<T> {
        type Target = loom::sync::atomic::AtomicPtr<T>;
        fn deref(&self) -> &Self::Target {
            &self.0
        }
    }

    /// A value read through `&mut`: `*atomic.get_mut()` reads it as with std.
    pub(crate) struct Exclusive<T>(T);

    impl<T> Deref for Exclusive<T> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.0
        }
    }

    /// `parking_lot::Mutex`'s API (`lock` without poisoning) over loom's mutex.
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().expect("no model panics while holding a lock")
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Self::new(T::default())
        }
    }

    impl<T> std::fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Mutex { .. }") // locking here would be a loom operation
        }
    }

    /// `parking_lot::RwLock`'s API (`read` and `write` without poisoning) over loom's.
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().expect("no model panics while holding a lock")
        }

        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0
                .write()
                .expect("no model panics while holding a lock")
        }
    }

    /// `crossbeam_queue::SegQueue` (lock-free, linearizable) as a loom mutex over a deque.
    /// crossbeam-queue has no loom support: its atomics would be invisible to loom.
    pub(crate) struct SegQueue<T>(loom::sync::Mutex<VecDeque<T>>);

    impl<T> SegQueue<T> {
        pub(crate) fn new() -> Self {
            Self(loom::sync::Mutex::new(VecDeque::new()))
        }
        pub(crate) fn push(&self, value: T) {
            self.0.lock().unwrap().push_back(value);
        }
        pub(crate) fn pop(&self) -> Option<T> {
            self.0.lock().unwrap().pop_front()
        }
        pub(crate) fn len(&self) -> usize {
            self.0.lock().unwrap().len()
        }
        pub(crate) fn is_empty(&self) -> bool {
            self.0.lock().unwrap().is_empty()
        }
    }

    /// Shards of the [`DashMap`] stand-in: keys that the id hasher spreads apart take
    /// different locks, as in the real map.
    const SHARDS: usize = 4;

    /// `dashmap::DashMap`'s API subset used by the worker registry, over loom rwlocks.
    pub(crate) struct DashMap<K, V, S> {
        shards: Box<[LoomRwLock<HashMap<K, V, S>>]>,
        hasher: S,
    }

    /// A read-locked value (`dashmap::mapref::one::Ref`).
    pub(crate) struct Ref<'a, K, V, S> {
        shard: RwLockReadGuard<'a, HashMap<K, V, S>>,
        key: K,
    }

    /// A write-locked value (`dashmap::mapref::one::RefMut`).
    pub(crate) struct RefMut<'a, K, V, S> {
        shard: RwLockWriteGuard<'a, HashMap<K, V, S>>,
        key: K,
    }

    /// A write-locked entry; only `or_default` is offered.
    pub(crate) struct Entry<'a, K, V, S>(RefMut<'a, K, V, S>);

    impl<K: Hash + Eq + Clone, V, S: BuildHasher + Clone> DashMap<K, V, S> {
        pub(crate) fn with_hasher(hasher: S) -> Self {
            let shards = (0..SHARDS)
                .map(|_| LoomRwLock::new(HashMap::with_hasher(hasher.clone())))
                .collect();
            Self { shards, hasher }
        }

        fn shard(&self, key: &K) -> &LoomRwLock<HashMap<K, V, S>> {
            &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
        }

        pub(crate) fn get(&self, key: &K) -> Option<Ref<'_, K, V, S>> {
            let shard = self.shard(key).read().unwrap();
            shard.contains_key(key).then(|| Ref {
                shard,
                key: key.clone(),
            })
        }

        pub(crate) fn entry(&self, key: K) -> Entry<'_, K, V, S> {
            let shard = self.shard(&key).write().unwrap();
            Entry(RefMut { shard, key })
        }

        pub(crate) fn remove(&self, key: &K) -> Option<(K, V)> {
            self.shard(key).write().unwrap().remove_entry(key)
        }

        pub(crate) fn remove_if_mut(
            &self,
            key: &K,
            f: impl FnOnce(&K, &mut V) -> bool,
        ) -> Option<(K, V)> {
            let mut shard = self.shard(key).write().unwrap();
            if f(key, shard.get_mut(key)?) {
                shard.remove_entry(key)
            } else {
                None
            }
        }

        /// Not a live iterator: each shard's values are copied under its read lock.
        pub(crate) fn iter(&self) -> std::vec::IntoIter<V>
        where
            V: Clone,
        {
            let mut all = Vec::new();
            for shard in self.shards.iter() {
                all.extend(shard.read().unwrap().values().cloned());
            }
            all.into_iter()
        }
    }

    impl<'a, K: Hash + Eq + Clone, V: Default, S: BuildHasher> Entry<'a, K, V, S> {
        pub(crate) fn or_default(self) -> RefMut<'a, K, V, S> {
            let mut at = self.0;
            if !at.shard.contains_key(&at.key) {
                let key = at.key.clone();
                at.shard.insert(key, V::default());
            }
            at
        }
    }

    impl<K: Hash + Eq, V, S: BuildHasher> Deref for Ref<'_, K, V, S> {
        type Target = V;
        fn deref(&self) -> &V {
            &self.shard[&self.key]
        }
    }

    impl<K: Hash + Eq, V, S: BuildHasher> Deref for RefMut<'_, K, V, S> {
        type Target = V;
        fn deref(&self) -> &V {
            &self.shard[&self.key]
        }
    }

    impl<K: Hash + Eq, V, S: BuildHasher> DerefMut for RefMut<'_, K, V, S> {
        fn deref_mut(&mut self) -> &mut V {
            self.shard
                .get_mut(&self.key)
                .expect("the entry holds its key")
        }
    }
}
