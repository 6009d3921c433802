use super::super::testing::{chain, engine, held, record};
use super::*;

/// A request pins block 1; its release takes the expiry it lowers to, and then, before
/// the lowering, another recorder's later decision (1, 2) refreshes block 1 (still
/// pinned: no change) and adds block 2. The release's decision must end block 1 no
/// earlier than block 2: with a capacity of one block, the older decision (1, 2) goes
/// first, block 2 with it, and block 1 stays. (With the release's decision expiring at
/// the lowered expiry, block 1 went first and block 2 stayed above a gap.)
#[test]
fn a_release_ends_its_blocks_no_earlier_than_a_racing_decision_below_them() {
    let engine = engine(100);
    let (local, seq) = chain(&[1]);
    let (slot, generation) = {
        let _pinned = epoch::pin(); // the lookup's rule
        let slot = engine.workers.resolve(1u64).unwrap();
        (slot, engine.workers.generation(slot))
    };
    assert!(engine.pin(slot, generation, (&local, &seq), 0));
    let now = engine.now();
    let lowered = engine.expiry_for(slot, now, engine.ttl_nanos);
    record(&engine, &[1, 2]);
    let guard = engine.tree.writing();
    engine.release_pins(slot, (&local, &seq), (1, lowered), now, &guard);
    let claim = |seq: &[SequenceHash]| {
        let claim = engine.tree.claim_of(*seq.last().unwrap(), slot, &guard);
        claim.expect("held").expiry
    };
    let (parent, child) = (claim(&seq), claim(&chain(&[1, 2]).1));
    assert!(
        parent >= child,
        "block 1 ends before block 2: {parent:?} {child:?}"
    );
    drop(guard);
    engine.set_slot_capacity(slot, Some(1));
    assert_eq!(held(&engine), (vec![1], true));
}
