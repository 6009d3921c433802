//! Differential fuzzing: random operations on an index (with or without caps) and on the
//! sequential reference model (`tests/support/model.rs`) with the same `ManualClock`;
//! every find, dump and stats reading is compared after every step, and the caps checked
//! (`tests/support/harness.rs`).
#![no_main]

use std::time::Duration;

use approx_kv_index::{
    compute_block_hash_for_seq, compute_seq_hashes, LocalBlockHash, SequenceHash, WorkerId,
};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../tests/support/model.rs"]
mod model;

#[allow(dead_code)]
#[path = "../../tests/support/harness.rs"]
mod harness;

use harness::{Harness, Op, Settings};

#[derive(Debug, Arbitrary)]
struct Input {
    block_size: u8,
    ttl: u16,
    tick: u8,
    /// Caps (per worker, total), each 1 to 32 when set.
    max_blocks_per_worker: Option<u8>,
    max_entries: Option<u8>,
    ops: Vec<FuzzOp>,
}

#[derive(Debug, Arbitrary)]
enum FuzzOp {
    Record {
        worker: u8,
        tokens: Vec<u8>,
        salt: u8,
    },
    /// `seq: None` records the hashes chained from `local`; `Some` records garbage.
    RecordHashes {
        worker: u8,
        local: Vec<u8>,
        seq: Option<Vec<u8>>,
    },
    /// A `Stored` event for blocks `from..to` of a prompt, chained from the block before.
    Stored {
        worker: u8,
        tokens: Vec<u8>,
        from: u8,
        to: u8,
    },
    /// A `Stored` event from an engine with hashes of its own (arbitrary parent and block
    /// hashes).
    StoredGarbage {
        worker: u8,
        parent: Option<u8>,
        local: Vec<u8>,
        seq: Vec<u8>,
    },
    /// A `Stored` event as `Stored` makes it, with block `dup`'s name (`block_hash`)
    /// replaced by block `as_of`'s, or by the parent's when `as_of` is past the blocks:
    /// names that repeat, which the index rejects whole.
    StoredRepeating {
        worker: u8,
        tokens: Vec<u8>,
        from: u8,
        to: u8,
        dup: u8,
        as_of: u8,
    },
    /// Several workers (bit `w` of `workers`) record one prompt, then `removed` is removed:
    /// a removed worker among the holders of shared blocks.
    ShareThenRemove {
        workers: u8,
        tokens: Vec<u8>,
        removed: u8,
    },
    Removed {
        worker: u8,
        tokens: Vec<u8>,
        from: u8,
        to: u8,
    },
    /// A fleet: workers `FLEET + first ..` (`count % 100` of them) record one prompt,
    /// then `FLEET + removed` is removed: slots past the key table's first segment,
    /// holder arrays of up to a hundred, a removed worker among them.
    Fleet {
        first: u8,
        count: u8,
        tokens: Vec<u8>,
        removed: u8,
    },
    Cleared(u8),
    Find {
        tokens: Vec<u8>,
        salt: u8,
    },
    FindHashes {
        local: Vec<u8>,
    },
    RemoveWorker(u8),
    /// `set_worker_capacity(worker, capacity)`: none, or 0 to 31 blocks.
    SetCapacity {
        worker: u8,
        capacity: Option<u8>,
    },
    /// `begin_request(worker, &tokens)`: the handle is kept.
    Begin {
        worker: u8,
        tokens: Vec<u8>,
    },
    /// `request_output` of a kept request: its tokens so far and `more`.
    Output {
        request: u8,
        more: Vec<u8>,
    },
    /// `observe_cached` of a kept request (counts beyond the prompt included).
    Observe {
        request: u8,
        cached: u8,
    },
    /// `observe_cached` of a kept request, its whole prompt cached (what an engine that
    /// still holds blocks the index evicted reports: ghosts).
    ObserveAll(u8),
    /// `finish_request` of a kept request.
    Finish(u8),
    Advance(u16),
    Leap(u64),
    Sweep,
    Shutdown,
    SnapshotRestore,
    SaveSnapshot,
    RestoreSaved,
    ReplayDump,
}

/// The first id of the workers of a [`FuzzOp::Fleet`].
const FLEET: WorkerId = 1_000;

/// The live entries up to which the whole state is checked after every step.
const SMALL_STATE: usize = 256;

/// How often the whole state is checked once it is larger than [`SMALL_STATE`].
const STATE_CHECK_STRIDE: usize = 8;

/// A few workers, and the extreme id.
fn worker(w: u8) -> WorkerId {
    if w == u8::MAX {
        WorkerId::MAX
    } else {
        WorkerId::from(w % 6)
    }
}

/// Tokens from a tiny alphabet, so prompts share prefixes.
fn tokens(t: &[u8]) -> Vec<u32> {
    t.iter().map(|&x| u32::from(x % 4)).collect()
}

/// A precomputed hash from a small set: 4 to 11, never below 4. At block size 4 a block's
/// tokens hash and a chain step hash the same 16 bytes, so a first block whose tokens
/// (0 to 3 here) spelled a step from such a hash would share its sequence hash: a
/// structural collision, which the index conflates as Dynamo does and the model (one
/// block per sequence hash) cannot follow exactly (docs/design.md, "Collisions";
/// `tests/bad_input.rs` covers it). A low word of 4 or more spells no such block.
fn small_hash(x: u8) -> u64 {
    4 + u64::from(x % 8)
}

fn hashes(h: &[u8]) -> Vec<LocalBlockHash> {
    h.iter().map(|&x| LocalBlockHash(small_hash(x))).collect()
}

fn seqs(h: &[u8]) -> Vec<SequenceHash> {
    h.iter().map(|&x| SequenceHash(small_hash(x))).collect()
}

/// Blocks `from..to` (clamped) of a prompt: local and sequence hashes, and the parent.
fn blocks(
    t: &[u8],
    block_size: u32,
    from: u8,
    to: u8,
) -> (Vec<LocalBlockHash>, Vec<SequenceHash>, Option<SequenceHash>) {
    let local = compute_block_hash_for_seq(&tokens(t), block_size);
    let seq = compute_seq_hashes(&local);
    let to = usize::from(to).min(local.len());
    let from = usize::from(from).min(to);
    let parent = from.checked_sub(1).map(|i| seq[i]);
    (local[from..to].to_vec(), seq[from..to].to_vec(), parent)
}

fuzz_target!(|input: Input| {
    let block_size = 1 + u32::from(input.block_size % 4);
    // Mostly short TTLs (small wheels, fast runs); some long enough that the wheel is
    // clamped to 64 Ki slots and wraps; and the longest.
    let ttl = match input.ttl {
        u16::MAX => Duration::MAX,
        t if t >= 0xF000 => Duration::from_nanos(u64::from(t) << 8),
        t => Duration::from_nanos(1 + u64::from(t % 512)),
    };
    let tick = Duration::from_nanos(1 + u64::from(input.tick % 64));
    let cap = |c: Option<u8>| c.map(|c| 1 + usize::from(c % 32));
    let mut h = Harness::with(Settings {
        block_size,
        ttl,
        tick,
        background: false,
        max_blocks_per_worker: cap(input.max_blocks_per_worker),
        max_entries: cap(input.max_entries),
    });
    // The whole state is compared after every step while it is small, and after every
    // `STATE_CHECK_STRIDE`-th step and at the end once it is not (a check dumps the index:
    // after a fleet's records, checking every step made an input take seconds). Every
    // find, request output and error is compared at its own step either way.
    let mut live = 0;
    for (i, op) in input.ops.iter().enumerate() {
        let op = match op {
            FuzzOp::Record {
                worker: w,
                tokens: t,
                salt,
            } => Op::Record {
                worker: worker(*w),
                tokens: tokens(t),
                salt: *salt,
            },
            FuzzOp::RecordHashes {
                worker: w,
                local,
                seq,
            } => {
                let local = hashes(local);
                let seq = match seq {
                    None => compute_seq_hashes(&local),
                    Some(s) => seqs(s),
                };
                Op::RecordHashes {
                    worker: worker(*w),
                    local,
                    seq,
                }
            }
            FuzzOp::Stored {
                worker: w,
                tokens: t,
                from,
                to,
            } => {
                let (local, seq, parent) = blocks(t, block_size, *from, *to);
                Op::Stored {
                    worker: worker(*w),
                    parent,
                    local,
                    seq,
                }
            }
            FuzzOp::StoredRepeating {
                worker: w,
                tokens: t,
                from,
                to,
                dup,
                as_of,
            } => {
                let (local, mut seq, parent) = blocks(t, block_size, *from, *to);
                if !seq.is_empty() {
                    let dup = usize::from(*dup) % seq.len();
                    let name = match seq.get(usize::from(*as_of)) {
                        Some(&other) => other,
                        None => parent.unwrap_or(seq[0]),
                    };
                    seq[dup] = name;
                }
                Op::Stored {
                    worker: worker(*w),
                    parent,
                    local,
                    seq,
                }
            }
            FuzzOp::ShareThenRemove {
                workers,
                tokens: t,
                removed,
            } => {
                for w in (0..6u8).filter(|w| workers & (1 << w) != 0) {
                    h.step(&Op::Record {
                        worker: worker(w),
                        tokens: tokens(t),
                        salt: 0,
                    });
                }
                Op::RemoveWorker(worker(*removed))
            }
            FuzzOp::StoredGarbage {
                worker: w,
                parent,
                local,
                seq,
            } => Op::Stored {
                worker: worker(*w),
                parent: parent.map(|p| SequenceHash(small_hash(p))),
                local: hashes(local),
                seq: seqs(&seq[..seq.len().min(local.len())]),
            },
            FuzzOp::Removed {
                worker: w,
                tokens: t,
                from,
                to,
            } => Op::Removed {
                worker: worker(*w),
                seq: blocks(t, block_size, *from, *to).1,
            },
            FuzzOp::Fleet {
                first,
                count,
                tokens: t,
                removed,
            } => {
                for w in 0..WorkerId::from(*count % 100) {
                    h.step(&Op::Record {
                        worker: FLEET + WorkerId::from(*first) + w,
                        tokens: tokens(t),
                        salt: 0,
                    });
                }
                Op::RemoveWorker(FLEET + WorkerId::from(*removed))
            }
            FuzzOp::Cleared(w) => Op::Cleared(worker(*w)),
            FuzzOp::Find { tokens: t, salt } => Op::Find {
                tokens: tokens(t),
                salt: *salt,
            },
            FuzzOp::FindHashes { local } => Op::FindHashes {
                local: hashes(local),
            },
            FuzzOp::RemoveWorker(w) => Op::RemoveWorker(worker(*w)),
            FuzzOp::SetCapacity {
                worker: w,
                capacity,
            } => Op::SetCapacity {
                worker: worker(*w),
                capacity: capacity.map(|c| usize::from(c % 32)),
            },
            FuzzOp::Begin {
                worker: w,
                tokens: t,
            } => Op::Begin {
                worker: worker(*w),
                tokens: tokens(t),
            },
            FuzzOp::Output { request, more } => Op::Output {
                request: usize::from(*request),
                more: tokens(more),
            },
            FuzzOp::Observe { request, cached } => Op::Observe {
                request: usize::from(*request),
                cached: usize::from(*cached % 64),
            },
            FuzzOp::ObserveAll(request) => Op::ObserveAll {
                request: usize::from(*request),
            },
            FuzzOp::Finish(request) => Op::Finish {
                request: usize::from(*request),
            },
            FuzzOp::Advance(n) => Op::Advance(u64::from(*n)),
            FuzzOp::Leap(n) => Op::Advance(*n),
            FuzzOp::Sweep => Op::Sweep,
            FuzzOp::Shutdown => Op::Shutdown,
            FuzzOp::SnapshotRestore => Op::SnapshotRestore,
            FuzzOp::SaveSnapshot => Op::SaveSnapshot,
            FuzzOp::RestoreSaved => Op::RestoreSaved,
            FuzzOp::ReplayDump => Op::ReplayDump,
        };
        h.step(&op);
        if i % STATE_CHECK_STRIDE == 0 || live <= SMALL_STATE {
            live = h.check_state();
        }
    }
    h.check_state();
    h.finish();
});
