"""The scheduler fuzzer's parts that need no vLLM: its oracle, its end check, its options."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.vllm import fuzz_scheduler
from tests.vllm.fuzz_scheduler import (
    BLOCK_SIZE,
    CONFIGS,
    PLANTED,
    Stats,
    bound,
    cache_problems,
    holder_problems,
    machine_class,
    offload_problems,
    parse_arguments,
    prompt_tokens,
)


def block(block_id: int, ref_cnt: int = 0, block_hash: object = None) -> SimpleNamespace:
    """A stand-in for vLLM's KVCacheBlock: the fields the oracle reads."""
    return SimpleNamespace(block_id=block_id, ref_cnt=ref_cnt, block_hash=block_hash, is_null=False)


def pool_of(*counts: int) -> list[SimpleNamespace]:
    """Blocks 0..n, block 0 the null block, each other with the count given."""
    null = block(0)
    null.is_null = True
    return [null, *(block(index + 1, count) for index, count in enumerate(counts))]


def test_holder_oracle_accepts_counts_equal_to_the_tables_holding_each_block() -> None:
    """Counts matching the block tables of two groups and a deferred free are no problem."""
    blocks = pool_of(2, 1, 0, 1)
    blocks[1].block_hash = b"cached"
    holders: list[tuple[str, list[Any]]] = [
        ("r1", [blocks[0], blocks[1], blocks[2]]),
        ("r2", [blocks[1]]),
        ("deferred free 0", [blocks[4]]),
    ]
    assert holder_problems(blocks, blocks[0], holders) == []


def test_holder_oracle_reports_a_count_that_differs_from_the_holders() -> None:
    """A block counted once more than it is held (a double free's mirror) is named."""
    blocks = pool_of(2, 0)
    problems = holder_problems(blocks, blocks[0], [("r1", [blocks[1]])])
    assert problems == ["block 1: ref_cnt 2, held 1 times"]


def test_holder_oracle_counts_a_block_held_by_no_table_but_not_free() -> None:
    """A block whose count is above 0 with no holder left (leaked) is named."""
    blocks = pool_of(1)
    assert holder_problems(blocks, blocks[0], []) == ["block 1: ref_cnt 1, held 0 times"]


def test_holder_oracle_refuses_an_uncached_block_shared_by_two_requests() -> None:
    """Two requests may share only a cached full block: an uncached one shared is named."""
    blocks = pool_of(2)
    holders = [("r1", [blocks[1]]), ("r2", [blocks[1]])]
    assert holder_problems(blocks, blocks[0], holders) == [
        "block 1: held by r1, r2, not a cached full block"
    ]
    blocks[1].block_hash = b"cached"
    assert holder_problems(blocks, blocks[0], holders) == []


def test_holder_oracle_leaves_the_null_block_alone() -> None:
    """The null block, in any table and at any count, is not counted."""
    blocks = pool_of()
    blocks[0].ref_cnt = -3
    assert holder_problems(blocks, blocks[0], [("r1", [blocks[0], blocks[0]])]) == []


def test_holder_oracle_counts_a_transfer_beside_the_table_that_holds_the_block() -> None:
    """A copy in flight holds its blocks once more, and shares an uncached one legitimately."""
    blocks = pool_of(2, 1)
    table = [("r1", [blocks[1]])]
    copies = [("store 0", [blocks[1], blocks[2]])]
    assert holder_problems(blocks, blocks[0], table, copies) == []
    assert holder_problems(blocks, blocks[0], table) == [
        "block 1: ref_cnt 2, held 1 times",
        "block 2: ref_cnt 1, held 0 times",
    ]
    blocks[2].ref_cnt = 0
    assert holder_problems(blocks, blocks[0], table, copies) == ["block 2: ref_cnt 0, held 1 times"]


def test_offload_check_accepts_copies_whose_blocks_are_held() -> None:
    """Every GPU and CPU block a load or store in flight copies is held: no problem."""
    gpu, cpu = pool_of(1, 2), pool_of(1)
    assert offload_problems(gpu, cpu, [("store 3", [1, 2], [1]), ("load 0", [2], [])]) == []
    assert offload_problems(gpu, cpu, []) == []


def test_offload_check_names_each_block_freed_under_a_copy() -> None:
    """A GPU block a store still reads, a CPU block it still writes: each named, in its pool."""
    gpu, cpu = pool_of(0, 1), pool_of(1, 0)
    assert offload_problems(gpu, cpu, [("store 3", [1, 2], [1, 2])]) == [
        "GPU block 1: free (ref_cnt 0) while store 3 copies it",
        "CPU block 2: free (ref_cnt 0) while store 3 copies it",
    ]
    gpu[2].ref_cnt = -1
    assert offload_problems(gpu, cpu, [("load 7", [2], [])]) == [
        "GPU block 2: free (ref_cnt -1) while load 7 copies it"
    ]


def test_cache_check_accepts_a_coherent_cache() -> None:
    """Entries naming blocks that carry their hash, primary or extra, are coherent."""
    blocks = pool_of(0, 0, 0)
    blocks[1].block_hash = "a"
    blocks[2].block_hash = "b"
    entries = [("a", 1), ("b", 2), ("c", 2)]
    assert cache_problems(blocks, entries, {2: {"c"}}) == []


def test_cache_check_reports_an_entry_left_behind_by_an_eviction() -> None:
    """An entry whose block no longer carries the hash (its hash reset) is named."""
    blocks = pool_of(0)
    assert cache_problems(blocks, [("a", 1)], {}) == [
        "cache entry 'a': block 1 does not carry that hash"
    ]


def test_cache_check_reports_a_hash_without_its_entry_and_a_missing_block() -> None:
    """A block's hash with no entry, and an entry naming no block, are named."""
    blocks = pool_of(0)
    blocks[1].block_hash = "a"
    assert cache_problems(blocks, [("z", 9)], {}) == [
        "cache entry 'z': block 9 does not exist",
        "block 1: its hash 'a' has no cache entry",
    ]


def test_prompts_share_their_prefix_blocks_and_keep_their_own_tokens() -> None:
    """Two requests of one prefix share its whole blocks; their own tokens differ."""
    first = prompt_tokens(1, 2, 3, serial=1)
    second = prompt_tokens(1, 2, 3, serial=2)
    assert len(first) == 2 * BLOCK_SIZE + 3
    assert first[: 2 * BLOCK_SIZE] == second[: 2 * BLOCK_SIZE]
    assert first[2 * BLOCK_SIZE :] != second[2 * BLOCK_SIZE :]
    assert prompt_tokens(0, 1, 0, 1)[:BLOCK_SIZE] != prompt_tokens(2, 1, 0, 1)[:BLOCK_SIZE]


def test_an_empty_prompt_gets_one_token() -> None:
    """vLLM refuses an empty prompt, so no shared block and no own token still gives one."""
    assert len(prompt_tokens(0, 0, 0, serial=5)) == 1


def test_options_default_to_the_quick_run_of_every_configuration() -> None:
    """No argument: the quick, derandomized run of every configuration."""
    options = parse_arguments([])
    assert options.budget is None
    assert not options.planted
    assert options.configs == tuple(CONFIGS)


def test_options_read_a_budget_and_configurations() -> None:
    """``--budget`` and ``--configs`` are read as seconds and names."""
    options = parse_arguments(["--budget", "90", "--configs", "async,full-caching", "--coverage"])
    assert options.budget == 90.0
    assert options.configs == ("async", "full-caching")
    assert options.coverage
    assert parse_arguments(["--cache", "here"]).cache == Path("here")


def test_options_read_a_connector_and_patches(tmp_path: Path) -> None:
    """``--connector`` is kept as ``module:Class``; each ``--patch`` file is kept, in order."""
    first, second = tmp_path / "fix.py", tmp_path / "other.py"
    first.write_text("")
    second.write_text("")
    options = parse_arguments(
        ["--connector", "pkg.mod:Mine", "--patch", str(first), "--patch", str(second)]
    )
    assert options.connector == "pkg.mod:Mine"
    assert options.patches == (first, second)
    assert parse_arguments([]).patches == ()


@pytest.mark.parametrize(
    "argv",
    [
        ["--budget", "0"],
        ["--budget", "soon"],
        ["--configs", "full-caching,paged"],
        ["--quick", "--budget", "5"],
        ["--examples", "0"],
        ["--steps", "0"],
        ["--connector", "pkg.mod"],
        ["--connector", ":Mine"],
        ["--patch", "no-such-file.py"],
        ["--patch", "pyproject.toml"],
    ],
)
def test_options_refuse_what_cannot_run(argv: list[str]) -> None:
    """A budget not above 0, an unknown configuration, two lengths at once: a usage error."""
    with pytest.raises(SystemExit):
        parse_arguments(argv)


def test_every_planted_bug_names_a_known_configuration() -> None:
    """Each planted bug runs on one of the machine's configurations."""
    assert {planted.config for planted in PLANTED.values()} <= set(CONFIGS)
    assert len(PLANTED) == 9


def test_stats_add_sums_the_counts() -> None:
    """Adding two runs' stats sums every count."""
    total = Stats(examples=1, steps=2, requests=3)
    total.add(Stats(examples=4, steps=5, requests=6, aborts=1, preemptions=2, hits=3))
    assert (total.examples, total.steps, total.requests) == (5, 7, 9)
    assert (total.aborts, total.preemptions, total.hits) == (1, 2, 3)
    total.add(Stats(transfers=4, cpu_loads=1, drafts=5, accepted=2))
    total.add(Stats(transfers=1, cpu_loads=1, drafts=1, accepted=1))
    assert (total.transfers, total.cpu_loads, total.drafts, total.accepted) == (5, 2, 6, 3)


def test_bound_puts_back_what_was_bound_even_when_the_block_raises() -> None:
    """A patched method is restored after the run, also when the run fails."""
    owner = SimpleNamespace(method="vLLM's")
    seen = []

    def failing_run() -> None:
        with bound(owner, {"method": "planted"}):
            seen.append(owner.method)
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError, match="the run failed"):
        failing_run()
    assert seen == ["planted"]
    assert owner.method == "vLLM's"


def test_machine_refuses_a_level_it_cannot_check() -> None:
    """Check mode's pool check on vLLM's own queue, or an unknown level, is refused."""
    vllm: Any = object()
    with pytest.raises(ValueError, match="check-mode queue"):
        machine_class(vllm, CONFIGS["async"], checked=False, checks="all", stats=Stats())
    with pytest.raises(ValueError, match="expected one of"):
        machine_class(vllm, CONFIGS["async"], checks="some", stats=Stats())


def test_coverage_measures_vllms_core_not_this_package() -> None:
    """``--coverage`` reads vLLM's files only: the project's coverage settings are not applied.

    pyproject.toml names this package as coverage.py's source, and a source set makes
    coverage.py ignore ``include``: every vLLM line would be reported unrun.
    """
    pytest.importorskip("coverage")
    measured = fuzz_scheduler._start_coverage()
    measured.stop()
    assert not measured.get_option("run:source_pkgs")
    assert not measured.get_option("run:source")
    assert measured.get_option("run:include") == ["*/vllm/v1/core/*"]
