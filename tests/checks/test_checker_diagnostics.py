"""The checkers' exact diagnostics where a sentinel is the value found, and their totality."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.checks.support import parts
from verified_queue import Block, InvariantViolation
from verified_queue.invariants import (
    COUNT_CONSISTENCY,
    SENTINEL_LINKAGE,
    check_count_consistency,
    check_detached_outside,
    check_invariants,
    check_no_duplicates,
    check_sentinel_linkage,
)
from verified_queue.queue import FreeBlockQueue

WALK = "of the forward walk (head = 0)"

#: Every checker, with the pool argument check_detached_outside needs.
CHECKERS: dict[str, Callable[[FreeBlockQueue[Block]], None]] = {
    "check_invariants": check_invariants,
    "check_sentinel_linkage": check_sentinel_linkage,
    "check_count_consistency": check_count_consistency,
    "check_no_duplicates": check_no_duplicates,
    "check_detached_outside": lambda queue: check_detached_outside(queue, []),
}


def violation_of(
    checker: Callable[[FreeBlockQueue[Block]], None], queue: object
) -> tuple[str, tuple[str | None, ...]]:
    """The family and the parts of the violation ``checker`` raises on ``queue``."""
    with pytest.raises(InvariantViolation) as caught:
        checker(queue)  # type: ignore[arg-type]  # a damaged queue on purpose
    return caught.value.invariant, parts(caught.value)


@pytest.mark.parametrize("size", [0, 2])
@pytest.mark.parametrize("end", ["head", "tail"])
def test_outer_link_to_own_sentinel_named(size: int, end: str) -> None:
    """A head's back link or a tail's forward link naming either sentinel names it exactly."""
    queue = FreeBlockQueue([Block() for _ in range(size)])
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    for stray in (head, tail):
        if end == "head":
            head.prev_free_block = stray
            place, link, owner = "the head sentinel", "prev_free_block", head
        else:
            tail.next_free_block = stray
            place, link, owner = "the tail sentinel", "next_free_block", tail
        expected = (
            SENTINEL_LINKAGE,
            (
                "I1",
                f"{place}",
                f"{link} of this queue's {owner!r}",
                "None",
                f"this queue's {stray!r}",
            ),
        )
        for name in ("check_invariants", "check_sentinel_linkage", "check_detached_outside"):
            assert violation_of(CHECKERS[name], queue) == expected, name


@pytest.mark.parametrize("size", [0, 1, 3])
def test_tail_back_link_to_sentinel_named(size: int) -> None:
    """A tail's back link naming a sentinel it should not is reported with both sentinels named."""
    blocks = [Block() for _ in range(size)]
    queue = FreeBlockQueue(blocks)
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    last = repr(blocks[-1]) if blocks else f"this queue's {head!r}"
    strays = [tail, head] if blocks else [tail]
    for stray in strays:
        tail.prev_free_block = stray
        assert violation_of(check_invariants, queue) == (
            SENTINEL_LINKAGE,
            (
                "I1",
                f"position {size + 1} {WALK}",
                f"prev_free_block of this queue's {tail!r}",
                f"{last} (position {size})",
                f"this queue's {stray!r}",
            ),
        )


def test_deleted_tail_parts_named_unset() -> None:
    """A deleted tail sentinel attribute and a deleted back slot of the tail read as unset slots."""
    queue = FreeBlockQueue([Block()])
    tail = queue.fake_free_list_tail
    _damage(delattr, tail, "prev_free_block")
    assert violation_of(check_sentinel_linkage, queue) == (
        SENTINEL_LINKAGE,
        (
            "I1",
            f"position 2 {WALK}",
            f"prev_free_block of this queue's {tail!r}",
            f"{queue.fake_free_list_head.next_free_block!r} (position 1)",
            "an unset link slot",
        ),
    )
    _damage(delattr, queue, "fake_free_list_tail")
    for name, checker in CHECKERS.items():
        assert violation_of(checker, queue) == (
            SENTINEL_LINKAGE,
            ("I1", "the queue", "fake_free_list_tail", "a Sentinel", "an unset link slot"),
        ), name


@pytest.mark.parametrize(
    ("end", "link"), [("head", "prev_free_block"), ("tail", "next_free_block")]
)
def test_deleted_outer_link_named_unset(end: str, link: str) -> None:
    """A deleted outer slot of a sentinel reads as an unset slot, not as an AttributeError."""
    queue = FreeBlockQueue([Block()])
    sentinel = queue.fake_free_list_head if end == "head" else queue.fake_free_list_tail
    _damage(delattr, sentinel, link)
    for name in ("check_invariants", "check_sentinel_linkage"):
        assert violation_of(CHECKERS[name], queue) == (
            SENTINEL_LINKAGE,
            (
                "I1",
                f"the {end} sentinel",
                f"{link} of this queue's {sentinel!r}",
                "None",
                "an unset link slot",
            ),
        ), name


class _IndexLike:
    """A numpy-like count: an integer through ``__index__``, but not an ``int``."""

    def __index__(self) -> int:
        return 1


Damage = Callable[[FreeBlockQueue[Block], Block], str]


def _damage(write: Callable[..., None], owner: object, attribute: str, *value: object) -> None:
    """Do the damage, or skip the test on a build whose typed slots refuse it.

    A compiled build types its slots: a link refuses a non-block, the count a non-int (or
    stores a bool as a plain int), and a slot may refuse ``del``; that damage cannot happen.
    """
    try:
        write(owner, attribute, *value)
    except (TypeError, AttributeError):
        pytest.skip("this build's typed slots refuse the damage, so it cannot happen")
    if value and type(getattr(owner, attribute)) is not type(value[0]):
        pytest.skip("this build's typed slot stores the value as another type")


def _setter(attribute: str, value: object, family: str) -> Damage:
    """Damage that sets the queue's ``attribute``; the family it breaks."""

    def damage(queue: FreeBlockQueue[Block], _: Block) -> str:
        _damage(setattr, queue, attribute, value)
        return family

    return damage


def _deleter(on_block: bool, attribute: str, family: str) -> Damage:
    """Damage that deletes ``attribute`` of the block or of the queue; the family it breaks."""

    def damage(queue: FreeBlockQueue[Block], block: Block) -> str:
        _damage(delattr, block if on_block else queue, attribute)
        return family

    return damage


def _linked(value: object) -> Damage:
    """Damage that links ``value`` after the block; the family it breaks."""

    def damage(_: FreeBlockQueue[Block], block: Block) -> str:
        _damage(setattr, block, "next_free_block", value)
        return SENTINEL_LINKAGE

    return damage


#: Ways outside code can damage a one-block queue.
DAMAGES: dict[str, Damage] = {
    "bool count": _setter("num_free_blocks", True, COUNT_CONSISTENCY),
    "float count": _setter("num_free_blocks", 1.0, COUNT_CONSISTENCY),
    "numpy-like count": _setter("num_free_blocks", _IndexLike(), COUNT_CONSISTENCY),
    "deleted count": _deleter(False, "num_free_blocks", COUNT_CONSISTENCY),
    "deleted head": _deleter(False, "fake_free_list_head", SENTINEL_LINKAGE),
    "deleted next slot": _deleter(True, "next_free_block", SENTINEL_LINKAGE),
    "deleted prev slot": _deleter(True, "prev_free_block", SENTINEL_LINKAGE),
    "non-block member": _linked(object()),
    "None member": _linked(None),
}


#: The checkers that read ``num_free_blocks``; the others judge the links alone.
COUNT_READERS = ("check_invariants", "check_count_consistency")
#: The checkers that follow ``next_free_block`` alone and so never read a back link.
FORWARD_ONLY = ("check_count_consistency", "check_no_duplicates")


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_checkers_raise_only_violations(checker: str, damage: str) -> None:
    """On each damage a checker raises InvariantViolation of its family, or passes, blind to it."""
    blocks = [Block()]
    queue = FreeBlockQueue(blocks)
    family = DAMAGES[damage](queue, blocks[0])
    blind = (family == COUNT_CONSISTENCY and checker not in COUNT_READERS) or (
        damage == "deleted prev slot" and checker in FORWARD_ONLY
    )
    if blind:
        CHECKERS[checker](queue)  # passes: it never reads what was damaged
    else:
        assert violation_of(CHECKERS[checker], queue)[0] == family
