"""The invariant checkers: diagnostics, totality on any damage, identity, no false positives."""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.checks.support import parts
from verified_queue import (
    AlreadyInQueueError,
    Block,
    CheckedFreeBlockQueue,
    EmptyQueueError,
    InvariantViolation,
    NegativeCountError,
    NotInQueueError,
    QueueError,
)
from verified_queue.errors import INVARIANT_FAMILIES, INVARIANT_FAMILY
from verified_queue.invariants import (
    _UNSET,  # the stand-in for a deleted slot
    COUNT_CONSISTENCY,
    DETACHED_OUTSIDE,
    NO_DUPLICATES,
    SENTINEL_LINKAGE,
    check_count_consistency,
    check_detached_outside,
    check_invariants,
    check_no_duplicates,
    check_sentinel_linkage,
    describe,
    is_block,
)
from verified_queue.queue import FreeBlockQueue

CHECKERS: list[Callable[[FreeBlockQueue[Block]], None]] = [
    check_invariants,
    check_sentinel_linkage,
    check_count_consistency,
    check_no_duplicates,
]


def raised(checker: Callable[..., None], *args: object) -> InvariantViolation | None:
    """Run ``checker``; return the violation it raised, or ``None`` if it passed."""
    try:
        checker(*args)
    except InvariantViolation as violation:
        return violation
    return None


def queue_of(size: int) -> tuple[FreeBlockQueue[Block], list[Block]]:
    """A healthy production queue of ``size`` fresh blocks, and the blocks."""
    blocks = [Block() for _ in range(size)]
    return FreeBlockQueue(blocks), blocks


# ------------------------------------------------------------ the error type


def test_violation_is_queue_and_assertion_error() -> None:
    """InvariantViolation is caught by ``except QueueError`` and by ``except AssertionError``."""
    error = InvariantViolation("message", SENTINEL_LINKAGE)
    assert isinstance(error, QueueError)
    assert isinstance(error, AssertionError)
    assert error.invariant == SENTINEL_LINKAGE
    assert str(error) == "message"
    assert (error.clause, error.where, error.what, error.expected, error.found) == (None,) * 5


def test_violation_accepts_only_the_families() -> None:
    """An unknown family name is refused when the error is built."""
    assert INVARIANT_FAMILIES == (
        SENTINEL_LINKAGE,
        COUNT_CONSISTENCY,
        NO_DUPLICATES,
        DETACHED_OUTSIDE,
        "block_pool",
    )
    with pytest.raises(ValueError, match="unknown invariant family"):
        InvariantViolation("message", "linkage")


def test_violation_clause_must_be_of_its_family() -> None:
    """A clause must be an I-number that INVARIANT_FAMILY maps to the violation's family."""
    assert set(INVARIANT_FAMILY.values()) == set(INVARIANT_FAMILIES)
    for clause, family in INVARIANT_FAMILY.items():
        assert InvariantViolation("message", family, clause=clause).clause == clause
    for clause, family in (
        ("I4", SENTINEL_LINKAGE),
        ("I4", NO_DUPLICATES),  # I4 is filed under its own family
        ("I5", NO_DUPLICATES),
        ("1", SENTINEL_LINKAGE),
    ):
        with pytest.raises(ValueError, match="is not an invariant of the family"):
            InvariantViolation("message", family, clause=clause)


def test_violation_survives_pickling() -> None:
    """A pickled violation comes back with the same message, family and parts."""
    error = InvariantViolation("count is off", COUNT_CONSISTENCY)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is InvariantViolation
    assert (str(copy), copy.invariant) == ("count is off", COUNT_CONSISTENCY)
    assert copy.where is None
    queue, _ = queue_of(2)
    queue.num_free_blocks = 5
    found = raised(check_invariants, queue)
    assert found is not None
    copy = pickle.loads(pickle.dumps(found))
    assert (str(copy), copy.invariant, parts(copy)) == (str(found), found.invariant, parts(found))
    assert parts(copy) == ("I2", copy.where, "num_free_blocks", copy.expected, "5")


# ------------------------------------------------------------- diagnostics


def test_healthy_small_queues_pass() -> None:
    """Every checker returns None on healthy queues of 0 to 6 blocks."""
    for size in range(7):
        queue, blocks = queue_of(size)
        for checker in CHECKERS:
            assert raised(checker, queue) is None, (size, checker.__name__)
        assert raised(check_detached_outside, queue, [*blocks, Block()]) is None


def test_skewed_back_link_diagnostic() -> None:
    """A skewed prev link is reported with its invariant, position, block, expected and found."""
    queue, blocks = queue_of(4)
    blocks[2].prev_free_block = blocks[0]
    violation = raised(check_invariants, queue)
    assert violation is not None
    assert violation.invariant == SENTINEL_LINKAGE
    assert parts(violation) == (
        "I1",
        f"position 3 {WALK}",
        f"prev_free_block of {blocks[2]!r}",
        f"{blocks[1]!r} (position 2)",
        repr(blocks[0]),
    )


def test_ring_diagnostic_names_first_repeat() -> None:
    """A ring is reported as no_duplicates at the block met twice, with both positions."""
    queue, blocks = queue_of(6)
    blocks[5].next_free_block = blocks[2]
    for checker in (check_invariants, check_no_duplicates):
        violation = raised(checker, queue)
        assert violation is not None
        assert violation.invariant == NO_DUPLICATES
        assert (violation.clause, violation.where) == ("I3", f"position 7 {WALK}")
        assert violation.what == f"{blocks[2]!r} met a second time"
        assert (violation.found or "").startswith("the same block at position 3 (a cycle of 4 ")


def test_count_diagnostic_gives_both_numbers() -> None:
    """A count that is too low is reported with the real length, found by a second walk."""
    queue, _ = queue_of(5)
    queue.num_free_blocks = 2
    for checker in (check_invariants, check_count_consistency):
        violation = raised(checker, queue)
        assert violation is not None
        assert violation.invariant == COUNT_CONSISTENCY
        assert "expected 5 (the blocks between the sentinels), found 2" in str(violation)


def test_foreign_sentinel_named_as_another_s() -> None:
    """A link into another queue's sentinel is sentinel_linkage naming that sentinel."""
    queue, blocks = queue_of(2)
    other, _ = queue_of(1)
    blocks[0].next_free_block = other.fake_free_list_tail
    violation = raised(check_sentinel_linkage, queue)
    assert violation is not None
    assert violation.invariant == SENTINEL_LINKAGE
    assert f"found another queue's {other.fake_free_list_tail!r}" in str(violation)


# ----------------------------------------------------- totality on any damage


class _NotABlock:
    """An object outside code might write into a link; it has no links of its own."""


def _writes(obj: object, attribute: str, value: object) -> bool:
    """Write ``obj.attribute = value`` if the build allows it; return whether it did.

    A compiled build types its slots, so a link refuses a non-block and the
    count a non-int: that damage cannot happen there, and its test is skipped.
    """
    try:
        setattr(obj, attribute, value)
    except TypeError:
        return False
    # A compiled typed count stores an int subclass (bool) as a plain int.
    return type(getattr(obj, attribute)) is type(value)


UNWRITABLE = "this build's typed slots refuse the value, so the damage cannot happen"


@pytest.mark.parametrize(
    "value", [None, 7, "text", 2.5, _NotABlock(), object()], ids=lambda v: type(v).__name__
)
def test_non_block_link_is_sentinel_linkage(value: object) -> None:
    """Any non-block in a link gives sentinel_linkage from every checker, never another error."""
    for link in ("prev_free_block", "next_free_block"):
        queue, blocks = queue_of(3)
        if not _writes(blocks[1], link, value):
            pytest.skip(UNWRITABLE)
        for checker in (check_invariants, check_sentinel_linkage):
            violation = raised(checker, queue)
            assert violation is not None
            assert violation.invariant == SENTINEL_LINKAGE
        if link == "next_free_block":
            for checker in (check_count_consistency, check_no_duplicates):
                violation = raised(checker, queue)
                assert violation is not None
                assert violation.invariant == SENTINEL_LINKAGE


def test_deleted_link_slot_is_broken_link() -> None:
    """A link slot deleted with ``del`` is reported as an unset link, not an AttributeError."""
    try:
        del Block().next_free_block
    except AttributeError:
        pytest.skip("this build's Block refuses to delete a link, so the damage cannot happen")
    for link in ("prev_free_block", "next_free_block"):
        for index in range(3):
            queue, blocks = queue_of(3)
            delattr(blocks[index], link)
            violation = raised(check_invariants, queue)
            assert violation is not None
            assert "an unset link slot" in str(violation)
            for checker in CHECKERS[1:]:
                raised(checker, queue)  # passes or flags; any other exception fails the test
    queue, _ = queue_of(1)
    del queue.fake_free_list_head.prev_free_block
    violation = raised(check_sentinel_linkage, queue)
    assert violation is not None
    assert violation.invariant == SENTINEL_LINKAGE


def test_replaced_sentinels_rejected() -> None:
    """A queue whose sentinel attribute holds no sentinel, or the same one twice, is flagged."""
    for value in (None, Block(), 3):
        queue, _ = queue_of(2)
        if not _writes(queue, "fake_free_list_head", value):
            continue  # a compiled queue's typed slot refuses None and 3; a plain Block gets in
        for checker in CHECKERS:
            violation = raised(checker, queue)
            assert violation is not None
            assert violation.invariant == SENTINEL_LINKAGE
    queue, _ = queue_of(0)
    queue.fake_free_list_tail = queue.fake_free_list_head
    assert raised(check_invariants, queue) is not None


@pytest.mark.parametrize("count", [-1, None, "2", 2.0, True])
def test_count_that_is_no_count_rejected(count: object) -> None:
    """A negative or non-int count is count_consistency for the checkers that read it."""
    queue, _ = queue_of(2)
    if not _writes(queue, "num_free_blocks", count):
        pytest.skip(UNWRITABLE)
    for checker in (check_invariants, check_count_consistency):
        violation = raised(checker, queue)
        assert violation is not None
        assert violation.invariant == COUNT_CONSISTENCY
    assert raised(check_sentinel_linkage, queue) is None


class _LoudRepr(Block):
    """A block whose repr raises, as a careless user subclass's might."""

    __slots__ = ()

    def __repr__(self) -> str:
        raise RuntimeError("repr failed")


def test_raising_repr_still_gets_diagnostic() -> None:
    """The diagnostic falls back to type and identity when a block's repr raises."""
    blocks = [_LoudRepr(), _LoudRepr()]
    queue = FreeBlockQueue(blocks)
    blocks[1].prev_free_block = None
    violation = raised(check_invariants, queue)
    assert violation is not None
    assert f"<_LoudRepr at {id(blocks[1]):#x}>" in str(violation)


def test_checkers_end_on_long_ring_and_chain() -> None:
    """A 20,000-block queue passes, and a ring closing at its far end is found, no recursion."""
    queue, blocks = queue_of(20_000)
    for checker in CHECKERS:
        assert raised(checker, queue) is None
    blocks[-1].next_free_block = blocks[10]
    violation = raised(check_no_duplicates, queue)
    assert violation is not None
    assert violation.invariant == NO_DUPLICATES
    assert "at position 11 (a cycle of 19990 blocks" in str(violation)
    for checker in CHECKERS:
        assert raised(checker, queue) is not None


def test_chain_into_another_queue_flagged() -> None:
    """A link into the middle of another queue is caught even though that queue ends properly."""
    queue, blocks = queue_of(3)
    other, other_blocks = queue_of(3)
    blocks[1].next_free_block = other_blocks[1]
    assert [getattr(raised(checker, queue), "invariant", None) for checker in CHECKERS] == [
        SENTINEL_LINKAGE,
        SENTINEL_LINKAGE,
        SENTINEL_LINKAGE,  # the walk meets the other queue's tail before the count runs out
        SENTINEL_LINKAGE,
    ]
    assert raised(check_invariants, other) is None


# ---------------------------------------------------------- identity only


TRIPPED: list[str] = []


class Tripwire(Block):
    """A block whose ``==`` and hash record the call and raise."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        TRIPPED.append("__eq__")
        raise AssertionError("a checker compared blocks with ==")

    def __hash__(self) -> int:
        TRIPPED.append("__hash__")
        raise AssertionError("a checker hashed a block")


def same(left: list[Tripwire], right: list[Tripwire]) -> bool:
    """Whether two lists hold the same blocks in the same order, by identity."""
    return len(left) == len(right) and all(a is b for a, b in zip(left, right, strict=True))


def _damages(blocks: list[Tripwire], queue: FreeBlockQueue[Tripwire]) -> list[Callable[[], None]]:
    def ring() -> None:
        blocks[-1].next_free_block = blocks[1]

    def self_loop() -> None:
        blocks[2].next_free_block = blocks[2]

    def skew() -> None:
        blocks[2].prev_free_block = blocks[0]

    def cleared() -> None:
        blocks[1].next_free_block = None

    def count() -> None:
        queue.num_free_blocks += 1

    def outsider() -> None:
        blocks[-1].next_free_block = Tripwire()

    return [ring, self_loop, skew, cleared, count, outsider]


def test_checkers_never_call_a_block_s_eq_or_hash() -> None:
    """Every checker, passing or flagging damage, leaves a tripwire block's == and hash alone."""
    TRIPPED.clear()
    for index in range(6):
        blocks = [Tripwire() for _ in range(5)]
        queue: FreeBlockQueue[Tripwire] = FreeBlockQueue(blocks)
        pool = [*blocks, Tripwire()]
        for checker in CHECKERS:
            assert raised(checker, queue) is None
        assert raised(check_detached_outside, queue, pool) is None
        _damages(blocks, queue)[index]()
        assert raised(check_invariants, queue) is not None
        for checker in CHECKERS[1:]:
            raised(checker, queue)
        raised(check_detached_outside, queue, pool)
    assert TRIPPED == []


def test_check_mode_never_calls_eq_or_hash() -> None:
    """Check-mode operations, their rejections and their full checks never touch == or hash."""
    TRIPPED.clear()
    blocks = [Tripwire() for _ in range(6)]
    queue = CheckedFreeBlockQueue(blocks[:4], full_check_every=1)
    other = CheckedFreeBlockQueue(blocks[4:5])
    queue.remove(blocks[1])
    queue.append(blocks[1])
    queue.append_n([blocks[5]])
    assert queue.popleft() is blocks[0]
    assert same(queue.popleft_n(2), [blocks[2], blocks[3]])
    assert blocks[1] in queue
    assert blocks[4] not in queue
    assert same(list(queue), queue.get_all_free_blocks())
    misuses: list[tuple[Callable[[], object], type[QueueError]]] = [
        (lambda: queue.remove(blocks[4]), NotInQueueError),
        (lambda: queue.remove(blocks[0]), NotInQueueError),
        (lambda: queue.append(blocks[1]), AlreadyInQueueError),
        (lambda: other.append_n([blocks[0], blocks[0]]), AlreadyInQueueError),
    ]
    for misuse, error in misuses:
        with pytest.raises(error):
            misuse()
    blocks[1].prev_free_block = None
    with pytest.raises(InvariantViolation):
        queue.popleft()
    assert TRIPPED == []


# ------------------------------------------------------- no false positives


def _random_step(  # noqa: PLR0911 -- one return per kind of operation keeps the dispatch flat
    rng: random.Random,
    queue: FreeBlockQueue[Block],
    model: list[Block],
    outside: list[Block],
    foreign: list[Block] | None,
) -> list[Block]:
    """Apply one random operation, or a misuse the queue must reject; return the new model."""
    roll = rng.random()
    if roll < 0.2:
        if not model:
            with pytest.raises(EmptyQueueError):
                queue.popleft()
            return model
        assert queue.popleft() is model[0]
        return model[1:]
    if roll < 0.3:
        n = rng.randint(-1, len(model) + 1)
        if not 0 <= n <= len(model):
            with pytest.raises((EmptyQueueError, NegativeCountError)):
                queue.popleft_n(n)
            return model
        assert queue.popleft_n(n) == model[:n]
        return model[n:]
    if roll < 0.5 and model:
        block = rng.choice(model)
        queue.remove(block)
        return [b for b in model if b is not block]
    if roll < 0.7 and outside:
        block = rng.choice(outside)
        queue.append(block)
        return [*model, block]
    if roll < 0.8:
        batch = rng.sample(outside, min(len(outside), rng.randint(0, 3)))
        queue.append_n(iter(batch))
        return model + batch
    if roll < 0.9 and model:
        with pytest.raises(AlreadyInQueueError):
            queue.append(rng.choice(model))  # a double free
    elif roll < 0.95 and outside:
        with pytest.raises(NotInQueueError):
            queue.remove(rng.choice(outside))  # linked nowhere
    elif foreign:
        with pytest.raises(NotInQueueError):
            queue.remove(rng.choice(foreign))  # linked in another queue: check mode only
    return model


def _random_workload(
    seed: int, steps: int, checked: bool, check: Callable[..., None] = check_invariants
) -> int:
    """Run ``steps`` random operations, misuse included, checking both queues after each.

    Returns the number of checks that ran; a false positive raises.
    """
    rng = random.Random(seed)
    universe = [Block() for _ in range(48)]

    def make(blocks: list[Block]) -> FreeBlockQueue[Block]:
        if checked:
            return CheckedFreeBlockQueue(blocks, full_check_every=rng.randint(1, 50))
        return FreeBlockQueue(blocks)

    queue = make(universe[:24])
    model = list(universe[:24])
    other_blocks = [Block() for _ in range(4)]
    other = make(other_blocks)
    checks = 0
    for _ in range(steps):
        members = {id(block) for block in model}
        outside = [block for block in universe if id(block) not in members]
        model = _random_step(rng, queue, model, outside, other_blocks if checked else None)
        if check is check_invariants:
            check(queue, universe)
        else:
            check(queue)
        check(other)
        checks += 2
        assert queue.get_all_free_blocks() == model
    return checks


@pytest.mark.parametrize("seed", range(3))
def test_no_false_positive_on_long_workload(seed: int) -> None:
    """Healthy queues are never flagged by any checker through 3,000 random operations each."""
    for checker in CHECKERS:
        assert _random_workload(seed, 3_000, checked=False, check=checker) == 6_000


@pytest.mark.parametrize("seed", range(2))
def test_no_false_positive_in_check_mode(seed: int) -> None:
    """Check mode, with frequent full checks, never flags a queue used correctly."""
    assert _random_workload(seed, 3_000, checked=True) == 6_000


@given(st.integers(min_value=0, max_value=2**32 - 1), st.booleans())
def test_no_false_positive_on_generated_workloads(seed: int, checked: bool) -> None:
    """Hypothesis-chosen workloads never make a checker flag a healthy queue."""
    _random_workload(seed, 200, checked=checked)


def test_message_is_built_from_fields() -> None:
    """Every violation's message is 'CLAUSE (family) broken at WHERE: WHAT: expected X, found Y'."""

    def shape(violation: InvariantViolation) -> str:
        return (
            f"{violation.clause} ({violation.invariant}) broken at {violation.where}: "
            f"{violation.what}: expected {violation.expected}, found {violation.found}"
        )

    for damage in ("cleared", "ring", "count", "after tail", "outsider"):
        queue, blocks = queue_of(3)
        if damage == "cleared":
            blocks[0].next_free_block = None
        elif damage == "ring":
            blocks[2].next_free_block = blocks[0]
        elif damage == "count":
            queue.num_free_blocks = 9
        elif damage == "after tail":
            queue.fake_free_list_tail.next_free_block = blocks[1]
        else:
            check_detached_outside(queue, [*blocks, Block()])
            outsider = Block()
            outsider.prev_free_block = blocks[0]
            violation = raised(check_detached_outside, queue, [outsider])
            assert violation is not None
            assert (violation.clause, str(violation)) == ("I4", shape(violation))
            continue
        violation = raised(check_invariants, queue)
        assert violation is not None
        assert str(violation) == shape(violation)
        assert violation.clause in INVARIANT_FAMILY
        assert INVARIANT_FAMILY[violation.clause] == violation.invariant


# ------------------------------------------------ every diagnostic, part by part


WALK = "of the forward walk (head = 0)"


def _message(checker: Callable[..., None], *args: object) -> tuple[str, tuple[str | None, ...]]:
    """The family and the parts of the violation ``checker`` raises."""
    violation = raised(checker, *args)
    assert violation is not None, "the checker passed a damaged queue"
    return violation.invariant, parts(violation)


def test_every_linkage_diagnostic() -> None:
    """Each place I1 can break is reported with its exact parts by the checkers that see it."""
    queue, blocks = queue_of(3)
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    b0, b1, b2 = blocks
    other, other_blocks = queue_of(1)

    head.prev_free_block = b1
    assert _message(check_invariants, queue) == (
        SENTINEL_LINKAGE,
        ("I1", "the head sentinel", f"prev_free_block of this queue's {head!r}", "None", repr(b1)),
    )
    assert _message(check_sentinel_linkage, queue)[1] == _message(check_invariants, queue)[1]
    head.prev_free_block = None

    tail.next_free_block = other.fake_free_list_head
    assert _message(check_detached_outside, queue, []) == (
        SENTINEL_LINKAGE,
        (
            "I1",
            "the tail sentinel",
            f"next_free_block of this queue's {tail!r}",
            "None",
            f"another queue's {other.fake_free_list_head!r}",
        ),
    )
    tail.next_free_block = None

    b1.next_free_block = other_blocks[0]
    b1.prev_free_block = b0
    expected = (
        SENTINEL_LINKAGE,
        (
            "I1",
            f"position 3 {WALK}",
            f"prev_free_block of {other_blocks[0]!r}",
            f"{b1!r} (position 2)",
            f"another queue's {other.fake_free_list_head!r}",
        ),
    )
    assert _message(check_invariants, queue) == expected
    assert _message(check_sentinel_linkage, queue) == expected
    b1.next_free_block = tail
    expected = (
        SENTINEL_LINKAGE,
        (
            "I1",
            f"position 3 {WALK}",
            f"prev_free_block of this queue's {tail!r}",
            f"{b1!r} (position 2)",
            repr(b2),
        ),
    )
    assert _message(check_invariants, queue) == expected
    assert _message(check_detached_outside, queue, blocks) == expected
    b1.next_free_block = head
    expected = (
        SENTINEL_LINKAGE,
        (
            "I1",
            f"position 3 {WALK}",
            f"next_free_block of {b1!r} (position 2)",
            "a block or this queue's tail sentinel",
            f"this queue's {head!r}",
        ),
    )
    for checker in CHECKERS:
        assert _message(checker, queue) == expected, checker.__name__
    b1.next_free_block = b2
    for stray in (head, tail):
        b1.prev_free_block = stray
        assert _message(check_invariants, queue) == (
            SENTINEL_LINKAGE,
            (
                "I1",
                f"position 2 {WALK}",
                f"prev_free_block of {b1!r}",
                f"{b0!r} (position 1)",
                f"this queue's {stray!r}",
            ),
        )
    b1.prev_free_block = b0
    b0.prev_free_block = tail
    assert _message(check_sentinel_linkage, queue) == (
        SENTINEL_LINKAGE,
        (
            "I1",
            f"position 1 {WALK}",
            f"prev_free_block of {b0!r}",
            f"this queue's {head!r} (position 0)",
            f"this queue's {tail!r}",
        ),
    )
    b0.prev_free_block = head
    b1.next_free_block = None
    assert _message(check_no_duplicates, queue) == (
        SENTINEL_LINKAGE,
        (
            "I1",
            f"position 3 {WALK}",
            f"next_free_block of {b1!r} (position 2)",
            "a block or this queue's tail sentinel",
            "None",
        ),
    )


def test_queue_attribute_diagnostics() -> None:
    """A sentinel attribute that holds no sentinel, or the head twice, is named exactly."""
    queue, _ = queue_of(1)
    if not _writes(queue, "fake_free_list_tail", None):
        pytest.skip(UNWRITABLE)
    for checker in CHECKERS:
        assert _message(checker, queue) == (
            SENTINEL_LINKAGE,
            ("I1", "the queue", "fake_free_list_tail", "a Sentinel", "None"),
        )
    queue.fake_free_list_tail = queue.fake_free_list_head
    assert _message(check_invariants, queue) == (
        SENTINEL_LINKAGE,
        ("I1", "the queue", "fake_free_list_tail", "a second sentinel", "the head"),
    )
    queue, _ = queue_of(1)
    queue.fake_free_list_head = Block()
    assert _message(check_no_duplicates, queue)[1] == (
        ("I1", "the queue", "fake_free_list_head", "a Sentinel", repr(queue.fake_free_list_head))
    )
    queue, _ = queue_of(1)
    del queue.fake_free_list_head
    assert _message(check_count_consistency, queue)[1] == (
        ("I1", "the queue", "fake_free_list_head", "a Sentinel", "an unset link slot")
    )
    queue, _ = queue_of(1)
    del queue.num_free_blocks
    assert _message(check_invariants, queue)[1] == (
        ("I2", "the queue", "num_free_blocks", "a non-negative int", "an unset link slot")
    )


def test_every_duplicate_diagnostic() -> None:
    """A self-loop and a longer ring name the block met twice, both positions and the cycle."""
    queue, blocks = queue_of(3)
    b0, b1, b2 = blocks
    b1.next_free_block = b1
    expected = (
        NO_DUPLICATES,
        (
            "I3",
            f"position 3 {WALK}",
            f"{b1!r} met a second time",
            "every block once, then the tail",
            "the same block at position 2 (a cycle of 1 block that never reaches the tail)",
        ),
    )
    assert _message(check_invariants, queue) == expected
    assert _message(check_no_duplicates, queue) == expected
    assert _message(check_detached_outside, queue, blocks) == expected
    assert _message(check_sentinel_linkage, queue) == (
        SENTINEL_LINKAGE,
        (
            "I1",
            f"position 3 {WALK}",
            f"prev_free_block of {b1!r}",
            f"{b1!r} (position 2)",
            repr(b0),
        ),
    )
    b1.next_free_block = b2
    b2.next_free_block = b0
    assert _message(check_no_duplicates, queue)[1] == (
        (
            "I3",
            f"position 4 {WALK}",
            f"{b0!r} met a second time",
            "every block once, then the tail",
            "the same block at position 1 (a cycle of 3 blocks that never reaches the tail)",
        )
    )
    queue.num_free_blocks = 1
    assert _message(check_count_consistency, queue)[1] == _message(check_no_duplicates, queue)[1]


def test_detached_outside_diagnostics() -> None:
    """A pool block outside the queue with a link set is named with its index and both links."""
    queue, blocks = queue_of(2)
    outsider = Block()
    outsider.next_free_block = blocks[0]
    assert _message(check_detached_outside, queue, [blocks[1], Block(), outsider]) == (
        DETACHED_OUTSIDE,
        (
            "I4",
            "item 2 of the given blocks",
            f"the links of {outsider!r}, which is not in this queue",
            "both None (detached)",
            f"prev_free_block None, next_free_block {blocks[0]!r}",
        ),
    )
    assert raised(check_invariants, queue, [outsider]) is not None
    outsider.next_free_block = None
    outsider.prev_free_block = queue.fake_free_list_tail
    assert _message(check_invariants, queue, [outsider])[1][4] == (
        f"prev_free_block this queue's {queue.fake_free_list_tail!r}, next_free_block None"
    )
    outsider.prev_free_block = None
    outsider.next_free_block = queue.fake_free_list_head
    assert _message(check_detached_outside, queue, [outsider])[1][4] == (
        f"prev_free_block None, next_free_block this queue's {queue.fake_free_list_head!r}"
    )
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    outsider.prev_free_block, outsider.next_free_block = head, tail
    assert _message(check_detached_outside, queue, [outsider])[1][4] == (
        f"prev_free_block this queue's {head!r}, next_free_block this queue's {tail!r}"
    )
    for sentinel in (head, tail):  # a pool that wrongly lists a sentinel: it is never detached
        assert _message(check_detached_outside, queue, [sentinel])[1][2] == (
            f"the links of this queue's {sentinel!r}, which is not in this queue"
        )


@pytest.mark.parametrize(
    ("count", "shown"),
    [(-1, "-1"), (True, "True"), (None, "None"), (2.0, "a non-block <float object at ")],
)
def test_every_count_diagnostic(count: object, shown: str) -> None:
    """A count that is no count, or the wrong one, is reported exactly, by both checkers."""
    queue, _ = queue_of(2)
    if not _writes(queue, "num_free_blocks", count):
        pytest.skip(UNWRITABLE)
    for checker in (check_invariants, check_count_consistency):
        family, message = _message(checker, queue)
        assert family == COUNT_CONSISTENCY
        assert message[:4] == ("I2", "the queue", "num_free_blocks", "a non-negative int")
        assert (message[4] or "").startswith(shown)
    for wrong, length in ((1, 2), (3, 2), (0, 2)):
        queue, _ = queue_of(length)
        queue.num_free_blocks = wrong
        for checker in (check_invariants, check_count_consistency):
            assert _message(checker, queue) == (
                COUNT_CONSISTENCY,
                (
                    "I2",
                    f"the tail, reached at position {length + 1} {WALK}",
                    "num_free_blocks",
                    f"{length} (the blocks between the sentinels)",
                    f"{wrong}",
                ),
            )


def test_describe_names_each_kind_of_value() -> None:
    """describe names None, an unset slot, a non-block, a block, and either queue's sentinels."""
    queue, blocks = queue_of(1)
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    other = FreeBlockQueue[Block]().fake_free_list_tail
    assert describe(None) == "None"
    assert describe(_UNSET) == "an unset link slot"
    thing = _NotABlock()
    assert describe(thing, head, tail) == f"a non-block {object.__repr__(thing)}"
    assert describe(blocks[0], head, tail) == repr(blocks[0])
    assert describe(head, head, tail) == f"this queue's {head!r}"
    assert describe(tail, head, tail) == f"this queue's {tail!r}"
    assert describe(tail) == f"another queue's {tail!r}"
    assert describe(other, head, tail) == f"another queue's {other!r}"
    loud = _LoudRepr()
    assert describe(loud) == f"<_LoudRepr at {id(loud):#x}>"


def test_is_block_needs_both_links() -> None:
    """An object with both link attributes is a block; with one, or none, it is not."""

    class BothLinks:
        prev_free_block = None
        next_free_block = None

    class OneLink:
        prev_free_block = None

    assert is_block(Block())
    assert is_block(BothLinks())
    assert not is_block(OneLink())
    assert not is_block(None)


class _IntLike(int):
    """An int subclass, as numpy's integer scalars are int-like."""


def _damages_of_every_kind() -> dict[str, Callable[[FreeBlockQueue[Block], list[Block]], None]]:
    """Damage of each kind the checkers must survive, on a queue of three blocks."""

    def link(index: int, name: str, value: object) -> Callable[..., None]:
        return lambda _q, b: setattr(b[index], name, value)

    return {
        "deleted prev slot": lambda _q, b: delattr(b[1], "prev_free_block"),
        "deleted next slot": lambda _q, b: delattr(b[1], "next_free_block"),
        "deleted head next slot": lambda q, _b: delattr(q.fake_free_list_head, "next_free_block"),
        "deleted head prev slot": lambda q, _b: delattr(q.fake_free_list_head, "prev_free_block"),
        "deleted tail prev slot": lambda q, _b: delattr(q.fake_free_list_tail, "prev_free_block"),
        "deleted tail next slot": lambda q, _b: delattr(q.fake_free_list_tail, "next_free_block"),
        "deleted count": lambda q, _b: delattr(q, "num_free_blocks"),
        "deleted head": lambda q, _b: delattr(q, "fake_free_list_head"),
        "deleted tail": lambda q, _b: delattr(q, "fake_free_list_tail"),
        "bool count": lambda q, _b: setattr(q, "num_free_blocks", True),
        "float count": lambda q, _b: setattr(q, "num_free_blocks", 3.0),
        "string count": lambda q, _b: setattr(q, "num_free_blocks", "3"),
        "negative count": lambda q, _b: setattr(q, "num_free_blocks", -3),
        "int-like count, wrong": lambda q, _b: setattr(q, "num_free_blocks", _IntLike(4)),
        "non-block next": link(0, "next_free_block", object()),
        "non-block prev": link(2, "prev_free_block", "a string"),
        "integer link": link(1, "next_free_block", 12),
        "head replaced by a block": lambda q, _b: setattr(q, "fake_free_list_head", Block()),
        "tail replaced by a string": lambda q, _b: setattr(q, "fake_free_list_tail", "tail"),
        "tail replaced by the head": lambda q, _b: setattr(
            q, "fake_free_list_tail", q.fake_free_list_head
        ),
        "tail linked past itself": lambda q, b: setattr(
            q.fake_free_list_tail, "next_free_block", b[0]
        ),
    }


@pytest.mark.parametrize("damage", list(_damages_of_every_kind()))
def test_only_violations_escape_checkers(damage: str) -> None:
    """Each kind of damage makes every checker return or raise InvariantViolation, nothing else."""
    queue, blocks = queue_of(3)
    try:
        _damages_of_every_kind()[damage](queue, blocks)
    except (AttributeError, TypeError):
        pytest.skip(UNWRITABLE)
    pool = [*blocks, Block()]
    for checker in CHECKERS:
        raised(checker, queue)  # anything but InvariantViolation fails the test here
    raised(check_detached_outside, queue, pool)
    violation = raised(check_invariants, queue, pool)
    assert violation is not None
    assert violation.invariant in INVARIANT_FAMILIES


def test_outsider_with_deleted_slot_not_detached() -> None:
    """A pool block outside the queue with a deleted link slot is reported, not deemed detached."""
    for link, found in (
        ("prev_free_block", "prev_free_block an unset link slot, next_free_block None"),
        ("next_free_block", "prev_free_block None, next_free_block an unset link slot"),
    ):
        queue, blocks = queue_of(2)
        outsider = Block()
        try:
            delattr(outsider, link)
        except AttributeError:
            pytest.skip("this build's Block refuses to delete a link, so the damage cannot happen")
        for checker in (check_detached_outside, check_invariants):
            family, message = _message(checker, queue, [*blocks, outsider])
            assert family == DETACHED_OUTSIDE
            assert message[3:] == ("both None (detached)", found), message


def test_sentinel_count_names_whose_sentinel() -> None:
    """A sentinel written into the count is named as this queue's head or tail, or another's."""
    queue, _ = queue_of(1)
    other = FreeBlockQueue[Block]().fake_free_list_head
    for count, shown in (
        (queue.fake_free_list_head, f"this queue's {queue.fake_free_list_head!r}"),
        (queue.fake_free_list_tail, f"this queue's {queue.fake_free_list_tail!r}"),
        (other, f"another queue's {other!r}"),
    ):
        if not _writes(queue, "num_free_blocks", count):
            pytest.skip(UNWRITABLE)
        for checker in (check_invariants, check_count_consistency):
            assert _message(checker, queue) == (
                COUNT_CONSISTENCY,
                ("I2", "the queue", "num_free_blocks", "a non-negative int", f"{shown}"),
            )


def test_forward_walks_name_head_and_unset() -> None:
    """Every walk names the head at position 0, and an unset next slot, part by part."""
    queue, blocks = queue_of(2)
    other = FreeBlockQueue[Block]().fake_free_list_tail
    head = queue.fake_free_list_head
    head.next_free_block = other
    for checker in CHECKERS:
        assert _message(checker, queue) == (
            SENTINEL_LINKAGE,
            (
                "I1",
                f"position 1 {WALK}",
                f"next_free_block of this queue's {head!r} (position 0)",
                "a block or this queue's tail sentinel",
                f"another queue's {other!r}",
            ),
        )
    try:
        del head.next_free_block
    except AttributeError:
        pytest.skip("this build's Block refuses to delete a link, so the damage cannot happen")
    for checker in CHECKERS:
        assert _message(checker, queue)[1][2:] == (
            f"next_free_block of this queue's {head!r} (position 0)",
            "a block or this queue's tail sentinel",
            "an unset link slot",
        ), checker.__name__
    queue, blocks = queue_of(2)
    del blocks[0].next_free_block
    for checker in CHECKERS:
        assert _message(checker, queue) == (
            SENTINEL_LINKAGE,
            (
                "I1",
                f"position 2 {WALK}",
                f"next_free_block of {blocks[0]!r} (position 1)",
                "a block or this queue's tail sentinel",
                "an unset link slot",
            ),
        ), checker.__name__
