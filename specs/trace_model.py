"""The trace level's reference recorder: what a traced queue must remember and say, from its docs.

``docs/check-mode.md`` ("The trace level: who did it") promises what
``TracedFreeBlockQueue`` keeps and what its errors name. :class:`TraceModel` restates
those promises as a recorder of its own, written from the page and not from
``verified_queue.traced`` (which it does not import): a test drives a real traced queue
and tells the model each call it made, where from, and how the call ended; the model
says what the queue must then expose, and what an error it raised must name.

What it keeps, per traced queue:

* **Operations.** Every linking operation that *returned* (``popleft``, ``popleft_n``,
  ``remove``, ``append``, ``append_n``, ``prepend_n``, the constructor's own ``append_n``,
  an empty batch or ``popleft_n(0)`` included) gets the queue's next number, from 1, and
  goes in the ring, which keeps the last ``history`` of them, oldest first. A call that
  was refused (it raised a ``QueueError``) or interrupted (an exception from outside cut
  it short, and the queue's fault contract left it as before) did not happen: no number,
  no ring entry, no record. Reading calls (``len``, ``iter``, ...) record nothing.
* **One record per block**: the operation that last linked it and the one that last
  unlinked it. Linking a block keeps the last unlink of its record, if the record is
  still kept; unlinking keeps the last link.
* **Departed blocks.** A block in the queue keeps its record. One that left keeps it while
  it lives, if its type takes weak references; a block without them (a slotted ``Block``)
  is held by its record, for the last ``held_bound`` such blocks to leave (the bound is
  ``HELD_DEPARTED``, 4,096, unless a test lowers it): older ones are forgotten, oldest
  departure first, and a block that comes back is no longer departed. A forgotten or dead
  block's record is gone for good: a new block never inherits it.
* **The count's last outside writer**: each write or deletion of ``num_free_blocks`` from
  outside the queue, with the writer's own file and line, and the number of the last
  operation before it.

What an error says (:class:`Explanation`, the fields of ``error.history`` plus whether its
lines are shown under the message): the failing call (no number) and, after it,

* a double free (``AlreadyInQueueError`` from a call that frees): where the block was
  freed into this queue, whether and where it was taken since, and who held it before
  ("taken before that"); a block not in this queue, refused (``NotInQueueError``): where
  it left this queue, or that this queue never recorded it; either way, where another
  traced queue that holds it linked it;
* damage (``InvariantViolation``): the damaged blocks' records (a member whose neighbours
  do not link back, a departed block still linked into the chain), the count's last
  outside writer, and the ring;
* an empty queue (``EmptyQueueError``): the last operation, in the field only;
* any other refusal (a wrong type, a negative count): the call alone.

Blocks are labels (any hashable the test chooses): the model never holds a block, so it
cannot keep one alive or be fooled by an ``id`` a dead block left behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

__all__ = [
    "DAMAGED_SHOWN",
    "BlockRecord",
    "Explanation",
    "Kept",
    "Op",
    "Site",
    "TraceModel",
    "damaged_nodes",
    "explain_damage",
    "explain_empty",
    "explain_plain",
    "explain_refusal",
    "refused_in_batch",
    "short_path",
]

L = TypeVar("L", bound=Hashable)

#: Damaged blocks an explanation names at most (the first few are where to look).
DAMAGED_SHOWN = 4


def short_path(filename: str) -> str:
    """``filename`` as a report shows it: relative to the working directory when below it."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return filename
    return Path(relative).as_posix()


class Site(NamedTuple):
    """Where a call was made: the first frame outside the library, its thread, its request."""

    filename: str
    lineno: int
    function: str
    thread: str
    request: str | None = None


class Op(NamedTuple):
    """An operation as the trace must report it (the fields of ``traced.Operation``, in order)."""

    number: int | None
    name: str
    filename: str
    lineno: int
    function: str
    thread: str
    request: str | None = None

    @classmethod
    def at(cls, number: int | None, name: str, site: Site) -> Op:
        """Operation ``number`` (``None``: the call that raised), ``name``, called from ``site``."""
        return cls(
            number, name, site.filename, site.lineno, site.function, site.thread, site.request
        )

    def text(self) -> str:
        """``#12 append() at app.py:40 in free_request (thread MainThread)``, as a report line."""
        number = "" if self.number is None else f"#{self.number} "
        request = "" if self.request is None else f" for request {self.request!r}"
        return (
            f"{number}{self.name}() at {short_path(self.filename)}:{self.lineno} "
            f"in {self.function}{request} (thread {self.thread})"
        )


def _or_none(operation: Op | None) -> str:
    return "no record" if operation is None else operation.text()


class Kept(NamedTuple):
    """What the trace keeps of one block: the operations that last linked and unlinked it."""

    linked: Op | None
    unlinked: Op | None


class BlockRecord(NamedTuple):
    """A block's record as an error names it (the fields of ``traced.BlockHistory``)."""

    block: str
    linked: Op | None
    unlinked: Op | None


@dataclass
class _Entry:
    kept: Kept
    member: bool
    weak: bool


class TraceModel(Generic[L]):
    """One traced queue's records, ring, departed blocks and count writer, as promised.

    ``history`` is the ring's length; ``held_bound`` how many departed blocks without weak
    references keep their record. The test calls :meth:`returned` for each linking
    operation that returned, :meth:`died` when a departed block with weak references dies,
    and :meth:`count_touched` for each write or deletion of the count from outside. A
    refused or interrupted call is told nothing: nothing of it may show.

    >>> site = Site("app.py", 3, "main", "MainThread")
    >>> model: TraceModel[str] = TraceModel(history=2, held_bound=1)
    >>> model.returned("append_n", site, linked=["a", "b"], weak=lambda label: False)
    >>> model.returned("popleft", site, unlinked=["a"], weak=lambda label: False)
    >>> model.returned("popleft", site, unlinked=["b"], weak=lambda label: False)
    >>> [op.number for op in model.ring], model.departed(), model.kept("a")
    ([2, 3], ['b'], None)
    """

    def __init__(self, history: int, held_bound: int) -> None:
        """An empty trace: no operation yet, no record, no count writer."""
        self.history = history
        self.held_bound = held_bound
        self.number = 0
        self.ring: list[Op] = []
        self._entries: dict[L, _Entry] = {}
        # Departed blocks without weak references, oldest departure first.
        self._held: list[L] = []
        self.count_written: Op | None = None

    # ------------------------------------------------------------------ what happens

    def returned(
        self,
        name: str,
        site: Site,
        *,
        linked: Iterable[L] = (),
        unlinked: Iterable[L] = (),
        weak: Callable[[L], bool],
    ) -> None:
        """``name``, called from ``site``, returned: it linked ``linked``, unlinked ``unlinked``.

        ``weak`` says whether a block's type takes weak references.
        """
        self.number += 1
        operation = Op.at(self.number, name, site)
        self.ring = [*self.ring, operation][-self.history :]
        for label in linked:
            before = self._entries.get(label)
            # A departed block's record, still kept, remembers where it was last taken.
            taken = before.kept.unlinked if before is not None and not before.member else None
            if label in self._held:
                self._held.remove(label)
            self._entries[label] = _Entry(Kept(operation, taken), member=True, weak=weak(label))
        for label in unlinked:
            before = self._entries.get(label)
            freed = before.kept.linked if before is not None and before.member else None
            is_weak = weak(label)
            self._entries[label] = _Entry(Kept(freed, operation), member=False, weak=is_weak)
            if not is_weak:
                self._held.append(label)
                while len(self._held) > self.held_bound:
                    del self._entries[self._held.pop(0)]

    def died(self, label: L) -> None:
        """A block with weak references that had left this queue died: its record goes with it."""
        entry = self._entries.get(label)
        if entry is not None and not entry.member and entry.weak:
            del self._entries[label]

    def count_touched(self, what: str, site: Site) -> None:
        """``num_free_blocks`` was ``what`` (``written``, ``deleted``) from outside, at ``site``."""
        self.count_written = Op(
            self.number, what, site.filename, site.lineno, site.function, site.thread, None
        )

    # ------------------------------------------------------------------ what is kept

    def kept(self, label: L) -> Kept | None:
        """The record the queue must still keep of ``label``, or ``None``."""
        entry = self._entries.get(label)
        return None if entry is None else entry.kept

    def is_member(self, label: L) -> bool:
        """Whether ``label`` is in this queue, by the operations recorded."""
        entry = self._entries.get(label)
        return entry is not None and entry.member

    def recorded(self) -> list[L]:
        """Every label with a record: the members and the departed blocks still remembered."""
        return list(self._entries)

    def departed(self) -> list[L]:
        """The departed blocks whose records hold them (no weak references), oldest first."""
        return list(self._held)

    def recent(self) -> tuple[Op, ...]:
        """The ring, oldest first."""
        return tuple(self.ring)


# ---------------------------------------------------------------------- explanations


class Explanation(NamedTuple):
    """What an error of a traced queue must carry: ``error.history``'s fields, and more.

    ``shown``: whether the lines are shown under the message (every error but an empty
    queue's). ``any_order``: how many lines after the first name damaged blocks, which the
    docs list in no promised order (their records in ``blocks`` likewise).
    """

    call: Op
    blocks: tuple[BlockRecord, ...]
    count_written: Op | None
    recent: tuple[Op, ...]
    lines: tuple[str, ...]
    shown: bool = True
    any_order: int = 0


def _this_call(model: TraceModel[L], name: str, site: Site) -> tuple[Op, str]:
    call = Op.at(None, name, site)
    after = f", after #{model.number}" if model.number else ""
    return call, f"this call: {call.text()}{after}"


def explain_plain(model: TraceModel[L], name: str, site: Site) -> Explanation:
    """A refusal about no block (a wrong type, a negative count): the call alone."""
    call, line = _this_call(model, name, site)
    return Explanation(call, (), model.count_written, (), (line,))


def explain_empty(model: TraceModel[L], name: str, site: Site) -> Explanation:
    """Too few free blocks: the call and the last operation, in the field only."""
    call, line = _this_call(model, name, site)
    lines = [line]
    if model.ring:
        lines.append(f"last operation: {model.ring[-1].text()}")
    return Explanation(call, (), model.count_written, (), tuple(lines), shown=False)


def explain_refusal(
    model: TraceModel[L],
    name: str,
    site: Site,
    block: tuple[L, str] | None,
    *,
    freeing: bool,
    elsewhere: Op | None,
) -> Explanation:
    """A block refused: a double free (``freeing``), or a block not in this queue.

    ``block`` is the refused block's label and how an error names it, or ``None`` for an
    object the test gave no label (a sentinel): the queue never recorded that one.
    ``elsewhere`` is the operation that linked the block into another traced queue that
    holds it now, if one does.
    """
    call, line = _this_call(model, name, site)
    lines = [line]
    kept = None if block is None else model.kept(block[0])
    records: tuple[BlockRecord, ...] = ()
    if block is not None and kept is not None:
        records = (BlockRecord(block[1], kept.linked, kept.unlinked),)
    freed = None if kept is None else kept.linked
    taken = None if kept is None else kept.unlinked
    if freeing:
        lines.append(
            "freed before by: not recorded by this queue"
            if freed is None
            else f"freed before by: {freed.text()}"
        )
        if block is not None and model.is_member(block[0]):
            lines.append("taken since: never, the block is still in this queue")
        elif taken is not None and (freed is None or _number(taken) > _number(freed)):
            lines.append(f"taken since by: {taken.text()}")
        else:
            lines.append("taken since: not recorded")
        if taken is not None and freed is not None and _number(taken) < _number(freed):
            lines.append(f"taken before that by: {taken.text()}")
    elif taken is not None:
        lines.append(f"left this queue by: {taken.text()}")
        if freed is not None:
            lines.append(f"freed into it before by: {freed.text()}")
    elif kept is None:
        lines.append("this queue never recorded the block (or its record was dropped)")
    if elsewhere is not None:
        lines.append(f"linked in another traced queue by: {elsewhere.text()}")
    return Explanation(call, records, model.count_written, (), tuple(lines))


def _number(operation: Op) -> int:
    return 0 if operation.number is None else operation.number


def explain_damage(
    model: TraceModel[L],
    name: str,
    site: Site,
    damaged: Sequence[tuple[L | None, str]],
) -> Explanation:
    """Damage found by a check: the damaged blocks' records, the count's writer, the ring.

    ``damaged`` are the damaged blocks (:func:`damaged_nodes`), each as its label (``None``
    if the test gave it none) and how an error names it; at most :data:`DAMAGED_SHOWN` are
    named, in no promised order.
    """
    call, line = _this_call(model, name, site)
    records: list[BlockRecord] = []
    for label, text in damaged[:DAMAGED_SHOWN]:
        kept = None if label is None else model.kept(label)
        records.append(
            BlockRecord(text, None, None)
            if kept is None
            else BlockRecord(text, kept.linked, kept.unlinked)
        )
    lines = [line]
    lines.extend(
        f"damaged {record.block}: last linked by {_or_none(record.linked)}; "
        f"last unlinked by {_or_none(record.unlinked)}"
        for record in records
    )
    written = model.count_written
    if written is not None:
        after = f", after #{written.number}" if written.number else ""
        lines.append(
            f"num_free_blocks {written.name} from outside at {short_path(written.filename)}:"
            f"{written.lineno} in {written.function} (thread {written.thread}){after}"
        )
    lines.append(f"last {len(model.ring)} operations, oldest first:")
    lines.extend(f"  {operation.text()}" for operation in model.ring)
    return Explanation(
        call, tuple(records), written, model.recent(), tuple(lines), any_order=len(records)
    )


# ---------------------------------------------------------------------- which blocks


def refused_in_batch(batch: Sequence[object], linked: Callable[[object], bool]) -> object | None:
    """The block a refused batch is about: the first one linked (a sentinel too) or repeated.

    ``linked`` says whether a block is linked in some queue (a sentinel always is).
    A batch of one is about its one item, whatever it is.
    """
    if len(batch) == 1:
        return batch[0]
    seen: list[object] = []
    for block in batch:
        if linked(block) or any(block is earlier for earlier in seen):
            return block
        seen.append(block)
    return None


def damaged_nodes(
    head: object, tail: object, members: Sequence[object], departed: Sequence[object]
) -> list[object]:
    """The blocks damage shows on, by the docs' two kinds, reading the links as they are now.

    A member is damaged if a neighbour its links name is neither a member nor its own end
    sentinel, or does not link back to it. A departed block (one that left and whose record
    is still kept) is damaged if it is linked next to this queue's nodes again.
    """

    def member(node: object) -> bool:
        return any(node is block for block in members)

    def links(node: object) -> tuple[object, object]:
        return getattr(node, "prev_free_block", None), getattr(node, "next_free_block", None)

    found: list[object] = []
    for block in members:
        before, after = links(block)
        if (
            not (before is head or member(before))
            or not (after is tail or member(after))
            or links(before)[1] is not block
            or links(after)[0] is not block
        ):
            found.append(block)
    for block in departed:
        if member(block):
            continue
        before, after = links(block)
        if before is head or after is tail or member(before) or member(after):
            found.append(block)
    return found
