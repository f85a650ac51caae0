"""``python -m verified_queue [selfcheck]``: the queue checked step by step against a plain list.

This is what ``python -m verified_queue`` runs on a user's machine: a quick,
dependency-free answer to "does the installed queue behave like a list?". The
full verification (stateful machines, contracts, the exhaustive check) lives
in the repository's ``specs/`` and ``tests/``, which the wheel does not ship;
so this module keeps a small list oracle of its own (``_random_step``,
``_probe``, ``_compare``) rather than the one in ``specs/model.py``.

The oracle predicts every refusal word for word, not only its class: the operation
and the argument it names, and the reason, chosen from the list's state (whether
the block is in the list, earlier in the same batch, or a sentinel). The reasons
are written out below (``_DOUBLE_FREE`` and the rest) rather than taken from
``verified_queue._messages``, so that a builder naming the wrong block, the wrong
operation or the wrong reason is a mismatch, not a second copy of the same mistake.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from verified_queue.block import Block
from verified_queue.cli import PROG
from verified_queue.cli.progress import Progress
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
    QueueError,
)
from verified_queue.queue import FreeBlockQueue

__all__ = ["SelfCheckReport", "add_arguments", "positive_int", "run", "run_self_check"]


class _Numbered(Block):
    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"_Numbered({self.number})"


#: Every this many operations, one is a probe (see :func:`_probe`) instead of a random call.
_PROBE_EVERY = 4

# The reasons the queue gives for refusing an argument (see the module docstring).
_DOUBLE_FREE = "it is already linked in a queue (a double free?)"
_REPEATED = "it is repeated in the batch"
_A_SENTINEL = "it is a queue sentinel"
_NOT_LINKED = "it is not linked in a queue"
_SENTINEL_STAYS = "it is a queue sentinel, which never leaves its queue"
_FOREIGN_SENTINEL = "it is another queue's sentinel"
#: What popleft() on an empty queue says (vLLM's words, which its callers match).
_NO_FREE_BLOCKS = "No free blocks available"


@dataclass
class SelfCheckReport:
    """What the self-check did: operations run, misuses rejected, and the first mismatch."""

    operations: int = 0
    rejected: int = 0
    mismatch: str | None = None


def _position(items: list[_Numbered], block: _Numbered) -> int | None:
    """Index of ``block`` in ``items`` by identity (``list.index`` would use ``==``), or
    ``None`` if it is not there."""
    for index, item in enumerate(items):
        if item is block:
            return index
    return None


def run_self_check(
    operations: int = 20_000,
    universe: int = 64,
    seed: int = 0,
    progress: Callable[[int], object] | None = None,
) -> SelfCheckReport:
    """Run ``operations`` random calls, misuse included, on a queue and on a list side by side.

    Stops at the first difference in a result, an error (its class or its exact
    message), the order of the blocks (as linked, listed and iterated), the
    count or a block's links, and reports it. Every fourth operation is a
    probe from a fixed cycle instead: sentinels handed to every operation, the
    constructor given a repeated or linked block or an iterator, and the lists
    results come in, which must be new on every call. ``operations`` and
    ``universe`` below 1 raise ``ValueError``: a check of nothing must not pass.
    ``progress``, if given, is called with the number of operations run after each.

    Runtime complexity: O(operations * universe)

    >>> run_self_check(operations=500).mismatch is None
    True
    >>> run_self_check(operations=-5)
    Traceback (most recent call last):
    ...
    ValueError: operations: expected at least 1, not -5
    """
    if operations < 1:
        raise ValueError(f"operations: expected at least 1, not {operations}")
    if universe < 1:
        raise ValueError(f"universe: expected at least 1 block, not {universe}")
    rng = random.Random(seed)
    blocks = [_Numbered(i) for i in range(universe)]
    queue: FreeBlockQueue[_Numbered] = FreeBlockQueue(blocks[: universe // 2])
    model: list[_Numbered] = blocks[: universe // 2]
    # Another queue, for sentinels that are not this queue's.
    other: FreeBlockQueue[_Numbered] = FreeBlockQueue()
    report = SelfCheckReport()
    while report.operations < operations and report.mismatch is None:
        report.operations += 1
        if report.operations % _PROBE_EVERY == 0:
            step = _probe(report.operations // _PROBE_EVERY, queue, other, blocks, model)
        else:
            step = _random_step(rng, blocks, model)
        expected = f"{step.error.__name__}({step.message!r})" if step.error else "success"
        try:
            got = step.call(queue)
        except QueueError as exc:
            report.rejected += 1
            if step.error is None or not isinstance(exc, step.error) or str(exc) != step.message:
                report.mismatch = f"{step.label}: raised {exc!r}, the list expected {expected}"
        except Exception as exc:  # a broken queue may fail in any way: a finding, not a crash
            report.mismatch = f"{step.label}: raised {exc!r}, the list expected {expected}"
        else:
            if step.error is not None:
                report.mismatch = f"{step.label}: succeeded, the list expected {expected}"
            elif got != step.result:  # lists of _Numbered compare by identity
                report.mismatch = (
                    f"{step.label}: returned {got!r}, the list expected {step.result!r}"
                )
        if report.mismatch is None:
            report.mismatch = _compare(queue, model, blocks)
        if progress is not None:
            progress(report.operations)
    return report


@dataclass
class _Step:
    """One call on the queue and what the list model says it must do.

    ``error`` and ``message``: the class and the exact text of the refusal, if the
    list refuses the call; ``result``: what the call returns otherwise.
    """

    label: str
    call: Callable[[FreeBlockQueue[_Numbered]], object]
    error: type[QueueError] | None
    result: object = None
    message: str | None = None


def _refusal(operation: str, argument: object, reason: str) -> str:
    """The text of the refusal of ``operation(argument)`` for ``reason``."""
    return f"{operation}({argument!r}): {reason}"


def _batch_refusal(
    operation: str, batch: Sequence[_Numbered], model: list[_Numbered]
) -> str | None:
    """Why the list model refuses to take ``batch``, word for word, or ``None`` if it takes it.

    The first block of the batch that may not join names the refusal: one met earlier
    in the same batch, or one already in the list. (A batch holding a sentinel is a
    probe's, which names its refusal itself.)
    """
    members = {id(block) for block in model}
    seen: set[int] = set()
    for item in batch:
        if id(item) in seen:
            return _refusal(operation, item, _REPEATED)
        if id(item) in members:
            return _refusal(operation, item, _DOUBLE_FREE)
        seen.add(id(item))
    return None


def _random_step(  # noqa: PLR0911 -- one early return per kind of call reads best
    rng: random.Random, blocks: list[_Numbered], model: list[_Numbered]
) -> _Step:
    """Pick a random call, apply it to ``model`` if the list would accept it, and describe it."""
    block = rng.choice(blocks)
    where = _position(model, block)
    roll = rng.random()
    if roll < 0.2:
        if not model:
            return _Step(
                "popleft()", FreeBlockQueue.popleft, EmptyQueueError, None, _NO_FREE_BLOCKS
            )
        return _Step("popleft()", FreeBlockQueue.popleft, None, model.pop(0))
    if roll < 0.35:
        n = rng.randint(-2, len(model) + 2)
        step = _Step(f"popleft_n({n})", lambda q: q.popleft_n(n), None, model[:n])
        if n > len(model):
            step.error = EmptyQueueError
            step.message = f"popleft_n({n}) from a FreeBlockQueue with {len(model)} free blocks"
        elif n < 0:
            step.error = NegativeCountError
            step.message = f"popleft_n({n}): the count must not be negative"
        else:
            del model[:n]
        return step
    if roll < 0.5:
        label = f"remove({block!r})"
        if where is None:
            refusal = _refusal("remove", block, _NOT_LINKED)
            return _Step(label, lambda q: q.remove(block), NotInQueueError, None, refusal)
        del model[where]
        return _Step(label, lambda q: q.remove(block), None)
    if roll < 0.7:
        label = f"append({block!r})"
        if where is not None:
            refusal = _refusal("append", block, _DOUBLE_FREE)
            return _Step(label, lambda q: q.append(block), AlreadyInQueueError, None, refusal)
        model.append(block)
        return _Step(label, lambda q: q.append(block), None)
    if roll < 0.8:
        # A walk resumed from a cursor: None (the front) or any block, linked or not.
        cursor = None if rng.random() < 0.2 else block
        label = f"iter_blocks_after({cursor!r})"
        if cursor is None:
            return _Step(label, lambda q: _walk_after(q, None), None, list(model))
        if where is None:
            refusal = _refusal("iter_blocks_after", cursor, _NOT_LINKED)
            return _Step(label, lambda q: _walk_after(q, cursor), NotInQueueError, None, refusal)
        return _Step(label, lambda q: _walk_after(q, cursor), None, model[where + 1 :])
    # At most 4, and never more than the universe holds (a universe of 1 to 3 is allowed).
    batch = rng.sample(blocks, rng.randint(0, min(4, len(blocks))))
    if batch and rng.random() < 0.1:
        batch.append(batch[0])  # a block repeated within one batch
    at_front = roll >= 0.9  # half of the batches go to the front
    name = "prepend_n" if at_front else "append_n"

    def call(queue: FreeBlockQueue[_Numbered]) -> None:
        if at_front:
            queue.prepend_n(batch)
        else:
            queue.append_n(batch)

    refused = _batch_refusal(name, batch, model)
    if refused is not None:
        return _Step(f"{name}({batch!r})", call, AlreadyInQueueError, None, refused)
    if at_front:
        model[0:0] = batch
    else:
        model.extend(batch)
    return _Step(f"{name}({batch!r})", call, None)


def _probe(
    index: int,
    queue: FreeBlockQueue[_Numbered],
    other: FreeBlockQueue[_Numbered],
    blocks: list[_Numbered],
    model: list[_Numbered],
) -> _Step:
    """The ``index``-th probe of a cycle of calls that a correct queue answers without change.

    Each sentinel (this queue's and another's) given to ``append``, ``append_n``,
    ``prepend_n``, ``remove`` and ``iter_blocks_after``; ``in``; the constructor with a
    repeated block in an iterator, with a linked block, and from an iterator (the new
    queue is emptied again); and whether result lists are new on every call.
    """
    members = {id(block) for block in model}
    detached = [block for block in blocks if id(block) not in members]
    sentinels: list[Block] = [
        queue.fake_free_list_head,
        queue.fake_free_list_tail,
        other.fake_free_list_head,
        other.fake_free_list_tail,
    ]
    # Each probe is built only when its turn comes: its label and message cost reprs.
    probes: list[Callable[[], _Step]] = []
    for sentinel in sentinels:
        # The batch's numbered block is detached, so its sentinel names the refusal.
        batch: list[Block] = [*detached[:1], sentinel]
        for operation, argument, error, reason in (
            ("append", sentinel, AlreadyInQueueError, _A_SENTINEL),
            ("append_n", batch, AlreadyInQueueError, _A_SENTINEL),
            ("prepend_n", batch, AlreadyInQueueError, _A_SENTINEL),
            ("remove", sentinel, NotInQueueError, _SENTINEL_STAYS),
        ):
            probes.append(
                functools.partial(_refused_probe, operation, argument, error, sentinel, reason)
            )
    probes += [
        lambda: _Step(
            "iter_blocks_after(head)", _call("iter_blocks_after", sentinels[0]), None, model[:]
        ),
        lambda: _Step(
            "iter_blocks_after(tail)", _call("iter_blocks_after", sentinels[1]), None, []
        ),
    ]
    for sentinel in sentinels[2:]:
        probes.append(
            functools.partial(
                _refused_probe,
                "iter_blocks_after",
                sentinel,
                NotInQueueError,
                sentinel,
                _FOREIGN_SENTINEL,
            )
        )
    probes.append(
        lambda: _Step(
            "sentinels in queue",
            lambda q: [s in q for s in sentinels],
            None,
            [False] * len(sentinels),
        )
    )
    probes.append(lambda: _Step("new result lists", _new_lists, None, "new lists"))
    if detached:
        # The constructor links its blocks with append_n, whose name its refusals carry.
        repeated = [detached[0], detached[0]]
        probes.append(
            lambda: _Step(
                f"queue(iter({repeated!r}))",
                lambda q: type(q)(iter(repeated)),
                AlreadyInQueueError,
                None,
                _batch_refusal("append_n", repeated, model),
            )
        )
        built = detached[:2]
        probes.append(
            lambda: _Step(
                f"queue(iter({built!r})), emptied",
                lambda q: _build_and_empty(q, built),
                None,
                built,
            )
        )
        if model:
            mixed = [detached[0], model[0]]
            probes.append(
                lambda: _Step(
                    f"queue({mixed!r})",
                    lambda q: type(q)(mixed),
                    AlreadyInQueueError,
                    None,
                    _batch_refusal("append_n", mixed, model),
                )
            )
    return probes[index % len(probes)]()


def _refused_probe(
    operation: str,
    argument: Block | list[Block],
    error: type[QueueError],
    refused: Block,
    reason: str,
) -> _Step:
    """A probe that hands ``argument`` to ``operation``, which must refuse ``refused`` (the
    argument itself, or the item of a batch that names the refusal) for ``reason``."""
    message = _refusal(operation, refused, reason)
    return _Step(f"{operation}({argument!r})", _call(operation, argument), error, None, message)


def _new_lists(queue: FreeBlockQueue[_Numbered]) -> str:
    """``"new lists"`` if two calls of each list-returning query give two lists, else what not."""
    if queue.get_all_free_blocks() is queue.get_all_free_blocks():
        return "get_all_free_blocks() returned the same list twice"
    first, second = queue.popleft_n(0), queue.popleft_n(0)
    if first is second:
        return f"popleft_n(0) returned the same list twice: {first!r}"
    if first or second:
        return f"popleft_n(0) returned {first!r} and {second!r}"
    return "new lists"


def _call(operation: str, argument: object) -> Callable[[FreeBlockQueue[_Numbered]], object]:
    """A probe's call: ``operation(argument)`` on the queue; iterations drained as a step would."""
    if operation == "iter_blocks_after":
        return lambda queue: _walk_after(queue, argument)  # type: ignore[arg-type]  # a sentinel, on purpose
    return lambda queue: getattr(queue, operation)(argument)


def _build_and_empty(
    queue: FreeBlockQueue[_Numbered], batch: list[_Numbered]
) -> list[_Numbered] | str:
    """Build a queue of ``queue``'s class from an iterator over ``batch``, then pop it empty."""
    built = type(queue)(iter(batch))
    listed = built.get_all_free_blocks()
    if listed != batch or len(built) != len(batch):
        return f"built {listed!r} (count {len(built)})"
    return built.popleft_n(len(batch))


def _walk(queue: FreeBlockQueue[_Numbered], limit: int) -> list[object] | str:
    """The nodes from the front to the tail sentinel, or what stops the walk within ``limit``."""
    nodes: list[object] = []
    node: object = queue.fake_free_list_head.next_free_block
    while node is not queue.fake_free_list_tail:
        if len(nodes) == limit:
            return f"the chain from the head does not reach the tail within {limit} blocks"
        if not isinstance(node, Block):
            return f"the chain from the head reaches {node!r} after {len(nodes)} blocks"
        nodes.append(node)
        node = node.next_free_block
    return nodes


def _walk_after(queue: FreeBlockQueue[_Numbered], cursor: _Numbered | None) -> object:
    """What ``iter_blocks_after(cursor)`` yields; a refusal must come from the call itself."""
    iterator = queue.iter_blocks_after(cursor)
    try:
        return list(iterator)
    except QueueError as exc:  # reported as a wrong result: the call should have raised it
        return f"<{exc!r} raised while iterating>"


def _compare(
    queue: FreeBlockQueue[_Numbered], model: list[_Numbered], blocks: list[_Numbered]
) -> str | None:
    """Describe the first way the queue differs from the list model, or return ``None``."""
    # Walked by hand first, within bounds, so that a broken chain is reported, not followed
    # forever or into None.
    walked = _walk(queue, len(blocks))
    if isinstance(walked, str):
        return f"{walked} (count {queue.num_free_blocks!r}), list model {model!r}"
    try:
        contents = queue.get_all_free_blocks()
        count = len(queue)
        iterated = list(queue)
    except Exception as exc:  # any failure of a queue is the finding
        return f"get_all_free_blocks(), len() or iter() raised {exc!r} on the chain {walked!r}"
    if count != len(model) or contents != model or walked != model:
        return f"queue holds {contents!r} (count {count}), list model {model!r}"
    if iterated != model:
        return f"iter(queue) yields {iterated!r}, list model {model!r}"
    members = {id(b) for b in model}
    for block in blocks:
        if id(block) not in members and (
            block.prev_free_block is not None or block.next_free_block is not None
        ):
            return f"{block!r} is not in the queue but still has links"
    return None


def positive_int(text: str) -> int:
    """Parse a count of at least 1 for argparse, refusing anything else in one clear line.

    Runtime complexity: O(len(text))

    >>> positive_int("20000")
    20000
    >>> positive_int("-5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a whole number of at least 1, not '-5'
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the self-check's options."""
    parser.add_argument(
        "--operations",
        type=positive_int,
        default=20_000,
        help="operations to run (at least 1; default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """Run the self-check the options ask for, print its verdict, and return the exit status."""
    command = f"{PROG} {args.command}" if getattr(args, "command", None) else PROG
    # On a terminal's stderr only, after two seconds: a long --operations shows it is alive.
    progress = Progress(command, "operations", args.operations, sys.stderr)
    try:
        report = run_self_check(
            operations=args.operations, seed=args.seed, progress=progress.update
        )
    finally:
        progress.clear()
    if report.mismatch is not None:
        print(f"self-check FAILED after {report.operations} operations: {report.mismatch}")
        return 1
    print(
        f"self-check passed: {report.operations} operations "
        f"({report.rejected} misuses rejected) matched a plain list, seed {args.seed}"
    )
    return 0
