// KV events in the reference model: `Stored` and `Removed` (see the module docs of
// `model.rs`). Included into `model.rs` as the module `events`.

use super::*;

impl Model {
    /// The block `hash` names for `reg` in an event (see the module docs).
    pub(super) fn resolve(&self, reg: Reg, hash: u64, now: u64) -> Option<u64> {
        if let Some(&ours) = self.engine.get(&(reg, hash)) {
            return Some(ours);
        }
        let held = self.entries.get(&(reg, hash))?;
        self.live(*held, now).then_some(hash)
    }

    /// A `Stored` KV event at `now`. Returns false if it was dropped (unknown parent, or
    /// block names that repeat or name the parent).
    pub fn stored(
        &mut self,
        now: u64,
        worker: WorkerId,
        parent: Option<u64>,
        blocks: &[StoredBlock],
    ) -> bool {
        // A block named twice, or named as the parent: dropped, nothing changes.
        let names: std::collections::HashSet<u64> = blocks.iter().map(|b| b.1).collect();
        if names.len() < blocks.len() || parent.is_some_and(|p| names.contains(&p)) {
            return false;
        }
        let parent = match parent {
            None => None,
            Some(hash) => {
                let in_our_hashes = blocks
                    .first()
                    .is_some_and(|&(local, engine, _)| chain_next(Some(hash), local) == engine);
                let resolved = self
                    .registration
                    .get(&worker)
                    .and_then(|&reg| self.resolve(reg, hash, now))
                    .or(in_our_hashes.then_some(hash));
                if resolved.is_none() {
                    return false;
                }
                resolved
            }
        };
        let reg = self.register(worker);
        if blocks.iter().any(|b| b.2.is_none()) {
            self.had_exact.insert(reg);
        }
        let mut prev = parent;
        let mut placed = Vec::new();
        for &(local, engine, left) in blocks {
            let claim = match left {
                None => Claim {
                    exact: true,
                    expiry: 0,
                },
                Some(0) => break,
                Some(left) => Claim {
                    exact: false,
                    expiry: expiry_after(now, kept_left(left, self.ttl)),
                },
            };
            let seq = chain_next(prev, local);
            prev = Some(seq);
            if claim.exact && engine != seq {
                self.engine.insert((reg, engine), seq);
            }
            placed.push((seq, local.0, claim));
        }
        let added = self.upsert_chain(reg, parent, &placed);
        for &(seq, _, claim) in &placed {
            if !claim.exact {
                self.schedule_walk(reg, seq, claim.expiry, true);
            }
        }
        self.enforce(reg, added, None);
        true
    }

    /// A `Removed` KV event: `worker`'s entries on these blocks are removed.
    pub fn removed(&mut self, worker: WorkerId, hashes: &[SequenceHash]) {
        let Some(&reg) = self.registration.get(&worker) else {
            return;
        };
        let blocks: Vec<u64> = hashes
            .iter()
            .map(|h| self.engine.remove(&(reg, h.0)).unwrap_or(h.0))
            .collect();
        let mut anchors = Vec::new();
        for seq in blocks {
            let Some(node) = self.nodes.get(&seq).copied() else {
                continue;
            };
            if let Some(claim) = self.remove_entry(reg, seq) {
                let walked = claim.expiry != 0 && claim.expiry != PIN && node.depth > 0;
                if let (true, Some(parent)) = (walked, node.parent) {
                    anchors.push((parent, claim.expiry));
                }
            }
        }
        for (leaf, expiry) in anchors {
            self.schedule_walk(reg, leaf, expiry, false);
        }
    }
}
