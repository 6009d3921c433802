"""The bundled Mooncake trace (data/conversation_head2000.jsonl) as token arrays, for the
example router and the benchmark.

Each request lists the ids of its 512-token blocks (``hash_ids``); block ``h`` becomes the
tokens ``h * 512 + p`` for ``p`` in 0..512, cut to ``input_length``. The Rust benches map
them to ``splitmix64(h * 512 + p)`` instead (benches/common/mod.rs, ``bundled_trace``):
both mappings are one-to-one on (block, position), so both give the same blocks, the same
shared prefixes and the same index, and hashing costs the same whatever the values.
Plain arithmetic keeps this file free of NumPy and fast in pure Python.
"""

import json
from array import array
from pathlib import Path

TRACE = Path(__file__).resolve().parents[2] / "data" / "conversation_head2000.jsonl"
TRACE_BLOCK = 512


def load(path=TRACE, limit=None):
    """The first ``limit`` requests (all when None) as ``array('I')`` token arrays."""
    blocks = {}
    requests = []
    with open(path, encoding="utf-8") as lines:
        for n, line in enumerate(lines):
            if limit is not None and n >= limit:
                break
            request = json.loads(line)
            tokens = array("I")
            for h in request["hash_ids"]:
                if h not in blocks:
                    first = h * TRACE_BLOCK
                    if first + TRACE_BLOCK > 2**32:
                        raise ValueError(f"trace block id {h} is too large for 32-bit tokens")
                    blocks[h] = array("I", range(first, first + TRACE_BLOCK))
                tokens.extend(blocks[h])
            del tokens[request["input_length"]:]
            requests.append(tokens)
    return requests
