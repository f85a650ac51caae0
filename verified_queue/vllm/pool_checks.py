"""Check mode for vLLM's own ``BlockPool``: its invariants checked from the free queue it uses.

vLLM's ``BlockPool`` has the semantics of :mod:`verified_queue.kvcache.pool`, so it
keeps the same invariants, cited by the same numbers (P1..P5 are stated once, in
that module's docstring). What each means on vLLM's pool, and where it is checked:

* P1: the null block (``pool.null_block``, ``is_null`` set) is never in the free
  queue. Checked at every link and unlink, and over the pool.
* P2: a block is in the free queue exactly when its ``ref_cnt`` is 0 (the null
  block excepted), and no ``ref_cnt`` is below 0; so the free count is the number
  of blocks with ``ref_cnt`` 0. A block that joins or leaves has ``ref_cnt`` 0;
  over the pool, both directions and no count below 0.
* P3: a block carries a ``block_hash`` exactly when the prefix cache maps that hash
  (with its group) to it, and so do the extra hashes vLLM keeps for it in
  ``cached_block_hashes_by_block``. A block with a hash that joins or leaves is
  mapped; over the pool, both directions.
* P5: block ``i`` is ``pool.blocks[i]`` with ``block_id == i``, every block names
  its pool in ``pool``, and only the pool's blocks are in its free queue. A block
  that joins or leaves names this queue's pool; over the pool, every block.

P4 (blocks compared by identity only) is a property of code: it is this module's
own rule, as it is the queue's (I5).

The queue reaches its pool through what vLLM gives: each block's ``pool`` field, a
weak reference to the pool in vLLM 0.34.0 and the pool itself in 0.33.0. A queue
built from a list of blocks that name a pool is that pool's free queue, and the
clauses are checked on it; a queue built otherwise (vLLM's tests of the queue
alone build one from bare blocks) is checked as a queue only.

**When.** A link or unlink is checked in O(1) per block before it changes
anything: a refused one leaves the queue, the pool and every block as they were.
vLLM's pool calls its queue in the middle of its own operations (``free_blocks``
lowers the counts of all its blocks, then links them in two batches), so the full
check, O(pool), runs only where vLLM's pool is between two of its operations: at
the start of an unlink (``popleft``, ``popleft_n``, ``remove``: the first thing
``get_new_blocks`` and ``touch`` do to the pool), every ``full_check_every``
unlinks (adaptive: ``max(1000, number of blocks)``, so O(1) amortized), and when
called (:func:`check_block_pool`, the queues' ``check_block_pool``). The queues
run check mode's full check of the queue there, first, and nowhere else.

A violation is an :class:`~verified_queue.errors.InvariantViolation` of the family
``block_pool`` whose ``clause`` is the P-number, naming the block; ``blocks`` holds
it, so that the trace level adds where it was last linked and unlinked.

The prefix cache is read through its own ``contain`` where a block is known, and its
entries are listed from the two layouts vLLM has shipped (0.33.0's blocks and dicts
of blocks, 0.34.0's block ids); a layout that is neither is refused with
:class:`PoolLayoutError`, naming what it found, rather than checked in part.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Final

from verified_queue.errors import InvariantViolation
from verified_queue.invariants import describe, is_block, violation

__all__ = [
    "FULL_CHECK",
    "PoolLayoutError",
    "check_block_pool",
    "check_moving",
    "pool_is_built",
    "pool_link_of",
]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

#: The full check's name in a diagnostic.
FULL_CHECK: Final = "the check of vLLM's BlockPool"


class PoolLayoutError(RuntimeError):
    """vLLM's pool is not laid out as this module can read it: its clauses cannot be checked."""


def pool_link_of(blocks: object) -> object:
    """The ``pool`` field the blocks of a pool's free queue share, or ``None``.

    ``blocks`` is what the queue was built from: a non-empty list whose first
    item names a pool gives that field's value (a weak reference, or the pool);
    anything else gives ``None``, a queue checked as a queue only.

    Runtime complexity: O(1)
    """
    if type(blocks) is not list or not blocks:
        return None
    return getattr(blocks[0], "pool", None)


def _pool_of(link: object) -> Any:
    """The pool a block's ``pool`` field names (``None`` once a weakly named pool is gone)."""
    if type(link) is weakref.ref:
        return link()
    return link


def check_moving(link: object, blocks: Iterable[Any], where: str, *, joining: bool) -> None:
    """P1, P2, P3, P5 for ``blocks`` about to join (or leave) the free queue of ``link``'s pool.

    Raises the first violation, having changed nothing. ``link`` ``None``: the
    queue is no pool's, nothing is checked. Something that is not a block at
    all is left to the queue, which refuses it.

    Runtime complexity: O(len(blocks)), one cache lookup per block with a hash
    """
    if link is None:
        return
    for block in blocks:
        try:
            if (
                block.ref_cnt != 0
                or block.is_null
                or block.pool is not link
                or (block.block_hash is not None and not _is_cached(link, block))
            ):
                raise _block_violation(link, block, where, joining=joining)
        except InvariantViolation:
            raise
        except Exception as error:  # no ref_cnt, no pool: not one of vLLM's blocks
            if not is_block(block):
                return  # not a block at all: the queue refuses the batch whole, as it should
            raise _not_a_pool_block(block, where, error) from error


def _is_cached(link: object, block: Any) -> bool:
    """P3 for one block with a hash: the prefix cache maps its primary hash to it."""
    pool = _pool_of(link)
    if pool is None:
        return True  # the pool is gone: nothing left to disagree with
    return bool(pool.cached_block_hash_to_block.contain(block.block_hash, block.block_id))


def _block_violation(link: object, block: Any, where: str, *, joining: bool) -> InvariantViolation:
    """The clause ``block`` breaks as it joins (or leaves) the free queue, with its parts."""
    moving = "joins" if joining else "leaves"
    if block.is_null:
        return violation(
            "P1",
            where,
            f"the null block {describe(block)}",
            "never in the free queue, never freed",
            f"it {moving} the free queue",
            blocks=(block,),
        )
    if block.pool is not link:
        return violation(
            "P5",
            where,
            f"the pool of {describe(block)}",
            "the pool whose free queue this is",
            f"{_name_pool(block.pool)}, as it {moving} the free queue",
            blocks=(block,),
        )
    if block.ref_cnt != 0:
        return violation(
            "P2",
            where,
            f"ref_cnt of {describe(block)}",
            "0 (a block is in the free queue exactly when no request holds it)",
            f"{block.ref_cnt!r} as it {moving} the free queue",
            blocks=(block,),
        )
    return violation(
        "P3",
        where,
        f"the prefix cache's entry for the block_hash of {describe(block)}",
        f"its hash mapped to block {block.block_id}",
        f"no such entry as it {moving} the free queue",
        blocks=(block,),
    )


def _not_a_pool_block(block: object, where: str, error: Exception) -> InvariantViolation:
    """P5: the queue of a pool was handed something that is not one of vLLM's pool blocks."""
    return violation(
        "P5",
        where,
        describe(block),
        "a block of the pool whose free queue this is",
        f"an object whose fields cannot be read ({error!r})",
        blocks=(block,),
    )


def _name_pool(link: object) -> str:
    """Name what a block's ``pool`` field holds, for a diagnostic."""
    if link is None:
        return "no pool"
    pool = _pool_of(link)
    if pool is None:
        return "a pool that is gone"
    return f"another pool ({type(pool).__qualname__} at {id(pool):#x})"


# ---------------------------------------------------------------------------
# The full check.


def pool_is_built(link: object) -> bool:
    """Whether ``link`` names a pool there is to check: not gone, out of its ``__init__``.

    vLLM's ``BlockPool.__init__`` takes its null block from the queue (an unlink)
    before it sets ``null_block`` and its prefix cache.

    Runtime complexity: O(1)
    """
    pool = _pool_of(link)
    return pool is not None and all(
        hasattr(pool, name) for name in ("null_block", "blocks", "cached_block_hash_to_block")
    )


def check_block_pool(link: object, members: dict[int, Any], where: str = FULL_CHECK) -> bool:
    """P1, P2, P3, P5 over the whole pool ``link`` names, whose free queue holds ``members``.

    ``members`` is the queue's membership (``id(block) -> block``). Returns
    ``False`` without checking if there is no pool yet to check (no ``link``,
    a pool that is gone, or one still being built, without its ``null_block``),
    ``True`` once it checked; raises the first violation it finds.

    Runtime complexity: O(blocks of the pool + entries of its prefix cache)
    """
    if not pool_is_built(link):
        return False
    pool = _pool_of(link)
    null_block = pool.null_block
    blocks = pool.blocks
    cache = pool.cached_block_hash_to_block
    extra_hashes: dict[int, Any] = getattr(pool, "cached_block_hashes_by_block", {})
    free = 0
    for index, block in enumerate(blocks):
        if block.block_id != index or block.pool is not link:
            named = "this pool" if block.pool is link else _name_pool(block.pool)
            raise violation(
                "P5",
                where,
                f"blocks[{index}] of the pool, {describe(block)}",
                f"block_id {index}, naming this pool",
                f"block_id {block.block_id!r}, naming {named}",
                blocks=(block,),
            )
        member = id(block) in members
        if block is null_block or block.is_null:
            if block is not null_block or member:
                raise violation(
                    "P1",
                    where,
                    describe(block),
                    "the pool's null block alone marked null, and never in the free queue",
                    "in the free queue" if member else "marked null, not the pool's null block",
                    blocks=(block,),
                )
            continue
        count = block.ref_cnt
        if count == 0:
            free += 1
        if count < 0 or (count == 0) is not member:
            raise violation(
                "P2",
                where,
                f"ref_cnt of {describe(block)}",
                "0 exactly for the blocks in the free queue, and never below 0",
                f"{count!r}, {'in' if member else 'not in'} the free queue",
                blocks=(block,),
            )
        primary = block.block_hash
        if primary is not None and not cache.contain(primary, index):
            raise violation(
                "P3",
                where,
                f"the prefix cache's entry for the block_hash of {describe(block)}",
                f"its hash mapped to block {index}",
                "no such entry",
                blocks=(block,),
            )
        for key in extra_hashes.get(index, ()):
            if primary is None or not cache.contain(key, index):
                raise violation(
                    "P3",
                    where,
                    f"an extra hash of {describe(block)} (cached_block_hashes_by_block)",
                    f"beside a primary hash, and mapped to block {index}",
                    "no primary hash" if primary is None else f"no entry for {key!r}",
                    blocks=(block,),
                )
    if free != len(members):
        strangers = [block for block in members.values() if not _is_own(block, blocks)]
        raise violation(
            "P5",
            where,
            "the free queue",
            f"only the pool's blocks: {free} with ref_cnt 0",
            f"{len(members)} blocks, {len(strangers)} of them not the pool's",
            blocks=tuple(strangers[:4]),
        )
    for key, block_id in _cache_entries(cache):
        block = blocks[block_id] if 0 <= block_id < len(blocks) else None
        if block is None or not (key == block.block_hash or key in extra_hashes.get(block_id, ())):
            raise violation(
                "P3",
                where,
                f"the prefix cache's entry {key!r}",
                f"the hash of block {block_id}, which it maps to",
                "no such block" if block is None else f"{describe(block)}",
                blocks=() if block is None else (block,),
            )
    return True


def _is_own(block: Any, blocks: list[Any]) -> bool:
    """Whether ``block`` is the pool's block of its id (by identity, P4)."""
    index = getattr(block, "block_id", None)
    return type(index) is int and 0 <= index < len(blocks) and blocks[index] is block


def _cache_entries(cache: Any) -> Iterator[tuple[Any, int]]:
    """Every ``(hash, block id)`` the prefix cache holds, from either layout vLLM has shipped.

    vLLM 0.34.0: ``_cache`` maps a hash to one block id, and ``_dup_ids`` maps a
    hash several blocks share to all of their ids. vLLM 0.33.0: ``_cache`` maps a
    hash to a block, or to a dict of block id -> block. Raises
    :class:`PoolLayoutError` for anything else.
    """
    table = getattr(cache, "_cache", None)
    if type(table) is not dict:
        raise PoolLayoutError(
            f"vLLM's prefix cache ({type(cache).__qualname__}) keeps no _cache dict: "
            "the pool clause P3 cannot be checked by this version of verified_queue; "
            "use VERIFIED_QUEUE_VLLM=production"
        )
    shared = getattr(cache, "_dup_ids", None)
    for key, held in list(table.items()):
        if type(held) is int:
            ids = shared.get(key) if type(shared) is dict else None
            if ids is None:
                yield key, held
            else:
                yield from ((key, block_id) for block_id in ids)
        elif type(held) is dict:
            yield from ((key, block_id) for block_id in held)
        elif type(getattr(held, "block_id", None)) is int:
            yield key, held.block_id
        else:
            raise PoolLayoutError(
                f"vLLM's prefix cache holds {type(held).__qualname__} under a hash: "
                "the pool clause P3 cannot be checked by this version of verified_queue; "
                "use VERIFIED_QUEUE_VLLM=production"
            )
