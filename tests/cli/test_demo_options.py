"""``demo``'s options: each reaches the run as its help says, with the default it states.

And the values the demo refuses: one line on stderr that names the value, exit status 2,
refused exactly when no request could be served.
"""

from __future__ import annotations

import argparse
import io
import re
from dataclasses import replace

import pytest

from verified_queue.__main__ import USAGE_ERROR, main
from verified_queue.cli import demo
from verified_queue.cli.demo import FAULTS, DemoConfig, DemoReport, run_demo
from verified_queue.cli.simulation import MAX_DEMO_BLOCKS, MIN_CAPACITY

DEFAULTS = DemoConfig()


def demo_parser() -> argparse.ArgumentParser:
    """A parser with the demo's options, as its command line adds them."""
    parser = argparse.ArgumentParser(prog="python -m verified_queue demo")
    demo.add_arguments(parser)
    return parser


def config_run_by(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> DemoConfig:
    """The configuration ``python -m verified_queue demo ARGV`` runs, without running it."""
    configs: list[DemoConfig] = []

    def recording_run_demo(config: DemoConfig, *_out: object) -> DemoReport:
        configs.append(config)
        return DemoReport(config)

    monkeypatch.setattr(demo, "run_demo", recording_run_demo)
    assert main(["demo", *argv]) == 0
    (config,) = configs
    return config


@pytest.mark.parametrize(
    ("argv", "changes"),
    [
        ([], {}),
        (["--requests", "7"], {"requests": 7}),
        (["--blocks", "300"], {"blocks": 300}),
        (["--block-size", "8"], {"block_size": 8}),
        (["--seed", "5"], {"seed": 5}),
        (["--no-checks"], {"checks": False}),
        (["--trace"], {"trace": True}),
        (["--no-trace"], {"trace": False}),
        (["--key-function", "builtin"], {"key_function": "builtin"}),
        (["--inject", "double-free"], {"inject": "double-free"}),
        (
            ["--seed", "9", "--blocks", "600", "--inject", "foreign-remove", "--no-trace"],
            {"seed": 9, "blocks": 600, "inject": "foreign-remove", "trace": False},
        ),
    ],
)
def test_each_option_sets_its_field_of_the_run_and_only_that(
    argv: list[str], changes: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every option reaches the run's configuration as the value given (numbers as numbers);
    every option not given keeps the configuration's default."""
    expected = replace(DEFAULTS, **changes)  # type: ignore[arg-type]  # keyword overrides
    assert config_run_by(argv, monkeypatch) == expected


def _help_text(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """``demo --help``, its whitespace made single spaces."""
    monkeypatch.setenv("COLUMNS", "400")  # wrapping aside, the help is what argparse prints
    with pytest.raises(SystemExit) as stopped:
        main(["demo", "--help"])
    assert stopped.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_help_says_what_each_option_does_and_its_default(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each option's help, word for word, with the default the run then uses."""
    text = _help_text(capsys, monkeypatch)
    faults = "; ".join(f"{name}: {what}" for name, what in FAULTS.items())
    for option, help_text in [
        ("--requests REQUESTS", f"requests to serve (default: {DEFAULTS.requests})"),
        ("--blocks BLOCKS", f"KV-cache blocks in the pool (default: {DEFAULTS.blocks})"),
        ("--block-size BLOCK_SIZE", f"tokens per block (default: {DEFAULTS.block_size})"),
        ("--seed SEED", f"random seed (default: {DEFAULTS.seed})"),
        (
            "--no-checks",
            "run on the production queue, without check mode (faster; default: check mode on)",
        ),
        (
            "--trace, --no-trace",
            "the trace level of check mode: every error names where its blocks were last "
            "linked and unlinked (default: on with --inject, off otherwise)",
        ),
        (
            "--key-function {builtin,sha256}",
            "prefix-cache key function: sha256 (collision resistant) or builtin (Python's "
            f"hash: faster, for one trusted tenant only) (default: {DEFAULTS.key_function})",
        ),
        (
            "--inject {double-free,foreign-remove,link-corruption}",
            f"plant a caller bug halfway through the run (default: none): {faults}",
        ),
    ]:
        assert f" {option} {help_text} " in f"{text} ", option


def test_the_run_module_refuses_a_bad_value_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``demo.run`` itself checks its arguments: a refused value is one line on stderr naming
    the command and the value, nothing on stdout, and exit status 2."""
    args = demo_parser().parse_args(["--requests", "0"])
    assert demo.run(args) == USAGE_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "python -m verified_queue demo: error: --requests 0: at least one request is needed "
        "(see --help)\n"
    )


def test_the_largest_pool_is_accepted_and_one_more_block_is_refused() -> None:
    """``--blocks`` up to the limit passes the check; past it, one line names the value."""
    parser = demo_parser()
    assert demo.validate(parser.parse_args(["--blocks", str(MAX_DEMO_BLOCKS)])) is None
    too_many = MAX_DEMO_BLOCKS + 1
    assert demo.validate(parser.parse_args(["--blocks", str(too_many)])) == (
        f"--blocks {too_many}: the demo builds at most {MAX_DEMO_BLOCKS:,} blocks "
        "(each is a Python object; a pool this large would fill memory first)"
    )


@pytest.mark.parametrize("block_size", [1, 2, 3, 5])
@pytest.mark.parametrize("blocks", [0, 1, 2, 3, 4])
def test_a_pool_is_refused_exactly_when_no_request_fits(blocks: int, block_size: int) -> None:
    """Block 0 is the null block: a pool is refused when the other blocks cannot hold the
    smallest request; one that can is accepted and serves every request."""
    args = demo_parser().parse_args(["--blocks", str(blocks), "--block-size", str(block_size)])
    problem = demo.validate(args)
    if blocks < 2 or (blocks - 1) * block_size < MIN_CAPACITY:
        assert problem == (
            f"--blocks {blocks} of {block_size} tokens: too small for any request (block 0 "
            f"is the null block, and a request needs {MIN_CAPACITY} tokens)"
        )
    else:
        assert problem is None
        config = DemoConfig(requests=3, blocks=blocks, block_size=block_size, seed=1)
        report = run_demo(config, io.StringIO())
        assert (report.status, report.requests_served) == (0, 3)


def test_a_refused_value_is_named_as_given() -> None:
    """The refusal quotes the value given, so a typo is found in the message itself."""
    for argv, value in [
        (["--requests", "-3"], "--requests -3"),
        (["--block-size", "-1"], "--block-size -1"),
        (["--blocks", "-5"], "--blocks -5"),
    ]:
        problem = demo.validate(demo_parser().parse_args(argv))
        assert problem is not None
        assert re.match(rf"{re.escape(value)}\b", problem), problem
        assert "\n" not in problem
