//! The simulated cluster: the ground truth a real engine would have. Each worker has an
//! LRU KV cache and a set of requests in service (its load).

use approx_kv_index::SequenceHash;

use crate::lru::Lru;
use crate::workload::Request;
use approx_kv_rng::mix64;

/// Speeds that turn a request into a service time.
#[derive(Debug, Clone, Copy)]
pub struct Speeds {
    /// Uncached prompt tokens a worker prefills per second.
    pub prefill_tps: f64,
    /// Tokens one request decodes per second.
    pub decode_tps: f64,
}

/// A request in service: when it ends, and the blocks it pins until then (none unless
/// the cluster pins running requests).
#[derive(Debug, Clone)]
struct Running {
    end_ms: u64,
    /// Its blocks in the order they are freed: decode blocks last to first, then the
    /// prompt's last to first.
    blocks: Vec<u64>,
}

/// W workers, each an LRU of index blocks plus the requests it is serving.
#[derive(Debug)]
pub struct Cluster {
    caches: Vec<Lru>,
    running: Vec<Vec<Running>>,
    /// Running requests' blocks are pinned until they end, then freed tail first.
    pins: bool,
    /// Workers that restarted.
    restarted: Vec<usize>,
    served: Vec<u64>,
    speeds: Speeds,
    block_size: u64,
    /// How long each evicted block had gone unused (ms): the cache's real retention.
    pub eviction_ages_ms: Vec<u32>,
}

impl Cluster {
    /// An empty cluster of `workers` equal LRUs of `capacity` blocks.
    #[cfg(test)]
    pub fn new(workers: usize, capacity: usize, block_size: u32, speeds: Speeds) -> Self {
        Self::with(&vec![capacity; workers], block_size, speeds, false)
    }

    /// An empty cluster, one worker per capacity; `pins`: running requests' blocks stay
    /// until they end.
    pub fn with(capacities: &[usize], block_size: u32, speeds: Speeds, pins: bool) -> Self {
        Self {
            caches: capacities.iter().map(|&c| Lru::new(c)).collect(),
            running: vec![Vec::new(); capacities.len()],
            pins,
            restarted: Vec::new(),
            served: vec![0; capacities.len()],
            speeds,
            block_size: u64::from(block_size),
            eviction_ages_ms: Vec::new(),
        }
    }

    /// Requests routed to each worker so far.
    pub fn served(&self) -> &[u64] {
        &self.served
    }

    /// Requests each worker is serving at `now_ms` (those that finished are dropped,
    /// their pinned blocks freed in order of their ends).
    pub fn loads(&mut self, now_ms: u64, out: &mut Vec<u32>) {
        out.clear();
        for (running, cache) in self.running.iter_mut().zip(&mut self.caches) {
            let mut ended: Vec<Running> = Vec::new();
            running.retain(|r| {
                let done = r.end_ms <= now_ms;
                if done && !r.blocks.is_empty() {
                    ended.push(r.clone());
                }
                !done
            });
            ended.sort_by_key(|r| r.end_ms);
            for r in ended {
                for &key in &r.blocks {
                    cache.unpin(key);
                    cache.touch(key, r.end_ms);
                }
            }
            out.push(running.len() as u32);
        }
    }

    /// Restarts the workers whose time in `restarts` has come by `now_ms` (each once:
    /// `restarted` remembers).
    pub fn restart_due(&mut self, restarts: &[Option<u64>], now_ms: u64) {
        for (w, at) in restarts.iter().enumerate() {
            if at.is_some_and(|at| at <= now_ms) && !self.restarted.contains(&w) {
                self.restarted.push(w);
                self.restart(w);
            }
        }
    }

    /// Worker `w`'s engine restarts: its cache is empty, its running requests' blocks gone.
    fn restart(&mut self, w: usize) {
        self.caches[w].clear();
        for r in &mut self.running[w] {
            r.blocks.clear();
        }
    }

    /// How many leading blocks of `seq` worker `w` really holds.
    pub fn prefix_hit(&self, w: usize, seq: &[SequenceHash]) -> usize {
        let cache = &self.caches[w];
        seq.iter().take_while(|s| cache.contains(s.0)).count()
    }

    /// Serves request number `id` on worker `w` at `now_ms`: returns its real prefix hit
    /// (in blocks) and when it ends, then admits its decode and prompt blocks and adds it
    /// to the load.
    ///
    /// Like vLLM's free queue, a request's blocks are released tail first: its decode
    /// blocks become the least recent, its first prompt block the most recent, so the
    /// LRU evicts the ends of prompts before their shared prefixes.
    pub fn serve(&mut self, w: usize, id: usize, req: &Request, now_ms: u64) -> (usize, u64) {
        let hit = self.prefix_hit(w, &req.seq);
        let cache = &mut self.caches[w];
        let ages = &mut self.eviction_ages_ms;
        let mut note = |age: Option<u64>| {
            if let Some(a) = age {
                ages.push(u32::try_from(a).unwrap_or(u32::MAX));
            }
        };
        let decode = (0..u64::from(req.decode_blocks))
            .rev()
            // Unique per (request, block): never matched, but takes room.
            .map(|j| mix64(((id as u64) << 25 | j) ^ 0xD1CE_D1CE_D1CE_D1CE));
        let mut blocks = Vec::new();
        for key in decode.chain(req.seq.iter().rev().map(|s| s.0)) {
            note(cache.touch(key, now_ms));
            if self.pins {
                cache.pin(key); // in use until the request ends
                blocks.push(key);
            }
        }
        let uncached = req
            .input_length
            .saturating_sub(hit as u64 * self.block_size);
        let secs = uncached as f64 / self.speeds.prefill_tps
            + req.output_length as f64 / self.speeds.decode_tps;
        let end = now_ms.saturating_add((secs * 1000.0).ceil() as u64);
        self.running[w].push(Running {
            end_ms: end,
            blocks,
        });
        self.served[w] += 1;
        (hit, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceRequest;
    use crate::workload::prepare;

    #[test]
    fn hits_loads_and_decode_blocks() {
        let t = |ids: Vec<u64>, input| TraceRequest {
            timestamp_ms: 0.0,
            input_length: input,
            output_length: 10,
            hash_ids: ids,
        };
        let reqs = prepare(&[t(vec![1, 2], 1024), t(vec![1, 3], 1024)], 512, 256);
        let speeds = Speeds {
            prefill_tps: 1000.0,
            decode_tps: 10.0,
        };
        let mut c = Cluster::new(2, 100, 256, speeds);
        assert_eq!(c.serve(0, 0, &reqs[0], 0).0, 0);
        assert_eq!(c.prefix_hit(0, &reqs[1].seq), 2); // first trace block shared
        assert_eq!(c.prefix_hit(1, &reqs[1].seq), 0);
        assert_eq!(c.serve(0, 1, &reqs[1], 0).0, 2);
        let mut loads = Vec::new();
        c.loads(0, &mut loads);
        assert_eq!(loads, [2, 0]);
        // The second request (half cached) ends first: 0.512 s prefill + 1 s decode,
        // against 1.024 s + 1 s for the first.
        c.loads(1600, &mut loads);
        assert_eq!(loads, [1, 0]);
        c.loads(10_000, &mut loads);
        assert_eq!(loads, [0, 0]);
        assert_eq!(c.served(), [2, 0]);
        // 4 + 2 distinct prompt blocks and 1 decode block each: 8 blocks, no eviction.
        assert!(c.eviction_ages_ms.is_empty());
    }
}
