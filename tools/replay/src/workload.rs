//! Turning trace requests into token blocks: deterministic tokens from the hash ids,
//! hashed once into the index's block and sequence hashes.

use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, LocalBlockHash, SequenceHash,
};

use crate::trace::TraceRequest;
use approx_kv_rng::mix64;

/// A request ready to replay.
#[derive(Debug, Clone)]
pub struct Request {
    /// Arrival time (trace time).
    pub at: Duration,
    /// Prompt tokens.
    pub input_length: u64,
    /// Generated tokens.
    pub output_length: u64,
    /// Block hashes of the prompt's full index blocks.
    pub local: Vec<LocalBlockHash>,
    /// Their sequence hashes (what the simulated caches store).
    pub seq: Vec<SequenceHash>,
    /// Index blocks the engine fills while decoding: the prompt's partial tail plus the
    /// output. The router never sees them.
    pub decode_blocks: u32,
}

/// Token `i` of the trace block named `hash_id`. Equal ids give equal tokens, so equal
/// hash-id prefixes give equal token prefixes (the ids are already chained).
#[inline]
pub fn token(hash_id: u64, i: u32) -> u32 {
    (mix64(hash_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(i)) >> 32) as u32
}

/// Builds the prompt tokens of `req` into `buf`.
pub fn tokens_into(req: &TraceRequest, trace_block: u32, buf: &mut Vec<u32>) {
    buf.clear();
    let mut left = req.input_length;
    for &id in &req.hash_ids {
        let n = left.min(u64::from(trace_block)) as u32;
        buf.extend((0..n).map(|i| token(id, i)));
        left -= u64::from(n);
    }
}

/// Prepares every request for index blocks of `block_size` tokens.
pub fn prepare(trace: &[TraceRequest], trace_block: u32, block_size: u32) -> Vec<Request> {
    let mut buf = Vec::new();
    let bs = u64::from(block_size);
    trace
        .iter()
        .map(|r| {
            tokens_into(r, trace_block, &mut buf);
            let local = compute_block_hash_for_seq(&buf, block_size);
            let seq = compute_seq_hashes(&local);
            let full = r.input_length / bs;
            let total = (r.input_length + r.output_length).div_ceil(bs);
            Request {
                at: Duration::from_secs_f64(r.timestamp_ms / 1000.0),
                input_length: r.input_length,
                output_length: r.output_length,
                local,
                seq,
                decode_blocks: u32::try_from(total - full).unwrap_or(u32::MAX),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ids: Vec<u64>, input: u64) -> TraceRequest {
        TraceRequest {
            timestamp_ms: 1500.0,
            input_length: input,
            output_length: 70,
            hash_ids: ids,
        }
    }

    #[test]
    fn shared_hash_ids_give_shared_blocks() {
        let a = req(vec![1, 2, 3], 1100);
        let b = req(vec![1, 2, 9], 1100);
        let p = prepare(&[a, b], 512, 64);
        assert_eq!(p[0].local.len(), 17); // 1100 / 64
        assert_eq!(p[0].seq[..16], p[1].seq[..16]); // two shared trace blocks
        assert_ne!(p[0].seq[16], p[1].seq[16]);
        assert_eq!(p[0].at, Duration::from_millis(1500));
        // 1170 tokens span 19 blocks, 17 of them full prompt blocks.
        assert_eq!(p[0].decode_blocks, 2);
    }
}
