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

/// W workers, each an LRU of `capacity` index blocks plus the end times of the requests
/// it is serving.
#[derive(Debug)]
pub struct Cluster {
    caches: Vec<Lru>,
    running: Vec<Vec<u64>>,
    served: Vec<u64>,
    speeds: Speeds,
    block_size: u64,
    /// How long each evicted block had gone unused (ms): the cache's real retention.
    pub eviction_ages_ms: Vec<u32>,
}

impl Cluster {
    /// An empty cluster.
    pub fn new(workers: usize, capacity: usize, block_size: u32, speeds: Speeds) -> Self {
        Self {
            caches: (0..workers).map(|_| Lru::new(capacity)).collect(),
            running: vec![Vec::new(); workers],
            served: vec![0; workers],
            speeds,
            block_size: u64::from(block_size),
            eviction_ages_ms: Vec::new(),
        }
    }

    /// Requests routed to each worker so far.
    pub fn served(&self) -> &[u64] {
        &self.served
    }

    /// Requests each worker is serving at `now_ms` (those that finished are dropped).
    pub fn loads(&mut self, now_ms: u64, out: &mut Vec<u32>) {
        out.clear();
        for running in &mut self.running {
            running.retain(|&end| end > now_ms);
            out.push(running.len() as u32);
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
        for j in (0..u64::from(req.decode_blocks)).rev() {
            // Unique per (request, block): never matched, but takes room.
            let key = mix64(((id as u64) << 25 | j) ^ 0xD1CE_D1CE_D1CE_D1CE);
            note(cache.touch(key, now_ms));
        }
        for s in req.seq.iter().rev() {
            note(cache.touch(s.0, now_ms));
        }
        let uncached = req
            .input_length
            .saturating_sub(hit as u64 * self.block_size);
        let secs = uncached as f64 / self.speeds.prefill_tps
            + req.output_length as f64 / self.speeds.decode_tps;
        let end = now_ms.saturating_add((secs * 1000.0).ceil() as u64);
        self.running[w].push(end);
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
