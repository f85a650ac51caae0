"""A verified free-block queue for KV-cache block pools.

An intrusive doubly linked list with a fake head and a fake tail sentinel:
``popleft``, ``append`` and ``remove`` from the middle are O(1), and no
operation compares blocks with ``==``. The names match vLLM's
``FreeKVCacheBlockQueue`` so the queue is a drop-in.

>>> from verified_queue import Block, FreeBlockQueue
>>> blocks = [Block() for _ in range(4)]
>>> queue = FreeBlockQueue(blocks)
>>> evicted = queue.popleft_n(2)
>>> queue.append_n(reversed(evicted))
>>> [blocks.index(b) for b in queue]
[2, 3, 1, 0]

Check mode: ``CheckedFreeBlockQueue`` catches a corrupted queue at the
operation that meets the damage; its trace level, ``TracedFreeBlockQueue``
(``verified_queue.traced``), also says where each block was last linked and
unlinked. Setting ``VERIFIED_QUEUE_CHECKS=1`` (or ``full``) in the environment
before the package is imported binds ``verified_queue.FreeBlockQueue`` to
``CheckedFreeBlockQueue``, for code that cannot be changed to build the checked
class itself; ``trace`` binds it to ``TracedFreeBlockQueue``. The switch rebinds
this one name and no class: ``CheckedFreeBlockQueue`` is check mode at every
level (under ``trace`` too, where it builds an untraced checked queue),
``TracedFreeBlockQueue`` is always the trace level, and
``verified_queue.queue.FreeBlockQueue`` is always the production class, which
holds no check and stays a plain (or mypyc-compiled) class. Besides the name,
``full`` sets one default: a checked queue built without ``full_check_every``
runs the full check before every operation.
"""

# No ``from __future__ import annotations``, and the standard library imported under
# private names: every public name of the module is the package's API (``dir()``, below).
import typing as _typing
import warnings as _warnings

from verified_queue import _switch
from verified_queue import queue as _queue_module
from verified_queue.block import COMPILED, Block, Linkable
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    InvariantViolation,
    NegativeCountError,
    NotInQueueError,
    QueueError,
    WrongTypeError,
)

__version__ = "0.1.0"


def _left_in_a_checkout(extension: str) -> str | None:
    """A warning if the compiled ``extension`` sits in a source checkout, else ``None``.

    A compiled build run in a checkout without ``HATCH_BUILD_CLEAN_HOOKS_AFTER=1``
    leaves its extension modules beside the sources (``.gitignore`` hides them), and
    from then on they shadow the sources: ``COMPILED`` is true even for a pure install
    run from the checkout, and edits to ``queue.py`` silently do nothing. An installed
    wheel's package has no ``pyproject.toml`` beside it; a checkout's has.
    """
    from pathlib import Path  # noqa: PLC0415 -- only a compiled build asks, once

    package = Path(extension).parent
    if not (package.parent / "pyproject.toml").is_file():
        return None
    left = sorted(path.name for path in package.glob("*.so")) + sorted(
        path.name for path in package.glob("*.pyd")
    )
    return (
        f"verified_queue is running compiled extension modules left in the checkout "
        f"{package.parent} by a compiled build ({', '.join(left)}): they shadow queue.py and "
        "block.py, so edits to those do nothing; delete them (git clean -fX verified_queue), "
        "and build with HATCH_BUILD_CLEAN_HOOKS_AFTER=1 as well as HATCH_BUILD_HOOK_ENABLE_MYPYC=1"
    )


if COMPILED:
    _leftover = _left_in_a_checkout(_queue_module.__file__ or "")
    if _leftover is not None:
        _warnings.warn(_leftover, RuntimeWarning, stacklevel=2)

#: The check mode in force, read from ``VERIFIED_QUEUE_CHECKS`` at import: ``"off"``,
#: ``"on"``, ``"full"`` (a full O(n) check before every operation) or ``"trace"`` (``on``,
#: and every error names where its blocks were last linked and unlinked).
CHECK_LEVEL: str = _switch.CHECK_LEVEL

if _typing.TYPE_CHECKING:
    # Type checkers see one declaration, the class, so ``FreeBlockQueue[KVCacheBlock]``
    # is a type in mypy and pyright alike; the checked class is a subclass with the same
    # signatures, so what checks against one holds for the other.
    from verified_queue import _status
    from verified_queue.checked import CheckedFreeBlockQueue
    from verified_queue.queue import FreeBlockQueue
    from verified_queue.traced import TracedFreeBlockQueue
elif CHECK_LEVEL == "off":
    # Check mode is not loaded: ``CheckedFreeBlockQueue`` is imported on first use, by
    # the module ``__getattr__`` below (PEP 562), so a process with checks off never
    # loads a checker.
    FreeBlockQueue = _queue_module.FreeBlockQueue
elif CHECK_LEVEL == "trace":
    # The trace level: check mode plus the history of each block (loaded only here). The
    # checked class stays check mode; only the exported name is bound to the traced one.
    from verified_queue.checked import CheckedFreeBlockQueue
    from verified_queue.traced import TracedFreeBlockQueue

    FreeBlockQueue = TracedFreeBlockQueue
else:
    # Binding the exported name, not patching the class: a mypyc-compiled FreeBlockQueue
    # cannot be patched, and the production class stays check-free. Either way the name
    # is a class; the choice is made once, at import, and costs nothing per operation.
    from verified_queue.checked import CheckedFreeBlockQueue

    FreeBlockQueue = CheckedFreeBlockQueue


def status() -> "_status.Status":
    """Say what is in force in this process: the build, the check mode level, the vLLM plugin.

    The returned :class:`~verified_queue._status.Status` prints as a few lines:
    the version and build, the ``VERIFIED_QUEUE_CHECKS`` level and the class
    ``verified_queue.FreeBlockQueue`` names, and each vLLM name the plugin rebound
    in this process (its ``vllm_rebound``). It goes through no logger, so it answers
    in a script or a test where vLLM's logging never printed the plugin's line, and
    it loads neither check mode nor the plugin. ``python -m verified_queue status``
    prints it for a new process.

    Runtime complexity: O(len(sys.meta_path) + names the plugin rebound)

    >>> print(status())  # doctest: +ELLIPSIS
    verified_queue ..., ... build
    check mode: ... (VERIFIED_QUEUE_CHECKS): verified_queue.FreeBlockQueue is verified_queue...
    vLLM plugin: nothing rebound in this process (VERIFIED_QUEUE_VLLM=... in the environment)
    """
    from verified_queue import _status  # noqa: PLC0415 -- loaded only when asked

    return _status.current()


def __getattr__(name: str) -> object:
    """Load check mode on first use of ``CheckedFreeBlockQueue`` or ``TracedFreeBlockQueue``.

    PEP 562: a process that uses neither never loads a checker.
    """
    if name == "CheckedFreeBlockQueue":
        from verified_queue.checked import CheckedFreeBlockQueue  # noqa: PLC0415 -- lazy on purpose

        return CheckedFreeBlockQueue
    if name == "TracedFreeBlockQueue":
        from verified_queue.traced import TracedFreeBlockQueue  # noqa: PLC0415 -- lazy on purpose

        return TracedFreeBlockQueue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the lazily loaded classes included (PEP 562)."""
    return sorted({*globals(), *__all__})


__all__ = [
    "CHECK_LEVEL",
    "COMPILED",
    "AlreadyInQueueError",
    "Block",
    "CheckedFreeBlockQueue",
    "EmptyQueueError",
    "FreeBlockQueue",
    "InvariantViolation",
    "Linkable",
    "NegativeCountError",
    "NotInQueueError",
    "QueueError",
    "TracedFreeBlockQueue",
    "WrongTypeError",
    "__version__",
    "status",
]
