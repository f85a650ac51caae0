"""The vLLM queues' one-pass path against check mode's own operations, and the pool's membership.

On a pool's free queue, :class:`VllmCheckedFreeBlockQueue` reads its membership
from the pool (:class:`PoolMembership`) and links through a one-pass test of the
healthy case, handing anything else to check mode's operations. The machine here
drives two identical stand-in pools (laid out as vLLM's ``BlockPool``), one under
the queue as shipped and one under a reference written apart in this file: the
same queue with every operation sent through check mode's own path and a
membership dict kept at every link, as check mode keeps it. Every step does what
vLLM's pool does, or what a buggy allocator or a careless caller does (a count
taken below 0, a hash with no cache entry, a held or null block linked, a block
linked twice, a batch that is no list or holds no block, a count out of range,
vLLM's counter written), and both queues must answer alike: the same blocks, the
same error word for word, the same free list and counters after.

What it leaves to the tests below it: damage written into the links by hand,
which the two memberships see at different times (:mod:`verified_queue.vllm.pool_membership`).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.vllm.test_checked_adapter_edges import PrefixCache, StandInBlock
from verified_queue import InvariantViolation, QueueError
from verified_queue._messages import batch_argument
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.queue import FreeBlockQueue
from verified_queue.traced import TracedFreeBlockQueue
from verified_queue.vllm import checked as checked_module
from verified_queue.vllm.checked import (
    VllmCheckedFreeBlockQueue,
    _checked_append,
    _checked_append_n,
    _checked_popleft,
    _checked_popleft_n,
    _checked_prepend_n,
    _checked_remove,
    before_unlink,
    start_pool_checks,
)
from verified_queue.vllm.pool_checks import check_moving
from verified_queue.vllm.pool_membership import PoolMembership
from verified_queue.vllm.traced import VllmTracedFreeBlockQueue

SIZE = 6  # block 0 is the null block


class Pool:
    """``SIZE`` blocks naming the pool weakly, its queue built as vLLM builds it."""

    def __init__(self, kind: type[Any], block: type[StandInBlock] = StandInBlock) -> None:
        self.link = weakref.ref(self)
        self.blocks = [block(index, self.link) for index in range(SIZE)]
        self.cached_block_hash_to_block = PrefixCache()
        self.queue = kind(list(self.blocks))
        self.null_block = self.queue.popleft()
        self.null_block.is_null = True


class CheckModeOnly(VllmCheckedFreeBlockQueue):
    """The reference: every operation through check mode's own path, membership a dict."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[Any] = (), *, full_check_every: int | None = None) -> None:
        start_pool_checks(self, blocks)
        CheckedFreeBlockQueue.__init__(self, blocks, full_check_every=full_check_every)

    def popleft(self) -> Any:
        before_unlink(self, 1, "the start of popleft()")
        return _checked_popleft(self)

    def popleft_n(self, n: Any) -> list[Any]:
        before_unlink(self, n, "the start of popleft_n()")
        return _checked_popleft_n(self, n)

    def remove(self, block: Any) -> None:
        before_unlink(self, block, "the start of remove()")
        _checked_remove(self, block)

    def append(self, block: Any) -> None:
        check_moving(self._pool_link, (block,), "the start of append()", joining=True)
        _checked_append(self, block)

    def append_n(self, blocks: Any) -> None:
        batch = blocks if type(blocks) is list else batch_argument("append_n", blocks)
        check_moving(self._pool_link, batch, "the start of append_n()", joining=True)
        _checked_append_n(self, batch)

    def prepend_n(self, blocks: Any) -> None:
        batch = blocks if type(blocks) is list else batch_argument("prepend_n", blocks)
        check_moving(self._pool_link, batch, "the start of prepend_n()", joining=True)
        _checked_prepend_n(self, batch)

    _chain_is_membership = CheckedFreeBlockQueue._chain_is_membership


class TraceModeOnly(VllmTracedFreeBlockQueue):
    """The trace level's reference: the same, through the reference's operations."""

    __slots__ = ()

    _checked_popleft = vars(CheckModeOnly)["popleft"]
    _checked_popleft_n = vars(CheckModeOnly)["popleft_n"]
    _checked_remove = vars(CheckModeOnly)["remove"]
    _checked_append = vars(CheckModeOnly)["append"]
    _checked_append_n = vars(CheckModeOnly)["append_n"]
    _checked_prepend_n = vars(CheckModeOnly)["prepend_n"]
    _chain_is_membership = CheckedFreeBlockQueue._chain_is_membership

    def __init__(self, blocks: Iterable[Any] = (), *, full_check_every: int | None = None) -> None:
        start_pool_checks(self, blocks)
        TracedFreeBlockQueue.__init__(self, blocks, full_check_every=full_check_every)


def outcome(call: Callable[[], object]) -> tuple[str, object]:
    """What ``call`` did: the block ids it returned, or its error, addresses masked."""
    try:
        result = call()
    except QueueError as error:
        clause = getattr(error, "clause", None)
        # The trace level's lines (notes from 3.11, the message's own lines on 3.10) name each
        # queue's own calls, which differ by path: the error itself is what must agree.
        text = re.sub(r"0x[0-9a-f]+", "0x?", str(error).split("\n  this call: ")[0])
        return type(error).__name__, (clause, text)
    if isinstance(result, list):
        return "blocks", [block.block_id for block in result]
    if isinstance(result, StandInBlock):
        return "block", result.block_id
    return "value", result


class FastPathMachine(RuleBasedStateMachine):
    """Two pools, the shipped queue's and the reference's, given the same steps."""

    kind: type[Any]
    reference: type[Any]

    def __init__(self) -> None:
        super().__init__()
        self.pools = [Pool(self.kind), Pool(self.reference)]
        self.period = 0

    def both(self, act: Callable[[Pool], object]) -> None:
        shipped, reference = (outcome(partial(act, pool)) for pool in self.pools)
        assert shipped == reference

    # What vLLM's pool does, right or wrong.

    @rule(n=st.integers(-1, SIZE), single=st.booleans(), raw=st.sampled_from([int, bool, float]))
    def take(self, n: int, single: bool, raw: type) -> None:
        """get_new_blocks: the front blocks taken, each then held once."""

        def act(pool: Pool) -> object:
            taken = [pool.queue.popleft()] if single else pool.queue.popleft_n(raw(n))
            for block in taken:
                block.ref_cnt += 1
            return taken

        self.both(act)

    @rule(index=st.integers(0, SIZE - 1))
    def touch(self, index: int) -> None:
        """A prefix-cache hit: the block leaves the queue wherever it is (or is refused)."""
        self.both(lambda pool: pool.queue.remove(pool.blocks[index]))

    @rule(
        indexes=st.lists(st.integers(0, SIZE - 1), max_size=4),
        end=st.sampled_from(["append", "append_n", "prepend_n"]),
        shape=st.sampled_from([list, tuple, iter]),
        release=st.booleans(),
        stranger=st.booleans(),
        stale=st.booleans(),
    )
    def free(  # noqa: PLR0917 -- one argument a drawn choice
        self,
        indexes: list[int],
        end: str,
        shape: Any,
        release: bool,
        stranger: bool,
        stale: bool,
    ) -> None:
        """free_blocks: counts lowered (or not), then the blocks linked at one end.

        ``stale``: the first block keeps a hash its cache entry no longer backs (P3).
        """

        def act(pool: Pool) -> object:
            blocks: list[Any] = [pool.blocks[index] for index in indexes]
            if release:
                for block in blocks:
                    block.ref_cnt -= 1
            if stale and blocks:
                blocks[0].block_hash = b"stale"
            if stranger:
                blocks.append(object())
            if end == "append":
                return pool.queue.append(blocks[0]) if blocks else None
            return getattr(pool.queue, end)(shape(blocks))

        self.both(act)

    @rule(index=st.integers(0, SIZE - 1), entry=st.booleans(), other=st.booleans())
    def cache(self, index: int, entry: bool, other: bool) -> None:
        """A hash given to a block, with its cache entry (or, a fault, none, or another's)."""
        for pool in self.pools:
            block = pool.blocks[index]
            block.block_hash = b"h%d" % index
            if entry:
                pool.cached_block_hash_to_block._cache[block.block_hash] = (
                    index + 1 if other else index
                )

    @rule(index=st.integers(0, SIZE - 1))
    def evict(self, index: int) -> None:
        """An eviction: hash and entry dropped."""
        for pool in self.pools:
            block = pool.blocks[index]
            if block.block_hash is not None:
                pool.cached_block_hash_to_block._cache.pop(block.block_hash, None)
            block.block_hash = None

    @rule(index=st.integers(0, SIZE - 1), count=st.integers(-1, 2))
    def set_count(self, index: int, count: int) -> None:
        """A reference count written by the pool's bookkeeping (or by a bug)."""
        for pool in self.pools:
            pool.blocks[index].ref_cnt = count

    @rule(value=st.integers(0, SIZE + 1))
    def write_counter(self, value: int) -> None:
        """vLLM's tests write the counter to fake a full pool: an offset, never damage."""

        def act(pool: Pool) -> object:
            pool.queue.num_free_blocks = value
            return pool.queue.num_free_blocks

        self.both(act)

    @rule(period=st.sampled_from([None, 0, 1, 2, 5]))
    def set_period(self, period: int | None) -> None:
        """The full checks' period: the one-pass path stands aside when one is due."""
        for pool in self.pools:
            pool.queue.full_check_every = period

    @rule()
    def check_pool(self) -> None:
        self.both(lambda pool: pool.queue.check_block_pool())

    @invariant()
    def alike(self) -> None:
        """The same chain, counters and countdowns, read without a check (which resets them)."""
        shipped, reference = (pool.queue for pool in self.pools)
        assert chain(shipped) == chain(reference)
        assert shipped.count_offset == reference.count_offset
        assert shipped._until_full_check == reference._until_full_check
        assert shipped._until_pool_check == reference._until_pool_check


def chain(queue: Any) -> list[int]:
    """The block ids linked after the head, read from the links alone."""
    ids: list[int] = []
    node = queue.fake_free_list_head.next_free_block
    while node is not queue.fake_free_list_tail and len(ids) <= SIZE:
        ids.append(node.block_id)
        node = node.next_free_block
    return ids


@pytest.mark.parametrize(
    ("kind", "reference"),
    [(VllmCheckedFreeBlockQueue, CheckModeOnly), (VllmTracedFreeBlockQueue, TraceModeOnly)],
    ids=["checked", "trace"],
)
def test_the_one_pass_path_answers_as_check_mode_does(
    kind: type[Any], reference: type[Any]
) -> None:
    """Healthy steps, the pool's faults, the caller's errors: the same answer and state."""
    machine = type("FastPath", (FastPathMachine,), {"kind": kind, "reference": reference})
    run_state_machine_as_test(machine, settings=settings(max_examples=300, stateful_step_count=30))


# ---------------------------------------------------------------------------
# Damage written by hand, which the pool's membership sees as the links say.


def built(kind: type[Any] = VllmCheckedFreeBlockQueue) -> Pool:
    """A stand-in pool, its queue's periodic check off (so only the operations see damage)."""
    pool = Pool(kind)
    pool.queue.full_check_every = 0
    pool.queue.full_check()
    return pool


def test_a_true_count_above_the_chain_is_refused_before_anything_moves() -> None:
    """The count the queue keeps, raised by damage: a run to the tail is refused (I2), unchanged."""
    pool = built()
    count_slot: Any = vars(FreeBlockQueue)["num_free_blocks"]
    count_slot.__set__(pool.queue, SIZE)  # one more than the SIZE - 1 linked
    before = chain(pool.queue)
    for n in (SIZE - 1, SIZE):  # the whole chain, and one more than it
        with pytest.raises(InvariantViolation) as caught:
            pool.queue.popleft_n(n)
        assert caught.value.invariant == "count_consistency"
    assert chain(pool.queue) == before


def test_a_block_spliced_in_by_hand_is_reported_by_the_next_full_check() -> None:
    """A held block linked by outside code, the count left: a member by its links, too many (I2)."""
    pool = built()
    held = pool.queue.popleft_n(1)[0]
    held.ref_cnt = 1
    tail = pool.queue.fake_free_list_tail
    last = tail.prev_free_block
    last.next_free_block, held.prev_free_block = held, last  # outside code, not the queue
    held.next_free_block, tail.prev_free_block = tail, held
    assert id(held) in pool.queue._members
    with pytest.raises(InvariantViolation) as caught:
        pool.queue.full_check()
    assert caught.value.invariant == "count_consistency"


def test_a_member_cleared_by_hand_is_reported_by_the_next_operation_that_meets_it() -> None:
    """A member's links set to None by outside code: no member now; its neighbour says so."""
    pool = built()
    first = pool.queue.fake_free_list_head.next_free_block
    first.prev_free_block = first.next_free_block = None
    assert id(first) not in pool.queue._members
    with pytest.raises(InvariantViolation):
        pool.queue.popleft_n(2)
    assert pool.queue.fake_free_list_head.next_free_block is first  # nothing moved


@settings(max_examples=200)
@given(st.lists(st.sampled_from(["none", "prev", "next", "both"]), min_size=1, max_size=8))
def test_the_pool_membership_reads_the_links(states: list[str]) -> None:
    """``in``, ``len``, the views and the snapshot: exactly the blocks with a link set."""
    blocks = [StandInBlock(index, None) for index in range(len(states))]
    other = StandInBlock(99, None)
    for block, state in zip(blocks, states, strict=True):
        if state in ("prev", "both"):
            block.prev_free_block = other
        if state in ("next", "both"):
            block.next_free_block = other
    members = PoolMembership(blocks)
    linked = {
        id(block): block for block, state in zip(blocks, states, strict=True) if state != "none"
    }
    assert [id(block) in members for block in blocks] == [key in linked for key in map(id, blocks)]
    assert len(members) == len(linked)
    assert members.snapshot() == linked
    assert dict(members.items()) == linked
    assert set(members.keys()) == set(linked) == set(members)
    assert id(other) not in members
    assert all(members.pop(id(block)) is block for block in blocks)  # linked or not
    assert members.pop(id(other)) is None
    members[id(other)] = other
    members.update({id(other): other})
    del members[id(blocks[0])]
    assert len(members) == len(linked)  # writes change nothing: the links do
    assert repr(members) == f"<PoolMembership: {len(linked)} of {len(blocks)} blocks linked>"


def test_blocks_of_the_pool_linked_by_another_queue_are_reported_by_the_full_check() -> None:
    """The limit of the pool's membership: another queue's links make members of its blocks."""
    pool = built()
    taken = pool.queue.popleft_n(3)  # free by their counts, but out of the pool's queue (P2)
    other = FreeBlockQueue(taken)
    assert all(id(block) in pool.queue._members for block in taken)
    with pytest.raises(InvariantViolation) as caught:
        pool.queue.full_check()
    assert caught.value.invariant == "count_consistency"
    assert other.get_all_free_blocks() == taken  # reported, nothing moved


class PoolWithoutNullBlock:
    """Four blocks naming the pool, no null block yet: a pool still being built."""

    def __init__(self) -> None:
        self.link = weakref.ref(self)
        self.blocks = [StandInBlock(index, self.link) for index in range(4)]
        self.cached_block_hash_to_block = PrefixCache()


def test_a_queue_of_part_of_a_pool_keeps_check_modes_membership() -> None:
    """Built from some of the pool's blocks, the queue is checked through check mode's path."""
    pool = PoolWithoutNullBlock()  # so that no check of the whole pool runs
    first, second, _, fourth = pool.blocks
    queue = VllmCheckedFreeBlockQueue([first, second])
    assert type(queue._members) is dict
    queue.append(fourth)
    assert fourth in queue
    assert len(queue) == 3
    assert queue.popleft_n(3) == [first, second, fourth]


class FieldRaises(StandInBlock):
    """A block whose ``is_null`` raises once ``broken`` is set."""

    __slots__ = ("broken",)

    @property
    def is_null(self) -> bool:
        if getattr(self, "broken", False):
            raise RuntimeError("is_null cannot be read")
        return False

    @is_null.setter
    def is_null(self, value: bool) -> None:
        del value  # the stand-in is never the null block


@pytest.mark.parametrize(
    "take", [lambda queue: queue.popleft(), lambda queue: queue.popleft_n(2)], ids=["one", "two"]
)
@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_front_block_whose_field_raises_is_named_not_raised(
    kind: type[Any], take: Callable[[Any], object]
) -> None:
    """A field that raises (a property) on the block about to leave: P5, nothing taken."""
    pool = Pool(kind, FieldRaises)
    queue = pool.queue
    first = queue.fake_free_list_head.next_free_block
    first.broken = True
    before = chain(queue)
    with pytest.raises(InvariantViolation) as caught:
        take(queue)
    assert (caught.value.clause, caught.value.blocks) == ("P5", (first,))
    assert "cannot be read" in str(caught.value)
    assert chain(queue) == before


@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_healthy_operations_take_the_one_pass_path(
    kind: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no full check due, no healthy operation runs check mode's own (slower) path."""

    def refuse(*_: object) -> None:
        raise AssertionError("check mode's own path ran on a healthy operation")

    pool = built(kind)  # its first unlink checks the whole pool, through check mode's path
    queue = pool.queue
    for name in LINKING_PATHS:
        monkeypatch.setattr(checked_module, name, refuse)
    first, second, third = queue.popleft_n(3)
    assert queue.popleft_n(0) == []
    third.block_hash = b"cached"
    pool.cached_block_hash_to_block._cache[b"cached"] = third.block_id
    queue.append_n([third])  # a cached block, to the back
    queue.prepend_n([second])  # to the front
    queue.append_n([])
    queue.prepend_n([])
    queue.append(first)
    queue.remove(third)  # a hit on the cached block, from the middle
    queue.append(third)
    assert queue.popleft() is second
    taken = queue.popleft_n(len(queue))  # the whole chain, to the tail
    assert [block.block_id for block in taken] == [4, 5, first.block_id, third.block_id]
    assert chain(queue) == []


#: Check mode's own linking operations, which the one-pass path stands aside for.
LINKING_PATHS = (
    "_checked_popleft",
    "_checked_popleft_n",
    "_checked_remove",
    "_checked_append",
    "_checked_append_n",
    "_checked_prepend_n",
)
