"""Check mode's O(1) checks: each damage they meet, and the violation's parts they name.

One table row per diagnostic: the damage (one link written, unless named
otherwise), the call that meets it, and the violation's clause, place, value,
expected and found. The strings name the world's objects as ``{b0}`` to
``{b3}``, ``{spare}``, ``{head}`` and ``{tail}`` (this queue's sentinels) and
``{other_tail}``, each as a diagnostic shows it once the damage is done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import pytest

from tests.checks.support import WALK, World, error_of, make_world, parts
from verified_queue import Block, CheckedFreeBlockQueue, InvariantViolation
from verified_queue.errors import INVARIANT_FAMILY

#: The objects of a world a row can name, by the names the row uses.
NODES: dict[str, Callable[[World], object]] = {
    "None": lambda _w: None,
    "head": lambda w: w.queue.fake_free_list_head,
    "tail": lambda w: w.queue.fake_free_list_tail,
    "b0": lambda w: w.blocks[0],
    "b1": lambda w: w.blocks[1],
    "b2": lambda w: w.blocks[2],
    "b3": lambda w: w.blocks[3],
    "spare": lambda w: w.spare[0],
    "other_tail": lambda w: w.other.fake_free_list_tail,
}


def names(world: World) -> dict[str, str]:
    """How a diagnostic shows each object of ``world``, for the rows' templates."""
    shown = {name: repr(get(world)) for name, get in NODES.items()}
    shown["head"] = f"this queue's {shown['head']}"
    shown["tail"] = f"this queue's {shown['tail']}"
    shown["other_tail"] = f"another queue's {shown['other_tail']}"
    return {**shown, "walk": WALK}


def link(owner: str, field: str, value: str) -> Callable[[World], None]:
    """The damage that writes ``owner.field = value`` (objects by their names in NODES)."""

    def write(world: World) -> None:
        setattr(NODES[owner](world), f"{field}_free_block", NODES[value](world))

    return write


def empty_chain(world: World) -> None:
    """Link the sentinels to each other, leaving the count and the blocks as they were."""
    head, tail = world.queue.fake_free_list_head, world.queue.fake_free_list_tail
    head.next_free_block = tail
    tail.prev_free_block = head


def clear_b1(world: World) -> None:
    """Clear both links of the member b1, leaving its neighbours pointing at it."""
    world.blocks[1].prev_free_block = world.blocks[1].next_free_block = None


@dataclass(frozen=True)
class Case:
    """A damage, the call that meets it, and the violation's parts as templates."""

    damage: Callable[[World], None]
    call: Callable[[World], object]
    clause: str
    where: str
    what: str
    expected: str
    found: str


def popleft(w: World) -> object:
    return w.queue.popleft()


def append_spare(w: World) -> object:
    w.queue.append(w.spare[0])
    return None


def remove(name: str) -> Callable[[World], object]:
    """The call ``remove`` of the block named ``name``."""
    return lambda w: w.queue.remove(cast(Block, NODES[name](w)))


START_POPLEFT = "the start of popleft()"
START_POPLEFT_N = "the start of popleft_n()"
START_APPEND = "the start of append(), the tail sentinel"
START_APPEND_N = "the start of append_n(), the tail sentinel"
START_REMOVE = "the start of remove()"
START_ITER = "the start of iter_blocks_after()"
OWN_BLOCK_OR_TAIL = "one of this queue's blocks or its tail"
OWN_BLOCK_OR_HEAD = "one of this queue's blocks or its head"
OWN_BLOCK_OR_SENTINEL = "one of this queue's blocks or its sentinel"
FOLLOWED_BY_TAIL = "a block followed by the tail"

# fmt: off
CASES: dict[str, Case] = {
    "head prev = head": Case(
        link("head", "prev", "head"), popleft,
        "I1", START_POPLEFT, "prev_free_block of {head}", "None", "{head}",
    ),
    "head prev = tail": Case(
        link("head", "prev", "tail"), popleft,
        "I1", START_POPLEFT, "prev_free_block of {head}", "None", "{tail}",
    ),
    "head prev = b2": Case(
        link("head", "prev", "b2"), popleft,
        "I1", START_POPLEFT, "prev_free_block of {head}", "None", "{b2}",
    ),
    "b0 prev cleared": Case(
        link("b0", "prev", "None"), popleft,
        "I1", START_POPLEFT + ", position 1 {walk}", "prev_free_block of {b0}", "{head}", "None",
    ),
    "head next = spare": Case(
        link("head", "next", "spare"), lambda w: w.queue.popleft_n(2),
        "I1", START_POPLEFT_N + ", position 1 {walk}", "next_free_block of {head}",
        OWN_BLOCK_OR_TAIL, "{spare}",
    ),
    "b2 prev = b0 under popleft_n(3)": Case(
        link("b2", "prev", "b0"), lambda w: w.queue.popleft_n(3),
        "I1", START_POPLEFT_N + ", position 3 {walk}", "prev_free_block of {b2}", "{b1}", "{b0}",
    ),
    "b0 prev = b3 under prepend_n": Case(
        link("b0", "prev", "b3"), lambda w: w.queue.prepend_n([w.spare[0]]),
        "I1", "the start of prepend_n(), position 1 {walk}", "prev_free_block of {b0}",
        "{head}", "{b3}",
    ),
    "tail next = b0": Case(
        link("tail", "next", "b0"), append_spare,
        "I1", START_APPEND, "next_free_block of {tail}", "None", "{b0}",
    ),
    "tail prev = spare": Case(
        link("tail", "prev", "spare"), lambda w: w.queue.append_n([Block()]),
        "I1", START_APPEND_N, "prev_free_block of {tail}", OWN_BLOCK_OR_HEAD, "{spare}",
    ),
    "tail prev = b1": Case(
        link("tail", "prev", "b1"), append_spare,
        "I1", START_APPEND, "prev_free_block of {tail}", FOLLOWED_BY_TAIL, "{b1}",
    ),
    "empty chain under append": Case(
        empty_chain, append_spare,
        "I2", START_APPEND, "num_free_blocks", "0 (the tail follows the head)", "4",
    ),
    "empty chain under popleft": Case(
        empty_chain, popleft,
        "I2", START_POPLEFT + ", position 1 {walk}", "num_free_blocks",
        "0 (the walk reached the tail)", "4",
    ),
    "b0 next cleared": Case(
        link("b0", "next", "None"), remove("b1"),
        "I1", START_REMOVE, "next_free_block of {b0}, the prev_free_block of {b1}", "{b1}", "None",
    ),
    "b2 next = spare": Case(
        link("b2", "next", "spare"), remove("b2"),
        "I1", START_REMOVE, "next_free_block of {b2}", OWN_BLOCK_OR_SENTINEL, "{spare}",
    ),
    "b1 prev = spare": Case(
        link("b1", "prev", "spare"), remove("b1"),
        "I1", START_REMOVE, "prev_free_block of {b1}", OWN_BLOCK_OR_SENTINEL, "{spare}",
    ),
    "b0 next = b2": Case(
        link("b0", "next", "b2"), remove("b1"),
        "I1", START_REMOVE, "next_free_block of {b0}, the prev_free_block of {b1}", "{b1}", "{b2}",
    ),
    "head next = b1": Case(
        link("head", "next", "b1"), remove("b0"),
        "I1", START_REMOVE, "next_free_block of {head}, the prev_free_block of {b0}",
        "{b0}", "{b1}",
    ),
    "b3 next = another tail": Case(
        link("b3", "next", "other_tail"), remove("b3"),
        "I1", START_REMOVE, "next_free_block of {b3}", OWN_BLOCK_OR_SENTINEL, "{other_tail}",
    ),
    "b0 prev = tail": Case(
        link("b0", "prev", "tail"), remove("b0"),
        "I1", START_REMOVE, "prev_free_block of {b0}", OWN_BLOCK_OR_SENTINEL, "{tail}",
    ),
    "b3 prev = b1": Case(
        link("b3", "prev", "b1"), remove("b2"),
        "I1", START_REMOVE, "prev_free_block of {b3}, the next_free_block of {b2}", "{b2}", "{b1}",
    ),
    "tail prev = b2": Case(
        link("tail", "prev", "b2"), remove("b3"),
        "I1", START_REMOVE, "prev_free_block of {tail}, the next_free_block of {b3}",
        "{b3}", "{b2}",
    ),
    **{
        f"b1 cleared under {name}": Case(
            clear_b1, call,
            "I1", f"the start of {name}()", "the links of {b1}, one of this queue's blocks",
            "both set", "both None (cleared by outside code while the block was in the queue)",
        )
        for name, call in (
            ("append", lambda w: w.queue.append(w.blocks[1])),
            ("append_n", lambda w: w.queue.append_n([w.spare[0], w.blocks[1]])),
            ("prepend_n", lambda w: w.queue.prepend_n([w.spare[0], w.blocks[1]])),
        )
    },
    "b1 prev = head": Case(
        link("b1", "prev", "head"), lambda w: w.queue.popleft_n(3),
        "I1", START_POPLEFT_N + ", position 2 {walk}", "prev_free_block of {b1}", "{b0}", "{head}",
    ),
    "tail prev = tail": Case(
        link("tail", "prev", "tail"), append_spare,
        "I1", START_APPEND, "prev_free_block of {tail}", OWN_BLOCK_OR_HEAD, "{tail}",
    ),
    "b2 next = head": Case(
        link("b2", "next", "head"), remove("b2"),
        "I1", START_REMOVE, "next_free_block of {b2}", OWN_BLOCK_OR_SENTINEL, "{head}",
    ),
    "b0 next = head": Case(
        link("b0", "next", "head"), remove("b1"),
        "I1", START_REMOVE, "next_free_block of {b0}, the prev_free_block of {b1}",
        "{b1}", "{head}",
    ),
    "b0 next = tail": Case(
        link("b0", "next", "tail"), remove("b1"),
        "I1", START_REMOVE, "next_free_block of {b0}, the prev_free_block of {b1}",
        "{b1}", "{tail}",
    ),
    "b1 next = head": Case(
        link("b1", "next", "head"), lambda w: w.queue.popleft_n(3),
        "I1", START_POPLEFT_N + ", position 3 {walk}", "next_free_block of {b1}",
        OWN_BLOCK_OR_TAIL, "{head}",
    ),
    "b1 prev = tail": Case(
        link("b1", "prev", "tail"), lambda w: w.queue.popleft_n(3),
        "I1", START_POPLEFT_N + ", position 2 {walk}", "prev_free_block of {b1}", "{b0}", "{tail}",
    ),
    "tail next = head": Case(
        link("tail", "next", "head"), lambda w: w.queue.append_n([w.spare[0]]),
        "I1", START_APPEND_N, "next_free_block of {tail}", "None", "{head}",
    ),
    "tail prev = head": Case(
        link("tail", "prev", "head"), append_spare,
        "I1", START_APPEND, "prev_free_block of {tail}", FOLLOWED_BY_TAIL, "{head}",
    ),
    "cursor prev cleared": Case(
        link("b1", "prev", "None"), lambda w: w.queue.iter_blocks_after(w.blocks[1]),
        "I1", START_ITER, "prev_free_block of {b1}", OWN_BLOCK_OR_SENTINEL, "None",
    ),
    "cursor bridged over": Case(
        link("b0", "next", "b2"), lambda w: w.queue.iter_blocks_after(w.blocks[1]),
        "I1", START_ITER, "next_free_block of {b0}, the prev_free_block of {b1}", "{b1}", "{b2}",
    ),
    "walk after a cursor meets b3 prev = b1": Case(
        link("b3", "prev", "b1"), lambda w: list(w.queue.iter_blocks_after(w.blocks[1])),
        "I1", "iteration after a cursor, position 2 {walk}", "prev_free_block of {b3}",
        "{b2}", "{b1}",
    ),
    "iteration meets b1 next = spare": Case(
        link("b1", "next", "spare"), lambda w: list(w.queue.iter_blocks_after(None)),
        "I1", "iteration, position 3 {walk}", "next_free_block of {b1}",
        OWN_BLOCK_OR_TAIL, "{spare}",
    ),
}
# fmt: on


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_o1_check_names_the_fault(case: Case) -> None:
    """Each O(1) check names the damage it meets: invariant, place, value, expected and found."""
    world = make_world()
    case.damage(world)
    shown = names(world)
    error = error_of(lambda: case.call(world))
    expected = (case.clause, case.where, case.what, case.expected, case.found)
    assert isinstance(error, InvariantViolation)
    assert error.invariant == INVARIANT_FAMILY[case.clause]
    assert parts(error) == tuple(text.format(**shown) for text in expected)


@pytest.mark.parametrize("stray", ["a detached block", "head", "tail"])
def test_empty_popleft_checks_tail_successor(stray: str) -> None:
    """popleft() on an empty queue checks the tail's own outer link before calling it empty."""
    queue: CheckedFreeBlockQueue[Block] = CheckedFreeBlockQueue(full_check_every=0)
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    value = {"a detached block": Block(), "head": head, "tail": tail}[stray]
    shown = repr(value) if stray == "a detached block" else f"this queue's {value!r}"
    tail.next_free_block = value
    assert parts(error_of(queue.popleft)) == (
        "I1",
        START_POPLEFT,
        f"next_free_block of this queue's {tail!r}",
        "None",
        shown,
    )
