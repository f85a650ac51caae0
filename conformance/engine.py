"""Run vLLM's own tests on the real vLLM four times: as shipped, then with the plugin.

``python -m conformance.engine CACHE`` (``tox -e vllm-engine``) expects the
real vLLM wheel installed (``--no-deps``), the CPU build of torch and this
package; it refuses a CUDA build of torch. It

1. fetches vLLM's sdist of the installed version into CACHE (once; see
   :mod:`conformance.fetch`) and extracts its ``tests/`` and ``pyproject.toml``;
2. writes the public ``config.json`` of ``facebook/opt-125m`` into a Hugging
   Face cache in CACHE (the hub is not reachable; vLLM's test helpers build
   their model config from it);
3. runs :data:`TEST_FILES` with pytest and :mod:`conformance.engine_pytest`
   (copied into CACHE and put alone on ``PYTHONPATH``, so the installed
   package, not the checkout, is what runs) once per mode: ``shipped``
   (``VERIFIED_QUEUE_VLLM`` unset), ``production``, ``checked`` and ``trace``
   (vLLM loads the plugin through ``vllm.plugins.load_general_plugins()``);
4. runs this repository's own tests on the real vLLM (:data:`OWN_TESTS`, copied
   into CACHE with the modules they load, beside a pytest configuration of their
   own), each in the modes it names: ``tests/vllm/test_engine_trace.py`` with
   ``VERIFIED_QUEUE_VLLM=trace`` (a planted double free from a connector outside
   vLLM must be named at the connector's lines, with the request id), and
   ``tests/vllm/test_engine_pool.py`` as shipped, ``checked`` and ``trace`` (each
   allocator bug class replayed on vLLM's BlockPool: caught in check mode,
   passing with vLLM's queue); each run must pass, not skip;
5. prints the outcome counts per file and mode and the excluded tests with
   their reasons, and exits non-zero unless every test has the same outcome
   in all four runs, the same tests are excluded for the same reasons, no test
   fails as shipped, each mode's ``BlockPool`` built the queue it should, and
   this repository's own tests passed.

``--culprit-only`` runs step 4 alone (seconds, where the four runs take minutes).

Nothing of vLLM's is copied into the repository: the sdist and its tests stay
in CACHE, inside the git-ignored ``.tox/``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from conformance import fetch

__all__ = [
    "MODES",
    "OPT_125M_CONFIG",
    "OWN_TESTS",
    "OWN_TEST_FILES",
    "TEST_FILES",
    "compare",
    "main",
]

#: vLLM's test files run in each mode (paths inside its sdist).
TEST_FILES = (
    "tests/v1/core/test_kv_cache_utils.py",
    "tests/v1/core/test_prefix_caching.py",
    "tests/v1/core/test_deferred_block_free.py",
    "tests/v1/core/test_single_type_kv_cache_manager.py",
    "tests/v1/core/test_scheduler.py",
    "tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py",
    "tests/v1/kv_connector/unit/test_remote_prefill_lifecycle.py",
    "tests/v1/simple_kv_offload/test_scheduler.py",
)
#: Each mode, the value of ``VERIFIED_QUEUE_VLLM`` and the queue vLLM's BlockPool must build.
MODES: dict[str, tuple[str | None, str]] = {
    "shipped": (None, "vllm.v1.core.kv_cache_utils.FreeKVCacheBlockQueue"),
    "production": ("production", "verified_queue.queue.FreeBlockQueue"),
    "checked": ("checked", "verified_queue.vllm.checked.VllmCheckedFreeBlockQueue"),
    "trace": ("trace", "verified_queue.vllm.traced.VllmTracedFreeBlockQueue"),
}
#: facebook/opt-125m's public config.json (the fields vLLM's config code reads, and the rest).
OPT_125M_CONFIG: dict[str, Any] = {
    "_name_or_path": "facebook/opt-125m",
    "_remove_final_layer_norm": False,
    "activation_dropout": 0.0,
    "activation_function": "relu",
    "architectures": ["OPTForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "do_layer_norm_before": True,
    "dropout": 0.1,
    "enable_bias": True,
    "eos_token_id": 2,
    "ffn_dim": 3072,
    "hidden_size": 768,
    "init_std": 0.02,
    "layer_norm_elementwise_affine": True,
    "layerdrop": 0.0,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "prefix": "</s>",
    "torch_dtype": "float16",
    "transformers_version": "4.21.0.dev0",
    "use_cache": True,
    "vocab_size": 50272,
    "word_embed_proj_dim": 768,
}
#: Any 40-hex revision: the offline hub cache only needs refs/main to name a snapshot.
_REVISION = "0" * 40
#: The pytest plugin's module name once copied into the cache.
_PLUGIN = "verified_queue_engine_pytest"
#: This repository's tests on the real vLLM, each with the modes it runs in, and the files
#: copied with them (the tests and the modules they load), in tests/vllm/ of the checkout.
OWN_TESTS = {
    "test_engine_trace.py": ("trace",),
    "test_engine_pool.py": ("shipped", "checked", "trace"),
}
OWN_TEST_FILES = (*OWN_TESTS, "engine_connector.py", "pool_faults.py")
_TESTS = Path(__file__).resolve().parents[1] / "tests" / "vllm"


def _extract_tests(cache: Path, version: str) -> Path:
    """Return vLLM's sdist tree in ``cache`` with its tests, extracting them once."""
    root = cache / f"vllm-{version}"
    done = root / ".extracted"
    if done.exists():
        return root
    sdist = fetch.fetch_sdist(cache, version)
    prefix = f"vllm-{version}/"
    with tarfile.open(sdist) as archive:
        members = [
            member
            for member in archive.getmembers()
            if member.name.startswith(f"{prefix}tests/") or member.name == f"{prefix}pyproject.toml"
        ]
        archive.extractall(cache, members=members, filter="data")
    done.write_text(sdist.name, encoding="utf-8")
    return root


def _hub_cache(cache: Path) -> Path:
    """Write a Hugging Face cache holding opt-125m's config.json; return HF_HOME."""
    home = cache / "hf-home"
    model = home / "hub" / "models--facebook--opt-125m"
    snapshot = model / "snapshots" / _REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (model / "refs").mkdir(exist_ok=True)
    (model / "refs" / "main").write_text(_REVISION, encoding="utf-8")
    (snapshot / "config.json").write_text(json.dumps(OPT_125M_CONFIG, indent=2), encoding="utf-8")
    return home


def _plugin_path(cache: Path) -> Path:
    """Copy the pytest plugin into ``cache``; return the directory to put on PYTHONPATH."""
    directory = cache / "pytest-plugin"
    directory.mkdir(parents=True, exist_ok=True)
    source = Path(__file__).with_name("engine_pytest.py").read_text(encoding="utf-8")
    (directory / f"{_PLUGIN}.py").write_text(source, encoding="utf-8")
    return directory


def _own_tests_path(cache: Path, tests: Path = _TESTS) -> Path:
    """Copy this repository's tests on vLLM into ``cache``; return the folder to run them in.

    The folder gets a pytest configuration of its own, so neither the checkout's
    (whose ``conftest.py`` needs Hypothesis, and whose settings make vLLM's own
    warnings errors) nor the checkout's package is what runs: the installed one is.
    """
    directory = cache / "own-tests"
    directory.mkdir(parents=True, exist_ok=True)
    for name in OWN_TEST_FILES:
        text = (tests / name).read_text(encoding="utf-8")
        (directory / name).write_text(text, encoding="utf-8")
    (directory / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return directory


def _run_own_test(directory: Path, home: Path, test: str, mode: str) -> str | None:
    """Run ``test`` in ``mode`` (a key of :data:`MODES`); return what failed, or ``None``."""
    value, _ = MODES[mode]
    environment = dict(os.environ)
    environment.pop("PYTHONPATH", None)
    environment.pop("VERIFIED_QUEUE_VLLM", None)
    if value is not None:
        environment["VERIFIED_QUEUE_VLLM"] = value
    environment.update(HF_HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--no-header"]
    command += ["-rs", test]
    label = f"[{test} {mode}]"
    print(label, f"VERIFIED_QUEUE_VLLM={value or '(unset)'}", " ".join(command[1:]))
    start = time.monotonic()
    finished = subprocess.run(
        command, cwd=directory, env=environment, check=False, capture_output=True, text=True
    )
    last = (finished.stdout.strip().splitlines() or ["(no output)"])[-1]
    seconds = time.monotonic() - start
    print(f"{label} pytest exit {finished.returncode} in {seconds:.0f} s: {last}")
    # A skip is no pass: the tests skip where vLLM or the mode is missing.
    if finished.returncode == 0 and " passed" in last and "skipped" not in last:
        return None
    print(finished.stdout[-3000:], finished.stderr[-3000:], sep="\n")
    return f"{test} in {mode}: {last}"


def _run_own_tests(cache: Path, home: Path, modes: Sequence[str]) -> list[str]:
    """Run each of :data:`OWN_TESTS` in each of its modes among ``modes``; return what failed."""
    directory = _own_tests_path(cache)
    problems = []
    for test, test_modes in OWN_TESTS.items():
        for mode in test_modes:
            if mode in modes:
                problem = _run_own_test(directory, home, test, mode)
                if problem is not None:
                    problems.append(problem)
    return problems


def _run(
    mode: str, root: Path, home: Path, plugin: Path, report: Path
) -> tuple[dict[str, Any], float]:
    """Run the test files in ``mode``; return the JSON report and the seconds taken."""
    value, _ = MODES[mode]
    environment = dict(os.environ)
    environment.pop("VERIFIED_QUEUE_VLLM", None)
    if value is not None:
        environment["VERIFIED_QUEUE_VLLM"] = value
    environment.update(
        HF_HOME=str(home),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VERIFIED_QUEUE_ENGINE_REPORT=str(report),
        PYTHONPATH=str(plugin),
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        _PLUGIN,
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        "-rN",
        *TEST_FILES,
    ]
    print(f"[{mode}] VERIFIED_QUEUE_VLLM={value or '(unset)'}", " ".join(command[1:5]), "...")
    start = time.monotonic()
    finished = subprocess.run(
        command, cwd=root, env=environment, check=False, capture_output=True, text=True
    )
    seconds = time.monotonic() - start
    last = finished.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"[{mode}] pytest exit {finished.returncode} in {seconds:.0f} s: {last[0]}")
    if not report.exists():
        print(finished.stdout[-3000:], finished.stderr[-3000:], sep="\n")
        raise SystemExit(f"[{mode}] wrote no report")
    loaded: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return loaded, seconds


def compare(reports: dict[str, dict[str, Any]]) -> list[str]:
    """Return the differences that fail the run (empty when all modes agree)."""
    problems: list[str] = []
    shipped = reports["shipped"]
    for mode, report in reports.items():
        expected_queue = MODES[mode][1]
        if report["queue"] != expected_queue:
            problems.append(f"{mode}: BlockPool built {report['queue']}, not {expected_queue}")
        if mode == "shipped":
            continue
        for nodeid in sorted(set(shipped["outcomes"]) | set(report["outcomes"])):
            before = shipped["outcomes"].get(nodeid, "not run")
            after = report["outcomes"].get(nodeid, "not run")
            if before != after:
                problems.append(f"{mode}: {nodeid}: {after} (as shipped: {before})")
        if report["excluded"] != shipped["excluded"]:
            problems.append(f"{mode}: the excluded tests or their reasons differ from shipped")
    failed = [n for n, outcome in shipped["outcomes"].items() if outcome == "failed"]
    problems.extend(f"shipped: {nodeid} failed" for nodeid in failed)
    if not any(outcome == "passed" for outcome in shipped["outcomes"].values()):
        problems.append("shipped: no test passed")
    return problems


def _table(reports: dict[str, dict[str, Any]], seconds: dict[str, float]) -> None:
    """Print the outcome counts per file and mode."""
    outcomes = ("passed", "failed", "skipped", "excluded")
    print(f"\n{'file':70} {'mode':10} " + " ".join(f"{o:>8}" for o in outcomes))
    for file in TEST_FILES:
        for mode, report in reports.items():
            counts = Counter(
                outcome
                for nodeid, outcome in report["outcomes"].items()
                if nodeid.split("::")[0] == file
            )
            print(f"{file:70} {mode:10} " + " ".join(f"{counts[o]:>8}" for o in outcomes))
    for mode, report in reports.items():
        counts = Counter(report["outcomes"].values())
        total = " ".join(f"{counts[o]:>8}" for o in outcomes)
        print(f"{'all files':70} {mode:10} {total}   {seconds[mode]:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three modes and compare them; 0 when they agree."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # a TextIOWrapper
    parser = argparse.ArgumentParser(prog="python -m conformance.engine", description=__doc__)
    parser.add_argument("cache", type=Path, help="where the sdist and its tests are kept")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument(
        "--culprit-only",
        action="store_true",
        help="run only this repository's own tests on the real vLLM",
    )
    arguments = parser.parse_args(argv)
    modes = arguments.modes.split(",")
    if "shipped" not in modes or any(mode not in MODES for mode in modes):
        parser.error(f"--modes: a comma-separated subset of {', '.join(MODES)} with shipped")
    version = metadata.version("vllm")
    torch = metadata.version("torch")
    if not torch.endswith("+cpu"):
        print(f"torch {torch} is not a CPU build: install torch==2.13.0 (CPU) first")
        return 2
    cache: Path = arguments.cache.resolve()
    home = _hub_cache(cache)
    own = _run_own_tests(cache, home, modes)
    if arguments.culprit_only:
        for problem in own:
            print("MISMATCH", problem)
        print("this repository's tests on vLLM: " + ("failed" if own else "passed"))
        return 1 if own else 0
    root = _extract_tests(cache, version)
    plugin = _plugin_path(cache)
    reports: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    # This run's own folder: two builds' environments may share the cache at once.
    with tempfile.TemporaryDirectory(prefix="reports-", dir=cache) as folder:
        for mode in modes:
            report = Path(folder) / f"report-{mode}.json"
            reports[mode], seconds[mode] = _run(mode, root, home, plugin, report)
    _table(reports, seconds)
    excluded = reports["shipped"]["excluded"]
    print(f"\nexcluded in every mode ({len(excluded)} tests):")
    by_reason = Counter(excluded.values())
    for reason, count in sorted(by_reason.items()):
        print(f"  {count:3} {reason}")
    problems = compare(reports) + own
    for problem in problems:
        print("MISMATCH", problem)
    runs = len(modes)
    counts = Counter(
        outcome for report in reports.values() for outcome in report["outcomes"].values()
    )
    print(
        f"vLLM {version}, {runs} runs: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped, {counts['excluded']} excluded; "
        + ("outcomes identical in every mode" if not problems else f"{len(problems)} mismatches")
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
