"""Per-call cost of the binding from Python, and 1 vs 2 Python threads, on the bundled
trace: the same passes as the Rust baseline ``cargo bench --bench trace_calls`` (block
size 64, TTL 1 h, hashing included), so the difference is the binding's overhead.

- ``record``: each request recorded into a fresh index, to worker ``i % 8``;
- ``find``: each request found in that warm index (prints the summed best scores, which
  equal the Rust baseline's: the same index);
- ``find+record, N threads``: each request found then recorded, the trace dealt out
  round-robin to N threads sharing a fresh index; requests per second; and the same with
  each request hashed once (``PromptHashes``, timed too) for its find and its record.

Tokens are given as ``array('I')``, NumPy ``uint32`` arrays (when NumPy is installed)
and Python lists (the lists are made before each call, untimed; only the first
``--list-limit`` requests, to keep memory small). Each call is timed alone with
``time.perf_counter_ns`` (about 0.1 us of the figure is the timer). Figures are medians
over ``--rounds`` rounds.

Run: ``python python/bench/overhead.py`` (``--threads 1,2,4`` on a machine with more cores).
"""

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from approx_kv_index import ApproxKvIndexer, PromptHashes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import mooncake  # noqa: E402  (the trace loader the example uses)


def new_index():
    return ApproxKvIndexer(block_size=64, ttl=3600.0)


def passes(reqs, prepare):
    """One round of the record and find passes: (us per record, us per find, hits)."""
    index = new_index()
    clock = time.perf_counter_ns
    spent = 0
    for i, tokens in enumerate(reqs):
        tokens = prepare(tokens)
        start = clock()
        index.record(tokens, i % 8)
        spent += clock() - start
    record = spent / len(reqs) / 1e3
    spent, hits = 0, 0
    for tokens in reqs:
        tokens = prepare(tokens)
        start = clock()
        found = index.find(tokens)
        spent += clock() - start
        hits += max(found.values(), default=0)
    return record, spent / len(reqs) / 1e3, hits


def threaded(reqs, threads, hashed_once=False):
    """Requests per second of find + record with ``threads`` threads on a fresh index;
    ``hashed_once``: each request's tokens made into ``PromptHashes`` first (timed), which
    the find and the record take."""
    index = new_index()

    def work(t):
        for i in range(t, len(reqs), threads):
            prompt = PromptHashes(reqs[i], 64) if hashed_once else reqs[i]
            index.find(prompt)
            index.record(prompt, i % 8)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return len(reqs) / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--list-limit", type=int, default=500)
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    args = parser.parse_args()

    trace = mooncake.load()
    forms = {
        "array('I')": (trace, lambda a: a),
        "list": (trace[: args.list_limit], lambda a: a.tolist()),
    }
    try:
        import numpy as np

        forms["numpy uint32"] = (trace, lambda a: np.frombuffer(a, dtype=np.uint32))
    except ImportError:
        print("(NumPy is not installed: its form is skipped)")
    print(f"Python {sys.version.split()[0]}, median of {args.rounds} rounds, us per call:")
    for name, (reqs, prepare) in forms.items():
        rounds = [passes(reqs, prepare) for _ in range(args.rounds)]
        record = statistics.median(r[0] for r in rounds)
        find = statistics.median(r[1] for r in rounds)
        print(f"  {name:13} ({len(reqs)} requests): record {record:8.2f}  find {find:8.2f}"
              f"  (summed best scores {rounds[0][2]})")
    as_lists = [a.tolist() for a in trace[: args.list_limit]]
    for name, reqs in (("array('I')", trace), ("list", as_lists)):
        for threads in map(int, args.threads.split(",")):
            for once in (False, True):
                runs = (threaded(reqs, threads, once) for _ in range(args.rounds))
                rate = statistics.median(runs)
                how = "hashed once" if once else "tokens"
                print(f"  find+record, {name:12}, {how:11}, {threads} thread(s):"
                      f" {rate:8.0f} requests/s")


if __name__ == "__main__":
    main()
