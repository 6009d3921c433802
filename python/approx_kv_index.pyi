"""Type stubs of the ``approx_kv_index`` extension module (see docs/python.md)."""

from collections.abc import Iterable
from typing import Any

from typing_extensions import Buffer as _Buffer  # only for type checkers

Tokens = Iterable[int] | _Buffer
"""A prompt's tokens: any iterable of ints from 0 to 2**32 - 1 (NumPy arrays of any integer
type, ``uint8`` and ``array('B')`` included: one token per element), a buffer of uint32
(NumPy ``uint32`` array, ``array('I')``), or ``bytes``/``bytearray`` (or a ``memoryview``
of bytes) of native-endian 4-byte tokens."""

class PromptHashes:
    """A prompt's block hashes, made once: pass it where a method takes ``tokens`` (with
    no ``lora``: it carries its salt), so a router that finds and then records (or begins
    a request) converts and hashes the tokens once. Its block size must be the index's
    (else ``ValueError``)."""

    def __init__(self, tokens: Tokens, block_size: int, lora: str | None = None) -> None:
        """Hashes ``tokens`` with ``block_size`` tokens a block (at least 1), salted by
        ``lora`` as ``record(.., lora=..)`` salts them. Releases the GIL while hashing."""

    @property
    def block_size(self) -> int: ...
    @property
    def local(self) -> list[int]:
        """Each full block's local hash (``compute_block_hashes``)."""
    @property
    def seq(self) -> list[int]:
        """Each full block's sequence hash (``compute_seq_hashes`` of ``local``)."""
    def __len__(self) -> int:
        """The number of full blocks."""

Prompt = Tokens | PromptHashes
"""What ``record``, ``find``, ``find_with_sizes``, ``find_ranks``, ``begin_request`` and ``request_output``
take: tokens, or a ``PromptHashes`` made beforehand."""

class ApproxKvIndexer:
    """An approximate index of which worker probably caches which prompt prefix, learned
    from the router's own decisions. Share one between threads: every call releases the
    GIL while it runs. Keys are ``(worker, dp_rank)``; ``find`` merges a worker's ranks."""

    def __init__(
        self,
        block_size: int = 64,
        ttl: float | None = 120.0,
        tick: float = 0.1,
        max_blocks_per_worker: int | None = None,
        max_entries: int | None = None,
    ) -> None:
        """``block_size`` tokens per block (the engines' page size); ``ttl`` seconds a
        recorded block stays "probably cached" (``None``, ``inf`` or 2^62 ns, about 146 years,
        and more: never, for a capacity-only index); ``tick`` seconds between sweeps that reclaim memory;
        ``max_blocks_per_worker`` and ``max_entries`` cap the index (LRU eviction).
        Raises ``ValueError`` for a zero or negative setting."""

    @property
    def block_size(self) -> int:
        """Tokens per block."""

    @property
    def ttl(self) -> float | None:
        """The TTL in seconds, or ``None`` for never."""

    def record(
        self, tokens: Prompt, worker: int, dp_rank: int = 0, lora: str | None = None
    ) -> None:
        """Record that ``worker`` (rank ``dp_rank``) was chosen for ``tokens``: its full
        blocks become "probably cached" there for one TTL. ``lora`` salts the hashes."""

    def find(self, tokens: Prompt, lora: str | None = None) -> dict[int, int]:
        """``{worker: leading blocks of tokens it probably holds}`` (the best of its
        ranks); workers with none are absent."""

    def find_with_sizes(
        self, tokens: Prompt, lora: str | None = None
    ) -> tuple[dict[int, int], dict[int, int]]:
        """``(scores, tree_sizes)``: ``find``'s scores, and the blocks each of those
        workers holds in the whole index (summed over all its ranks, those that hold none
        of the prompt included)."""

    def find_ranks(
        self, tokens: Prompt, lora: str | None = None
    ) -> tuple[dict[tuple[int, int], int], dict[tuple[int, int], int]]:
        """As ``find_with_sizes``, keyed by ``(worker, dp_rank)``."""

    def remove_worker(self, worker: int, dp_rank: int | None = None) -> None:
        """Forget ``worker`` (every rank, or only ``dp_rank``); unknown ids are ignored."""

    def set_worker_capacity(
        self, worker: int, capacity: int | None, dp_rank: int | None = None
    ) -> None:
        """Sets the worker's (rank's) KV capacity in blocks; None: unknown. A lower
        capacity evicts its least recently recorded decisions at once."""

    def worker_capacity(self, worker: int, dp_rank: int | None = None) -> int | None:
        """The capacity set for the worker (rank), or None."""

    def apply_event(self, event: dict[str, Any] | str | bytes) -> None:
        """Applies one KV event in Dynamo's RouterEvent JSON shape (a dict or JSON text):
        {"worker_id", "event": {"event_id", "data": {"stored": ..} | {"removed": ..} |
        "cleared", "dp_rank"}}. Raises ValueError or TypeError if malformed."""

    def apply_events(
        self, events: Iterable[dict[str, Any] | str | bytes] | str | bytes
    ) -> None:
        """Applies events in order (an iterable of events, or JSON text of a list); if
        one is malformed, raises and applies none."""

    def begin_request(
        self,
        tokens: Prompt,
        worker: int,
        dp_rank: int = 0,
        lora: str | None = None,
    ) -> RequestHandle:
        """Records the decision, as ``record``, and pins the prompt's full blocks on the
        worker until the handle is finished (or garbage-collected). ``(worker, tokens)``
        reads the same."""

    def request_output(self, handle: RequestHandle, tokens: Prompt) -> int:
        """Prompt and output so far (tokens, or their ``PromptHashes``): the new full
        blocks join the request, pinned. Returns how many joined."""

    def observe_cached(self, handle: RequestHandle, cached_tokens: int) -> bool:
        """The engine's count of the prompt's leading tokens found cached, once per
        request; fewer blocks than predicted drop the worker's older claims (never the
        request's own). Returns whether it was taken."""

    def finish_request(self, handle: RequestHandle) -> None:
        """Releases the request's blocks: they stay cached one TTL from now."""

    def cache_reports(self) -> dict[tuple[int, int], dict[str, int]]:
        """Per (worker, dp_rank): reports, predicted_blocks, delivered_blocks."""

    def stats(self) -> dict[str, int]:
        """entries, nodes, workers, records, finds, expirations, caller_expirations,
        evictions, rejected_events, pending_timers, estimated_bytes, cache_reports,
        predicted_blocks, delivered_blocks, dropped_by_reports, capacities_learned."""

    def snapshot(self) -> bytes:
        """The live state with each entry's remaining TTL (versioned, checksummed)."""

    def restore(self, data: _Buffer) -> None:
        """Load a ``snapshot()``; ``ValueError`` if it is not one, is corrupt, or has
        another block size."""

class RequestHandle:
    """A request running on a worker, from ``ApproxKvIndexer.begin_request``."""

    @property
    def predicted_blocks(self) -> int:
        """The worker's found depth for the prompt just before the request."""
    @property
    def blocks(self) -> int:
        """The request's pinned blocks (prompt and output); 0 once finished."""
    @property
    def worker(self) -> int: ...
    @property
    def dp_rank(self) -> int: ...
    @property
    def finished(self) -> bool: ...

def compute_block_hashes(
    tokens: Tokens,
    block_size: int,
    lora: str | None = None,
    cache_namespace: str | None = None,
) -> list[int]:
    """The local hash of each full block of ``tokens``, bit for bit Dynamo's."""

def compute_seq_hashes(block_hashes: Iterable[int]) -> list[int]:
    """Chain local block hashes into sequence hashes, as Dynamo does."""
