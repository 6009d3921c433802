"""Many Python threads share one index: every thread reads its own writes and sees the
other threads' decisions once they are done; counters add up; and each call releases the
GIL (another thread runs during it), and a request handle shared between threads never
deadlocks. Throughput is measured by python/bench/overhead.py,
not timed here."""

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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


def test_the_gil_check_can_say_no():
    """gil_release.py: "without a release it never runs (the answer is False)". Found by an
    audit: the helper read its answer after joining the waiter, which then always ran."""
    data = list(range(100_000, 0, -1))
    assert releases_the_gil(lambda: sorted(data), attempts=50) is False


def run_script(code, timeout):
    """Runs `code` in a fresh interpreter: (return code, or "timeout"; its output)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=Path(__file__).parent,
        )
    except subprocess.TimeoutExpired:
        return "timeout", ""
    return done.returncode, done.stdout + done.stderr


def test_a_handle_shared_between_threads_never_deadlocks():
    """Found by an audit: `request_output` and `observe_cached` held the handle's lock while
    the GIL was released, and a thread holding the GIL that waited for that lock (reading
    `blocks`, or another call on the handle) hung the interpreter. One thread streams
    output while another reads the handle; then one reports and adds output while another
    finishes it. In a subprocess, so that a hang fails the test instead of the run."""
    code = """
        import threading, numpy as np
        from approx_kv_index import ApproxKvIndexer
        index = ApproxKvIndexer(block_size=16, ttl=600.0)
        base = np.arange(1 << 21, dtype=np.uint32)
        handle = index.begin_request(base[:16], 1)
        stop = threading.Event()
        def reader():
            while not stop.is_set():
                handle.blocks; handle.finished; repr(handle)
        t = threading.Thread(target=reader); t.start()
        for n in range(1 << 16, 1 << 21, 1 << 16):
            index.request_output(handle, base[:n])
        stop.set(); t.join()
        index.finish_request(handle)
        for _ in range(10):
            handle = index.begin_request(base[:1 << 12], 1)
            def stream():
                for n in range(1 << 16, 1 << 21, 1 << 18):
                    index.request_output(handle, base[:n])
                index.observe_cached(handle, 16)
            t = threading.Thread(target=stream); t.start()
            for _ in range(50):
                index.observe_cached(handle, 16)
            index.finish_request(handle)
            t.join()
        print("ok")
    """
    rc, out = run_script(code, timeout=60)
    assert rc == 0 and "ok" in out, f"rc={rc}: {out[-2000:]}"
