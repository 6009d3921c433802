"""What engines report, from Python: KV events in Dynamo's RouterEvent JSON shape
(apply_event, apply_events; dicts or JSON text) and workers' capacities
(set_worker_capacity, worker_capacity)."""

import json

import pytest

from approx_kv_index import ApproxKvIndexer, compute_block_hashes, compute_seq_hashes

BLOCK = 4


def prompt(start, blocks):
    return list(range(start, start + blocks * BLOCK))


@pytest.fixture
def index():
    return ApproxKvIndexer(block_size=BLOCK, ttl=60.0)


def stored(worker, tokens, parent=None, dp_rank=None, event_id=1):
    """A Stored event naming blocks by this index's sequence hashes."""
    local = compute_block_hashes(tokens, BLOCK)
    seq = compute_seq_hashes(local)
    event = {
        "event_id": event_id,
        "data": {
            "stored": {
                "parent_hash": parent,
                "blocks": [
                    {"block_hash": s, "tokens_hash": t, "mm_extra_info": None}
                    for s, t in zip(seq, local)
                ],
            }
        },
    }
    if dp_rank is not None:
        event["dp_rank"] = dp_rank
    return {"worker_id": worker, "event": event}, seq


def test_a_stored_event_as_a_dict_as_json_text_and_as_bytes(index):
    for worker, form in [(1, "dict"), (2, "str"), (3, "bytes")]:
        event, _ = stored(worker, prompt(0, 3))
        if form == "str":
            event = json.dumps(event)
        elif form == "bytes":
            event = json.dumps(event).encode()
        index.apply_event(event)
    assert index.find(prompt(0, 3)) == {1: 3, 2: 3, 3: 3}


def test_removed_and_cleared_events(index):
    event, seq = stored(5, prompt(0, 3))
    index.apply_event(event)
    index.record(prompt(0, 3), 5)  # an approximate claim on the same blocks too
    removed = {"worker_id": 5, "event": {"event_id": 2, "data": {"removed": {"block_hashes": [seq[1]]}}}}
    index.apply_event(removed)
    assert index.find(prompt(0, 3)) == {5: 1}, "exact and approximate claims both end"
    index.apply_event({"worker_id": 5, "event": {"event_id": 3, "data": "cleared"}})
    assert index.find(prompt(0, 3)) == {}


def test_ranks_are_kept_apart(index):
    index.apply_event(stored(7, prompt(0, 2), dp_rank=1)[0])
    index.apply_event(stored(7, prompt(0, 1), dp_rank=0)[0])
    scores, _ = index.find_ranks(prompt(0, 2))
    assert scores == {(7, 1): 2, (7, 0): 1}
    index.apply_event({"worker_id": 7, "event": {"event_id": 4, "data": "cleared", "dp_rank": 1}})
    scores, _ = index.find_ranks(prompt(0, 2))
    assert scores == {(7, 0): 1}


def test_apply_events_takes_a_list_or_json_text_of_one(index):
    first, seq = stored(1, prompt(0, 2))
    second, _ = stored(1, prompt(0, 3)[2 * BLOCK :], parent=seq[-1], event_id=2)
    index.apply_events([first, json.dumps(second)])
    assert index.find(prompt(0, 3)) == {1: 3}
    other = ApproxKvIndexer(block_size=BLOCK)
    other.apply_events(json.dumps([first, second]))
    assert other.find(prompt(0, 3)) == {1: 3}
    other.apply_events(iter([]))
    assert other.stats()["entries"] == 3


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"event": {"data": "cleared"}}, ValueError),  # no worker_id
        ({"worker_id": 1}, ValueError),  # no event
        ({"worker_id": 1, "event": {"data": "wiped"}}, ValueError),
        ({"worker_id": 1, "event": {"data": {"stored": {"blocks": [{"block_hash": 1}]}}}}, ValueError),
        ({"worker_id": 1, "event": {"data": {"stored": {"blocks": "nope"}}}}, TypeError),
        ({"worker_id": -1, "event": {"data": "cleared"}}, ValueError),
        ({"worker_id": "one", "event": {"data": "cleared"}}, TypeError),
        ({"worker_id": 1, "event": {"data": {"removed": {"block_hashes": [2**64]}}}}, ValueError),
        ({"worker_id": 1, "event": {"data": "cleared", "dp_rank": 2**32}}, ValueError),
        ("{not json", ValueError),
        (42, TypeError),
    ],
)
def test_a_malformed_event_raises_and_changes_nothing(index, bad, error):
    index.record(prompt(0, 2), 1)
    with pytest.raises(error):
        index.apply_event(bad)
    good, _ = stored(2, prompt(100, 2))
    with pytest.raises(error):
        index.apply_events([good, bad])
    assert index.find(prompt(0, 2)) == {1: 2}
    assert index.find(prompt(100, 2)) == {}, "apply_events applied none"


def test_apply_events_refuses_a_single_event(index):
    event, _ = stored(1, prompt(0, 1))
    with pytest.raises(TypeError, match="apply_event"):
        index.apply_events(event)


def test_set_worker_capacity_bounds_a_worker_and_lowering_evicts_at_once(index):
    index.set_worker_capacity(3, 100)
    index.record(prompt(0, 4), 3)
    index.record(prompt(100, 4), 3)
    assert index.worker_capacity(3) == 100
    index.set_worker_capacity(3, 3)
    assert index.find(prompt(0, 4)) == {}
    assert index.find(prompt(100, 4)) == {3: 3}
    index.set_worker_capacity(3, None)
    assert index.worker_capacity(3) is None
    index.set_worker_capacity(4, 1, dp_rank=2)
    assert index.worker_capacity(4, dp_rank=2) == 1
    assert index.worker_capacity(4) is None


def test_set_worker_capacity_rejects_bad_values(index):
    with pytest.raises(ValueError):
        index.set_worker_capacity(1, -1)
    with pytest.raises(TypeError):
        index.set_worker_capacity(1, "many")
    with pytest.raises(ValueError):
        index.set_worker_capacity(-1, 5)


# Request lifecycles and cached-token reports.


def test_a_running_request_is_pinned_and_predicts_its_depth(index):
    index.record(prompt(0, 2), 1)
    handle = index.begin_request(prompt(0, 3), 1)
    assert handle.predicted_blocks == 2
    assert handle.blocks == 3
    assert (handle.worker, handle.dp_rank, handle.finished) == (1, 0, False)
    assert index.find(prompt(0, 3)) == {1: 3}
    index.finish_request(handle)
    assert handle.finished and handle.blocks == 0
    index.finish_request(handle)  # a second finish changes nothing
    assert index.find(prompt(0, 3)) == {1: 3}, "released blocks stay cached one TTL"


def test_the_rust_argument_order_reads_the_same(index):
    handle = index.begin_request(7, prompt(0, 2), dp_rank=1)
    assert (handle.worker, handle.dp_rank, handle.blocks) == (7, 1, 2)
    assert index.find_ranks(prompt(0, 2))[0] == {(7, 1): 2}
    # A NumPy integer is a worker id there too (found by an audit: it was taken for tokens).
    import numpy as np

    handle = index.begin_request(np.int64(8), prompt(0, 2))
    assert (handle.worker, handle.blocks) == (8, 2)


def test_pinned_blocks_outlast_a_capacity():
    index = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    index.set_worker_capacity(1, 3)
    running = index.begin_request(prompt(0, 2), 1)
    index.record(prompt(100, 1), 1)
    index.record(prompt(200, 1), 1)  # over capacity: the older unpinned decision goes
    assert index.find(prompt(0, 2)) == {1: 2}
    assert index.find(prompt(100, 1)) == {}
    index.finish_request(running)


def test_output_blocks_join_the_request(index):
    handle = index.begin_request(prompt(0, 1), 1)
    assert index.request_output(handle, prompt(0, 3)) == 2
    assert index.request_output(handle, prompt(500, 4)) == 0, "not its prompt"
    assert handle.blocks == 3
    index.finish_request(handle)
    assert index.request_output(handle, prompt(0, 4)) == 0, "finished"


def test_cached_token_reports_count_and_correct(index):
    index.record(prompt(100, 2), 1)  # used first
    index.record(prompt(0, 3), 1)
    handle = index.begin_request(prompt(0, 4), 1)
    assert handle.predicted_blocks == 3
    assert index.observe_cached(handle, BLOCK) is True  # 1 block of 3 delivered
    assert index.observe_cached(handle, BLOCK) is False, "once per request"
    assert index.find(prompt(100, 2)) == {}, "an older claim is gone"
    assert index.find(prompt(0, 4)) == {1: 4}, "the request's own blocks stay"
    assert index.cache_reports() == {
        (1, 0): {"reports": 1, "predicted_blocks": 3, "delivered_blocks": 1}
    }
    stats = index.stats()
    assert (stats["cache_reports"], stats["predicted_blocks"], stats["delivered_blocks"]) == (1, 3, 1)
    assert stats["dropped_by_reports"] == 2


def test_bad_reports_are_refused_or_raise(index):
    handle = index.begin_request(prompt(0, 2), 1)
    assert index.observe_cached(handle, 2 * BLOCK + 1) is False, "beyond the prompt"
    with pytest.raises(ValueError):
        index.observe_cached(handle, -1)
    with pytest.raises(TypeError):
        index.observe_cached(handle, "3")
    with pytest.raises(TypeError):
        index.request_output(handle, "not tokens")
    with pytest.raises(TypeError):
        index.observe_cached("not a handle", 3)
    assert index.cache_reports() == {}


def test_a_garbage_collected_handle_releases(index):
    import gc

    handle = index.begin_request(prompt(0, 2), 1)
    del handle
    gc.collect()
    index.set_worker_capacity(1, 1)
    assert index.find(prompt(0, 2)) == {1: 1}, "released: evicted deepest first"


def test_a_loss_teaches_a_first_capacity(index):
    index.record(prompt(100, 3), 1)  # used first: dropped by the loss
    index.record(prompt(0, 2), 1)
    handle = index.begin_request(prompt(0, 2), 1)
    assert index.worker_capacity(1) is None
    assert index.observe_cached(handle, BLOCK)
    assert index.worker_capacity(1) == 5, "what it held when the loss showed"
    assert index.stats()["capacities_learned"] == 1


def test_ghosts_raise_every_worker_on_the_same_guess(index):
    for worker in (1, 2, 3):
        index.set_worker_capacity(worker, 4)
    index.set_worker_capacity(4, 5)
    index.record(prompt(0, 4), 1)
    index.record(prompt(100, 2), 1)  # evicts 2 of the first 4
    handle = index.begin_request(prompt(0, 4), 1)
    assert handle.predicted_blocks == 2
    assert index.observe_cached(handle, 4 * BLOCK), "the engine still had them: ghosts"
    assert [index.worker_capacity(w) for w in (1, 2, 3, 4)] == [8, 8, 8, 5]
    assert index.stats()["capacities_learned"] == 3, "1's own, and 2 and 3 on its guess"


def test_capacities_travel_with_snapshots(index):
    index.set_worker_capacity(3, 7, dp_rank=1)
    fresh = ApproxKvIndexer(block_size=BLOCK, ttl=60.0)
    fresh.restore(index.snapshot())
    assert fresh.worker_capacity(3, dp_rank=1) == 7
