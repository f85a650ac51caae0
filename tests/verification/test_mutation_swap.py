"""The trampoline-free mutation runner (mutation/swap.py): a mutant swapped into the live function.

Each test swaps a hand-written mutant into a function of the package in a fresh process
(the swap is for good in the process that makes it) and checks what the runner relies on:
every reference to the function runs the mutant, its frames look like the original's, a
method keeps its class cell, and ``calls.py`` keys functions as ``swap.py`` names them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The runner names functions by their code's qualified name (co_qualname, Python 3.11+);
# tox -e mutation runs on the Python that runs tox.
pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="mutation/swap.py needs Python 3.11 (co_qualname)"
)


def run_child(body: str) -> str:
    """Run ``body`` in a fresh interpreter with the checkout and mutation/ importable."""
    preamble = f"import sys\nsys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'mutation')!r}]\n"
    done = subprocess.run(
        [sys.executable, "-c", preamble + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_swapped_function_runs_the_mutant_through_every_reference() -> None:
    """A module function's mutant is what a name imported before the swap calls."""
    out = run_child(
        """
        from verified_queue._switch import read_check_level as imported_before
        from swap import Mutant, swap_in
        source = (
            "def x_read_check_level__mutmut_99(environ=None):\\n"
            "    return 'mutant'\\n"
        )
        swap_in(Mutant("verified_queue._switch.x_read_check_level__mutmut_99",
                       "verified_queue._switch", None, "read_check_level", source))
        print(imported_before({}), imported_before.__code__.co_name)
        """
    )
    assert out.split() == ["mutant", "read_check_level"]


def test_a_swapped_method_keeps_its_class_cell_and_adds_no_frame() -> None:
    """A method's mutant that calls ``super()`` works, and its frame is the method's own."""
    out = run_child(
        """
        import sys
        from verified_queue import Block, FreeBlockQueue
        from swap import Mutant, swap_in

        class Probe(FreeBlockQueue):
            def __len__(self):
                return super().__len__()

        source = (
            "def xǁProbeǁ__len____mutmut_1(self):\\n"
            "    depth = sys._getframe(1).f_code.co_name\\n"
            "    print(depth, sys._getframe(0).f_code.co_name)\\n"
            "    return super().__len__() + 100\\n"
        )
        sys.modules["__main__"].Probe = Probe
        Probe.__module__ = "__main__"
        name = "__main__.xǁProbeǁ__len____mutmut_1"
        swap_in(Mutant(name, "__main__", "Probe", "__len__", source))
        def caller():
            return len(Probe([Block(), Block()]))
        print(caller())
        """
    )
    assert out.split() == ["caller", "__len__", "102"]


def test_a_mutant_that_drops_super_replaces_the_method_in_its_class() -> None:
    """A mutant without the method's ``super()`` has no ``__class__`` cell, so its code
    cannot go into the live function: the class gets the mutant as a method of its own."""
    out = run_child(
        """
        import sys
        from verified_queue import Block, FreeBlockQueue
        from swap import Mutant, swap_in

        class Probe(FreeBlockQueue):
            def __len__(self):
                return super().__len__()

        source = (
            "def xǁProbeǁ__len____mutmut_2(self):\\n"
            "    return 7\\n"
        )
        sys.modules["__main__"].Probe = Probe
        Probe.__module__ = "__main__"
        name = "__main__.xǁProbeǁ__len____mutmut_2"
        swap_in(Mutant(name, "__main__", "Probe", "__len__", source))
        print(len(Probe([Block()])), Probe.__len__.__qualname__)
        """
    )
    # The qualified name stays the method's: frames and the call map name it as before.
    assert out.split() == ["7", "Probe.__len__"]


def test_the_call_map_keys_are_the_runners_keys() -> None:
    """``calls.key_of`` names a method and a function as ``Mutant.key`` does."""
    out = run_child(
        """
        from calls import key_of
        from swap import Mutant
        from verified_queue.queue import FreeBlockQueue
        from verified_queue._switch import read_check_level
        method = Mutant("n", "verified_queue.queue", "FreeBlockQueue", "popleft", "")
        function = Mutant("n", "verified_queue._switch", None, "read_check_level", "")
        print(key_of("verified_queue.queue", FreeBlockQueue.popleft.__code__) == method.key)
        print(key_of("verified_queue._switch", read_check_level.__code__) == function.key)
        """
    )
    assert out.split() == ["True", "True"]


def test_a_childs_end_is_read_as_mutmut_reads_it() -> None:
    """Exit codes and signals: pytest's verdicts, limits as timeouts, a crash, a refused swap."""
    out = run_child(
        """
        from swap import status_of
        for code in (0, 1, 3, 36, 5, 35, -24, -9, -14, -11):
            print(status_of(code).replace(" ", "_"))
        """
    )
    assert out.split() == [
        "survived",
        "killed",
        "killed",
        "timeout",
        "no_tests",
        "suspicious_(35)",
        "timeout",
        "timeout",
        "timeout",
        "segfault",
    ]


def test_the_loop_runs_each_mutant_against_its_own_tests_only(tmp_path: Path) -> None:
    """One pytest session, a fork per mutant: a mutant a test catches is killed, one none
    catches survives, one whose function no test calls has no tests, and a test outside a
    mutant's call map never runs for it."""
    tests = tmp_path / "test_probe.py"
    tests.write_text(
        textwrap.dedent(
            """
            from verified_queue._switch import read_check_level

            def test_default_is_off():
                assert read_check_level({}) == "off"

            def test_never_listed():
                assert False, "a test outside every call map ran"
            """
        ),
        encoding="utf-8",
    )
    out = run_child(
        f"""
        import json, pytest
        from pathlib import Path
        from swap import Mutant, MutantLoop

        def mutant(number, body):
            name = f"x_read_check_level__mutmut_{{number}}"
            source = f"def {{name}}(environ=None):\\n    {{body}}\\n"
            return Mutant(f"verified_queue._switch.{{name}}", "verified_queue._switch", None,
                          "read_check_level", source)

        wrong = mutant(1, "return 'on'")
        same = mutant(2, "return 'off'")
        unreached = Mutant("verified_queue._switch.x__run_as_command__mutmut_1",
                           "verified_queue._switch", None, "_run_as_command",
                           "def x__run_as_command__mutmut_1():\\n    return True\\n")
        test = "test_probe.py::test_default_is_off"  # node ids are relative to the rootdir
        tests = {{wrong.name: [test], same.name: [test]}}
        out = Path({str(tmp_path / "found.json")!r})
        loop = MutantLoop([wrong, same, unreached], tests, {{test: 0.01}}, 2, out)
        options = ["-q", "-p", "no:cacheprovider", "--rootdir", {str(tmp_path)!r}]
        pytest.main([*options, {str(tests)!r}], plugins=[loop])
        print(json.dumps(loop.found, sort_keys=True))
        """
    )
    found = json.loads(out.strip().splitlines()[-1])
    assert found == {
        "verified_queue._switch.x_read_check_level__mutmut_1": "killed",
        "verified_queue._switch.x_read_check_level__mutmut_2": "survived",
        "verified_queue._switch.x__run_as_command__mutmut_1": "no tests",
    }
    written = json.loads((tmp_path / "found.json").read_text(encoding="utf-8"))
    assert written["found"] == found
    # The test that failed, for the killed mutant alone.
    assert written["killed_by"] == {
        "verified_queue._switch.x_read_check_level__mutmut_1": "test_probe.py::test_default_is_off"
    }
    # Seconds for the mutants that ran; none for the one no test reaches.
    assert set(written["seconds"]) == set(found) - {
        "verified_queue._switch.x__run_as_command__mutmut_1"
    }


def test_a_functions_next_mutants_run_the_test_that_killed_its_last_first(tmp_path: Path) -> None:
    """The child names the test that killed its mutant; the next mutant of that function runs
    it before the faster tests that did not, and a mutant of another function does not."""
    ran = tmp_path / "ran.txt"
    tests = tmp_path / "test_probe.py"
    tests.write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from verified_queue._switch import read_check_level

            def note(name):
                with Path({str(ran)!r}).open("a") as log:
                    log.write(name + "\\n")

            def test_fast_and_blind():
                note("blind")

            def test_slow_and_sharp():
                note("sharp")
                assert read_check_level({{}}) == "off"
            """
        ),
        encoding="utf-8",
    )
    out = run_child(
        f"""
        import json, pytest
        from pathlib import Path
        from swap import Mutant, MutantLoop

        def mutant(function, number):
            name = f"x_{{function}}__mutmut_{{number}}"
            source = f"def {{name}}(environ=None):\\n    return 'on'\\n"
            return Mutant(f"verified_queue._switch.{{name}}", "verified_queue._switch", None,
                          function, source)

        first, second = mutant("read_check_level", 1), mutant("read_check_level", 2)
        other = mutant("_run_as_command", 1)
        blind, sharp = "test_probe.py::test_fast_and_blind", "test_probe.py::test_slow_and_sharp"
        tests = {{m.name: [sharp, blind] for m in (first, second, other)}}
        cpu = {{blind: 0.01, sharp: 0.02}}
        loop = MutantLoop([first, second, other], tests, cpu, 1, None)
        options = ["-q", "-p", "no:cacheprovider", "--rootdir", {str(tmp_path)!r}]
        pytest.main([*options, {str(tests)!r}], plugins=[loop])
        print(json.dumps([loop.found, loop.killers], sort_keys=True))
        """
    )
    found, killers = json.loads(out.strip().splitlines()[-1])
    assert found == {
        "verified_queue._switch.x_read_check_level__mutmut_1": "killed",
        "verified_queue._switch.x_read_check_level__mutmut_2": "killed",
        "verified_queue._switch.x__run_as_command__mutmut_1": "survived",
    }
    assert killers == {
        "verified_queue._switch:read_check_level": ["test_probe.py::test_slow_and_sharp"]
    }
    # The first mutant fastest first; the second its function's killer alone; the third,
    # of a function no test has killed yet, fastest first again.
    assert ran.read_text(encoding="utf-8").split() == ["blind", "sharp", "sharp", "blind", "sharp"]


def test_a_known_survivor_is_set_aside_only_while_its_fingerprint_holds() -> None:
    """A listed mutant is set aside with its kind while the function and the mutant are what
    they were when it was judged; a change to either runs it again."""
    out = run_child(
        """
        from swap import Mutant, fingerprint, set_aside

        def mutant(body):
            name = "x_read_check_level__mutmut_7"
            source = f"def {name}(environ=None):\\n    {body}\\n"
            return Mutant(f"verified_queue._switch.{name}", "verified_queue._switch", None,
                          "read_check_level", source)

        judged = mutant("return 'off'")
        known = {judged.name: (fingerprint(judged), "equivalent")}
        print(set_aside([judged], known))
        # The same name on another change (a renumbered mutant): run again.
        print(set_aside([mutant("return 'on'")], known))
        # An unlisted mutant is neither.
        print(set_aside([judged], {}))
        """
    )
    assert out.splitlines() == [
        "({'verified_queue._switch.x_read_check_level__mutmut_7': 'equivalent'}, [])",
        "({}, ['verified_queue._switch.x_read_check_level__mutmut_7'])",
        "({}, [])",
    ]


def test_the_score_leaves_equivalent_mutants_out_and_counts_unpinned_ones(tmp_path: Path) -> None:
    """A module of 100 mutants with 97 detected passes 98% with 2 equivalent (97 of 98) and
    fails with 2 unpinned (97 of 100); a survivor the page does not name fails the run."""
    page = tmp_path / "survivors.md"
    names = [f"verified_queue.queue.xǁFreeBlockQueueǁpopleft__mutmut_{n}" for n in range(100)]
    page.write_text(" ".join(names[97:]), encoding="utf-8")
    out = run_child(
        f"""
        from pathlib import Path
        import run
        run.SURVIVORS_FILE = Path({str(page)!r})
        names = [f"verified_queue.queue.xǁFreeBlockQueueǁpopleft__mutmut_{{n}}" for n in range(100)]
        detected = dict.fromkeys(names[:97], "killed")
        print(run.judge(detected | dict.fromkeys(names[97:99], "equivalent")
                        | {{names[99]: "survived"}}, 98.0))
        print(run.judge(detected | dict.fromkeys(names[97:99], "unpinned")
                        | {{names[99]: "equivalent"}}, 98.0))
        page = run.SURVIVORS_FILE
        run.SURVIVORS_FILE = page.with_name("none.md")
        run.SURVIVORS_FILE.write_text("", encoding="utf-8")
        print(run.judge(detected | dict.fromkeys(names[97:], "equivalent"), 98.0))
        """
    )
    verdicts = [line for line in out.splitlines() if line in ("True", "False")]
    assert verdicts == ["True", "False", "False"]
    assert "97 of 100 mutants detected (97.0%; 99.0% of the 98 not equivalent)" in out
    assert "NOT EXPLAINED" in out


def test_a_mutant_that_spins_is_a_timeout_named_with_its_test(tmp_path: Path) -> None:
    """A test past its CPU limit ends the mutant as a timeout, and the runner is told which
    test it was, as it is told the test that failed."""
    tests = tmp_path / "test_probe.py"
    tests.write_text(
        textwrap.dedent(
            """
            from verified_queue._switch import read_check_level

            def test_default_is_off():
                assert read_check_level({}) == "off"
            """
        ),
        encoding="utf-8",
    )
    out = run_child(
        f"""
        import json, os, pytest
        from pathlib import Path
        from swap import Mutant, MutantLoop

        name = "x_read_check_level__mutmut_1"
        source = f"def {{name}}(environ=None):\\n    while True:\\n        pass\\n"
        spinning = Mutant(f"verified_queue._switch.{{name}}", "verified_queue._switch", None,
                          "read_check_level", source)
        test = "test_probe.py::test_default_is_off"
        # Each test's time in the call map, which selection.py reads for its limit.
        times = Path({str(tmp_path / "calls.json")!r})
        times.write_text(json.dumps({{"cpu": {{test: 0.01}}}}), encoding="utf-8")
        os.environ["MUTATION_CALLS"] = str(times)
        loop = MutantLoop([spinning], {{spinning.name: [test]}}, {{test: 0.01}}, 1, None)
        options = ["-q", "-p", "no:cacheprovider", "--rootdir", {str(tmp_path)!r}]
        pytest.main([*options, "-p", "selection", {str(tests)!r}], plugins=[loop])
        print(json.dumps([loop.found, loop.killed_by, loop.killers], sort_keys=True))
        """
    )
    found, killed_by, killers = json.loads(out.strip().splitlines()[-1])
    name = "verified_queue._switch.x_read_check_level__mutmut_1"
    assert found == {name: "timeout"}
    assert killed_by == {name: "test_probe.py::test_default_is_off"}
    # A test that spun is not tried first for the function's next mutants: it costs its limit.
    assert killers == {}
