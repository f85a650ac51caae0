"""The progress line of long runs: on a terminal's stderr, after 2 s, once a second at most."""

from __future__ import annotations

import io
import os
import re
import sys

import pytest

from verified_queue.__main__ import main
from verified_queue.cli import progress as progress_module
from verified_queue.cli.progress import DELAY, INTERVAL, Progress, duration

ERASE = "\r\x1b[K"


class FakeClock:
    """A clock that moves only when told to, or by ``step`` on every reading."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 100.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def rendered(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: each erase starts its line over."""
    return [line.rsplit(ERASE, 1)[-1] for line in text.split("\n")]


def test_nothing_before_the_delay_then_at_most_one_line_a_second() -> None:
    """No line in the first 2 s; then one, and the next no sooner than a second later."""
    clock = FakeClock()
    stream = Terminal()
    progress = Progress("cmd", "things", 100, stream, clock=clock)
    progress.update(1)
    clock.now += DELAY - 0.01
    progress.update(10)
    assert stream.getvalue() == ""
    clock.now += 0.01
    progress.update(20)
    assert stream.getvalue() == f"{ERASE}cmd: 20 of 100 things (20%), 2 s, about 8 s left"
    clock.now += INTERVAL - 0.01
    progress.update(30)
    assert progress.shown == 1
    clock.now += 0.01
    progress.update(40)
    assert progress.shown == 2
    progress.clear()
    assert stream.getvalue().endswith(f"about 4 s left{ERASE}")
    progress.clear()  # nothing shows: nothing to erase
    assert stream.getvalue().count(ERASE) == 3


def test_a_stream_that_is_no_terminal_gets_nothing() -> None:
    """A pipe, a file or a test's capture gets no progress, however long the run."""
    clock = FakeClock(step=10.0)
    stream = io.StringIO()
    progress = Progress("cmd", "things", 100, stream, clock=clock)
    for done in range(100):
        progress.update(done)
    progress.clear()
    assert stream.getvalue() == ""
    assert not Progress("cmd", "things", 1, None).enabled


def test_a_real_terminal_is_recognised_and_a_pipe_is_not() -> None:
    """isatty() decides: a pseudo-terminal enables the line, a pipe does not."""
    pty = pytest.importorskip("pty")
    controller, follower = pty.openpty()
    reader, writer = os.pipe()
    with open(follower, "w") as terminal, open(writer, "w") as pipe:
        assert Progress("cmd", "things", 1, terminal).enabled
        assert not Progress("cmd", "things", 1, pipe).enabled
    os.close(controller)
    os.close(reader)


def test_a_failing_stream_turns_the_progress_off() -> None:
    """A closed stderr does not stop the run: the progress just stops."""
    clock = FakeClock(step=5.0)
    stream = Terminal()
    progress = Progress("cmd", "things", 10, stream, clock=clock)
    stream.close()
    progress.update(1)
    assert not progress.enabled


def test_durations_read_as_a_wait() -> None:
    """Seconds, then minutes and seconds, then hours and minutes."""
    assert [duration(s) for s in (0, 59.4, 60, 3599, 3600, 86399)] == [
        "0 s",
        "59 s",
        "1 min 0 s",
        "59 min 59 s",
        "1 h 0 min",
        "23 h 59 min",
    ]


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (
            ["selfcheck", "--operations", "3000"],
            r"python -m verified_queue selfcheck: [\d,]+ of 3,000 operations \(\d+%\)",
        ),
        (
            ["--operations", "3000"],
            r"python -m verified_queue: [\d,]+ of 3,000 operations \(\d+%\)",
        ),
        (
            ["demo", "--requests", "300", "--blocks", "1024"],
            r"python -m verified_queue demo: [\d,]+ of 300 requests served \(\d+%\)",
        ),
    ],
)
def test_long_runs_show_progress_that_never_mixes_into_a_line(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], pattern: str
) -> None:
    """Past 2 s a run shows its progress, erased before each line of its own and at its end."""
    # One terminal for stdout and stderr, as a shell gives them, and a clock 10 ms a reading.
    # Replaced here, not in a fixture: pytest sets its own capture again when the test starts.
    terminal = Terminal()
    monkeypatch.setattr(progress_module, "_clock", FakeClock(step=0.01))
    with monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", terminal)
        patched.setattr(sys, "stderr", terminal)
        status = main(argv)
    assert status == 0
    text = terminal.getvalue()
    shown = re.findall(pattern, text)
    assert len(shown) >= 2
    lines = rendered(text)
    # Every progress line was erased: by the next, before a line of the command's own, or at
    # the end. So none shows, and none ran into a line of the output.
    assert not [line for line in lines if re.search(pattern, line)]
    assert lines[-1] == ""
    assert lines[0].startswith("verified_queue ")  # the banner, first
    assert any("self-check passed" in line or "result  " in line for line in lines)


@pytest.mark.parametrize(
    ("total", "done", "line"),
    [
        (10, 0, "cmd: 0 of 10 things (0%), 3 s"),
        (10, 1, "cmd: 1 of 10 things (10%), 3 s, about 27 s left"),
        (10, 9, "cmd: 9 of 10 things (90%), 3 s, about 0 s left"),
        (10, 10, "cmd: 10 of 10 things (100%), 3 s"),
        (1, 0, "cmd: 0 of 1 things (0%), 3 s"),
        (1, 1, "cmd: 1 of 1 things (100%), 3 s"),
        (0, 0, "cmd: 0 of 0 things, 3 s"),
        (2_000_000, 500_000, "cmd: 500,000 of 2,000,000 things (25%), 3 s, about 9 s left"),
    ],
)
def test_a_line_shows_the_share_done_and_an_estimate_only_while_one_can_be_made(
    total: int, done: int, line: str
) -> None:
    """The share done shows for any total of work (not for none), and the time left only once
    some work is done and while some is left: never a division by zero, never "0 s left"
    for a finished run."""
    clock = FakeClock()
    stream = Terminal()
    progress = Progress("cmd", "things", total, stream, clock=clock)
    clock.now += 3.0
    progress.update(done)
    assert stream.getvalue() == f"{ERASE}{line}"


@pytest.mark.parametrize("hours", [1, 2, 25])
def test_a_wait_of_hours_reads_in_hours_and_whole_minutes(hours: int) -> None:
    """From an hour on, a wait reads as its hours and minutes, for every minute of the hour."""
    for minutes in range(60):
        for seconds in (0, 29):
            wait = hours * 3600 + minutes * 60 + seconds
            assert duration(wait) == f"{hours} h {minutes} min"


class Unaskable(io.StringIO):
    """A stream that takes writes but cannot say whether it is a terminal."""

    def isatty(self) -> bool:
        raise OSError("Bad file descriptor")


def test_a_stream_that_cannot_say_it_is_a_terminal_gets_nothing() -> None:
    """When asking whether stderr is a terminal fails, it is not treated as one: no line."""
    clock = FakeClock(step=10.0)
    stream = Unaskable()
    progress = Progress("cmd", "things", 100, stream, clock=clock)
    for done in range(0, 100, 10):
        progress.update(done)
    progress.clear()
    assert stream.getvalue() == ""


class FlakyTerminal(Terminal):
    """A terminal on which the writes numbered in ``failing`` (from 0) fail; others go through."""

    def __init__(self, *failing: int) -> None:
        super().__init__()
        self.failing = set(failing)
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes - 1 in self.failing:
            raise OSError("Resource temporarily unavailable")
        return super().write(text)


def test_after_a_failed_write_the_progress_writes_no_more_lines() -> None:
    """A first line that cannot be written turns the progress off for good: none follows."""
    clock = FakeClock(step=5.0)
    stream = FlakyTerminal(0)
    progress = Progress("cmd", "things", 10, stream, clock=clock)
    progress.update(1)
    assert stream.writes == 1
    for done in range(2, 10):
        progress.update(done)
    assert stream.writes == 1
    assert stream.getvalue() == ""


def test_an_erase_that_fails_is_not_tried_again() -> None:
    """Once the erase of a line fails, the progress is off: later clears write nothing."""
    clock = FakeClock(step=5.0)
    stream = FlakyTerminal(1)
    progress = Progress("cmd", "things", 10, stream, clock=clock)
    progress.update(5)
    assert stream.getvalue() == f"{ERASE}cmd: 5 of 10 things (50%), 5 s, about 5 s left"
    progress.clear()  # fails
    progress.update(6)
    progress.clear()
    progress.clear()
    assert stream.writes == 2


def test_a_line_that_failed_is_neither_counted_nor_erased() -> None:
    """A line whose write failed never showed: it is not counted, and no erase follows it,
    even on a stream that works again (the erase would wipe the terminal's line)."""
    clock = FakeClock(step=5.0)
    stream = FlakyTerminal(0)
    progress = Progress("cmd", "things", 10, stream, clock=clock)
    progress.update(1)
    assert progress.shown == 0
    assert not progress.enabled
    progress.clear()  # only the first write fails: the stream would take this one
    assert stream.writes == 1
    assert stream.getvalue() == ""


def test_an_erase_is_written_only_for_a_line_on_show() -> None:
    """clear() before any line, and a second clear() after one, write nothing: an erase
    goes out only when a line shows (it would wipe the terminal's own line otherwise)."""
    clock = FakeClock(step=5.0)
    stream = Terminal()
    progress = Progress("cmd", "things", 10, stream, clock=clock)
    progress.clear()
    assert stream.getvalue() == ""
    progress.update(5)
    progress.clear()
    progress.clear()
    assert stream.getvalue() == f"{ERASE}cmd: 5 of 10 things (50%), 5 s, about 5 s left{ERASE}"
