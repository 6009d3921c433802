//! LoRA and namespace salts: Dynamo's salted vectors, and isolation in the index.

use approx_kv_index::*;

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
