"""Check mode for vLLM's own BlockPool: its clauses, against a model of what must be reported.

The machine drives vLLM's real ``BlockPool`` (its ``block_pool.py`` and
``kv_cache_utils.py`` read from each pinned wheel, ``tox -e vllm``) on the
queue the plugin installs, in ``checked`` and ``trace`` mode, with the full
pool check at every unlink: allocation, caching under shared prefixes, hits,
frees, evictions and resets never report anything, and a ref-count oracle kept
apart from the pool agrees with every block. Then, once per run, it does what a
buggy allocator does (a free too many, a count lowered without the link, a cache
entry dropped or left behind, a held or null block linked, a block linked twice)
and the model says what check mode must report: the clause, at the call that does
it or at the next check. Without a wheel those tests skip; the tests of the
checks' own parts need no vLLM.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import verified_queue
from conformance.wheel import VllmCode, load_vllm
from tests.vllm.pool_faults import (
    BLOCK_SIZE,
    FAULTS,
    block_hashes,
    left_wrong,
    listed_twice,
    queued_through_two_paths,
    request_of,
)
from tests.vllm.test_checked_adapter_edges import point_the_last_back_link_astray
from verified_queue import AlreadyInQueueError, InvariantViolation
from verified_queue.queue import FreeBlockQueue  # the production class, whatever the level
from verified_queue.vllm import plugin
from verified_queue.vllm.checked import VllmCheckedFreeBlockQueue
from verified_queue.vllm.pool_checks import (
    PoolLayoutError,
    _cache_entries,
    check_block_pool,
    check_moving,
    pool_link_of,
)
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue

NUM_BLOCKS = 10
PREFIXES = 3


@pytest.fixture(autouse=True)
def plugin_undone_after_the_test() -> Iterator[None]:
    """Each test's plugin, installed by :func:`build_pool`, is undone when the test ends."""
    yield
    plugin.uninstall()


def build_pool(code: VllmCode, mode: str, num_blocks: int = NUM_BLOCKS) -> Any:
    """vLLM's BlockPool (prefix caching on) built on the queue of ``mode``.

    The plugin stays installed for the rest of the test, as it stays in a vLLM
    process: vLLM 0.33.0's prefix cache tests a block's class against the name its
    module binds, which on the compiled build is the block class the plugin derives.
    """
    plugin.install(mode, code.kv_cache_utils, code.block_pool, compiled=verified_queue.COMPILED)
    pool = code.BlockPool(num_blocks, True, BLOCK_SIZE)
    queue = pool.free_block_queue
    assert isinstance(queue, (VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue))
    # The whole pool checked at every unlink, from now on.
    queue.full_check_every = 1
    assert queue.check_block_pool() is True
    return pool


class PoolChecksMachine(RuleBasedStateMachine):
    """vLLM's pool under check mode, one planted fault at most, against what must be reported."""

    code: VllmCode
    mode: str

    def __init__(self) -> None:
        super().__init__()
        self.pool = build_pool(self.code, self.mode)
        self.queue = self.pool.free_block_queue
        # Each request: its blocks, its prompt, whether its blocks were cached.
        self.requests: list[tuple[list[Any], int, bool]] = []
        self.expected: str | None = None  # the clause a silent fault must be reported under
        self.done = False  # the fault was reported: the rest of the run only observes
        self.steps = 0

    # ---------------------------------------------------------------- the pool's life

    @precondition(lambda self: not self.done)
    @rule(count=st.integers(1, 3), prefix=st.integers(0, PREFIXES - 1), cache=st.booleans())
    def allocate(self, count: int, prefix: int, cache: bool) -> None:
        """A request's blocks, filled and cached at once (``cache``) or left for later."""
        if count > self.pool.get_num_free_blocks():
            with pytest.raises(ValueError, match="Cannot get"):
                self.pool.get_new_blocks(count)
            return
        self.requests.append((self.pool.get_new_blocks(count), prefix, False))
        if cache:
            self.cache_request(len(self.requests) - 1)

    @precondition(lambda self: not self.done)
    @rule(data=st.data())
    def cache(self, data: st.DataObject) -> None:
        """A request allocated earlier fills its blocks, which are cached."""
        fresh = [index for index, (_, _, cached) in enumerate(self.requests) if not cached]
        if fresh:
            self.cache_request(data.draw(st.sampled_from(fresh)))

    def cache_request(self, index: int) -> None:
        blocks, prefix, _ = self.requests[index]
        request = request_of(prefix, len(blocks))
        self.pool.cache_full_blocks(request, blocks, 0, len(blocks), BLOCK_SIZE, 0)
        self.requests[index] = (blocks, prefix, True)

    @precondition(lambda self: not self.done)
    @rule(prefix=st.integers(0, PREFIXES - 1), count=st.integers(1, 3))
    def hit(self, prefix: int, count: int) -> None:
        found: list[Any] = []
        for block_hash in block_hashes(prefix, count):
            cached = self.pool.get_cached_block(block_hash, [0])
            if cached is None:
                break
            found.append(cached[0])
        if found:
            self.pool.touch(found)
            self.requests.append((found, prefix, True))

    @precondition(lambda self: not self.done and bool(self.requests))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.requests) - 1))
        blocks, _, _ = self.requests.pop(index)
        self.pool.free_blocks(list(reversed(blocks)))

    @precondition(lambda self: not self.done)
    @rule(block_id=st.integers(1, NUM_BLOCKS - 1))
    def evict(self, block_id: int) -> None:
        self.pool.evict_blocks({block_id})

    @precondition(lambda self: not self.done)
    @rule()
    def reset(self) -> None:
        assert self.pool.reset_prefix_cache() is (not self.requests)

    @rule()
    def observe(self) -> None:
        """Always enabled, so that a run goes on once the fault was reported: vLLM's count read."""
        assert self.pool.get_num_free_blocks() == len(self.queue)

    # ---------------------------------------------------------------- planted faults

    def held_once(self, data: st.DataObject) -> tuple[int, Any] | None:
        """A request and a block of it that no other request holds, drawn; ``None`` if none."""
        choices = [
            (index, block)
            for index, (blocks, _, _) in enumerate(self.requests)
            for block in blocks
            if block.ref_cnt == 1
        ]
        return data.draw(st.sampled_from(choices)) if choices else None

    def refused(self, call: Any, clause: str | None) -> None:
        """``call`` must raise the clause (``None``: the double link's error), changing nothing."""
        before = [block.block_id for block in self.queue.iter_blocks_after(None)]
        error_type = AlreadyInQueueError if clause is None else InvariantViolation
        with pytest.raises(error_type) as caught:
            call()
        if clause is not None:
            assert isinstance(caught.value, InvariantViolation)
            assert caught.value.clause == clause, caught.value
        self.assert_explained(caught.value)
        assert [block.block_id for block in self.queue.iter_blocks_after(None)] == before
        self.done = True

    def assert_explained(self, error: Exception) -> None:
        """In trace mode, a pool's violation names where its block was last linked or unlinked."""
        if self.mode == "trace" and isinstance(error, InvariantViolation):
            block = error.blocks[0]
            lines = error.history.lines  # type: ignore[attr-defined]
            assert any(line.startswith(f"damaged {block!r}") for line in lines), lines

    def free_again(self, data: st.DataObject) -> None:
        """vLLM #42571's class: a block freed once more than it is held goes below 0 (P2)."""
        found = self.held_once(data)
        if found is None:
            return
        index, block = found
        blocks, _, _ = self.requests.pop(index)
        self.pool.free_blocks(list(reversed(blocks)))
        self.pool.free_blocks([block])  # vLLM's queue never hears of it: silent
        self.expected = "P2"

    def free_twice_in_one_call(self, data: st.DataObject) -> None:
        """A block listed twice in one free: it reaches the queue with ref_cnt -1 (P2)."""
        found = self.held_once(data)
        if found is not None:
            block = found[1]
            self.refused(lambda: self.pool.free_blocks([block, block]), "P2")

    def lower_without_linking(self, data: st.DataObject) -> None:
        """A count lowered to 0 without the append: a block lost to every request (P2)."""
        found = self.held_once(data)
        if found is None:
            return
        index, block = found
        self.requests.pop(index)
        block.ref_cnt -= 1
        self.expected = "P2"

    def cached_block(self, data: st.DataObject) -> Any:
        """A block that carries a hash, drawn; ``None`` if none does."""
        cached = [block for block in self.pool.blocks if block.block_hash is not None]
        return data.draw(st.sampled_from(cached)) if cached else None

    def drop_entry_keep_hash(self, data: st.DataObject) -> None:
        """An eviction that drops the cache entry but leaves the block's hash (P3)."""
        block = self.cached_block(data)
        if block is not None:
            self.pool.cached_block_hash_to_block.pop(block.block_hash, block.block_id)
            self.expected = "P3"

    def reset_hash_keep_entry(self, data: st.DataObject) -> None:
        """An eviction that resets the block's hash, leaving the cache entry: a phantom hit (P3)."""
        block = self.cached_block(data)
        if block is not None:
            block.reset_hash()
            self.expected = "P3"

    def link_held_block(self, data: st.DataObject) -> None:
        """A held block linked into the free queue by a second path (P2, refused)."""
        held = [block for blocks, _, _ in self.requests for block in blocks]
        if held:
            block = data.draw(st.sampled_from(held))
            self.refused(lambda: self.queue.append(block), "P2")

    def link_null_block(self, data: st.DataObject) -> None:
        """The null block linked into the free queue (P1, refused)."""
        del data
        self.refused(lambda: self.queue.append_n([self.pool.null_block]), "P1")

    def link_free_block_again(self, data: st.DataObject) -> None:
        """A free block queued again through a second path: the queue refuses the double link."""
        free = list(self.queue.iter_blocks_after(None))
        if free:
            block = data.draw(st.sampled_from(free))
            self.refused(lambda: self.queue.prepend_n([block]), None)

    #: The faults, one of which a run may plant once it has done a few steps.
    PLANTED = (
        free_again,
        free_twice_in_one_call,
        lower_without_linking,
        drop_entry_keep_hash,
        reset_hash_keep_entry,
        link_held_block,
        link_null_block,
        link_free_block_again,
    )

    @precondition(lambda self: not self.done and self.expected is None and self.steps >= 6)
    @rule(data=st.data())
    def plant(self, data: st.DataObject) -> None:
        """Plant one fault, drawn (a fault with nothing to act on plants nothing)."""
        fault = data.draw(st.sampled_from(self.PLANTED), label="fault")
        fault(self, data)

    # ---------------------------------------------------------------- what must hold

    @invariant()
    def reported_exactly_when_damaged(self) -> None:
        self.steps += 1
        if self.done:
            return
        if self.expected is None:
            assert self.queue.check_block_pool() is True
            held = Counter(id(block) for blocks, _, _ in self.requests for block in blocks)
            for block in self.pool.blocks[1:]:
                assert block.ref_cnt == held[id(block)], block
            return
        with pytest.raises(InvariantViolation) as caught:
            self.queue.check_block_pool()
        assert caught.value.invariant == "block_pool"
        assert caught.value.clause == self.expected, caught.value
        self.assert_explained(caught.value)
        self.done = True


@pytest.mark.parametrize("mode", ["checked", "trace"])
def test_the_pool_checks_report_exactly_the_planted_faults(wheel: Path, mode: str) -> None:
    """The model: nothing reported on a sound pool, the planted fault's clause at once after it."""
    machine = type(
        "PoolChecks",
        (PoolChecksMachine,),
        {"code": load_vllm(wheel), "mode": mode},
    )
    run_state_machine_as_test(machine, settings=settings(max_examples=200, stateful_step_count=40))


# ---------------------------------------------------------------------------
# Where each class is reported by the queue's own operations, not a check by hand.


def test_a_second_free_is_reported_at_the_next_allocation(wheel: Path) -> None:
    """Silent in vLLM's free_blocks, a block below 0 is found by the next unlink's pool check."""
    pool = build_pool(load_vllm(wheel), "checked")
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(blocks)
    pool.free_blocks(blocks[1:2])
    with pytest.raises(
        InvariantViolation, match=r"^P2 \(block_pool\) broken at the check"
    ) as caught:
        pool.get_new_blocks(1)
    assert caught.value.blocks == (blocks[1],)
    assert "found -1, in the free queue" in str(caught.value)


def test_a_block_leaving_with_a_bad_count_is_refused_without_the_periodic_check(
    wheel: Path,
) -> None:
    """With the periodic check off, the block itself is refused as it leaves, nothing taken."""
    pool = build_pool(load_vllm(wheel), "checked")
    queue = pool.free_block_queue
    queue.full_check_every = 0
    queue.check_block_pool()  # the new period starts here
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(blocks)
    pool.free_blocks(blocks[:1])  # blocks[0] is first in the queue now, with ref_cnt -1
    free = len(queue)
    with pytest.raises(InvariantViolation, match="the start of popleft_n") as caught:
        pool.get_new_blocks(2)
    assert caught.value.clause == "P2"
    assert len(queue) == free
    assert queue.get_all_free_blocks()[0] is blocks[0]


@pytest.mark.parametrize("fault", list(FAULTS), ids=[fault.__name__ for fault in FAULTS])
@pytest.mark.parametrize("mode", ["checked", "trace"])
def test_each_class_is_reported_at_the_first_operation_that_sees_it(
    wheel: Path, fault: Any, mode: str
) -> None:
    """Check mode, the full check at every unlink: the faulty call, or the next allocation."""
    pool = build_pool(load_vllm(wheel), mode)
    clause, where = FAULTS[fault]
    error_type = AlreadyInQueueError if clause is None else InvariantViolation
    if where == "the call":
        with pytest.raises(error_type) as caught:
            fault(pool)
    else:
        fault(pool)
        with pytest.raises(error_type) as caught:
            pool.get_new_blocks(1)
    if clause is not None:
        error = caught.value
        assert isinstance(error, InvariantViolation)
        assert (error.invariant, error.clause) == ("block_pool", clause)
    if mode == "trace":
        # Where the block concerned was last linked (and, if it was, unlinked) is named.
        named = caught.value.history.blocks  # type: ignore[attr-defined]
        assert named
        assert named[0].linked is not None


def freed_with_an_uncached_hash(pool: Any) -> None:
    """A block given a hash the prefix cache never mapped, then freed: it joins with it (P3)."""
    block = pool.get_new_blocks(1)[0]
    block.set_block_hash(b"never cached")  # both pinned releases have it; 0.33.0 no setter
    pool.free_blocks([block])


def null_block_freed_into_the_queue(pool: Any) -> None:
    """The null block handed to the queue's back (P1)."""
    pool.free_block_queue.append_n([pool.null_block])


def null_block_freed_to_the_front(pool: Any) -> None:
    """The null block handed to the queue's front, where vLLM frees uncached blocks (P1)."""
    pool.free_block_queue.prepend_n([pool.null_block])


def free_block_held_and_removed(pool: Any) -> None:
    """A free block whose count was raised by hand, taken out of the middle (P2)."""
    block = pool.free_block_queue.get_all_free_blocks()[2]
    block.ref_cnt = 1
    pool.free_block_queue.remove(block)


#: Classes the one-pass path of the queue itself refuses, at the call, with its default period.
REFUSED_AT_THE_CALL: dict[Callable[[Any], None], str | None] = {
    listed_twice: "P2",
    queued_through_two_paths: None,
    freed_with_an_uncached_hash: "P3",
    null_block_freed_into_the_queue: "P1",
    null_block_freed_to_the_front: "P1",
    free_block_held_and_removed: "P2",
}


@pytest.mark.parametrize(
    "fault", list(REFUSED_AT_THE_CALL), ids=[fault.__name__ for fault in REFUSED_AT_THE_CALL]
)
@pytest.mark.parametrize("mode", ["checked", "trace"])
def test_each_class_is_refused_at_the_call_with_the_default_period(
    wheel: Path, fault: Any, mode: str
) -> None:
    """As users run it (no full check due): the one-pass path refuses each at the faulty call."""
    pool = build_pool(load_vllm(wheel), mode)
    queue = pool.free_block_queue
    queue.full_check_every = None
    queue.full_check()  # the default periods start here, the queue's and the pool's
    queue.check_block_pool()
    clause = REFUSED_AT_THE_CALL[fault]
    with pytest.raises(AlreadyInQueueError if clause is None else InvariantViolation) as caught:
        fault(pool)
    if clause is not None:
        error = caught.value
        assert isinstance(error, InvariantViolation)
        assert (error.invariant, error.clause) == ("block_pool", clause)


def raise_the_queues_own_count(queue: Any) -> int:
    """Damage only a full check sees: the count the queue keeps raised by one; the old count."""
    count_slot: Any = vars(FreeBlockQueue)["num_free_blocks"]
    linked: int = count_slot.__get__(queue)
    count_slot.__set__(queue, linked + 1)
    return linked


@pytest.mark.parametrize("mode", ["checked", "trace"])
def test_vllms_unlinks_count_toward_the_full_check(wheel: Path, mode: str) -> None:
    """Period 4: a back link far from every step is reported at vLLM's fourth get_new_blocks.

    The queue's full check runs with the pool's, at the start of every fourth unlink;
    free_blocks' two joins do not count.
    """
    pool = build_pool(load_vllm(wheel), mode)
    queue = pool.free_block_queue
    queue.full_check_every = 4
    queue.check_block_pool()  # the queue's full check, then the pool's: the period starts
    point_the_last_back_link_astray(queue)
    for _ in range(3):
        pool.free_blocks(pool.get_new_blocks(1))  # popleft_n, prepend_n, append_n([])
    with pytest.raises(InvariantViolation) as caught:
        pool.get_new_blocks(1)  # the fourth unlink runs the full checks
    assert caught.value.invariant == "sentinel_linkage"


@pytest.mark.parametrize("mode", ["checked", "trace"])
def test_vllms_counter_written_after_the_pool_has_run_is_an_offset(wheel: Path, mode: str) -> None:
    """vLLM's offloading test fakes a full pool once the pool has run; then writes it back.

    After a step on the one-pass path the write still offsets the counter vLLM reads
    and leaves the true count alone; the pool runs on its true count.
    """
    pool = build_pool(load_vllm(wheel), mode)
    queue = pool.free_block_queue
    pool.free_blocks(pool.get_new_blocks(2))
    free = len(queue)
    queue.num_free_blocks = 0
    assert (pool.get_num_free_blocks(), queue.count_offset, len(queue)) == (0, -free, free)
    with pytest.raises(ValueError, match="Cannot get 1 free blocks"):
        pool.get_new_blocks(1)  # the pool looks full to vLLM, as the test means it to
    queue.num_free_blocks = free
    assert (pool.get_num_free_blocks(), queue.count_offset) == (free, 0)
    assert queue.check_block_pool() is True


@pytest.mark.parametrize("mode", ["checked", "trace"])
def test_a_count_above_the_chain_is_reported_when_vllm_takes_every_block(
    wheel: Path, mode: str
) -> None:
    """The default period: taking every linked block reaches the tail, short of the count (I2)."""
    pool = build_pool(load_vllm(wheel), mode)
    queue = pool.free_block_queue
    queue.full_check_every = None
    queue.full_check()
    queue.check_block_pool()
    linked = raise_the_queues_own_count(queue)
    with pytest.raises(InvariantViolation) as caught:
        pool.get_new_blocks(linked)
    assert caught.value.invariant == "count_consistency"


@pytest.mark.parametrize("mode", ["checked", "trace"])
def test_a_count_above_an_empty_chain_is_reported_when_vllm_frees_into_it(
    wheel: Path, mode: str
) -> None:
    """Every block taken, then the queue's own count raised: the free's join is refused (I2).

    Nothing is linked: the freed block stays detached, the chain empty.
    """
    pool = build_pool(load_vllm(wheel), mode)
    queue = pool.free_block_queue
    taken = pool.get_new_blocks(pool.get_num_free_blocks())
    raise_the_queues_own_count(queue)
    with pytest.raises(InvariantViolation) as caught:
        pool.free_blocks(taken[:1])  # no hash: prepend_n, to the empty chain
    assert caught.value.invariant == "count_consistency"
    assert queue.fake_free_list_head.next_free_block is queue.fake_free_list_tail
    assert taken[0].prev_free_block is taken[0].next_free_block is None


@pytest.mark.parametrize("fault", list(FAULTS), ids=[fault.__name__ for fault in FAULTS])
def test_vllms_own_queue_lets_every_class_pass(wheel: Path, fault: Any) -> None:
    """The same faults on vLLM's own queue: nothing is raised, and the pool is left wrong."""
    code = load_vllm(wheel)
    pool = code.BlockPool(NUM_BLOCKS, True, BLOCK_SIZE)
    assert type(pool.free_block_queue) is code.FreeKVCacheBlockQueue
    fault(pool)
    assert left_wrong(pool)


def null_in_queue(pool: Any, members: dict[int, Any]) -> None:
    """The pool's null block in the free queue's membership."""
    members[id(pool.null_block)] = pool.null_block


def second_null(pool: Any, members: dict[int, Any]) -> None:
    """A free block marked null beside the pool's null block."""
    del members
    pool.blocks[5].is_null = True


def renumbered(pool: Any, members: dict[int, Any]) -> None:
    """A block whose id is not its place in the pool."""
    del members
    pool.blocks[3].block_id = 4


def stranger_in_queue(pool: Any, members: dict[int, Any]) -> None:
    """A block of no pool in the free queue's membership."""
    stranger = load_vllm_block(pool)
    members[id(stranger)] = stranger


def load_vllm_block(pool: Any) -> Any:
    """A block of vLLM's type that belongs to no pool."""
    return type(pool.blocks[1])(99)


def extra_hash_not_cached(pool: Any, members: dict[int, Any]) -> None:
    """An extra hash of a held block that the cache does not map."""
    blocks = pool.get_new_blocks(1)
    pool.cache_full_blocks(request_of(1, 1), blocks, 0, 1, BLOCK_SIZE, 0)
    pool.cached_block_hashes_by_block[blocks[0].block_id] = {b"not cached" * 4}
    members.pop(id(blocks[0]), None)


#: Damage only a check of the whole pool can see (no link or unlink shows it), and its clause.
WHOLE_POOL_DAMAGE = {
    null_in_queue: "P1",
    second_null: "P1",
    renumbered: "P5",
    stranger_in_queue: "P5",
    extra_hash_not_cached: "P3",
}


@pytest.mark.parametrize(
    "damage", list(WHOLE_POOL_DAMAGE), ids=[damage.__name__ for damage in WHOLE_POOL_DAMAGE]
)
def test_the_full_check_names_each_clause(wheel: Path, damage: Any) -> None:
    """Each branch of the whole-pool check, on damage the O(1) checks cannot see."""
    pool = build_pool(load_vllm(wheel), "checked")
    queue = pool.free_block_queue
    members = dict(queue._members)
    damage(pool, members)
    with pytest.raises(InvariantViolation) as caught:
        check_block_pool(queue._pool_link, members)
    assert caught.value.clause == WHOLE_POOL_DAMAGE[damage], caught.value
    assert caught.value.blocks


# ---------------------------------------------------------------------------
# The checks' parts, without vLLM.


def standin_block(block_id: int, pool: object, **fields: Any) -> SimpleNamespace:
    """A block with vLLM's fields, links included."""
    values: dict[str, Any] = {
        "block_id": block_id,
        "ref_cnt": 0,
        "pool": pool,
        "block_hash": None,
        "prev_free_block": None,
        "next_free_block": None,
        "is_null": False,
    }
    values.update(fields)
    return SimpleNamespace(**values)


def test_a_queue_of_no_pool_checks_no_clause() -> None:
    """Blocks that name no pool (vLLM's tests of the queue alone): no pool clause applies."""
    held = standin_block(1, None, ref_cnt=3, is_null=True)
    assert pool_link_of([held]) is None
    assert pool_link_of(iter([held])) is None
    assert pool_link_of([object()]) is None  # no pool field at all
    check_moving(None, [held], "here", joining=True)
    check_moving(None, [held], "here", joining=False)


class StandinPool:
    """A pool whose prefix cache maps nothing."""

    cached_block_hash_to_block = SimpleNamespace(contain=lambda *_: False)


@pytest.mark.parametrize(
    "weak", [True, False], ids=["0.34.0: a weak reference", "0.33.0: the pool"]
)
def test_each_clause_of_a_moving_block(weak: bool) -> None:
    """P1, P2, P3 and P5 for one block, joining and leaving, each under its own clause."""
    owner = StandinPool()
    link: object = weakref.ref(owner) if weak else owner
    cases = {
        "P1": standin_block(0, link, is_null=True),
        "P2": standin_block(1, link, ref_cnt=-1),
        "P3": standin_block(2, link, block_hash=b"k"),
        "P5": standin_block(3, object()),
    }
    for clause, block in cases.items():
        with pytest.raises(InvariantViolation) as joining:
            check_moving(link, [block], "the start of append_n()", joining=True)
        with pytest.raises(InvariantViolation) as leaving:
            check_moving(link, [block], "the start of remove()", joining=False)
        assert (joining.value.clause, leaving.value.clause) == (clause, clause)
        assert joining.value.blocks == leaving.value.blocks == (block,)
        assert "joins the free queue" in str(joining.value)
        assert "leaves the free queue" in str(leaving.value)
    check_moving(link, [standin_block(4, link)], "the start of append_n()", joining=True)


def test_an_object_that_is_no_block_is_left_to_the_queue() -> None:
    """Not a block at all: the queue's refusal, not a clause; a block without fields: P5."""
    check_moving(object(), [object()], "the start of append_n()", joining=True)
    bare = SimpleNamespace(prev_free_block=None, next_free_block=None)
    with pytest.raises(InvariantViolation, match="cannot be read") as caught:
        check_moving(object(), [bare], "the start of append_n()", joining=True)
    assert caught.value.clause == "P5"


def test_the_cache_entries_of_both_shipped_layouts() -> None:
    """0.34.0's ids (one, or several under _dup_ids) and 0.33.0's blocks and dicts of blocks."""
    newer = SimpleNamespace(_cache={b"a": 1, b"b": 2}, _dup_ids={b"b": {2: None, 5: None}})
    assert sorted(_cache_entries(newer)) == [(b"a", 1), (b"b", 2), (b"b", 5)]
    block = SimpleNamespace(block_id=7)
    older = SimpleNamespace(_cache={b"a": block, b"b": {3: block, 4: block}})
    assert sorted(_cache_entries(older)) == [(b"a", 7), (b"b", 3), (b"b", 4)]


@pytest.mark.parametrize(
    "cache",
    [SimpleNamespace(), SimpleNamespace(_cache=[]), SimpleNamespace(_cache={b"a": "a block?"})],
    ids=["no table", "not a dict", "an unknown entry"],
)
def test_a_cache_layout_of_no_shipped_release_is_refused(cache: object) -> None:
    """Refused, naming what was found, rather than checked in part."""
    with pytest.raises(PoolLayoutError, match="cannot be checked by this version"):
        list(_cache_entries(cache))


# ---------------------------------------------------------------------------
# The whole-pool check and the messages, on a stand-in pool (no vLLM).


class StandinMap:
    """A prefix cache in vLLM 0.34.0's layout: a hash to one block id, shared hashes apart."""

    def __init__(self) -> None:
        self._cache: dict[bytes, int] = {}
        self._dup_ids: dict[bytes, dict[int, None]] = {}

    def contain(self, key: bytes, block_id: int) -> bool:
        shared = self._dup_ids.get(key)
        return block_id in shared if shared is not None else self._cache.get(key) == block_id


class WholeStandinPool:
    """A pool of ``size`` free blocks naming it weakly, block 0 the null block, nothing cached."""

    def __init__(self, size: int, *, built: bool = True) -> None:
        self.link = weakref.ref(self)
        self.blocks = [standin_block(index, self.link) for index in range(size)]
        self.cached_block_hash_to_block = StandinMap()
        if built:
            self.null_block = self.blocks[0]
            self.null_block.is_null = True

    def free_members(self) -> dict[int, Any]:
        return {id(block): block for block in self.blocks[1:] if block.ref_cnt == 0}


def test_the_full_check_says_whether_there_was_a_pool_to_check() -> None:
    """True once checked; False with no pool, a pool gone, or one still being built."""
    pool = WholeStandinPool(4)
    assert check_block_pool(pool.link, pool.free_members()) is True
    assert check_block_pool(None, {}) is False
    assert check_block_pool(weakref.ref(StandinPool()), {}) is False  # collected at once
    building = WholeStandinPool(4, built=False)
    assert check_block_pool(building.link, {}) is False


def test_a_pool_without_extra_hashes_is_checked_by_its_primary_hashes() -> None:
    """vLLM releases before the extra hashes: the primary hash alone decides P3."""
    pool = WholeStandinPool(4)
    assert not hasattr(pool, "cached_block_hashes_by_block")
    pool.blocks[2].block_hash = b"k"
    pool.cached_block_hash_to_block._cache[b"k"] = 2
    assert check_block_pool(pool.link, pool.free_members()) is True
    del pool.cached_block_hash_to_block._cache[b"k"]
    with pytest.raises(InvariantViolation, match="expected its hash mapped to block 2"):
        check_block_pool(pool.link, pool.free_members())


def test_a_block_of_another_pool_in_the_queue_is_named() -> None:
    """Only the pool's own blocks are free (P5): a stranger with an id the pool also has."""
    pool, other = WholeStandinPool(4), WholeStandinPool(4)
    members = pool.free_members()
    members[id(other.blocks[2])] = other.blocks[2]
    with pytest.raises(InvariantViolation) as caught:
        check_block_pool(pool.link, members)
    assert (caught.value.clause, caught.value.blocks) == ("P5", (other.blocks[2],))
    assert caught.value.found == "4 blocks, 1 of them not the pool's"
    assert caught.value.expected == "only the pool's blocks: 3 with ref_cnt 0"


def test_a_hash_whose_pool_is_gone_is_not_a_violation() -> None:
    """A block naming a pool that was collected: nothing is left to disagree with."""
    gone = weakref.ref(StandinPool())
    check_moving(gone, [standin_block(1, gone, block_hash=b"k")], "here", joining=True)


@pytest.mark.parametrize(
    ("fields", "joining", "message"),
    [
        (
            {"is_null": True},
            True,
            "P1 (block_pool) broken at here: the null block {block}: "
            "expected never in the free queue, never freed, found it joins the free queue",
        ),
        (
            {"ref_cnt": 2},
            False,
            "P2 (block_pool) broken at here: ref_cnt of {block}: expected 0 (a block is in "
            "the free queue exactly when no request holds it), found 2 as it leaves the free "
            "queue",
        ),
        (
            {"block_hash": b"k"},
            True,
            "P3 (block_pool) broken at here: the prefix cache's entry for the block_hash of "
            "{block}: expected its hash mapped to block 1, found no such entry as it joins "
            "the free queue",
        ),
        (
            {"pool": None},
            False,
            "P5 (block_pool) broken at here: the pool of {block}: expected the pool whose free "
            "queue this is, found no pool, as it leaves the free queue",
        ),
    ],
    ids=["P1", "P2", "P3", "P5"],
)
def test_each_clause_says_what_it_expected_and_found(
    fields: dict[str, Any], joining: bool, message: str
) -> None:
    """The whole message of each clause, as a user reads it."""
    pool = WholeStandinPool(2)
    others = {name: value for name, value in fields.items() if name != "pool"}
    block = standin_block(1, fields.get("pool", pool.link), **others)
    with pytest.raises(InvariantViolation) as caught:
        check_moving(pool.link, [block], "here", joining=joining)
    assert str(caught.value) == message.format(block=block)


def test_the_pool_a_stranger_names_is_told() -> None:
    """Another pool, a pool gone, an object whose fields cannot be read: each said so."""
    pool, other = WholeStandinPool(2), WholeStandinPool(2)
    with pytest.raises(InvariantViolation) as named:
        check_moving(pool.link, [standin_block(1, other.link)], "here", joining=True)
    assert named.value.found == (
        f"another pool (WholeStandinPool at {id(other):#x}), as it joins the free queue"
    )
    gone = weakref.ref(StandinPool())
    with pytest.raises(InvariantViolation, match="found a pool that is gone, as it joins"):
        check_moving(pool.link, [standin_block(1, gone)], "here", joining=True)
    bare = SimpleNamespace(prev_free_block=None, next_free_block=None)
    with pytest.raises(InvariantViolation) as caught:
        check_moving(pool.link, [bare], "here", joining=True)
    assert caught.value.expected == "a block of the pool whose free queue this is"
    assert (caught.value.what, caught.value.blocks) == (repr(bare), (bare,))
    assert caught.value.found is not None
    assert caught.value.found.startswith("an object whose fields cannot be read (AttributeError(")
    assert caught.value.where == "here"


WHERE = "the check of vLLM's BlockPool"


def whole_message(pool: WholeStandinPool, members: dict[int, Any] | None = None) -> str:
    """The message of the whole-pool check's violation on ``pool``."""
    with pytest.raises(InvariantViolation) as caught:
        check_block_pool(pool.link, pool.free_members() if members is None else members)
    assert caught.value.where == WHERE
    return str(caught.value)


def test_the_full_check_says_what_it_found_for_each_clause() -> None:
    """Each branch of the whole-pool check, its whole message as a user reads it."""
    pool = WholeStandinPool(4)
    pool.blocks[3].block_id = 4
    assert whole_message(pool) == (
        f"P5 (block_pool) broken at {WHERE}: blocks[3] of the pool, {pool.blocks[3]!r}: "
        "expected block_id 3, naming this pool, found block_id 4, naming this pool"
    )
    pool, other = WholeStandinPool(4), WholeStandinPool(4)
    pool.blocks[2].pool = other.link
    assert whole_message(pool).endswith(
        f"found block_id 2, naming another pool (WholeStandinPool at {id(other):#x})"
    )
    pool = WholeStandinPool(4)
    members = pool.free_members()
    members[id(pool.null_block)] = pool.null_block
    assert whole_message(pool, members) == (
        f"P1 (block_pool) broken at {WHERE}: {pool.null_block!r}: expected the pool's null "
        "block alone marked null, and never in the free queue, found in the free queue"
    )
    pool = WholeStandinPool(4)
    pool.blocks[1].is_null = True
    assert whole_message(pool, {}).endswith(", found marked null, not the pool's null block")
    for count, member, found in ((-1, True, "-1, in"), (0, False, "0, not in"), (1, True, "1, in")):
        pool = WholeStandinPool(4)
        pool.blocks[2].ref_cnt = count
        members = pool.free_members()
        if member:
            members[id(pool.blocks[2])] = pool.blocks[2]
        else:
            del members[id(pool.blocks[2])]
        assert whole_message(pool, members) == (
            f"P2 (block_pool) broken at {WHERE}: ref_cnt of {pool.blocks[2]!r}: expected 0 "
            f"exactly for the blocks in the free queue, and never below 0, found {found} the "
            "free queue"
        )


def test_the_full_check_reads_the_prefix_cache_both_ways() -> None:
    """A hash the cache does not map, an extra hash without a primary or unmapped, a stale entry."""
    pool = WholeStandinPool(4)
    pool.blocks[2].block_hash = b"k"
    assert whole_message(pool) == (
        f"P3 (block_pool) broken at {WHERE}: the prefix cache's entry for the block_hash of "
        f"{pool.blocks[2]!r}: expected its hash mapped to block 2, found no such entry"
    )
    pool = WholeStandinPool(4)
    pool.cached_block_hashes_by_block = {2: {b"x"}}  # type: ignore[attr-defined]
    pool.cached_block_hash_to_block._cache[b"x"] = 2
    assert whole_message(pool) == (
        f"P3 (block_pool) broken at {WHERE}: an extra hash of {pool.blocks[2]!r} "
        "(cached_block_hashes_by_block): expected beside a primary hash, and mapped to block 2, "
        "found no primary hash"
    )
    pool.blocks[2].block_hash = b"k"
    pool.cached_block_hash_to_block._cache[b"k"] = 2
    assert check_block_pool(pool.link, pool.free_members()) is True  # primary and extra mapped
    del pool.cached_block_hash_to_block._cache[b"x"]
    assert whole_message(pool).endswith("found no entry for b'x'")
    pool = WholeStandinPool(4)
    pool.cached_block_hash_to_block._cache[b"k"] = 2  # an entry its block does not carry
    assert whole_message(pool) == (
        f"P3 (block_pool) broken at {WHERE}: the prefix cache's entry b'k': expected the hash "
        f"of block 2, which it maps to, found {pool.blocks[2]!r}"
    )
    pool.cached_block_hash_to_block._cache[b"k"] = 4  # an entry for no block at all
    assert whole_message(pool).endswith("which it maps to, found no such block")
    with pytest.raises(InvariantViolation) as caught:
        check_block_pool(pool.link, pool.free_members())
    assert caught.value.blocks == ()


def test_strangers_in_the_queue_are_named_four_at_most() -> None:
    """The free count's break names the first four blocks that are not the pool's."""
    pool = WholeStandinPool(4)
    members = pool.free_members()
    strangers = [standin_block(index, None) for index in (0, 2, 4, 7)]
    strangers.append(SimpleNamespace(prev_free_block=None, next_free_block=None))  # no block_id
    members.update((id(stranger), stranger) for stranger in strangers)
    with pytest.raises(InvariantViolation) as caught:
        check_block_pool(pool.link, members)
    assert str(caught.value) == (
        f"P5 (block_pool) broken at {WHERE}: the free queue: expected only the pool's blocks: "
        "3 with ref_cnt 0, found 8 blocks, 5 of them not the pool's"
    )
    assert caught.value.blocks == tuple(strangers[:4])


def test_an_entry_for_the_null_block_is_a_stale_entry() -> None:
    """An entry mapping a hash to block 0: the null block, which carries none."""
    pool = WholeStandinPool(4)
    pool.cached_block_hash_to_block._cache[b"k"] = 0
    assert whole_message(pool).endswith(f"which it maps to, found {pool.null_block!r}")


def test_a_layout_neither_release_shipped_is_named() -> None:
    """PoolLayoutError says what it found and what to do; ids without _dup_ids are read alone."""
    assert list(_cache_entries(SimpleNamespace(_cache={b"a": 1}))) == [(b"a", 1)]
    with pytest.raises(PoolLayoutError) as table:
        list(_cache_entries(SimpleNamespace()))
    assert str(table.value) == (
        "vLLM's prefix cache (SimpleNamespace) keeps no _cache dict: the pool clause P3 cannot "
        "be checked by this version of verified_queue; use VERIFIED_QUEUE_VLLM=production"
    )
    with pytest.raises(PoolLayoutError) as entry:
        list(_cache_entries(SimpleNamespace(_cache={b"a": "a block?"})))
    assert str(entry.value) == (
        "vLLM's prefix cache holds str under a hash: the pool clause P3 cannot be checked by "
        "this version of verified_queue; use VERIFIED_QUEUE_VLLM=production"
    )


def test_a_violation_found_by_check_block_pool_names_the_check_in_trace_mode(
    wheel: Path,
) -> None:
    """In trace mode the explicit pool check's violation carries the history, with the check
    itself as the call: ``check_block_pool()``, where it was called from."""
    pool = build_pool(load_vllm(wheel), "trace")
    queue = pool.free_block_queue
    queue.full_check_every = 0
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(blocks)
    pool.free_blocks(blocks[:1])  # silent in vLLM: ref_cnt -1, found only by a check
    with pytest.raises(InvariantViolation) as caught:
        queue.check_block_pool()
    assert caught.value.clause == "P2"
    lines = caught.value.history.lines  # type: ignore[attr-defined]
    assert any(line.startswith("this call: check_block_pool() at ") for line in lines), lines
