//! The raw hashing functions and the precomputed-hash API on arbitrary input: arbitrary
//! lengths and block sizes (0 and huge included), local and sequence slices of different
//! lengths or unrelated contents. Nothing may panic; errors must be the documented ones.
#![no_main]

use std::sync::Arc;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, ApproxKvIndexer, ConfigError, LocalBlockHash,
    ManualClock, PromptHashes, Query, RecordError, SequenceHash, XXH3_SEED,
};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use xxhash_rust::xxh3::xxh3_64_with_seed;

#[derive(Debug, Arbitrary)]
enum BlockSize {
    Small(u8),
    Raw(u32),
}

#[derive(Debug, Arbitrary)]
struct Input {
    tokens: Vec<u32>,
    block_size: BlockSize,
    cut: u16,
    worker: u64,
    local: Vec<u64>,
    seq: Vec<u64>,
}

/// The obvious chained hash of Dynamo, for comparison (shared with the hashing properties).
#[path = "../../tests/support/reference_hash.rs"]
mod reference_hash;
use reference_hash::reference_seq;

fuzz_target!(|input: Input| {
    let bs = match input.block_size {
        BlockSize::Small(b) => u32::from(b),
        BlockSize::Raw(b) => b,
    };
    let tokens = &input.tokens;

    // Full blocks only, each the xxh3 of its tokens' little-endian bytes.
    let local = compute_block_hash_for_seq(tokens, bs);
    let blocks = if bs == 0 {
        0
    } else {
        tokens.len() / bs as usize
    };
    assert_eq!(local.len(), blocks);
    for (i, h) in local.iter().enumerate() {
        let chunk = &tokens[i * bs as usize..(i + 1) * bs as usize];
        let bytes: Vec<u8> = chunk.iter().flat_map(|t| t.to_le_bytes()).collect();
        assert_eq!(h.0, xxh3_64_with_seed(&bytes, XXH3_SEED));
    }
    // Prefix stability.
    let cut = usize::from(input.cut) % (tokens.len() + 1);
    let prefix = compute_block_hash_for_seq(&tokens[..cut], bs);
    assert_eq!(prefix[..], local[..prefix.len()]);
    let seq = compute_seq_hashes(&local);
    assert_eq!(seq, reference_seq(&local));
    assert_eq!(compute_seq_hashes(&prefix)[..], seq[..prefix.len()]);
    // Both forms in one pass: the same hashes.
    let prompt = PromptHashes::new(tokens, bs);
    assert_eq!((prompt.local(), prompt.seq()), (&local[..], &seq[..]));

    // The index: block size 0 is a clean error.
    let clock = Arc::new(ManualClock::new());
    let built = ApproxKvIndexer::builder()
        .block_size(bs)
        .clock(clock)
        .background_sweeper(false)
        .build();
    let index = match built {
        Ok(index) => index,
        Err(e) => {
            assert_eq!((bs, e), (0, ConfigError::ZeroBlockSize));
            assert!(!e.to_string().is_empty());
            return;
        }
    };

    // Arbitrary precomputed hashes: mismatched lengths are rejected and store nothing.
    let raw_local: Vec<_> = input.local.iter().map(|&h| LocalBlockHash(h)).collect();
    let raw_seq: Vec<_> = input.seq.iter().map(|&h| SequenceHash(h)).collect();
    match index.record(input.worker, Query::hashes(&raw_local, &raw_seq)) {
        Ok(()) => assert_eq!(raw_local.len(), raw_seq.len()),
        Err(e) => {
            let want = RecordError::LengthMismatch {
                local: raw_local.len(),
                seq: raw_seq.len(),
            };
            assert_eq!(e, want);
            assert!(e.to_string().contains(&raw_local.len().to_string()));
            assert_eq!(index.stats().entries, 0);
        }
    }
    for query in [&raw_local, &local] {
        let found = index.find(Query::blocks(query));
        assert!(found.scores.values().all(|&s| s as usize <= query.len()));
    }

    // Read your writes: a recorded prompt scores fully for its worker.
    index.record(input.worker, Query::tokens(tokens)).unwrap();
    let found = index.find(Query::tokens(tokens));
    assert!(found.scores.values().all(|&s| s as usize <= blocks));
    if blocks > 0 {
        assert_eq!(found.scores.get(&input.worker), Some(&(blocks as u32)));
    }
    assert_eq!(index.find(Query::prompt(&prompt)).scores, found.scores);
    index.remove_worker(input.worker);
    assert!(index.find(Query::tokens(tokens)).scores.is_empty());
    index.shutdown();
    index.remove_worker(input.worker);
    let _ = index.sweep_expired();
});
