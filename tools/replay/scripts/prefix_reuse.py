#!/usr/bin/env python3
"""How soon a Mooncake trace reuses a prefix: for each request whose longest prefix seen
before (in `hash_ids`, one id per 512-token block) is at least MIN_BLOCKS long, the time
since that prefix was last used. Prints the quartiles and the share reused within 10 s,
30 s and 60 s: decisions fill the gap of KV events that lag by more than that.

    python3 tools/replay/scripts/prefix_reuse.py TRACE.jsonl [MIN_BLOCKS (default 4)]
"""
import json
import sys


def gaps(path, min_blocks):
    last_used = {}  # prefix (tuple of ids) -> timestamp (ms) of its latest request
    out = []
    with open(path) as trace:
        for line in trace:
            request = json.loads(line)
            ids, at = request["hash_ids"], request["timestamp"]
            for k in range(len(ids), min_blocks - 1, -1):
                seen = last_used.get(tuple(ids[:k]))
                if seen is not None:
                    out.append((at - seen) / 1000)
                    break
            for k in range(1, len(ids) + 1):
                last_used[tuple(ids[:k])] = at
    return sorted(out)


def main():
    path = sys.argv[1]
    min_blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    g = gaps(path, min_blocks)
    if not g:
        print("no request reuses a prefix that long")
        return
    at = lambda q: g[int(q * (len(g) - 1))]
    within = lambda s: sum(x < s for x in g) / len(g)
    print(
        f"{len(g)} requests reuse a prefix of >= {min_blocks} blocks; seconds since its last use:"
        f" p10 {at(0.1):.1f}, p25 {at(0.25):.1f}, p50 {at(0.5):.1f}, p75 {at(0.75):.1f};"
        f" within 10 s {within(10):.1%}, 30 s {within(30):.1%}, 60 s {within(60):.1%}"
    )


if __name__ == "__main__":
    main()
