"""What the self-check reports when the queue it drives is wrong: which call, and how.

Each queue here gets one kind of call wrong, on purpose, and nothing else. The self-check
must stop at that call and its report (the line ``self-check FAILED ... :`` prints) must
name the call as written in Python, with its arguments, then what the queue did and what
the list model expected: a refusal the queue skipped, an exception it should not have
raised, a wrong result, or a chain the count, the listing or a block's links disagree with
(a chain that loops is reported within the universe's size, not followed forever).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, ClassVar, cast

import pytest

from verified_queue.block import Block, Sentinel
from verified_queue.cli import selfcheck
from verified_queue.errors import QueueError
from verified_queue.queue import FreeBlockQueue

#: A block of the self-check's universe, as its reports write it.
NUMBERED = r"_Numbered\(\d+\)"
#: A batch of such blocks, as its reports write it.
BATCH = rf"\[(?:{NUMBERED}(?:, {NUMBERED})*)?\]"

Condition = Callable[[FreeBlockQueue[Block], tuple[Any, ...]], bool]


def _breaks_after(method: str, when: Condition) -> type[FreeBlockQueue[Block]]:
    """A queue whose ``method`` does its work, then raises ``RuntimeError`` if ``when`` holds."""
    done = getattr(FreeBlockQueue, method)

    def broken(self: FreeBlockQueue[Block], *args: Any) -> object:
        result = done(self, *args)
        if when(self, args):
            raise RuntimeError(f"{method} broke")
        return result

    return cast(
        "type[FreeBlockQueue[Block]]",
        type(f"Breaks_{method}", (FreeBlockQueue,), {"__slots__": (), method: broken}),
    )


def _unexpected(label: str, method: str) -> str:
    """The report of a call, written ``label``, that raised where the list expected success."""
    return rf"{label}: raised RuntimeError\('{method} broke'\), the list expected success"


def _is_numbered(value: object) -> bool:
    """Whether ``value`` is one of the self-check's blocks (not a sentinel, not ``None``)."""
    return isinstance(value, selfcheck._Numbered)


class _PopleftFromEmptyReturnsNone(FreeBlockQueue[Block]):
    """popleft() on an empty queue returns None instead of refusing."""

    __slots__ = ()

    def popleft(self) -> Block:
        if not self:
            return None  # type: ignore[return-value]  # the bug
        return super().popleft()


class _RemoveIgnoresADetachedBlock(FreeBlockQueue[Block]):
    """remove() of a block that is not in the queue does nothing instead of refusing."""

    __slots__ = ()

    def remove(self, block: Block) -> None:
        if _is_numbered(block) and block not in self:
            return
        super().remove(block)


class _AppendIgnoresADoubleFree(FreeBlockQueue[Block]):
    """append() of a block already in the queue does nothing instead of refusing."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        if block not in self:
            super().append(block)


class _AppendTakesItsOwnHead(FreeBlockQueue[Block]):
    """append() of the queue's own head sentinel does nothing instead of refusing."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        if block is not self.fake_free_list_head:
            super().append(block)


class _BatchesIgnoreADoubleFree(FreeBlockQueue[Block]):
    """append_n() and prepend_n() of a batch holding a linked block do nothing, not refuse."""

    __slots__ = ()

    def append_n(self, blocks: Iterable[Block]) -> None:
        if not isinstance(blocks, list) or not any(block in self for block in blocks):
            super().append_n(blocks)

    def prepend_n(self, blocks: Iterable[Block]) -> None:
        if not any(block in self for block in blocks):
            super().prepend_n(blocks)


class _WalkAfterADetachedBlockIsEmpty(FreeBlockQueue[Block]):
    """iter_blocks_after() of a detached block yields nothing instead of refusing."""

    __slots__ = ()

    def iter_blocks_after(self, cursor: Block | None) -> Iterator[Block]:
        if _is_numbered(cursor) and cursor not in self:
            return iter(())
        return super().iter_blocks_after(cursor)


class _ContainsMeansLinked(FreeBlockQueue[Block]):
    """``in`` answers whether the object has a link, so every sentinel is "in" every queue."""

    __slots__ = ()

    def __contains__(self, block: object) -> bool:
        linked = cast("Block", block)
        return linked.prev_free_block is not None or linked.next_free_block is not None


#: The one list popleft_n(0) hands out, whoever asks.
_NO_BLOCKS: list[Block] = []


class _PopleftNothingSharesAList(FreeBlockQueue[Block]):
    """popleft_n(0) returns the same empty list every time, which a caller may fill."""

    __slots__ = ()

    def popleft_n(self, n: Any) -> list[Block]:
        return _NO_BLOCKS if n == 0 else super().popleft_n(n)


class _PopleftNothingTwiceGivesTheFront(FreeBlockQueue[Block]):
    """popleft_n(0) called twice with nothing between hands out the front block the second time.

    Any other use of the queue in between (the self check compares the queue with the
    list after every step) resets it, so only the probe's two calls in a row meet it.
    """

    __slots__ = ()
    zero_pops: ClassVar[int] = 0

    def __getattribute__(self, name: str) -> Any:
        if name != "popleft_n":
            _PopleftNothingTwiceGivesTheFront.zero_pops = 0
        return super().__getattribute__(name)

    def popleft_n(self, n: Any) -> list[Block]:
        if n != 0:
            return super().popleft_n(n)
        _PopleftNothingTwiceGivesTheFront.zero_pops += 1
        if _PopleftNothingTwiceGivesTheFront.zero_pops == 2 and self:
            return [self.fake_free_list_head.next_free_block]  # type: ignore[list-item]
        return []


#: The one list get_all_free_blocks() refills and hands out.
_LISTED: list[Block] = []


class _ListingReusesAList(FreeBlockQueue[Block]):
    """get_all_free_blocks() refills one list and returns it, right but shared by every call."""

    __slots__ = ()

    def get_all_free_blocks(self) -> list[Block]:
        _LISTED[:] = super().get_all_free_blocks()
        return _LISTED


class _IteratorBuildDropsRepeats(FreeBlockQueue[Block]):
    """The constructor, given an iterator, links a repeated block once instead of refusing."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        if not isinstance(blocks, (list, tuple)):
            unique: list[Block] = []
            for block in blocks:
                if all(block is not seen for seen in unique):
                    unique.append(block)
            blocks = unique
        super().__init__(blocks)


class _IteratorBuildCountsNothing(FreeBlockQueue[Block]):
    """The constructor, given an iterator, links its blocks but counts them only if it is sized."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        super().__init__(blocks)
        if not isinstance(blocks, Sized):
            self.num_free_blocks = 0


class _ListBuildSkipsLinkedBlocks(FreeBlockQueue[Block]):
    """The constructor, given a list, leaves out a block linked elsewhere instead of refusing."""

    __slots__ = ()

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        if isinstance(blocks, list):
            blocks = [block for block in blocks if block.next_free_block is None]
        super().__init__(blocks)


class _ListingDropsTheLast(FreeBlockQueue[Block]):
    """get_all_free_blocks() leaves out the back block; the chain and the count are right."""

    __slots__ = ()

    def get_all_free_blocks(self) -> list[Block]:
        return super().get_all_free_blocks()[:-1]


class _RemoveLeavesThePrevLink(FreeBlockQueue[Block]):
    """remove() unlinks the block from the chain but leaves its prev link set."""

    __slots__ = ()

    def remove(self, block: Block) -> None:
        super().remove(block)
        block.prev_free_block = self.fake_free_list_head


class _PopleftNegativeIsNothing(FreeBlockQueue[Block]):
    """popleft_n() of a negative count returns no blocks instead of refusing."""

    __slots__ = ()

    def popleft_n(self, n: Any) -> list[Block]:
        return [] if n < 0 else super().popleft_n(n)


class _WalkAfterAnyHeadIsFromTheFront(FreeBlockQueue[Block]):
    """iter_blocks_after() takes any queue's head sentinel for its own (by role, not identity)."""

    __slots__ = ()

    def iter_blocks_after(self, cursor: Block | None) -> Iterator[Block]:
        if isinstance(cursor, Sentinel) and cursor.role == "head":
            return super().iter_blocks_after(None)
        return super().iter_blocks_after(cursor)


class _AppendClosesACircle(FreeBlockQueue[Block]):
    """append() links the block at the back, then points it at the front block, not the tail."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        super().append(block)
        front = self.fake_free_list_head.next_free_block
        if front is not block:
            block.next_free_block = front


#: A wrong queue, and the whole report (a regular expression) the self-check must give for it.
WRONG_QUEUES: dict[str, tuple[type[FreeBlockQueue[Block]], str]] = {
    # Calls that raise where the list expected success.
    "popleft raises": (
        _breaks_after("popleft", lambda _queue, _args: True),
        _unexpected(r"popleft\(\)", "popleft"),
    ),
    "popleft_n raises": (
        _breaks_after("popleft_n", lambda _queue, args: args[0] > 0),
        _unexpected(r"popleft_n\([1-9]\d*\)", "popleft_n"),
    ),
    "remove raises": (
        _breaks_after("remove", lambda _queue, _args: True),
        _unexpected(rf"remove\({NUMBERED}\)", "remove"),
    ),
    "append raises": (
        _breaks_after("append", lambda _queue, _args: True),
        _unexpected(rf"append\({NUMBERED}\)", "append"),
    ),
    "prepend_n of an empty batch raises": (
        _breaks_after("prepend_n", lambda _queue, args: args[0] == []),
        _unexpected(r"prepend_n\(\[\]\)", "prepend_n"),
    ),
    "the walk from the front raises": (
        _breaks_after("iter_blocks_after", lambda _queue, args: args[0] is None),
        _unexpected(r"iter_blocks_after\(None\)", "iter_blocks_after"),
    ),
    "the walk after a block raises": (
        _breaks_after("iter_blocks_after", lambda _queue, args: _is_numbered(args[0])),
        _unexpected(rf"iter_blocks_after\({NUMBERED}\)", "iter_blocks_after"),
    ),
    "the walk after the head raises": (
        _breaks_after(
            "iter_blocks_after", lambda queue, args: args[0] is queue.fake_free_list_head
        ),
        _unexpected(r"iter_blocks_after\(head\)", "iter_blocks_after"),
    ),
    "the walk after the tail raises": (
        _breaks_after(
            "iter_blocks_after", lambda queue, args: args[0] is queue.fake_free_list_tail
        ),
        _unexpected(r"iter_blocks_after\(tail\)", "iter_blocks_after"),
    ),
    # Calls that succeed where the list refuses.
    "popleft from an empty queue": (
        _PopleftFromEmptyReturnsNone,
        r"popleft\(\): succeeded, the list expected "
        r"EmptyQueueError\('No free blocks available'\)",
    ),
    "remove of a detached block": (
        _RemoveIgnoresADetachedBlock,
        rf"remove\(({NUMBERED})\): succeeded, the list expected "
        r"NotInQueueError\('remove\(\1\): it is not linked in a queue'\)",
    ),
    "append of a block in the queue": (
        _AppendIgnoresADoubleFree,
        rf"append\(({NUMBERED})\): succeeded, the list expected "
        r"AlreadyInQueueError\('append\(\1\): it is already linked in a queue "
        r"\(a double free\?\)'\)",
    ),
    "append of the head sentinel": (
        _AppendTakesItsOwnHead,
        r"append\((<head sentinel at 0x[0-9a-f]+>)\): succeeded, the list expected "
        r"AlreadyInQueueError\('append\(\1\): it is a queue sentinel'\)",
    ),
    "a batch with a block in the queue": (
        _BatchesIgnoreADoubleFree,
        rf"(append_n|prepend_n)\({BATCH}\): succeeded, the list expected "
        rf"AlreadyInQueueError\('\1\({NUMBERED}\): it is (already linked in a queue "
        r"\(a double free\?\)|repeated in the batch)'\)",
    ),
    "popleft_n of a negative count": (
        _PopleftNegativeIsNothing,
        r"popleft_n\((-[1-9]\d*)\): succeeded, the list expected "
        r"NegativeCountError\('popleft_n\(\1\): the count must not be negative'\)",
    ),
    "the walk after another queue's head": (
        _WalkAfterAnyHeadIsFromTheFront,
        r"iter_blocks_after\((<head sentinel at 0x[0-9a-f]+>)\): succeeded, the list expected "
        r"NotInQueueError\(\"iter_blocks_after\(\1\): it is another queue's sentinel\"\)",
    ),
    "the walk after a detached block": (
        _WalkAfterADetachedBlockIsEmpty,
        rf"iter_blocks_after\(({NUMBERED})\): succeeded, the list expected "
        r"NotInQueueError\('iter_blocks_after\(\1\): it is not linked in a queue'\)",
    ),
    "an iterator with a repeated block given to the constructor": (
        _IteratorBuildDropsRepeats,
        rf"queue\(iter\(\[({NUMBERED}), \1\]\)\): succeeded, the list expected "
        r"AlreadyInQueueError\('append_n\(\1\): it is repeated in the batch'\)",
    ),
    "a list with a linked block given to the constructor": (
        _ListBuildSkipsLinkedBlocks,
        rf"queue\(\[{NUMBERED}, ({NUMBERED})\]\): succeeded, the list expected "
        r"AlreadyInQueueError\('append_n\(\1\): it is already linked in a queue "
        r"\(a double free\?\)'\)",
    ),
    # Calls that succeed with a wrong result.
    "sentinels in the queue": (
        _ContainsMeansLinked,
        r"sentinels in queue: returned \[True, True, True, True\], "
        r"the list expected \[False, False, False, False\]",
    ),
    "popleft_n(0) hands out one list": (
        _PopleftNothingSharesAList,
        r"new result lists: returned 'popleft_n\(0\) returned the same list twice: \[\]', "
        r"the list expected 'new lists'",
    ),
    "popleft_n(0) hands out the front on a second call in a row": (
        _PopleftNothingTwiceGivesTheFront,
        rf"new result lists: returned 'popleft_n\(0\) returned \[\] and \[{NUMBERED}\]', "
        r"the list expected 'new lists'",
    ),
    "get_all_free_blocks() hands out one list": (
        _ListingReusesAList,
        r"new result lists: returned 'get_all_free_blocks\(\) returned the same list twice', "
        r"the list expected 'new lists'",
    ),
    "a queue built from an iterator is miscounted": (
        _IteratorBuildCountsNothing,
        rf"queue\(iter\(({BATCH})\)\), emptied: returned 'built \1 \(count 0\)', "
        r"the list expected \1",
    ),
    # The state after a call that returned the right thing.
    "the listing leaves out a block": (
        _ListingDropsTheLast,
        rf"queue holds {BATCH} \(count \d+\), list model {BATCH}",
    ),
    "the chain loops back to the front": (
        _AppendClosesACircle,
        rf"the chain from the head does not reach the tail within 4 blocks \(count \d+\), "
        rf"list model {BATCH}",
    ),
    "a removed block keeps a link": (
        _RemoveLeavesThePrevLink,
        rf"{NUMBERED} is not in the queue but still has links",
    ),
}


@pytest.mark.parametrize("wrong", sorted(WRONG_QUEUES))
def test_the_report_names_the_call_and_what_went_wrong(
    wrong: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queue wrong at one kind of call is reported at that call, arguments and all."""
    queue_class, report_pattern = WRONG_QUEUES[wrong]
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", queue_class)
    # Four blocks: the queue is often empty, full, or one block short of either.
    report = selfcheck.run_self_check(operations=5_000, universe=4)
    assert report.mismatch is not None
    assert re.fullmatch(report_pattern, report.mismatch), report.mismatch


class _TakesSentinelsInBatches(FreeBlockQueue[Block]):
    """append(), append_n() and prepend_n() skip sentinels instead of refusing them."""

    __slots__ = ()

    def append(self, block: Block) -> None:
        if not isinstance(block, Sentinel):
            super().append(block)

    def append_n(self, blocks: Iterable[Block]) -> None:
        super().append_n([block for block in blocks if not isinstance(block, Sentinel)])

    def prepend_n(self, blocks: Iterable[Block]) -> None:
        super().prepend_n([block for block in blocks if not isinstance(block, Sentinel)])


def test_every_fourth_operation_is_a_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probes (sentinels as arguments) start at the fourth operation, not before."""
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", _TakesSentinelsInBatches)
    report = selfcheck.run_self_check(operations=1_000)
    assert report.mismatch is not None
    assert "it is a queue sentinel" in report.mismatch
    assert report.operations == selfcheck._PROBE_EVERY == 4


class _CountsRefusals(FreeBlockQueue[Block]):
    """The production queue, counting the calls it refuses (a call's inner calls not counted)."""

    __slots__ = ()
    refused: ClassVar[int] = 0
    depth: ClassVar[int] = 0


def _counting(method: str) -> Callable[..., object]:
    """``FreeBlockQueue.method``, counting on ``_CountsRefusals`` each refusal of an outer call."""
    done = getattr(FreeBlockQueue, method)

    def counted(self: FreeBlockQueue[Block], *args: Any) -> object:
        _CountsRefusals.depth += 1
        try:
            return done(self, *args)
        except QueueError:
            if _CountsRefusals.depth == 1:
                _CountsRefusals.refused += 1
            raise
        finally:
            _CountsRefusals.depth -= 1

    return counted


_OPERATIONS = (
    "__init__",
    "popleft",
    "popleft_n",
    "remove",
    "append",
    "append_n",
    "prepend_n",
    "iter_blocks_after",
)
for _method in _OPERATIONS:
    setattr(_CountsRefusals, _method, _counting(_method))


def test_the_misuses_rejected_are_the_calls_the_queue_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report's count of misuses rejected is the number of calls the queue refused."""
    monkeypatch.setattr(_CountsRefusals, "refused", 0)
    monkeypatch.setattr(selfcheck, "FreeBlockQueue", _CountsRefusals)
    report = selfcheck.run_self_check(operations=2_000)
    assert report.mismatch is None
    assert report.rejected == _CountsRefusals.refused > 1


@pytest.mark.parametrize("blocks", [4, 5])
def test_a_small_universe_passes(blocks: int) -> None:
    """With a few blocks, all or all but one of them often in the queue, the check passes."""
    report = selfcheck.run_self_check(operations=3_000, universe=blocks)
    assert report.mismatch is None
    assert report.operations == 3_000
