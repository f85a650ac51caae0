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
from tests.vllm.pool_faults import BLOCK_SIZE, FAULTS, block_hashes, left_wrong, request_of
from verified_queue import AlreadyInQueueError, InvariantViolation
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


def build_pool(code: VllmCode, mode: str, num_blocks: int = NUM_BLOCKS) -> Any:
    """vLLM's BlockPool (prefix caching on) built on the queue of ``mode``, plugin undone after."""
    plugin.install(mode, code.kv_cache_utils, code.block_pool, compiled=verified_queue.COMPILED)
    try:
        pool = code.BlockPool(num_blocks, True, BLOCK_SIZE)
    finally:
        plugin.uninstall()
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
        """Always enabled, so that a run goes on once the fault was reported."""
        assert len(self.queue) >= 0

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
