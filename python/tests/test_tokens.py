"""Tokens in every form a router holds them (lists, tuples, ranges, generators, bytes,
array('I'), NumPy arrays) give the same answers; bad tokens raise ValueError or
TypeError naming the problem, and store nothing."""

from array import array

import numpy as np
import pytest

from approx_kv_index import ApproxKvIndexer, compute_block_hashes

TOKENS = [0, 1, 2**32 - 1, 7, 123456, 5, 6, 8]  # two blocks of 4
EXPECTED = compute_block_hashes(TOKENS, 4)


@pytest.mark.parametrize(
    "make",
    [
        list,
        tuple,
        lambda t: iter(t),
        lambda t: (x for x in t),
        lambda t: array("I", t),
        lambda t: array("I", t).tobytes(),
        lambda t: bytearray(array("I", t).tobytes()),
        lambda t: memoryview(array("I", t).tobytes()),
        lambda t: memoryview(array("I", t).tobytes()).cast("I"),
        lambda t: array("q", t),  # signed 64-bit: read element by element
        lambda t: np.array(t, dtype=np.uint32),
        lambda t: np.array(t, dtype=np.int64),
        lambda t: np.array(t, dtype=">u4"),  # big-endian: read element by element
        lambda t: np.array([t, t], dtype=np.uint32)[0],
        lambda t: np.repeat(np.array(t, dtype=np.uint32), 2)[::2],  # strided view
        lambda t: [np.uint32(x) for x in t],
    ],
    ids=[
        "list", "tuple", "iterator", "generator", "array-I", "bytes", "bytearray",
        "memoryview-bytes", "memoryview-I", "array-q", "numpy-uint32", "numpy-int64",
        "numpy-big-endian", "numpy-row", "numpy-strided", "numpy-scalars",
    ],
)
def test_every_form_hashes_and_matches_alike(make):
    assert compute_block_hashes(make(TOKENS), 4) == EXPECTED
    index = ApproxKvIndexer(block_size=4)
    index.record(make(TOKENS), 9)
    assert index.find(make(TOKENS)) == {9: 2}
    assert index.find(TOKENS) == {9: 2}


@pytest.mark.parametrize(
    "empty",
    [[], (), array("I"), b"", np.array([], dtype=np.uint32), np.array([], dtype=np.int64), iter([])],
    ids=["list", "tuple", "array-I", "bytes", "numpy-uint32", "numpy-int64", "iterator"],
)
def test_empty_tokens_are_no_blocks(empty):
    assert compute_block_hashes(empty, 4) == []
    index = ApproxKvIndexer(block_size=4)
    index.record(empty, 1)
    assert index.find(empty) == {}
    assert index.stats()["entries"] == 0


def test_strided_numpy_values_are_read_as_seen():
    strided = np.arange(16, dtype=np.uint32)[::2]  # 0, 2, 4, ...
    assert compute_block_hashes(strided, 4) == compute_block_hashes(list(range(0, 16, 2)), 4)


@pytest.mark.parametrize(
    "tokens, error, message",
    [
        ([1, 2, -1, 4], ValueError, r"tokens\[2\] must be an int from 0 to 4294967295, got -1"),
        ([1, 2**32], ValueError, r"tokens\[1\] must be an int from 0 to 4294967295, got 4294967296"),
        ([1, 2**70], ValueError, r"tokens\[1\] must be an int from 0"),
        ([1, 2.0, 3, 4], TypeError, r"tokens\[1\] must be an int, not float"),
        ([1, "2", 3, 4], TypeError, r"tokens\[1\] must be an int, not str"),
        ([1, None], TypeError, r"tokens\[1\] must be an int, not NoneType"),
        ((1, 2, 3, -4), ValueError, r"tokens\[3\] must be an int from 0"),
        (range(-1, 3), ValueError, r"tokens\[0\] must be an int from 0"),
        (np.array([1.0, 2.0, 3.0, 4.0]), TypeError, r"tokens\[0\] must be an int, not .*float64"),
        (np.array([1, -2, 3, 4], dtype=np.int32), ValueError, r"tokens\[1\] must be an int from 0"),
        (array("i", [5, -1, 0, 0]), ValueError, r"tokens\[1\] must be an int from 0"),
        (b"\x01\x02\x03", ValueError, "whole 4-byte tokens"),
        (np.zeros((2, 4), dtype=np.uint32), ValueError, "one-dimensional"),
        (np.zeros((2, 4), dtype=np.int64), ValueError, "one-dimensional"),  # a batch, any dtype
        (np.zeros((1, 4), dtype=">u4"), ValueError, "one-dimensional"),
        (np.zeros((2, 4), dtype=np.uint8), ValueError, "one-dimensional"),
        ("1234", TypeError, "tokens must be a sequence of ints, a uint32 array or bytes, not str"),
        (None, TypeError, "not NoneType"),
        (42, TypeError, "not int"),
        (4.5, TypeError, "not float"),
    ],
)
def test_bad_tokens_raise_clear_errors(tokens, error, message):
    index = ApproxKvIndexer(block_size=4)
    with pytest.raises(error, match=message):
        index.record(tokens, 1)
    with pytest.raises(error, match=message):
        index.find(tokens)
    with pytest.raises(error, match=message):
        compute_block_hashes(tokens, 4)
    assert index.stats()["records"] == 0


def test_large_prompt_is_read_in_full():
    tokens = np.arange(1_000_000, dtype=np.uint32)
    index = ApproxKvIndexer(block_size=64)
    index.record(tokens, 1)
    assert index.find(tokens) == {1: 1_000_000 // 64}
    assert index.find(tokens.tolist()) == {1: 1_000_000 // 64}
