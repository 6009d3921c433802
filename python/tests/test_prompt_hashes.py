"""PromptHashes: a prompt hashed once, then found, recorded, begun with and continued, as
its tokens would be; its hashes are the hash functions'; a mismatched block size or a
lora beside it is a ValueError."""

import numpy as np
import pytest

from approx_kv_index import (
    ApproxKvIndexer,
    PromptHashes,
    compute_block_hashes,
    compute_seq_hashes,
)

BLOCK = 4


def prompt(start, blocks, tail=0):
    return list(range(start, start + blocks * BLOCK + tail))


def test_its_hashes_are_the_hash_functions():
    tokens = prompt(0, 5, tail=3)
    hashes = PromptHashes(tokens, BLOCK)
    assert len(hashes) == 5
    assert hashes.block_size == BLOCK
    assert hashes.local == compute_block_hashes(tokens, BLOCK)
    assert hashes.seq == compute_seq_hashes(hashes.local)
    salted = PromptHashes(np.array(tokens, dtype=np.uint32), BLOCK, lora="adapter")
    assert salted.local == compute_block_hashes(tokens, BLOCK, lora="adapter")
    assert salted.local != hashes.local
    assert "blocks=5" in repr(hashes)


def test_find_record_and_begin_take_it_as_they_take_tokens():
    by_tokens = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    by_hashes = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    turns = [prompt(0, 3), prompt(0, 6), prompt(0, 2) + [99] * BLOCK]
    for worker, tokens in enumerate(turns):
        hashes = PromptHashes(tokens, BLOCK)
        assert by_hashes.find(hashes) == by_tokens.find(tokens)
        by_tokens.record(tokens, worker)
        by_hashes.record(hashes, worker)
    for tokens in turns + [prompt(0, 8)]:
        hashes = PromptHashes(tokens, BLOCK)
        assert by_hashes.find(hashes) == by_tokens.find(tokens)
        assert by_hashes.find_with_sizes(hashes) == by_tokens.find_with_sizes(tokens)
        assert by_hashes.find_ranks(hashes) == by_tokens.find_ranks(tokens)
    assert by_hashes.find(prompt(0, 6)) == {0: 3, 1: 6, 2: 2}

    request = by_hashes.begin_request(PromptHashes(prompt(0, 6), BLOCK), 5)
    assert request.predicted_blocks == 0
    assert by_hashes.find(prompt(0, 6))[5] == 6
    # Its output is hashed as its prompt was.
    assert by_hashes.request_output(request, prompt(0, 7)) == 1
    assert by_hashes.find(prompt(0, 7))[5] == 7
    # The output as hashes: of the same salt they continue the request, of another not.
    assert by_hashes.request_output(request, PromptHashes(prompt(0, 9), BLOCK, lora="b")) == 0
    assert by_hashes.request_output(request, PromptHashes(prompt(0, 9), BLOCK)) == 2
    assert request.blocks == 9
    by_hashes.finish_request(request)


def test_a_salted_prompt_matches_only_its_salt():
    index = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    tokens = prompt(0, 3)
    index.record(PromptHashes(tokens, BLOCK, lora="a"), 1)
    assert index.find(tokens, lora="a") == {1: 3}
    assert index.find(tokens) == {}
    assert index.find(PromptHashes(tokens, BLOCK, lora="a")) == {1: 3}
    request = index.begin_request(PromptHashes(tokens, BLOCK, lora="a"), 2)
    assert request.predicted_blocks == 0
    assert index.request_output(request, prompt(0, 4)) == 1
    assert index.find(prompt(0, 4), lora="a") == {1: 3, 2: 4}


def test_a_mismatch_is_a_value_error_and_changes_nothing():
    index = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    other = PromptHashes(prompt(0, 3), BLOCK * 2)
    with pytest.raises(ValueError, match="block size"):
        index.record(other, 1)
    with pytest.raises(ValueError, match="block size"):
        index.find(other)
    with pytest.raises(ValueError, match="block size"):
        index.begin_request(other, 1)
    with pytest.raises(ValueError, match="lora"):
        index.record(PromptHashes(prompt(0, 3), BLOCK), 1, lora="a")
    assert index.find(prompt(0, 3)) == {}
    with pytest.raises(ValueError):
        PromptHashes(prompt(0, 3), 0)
    with pytest.raises(TypeError):
        PromptHashes("not tokens", BLOCK)
