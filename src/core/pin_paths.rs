//! The paths of one worker slot's running requests, for counting their pins (`pins.rs`):
//! how many running requests pin each block, kept as a trie of stretches.
//!
//! Every request pins a whole path from the root (its prompt, then its output), so the
//! requests pinning the block at depth `d` of a path are those whose own path passes
//! through it, and counts never grow with depth. The trie stores each stretch of blocks
//! that the same running requests pass through once, with their count; a request's pin
//! or release walks its path comparing blocks in order, so its cost is a pass over its
//! sequence hashes plus one child lookup per stretch. Positions are compared, not hash
//! values looked up: requests are told apart by where their paths part, which for paths
//! that chain (a request's always does) is where their blocks differ.

use std::collections::HashMap;

use crate::id_hasher::IdBuildHasher;
use crate::SequenceHash;

/// The running requests' paths of one slot.
#[derive(Debug)]
pub(super) struct PinPaths {
    /// Stretches by index; `ROOT` is the empty stretch above every path.
    stretches: Vec<Stretch>,
    /// Indices of stretches no path uses, for reuse (their `blocks` keep their room).
    free: Vec<usize>,
}

/// The index of the empty stretch at the root.
const ROOT: usize = 0;

/// A stretch of blocks on the paths of the same `count` running requests.
#[derive(Debug, Default)]
struct Stretch {
    blocks: Vec<SequenceHash>,
    count: u32,
    /// Stretches that go on from this one, by their first block.
    children: HashMap<SequenceHash, usize, IdBuildHasher>,
}

impl Default for PinPaths {
    fn default() -> Self {
        Self {
            stretches: vec![Stretch::default()],
            free: Vec::new(),
        }
    }
}

impl PinPaths {
    /// Forgets every path.
    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Whether no running request pins anything.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.stretches[ROOT].children.is_empty()
    }

    /// The stretches the paths use (the root not counted).
    #[cfg(test)]
    fn used(&self) -> usize {
        self.stretches.len() - 1 - self.free.len()
    }

    /// Counts one more request on the blocks of `path` from `from` on; the request
    /// already counts on `path[..from]` (its earlier blocks, pinned by an earlier call: an
    /// output joining its prompt). Blocks before `from` that no request pins are counted
    /// for it too, so that its release, which takes the whole path off, leaves every count
    /// as it was.
    pub(super) fn pin(&mut self, path: &[SequenceHash], from: usize) {
        let (mut at, mut pos) = (ROOT, 0);
        while pos < path.len() {
            let Some(child) = self.child(at, path[pos]) else {
                let end = &mut self.stretches[at];
                if at != ROOT && pos >= from && end.count == 1 && end.children.is_empty() {
                    // This request alone passes here, and nothing goes on: its new blocks
                    // extend the stretch (an output joining its prompt, block by block,
                    // stays one stretch).
                    end.blocks.extend_from_slice(&path[pos..]);
                    return;
                }
                let rest = self.alloc(&path[pos..], 1);
                self.stretches[at].children.insert(path[pos], rest);
                return;
            };
            let shared = self.shared(child, &path[pos..]);
            if shared < self.stretches[child].blocks.len() {
                self.split(child, shared);
            }
            if pos < from && from < pos + shared {
                // The request's own blocks end inside: count it only past them.
                self.split(child, from - pos);
                at = child;
                pos = from;
                continue;
            }
            if pos >= from {
                self.stretches[child].count += 1;
            }
            at = child;
            pos += shared;
        }
    }

    /// Takes one request's `path` off. Returns how many of its deepest blocks no running
    /// request pins any more (a block the paths do not hold counts as unpinned).
    pub(super) fn release(&mut self, path: &[SequenceHash]) -> usize {
        let (mut at, mut pos) = (ROOT, 0);
        // The leading blocks still pinned, the deepest stretch that holds them, and the
        // first stretch below it that no request passes through any more (with its parent):
        // that one goes, with everything that hangs below it.
        let mut kept = 0;
        let mut last_kept = None;
        let mut cut = None;
        while pos < path.len() {
            let Some(child) = self.child(at, path[pos]) else {
                break;
            };
            let shared = self.shared(child, &path[pos..]);
            if shared < self.stretches[child].blocks.len() {
                self.split(child, shared);
            }
            let stretch = &mut self.stretches[child];
            stretch.count = stretch.count.saturating_sub(1);
            if stretch.count > 0 {
                kept = pos + shared;
                (last_kept, cut) = (Some(child), None);
            } else if cut.is_none() {
                cut = Some((at, child));
            }
            at = child;
            pos += shared;
        }
        if let Some((parent, child)) = cut {
            let first = self.stretches[child].blocks[0];
            self.stretches[parent].children.remove(&first);
            self.free_subtree(child);
        }
        if let Some(stretch) = last_kept {
            self.merge_only_child(stretch);
        }
        path.len() - kept
    }

    /// The child of `at` whose first block is `first`.
    fn child(&self, at: usize, first: SequenceHash) -> Option<usize> {
        self.stretches[at].children.get(&first).copied()
    }

    /// How many leading blocks `stretch` shares with `rest` (at least one, when called
    /// for the child that `rest`'s first block chose).
    fn shared(&self, stretch: usize, rest: &[SequenceHash]) -> usize {
        self.stretches[stretch]
            .blocks
            .iter()
            .zip(rest)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Cuts `stretch` after its first `at` blocks: the rest becomes its only child, with
    /// its count and its children.
    fn split(&mut self, stretch: usize, at: usize) {
        let s = &mut self.stretches[stretch];
        let tail = Stretch {
            blocks: s.blocks.split_off(at),
            count: s.count,
            children: std::mem::take(&mut s.children),
        };
        let first = tail.blocks[0];
        let rest = self.alloc_from(tail);
        self.stretches[stretch].children.insert(first, rest);
    }

    /// Joins `stretch`'s only child into it when both have the same count (what splits
    /// left behind once the requests that parted there are gone).
    fn merge_only_child(&mut self, stretch: usize) {
        let s = &self.stretches[stretch];
        let (1, Some(&child)) = (s.children.len(), s.children.values().next()) else {
            return;
        };
        if self.stretches[child].count != self.stretches[stretch].count {
            return;
        }
        let mut taken = std::mem::take(&mut self.stretches[child]);
        let s = &mut self.stretches[stretch];
        s.blocks.extend_from_slice(&taken.blocks);
        s.children = std::mem::take(&mut taken.children);
        taken.blocks.clear();
        self.stretches[child] = taken;
        self.free.push(child);
    }

    /// A new stretch of `blocks` with `count`, reusing a free one's room.
    fn alloc(&mut self, blocks: &[SequenceHash], count: u32) -> usize {
        match self.free.pop() {
            Some(i) => {
                let s = &mut self.stretches[i];
                s.blocks.clear();
                s.blocks.extend_from_slice(blocks);
                s.count = count;
                s.children.clear();
                i
            }
            None => self.alloc_from(Stretch {
                blocks: blocks.to_vec(),
                count,
                children: HashMap::default(),
            }),
        }
    }

    /// Stores `stretch` in a free index, or a new one.
    fn alloc_from(&mut self, stretch: Stretch) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.stretches[i] = stretch;
                i
            }
            None => {
                self.stretches.push(stretch);
                self.stretches.len() - 1
            }
        }
    }

    /// Frees `stretch` and every stretch below it.
    fn free_subtree(&mut self, stretch: usize) {
        let mut pending = vec![stretch];
        while let Some(s) = pending.pop() {
            pending.extend(self.stretches[s].children.drain().map(|(_, c)| c));
            self.stretches[s].count = 0;
            self.free.push(s);
        }
    }
}

#[cfg(test)]
mod tests;
