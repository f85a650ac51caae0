"""The vLLM queues' own edges: where each operation reports a pool's break, and vLLM's counter.

The pool is a stand-in laid out as vLLM's ``BlockPool`` (``blocks``, ``null_block``,
a prefix cache in 0.34.0's layout, blocks naming it weakly), so that these tests
need no wheel: the queue is built from its blocks as vLLM's pool builds it, the
null block taken first. Each test pins what a user of check mode or the trace
level sees: the error, its clause and place, the operation that reports it, and
the count code outside this package reads.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from verified_queue import (
    Block,
    InvariantViolation,
    NotInQueueError,
    TracedFreeBlockQueue,
)
from verified_queue.checked import DEFAULT_FULL_CHECK_EVERY, MIN_FULL_CHECK_PERIOD
from verified_queue.queue import FreeBlockQueue  # the production class, whatever the level
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue
from verified_queue.vllm.pool_checks import FULL_CHECK
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue, pass_over_kv_cache_core

QUEUES = [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue]
QUEUE_IDS = ["checked", "trace"]


class PrefixCache:
    """vLLM 0.34.0's prefix cache layout: a hash to one block id."""

    def __init__(self) -> None:
        self._cache: dict[bytes, int] = {}

    def contain(self, key: bytes, block_id: int) -> bool:
        return self._cache.get(key) == block_id


class Pool:
    """A stand-in of vLLM's ``BlockPool``: ``size`` blocks naming it weakly, nothing cached."""

    def __init__(self, size: int) -> None:
        self.link = weakref.ref(self)
        self.blocks = [StandInBlock(index, self.link) for index in range(size)]
        self.cached_block_hash_to_block = PrefixCache()

    def plant_stale_entry(self) -> None:
        """A cache entry for a block without that hash: P3, seen only by the whole-pool check."""
        self.cached_block_hash_to_block._cache[b"stale"] = 2


class StandInBlock(Block):
    """A free block with vLLM's fields, naming its pool weakly; both builds link it."""

    __slots__ = ("block_id", "ref_cnt", "pool", "block_hash", "is_null")

    def __init__(self, block_id: int, link: object) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.pool = link
        self.block_hash: bytes | None = None
        self.is_null = False


def pool_queue(
    kind: type[Any], size: int = 8, full_check_every: int | None = 0
) -> tuple[Pool, Any]:
    """The pool and its free queue, built as vLLM builds them: the null block taken first."""
    pool = Pool(size)
    queue = kind(list(pool.blocks), full_check_every=full_check_every)
    null = queue.popleft()
    null.is_null = True
    pool.null_block = null  # type: ignore[attr-defined]  # vLLM's pool sets it after __init__
    assert queue.check_block_pool() is True  # and restarts the countdown of the full check
    return pool, queue


def point_the_last_back_link_astray(queue: Any) -> None:
    """Damage only a full check sees: the last block's back link names the block two before."""
    last = queue.fake_free_list_tail.prev_free_block
    last.prev_free_block = last.prev_free_block.prev_free_block


def take(queue: Any, count: int) -> list[Any]:
    """Blocks taken for a request, as vLLM's get_new_blocks takes them."""
    blocks: list[Any] = queue.popleft_n(count)
    for block in blocks:
        block.ref_cnt = 1
    return blocks


# ---------------------------------------------------------------------------
# Where each linking operation reports a block that breaks a clause.


JOINING: dict[str, Callable[[Any, Any], None]] = {
    "append": lambda queue, block: queue.append(block),
    "append_n": lambda queue, block: queue.append_n([block]),
    "prepend_n": lambda queue, block: queue.prepend_n([block]),
}


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
@pytest.mark.parametrize("operation", list(JOINING))
def test_a_held_block_joining_is_refused_at_the_start_of_its_operation(
    kind: type[Any], operation: str
) -> None:
    """A block still held (ref_cnt 1) that joins: P2 at the start of that operation, no change."""
    _, queue = pool_queue(kind)
    held = take(queue, 2)[1]
    free = len(queue)
    with pytest.raises(InvariantViolation) as caught:
        JOINING[operation](queue, held)
    error = caught.value
    assert (error.invariant, error.clause) == ("block_pool", "P2")
    assert error.where == f"the start of {operation}()"
    assert error.found == "1 as it joins the free queue"
    assert error.blocks == (held,)
    assert len(queue) == free
    assert all(block is not held for block in queue.get_all_free_blocks())


LEAVING: dict[str, Callable[[Any, Any], object]] = {
    "popleft": lambda queue, _: queue.popleft(),
    "popleft_n": lambda queue, _: queue.popleft_n(1),
    "remove": lambda queue, block: queue.remove(block),
}


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
@pytest.mark.parametrize("operation", list(LEAVING))
def test_a_held_block_leaving_is_refused_at_the_start_of_its_operation(
    kind: type[Any], operation: str
) -> None:
    """A free block whose count says held (ref_cnt 1) that leaves: P2 at that operation's start."""
    _, queue = pool_queue(kind)
    free = queue.get_all_free_blocks()
    # The front block for the pops, a block in the middle for remove.
    damaged = free[0] if operation != "remove" else free[3]
    damaged.ref_cnt = 1
    with pytest.raises(InvariantViolation) as caught:
        LEAVING[operation](queue, damaged)
    error = caught.value
    assert (error.invariant, error.clause) == ("block_pool", "P2")
    assert error.where == f"the start of {operation}()"
    assert error.found == "1 as it leaves the free queue"
    assert error.blocks == (damaged,)
    assert queue.get_all_free_blocks() == free


def null_mark(pool: Pool, block: Any) -> None:
    """The block marked null (P1)."""
    del pool
    block.is_null = True


def stranger(pool: Pool, block: Any) -> None:
    """The block naming another pool (P5)."""
    pool.other = Pool(2)  # type: ignore[attr-defined]  # kept alive for its weak reference
    block.pool = pool.other.link  # type: ignore[attr-defined]


def uncached_hash(pool: Pool, block: Any) -> None:
    """The block carrying a hash the prefix cache does not map (P3)."""
    del pool
    block.block_hash = b"not cached"


def held(pool: Pool, block: Any) -> None:
    """The block counted held (P2)."""
    del pool
    block.ref_cnt = 1


FRONT_DAMAGE: dict[Callable[[Pool, Any], None], str] = {
    null_mark: "P1",
    held: "P2",
    uncached_hash: "P3",
    stranger: "P5",
}


#: The unlinks from the front: how a test calls each on a queue.
FRONT_UNLINKS: dict[str, Callable[[Any], object]] = {
    "popleft": lambda queue: queue.popleft(),
    "popleft_n": lambda queue: queue.popleft_n(2),
}


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
@pytest.mark.parametrize("operation", list(FRONT_UNLINKS))
@pytest.mark.parametrize("damage", list(FRONT_DAMAGE), ids=[d.__name__ for d in FRONT_DAMAGE])
def test_each_clause_of_the_front_block_is_reported_by_each_unlink_from_the_front(
    kind: type[Any], operation: str, damage: Callable[[Pool, Any], None]
) -> None:
    """Each clause a front block breaks is reported as it leaves, popleft or popleft_n, kept."""
    pool, queue = pool_queue(kind)
    front = queue.get_all_free_blocks()[0]
    damage(pool, front)
    with pytest.raises(InvariantViolation) as caught:
        FRONT_UNLINKS[operation](queue)
    assert caught.value.clause == FRONT_DAMAGE[damage]
    assert caught.value.where == f"the start of {operation}()"
    assert caught.value.blocks == (front,)
    assert queue.get_all_free_blocks()[0] is front


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_the_unlink_checks_exactly_the_blocks_that_leave(kind: type[Any]) -> None:
    """A bad second block: popleft takes the sound front block, popleft_n(2) is refused on it."""
    _, queue = pool_queue(kind)
    first, second = queue.get_all_free_blocks()[:2]
    second.ref_cnt = 1
    assert queue.popleft() is first
    first.ref_cnt = 1
    queue.prepend_n([])  # nothing joins: nothing to refuse
    first.ref_cnt = 0
    queue.prepend_n([first])
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft_n(2)
    assert (caught.value.clause, caught.value.where) == ("P2", "the start of popleft_n()")
    assert caught.value.blocks == (second,)
    assert queue.get_all_free_blocks()[:2] == [first, second]


# ---------------------------------------------------------------------------
# When the whole pool is checked.


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_the_periodic_pool_check_runs_at_exactly_every_kth_unlink(kind: type[Any]) -> None:
    """full_check_every=3: damage only the whole-pool check sees is reported at the 3rd unlink."""
    pool, queue = pool_queue(kind, full_check_every=3)
    pool.plant_stale_entry()
    for _ in range(2):
        queue.append(queue.popleft())
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft()
    assert caught.value.clause == "P3"
    assert caught.value.where == f"{FULL_CHECK}, run at the start of popleft()"
    assert caught.value.blocks == (pool.blocks[2],)


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_a_new_queue_checks_its_pool_at_its_first_unlink(kind: type[Any]) -> None:
    """A queue built on a pool already built checks the whole pool at its first unlink."""
    pool = Pool(6)
    pool.blocks[0].is_null = True
    pool.null_block = pool.blocks[0]  # type: ignore[attr-defined]
    pool.plant_stale_entry()
    queue = kind(list(pool.blocks[1:]), full_check_every=0)
    with pytest.raises(InvariantViolation) as caught:
        queue.remove(pool.blocks[4])
    assert caught.value.clause == "P3"
    assert caught.value.where == f"{FULL_CHECK}, run at the start of remove()"
    assert len(queue) == 5


@pytest.mark.skipif(
    DEFAULT_FULL_CHECK_EVERY is not None, reason="VERIFIED_QUEUE_CHECKS=full: period 1"
)
@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_the_adaptive_pool_check_period_is_the_pools_size(kind: type[Any]) -> None:
    """full_check_every=None on a pool above the floor: the full check every len(pool) unlinks."""
    size = MIN_FULL_CHECK_PERIOD + 50
    pool, queue = pool_queue(kind, size=size, full_check_every=None)
    pool.plant_stale_entry()
    for _ in range(size - 1):
        queue.append(queue.popleft())
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft()
    assert caught.value.where == f"{FULL_CHECK}, run at the start of popleft()"


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_a_queue_built_from_an_iterator_is_no_pools_queue(kind: type[Any]) -> None:
    """Built from an iterator, not a list: the blocks are linked and no pool clause applies."""
    pool = Pool(4)
    queue = kind(block for block in pool.blocks)
    assert len(queue) == 4
    assert queue.check_block_pool() is False
    front = queue.popleft()
    front.ref_cnt = 7  # a pool's queue would refuse it (P2)
    queue.append(front)
    assert queue.get_all_free_blocks()[-1] is front


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_the_queue_keeps_the_full_check_period_it_was_given(kind: type[Any]) -> None:
    """full_check_every given to the vLLM queues is the period they keep."""
    assert kind(list(Pool(4).blocks), full_check_every=5).full_check_every == 5
    assert kind(list(Pool(4).blocks), full_check_every=0).full_check_every == 0


def test_the_traced_queue_keeps_the_history_length_it_was_given() -> None:
    """history=2: the vLLM traced queue keeps its last two operations only."""
    pool = Pool(6)
    queue = VllmTracedFreeBlockQueue(list(pool.blocks), full_check_every=0, history=2)
    for _ in range(3):
        queue.append(queue.popleft())
    assert [operation.name for operation in queue.recent_operations()] == ["popleft", "append"]


def test_a_pool_violation_found_by_check_block_pool_carries_the_trace() -> None:
    """The trace level's check_block_pool names itself as the call in the violation's history."""
    pool, queue = pool_queue(VllmTracedFreeBlockQueue)
    pool.plant_stale_entry()
    with pytest.raises(InvariantViolation) as caught:
        queue.check_block_pool()
    assert caught.value.clause == "P3"
    lines = caught.value.history.lines  # type: ignore[attr-defined]
    assert any(line.startswith("this call: check_block_pool() at ") for line in lines), lines


def test_another_traced_queue_reads_where_a_pools_queue_linked_a_block() -> None:
    """A block refused by another traced queue is named as linked in the pool's queue.

    The pool's traced queue reads its membership from the pool; its records are read by
    every traced queue's explanations, so they must be told of that membership too.
    """
    pool, queue = pool_queue(VllmTracedFreeBlockQueue)
    block = pool.blocks[3]
    queue.remove(block)
    linked_at = sys._getframe().f_lineno + 1
    queue.append(block)
    other: TracedFreeBlockQueue[Any] = TracedFreeBlockQueue()
    with pytest.raises(NotInQueueError) as caught:
        other.remove(block)
    lines = caught.value.history.lines  # type: ignore[attr-defined]
    elsewhere = [line for line in lines if line.startswith("linked in another traced queue by: ")]
    assert len(elsewhere) == 1, lines
    assert " append() at " in elsewhere[0]
    assert f":{linked_at} in test_another_traced_queue_reads_" in elsewhere[0]


def test_a_block_the_pools_queue_let_go_is_not_named_as_linked_there() -> None:
    """A block the pool's queue linked and took again is no member of it for other queues.

    Built from the pool, every block was a member once; what another queue's
    explanation reads is the pool's membership now, in which the taken block is not.
    """
    pool, queue = pool_queue(VllmTracedFreeBlockQueue)
    block = pool.blocks[3]
    queue.remove(block)
    queue.append(block)
    queue.remove(block)
    other: TracedFreeBlockQueue[Any] = TracedFreeBlockQueue()
    with pytest.raises(NotInQueueError) as caught:
        other.remove(block)
    lines = caught.value.history.lines  # type: ignore[attr-defined]
    assert lines[0].startswith("this call: remove() at "), lines
    assert not [line for line in lines if line.startswith("linked in another traced queue")]


def test_a_block_pool_module_without_a_file_marks_nothing() -> None:
    """pass_over_kv_cache_core on a module object with no __file__: no files, no error."""
    assert pass_over_kv_cache_core(SimpleNamespace()) == []


# ---------------------------------------------------------------------------
# vLLM's counter, read and written by code whose globals carry no module name.


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_nameless_code_reads_vllms_counter(kind: type[Any]) -> None:
    """Code with no __name__ in its globals (exec'd) reads vLLM's counter, offset included."""
    _, queue = pool_queue(kind)
    queue.num_free_blocks = 0  # vLLM's tests fake a full pool so
    namespace: dict[str, Any] = {"queue": queue}
    exec("seen = queue.num_free_blocks", namespace)
    assert namespace["seen"] == 0
    assert queue.count_offset == -len(queue)


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_nameless_code_writes_vllms_counter(kind: type[Any]) -> None:
    """A write by code with no __name__ in its globals is an outside write: an offset, no damage.

    Written after an operation on the one-pass path, as vLLM's tests write it once the
    pool has run.
    """
    _, queue = pool_queue(kind)
    queue.append(queue.popleft())
    free = len(queue)
    exec("queue.num_free_blocks = 0", {"queue": queue})
    assert queue.count_offset == -free
    assert queue.num_free_blocks == 0
    queue.append(queue.popleft())  # the checks still compare the list with its true count
    assert queue.num_free_blocks == 0
    assert len(queue) == free


# ---------------------------------------------------------------------------
# The one-pass path of a pool's queue (the period off: no full check stands it aside).


def null_joining(pool: Pool, queue: Any) -> Any:
    """The pool's null block, linked back (P1)."""
    del queue
    return pool.null_block  # type: ignore[attr-defined]  # set by pool_queue


def uncached_joining(pool: Pool, queue: Any) -> Any:
    """A block freed with a hash the prefix cache does not map (P3)."""
    del pool
    block = take(queue, 2)[1]
    block.ref_cnt = 0
    block.block_hash = b"never cached"
    return block


JOINING_FAULTS: dict[Callable[[Pool, Any], Any], str] = {null_joining: "P1", uncached_joining: "P3"}


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
@pytest.mark.parametrize("operation", list(JOINING))
@pytest.mark.parametrize(
    "fault", list(JOINING_FAULTS), ids=[fault.__name__ for fault in JOINING_FAULTS]
)
def test_each_clause_of_a_joining_block_is_refused_on_the_one_pass_path(
    kind: type[Any], operation: str, fault: Callable[[Pool, Any], Any]
) -> None:
    """The null block (P1), a hash with no entry (P3): refused at the start, nothing linked."""
    pool, queue = pool_queue(kind)
    block = fault(pool, queue)
    before = queue.get_all_free_blocks()
    with pytest.raises(InvariantViolation) as caught:
        JOINING[operation](queue, block)
    assert (caught.value.clause, caught.value.where) == (
        JOINING_FAULTS[fault],
        f"the start of {operation}()",
    )
    assert queue.get_all_free_blocks() == before


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_a_held_block_in_the_queue_is_refused_by_remove(kind: type[Any]) -> None:
    """A free block whose count was raised by hand: remove refuses it (P2), nothing moved."""
    _, queue = pool_queue(kind)
    block = queue.get_all_free_blocks()[2]
    block.ref_cnt = 1
    before = queue.get_all_free_blocks()
    with pytest.raises(InvariantViolation) as caught:
        queue.remove(block)
    assert (caught.value.clause, caught.value.where) == ("P2", "the start of remove()")
    assert queue.get_all_free_blocks() == before


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_the_queues_full_check_runs_with_the_pools_at_every_kth_unlink(
    kind: type[Any],
) -> None:
    """Damage only the full check sees (a back link far from every step): at the kth unlink.

    On a pool's whole queue the queue's full check runs with the pool's, at the
    start of every ``full_check_every``-th unlink; joins, empty or not, do not count.
    """
    pool, queue = pool_queue(kind, full_check_every=4)
    assert queue.check_block_pool() is True  # the period starts here
    point_the_last_back_link_astray(queue)
    for _ in range(3):  # unlinks 1 to 3, each followed by joins
        taken = take(queue, 1)
        taken[0].ref_cnt = 0
        queue.append_n(taken)
        queue.prepend_n([])
    with pytest.raises(InvariantViolation) as caught:
        queue.remove(queue.fake_free_list_head.next_free_block)  # 4: the full check runs
    assert caught.value.invariant == "sentinel_linkage"
    assert pool.link() is pool  # kept alive to here: a pool that is gone has nothing to check


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
def test_a_count_above_the_chain_is_refused_when_a_run_reaches_the_tail(kind: type[Any]) -> None:
    """The queue's own count raised by one: taking every linked block is refused (I2), unmoved."""
    _, queue = pool_queue(kind)
    count_slot: Any = vars(FreeBlockQueue)["num_free_blocks"]
    linked = count_slot.__get__(queue)
    count_slot.__set__(queue, linked + 1)
    head = queue.fake_free_list_head
    first = head.next_free_block
    with pytest.raises(InvariantViolation) as caught:
        queue.popleft_n(linked)
    assert caught.value.invariant == "count_consistency"
    assert head.next_free_block is first


@pytest.mark.parametrize("kind", QUEUES, ids=QUEUE_IDS)
@pytest.mark.parametrize("operation", list(JOINING))
def test_a_count_above_an_empty_chain_is_refused_by_a_join(kind: type[Any], operation: str) -> None:
    """Every block taken, then the queue's own count raised: a join is refused (I2), unlinked."""
    _, queue = pool_queue(kind)
    count_slot: Any = vars(FreeBlockQueue)["num_free_blocks"]
    taken = queue.popleft_n(count_slot.__get__(queue))
    count_slot.__set__(queue, 1)
    with pytest.raises(InvariantViolation) as caught:
        JOINING[operation](queue, taken[0])
    assert caught.value.invariant == "count_consistency"
    assert queue.fake_free_list_head.next_free_block is queue.fake_free_list_tail
    assert taken[0].prev_free_block is taken[0].next_free_block is None
