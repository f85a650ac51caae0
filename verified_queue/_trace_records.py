"""The trace level's records, and the lines its reports are built from.

A traced queue (:mod:`verified_queue.traced`) keeps one :data:`Record` per block in a
:class:`Records` map and a ring of :class:`Operation` tuples; an error it raises
carries a :class:`History`. This module holds those types, the walk that finds the
caller (the first frame outside the library) and the helpers that turn records into
report lines; :mod:`verified_queue.traced` holds the queue that keeps them. Both are
loaded only when the trace level is used.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Union

from verified_queue.errors import QueueError
from verified_queue.invariants import describe

if TYPE_CHECKING:
    from types import FrameType

__all__ = [
    "BlockHistory",
    "Caller",
    "History",
    "Holder",
    "Operation",
    "Record",
    "Recorded",
    "Records",
    "count_write_line",
    "drop_oldest_held",
    "extend_message",
    "find_caller",
    "forget_when_dead",
    "is_library",
    "operation_of",
    "or_none",
    "short_path",
    "thread_name",
]


_PACKAGE_DIRECTORY: Final = os.path.dirname(os.path.abspath(__file__))
#: The library's directories: a frame whose file is directly in one of them is not a caller.
_LIBRARY_DIRECTORIES: Final = frozenset(
    {_PACKAGE_DIRECTORY, os.path.join(_PACKAGE_DIRECTORY, "kvcache")}
)
# filename -> whether it belongs to the library; filled on first sight of each file.
_in_library: dict[str, bool] = {}

#: A caller: the file, line and function of the first frame outside the library.
Caller = tuple[str, int, str]
#: An operation as recorded: number, name, file, line, function, thread name.
Recorded = tuple[int, str, str, int, str, str]
#: What proves a record is its block's own: None (a member), a weak reference, the block.
Holder = Union["weakref.ref[object]", object, None]
#: One block's record: its holder, the operation that last linked it, and the one that
#: last unlinked it.
Record = tuple[Holder, "Recorded | None", "Recorded | None"]


class Records(dict[int, Record]):
    """A traced queue's records by block id, with its membership, which proves a member's record."""

    __slots__ = ("__weakref__", "members")

    members: Mapping[int, object]

    def __init__(self) -> None:
        """Start empty; the queue sets ``members`` to its membership once check mode made it."""
        super().__init__()
        self.members = {}

    def history_of(self, block: object) -> BlockHistory | None:
        """The operations that last linked and unlinked ``block``, or ``None`` if none is kept."""
        prior = self.get(id(block))
        if prior is None:
            return None
        holder, linked, unlinked = prior
        if holder is None:
            if id(block) not in self.members:
                return None
        elif holder is not block and not (type(holder) is weakref.ref and holder() is block):
            return None
        return BlockHistory(describe(block), operation_of(linked), operation_of(unlinked))


class Operation(NamedTuple):
    """One recorded queue operation: which, where it was called from, in which thread.

    ``number`` counts the queue's linking operations from 1; the call that
    raised has ``None`` (it did not happen). ``filename``, ``lineno`` and
    ``function`` name the first frame outside the library.
    """

    number: int | None
    name: str
    filename: str
    lineno: int
    function: str
    thread: str

    def __str__(self) -> str:
        """``#12 append() at app.py:40 in free_request (thread MainThread)``."""
        number = "" if self.number is None else f"#{self.number} "
        return (
            f"{number}{self.name}() at {short_path(self.filename)}:{self.lineno} "
            f"in {self.function} (thread {self.thread})"
        )


class BlockHistory(NamedTuple):
    """What a traced queue recorded of a block: the operations that last linked and unlinked it."""

    block: str
    linked: Operation | None
    unlinked: Operation | None


class History(NamedTuple):
    """The trace an error of the trace level carries as ``error.history``.

    ``call`` is the operation that raised; ``blocks`` the records of the
    blocks the error is about; ``count_written`` the last write of
    ``num_free_blocks`` from outside the queue, if any; ``recent`` the
    queue's last operations, oldest first, on damage found by a check
    (empty otherwise); ``lines`` the lines added to the message.
    """

    call: Operation
    blocks: tuple[BlockHistory, ...]
    count_written: Operation | None
    recent: tuple[Operation, ...]
    lines: tuple[str, ...]


def short_path(filename: str) -> str:
    """``filename`` relative to the working directory when it is below it, else as it is."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive on Windows
        return filename
    return filename if relative.startswith(os.pardir) else Path(relative).as_posix()


def is_library(filename: str) -> bool:
    """Whether ``filename`` is one of the library's modules (cached per file)."""
    inside = _in_library.get(filename)
    if inside is None:
        inside = _in_library[filename] = (
            os.path.dirname(os.path.abspath(filename)) in _LIBRARY_DIRECTORIES
        )
    return inside


def find_caller() -> Caller:
    """The file, line and function of the first frame outside the library."""
    frame: FrameType | None = sys._getframe(2)  # past this function and the traced method
    in_library = _in_library
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        inside = in_library.get(filename)
        if inside is None:
            inside = is_library(filename)
        if not inside:
            return filename, frame.f_lineno, code.co_name
        frame = frame.f_back
    return "<unknown>", 0, "<unknown>"


def operation_of(recorded: Recorded | None) -> Operation | None:
    return None if recorded is None else Operation._make(recorded)


def count_write_line(write: Operation) -> str:
    """The report line of the last outside write of the count: the writer's own frame."""
    after = f", after #{write.number}" if write.number else ""
    return (
        f"num_free_blocks {write.name} from outside at {short_path(write.filename)}:"
        f"{write.lineno} in {write.function} (thread {write.thread}){after}"
    )


def or_none(operation: Operation | None) -> str:
    return "no record" if operation is None else str(operation)


def thread_name() -> str:
    return threading.current_thread().name


def extend_message(error: QueueError, lines: list[str]) -> None:
    """Append ``lines`` to the message of ``error``, each on its own indented line."""
    message = str(error)
    text = message + "".join(f"\n  {line}" for line in lines)
    error.args = (text, *error.args[1:])


def forget_when_dead(records: dict[int, Record], key: int) -> Callable[[weakref.ref[Any]], None]:
    """The callback dropping a record when its block dies, unless a newer record replaced it."""

    def forget(reference: weakref.ref[Any]) -> None:
        record = records.get(key)
        if record is not None and record[0] is reference:
            del records[key]

    return forget


def drop_oldest_held(records: dict[int, Record], held: OrderedDict[int, None]) -> None:
    """Drop the oldest record that holds its block, so at most HELD_DEPARTED blocks are held."""
    oldest, _ = held.popitem(last=False)
    record = records.get(oldest)
    if record is not None and record[0] is not None and type(record[0]) is not weakref.ref:
        del records[oldest]
