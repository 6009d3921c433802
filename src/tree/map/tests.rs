use std::collections::HashMap;

use super::*;
use crate::tree::claim::Claim;
use crate::{LocalBlockHash, SequenceHash};

/// A node whose words tell its key: parent `key ^ PARENT`, local `key`.
const PARENT: u64 = 0x5a5a_5a5a;

fn node(key: u64, slot: u32, expiry: u64) -> Node {
    let parent = SequenceHash(key ^ PARENT);
    Node::new(parent, LocalBlockHash(key), 1, slot, Claim::approx(expiry))
}

/// A small deterministic generator (xorshift64*).
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Inserts, replacements and removals (with the backward shifts and growths they
/// cause) agree with a `HashMap`, read locked and lock-free alike.
#[test]
fn agrees_with_a_hash_map_through_inserts_removes_and_growth() {
    let map = NodeMap::new();
    let mut model: HashMap<u64, u64> = HashMap::new();
    let guard = epoch::pin();
    let mut rng = 0x1234_5678_9abc_def1;
    let initial = map.heap_bytes();
    for step in 0..40_000u64 {
        let r = next(&mut rng);
        let key = r % 3_000;
        if r >> 62 == 0 {
            let removed = map
                .remove(&key)
                .map(|(_, n)| n.holders(&guard)[0].claim().expiry);
            assert_eq!(removed, model.remove(&key), "step {step}");
        } else {
            let replaced = map
                .insert(key, node(key, 1, step))
                .map(|n| n.holders(&guard)[0].claim().expiry);
            assert_eq!(replaced, model.insert(key, step), "step {step}");
        }
        if step % 4_000 == 0 || step == 39_999 {
            assert_eq!(map.len(), model.len());
            for key in 0..3_000 {
                let want = model.get(&key).copied();
                let locked = map.get(&key).map(|n| n.holders(&guard)[0].claim().expiry);
                let read = map.read(key, &guard).map(|n| {
                    assert_eq!((n.parent().0, n.local().0), (key ^ PARENT, key));
                    n.holders(&guard)[0].claim().expiry
                });
                assert_eq!((locked, read), (want, want), "key {key} at step {step}");
            }
            let mut seen = 0;
            map.for_each(|key, n| {
                assert_eq!(
                    Some(n.holders(&guard)[0].claim().expiry),
                    model.get(&key).copied()
                );
                seen += 1;
            });
            assert_eq!(seen, model.len());
        }
    }
    assert!(map.heap_bytes() > initial, "the tables grew");
}

/// A writer's changes (holders added in place and by new arrays, back inline, the node
/// removed and put back, the table grown) never show a reader a torn node: every
/// lock-free read is a node some writer left, whose holders read whole.
#[test]
fn lock_free_reads_see_only_whole_nodes_while_a_writer_changes_them() {
    let map = std::sync::Arc::new(NodeMap::new());
    let keys: Vec<u64> = (0..64).collect();
    let rounds = 2_000u64;
    let writer = {
        let (map, keys) = (map.clone(), keys.clone());
        std::thread::spawn(move || {
            for round in 0..rounds {
                let guard = epoch::pin();
                for &key in &keys {
                    match map.entry(key) {
                        Entry::Vacant(v) => v.insert(node(key, 1, 10)),
                        Entry::Occupied(mut o) => {
                            let n = o.get_mut();
                            if round % 3 == 2 {
                                n.settle(2, |_| crate::tree::node::Settle::Remove, &guard);
                                n.settle(3, |_| crate::tree::node::Settle::Remove, &guard);
                            } else {
                                n.upsert(2 + (round % 3) as u32, Claim::approx(20), &guard);
                            }
                        }
                    }
                }
                if round % 7 == 6 {
                    for &key in keys.iter().step_by(2) {
                        map.remove(&key);
                    }
                }
                // New keys now and then: the tables grow under the readers.
                map.insert(1_000 + round, node(1_000 + round, 1, 10));
            }
        })
    };
    let mut reads = 0u64;
    while !writer.is_finished() || reads == 0 {
        let guard = epoch::pin();
        for &key in &keys {
            let Some(n) = map.read(key, &guard) else {
                continue;
            };
            assert_eq!((n.parent().0, n.local().0), (key ^ PARENT, key));
            let holders: Vec<(u32, u64)> = n
                .holders(&guard)
                .iter()
                .map(|h| (h.slot(), h.claim().expiry))
                .collect();
            assert!(matches!(holders.first(), Some(&(1, 10))), "{holders:?}");
            assert!(holders.windows(2).all(|w| w[0].0 < w[1].0), "{holders:?}");
            assert!(holders[1..]
                .iter()
                .all(|&(s, e)| (2..=3).contains(&s) && e == 20));
            reads += 1;
        }
    }
    writer.join().unwrap();
    // The last removal round (1994) was followed by rounds that put the keys back.
    assert_eq!(map.len(), keys.len() + rounds as usize);
}
