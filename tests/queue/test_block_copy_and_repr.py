"""Tests of ``verified_queue/block.py`` that pin what the broader tests leave loose.

The exact text of a block's and a sentinel's repr, the one-link state a repr calls linked,
what a shallow copy does with a block's ``__dict__``, and the two per-class caches: what
copying saves, worked out once per class, and the classes whose attribute hooks were
checked when their first block was built. Every class copied or built here is defined in
its test, so that the caches are filled by the test itself, not by an earlier one.
"""

from __future__ import annotations

import copy
import pickle
import weakref

import pytest

from verified_queue import Block
from verified_queue import block as block_module
from verified_queue.block import Sentinel


class PlainBlock(Block):
    """A Block subclass with no field of its own, defined at module level (a plain qualname)."""

    __slots__ = ()


def test_a_blocks_repr_names_its_own_class_and_its_own_address() -> None:
    """``<QualName at 0x..., state>``: the class of the block and the address of that very block."""
    block, other = Block(), PlainBlock()
    assert repr(block) == f"<Block at {id(block):#x}, detached>"
    assert repr(other) == f"<PlainBlock at {id(other):#x}, detached>"
    # Two live blocks never share a repr: each names its own address.
    assert repr(Block()) != repr(block)


def test_a_block_with_one_link_set_is_shown_as_linked() -> None:
    """Only a block with both links None is detached; one link set (either one) reads linked."""
    neighbour = Block()
    back_only, forward_only, both = Block(), Block(), Block()
    back_only.prev_free_block = neighbour
    forward_only.next_free_block = neighbour
    both.prev_free_block = both.next_free_block = neighbour
    for block in (back_only, forward_only, both):
        assert repr(block) == f"<Block at {id(block):#x}, linked>"
    assert repr(neighbour).endswith(", detached>")


def test_a_sentinels_repr_names_its_role_and_its_own_address() -> None:
    """``<role sentinel at 0x...>``: the role as given, never the neighbours; two differ."""
    head, tail, other_head = Sentinel("head"), Sentinel("tail"), Sentinel("head")
    head.next_free_block = tail
    tail.prev_free_block = head
    assert repr(head) == f"<head sentinel at {id(head):#x}>"
    assert repr(tail) == f"<tail sentinel at {id(tail):#x}>"
    assert repr(other_head) != repr(head)
    assert (head.role, tail.role, head.block_id, tail.block_id) == ("head", "tail", -1, -1)


def test_a_shallow_copy_gets_a_dict_of_its_own() -> None:
    """copy.copy gives the copy its own ``__dict__`` with the same items, never the original's."""

    class WithDict(Block):
        __slots__ = ("number", "__dict__")
        number: int
        label: str

    block = WithDict()
    block.number, block.label = 1, "a"
    twin = copy.copy(block)
    assert vars(twin) == {"label": "a"}
    assert vars(twin) is not vars(block)
    twin.label = "b"
    assert block.label == "a"
    assert twin.number == 1


class Referenced(Block):
    """A Block subclass that can be weakly referred to (pickled by name: module level)."""

    __slots__ = ("number", "__weakref__")
    number: int


def test_a_block_with_a_weakref_slot_copies_and_pickles() -> None:
    """``__weakref__`` is not state: a block with a live weak reference copies and pickles."""
    block = Referenced()
    block.number = 4
    reference = weakref.ref(block)
    for twin in (
        copy.copy(block),
        copy.deepcopy(block),
        pickle.loads(pickle.dumps(block)),
    ):
        assert twin.number == 4
        assert weakref.ref(twin)() is twin
    assert reference() is block


# Pickle needs the class importable by name: module level, but not copied by any other test.
class PickledOnlyHere(Block):
    """A Block subclass that only the next test copies."""

    __slots__ = ("number",)
    number: int


def test_what_copying_saves_is_worked_out_once_per_class_and_then_read_back() -> None:
    """The first copy of a class stores its saved names in ``_SAVED_STATE``; later copies read them.

    The entry is replaced by one naming fewer slots: the next copy then saves only those,
    which shows the entry is what copying reads (the class is not examined again).
    """

    class Cached(Block):
        __slots__ = ("kept", "dropped")
        kept: int
        dropped: int

    saved = block_module._SAVED_STATE
    assert Cached not in saved
    block = Cached()
    block.kept, block.dropped = 1, 2
    assert copy.copy(block).dropped == 2
    assert saved[Cached] == (("kept", "dropped"), False)
    assert type(None) not in saved
    saved[Cached] = (("kept",), False)
    try:
        twin = copy.copy(block)
    finally:
        del saved[Cached]
    assert twin.kept == 1
    assert not hasattr(twin, "dropped")
    # Worked out afresh once the entry is gone, and stored again.
    assert copy.copy(block).dropped == 2
    assert saved[Cached] == (("kept", "dropped"), False)
    twin = pickle.loads(pickle.dumps(_numbered(7)))
    assert twin.number == 7
    assert saved[PickledOnlyHere] == (("number",), False)


def _numbered(number: int) -> PickledOnlyHere:
    block = PickledOnlyHere()
    block.number = number
    return block


def test_the_first_block_of_a_class_records_the_class_as_checked() -> None:
    """Building a class's first block checks its hooks and remembers the class as plain.

    A class refused at its first block is not remembered, and is refused again.
    """

    class Fresh(Block):
        __slots__ = ()

    plain = block_module._PLAIN_ATTRIBUTE_CLASSES
    assert Fresh not in plain
    Fresh()
    assert Fresh in plain
    assert None not in plain

    class Hooked(Block):
        __slots__ = ()

    def delattr_hook(self: object, name: str) -> None:
        """A late ``__delattr__`` hook: it would bypass nothing but is refused all the same."""

    Hooked.__delattr__ = delattr_hook  # type: ignore[method-assign]  # the hook under test
    for _ in range(2):
        with pytest.raises(TypeError) as refused:
            Hooked()
        assert (
            str(refused.value)
            .rpartition(".<locals>.")[2]
            .startswith("Hooked re-declares __delattr__ of verified_queue.Block (itself ")
        )
    assert Hooked not in plain


class HidesDictOffset(type):
    """A metaclass under which a class's ``__dictoffset__`` cannot be read."""

    @property
    def __dictoffset__(cls) -> int:
        """Raise as a missing attribute does."""
        raise AttributeError("__dictoffset__")


def test_a_class_that_hides_its_dict_offset_copies_as_one_without_a_dict() -> None:
    """Copying never needs ``__dictoffset__``: a slotted class that hides it still copies.

    Its slots are saved and restored; with the offset unreadable the class is taken
    to have no ``__dict__`` (which it indeed has not), so ``vars`` is never asked.
    """

    class Hidden(Block, metaclass=HidesDictOffset):
        __slots__ = ("number",)
        number: int

    with pytest.raises(AttributeError):
        _ = Hidden.__dictoffset__
    block = Hidden()
    block.number = 3
    for twin in (copy.copy(block), copy.deepcopy(block)):
        assert twin.number == 3
        assert twin.prev_free_block is None
    assert block_module._SAVED_STATE[Hidden] == (("number",), False)
