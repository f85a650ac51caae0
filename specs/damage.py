"""The checkers under test: every state of a small universe, damaged every way, must be reported.

The other layers use :func:`~verified_queue.invariants.check_invariants` as an oracle on a
queue that is healthy, so a checker that misses damage cannot make them fail. This layer
damages states on purpose and requires the report. For every state of
:mod:`specs.exhaustive`'s universe (``N`` blocks, queue A checked, queue B another queue of
the same blocks), wired by :class:`~specs.world.World`, it applies each damage of
:func:`damages`:

- every single-link corruption: each link of A's chain (its sentinels' outer links included)
  set to every wrong value: ``None``, every block of the universe, every sentinel of A and
  B, an object that is no block, and a proxy whose every attribute lookup raises ``KeyError``;
- a foreign block (detached) spliced in at every position, with the count raised to match;
- a foreign block substituted for the member at every position (count and links all right);
- count drift: ``num_free_blocks`` off by -2 to +2, and a ``bool``, a ``float`` and an
  ``int`` subclass in its place;
- a half-linked pool block outside the queue: one link of a detached block set to every node.

For each damage the layer knows the report it requires (:class:`Expected`): the clause
(``I1`` to ``I4``, which names the family) and the place (``InvariantViolation.where``), from
the position of the damage alone, and requires it of

- ``check_invariants(queue)`` and ``check_invariants(queue, pool=...)`` (A's blocks and the
  detached ones: the blocks of A's pool), and ``check_sentinel_linkage(queue)`` (the same
  place, a ring reported as the back link where it closes, and the count not its business);
- check mode's ``full_check()`` on a :class:`~verified_queue.checked.CheckedFreeBlockQueue`
  that linked A's blocks itself;
- the next checked operation of that queue with ``full_check_every=1``: an
  ``InvariantViolation`` of the same clause, or the production guard's refusal where the
  damage is a block outside the queue that the operation is handed;

and no check may change a link or a count (the world's snapshot is the same before and after).
On every undamaged state each check must pass. A wrong report is the counterexample.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from specs.exhaustive import _states  # the universe's states, shared with the exhaustive check
from specs.model import SpecBlock
from specs.world import World
from verified_queue.block import Block
from verified_queue.checked import CheckedFreeBlockQueue
from verified_queue.errors import InvariantViolation, QueueError
from verified_queue.invariants import check_invariants, check_sentinel_linkage
from verified_queue.queue import FreeBlockQueue

__all__ = [
    "Damage",
    "DamageReport",
    "Expected",
    "at",
    "check_every_damage",
    "damages",
    "main",
]

Checked = CheckedFreeBlockQueue[SpecBlock]


class NotABlock:
    """An object with no links, written into a link as outside code might."""

    def __repr__(self) -> str:
        return "NotABlock()"


class RaisingProxy:
    """An object whose every attribute lookup raises ``KeyError``, written into a link.

    Not quiet like :class:`NotABlock`: a check that asks it for a link gets an
    exception that is no ``AttributeError``, and must still report the damage.
    """

    def __getattr__(self, name: str) -> object:
        raise KeyError(name)

    def __repr__(self) -> str:
        return "RaisingProxy()"


class CountLike(int):
    """An ``int`` subclass written into ``num_free_blocks``: not a count the queue keeps."""


def at(position: int) -> str:
    """The place of a fault at ``position`` of the forward walk, as the checkers name it."""
    return f"position {position} of the forward walk (head = 0)"


@dataclass(frozen=True)
class Expected:
    """A report: the clause broken and the place; ``None`` clause means no report at all."""

    clause: str | None
    where: str = ""

    def describe(self) -> str:
        """The report in words, for a counterexample."""
        return "no report" if self.clause is None else f"{self.clause} at {self.where!r}"


HEALTHY = Expected(None)


@dataclass(frozen=True)
class Damage:
    """One damage: what it does, and the reports each check must give.

    ``apply`` writes the damage into the wired world (A checked, B); ``plain`` is
    ``check_invariants``' report without a pool, ``pooled`` with A's pool, ``full`` check
    mode's ``full_check()``'s. ``outsider`` is a block outside the queue the damage touched:
    check mode must refuse to ``append`` it, whatever it reports.
    """

    label: str
    apply: Callable[[], None]
    plain: Expected
    pooled: Expected
    full: Expected
    outsider: Block | None = None
    #: ``"link"`` (``"end link"`` at a sentinel, ``"ring"`` back into the chain),
    #: ``"foreign"``, ``"count"`` or ``"outside"``: the kinds of the docstring.
    kind: str = "link"


def _corrupt(node: object, side: str, value: object) -> Callable[[], None]:
    write = functools.partial(setattr, node, side, value)
    # The compiled build types its links and count: what it refuses or converts (a bool
    # count reads back as an int), outside code cannot write either, so that damage does
    # not exist there.
    probe: object = FreeBlockQueue() if side == "num_free_blocks" else Block()
    try:
        setattr(probe, side, value)
    except TypeError:
        return _UNSTORABLE
    stored = getattr(probe, side)
    if stored is not value and (type(stored) is not type(value) or stored != value):
        return _UNSTORABLE
    return write


def _unstorable() -> None:
    raise TypeError("this build cannot store the value")  # pragma: no cover -- filtered out


_UNSTORABLE: Callable[[], None] = _unstorable


def damages(
    queue: Checked,
    other: FreeBlockQueue[Any],
    order: Sequence[Block],
    pool: Sequence[Block],
    values: Sequence[object] | None = None,
) -> Iterator[Damage]:
    """Every damage of the module docstring to ``queue`` that this build can store.

    The arguments are :func:`_every_damage`'s.
    """
    return (
        damage
        for damage in _every_damage(queue, other, order, pool, values)
        if damage.apply is not _UNSTORABLE
    )


def _every_damage(  # noqa: PLR0915 -- one loop per kind of damage the layer applies
    queue: Checked,
    other: FreeBlockQueue[Any],
    order: Sequence[Block],
    pool: Sequence[Block],
    values: Sequence[object] | None = None,
) -> Iterator[Damage]:
    """Every damage of the module docstring to queue ``queue`` holding ``order``.

    ``other`` is queue B; ``pool`` is A's pool as ``check_invariants(pool=...)`` is given it.
    ``values``, if given, are the only wrong values written into a link (a large queue's
    machine draws a few); by default every value the module docstring names.
    Runtime complexity: O(len(order) * (len(order) + len(pool))), or O(len(order) *
    len(values)) with ``values``
    """
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    chain: list[Block] = [head, *order, tail]
    length = len(order)
    candidates_by_default: list[object] = [
        None,
        *pool,
        *other.get_all_free_blocks(),
        *order,
        head,
        tail,
        other.fake_free_list_head,
        other.fake_free_list_tail,
        NotABlock(),
        RaisingProxy(),
    ]
    if values is None:
        values = candidates_by_default
    else:
        values = [*values, head, tail, other.fake_free_list_head, other.fake_free_list_tail]
    seen: set[int] = set()
    candidates = [v for v in values if id(v) not in seen and not seen.add(id(v))]  # type: ignore[func-returns-value]
    in_order = {id(block): index + 1 for index, block in enumerate(order)}
    for position, node in enumerate(chain):
        for side in ("prev_free_block", "next_free_block"):
            current = getattr(node, side)
            if side == "prev_free_block" and position == 0:
                place = Expected("I1", "the head sentinel")
            elif side == "next_free_block" and position == length + 1:
                place = Expected("I1", "the tail sentinel")
            elif side == "prev_free_block":
                place = Expected("I1", at(position))
            else:
                place = Expected("I1", at(position + 1))
            for value in candidates:
                if value is current:
                    continue
                expected = place
                repeats = 0 < in_order.get(id(value), 0) <= position <= length
                if side == "next_free_block" and repeats:
                    expected = Expected("I3", place.where)  # the walk comes round again
                yield Damage(
                    f"position {position} {side} = {value!r}",
                    _corrupt(node, side, value),
                    expected,
                    expected,
                    expected,
                    kind=(
                        "ring"
                        if expected.clause == "I3"
                        else "end link"
                        if position in (0, length + 1) or "sentinel" in place.where
                        else "link"
                    ),
                )
    detached = [block for block in pool if id(block) not in in_order]
    for foreign in detached[:1]:
        for position in range(length + 1):
            before, after = chain[position], chain[position + 1]

            def splice(before: Block = before, after: Block = after, f: Block = foreign) -> None:
                before.next_free_block = f
                f.prev_free_block, f.next_free_block = before, after
                after.prev_free_block = f
                queue.num_free_blocks += 1

            yield Damage(
                f"{foreign!r} spliced in after position {position}, count raised",
                splice,
                HEALTHY,
                HEALTHY,
                Expected("I2", "the full check"),
                foreign,
                "foreign",
            )
        for position in range(1, length + 1):
            before, member, after = chain[position - 1], chain[position], chain[position + 1]

            def substitute(
                before: Block = before,
                member: Block = member,
                after: Block = after,
                f: Block = foreign,
            ) -> None:
                before.next_free_block = f
                f.prev_free_block, f.next_free_block = before, after
                after.prev_free_block = f
                member.prev_free_block = member.next_free_block = None

            yield Damage(
                f"{foreign!r} in place of the member at position {position}",
                substitute,
                HEALTHY,
                HEALTHY,
                Expected("I3", at(position)),
                foreign,
                "foreign",
            )
    tail_place = Expected("I2", f"the tail, reached at {at(length + 1)}")
    for drift in (-2, -1, 1, 2):
        count = length + drift
        place = tail_place if count >= 0 else Expected("I2", "the queue")
        yield Damage(
            f"count {count}",
            _corrupt(queue, "num_free_blocks", count),
            place,
            place,
            place,
            kind="count",
        )
    for odd in (length == 1, float(length), CountLike(length)):
        place = Expected("I2", "the queue") if not isinstance(odd, CountLike) else HEALTHY
        # An int subclass with the right value is a count check_invariants accepts; check
        # mode keeps exact ints and reports it.
        full = place if place.clause else Expected("I2", "the full check")
        label = f"count {odd!r}"
        yield Damage(
            label, _corrupt(queue, "num_free_blocks", odd), place, place, full, kind="count"
        )
    for index, block in enumerate(pool):
        if id(block) in in_order:
            continue
        for side in ("prev_free_block", "next_free_block"):
            for value in [*chain, *pool] if values is candidates_by_default else values:
                if value is block or value is getattr(block, side):
                    continue
                yield Damage(
                    f"outside block {block!r} {side} = {value!r}",
                    _corrupt(block, side, value),
                    HEALTHY,
                    Expected("I4", f"item {index} of the given blocks"),
                    HEALTHY,
                    block,
                    "outside",
                )


def _report(check: Callable[[], object]) -> tuple[Expected, str]:
    """What ``check`` reported, and a description for a counterexample."""
    try:
        check()
    except InvariantViolation as error:
        return Expected(error.clause, error.where or ""), f"{type(error).__name__}: {error}"
    except Exception as error:  # a checker must raise InvariantViolation and nothing else
        return Expected("crash", repr(error)), f"{type(error).__name__}: {error}"
    return HEALTHY, "no report"


#: The next operations of check mode that damage must stop, by name.
NEXT_OPERATIONS: dict[str, Callable[[Checked, Block], object]] = {
    "popleft": lambda queue, _spare: queue.popleft(),
    "popleft_n(0)": lambda queue, _spare: queue.popleft_n(0),
    "append": lambda queue, spare: queue.append(spare),  # type: ignore[arg-type]
    "append_n([])": lambda queue, _spare: queue.append_n([]),
    "prepend_n([])": lambda queue, _spare: queue.prepend_n([]),
    "iter": lambda queue, _spare: list(queue),
    "iter_blocks_after(None)": lambda queue, _spare: list(queue.iter_blocks_after(None)),
    "get_all_free_blocks": lambda queue, _spare: queue.get_all_free_blocks(),
}


@dataclass
class DamageReport:
    """What one run covered, and the first counterexample."""

    blocks: int
    states: int = 0
    damages: int = 0
    checks: int = 0
    seconds: float = 0.0
    counterexample: str | None = None

    def summary(self) -> str:
        """One line: what was checked and the verdict."""
        verdict = self.counterexample or "every damage reported exactly, no false report"
        return (
            f"{self.blocks} blocks: {self.states} states, {self.damages} damages, "
            f"{self.checks} checks in {self.seconds:.1f} s: {verdict}"
        )


def _check_damage(  # noqa: PLR0911 -- one early return per check that can disagree
    world: World, damage: Damage, orders: tuple[list[SpecBlock], list[SpecBlock]], turn: int
) -> tuple[str | None, int]:
    """Apply ``damage`` to the wired world, run every check; the first disagreement, and checks."""
    queue: Checked = world.queues[0]  # type: ignore[assignment]
    pool = [block for block in world.blocks if not any(block is b for b in orders[1])]
    world.wire(*orders)
    damage.apply()
    damaged = world.snapshot()
    linkage = damage.plain if damage.plain.clause != "I3" else Expected("I1", damage.plain.where)
    if damage.plain.clause == "I2":
        linkage = HEALTHY  # the linkage checker does not read the count
    runs: list[tuple[str, Callable[[], object], Expected]] = [
        ("check_invariants(queue)", lambda: check_invariants(queue), damage.plain),
        # Without the repeat test, the walk reports a ring where it closes, as a back link.
        ("check_sentinel_linkage(queue)", lambda: check_sentinel_linkage(queue), linkage),
        ("check_invariants(queue, pool)", lambda: check_invariants(queue, pool), damage.pooled),
        ("full_check()", queue.full_check, damage.full),
    ]
    for label, check, expected in runs:
        got, text = _report(check)
        if got != expected:
            return f"{damage.label}: {label} gave {text}; expected {expected.describe()}", 0
        if world.snapshot() != damaged:
            return f"{damage.label}: {label} changed a link or a count", 0
    names = sorted(NEXT_OPERATIONS)
    name = names[turn % len(names)]
    spare = SpecBlock(-1)
    if damage.full.clause is not None:
        try:
            NEXT_OPERATIONS[name](queue, spare)
        except InvariantViolation as error:
            if error.clause != damage.full.clause:
                return f"{damage.label}: {name} reported {error.clause}: {error}", 0
        except Exception as error:
            return f"{damage.label}: {name} raised {type(error).__name__}: {error}", 0
        else:
            return f"{damage.label}: the next checked operation {name} reported nothing", 0
        if world.snapshot() != damaged:
            return f"{damage.label}: {name} changed a link or a count before reporting", 0
    if damage.outsider is not None:
        try:
            queue.append(damage.outsider)  # type: ignore[arg-type]
        except QueueError:
            pass
        else:
            return f"{damage.label}: check mode appended the damaged outside block", 0
        if world.snapshot() != damaged:
            return f"{damage.label}: a refused append changed a link or a count", 0
    return None, 4


def check_every_damage(
    blocks: int = 4, checked_type: type[Checked] = CheckedFreeBlockQueue
) -> DamageReport:
    """Damage every state of a ``blocks``-block universe every way; see the module docstring.

    Runtime complexity: O(states * damages per state * blocks)
    """
    report = DamageReport(blocks)
    started = time.perf_counter()
    universe = [SpecBlock(number) for number in range(blocks)]
    for queued, other in _states(blocks):
        a_blocks = [universe[number] for number in queued]
        b_blocks = [universe[number] for number in other]
        for block in universe:
            block.prev_free_block = block.next_free_block = None
        queue = checked_type(a_blocks, full_check_every=1)
        second: FreeBlockQueue[SpecBlock] = FreeBlockQueue(b_blocks)
        world = World(universe, [queue, second])
        orders = (a_blocks, b_blocks)
        report.states += 1
        pool = [block for block in universe if not any(block is b for b in b_blocks)]
        world.wire(*orders)
        for label, check in (
            ("check_invariants(queue)", functools.partial(check_invariants, queue)),
            ("check_invariants(queue, pool)", functools.partial(check_invariants, queue, pool)),
            ("full_check()", queue.full_check),
        ):
            got, text = _report(check)
            if got != HEALTHY:
                report.counterexample = f"state {queued}/{other}, undamaged: {label} gave {text}"
                break
            report.checks += 1
        if report.counterexample:
            break
        for damage in list(damages(queue, second, a_blocks, pool)):
            problem, checks = _check_damage(world, damage, orders, report.damages)
            report.damages += 1
            report.checks += checks
            if problem is not None:
                report.counterexample = f"state A={list(queued)} B={list(other)}: {problem}"
                break
        if report.counterexample:
            break
    report.seconds = time.perf_counter() - started
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m specs.damage --blocks N``."""
    parser = argparse.ArgumentParser(prog="python -m specs.damage", description=__doc__)
    parser.add_argument("--blocks", type=int, default=4)
    args = parser.parse_args(argv)
    report = check_every_damage(args.blocks)
    print(report.summary())
    return 0 if report.counterexample is None else 1


if __name__ == "__main__":
    sys.exit(main())
