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

import dis
import gc
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
from verified_queue import (
    COMPILED,
    AlreadyInQueueError,
    InvariantViolation,
    QueueError,
    WrongTypeError,
)
from verified_queue._messages import batch_argument
from verified_queue.checked import _LINKING_METHODS, _NEVER, CheckedFreeBlockQueue
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
#: The production class's own storage of the count: the true count, past vLLM's counter.
COUNT_SLOT: Any = vars(FreeBlockQueue)["num_free_blocks"]


def raise_true_count(queue: Any) -> None:
    """Damage: the count the queue keeps, one above the blocks it links."""
    COUNT_SLOT.__set__(queue, COUNT_SLOT.__get__(queue) + 1)


class Pool:
    """``SIZE`` blocks naming the pool (weakly, as vLLM does), its queue built as vLLM builds it."""

    def __init__(
        self, kind: type[Any], block: type[StandInBlock] = StandInBlock, *, strong: bool = False
    ) -> None:
        self.link: object = self if strong else weakref.ref(self)
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


#: The queues as shipped, each with its reference.
SHIPPED_AND_REFERENCE = pytest.mark.parametrize(
    ("kind", "reference"),
    [(VllmCheckedFreeBlockQueue, CheckModeOnly), (VllmTracedFreeBlockQueue, TraceModeOnly)],
    ids=["checked", "trace"],
)


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
        """The same chain, counters and pool's countdown, read without a check (which resets it).

        Check mode's own countdown plays no part on a pool's queue (its full check runs
        with the pool's): check mode's operations tick it, the one-pass path does not.
        """
        shipped, reference = (pool.queue for pool in self.pools)
        assert chain(shipped) == chain(reference)
        assert shipped.count_offset == reference.count_offset
        assert shipped._until_pool_check == reference._until_pool_check


def chain(queue: Any) -> list[int]:
    """The block ids linked after the head, read from the links alone."""
    ids: list[int] = []
    node = queue.fake_free_list_head.next_free_block
    while node is not queue.fake_free_list_tail and len(ids) <= SIZE:
        ids.append(node.block_id)
        node = node.next_free_block
    return ids


@SHIPPED_AND_REFERENCE
def test_the_one_pass_path_answers_as_check_mode_does(
    kind: type[Any], reference: type[Any]
) -> None:
    """Healthy steps, the pool's faults, the caller's errors: the same answer and state."""
    machine = type("FastPath", (FastPathMachine,), {"kind": kind, "reference": reference})
    run_state_machine_as_test(machine, settings=settings(max_examples=300, stateful_step_count=30))


# ---------------------------------------------------------------------------
# Damage written by hand, which the pool's membership sees as the links say.


def built(kind: type[Any] = VllmCheckedFreeBlockQueue, *, strong: bool = False) -> Pool:
    """A stand-in pool, its queue's periodic check off (so only the operations see damage)."""
    pool = Pool(kind, strong=strong)
    pool.queue.full_check_every = 0
    pool.queue.full_check()
    return pool


def test_a_true_count_above_the_chain_is_refused_before_anything_moves() -> None:
    """The count the queue keeps, raised by damage: a run to the tail is refused (I2), unchanged."""
    pool = built()
    raise_true_count(pool.queue)  # SIZE, one more than the SIZE - 1 linked
    before = chain(pool.queue)
    for n in (SIZE - 1, SIZE):  # the whole chain, and one more than it
        with pytest.raises(InvariantViolation) as caught:
            pool.queue.popleft_n(n)
        assert caught.value.invariant == "count_consistency"
    assert chain(pool.queue) == before


def test_a_true_count_above_a_chain_of_one_is_refused_by_popleft() -> None:
    """The same damage where ``popleft`` reaches the tail: its last block stays, reported (I2)."""
    pool = built()
    pool.queue.popleft_n(SIZE - 2)  # one block left
    raise_true_count(pool.queue)
    before = chain(pool.queue)
    with pytest.raises(InvariantViolation) as caught:
        pool.queue.popleft()
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


def test_the_pool_membership_reads_a_deleted_link_as_unset() -> None:
    """A link deleted by damage reads as unset: ``in``, ``len`` and the snapshot agree.

    The blocks are no ``Block`` (vLLM's own, as the pure build links them): the compiled
    build's ``Block`` refuses to lose a link.
    """
    blocks = [DuckBlock(index, None) for index in range(3)]
    other = DuckBlock(99, None)
    blocks[0].next_free_block = other
    del blocks[0].prev_free_block  # still linked, by its other link
    del blocks[1].next_free_block  # linked by neither
    members = PoolMembership(blocks)
    assert [id(block) in members for block in blocks] == [True, False, False]
    assert len(members) == 1
    assert members.snapshot() == {id(blocks[0]): blocks[0]}
    assert members.pop(id(other), "none") == "none"
    with pytest.raises(KeyError) as caught:
        members[id(blocks[1])]
    assert caught.value.args == (id(blocks[1]),)


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


@pytest.mark.parametrize("strong", [False, True], ids=["weakly", "strongly"])
@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_healthy_operations_take_the_one_pass_path(
    kind: type[Any],
    strong: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no full check due, no healthy operation runs check mode's own (slower) path.

    Whether the blocks name their pool weakly (vLLM 0.34.0) or strongly.
    """

    # Its first unlink checks the whole pool, by check mode's path.
    pool = built(kind, strong=strong)
    for name in LINKING_PATHS:
        monkeypatch.setattr(checked_module, name, refuse_own_path)
    every_healthy_operation(pool)


def every_healthy_operation(pool: Pool) -> None:
    """Each of the six linking operations on ``pool``'s queue, healthy, at every place."""
    queue = pool.queue
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
    taken = queue.popleft_n(len(chain(queue)))  # the whole chain, to the tail
    assert [block.block_id for block in taken] == [4, 5, first.block_id, third.block_id]
    assert chain(queue) == []
    queue.append_n([])  # nothing, to an empty queue
    queue.prepend_n([])
    queue.prepend_n(taken[:2])  # to an empty queue's front
    queue.remove(taken[0])  # the first block, after the head
    queue.remove(taken[1])  # the only block, between both sentinels
    queue.append(taken[0])  # to an empty queue's back
    assert queue.popleft() is taken[0]  # the only block: the front run reaches the tail
    queue.append(taken[0])
    queue.append_n(taken[1:])
    queue.remove(taken[-1])  # the last block, before the tail
    assert queue.popleft() is taken[0]
    queue.prepend_n([taken[-1]])  # a cached block, to the front (vLLM's evict_first)
    assert queue.popleft() is taken[-1]  # a cached block, from the front
    assert chain(queue) == [block.block_id for block in taken[1:-1]]


def test_the_one_pass_path_counts_past_vllms_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """No healthy operation reads or writes vLLM's counter, the production ones included.

    They count in the production class's own storage: a C field compiled, and
    ``_true_free_blocks`` in the production operations renamed for the pure build.
    """

    def untouched(*_: object) -> None:
        raise AssertionError("vLLM's counter read or written")

    pool = built()
    monkeypatch.setattr(
        VllmCheckedFreeBlockQueue, "num_free_blocks", property(untouched, untouched)
    )
    every_healthy_operation(pool)
    monkeypatch.undo()
    assert pool.queue.num_free_blocks == len(chain(pool.queue))
    pool.queue.full_check()  # raises at any damage


@pytest.mark.skipif(COMPILED, reason="compiled, the production operations are C code")
@pytest.mark.parametrize("name", _LINKING_METHODS)
def test_the_renamed_production_operations_run_the_production_code(name: str) -> None:
    """The same bytecode, constants and lines; only the count's name differs, an attribute only."""
    original = getattr(FreeBlockQueue, name).__code__
    renamed = vars(VllmCheckedFreeBlockQueue)[f"_super_{name}"].__code__
    assert renamed is not original
    assert (renamed.co_code, renamed.co_consts) == (original.co_code, original.co_consts)
    assert list(dis.findlinestarts(renamed)) == list(dis.findlinestarts(original))
    changed = {
        (before, after)
        for before, after in zip(original.co_names, renamed.co_names, strict=True)
        if before != after
    }
    assert changed == {("num_free_blocks", "_true_free_blocks")}
    uses = {i.opname for i in dis.get_instructions(original) if i.argval == "num_free_blocks"}
    assert uses <= {"LOAD_ATTR", "STORE_ATTR"}, uses


@pytest.mark.skipif(COMPILED, reason="compiled, the production operations are C code")
@pytest.mark.parametrize("name", _LINKING_METHODS)
def test_a_production_operation_renamed_again_is_the_one_the_class_runs(name: str) -> None:
    """The rename made once more, where a test sees it made: the class's function, field by field.

    The class's operations were renamed at import, before any test could watch the rename.
    """
    original = getattr(FreeBlockQueue, name)
    renamed = checked_module._on_the_true_count(original)
    installed = vars(VllmCheckedFreeBlockQueue)[f"_super_{name}"]
    assert renamed is not installed
    assert renamed.__code__ == installed.__code__  # every field of the code, its names included
    assert renamed.__code__ != original.__code__
    for field in ("__name__", "__qualname__", "__doc__", "__defaults__", "__module__"):
        assert getattr(renamed, field) == getattr(original, field), field
    assert renamed.__globals__ is original.__globals__
    assert renamed.__closure__ is original.__closure__


def test_the_rename_keeps_a_functions_name_defaults_and_closure() -> None:
    """A function renamed keeps its name, defaults (keyword-only too) and closure.

    The production operations have no defaults and no closure, and their code's name is
    their name: were one to gain any of these, the rename would still keep it.
    """
    step = 2

    def counted(self: Any, extra: int = 1, *, more: int = 4) -> int:
        count: int = self.num_free_blocks
        return count + extra + more + step

    counted.__name__ = "counted_again"  # a name its code does not have

    class Counts:
        _true_free_blocks = 10
        num_free_blocks = 0  # vLLM's counter: what the renamed function must not read

    renamed = checked_module._on_the_true_count(counted)
    assert (renamed.__name__, renamed.__defaults__) == ("counted_again", (1,))
    assert renamed.__kwdefaults__ == {"more": 4}
    assert renamed.__closure__ is counted.__closure__
    assert renamed(Counts()) == 10 + 1 + 4 + 2


#: Check mode's own linking operations, which the one-pass path stands aside for.
LINKING_PATHS = (
    "_checked_popleft",
    "_checked_popleft_n",
    "_checked_remove",
    "_checked_append",
    "_checked_append_n",
    "_checked_prepend_n",
)


# ---------------------------------------------------------------------------
# The production operation under the one-pass path, made faulty: what each fault becomes.


def _nothing(_: Any) -> None:
    """No batch: the operation unlinks."""


def _taken(queue: Any) -> list[Any]:
    """Two blocks taken from the front and let go: a batch that may join."""
    taken: list[Any] = queue.popleft_n(2)
    return taken


#: Each linking operation: how a test calls it on a built pool, what it reads first (a
#: batch to join, or nothing), and how to break what its end check reads once it has run.
OPERATIONS: dict[str, tuple[Callable[[Any, Any], object], Callable[[Any], Any]]] = {
    "popleft": (lambda queue, _: queue.popleft(), _nothing),
    "popleft_n": (lambda queue, _: queue.popleft_n(2), _nothing),
    "remove": (
        lambda queue, _: queue.remove(queue.fake_free_list_head.next_free_block.next_free_block),
        _nothing,
    ),
    "append": (lambda queue, batch: queue.append(batch[0]), _taken),
    "append_n": (lambda queue, batch: queue.append_n(batch), _taken),
    "prepend_n": (lambda queue, batch: queue.prepend_n(batch), _taken),
}


def _break_end(queue: Any, operation: str, fault: str, ends: tuple[Any, Any]) -> None:
    """Break the links the one-pass path's end check reads after ``operation`` ran."""
    before, after = ends
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    if operation in ("popleft", "popleft_n"):
        head.next_free_block.prev_free_block = None  # the new front, cut from the head
    elif operation == "remove":
        before.next_free_block = before  # the junction the removal made, broken
    elif fault == "sentinel's inner link":
        if operation == "prepend_n":
            head.next_free_block = after  # the batch skipped
        else:
            tail.prev_free_block = before
    elif fault == "junction's other link":
        if operation == "prepend_n":
            after.prev_free_block.next_free_block = None  # the batch's last, cut from the old front
        else:
            # The batch's first, cut from the old back.
            before.next_free_block.prev_free_block = None
    elif fault == "sentinel's outer link":
        if operation == "prepend_n":
            head.prev_free_block = head.next_free_block
        else:
            tail.next_free_block = tail.prev_free_block
    elif operation == "prepend_n":
        after.prev_free_block = None  # the old front, cut from the batch
    else:
        before.next_free_block = None  # the old back, cut from the batch


#: Each operation with each fault its production operation may have: a count left one too
#: high, a link left wrong (at the junction with the old chain, either way, or at the
#: sentinel of the end a batch joins), an error a damaged link would raise, any other error.
FAULTS = [
    (operation, fault)
    for operation in OPERATIONS
    for fault in ("count", "links", "type error", "other error")
] + [
    (operation, fault)
    for operation in ("append", "append_n", "prepend_n")
    for fault in ("junction's other link", "sentinel's inner link", "sentinel's outer link")
]


@pytest.mark.parametrize(("operation", "fault"), FAULTS)
@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_fault_of_the_production_operation_is_named_at_its_end(
    kind: type[Any], operation: str, fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A production operation that miscounts, mislinks or raises, run by the one-pass path.

    A count or a link left wrong is reported at the end of the operation (I2, I1); an
    ``AttributeError`` or ``TypeError`` that no damage explains is named as the operation's
    fault (I1); any other exception is no damage and passes as it is.
    """
    pool = built(kind)
    queue = pool.queue
    call, prepare = OPERATIONS[operation]
    batch = prepare(queue)
    production = getattr(kind, f"_super_{operation}")

    def faulty(self: Any, *args: Any) -> object:
        head, tail = self.fake_free_list_head, self.fake_free_list_tail
        ends = (
            (args[0].prev_free_block, args[0].next_free_block)
            if operation == "remove"
            else (tail.prev_free_block, head.next_free_block)
        )
        if fault == "type error":
            raise TypeError("planted")
        if fault == "other error":
            raise LookupError("planted")
        result = production(self, *args)
        if fault == "count":
            raise_true_count(self)
        else:
            _break_end(self, operation, fault, ends)
        return result

    monkeypatch.setattr(kind, f"_super_{operation}", faulty)
    if fault == "other error":
        with pytest.raises(LookupError, match="planted"):
            call(queue, batch)
        return
    with pytest.raises(InvariantViolation) as caught:
        call(queue, batch)
    text = str(caught.value)
    if fault == "type error":
        assert caught.value.clause == "I1"
        assert re.search(rf" broken at {operation}\(\): ", text)
        assert "TypeError: planted" in text
    else:
        assert caught.value.clause == ("I2" if fault == "count" else "I1")
        # Where, exactly: the diagnosis goes on with a position, or a sentinel.
        assert re.search(rf" broken at the end of {operation}\(\)[:,] ", text)
        if fault == "count":  # the count the queue holds and the one it should, one apart
            numbers = re.search(r"num_free_blocks: expected (\d+) \(.*\), found (\d+)", text)
            assert numbers is not None
            assert int(numbers[2]) == int(numbers[1]) + 1


# ---------------------------------------------------------------------------
# Where the one-pass path stands aside: a full check due, and damage it meets.


@pytest.mark.parametrize("until_pool", [2, 1], ids=["none due", "pool's due"])
@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_full_check_runs_at_the_unlink_the_pools_countdown_names(
    kind: type[Any], operation: str, until_pool: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's countdown at 1 runs both full checks at this operation, if it is an unlink.

    The pool's full check runs the queue's first; check mode's own countdown, which
    never runs out on a pool's queue, is not consulted. Until then the one-pass path
    links; when the checks are due it stands aside, and they run before check mode's
    own operation.
    """
    pool = built(kind)
    queue = pool.queue
    call, prepare = OPERATIONS[operation]
    batch = prepare(queue)
    ran: list[str] = []
    own_path = getattr(checked_module, f"_checked_{operation}")
    full_check = kind.full_check
    check_pool_now = checked_module.check_pool_now

    def through_own_path(*args: Any) -> object:
        ran.append("own path")
        return own_path(*args)

    def queue_check(self: Any) -> None:
        ran.append("queue's full check")
        full_check(self)

    def pool_check(*args: Any) -> bool:
        ran.append("pool's full check")
        return check_pool_now(*args)

    monkeypatch.setattr(checked_module, f"_checked_{operation}", through_own_path)
    monkeypatch.setattr(kind, "full_check", queue_check)
    monkeypatch.setattr(checked_module, "check_pool_now", pool_check)
    queue.full_check_every = None  # the default period: 1000 for a pool this small
    queue._until_pool_check[0] = until_pool
    until = queue._until_full_check[0]
    call(queue, batch)
    unlinks = operation in ("popleft", "popleft_n", "remove")
    due = until_pool == 1 and unlinks
    assert ran == (["pool's full check", "queue's full check", "own path"] if due else [])
    # The queue's full check restarts check mode's countdown at never; its operation ticks it.
    assert queue._until_full_check[0] == (_NEVER - 1 if due else until)
    if unlinks:
        assert queue._until_pool_check[0] == (until_pool - 1 if until_pool > 1 else 1000)
    else:
        assert queue._until_pool_check[0] == until_pool


class Elsewhere:
    """An object a damaged block's ``pool`` field may name: another pool, alive."""


ELSEWHERE = Elsewhere()


def _relink(pool: Pool, index: int | str, field: str, target: int | str) -> None:
    """Point a link of block ``index`` (or a sentinel, by name) at ``target`` (the same)."""
    ends: dict[str, Any] = {
        "head": pool.queue.fake_free_list_head,
        "tail": pool.queue.fake_free_list_tail,
    }
    node = ends[index] if isinstance(index, str) else pool.blocks[index]
    setattr(node, field, ends[target] if isinstance(target, str) else pool.blocks[target])


def _splice(pool: Pool, after: int | str) -> None:
    """Link a block of no pool after block ``after`` (or the head), both ways, the count left."""
    queue = pool.queue
    before: Any = queue.fake_free_list_head if isinstance(after, str) else pool.blocks[after]
    stranger = StandInBlock(SIZE, None)
    following = before.next_free_block
    stranger.prev_free_block, stranger.next_free_block = before, following
    before.next_free_block = following.prev_free_block = stranger


#: Damage by outside code beside where an operation works, on blocks 1 to 5 (the chain of a
#: built pool): links pointed elsewhere and pool fields changed, no link cleared, so both
#: memberships (the pool's and a dict) still agree on who is a member.
DAMAGE: dict[str, Callable[[Pool], None]] = {
    "head's outer link": partial(_relink, index="head", field="prev_free_block", target=1),
    "tail's outer link": partial(_relink, index="tail", field="next_free_block", target=5),
    "tail's back link": partial(_relink, index="tail", field="prev_free_block", target=4),
    "first's back link": partial(_relink, index=1, field="prev_free_block", target=4),
    "second's back link": partial(_relink, index=2, field="prev_free_block", target=2),
    "second's next link": partial(_relink, index=2, field="next_free_block", target=5),
    "fourth's back link": partial(_relink, index=4, field="prev_free_block", target=1),
    "last's next link": partial(_relink, index=5, field="next_free_block", target=5),
    "first from elsewhere": lambda pool: setattr(pool.blocks[1], "pool", ELSEWHERE),
    "second from elsewhere": lambda pool: setattr(pool.blocks[2], "pool", ELSEWHERE),
    "fourth from elsewhere": lambda pool: setattr(pool.blocks[4], "pool", ELSEWHERE),
    "last from elsewhere": lambda pool: setattr(pool.blocks[5], "pool", ELSEWHERE),
    "a stranger after the head": partial(_splice, after="head"),
    "a stranger after the first": partial(_splice, after=1),
    "a stranger after the fourth": partial(_splice, after=4),
    "a stranger after the last": partial(_splice, after=5),
}

#: Operations where the damage above lies: the front, the middle (block 3) and the back.
#: The joins link block 3, taken out before the damage.
DAMAGED_STEPS: dict[str, Callable[[Pool], object]] = {
    "popleft": lambda pool: pool.queue.popleft(),
    "popleft_n(2)": lambda pool: pool.queue.popleft_n(2),
    "popleft_n(all)": lambda pool: pool.queue.popleft_n(SIZE - 1),
    "remove the first": lambda pool: pool.queue.remove(pool.blocks[1]),
    "remove the middle": lambda pool: pool.queue.remove(pool.blocks[3]),
    "remove the last": lambda pool: pool.queue.remove(pool.blocks[5]),
    "append": lambda pool: pool.queue.append(pool.blocks[3]),
    "append_n": lambda pool: pool.queue.append_n([pool.blocks[3]]),
    "prepend_n": lambda pool: pool.queue.prepend_n([pool.blocks[3]]),
    "append_n([])": lambda pool: pool.queue.append_n([]),  # vLLM's free_blocks, most steps
    "prepend_n([])": lambda pool: pool.queue.prepend_n([]),
}


def links(pool: Pool) -> list[tuple[object, object]]:
    """Every block's and sentinel's two links, as block ids and sentinel names."""
    queue = pool.queue
    names: dict[int, object] = {
        id(queue.fake_free_list_head): "head",
        id(queue.fake_free_list_tail): "tail",
    }
    names.update({id(block): block.block_id for block in pool.blocks})
    nodes = [queue.fake_free_list_head, queue.fake_free_list_tail, *pool.blocks]
    return [
        (names.get(id(node.prev_free_block)), names.get(id(node.next_free_block))) for node in nodes
    ]


def met_alike(
    kind: type[Any], reference: type[Any], damage: Callable[[Pool], None], step: str
) -> None:
    """Damage a pool of each queue alike, take ``step``: the same answer and links after."""
    pools = []
    for queue_kind in (kind, reference):
        pool = Pool(queue_kind)
        pool.queue.full_check_every = 0  # only the operation meets the damage
        damage(pool)
        pools.append(pool)
    shipped, expected = (outcome(partial(DAMAGED_STEPS[step], pool)) for pool in pools)
    assert shipped == expected
    assert links(pools[0]) == links(pools[1])


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("step", list(DAMAGED_STEPS))
@SHIPPED_AND_REFERENCE
def test_damage_beside_an_operation_is_met_as_check_mode_meets_it(
    kind: type[Any], reference: type[Any], step: str, damage: str
) -> None:
    """Links and pool fields damaged where an operation works: the same answer and links after.

    The one-pass path must stand aside for every such damage it reads, and check mode's
    operation then names it (or, for damage no operation reads, both link alike).
    """

    def beside(pool: Pool) -> None:
        if step in ("append", "append_n", "prepend_n"):
            pool.queue.remove(pool.blocks[3])  # the block to join
        DAMAGE[damage](pool)

    met_alike(kind, reference, beside, step)


#: Damage to an empty queue, where a batch joins next to the other sentinel.
EMPTY_DAMAGE: dict[str, Callable[[Pool], None]] = {
    "tail's back link": lambda pool: setattr(
        pool.queue.fake_free_list_tail, "prev_free_block", pool.blocks[4]
    ),
    "head's next link": lambda pool: setattr(
        pool.queue.fake_free_list_head, "next_free_block", pool.blocks[4]
    ),
    "count one too high": lambda pool: raise_true_count(pool.queue),
}


@pytest.mark.parametrize("damage", list(EMPTY_DAMAGE))
@pytest.mark.parametrize(
    "step", ["append", "append_n", "prepend_n", "append_n([])", "prepend_n([])"]
)
@SHIPPED_AND_REFERENCE
def test_damage_to_an_empty_queue_is_met_as_check_mode_meets_it(
    kind: type[Any], reference: type[Any], step: str, damage: str
) -> None:
    """A sentinel or the count damaged while the queue is empty: a join answers as the reference."""

    def emptied(pool: Pool) -> None:
        pool.queue.popleft_n(SIZE - 1)
        EMPTY_DAMAGE[damage](pool)

    met_alike(kind, reference, emptied, step)


# ---------------------------------------------------------------------------
# The rest of the path's edges.


@pytest.mark.parametrize("operation", ["append", "append_n", "prepend_n"])
@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_joining_block_whose_field_raises_is_named_not_linked(
    kind: type[Any], operation: str
) -> None:
    """A field that raises on a block about to join: P5, the queue and the block unchanged."""
    pool = Pool(kind, FieldRaises)
    queue = pool.queue
    block = queue.popleft_n(1)[0]
    block.broken = True
    before = links(pool)
    with pytest.raises(InvariantViolation) as caught:
        getattr(queue, operation)(block if operation == "append" else [block])
    assert (caught.value.clause, caught.value.blocks) == ("P5", (block,))
    assert links(pool) == before


@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_pool_still_in_its_init_is_not_checked(kind: type[Any]) -> None:
    """A pool with no null block yet: neither check runs, even over damage."""

    class Building:
        """A pool in its ``__init__`` as vLLM 0.34.0's is when it takes the null block.

        Its blocks and prefix cache are set; ``null_block`` is not, yet.
        """

        def __init__(self) -> None:
            self.blocks = [StandInBlock(index, weakref.ref(self)) for index in range(SIZE)]
            self.cached_block_hash_to_block = PrefixCache()

    building = Building()
    queue = kind(list(building.blocks))
    assert type(queue._members) is PoolMembership  # the pool's queue, as vLLM builds it
    raise_true_count(queue)  # damage the queue's own full check would report
    assert queue.check_block_pool() is False


@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_an_empty_batch_takes_the_one_pass_path_when_the_pool_is_gone(
    kind: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty batch reads no hash, so no prefix cache: a pool gone does not turn it aside."""
    pool = built(kind)
    queue = pool.queue
    for name in LINKING_PATHS:
        monkeypatch.setattr(checked_module, name, refuse_own_path)
    del pool
    gc.collect()  # the blocks name the pool weakly: it is gone now
    queue.append_n([])
    queue.prepend_n([])
    assert len(queue.get_all_free_blocks()) == SIZE - 1


@pytest.mark.parametrize("operation", ["append", "append_n", "prepend_n"])
@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_block_with_one_link_set_is_refused_by_check_modes_own_path(
    kind: type[Any], operation: str
) -> None:
    """A block half linked by hand is a member by its links: the join is check mode's to refuse.

    (With a membership dict the same join is refused as a double link; see the module
    docstring of ``verified_queue.vllm.pool_membership`` for what the pool's view sees.)
    """
    pool = built(kind)
    queue = pool.queue
    block = queue.popleft_n(1)[0]
    block.prev_free_block = pool.blocks[3]
    before = links(pool)
    with pytest.raises(InvariantViolation) as caught:
        getattr(queue, operation)(block if operation == "append" else [block])
    assert caught.value.clause == "I2"
    assert f" broken at the start of {operation}(): " in str(caught.value)
    assert links(pool) == before


class DuckBlock:
    """vLLM's block fields and both links, but no :class:`verified_queue.Block`."""

    def __init__(self, block_id: int, link: object) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.pool = link
        self.block_hash = None
        self.is_null = False
        self.prev_free_block: object = None
        self.next_free_block: object = None


@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_batch_the_production_queue_refuses_is_answered_by_check_modes_own_path(
    kind: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-pass test leaves a join's links and type to the production queue.

    A block linked already (either build) and one that is no ``Block`` (the compiled
    build links ``Block`` subclasses only): the production operation refuses the batch
    whole, and check mode's own operation answers it, everything as it was.
    """
    pool = built(kind)
    queue = pool.queue
    ran: list[str] = []
    own_path = checked_module._checked_append_n

    def through_own_path(*args: Any) -> None:
        ran.append("own path")
        own_path(*args)

    monkeypatch.setattr(checked_module, "_checked_append_n", through_own_path)
    block = queue.popleft_n(1)[0]
    queue.append_n([block])
    assert ran == []
    refused: list[tuple[object, type[QueueError]]] = [(block, AlreadyInQueueError)]
    if COMPILED:
        refused.append((DuckBlock(SIZE, pool.link), WrongTypeError))
    for item, error in refused:
        before = links(pool)
        with pytest.raises(error):
            queue.append_n([item])
        assert ran.pop() == "own path"
        assert links(pool) == before


@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_the_full_checks_read_a_snapshot_of_the_membership(
    kind: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue's and the pool's full checks look a block up in a plain dict, not the view."""
    pool = built(kind)

    def no_lookup(*_: object) -> bool:
        raise AssertionError("a full check looked a block up in the pool's view")

    monkeypatch.setattr(PoolMembership, "__contains__", no_lookup)
    pool.queue.full_check()
    assert pool.queue.check_block_pool() is True


def refuse_own_path(*_: object) -> None:
    """Stand in for check mode's own operations where the one-pass path must be taken."""
    raise AssertionError("check mode's own path ran on a healthy operation")


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
@pytest.mark.parametrize("kind", [VllmCheckedFreeBlockQueue, VllmTracedFreeBlockQueue])
def test_a_batch_that_is_no_iterable_is_refused_under_the_operations_name(
    kind: type[Any], operation: str
) -> None:
    """A join given no iterable: the production queue's ``WrongTypeError``, naming the call."""
    pool = built(kind)
    before = links(pool)
    with pytest.raises(WrongTypeError) as caught:
        getattr(pool.queue, operation)(5)
    assert str(caught.value).startswith(f"{operation}(5): expected an iterable of blocks")
    assert links(pool) == before
