"""``bench revision``: the production queue of a git revision, loaded beside this build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import verified_queue
from bench.pool_revision import POOL_MODULES, SIZES, WORKLOADS, load_pool
from bench.pool_revision import measure as measure_pool
from bench.revision import load_revision, measure
from bench.run import QUICK
from verified_queue import Block
from verified_queue import queue as queue_module
from verified_queue.kvcache import pool as pool_module

CHECKOUT = Path(__file__).resolve().parents[2]
#: The last commit whose queue.py still held its undo (before verified_queue/_undo.py).
BEFORE_THE_UNDO_MOVED = "15ac2e5"


def _has(revision: str) -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(
        ["git", "-C", str(CHECKOUT), "cat-file", "-e", f"{revision}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


needs_history = pytest.mark.skipif(
    not _has(BEFORE_THE_UNDO_MOVED), reason="needs the checkout's git history"
)


@needs_history
@pytest.mark.parametrize("revision", ["HEAD", BEFORE_THE_UNDO_MOVED])
def test_a_revisions_queue_runs_beside_this_build_and_leaves_it_alone(revision: str) -> None:
    """The revision's queue links, pops and undoes; the installed modules stay in sys.modules."""
    installed = {
        name: sys.modules[name] for name in ("verified_queue.queue", "verified_queue._undo")
    }
    old = load_revision(revision)
    assert old.FreeBlockQueue is not queue_module.FreeBlockQueue
    assert old.__file__ == f"{revision}:verified_queue/queue.py"
    blocks = [Block() for _ in range(4)]
    queue = old.FreeBlockQueue(blocks[:3])
    assert queue.popleft_n(2) == blocks[:2]
    with pytest.raises(verified_queue.AlreadyInQueueError):
        queue.append_n([blocks[3], blocks[2]])  # blocks[2] is linked: refused, undone
    assert queue.get_all_free_blocks() == [blocks[2]]
    assert blocks[3].prev_free_block is None
    assert blocks[3].next_free_block is None
    for name, module in installed.items():
        assert sys.modules[name] is module, f"{name} was not restored"


#: Git's empty tree, which every repository knows: a tree-ish with no files at all.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


@needs_history
def test_a_revision_without_the_queue_is_refused() -> None:
    """A revision that has no verified_queue/queue.py stops the run with its name."""
    with pytest.raises(SystemExit, match=r"has no verified_queue/queue\.py"):
        load_revision(EMPTY_TREE)


@needs_history
@pytest.mark.skipif(verified_queue.COMPILED, reason="the revision runs interpreted")
def test_the_comparison_times_both_queues_on_every_workload() -> None:
    """Each workload has a row for the revision and one for this build, every n timed."""
    settings = QUICK.__class__(sizes=(10,), queue_size=200, repetitions=1, ops_per_sample=20)
    results, subjects = measure("HEAD", settings)
    assert [result.name for result in results] == ["single", "batch", "prepend", "mixed"]
    names = [subject.name for subject in subjects]
    assert names == ["queue at HEAD", "this build"]
    for result in results:
        assert set(result.medians) == set(names)
        assert all(result.medians[name][10] > 0 for name in names)


@needs_history
def test_a_revisions_check_mode_runs_beside_this_build_and_leaves_it_alone() -> None:
    """HEAD's check mode loads apart, refuses a foreign remove, and the installed one stays."""
    from bench.check_mode_revision import CHECK_MODE_MODULES, load_check_mode  # noqa: PLC0415

    names = [f"verified_queue.{name}" for name in CHECK_MODE_MODULES]
    installed = {name: sys.modules.get(name) for name in names}
    loaded = load_check_mode("HEAD")
    old_class = loaded["checked"].CheckedFreeBlockQueue
    blocks = [Block() for _ in range(3)]
    first, second = old_class(blocks[:2]), old_class(blocks[2:])
    with pytest.raises(verified_queue.NotInQueueError):
        first.remove(blocks[2])
    assert len(first) == 2
    assert len(second) == 1
    for name, module in installed.items():
        assert sys.modules.get(name) is module, f"{name} was not restored"
    with pytest.raises(SystemExit, match="has no"):
        load_check_mode(EMPTY_TREE)


#: The last commit whose pool had no repairs module (before verified_queue/kvcache/_repair.py).
BEFORE_THE_POOL_REPAIRS = "86779b8"


@needs_history
@pytest.mark.parametrize("revision", ["HEAD", BEFORE_THE_POOL_REPAIRS])
def test_a_revisions_pool_runs_beside_this_build_and_leaves_it_alone(revision: str) -> None:
    """A revision's pool, dotted below the package, allocates and frees; the installed one stays."""
    names = [f"verified_queue.{name}" for name in POOL_MODULES]
    installed = {name: sys.modules.get(name) for name in names}
    old_class = load_pool(revision)
    assert old_class is not pool_module.BlockPool
    assert (
        sys.modules[old_class.__module__].__file__ == f"{revision}:verified_queue/kvcache/pool.py"
    )
    pool = old_class(4)
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(reversed(blocks))
    pool.check_consistency()
    assert pool.get_num_free_blocks() == 3
    for name, module in installed.items():
        assert sys.modules.get(name) is module, f"{name} was not restored"
    assert verified_queue.kvcache.pool is pool_module
    with pytest.raises(SystemExit, match=r"has no verified_queue/kvcache/pool\.py"):
        load_pool(EMPTY_TREE)


@needs_history
def test_the_pool_comparison_times_both_pools_on_every_workload() -> None:
    """Each pool workload has a row for the revision and one for this build, every k timed."""
    settings = QUICK.__class__(repetitions=1, ops_per_sample=4)
    results, subjects = measure_pool("HEAD", settings)
    assert [result.name for result in results] == list(WORKLOADS)
    names = [subject.name for subject in subjects]
    assert names == ["pool at HEAD", "this build"]
    for result in results:
        assert set(result.medians) == set(names)
        assert all(result.medians[name][k] > 0 for name in names for k in SIZES)
