"""What the translator cannot express, checked exhaustively on small queues: NOT a proof.

Two parts of the queue's contract are outside what :mod:`specs.proof.translator` reads:

* **copying and pickling** (``__reduce__``, ``__setstate__``, ``__copy__``): the round trip
  runs :mod:`copy`'s and :mod:`pickle`'s machinery and ``Block.__getstate__``, which allocate
  and copy objects; the translator has no model of a new block object or of the reduce
  protocol. :func:`check_copy_and_pickle` runs the real round trips instead.
* **the fault model** (``docs/usage.md``, "Faults"; argued in ``verified_queue/_undo.py``): an
  exception can arrive at any checkpoint of interpreted code, and the undo that then runs
  retries inside ``while True`` loops with ``try``, ``break`` and nested handlers, which the
  translator does not read (it refuses ``break`` and ``try`` inside a loop), and for which no
  loop invariant is stated. :func:`check_faults` injects the exceptions instead.

Both are exhaustive over a stated bound and say so in their report; neither is a proof for
every size. The checkpoints are the project's own: :mod:`specs.interrupts` (a
function's start, before and after a call, a loop's back edge, and on Python 3.10 a taken
conditional jump and a handler's start, in the frames of ``queue.py`` and ``_undo.py``), the
definition ``tests/queue/test_nested_interrupts.py`` uses; on the compiled build no
interpreted code runs inside a method, so the check runs on the pure-Python source only.

The promised depth is the contract's: for ``popleft_n``, ``append_n``, ``prepend_n`` and the
constructor, at most three exceptions in all, the one that cuts the call short (a refusal
included) counted; so up to three injected into an accepted call and up to two into a
refused one, at every combination of checkpoints, those of the undo the first one starts
included. ``popleft``, ``append`` and ``remove`` promise that nothing can arrive between their
writes (blocks with plain link attributes): they get the same combinations. Every outcome
must be *as before* (every link of every block and sentinel of both queues, and both counts,
exactly as they were) or *as after* (exactly as the undisturbed call leaves them); a call that
returns must have had no exception swallowed, and one that raises must raise the exception
that arrived last (or its refusal, if none arrived).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from specs.interrupts import Faults, Interrupted, at_checkpoints, code_objects
from specs.model import SpecBlock
from verified_queue.block import Block
from verified_queue.errors import QueueError
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "COPY_BLOCKS",
    "FAULT_BATCH",
    "FAULT_BLOCKS",
    "BoundedReport",
    "check_copy_and_pickle",
    "check_faults",
]

#: The copy check's bound: every order of every subset of this many blocks.
COPY_BLOCKS = 5
#: The fault check's bounds: queues of up to this many blocks, batches and counts up to...
FAULT_BLOCKS = 3
FAULT_BATCH = 2


@dataclass
class BoundedReport:
    """What an exhaustive check covered, and its first counterexample."""

    cases: int = 0
    runs: int = 0
    seconds: float = 0.0
    counterexample: str | None = None


# -- copying and pickling -------------------------------------------------------------------


def _links(nodes: Sequence[Block]) -> list[tuple[object, object]]:
    return [(node.prev_free_block, node.next_free_block) for node in nodes]


def _same(one: Sequence[object], other: Sequence[object]) -> bool:
    return len(one) == len(other) and all(a is b for a, b in zip(one, other, strict=True))


def _same_links(one: list[tuple[object, object]], other: list[tuple[object, object]]) -> bool:
    return len(one) == len(other) and all(
        a[0] is b[0] and a[1] is b[1] for a, b in zip(one, other, strict=True)
    )


def _copy_problem(  # noqa: PLR0911 -- one return per kind of problem
    queue_class: type, order: Sequence[SpecBlock], rest: list[SpecBlock]
) -> str:
    """What is wrong with the round trips of a queue holding ``order`` ('' if nothing)."""
    queue = queue_class(list(order))
    other = queue_class(rest)  # the blocks outside: a second queue, which must not change
    nodes: list[Block] = [
        *order,
        *rest,
        queue.fake_free_list_head,
        queue.fake_free_list_tail,
        other.fake_free_list_head,
        other.fake_free_list_tail,
    ]
    before = _links(nodes)
    counts = (queue.num_free_blocks, other.num_free_blocks)
    numbers = [block.number for block in order]
    rounds: list[tuple[str, Callable[[Any], Any]]] = [
        ("copy.deepcopy", copy.deepcopy),
        ("pickle", lambda q: pickle.loads(pickle.dumps(q))),
    ]
    for label, round_trip in rounds:
        twin = round_trip(queue)
        if type(twin) is not type(queue):
            return f"{label}: a {type(twin).__name__}, not a {type(queue).__name__}"
        try:
            check_invariants(twin)
        except AssertionError as damage:
            return f"{label}: the copy is damaged: {damage}"
        copied = twin.get_all_free_blocks()
        if [getattr(block, "number", None) for block in copied] != numbers:
            return f"{label}: the copy holds {copied!r}, not copies of {list(order)!r}"
        originals = {id(node) for node in nodes}
        shared = [node for node in (*copied, twin.fake_free_list_head) if id(node) in originals]
        if shared or any(type(a) is not type(b) for a, b in zip(copied, order, strict=True)):
            return f"{label}: the copy shares {shared!r} with the original, or changes a type"
        if not _same_links(_links(nodes), before) or counts != (len(queue), len(other)):
            return f"{label}: the original or the other queue changed"
    try:
        copy.copy(queue)
    except TypeError:
        pass
    else:
        return "copy.copy: a shallow copy was made, sharing the blocks"
    if not _same_links(_links(nodes), before) or counts != (len(queue), len(other)):
        return "copy.copy: the refused shallow copy changed a link or a count"
    return ""


def check_copy_and_pickle(
    queue_class: type = FreeBlockQueue, blocks: int = COPY_BLOCKS
) -> BoundedReport:
    """``copy.deepcopy`` and a pickle round trip of every queue over ``blocks`` blocks.

    Every order of every subset of the blocks in the queue, the others in a second queue.
    Each copy must be of the same class, healthy, hold new blocks of the same types with the
    same numbers in the same order, share no node with the original, and leave both queues
    exactly as they were; ``copy.copy`` must refuse with ``TypeError`` and change nothing.
    The queue class must be importable by its module and name (pickle finds it so).
    """
    report = BoundedReport()
    started = time.perf_counter()
    for size in range(blocks + 1):
        for order in itertools.permutations(range(blocks), size):
            universe = [SpecBlock(number) for number in range(blocks)]
            chosen = [universe[number] for number in order]
            rest = [block for block in universe if all(block is not c for c in chosen)]
            report.cases += 1
            report.runs += 3
            problem = _copy_problem(queue_class, chosen, rest)
            if problem:
                report.counterexample = f"queue {list(order)}: {problem}"
                report.seconds = time.perf_counter() - started
                return report
    report.seconds = time.perf_counter() - started
    return report


# -- the fault model ------------------------------------------------------------------------


@dataclass
class _World:
    """A queue A holding ``blocks[:size]``, a queue B holding one more block, detached blocks."""

    queue: Any
    other: Any
    blocks: list[Block]
    new: Any = None  # the constructor's queue, once built

    def nodes(self) -> list[Block]:
        """Every node whose links the contract covers: the blocks and both queues' sentinels."""
        return [
            *self.blocks,
            self.queue.fake_free_list_head,
            self.queue.fake_free_list_tail,
            self.other.fake_free_list_head,
            self.other.fake_free_list_tail,
        ]

    def label(self, node: object) -> str:
        """A name for ``node`` that another world built alike gives its own counterpart."""
        if node is None:
            return "None"
        for index, block in enumerate(self.blocks):
            if block is node:
                return f"b{index}"
        for owner, queue in (("A", self.queue), ("B", self.other), ("new", self.new)):
            for end in ("head", "tail"):
                if queue is not None and getattr(queue, f"fake_free_list_{end}", None) is node:
                    return f"{owner}.{end}"
        return f"a foreign {node!r}"

    def snapshot(self) -> tuple[tuple[str, ...], tuple[int, int], str]:
        """Every link (by name), both counts, and a new queue's order and health."""
        links = tuple(
            f"{self.label(n.prev_free_block)}<-{self.label(n)}->{self.label(n.next_free_block)}"
            for n in self.nodes()
        )
        order = ""
        if self.new is not None and hasattr(self.new, "fake_free_list_tail"):
            try:
                check_invariants(self.new)
            except AssertionError as damage:
                order = f"damaged: {damage}"
            else:
                order = " ".join(self.label(b) for b in self.new.get_all_free_blocks())
        counts = (self.queue.num_free_blocks, self.other.num_free_blocks)
        return links, counts, order


#: A case: its name, the queue's size, and the call on a world (it returns what the call does).
_Case = tuple[str, int, Callable[[_World], Callable[[], object]], bool]


def _method_call(method: str, *indices: int) -> Callable[[_World], Callable[[], object]]:
    """The call ``A.method(*blocks[i] for i in indices)`` on a world."""

    def call(world: _World) -> Callable[[], object]:
        arguments = [world.blocks[index] for index in indices]
        return lambda: getattr(world.queue, method)(*arguments)

    return call


def _count_call(count: int) -> Callable[[_World], Callable[[], object]]:
    def call(world: _World) -> Callable[[], object]:
        return lambda: world.queue.popleft_n(count)

    return call


def _cases(blocks: int, batch: int) -> Iterator[_Case]:
    """Every call of the contract on queues of up to ``blocks`` blocks: (name, size, call, refused).

    The world has ``blocks + batch + 1`` blocks: A holds the first ``size``, B the last one,
    the rest are detached.
    """
    last = blocks + batch  # B's block
    for size in range(blocks + 1):
        detached = list(range(size, blocks + batch))
        yield "popleft()", size, _method_call("popleft"), size == 0
        yield "append(detached)", size, _method_call("append", size), False
        yield "append(B's block)", size, _method_call("append", last), True
        for at in range(size):
            yield f"remove(A[{at}])", size, _method_call("remove", at), False
        yield "remove(detached)", size, _method_call("remove", size), True
        for count in range(-1, size + 2):
            yield f"popleft_n({count})", size, _count_call(count), not 0 <= count <= size
        for length in range(batch + 1):
            good = detached[:length]
            for method in ("append_n", "prepend_n", "__init__"):
                yield f"{method}(detached x{length})", size, _batch_call(method, good), False
                if size and length:  # refused at its last item: a block of A
                    bad = [*good[: length - 1], 0]
                    name = f"{method}({length - 1} detached, A's first)"
                    yield name, size, _batch_call(method, bad), True
                if length:  # refused at a repeat
                    name = f"{method}(detached x{length}, repeated)"
                    yield name, size, _batch_call(method, [*good, good[0]]), True


def _batch_call(method: str, indices: list[int]) -> Callable[[_World], Callable[[], object]]:
    def call(world: _World) -> Callable[[], object]:
        batch = [world.blocks[i] for i in indices]
        if method == "__init__":
            # Built as type.__call__ builds it, so that the new queue can be inspected even
            # if the exception arrives inside __init__ (a caller would not get it back).
            cls: Any = type(world.queue)
            world.new = cls.__new__(cls)
            return lambda: world.new.__init__(batch)
        return lambda: getattr(world.queue, method)(batch)

    return call


def _world(queue_class: type, size: int, blocks: int, batch: int) -> _World:
    universe: list[Block] = [Block() for _ in range(blocks + batch + 1)]
    return _World(queue_class(universe[:size]), queue_class(universe[-1:]), universe)


def _modules(queue_class: type) -> list[ModuleType]:
    """The queue's module and the undo module it calls (an edited copy's, for a planted bug)."""
    module = sys.modules[queue_class.__module__]
    undo = sys.modules[vars(module)["unstage"].__module__]
    return [module, undo]


def check_faults(
    queue_class: type = FreeBlockQueue,
    blocks: int = FAULT_BLOCKS,
    batch: int = FAULT_BATCH,
    depth: int = 3,
) -> BoundedReport:
    """Exceptions at every combination of up to ``depth`` checkpoints of every call; see above.

    Queues of up to ``blocks`` blocks; batches of up to ``batch`` blocks (detached, or refused
    at a block of the queue or at a repeat); ``popleft_n`` from -1 to ``len + 1``; ``remove``
    of every block and of a detached one; ``append`` of a detached block and of another
    queue's. A refused call gets one exception fewer (its refusal counts).
    """
    codes = code_objects(_modules(queue_class))
    report = BoundedReport()
    started = time.perf_counter()
    for name, size, make, refused in _cases(blocks, batch):
        report.cases += 1
        # The undisturbed run: its checkpoints, and the state it ends in.
        world = _world(queue_class, size, blocks, batch)
        before = world.snapshot()
        counting = Faults()
        call = make(world)
        with at_checkpoints(counting, codes), contextlib.suppress(QueueError):
            call()
        after = world.snapshot()
        # The undo's checkpoints come after the first exception's: a few more than counted.
        events = range(1, counting.events + 8)
        allowed = depth - 1 if refused else depth
        for chosen in itertools.chain.from_iterable(
            itertools.combinations(events, k) for k in range(1, allowed + 1)
        ):
            report.runs += 1
            problem = _faulted(queue_class, make, size, blocks, batch, codes, frozenset(chosen))
            if problem is None:
                continue
            ok = problem in (before, after)
            if isinstance(problem, str) or not ok:
                detail = problem if isinstance(problem, str) else "neither as before nor as after"
                report.counterexample = (
                    f"{name} on a queue of {size}, exceptions at checkpoints {sorted(chosen)}: "
                    f"{detail}"
                )
                report.seconds = time.perf_counter() - started
                return report
    report.seconds = time.perf_counter() - started
    return report


def _faulted(  # noqa: PLR0917 -- the world's recipe, then the faults
    queue_class: type,
    make: Callable[[_World], Callable[[], object]],
    size: int,
    blocks: int,
    batch: int,
    codes: set[Any],
    chosen: frozenset[int],
) -> Any:
    """Run one call with exceptions at ``chosen``: its end state, or what is wrong ('' none)."""
    world = _world(queue_class, size, blocks, batch)
    faults = Faults(chosen)
    call = make(world)
    raised: BaseException | None = None
    with at_checkpoints(faults, codes):
        try:
            call()
        except (Interrupted, QueueError) as error:
            raised = error
    if not faults.fired:
        return None  # no checkpoint chosen was reached: the undisturbed run again
    if raised is None:
        return f"returned, but {faults.fired!r} arrived: an exception was swallowed"
    if raised is not faults.fired[-1]:
        return f"raised {raised!r}, not the last exception that arrived, {faults.fired[-1]!r}"
    return world.snapshot()
