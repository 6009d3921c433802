// Requests in the reference model: pins, releases and cached-token reports (see the
// module docs of `model.rs`). Included into `model.rs` as the module `requests`.

use approx_kv_index::{LocalBlockHash, SequenceHash, WorkerId};

use super::{Claim, Model, Reg, PIN};

/// A running request as the model keeps it.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    reg: Reg,
    local: Vec<LocalBlockHash>,
    seq: Vec<SequenceHash>,
    /// The worker's depth for the prompt just before the request.
    pub predicted: usize,
    /// The worker's claim on its deepest predicted block just before.
    prior: u64,
    reported: bool,
}

impl Model {
    /// `begin_request` of `worker` at `now` for a prompt with these hashes.
    pub fn begin(
        &mut self,
        now: u64,
        worker: WorkerId,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) -> ModelRequest {
        let reg = self.register(worker);
        let predicted = self
            .scores(now, local)
            .get(&worker)
            .map_or(0, |&d| d as usize);
        let prior = predicted
            .checked_sub(1)
            .and_then(|i| self.entries.get(&(reg, seq[i].0)))
            .map_or(0, |c| c.expiry);
        let mut request = ModelRequest {
            reg,
            local: Vec::new(),
            seq: Vec::new(),
            predicted,
            prior,
            reported: false,
        };
        self.pin(&mut request, local, seq);
        request
    }

    /// `request_output`: returns how many blocks joined.
    pub fn output(
        &mut self,
        request: &mut ModelRequest,
        local: &[LocalBlockHash],
        seq: &[SequenceHash],
    ) -> usize {
        let held = request.seq.len();
        if seq.len() <= held || seq[..held] != request.seq[..] || !self.alive(request.reg) {
            return 0;
        }
        self.pin(request, local, seq);
        seq.len() - held
    }

    /// Pins the blocks of the path past those `request` holds, and takes the path.
    fn pin(&mut self, request: &mut ModelRequest, local: &[LocalBlockHash], seq: &[SequenceHash]) {
        let reg = request.reg;
        for s in &seq[request.seq.len()..] {
            *self.pins.entry((reg, s.0)).or_default() += 1;
        }
        let claim = Claim {
            exact: false,
            expiry: PIN,
        };
        let blocks: Vec<_> = seq
            .iter()
            .zip(local)
            .map(|(s, l)| (s.0, l.0, claim))
            .collect();
        let added = self.upsert_chain(reg, None, &blocks);
        if self.caps() {
            self.enforce(reg, added, None);
        }
        request.local = local.to_vec();
        request.seq = seq.to_vec();
    }

    /// `finish_request` at `now`.
    pub fn release(&mut self, now: u64, request: ModelRequest) {
        let ModelRequest {
            reg, local, seq, ..
        } = request;
        if seq.is_empty() || !self.alive(reg) {
            return;
        }
        for s in &seq {
            let count = self.pins.get_mut(&(reg, s.0)).expect("pinned");
            *count -= 1;
            if *count == 0 {
                self.pins.remove(&(reg, s.0));
            }
        }
        let released = seq
            .iter()
            .rev()
            .take_while(|s| !self.pins.contains_key(&(reg, s.0)))
            .count();
        if released == 0 {
            return;
        }
        // The released blocks' pins are lowered to the release's expiry (a block a
        // `Removed` event took out, or held exactly with no claim, is passed over).
        let expiry = self.expiry_for(reg, now, self.ttl);
        for s in &seq[seq.len() - released..] {
            if let Some(claim) = self.entries.get_mut(&(reg, s.0)) {
                if claim.expiry == PIN {
                    claim.expiry = expiry;
                }
            }
        }
        self.store_decision(reg, (&local, &seq), expiry, released);
    }

    /// `observe_cached` at `now` of `delivered` full blocks (the count already checked
    /// against the prompt). Returns whether it was taken.
    pub fn observe(&mut self, now: u64, request: &mut ModelRequest, delivered: usize) -> bool {
        if request.reported || !self.alive(request.reg) {
            return false;
        }
        request.reported = true;
        let report = self.reports.entry(request.reg).or_default();
        report.0 += 1;
        report.1 += request.predicted as u64;
        report.2 += delivered as u64;
        let reg = request.reg;
        if delivered > request.predicted {
            let len = request.seq.len();
            let extra = &request.seq[request.predicted.min(len)..delivered.min(len)];
            self.learn_from_ghosts(now, reg, extra);
        }
        if delivered >= request.predicted || request.prior == 0 {
            return true;
        }
        let held = self.count(reg);
        let mut bound = if request.prior == PIN {
            PIN - 1
        } else {
            request.prior
        };
        if !self.logs_slots {
            self.logs_slots = true;
            // The decisions up to the bound, raised to unique expiries in order.
            for (of, was, raised) in self.log_what_is_held(now) {
                if of == request.reg && was <= bound {
                    bound = bound.max(raised);
                }
            }
        }
        let log = self.slot_logs.entry(request.reg).or_default();
        let mut due = Vec::new();
        while let Some(d) = log.front().copied().filter(|d| d.expiry <= bound) {
            log.pop_front();
            due.push(d);
        }
        for d in due {
            let (removed, _) = self.walk(d.reg, d.leaf, d.expiry, usize::MAX, d.single);
            self.dropped_by_reports += removed as u64;
        }
        // What the loss teaches of the capacity.
        let kept = self.count(reg).max(1);
        let learned = match self.capacities.get(&reg).copied() {
            None => Some(held.max(1)),
            Some(cap) => {
                // An eighth lower if held well inside it; halfway down to the claims
                // kept if they are under it and at least five eighths of those held.
                let mut learned = cap;
                if held < cap - cap / 8 {
                    learned = (cap - (cap / 8).max(1)).max(kept);
                }
                if kept < cap && kept as u128 * 8 >= held as u128 * 5 {
                    learned = learned.min(kept + (cap - kept) / 2);
                }
                (learned < cap).then_some(learned)
            }
        };
        if let Some(cap) = learned {
            self.set_reg_capacity(now, reg, Some(cap));
            self.taught.insert(reg);
            self.capacities_learned += 1;
        }
        true
    }

    /// Ghosts among a report's extra blocks: unless the blocks held now and those
    /// evicted by walks after the oldest hit ghost's are fewer than the cap, the cap rises by as many
    /// as there are hits, doubling at least; every other live registration whose cap in
    /// force was the same, and whose capacity no report taught, rises to it too.
    fn learn_from_ghosts(&mut self, now: u64, reg: Reg, extra: &[SequenceHash]) {
        let (stamp, ghosts) = self.ghosts.entry(reg).or_default();
        let mut hits = 0;
        let mut oldest = u64::MAX;
        for s in extra {
            if let Some(at) = ghosts.iter().position(|g| g.0 == s.0) {
                oldest = oldest.min(ghosts[at].1);
                ghosts.remove(at);
                hits += 1;
            }
        }
        let evicted_since = stamp.saturating_sub(oldest);
        let Some(cap) = self.worker_cap(reg).filter(|_| hits > 0) else {
            return;
        };
        if (self.count(reg) as u64 + evicted_since) < cap as u64 {
            return;
        }
        let learned = cap.saturating_add(hits.max(cap));
        self.set_reg_capacity(now, reg, Some(learned));
        self.taught.insert(reg);
        self.capacities_learned += 1;
        let peers: Vec<Reg> = self.registration.values().copied().filter(|&p| p != reg).collect();
        for peer in peers {
            if !self.taught.contains(&peer) && self.worker_cap(peer) == Some(cap) {
                self.capacities.insert(peer, learned);
                self.capacities_learned += 1;
            }
        }
    }

    /// Remembers `blocks` as ghosts of `reg`, whose cap `cap` evicted them: the latest
    /// `4 x cap` (64 to 65,536) kept, a block evicted again moving to the newest, each
    /// stamped with the count of evictions once its walk is done.
    pub(super) fn add_ghosts(&mut self, reg: Reg, blocks: &[u64], cap: usize) {
        let bound = cap.saturating_mul(4).clamp(64, 1 << 16);
        let (stamp, ghosts) = self.ghosts.entry(reg).or_default();
        // Stamped once the walk is done: blocks evicted together were used together.
        *stamp += blocks.len() as u64;
        for &b in blocks {
            ghosts.retain(|g| g.0 != b);
            ghosts.push_back((b, *stamp));
            while ghosts.len() > bound {
                ghosts.pop_front();
            }
        }
    }

    /// Capacities reports set.
    pub fn capacities_learned(&self) -> u64 {
        self.capacities_learned
    }

    /// Each registered worker's reports: (reports, predicted, delivered), by worker.
    pub fn cache_reports(&self) -> Vec<(WorkerId, (u64, u64, u64))> {
        self.by_worker(&self.reports)
    }

    /// Entries dropped by reports.
    pub fn dropped_by_reports(&self) -> u64 {
        self.dropped_by_reports
    }

    /// Per registered worker, its stored, exact and pinned entries, in one pass over the
    /// entries (the caps check runs after every step, over every worker).
    pub fn counts_per_worker(&self) -> std::collections::HashMap<WorkerId, [usize; 3]> {
        let worker_of: std::collections::HashMap<Reg, WorkerId> =
            self.registration.iter().map(|(&w, &r)| (r, w)).collect();
        let mut out: std::collections::HashMap<WorkerId, [usize; 3]> = Default::default();
        for ((reg, _), claim) in &self.entries {
            if let Some(&w) = worker_of.get(reg) {
                let counts = out.entry(w).or_default();
                counts[0] += 1;
                counts[1] += usize::from(claim.exact);
                counts[2] += usize::from(claim.expiry == PIN);
            }
        }
        out
    }

    /// Pinned entries of every registration, removed ones' too.
    pub fn pinned_total(&self) -> usize {
        self.entries.values().filter(|c| c.expiry == PIN).count()
    }
}
