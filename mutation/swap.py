"""Mutation testing without trampolines: each mutant's code swapped into the live function.

mutmut 3 runs a mutant by routing every call of every mutated function through a
trampoline, a function of its own that picks the original or the mutant. The trampolines
add a frame to every call, and the package tells callers apart by frames: the trace level
records who wrote the count by frame depth, and vLLM's checked queues tell vLLM's writes of
the count from their own by the writing frame's globals. Under the trampolines those tests
fail on the unmutated code, so ``mutation/run.py`` leaves them out (``setup.cfg``), and the
trace level's and the vLLM adapters' mutants meet few of their tests.

This runner keeps mutmut's mutants (the same operators, the same names) and runs them
another way. Every mutant is one function changed. pytest imports the package and collects
the suite once; then, in place of running it, the runner forks for each mutant, and the
child assigns the mutant's code object to the live function (``function.__code__``), so
every reference to it, every subclass and every frame sees the mutant with nothing added,
then runs the collected tests that ran the statement it changes, fastest first, each under
a CPU limit (``mutation/selection.py``), stopping at the first failure. The source files
on disk stay as they are, so the tests that plant bugs by editing a module's source run
too. Which tests run which lines, and so which functions, comes from one run of the suite
under coverage.py (``collect``, ``mutation/calls.py``), spread over the cores.

Usage (from the checkout, with the mutation group installed; ``tox -e mutation`` runs the
second line)::

    python mutation/swap.py collect --out calls.json [-n 2]   # which tests call what
    python mutation/swap.py run [--calls calls.json] [--only GLOB] [--max-children 2] [--out F]
    python mutation/swap.py show NAME...   # a mutant as a diff of its function

``run`` without ``--calls`` collects the call map first. It exits non-zero unless every
module scores at least 98% and every mutant not detected is explained on the survivors
page (``run.judge``).
"""

from __future__ import annotations
import __future__

import argparse
import ast
import difflib
import fnmatch
import functools
import hashlib
import importlib
import inspect
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import run as whole_package_run  # mutation/run.py: the verdict, module by module

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "verified_queue"
HERE = Path(__file__).resolve().parent
SEPARATOR = "ǁ"
#: Each test's CPU limit in a child, in place of selection.py's (set for mutmut's runs, which
#: import the package and the tests afresh): a child here inherits them, and the call map's
#: times are taken under coverage.py, which slows a test about 1.5x (tests/kvcache: 105 s of
#: CPU traced, 72 s plain). A test past 2 s plus 2 times its traced time, about 3 times its
#: own, is a mutant that spins (the pool's repair loops); PIT's default stops one at 1.25
#: times plus 4 s.
LIMIT_FLOOR = 2.0
LIMIT_FACTOR = 2.0
#: How many of the tests that killed a function's mutants its next mutants try first.
KILLERS_KEPT = 3
#: Mutants that survive on purpose, each explained on the survivors page, with the fingerprint
#: of the function and the mutant they were judged on (``python mutation/swap.py known NAME``).
KNOWN_FILE = HERE / "known_survivors.txt"
#: What a known survivor is: a mutant no test can tell from the original ("equivalent", left
#: out of its module's score, as the usual definition of the score does), or a choice no test
#: pins, such as a random workload's range ("unpinned", counted as not detected).
KINDS = ("equivalent", "unpinned")
#: A child's exit code read as mutmut reads it (36: the per-test CPU limit of selection.py).
STATUS = {0: "survived", 1: "killed", 36: "timeout", 5: "no tests"}


@dataclass(frozen=True)
class Mutant:
    """One of mutmut's mutants: its name, where its function lives, and the function's source."""

    name: str
    module: str
    class_name: str | None
    function: str
    source: str

    @property
    def key(self) -> str:
        """The function's key in the call map: ``module:Class.function`` or ``module:function``."""
        owner = f"{self.class_name}." if self.class_name else ""
        return f"{self.module}:{owner}{self.function}"


def module_name(path: Path) -> str:
    """The dotted name of the package module at ``path``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def generate(only: str | None = None) -> list[Mutant]:
    """mutmut's mutants of every module of the package (or those matching ``only``)."""
    # mutmut is in the mutation group only; the runner's tests swap mutants written by hand.
    from mutmut.mutation.file_mutation import mutate_file_contents  # noqa: PLC0415

    mutants = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        if only and not fnmatch.fnmatch(relative, only):
            continue
        mutated = mutate_file_contents(relative, path.read_text(encoding="utf-8"))
        lines = mutated.code.splitlines(keepends=True)
        module = module_name(path)
        for mangled in mutated.mutant_names:
            span = mutated.line_span_by_function_name[mangled]
            source = textwrap.dedent("".join(lines[span.start - 1 : span.end]))
            function = mangled.partition("__mutmut_")[0]
            class_name = None
            if function.startswith(f"x{SEPARATOR}"):
                _, class_name, function = function.split(SEPARATOR)
            else:
                function = function.removeprefix("x_")
            mutants.append(Mutant(f"{module}.{mangled}", module, class_name, function, source))
    return mutants


def _path_of(module: str) -> Path:
    """The file of the package module named ``module``."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@functools.cache
def _mutants_of(path: Path) -> tuple[Mutant, ...]:
    return tuple(generate(str(path.relative_to(ROOT))))


def find(name: str) -> Mutant:
    """mutmut's mutant ``name`` of today's source."""
    found = [m for m in _mutants_of(_path_of(name.rpartition(".x")[0])) if m.name == name]
    if not found:
        raise SystemExit(f"no mutant named {name}")
    return found[0]


def show(name: str) -> str:
    """The unified diff from the function's source to mutant ``name``'s."""
    mutant = find(name)
    path = _path_of(mutant.module)
    live = live_function(mutant)
    original = textwrap.dedent(inspect.getsource(live)).splitlines(keepends=True)
    mangled = mutant.name.rpartition(".")[2]
    changed = mutant.source.lstrip("\n").replace(f"def {mangled}(", f"def {mutant.function}(", 1)
    where = f"{path.relative_to(ROOT)} ({mutant.key})"
    return "".join(
        difflib.unified_diff(original, changed.splitlines(keepends=True), where, mutant.name)
    )


def fingerprint(mutant: Mutant) -> str:
    """A digest of ``mutant`` and of the function it changes, as they are today.

    A known survivor is set aside only while its fingerprint is the one it was judged on: a
    change to the function, or a mutant renumbered onto another change, runs it again.
    """
    original = textwrap.dedent(inspect.getsource(live_function(mutant)))
    text = "\0".join((mutant.key, original, mutant.source))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def read_known(path: Path) -> dict[str, tuple[str, str]]:
    """The known survivors listed in ``path``: name -> (fingerprint, kind)."""
    known = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.partition("#")[0].split()
        if not fields:
            continue
        if len(fields) != 3 or fields[2] not in KINDS:
            raise SystemExit(f"{path}:{number}: not 'NAME FINGERPRINT KIND' ({' or '.join(KINDS)})")
        known[fields[0]] = (fields[1], fields[2])
    return known


@functools.cache
def _statement_spans(path: Path) -> tuple[tuple[int, int, bool], ...]:
    """Every statement of a module as ``(first line, last line, is a header)``.

    A compound statement (``if``, ``for``, ``try``, ``def``, an ``except`` clause...) counts
    as its header only, decorators included: its body is made of statements of its own.
    """
    spans = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.stmt, ast.ExceptHandler)):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            spans.append((first, max(node.lineno, body[0].lineno - 1), True))
        else:
            spans.append((node.lineno, node.end_lineno or node.lineno, False))
    return tuple(spans)


def changed_statements(mutant: Mutant) -> list[tuple[int, int]] | None:
    """The line spans of the statements ``mutant`` changes in its module's file.

    ``None`` when the change is in the function's own header (its signature, defaults or
    decorators, which run when the function is defined, not when it runs) or lies outside
    every statement: then every test that calls the function is the mutant's.
    """
    live = live_function(mutant)
    source, start = inspect.getsourcelines(live)
    original = textwrap.dedent("".join(source)).splitlines(keepends=True)
    mangled = mutant.name.rpartition(".")[2]
    changed = mutant.source.lstrip("\n").replace(f"def {mangled}(", f"def {mutant.function}(", 1)
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, original, changed.splitlines(keepends=True), False)
    for tag, first, last, _, _ in matcher.get_opcodes():
        if tag != "equal":
            # An insertion changes the place between two lines: both count.
            lines.update(range(first, last) if last > first else {max(first - 1, 0), first})
    if not lines:
        return None
    spans = _statement_spans(Path(live.__code__.co_filename))
    found = []
    for line in sorted(start + offset for offset in lines):
        holding = [span for span in spans if span[0] <= line <= span[1]]
        if not holding:
            return None
        innermost = min(holding, key=lambda span: span[1] - span[0])
        if innermost[2] and innermost[0] == start:  # the function's own header
            return None
        found.append(innermost[:2])
    return found


def live_function(mutant: Mutant) -> types.FunctionType:
    """The function object the package runs for ``mutant``'s function."""
    module = importlib.import_module(mutant.module)
    owner: Any = module if mutant.class_name is None else getattr(module, mutant.class_name)
    found = vars(owner)[mutant.function]
    found = getattr(found, "__func__", found)  # staticmethod, classmethod
    if not isinstance(found, types.FunctionType):
        raise TypeError(f"{mutant.key} is not a plain function: {found!r}")
    return found


def mutant_function(mutant: Mutant, live: types.FunctionType) -> types.FunctionType:
    """The mutant compiled as the live function is: same file, class, globals and names."""
    mangled = mutant.name.rpartition(".")[2]
    source = mutant.source
    if mutant.class_name is not None:
        source = f"class {mutant.class_name}:\n" + textwrap.indent(source, "    ")
    code = compile(
        source,
        live.__code__.co_filename,
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    namespace: dict[str, Any] = {}
    exec(code, dict(live.__globals__), namespace)
    owner = namespace if mutant.class_name is None else vars(namespace[mutant.class_name])
    made = owner[mangled]
    made = getattr(made, "__func__", made)
    if not isinstance(made, types.FunctionType):
        raise TypeError(f"{mutant.name} compiled to {made!r}")
    return made


def swap_in(mutant: Mutant) -> None:
    """Put ``mutant``'s code, defaults and names into the live function."""
    live = live_function(mutant)
    made = mutant_function(mutant, live)
    code = made.__code__.replace(
        co_name=live.__code__.co_name,
        co_qualname=live.__code__.co_qualname,
        co_firstlineno=live.__code__.co_firstlineno,
    )
    if code.co_freevars != live.__code__.co_freevars:
        # A mutant that drops the method's only super() loses its __class__ cell, and a code
        # object cannot change its free variables under a function: the class gets the
        # mutant as a function of its own (references kept elsewhere keep the original).
        owner = vars(importlib.import_module(mutant.module))[mutant.class_name or ""]
        replacement = types.FunctionType(code, live.__globals__, live.__name__, made.__defaults__)
        replacement.__kwdefaults__ = made.__kwdefaults__
        replacement.__qualname__ = live.__qualname__
        wrapper = type(vars(owner)[mutant.function])
        setattr(
            owner,
            mutant.function,
            replacement if wrapper is types.FunctionType else wrapper(replacement),
        )
        return
    live.__code__ = code
    live.__defaults__ = made.__defaults__
    live.__kwdefaults__ = made.__kwdefaults__


# ------------------------------------------------------------------------------ calls


@functools.cache
def function_of_line(path: Path) -> dict[int, str]:
    """Each line of a function body in the module at ``path``: the key of its function.

    A function's key is ``module:qualified name``, as ``calls.key_of`` makes it and
    ``Mutant.key`` names it. A function defined in another function is its enclosing
    function's: mutmut mutates the outer one, and the inner one runs only once it has run.
    A function's header (decorators, signature, defaults) runs when it is defined, not
    when it is called: its lines are no function's.
    """
    module = module_name(path)
    found: dict[int, str] = {}

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{owner}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{module}:{owner}{child.name}"
                for line in range(child.body[0].lineno, (child.end_lineno or 0) + 1):
                    found[line] = key

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def collect(out: Path, workers: int, pytest_args: list[str]) -> None:
    """Run the suite once under ``calls.py`` and write which tests call each function."""
    with tempfile.TemporaryDirectory() as directory:
        env = os.environ | {
            "SWAP_CALLS_DIR": directory,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]),
        }
        spread = ["-n", str(workers)] if workers > 1 else []
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "calls",
                "-p",
                "no:cacheprovider",
                *spread,
                *pytest_args,
            ],
            cwd=ROOT,
            env=env,
            check=False,
        )
        calls: dict[str, set[str]] = defaultdict(set)
        cpu: dict[str, float] = {}
        ran: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        own_tracer: set[str] = set()
        failed: list[str] = []
        for part in Path(directory).glob("*.json"):
            data = json.loads(part.read_text(encoding="utf-8"))
            for key, tests in data["calls"].items():
                calls[key].update(tests)
            cpu.update(data["cpu"])
            for filename, by_line in data["lines"].items():
                for line, places in by_line.items():
                    ran[filename][int(line)].update(data["order"][place] for place in places)
            own_tracer.update(data["own_tracer"])
            failed += data["failed"]
    # A test calls a function when it runs a line of its body.
    for filename, by_line in ran.items():
        keys = function_of_line(ROOT / filename)
        for line, ran_by in by_line.items():
            if line in keys:
                calls[keys[line]].update(ran_by)
    tests = sorted(cpu)
    place = {test: index for index, test in enumerate(tests)}
    lines = {
        filename: {line: sorted(place[test] for test in ran_by) for line, ran_by in by_line.items()}
        for filename, by_line in ran.items()
    }
    out.write_text(
        json.dumps(
            {
                "calls": {k: sorted(v) for k, v in calls.items()},
                "cpu": cpu,
                "tests": tests,
                "lines": lines,
                "own_tracer": sorted(own_tracer),
            }
        ),
        encoding="utf-8",
    )
    print(f"{len(cpu)} tests, {len(calls)} functions called, {sum(cpu.values()):.0f} s of CPU")
    if failed:
        # Under the profile function, or in this copy: left out of every mutant's tests.
        print(f"{len(set(failed))} tests failed on the unmutated code, left out:")
        for test in sorted(set(failed)):
            print(f"  {test}")
    if done.returncode not in (0, 1):
        raise SystemExit(f"the collecting run of pytest failed ({done.returncode})")


# ------------------------------------------------------------------------------- run


def _quiet_child(config: pytest.Config) -> None:
    """In a forked child: its output to /dev/null, with capture files of its own."""
    # The parent's capture files are shared with every child through fork (one file offset
    # for all): the child stops them, points its stdout and stderr at /dev/null, and starts
    # its own, so no two children write into, or truncate, one file.
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    if capture is not None:
        capture.start_global_capturing()


def status_of(exit_code: int) -> str:
    """A mutant's status from its child's exit code (a signal: the CPU limit or a crash)."""
    if exit_code < 0:
        stopped = (signal.SIGXCPU, signal.SIGKILL, signal.SIGALRM)
        return "timeout" if -exit_code in stopped else "segfault"
    return STATUS.get(exit_code, "killed" if exit_code in (2, 3) else f"suspicious ({exit_code})")


class MutantLoop:
    """A pytest plugin that runs each mutant, in a forked child, in place of the session's tests.

    pytest collects the suite once, in the parent; for each mutant the parent forks, and the
    child swaps the mutant in and runs the collected items among the mutant's tests
    (``tests``, by mutant name), fastest first, through pytest's own run protocol, stopping
    at the first failure. No child starts pytest again: collecting the tests of a
    much-called function took longer than most mutants' tests do.

    A child that fails a test tells the parent which, through a pipe, and the next mutants
    of the same function run the tests that killed its earlier mutants first (the last
    ``KILLERS_KEPT``, latest first), then the rest fastest first: most mutants of a function
    fall to the test that felled its others, and under fastest-first alone a mutant that
    only a slow test catches ran every faster test of its function before it.
    """

    def __init__(
        self,
        mutants: list[Mutant],
        tests: dict[str, list[str]],
        cpu: dict[str, float],
        children: int,
        out: Path | None,
    ) -> None:
        self.mutants = mutants
        self.tests = tests
        self.cpu = cpu
        self.children = children
        self.out = out
        self.found: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.failed: str | None = None
        #: By function key: the node ids of the tests that killed its mutants, latest first.
        self.killers: dict[str, list[str]] = {}
        #: By mutant: the node id of the test that killed it (or ran out of time).
        self.killed_by: dict[str, str] = {}
        #: selection.py as pytest loaded it, once the loop runs.
        self.selection: Any = None

    def cost(self, mutant: Mutant) -> float:
        """The CPU seconds of the mutant's tests, in the call map's run."""
        return sum(self.cpu.get(test, 0.0) for test in self.tests.get(mutant.name, ()))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and self.failed is None:
            self.failed = report.nodeid

    def order(self, mutant: Mutant, items: list[pytest.Item]) -> list[pytest.Item]:
        """``items`` (fastest first) with the tests that killed ``mutant``'s function's
        earlier mutants moved to the front, latest killer first."""
        known = self.killers.get(mutant.key, [])
        first = [item for killer in known for item in items if item.nodeid == killer]
        return first + [item for item in items if item.nodeid not in known]

    def learn(self, mutant: Mutant, killer: str) -> None:
        """Remember that ``killer`` failed under ``mutant``."""
        known = [test for test in self.killers.get(mutant.key, []) if test != killer]
        self.killers[mutant.key] = [killer, *known][:KILLERS_KEPT]

    def note(self, mutant: Mutant, killer: str) -> None:
        """Record the test ``mutant``'s child named, if it named one."""
        if killer and self.found[mutant.name] in ("killed", "timeout"):
            self.killed_by[mutant.name] = killer
        if killer and self.found[mutant.name] == "killed":
            self.learn(mutant, killer)  # not a test that spun: that costs its whole limit

    def _child(self, mutant: Mutant, items: list[pytest.Item], limit: int, report: int) -> int:
        """In the forked child: swap the mutant in, run its tests; pytest's exit code.

        The node id of the test that failed or ran out of time, if one did, is written to the
        pipe ``report``.
        """
        _quiet_child(items[0].config)
        if self.selection is not None:
            self.selection.on_timeout = lambda test: os.write(
                report, test.encode("utf-8", "replace")[: select.PIPE_BUF]
            )
        os.environ["MUTANT_UNDER_TEST"] = mutant.name  # selection.py: each test's CPU limit
        soft = limit + int(time.process_time())
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
        signal.alarm(3 * limit)  # and in wall time, for a mutant that waits rather than spins
        try:
            swap_in(mutant)
        except Exception as error:
            print(f"cannot swap in {mutant.name}: {error!r}", file=sys.__stderr__)
            return 35
        for index, item in enumerate(items):
            following = items[index + 1] if index + 1 < len(items) else None
            item.ihook.pytest_runtest_protocol(item=item, nextitem=following)
            if self.failed is not None:
                os.write(report, self.failed.encode("utf-8", "replace")[: select.PIPE_BUF])
                return int(pytest.ExitCode.TESTS_FAILED)
        return int(pytest.ExitCode.OK)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        # selection.py as pytest imported it for -p (imported before, it could not be
        # rewritten, and pytest's warning about that is an error here).
        self.selection = session.config.pluginmanager.get_plugin("selection")
        if self.selection is not None:
            self.selection.LIMIT_FLOOR = LIMIT_FLOOR
            self.selection.LIMIT_FACTOR = LIMIT_FACTOR
        by_id = {item.nodeid: item for item in session.items}
        order = {item.nodeid: place for place, item in enumerate(session.items)}
        self.mutants.sort(key=self.cost)
        # By child: its mutant, when it started, and the pipe it names its killing test in.
        running: dict[int, tuple[Mutant, float, int]] = {}
        start = time.monotonic()

        def reap() -> None:
            pid, status = os.wait()
            mutant, began, report = running.pop(pid)
            with os.fdopen(report, "rb") as pipe:
                killer = pipe.read().decode("utf-8", "replace")
            self.found[mutant.name] = status_of(os.waitstatus_to_exitcode(status))
            self.note(mutant, killer)
            self.seconds[mutant.name] = round(time.monotonic() - began, 3)
            done = len(self.found)
            if done % 100 == 0 or done == len(self.mutants):
                self.write()
                counts = Counter(self.found.values())
                print(
                    f"{done}/{len(self.mutants)} in {time.monotonic() - start:.0f} s: "
                    f"{dict(counts)}",
                    file=sys.__stdout__,
                    flush=True,
                )

        for mutant in self.mutants:
            items = [by_id[test] for test in self.tests.get(mutant.name, ()) if test in by_id]
            if not items:
                self.found[mutant.name] = "no tests"
                continue
            while len(running) >= self.children:
                reap()  # first: the killers a child just named reorder this mutant's tests
            # Fastest first; pytest's order among equals (which keeps fixtures grouped).
            items.sort(key=lambda item: (self.cpu.get(item.nodeid, 0.0), order[item.nodeid]))
            items = self.order(mutant, items)
            limit = int(30 + 10 * self.cost(mutant))
            sys.stdout.flush()
            sys.stderr.flush()
            report, reporting = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 3
                try:
                    os.close(report)
                    code = self._child(mutant, items, limit, reporting)
                finally:
                    os._exit(code)
            os.close(reporting)
            running[pid] = (mutant, time.monotonic(), report)
        while running:
            reap()
        self.write()
        return True  # the session's own loop does not run

    def write(self) -> None:
        """Each mutant's status and wall seconds so far, for a run stopped part-way."""
        if self.out is not None:
            data = {"found": self.found, "seconds": self.seconds, "killed_by": self.killed_by}
            self.out.write_text(json.dumps(data, indent=0, sort_keys=True), encoding="utf-8")


@dataclass(frozen=True)
class CallMap:
    """What ``collect`` wrote: who calls each function, who runs each line, what each costs."""

    calls: dict[str, list[str]]
    cpu: dict[str, float]
    #: file (relative to the checkout) -> line -> the tests that ran it
    lines: dict[str, dict[int, frozenset[str]]]
    #: tests that set a trace function of their own: their lines are unknown
    own_tracer: frozenset[str]

    @classmethod
    def read(cls, path: Path) -> CallMap:
        data = json.loads(path.read_text(encoding="utf-8"))
        tests = data["tests"]
        lines = {
            filename: {int(line): frozenset(tests[i] for i in ran) for line, ran in by_line.items()}
            for filename, by_line in data["lines"].items()
        }
        return cls(data["calls"], data["cpu"], lines, frozenset(data["own_tracer"]))

    def tests_of(self, mutant: Mutant) -> list[str]:
        """The tests that run the statements ``mutant`` changes (all that call its function
        when the change is in its header), and those of them whose lines are unknown."""
        calls = self.calls.get(mutant.key, [])
        spans = changed_statements(mutant)
        if spans is None or not calls:
            return calls
        filename = live_function(mutant).__code__.co_filename
        ran = self.lines.get(Path(filename).resolve().relative_to(ROOT).as_posix(), {})
        reached: set[str] = set()
        for first, last in spans:
            for line in range(first, last + 1):
                reached |= ran.get(line, frozenset())
        return [test for test in calls if test in reached or test in self.own_tracer]


def set_aside(
    mutants: list[Mutant], known: dict[str, tuple[str, str]]
) -> tuple[dict[str, str], list[str]]:
    """The known survivors among ``mutants`` still as they were judged (name -> kind), and
    the names of those that changed since (to run again)."""
    unchanged: dict[str, str] = {}
    changed = []
    for mutant in mutants:
        if mutant.name in known:
            print_of, kind = known[mutant.name]
            if fingerprint(mutant) == print_of:
                unchanged[mutant.name] = kind
            else:
                changed.append(mutant.name)
    return unchanged, changed


def run(
    calls_file: Path,
    only: str | None,
    children: int,
    pytest_args: list[str],
    out: Path | None,
    *,
    rerun_known: bool = False,
    known_only: bool = False,
) -> dict[str, str]:
    """Run every mutant against the tests that run what it changes; each mutant's status.

    A known survivor (``KNOWN_FILE``) whose fingerprint still holds is not run: it gets its
    kind as its status, unless ``rerun_known``, when it runs, and keeps its kind only if it
    survives again. ``known_only`` runs the listed mutants alone (and implies ``rerun_known``).
    """
    sys.path.insert(0, str(ROOT))
    call_map = CallMap.read(calls_file)
    os.environ["MUTATION_CALLS"] = str(calls_file.resolve())  # selection.py's test times
    mutants = generate(only)
    # Import the package's mutated modules before collecting: the children inherit them.
    for module in {mutant.module for mutant in mutants}:
        importlib.import_module(module)
    listed = read_known(KNOWN_FILE)
    if known_only:
        rerun_known = True
        mutants = [mutant for mutant in mutants if mutant.name in listed]
    known, changed = set_aside(mutants, listed)
    for name in changed:
        print(f"known survivor changed since it was judged, run again: {name}")
    to_run = mutants if rerun_known else [m for m in mutants if m.name not in known]
    aside = "run again" if rerun_known else "set aside"
    print(f"{len(mutants)} mutants, {len(known)} of them known survivors, {aside}")
    tests = {mutant.name: call_map.tests_of(mutant) for mutant in to_run}
    loop = MutantLoop(to_run, tests, call_map.cpu, children, out)
    pytest.main(["-q", "-p", "no:cacheprovider", "-p", "selection", *pytest_args], plugins=[loop])
    found = dict(loop.found)
    for name, kind in known.items():
        status = found.setdefault(name, kind)
        if status in ("survived", "no tests"):
            found[name] = kind
        elif status != kind:
            print(f"known survivor detected now ({status}), take it off {KNOWN_FILE.name}: {name}")
    return found


def main(argv: list[str] | None = None) -> int:
    """``collect`` the call map, or ``run`` the mutants against it and print each module's score."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    collecting = sub.add_parser("collect")
    collecting.add_argument("--out", type=Path, required=True)
    collecting.add_argument("-n", type=int, default=os.cpu_count() or 1)
    running = sub.add_parser("run")
    running.add_argument(
        "--calls", type=Path, help="a call map from collect (default: collect one)"
    )
    running.add_argument("--only", help="mutate only the modules matching this glob")
    running.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    running.add_argument("--out", type=Path, help="each mutant's status and seconds, as JSON")
    running.add_argument(
        "--rerun-known",
        action="store_true",
        help=f"run the known survivors of {KNOWN_FILE.name} too, to see that they still survive",
    )
    running.add_argument(
        "--known-only", action="store_true", help="run the known survivors alone (--rerun-known)"
    )
    showing = sub.add_parser("show", help="print one mutant as a diff of its function")
    showing.add_argument("name", nargs="+")
    knowing = sub.add_parser("known", help=f"print the lines of {KNOWN_FILE.name} for mutants")
    knowing.add_argument("--kind", choices=KINDS, default="equivalent")
    knowing.add_argument("name", nargs="+")
    args, pytest_args = parser.parse_known_args(argv)
    if sys.version_info < (3, 11):
        raise SystemExit("mutation/swap.py needs Python 3.11 or later (code objects' co_qualname)")
    start = time.monotonic()
    pattern = getattr(args, "only", None)
    # tox hands on a posarg naming an existing file relative to its change_dir: make it the
    # checkout-relative path the patterns are.
    if pattern and Path(pattern).exists() and Path(pattern).resolve().is_relative_to(ROOT):
        pattern = Path(pattern).resolve().relative_to(ROOT).as_posix()
    for option in ("calls", "out"):  # given relative to where the command was run
        if getattr(args, option, None) is not None:
            setattr(args, option, getattr(args, option).resolve())
    os.chdir(ROOT)
    if args.command in ("show", "known"):
        sys.path.insert(0, str(ROOT))
        for name in args.name:
            if args.command == "show":
                print(show(name))
            else:
                print(f"{name} {fingerprint(find(name))} {args.kind}")
        return 0
    pytest_args = [arg for arg in pytest_args if arg != "--"] or ["-m", "not bug_matrix", "tests"]
    if args.command == "collect":
        collect(args.out.resolve(), args.n, pytest_args)
        return 0
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory() as directory:
        calls = args.calls
        if calls is None:
            calls = Path(directory) / "calls.json"
            collect(calls, args.max_children, pytest_args)
        found = run(
            calls,
            pattern,
            args.max_children,
            pytest_args,
            args.out,
            rerun_known=args.rerun_known,
            known_only=args.known_only,
        )
    minutes = (time.monotonic() - start) / 60
    collected = "" if args.calls else ", the call map's run included"
    print(f"mutation run: {minutes:.1f} min{collected}")
    if args.known_only:
        still = sorted(name for name, status in found.items() if status in KINDS)
        print(f"{len(still)} of the {len(found)} known survivors run survive")
        return 0 if len(still) == len(found) else 1
    return 0 if whole_package_run.judge(found, 98.0) else 1


if __name__ == "__main__":
    sys.exit(main())
