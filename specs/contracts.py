"""CrossHair contracts (PEP 316 docstrings) relating the linked queue to the list model.

Each ``*_contract`` function builds a real queue and a :class:`~specs.model.ListModel` from
small symbolic integers, applies one public operation to both, and returns a :class:`Step`
that describes both outcomes in block *numbers*. Its postconditions say, for every input
CrossHair can reach:

- the result and the error (by exception type) are the model's;
- the new sequence and ``num_free_blocks`` are the model's;
- every link of every block and sentinel is what the model's new sequence implies, and
  :func:`~verified_queue.invariants.check_invariants` passes;
- a popped or removed block is detached, and a block the operation does not touch keeps
  both its links;
- a rejected call (the model raises) changes nothing at all.

Results are described by numbers rather than by the blocks themselves because CrossHair's
``__old__`` is a deep copy, in which identity does not survive; here nothing needs ``__old__``,
since the function records the state before and after the call itself.

Symmetry keeps the inputs small enough for CrossHair to exhaust most paths: the queue's
behaviour cannot depend on which blocks it holds, only on how the arguments relate to them
(it compares blocks by identity and nothing else), so every state is a renaming of "blocks
``0 .. size-1`` in order, the rest detached", and ``size`` is the only state input.
Arguments are block numbers, or :data:`HEAD`, :data:`TAIL` and :data:`FOREIGN` for the
queue's own sentinels and another queue's. :func:`operations_contract` is the harness: a
short symbolic program of operations applied to both, step by step.

:func:`iter_blocks_after_contract` also says that a cursor the queue refuses is refused when
``iter_blocks_after`` is called, not later when the iteration starts: an error raised
while the returned iterator is drained is reported as :class:`~specs.structure.LateError`,
which the model never raises. The model has no sentinels, so for it this queue's own head
cursor means ``None`` (from the front) and its own tail cursor means "nothing after".

The queue under check is :class:`~verified_queue.queue.FreeBlockQueue`, or the planted bug
named by the environment variable ``VERIFIED_QUEUE_SPEC_TARGET`` (see
:data:`specs.planted_bugs.PLANTED_BUGS`)::

    crosshair check --per_condition_timeout=20 specs.contracts
    VERIFIED_QUEUE_SPEC_TARGET=remove_forgets_count crosshair check specs.contracts  # fails
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from specs.model import ListModel, SpecBlock
from specs.planted_bugs import PLANTED_BUGS
from specs.structure import iterate_after
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "FOREIGN",
    "HEAD",
    "NONE",
    "TAIL",
    "TARGET_VARIABLE",
    "UNIVERSE",
    "Step",
    "append_contract",
    "append_n_contract",
    "construct_contract",
    "expected_links",
    "iter_blocks_after_contract",
    "operations_contract",
    "popleft_contract",
    "popleft_n_contract",
    "prepend_n_contract",
    "queries_contract",
    "remove_contract",
]

#: The environment variable that selects a planted bug instead of the real queue.
TARGET_VARIABLE = "VERIFIED_QUEUE_SPEC_TARGET"

#: Blocks in the universe: numbers ``0 .. UNIVERSE-1``.
UNIVERSE = 4

# Codes for what a link or an argument can be besides a numbered block.
HEAD = -1  #: the queue's own head sentinel
TAIL = -2  #: the queue's own tail sentinel
FOREIGN = -3  #: another queue's head sentinel
FOREIGN_TAIL = -4  #: another queue's tail sentinel (in link snapshots only)
NONE = -5  #: an unset link
ALIEN = -6  #: anything else (a link to an object outside the universe)

#: The links of a detached block.
DETACHED = (NONE, NONE)

#: One entry per node, in :func:`_slot` order: ``(prev code, next code)``.
Links = tuple[tuple[int, int], ...]


def _target() -> type[FreeBlockQueue[Any]]:
    name = os.environ.get(TARGET_VARIABLE, "")
    if not name:
        return FreeBlockQueue
    if name not in PLANTED_BUGS:
        raise ValueError(f"{TARGET_VARIABLE}={name!r}: expected one of {sorted(PLANTED_BUGS)}")
    return PLANTED_BUGS[name]


#: The queue class the contracts check.
QUEUE_TYPE = _target()


class Step(NamedTuple):
    """Both sides of one operation, described by block numbers and codes."""

    before: tuple[int, ...]
    after: tuple[int, ...]
    num_free_blocks: int
    result: object
    error: str | None
    links_before: Links
    links_after: Links
    invariant_problem: str | None
    model_after: tuple[int, ...]
    model_result: object
    model_error: str | None


def _slot(code: int) -> int:
    """Index of a node's entry in a :data:`Links` snapshot."""
    return code if code >= 0 else UNIVERSE - 1 - code


def expected_links(order: Sequence[int]) -> Links:
    """The links every node must have when the queue holds ``order`` (I1 and I4, in codes).

    Runtime complexity: O(UNIVERSE)

    >>> expected_links([2])[2], expected_links([2])[0] == DETACHED
    ((-1, -2), True)
    """
    links = [DETACHED] * (UNIVERSE + 4)
    chain = [HEAD, *order, TAIL]
    for position, code in enumerate(chain):
        before = chain[position - 1] if position > 0 else NONE
        after = chain[position + 1] if position + 1 < len(chain) else NONE
        links[_slot(code)] = (before, after)
    links[_slot(FOREIGN)] = (NONE, FOREIGN_TAIL)
    links[_slot(FOREIGN_TAIL)] = (FOREIGN, NONE)
    return tuple(links)


def untouched(step: Step) -> list[int]:
    """The numbered blocks whose links the operation has no reason to change.

    Runtime complexity: O(UNIVERSE)
    """
    before = expected_links(step.before)
    after = expected_links(step.model_after)
    return [number for number in range(UNIVERSE) if before[number] == after[number]]


def released(step: Step) -> list[int]:
    """The numbered blocks the model says left the queue.

    Runtime complexity: O(UNIVERSE ** 2)
    """
    return [number for number in step.before if number not in step.model_after]


class _World:
    """The universe of blocks, the queue under check over the first ``size``, and its model."""

    def __init__(self, size: int) -> None:
        self.universe = [SpecBlock(number) for number in range(UNIVERSE)]
        held = [self.universe[number] for number in range(size)]
        self.queue: FreeBlockQueue[Any] = QUEUE_TYPE()
        # Wire the state by hand, not with the queue's own append_n, so that each contract
        # checks its one operation (construct_contract checks the constructor).
        previous: Block = self.queue.fake_free_list_head
        for block in held:
            previous.next_free_block = block
            block.prev_free_block = previous
            previous = block
        previous.next_free_block = self.queue.fake_free_list_tail
        self.queue.fake_free_list_tail.prev_free_block = previous
        self.queue.num_free_blocks = len(held)
        self.model: ListModel[Any] = ListModel(held)
        self.other: FreeBlockQueue[Any] = FreeBlockQueue()
        self.before = tuple(range(size))

    def node(self, code: int) -> Block:
        """The block or sentinel an argument code names."""
        if code >= 0:
            return self.universe[code]
        if code == HEAD:
            return self.queue.fake_free_list_head
        if code == TAIL:
            return self.queue.fake_free_list_tail
        return self.other.fake_free_list_head

    def code(self, node: object) -> int:
        """The code of whatever a link or a result holds."""
        if node is None:
            return NONE
        for number, block in enumerate(self.universe):
            if node is block:
                return number
        named = {
            HEAD: self.queue.fake_free_list_head,
            TAIL: self.queue.fake_free_list_tail,
            FOREIGN: self.other.fake_free_list_head,
            FOREIGN_TAIL: self.other.fake_free_list_tail,
        }
        for code, sentinel in named.items():
            if node is sentinel:
                return code
        return ALIEN

    def links(self) -> Links:
        nodes: list[Block] = [
            *self.universe,
            self.queue.fake_free_list_head,
            self.queue.fake_free_list_tail,
            self.other.fake_free_list_head,
            self.other.fake_free_list_tail,
        ]
        return tuple((self.code(n.prev_free_block), self.code(n.next_free_block)) for n in nodes)

    def order(self) -> tuple[int, ...]:
        """The queue's sequence, walked along the links for at most ``UNIVERSE + 1`` steps."""
        walked: list[int] = []
        node = self.queue.fake_free_list_head.next_free_block
        while node is not self.queue.fake_free_list_tail and len(walked) <= UNIVERSE:
            walked.append(self.code(node))
            if node is None:
                break
            node = node.next_free_block
        return tuple(walked)

    def describe(self, result: object) -> object:
        """A result in codes: a block's code, a tuple of codes for a list, else the value."""
        if isinstance(result, Block):
            return self.code(result)
        if isinstance(result, list):
            return tuple(self.code(item) for item in result)
        return result

    def step(self, call: Callable[[Any], object]) -> Step:
        """Apply ``call`` to the queue and to the model and describe both outcomes."""
        links_before = self.links()
        result, error = self._run(call, self.queue)
        model_result, model_error = self._run(call, self.model)
        try:
            check_invariants(self.queue)
            problem = None
        except InvariantViolation as violation:
            problem = str(violation)
        return Step(
            before=self.before,
            after=self.order(),
            num_free_blocks=self.queue.num_free_blocks,
            result=result,
            error=error,
            links_before=links_before,
            links_after=self.links(),
            invariant_problem=problem,
            model_after=tuple(self.code(block) for block in self.model),
            model_result=model_result,
            model_error=model_error,
        )

    def _run(self, call: Callable[[Any], object], target: object) -> tuple[object, str | None]:
        try:
            return self.describe(call(target)), None
        except Exception as error:  # the exception's type is compared with the model's
            return None, type(error).__name__


def _valid_code(code: int) -> bool:
    return FOREIGN <= code < UNIVERSE


def popleft_contract(size: int) -> Step:
    """``popleft()`` on a queue of ``size`` blocks agrees with the model.

    Runtime complexity: O(UNIVERSE) (the snapshots of every link)

    pre: 0 <= size <= UNIVERSE
    post: _.error == _.model_error
    post: _.result == _.model_result
    post: _.after == _.model_after
    post: _.num_free_blocks == len(_.model_after)
    post: _.links_after == expected_links(_.model_after) and _.invariant_problem is None
    post: all(_.links_after[number] == DETACHED for number in released(_))
    post: all(_.links_after[number] == _.links_before[number] for number in untouched(_))
    post: _.model_error is None or (_.after == _.before and _.links_after == _.links_before)
    """
    return _World(size).step(lambda target: target.popleft())


def popleft_n_contract(size: int, n: int) -> Step:
    """``popleft_n(n)`` on a queue of ``size`` blocks agrees with the model, misuse included.

    ``n`` is bounded because both sides format it into their error messages, which makes
    CrossHair try each value in turn; every ``n`` beyond the bounds takes the same path as the
    bound itself.

    Runtime complexity: O(UNIVERSE)

    pre: 0 <= size <= UNIVERSE
    pre: -2 <= n <= UNIVERSE + 2
    post: _.error == _.model_error
    post: _.result == _.model_result
    post: _.after == _.model_after
    post: _.num_free_blocks == len(_.model_after)
    post: _.links_after == expected_links(_.model_after) and _.invariant_problem is None
    post: all(_.links_after[number] == DETACHED for number in released(_))
    post: all(_.links_after[number] == _.links_before[number] for number in untouched(_))
    post: _.model_error is None or (_.after == _.before and _.links_after == _.links_before)
    """
    return _World(size).step(lambda target: target.popleft_n(n))


def remove_contract(size: int, block: int) -> Step:
    """``remove`` of any block or sentinel from a queue of ``size`` blocks agrees with the model.

    Runtime complexity: O(UNIVERSE)

    pre: 0 <= size <= UNIVERSE
    pre: _valid_code(block)
    post: _.error == _.model_error
    post: _.result == _.model_result
    post: _.after == _.model_after
    post: _.num_free_blocks == len(_.model_after)
    post: _.links_after == expected_links(_.model_after) and _.invariant_problem is None
    post: all(_.links_after[number] == DETACHED for number in released(_))
    post: all(_.links_after[number] == _.links_before[number] for number in untouched(_))
    post: _.model_error is None or (_.after == _.before and _.links_after == _.links_before)
    """
    world = _World(size)
    node = world.node(block)
    return world.step(lambda target: target.remove(node))


def append_contract(size: int, block: int) -> Step:
    """``append`` of any block or sentinel to a queue of ``size`` blocks agrees with the model.

    Runtime complexity: O(UNIVERSE)

    pre: 0 <= size <= UNIVERSE
    pre: _valid_code(block)
    post: _.error == _.model_error
    post: _.result == _.model_result
    post: _.after == _.model_after
    post: _.num_free_blocks == len(_.model_after)
    post: _.links_after == expected_links(_.model_after) and _.invariant_problem is None
    post: all(_.links_after[number] == _.links_before[number] for number in untouched(_))
    post: _.model_error is None or (_.after == _.before and _.links_after == _.links_before)
    """
    world = _World(size)
    node = world.node(block)
    return world.step(lambda target: target.append(node))


def append_n_contract(size: int, batch: list[int]) -> Step:
    """``append_n`` of any short batch (repeats, linked blocks, sentinels) agrees with the model.

    Runtime complexity: O(UNIVERSE + len(batch))

    pre: 0 <= size <= UNIVERSE
    pre: len(batch) <= 2
    pre: all(_valid_code(code) for code in batch)
    post: _.error == _.model_error
    post: _.result == _.model_result
    post: _.after == _.model_after
    post: _.num_free_blocks == len(_.model_after)
    post: _.links_after == expected_links(_.model_after) and _.invariant_problem is None
    post: all(_.links_after[number] == _.links_before[number] for number in untouched(_))
    post: _.model_error is None or (_.after == _.before and _.links_after == _.links_before)
    """
    world = _World(size)
    nodes = [world.node(code) for code in batch]
    return world.step(lambda target: target.append_n(nodes))


def prepend_n_contract(size: int, batch: list[int]) -> Step:
    """``prepend_n`` of any short batch (repeats, linked blocks, sentinels) agrees with the model.

    Runtime complexity: O(UNIVERSE + len(batch))

    pre: 0 <= size <= UNIVERSE
    pre: len(batch) <= 2
    pre: all(_valid_code(code) for code in batch)
    post: _.error == _.model_error
    post: _.result == _.model_result
    post: _.after == _.model_after
    post: _.num_free_blocks == len(_.model_after)
    post: _.links_after == expected_links(_.model_after) and _.invariant_problem is None
    post: all(_.links_after[number] == _.links_before[number] for number in untouched(_))
    post: _.model_error is None or (_.after == _.before and _.links_after == _.links_before)
    """
    world = _World(size)
    nodes = [world.node(code) for code in batch]
    return world.step(lambda target: target.prepend_n(nodes))


def iter_blocks_after_contract(size: int, cursor: int) -> Step:
    """``iter_blocks_after`` from any cursor (``None``, a block, a sentinel) agrees with the model.

    The result is what draining the iterator yields; a refusal must come from the call itself.

    Runtime complexity: O(UNIVERSE)

    pre: 0 <= size <= UNIVERSE
    pre: cursor == NONE or _valid_code(cursor)
    post: _.error == _.model_error
    post: _.result == _.model_result
    post: _.after == _.model_after == _.before
    post: _.num_free_blocks == len(_.model_after)
    post: _.links_after == _.links_before == expected_links(_.before)
    post: _.invariant_problem is None
    """
    world = _World(size)
    return world.step(_iterate_after(world, None if cursor == NONE else world.node(cursor)))


def _iterate_after(world: _World, cursor: Block | None) -> Callable[[Any], object]:
    """A call that drains ``iter_blocks_after(cursor)``, telling a late refusal apart."""
    return iterate_after(cursor, world.queue.fake_free_list_head, world.queue.fake_free_list_tail)


def construct_contract(batch: list[int]) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """Building a queue from a batch either holds the batch, linked, or is refused and links none.

    Returns the queue's sequence (empty if refused), the model's, and whether every block
    outside the built queue is still detached.

    Runtime complexity: O(UNIVERSE ** 2)

    pre: len(batch) <= UNIVERSE
    pre: all(0 <= code < UNIVERSE for code in batch)
    post: _[0] == _[1]
    post: _[2]
    """
    universe = [SpecBlock(number) for number in range(UNIVERSE)]
    nodes = [universe[code] for code in batch]
    try:
        built = tuple(position_of(universe, block) for block in QUEUE_TYPE(nodes))
    except Exception:  # a refused batch: the model must refuse it too
        built = ()
    try:
        modelled = tuple(position_of(universe, block) for block in ListModel(nodes))
    except Exception:  # the model refuses exactly the batches with a repeat
        modelled = ()
    outside = [block for number, block in enumerate(universe) if number not in built]
    detached = all(
        block.prev_free_block is None and block.next_free_block is None for block in outside
    )
    return built, modelled, detached


def position_of(universe: Sequence[Block], block: object) -> int:
    """The number of ``block`` in ``universe`` (by identity), or :data:`ALIEN`.

    Runtime complexity: O(len(universe))
    """
    for number, candidate in enumerate(universe):
        if candidate is block:
            return number
    return ALIEN


def queries_contract(size: int, block: int) -> tuple[object, ...]:
    """``len``, ``bool``, ``in``, iteration and ``get_all_free_blocks`` agree with the model.

    Returns the queue's answers followed by the model's, then whether the links are unchanged.

    Runtime complexity: O(UNIVERSE)

    pre: 0 <= size <= UNIVERSE
    pre: _valid_code(block)
    post: _[0:5] == _[5:10]
    post: _[10]
    """
    world = _World(size)
    node = world.node(block)
    links = world.links()
    answers: list[object] = []
    for target in (world.queue, world.model):
        answers += [
            _answer(len, target),
            _answer(bool, target),
            _answer(lambda queue: node in queue, target),
            _answer(lambda queue: tuple(world.code(item) for item in queue), target),
            _answer(lambda queue: tuple(map(world.code, queue.get_all_free_blocks())), target),
        ]
    answers.append(world.links() == links)
    return tuple(answers)


def _answer(query: Callable[[Any], object], target: object) -> object:
    """The query's answer, or the name of the exception it raised."""
    try:
        return query(target)
    except Exception as error:  # compared with the model's answer like any other
        return type(error).__name__


# The harness's operations, by code: 0 popleft, 1 popleft_n, 2 remove, 3 append, 4 append_n,
# 5 prepend_n, 6 iter_blocks_after.
_OPERATIONS = 7


def operations_contract(size: int, program: list[tuple[int, int]]) -> list[str]:
    """A short program of operations keeps the queue and the model in step after every call.

    Each instruction is ``(operation, argument)``: the argument is ``n`` for ``popleft_n``,
    a block code for ``remove``, ``append`` and ``iter_blocks_after`` (whose lowest code means
    ``None``), and for ``append_n`` and ``prepend_n`` the batch of the first ``argument``
    detached blocks plus, if ``argument`` is negative, a block already queued.
    Returns a description of every step where the two differ.

    Runtime complexity: O(len(program) * UNIVERSE)

    pre: 0 <= size <= UNIVERSE
    pre: len(program) <= 4
    pre: all(_valid_instruction(operation, argument) for operation, argument in program)
    post: _ == []
    """
    world = _World(size)
    differences: list[str] = []
    for index, (operation, argument) in enumerate(program):
        world.before = tuple(world.code(block) for block in world.model)
        call = _instruction(world, operation, argument)
        step = world.step(call)
        if (step.result, step.error, step.after, step.num_free_blocks) != (
            step.model_result,
            step.model_error,
            step.model_after,
            len(step.model_after),
        ) or (
            step.links_after != expected_links(step.model_after)
            or step.invariant_problem is not None
        ):
            differences.append(f"step {index}: {step}")
            break
    return differences


def _valid_instruction(operation: int, argument: int) -> bool:
    return 0 <= operation < _OPERATIONS and -UNIVERSE <= argument < UNIVERSE


def _instruction(world: _World, operation: int, argument: int) -> Callable[[Any], object]:
    if operation == 0:
        return lambda target: target.popleft()
    if operation == 1:
        return lambda target: target.popleft_n(argument)
    if operation == 6:
        return _iterate_after(world, None if argument < FOREIGN else world.node(argument))
    if operation in (2, 3):
        node = world.node(max(argument, FOREIGN))
        name = "remove" if operation == 2 else "append"
        return lambda target: getattr(target, name)(node)
    batch: list[Block] = []
    for block in world.universe:
        if len(batch) < abs(argument) and block not in world.model:
            batch.append(block)
    if argument < 0 and world.model:
        batch.append(world.model.blocks[0])
    name = "prepend_n" if operation == 5 else "append_n"
    return lambda target: getattr(target, name)(batch)
