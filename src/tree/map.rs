//! The node map: a sharded open-addressing hash map from a block's key to its [`Node`],
//! whose finds read without a lock and write no shared memory.
//!
//! Each of the [`SHARDS`] shards has a table of buckets (a key and a node, all atomics;
//! linear probing, at most half full, deletion by backward shift, grown by doubling and
//! never shrunk, as the hash tables of the standard library), a [`RwLock`] and a
//! *version*. Everything that changes the shard's buckets holds the write lock and keeps
//! the version odd while it changes them ([`ShardWrite`]); refreshers hold the read lock and
//! raise claims in place (atomics of a node's holders, never its shape), as under any
//! shard lock before.
//!
//! [`NodeMap::read`] is the lock-free read of a find: it reads the version, copies the
//! bucket's words, and reads the version again (a seqlock: `docs/design.md`, "Lock-free
//! reads"). A copy taken while the version stayed even and unchanged is a node as some
//! writer left it; anything else is thrown away and read again, and after a few failed
//! tries (a writer preempted with the version odd) the read takes the read lock instead,
//! so a reader never spins on a writer for long. Pointers in the copy (holder arrays,
//! runs) are used only after the check, under an epoch guard: a writer retires what it
//! unlinks inside its odd window, after the check's reader pinned.
//!
//! Every other access takes the shard's lock, as with the `DashMap` this replaces: `get`
//! (read lock, a view into the bucket), `get_mut` and `entry` (write lock; a writer works
//! on a copy of the node, written back when it is done, all inside its odd window).

use std::hash::BuildHasher;
use std::mem::ManuallyDrop;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};
use crossbeam_utils::CachePadded;

use self::entry::ShardWrite;
pub(crate) use self::entry::{Entry, NodeCopy, OccupiedEntry, Ref, RefMut, VacantEntry};
use super::node::Node;
use crate::id_hasher::IdBuildHasher;
use crate::prefetch::prefetch;
use crate::sync::{fence, AtomicU64, AtomicUsize, Ordering, RwLock};

/// Shards of the map: enough that writers on different prefixes rarely meet.
pub(crate) const SHARDS: usize = 1 << SHARD_BITS;

/// The shard of a mixed key: its top `SHARD_BITS` bits.
#[inline]
fn shard_index(hash: u64) -> usize {
    (hash >> (64 - SHARD_BITS)) as usize
}
const SHARD_BITS: u32 = if cfg!(loom) { 1 } else { 7 };
/// Buckets of a new shard's table.
const MIN_BUCKETS: usize = if cfg!(loom) { 4 } else { 8 };
/// Keys a write loop prefetches ahead of the one it works on ([`NodeMap::prefetch_ahead`]).
pub(crate) const AHEAD: usize = 8;
/// Tries of an optimistic read before it takes the read lock.
const OPTIMISTIC_TRIES: usize = if cfg!(loom) { 2 } else { 8 };

/// One bucket: a key and a node (free when the node says so, [`Node::is_free`]), 56
/// bytes on a cache line of its own: a probe that finds its key in the first bucket reads
/// one line (unaligned, three buckets in four would straddle two).
#[repr(align(64))]
struct Bucket {
    key: AtomicU64,
    node: ManuallyDrop<Node>,
}

// One cache line a bucket, as `NodeMap::prefetch` assumes.
const _: () = assert!(std::mem::size_of::<Bucket>() == 64 || cfg!(loom));

impl Bucket {
    /// Writes `key` and `node`'s words here (under the write lock, in an odd window); the
    /// caller gives up `node` (moved here) or frees its old bucket.
    #[inline]
    fn fill(&self, key: u64, node: &Node) {
        self.key.store(key, Ordering::Relaxed);
        node.store_words(&self.node);
    }
}

/// A shard's buckets, a power of two of them. Dropping a table drops no node: the map
/// moves nodes between tables and drops them itself.
struct Table {
    buckets: Box<[Bucket]>,
}

impl Table {
    fn new(len: usize) -> Self {
        let buckets = (0..len)
            .map(|_| Bucket {
                key: AtomicU64::new(0),
                node: Node::free(),
            })
            .collect();
        Self { buckets }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// The bucket of `key` (whose hash is `hash`), if it has one. Terminates on any
    /// contents (a lock-free reader may see a table mid-change): at most one pass.
    #[inline]
    fn find(&self, key: u64, hash: u64) -> Option<usize> {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        for _ in 0..=mask {
            let bucket = &self.buckets[i];
            if bucket.node.is_free() {
                return None;
            }
            if bucket.key.load(Ordering::Relaxed) == key {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// The first free bucket from `hash`'s home (under the write lock; the table always
    /// has one: [`NodeMap::place`] grows it first).
    fn free_from(&self, hash: u64) -> usize {
        let mask = self.mask();
        let mut i = hash as usize & mask;
        while !self.buckets[i].node.is_free() {
            i = (i + 1) & mask;
        }
        i
    }
}

/// One shard: its table, the lock of its writers and refreshers, and its version.
struct Shard {
    /// On a cache line of its own: refreshers write the lock word (a read lock is a write
    /// to it), and lock-free readers should not miss on `version` and `table` for that.
    lock: CachePadded<RwLock<()>>,
    /// Odd while a writer changes the table's buckets (or swaps the table).
    version: AtomicU64,
    table: Atomic<Table>,
    /// Occupied buckets (changed under the write lock).
    len: AtomicUsize,
}

impl Shard {
    fn new() -> Self {
        Self {
            lock: CachePadded::new(RwLock::new(())),
            version: AtomicU64::new(0),
            table: Atomic::new(Table::new(MIN_BUCKETS)),
            len: AtomicUsize::new(0),
        }
    }

    /// The current table, for a holder of the shard's lock (read or write).
    #[inline]
    fn locked_table(&self) -> &Table {
        // SAFETY: the table is replaced (and the old one retired) only under the write
        // lock, which the caller's lock excludes or is; while the caller holds it, the
        // table is neither retired nor freed, and it is never null (`Shard::new`).
        unsafe {
            self.table
                .load(Ordering::Acquire, epoch::unprotected())
                .deref()
        }
    }
}

/// The node map. Keys are mixed with the map's secret keys ([`IdBuildHasher`]) before
/// they pick a shard (the top bits) and a bucket (the low bits).
pub(crate) struct NodeMap {
    shards: Box<[CachePadded<Shard>]>,
    hasher: IdBuildHasher,
}

impl NodeMap {
    pub(crate) fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Shard::new()))
                .collect(),
            hasher: IdBuildHasher::default(),
        }
    }

    #[inline]
    fn hash(&self, key: u64) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[shard_index(hash)]
    }

    /// A copy of the node keyed `key`, read without a lock (see the module docs). Its
    /// pointers may be followed for as long as `guard` stays pinned.
    #[inline]
    pub(crate) fn read(&self, key: u64, guard: &Guard) -> Option<NodeCopy> {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        for _ in 0..OPTIMISTIC_TRIES {
            let before = shard.version.load(Ordering::Acquire);
            if before & 1 == 0 {
                // SAFETY: tables are retired with `defer_destroy` after a writer swapped
                // them out, so the one loaded here stays allocated while `guard` is
                // pinned; it is never null.
                let table = unsafe { shard.table.load(Ordering::Acquire, guard).deref() };
                let copy = table
                    .find(key, hash)
                    .map(|i| table.buckets[i].node.copy_words());
                fence(Ordering::Acquire);
                if cfg!(loom_break = "read_unchecked")
                    || shard.version.load(Ordering::Relaxed) == before
                {
                    return copy.map(NodeCopy);
                }
            }
            std::hint::spin_loop();
        }
        self.get(&key).map(|node| NodeCopy(node.copy_words()))
    }

    /// Starts loading the first bucket of `key`'s probe into the cache, so that a later
    /// [`read`](Self::read) of it overlaps the work between (a hint: no effect on
    /// what any read returns).
    #[inline]
    pub(crate) fn prefetch(&self, key: u64, guard: &Guard) {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        // SAFETY: as in `read`: a table loaded under `guard` stays allocated while it is
        // pinned, and is never null.
        let table = unsafe { shard.table.load(Ordering::Acquire, guard).deref() };
        // One line: a bucket is one (`Bucket`'s alignment).
        prefetch::<Bucket>(&table.buckets[hash as usize & table.mask()]);
    }

    /// Prefetches ([`prefetch`](Self::prefetch)) the keys a loop over `len` keys in order
    /// will take [`AHEAD`] steps after step `i` (`key(j)`: the key of step `j`), from
    /// `*next` on, the first of them not prefetched yet: a write loop that takes one
    /// block after another then overlaps the misses of the next few buckets with its
    /// locked work on this one.
    #[inline]
    pub(crate) fn prefetch_ahead(
        &self,
        key: impl Fn(usize) -> u64,
        (i, len): (usize, usize),
        next: &mut usize,
        guard: &Guard,
    ) {
        let end = i.saturating_add(AHEAD).min(len);
        while *next < end {
            self.prefetch(key(*next), guard);
            *next += 1;
        }
    }

    /// `items`, each yielded once the bucket of the item [`AHEAD`] steps on (`key` of
    /// it) is prefetched (the first `AHEAD` before the first item): for a write loop that
    /// takes one key after another, as [`prefetch_ahead`](Self::prefetch_ahead) for loops
    /// that may skip.
    pub(crate) fn prefetching<'m, I>(
        &'m self,
        items: I,
        key: impl Fn(&I::Item) -> u64 + 'm,
        guard: &'m Guard,
    ) -> impl Iterator<Item = I::Item> + 'm
    where
        I: Iterator + Clone + 'm,
    {
        let mut ahead = items.clone();
        for item in ahead.by_ref().take(AHEAD) {
            self.prefetch(key(&item), guard);
        }
        items.inspect(move |_| {
            if let Some(next) = ahead.next() {
                self.prefetch(key(&next), guard);
            }
        })
    }

    /// The node keyed `key`, read under the shard's read lock (held by the result).
    #[inline]
    pub(crate) fn get(&self, key: &u64) -> Option<Ref<'_>> {
        let hash = self.hash(*key);
        let shard = self.shard(hash);
        let lock = shard.lock.read();
        let table = shard.locked_table();
        let i = table.find(*key, hash)?;
        let node: *const Node = &*table.buckets[i].node;
        Some(Ref { _lock: lock, node })
    }

    /// The node keyed `key`, to change under the shard's write lock (held by the result).
    pub(crate) fn get_mut(&self, key: &u64) -> Option<RefMut<'_>> {
        match self.entry(*key) {
            Entry::Occupied(o) => Some(RefMut(o)),
            Entry::Vacant(_) => None,
        }
    }

    /// The entry of `key`, under the shard's write lock (held by the result).
    pub(crate) fn entry(&self, key: u64) -> Entry<'_> {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let write = ShardWrite {
            _lock: shard.lock.write(),
            shard,
            odd: false,
        };
        let table = shard.locked_table();
        match table.find(key, hash) {
            Some(index) => {
                let copy = table.buckets[index].node.copy_words();
                Entry::Occupied(OccupiedEntry {
                    map: self,
                    write,
                    index,
                    copy,
                    dirty: false,
                })
            }
            None => Entry::Vacant(VacantEntry {
                map: self,
                write,
                key,
                hash,
            }),
        }
    }

    /// The shard (of `0..SHARDS`) that holds `key`: the order in which passes over the
    /// map (`for_each_in`) reach it.
    #[cfg(test)]
    pub(crate) fn shard_of(&self, key: u64) -> usize {
        shard_index(self.hash(key))
    }

    /// Puts `node` at `key`, returning the node it replaces.
    #[cfg(test)]
    pub(crate) fn insert(&self, key: u64, node: Node) -> Option<Node> {
        match self.entry(key) {
            Entry::Occupied(mut o) => Some(o.insert(node)),
            Entry::Vacant(v) => {
                v.insert(node);
                None
            }
        }
    }

    /// Takes the node keyed `key` out of the map.
    pub(crate) fn remove(&self, key: &u64) -> Option<(u64, Node)> {
        match self.entry(*key) {
            Entry::Occupied(o) => Some((*key, o.remove())),
            Entry::Vacant(_) => None,
        }
    }

    /// Calls `f` with each node and its key, shard after shard under each shard's read
    /// lock (not a snapshot while writers run).
    pub(crate) fn for_each(&self, f: impl FnMut(u64, &Node)) {
        self.for_each_in(0..SHARDS, f);
    }

    /// [`for_each`](Self::for_each) over the shards in `shards` (of `0..SHARDS`).
    pub(crate) fn for_each_in(
        &self,
        shards: std::ops::Range<usize>,
        mut f: impl FnMut(u64, &Node),
    ) {
        for shard in &self.shards[shards] {
            let _lock = shard.lock.read();
            for bucket in shard.locked_table().buckets.iter() {
                if !bucket.node.is_free() {
                    f(bucket.key.load(Ordering::Relaxed), &bucket.node);
                }
            }
        }
    }

    /// Nodes in the map (each shard's count read in turn).
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.len.load(Ordering::Relaxed))
            .sum()
    }

    /// The heap bytes of the tables' buckets.
    pub(crate) fn heap_bytes(&self) -> usize {
        let buckets: usize = self
            .shards
            .iter()
            .map(|s| {
                let _lock = s.lock.read();
                s.locked_table().buckets.len()
            })
            .sum();
        buckets * std::mem::size_of::<Bucket>()
    }

    /// Moves `node` into a free bucket of `shard`'s table for `hash`, growing the table
    /// first if it would be more than half full. Under the write lock, in an odd window.
    fn place(&self, shard: &Shard, key: u64, hash: u64, node: Node) {
        let len = shard.len.load(Ordering::Relaxed);
        if 2 * (len + 1) > shard.locked_table().buckets.len() {
            self.grow(shard);
        }
        let table = shard.locked_table();
        table.buckets[table.free_from(hash)].fill(key, &node);
        std::mem::forget(node); // the bucket owns it now
        shard.len.store(len + 1, Ordering::Relaxed);
    }

    /// Doubles `shard`'s table: every node moves to the new one, which is then published
    /// and the old one retired. Under the write lock, in an odd window.
    fn grow(&self, shard: &Shard) {
        let old = shard.locked_table();
        let new = Table::new(old.buckets.len() * 2);
        for bucket in old.buckets.iter().filter(|b| !b.node.is_free()) {
            let key = bucket.key.load(Ordering::Relaxed);
            new.buckets[new.free_from(self.hash(key))].fill(key, &bucket.node);
        }
        let guard = epoch::pin();
        let old = shard.table.swap(Owned::new(new), Ordering::AcqRel, &guard);
        // SAFETY: unlinked just now (readers that loaded it are pinned, or fail their
        // version check and load the new one); its nodes moved, and dropping a table drops
        // no node.
        unsafe { guard.defer_destroy(old) };
    }

    /// Empties bucket `hole` of `shard`'s table, shifting back the buckets after it that
    /// probed past it. Under the write lock, in an odd window.
    fn erase(&self, shard: &Shard, hole: usize) {
        let table = shard.locked_table();
        let mask = table.mask();
        let mut hole = hole;
        let mut next = (hole + 1) & mask;
        loop {
            let bucket = &table.buckets[next];
            if bucket.node.is_free() {
                break;
            }
            let key = bucket.key.load(Ordering::Relaxed);
            let home = self.hash(key) as usize & mask;
            // The bucket may fill the hole unless its home lies in (hole, next].
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                table.buckets[hole].fill(key, &bucket.node);
                hole = next;
            }
            next = (next + 1) & mask;
        }
        table.buckets[hole].node.set_free();
        let len = shard.len.load(Ordering::Relaxed);
        shard.len.store(len - 1, Ordering::Relaxed);
    }
}

impl Default for NodeMap {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for NodeMap {
    fn drop(&mut self) {
        for shard in self.shards.iter() {
            // SAFETY: `&mut self`: no other thread reads the map, and the table was never
            // retired (it is the current one).
            let table = unsafe {
                shard
                    .table
                    .load(Ordering::Relaxed, epoch::unprotected())
                    .into_owned()
            };
            for bucket in table.buckets.iter().filter(|b| !b.node.is_free()) {
                // Each node once: the bucket owns it, and the table goes now.
                drop(ManuallyDrop::into_inner(bucket.node.copy_words()));
            }
        }
    }
}

mod entry;
#[cfg(test)]
mod tests;
