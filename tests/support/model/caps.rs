// Caps in the reference model: decision logs, timers of walks from the past, eviction of the
// oldest logged decisions, capacities (see the module docs of `model.rs`). Included into
// `model.rs` as the module `caps`.

use super::*;

impl Model {
    /// Once a single-block eviction took `d`'s block: the registration's claim on the
    /// block's parent, if it ends no later, gets its path logged (after equal expiries)
    /// and a timer.
    pub(super) fn log_parent_path(&mut self, d: Decision, parent: u64) {
        let Some(claim) = self.entries.get(&(d.reg, parent)) else {
            return;
        };
        if claim.expiry == 0 || claim.expiry > d.expiry {
            return;
        }
        let expiry = claim.expiry;
        self.log(
            Decision {
                reg: d.reg,
                expiry,
                leaf: parent,
                single: false,
            },
            false,
        );
        if !self.never {
            self.timers.push((expiry, d.reg, parent));
        }
    }

    pub(super) fn log(&mut self, decision: Decision, sorted: bool) {
        let put = |log: &mut VecDeque<Decision>| {
            let at = if sorted {
                log.partition_point(|x| x.expiry < decision.expiry)
            } else {
                log.partition_point(|x| x.expiry <= decision.expiry)
            };
            log.insert(at, decision);
        };
        if self.logs_slots {
            put(self.slot_logs.entry(decision.reg).or_default());
        }
        if self.total.is_some() {
            put(&mut self.global_log);
        }
    }

    /// A walk from the past: a timer, and with caps a log entry in expiry order (for
    /// the leaf's block only if `single`).
    pub(super) fn schedule_walk(&mut self, reg: Reg, leaf: u64, expiry: u64, single: bool) {
        if !self.never {
            self.timers.push((expiry, reg, leaf));
        }
        if self.caps() {
            let last = self.last_expiry.entry(reg).or_default();
            *last = (*last).max(expiry);
            let decision = Decision {
                reg,
                expiry,
                leaf,
                single,
            };
            // A restored or replayed block goes before the decisions of its expiry; the
            // path above a removal's gap after them (after the decision it was cut from).
            self.log(decision, single);
        }
    }

    pub(super) fn count(&self, reg: Reg) -> usize {
        self.entries.keys().filter(|(r, _)| *r == reg).count()
    }

    /// After `reg` gained `added` entries, by a decision of its own if `fresh` (its
    /// expiry and blocks): see [`Model::evict`].
    pub(super) fn enforce(&mut self, reg: Reg, added: usize, fresh: Option<(u64, usize)>) {
        if added == 0 {
            return;
        }
        let quota = 2 * added;
        let mut evicted = 0;
        if let Some(cap) = self.worker_cap(reg) {
            evicted += self.evict(Some(reg), quota, cap, fresh);
        }
        if let Some(cap) = self.total {
            evicted += self.evict(None, quota - evicted, cap, None);
        }
        self.evictions += evicted as u64;
    }

    /// Evicts from `reg`'s log (`None`: the global log) while over `cap`. A recorder's
    /// own decision (`fresh`: its expiry and blocks) loses at most the blocks by which it
    /// alone exceeds the cap (none of that protection for a worker with exact entries):
    /// entries its log does not hold (decisions recorded before it logged) then stay.
    pub(super) fn evict(
        &mut self,
        reg: Option<Reg>,
        quota: usize,
        cap: usize,
        fresh: Option<(u64, usize)>,
    ) -> usize {
        let fresh = fresh
            .filter(|_| reg.is_some_and(|r| !self.had_exact.contains(&r)))
            .map(|(expiry, blocks)| (expiry, blocks.saturating_sub(cap)));
        let (fresh_expiry, mut spare) = fresh.unwrap_or((u64::MAX, usize::MAX));
        let mut evicted = 0;
        loop {
            let held = match reg {
                Some(r) => self.count(r),
                None => self.entries.len(),
            };
            let excess = held.saturating_sub(cap).min(quota - evicted);
            if excess == 0 {
                return evicted;
            }
            let log = match reg {
                Some(r) => self.slot_logs.entry(r).or_default(),
                None => &mut self.global_log,
            };
            let takes =
                |d: &Decision| d.expiry < fresh_expiry || (d.expiry == fresh_expiry && spare > 0);
            let Some(d) = log.front().copied().filter(takes) else {
                return evicted;
            };
            log.pop_front();
            let own = fresh.is_some() && d.expiry == fresh_expiry;
            let budget = if own { excess.min(spare) } else { excess };
            let parent = self
                .nodes
                .get(&d.leaf)
                .filter(|n| d.single && n.depth > 0)
                .and_then(|n| n.parent);
            let (removed, resume) = self.walk(d.reg, d.leaf, d.expiry, budget, d.single);
            if let (Some(parent), 1..) = (parent, removed) {
                self.log_parent_path(d, parent);
            }
            if reg.is_some() {
                // A worker's cap: what it evicted becomes ghosts (`requests.rs`).
                let walked = std::mem::take(&mut self.walked);
                self.add_ghosts(d.reg, &walked, cap);
            }
            if own {
                spare -= removed;
            }
            if let (Some(rest), false) = (resume, d.single) {
                self.log(Decision { leaf: rest, ..d }, true);
                if !self.never {
                    self.timers.push((d.expiry, d.reg, rest));
                }
            }
            evicted += removed;
        }
    }

    /// The bound on `reg`'s entries: its capacity, else the per-worker cap.
    pub(super) fn worker_cap(&self, reg: Reg) -> Option<usize> {
        self.capacities.get(&reg).copied().or(self.per_worker)
    }

    /// `set_worker_capacity(worker, capacity)`: registers the worker, logs every
    /// registration's decisions from now on, and evicts the worker's oldest decisions at
    /// once while it holds more than its bound.
    pub fn set_capacity(&mut self, now: u64, worker: WorkerId, capacity: Option<usize>) {
        let reg = self.register(worker);
        self.taught.remove(&reg);
        self.set_reg_capacity(now, reg, capacity);
    }

    /// [`set_capacity`](Self::set_capacity) of a registration.
    pub(super) fn set_reg_capacity(&mut self, now: u64, reg: Reg, capacity: Option<usize>) {
        if !self.logs_slots {
            self.logs_slots = true;
            let _ = self.log_what_is_held(now);
        }
        match capacity {
            Some(c) => self.capacities.insert(reg, c),
            None => self.capacities.remove(&reg),
        };
        if let Some(cap) = self.worker_cap(reg) {
            let excess = self.count(reg).saturating_sub(cap);
            if excess > 0 {
                let evicted = self.evict(Some(reg), excess, cap, None);
                self.evictions += evicted as u64;
            }
        }
    }

    /// When logs start: each live registration's leaves (live entries no deeper live
    /// entry of it continues) with an approximate claim, in order of (expiry, block,
    /// worker): the path up from the leaf (as far as the registration holds it live) is
    /// raised to a unique expiry (at least the leaf's own), with a timer, and logged.
    pub(super) fn log_what_is_held(&mut self, now: u64) -> Vec<(Reg, u64, u64)> {
        let mut raised = Vec::new();
        if self.total.is_some() {
            // The global log holds every decision already, in order: each goes into its
            // registration's log as it is.
            for decision in self.global_log.clone() {
                let log = self.slot_logs.entry(decision.reg).or_default();
                let at = log.partition_point(|x| x.expiry <= decision.expiry);
                log.insert(at, decision);
            }
            return raised;
        }
        let live: HashSet<(Reg, u64)> = self
            .entries
            .iter()
            .filter(|((reg, _), claim)| self.alive(*reg) && self.live(**claim, now))
            .map(|(&key, _)| key)
            .collect();
        let parents: HashMap<u64, u64> = live
            .iter()
            .filter_map(|&(_, key)| {
                let node = self.nodes.get(&key)?;
                Some((key, node.parent.filter(|_| node.depth > 0)?))
            })
            .collect();
        let parent_of = |key: u64| parents.get(&key).copied();
        // Continued only by a deeper entry with a claim as late (the same decision's).
        let expiry = |reg: Reg, key: u64| self.entries[&(reg, key)].expiry;
        let continued: HashSet<(Reg, u64)> = live
            .iter()
            .filter_map(|&(reg, key)| Some((reg, key, parent_of(key)?)))
            .filter(|&(reg, key, parent)| {
                live.contains(&(reg, parent)) && expiry(reg, key) >= expiry(reg, parent)
            })
            .map(|(reg, _, parent)| (reg, parent))
            .collect();
        let worker_of = |reg: Reg| {
            let found = self.registration.iter().find(|(_, &r)| r == reg);
            found.map_or(0, |(&w, _)| w)
        };
        let mut leaves: Vec<(u64, u64, WorkerId, Reg)> = live
            .iter()
            .map(|&(reg, key)| (reg, key, self.entries[&(reg, key)]))
            .filter(|&(_, _, claim)| claim.expiry != 0 && claim.expiry != PIN)
            .filter(|&(reg, key, _)| !continued.contains(&(reg, key)))
            .map(|(reg, key, claim)| (claim.expiry, key, worker_of(reg), reg))
            .collect();
        leaves.sort_unstable();
        for (expiry, leaf, _, reg) in leaves {
            let last = self.last_expiry.entry(reg).or_default();
            let was = expiry;
            let expiry = expiry.max(last.saturating_add(1)).min(LAST_INSTANT);
            *last = expiry;
            raised.push((reg, was, expiry));
            let mut key = leaf;
            loop {
                if let Some(claim) = self.entries.get_mut(&(reg, key)) {
                    claim.expiry = claim.expiry.max(expiry);
                }
                match parent_of(key) {
                    Some(parent) if live.contains(&(reg, parent)) => key = parent,
                    _ => break,
                }
            }
            if !self.never {
                self.timers.push((expiry, reg, leaf));
            }
            let decision = Decision {
                reg,
                expiry,
                leaf,
                single: false,
            };
            self.log(decision, true);
        }
        raised
    }
}
