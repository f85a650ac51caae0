"""Conformance with vLLM's releases: its block type and its block pool, read from its wheels.

The scenarios are written here; vLLM's code is not. ``conformance/wheel.py``
executes vLLM's ``kv_cache_utils.py`` and ``block_pool.py`` out of each
``vllm`` wheel named by ``VERIFIED_QUEUE_VLLM_VERSIONS`` (``tox -e vllm``:
0.34.0 and 0.33.0), so the blocks are vLLM's ``KVCacheBlock`` (unchanged
on the pure-Python build; turned into a ``verified_queue.Block`` subclass on
either build) and the pool is vLLM's ``BlockPool`` with its free queue bound
to ours.

The tests skip when no wheel is configured and fail when
``VERIFIED_QUEUE_VLLM_WHEEL`` is set but names no wheel: ``tox -e vllm`` and
``tox -e vllm-compiled`` set it after downloading the wheel into ``.tox/``.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import verified_queue
from conformance.wheel import (
    BLOCK_POOL,
    DEFAULT_VERSION,
    KV_CACHE_UTILS,
    LINK_FIELDS,
    WHEEL_ENV,
    VllmCode,
    WheelNotFoundError,
    configured_versions,
    configured_wheel,
    drop_in_diff,
    load_patched,
    load_vllm,
    wheel_version,
)
from verified_queue import (
    AlreadyInQueueError,
    Block,
    EmptyQueueError,
    FreeBlockQueue,
    InvariantViolation,
    NotInQueueError,
)
from verified_queue.kvcache.keys import BlockHash
from verified_queue.kvcache.pool import BlockPool as OurBlockPool

#: The block forms each build must accept: vLLM's class as it ships only on the
#: pure-Python build (the compiled queue reads the links as C fields of Block).
FORMS = ["Block subclass"] if verified_queue.COMPILED else ["unchanged", "Block subclass"]

BLOCK_SIZE = 16

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=configured_versions())
def wheel(request: pytest.FixtureRequest) -> Path:
    """A vLLM wheel of each configured release: skip without one, fail if one is missing."""
    version: str = request.param
    try:
        found = configured_wheel(version)
    except WheelNotFoundError as error:
        pytest.fail(f"{WHEEL_ENV} is set, but: {error}")
    if found is None:
        pytest.skip(
            f"no vLLM {version} wheel configured: run `tox -e vllm`, or set {WHEEL_ENV} "
            "to a vllm wheel or a directory holding one"
        )
    return found


def release(wheel: Path) -> tuple[int, ...]:
    """The release of ``wheel`` as a tuple of ints, for comparisons (0.34.0: (0, 34, 0))."""
    return tuple(int(part) for part in wheel_version(wheel).split("."))


def owner(block: Any) -> Any:
    """The pool ``block.pool`` names: 0.34.0 holds a weak reference, 0.33.0 the pool."""
    reference = block.pool
    return reference() if isinstance(reference, weakref.ref) else reference


@pytest.fixture(params=FORMS)
def vllm(request: pytest.FixtureRequest, wheel: Path) -> VllmCode:
    """vLLM's modules with its block in one form and its pool building our queue."""
    base = Block if request.param == "Block subclass" else None
    return load_vllm(wheel, block_base=base, free_queue=FreeBlockQueue)


def new_blocks(vllm: VllmCode, count: int) -> list[Any]:
    """Return ``count`` of vLLM's blocks, ``block_id`` 0 to ``count - 1``."""
    return [vllm.KVCacheBlock(block_id) for block_id in range(count)]


def ids(blocks: Iterable[Any]) -> list[int]:
    """Return the ``block_id`` of each block, for readable comparisons."""
    return [block.block_id for block in blocks]


def assert_chain(queue: FreeBlockQueue[Any], expected: Sequence[Any]) -> None:
    """Assert that ``queue`` holds exactly ``expected``, checking every link, the sentinels' too."""
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    chain = [head, *expected, tail]
    assert head.prev_free_block is None
    assert tail.next_free_block is None
    for before, after in itertools.pairwise(chain):
        assert before.next_free_block is after, f"{before!r} -> {after!r}"
        assert after.prev_free_block is before, f"{before!r} <- {after!r}"
    assert queue.num_free_blocks == len(expected)
    free = queue.get_all_free_blocks()
    assert len(free) == len(expected)
    assert all(found is wanted for found, wanted in zip(free, expected, strict=True))


def assert_detached(blocks: Iterable[Any]) -> None:
    """Assert that every block in ``blocks`` has both links ``None``."""
    for block in blocks:
        assert block.prev_free_block is None, repr(block)
        assert block.next_free_block is None, repr(block)


# ---------------------------------------------------------------------------
# vLLM's KVCacheBlock in our queue.


def test_block_form_matches_the_build(vllm: VllmCode) -> None:
    """vLLM's KVCacheBlock is slotted and declares the links itself only when unchanged."""
    block_class = vllm.KVCacheBlock
    block = block_class(7)
    assert not hasattr(block, "__dict__")
    assert block.block_id == 7
    assert block.ref_cnt == 0
    assert block.block_hash is None
    own_fields = set(block_class.__dataclass_fields__)
    if issubclass(block_class, Block):
        assert not own_fields & set(LINK_FIELDS)
    else:
        assert set(LINK_FIELDS) <= own_fields
    assert_detached([block])


@pytest.mark.parametrize("count", [0, 1, 6])
def test_initialisation_links_every_block_between_the_sentinels(vllm: VllmCode, count: int) -> None:
    """A queue of 0, 1 or many of vLLM's blocks links them in order between the sentinels."""
    blocks = new_blocks(vllm, count)
    queue = FreeBlockQueue(blocks)
    assert_chain(queue, blocks)
    sentinels: list[Any] = [queue.fake_free_list_head, queue.fake_free_list_tail]
    assert [sentinel.block_id for sentinel in sentinels] == [-1, -1]


def test_popleft_remove_append_walk(vllm: VllmCode) -> None:
    """popleft, remove from the middle and append at the back relink every neighbour."""
    blocks = new_blocks(vllm, 5)
    queue = FreeBlockQueue(blocks)
    first = queue.popleft()
    assert first is blocks[0]
    assert_detached([first])
    assert_chain(queue, blocks[1:])
    queue.remove(blocks[2])
    assert_detached([blocks[2]])
    assert_chain(queue, [blocks[1], blocks[3], blocks[4]])
    queue.append(blocks[2])
    assert_chain(queue, [blocks[1], blocks[3], blocks[4], blocks[2]])
    queue.remove(blocks[1])  # the first block: its predecessor is the head sentinel
    queue.remove(blocks[2])  # the last block: its successor is the tail sentinel
    assert_chain(queue, [blocks[3], blocks[4]])
    drained = [queue.popleft(), queue.popleft()]
    assert drained[0] is blocks[3]
    assert drained[1] is blocks[4]
    assert_chain(queue, [])
    assert_detached(blocks)


def test_empty_queue_says_no_free_blocks_available(vllm: VllmCode) -> None:
    """popleft on an empty queue raises a ValueError whose message is vLLM's, word for word."""
    queue = FreeBlockQueue(new_blocks(vllm, 1))
    queue.popleft()
    with pytest.raises(ValueError, match=r"^No free blocks available$") as caught:
        queue.popleft()
    assert isinstance(caught.value, EmptyQueueError)
    assert_chain(queue, [])


def test_append_n_batches(vllm: VllmCode) -> None:
    """append_n of 0, 1, 2 and 3 blocks links each batch, in order, before the tail."""
    blocks = new_blocks(vllm, 6)
    queue: FreeBlockQueue[Any] = FreeBlockQueue()
    queue.append_n([])
    assert_chain(queue, [])
    queue.append_n(blocks[3:4])
    assert_chain(queue, [blocks[3]])
    queue.append_n(blocks[0:2])
    assert_chain(queue, [blocks[3], blocks[0], blocks[1]])
    queue.append_n(b for b in (blocks[5], blocks[2], blocks[4]))
    assert_chain(queue, [blocks[3], blocks[0], blocks[1], blocks[5], blocks[2], blocks[4]])


def test_prepend_n_batches(vllm: VllmCode) -> None:
    """prepend_n puts each batch in front of the old front, in the batch's own order."""
    blocks = new_blocks(vllm, 6)
    queue = FreeBlockQueue(blocks[2:3])
    queue.prepend_n([])
    assert_chain(queue, [blocks[2]])
    queue.prepend_n(blocks[4:6])
    assert_chain(queue, [blocks[4], blocks[5], blocks[2]])
    queue.prepend_n(iter([blocks[1], blocks[0], blocks[3]]))
    expected = [blocks[1], blocks[0], blocks[3], blocks[4], blocks[5], blocks[2]]
    assert_chain(queue, expected)
    assert ids(queue.popleft_n(6)) == [1, 0, 3, 4, 5, 2]
    empty: FreeBlockQueue[Any] = FreeBlockQueue()
    empty.prepend_n(blocks[0:2])
    assert_chain(empty, blocks[0:2])


def test_popleft_n_batches(vllm: VllmCode) -> None:
    """popleft_n of 0, 1, 2 and the rest detaches the front blocks in order and relinks the head."""
    blocks = new_blocks(vllm, 6)
    order = [blocks[i] for i in (2, 0, 5, 1, 4, 3)]
    queue = FreeBlockQueue(order)
    assert_chain(queue, order)
    assert queue.popleft_n(0) == []
    assert_chain(queue, order)
    taken = queue.popleft_n(1)
    assert ids(taken) == [2]
    assert_chain(queue, order[1:])
    taken += queue.popleft_n(2)
    assert ids(taken) == [2, 0, 5]
    assert_chain(queue, order[3:])
    taken += queue.popleft_n(3)
    assert ids(taken) == [2, 0, 5, 1, 4, 3]
    assert_chain(queue, [])
    assert_detached(taken)


def test_get_all_free_blocks_follows_every_operation(vllm: VllmCode) -> None:
    """get_all_free_blocks lists the free blocks front to back after each kind of operation."""
    blocks = new_blocks(vllm, 7)
    queue = FreeBlockQueue(blocks[:5])
    assert ids(queue.get_all_free_blocks()) == [0, 1, 2, 3, 4]
    queue.popleft()
    queue.remove(blocks[3])
    assert ids(queue.get_all_free_blocks()) == [1, 2, 4]
    queue.append(blocks[3])
    queue.prepend_n([blocks[6]])
    queue.append_n([blocks[5], blocks[0]])
    assert ids(queue.get_all_free_blocks()) == [6, 1, 2, 4, 3, 5, 0]
    assert ids(queue) == [6, 1, 2, 4, 3, 5, 0]


def test_iter_blocks_after_resumes_from_a_cursor(vllm: VllmCode) -> None:
    """iter_blocks_after walks from the front, or after a cursor, as vLLM's offloader does."""
    blocks = new_blocks(vllm, 5)
    queue = FreeBlockQueue(blocks)
    assert ids(queue.iter_blocks_after(None)) == [0, 1, 2, 3, 4]
    assert ids(queue.iter_blocks_after(blocks[1])) == [2, 3, 4]
    assert ids(queue.iter_blocks_after(blocks[4])) == []
    # A saved cursor: take two blocks, then resume after the last one seen.
    walk = queue.iter_blocks_after(None)
    seen = [next(walk), next(walk)]
    assert ids(queue.iter_blocks_after(seen[-1])) == [2, 3, 4]
    empty: FreeBlockQueue[Any] = FreeBlockQueue()
    assert list(empty.iter_blocks_after(None)) == []


def test_iter_blocks_after_refuses_a_cursor_not_in_the_queue(vllm: VllmCode) -> None:
    """A detached cursor or another queue's sentinel raises NotInQueueError at the call."""
    blocks = new_blocks(vllm, 3)
    queue = FreeBlockQueue(blocks[:2])
    other: FreeBlockQueue[Any] = FreeBlockQueue()
    for cursor in (blocks[2], other.fake_free_list_head, other.fake_free_list_tail):
        with pytest.raises(NotInQueueError):
            queue.iter_blocks_after(cursor)
    with pytest.raises(RuntimeError):
        queue.iter_blocks_after(blocks[2])
    assert_chain(queue, blocks[:2])


def test_vllm_repr_works_on_every_block_of_a_queue(vllm: VllmCode) -> None:
    """vLLM's own KVCacheBlock.__repr__ reads its neighbours' block_id: the sentinels answer -1."""
    blocks = new_blocks(vllm, 3)
    FreeBlockQueue(blocks)
    assert "prev_free_block=-1, next_free_block=1)" in repr(blocks[0])
    assert "prev_free_block=0, next_free_block=2)" in repr(blocks[1])
    assert "prev_free_block=1, next_free_block=-1)" in repr(blocks[2])


def test_double_free_of_an_end_block_is_reported_as_such(vllm: VllmCode) -> None:
    """Freeing the first or last free block again raises AlreadyInQueueError, changing nothing."""
    blocks = new_blocks(vllm, 3)
    queue = FreeBlockQueue(blocks)
    for block in (blocks[0], blocks[2]):
        with pytest.raises(AlreadyInQueueError):
            queue.append(block)
        with pytest.raises(AlreadyInQueueError):
            queue.prepend_n([block])
        with pytest.raises(AlreadyInQueueError):
            queue.append_n([block])
    assert_chain(queue, blocks)


def test_remove_of_a_free_block_that_is_not_linked_is_a_runtime_error(vllm: VllmCode) -> None:
    """remove() of a detached block raises a RuntimeError, as vLLM's does, changing nothing."""
    blocks = new_blocks(vllm, 3)
    queue = FreeBlockQueue(blocks[:2])
    with pytest.raises(RuntimeError):
        queue.remove(blocks[2])
    assert_chain(queue, blocks[:2])
    assert_detached(blocks[2:])


def test_a_sentinel_that_lost_its_inner_link_is_an_assertion_error(vllm: VllmCode) -> None:
    """append_n and prepend_n onto a damaged sentinel raise an AssertionError, linking nothing."""
    blocks = new_blocks(vllm, 2)
    for damage, operation in (
        ("fake_free_list_tail", "append_n"),
        ("fake_free_list_head", "prepend_n"),
    ):
        queue: FreeBlockQueue[Any] = FreeBlockQueue()
        sentinel = getattr(queue, damage)
        if damage == "fake_free_list_tail":
            sentinel.prev_free_block = None
        else:
            sentinel.next_free_block = None
        with pytest.raises(AssertionError) as caught:
            getattr(queue, operation)(blocks)
        assert isinstance(caught.value, InvariantViolation)
        assert queue.num_free_blocks == 0
        assert_detached(blocks)


@pytest.mark.skipif(not verified_queue.COMPILED, reason="the pure build takes vLLM's block as is")
def test_compiled_build_refuses_vllms_unchanged_block_naming_the_fix(wheel: Path) -> None:
    """The compiled queue refuses vLLM's own KVCacheBlock with a TypeError naming the fix."""
    unchanged = load_vllm(wheel, free_queue=FreeBlockQueue)
    subclassed = load_vllm(wheel, block_base=Block, free_queue=FreeBlockQueue)
    foreign = new_blocks(unchanged, 2)
    own = new_blocks(subclassed, 2)
    queue = FreeBlockQueue(own)
    attempts: list[Callable[[], object]] = [
        lambda: FreeBlockQueue(foreign),
        lambda: queue.append(foreign[0]),
        lambda: queue.append_n(foreign),
        lambda: queue.prepend_n(foreign),
        lambda: queue.remove(foreign[0]),
        lambda: queue.iter_blocks_after(foreign[0]),
        lambda: unchanged.BlockPool(4, True, BLOCK_SIZE),
    ]
    for attempt in attempts:
        with pytest.raises(TypeError, match=r"subclass verified_queue\.Block") as caught:
            attempt()
        assert "prev_free_block" in str(caught.value)
        assert_chain(queue, own)
        assert_detached(foreign)


# ---------------------------------------------------------------------------
# vLLM's BlockPool on our queue.


def prefix_hashes(tokens: Sequence[int]) -> list[bytes]:
    """Return one chained hash per full block of ``tokens``, as a prefix cache keys them."""
    hashes: list[bytes] = []
    parent = b"root"
    for start in range(0, len(tokens) - BLOCK_SIZE + 1, BLOCK_SIZE):
        chunk = repr(tuple(tokens[start : start + BLOCK_SIZE])).encode()
        parent = hashlib.sha256(parent + chunk).digest()
        hashes.append(parent)
    return hashes


def allocate(pool: Any, tokens: Sequence[int]) -> list[Any]:
    """Give a request of ``tokens`` its blocks the way vLLM's KV-cache manager does.

    Cached blocks of the longest prefix hit are touched (leaving the free
    queue if they were in it), new blocks cover the rest, and the full blocks
    are cached.
    """
    hashes = prefix_hashes(tokens)
    hits: list[Any] = []
    for block_hash in hashes:
        found = pool.get_cached_block(block_hash, [0])
        if found is None:
            break
        hits.append(found[0])
    pool.touch(hits)
    needed = -(-len(tokens) // BLOCK_SIZE)
    new: list[Any] = pool.get_new_blocks(needed - len(hits))
    blocks = hits + new
    request = SimpleNamespace(block_hashes=hashes)
    pool.cache_full_blocks(request, blocks, len(hits), len(hashes), BLOCK_SIZE, 0)
    return blocks


def free(pool: Any, blocks: Sequence[Any]) -> None:
    """Free a request's blocks the way vLLM's manager does: last block first, evicted first."""
    pool.free_blocks(reversed(blocks))


COMMON = [token for token in range(3) for _ in range(BLOCK_SIZE)]  # three full blocks


def two_requests_sharing_a_prefix(pool: Any) -> tuple[list[Any], list[Any]]:
    """Run vLLM's prefill scenario: two requests share three cached blocks, then both finish."""
    first = allocate(pool, [*COMMON, *[3] * 7])
    assert ids(first) == [1, 2, 3, 4]
    second = allocate(pool, [*COMMON, *[3] * 5])
    assert ids(second) == [1, 2, 3, 5]
    assert [block.ref_cnt for block in second] == [2, 2, 2, 1]
    assert pool.get_num_free_blocks() == 5
    free(pool, first)
    free(pool, second)
    return first, second


def free_ids(pool: Any) -> list[int]:
    """Return the pool's free blocks front to back."""
    return ids(pool.free_block_queue.get_all_free_blocks())


def test_pool_builds_our_queue_around_the_null_block(vllm: VllmCode) -> None:
    """vLLM's BlockPool builds our queue, takes block 0 as its null block and links the rest."""
    pool = vllm.BlockPool(11, True, BLOCK_SIZE)
    assert isinstance(pool.free_block_queue, FreeBlockQueue)
    assert pool.null_block is pool.blocks[0]
    assert pool.null_block.is_null
    assert_detached([pool.null_block])
    assert_chain(pool.free_block_queue, pool.blocks[1:])
    assert all(owner(block) is pool for block in pool.blocks)


def assert_prefill_order(pool: Any) -> None:
    """Assert the free order vLLM's prefix-caching test expects after the two requests."""
    assert pool.get_num_free_blocks() == 10
    # Unhashed partial blocks first (5, then 4: LIFO), the never-used blocks,
    # then the shared prefix, its last block first (evicted first).
    assert free_ids(pool) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert_chain(pool.free_block_queue, [pool.blocks[i] for i in free_ids(pool)])
    assert all(block.ref_cnt == 0 for block in pool.blocks[1:])
    # vLLM's offloader walks the cached tail of the queue from a cursor.
    assert ids(pool.free_block_queue.iter_blocks_after(pool.blocks[10])) == [3, 2, 1]


def test_prefill_with_a_shared_prefix_frees_in_vllms_order(vllm: VllmCode) -> None:
    """After a shared prefix: unhashed blocks first (LIFO), then unused ones, then the prefix."""
    pool = vllm.BlockPool(11, True, BLOCK_SIZE)
    two_requests_sharing_a_prefix(pool)
    assert_prefill_order(pool)


def test_the_prefill_scenario_holds_on_vllms_own_queue(wheel: Path) -> None:
    """The scenario encodes vLLM's behaviour: its own pool, queue and block give that order."""
    release = load_vllm(wheel)
    pool = release.BlockPool(11, True, BLOCK_SIZE)
    assert type(pool.free_block_queue) is release.FreeKVCacheBlockQueue
    two_requests_sharing_a_prefix(pool)
    assert_prefill_order(pool)


class PrependAppends(FreeBlockQueue[Any]):
    """A planted bug: ``prepend_n`` links the batch at the back."""

    __slots__ = ()

    def prepend_n(self, blocks: Iterable[Any]) -> None:
        """Append instead of prepending."""
        self.append_n(blocks)


def test_the_prefill_scenario_catches_a_queue_that_appends_on_prepend(wheel: Path) -> None:
    """A queue whose prepend_n appends fails the prefill-order check: the check can fail."""
    planted = load_vllm(wheel, block_base=Block, free_queue=PrependAppends)
    pool = planted.BlockPool(11, True, BLOCK_SIZE)
    two_requests_sharing_a_prefix(pool)
    assert free_ids(pool) == [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]
    with pytest.raises(AssertionError):
        assert_prefill_order(pool)


def test_a_prefix_hit_touches_blocks_out_of_the_middle(vllm: VllmCode) -> None:
    """A request hitting the cached prefix takes its blocks out of the middle of the queue."""
    pool = vllm.BlockPool(11, True, BLOCK_SIZE)
    two_requests_sharing_a_prefix(pool)
    third = allocate(pool, [*COMMON, *[3] * 6])
    # The hit took 3, 2, 1 out; the partial block reuses 5, the front (LIFO).
    assert ids(third) == [1, 2, 3, 5]
    assert free_ids(pool) == [4, 6, 7, 8, 9, 10]
    assert_chain(pool.free_block_queue, [pool.blocks[i] for i in (4, 6, 7, 8, 9, 10)])
    assert_detached(third)
    free(pool, third)
    assert free_ids(pool) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]


def test_a_cache_miss_evicts_in_queue_order(vllm: VllmCode) -> None:
    """A request needing every block takes them in eviction order and drops the cached prefix."""
    pool = vllm.BlockPool(11, True, BLOCK_SIZE)
    two_requests_sharing_a_prefix(pool)
    taken = allocate(pool, [99] * (BLOCK_SIZE * 10))
    assert ids(taken) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert pool.get_cached_block(prefix_hashes(COMMON)[0], [0]) is None
    assert_chain(pool.free_block_queue, [])
    with pytest.raises(ValueError, match=r"^No free blocks available$"):
        pool.free_block_queue.popleft()
    with pytest.raises(ValueError, match="Cannot get 1 free blocks"):
        pool.get_new_blocks(1)


def test_reset_drops_every_hash_and_keeps_the_queue(vllm: VllmCode) -> None:
    """reset_prefix_cache refuses while blocks are held, then clears every hash, order kept."""
    pool = vllm.BlockPool(11, True, BLOCK_SIZE)
    two_requests_sharing_a_prefix(pool)
    held = allocate(pool, [*COMMON, 7])
    assert pool.reset_prefix_cache() is False
    free(pool, held)
    before = free_ids(pool)
    assert pool.reset_prefix_cache() is True
    assert all(block.block_hash is None for block in pool.blocks)
    assert pool.get_cached_block(prefix_hashes(COMMON)[0], [0]) is None
    assert free_ids(pool) == before
    assert_chain(pool.free_block_queue, [pool.blocks[i] for i in before])


def test_without_caching_freed_blocks_are_reused_last_in_first_out(vllm: VllmCode) -> None:
    """With prefix caching off freed blocks go to the front: the latest freed is reused first."""
    pool = vllm.BlockPool(8, False, BLOCK_SIZE)
    early = pool.get_new_blocks(2)
    late = pool.get_new_blocks(2)
    assert ids(early) == [1, 2]
    assert ids(late) == [3, 4]
    free(pool, early)
    free(pool, late)
    assert free_ids(pool) == [4, 3, 2, 1, 5, 6, 7]
    assert ids(pool.get_new_blocks(3)) == [4, 3, 2]
    assert_chain(pool.free_block_queue, [pool.blocks[i] for i in (1, 5, 6, 7)])


def test_free_blocks_hands_another_pools_block_to_that_pool(vllm: VllmCode) -> None:
    """A deferred free mixing two pools' blocks links each block into its own pool's queue."""
    first = vllm.BlockPool(4, False, BLOCK_SIZE)
    second = vllm.BlockPool(4, False, BLOCK_SIZE)
    mine, theirs = first.get_new_blocks(1), second.get_new_blocks(2)
    first.free_blocks([*theirs, *mine])
    assert free_ids(first) == [1, 2, 3]
    assert free_ids(second) == [1, 2, 3]
    assert_chain(second.free_block_queue, [second.blocks[i] for i in (1, 2, 3)])


# ---------------------------------------------------------------------------
# The change a user makes to vLLM's files, as the documentation shows it.


@pytest.mark.parametrize("form", FORMS)
def test_vllms_files_with_the_documented_edits_run_the_prefill_scenario(
    wheel: Path, form: str
) -> None:
    """vLLM's two files with the documented edits (not stubbed in) give vLLM's free order."""
    edited = load_patched(wheel, compiled_form=form == "Block subclass")
    assert issubclass(edited.KVCacheBlock, Block) == (form == "Block subclass")
    pool = edited.BlockPool(11, True, BLOCK_SIZE)
    assert type(pool.free_block_queue) is verified_queue.FreeBlockQueue
    two_requests_sharing_a_prefix(pool)
    assert_prefill_order(pool)


def test_the_documentation_shows_the_exact_diff(wheel: Path) -> None:
    """Every page that shows the diff of an edited vLLM file shows it exactly; docs/vllm.md does."""
    if wheel_version(wheel) != DEFAULT_VERSION:
        pytest.skip(f"the documentation shows the diffs against vLLM {DEFAULT_VERSION}")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    texts = {page.name: page.read_text(encoding="utf-8") for page in pages if page.is_file()}
    for member in (BLOCK_POOL, KV_CACHE_UTILS):
        diff = drop_in_diff(wheel, member)
        showing = [name for name, text in texts.items() if f"--- a/{member}" in text]
        assert "vllm.md" in showing
        for name in showing:
            assert diff in texts[name], f"{name}: the diff of {member} is stale"


# ---------------------------------------------------------------------------
# What vLLM 0.34.0 changed in the block and the pool, pinned.


def since_0_34(wheel: Path) -> None:
    """Skip a test of a 0.34.0 change on an older release."""
    if release(wheel) < (0, 34):
        pytest.skip(f"vLLM {wheel_version(wheel)} predates the 0.34.0 change")


def test_0_34_block_pool_is_a_weak_reference_to_the_pool(vllm: VllmCode, wheel: Path) -> None:
    """KVCacheBlock.pool is a weakref.ref to its pool: no block -> pool cycle keeps a pool alive."""
    since_0_34(wheel)
    pool = vllm.BlockPool(4, True, BLOCK_SIZE)
    assert all(type(block.pool) is weakref.ref for block in pool.blocks)
    assert all(block.pool() is pool for block in pool.blocks)
    blocks = pool.blocks
    gone = weakref.ref(pool)
    gc.disable()
    try:
        del pool
        assert gone() is None  # freed by reference counting alone: no cycle
    finally:
        gc.enable()
    assert all(block.pool() is None for block in blocks)


def test_0_34_block_hash_fields_are_plain_fields(vllm: VllmCode, wheel: Path) -> None:
    """block_hash and block_hash_num_tokens are dataclass fields, not properties over privates."""
    since_0_34(wheel)
    fields = vllm.KVCacheBlock.__dataclass_fields__
    assert {"block_hash", "block_hash_num_tokens"} <= set(fields)
    assert not {"_block_hash", "_block_hash_num_tokens"} & set(fields)
    assert not isinstance(vars(vllm.KVCacheBlock).get("block_hash"), property)
    block = vllm.KVCacheBlock(3)
    block.set_block_hash(b"key", num_tokens=16)
    assert (block.block_hash, block.block_hash_num_tokens) == (b"key", 16)
    assert "block_hash=b'key', block_hash_num_tokens=16" in repr(block)
    block.reset_hash()
    assert (block.block_hash, block.block_hash_num_tokens) == (None, None)


def test_0_34_the_hash_map_holds_block_ids(vllm: VllmCode, wheel: Path) -> None:
    """BlockHashToBlockMap keeps block ids (ints), not blocks, and gives back the pool's blocks."""
    since_0_34(wheel)
    pool = vllm.BlockPool(11, True, BLOCK_SIZE)
    allocate(pool, [*COMMON, 9])
    cache = pool.cached_block_hash_to_block
    assert len(cache) == 3
    assert all(type(value) is int for value in vars(cache)["_cache"].values())
    found = pool.get_cached_block(prefix_hashes(COMMON)[0], [0])
    assert found is not None
    assert found[0] is pool.blocks[1]


def test_0_34_evict_first_puts_freed_cached_blocks_at_the_front(
    vllm: VllmCode, wheel: Path
) -> None:
    """free_blocks(..., evict_first=True) prepends cached blocks too, in the order given."""
    since_0_34(wheel)
    pool = vllm.BlockPool(11, True, BLOCK_SIZE)
    first = allocate(pool, [*COMMON, *[3] * 7])
    pool.free_blocks(reversed(first), evict_first=True)
    assert free_ids(pool) == [4, 3, 2, 1, 5, 6, 7, 8, 9, 10]
    assert_chain(pool.free_block_queue, [pool.blocks[i] for i in free_ids(pool)])
    # Without it the cached blocks go to the back, as before.
    again = allocate(pool, [*COMMON, *[3] * 7])
    assert ids(again) == [1, 2, 3, 4]
    free(pool, again)
    assert free_ids(pool) == [4, 5, 6, 7, 8, 9, 10, 3, 2, 1]


def test_0_34_another_pools_blocks_are_freed_through_the_weak_reference(
    vllm: VllmCode, wheel: Path
) -> None:
    """A deferred free reaches another pool through its weak reference, evict_first included."""
    since_0_34(wheel)
    first = vllm.BlockPool(6, True, BLOCK_SIZE)
    second = vllm.BlockPool(11, True, BLOCK_SIZE)
    theirs = allocate(second, [*COMMON, 5])
    mine = first.get_new_blocks(1)
    first.free_blocks([*reversed(theirs), *mine], evict_first=True)
    assert free_ids(second) == [4, 3, 2, 1, 5, 6, 7, 8, 9, 10]
    assert free_ids(first) == [1, 2, 3, 4, 5]
    # Blocks of a pool that is gone are dropped: nothing is left to link them into.
    orphans = vllm.BlockPool(4, False, BLOCK_SIZE)
    held = orphans.get_new_blocks(2)
    del orphans
    gc.collect()
    first.free_blocks(held)
    assert free_ids(first) == [1, 2, 3, 4, 5]
    assert_detached(held)


# ---------------------------------------------------------------------------
# Our BlockPool (verified_queue.kvcache) frees in vLLM's order on every scenario above.


class OursAsVllm:
    """verified_queue.kvcache.BlockPool behind the calls the scenarios make on vLLM's pool."""

    def __init__(self, num_blocks: int, enable_caching: bool, block_size: int) -> None:
        del block_size  # our pool leaves the block size to its caller's keys
        self.pool = OurBlockPool(num_blocks, enable_caching=enable_caching)

    def __getattr__(self, name: str) -> Any:
        """Everything the scenarios share with vLLM's pool is our pool's own."""
        return getattr(self.pool, name)

    def get_cached_block(self, block_hash: bytes, group_ids: list[int]) -> list[Any] | None:
        """vLLM's lookup by hash and KV-cache groups (one group here)."""
        assert group_ids == [0]
        found = self.pool.get_cached_block(BlockHash(block_hash))
        return None if found is None else [found]

    def cache_full_blocks(  # noqa: PLR0917 -- vLLM's own signature
        self,
        request: Any,
        blocks: list[Any],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        group_id: int,
    ) -> None:
        """vLLM's call, the keys taken from the request as vLLM takes them."""
        assert (block_size, group_id) == (BLOCK_SIZE, 0)
        hashes = [BlockHash(key) for key in request.block_hashes]
        self.pool.cache_full_blocks(blocks, hashes, num_cached_blocks, num_full_blocks)

    def free_blocks(self, blocks: Iterable[Any], evict_first: bool = False) -> None:
        """vLLM's call: the blocks are our pool's own, so they pass as they are."""
        self.pool.free_blocks(blocks, evict_first=evict_first)


Trace = list[tuple[str, list[int]]]


def scenario_prefill(new_pool: Callable[..., Any]) -> Trace:
    """Two requests sharing a prefix, then a third hitting it, then a miss evicting all."""
    pool = new_pool(11, True, BLOCK_SIZE)
    trace: Trace = []
    first = allocate(pool, [*COMMON, *[3] * 7])
    second = allocate(pool, [*COMMON, *[3] * 5])
    trace += [("first", ids(first)), ("second", ids(second))]
    free(pool, first)
    free(pool, second)
    trace.append(("freed", free_ids(pool)))
    third = allocate(pool, [*COMMON, *[3] * 6])
    trace += [("third", ids(third)), ("after the hit", free_ids(pool))]
    free(pool, third)
    trace.append(("freed", free_ids(pool)))
    trace.append(("miss", ids(allocate(pool, [99] * (BLOCK_SIZE * 10)))))
    return trace


def scenario_reset(new_pool: Callable[..., Any]) -> Trace:
    """reset_prefix_cache refused while held, then done, the free order kept."""
    pool = new_pool(11, True, BLOCK_SIZE)
    two_requests_sharing_a_prefix(pool)
    held = allocate(pool, [*COMMON, 7])
    trace: Trace = [("held", ids(held)), ("refused", [int(pool.reset_prefix_cache())])]
    free(pool, held)
    trace += [("reset", [int(pool.reset_prefix_cache())]), ("free", free_ids(pool))]
    trace.append(("after reset", ids(allocate(pool, [*COMMON, 7]))))
    return trace


def scenario_no_caching(new_pool: Callable[..., Any]) -> Trace:
    """With caching off, freed blocks are reused last in, first out."""
    pool = new_pool(8, False, BLOCK_SIZE)
    early, late = pool.get_new_blocks(2), pool.get_new_blocks(2)
    free(pool, early)
    free(pool, late)
    return [("free", free_ids(pool)), ("reused", ids(pool.get_new_blocks(3)))]


def scenario_two_pools(new_pool: Callable[..., Any]) -> Trace:
    """A deferred free mixing two pools' blocks frees each in its own pool."""
    first, second = new_pool(6, True, BLOCK_SIZE), new_pool(11, True, BLOCK_SIZE)
    theirs = allocate(second, [*COMMON, 5])
    mine = allocate(first, [*COMMON[:BLOCK_SIZE], 1])
    first.free_blocks([*reversed(theirs), *reversed(mine)])
    return [("first", free_ids(first)), ("second", free_ids(second))]


def scenario_evict_first(new_pool: Callable[..., Any]) -> Trace:
    """evict_first frees cached blocks to the front, in this pool and a routed one."""
    first, second = new_pool(6, True, BLOCK_SIZE), new_pool(11, True, BLOCK_SIZE)
    request = allocate(second, [*COMMON, *[3] * 7])
    second.free_blocks(reversed(request), evict_first=True)
    trace: Trace = [("evict first", free_ids(second))]
    again = allocate(second, [*COMMON, *[3] * 7])
    trace.append(("hit", ids(again)))
    mine = allocate(first, [*COMMON[:BLOCK_SIZE], 1])
    first.free_blocks([*reversed(again), *reversed(mine)], evict_first=True)
    return [*trace, ("first", free_ids(first)), ("second", free_ids(second))]


SCENARIOS: dict[str, tuple[Callable[[Callable[..., Any]], Trace], tuple[int, int]]] = {
    "prefill": (scenario_prefill, (0, 33)),
    "reset": (scenario_reset, (0, 33)),
    "no caching": (scenario_no_caching, (0, 33)),
    "two pools": (scenario_two_pools, (0, 33)),
    "evict_first": (scenario_evict_first, (0, 34)),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_our_pool_frees_in_vllms_order(vllm: VllmCode, wheel: Path, name: str) -> None:
    """verified_queue.kvcache.BlockPool gives vLLM's BlockPool's trace on each scenario."""
    scenario, since = SCENARIOS[name]
    if release(wheel) < since:
        pytest.skip(f"vLLM {wheel_version(wheel)} has no {name}")
    assert scenario(OursAsVllm) == scenario(vllm.BlockPool)


def test_the_pool_comparison_catches_a_pool_that_ignores_evict_first(
    vllm: VllmCode, wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our pool with evict_first dropped gives another trace: the comparison can fail."""
    since_0_34(wheel)
    original = OurBlockPool.free_blocks

    def ignoring(self: OurBlockPool, blocks: Iterable[Any], evict_first: bool = False) -> None:
        del evict_first
        original(self, blocks)

    monkeypatch.setattr(OurBlockPool, "free_blocks", ignoring)
    assert scenario_evict_first(OursAsVllm) != scenario_evict_first(vllm.BlockPool)
