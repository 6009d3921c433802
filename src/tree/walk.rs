//! Walks: a decision's timer (or an eviction) ending a slot's claims from a leaf towards
//! the root, and the purge of dead slots' entries that no walk reaches.

use super::Writing;

use super::claim::Claim;
use super::map::Entry;
use super::node::{Kind, Outcome, Settle};
use super::run_alloc;
use super::run_nodes::RunWalk;
use super::{finish_removal, Tree};
use crate::slot::Slot;
use crate::SequenceHash;

impl Tree {
    /// Walks from `leaf` towards the root ending `slot`'s approximate claims that are at
    /// or before `threshold`: an entry with no other claim is removed, one that is also
    /// exact keeps only its exact claim (or goes whole, and an exact-only entry too, if the
    /// slot is dead). Unlinks nodes left empty.
    ///
    /// Stops at the first block where the slot's approximate claim is later than
    /// `threshold` or absent, where the slot holds no entry, or whose node is gone: see
    /// `docs/design.md` ("One timer per decision") for why everything above is covered by
    /// another pending walk. Also stops once `budget` entries are removed, returning the
    /// block to resume from, and after the first block if `span` is [`Span::Block`].
    ///
    /// Calls `forget` with the block just *before* each entry is removed, with the
    /// shard's write lock held: the caller uncounts the entry there, so a slot's count never overstates the
    /// entries it holds while a walk runs (a writer of the same slot computing its excess
    /// over a cap would otherwise evict blocks it need not). A dead slot's count may then
    /// reach zero a moment before its last entry goes; its recycling waits for this
    /// thread's pin (`docs/design.md`, "Epoch protocol").
    pub(crate) fn walk(
        &self,
        walk: Walk,
        mut forget: impl FnMut(SequenceHash),
        guard: &Writing<'_>,
    ) -> Walked {
        let Walk {
            leaf,
            slot,
            budget,
            span,
            blocks,
            ..
        } = walk;
        let (mut removed, mut settled) = (0, 0);
        let mut key = leaf.0;
        loop {
            if settled >= blocks {
                break;
            }
            if removed >= budget {
                return Walked {
                    removed,
                    settled,
                    resume: Some(SequenceHash(key)),
                };
            }
            let Entry::Occupied(mut entry) = self.nodes.entry(key) else {
                break;
            };
            match entry.get().kind() {
                Kind::Block => {}
                // A walk reaches a run through its tail (a decision's leaf, or the parent
                // of a block or run below it).
                Kind::Tail { head, run } => {
                    drop(entry);
                    let rest = Walk {
                        budget: budget - removed,
                        blocks: blocks - settled,
                        ..walk
                    };
                    match self.walk_run((head, run, key), rest, &mut forget, guard) {
                        RunWalk::Removed {
                            removed: n,
                            blocks: b,
                            parent,
                            depth,
                        } => {
                            removed += n;
                            settled += b;
                            if depth == 0 {
                                break;
                            }
                            key = parent.0;
                        }
                        RunWalk::Stop => break,
                        RunWalk::Again => {}
                    }
                    continue;
                }
                // A head is never a walk's leaf or a block's parent; split it and look again.
                Kind::Head(run) => {
                    drop(entry);
                    self.split(SequenceHash(key), run, guard);
                    continue;
                }
            }
            let (parent, depth) = (entry.get().parent(), entry.get().depth());
            if depth > 0 {
                // Where the walk goes next unless it stops here: that miss overlaps this
                // block's settling.
                self.nodes.prefetch(parent.0, guard);
            }
            let decide = |c| {
                let settle = walk.decide(c);
                if settle == Settle::Remove {
                    forget(SequenceHash(key));
                }
                settle
            };
            let outcome = self.reshape(entry.get_mut(), guard, |n| n.settle(slot, decide, guard));
            if matches!(outcome, Outcome::Absent | Outcome::Kept) {
                break;
            }
            settled += 1;
            removed += finish_removal(entry, outcome);
            if depth == 0 || span == Span::Block {
                break;
            }
            key = parent.0;
        }
        Walked {
            removed,
            settled,
            resume: None,
        }
    }

    /// Removes every entry of the given (dead) slots, sorted by slot, from the shards in
    /// `shards` (of `0..SHARDS`), node by node, one shard lock at a time: each node holding
    /// any of them changes once, whatever the number of them it holds (one new array,
    /// `Node::remove_slots`), and so does a run's head. Adds the entries removed per slot to
    /// `removed` (in `slots` order); returns whether it found any. The engine's purge
    /// (`core/purge.rs`) calls it a few shards at a time, and again over all shards until
    /// a round finds nothing.
    pub(crate) fn purge_shards(
        &self,
        slots: &[Slot],
        removed: &mut [usize],
        shards: std::ops::Range<usize>,
        guard: &Writing<'_>,
    ) -> bool {
        debug_assert!(slots.windows(2).all(|w| w[0] < w[1]));
        let index = |slot: Slot| slots.binary_search(&slot).ok();
        let gone = |slot: Slot| index(slot).is_some();
        // Each key with its run, if it is a run's head (the run, pinned, outlives a split).
        let mut keys: Vec<(u64, Option<usize>)> = Vec::new();
        self.nodes.for_each_in(shards, |key, n| {
            if n.holders(guard).iter().any(|h| gone(h.slot())) {
                keys.push(match n.kind() {
                    Kind::Head(run) => (key, Some(run)),
                    _ => (key, None),
                });
            }
        });
        if keys.is_empty() {
            return false;
        }
        let mut blocks = Vec::new();
        for (key, run) in keys {
            let Some(run) = run else {
                blocks.push(key);
                continue;
            };
            // SAFETY: read from a head under the shard lock, with `guard` pinned since.
            let r = unsafe { run_alloc::run_at(run, guard) };
            let Entry::Occupied(mut entry) = self.nodes.entry(key) else {
                continue; // removed since the scan
            };
            if entry.get().kind() != Kind::Head(run) || !r.is_live() {
                // Split up (or being split) since the scan: its blocks are nodes.
                drop(entry);
                r.wait_split();
                blocks.extend_from_slice(r.seqs());
                continue;
            }
            let len = r.len();
            let count = |slot: Slot| removed[index(slot).expect("a purged slot")] += len;
            let empty = self.reshape(entry.get_mut(), guard, |n| {
                n.remove_slots(gone, count, guard)
            });
            if empty {
                self.remove_run(entry, (SequenceHash(key), run, r.tail()), r);
            }
        }
        for key in blocks {
            let Entry::Occupied(mut entry) = self.nodes.entry(key) else {
                continue;
            };
            if entry.get().kind() != Kind::Block {
                continue;
            }
            let count = |slot: Slot| removed[index(slot).expect("a purged slot")] += 1;
            if self.reshape(entry.get_mut(), guard, |n| {
                n.remove_slots(gone, count, guard)
            }) {
                entry.remove();
            }
        }
        true
    }
}

/// One walk: `slot`'s entries from `leaf` towards the root (see [`Tree::walk`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk {
    /// Where it starts: a decision's last block (or a run's tail marker).
    pub(crate) leaf: SequenceHash,
    /// Whose entries it ends.
    pub(crate) slot: Slot,
    /// Approximate claims at or before this time end (later ones belong to later
    /// decisions, whose own walks come).
    pub(crate) threshold: u64,
    /// Whether the slot's worker is alive: a dead slot's entries go whole, exact ones too.
    pub(crate) slot_alive: bool,
    /// The most entries it removes; it returns where to resume when it stops for that.
    pub(crate) budget: usize,
    /// The whole path, or the leaf only.
    pub(crate) span: Span,
    /// The most blocks it settles (entries removed, approximate claims ended or
    /// lowered): a released request's blocks below those still pinned (`core/pins.rs`);
    /// `usize::MAX` for every other walk.
    pub(crate) blocks: usize,
    /// A release's walk: approximate claims later than this (the pins) are lowered to it
    /// instead of ended, and the walk stops at any other; `None` for every other walk.
    pub(crate) lower_to: Option<u64>,
}

impl Walk {
    /// What the walk does with an entry whose claim is `c`.
    #[inline]
    pub(super) fn decide(&self, c: Claim) -> Settle {
        match self.lower_to {
            Some(expiry) if c.expiry > expiry => Settle::Lower(expiry),
            Some(_) => Settle::Keep,
            None => walk_decision(c, self.threshold, self.slot_alive),
        }
    }
}

/// How far a walk may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Span {
    /// From the leaf up, as far as the stop rules allow (a decision's walk).
    Path,
    /// The leaf only (a restored or replayed claim: its ancestors have walks of their own,
    /// and may carry an equal expiry while other children still need them).
    Block,
}

/// The result of [`Tree::walk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walked {
    /// Entries removed.
    pub(crate) removed: usize,
    /// Blocks settled: entries removed, and approximate claims ended on blocks held
    /// exactly too. They are the walk's path from its leaf up, in order.
    pub(crate) settled: usize,
    /// Where the walk stopped for lack of budget, if it did.
    pub(crate) resume: Option<SequenceHash>,
}

/// What a walk does with an entry whose claim is `c`: see [`Tree::walk`].
#[inline]
fn walk_decision(c: Claim, threshold: u64, slot_alive: bool) -> Settle {
    if c.expiry > threshold {
        // A later decision's claim, whose own walk comes (for a dead slot too: removing it
        // here would leave that decision's deeper blocks above a gap).
        Settle::Keep
    } else if !slot_alive {
        Settle::Remove
    } else if c.expiry == 0 {
        Settle::Keep
    } else if c.exact {
        Settle::ClearApprox
    } else {
        Settle::Remove
    }
}
