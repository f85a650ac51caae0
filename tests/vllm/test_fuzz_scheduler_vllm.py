"""The scheduler fuzzer finds each planted allocator bug in vLLM's real Scheduler, and shrinks it.

``tox -e fuzz-vllm`` runs this file where vLLM 0.34.0 and torch's CPU build are
installed; elsewhere it skips. Each bug of :data:`tests.vllm.fuzz_scheduler.PLANTED`
is patched into vLLM's classes for one derandomized run of the machine with check
mode on (the plugin loaded as vLLM's engine loads it), which must fail within the
stated number of examples, under the stated clause (or, for a bug the pool cannot
show, the fuzzer's outside oracle), and shrink to at most the stated number of rules.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs the real vLLM and torch: tox -e fuzz-vllm", allow_module_level=True)

from tests.vllm.fuzz_scheduler import (
    CONFIGS,
    PLANTED,
    OracleViolation,
    Vllm,
    load,
    main,
    run,
    run_planted,
)
from verified_queue import InvariantViolation

# vLLM and torch warn as they import (deprecations of their own): shown, not errors here.
pytestmark = pytest.mark.filterwarnings("default")

#: Rules per example: as in the quick run.
STEPS = 50
#: For each planted bug: the pool clause check mode reports it under (``oracle``: a bug
#: whose pool stays sound, found by the outside oracle), the examples it must be found
#: within, and the most rules its shrunk example may take. Measured with the
#: derandomized runs (docs/measurements.md), then given room: a budget of about three
#: times the example that first failed, a length of about twice the shrunk one.
EXPECTED: dict[str, tuple[str, int, int]] = {
    "decrement-then-filter": ("P2", 10, 4),
    "listed-twice": ("P2", 10, 4),
    "touch-skips-remove": ("P2", 10, 26),
    "eviction-keeps-entry": ("P3", 20, 14),
    "null-block-freed": ("P1", 10, 4),
    # Blocks freed under a load are sound free blocks: only the loads' rule sees them.
    "abort-frees-loading-blocks": ("oracle", 15, 6),
    "send-frees-at-finish": ("oracle", 45, 16),
    # Blocks given back under a store's copy are sound free blocks too.
    "reset-releases-stores": ("oracle", 160, 24),
    "store-end-frees-twice": ("P2", 80, 24),
}


@pytest.fixture(scope="module")
def vllm() -> Vllm:
    """vLLM and its test helpers, loaded once, the plugin in check mode."""
    return load()


def test_every_planted_bug_has_an_expectation() -> None:
    """No planted bug goes untested, and no expectation names a bug that is not planted."""
    assert set(EXPECTED) == set(PLANTED)


@pytest.mark.parametrize("name", list(PLANTED))
def test_the_fuzzer_finds_the_planted_bug_and_shrinks_it(vllm: Vllm, name: str) -> None:
    """Found by check mode within its budget of examples, under its clause, shrunk short."""
    clause, budget, longest = EXPECTED[name]
    outcome = run_planted(vllm, PLANTED[name], budget, STEPS)
    print(
        f"{name}: first failing example {outcome.stats.first_failure}, shrunk to "
        f"{outcome.shrunk_length} rules\n{outcome.report}"
    )
    error: Any = outcome.error
    assert error is not None, f"{name}: nothing found in {budget} examples"
    if clause == "oracle":
        assert isinstance(error, OracleViolation), f"{name}: {error!r}"
    else:
        assert isinstance(error, InvariantViolation), f"{name}: {error!r}"
        assert (error.invariant, error.clause) == ("block_pool", clause)
    assert outcome.stats.first_failure is not None
    assert outcome.stats.first_failure <= budget
    assert outcome.shrunk_length is not None
    assert 1 <= outcome.shrunk_length <= longest


@pytest.mark.parametrize(
    ("name", "examples"),
    [
        ("spec-decode", 60),
        ("hybrid-spec-decode", 60),
        ("cpu-offload", 100),
        ("cpu-offload-lazy", 100),
    ],
)
def test_the_configuration_reaches_what_it_is_for(vllm: Vllm, name: str, examples: int) -> None:
    """Drafts scheduled, some accepted and some not; blocks stored to CPU and loaded back."""
    outcome = run(vllm, CONFIGS[name], examples, STEPS)
    assert outcome.error is None, outcome.report
    stats = outcome.stats
    if CONFIGS[name].spec_tokens:
        assert 0 < stats.accepted < stats.drafts
    else:
        assert 0 < stats.cpu_loads < stats.transfers


@pytest.mark.usefixtures("vllm")  # loaded once for the module, as main() would load it
def test_a_patch_file_runs_before_the_examples_and_a_bad_fix_is_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--patch``: a "fix" that drops the connector's delayed free fails the quick run."""
    patch = tmp_path / "bad_fix.py"
    patch.write_text(
        "import vllm.v1.core.sched.scheduler as s\n"
        "original = s.Scheduler._connector_finished\n"
        "def _connector_finished(self, request):\n"
        "    return False, original(self, request)[1]\n"
        "s.Scheduler._connector_finished = _connector_finished\n"
    )
    sched = importlib.import_module("vllm.v1.core.sched.scheduler")
    original = sched.Scheduler._connector_finished
    try:
        status = main(["--configs", "connector-sync", "--examples", "45", "--patch", str(patch)])
    finally:
        sched.Scheduler._connector_finished = original
    out = capsys.readouterr().out
    assert status == 1
    assert f"{patch} run" in out
    assert "send still reads it" in out


def test_a_connector_of_ones_own_stands_in_for_the_mock(tmp_path: Path) -> None:
    """``--connector``: the connector configurations build the class named (its own process)."""
    marker = tmp_path / "built"
    (tmp_path / "my_connector.py").write_text(
        "from pathlib import Path\n"
        "from tests.v1.kv_connector.unit.utils import MockKVConnector\n"
        "class MyConnector(MockKVConnector):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        super().__init__(*args, **kwargs)\n"
        f"        Path({str(marker)!r}).write_text(type(self).__mro__[1].__name__)\n"
    )
    script = Path(__file__).with_name("fuzz_scheduler.py")
    ran = subprocess.run(
        [
            sys.executable,
            str(script),
            "--configs",
            "connector-sync",
            "--examples",
            "3",
            "--connector",
            "my_connector:MyConnector",
        ],
        # Not -I: the connector's module is found on PYTHONPATH, as one installed would be.
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert marker.read_text() == "MyConnector"


def test_a_second_connector_in_one_process_is_refused(vllm: Vllm) -> None:
    """vLLM's connector is registered once a process: another one is refused, not ignored."""
    assert vllm.connector is None
    with pytest.raises(ValueError, match="needs a process of its own"):
        load(connector="my_connector:MyConnector")
