"""A small Python router on the index: threads route the bundled Mooncake trace to 8
workers, each choosing the worker with the least work, where work is the blocks it would
have to prefill (the prompt's blocks minus those the index says the worker probably holds)
plus the blocks of the requests in flight there (each thread keeps its last 16 requests
in flight), as benches/router.rs does in Rust. Prints the predicted prefix-hit rate.

Run: ``pip install ./python`` once, then ``python python/examples/router.py``
(``--threads``, ``--limit``, ``--block-size``, ``--ttl``: see ``--help``).
"""

import argparse
import threading
import time
from collections import deque

from approx_kv_index import ApproxKvIndexer, PromptHashes

import mooncake

WORKERS = 8
WINDOW = 16


class Router:
    """The shared state of the router threads: the index and each worker's load."""

    def __init__(self, index):
        self.index = index
        self.loads = [0] * WORKERS
        self.routed = [0] * WORKERS
        self.lock = threading.Lock()
        self.hit_blocks = 0
        self.total_blocks = 0

    def route(self, tokens):
        """Choose a worker for ``tokens``, record the decision; returns (worker, blocks)."""
        # Hashed once, for the find and the record.
        hashes = PromptHashes(tokens, self.index.block_size)
        blocks = len(hashes)
        found = self.index.find(hashes)
        with self.lock:
            cost = [blocks - found.get(w, 0) + self.loads[w] for w in range(WORKERS)]
            worker = min(range(WORKERS), key=cost.__getitem__)
            self.loads[worker] += blocks
            self.routed[worker] += 1
            self.hit_blocks += found.get(worker, 0)
            self.total_blocks += blocks
        self.index.record(hashes, worker)
        return worker, blocks

    def finish(self, worker, blocks):
        with self.lock:
            self.loads[worker] -= blocks

    def serve(self, requests):
        """One router thread: routes ``requests`` with WINDOW of them in flight."""
        in_flight = deque()
        for tokens in requests:
            in_flight.append(self.route(tokens))
            if len(in_flight) > WINDOW:
                self.finish(*in_flight.popleft())
        for done in in_flight:
            self.finish(*done)


def positive_int(text):
    """An argparse type: a whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=positive_int, default=4, help="router threads (at least 1)")
    parser.add_argument("--limit", type=int, default=None, help="requests (default: all 2,000)")
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--ttl", type=float, default=120.0, help="seconds (inf: never)")
    args = parser.parse_args()

    requests = mooncake.load(limit=args.limit)
    router = Router(ApproxKvIndexer(block_size=args.block_size, ttl=args.ttl))
    start = time.perf_counter()
    threads = [
        threading.Thread(target=router.serve, args=(requests[t :: args.threads],))
        for t in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start

    print(f"routed {len(requests)} requests from {args.threads} threads in {elapsed:.2f} s "
          f"({len(requests) / elapsed:.0f} requests/s: find + choose + record)")
    print(f"predicted prefix hits: {router.hit_blocks} of {router.total_blocks} blocks "
          f"({100 * router.hit_blocks / max(router.total_blocks, 1):.1f}%)")
    print("requests per worker: " + ", ".join(map(str, router.routed)))
    stats = router.index.stats()
    print(f"index: {stats['entries']} entries, {stats['nodes']} nodes, {stats['workers']} workers")


if __name__ == "__main__":
    main()
