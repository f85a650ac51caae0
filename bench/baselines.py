"""The designs the queue is measured against, written from their published descriptions.

* :class:`PreChangeQueue`: vLLM's first free-block queue. Head and tail
  pointers without sentinels, so ``remove`` must decide whether the block is
  an end, and it does so with ``==`` on a ``@dataclass`` block: the generated
  ``__eq__`` builds and compares a tuple of every field. ``popleft`` goes
  through ``remove``. It had no batch methods: the allocator looped.
* :class:`PostChangeQueue`: vLLM's current design. A fake head and a fake tail
  block, identity only, ``popleft_n``/``append_n``, and the checks that design
  carries (its ``assert`` statements are on, as in a default interpreter).
* :class:`OrderedDictQueue`: ``collections.OrderedDict`` keyed by
  ``id(block)``, the C doubly linked list a user might pick instead.

Each baseline uses the block type of its own design, with the fields of
vLLM's ``KVCacheBlock``. The first two have no ``prepend_n`` (vLLM added it
later), so the ``prepend`` workload leaves them out. The reference row is not
here: it is vLLM 0.33.0's own ``FreeKVCacheBlockQueue`` and ``KVCacheBlock``,
executed from the vllm wheel when one is available (see
:func:`bench.subjects.vllm_release_subject`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "OrderedDictQueue",
    "PostChangeBlock",
    "PostChangeQueue",
    "PreChangeBlock",
    "PreChangeQueue",
]


@dataclass
class PreChangeBlock:
    """vLLM's block before the change: a plain ``@dataclass`` with a generated ``__eq__``."""

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    prev_free_block: PreChangeBlock | None = None
    next_free_block: PreChangeBlock | None = None


class PreChangeQueue:
    """Head and tail pointers, no sentinels; ``remove`` finds the ends with ``==``."""

    def __init__(self, blocks: Sequence[PreChangeBlock]) -> None:
        """Link ``blocks`` in order, the way the original constructor did."""
        count = len(blocks)
        self.num_free_blocks = count
        self.free_list_head: PreChangeBlock | None = blocks[0] if count else None
        self.free_list_tail: PreChangeBlock | None = blocks[-1] if count else None
        for index in range(count):
            if index > 0:
                blocks[index].prev_free_block = blocks[index - 1]
            if index < count - 1:
                blocks[index].next_free_block = blocks[index + 1]

    def __len__(self) -> int:
        """Return the number of free blocks."""
        return self.num_free_blocks

    def popleft(self) -> PreChangeBlock:
        """Detach the front block through ``remove``."""
        if not self.free_list_head:
            raise ValueError("No free blocks available")
        block = self.free_list_head
        self.remove(block)
        return block

    def remove(self, block: PreChangeBlock) -> None:
        """Unlink ``block``; moving the end pointers needs ``==`` (the generated ``__eq__``)."""
        if block.prev_free_block is not None:
            block.prev_free_block.next_free_block = block.next_free_block
        if block.next_free_block is not None:
            block.next_free_block.prev_free_block = block.prev_free_block
        if block == self.free_list_head:
            self.free_list_head = block.next_free_block
        if block == self.free_list_tail:
            self.free_list_tail = block.prev_free_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: PreChangeBlock) -> None:
        """Link ``block`` after the tail pointer."""
        if self.free_list_tail is not None:
            self.free_list_tail.next_free_block = block
            block.prev_free_block = self.free_list_tail
            self.free_list_tail = block
        else:
            self.free_list_head = block
            self.free_list_tail = block
        self.num_free_blocks += 1

    def popleft_n(self, n: int) -> list[PreChangeBlock]:
        """Pop ``n`` blocks one at a time, as the allocator of that design did."""
        popleft = self.popleft
        return [popleft() for _ in range(n)]

    def append_n(self, blocks: Iterable[PreChangeBlock]) -> None:
        """Append the blocks one at a time, as the allocator of that design did."""
        append = self.append
        for block in blocks:
            append(block)

    def get_all_free_blocks(self) -> list[PreChangeBlock]:
        """Return the free blocks front first."""
        found = []
        block = self.free_list_head
        while block is not None:
            found.append(block)
            block = block.next_free_block
        return found


@dataclass(slots=True)
class PostChangeBlock:
    """vLLM's block after the change: a slotted dataclass carrying its own links."""

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    prev_free_block: PostChangeBlock | None = None
    next_free_block: PostChangeBlock | None = None
    is_null: bool = False


class PostChangeQueue:
    """Fake head and tail blocks, identity only, with the checks of that design."""

    def __init__(self, blocks: Sequence[PostChangeBlock]) -> None:
        """Link ``blocks`` in order between the two fake blocks."""
        count = len(blocks)
        self.num_free_blocks = count
        for index in range(count):
            if index > 0:
                blocks[index].prev_free_block = blocks[index - 1]
            if index < count - 1:
                blocks[index].next_free_block = blocks[index + 1]
        self.fake_free_list_head = PostChangeBlock(block_id=-1)
        self.fake_free_list_tail = PostChangeBlock(block_id=-1)
        if count:
            self.fake_free_list_head.next_free_block = blocks[0]
            blocks[0].prev_free_block = self.fake_free_list_head
            self.fake_free_list_tail.prev_free_block = blocks[-1]
            blocks[-1].next_free_block = self.fake_free_list_tail
        else:
            self.fake_free_list_head.next_free_block = self.fake_free_list_tail
            self.fake_free_list_tail.prev_free_block = self.fake_free_list_head

    def __len__(self) -> int:
        """Return the number of free blocks."""
        return self.num_free_blocks

    def popleft(self) -> PostChangeBlock:
        """Detach the block after the fake head."""
        if (
            self.fake_free_list_head.next_free_block is self.fake_free_list_tail
            or self.fake_free_list_head.next_free_block is None
        ):
            raise ValueError("No free blocks available")
        first_block = self.fake_free_list_head.next_free_block
        if first_block.next_free_block is None:
            raise RuntimeError("popleft() found a block without a successor")
        self.fake_free_list_head.next_free_block = first_block.next_free_block
        first_block.next_free_block.prev_free_block = self.fake_free_list_head
        first_block.prev_free_block = first_block.next_free_block = None
        self.num_free_blocks -= 1
        return first_block

    def popleft_n(self, n: int) -> list[PostChangeBlock]:
        """Detach the first ``n`` blocks in one walk."""
        if n == 0:
            return []
        assert self.num_free_blocks >= n  # the check of the design being measured
        self.num_free_blocks -= n
        current = self.fake_free_list_head.next_free_block
        popped = []
        for _ in range(n):
            assert current is not None  # the check of the design being measured
            popped.append(current)
            last = current
            current = current.next_free_block
            last.prev_free_block = None
            last.next_free_block = None
        if current is not None:
            self.fake_free_list_head.next_free_block = current
            current.prev_free_block = self.fake_free_list_head
        return popped

    def remove(self, block: PostChangeBlock) -> None:
        """Bridge the neighbours of ``block``; the fake blocks mean no end cases."""
        if block.prev_free_block is None or block.next_free_block is None:
            raise RuntimeError(f"remove() called on an invalid block: {block.block_id}")
        block.prev_free_block.next_free_block = block.next_free_block
        block.next_free_block.prev_free_block = block.prev_free_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: PostChangeBlock) -> None:
        """Link ``block`` before the fake tail."""
        if self.fake_free_list_tail.prev_free_block is None:
            raise RuntimeError("the fake tail lost its predecessor")
        last_block = self.fake_free_list_tail.prev_free_block
        last_block.next_free_block = block
        block.prev_free_block = last_block
        block.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = block
        self.num_free_blocks += 1

    def append_n(self, blocks: Sequence[PostChangeBlock]) -> None:
        """Link ``blocks`` before the fake tail in one pass, without checking them."""
        if len(blocks) == 0:
            return
        self.num_free_blocks += len(blocks)
        last_block = self.fake_free_list_tail.prev_free_block
        assert last_block is not None  # the check of the design being measured
        for block in blocks:
            block.prev_free_block = last_block
            last_block.next_free_block = block
            last_block = block
        last_block.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = last_block

    def get_all_free_blocks(self) -> list[PostChangeBlock]:
        """Return the free blocks front first."""
        found = []
        block = self.fake_free_list_head.next_free_block
        while block is not None and block is not self.fake_free_list_tail:
            found.append(block)
            block = block.next_free_block
        return found


class OrderedDictQueue:
    """``OrderedDict`` keyed by ``id(block)``: C links, but a hash-table entry per block."""

    def __init__(self, blocks: Iterable[object]) -> None:
        """Insert ``blocks`` in order."""
        self._blocks: OrderedDict[int, object] = OrderedDict((id(block), block) for block in blocks)

    def __len__(self) -> int:
        """Return the number of free blocks."""
        return len(self._blocks)

    def popleft(self) -> object:
        """Pop the oldest entry."""
        return self._blocks.popitem(last=False)[1]

    def popleft_n(self, n: int) -> list[object]:
        """Pop the ``n`` oldest entries."""
        popitem = self._blocks.popitem
        return [popitem(last=False)[1] for _ in range(n)]

    def remove(self, block: object) -> None:
        """Delete the entry of ``block``."""
        del self._blocks[id(block)]

    def append(self, block: object) -> None:
        """Insert ``block`` as the newest entry (a repeated key would silently stay put)."""
        self._blocks[id(block)] = block

    def append_n(self, blocks: Iterable[object]) -> None:
        """Insert the blocks as the newest entries, in order."""
        entries = self._blocks
        for block in blocks:
            entries[id(block)] = block

    def prepend_n(self, blocks: Iterable[object]) -> None:
        """Insert the blocks as the oldest entries, keeping their order."""
        entries = self._blocks
        move_to_end = entries.move_to_end
        for block in reversed(list(blocks)):
            entries[id(block)] = block
            move_to_end(id(block), last=False)

    def get_all_free_blocks(self) -> list[object]:
        """Return the free blocks front first."""
        return list(self._blocks.values())
