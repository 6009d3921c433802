"""Promises of docs/python.md, python/approx_kv_index.pyi and the docstrings in python/src
that the other test files do not check. Each test quotes the sentence it checks.

The binding exposes no manual clock (only the Rust crate has `ManualClock`), so the two
tests of expiry use the real clock: they poll with a deadline, and assert only what the
clock guarantees (never that something happens "within" a time)."""

import importlib.metadata
import math
import struct
import sys
import threading
import time
from array import array

import numpy as np
import pytest

import approx_kv_index
from approx_kv_index import ApproxKvIndexer, PromptHashes, compute_block_hashes, compute_seq_hashes
from gil_release import releases_the_gil

BLOCK = 4


def prompt(start, blocks):
    return list(range(start, start + blocks * BLOCK))


def snapshot_entries(data):
    """The entries of a snapshot, in the format documented in src/snapshot.rs (version 2,
    little-endian): header `AKVISNAP`, version u32, block size u32, count u64; per entry
    worker u64, dp rank u32, block u64, parent u64, local u64, depth u32, flags u8, TTL
    left in ns u64; then a capacity count u64 and per capacity worker u64, dp rank u32,
    blocks u64; then an 8-byte checksum."""
    magic, version, block_size, count = struct.unpack_from("<8sIIQ", data, 0)
    assert (magic, version) == (b"AKVISNAP", 2)
    entry = struct.Struct("<QIQQQIBQ")
    (capacities,) = struct.unpack_from("<Q", data, 24 + count * entry.size)
    assert len(data) == 24 + count * entry.size + 8 + capacities * 20 + 8
    rows = [entry.unpack_from(data, 24 + i * entry.size) for i in range(count)]
    return block_size, [
        {"worker": r[0], "dp_rank": r[1], "depth": r[5], "exact": r[6], "ttl_left_ns": r[7]}
        for r in rows
    ]




# --- packaging -------------------------------------------------------------------------


def test_the_extension_is_an_abi3_module():
    """docs/python.md: "builds the Python module `approx_kv_index` with maturin: one abi3
    wheel for CPython 3.11 and later"."""
    files = [str(f) for f in importlib.metadata.files("approx-kv-index")]
    extensions = [f for f in files if f.endswith((".so", ".pyd"))]
    assert len(extensions) == 1
    assert ".abi3." in extensions[0] or extensions[0].endswith(".pyd")


def test_stubs_ship_with_py_typed():
    """docs/python.md: "Type stubs (`python/approx_kv_index.pyi`, shipped with `py.typed`)"."""
    files = {str(f) for f in importlib.metadata.files("approx-kv-index")}
    assert "approx_kv_index/py.typed" in files
    assert any(f.startswith("approx_kv_index/") and f.endswith(".pyi") for f in files)


# --- the constructor -------------------------------------------------------------------


def test_constructor_takes_the_documented_positional_order():
    """approx_kv_index.pyi: `__init__(self, block_size: int = 64, ttl: float | None = 120.0,
    tick: float = 0.1, max_blocks_per_worker=None, max_entries=None)`; and the `ttl`
    property: "The TTL in seconds, or ``None`` for never"."""
    index = ApproxKvIndexer(8, 7.5, 0.5, 3, 100)
    assert index.block_size == 8
    assert index.ttl == 7.5
    index.record(list(range(8 * 5)), 1)  # five blocks, capped at three per worker
    assert index.find(list(range(8 * 5))) == {1: 3}
    assert index.stats()["evictions"] == 2


def test_ttl_none_means_never():
    """docs/python.md: "`ttl=None` or `float('inf')` is `Duration::MAX` (never:
    capacity-only with `max_blocks_per_worker`)"; approx_kv_index.pyi: "``None`` or
    ``inf``: never, for a capacity-only index" (inf is in test_index.py; None here)."""
    index = ApproxKvIndexer(block_size=2, ttl=None)
    assert index.ttl is None
    assert "ttl=None" in repr(index)
    index.record([1, 2, 3, 4], 5)
    assert index.stats()["pending_timers"] == 0  # nothing will ever expire
    assert index.find([1, 2, 3, 4]) == {5: 2}
    timed = ApproxKvIndexer(block_size=2, ttl=60.0)
    timed.record([1, 2, 3, 4], 5)
    assert timed.stats()["pending_timers"] > 0  # (the check above can fail)


def test_finite_ttl_beyond_duration_range_saturates():
    """python/src/args.rs: "Seconds above 0 as a `Duration` (finite values beyond
    `Duration`'s range saturate)"; the stub: `ttl` is "The TTL in seconds, or ``None`` for
    never", and a TTL of 2^62 ns (about 146 years) or more means never."""
    index = ApproxKvIndexer(block_size=2, ttl=1e30, tick=1e30)
    assert index.ttl is None
    assert ApproxKvIndexer(ttl=4.62e9).ttl is None  # 2^62 ns is 4.6117e9 s
    assert ApproxKvIndexer(ttl=4.6e9).ttl == 4.6e9
    index.record([1, 2], 3)
    assert index.find([1, 2]) == {3: 1}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tick": -1.0}, r"^tick must be a number of seconds above 0, got -1$"),
        ({"tick": math.nan}, r"^tick must be a number of seconds above 0, got NaN$"),
        ({"tick": 1e-12}, "tick must be longer than zero"),
        ({"max_blocks_per_worker": -1}, "max_blocks_per_worker must be an int from 1"),
        ({"max_blocks_per_worker": 2**64}, "max_blocks_per_worker must be an int from 1"),
        ({"max_entries": 0}, r"max_entries must be an int from 1 to 18446744073709551615, got 0"),
    ],
)
def test_more_bad_settings_raise_value_error(kwargs, message):
    """approx_kv_index.pyi: "Raises ``ValueError`` for a zero or negative setting";
    docs/python.md: "`ValueError` for a value out of range or a setting that cannot work,
    naming the argument" (the cases test_index.py does not try)."""
    with pytest.raises(ValueError, match=message):
        ApproxKvIndexer(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"tick": "0.1"}, {"tick": None}, {"max_blocks_per_worker": 2.0}, {"max_entries": "3"}],
)
def test_more_settings_of_the_wrong_type_raise_type_error(kwargs):
    """docs/python.md: "`TypeError` for a value of the wrong type" (settings that
    test_index.py does not try)."""
    with pytest.raises(TypeError):
        ApproxKvIndexer(**kwargs)


def test_doc_error_examples_are_verbatim():
    """docs/python.md, Errors: "ValueError: ttl must be a number of seconds above 0, got 0"
    and "ValueError: snapshot checksum mismatch: the file is corrupt" (the other three
    examples are matched in full by test_tokens.py and test_index.py)."""
    with pytest.raises(ValueError, match=r"^ttl must be a number of seconds above 0, got 0$"):
        ApproxKvIndexer(ttl=0)
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1)
    corrupt = bytearray(index.snapshot())
    corrupt[30] ^= 0x01  # a byte of the first entry, not the checksum
    with pytest.raises(ValueError, match=r"^snapshot checksum mismatch: the file is corrupt$"):
        index.restore(bytes(corrupt))


# --- capacity --------------------------------------------------------------------------


def test_max_entries_evicts_least_recently_recorded():
    """approx_kv_index.pyi: "``max_blocks_per_worker`` and ``max_entries`` cap the index
    (LRU eviction)": recording a block again makes it recent, so another goes first."""
    index = ApproxKvIndexer(block_size=1, max_entries=2)
    index.record([1], 1)
    index.record([2], 2)
    index.record([1], 1)  # used again: worker 2's block is now the least recent
    index.record([3], 3)
    assert index.find([1]) == {1: 1}
    assert index.find([2]) == {}
    assert index.find([3]) == {3: 1}
    assert index.stats()["evictions"] == 1


def test_max_blocks_per_worker_evicts_least_recently_recorded():
    """approx_kv_index.pyi: "``max_blocks_per_worker`` and ``max_entries`` cap the index
    (LRU eviction)", per worker: another worker's blocks do not count."""
    index = ApproxKvIndexer(block_size=1, ttl=None, max_blocks_per_worker=2)
    index.record([1], 0)
    index.record([2], 0)
    index.record([7], 1)  # another worker: not under worker 0's cap
    index.record([1], 0)  # used again
    index.record([3], 0)
    assert index.find([1]) == {0: 1}
    assert index.find([2]) == {}
    assert index.find([3]) == {0: 1}
    assert index.find([7]) == {1: 1}


# --- record / find ---------------------------------------------------------------------


def test_record_defaults_to_rank_zero():
    """docs/python.md: "`record(tokens, worker, dp_rank=0, lora=None)`"; the stub:
    `dp_rank: int = 0`."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 5)
    index.record(prompt(0, 1), 5, dp_rank=3)
    assert index.find_ranks(prompt(0, 2))[0] == {(5, 0): 2, (5, 3): 1}
    index.remove_worker(5, dp_rank=0)
    assert index.find_ranks(prompt(0, 2))[0] == {(5, 3): 1}


def test_record_stores_only_full_blocks():
    """approx_kv_index.pyi, record: "its full blocks become "probably cached" there"."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 3) + [1, 2, 3], 1)  # three blocks and a partial one
    assert index.stats()["entries"] == 3
    assert index.find(prompt(0, 3) + [1, 2, 3, 4]) == {1: 3}


def test_find_with_sizes_reports_only_the_workers_found():
    """approx_kv_index.pyi, find: "workers with none are absent"; find_with_sizes: "the
    blocks each of those workers holds in the whole index"."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1)
    index.record(prompt(100, 2), 1)  # not this prompt, but worker 1's: counted in its size
    index.record(prompt(500, 3), 2)  # holds blocks, but none of this prompt: absent
    assert index.find(prompt(0, 2)) == {1: 2}
    assert index.find_with_sizes(prompt(0, 2)) == ({1: 2}, {1: 4})
    assert index.find_ranks(prompt(0, 2)) == ({(1, 0): 2}, {(1, 0): 4})


def test_find_with_sizes_sums_every_rank_of_the_worker():
    """approx_kv_index.pyi, find_with_sizes: "the blocks each of those workers holds in the
    whole index (summed over its ranks)"; docs/python.md: "`find_with_sizes` | also
    `tree_sizes`, **summed over the worker's ranks**". Here worker 1 holds 2 blocks on
    rank 0 (a prefix of the prompt) and 3 on rank 1 (another prompt): 5 in all."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1, dp_rank=0)
    index.record(prompt(100, 3), 1, dp_rank=1)
    assert index.find(prompt(0, 2)) == {1: 2}
    assert index.find_with_sizes(prompt(0, 2)) == ({1: 2}, {1: 5})


def test_lora_salts_find_with_sizes_and_find_ranks():
    """approx_kv_index.pyi: "``lora`` salts the hashes"; python/src/indexer.rs: "so the
    blocks only match finds with the same `lora`" (find is in test_index.py; here the
    other two finds, which take `lora` too)."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1, lora="adapter-a")
    assert index.find_with_sizes(prompt(0, 2)) == ({}, {})
    assert index.find_with_sizes(prompt(0, 2), lora="adapter-a") == ({1: 2}, {1: 2})
    assert index.find_ranks(prompt(0, 2), lora="adapter-b") == ({}, {})
    assert index.find_ranks(prompt(0, 2), lora="adapter-a") == ({(1, 0): 2}, {(1, 0): 2})


def test_lora_salt_differs_from_cache_namespace():
    """python/src/hashing.rs: "`lora` and `cache_namespace` salt the hashes as Dynamo
    does": each salts, differently, and both together differ from either."""
    tokens = prompt(0, 2)
    plain = compute_block_hashes(tokens, BLOCK)
    lora = compute_block_hashes(tokens, BLOCK, lora="x")
    namespace = compute_block_hashes(tokens, BLOCK, cache_namespace="x")
    both = compute_block_hashes(tokens, BLOCK, lora="x", cache_namespace="x")
    assert len({tuple(plain), tuple(lora), tuple(namespace), tuple(both)}) == 4
    assert compute_block_hashes(tokens, BLOCK, lora="", cache_namespace="") == plain


def test_stats_values_are_ints():
    """docs/python.md: "`stats() -> dict[str, int]`"."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1)
    stats = index.stats()
    assert stats and all(type(v) is int for v in stats.values())
    assert all(type(k) is str for k in stats)


# --- remove_worker ---------------------------------------------------------------------


def test_remove_worker_with_rank_none_drops_every_rank():
    """docs/python.md: "`remove_worker(worker, dp_rank=None)` | `remove_worker(worker)`, or
    `remove_worker_key` for one rank": an explicit None is every rank."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 3, dp_rank=0)
    index.record(prompt(0, 2), 3, dp_rank=1)
    index.record(prompt(0, 2), 4)
    index.remove_worker(3, dp_rank=None)
    assert index.find_ranks(prompt(0, 2))[0] == {(4, 0): 2}


def test_remove_worker_unknown_rank_is_ignored():
    """approx_kv_index.pyi: "Forget ``worker`` (every rank, or only ``dp_rank``); unknown
    ids are ignored": an unknown rank of a known worker removes nothing."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 3, dp_rank=1)
    index.remove_worker(3, dp_rank=0)
    index.remove_worker(3, dp_rank=2**32 - 1)
    assert index.find_ranks(prompt(0, 2))[0] == {(3, 1): 2}


def test_removed_worker_is_absent_from_every_find():
    """python/src/indexer.rs, remove_worker: "No find reports it until it is recorded
    again" (find_with_sizes and find_ranks, tree sizes included)."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1)
    index.record(prompt(0, 2), 2, dp_rank=4)
    index.remove_worker(1)
    assert index.find_with_sizes(prompt(0, 2)) == ({2: 2}, {2: 2})
    assert index.find_ranks(prompt(0, 2)) == ({(2, 4): 2}, {(2, 4): 2})
    index.record(prompt(0, 1), 1)
    assert index.find_with_sizes(prompt(0, 2)) == ({1: 1, 2: 2}, {1: 1, 2: 2})


# --- argument types --------------------------------------------------------------------


def test_wrong_argument_types_raise_type_error():
    """docs/python.md: "Bad input raises, never crashes: `TypeError` for a value of the
    wrong type"; python/src/lib.rs: "Bad input raises `ValueError` or `TypeError`" (the
    arguments the other files do not try); nothing is recorded."""
    index = ApproxKvIndexer(block_size=BLOCK)
    tokens = prompt(0, 1)
    with pytest.raises(TypeError, match="dp_rank must be an int, not float"):
        index.record(tokens, 1, dp_rank=1.0)
    with pytest.raises(TypeError, match="worker must be an int, not str"):
        index.record(tokens, "1")
    with pytest.raises(TypeError):
        index.record(tokens, 1, lora=5)
    with pytest.raises(TypeError):
        index.find(tokens, lora=b"x")
    with pytest.raises(TypeError):
        index.find_with_sizes(tokens, lora=1)
    with pytest.raises(TypeError):
        index.find_ranks(tokens, lora=1)
    with pytest.raises(TypeError, match="worker must be an int, not float"):
        index.remove_worker(1.5)
    with pytest.raises(TypeError, match="worker must be an int, not NoneType"):
        index.remove_worker(None)
    with pytest.raises(TypeError):
        compute_block_hashes(tokens, BLOCK, lora=1)
    with pytest.raises(TypeError):
        compute_block_hashes(tokens, BLOCK, cache_namespace=1)
    assert index.stats()["records"] == 0


def test_out_of_range_arguments_raise_value_error():
    """docs/python.md: "`ValueError` for a value out of range ..., naming the argument";
    python/src/hashing.rs: "A block size: an int from 1 to 2^32 - 1"."""
    index = ApproxKvIndexer(block_size=BLOCK)
    with pytest.raises(ValueError, match=r"dp_rank must be an int from 0 to 4294967295, got -1"):
        index.record(prompt(0, 1), 1, dp_rank=-1)
    with pytest.raises(ValueError, match=r"dp_rank must be an int from 0 to 4294967295, got -1"):
        index.remove_worker(1, dp_rank=-1)
    with pytest.raises(ValueError, match=r"worker must be an int from 0 to 18446744073709551615"):
        index.remove_worker(2**64)
    with pytest.raises(ValueError, match=r"block_size must be an int from 1 to 4294967295, got -1"):
        compute_block_hashes([1, 2], -1)
    with pytest.raises(ValueError, match=r"block_size must be an int from 1 to 4294967295"):
        compute_block_hashes([1, 2], 2**32)
    with pytest.raises(TypeError, match="block_size must be an int, not float"):
        compute_block_hashes([1, 2], 2.0)
    assert compute_block_hashes(list(range(8)), 2**32 - 1) == []  # the top block size works
    assert index.stats()["records"] == 0


def test_compute_seq_hashes_takes_any_iterable_and_checks_elements():
    """approx_kv_index.pyi: `compute_seq_hashes(block_hashes: Iterable[int])`: "Chain local
    block hashes into sequence hashes"; docs/python.md: wrong types are `TypeError`."""
    local = compute_block_hashes(list(range(16)), BLOCK)
    expected = compute_seq_hashes(local)
    assert len(expected) == 4 and expected[0] == local[0] and expected[1] != local[1]
    assert compute_seq_hashes(tuple(local)) == expected
    assert compute_seq_hashes(h for h in local) == expected
    assert compute_seq_hashes(np.array(local, dtype=np.uint64)) == expected
    assert compute_seq_hashes([]) == []
    with pytest.raises(TypeError, match=r"block_hashes\[1\] must be an int, not float"):
        compute_seq_hashes([1, 2.0])
    with pytest.raises(TypeError, match=r"block_hashes\[0\] must be an int, not str"):
        compute_seq_hashes("12")
    with pytest.raises(ValueError, match=r"block_hashes\[0\] must be an int from 0"):
        compute_seq_hashes([2**64])


# --- tokens ----------------------------------------------------------------------------


def test_range_tokens_are_accepted():
    """docs/python.md, Tokens: "Any iterable of ints (list, tuple, range, generator)"
    (test_tokens.py tries a range only as bad input)."""
    assert compute_block_hashes(range(16), BLOCK) == compute_block_hashes(list(range(16)), BLOCK)
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(range(16), 1)
    assert index.find(list(range(16))) == {1: 4}
    assert index.find(range(16)) == {1: 4}


def test_two_dimensional_byte_buffer_is_refused():
    """python/src/tokens.rs: "a 2-D array is not a prompt" (the byte-buffer path; the
    uint32 path is in test_tokens.py)."""
    with pytest.raises(ValueError, match="one-dimensional"):
        compute_block_hashes(memoryview(bytes(16)).cast("B", (2, 8)), BLOCK)


def test_numpy_uint8_tokens_are_read_element_by_element():
    """python/src/tokens.rs: "any other iterable of ints (`range`, generators, NumPy arrays
    of other integer types or byte order) | element by element"; docs/python.md: "Any
    iterable of ints ..." (test_tokens.py reads int64 and int32 arrays element by element;
    a uint8 array is a buffer of bytes, yet one token per element, not raw 4-byte tokens)."""
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    expected = compute_block_hashes(tokens, BLOCK)
    assert compute_block_hashes(np.array(tokens, dtype=np.int8), BLOCK) == expected
    assert compute_block_hashes(np.array(tokens, dtype=np.uint16), BLOCK) == expected
    assert compute_block_hashes(np.array(tokens, dtype=np.uint8), BLOCK) == expected


def test_array_of_unsigned_bytes_is_read_element_by_element():
    """docs/python.md, Tokens: "Any iterable of ints (list, tuple, range, generator), a
    buffer of native-endian `uint32` ..., or `bytes`/`bytearray` holding native-endian
    4-byte tokens": an `array('B')` is an iterable of ints, neither uint32 nor bytes."""
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    assert compute_block_hashes(array("b", tokens), BLOCK) == compute_block_hashes(tokens, BLOCK)
    assert compute_block_hashes(array("B", tokens), BLOCK) == compute_block_hashes(tokens, BLOCK)


def test_tokens_are_copied_before_the_gil_is_released():
    """docs/python.md, Tokens: "The tokens are copied before the GIL is released, because
    another Python thread may write to a NumPy array while the index reads it". With
    forced switches off, a writer thread can only run once `record` has released the GIL;
    it then overwrites the array while the index hashes. The index must have recorded the
    tokens as they were when the call began."""
    index = ApproxKvIndexer(block_size=64, ttl=600.0)
    original = np.arange(1, (1 << 20) + 1, dtype=np.uint32)
    tokens = original.copy()
    started, wrote, go = [], [], threading.Event()

    def writer():
        go.wait()
        # Said before the write: NumPy may release the GIL while it fills a large array,
        # and a `record` called after the write began could copy zeros, as it may.
        started.append(True)
        tokens[:] = 0
        wrote.append(True)

    thread = threading.Thread(target=writer)
    thread.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        go.set()
        for _ in range(1000):
            index.record(tokens, 1)
            if started:
                break
    finally:
        sys.setswitchinterval(interval)
        thread.join()
    assert wrote and not tokens.any()  # the writer did overwrite the array
    assert index.find(original) == {1: len(original) // 64}
    assert index.find(tokens) == {}  # nothing of the zeroed array was recorded


# --- GIL release -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    ["find_with_sizes", "find_ranks", "remove_worker", "remove_worker_rank", "stats",
     "snapshot", "restore", "compute_seq_hashes"],
)
def test_other_calls_release_the_gil(call):
    """docs/python.md: "Every call reads its arguments into Rust values, then releases the
    GIL (`Python::detach`) while the index hashes, finds or records"; python/src/lib.rs:
    "Every call reads its arguments, then releases the GIL"; python/src/hashing.rs,
    compute_seq_hashes: "Releases the GIL while hashing" (test_threads.py checks find,
    record and compute_block_hashes)."""
    index = ApproxKvIndexer(block_size=64, ttl=600.0)
    tokens = np.arange(1 << 18, dtype=np.uint32)
    index.record(tokens, 1)
    data = index.snapshot()
    hashes = list(range(1 << 16))
    calls = {
        "find_with_sizes": lambda: index.find_with_sizes(tokens),
        "find_ranks": lambda: index.find_ranks(tokens),
        "remove_worker": lambda: index.remove_worker(7),
        "remove_worker_rank": lambda: index.remove_worker(7, dp_rank=1),
        "stats": index.stats,
        "snapshot": index.snapshot,
        "restore": lambda: index.restore(data),
        "compute_seq_hashes": lambda: compute_seq_hashes(hashes),
    }
    assert releases_the_gil(calls[call]), f"no other thread ran during {call}"


# --- snapshot and restore --------------------------------------------------------------


def test_snapshot_holds_each_entrys_remaining_ttl():
    """approx_kv_index.pyi, snapshot: "The live state with each entry's remaining TTL
    (versioned, checksummed)"."""
    index = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    index.record(prompt(0, 3), 1, dp_rank=2)
    block_size, entries = snapshot_entries(index.snapshot())
    assert block_size == BLOCK
    assert sorted((e["worker"], e["dp_rank"], e["depth"]) for e in entries) == [
        (1, 2, 0), (1, 2, 1), (1, 2, 2)
    ]
    for e in entries:
        assert 50e9 < e["ttl_left_ns"] <= 60e9


def test_restore_keeps_the_ttl_left_not_a_fresh_one():
    """python/src/indexer.rs, restore: "each entry comes back with the TTL it had left"
    (not the restoring index's full TTL)."""
    index = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    index.record(prompt(0, 2), 1)
    fresh = ApproxKvIndexer(block_size=BLOCK, ttl=3600.0)
    fresh.restore(index.snapshot())
    _, entries = snapshot_entries(fresh.snapshot())
    assert len(entries) == 2
    assert all(0 < e["ttl_left_ns"] <= 60e9 for e in entries)


def test_recording_again_restarts_the_ttl():
    """approx_kv_index.pyi, record: "its full blocks become "probably cached" there for one
    TTL" (one TTL from this record: a second record of the same blocks extends it)."""
    index = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    index.record(prompt(0, 1), 1)
    _, [before] = snapshot_entries(index.snapshot())
    time.sleep(0.05)  # let the clock move (not a synchronisation)
    _, [later] = snapshot_entries(index.snapshot())
    index.record(prompt(0, 1), 1)
    _, [after] = snapshot_entries(index.snapshot())
    assert later["ttl_left_ns"] <= before["ttl_left_ns"] - 40e6  # the TTL runs down
    assert after["ttl_left_ns"] >= later["ttl_left_ns"] + 40e6  # the record restarted it


def test_restore_merges_with_what_the_index_holds():
    """python/src/indexer.rs, restore: "each entry comes back with the TTL it had left,
    merged with what the index holds"."""
    old = ApproxKvIndexer(block_size=BLOCK)
    old.record(prompt(0, 3), 1)
    old.record(prompt(0, 1), 2)
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 2)
    index.record(prompt(0, 2), 3, dp_rank=1)
    index.restore(old.snapshot())
    assert index.find_ranks(prompt(0, 3))[0] == {(1, 0): 3, (2, 0): 2, (3, 1): 2}


def test_snapshot_leaves_out_removed_workers():
    """approx_kv_index.pyi, snapshot: "The live state"; python/src/indexer.rs, remove_worker:
    "No find reports it until it is recorded again" (so neither may a restored copy)."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1)
    index.record(prompt(0, 2), 2)
    index.remove_worker(1)
    data = index.snapshot()
    assert {e["worker"] for e in snapshot_entries(data)[1]} == {2}
    fresh = ApproxKvIndexer(block_size=BLOCK)
    fresh.restore(data)
    assert fresh.find(prompt(0, 2)) == {2: 2}


@pytest.mark.parametrize(
    "make", [memoryview, lambda b: np.frombuffer(b, dtype=np.uint8).copy(), lambda b: array("B", b)],
    ids=["memoryview", "numpy-uint8", "array-B"],
)
def test_restore_takes_any_bytes_like(make):
    """python/src/indexer.rs, restore: "Loads a `snapshot()` (bytes-like)"; the stub types
    `data` as a Buffer (bytes and bytearray are in test_index.py)."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 6)
    fresh = ApproxKvIndexer(block_size=BLOCK)
    fresh.restore(make(index.snapshot()))
    assert fresh.find(prompt(0, 2)) == {6: 2}


def test_restore_rejects_truncated_foreign_and_newer_snapshots():
    """approx_kv_index.pyi, restore: "``ValueError`` if it is not one, is corrupt, or has
    another block size"; snapshot: "versioned, checksummed"."""
    index = ApproxKvIndexer(block_size=BLOCK)
    index.record(prompt(0, 2), 1)
    data = index.snapshot()
    for bad in (b"", data[:-1], data + b"\0", data[:12]):
        with pytest.raises(ValueError):
            index.restore(bad)
    newer = bytearray(data)
    newer[8:12] = (3).to_bytes(4, "little")  # format version 3
    with pytest.raises(ValueError, match="unsupported snapshot version 3"):
        index.restore(bytes(newer))
    with pytest.raises(TypeError, match="restore takes bytes from snapshot"):
        index.restore(None)
    assert index.find(prompt(0, 2)) == {1: 2}  # still intact


# --- TTL on the real clock (the binding has no manual clock) ---------------------------


def wait_until(predicate, deadline_s=30.0):
    """Polls `predicate` until it holds or the deadline passes; returns whether it held."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def test_entries_expire_after_one_ttl_never_before():
    """approx_kv_index.pyi, `ttl`: "seconds a recorded block stays "probably cached""; record:
    "its full blocks become "probably cached" there for one TTL". A find that misses must
    have ended at least one TTL after the record began (same monotonic clock)."""
    ttl = 0.2
    index = ApproxKvIndexer(block_size=BLOCK, ttl=ttl, tick=0.02)
    before = time.monotonic()
    index.record(prompt(0, 2), 1)
    found_at_once = index.find(prompt(0, 2))
    recorded_in = time.monotonic() - before
    if recorded_in < ttl:
        assert found_at_once == {1: 2}
    assert wait_until(lambda: index.find(prompt(0, 2)) == {})
    assert time.monotonic() - before >= ttl


def test_the_sweeper_reclaims_expired_entries_every_tick():
    """approx_kv_index.pyi: "``tick`` seconds between sweeps that reclaim memory"; snapshot:
    "The live state". With a short tick the expired entries are freed with no call but
    `stats`; with a tick longer than the test they stay in memory, yet no find and no
    snapshot reports them."""
    lazy = ApproxKvIndexer(block_size=BLOCK, ttl=0.1, tick=1e9)
    lazy.record(prompt(0, 2), 1)  # recorded first: expires first
    swept = ApproxKvIndexer(block_size=BLOCK, ttl=0.1, tick=0.01)
    swept.record(prompt(0, 2), 1)
    assert swept.stats()["entries"] == 2
    assert wait_until(lambda: swept.stats()["entries"] == 0)
    assert swept.stats()["expirations"] == 2
    assert swept.stats()["finds"] == 0  # no find did it
    # One TTL has passed for `lazy` too; its sweeper has not run.
    assert lazy.stats()["entries"] == 2
    assert snapshot_entries(lazy.snapshot())[1] == []
    assert lazy.find(prompt(0, 2)) == {}


def test_signatures_show_the_documented_defaults():
    """docs/python.md: `ApproxKvIndexer(block_size=64, ttl=120.0, ...)`,
    `record(tokens, worker, dp_rank=0, lora=None)`, `begin_request(tokens, worker,
    dp_rank=0, lora=None)`: as `help()` and `inspect` show them."""
    import inspect

    defaults = lambda f: {k: p.default for k, p in inspect.signature(f).parameters.items()}
    assert defaults(ApproxKvIndexer) == {
        "block_size": 64,
        "ttl": 120.0,
        "tick": 0.1,
        "max_blocks_per_worker": None,
        "max_entries": None,
    }
    for method in (ApproxKvIndexer.record, ApproxKvIndexer.begin_request):
        assert defaults(method)["dp_rank"] == 0
        assert defaults(method)["lora"] is None


def test_a_request_begun_from_prompt_hashes_takes_the_counts_one_from_tokens_takes():
    """docs/python.md: a `PromptHashes` is taken as the `tokens` of `begin_request`;
    `observe_cached` takes the engine's count of the prompt's leading tokens found cached
    (its partial last block included)."""
    tokens = list(range(14))  # 3 full blocks of 4, and 2 tokens
    for cached in (12, 13, 14):
        by_tokens, by_hashes = ApproxKvIndexer(block_size=4), ApproxKvIndexer(block_size=4)
        a = by_tokens.begin_request(tokens, 1)
        b = by_hashes.begin_request(PromptHashes(tokens, 4), 1)
        assert by_tokens.observe_cached(a, cached) is True
        assert by_hashes.observe_cached(b, cached) is True
