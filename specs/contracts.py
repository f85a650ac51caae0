"""CrossHair contracts (PEP 316 docstrings) relating the linked queue to the list model.

Each ``*_contract`` function builds a real queue and a :class:`~specs.model.ListModel` from
symbolic inputs, applies one public operation to both, and returns a :class:`Step` that
describes both outcomes in block *numbers*. Its postcondition, ``problems(_) == []``, says
for every input CrossHair reaches (:func:`problems` names each clause that fails):

- the result is the model's, and so is the error: its type *and* its message;
- the new sequence and ``num_free_blocks`` are the model's;
- every link of every block and sentinel (the other queue's included) is what the model's
  new sequence implies, and :func:`~verified_queue.invariants.check_invariants` passes;
- a popped or removed block is detached, and a block the operation does not touch keeps
  both its links;
- a rejected call (the model raises) changes nothing at all;
- a returned list belongs to the caller: changing it, or calling the queue's type again,
  affects nothing else (:func:`owns`).

The inputs are symbolic values, not a handful of fixed cases:

- the state is ``order``, a symbolic ``list[int]`` of distinct block numbers (validated by
  the preconditions): every order of every subset of the :data:`UNIVERSE` blocks, the rest
  detached;
- an argument is a symbolic code choosing among the blocks, this queue's head and tail, and
  another, non-empty queue's head, tail, first and last block;
- a batch is a symbolic ``list[int]`` of such codes (repeats, linked blocks, sentinels, the
  other queue's blocks), up to :data:`MAX_BATCH` long, handed over as a list, a tuple, an
  iterator, a generator, or a generator that raises after its last block (``shape``);
- the constructor gets the same batches.

``remove`` and ``iter_blocks_after`` of another queue's block are documented misuse that the
production queue cannot see in O(1) (check mode catches them), so their contracts leave those
two codes out; every other operation must refuse them. :func:`iter_blocks_after_contract`
also requires a refused cursor to be refused by the call, not later by the iteration
(:class:`~specs.structure.LateError` otherwise).

What CrossHair's paths cover (each is one concrete order and argument), what is left to
symmetry and which test checks it, why outcomes are block numbers, and why the bookkeeping runs
untraced: the CrossHair paragraphs of docs/verification.md. ``specs.crosshair_run`` runs every
contract and reports the paths it explored.

The queue under check is :class:`~verified_queue.queue.FreeBlockQueue`, or the planted bug
named by the environment variable ``VERIFIED_QUEUE_SPEC_TARGET`` (see
:data:`specs.planted_bugs.PLANTED_BUGS`)::

    python -m specs.crosshair_run --per-condition-timeout 60 --jobs 2  # paths per contract
    crosshair check --per_condition_timeout=60 specs.contracts
    VERIFIED_QUEUE_SPEC_TARGET=remove_forgets_count crosshair check specs.contracts  # fails
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple, TypeVar

from specs.model import ListModel, Membership, SpecBlock
from specs.planted_bugs import PLANTED_BUGS
from specs.structure import iterate_after
from specs.world import World
from verified_queue.block import Block
from verified_queue.errors import InvariantViolation
from verified_queue.invariants import check_invariants
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "ALIEN",
    "FOREIGN",
    "FOREIGN_FIRST",
    "FOREIGN_LAST",
    "FOREIGN_TAIL",
    "HEAD",
    "MAX_BATCH",
    "NONE",
    "SHAPES",
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
    "problems",
    "queries_contract",
    "remove_contract",
]

#: The environment variable that selects a planted bug instead of the real queue.
TARGET_VARIABLE = "VERIFIED_QUEUE_SPEC_TARGET"

#: Blocks in the universe: numbers ``0 .. UNIVERSE-1``.
UNIVERSE = 4

#: The longest batch ``append_n``, ``prepend_n`` and the constructor are given.
MAX_BATCH = 3

# Codes for what a link or an argument can be besides a numbered block.
HEAD = -1  #: the queue's own head sentinel
TAIL = -2  #: the queue's own tail sentinel
FOREIGN = -3  #: another queue's head sentinel
FOREIGN_TAIL = -4  #: another queue's tail sentinel
FOREIGN_FIRST = -5  #: the first of the two blocks linked in another queue
FOREIGN_LAST = -6  #: the last of them
NONE = -7  #: an unset link (in link snapshots only)
ALIEN = -8  #: anything else (a link to an object outside the universe)

#: The shapes a batch is handed over in: list, tuple, iterator, generator, failing generator.
SHAPES = 5
_FAILING_GENERATOR = 4

#: What the failing generator raises after its last block.
BATCH_FAILURE = "the batch's iterator failed"

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

try:
    from crosshair.tracers import (  # type: ignore[import-not-found, unused-ignore]
        NoTracing,
        is_tracing,
    )
except ImportError:  # CrossHair is only needed to run CrossHair (the tests run these concretely)

    def _untraced() -> AbstractContextManager[object]:
        return nullcontext()

else:

    def _untraced() -> AbstractContextManager[object]:
        """Stop CrossHair's tracing for the bookkeeping on concrete objects (much faster).

        Only code that touches no symbolic value runs so: the snapshots and the walks of
        the links, whose nodes are all concrete objects. The operations under check, on
        the queue and on the model, always run traced.
        """
        tracing: bool = is_tracing()  # type: ignore[no-untyped-call, unused-ignore]
        return NoTracing() if tracing else nullcontext()  # type: ignore[no-untyped-call, unused-ignore]


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
    links_expected: Links
    result_owned: bool = True


def _slot(code: int) -> int:
    """Index of a node's entry in a :data:`Links` snapshot."""
    return code if code >= 0 else UNIVERSE - 1 - code


def expected_links(order: Sequence[int]) -> Links:
    """The links every node must have when the queue holds ``order`` (I1 and I4, in codes).

    The other queue always holds its two blocks.

    Runtime complexity: O(UNIVERSE)

    >>> expected_links([2])[2], expected_links([2])[0] == DETACHED
    ((-1, -2), True)
    """
    links = [DETACHED] * (UNIVERSE + 6)
    for chain in ([HEAD, *order, TAIL], [FOREIGN, FOREIGN_FIRST, FOREIGN_LAST, FOREIGN_TAIL]):
        for position, code in enumerate(chain):
            before = chain[position - 1] if position > 0 else NONE
            after = chain[position + 1] if position + 1 < len(chain) else NONE
            links[_slot(code)] = (before, after)
    return tuple(links)


def untouched(step: Step) -> list[int]:
    """The numbered blocks whose links the operation has no reason to change.

    Runtime complexity: O(UNIVERSE)
    """
    before = expected_links(step.before)
    return [number for number in range(UNIVERSE) if before[number] == step.links_expected[number]]


def released(step: Step) -> list[int]:
    """The numbered blocks the model says left the queue.

    Runtime complexity: O(UNIVERSE ** 2)
    """
    return [number for number in step.before if number not in step.model_after]


def problems(step: Step) -> list[str]:
    """The clauses of the contract (see the module docstring) that ``step`` breaks.

    Runtime complexity: O(UNIVERSE ** 2)
    """
    clauses = {
        "error": step.error == step.model_error,
        "result": step.result == step.model_result,
        "sequence": step.after == step.model_after,
        "count": step.num_free_blocks == len(step.model_after),
        "links": step.links_after == step.links_expected,
        "invariants": step.invariant_problem is None,
        "the caller owns a returned list": step.result_owned,
        "released blocks detached": all(
            step.links_after[number] == DETACHED for number in released(step)
        ),
        "untouched blocks keep their links": all(
            step.links_after[number] == step.links_before[number] for number in untouched(step)
        ),
        "a refusal changes nothing": step.model_error is None
        or (step.after == step.before and step.links_after == step.links_before),
    }
    return [name for name, holds in clauses.items() if not holds]


def valid_order(order: Sequence[int]) -> bool:
    """Whether ``order`` names distinct blocks of the universe (a state of the queue).

    Runtime complexity: O(len(order) ** 2)
    """
    if len(order) > UNIVERSE:
        return False
    numbers = [order[index] for index in range(len(order))]
    return all(0 <= number < UNIVERSE for number in numbers) and all(
        numbers[later] != numbers[earlier]
        for later in range(len(numbers))
        for earlier in range(later)
    )


_Item = TypeVar("_Item")


def pick(items: Sequence[_Item], index: int) -> _Item:
    """``items[index]`` for an ``index`` known to be in range, found by bisection.

    A symbolic index into a concrete list makes CrossHair test every element in turn; the
    bisection costs it one branch per halving instead.

    Runtime complexity: O(log len(items))

    >>> pick("abcde", 3)
    'd'
    """
    low, high = 0, len(items)
    while high - low > 1:
        middle = (low + high) // 2
        if index < middle:
            high = middle
        else:
            low = middle
    return items[low]


def valid_code(code: int) -> bool:
    """Whether ``code`` names a node: a block, a sentinel, or a block of the other queue."""
    return FOREIGN_LAST <= code < UNIVERSE


def local_code(code: int) -> bool:
    """Whether ``code`` names a node other than a block linked in the other queue."""
    return FOREIGN <= code < UNIVERSE or code == FOREIGN_TAIL


class _World:
    """The universe of blocks, the queue under check holding ``order``, its model, another queue."""

    def __init__(self, order: Sequence[int], allocation: Sequence[int] = range(UNIVERSE)) -> None:
        with _untraced():
            self._build(allocation)
        # Traced: CrossHair picks each number of the symbolic order here.
        held = [pick(self.universe, number) for number in order]
        with _untraced():
            # Wire the state by hand, not with the queue's own append_n, so that each
            # contract checks its one operation (construct_contract checks the constructor).
            self.world.wire(held, self.strangers)
            self.model: ListModel[Any] = ListModel(held, membership=self.membership)
            # In codes read off the blocks: nothing here on depends on a symbolic value.
            self.before = tuple(self.code(block) for block in held)

    def _build(self, allocation: Sequence[int]) -> None:
        """Make the blocks (in ``allocation`` order), an empty queue under check, another queue."""
        made: dict[int, SpecBlock] = {}
        for number in allocation:
            made[number] = SpecBlock(number)
        self.universe = [made[number] for number in range(UNIVERSE)]
        self.queue: FreeBlockQueue[Any] = QUEUE_TYPE()
        # The other queue is the production one, wired to hold two blocks outside the
        # universe; the models share one membership, so the model knows they are linked.
        self.strangers = [SpecBlock(UNIVERSE), SpecBlock(UNIVERSE + 1)]
        self.other: FreeBlockQueue[Any] = FreeBlockQueue()
        self.world = World([*self.universe, *self.strangers], [self.queue, self.other])
        self.membership = Membership()
        ListModel(self.strangers, membership=self.membership)
        self._nodes: list[Block] = [
            *self.universe,
            self.queue.fake_free_list_head,
            self.queue.fake_free_list_tail,
            self.other.fake_free_list_head,
            self.other.fake_free_list_tail,
            *self.strangers,
        ]
        self._codes = {
            id(node): slot if slot < UNIVERSE else UNIVERSE - 1 - slot
            for slot, node in enumerate(self._nodes)
        }

    def node(self, code: int) -> Block:
        """The block or sentinel an argument code names."""
        return pick(self._nodes, _slot(code))

    def code(self, node: object) -> int:
        """The code of whatever a link or a result holds (every node of the world is alive,
        so its ``id`` is its own)."""
        if node is None:
            return NONE
        return self._codes.get(id(node), ALIEN)

    def links(self) -> Links:
        """Every node's two links, in codes."""
        with _untraced():
            return tuple(
                (self.code(n.prev_free_block), self.code(n.next_free_block)) for n in self._nodes
            )

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
        result, error, owned = self._run(call, self.queue)
        model_result, model_error, _ = self._run(call, self.model)
        model_after = tuple(self.code(block) for block in self.model)
        with _untraced():
            try:
                check_invariants(self.queue)
                check_invariants(self.other)
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
                model_after=model_after,
                model_result=model_result,
                model_error=model_error,
                links_expected=expected_links(model_after),
                result_owned=owned,
            )

    def _run(
        self, call: Callable[[Any], object], target: object
    ) -> tuple[object, str | None, bool]:
        """The call's result in codes, its error, and whether the caller owns a returned list."""
        try:
            result = call(target)
        except Exception as error:  # the exception's type and message are compared
            return None, describe_error(error), True
        described = self.describe(result)
        owned = owns(result, type(target)) if isinstance(result, list) else True
        return described, None, owned

    def batch(self, codes: Sequence[int], shape: int) -> Callable[[], Iterable[Block]]:
        """A maker of the batch ``codes`` in ``shape`` (see :data:`SHAPES`), fresh per call."""
        nodes = [self.node(code) for code in codes]
        makers: list[Callable[[], Iterable[Block]]] = [
            lambda: list(nodes),
            lambda: tuple(nodes),
            lambda: iter(list(nodes)),
            lambda: (node for node in nodes),
            lambda: _failing(nodes),
        ]
        return makers[shape]


def owns(result: list[Any], kind: type[Any]) -> bool:
    """Whether the caller owns ``result``, a list a ``kind`` queue returned: a change the
    caller makes stays in it, and later calls on any ``kind`` queue neither return it nor
    change it (a list shared between calls, a "free" fast path, is not owned).

    ``result`` is left as it was. Runtime complexity: O(len(result))
    """
    with _untraced():
        kept = list(result)
        result.append(None)  # the caller's own change
        probe = kind()
        answers = [probe.popleft_n(0), probe.get_all_free_blocks()]
        owned = (
            all(answer is not result and len(answer) == 0 for answer in answers)
            and len(result) == len(kept) + 1
            and all(got is want for got, want in zip(result, kept, strict=False))
        )
        if result and result[-1] is None:
            del result[-1]
        return owned


def describe_error(error: BaseException) -> str:
    """An exception as its type's name and its message."""
    return f"{type(error).__name__}: {error}"


def _failing(nodes: list[Block]) -> Iterator[Block]:
    """Yield ``nodes``, then raise: a batch whose iterator fails after its last block."""
    yield from nodes
    raise RuntimeError(BATCH_FAILURE)


def valid_batch(batch: Sequence[int], shape: int) -> bool:
    """Whether ``batch`` is a batch of node codes no longer than :data:`MAX_BATCH`."""
    return (
        len(batch) <= MAX_BATCH and all(valid_code(code) for code in batch) and 0 <= shape < SHAPES
    )


def popleft_contract(order: list[int]) -> Step:
    """``popleft()`` on a queue holding ``order`` agrees with the model.

    Runtime complexity: O(UNIVERSE ** 2) (the snapshots of every link)

    pre: valid_order(order)
    post: problems(_) == []
    """
    return _World(order).step(lambda target: target.popleft())


def popleft_n_contract(order: list[int], n: int) -> Step:
    """``popleft_n(n)`` on a queue holding ``order`` agrees with the model, misuse included.

    ``n`` is bounded because both sides format it into their error messages, which makes
    CrossHair try each value in turn; every ``n`` beyond the bounds takes the same path as the
    bound itself. The contract picks that value itself, by comparing ``n`` with each one
    (a branch CrossHair can exhaust, where the realisation inside ``str.format`` is not).

    Runtime complexity: O(UNIVERSE ** 2)

    pre: valid_order(order)
    pre: -2 <= n <= UNIVERSE + 2
    post: problems(_) == []
    """
    count = _chosen(n, range(-2, UNIVERSE + 3))
    return _World(order).step(lambda target: target.popleft_n(count))


def remove_contract(order: list[int], block: int) -> Step:
    """``remove`` of any block or sentinel from a queue holding ``order`` agrees with the model.

    Runtime complexity: O(UNIVERSE ** 2)

    pre: valid_order(order)
    pre: local_code(block)
    post: problems(_) == []
    """
    world = _World(order)
    node = world.node(block)
    return world.step(lambda target: target.remove(node))


def append_contract(order: list[int], block: int) -> Step:
    """``append`` of any node (another queue's blocks too) to a queue holding ``order`` agrees.

    Runtime complexity: O(UNIVERSE ** 2)

    pre: valid_order(order)
    pre: valid_code(block)
    post: problems(_) == []
    """
    world = _World(order)
    node = world.node(block)
    return world.step(lambda target: target.append(node))


def append_n_contract(order: list[int], batch: list[int], shape: int) -> Step:
    """``append_n`` of any batch (repeats, linked blocks, sentinels) in any shape agrees.

    Runtime complexity: O(UNIVERSE ** 2 + len(batch))

    pre: valid_order(order)
    pre: valid_batch(batch, shape)
    post: problems(_) == []
    """
    return _batch_step(order, batch, shape, "append_n")


def prepend_n_contract(order: list[int], batch: list[int], shape: int) -> Step:
    """``prepend_n`` of any batch (repeats, linked blocks, sentinels) in any shape agrees.

    Runtime complexity: O(UNIVERSE ** 2 + len(batch))

    pre: valid_order(order)
    pre: valid_batch(batch, shape)
    post: problems(_) == []
    """
    return _batch_step(order, batch, shape, "prepend_n")


def _batch_step(order: list[int], batch: list[int], shape: int, operation: str) -> Step:
    """``operation`` (``append_n`` or ``prepend_n``) of ``batch`` in ``shape`` on ``order``."""
    world = _World(order)
    make = world.batch(batch, shape)
    return world.step(lambda target: getattr(target, operation)(make()))


def iter_blocks_after_contract(order: list[int], cursor: int) -> Step:
    """``iter_blocks_after`` from any cursor (``None``, a block, a sentinel) agrees with the model.

    The result is what draining the iterator yields; a refusal must come from the call itself.

    Runtime complexity: O(UNIVERSE ** 2)

    pre: valid_order(order)
    pre: cursor == NONE or local_code(cursor)
    post: problems(_) == []
    """
    world = _World(order)
    return world.step(_iterate_after(world, None if cursor == NONE else world.node(cursor)))


def _iterate_after(world: _World, cursor: Block | None) -> Callable[[Any], object]:
    """A call that drains ``iter_blocks_after(cursor)``, telling a late refusal apart."""
    return iterate_after(cursor, world.queue.fake_free_list_head, world.queue.fake_free_list_tail)


def construct_contract(order: list[int], batch: list[int], shape: int) -> Step:
    """Building a queue from any batch in any shape holds it, linked, or refuses it as the model.

    The batch may name the blocks of the queue holding ``order``, its sentinels and the other
    queue's nodes. The result is the new queue's sequence; ``check_invariants`` must pass on
    it, and every link outside it must be as before (all of them when it is refused).

    Runtime complexity: O(UNIVERSE ** 2 + len(batch))

    pre: valid_order(order)
    pre: valid_batch(batch, shape)
    post: problems(_) == []
    """
    world = _World(order)
    make = world.batch(batch, shape)

    def construct(target: object) -> list[Any]:
        if target is world.model:
            return ListModel(make(), membership=world.membership).get_all_free_blocks()
        queue = QUEUE_TYPE(make())
        check_invariants(queue)  # a violation is an error the model does not raise
        return queue.get_all_free_blocks()

    step = world.step(construct)
    if step.model_error is not None or not isinstance(step.model_result, tuple):
        return step
    # The built queue's blocks link to its own sentinels, which are no nodes of the world.
    links = list(step.links_expected)
    chain = [ALIEN, *step.model_result, ALIEN]
    for position in range(1, len(chain) - 1):
        links[_slot(chain[position])] = (chain[position - 1], chain[position + 1])
    return step._replace(links_expected=tuple(links))


def queries_contract(order: list[int], block: int) -> tuple[object, ...]:
    """``len``, ``bool``, ``in``, iteration and ``get_all_free_blocks`` agree with the model.

    Returns the queue's answers followed by the model's, then whether the links are unchanged.

    Runtime complexity: O(UNIVERSE ** 2)

    pre: valid_order(order)
    pre: valid_code(block)
    post: _[0:5] == _[5:10] and _[10]
    """
    world = _World(order)
    node = world.node(block)
    links = world.links()
    answers: list[object] = []
    for target in (world.queue, world.model):
        answers += [
            _answer(len, target),
            _answer(bool, target),
            _answer(lambda queue: node in queue, target),
            _answer(lambda queue: tuple(world.code(item) for item in queue), target),
            _answer(lambda queue: _listing(world, queue), target),
        ]
    answers.append(world.links() == links)
    return tuple(answers)


def _listing(world: _World, target: Any) -> tuple[tuple[int, ...], bool]:
    """``get_all_free_blocks()`` in codes, and whether the caller owns the list."""
    listed = target.get_all_free_blocks()
    return tuple(map(world.code, listed)), owns(listed, type(target))


def _answer(query: Callable[[Any], object], target: object) -> object:
    """The query's answer, or the exception it raised."""
    try:
        return query(target)
    except Exception as error:  # compared with the model's answer like any other
        return describe_error(error)


# The harness's operations, by code: 0 popleft, 1 popleft_n, 2 remove, 3 append, 4 append_n,
# 5 prepend_n, 6 iter_blocks_after.
_OPERATIONS = 7


def operations_contract(order: list[int], program: list[tuple[int, int]]) -> list[str]:
    """A short program of operations keeps the queue and the model in step after every call.

    Each instruction is ``(operation, argument)``: the argument is ``n`` for ``popleft_n``,
    a block code for ``remove``, ``append`` and ``iter_blocks_after`` (whose lowest code means
    ``None``), and for ``append_n`` and ``prepend_n`` the batch of the first ``argument``
    detached blocks plus, if ``argument`` is negative, a block already queued.
    Returns a description of every step where the two differ.

    Runtime complexity: O(len(program) * UNIVERSE ** 2)

    pre: valid_order(order)
    pre: len(program) <= 4
    pre: all(_valid_instruction(operation, argument) for operation, argument in program)
    post: _ == []
    """
    world = _World(order)
    differences: list[str] = []
    for index, (operation, argument) in enumerate(program):
        world.before = tuple(world.code(block) for block in world.model)
        call = _instruction(world, operation, argument)
        step = world.step(call)
        if (step.result, step.error, step.after, step.num_free_blocks, step.result_owned) != (
            step.model_result,
            step.model_error,
            step.model_after,
            len(step.model_after),
            True,
        ) or (step.links_after != step.links_expected or step.invariant_problem is not None):
            differences.append(f"step {index}: {step}")
            break
    return differences


def _chosen(value: int, values: range) -> int:
    """``value``, known to be one of ``values``, as a concrete int: CrossHair branches on
    each comparison (a choice it can exhaust), and the checks that follow stay concrete."""
    return next(candidate for candidate in values if candidate == value)


def _valid_instruction(operation: int, argument: int) -> bool:
    return 0 <= operation < _OPERATIONS and -UNIVERSE <= argument < UNIVERSE


def _instruction(world: _World, operation: int, argument: int) -> Callable[[Any], object]:
    if operation == 0:
        return lambda target: target.popleft()
    if operation == 1:
        count = _chosen(argument, range(-UNIVERSE, UNIVERSE))
        return lambda target: target.popleft_n(count)
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
