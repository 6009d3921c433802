//! Block and sequence hashing: properties against an independent obvious implementation of
//! Dynamo's scheme (xxh3-64, seed 1337, little-endian bytes); the vectors recorded from
//! `dynamo-kv-router` 1.6.1 in `tests/data/dynamo_hash_vectors.json` (u64s as decimal
//! strings), unsalted and salted (LoRA names, cache namespaces); salted prompts kept apart
//! in the index.
//!
//! Property case counts are modest so `cargo test` stays fast; raise them with
//! `PROPTEST_CASES`.

mod support;

use approx_kv_index::*;
use proptest::prelude::*;
use serde_json::Value;
use support::proptest_config::config;
use support::reference_hash::{reference_local, reference_seq};

const VECTORS: &str = include_str!("data/dynamo_hash_vectors.json");

fn block_size() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 1u32..=8, 1 => Just(16u32), 1 => Just(0u32), 1 => Just(u32::MAX)]
}

proptest! {
    #![proptest_config(config(256))]

    /// Both functions equal the obvious implementation.
    #[test]
    fn equals_reference(tokens in prop::collection::vec(any::<u32>(), 0..100), bs in block_size()) {
        let local = compute_block_hash_for_seq(&tokens, bs);
        prop_assert_eq!(&local, &reference_local(&tokens, bs));
        prop_assert_eq!(compute_seq_hashes(&local), reference_seq(&local));
    }

    /// The hashes of a prefix are a prefix of the hashes (block and sequence).
    #[test]
    fn prefix_stable(tokens in prop::collection::vec(any::<u32>(), 0..100), cut in any::<prop::sample::Index>(), bs in block_size()) {
        let cut = cut.index(tokens.len() + 1);
        let whole = compute_block_hash_for_seq(&tokens, bs);
        let part = compute_block_hash_for_seq(&tokens[..cut], bs);
        prop_assert_eq!(&whole[..part.len()], &part[..]);
        prop_assert_eq!(&compute_seq_hashes(&whole)[..part.len()], &compute_seq_hashes(&part)[..]);
    }

    /// A partial trailing block is never hashed: whatever its tokens, the result is that
    /// of the full blocks alone.
    #[test]
    fn partial_blocks_never_hashed(
        blocks in prop::collection::vec(any::<u32>(), 0..64),
        tail in prop::collection::vec(any::<u32>(), 0..7),
        bs in 1u32..=8,
    ) {
        let full = &blocks[..blocks.len() / bs as usize * bs as usize];
        let tail = &tail[..tail.len().min(bs as usize - 1)];
        let with_tail = [full, tail].concat();
        let local = compute_block_hash_for_seq(full, bs);
        prop_assert_eq!(local.len(), full.len() / bs as usize);
        prop_assert_eq!(compute_block_hash_for_seq(&with_tail, bs), local);
    }

    /// A sequence hash names its whole prefix: changing any earlier block changes it.
    #[test]
    fn sequence_hash_depends_on_every_earlier_block(
        local in prop::collection::vec(any::<u64>(), 1..10),
        at in any::<prop::sample::Index>(),
        flip in 1u64..,
    ) {
        let local: Vec<_> = local.into_iter().map(LocalBlockHash).collect();
        let at = at.index(local.len());
        let mut changed = local.clone();
        changed[at].0 ^= flip;
        let (a, b) = (compute_seq_hashes(&local), compute_seq_hashes(&changed));
        prop_assert_eq!(&a[..at], &b[..at]);
        // xxh3 collisions on these inputs would be a 2^-64 event.
        prop_assert!(a[at..].iter().zip(&b[at..]).all(|(x, y)| x != y));
    }
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|h| {
            h.as_str()
                .expect("a decimal string")
                .parse()
                .expect("a u64")
        })
        .collect()
}

#[test]
fn unsalted_vectors_match_dynamo() {
    let doc: Value = serde_json::from_str(VECTORS).expect("valid JSON");
    let mut checked = 0;
    for (i, case) in doc["cases"].as_array().expect("cases").iter().enumerate() {
        if !case["lora_name"].is_null() || !case["cache_namespace"].is_null() {
            continue;
        }
        let block_size = u32::try_from(case["block_size"].as_u64().expect("block_size")).unwrap();
        let tokens: Vec<u32> = case["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| u32::try_from(t.as_u64().expect("a token")).expect("a u32"))
            .collect();
        let local = compute_block_hash_for_seq(&tokens, block_size);
        let got: Vec<u64> = local.iter().map(|h| h.0).collect();
        assert_eq!(got, u64s(&case["local_block_hashes"]), "case {i}: local");
        let got: Vec<u64> = compute_seq_hashes(&local).iter().map(|h| h.0).collect();
        assert_eq!(got, u64s(&case["sequence_hashes"]), "case {i}: sequence");
        checked += 1;
    }
    assert_eq!(checked, 11, "unsalted cases in the file");
}

fn hashes(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn salted_cases_match_dynamo_vectors() {
    let text = include_str!("data/dynamo_hash_vectors.json");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut salted = 0;
    for case in doc["cases"].as_array().unwrap() {
        let (lora, ns) = (case["lora_name"].as_str(), case["cache_namespace"].as_str());
        let salt = HashSalt::new(lora, ns);
        let tokens: Vec<u32> = case["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        let block_size = case["block_size"].as_u64().unwrap() as u32;
        let local = compute_block_hash_for_seq_salted(&tokens, block_size, salt);
        let seq = compute_seq_hashes(&local);
        assert_eq!(
            local.iter().map(|h| h.0).collect::<Vec<_>>(),
            hashes(&case["local_block_hashes"]),
            "{lora:?} {ns:?}"
        );
        assert_eq!(
            seq.iter().map(|h| h.0).collect::<Vec<_>>(),
            hashes(&case["sequence_hashes"]),
            "{lora:?} {ns:?}"
        );
        salted += usize::from(lora.is_some() || ns.is_some());
    }
    assert!(salted >= 4, "the vectors hold salted cases");
}

#[test]
fn adapters_and_tenants_never_match_each_other() {
    let index = ApproxKvIndexer::new(2, std::time::Duration::from_secs(60)).unwrap();
    let tokens = [1, 2, 3, 4, 5, 6];
    let salts = [
        HashSalt::NONE,
        HashSalt::new(Some("lora-a"), None),
        HashSalt::new(Some("lora-b"), None),
        HashSalt::new(None, Some("tenant-a")),
        HashSalt::new(Some("lora-a"), Some("tenant-a")),
    ];
    for (w, &salt) in salts.iter().enumerate() {
        index.process_routing_decision_for_request_salted(&tokens, w as u64, salt);
    }
    for (w, &salt) in salts.iter().enumerate() {
        let found = index.find_matches_for_request_salted(&tokens, salt);
        assert_eq!(
            found.scores.keys().copied().collect::<Vec<_>>(),
            vec![w as u64]
        );
        assert_eq!(found.scores[&(w as u64)], 3);
    }
    assert_eq!(HashSalt::new(Some(""), Some("")), HashSalt::NONE);
}
