"""Tests of ``verified_queue/_undo.py`` called directly, state by state.

The batch methods reach each undo only from an exception, at whatever point it arrived;
these tests build the states the undo's docstring names by hand (a staged prefix, a run
taken by ``popleft_n``, the first kept block's back link already moved to the head) and
pin every link afterwards, the return value, and which item a cut batch blames. The
blocks are plain :class:`~verified_queue.Block` and sentinels, so that the compiled undo
runs them too; a test that needs a link setter of its own runs on the pure build only.
"""

from __future__ import annotations

from typing import Any

import pytest

import verified_queue
from specs.interrupts import Faults, Interrupted, at_checkpoints, code_objects
from specs.world import Snapshot, World, link_between
from verified_queue import Block
from verified_queue import _undo as undo
from verified_queue.block import Sentinel
from verified_queue.errors import AlreadyInQueueError
from verified_queue.queue import FreeBlockQueue

pure_only = pytest.mark.skipif(
    verified_queue.COMPILED,
    reason="the compiled queue and undo link Block subclasses only, whose links have no setter",
)


class Arrived(BaseException):
    """Stands for what cut a batch short (an interrupt): never a refusal, never a lookup error."""


class LookupRaises:
    """A proxy whose every attribute lookup raises ``KeyError``: not a block, but not None."""

    def __getattr__(self, name: str) -> Any:
        raise KeyError(name)


def _links(nodes: list[Block]) -> Snapshot:
    """Every link of ``nodes``; two are equal when each link is the very same object."""
    return World(nodes, []).snapshot()


def _detached(blocks: list[Block]) -> bool:
    """Whether every one of ``blocks`` has both links None."""
    return all(b.prev_free_block is None and b.next_free_block is None for b in blocks)


def _stage(staging: Block, blocks: list[Block]) -> None:
    """Hang ``blocks`` off ``staging``'s outer link, as the batch loop stages them."""
    last = staging
    for block in blocks:
        block.prev_free_block = last
        last.next_free_block = block
        last = block


# --- means_not_a_block -------------------------------------------------------------------


def test_a_link_error_means_not_a_block_and_a_refusal_never_does() -> None:
    """AttributeError and TypeError mean a bad item wherever the loop stood; a QueueError never."""
    tail = Sentinel("tail")
    blocks = [Block(), Block()]
    for last in (tail, blocks[0]):
        assert undo.means_not_a_block(AttributeError("x"), blocks, last, tail) is True
        assert undo.means_not_a_block(TypeError("x"), blocks, last, tail) is True
        refusal = AlreadyInQueueError("refused")
        assert undo.means_not_a_block(refusal, [LookupRaises()], tail, tail) is False


def test_another_error_means_not_a_block_only_if_the_next_item_raises_it() -> None:
    """A KeyError blames the item right after ``last`` (the first if none was staged), only it.

    The item is found by position: after ``staging`` is the first item, after
    ``batch[i]`` is ``batch[i + 1]``; past the last item nothing is to blame.
    """
    tail = Sentinel("tail")
    b0, b1, b2 = Block(), Block(), Block()
    proxy: Any = LookupRaises()
    error = KeyError("lookup")
    # Nothing staged: the first item is the one the loop stood on.
    assert undo.means_not_a_block(error, [proxy, b1], tail, tail) is True
    assert undo.means_not_a_block(error, [b0, proxy], tail, tail) is False
    # The item right after the last staged one, at each depth.
    assert undo.means_not_a_block(error, [b0, proxy, b2], b0, tail) is True
    assert undo.means_not_a_block(error, [b0, b1, proxy], b1, tail) is True
    assert undo.means_not_a_block(error, [b0, b1, proxy, b2], b1, tail) is True
    assert undo.means_not_a_block(error, [b0, b1, b2, proxy], b2, tail) is True
    # An item after that, or before it, is not the one the loop stood on.
    assert undo.means_not_a_block(error, [b0, b1, b2, proxy], b1, tail) is False
    assert undo.means_not_a_block(error, [proxy, b1, b2], b1, tail) is False
    # Another type of error than the item's lookup raises arrived from outside.
    assert undo.means_not_a_block(ValueError("other"), [b0, proxy], b0, tail) is False


def test_an_error_with_every_item_staged_blames_no_item() -> None:
    """With the whole batch staged the loop stood on no item: none is blamed, not even the first."""
    tail = Sentinel("tail")
    first: Any = LookupRaises()
    b1 = Block()
    assert undo.means_not_a_block(KeyError("late"), [first, b1], b1, tail) is False
    assert undo.means_not_a_block(KeyError("late"), [Block()], tail, tail) is False


# --- unstage -----------------------------------------------------------------------------


def test_unstage_detaches_every_staged_block_and_frees_the_outer_link() -> None:
    """unstage(staging, last) detaches ``staging.next .. last``; the outer link is None again."""
    head, tail = Sentinel("head"), Sentinel("tail")
    queued = [Block(), Block()]
    link_between(head, queued, tail)
    before = _links([head, *queued, tail])
    staged = [Block(), Block(), Block()]
    _stage(tail, staged)
    undo.unstage(tail, staged[-1])
    assert _detached(staged)
    assert tail.next_free_block is None
    assert _links([head, *queued, tail]) == before


def test_unstage_with_nothing_staged_only_frees_the_outer_link() -> None:
    """With ``last`` the staging block itself, unstage sets the outer link None, nothing else."""
    head, tail = Sentinel("head"), Sentinel("tail")
    queued = [Block()]
    link_between(head, queued, tail)
    undo.unstage(tail, tail)
    assert tail.next_free_block is None
    assert tail.prev_free_block is queued[0]
    assert queued[0].prev_free_block is head
    assert queued[0].next_free_block is tail


# --- finish_unstage ----------------------------------------------------------------------


def _queue_with_staged(staged_count: int, batch_tail: list[Any]) -> tuple[Any, ...]:
    """A queue ``head, q0, q1, tail`` with ``staged_count`` fresh blocks staged off its tail.

    Returns the sentinels, the queued blocks, the staged blocks, and the batch: the staged
    blocks followed by ``batch_tail`` (whose ``None`` items are replaced by fresh blocks).
    """
    head, tail = Sentinel("head"), Sentinel("tail")
    queued = [Block(), Block()]
    link_between(head, queued, tail)
    staged = [Block() for _ in range(staged_count)]
    _stage(tail, staged)
    rest = [Block() if item is None else item for item in batch_tail]
    return head, tail, queued, staged, [*staged, *rest]


@pytest.mark.parametrize("staged_count", [1, 2, 3])
def test_finish_unstage_detaches_the_staged_prefix_and_returns_what_arrived(
    staged_count: int,
) -> None:
    """The staged prefix is detached, the refused item (linked in the queue) and the rest untouched.

    The batch: the staged blocks, then a block of the queue (refused), then a
    detached block. The return value is the very exception passed in.
    """
    head, tail, queued, staged, batch = _queue_with_staged(staged_count, [])
    batch += [queued[0], Block()]
    before = _links([head, *queued])
    arrived = Arrived("cut")
    assert undo.finish_unstage(batch, tail, arrived) is arrived
    assert _detached(staged)
    assert _detached([batch[-1]])
    assert tail.next_free_block is None
    assert _links([head, *queued]) == before
    assert tail.prev_free_block is queued[-1]


def test_finish_unstage_with_nothing_staged_leaves_a_refused_first_block_linked() -> None:
    """Refused at the first item, a block of the queue: the undo writes none of its links."""
    head, tail, queued, _, batch = _queue_with_staged(0, [None])
    batch = [queued[1], *batch]
    before = _links([head, *queued, tail])
    arrived = Arrived("cut")
    assert undo.finish_unstage(batch, tail, arrived) is arrived
    assert _links([head, *queued, tail]) == before
    assert _detached(batch[1:])


def test_finish_unstage_with_the_whole_batch_staged_detaches_it_all() -> None:
    """Cut after the loop staged every item (before the join): every item is detached again."""
    head, tail, queued, staged, batch = _queue_with_staged(3, [])
    before = _links([head, *queued])
    arrived = Arrived("cut")
    assert undo.finish_unstage(batch, tail, arrived) is arrived
    assert _detached(staged)
    assert tail.next_free_block is None
    assert _links([head, *queued]) == before


def test_finish_unstage_stops_at_an_item_it_cannot_link() -> None:
    """A non-block after the staged blocks ends the prefix: the blocks before it are detached."""
    _, tail, _, staged, batch = _queue_with_staged(2, [])
    batch.append(None)
    arrived = Arrived("cut")
    assert undo.finish_unstage(batch, tail, arrived) is arrived
    assert _detached(staged)
    assert tail.next_free_block is None


def test_finish_unstage_after_unstage_was_cut_finishes_the_chained_prefix() -> None:
    """unstage cut after detaching the last block: the prefix still chained back is detached.

    The state unstage leaves cut short: ``batch[2]`` detached, ``batch[1]`` with its back
    link only (its forward link cleared), ``batch[0]`` staged.
    """
    _, tail, _, staged, batch = _queue_with_staged(3, [])
    staged[2].prev_free_block = staged[2].next_free_block = None
    staged[1].next_free_block = None
    arrived = Arrived("cut")
    assert undo.finish_unstage(batch, tail, arrived) is arrived
    assert _detached(staged)
    assert tail.next_free_block is None


@pytest.mark.skipif(
    verified_queue.COMPILED,
    reason="compiled, Block's links are native attributes, which cannot be deleted",
)
def test_finish_unstage_reads_a_missing_outer_link_as_none() -> None:
    """A staging block with its outer link deleted: the undo ends (no endless retry), returns."""
    _, tail, _, staged, batch = _queue_with_staged(2, [])
    del tail.next_free_block
    arrived = Arrived("cut")
    assert undo.finish_unstage(batch, tail, arrived) is arrived
    assert _detached(staged)
    assert not hasattr(tail, "next_free_block")


# --- relink_taken ------------------------------------------------------------------------


def _taken(count: int, taken: int) -> tuple[Any, ...]:
    """A queue ``head, b0..b5, tail`` whose ``popleft_n(count)`` was cut after taking ``taken``.

    As the loop leaves it: ``popped[0:taken]`` filled and detached, the rest None; the
    head still names ``b0`` and ``b[taken]`` still names ``b[taken - 1]`` (both are
    written after the loop); ``following`` is ``b[taken]``. Returns the sentinels, the
    blocks, ``popped``, ``following`` and every node's links before the call.
    """
    head, tail = Sentinel("head"), Sentinel("tail")
    blocks = [Block() for _ in range(6)]
    link_between(head, blocks, tail)
    before = _links([head, *blocks, tail])
    popped: list[Block | None] = [None] * count
    for index in range(taken):
        popped[index] = blocks[index]
        blocks[index].prev_free_block = blocks[index].next_free_block = None
    return head, tail, blocks, popped, blocks[taken], before


@pytest.mark.parametrize(("count", "taken"), [(4, 1), (4, 2), (4, 3), (4, 4), (3, 3)])
def test_relink_taken_puts_the_taken_blocks_back_and_returns_none(count: int, taken: int) -> None:
    """Every taken block is linked back where it was; nothing arrived, so it returns None."""
    head, tail, blocks, popped, following, before = _taken(count, taken)
    assert undo.relink_taken(head, popped, following) is None
    assert _links([head, *blocks, tail]) == before


def test_relink_taken_with_nothing_taken_writes_nothing() -> None:
    """Cut before the first block was taken: every slot is None, and no link changes."""
    head, tail, blocks, popped, following, before = _taken(4, 0)
    assert undo.relink_taken(head, popped, following) is None
    assert _links([head, *blocks, tail]) == before
    assert undo.relink_taken(head, [], None) is None
    assert _links([head, *blocks, tail]) == before


def test_relink_taken_follows_the_last_blocks_own_link_when_it_still_has_one() -> None:
    """Cut after a slot was filled but before its block was detached: its own link is the successor.

    ``following`` then still names that very block (read for the block before it), so
    the undo must take the successor from the block's forward link, not from ``following``.
    """
    head, tail, blocks, popped, _, before = _taken(4, 2)
    popped[2] = blocks[2]  # filled; its links not yet read nor cleared
    assert undo.relink_taken(head, popped, blocks[2]) is None
    assert _links([head, *blocks, tail]) == before


def test_relink_taken_restores_the_first_kept_blocks_back_link() -> None:
    """The walk ended and wrote the first kept block's back link (to the head): it is set back.

    The state ``popleft_n`` is in once its loop has taken every block and moved the
    first kept block's back link, when something cuts it before the head's link is
    written: the undo names the last taken block as that block's predecessor again.
    """
    head, tail, blocks, popped, following, before = _taken(3, 3)
    following.prev_free_block = head
    assert undo.relink_taken(head, popped, following) is None
    assert _links([head, *blocks, tail]) == before


def test_relink_taken_of_a_run_that_ran_off_the_chain_writes_no_successor() -> None:
    """A count larger than the chain: the walk took the tail too, and ``following`` is None.

    The undo links the taken nodes back between the head and nothing: the tail gets its
    back link again, and no successor's link is read or written.
    """
    head, tail = Sentinel("head"), Sentinel("tail")
    blocks = [Block(), Block()]
    link_between(head, blocks, tail)
    before = _links([head, *blocks, tail])
    taken: list[Block] = [blocks[0], blocks[1], tail]
    popped: list[Any] = [*taken, None]
    for node in taken:
        node.prev_free_block = node.next_free_block = None
    assert undo.relink_taken(head, popped, None) is None
    assert _links([head, *blocks, tail]) == before


# --- through the queue, with a link setter that writes and then raises ------------------------


class WriteThenRaise:
    """A linkable (pure Python only) whose back-link setter stores the link, then raises once armed.

    Stands for an interrupt that arrives just after the store, inside the setter's own
    code: the write happened, and the exception cuts the operation that made it.
    """

    __slots__ = ("_next", "_prev", "number")
    #: Raise after storing a back link to this object, once.
    armed: object = None

    def __init__(self, number: int) -> None:
        self.number = number
        self._prev: Any = None
        self._next: Any = None

    @property
    def prev_free_block(self) -> Any:
        """The back link."""
        return self._prev

    @prev_free_block.setter
    def prev_free_block(self, value: Any) -> None:
        self._prev = value
        if value is not None and value is WriteThenRaise.armed:
            WriteThenRaise.armed = None
            raise Arrived(f"after storing {self.number}'s back link")

    @property
    def next_free_block(self) -> Any:
        """The forward link."""
        return self._next

    @next_free_block.setter
    def next_free_block(self, value: Any) -> None:
        self._next = value

    def __repr__(self) -> str:
        return f"<block {self.number}>"


@pure_only
def test_popleft_n_cut_just_after_moving_the_first_kept_blocks_back_link_keeps_the_queue() -> None:
    """popleft_n cut right after it wrote the first kept block's back link: all blocks go back.

    The undo sets that link back to the last block taken; the exception is raised, the
    count and the order are as before, and no taken block stays detached.
    """
    blocks = [WriteThenRaise(number) for number in range(5)]
    queue: FreeBlockQueue[Any] = FreeBlockQueue(blocks)
    WriteThenRaise.armed = queue.fake_free_list_head
    try:
        with pytest.raises(Arrived, match="after storing 2's back link"):
            queue.popleft_n(2)
    finally:
        WriteThenRaise.armed = None
    assert len(queue) == 5
    assert queue.get_all_free_blocks() == blocks
    assert blocks[2].prev_free_block is blocks[1]
    assert blocks[1].next_free_block is blocks[2]
    assert blocks[0].prev_free_block is queue.fake_free_list_head
    assert queue.popleft_n(5) == blocks


# --- two exceptions anywhere inside an undo, its code traced as it is when the test runs ------


def _undo_states() -> dict[str, Any]:
    """Each a builder of (call, check): the undo's call, and the check of its result and links."""

    def relink(count: int, taken: int) -> Any:
        def build() -> tuple[Any, Any]:
            head, tail, blocks, popped, following, before = _taken(count, taken)

            def check(returned: object, expected: object) -> bool:
                nodes = [head, *blocks, tail]
                return returned is expected and _links(nodes) == before

            return (lambda: undo.relink_taken(head, popped, following)), check

        return build

    def unstaged(staged_count: int) -> Any:
        def build() -> tuple[Any, Any]:
            head, tail, queued, _, batch = _queue_with_staged(staged_count, [None])
            before = _links([head, *queued])
            cut = Arrived("cut")

            def check(returned: object, expected: object) -> bool:
                return (
                    returned is (cut if expected is None else expected)
                    and _detached(batch)
                    and tail.next_free_block is None
                    and _links([head, *queued]) == before
                )

            return (lambda: undo.finish_unstage(batch, tail, cut)), check

        return build

    return {
        "relink_taken, nothing taken": relink(2, 0),
        "relink_taken, two taken": relink(3, 2),
        "finish_unstage, nothing staged": unstaged(0),
        "finish_unstage, two staged": unstaged(2),
    }


@pure_only
@pytest.mark.parametrize("state", sorted(_undo_states()))
def test_an_undo_returns_the_last_of_two_exceptions_that_arrive_inside_it(state: str) -> None:
    """One exception at any checkpoint of the undo past its start, and a second at any later one.

    The undo completes (every link as it must be) and returns the last exception that
    arrived, or, if none did, what it was given (``None`` for ``relink_taken``). The
    states include an empty one (nothing taken, nothing staged), where the undo has no
    link to write and must still return what arrived. The code objects traced are read
    from the module when the test runs, so the undo's code is traced as it is then.
    """
    codes = code_objects([undo])
    build = _undo_states()[state]
    counting = Faults()
    call, check = build()
    with at_checkpoints(counting, codes):
        returned = call()
    assert check(returned, None)
    assert counting.events > 2
    failures = []
    for one in range(2, counting.events + 2):
        for two in [None, *range(one + 1, counting.events + 4)]:
            faults = Faults(frozenset({one} if two is None else {one, two}))
            call, check = build()
            try:
                with at_checkpoints(faults, codes):
                    returned = call()
            except Interrupted as escaped:
                failures.append(f"faults at {sorted(faults.at)}: {escaped!r} escaped")
                continue
            expected = faults.fired[-1] if faults.fired else None
            if not check(returned, expected):
                failures.append(f"faults at {sorted(faults.at)}: returned {returned!r}")
    assert not failures, f"{len(failures)} faulty outcomes, first: {failures[:3]}"
