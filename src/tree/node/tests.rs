use super::super::holder::snapshot;
use super::*;

fn node(slot: Slot, claim: Claim) -> Node {
    Node::new(SequenceHash(0), LocalBlockHash(1), 0, slot, claim)
}

#[test]
fn holders_stay_sorted_and_unique() {
    let guard = epoch::pin();
    let mut node = node(5, Claim::approx(100));
    for slot in [9, 1, 5, 3, 7] {
        node.upsert(slot, Claim::approx(200), &guard);
    }
    let slots: Vec<_> = node.holders(&guard).iter().map(|h| h.slot()).collect();
    assert_eq!(slots, [1, 3, 5, 7, 9]);
    assert_eq!(node.holders(&guard)[2].claim(), Claim::approx(200));
}

#[test]
fn settle_keeps_clears_and_removes() {
    let guard = epoch::pin();
    let mut node = node(5, Claim::EXACT.merged(Claim::approx(100)));
    node.upsert(6, Claim::approx(300), &guard);
    assert_eq!(node.settle(5, |_| Settle::Keep, &guard), Outcome::Kept);
    assert_eq!(node.settle(4, |_| Settle::Remove, &guard), Outcome::Absent);
    assert_eq!(
        node.settle(5, |_| Settle::ClearApprox, &guard),
        Outcome::Cleared
    );
    assert_eq!(node.holders(&guard)[0].claim(), Claim::EXACT);
    assert_eq!(
        node.settle(5, |_| Settle::Remove, &guard),
        Outcome::Removed {
            was: Claim::EXACT,
            last: false
        }
    );
    assert_eq!(
        node.settle(6, |_| Settle::Remove, &guard),
        Outcome::Removed {
            was: Claim::approx(300),
            last: true
        }
    );
    assert!(node.holders(&guard).is_empty());
}

#[test]
fn refresh_only_raises_and_keeps_the_exact_bit() {
    let guard = epoch::pin();
    let both = Claim::EXACT.merged(Claim::approx(500));
    let node = node(2, both);
    assert!(node.update_claim(2, Claim::approx(300), &guard));
    assert_eq!(node.holders(&guard)[0].claim(), both);
    assert!(node.update_claim(2, Claim::approx(900), &guard));
    assert_eq!(
        node.holders(&guard)[0].claim(),
        Claim::EXACT.merged(Claim::approx(900))
    );
    assert!(!node.update_claim(3, Claim::approx(900), &guard));
}

#[test]
fn ascending_slots_append_in_place_and_old_views_stay_put() {
    let guard = epoch::pin();
    let mut node = node(0, Claim::approx(10));
    let mut copies = 0;
    for slot in 1..1024 {
        let before = node.holders(&guard);
        assert!(node.upsert(slot, Claim::approx(u64::from(slot)), &guard));
        let after = node.holders(&guard);
        if after.as_ptr() != before.as_ptr() {
            copies += 1;
        }
        // A view taken before the append keeps its length and its holders.
        assert_eq!(before.len(), slot as usize);
        assert_eq!(before.last().map(Holder::slot), Some(slot - 1));
        assert_eq!(after.len(), slot as usize + 1);
    }
    // Growth by a quarter: about log(1024 / 4) / log(1.25) + 4 copies, not 1,023.
    assert!(copies <= 32, "{copies} copies for 1,023 appends");
    let holders = node.holders(&guard);
    assert!(holders.iter().map(Holder::slot).eq(0..1024));
    assert!(holders[1..]
        .iter()
        .all(|h| h.claim() == Claim::approx(u64::from(h.slot()))));
    // A slot in the middle copies, and keeps the order.
    let mut node = node_with(&[0, 1, 2, 3, 4, 5, 7], &guard);
    let before = node.holders(&guard).as_ptr();
    assert!(node.upsert(6, Claim::approx(20), &guard));
    assert_ne!(node.holders(&guard).as_ptr(), before);
    assert!(node.holders(&guard).iter().map(Holder::slot).eq(0..8));
    // A removal builds an exact-size array: the next append copies.
    assert!(matches!(
        node.settle(7, |_| Settle::Remove, &guard),
        Outcome::Removed { last: false, .. }
    ));
    let before = node.holders(&guard).as_ptr();
    assert!(node.upsert(9, Claim::approx(30), &guard));
    assert_ne!(node.holders(&guard).as_ptr(), before);
    assert_eq!(
        node.holders(&guard).last().map(Holder::claim),
        Some(Claim::approx(30))
    );
}

#[test]
fn one_holder_stays_inline_and_two_make_an_array() {
    let guard = epoch::pin();
    let mut node = node(5, Claim::approx(100));
    assert!(node.array(&guard).is_none());
    assert!(matches!(node.holders(&guard), Holders::Sole(_)));
    // A refresh raises the inline claim in place; a view copied before keeps its own.
    let before = node.holders(&guard);
    assert!(node.update_claim(5, Claim::approx(150), &guard));
    assert!(
        !node.upsert(5, Claim::EXACT, &guard),
        "a raise adds nothing"
    );
    assert_eq!(before[0].claim(), Claim::approx(100));
    let raised = Claim::EXACT.merged(Claim::approx(150));
    assert_eq!(node.holders(&guard)[0].claim(), raised);
    // A second holder (below or above) builds an array that keeps the first's claim.
    assert!(node.upsert(2, Claim::approx(7), &guard));
    let array = node.holders(&guard);
    assert!(matches!(array, Holders::Shared(_)));
    assert_eq!(
        array.iter().map(snapshot).collect::<Vec<_>>(),
        [(2, Claim::approx(7)), (5, raised)]
    );
    // Removing either of two goes back inline; the array a reader holds stays whole.
    assert_eq!(
        node.settle(2, |_| Settle::Remove, &guard),
        Outcome::Removed {
            was: Claim::approx(7),
            last: false
        }
    );
    assert!(node.array(&guard).is_none());
    assert_eq!(array.len(), 2);
    assert_eq!(array[1].claim(), raised);
    assert_eq!(
        node.holders(&guard)
            .iter()
            .map(snapshot)
            .collect::<Vec<_>>(),
        [(5, raised)]
    );
    let mut other = node_with(&[3, 4], &guard);
    assert!(matches!(
        other.settle(4, |_| Settle::Remove, &guard),
        Outcome::Removed { last: false, .. }
    ));
    assert_eq!(
        other
            .holders(&guard)
            .iter()
            .map(Holder::slot)
            .collect::<Vec<_>>(),
        [3]
    );
    // The inline holder is cleared and removed like a cell.
    assert_eq!(
        node.settle(5, |_| Settle::ClearApprox, &guard),
        Outcome::Cleared
    );
    assert_eq!(node.holders(&guard)[0].claim(), Claim::EXACT);
    assert_eq!(node.settle(9, |_| Settle::Remove, &guard), Outcome::Absent);
    assert_eq!(
        node.settle(5, |_| Settle::Remove, &guard),
        Outcome::Removed {
            was: Claim::EXACT,
            last: true
        }
    );
    assert!(node.holders(&guard).is_empty());
    assert!(!node.update_claim(5, Claim::approx(1), &guard));
}

#[test]
fn depth_saturates_and_shares_its_word_with_the_flags() {
    let guard = epoch::pin();
    let deep = |depth| {
        Node::new(
            SequenceHash(0),
            LocalBlockHash(1),
            depth,
            3,
            Claim::approx(9),
        )
    };
    assert_eq!(deep(MAX_DEPTH - 1).depth(), MAX_DEPTH - 1);
    assert_eq!(deep(MAX_DEPTH).depth(), MAX_DEPTH);
    assert_eq!(deep(u32::MAX).depth(), MAX_DEPTH);
    // Every change of form and claim keeps the depth, and the depth no flag.
    let mut node = deep(MAX_DEPTH);
    assert_eq!(node.holders(&guard)[0].claim(), Claim::approx(9));
    assert!(node.update_claim(3, Claim::EXACT, &guard));
    assert_eq!(node.depth(), MAX_DEPTH);
    assert_eq!(
        node.holders(&guard)[0].claim(),
        Claim::EXACT.merged(Claim::approx(9))
    );
    assert!(node.upsert(7, Claim::approx(4), &guard));
    assert_eq!(node.depth(), MAX_DEPTH);
    assert!(node.array(&guard).is_some());
    assert!(matches!(
        node.settle(3, |_| Settle::Remove, &guard),
        Outcome::Removed { last: false, .. }
    ));
    assert_eq!(node.depth(), MAX_DEPTH);
    assert_eq!(
        node.holders(&guard)
            .iter()
            .map(snapshot)
            .collect::<Vec<_>>(),
        [(7, Claim::approx(4))],
        "the exact bit of the holder that left is not the one that stayed's"
    );
    assert!(matches!(
        node.settle(7, |_| Settle::Remove, &guard),
        Outcome::Removed { last: true, .. }
    ));
    assert_eq!(node.depth(), MAX_DEPTH);
    assert!(node.holders(&guard).is_empty());
    assert_eq!(deep(0).depth(), 0);
}

fn node_with(slots: &[Slot], guard: &Guard) -> Node {
    let mut n = node(slots[0], Claim::approx(10));
    for &slot in &slots[1..] {
        n.upsert(slot, Claim::approx(10), guard);
    }
    n
}

#[test]
#[should_panic(expected = "holder array not filled")]
fn a_short_array_is_never_published() {
    drop(new_array(2, 2, std::iter::once((1, Claim::EXACT))));
}

/// A copy of the holder array (an insert below the last slot) leaves out the holders the
/// `dead` predicate names and reports each once; an append in place into room copies
/// nothing and drops nothing; a copy that leaves one holder puts it back inline.
#[test]
fn copies_drop_dead_holders_and_report_them() {
    let guard = epoch::pin();
    let mut node = node(2, Claim::approx(100));
    for slot in [4, 6, 8] {
        node.upsert(slot, Claim::approx(100), &guard);
    }
    let dead = |s: Slot| s == 4 || s == 8;
    let mut dropped = Vec::new();
    // Slot 5 goes in between: a copy, which drops 4 and 8.
    assert!(node.upsert_dropping((5, Claim::approx(200)), dead, |s| dropped.push(s), &guard));
    assert_eq!(dropped, [4, 8]);
    let held = |n: &Node| -> Vec<(Slot, Claim)> {
        n.holders(&guard)
            .iter()
            .map(|h| (h.slot(), h.claim()))
            .collect()
    };
    assert_eq!(
        held(&node),
        [
            (2, Claim::approx(100)),
            (5, Claim::approx(200)),
            (6, Claim::approx(100))
        ]
    );
    // A refresh of a holder copies nothing.
    dropped.clear();
    let all_dead = |_: Slot| true;
    assert!(!node.upsert_dropping(
        (6, Claim::approx(300)),
        all_dead,
        |s| dropped.push(s),
        &guard
    ));
    assert!(dropped.is_empty());
    // Every other holder dead: the new one alone, back inline.
    assert!(node.upsert_dropping(
        (1, Claim::approx(400)),
        |s| s != 1,
        |s| dropped.push(s),
        &guard
    ));
    assert_eq!(dropped, [2, 5, 6]);
    assert_eq!(held(&node), [(1, Claim::approx(400))]);
    assert_eq!(node.array_bytes(&guard), 0, "inline");
}
