"""The index from Python: record, find (by worker, with sizes, by rank), LoRA isolation,
remove, caps, stats, snapshot and restore, settings."""

import math

import pytest

from approx_kv_index import ApproxKvIndexer

BLOCK = 4


def prompt(start, blocks):
    return list(range(start, start + blocks * BLOCK))


@pytest.fixture
def index():
    return ApproxKvIndexer(block_size=BLOCK, ttl=60.0)


def test_defaults_follow_the_signature():
    index = ApproxKvIndexer()
    assert index.block_size == 64
    assert index.ttl == 120.0
    assert "block_size=64" in repr(index)


def test_find_counts_leading_blocks_per_worker(index):
    index.record(prompt(0, 4), 1)
    index.record(prompt(0, 2) + [99] * BLOCK, 2)
    assert index.find(prompt(0, 4)) == {1: 4, 2: 2}
    assert index.find(prompt(0, 4) + [7, 7]) == {1: 4, 2: 2}  # partial block ignored
    assert index.find(prompt(1000, 4)) == {}
    assert index.find([]) == {}


def test_scores_merge_ranks_and_sizes_add_up(index):
    index.record(prompt(0, 1), 7, dp_rank=0)
    index.record(prompt(0, 3), 7, dp_rank=1)
    index.record(prompt(500, 2), 7, dp_rank=1)
    scores, sizes = index.find_with_sizes(prompt(0, 3))
    assert scores == {7: 3}
    assert sizes == {7: 1 + 3 + 2}
    by_rank, rank_sizes = index.find_ranks(prompt(0, 3))
    assert by_rank == {(7, 0): 1, (7, 1): 3}
    assert rank_sizes == {(7, 0): 1, (7, 1): 5}


def test_remove_worker_drops_every_rank_or_one(index):
    index.record(prompt(0, 2), 3, dp_rank=0)
    index.record(prompt(0, 2), 3, dp_rank=1)
    index.remove_worker(3, dp_rank=0)
    assert index.find_ranks(prompt(0, 2))[0] == {(3, 1): 2}
    index.remove_worker(3)
    assert index.find(prompt(0, 2)) == {}
    index.remove_worker(12345)  # unknown: ignored
    index.record(prompt(0, 2), 3)
    assert index.find(prompt(0, 2)) == {3: 2}


def test_lora_keeps_adapters_apart(index):
    index.record(prompt(0, 2), 1, lora="adapter-a")
    assert index.find(prompt(0, 2)) == {}
    assert index.find(prompt(0, 2), lora="adapter-b") == {}
    assert index.find(prompt(0, 2), lora="adapter-a") == {1: 2}
    index.record(prompt(0, 2), 2, lora="")  # empty means none, as in Dynamo
    assert index.find(prompt(0, 2)) == {2: 2}


def test_worker_ids_span_u64(index):
    top = 2**64 - 1
    index.record(prompt(0, 1), top, dp_rank=2**32 - 1)
    assert index.find(prompt(0, 1)) == {top: 1}
    assert index.find_ranks(prompt(0, 1))[0] == {(top, 2**32 - 1): 1}


def test_stats_count_calls_and_entries(index):
    index.record(prompt(0, 3), 1)
    index.record(prompt(0, 3), 2)
    index.find(prompt(0, 3))
    stats = index.stats()
    assert set(stats) == {
        "entries", "nodes", "workers", "records", "finds", "expirations",
        "caller_expirations", "evictions", "rejected_events", "pending_timers",
        "estimated_bytes", "cache_reports", "predicted_blocks", "delivered_blocks",
        "dropped_by_reports", "capacities_learned",
    }
    assert (stats["entries"], stats["nodes"], stats["workers"]) == (6, 3, 2)
    assert (stats["records"], stats["finds"]) == (2, 1)
    assert stats["estimated_bytes"] > 0


def test_caps_evict_deepest_blocks_of_oldest_decisions():
    index = ApproxKvIndexer(block_size=1, ttl=None, max_blocks_per_worker=4)
    assert index.ttl is None
    index.record([1, 2, 3], 0)
    index.record([7, 8], 0)  # five blocks: one over the cap
    assert index.find([1, 2, 3]) == {0: 2}
    stats = index.stats()
    assert (stats["entries"], stats["evictions"]) == (4, 1)
    capped = ApproxKvIndexer(block_size=1, max_entries=2)
    for worker in range(10):
        capped.record([worker], worker)
    assert capped.stats()["entries"] == 2
    assert capped.find([9]) == {9: 1}


def test_infinite_ttl_means_never():
    index = ApproxKvIndexer(block_size=2, ttl=math.inf)
    assert index.ttl is None
    index.record([1, 2], 5)
    assert index.stats()["pending_timers"] == 0  # no expiry timers kept
    assert index.find([1, 2]) == {5: 1}


def test_snapshot_restores_into_a_fresh_index(index):
    index.record(prompt(0, 3), 1, dp_rank=2)
    index.record(prompt(0, 1), 4, lora="x")
    data = index.snapshot()
    assert isinstance(data, bytes)
    fresh = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    fresh.restore(data)
    assert fresh.find_ranks(prompt(0, 3)) == index.find_ranks(prompt(0, 3))
    assert fresh.find(prompt(0, 1), lora="x") == {4: 1}
    fresh2 = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    fresh2.restore(bytearray(data))  # any bytes-like object
    assert fresh2.find(prompt(0, 3)) == {1: 3}


def test_bad_snapshots_raise_value_error(index):
    data = index.snapshot()
    with pytest.raises(ValueError, match="not an approx-kv-index snapshot"):
        index.restore(b"garbage")
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    with pytest.raises(ValueError, match="corrupt"):
        index.restore(bytes(corrupt))
    with pytest.raises(ValueError, match="block size"):
        ApproxKvIndexer(block_size=8).restore(data)
    with pytest.raises(TypeError, match="restore takes bytes"):
        index.restore("not bytes")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"block_size": 0}, "block_size must be an int from 1 to 4294967295, got 0"),
        ({"block_size": -1}, "block_size must be an int from 1 to 4294967295"),
        ({"block_size": 2**32}, "block_size must be an int from 1"),
        ({"ttl": 0.0}, "ttl must be a number of seconds above 0"),
        ({"ttl": -1.0}, "ttl must be a number of seconds above 0"),
        ({"ttl": math.nan}, "ttl must be a number of seconds above 0"),
        ({"ttl": 1e-12}, "ttl must be longer than zero"),
        ({"tick": 0}, "tick must be a number of seconds above 0"),
        ({"tick": math.inf}, None),  # allowed: a tick longer than any TTL
        ({"max_blocks_per_worker": 0}, "max_blocks_per_worker must be an int from 1 to 18446744073709551615, got 0"),
        ({"max_entries": -5}, "max_entries must be an int from 1"),
    ],
)
def test_bad_settings_raise_value_error(kwargs, message):
    if message is None:
        ApproxKvIndexer(**kwargs)
        return
    with pytest.raises(ValueError, match=message):
        ApproxKvIndexer(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"block_size": 1.5}, {"block_size": "64"}, {"ttl": "120"}, {"max_entries": 2.0}],
)
def test_settings_of_the_wrong_type_raise_type_error(kwargs):
    with pytest.raises(TypeError):
        ApproxKvIndexer(**kwargs)


def test_bad_worker_and_rank(index):
    with pytest.raises(ValueError, match=r"worker must be an int from 0 to 18446744073709551615, got -1"):
        index.record([1, 2, 3, 4], -1)
    with pytest.raises(ValueError, match="worker must be an int from 0"):
        index.record([1, 2, 3, 4], 2**64)
    with pytest.raises(TypeError, match="worker must be an int, not float"):
        index.record([1, 2, 3, 4], 1.0)
    with pytest.raises(ValueError, match="dp_rank must be an int from 0 to 4294967295"):
        index.record([1, 2, 3, 4], 1, dp_rank=2**32)
    with pytest.raises(ValueError, match="worker must be an int from 0"):
        index.remove_worker(-3)
    with pytest.raises(TypeError, match="dp_rank must be an int"):
        index.remove_worker(3, dp_rank="0")
    assert index.stats()["records"] == 0  # nothing was recorded
