//! The simulated cluster: the ground truth a real engine would have. Each worker has an
//! LRU KV cache and a set of requests in service (its load).

use approx_kv_index::SequenceHash;

use crate::feed::EventFeed;
use crate::lru::{Evicted, Lru};
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
    /// The engines' KV events, if they publish them (`--events`).
    pub feed: Option<EventFeed>,
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
            feed: None,
        }
    }

    /// The same cluster, its engines publishing KV events into `feed`.
    pub fn publishing(mut self, feed: Option<EventFeed>) -> Self {
        self.feed = feed;
        self
    }

    /// Requests routed to each worker so far.
    pub fn served(&self) -> &[u64] {
        &self.served
    }

    /// Requests each worker is serving at `now_ms` (those that finished are dropped,
    /// their pinned blocks freed in order of their ends).
    pub fn loads(&mut self, now_ms: u64, out: &mut Vec<u32>) {
        out.clear();
        let mut gone = Vec::new();
        for (w, (running, cache)) in self.running.iter_mut().zip(&mut self.caches).enumerate() {
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
                gone.clear();
                for &key in &r.blocks {
                    cache.unpin(key);
                    gone.extend(cache.touch(key, r.end_ms).map(|e| e.key));
                }
                if let Some(feed) = &mut self.feed {
                    gone.retain(|&k| !cache.contains(k));
                    feed.removed(w, r.end_ms, &gone);
                }
            }
            out.push(running.len() as u32);
        }
    }

    /// Restarts the workers whose time in `restarts` has come by `now_ms` (each once:
    /// `restarted` remembers), and returns them.
    pub fn restart_due(&mut self, restarts: &[Option<u64>], now_ms: u64) -> Vec<usize> {
        let mut out = Vec::new();
        for (w, at) in restarts.iter().enumerate() {
            if at.is_some_and(|at| at <= now_ms) && !self.restarted.contains(&w) {
                self.restarted.push(w);
                out.push(w);
                self.restart(w);
                if let Some(feed) = &mut self.feed {
                    feed.cleared(w, now_ms);
                }
            }
        }
        out
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
        let mut gone = Vec::new();
        let mut note = |evicted: Option<Evicted>| {
            if let Some(e) = evicted {
                ages.push(u32::try_from(e.age_ms).unwrap_or(u32::MAX));
                gone.push(e.key);
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
        if let Some(feed) = &mut self.feed {
            publish(feed, w, now_ms, req, hit, cache, &mut gone);
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

/// What serving `req` from block `hit` on did to `cache`, as events: the keys it pushed
/// out that are gone at its end, then each stretch of its prompt blocks from `hit` on that
/// the cache holds at its end (all of them, unless the request outgrew the cache).
fn publish(
    feed: &mut EventFeed,
    w: usize,
    now_ms: u64,
    req: &Request,
    hit: usize,
    cache: &Lru,
    gone: &mut Vec<u64>,
) {
    gone.retain(|&k| !cache.contains(k));
    feed.removed(w, now_ms, gone);
    let mut from = hit;
    while from < req.seq.len() {
        let held = req.seq[from..]
            .iter()
            .take_while(|s| cache.contains(s.0))
            .count();
        let parent = from.checked_sub(1).map(|p| req.seq[p]);
        let blocks = (from..from + held).map(|i| (req.local[i], req.seq[i]));
        feed.stored(w, now_ms, parent, blocks);
        from += held + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceRequest;
    use crate::workload::prepare;

    /// Two requests of two trace blocks (512 tokens) sharing the first, as index blocks of
    /// 256 (two per trace block), each generating `output` tokens; and the speeds.
    fn two_requests(output: u64) -> (Vec<Request>, Speeds) {
        let t = |ids: Vec<u64>| TraceRequest {
            timestamp_ms: 0.0,
            input_length: 1024,
            output_length: output,
            hash_ids: ids,
        };
        let speeds = Speeds {
            prefill_tps: 1000.0,
            decode_tps: 10.0,
        };
        (prepare(&[t(vec![1, 2]), t(vec![1, 3])], 512, 256), speeds)
    }

    #[test]
    fn hits_loads_and_decode_blocks() {
        let (reqs, speeds) = two_requests(10);
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

    #[test]
    fn engines_publish_what_each_request_left_cached_and_what_it_pushed_out() {
        use approx_kv_index::{KvCacheEventData, RouterEvent};
        let (reqs, speeds) = two_requests(1);
        let feed = EventFeed::new(std::time::Duration::ZERO);
        // Room for 6 blocks: the second request's 4 prompt and 1 decode blocks push out
        // 3 of the first's.
        let mut c = Cluster::new(1, 6, 256, speeds).publishing(Some(feed));
        c.serve(0, 0, &reqs[0], 0);
        c.serve(0, 1, &reqs[1], 10);
        c.restart_due(&[Some(20)], 20);
        let mut events: Vec<RouterEvent> = Vec::new();
        c.feed.as_mut().unwrap().due(20, &mut events);
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| match &e.data {
                KvCacheEventData::Stored(_) => "stored",
                KvCacheEventData::Removed(_) => "removed",
                _ => "cleared",
            })
            .collect();
        assert_eq!(kinds, ["stored", "removed", "stored", "cleared"]);
        let KvCacheEventData::Stored(first) = &events[0].data else {
            unreachable!()
        };
        let seq0: Vec<_> = first.blocks.iter().map(|b| b.block_hash).collect();
        assert_eq!((first.parent_hash, seq0), (None, reqs[0].seq.clone()));
        // The second shares the first two blocks: stored from block 2 on, under block 1.
        let KvCacheEventData::Stored(second) = &events[2].data else {
            unreachable!()
        };
        assert_eq!(second.parent_hash, Some(reqs[1].seq[1]));
        assert_eq!(second.blocks.len(), 2);
        assert_eq!(second.blocks[0].tokens_hash, reqs[1].local[2]);
        // What went is gone: the first request's last two blocks (and a decode block).
        let KvCacheEventData::Removed(gone) = &events[1].data else {
            unreachable!()
        };
        assert!(gone.block_hashes.contains(&reqs[0].seq[3]));
        assert!(gone
            .block_hashes
            .iter()
            .all(|h| c.prefix_hit(0, &[*h]) == 0));
        assert_eq!(c.prefix_hit(0, &reqs[1].seq), 0, "restarted: empty");
    }
}
