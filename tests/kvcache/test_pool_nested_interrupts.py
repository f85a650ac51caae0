"""Each pool call cut short at any checkpoint, and again at any later one, ends as before or after.

The exceptions are injected deterministically (:mod:`specs.interrupts`) at every point
where the interpreter can run a signal handler: in the frames of the pool and its repairs
(``pool.py``, ``_repair.py``) and, on the pure build, of the queue and its undo (``queue.py``,
``_undo.py``); on the compiled build those two run as native code, and an interrupt can land
only in the pool's frames, right after a native call returns among them. Each case is run with
one exception at each checkpoint, and with a second at each later one (the undo's own
checkpoints included). After each run the pool's invariants (P1-P5), the queue's (I1-I4) and
the state (the free order, every count, every hash and the cache, the counters) must be the
state before the call or the state after it; an exception that arrived must be raised, the last
one to arrive, and a call that returns must have returned undisturbed. The depth promised is
the queue's (``verified_queue._undo``): ``test_three_exceptions_...`` takes it to three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

import pytest

import verified_queue
from specs.interrupts import Faults, Interrupted, at_checkpoints, code_objects
from tests.kvcache.pool_support import InterruptedAfterTakingQueue
from verified_queue import _undo as undo_module
from verified_queue import queue as queue_module
from verified_queue.invariants import check_invariants
from verified_queue.kvcache import _repair as repair_module
from verified_queue.kvcache import pool as pool_module
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import hash_request_tokens
from verified_queue.kvcache.pool import BlockPool

#: The frames an interrupt can land in: the pool's and its repairs' (interpreted on both
#: builds) and, on the pure build, the queue's and its undo's.
CODES: set[CodeType] = code_objects(
    [pool_module, repair_module]
    if verified_queue.COMPILED
    else [pool_module, repair_module, queue_module, undo_module]
)
BUILD = "compiled build: the pool's frames" if verified_queue.COMPILED else "pure build"


@dataclass
class World:
    """A case's pools, and the call under test."""

    pools: list[BlockPool]
    call: Callable[[], object]
    #: get_new_blocks hands its blocks to the caller: raising, it must leave all as before.
    before_only: bool = False
    #: The pool's invariants hold before the call (a case of misuse breaks P2 on purpose).
    consistent: bool = True


def _state(pools: list[BlockPool]) -> tuple[object, ...]:
    """Everything a pool call may change: free order, counts, hashes, cache, counters."""
    return tuple(
        (
            [block.block_id for block in pool.free_block_queue.get_all_free_blocks()],
            [block.ref_cnt for block in pool.blocks],
            [block.block_hash for block in pool.blocks],
            # The entries' order within a hash names the oldest block; the keys' order nothing.
            {key: list(cached) for key, cached in pool.cached_block_hash_to_block.items()},
            (
                pool.num_allocated,
                pool.num_freed,
                pool.num_freed_lifo,
                pool.num_evicted,
                pool.num_touched,
            ),
        )
        for pool in pools
    )


def _cached(caching: bool = True, factory: Any = None) -> tuple[BlockPool, list[KVCacheBlock]]:
    """A pool of 10 whose free queue holds cached blocks, two keys cached twice, out of id order.

    Returns the pool and the blocks of a request still held: 8 (its hash cached under
    a key of its own) and 9 (no hash). Free, front first: 7, 4, 3, 2, 1, 6, 5.
    """
    pool = BlockPool(10, enable_caching=caching, queue_factory=factory)
    keys = hash_request_tokens(list(range(6)), 2)
    first = pool.get_new_blocks(4)  # 1, 2, 3 full; 4 partial
    pool.cache_full_blocks(first, keys, 0, 3)
    second = pool.get_new_blocks(3)  # the same prompt in the same step: 5, 6 cached again
    pool.cache_full_blocks(second, keys, 0, 2)
    held = pool.get_new_blocks(2)  # 8, 9
    pool.cache_full_blocks(held, hash_request_tokens([9, 9], 2), 0, 1)
    pool.free_blocks(reversed(first))
    pool.free_blocks(reversed(second))
    return pool, held


def get_new_blocks(caching: bool) -> World:
    # Takes 7, 4, 3, 2, 1 (out of id order), evicting 3's own key and 2's and 1's shared ones.
    pool, _ = _cached(caching)
    return World([pool], lambda: pool.get_new_blocks(5), before_only=True)


def get_new_blocks_from_a_queue_that_raises(caching: bool) -> World:
    # The pool never gets the list: it finds the taken blocks by their counts (P2).
    pool = BlockPool(8, enable_caching=caching, queue_factory=InterruptedAfterTakingQueue)
    pool.get_new_blocks(2)  # 1, 2: held
    queue = pool.free_block_queue
    assert isinstance(queue, InterruptedAfterTakingQueue)
    queue.armed = True
    return World([pool], lambda: pool.get_new_blocks(3), before_only=True)


def free_blocks(caching: bool, evict_first: bool = False) -> World:
    # A request's blocks, one listed twice (held twice), one also held by another request.
    pool = BlockPool(8, enable_caching=caching)
    keys = hash_request_tokens(list(range(6)), 2)
    blocks = pool.get_new_blocks(4)  # 1, 2, 3 full; 4 partial
    pool.cache_full_blocks(blocks, keys, 0, 3)
    pool.touch([blocks[1], blocks[2]])  # 2 and 3 held twice
    freed = [*reversed(blocks), blocks[2]]  # 4, 3, 2, 1, 3: 2 stays held once
    return World([pool], lambda: pool.free_blocks(freed, evict_first=evict_first))


def free_blocks_of_two_pools(caching: bool) -> World:
    # A deferred free that mixes two pools' blocks: the other's go back through its weak ref.
    ours, theirs = BlockPool(5, enable_caching=caching), BlockPool(5, enable_caching=caching)
    keys = hash_request_tokens(list(range(2)), 2)
    mine, others = ours.get_new_blocks(2), theirs.get_new_blocks(2)
    ours.cache_full_blocks(mine, keys, 0, 1)
    theirs.cache_full_blocks(others, keys, 0, 1)
    freed = [others[1], mine[1], others[0], mine[0]]
    return World([ours, theirs], lambda: ours.free_blocks(freed))


def touch(caching: bool) -> World:
    # Hits out of the middle (6, then 2 twice), one block already held, and the null block.
    pool, held = _cached(caching)
    hits = [pool.blocks[6], pool.blocks[0], pool.blocks[2], held[0], pool.blocks[2]]
    return World([pool], lambda: pool.touch(hits))


def touch_twice_then_free(caching: bool) -> World:
    # A block listed twice before a free one: cut after the two, the repair must count both
    # listings to know the first removed it, and still remove the free one after them.
    pool, held = _cached(caching)
    hits = [pool.blocks[2], pool.blocks[2], held[0], pool.blocks[6], pool.blocks[3]]
    return World([pool], lambda: pool.touch(hits))


def touch_refused(caching: bool) -> World:
    # A block free by its count yet in no queue (P2 broken by outside code) is refused where
    # touch reaches it, interrupted or not: the blocks before it stay touched.
    pool, held = _cached(caching)
    lost = held[1]
    lost.ref_cnt = 0
    hits = [pool.blocks[6], held[0], pool.blocks[2], lost, pool.blocks[1]]
    return World([pool], lambda: pool.touch(hits), consistent=False)


def cache_full_blocks(caching: bool) -> World:
    # New keys, and one already cached in another block (the entry grows).
    pool, _ = _cached(caching)
    blocks = pool.get_new_blocks(4)  # 7, 4, 3, 2 (their hashes evicted)
    keys = hash_request_tokens([0, 1, 2, 3, 7, 7, 7, 7], 2)  # the first two keys shared
    return World([pool], lambda: pool.cache_full_blocks(blocks, keys, 1, 4))


def reset_prefix_cache(caching: bool) -> World:
    pool, held = _cached(caching)
    pool.free_blocks(held)
    return World([pool], pool.reset_prefix_cache)


#: Every case, by name. Caching off, cache_full_blocks and reset_prefix_cache change nothing
#: (no key is ever cached), so those two run with caching on only.
CASES: dict[str, Callable[[], World]] = {
    "get_new_blocks": lambda: get_new_blocks(True),
    "get_new_blocks, caching off": lambda: get_new_blocks(False),
    "get_new_blocks from a queue that raises": lambda: get_new_blocks_from_a_queue_that_raises(
        True
    ),
    "free_blocks": lambda: free_blocks(True),
    "free_blocks, caching off": lambda: free_blocks(False),
    "free_blocks, evict_first": lambda: free_blocks(True, evict_first=True),
    "free_blocks of two pools": lambda: free_blocks_of_two_pools(True),
    "free_blocks of two pools, caching off": lambda: free_blocks_of_two_pools(False),
    "touch": lambda: touch(True),
    "touch, caching off": lambda: touch(False),
    "touch of a block the queue refuses": lambda: touch_refused(True),
    "touch of a block listed twice, then free ones": lambda: touch_twice_then_free(True),
    "cache_full_blocks": lambda: cache_full_blocks(True),
    "reset_prefix_cache": lambda: reset_prefix_cache(True),
}


#: What a case's call does undisturbed: the state before and after, and what it raises.
Expected = tuple[object, object, "type[BaseException] | None"]


def _undisturbed(name: str) -> Expected:
    """The state before and after the case's call, run with no fault, and what it raised."""
    world = EVERY_CASE[name]()
    before = _state(world.pools)
    refused: type[BaseException] | None = None
    try:
        world.call()
    except (
        Interrupted,
        verified_queue.QueueError,
    ) as error:  # by design: InterruptedAfterTakingQueue, misuse
        refused = type(error)
    return before, _state(world.pools), refused


def _run(name: str, faults: Faults, expected: Expected) -> str:  # noqa: PLR0911 -- one return per verdict
    """Run case ``name`` with ``faults``; return what is wrong with the outcome, or ``""``."""
    before, after, refused = expected
    world = EVERY_CASE[name]()
    assert _state(world.pools) == before
    raised: BaseException | None = None
    with at_checkpoints(faults, CODES):
        try:
            world.call()
        except (Interrupted, verified_queue.QueueError) as error:
            raised = error
        except Exception as error:  # reported as a faulty outcome, not raised
            return f"faults at {sorted(faults.at)}: raised {error!r}"
    where = f"faults at {sorted(faults.at)}"
    try:
        for pool in world.pools:
            if world.consistent:
                pool.check_consistency()
            check_invariants(pool.free_block_queue, pool=pool.blocks[1:])
    except AssertionError as damage:  # InvariantViolation, and BlockPoolError's P-messages
        return f"{where}: {damage}"
    except verified_queue.QueueError as damage:
        return f"{where}: {damage}"
    state = _state(world.pools)
    if raised is None:
        if faults.fired or refused is not None:
            return f"{where}: returned, though {faults.fired or refused} should have been raised"
        return "" if state == after else f"{where}: returned, but not as after"
    if raised in faults.fired:
        # An interrupt is raised only if it arrived last: none is lost under another.
        if raised is not faults.fired[-1]:
            return f"{where}: raised {raised!r}, not the last to arrive, {faults.fired[-1]!r}"
    elif type(raised) is not refused:
        return f"{where}: raised {raised!r}, which the case does not raise"
    elif state != after:
        return f"{where}: raised {raised!r}, but not as the call ends undisturbed"
    if state == before or (state == after and not world.before_only):
        return ""
    return f"{where}: raised {raised!r}, neither as before nor as after"


def _every_pair(name: str) -> tuple[int, list[str]]:
    """One fault at each event and a second at each later one; return the runs and failures."""
    expected = _undisturbed(name)
    counting = Faults()
    assert _run(name, counting, expected) == ""
    outcomes = []
    for one in range(1, counting.events + 2):
        faults = Faults(frozenset({one}))
        outcomes.append(_run(name, faults, expected))
        # The second fault may fall in the repair: its events come after the first fault.
        for two in range(one + 1, faults.events + 2):
            outcomes.append(_run(name, Faults(frozenset({one, two})), expected))
    return len(outcomes) + 1, [outcome for outcome in outcomes if outcome]


def _two_blocks(caching: bool = True) -> tuple[BlockPool, list[KVCacheBlock]]:
    """A pool of 4 whose request holds 1 (cached) and 2 (partial)."""
    pool = BlockPool(4, enable_caching=caching)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(blocks, hash_request_tokens([5, 5], 2), 0, 1)
    return pool, blocks


def small_get_new_blocks() -> World:
    pool, blocks = _two_blocks()
    pool.free_blocks(blocks[:1], evict_first=True)  # free: 1 (cached), 3
    return World([pool], lambda: pool.get_new_blocks(1), before_only=True)


def small_free_blocks(cached: bool) -> World:
    pool, blocks = _two_blocks()
    freed = blocks[:1] if cached else blocks[1:]  # 1 to the back, or 2 to the front
    return World([pool], lambda: pool.free_blocks(freed))


def small_touch() -> World:
    pool, blocks = _two_blocks()
    pool.free_blocks(blocks[:1])  # free: 3, 1 (cached)
    return World([pool], lambda: pool.touch(blocks))  # 1 out of the queue, 2 held again


def small_cache_full_blocks() -> World:
    pool, blocks = _two_blocks()
    return World(
        [pool], lambda: pool.cache_full_blocks(blocks, hash_request_tokens([5, 5, 6, 6], 2), 1, 2)
    )


def small_reset_prefix_cache() -> World:
    pool, blocks = _two_blocks()
    pool.free_blocks(blocks)
    return World([pool], pool.reset_prefix_cache)


#: Small cases for three exceptions: every triple of checkpoints is too many on the cases above.
SMALL: dict[str, Callable[[], World]] = {
    "small get_new_blocks": small_get_new_blocks,
    "small free_blocks, to the back": lambda: small_free_blocks(True),
    "small free_blocks, to the front": lambda: small_free_blocks(False),
    "small touch": small_touch,
    "small cache_full_blocks": small_cache_full_blocks,
    "small reset_prefix_cache": small_reset_prefix_cache,
}
#: Every case, for _run.
EVERY_CASE = {**CASES, **SMALL}


def _every_triple(name: str) -> tuple[int, list[str]]:
    """One, two and three faults, each at every checkpoint after the one before; runs, failures."""
    expected = _undisturbed(name)
    counting = Faults()
    assert _run(name, counting, expected) == ""
    outcomes = []
    for one in range(1, counting.events + 2):
        once = Faults(frozenset({one}))
        outcomes.append(_run(name, once, expected))
        for two in range(one + 1, once.events + 2):
            twice = Faults(frozenset({one, two}))
            outcomes.append(_run(name, twice, expected))
            for three in range(two + 1, twice.events + 2):
                outcomes.append(_run(name, Faults(frozenset({one, two, three})), expected))
    return len(outcomes) + 1, [outcome for outcome in outcomes if outcome]


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_exception_at_every_checkpoint_and_a_second_at_every_later_one(name: str) -> None:
    """One exception at any checkpoint, and another at any later one: as before, or as after."""
    runs, failures = _every_pair(name)
    assert not failures, f"{BUILD}: {len(failures)} of {runs} runs faulty, first: {failures[:3]}"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_three_exceptions_at_any_checkpoints_hold_and_a_burst_of_four_can_damage(
    name: str,
) -> None:
    """The depth promised, three exceptions in all, holds at every checkpoint; four may not.

    The fourth is the boundary ``verified_queue._undo`` states for the queue, which
    the pool keeps: a burst of four exceptions at consecutive checkpoints (what a
    raising timer faster than the interpreter delivers) leaves some call damaged.
    This pins the depth, so that a change that moves it fails here and updates
    the contract.
    """
    runs, failures = _every_triple(name)
    assert not failures, f"{BUILD}: {len(failures)} of {runs} runs faulty, first: {failures[:3]}"
    expected = _undisturbed(name)
    counting = Faults()
    assert _run(name, counting, expected) == ""
    bursts = [
        _run(name, Faults(frozenset(range(first, first + 4))), expected)
        for first in range(1, counting.events + 8)
    ]
    assert any(bursts), f"{BUILD}: no burst of four damaged {name}: the depth has moved"


class _Steps(repair_module.Repair):
    """A repair of ``count`` idempotent steps whose first run raises, as a repair cut short does."""

    __slots__ = ("done", "faults")

    def __init__(self, count: int, faults: Faults) -> None:
        super().__init__()
        self.done = [False] * count
        self.faults = faults

    def run(self) -> None:
        if self.phase == 0:
            self.phase = 1
            error = Interrupted("the repair's own first run")
            self.faults.fired.append(error)  # arrived, in time order with the injected ones
            raise error
        while True:
            if self.index >= len(self.done):
                break
            self.done[self.index] = True
            self.index += 1


def test_finish_runs_a_repair_to_its_end_and_returns_what_arrived_last() -> None:
    """One exception at any checkpoint of ``finish`` or the repair, after the repair's own one.

    The repair's first run raises by itself, so that ``finish``'s inner handler runs and
    its loops turn: an exception injected there, at the inner loop's back edge or in the
    handler, is caught by the outer handler, which must keep it as the one to return.
    """
    codes = code_objects([repair_module]) | {_Steps.run.__code__}
    counting = Faults()
    error = Interrupted("cut the call short")
    with at_checkpoints(counting, codes):
        assert repair_module.finish(_Steps(3, counting), error) is counting.fired[-1]
    failures = []
    # From the second event: the first is finish's own start, before its loops, which the
    # method's next handler covers (a call to finish cut short there is made again).
    for at in range(2, counting.events + 2):
        faults = Faults(frozenset({at}))
        steps = _Steps(3, faults)
        with at_checkpoints(faults, codes):
            returned = repair_module.finish(steps, error)
        if returned is not faults.fired[-1] or not all(steps.done):
            failures.append(f"fault at {at}: returned {returned!r}, steps {steps.done}")
    assert not failures, failures
