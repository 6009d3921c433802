// Snapshots, restores and replayed dumps in the reference model (see the module docs of
// `model.rs`). Included into `model.rs` as the module `export`.

use super::*;

impl Model {
    /// A fresh index restored at `now` from a snapshot of this one taken at `now`.
    pub fn restored(&self, now: u64) -> Self {
        let mut out = Model::with_caps(Duration::from_nanos(self.ttl), self.per_worker, self.total);
        out.restore_capacities(now, &self.capacity_rows());
        out.restore(now, &self.snapshot(now));
        out
    }

    /// The registered workers' capacities, as a snapshot lists them (by worker).
    pub fn capacity_rows(&self) -> Vec<(WorkerId, usize)> {
        self.by_worker(&self.capacities)
    }

    /// A restore's first step: the snapshot's capacities set, in its order.
    pub fn restore_capacities(&mut self, now: u64, rows: &[(WorkerId, usize)]) {
        for &(worker, capacity) in rows {
            self.set_capacity(now, worker, Some(capacity));
        }
    }

    /// The live entries at `now` as a snapshot holds them, in the snapshot's order
    /// (depth, worker, block).
    pub fn snapshot(&self, now: u64) -> SnapshotRows {
        let lefts = self.ttls_left(now);
        let mut rows: SnapshotRows = self
            .registered()
            .filter(|(_, e)| self.live(*e, now))
            .map(|((w, seq), e)| {
                let node = self.nodes[&seq];
                let parent = node.parent.unwrap_or(0);
                (
                    w,
                    seq,
                    parent,
                    node.depth,
                    node.local,
                    e.exact,
                    lefts[&(w, seq)],
                )
            })
            .collect();
        rows.sort_unstable_by_key(|r| (r.3, r.0, r.1));
        rows
    }

    /// A fresh index at `now` into which the dump of this one at `now` was replayed: each
    /// live entry as a one-block `Stored` event (exact, or with its TTL left), parents
    /// first.
    pub fn replayed(&self, now: u64) -> Self {
        let mut out = Model::with_caps(Duration::from_nanos(self.ttl), self.per_worker, self.total);
        for (worker, seq, parent, depth, local, exact, left) in self.snapshot(now) {
            let parent = (depth > 0).then_some(parent);
            let block = (LocalBlockHash(local), seq, (!exact).then_some(left));
            out.stored(now, worker, parent, &[block]);
        }
        out
    }

    /// `restore` at `now` of a snapshot (from [`snapshot`](Self::snapshot), in its order)
    /// into this index: each entry is merged with what is held, its TTL left counted from
    /// `now`; then caps are enforced per worker in order of first appearance.
    pub fn restore(&mut self, now: u64, snapshot: &[SnapshotRow]) {
        let mut rows = snapshot.to_vec();
        rows.sort_by_key(|r| r.3);
        let mut added_per_reg: Vec<(Reg, usize)> = Vec::new();
        for (worker, seq, parent, depth, local, exact, left) in rows {
            let left = kept_left(left, self.ttl);
            let expiry = if left == 0 {
                0
            } else {
                expiry_after(now, left)
            };
            if !exact && expiry == 0 {
                continue;
            }
            let reg = self.register(worker);
            if exact {
                self.had_exact.insert(reg);
            }
            let parent = (depth > 0).then_some(parent);
            let held = self.entries.get(&(reg, seq)).map(|c| c.expiry);
            let added = self.upsert(reg, seq, local, parent, depth, Claim { exact, expiry });
            // A claim the entry already had (or outlasted) gets no walk of its own: the
            // walk of the claim it merged into covers it.
            if expiry != 0 && held.map_or(true, |h| h < expiry) {
                self.schedule_walk(reg, seq, expiry, true);
            }
            match added_per_reg.iter_mut().find(|(r, _)| *r == reg) {
                Some((_, n)) => *n += usize::from(added),
                None => added_per_reg.push((reg, usize::from(added))),
            }
        }
        for (reg, added) in added_per_reg {
            self.enforce(reg, added, None);
        }
    }
}
