"""The intrusive link node that every block type subclasses.

A block carries its own two links, so the free queue never allocates a node
for it. A block is *detached* when both links are ``None`` and *linked* when
both are set; a queue's sentinels are the only blocks with exactly one link
set (the head has no predecessor, the tail no successor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Block", "Sentinel"]

_Class = TypeVar("_Class")

try:
    # Only the compiled build needs it, and only while compiling: mypyc reads the
    # decorator at build time, so the compiled module runs without it too.
    from mypy_extensions import mypyc_attr
except ImportError:  # the pure-Python build has no runtime dependencies

    def mypyc_attr(*_names: str, **_options: object) -> Callable[[_Class], _Class]:
        """Stand in for mypyc's class options, which mean nothing to the interpreter."""
        return lambda cls: cls


# Compiled, Block is a native class whose links are C struct fields the compiled
# queue reads directly; user block types and Sentinel still subclass it freely.
@mypyc_attr(allow_interpreted_subclasses=True)
class Block:
    """Base class for anything that can sit in a :class:`FreeBlockQueue`.

    Subclass it with extra ``__slots__`` or with ``@dataclass(slots=True)``.
    Every instance, of every subclass, starts detached even when the
    subclass's own ``__init__`` never calls ``Block.__init__`` (the links are
    set in ``__new__``), so a dataclass subclass needs no extra code.

    The queue compares blocks by identity only, so a subclass may keep a
    generated ``__eq__`` (or one that raises) without slowing the queue down.

    >>> block = Block()
    >>> block.prev_free_block is None and block.next_free_block is None
    True
    """

    __slots__ = ("prev_free_block", "next_free_block")

    prev_free_block: Block | None
    next_free_block: Block | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Block:  # noqa: ARG004 -- the subclass's __init__ takes them
        self = object.__new__(cls)
        # Detached from birth, whatever the subclass's __init__ does.
        self.prev_free_block = None
        self.next_free_block = None
        return self

    def __init__(self) -> None:
        """Create a detached block (both links ``None``)."""

    def __repr__(self) -> str:
        """Name the block's type, identity and link state, never its neighbours.

        Following the links would make the repr of one block in a long chain
        recurse through the whole chain.

        >>> repr(Block()).endswith("detached>")
        True
        """
        if self.prev_free_block is None and self.next_free_block is None:
            state = "detached"
        else:
            state = "linked"
        return f"<{type(self).__qualname__} at {id(self):#x}, {state}>"


@mypyc_attr(allow_interpreted_subclasses=True)
class Sentinel(Block):
    """A queue's fake head or fake tail: linked on one side only, never handed out.

    The head's ``prev_free_block`` and the tail's ``next_free_block`` stay
    ``None`` for the life of the queue, so a sentinel is never detached and the
    queue's guards reject it wherever a block is expected.
    """

    __slots__ = ("role",)

    role: str

    def __init__(self, role: str) -> None:
        """Create a detached sentinel; ``role`` is ``"head"`` or ``"tail"``, for diagnostics."""
        self.role = role

    def __repr__(self) -> str:
        """Name the role and identity of the sentinel, never its neighbours."""
        return f"<{self.role} sentinel at {id(self):#x}>"
