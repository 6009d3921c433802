use super::*;

fn path(blocks: &[u64]) -> Vec<SequenceHash> {
    blocks.iter().copied().map(SequenceHash).collect()
}

/// What a release should return: the deepest blocks of `released` that no other running
/// path passes through (a path passes through depth `d` of another when their first
/// `d + 1` blocks are equal).
fn unpinned(released: &[SequenceHash], others: &[Vec<SequenceHash>]) -> usize {
    let kept = others
        .iter()
        .map(|o| o.iter().zip(released).take_while(|(a, b)| a == b).count())
        .max()
        .unwrap_or(0);
    released.len() - kept
}

#[test]
fn a_shared_prefix_stays_pinned_until_its_last_request_goes() {
    let mut pins = PinPaths::default();
    pins.pin(&path(&[1, 2, 3, 4]), 0);
    pins.pin(&path(&[1, 2, 5]), 0);
    pins.pin(&path(&[1, 2, 3, 6, 7]), 0);
    // [1, 2, 3] is still on the third path, [4] is not.
    assert_eq!(pins.release(&path(&[1, 2, 3, 4])), 1);
    assert_eq!(pins.release(&path(&[1, 2, 3, 6, 7])), 3);
    assert_eq!(pins.release(&path(&[1, 2, 5])), 3);
    assert!(pins.is_empty());
}

#[test]
fn an_output_joins_its_own_request_and_leaves_the_others_counts_alone() {
    let mut pins = PinPaths::default();
    pins.pin(&path(&[1, 2, 3, 4]), 0);
    pins.pin(&path(&[1, 2]), 0);
    // The second request's output: blocks 3 and 9 join it (3 is the first's too).
    pins.pin(&path(&[1, 2, 3, 9]), 2);
    assert_eq!(
        pins.release(&path(&[1, 2, 3, 4])),
        1,
        "[1, 2, 3] on the other"
    );
    assert_eq!(pins.release(&path(&[1, 2, 3, 9])), 4);
    assert!(pins.is_empty());
}

#[test]
fn stretches_split_where_requests_part_and_join_again_when_they_are_gone() {
    let mut pins = PinPaths::default();
    pins.pin(&path(&[1, 2, 3, 4]), 0);
    assert_eq!(pins.used(), 1);
    pins.pin(&path(&[1, 2, 5]), 0);
    assert_eq!(pins.used(), 3, "[1, 2], then [3, 4] and [5]");
    assert_eq!(pins.release(&path(&[1, 2, 5])), 1);
    assert_eq!(pins.used(), 1, "[1, 2, 3, 4] again");
    assert_eq!(pins.release(&path(&[1, 2, 3, 4])), 4);
    assert_eq!(pins.used(), 0);
}

#[test]
fn an_output_added_block_by_block_stays_one_stretch() {
    let mut pins = PinPaths::default();
    let mut p = path(&[1, 2]);
    pins.pin(&p, 0);
    for block in 3..200 {
        p.push(SequenceHash(block));
        pins.pin(&p, p.len() - 1);
    }
    assert_eq!(pins.used(), 1);
    // Another request on part of it splits it once.
    pins.pin(&p[..50], 0);
    assert_eq!(pins.used(), 2);
    assert_eq!(pins.release(&p), 149);
    assert_eq!(pins.release(&p[..50]), 50);
    assert_eq!(pins.used(), 0);
}

#[test]
fn releasing_a_path_never_pinned_unpins_it_all_and_changes_nothing_else() {
    let mut pins = PinPaths::default();
    pins.pin(&path(&[1, 2]), 0);
    assert_eq!(pins.release(&path(&[7, 8, 9])), 3);
    assert_eq!(pins.release(&path(&[])), 0);
    assert_eq!(pins.release(&path(&[1, 2])), 2);
    assert!(pins.is_empty());
}

/// Random pins, outputs and releases over paths that share prefixes, against the
/// definition; every stretch is freed once every request is released.
#[test]
fn random_requests_release_what_no_other_path_passes_through() {
    let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for _round in 0..200 {
        let mut pins = PinPaths::default();
        let mut running: Vec<Vec<SequenceHash>> = Vec::new();
        for _ in 0..60 {
            match next(4) {
                0 | 1 => {
                    // A new request: a prefix of a running one, then blocks of its own.
                    let mut p = match running.len() {
                        0 => Vec::new(),
                        n => {
                            let base = &running[next(n as u64) as usize];
                            base[..next(base.len() as u64 + 1) as usize].to_vec()
                        }
                    };
                    for _ in 0..next(5) {
                        p.push(SequenceHash(next(3)));
                    }
                    pins.pin(&p, 0);
                    running.push(p);
                }
                2 if !running.is_empty() => {
                    // An output joins a running request.
                    let i = next(running.len() as u64) as usize;
                    let from = running[i].len();
                    for _ in 0..1 + next(3) {
                        running[i].push(SequenceHash(next(3)));
                    }
                    pins.pin(&running[i], from);
                }
                _ if !running.is_empty() => {
                    let i = next(running.len() as u64) as usize;
                    let p = running.swap_remove(i);
                    assert_eq!(
                        pins.release(&p),
                        unpinned(&p, &running),
                        "{p:?} {running:?}"
                    );
                }
                _ => {}
            }
        }
        while let Some(p) = running.pop() {
            assert_eq!(pins.release(&p), unpinned(&p, &running));
        }
        assert!(pins.is_empty());
        assert_eq!(
            pins.free.len(),
            pins.stretches.len() - 1,
            "every stretch freed"
        );
    }
}
