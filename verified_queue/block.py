"""The intrusive link node that every block type subclasses, and the shape the queue needs.

A block carries its own two links, so the free queue never allocates a node
for it. A block is *detached* when both links are ``None`` and *linked* when
both are set; a queue's sentinels are the only blocks with exactly one link
set (the head has no predecessor, the tail no successor).

Any object with the two link attributes (:class:`Linkable`) can sit in the
pure-Python queue, vLLM's own ``KVCacheBlock`` included. The compiled queue
reads the links as C struct fields, so it takes :class:`Block` subclasses only.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from verified_queue._compat import mypyc_attr

__all__ = ["COMPILED", "LINK_FIELDS", "Block", "Linkable", "Sentinel"]

#: Whether the build is compiled: this module is compiled with ``queue.py`` and
#: ``_undo.py`` or not at all, so its own file tells (an extension, not a ``.py``). The
#: one place that asks; ``verified_queue.COMPILED`` is this value.
COMPILED: Final = not __file__.endswith(".py")

#: The two attributes the queue threads its list through, in vLLM's order.
LINK_FIELDS = ("prev_free_block", "next_free_block")

#: What a ``Block`` subclass may not define: the links (the queue writes the base
#: class's own slots, and compiled code would bypass a re-declared one) and attribute
#: hooks, which the compiled queue bypasses too, so the two builds would differ.
_RESERVED = (*LINK_FIELDS, "__setattr__", "__delattr__", "__getattribute__")


class Linkable(Protocol):
    """The shape of anything the queue can link: the two link attributes, readable.

    :class:`Block` has it, and so does a class that declares the two fields
    itself, such as vLLM's ``KVCacheBlock``. Read-only members keep the
    protocol covariant, so a field typed ``KVCacheBlock | None`` matches.
    """

    @property
    def prev_free_block(self) -> Linkable | None:
        """The block before this one in its free queue, or ``None``."""

    @property
    def next_free_block(self) -> Linkable | None:
        """The block after this one in its free queue, or ``None``."""


#: What ``getattr`` returns for a slot that was never set.
_UNSET: Any = object()

#: For each block class, what pickle and copy save (see __getstate__): the names of its
#: slots but the links, and whether its instances have a __dict__.
_SAVED_STATE: dict[type, tuple[tuple[str, ...], bool]] = {}


def _saved_state(cls: type) -> tuple[tuple[str, ...], bool]:
    """The slot names of ``cls`` and its bases less the links, and whether it has a ``__dict__``."""
    saved: list[str] = []
    for klass in cls.__mro__:
        names = vars(klass).get("__slots__", ())
        for name in (names,) if isinstance(names, str) else names:
            unsaved = name in LINK_FIELDS or name in ("__dict__", "__weakref__")
            if not unsaved and name not in saved:
                saved.append(name)
    return tuple(saved), getattr(cls, "__dictoffset__", 0) != 0


_OBJECT_SETATTR: Any = object.__setattr__
_OBJECT_DELATTR: Any = object.__delattr__

#: Block classes already seen to keep object's own attribute setting, so that building a
#: block pays one set lookup for the check below.
_PLAIN_ATTRIBUTE_CLASSES: set[type] = set()


_OBJECT_GETATTRIBUTE: Any = object.__getattribute__


def _check_attribute_hooks(cls: type) -> None:
    """Refuse ``cls`` if it reaches the links or attributes its own way; else remember it.

    A hook set on the class after it was created (a frozen, unslotted dataclass
    does this, and so may any code) escapes ``__init_subclass__``, so the first
    block built checks again.
    """
    hooked = _hooks(cls)
    if hooked:
        raise TypeError(_attribute_hooks_refused(cls, hooked))
    _PLAIN_ATTRIBUTE_CLASSES.add(cls)


def _hooks(cls: type) -> list[str]:
    """The names of ``_RESERVED`` that ``cls`` resolves other than Block and object do.

    The whole MRO counts, not the class's own namespace only: a link property
    or a ``__getattribute__`` inherited from a mixin listed before Block hides
    Block's own as surely as one declared in the class.
    """
    found = []
    for name in LINK_FIELDS:
        declared = next(vars(klass)[name] for klass in cls.__mro__ if name in vars(klass))
        if declared is not vars(Block)[name]:
            found.append(name)
    hooks = (
        ("__setattr__", _OBJECT_SETATTR),
        ("__delattr__", _OBJECT_DELATTR),
        ("__getattribute__", _OBJECT_GETATTRIBUTE),
    )
    for name, default in hooks:
        if getattr(cls, name) is not default:
            found.append(name)
    return found


def _attribute_hooks_refused(cls: type, names: list[str]) -> str:
    """The message refusing a Block subclass that re-declares a link or hooks attribute access."""
    return (
        f"{cls.__qualname__} re-declares {', '.join(names)} of verified_queue.Block (itself "
        "or through a base class): the queue links blocks through Block's own "
        "prev_free_block and next_free_block slots, which compiled code reaches directly; "
        "drop those declarations from the subclass and its mixins (Block already has the "
        "links), and do not freeze it"
    )


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

    A subclass may not re-declare ``prev_free_block`` or ``next_free_block``
    (as a field, a slot or a property) nor override ``__setattr__``,
    ``__delattr__`` or ``__getattribute__`` (so it cannot be a frozen
    dataclass either), itself or through a mixin: the queue links
    through the base class's own slots, which compiled code reaches directly,
    so such a subclass would see other links than the queue writes. It is
    refused with ``TypeError`` when the class is created, or, for a hook set
    on the class afterwards, when its first block is.

    >>> block = Block()
    >>> block.prev_free_block is None and block.next_free_block is None
    True
    """

    __slots__ = ("prev_free_block", "next_free_block")

    prev_free_block: Block | None
    next_free_block: Block | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Block:  # noqa: ARG004 -- the subclass's __init__ takes them
        if cls not in _PLAIN_ATTRIBUTE_CLASSES:
            _check_attribute_hooks(cls)
        self = object.__new__(cls)
        # Detached from birth, whatever the subclass's __init__ does.
        self.prev_free_block = None
        self.next_free_block = None
        return self

    def __init__(self) -> None:
        """Create a detached block (both links ``None``)."""

    def __getstate__(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Return the block's state for pickle and copy: every attribute but the two links.

        A block is pickled or copied detached. The links name other blocks, so
        following them would pickle the whole chain recursively (and overflow
        the stack on a long one); a queue pickles its order itself and links
        the copies again (see ``FreeBlockQueue.__reduce__``).

        Runtime complexity: O(number of attributes)

        >>> import pickle
        >>> block = Block()
        >>> queue_free = pickle.loads(pickle.dumps(block))
        >>> queue_free.prev_free_block is None and queue_free is not block
        True
        """
        saved = _SAVED_STATE.get(type(self))
        if saved is None:
            saved = _SAVED_STATE[type(self)] = _saved_state(type(self))
        names, has_dict = saved
        slots: dict[str, Any] = {}
        for name in names:
            value = getattr(self, name, _UNSET)
            if value is not _UNSET:  # a slot never set stays unset in the copy
                slots[name] = value
        attributes = vars(self) if has_dict else None
        return (dict(attributes) if attributes else None), slots

    def __setstate__(self, state: tuple[dict[str, Any] | None, dict[str, Any]]) -> None:
        """Restore what :meth:`__getstate__` saved; the links stay ``None`` (detached)."""
        attributes, slots = state
        if attributes:
            vars(self).update(attributes)
        for name, value in slots.items():
            setattr(self, name, value)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a subclass that re-declares a link or hooks attribute access."""
        super().__init_subclass__(**kwargs)
        hooked = _hooks(cls)
        if hooked:
            raise TypeError(_attribute_hooks_refused(cls, hooked))

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

    __slots__ = ("block_id", "role")

    role: str
    #: ``-1``, as vLLM's sentinels have: code that reads a neighbour's ``block_id``
    #: (vLLM's ``KVCacheBlock.__repr__`` does) works at either end of the queue.
    block_id: int

    def __init__(self, role: str) -> None:
        """Create a detached sentinel; ``role`` is ``"head"`` or ``"tail"``, for diagnostics."""
        self.role = role
        self.block_id = -1

    def __repr__(self) -> str:
        """Name the role and identity of the sentinel, never its neighbours."""
        return f"<{self.role} sentinel at {id(self):#x}>"
