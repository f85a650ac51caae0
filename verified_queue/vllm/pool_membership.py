"""A pool's free-queue membership read from the pool itself: :class:`PoolMembership`.

Check mode keeps a queue's membership as a dict ``id(block) -> block`` that every
link and unlink updates (see :mod:`verified_queue.checked`). On a pool of
100,000 blocks that dict is the dearest part of check mode inside vLLM: its
entries lie as scattered in memory as the blocks, and the insert and the pop of
each block freed and taken cost about as much as vLLM's own ``get_new_blocks``
and ``free_blocks`` together (docs/vllm.md, "What each mode costs").

A pool's free queue needs no such record, because the pool keeps it already:
the queue holds only the pool's blocks (P5), and a block is linked exactly while
it is in the queue (I4: a detached block has both links ``None``). So here the
members are the pool's blocks whose links are set, read when asked, and linking
or unlinking a block changes the membership by itself. This view gives check
mode's code the dict it reads (``in``, ``len``, ``pop``, ``values``, ``keys``);
the writes check mode makes after each link and unlink change nothing, because
the links already did.

It holds for the queue built from the pool's whole block list, as vLLM's pool
builds its one free queue (``verified_queue.vllm.checked.read_membership_from_pool``
tests that); a queue of part of a pool keeps the dict.

What it cannot see that the dict saw: a pool block linked or unlinked by anything
but this queue, by code writing its links or by another queue built over the
pool's blocks (either breaks the pool's P2 by itself), is a member (or not) at
once: ``in`` says so, and ``remove`` takes such a block out of the other queue's
chain. The queue's count, which only the queue writes, then differs from the
membership's size: check mode's count test at the next operation that reads it,
and the full check, report it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import compress, repeat
from operator import attrgetter, is_not, or_
from typing import Any

__all__ = ["PoolMembership"]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True


_PREVIOUS = attrgetter("prev_free_block")
_NEXT = attrgetter("next_free_block")


def _is_linked(block: Any) -> bool:
    """I4: whether ``block`` has a link set (a link deleted by damage reads as unset)."""
    return (
        getattr(block, "prev_free_block", None) is not None
        or getattr(block, "next_free_block", None) is not None
    )


class PoolMembership(dict[int, Any]):
    """The membership of a pool's free queue: the pool's blocks whose links are set.

    Built from the pool's blocks (``id(block) -> block``, kept for the pool's
    life: vLLM never adds or drops one); every read looks at their links. The
    dict it derives from is empty: the writes check mode makes (``members[i] =
    block``, ``del``, ``update``, ``pop``) leave it so.

    Runtime complexity: ``in`` and ``pop`` O(1); ``len``, ``keys``, ``values``
    and iteration O(blocks of the pool), which check mode reads only where it
    diagnoses, runs a full check (from a :meth:`snapshot`), or is not on vLLM's
    path (``len(queue)``).

    >>> from verified_queue import Block, FreeBlockQueue
    >>> blocks = [Block() for _ in range(3)]
    >>> members = PoolMembership(blocks)
    >>> queue = FreeBlockQueue(blocks[:2])
    >>> id(blocks[0]) in members, id(blocks[2]) in members, len(members)
    (True, False, 2)
    >>> queue.remove(blocks[0])
    >>> id(blocks[0]) in members, len(members)
    (False, 1)
    """

    __slots__ = ("_blocks",)

    # id(block) -> block for each of the pool's blocks, in the pool's order: its values and
    # its items are walked in step by the C-speed passes of len() and snapshot().
    _blocks: dict[int, Any]

    def __init__(self, blocks: Iterable[Any]) -> None:
        """Read membership from ``blocks``, the pool's blocks, from now on."""
        super().__init__()
        self._blocks = {id(block): block for block in blocks}

    def __contains__(self, key: object) -> bool:
        """Whether the block whose ``id`` is ``key`` is the pool's and linked."""
        block = self._blocks.get(key)  # type: ignore[call-overload]  # any key: a miss
        return block is not None and _is_linked(block)

    def __len__(self) -> int:
        """The number of the pool's blocks that are linked."""
        try:
            return sum(self._linked_flags())
        except AttributeError:  # a link slot deleted by damage: block by block
            return sum(map(_is_linked, self._blocks.values()))

    def snapshot(self) -> dict[int, Any]:
        """A plain dict ``id(block) -> block`` of the linked blocks, as they are now.

        A full check reads it in place of the view: one lookup a block at C
        speed, where the view's ``in`` is a Python call.
        """
        try:
            return dict(compress(self._blocks.items(), self._linked_flags()))
        except AttributeError:  # a link slot deleted by damage: block by block
            return {key: block for key, block in self._blocks.items() if _is_linked(block)}

    def _linked_flags(self) -> Iterator[bool]:
        """Whether each of the pool's blocks has a link set, in C (no Python call a block)."""
        order = self._blocks.values()
        return map(
            or_,
            map(is_not, map(_PREVIOUS, order), repeat(None)),
            map(is_not, map(_NEXT, order), repeat(None)),
        )

    def __iter__(self) -> Iterator[int]:
        """The ids of the linked blocks, as they are when it starts."""
        return iter(self.snapshot())

    def __getitem__(self, key: int) -> Any:
        """The linked block whose ``id`` is ``key``; ``KeyError`` if there is none."""
        if key not in self:
            raise KeyError(key)
        return self._blocks[key]

    def keys(self) -> Any:
        """A key view of the linked blocks' ids, as they are now."""
        return self.snapshot().keys()

    def values(self) -> Any:
        """A value view of the linked blocks, as they are now."""
        return self.snapshot().values()

    def items(self) -> Any:
        """An item view of the linked blocks, as they are now."""
        return self.snapshot().items()

    def pop(self, key: int, default: Any = None) -> Any:
        """The pool's block whose ``id`` is ``key``, linked or not (``default`` if none).

        Check mode pops each block it has just unlinked: the block has left by
        then, and the pop proves it was the pool's.
        """
        return self._blocks.get(key, default)

    def __setitem__(self, key: int, value: Any) -> None:
        """Nothing: linking ``value`` made it a member."""

    def __delitem__(self, key: int) -> None:
        """Nothing: unlinking the block made it leave."""

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: linking the blocks made them members."""

    def __repr__(self) -> str:
        """Name the view and its size, not every block."""
        return f"<PoolMembership: {len(self)} of {len(self._blocks)} blocks linked>"
