//! The node map's locked accesses: a shard's write lock with its odd window
//! ([`ShardWrite`]), a node read under the read lock ([`Ref`]) or copied out by a
//! lock-free read ([`NodeCopy`]), and a key's entry under the write lock, whose node a
//! writer changes as a copy written back when it is done ([`Entry`]).

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use super::{NodeMap, Shard};
use crate::sync::{fence, Ordering, RwLockReadGuard};
use crate::tree::node::Node;

/// A shard's write lock, and its odd window once [`ShardWrite::begin`] opened it.
pub(super) struct ShardWrite<'a> {
    pub(super) _lock: crate::sync::RwLockWriteGuard<'a, ()>,
    pub(super) shard: &'a Shard,
    pub(super) odd: bool,
}

impl ShardWrite<'_> {
    /// Makes the version odd (once): lock-free readers now retry until [`Drop`].
    #[inline]
    pub(super) fn begin(&mut self) {
        if !self.odd {
            let v = self.shard.version.load(Ordering::Relaxed);
            self.shard
                .version
                .store(v.wrapping_add(1), Ordering::Relaxed);
            // Orders the odd version before every bucket write that follows.
            fence(Ordering::Release);
            self.odd = true;
        }
    }
}

impl Drop for ShardWrite<'_> {
    fn drop(&mut self) {
        if self.odd {
            let v = self.shard.version.load(Ordering::Relaxed);
            self.shard
                .version
                .store(v.wrapping_add(1), Ordering::Release);
        }
    }
}

/// A node copied out of the map by a lock-free read: a value, owning nothing.
pub(crate) struct NodeCopy(pub(super) ManuallyDrop<Node>);

impl Deref for NodeCopy {
    type Target = Node;
    #[inline]
    fn deref(&self) -> &Node {
        &self.0
    }
}

/// A node read under its shard's read lock.
pub(crate) struct Ref<'a> {
    pub(super) _lock: RwLockReadGuard<'a, ()>,
    pub(super) node: *const Node,
}

impl Deref for Ref<'_> {
    type Target = Node;
    #[inline]
    fn deref(&self) -> &Node {
        // SAFETY: a bucket of the shard's current table, which no writer changes or
        // retires while `_lock` (the read lock) is held.
        unsafe { &*self.node }
    }
}

/// A node changed under its shard's write lock: written back when dropped.
pub(crate) struct RefMut<'a>(pub(super) OccupiedEntry<'a>);

impl Deref for RefMut<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        self.0.get()
    }
}

impl DerefMut for RefMut<'_> {
    fn deref_mut(&mut self) -> &mut Node {
        self.0.get_mut()
    }
}

/// A key's place in the map, under its shard's write lock.
pub(crate) enum Entry<'a> {
    Occupied(OccupiedEntry<'a>),
    Vacant(VacantEntry<'a>),
}

/// A key with a node. The writer works on a copy of the node, written back on drop.
pub(crate) struct OccupiedEntry<'a> {
    pub(super) map: &'a NodeMap,
    pub(super) write: ShardWrite<'a>,
    pub(super) index: usize,
    pub(super) copy: ManuallyDrop<Node>,
    /// The copy may differ from the bucket: write it back.
    pub(super) dirty: bool,
}

impl OccupiedEntry<'_> {
    pub(crate) fn get(&self) -> &Node {
        &self.copy
    }

    /// The node, to change: opens the odd window (whatever the change retires, it
    /// retires inside it, after readers of the old words pinned).
    pub(crate) fn get_mut(&mut self) -> &mut Node {
        self.write.begin();
        self.dirty = true;
        &mut self.copy
    }

    /// Replaces the node, returning the old one.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, node: Node) -> Node {
        std::mem::replace(self.get_mut(), node)
    }

    /// Takes the node out of the map.
    pub(crate) fn remove(mut self) -> Node {
        self.write.begin();
        self.map.erase(self.write.shard, self.index);
        self.dirty = false;
        // The bucket no longer holds the node: the copy is its only owner now (and `self`
        // keeps a node that owns nothing, and writes nothing back).
        ManuallyDrop::into_inner(std::mem::replace(&mut self.copy, Node::free()))
    }
}

impl Drop for OccupiedEntry<'_> {
    fn drop(&mut self) {
        if self.dirty {
            let table = self.write.shard.locked_table();
            self.copy.store_words(&table.buckets[self.index].node);
        }
    }
}

/// A key without a node.
pub(crate) struct VacantEntry<'a> {
    pub(super) map: &'a NodeMap,
    pub(super) write: ShardWrite<'a>,
    pub(super) key: u64,
    pub(super) hash: u64,
}

impl VacantEntry<'_> {
    pub(crate) fn insert(mut self, node: Node) {
        self.write.begin();
        self.map.place(self.write.shard, self.key, self.hash, node);
    }
}
