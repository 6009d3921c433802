"""Many Python threads share one index: every thread reads its own writes and sees the
other threads' decisions once they are done; counters add up; and each call releases the
GIL (another thread runs during it). Throughput is measured by python/bench/overhead.py,
not timed here."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from approx_kv_index import ApproxKvIndexer, compute_block_hashes
from gil_release import releases_the_gil

THREADS = 8
PROMPTS = 200
BLOCK = 16
SHARED = np.arange(10 * BLOCK, dtype=np.uint32)  # a system prompt every thread sends


def prompt(thread, i):
    own = np.arange(6 * BLOCK, dtype=np.uint32) + np.uint32(1_000_000 * (thread + 1) + 1_000 * i)
    return np.concatenate([SHARED, own])


def route(index, thread):
    mismatches = []
    for i in range(PROMPTS):
        tokens = prompt(thread, i)
        index.record(tokens, thread, dp_rank=i % 2)
        found = index.find(tokens)
        if found.get(thread) != 16:  # read your writes: all 16 blocks
            mismatches.append((i, found.get(thread)))
        if index.find(tokens[: 10 * BLOCK]).get(thread) != 10:
            mismatches.append((i, "shared"))
    return mismatches


def test_threads_read_their_writes_and_each_others():
    index = ApproxKvIndexer(block_size=BLOCK, ttl=600.0)
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda t: route(index, t), range(THREADS)))
    assert results == [[] for _ in range(THREADS)]
    # Every thread's decisions are visible to everyone afterwards.
    assert index.find(SHARED) == {t: 10 for t in range(THREADS)}
    for t in range(THREADS):
        for i in (0, PROMPTS - 1):
            assert index.find(prompt(t, i).tolist()) == {t: 16, **{u: 10 for u in range(THREADS) if u != t}}
    stats = index.stats()
    assert stats["records"] == THREADS * PROMPTS
    assert stats["finds"] == THREADS * PROMPTS * 2 + 1 + THREADS * 2
    assert stats["workers"] == THREADS * 2  # (worker, rank) keys
    # Shared blocks: one node each; own blocks: one node and one entry per prompt.
    assert stats["nodes"] == 10 + THREADS * PROMPTS * 6
    assert stats["entries"] == 10 * THREADS * 2 + THREADS * PROMPTS * 6


def test_removing_workers_while_others_route():
    index = ApproxKvIndexer(block_size=BLOCK, ttl=600.0)

    def churn(t):
        for i in range(PROMPTS):
            index.record(prompt(t, i), t)
            if t == 0:
                index.remove_worker(t)
        return index.find(prompt(t, PROMPTS - 1)).get(t)

    with ThreadPoolExecutor(4) as pool:
        last = list(pool.map(churn, range(4)))
    assert last == [None, 16, 16, 16]  # worker 0 removed itself after each record


@pytest.mark.parametrize("call", ["find", "record", "compute_block_hashes"])
def test_calls_release_the_gil(call):
    """With forced GIL switches off, a waiting thread can only run while the main thread
    releases the GIL of its own accord: inside the call. Without the release it never
    runs (the assertion fails, nothing hangs); with it, it runs within a few calls."""
    index = ApproxKvIndexer(block_size=64, ttl=600.0)
    tokens = np.arange(1 << 20, dtype=np.uint32)
    calls = {
        "find": lambda: index.find(tokens),
        "record": lambda: index.record(tokens, 1),
        "compute_block_hashes": lambda: compute_block_hashes(tokens, 64),
    }[call]
    assert releases_the_gil(calls, attempts=1000), f"no other thread ran during 1000 calls of {call}"
