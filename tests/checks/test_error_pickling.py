"""Every exception the package raises survives pickle whole, so a worker process can re-raise it.

The classes are found, not listed: every subclass of ``QueueError`` in the package's
modules, and the vLLM plugin's ``VllmPluginError``. A new one is covered by being defined.
"""

from __future__ import annotations

import pickle
import sys

import pytest

import verified_queue
import verified_queue.kvcache.errors
import verified_queue.vllm.plugin
from verified_queue.errors import InvariantViolation, QueueError


def _subclasses(root: type[BaseException]) -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    pending = [root]
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("verified_queue") and cls not in found:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


CLASSES = sorted(
    {*_subclasses(QueueError), verified_queue.vllm.plugin.VllmPluginError},
    key=lambda cls: f"{cls.__module__}.{cls.__qualname__}",
)


def _raised(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, InvariantViolation):
        return cls("I2 broken", "count_consistency", clause="I2", where="the walk", found="3")
    return cls("append(<Block at 0x1>): it is already linked in a queue (a double free?)")


def test_every_exception_class_of_the_package_is_covered() -> None:
    """The search finds the package's exceptions, the pool's and the plugin's among them."""
    names = {cls.__qualname__ for cls in CLASSES}
    assert {"QueueError", "InvariantViolation", "AlreadyInQueueError", "EmptyQueueError"} <= names
    assert {"BlockPoolError", "DoubleFreeError", "VllmPluginError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__qualname__)
def test_pickle_keeps_every_attribute(cls: type[BaseException]) -> None:
    """Type, message, args, every attribute (what was added after the raise too) and notes."""
    error = _raised(cls)
    error.history = ("freed before by", "pool.py:835")  # type: ignore[attr-defined]  # as the trace level adds one
    error.request_id = "req-7"  # type: ignore[attr-defined]  # any attribute a caller adds
    if sys.version_info >= (3, 11):
        error.add_note("  freed before by: #3 free_blocks() at scheduler.py:120")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error)
    assert copy.args == error.args
    assert vars(copy) == vars(error)
    assert getattr(copy, "__notes__", None) == getattr(error, "__notes__", None)
