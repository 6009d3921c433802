//! Hash compatibility with `dynamo-kv-router` 1.6.1: the recorded vectors in
//! `tests/data/dynamo_hash_vectors.json` (u64s as decimal strings). Cases with a LoRA name
//! or a cache namespace use salted seeds, which the public API does not take: skipped.

use approx_kv_index::{compute_block_hash_for_seq, compute_seq_hashes};
use serde_json::Value;

const VECTORS: &str = include_str!("data/dynamo_hash_vectors.json");

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
