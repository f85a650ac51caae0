"""A progress line on stderr for the commands' long runs: after two seconds, at most once a second.

A run of ``demo --requests 1000000`` or ``selfcheck --operations 10000000`` takes
minutes; :class:`Progress` shows it is alive. It writes nothing for a run shorter than
:data:`DELAY` seconds, then one line, rewritten in place (a carriage return and an
erase), at most every :data:`INTERVAL` seconds, and erases it when the run ends or
before the command prints a line of its own. Only a terminal gets it: a standard error
that is a pipe or a file (a log, a test capturing it) gets nothing, so that its lines
stay the command's own. Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TextIO

__all__ = ["DELAY", "INTERVAL", "Progress", "duration"]

#: Seconds a run goes without a progress line.
DELAY: Final = 2.0
#: Seconds at least between two progress lines.
INTERVAL: Final = 1.0
#: The clock a :class:`Progress` reads unless given one (looked up when it starts: the tests
#: replace it).
_clock: Callable[[], float] = time.monotonic
#: Move to the start of the line and erase it (ANSI; every terminal emulator in use has it).
_ERASE: Final = "\r\x1b[K"


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a wait: ``"7 s"``, ``"3 min 5 s"``, ``"2 h 4 min"``.

    Runtime complexity: O(1)

    >>> duration(7.4), duration(185), duration(7440)
    ('7 s', '3 min 5 s', '2 h 4 min')
    """
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is an open terminal; ``False`` if asking fails (closed, ``None``)."""
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):  # a closed stream
        return False


class Progress:
    """Report ``done`` of ``total`` units of work on ``stream``, if it is a terminal.

    Call :meth:`update` as often as is convenient: it costs a clock read and a
    comparison until a line is due. ``clock`` (seconds) and ``force`` (show on a
    stream that is not a terminal) are for the tests.

    Runtime complexity: O(1) per call

    >>> import io
    >>> progress = Progress("demo", "requests", 10, io.StringIO())  # not a terminal: silent
    >>> progress.update(5)
    >>> progress.shown
    0
    """

    def __init__(
        self,
        command: str,
        unit: str,
        total: int,
        stream: TextIO | None,
        *,
        clock: Callable[[], float] | None = None,
        force: bool = False,
    ) -> None:
        """Start the clock for ``total`` ``unit`` of ``command``; ``force``: on any stream."""
        self.command = command
        self.unit = unit
        self.total = total
        self.clock = clock or _clock
        #: Where the lines go while they may: ``None`` for a stream that is no terminal, and
        #: from the first write that fails.
        self._target = stream if force or _is_terminal(stream) else None
        self.started = self.clock()
        self.due = self.started + DELAY
        #: Progress lines written so far.
        self.shown = 0
        #: The line on show; ``None`` before the first and once erased.
        self._line: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether progress lines are still written: a terminal, and no write has failed."""
        return self._target is not None

    def update(self, done: int) -> None:
        """Show ``done`` of the total if a line is due; otherwise do nothing.

        Runtime complexity: O(1)
        """
        if self._target is None:
            return
        now = self.clock()
        if now < self.due:
            return
        self.due = now + INTERVAL
        elapsed = now - self.started
        text = f"{self.command}: {done:,} of {self.total:,} {self.unit}"
        if self.total > 0:
            text += f" ({done / self.total:.0%})"
        text += f", {duration(elapsed)}"
        if 0 < done < self.total:
            text += f", about {duration(elapsed * (self.total - done) / done)} left"
        if self._write(f"{_ERASE}{text}"):
            self.shown += 1
            self._line = text

    def clear(self) -> None:
        """Erase the progress line, if one shows, so that the next output starts a clean line.

        Runtime complexity: O(1)
        """
        if self._line is not None:
            self._line = None
            self._write(_ERASE)

    def _write(self, text: str) -> bool:
        """Write ``text`` and flush; whether it went. A stream that fails turns the progress
        off, silently: nothing more is written to it, not even an erase."""
        target = self._target
        if target is None:
            return False
        try:
            target.write(text)
            target.flush()
        except (OSError, ValueError):  # stderr closed or gone: the run itself goes on
            self._target = None
            return False
        return True
