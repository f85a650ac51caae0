"""The trace level's records module at its edges: what its helpers return and keep.

``verified_queue._trace_records`` holds the records a traced queue keeps and the lines
its reports are built from. The trace level's own tests (``test_trace.py``,
``test_trace_machine.py``) reach it through a queue; these pin what a queue seldom or
never reaches: a walk that finds no caller at all, the report lines of a count written
before any numbered operation, the 3.10 form of the added lines, and the guards of the
callbacks that forget records (a record replaced since is never dropped).
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
import weakref
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

import pytest

from verified_queue import Block, QueueError
from verified_queue import _trace_records as records_module
from verified_queue._trace_records import (
    LIBRARY_FLAG,
    Operation,
    Record,
    Recorded,
    Records,
    add_lines,
    count_write_line,
    drop_oldest_held,
    forget_when_dead,
    or_none,
    request_of,
    short_path,
    treat_as_library,
)
from verified_queue.traced import TracedFreeBlockQueue


class WeakBlock(Block):
    """A block type with an instance dict, so weak references to it work (as vLLM's block)."""


def recorded(number: int, name: str = "append") -> Recorded:
    """A record's operation as a traced queue stores it, from a made-up caller."""
    return (number, name, "caller.py", 10 + number, "free_blocks", "MainThread", None)


# ------------------------------------------------------------------- a walk with no caller

#: Code that frees a block, run as a thread's target: below it are only the thread's own
#: frames (``threading``'s bootstrap), which the test makes the library's, so that a walk
#: that passes it over finds no caller.
FREEING_SOURCE = """
def free(queue, block, request_id, out):
    try:
        queue.append(block)
        out.append(current_thread().name)
    except BaseException as error:
        out.append(error)
"""


def compiled_freeing(filename: str, namespace: dict[str, Any]) -> Any:
    """:data:`FREEING_SOURCE` compiled under ``filename`` into ``namespace``: its ``free``."""
    namespace["current_thread"] = threading.current_thread
    exec(compile(FREEING_SOURCE, filename, "exec"), namespace)
    return namespace["free"]


def free_in_a_thread(
    free: Any, queue: TracedFreeBlockQueue[Any], block: Block, monkeypatch: pytest.MonkeyPatch
) -> str:
    """Run ``free`` in a new thread whose frames below it all read as the library's.

    The walk reads its cache of files first, so a fresh cache that holds ``threading``'s
    file as the library's passes over the thread's bootstrap frames. A thread of
    ``threading`` (not a bare ``_thread`` one) runs under the profile and trace functions
    the test runs under, so that tools that attribute lines to tests see this one.
    Returns the thread's name, as the trace level reads it.
    """
    monkeypatch.setattr(records_module, "_in_library", {threading.__file__: True})
    out: list[Any] = []
    thread = threading.Thread(target=free, args=(queue, block, "r-bare", out))
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the thread did not finish"
    (name,) = out
    assert isinstance(name, str), name
    return name


def test_a_walk_through_library_frames_only_names_an_unknown_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call whose every frame is the library's records ``<unknown>``, line 0, ``<unknown>``.

    The library's code is recognised by its globals (:data:`LIBRARY_FLAG` and its own
    ``__file__``); with nothing below it, the walk ends without a caller, and the record
    says so rather than naming a frame of the library. No host was passed, so no request.
    """
    filename = "<trace records edges: library frame>"
    free = compiled_freeing(filename, {LIBRARY_FLAG: True, "__file__": filename})
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue([Block()])
    thread = free_in_a_thread(free, queue, Block(), monkeypatch)
    operation = queue.recent_operations()[-1]
    assert operation == Operation(2, "append", "<unknown>", 0, "<unknown>", thread, None)
    assert str(operation) == f"#2 append() at <unknown>:0 in <unknown> (thread {thread})"


def test_a_walk_through_a_host_only_names_an_unknown_caller_and_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call from a host's core with nothing below it: ``<unknown>`` caller, the host's request.

    The walk passes the host's frame (:func:`treat_as_library`), reading its ``request_id``
    local, and ends without a caller: the record keeps the request it read.
    """
    filename = "<trace records edges: host frame>"
    treat_as_library(filename)
    free = compiled_freeing(filename, {"__name__": "trace_records_edges_host"})
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue([Block()])
    thread = free_in_a_thread(free, queue, Block(), monkeypatch)
    operation = queue.recent_operations()[-1]
    assert operation == Operation(2, "append", "<unknown>", 0, "<unknown>", thread, "r-bare")
    assert str(operation) == (
        f"#2 append() at <unknown>:0 in <unknown> for request 'r-bare' (thread {thread})"
    )


def test_a_library_frame_first_met_past_a_host_is_passed_over() -> None:
    """Past a host's frame, a library frame the walk never met before is no caller either.

    The walk reads whether an unseen file is the library's (:func:`is_library`) on the
    way out of a host too, and names the test, the first frame outside both.
    """
    tag = uuid.uuid4().hex
    host_file = f"<trace records edges: host {tag}>"
    treat_as_library(host_file)
    host: dict[str, Any] = {"__name__": "trace_records_edges_host"}
    exec(compile(HOST_SOURCE, host_file, "exec"), host)
    library_file = f"<trace records edges: library {tag}>"
    library: dict[str, Any] = {LIBRARY_FLAG: True, "__file__": library_file}
    exec(compile(LIBRARY_SOURCE, library_file, "exec"), library)
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    line = sys._getframe().f_lineno + 1
    library["through"](host["free"], queue, Block())
    operation = queue.recent_operations()[-1]
    function = "test_a_library_frame_first_met_past_a_host_is_passed_over"
    assert (operation.filename, operation.lineno, operation.function) == (
        os.path.abspath(__file__),
        line,
        function,
    )
    assert operation.request == "r-host"


def test_is_library_answers_a_file_it_has_seen_from_its_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file's answer is worked out once per process: the cached one is the answer given.

    This test's own file is no module of the library; with its answer cached as the
    library's, that cached answer is what ``is_library`` returns for its frame.
    """
    frame = sys._getframe()
    assert not records_module.is_library(frame)
    monkeypatch.setattr(records_module, "_in_library", {frame.f_code.co_filename: True})
    assert records_module.is_library(frame)


def counting_is_library(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Note each call of ``is_library`` (a miss of the walk) by file, then answer as before."""
    asked: list[str] = []
    original = records_module.is_library

    def is_library(frame: Any) -> bool:
        asked.append(frame.f_code.co_filename)
        return original(frame)

    monkeypatch.setattr(records_module, "is_library", is_library)
    return asked


def test_a_walk_over_files_seen_before_reads_only_its_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each traced operation's walk reads one dict per frame once a file has been seen.

    The first operation from here enters every file of the walk in the cache; the next
    one, from the same frames, asks ``is_library`` about none of them.
    """
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    blocks = [Block(), Block()]
    queue.append(blocks[0])
    asked = counting_is_library(monkeypatch)
    queue.append(blocks[1])
    assert asked == []
    assert queue.recent_operations()[-1].function == (
        "test_a_walk_over_files_seen_before_reads_only_its_cache"
    )


def test_a_walk_past_a_host_over_files_seen_before_reads_only_its_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past a host's core too, a file seen before is read from the cache, not worked out again."""
    host_file = f"<trace records edges: cached host {uuid.uuid4().hex}>"
    treat_as_library(host_file)
    host: dict[str, Any] = {"__name__": "trace_records_edges_host"}
    exec(compile(HOST_SOURCE, host_file, "exec"), host)
    queue: TracedFreeBlockQueue[Block] = TracedFreeBlockQueue()
    host["free"](queue, Block())
    asked = counting_is_library(monkeypatch)
    host["free"](queue, Block())
    assert asked == []
    assert queue.recent_operations()[-1].request == "r-host"


#: A host's core that frees a block for the request it names.
HOST_SOURCE = """
def free(queue, block):
    request_id = "r-host"
    queue.append(block)
"""

#: A module of the library that calls on: its frame is never a caller.
LIBRARY_SOURCE = """
def through(function, *arguments):
    function(*arguments)
"""


# ------------------------------------------------------------------------ report lines


def test_short_path_is_relative_below_the_working_directory_only() -> None:
    """A file below the working directory is shown relative (``/`` separated); others as given."""
    below = os.path.join(os.getcwd(), "pkg", "module.py")
    assert short_path(below) == "pkg/module.py"
    outside = os.path.join(os.path.dirname(os.getcwd()), "elsewhere.py")
    assert short_path(outside) == outside
    assert short_path("<unknown>") == "<unknown>"


def test_an_operation_reads_its_number_and_request_only_when_it_has_them() -> None:
    """``#N `` leads a numbered operation only; ``for request`` follows a request's id only."""
    path = os.path.join(os.getcwd(), "app", "serve.py")
    numbered = Operation(12, "append", path, 40, "free_request", "MainThread")
    assert str(numbered) == "#12 append() at app/serve.py:40 in free_request (thread MainThread)"
    call = Operation(None, "remove", path, 7, "evict", "worker", "req-7")
    assert str(call) == "remove() at app/serve.py:7 in evict for request 'req-7' (thread worker)"


def test_the_count_write_line_says_after_which_operation_only_when_one_came_first() -> None:
    """``, after #N`` ends the line of a write that followed operation N; none follows #0."""
    path = os.path.join(os.getcwd(), "app", "pool.py")
    first = Operation(0, "written", path, 9, "reset", "MainThread")
    assert count_write_line(first) == (
        "num_free_blocks written from outside at app/pool.py:9 in reset (thread MainThread)"
    )
    later = Operation(3, "deleted", path, 11, "reset", "worker")
    assert count_write_line(later) == (
        "num_free_blocks deleted from outside at app/pool.py:11 in reset (thread worker), after #3"
    )


def test_a_missing_operation_reads_no_record() -> None:
    """``or_none``: a missing operation is ``no record``; a kept one is its own line."""
    assert or_none(None) == "no record"
    operation = Operation(5, "popleft", "<stdin>", 1, "<module>", "MainThread")
    assert or_none(operation) == str(operation)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 has no notes")
def test_added_lines_are_notes_under_an_unchanged_message() -> None:
    """On Python 3.11+ each line is a note indented by two spaces; the message stays as raised."""
    error = QueueError("the message")
    add_lines(error, ["first line", "second line"])
    assert str(error) == "the message"
    assert error.args == ("the message",)
    assert getattr(error, "__notes__", None) == ["  first line", "  second line"]


def test_added_lines_without_notes_extend_the_message_and_keep_the_other_arguments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python 3.10's form: each line joins the message on its own indented line; args[1:] stay.

    The module reads ``sys.version_info`` when it adds lines: seen as 3.10 (which has no
    notes), the message itself carries them.
    """
    monkeypatch.setattr(records_module, "sys", SimpleNamespace(version_info=(3, 10, 14)))
    error = QueueError("the message")
    add_lines(error, ["first line", "second line"])
    assert str(error) == "the message\n  first line\n  second line"
    assert getattr(error, "__notes__", None) is None
    # An error raised with more arguments: what str() showed leads, the rest stay as they were.
    several = QueueError("the message", 7, "third")
    shown = str(several)
    add_lines(several, ["a line"])
    assert several.args == (f"{shown}\n  a line", 7, "third")


# ------------------------------------------------------------------------ the records map


def test_records_start_with_an_empty_membership() -> None:
    """A new map's membership is empty: a member's record (no holder) proves nothing yet."""
    records = Records()
    assert dict(records.members) == {}
    block = Block()
    records[id(block)] = (None, recorded(1), None)
    assert records.history_of(block) is None
    records.members = {id(block): block}
    history = records.history_of(block)
    assert history is not None
    assert history.linked == Operation._make(recorded(1))
    assert history.unlinked is None


def test_a_record_held_for_another_block_is_not_this_blocks_history() -> None:
    """A record under a block's id whose holder is not that block is stale: no history.

    Its holder a weak reference to another block (the id was reused), or another object
    altogether, the record is not the block's own; held by a reference to the block, it is.
    """
    records = Records()
    block, other = WeakBlock(), WeakBlock()
    records[id(block)] = (weakref.ref(other), recorded(1), recorded(2, "popleft"))
    assert records.history_of(block) is None
    records[id(block)] = (other, recorded(1), recorded(2, "popleft"))
    assert records.history_of(block) is None
    records[id(block)] = (weakref.ref(block), recorded(1), recorded(2, "popleft"))
    history = records.history_of(block)
    assert history is not None
    assert history.unlinked == Operation._make(recorded(2, "popleft"))


def request_in(request: object) -> str | None:  # noqa: ARG001 -- read through the frame
    """The request id :func:`request_of` reads from this frame, whose local ``request`` is given."""
    return request_of(sys._getframe())


def test_a_request_id_that_is_not_a_str_is_no_request() -> None:
    """A request object's ``request_id`` is read only when it is a ``str``; else no request."""
    assert request_in(SimpleNamespace(request_id="r-9")) == "r-9"
    assert request_in(SimpleNamespace(request_id=9)) is None
    assert request_in(SimpleNamespace(request_id=None)) is None
    assert request_in(SimpleNamespace()) is None


# ------------------------------------------------------- forgetting and dropping records


def test_a_dead_block_forgets_only_its_own_record() -> None:
    """The callback drops the record its reference holds, not one that replaced it, nor a gap."""
    records: dict[int, Record] = {}
    block = WeakBlock()
    key = id(block)
    reference = weakref.ref(block)
    forget = forget_when_dead(records, key)
    forget(reference)  # no record at all: nothing to drop, nothing raised
    assert records == {}
    newer = (None, recorded(2), None)
    records[key] = newer
    forget(reference)  # replaced by a member's record since: kept
    assert records == {key: newer}
    records[key] = (reference, None, recorded(3, "popleft"))
    forget(reference)
    assert records == {}


def test_dropping_the_oldest_held_record_drops_only_a_record_that_holds_its_block() -> None:
    """The oldest held id goes; its record goes only while the record still holds a block."""
    blocks = [Block() for _ in range(3)]
    records: dict[int, Record] = {
        id(block): (block, None, recorded(number, "popleft"))
        for number, block in enumerate(blocks, start=1)
    }
    held: OrderedDict[int, None] = OrderedDict((id(block), None) for block in blocks)
    drop_oldest_held(records, held)  # the oldest; its link was never recorded
    assert list(held) == [id(blocks[1]), id(blocks[2])]
    assert list(records) == [id(blocks[1]), id(blocks[2])]
    # The next oldest: a member's record (no holder) replaced it, and stays.
    member = (None, recorded(4), None)
    records[id(blocks[1])] = member
    drop_oldest_held(records, held)
    assert list(held) == [id(blocks[2])]
    assert records[id(blocks[1])] is member
    # The last: its record gone already (nothing raised).
    del records[id(blocks[2])]
    drop_oldest_held(records, held)
    assert not held
    assert list(records) == [id(blocks[1])]


def test_dropping_the_oldest_held_record_keeps_a_weakly_held_one() -> None:
    """A record that holds its block by weak reference is not the bound's: it stays."""
    block = WeakBlock()
    reference = weakref.ref(block)
    weak: Record = (reference, recorded(1), recorded(2, "popleft"))
    records: dict[int, Record] = {id(block): weak}
    held: OrderedDict[int, None] = OrderedDict([(id(block), None)])
    drop_oldest_held(records, held)
    assert not held
    assert records == {id(block): weak}
