"""The trace level's records, and the lines its reports are built from.

A traced queue (:mod:`verified_queue.traced`) keeps one :data:`Record` per block in a
:class:`Records` map and a ring of :class:`Operation` tuples; an error it raises
carries a :class:`History`. This module holds those types, the walk that finds the
caller (the first frame outside the library) and the helpers that turn records into
report lines; :mod:`verified_queue.traced` holds the queue that keeps them. Both are
loaded only when the trace level is used.

The library is marked by its modules themselves: a module whose frames are not the
caller a record should name (the queue and its undo, check mode, the trace level, the
block pool and its keys, the vLLM adapters) sets ``__trace_library__ = True``
(:data:`LIBRARY_FLAG`) at its top level. Any other module is a caller, the package's
own command line (``verified_queue.cli``) included.

A host's core, code the package does not own but calls the queue through, is passed
over too once :func:`treat_as_library` names its files: the vLLM plugin's trace mode
names vLLM's KV-cache core (``verified_queue.vllm.traced``), so that a record names the
scheduler, connector or test that called it. A walk that passes such a frame also
reads the id of the request the call serves (:func:`request_of`), in those frames and
in the caller it stops at. A walk that meets none reads no locals and records no request.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Union

from verified_queue.errors import QueueError
from verified_queue.invariants import describe

if TYPE_CHECKING:
    from types import FrameType

__all__ = [
    "LIBRARY_FLAG",
    "BlockHistory",
    "Caller",
    "History",
    "Holder",
    "Operation",
    "Record",
    "Recorded",
    "Records",
    "add_lines",
    "count_write_line",
    "drop_oldest_held",
    "find_caller",
    "forget_when_dead",
    "is_library",
    "operation_of",
    "or_none",
    "request_of",
    "short_path",
    "thread_name",
    "treat_as_library",
]

#: This module's frames are the library's (the flag it defines).
__trace_library__ = True

#: The top-level name a module of the library sets to ``True``: its frames are not callers.
LIBRARY_FLAG: Final = "__trace_library__"

# co_filename -> whether that file is a module of the library; filled on first sight of
# each file, so that the walk of every traced operation reads one dict per frame.
_in_library: dict[str, bool] = {}

# The files of a host's core (treat_as_library), never entered in _in_library: a miss there
# is the one place the walk looks here, so a walk that meets no such file costs what it
# did before any was named.
_host_files: set[str] = set()

#: The locals a frame may name its request by, in the order they are read: the request's
#: id, then a request object holding it as ``request_id`` (vLLM's ``Request``).
REQUEST_NAMES: Final = ("request_id", "request")

#: A caller: the file, line and function of the first frame outside the library, and the
#: id of the request the call serves when the walk passed a host's core and found one.
Caller = tuple[str, int, str, "str | None"]
#: An operation as recorded: number, name, file, line, function, thread name, request id.
Recorded = tuple[int, str, str, int, str, str, "str | None"]
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
    ``function`` name the first frame outside the library. ``request`` is the
    id of the request the call served, read from the frames of a host's core
    the walk passed (vLLM's, under the plugin's trace mode) and of the caller;
    ``None`` when there is no such frame or none names a request.
    """

    number: int | None
    name: str
    filename: str
    lineno: int
    function: str
    thread: str
    request: str | None = None

    def __str__(self) -> str:
        """``#12 append() at app.py:40 in free_request (thread MainThread)``.

        With a request: ``... in _free_blocks for request 'req-7' (thread MainThread)``.
        """
        number = "" if self.number is None else f"#{self.number} "
        # repr: a request id comes from outside (an API client may choose it), and a
        # report line must stay one line.
        request = "" if self.request is None else f" for request {self.request!r}"
        return (
            f"{number}{self.name}() at {short_path(self.filename)}:{self.lineno} "
            f"in {self.function}{request} (thread {self.thread})"
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
    (empty otherwise); ``lines`` the lines added to the error (:func:`add_lines`).
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


def is_library(frame: FrameType) -> bool:
    """Whether ``frame`` runs the code of a module of the library (cached per file).

    A module of the library sets :data:`LIBRARY_FLAG`; its globals are the frame's,
    and its ``__file__`` is the code's own file. Both are needed: a doctest of a
    library module runs in a copy of the module's globals, and is a caller. A
    host's core (:func:`treat_as_library`) is not the library: ``False``, never cached.
    """
    filename = frame.f_code.co_filename
    inside = _in_library.get(filename)
    if inside is None:
        if filename in _host_files:
            return False  # cached, it would hide the file from find_caller's miss
        module = frame.f_globals
        inside = _in_library[filename] = (
            module.get(LIBRARY_FLAG) is True and module.get("__file__") == filename
        )
    return inside


def treat_as_library(filename: str) -> None:
    """Have the caller walk pass over frames of ``filename``, a host's core, and read their request.

    For code the package does not own that calls the queue for others (vLLM's
    KV-cache core, under the vLLM plugin's trace mode): a record names the first
    frame outside both the library and every file so named, with the request id
    read from the frames passed and from that caller (:func:`request_of`).
    ``filename`` is a code object's ``co_filename``. Lasts for the process.

    Runtime complexity: O(1)
    """
    _host_files.add(filename)
    _in_library.pop(filename, None)  # a walk before this call may have cached it a caller


def find_caller() -> Caller:
    """The file, line and function of the first frame outside the library, and its request.

    The request is ``None`` unless the walk passes a host's core (:func:`treat_as_library`).
    """
    frame: FrameType | None = sys._getframe(2)  # past this function and the traced method
    in_library = _in_library
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        inside = in_library.get(filename)
        if inside is None:
            if filename in _host_files:
                return _host_caller(frame)
            inside = is_library(frame)
        if not inside:
            return filename, frame.f_lineno, code.co_name, None
        frame = frame.f_back
    return "<unknown>", 0, "<unknown>", None


def _host_caller(frame: FrameType | None) -> Caller:
    """The walk of :func:`find_caller` on from a frame of a host's core, reading the request.

    The request is the first one named walking outwards: by a frame of a host's
    core, or else by the caller the walk stops at. Frames of the library between
    them are passed over unread, as find_caller passes them.
    """
    request: str | None = None
    in_library = _in_library
    hosts = _host_files
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        if filename in hosts:
            if request is None:
                request = request_of(frame)
        else:
            inside = in_library.get(filename)
            if inside is None:
                inside = is_library(frame)
            if not inside:
                if request is None:
                    request = request_of(frame)
                return filename, frame.f_lineno, code.co_name, request
        frame = frame.f_back
    return "<unknown>", 0, "<unknown>", request


def request_of(frame: FrameType) -> str | None:
    """The id of the request ``frame`` serves, from its locals (:data:`REQUEST_NAMES`), or ``None``.

    A local ``request_id`` that is a ``str``, else a local ``request`` whose
    instance dict holds a ``str`` ``request_id`` (vLLM's ``Request`` keeps it so).
    The dict is read past the class's ``__getattribute__`` and ``__getattr__``
    and past any ``request_id`` property, so no code of the class runs for it
    (unless the class redefines ``__dict__`` itself); whatever fails is ``None``:
    the function never raises. The locals are read only from a frame whose code
    names one of the two, since reading them costs a snapshot of every local
    before Python 3.13.

    Runtime complexity: O(locals of the frame)
    """
    try:
        code = frame.f_code
        names = code.co_varnames + code.co_cellvars + code.co_freevars
        if REQUEST_NAMES[0] not in names and REQUEST_NAMES[1] not in names:
            return None
        local = frame.f_locals
        found = local.get(REQUEST_NAMES[0])
        if type(found) is str:
            return found
        request = local.get(REQUEST_NAMES[1])
        if request is None:
            return None
        # object.__getattribute__ skips a __getattribute__ or __getattr__ of the class;
        # the instance dict is read as a dict, whatever its get may be.
        namespace = object.__getattribute__(request, "__dict__")
        if not isinstance(namespace, dict):
            return None
        found = dict.get(namespace, REQUEST_NAMES[0])
    except Exception:  # a frame or an object damaged beyond reading: no request named
        return None
    return found if type(found) is str else None


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


def add_lines(error: QueueError, lines: Iterable[str]) -> None:
    """Add ``lines`` to ``error`` where its traceback shows them: each indented, on its own line.

    On Python 3.11+ each is a note (PEP 678, ``error.__notes__``), so ``str(error)``
    stays the message the error was raised with, which vLLM's callers match; on 3.10,
    which has no notes, they are appended to the message itself (``error.args``).
    """
    if sys.version_info >= (3, 11):
        for line in lines:
            error.add_note(f"  {line}")
    else:
        text = str(error) + "".join(f"\n  {line}" for line in lines)
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
    oldest = next(iter(held))  # insertion order: the oldest first
    del held[oldest]
    record = records.get(oldest)
    if record is not None and record[0] is not None and type(record[0]) is not weakref.ref:
        del records[oldest]
