"""Tests of Block: detached from birth in every subclass shape, a repr that never walks links."""

from __future__ import annotations

import copy
import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import pytest

import verified_queue
from tests.helpers import KVCacheBlock, NumberedBlock
from verified_queue import Block, FreeBlockQueue, WrongTypeError


def test_plain_block_starts_detached() -> None:
    """Block() has both links None and takes no arguments."""
    block = Block()
    assert block.prev_free_block is None
    assert block.next_free_block is None
    with pytest.raises(TypeError):
        Block(1)  # type: ignore[call-arg]  # Block.__init__ takes no arguments


def test_block_has_only_link_slots() -> None:
    """Block is slotted with exactly the two links, so instances carry no __dict__."""
    if not verified_queue.COMPILED:
        # Compiled, Block is a native class: its links are C struct fields, not __slots__.
        assert Block.__slots__ == ("prev_free_block", "next_free_block")
    assert not hasattr(Block(), "__dict__")
    with pytest.raises(AttributeError):
        Block().extra = 1  # type: ignore[attr-defined]  # the point: no room for it


def test_subclass_that_skips_block_init_starts_detached() -> None:
    """A subclass whose __init__ never calls Block.__init__ still starts detached."""
    block = NumberedBlock(7)
    assert block.prev_free_block is None
    assert block.next_free_block is None
    assert not hasattr(block, "__dict__")


def test_slotted_dataclass_subclass_needs_no_extra_code() -> None:
    """A @dataclass(slots=True) subclass with a required field starts detached and keeps __eq__."""
    block = KVCacheBlock(3)
    assert block.prev_free_block is None
    assert block.next_free_block is None
    assert block == KVCacheBlock(3)
    assert [field.name for field in dataclasses.fields(block)] == [
        "block_id",
        "ref_cnt",
        "block_hash",
    ]
    assert repr(block) == "KVCacheBlock(block_id=3, ref_cnt=0, block_hash=None)"


def test_equal_dataclass_blocks_stay_distinct_in_the_queue() -> None:
    """Blocks that compare equal are still told apart by identity in every operation."""
    twins = [KVCacheBlock(0) for _ in range(3)]
    queue = FreeBlockQueue(twins)
    queue.remove(twins[1])
    assert [b is t for b, t in zip(queue, [twins[0], twins[2]], strict=True)] == [True, True]
    queue.append(twins[1])
    assert queue.popleft() is twins[0]
    assert queue.popleft() is twins[2]
    assert queue.popleft() is twins[1]


def test_block_repr_shows_link_state_only() -> None:
    """Block's repr says linked or detached and names no neighbour."""
    block = Block()
    assert repr(block).endswith(", detached>")
    FreeBlockQueue([block])
    assert repr(block).endswith(", linked>")
    assert "sentinel" not in repr(block)


def test_repr_of_block_in_long_chain_does_not_recurse() -> None:
    """The repr of a block in a 100,000-block chain is short and does not follow the links."""
    blocks = [Block() for _ in range(100_000)]
    queue = FreeBlockQueue(blocks)
    assert len(repr(blocks[50_000])) < 80
    assert len(repr(queue)) < 80
    assert len(repr(queue.fake_free_list_head)) < 80


@dataclasses.dataclass(slots=True)
class OwnLinksBlock:
    """A block that is not a Block: a slotted dataclass declaring the two links itself.

    It has the shape of vLLM's own KVCacheBlock (fields, generated __eq__, links declared
    as its own fields), so it shows what the queue does with that class unchanged.
    """

    block_id: int
    ref_cnt: int = 0
    prev_free_block: OwnLinksBlock | None = None
    next_free_block: OwnLinksBlock | None = None


def test_block_with_its_own_links_works_pure_and_is_refused_compiled() -> None:
    """Pure Python links a non-Block with both links; compiled refuses it naming the fix."""
    blocks = [OwnLinksBlock(i) for i in range(3)]
    if verified_queue.COMPILED:
        with pytest.raises(WrongTypeError, match=r"subclass verified_queue\.Block and drop"):
            FreeBlockQueue(blocks)
        assert all(b.prev_free_block is None and b.next_free_block is None for b in blocks)
        return
    queue = FreeBlockQueue(blocks)
    queue.remove(blocks[1])
    queue.prepend_n([blocks[1]])
    assert queue.get_all_free_blocks() == [blocks[1], blocks[0], blocks[2]]
    assert queue.popleft() is blocks[1]
    assert blocks[1].prev_free_block is None


def define_field_block() -> None:
    """Define a slotted dataclass Block subclass that re-declares a link as a field."""

    @dataclasses.dataclass(slots=True)
    class FieldBlock(Block):
        block_id: int
        prev_free_block: Block | None = None


def define_slot_block() -> None:
    """Define a Block subclass that re-declares a link in its own __slots__."""

    class SlotBlock(Block):
        __slots__ = ("next_free_block",)


def define_property_block() -> None:
    """Define a Block subclass that overrides a link with a property."""

    class PropertyBlock(Block):
        @property
        def next_free_block(self) -> Block | None:  # type: ignore[override]  # the mistake under test
            return None


def define_frozen_block() -> None:
    """Define a frozen slotted dataclass Block subclass (its __setattr__ would block links)."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class FrozenBlock(Block):
        block_id: int


@pytest.mark.parametrize(
    "define", [define_field_block, define_slot_block, define_property_block, define_frozen_block]
)
def test_subclass_redeclaring_a_link_is_refused_at_class_creation(
    define: Callable[[], None],
) -> None:
    """A Block subclass that re-declares a link or is frozen is a TypeError when defined."""
    with pytest.raises(TypeError, match="drop those declarations"):
        define()


def test_the_refusal_names_every_redeclared_link_and_says_what_to_do() -> None:
    """The whole message of a refused subclass: its name, the links it re-declares, the fix."""

    with pytest.raises(TypeError) as caught:

        class BothLinks(Block):
            __slots__ = ("prev_free_block", "next_free_block")

    assert str(caught.value).rpartition(".<locals>.")[2] == (
        "BothLinks re-declares prev_free_block, next_free_block of verified_queue.Block "
        "(itself or through a base class): the queue links blocks through Block's own "
        "prev_free_block and next_free_block slots, which compiled code reaches directly; "
        "drop those declarations from the subclass and its mixins (Block already has the "
        "links), and do not freeze it"
    )


def test_a_class_first_copied_in_the_test_saves_every_slot_and_its_dict() -> None:
    """A Block class defined here, so copied for the first time here, keeps what it declares.

    Its slots (a string ``__slots__`` and a tuple, over two levels) and its ``__dict__``, less
    the links and ``__weakref__``; an unset slot stays unset. Defined in the test, not at
    import, so that what the class saves is worked out by this test and not by an earlier one.
    """

    class Named(Block):
        # A string, as Python allows: the one slot it names, not its letters.
        __slots__ = "name"  # noqa: PLC0205
        name: str

    class Pair(Named):
        __slots__ = ("left", "right", "__dict__", "__weakref__")
        left: int
        right: int
        extra: list[int]

    block = Pair()
    block.name, block.left, block.extra = "n", 1, [2]
    block.prev_free_block = Block()
    twin = copy.deepcopy(block)
    assert (twin.name, twin.left, twin.extra) == ("n", 1, [2])
    assert twin.extra is not block.extra
    assert not hasattr(twin, "right")
    assert twin.prev_free_block is None
    assert twin.next_free_block is None
    assert weakref.ref(twin)() is twin


def test_sentinels_carry_block_id_minus_one() -> None:
    """Both sentinels have block_id -1, as vLLM's do, so code reading a neighbour's id works."""
    queue = FreeBlockQueue[Block]()
    assert queue.fake_free_list_head.block_id == -1  # type: ignore[attr-defined]
    assert queue.fake_free_list_tail.block_id == -1  # type: ignore[attr-defined]


def test_frozen_unslotted_dataclass_subclass_is_refused_when_built() -> None:
    """A frozen dataclass without slots gets __setattr__ after creation: refused at construction."""

    @dataclasses.dataclass(frozen=True)
    class FrozenBlock(Block):
        block_id: int

    with pytest.raises(TypeError, match="do not freeze it"):
        FrozenBlock(1)


class _LinkPropertyMixin:
    """A mixin whose back link is a property: it would hide Block's slot if listed first."""

    @property
    def prev_free_block(self) -> None:
        """Always None: a hook the compiled queue would bypass."""
        return None


class _GetattributeMixin:
    """A mixin that hooks every attribute read."""

    def __getattribute__(self, name: str) -> Any:
        return object.__getattribute__(self, name)


def define_link_property_through_mixin() -> None:
    """Define a Block subclass inheriting a link property from a mixin listed before Block."""

    class MixedBlock(_LinkPropertyMixin, Block):  # type: ignore[misc]  # the point
        __slots__ = ()


def define_getattribute_through_mixin() -> None:
    """Define a Block subclass inheriting __getattribute__ from a mixin."""

    class MixedBlock(_GetattributeMixin, Block):
        __slots__ = ()


@pytest.mark.parametrize(
    "define", [define_link_property_through_mixin, define_getattribute_through_mixin]
)
def test_a_hook_inherited_from_a_mixin_is_refused_at_class_creation(
    define: Callable[[], None],
) -> None:
    """A link property or __getattribute__ from a mixin is refused as if declared in the class."""
    with pytest.raises(TypeError, match=r"re-declares .* \(itself or through a base class\)"):
        define()


def test_a_mixin_listed_after_block_hides_nothing_and_is_accepted() -> None:
    """A mixin after Block in the bases cannot hide Block's links: the class is accepted."""

    class MixedBlock(Block, _LinkPropertyMixin):  # type: ignore[misc]  # the point
        __slots__ = ()

    block = MixedBlock()
    assert FreeBlockQueue([block]).popleft() is block


@pytest.mark.parametrize(
    ("name", "hook"),
    [
        ("__getattribute__", _GetattributeMixin.__getattribute__),
        ("prev_free_block", _LinkPropertyMixin.__dict__["prev_free_block"]),
    ],
)
def test_a_hook_assigned_after_class_creation_is_refused_at_the_first_block(
    name: str, hook: object
) -> None:
    """A hook set on the class after it was created is refused when its first block is built."""

    class LateHooked(Block):
        __slots__ = ()

    setattr(LateHooked, name, hook)
    with pytest.raises(TypeError, match=f"re-declares {name} "):
        LateHooked()
