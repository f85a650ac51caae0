"""The process-wide check-mode switch: ``VERIFIED_QUEUE_CHECKS``, read once at import.

Kept apart from both the production queue and the checkers so that reading
it costs one environment lookup and imports nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Final

__all__ = ["CHECK_LEVEL", "ENVIRONMENT_VARIABLE", "LEVELS", "read_check_level"]

ENVIRONMENT_VARIABLE: Final = "VERIFIED_QUEUE_CHECKS"

#: Accepted values and the level each selects. ``off``: ``verified_queue.FreeBlockQueue``
#: is the production class. ``on``: it is ``CheckedFreeBlockQueue`` (O(1) checks per
#: operation, a full check every max(1000, len) operations). ``full``: the same class,
#: with a full check before every operation (O(n) each: for small test queues).
#: ``trace``: ``TracedFreeBlockQueue``, the ``on`` checks plus a record of who linked and
#: unlinked each block, named in every error. Each level's own name is accepted too, so
#: the value ``CHECK_LEVEL`` reports can be fed back.
LEVELS: Final = {
    "": "off",
    "0": "off",
    "off": "off",
    "1": "on",
    "on": "on",
    "full": "full",
    "trace": "trace",
}


def read_check_level(environ: Mapping[str, str] = os.environ) -> str:
    """Return ``"off"``, ``"on"``, ``"full"`` or ``"trace"`` for the switch's value in ``environ``.

    Unset, empty, ``0`` and ``off`` mean off; ``1`` and ``on`` mean on (any case,
    spaces trimmed). Any value outside :data:`LEVELS` raises ``ValueError``: a
    mistyped switch must not silently leave checks off.

    Runtime complexity: O(1)

    >>> read_check_level({}), read_check_level({"VERIFIED_QUEUE_CHECKS": "1"})
    ('off', 'on')
    >>> read_check_level({"VERIFIED_QUEUE_CHECKS": "On"})
    'on'
    """
    value = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    level = LEVELS.get(value.lower())
    if level is None:
        accepted = ", ".join(repr(key) for key in LEVELS)
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: expected one of {accepted}")
    return level


def _run_as_command() -> bool:
    """Whether this process is ``python [options] -m verified_queue ...``."""
    argv = getattr(sys, "orig_argv", [])
    return any(
        word == "-m" and argv[index + 1 : index + 2] == ["verified_queue"]
        for index, word in enumerate(argv)
    )


def _level_or_exit() -> str:
    """The switch's level; run as the command, a bad value is one line and exit status 2.

    A program importing the package gets the ``ValueError``. The command line
    cannot catch it itself: the package is imported before its ``__main__`` runs.
    """
    try:
        return read_check_level()
    except ValueError as error:
        if not _run_as_command():
            raise
        print(f"python -m verified_queue: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


#: The level in force for this process, read when the package was first imported.
CHECK_LEVEL: Final = _level_or_exit()
