"""compute_block_hashes and compute_seq_hashes equal Dynamo's (dynamo-kv-router 1.6.1):
every recorded vector in tests/data/dynamo_hash_vectors.json, salted ones included."""

import json
from pathlib import Path

import numpy as np
import pytest

from approx_kv_index import compute_block_hashes, compute_seq_hashes

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "data" / "dynamo_hash_vectors.json"
CASES = json.loads(VECTORS.read_text())["cases"]


def test_the_file_has_plain_and_salted_cases():
    salted = [c for c in CASES if c["lora_name"] is not None or c["cache_namespace"] is not None]
    assert len(CASES) - len(salted) == 11
    assert len(salted) > 0


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"bs{c['block_size']}-n{len(c['tokens'])}-{c['lora_name']}-{c['cache_namespace']}")
def test_vectors_match_dynamo(case):
    local = [int(h) for h in case["local_block_hashes"]]
    seq = [int(h) for h in case["sequence_hashes"]]
    salt = {"lora": case["lora_name"], "cache_namespace": case["cache_namespace"]}
    assert compute_block_hashes(case["tokens"], case["block_size"], **salt) == local
    as_array = np.array(case["tokens"], dtype=np.uint32)
    assert compute_block_hashes(as_array, case["block_size"], **salt) == local
    assert compute_seq_hashes(local) == seq


def test_bad_hash_arguments():
    with pytest.raises(ValueError, match="block_size must be an int from 1 to 4294967295, got 0"):
        compute_block_hashes([1, 2], 0)
    with pytest.raises(ValueError, match=r"block_hashes\[1\] must be an int from 0 to 18446744073709551615"):
        compute_seq_hashes([1, -1])
    with pytest.raises(TypeError):
        compute_seq_hashes(None)
