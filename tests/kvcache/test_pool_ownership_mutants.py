"""The pool machine catches planted bugs in the pool's test of which pool owns a block.

Each mutant is one hunk of ``verified_queue/kvcache/pool.py``'s ownership logic (the weak
reference a block carries, read by ``owns`` and by ``free_blocks``' routing), applied to
the source text and compiled into a subclass of :class:`BlockPool` that takes the one
method it changes. The ownership machine of ``test_pool_machine.py`` (``PoolOwnership``),
derandomized and unshrunk, at its default size, must fail on each: its model decides
ownership from what the driver recorded when it made each block, never from the pool.
"""

from __future__ import annotations

import gc
import inspect
import pickle
import types

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import HypothesisException

from specs.pool_driver import enumerate_strays
from tests.kvcache.test_pool_machine import RUN, run_ownership_machine
from verified_queue.kvcache import pool as pool_module
from verified_queue.kvcache.pool import BlockPool

#: The machine's default run, fixed and unshrunk: it stops at the first failure (the
#: ownership machine runs at most ``OWNERSHIP_EXAMPLES`` of its examples).
FIXED = settings(
    RUN,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    print_blob=False,
    suppress_health_check=list(HealthCheck),
)


def mutant(name: str, old: str, new: str) -> type[BlockPool]:
    """``BlockPool`` with ``old`` replaced by ``new`` (once, in one method) in its source.

    The mutated module's globals name the real ``BlockPool``, so that its ``isinstance``
    tests treat the pools the driver makes as they would in production.
    """
    source = inspect.getsource(pool_module)
    assert source.count(old) == 1, f"{name}: the hunk must match once"
    namespace: dict[str, object] = {"__name__": f"{pool_module.__name__}.{name}"}
    exec(compile(source.replace(old, new), f"<{name}>", "exec"), namespace)
    mutated = namespace["BlockPool"]
    assert isinstance(mutated, type)
    namespace["BlockPool"] = BlockPool
    changed = {
        attribute: function
        for attribute, function in vars(mutated).items()
        if isinstance(function, types.FunctionType)
        and function.__code__.co_code != getattr(BlockPool, attribute).__code__.co_code
    }
    assert len(changed) == 1, f"{name}: one method must change, not {sorted(changed)}"
    planted = type(name, (BlockPool,), {"__slots__": (), "__module__": __name__, **changed})
    globals()[name] = planted  # found by name, as pickle finds a class: blocks pickle their pool
    return planted


def run_without_collections(pool_type: type[BlockPool]) -> None:
    """Run the ownership machine, fixed, with no automatic collection of reference cycles.

    The driver checks that a dropped pool is freed at once (P5); a pool a cycle keeps alive
    would otherwise be freed or not as the collector happens to run, and the run with it.
    """
    gc.disable()
    try:
        run_ownership_machine(pool_type, FIXED)
    finally:
        gc.enable()


#: Each: a name, the production text and the mutated text.
MUTANTS: list[tuple[str, str, str]] = [
    (
        "RoutesByTheReferenceNotItsTarget",  # free_blocks: the reference taken for the pool
        "owner = reference() if isinstance(reference, weakref.ref) else None",
        "owner = reference if isinstance(reference, weakref.ref) else None",
    ),
    (
        "OwnsComparesReferencesByValue",  # owns: == on weak references compares the pools
        "and block.pool is self._weak_self\n        )",
        "and block.pool == self._weak_self\n        )",
    ),
    (
        "TreatsADeadReferenceAsOurs",  # free_blocks: a block of a pool that is gone planned here
        "continue  # its pool is gone, and its queue with it: vLLM skips it too",
        "ours.append(block)  # its pool is gone, and its queue with it: vLLM skips it too",
    ),
    (
        "FreeChecksOwnershipOfTheFirstBlockOnly",  # _plan_free
        "        for block in blocks:\n            if not self.owns(block):",
        "        for block in blocks:\n            if block is blocks[0] and not self.owns(block):",
    ),
    (
        "CacheChecksOwnershipOfTheFirstBlockOnly",  # cache_full_blocks
        "            if not self.owns(block):\n"
        '                raise BlockPoolError(f"{block!r} is not a block',
        "            if block is new_blocks[0] and not self.owns(block):\n"
        '                raise BlockPoolError(f"{block!r} is not a block',
    ),
    (
        "FreeTakesAMissingPoolAsOurs",  # free_blocks: pool None planned here
        "            if reference is mine:\n",
        "            if reference is mine or reference is None:\n",
    ),
    (
        "OwnsIgnoresTheReference",  # owns: the identity test alone, as if it were enough
        "and block.pool is self._weak_self\n        )",
        "\n        )",
    ),
    (
        "OwnsDereferencesTheReference",  # owns: the pool the reference names, not the reference
        "and block.pool is self._weak_self\n        )",
        "and block.pool() is self\n        )",
    ),
    (
        "OwnsAcceptsAMissingPool",  # owns: a block whose pool is None is ours
        "and block.pool is self._weak_self\n        )",
        "and block.pool in (self._weak_self, None)\n        )",
    ),
    (
        "RoutesOnlyToPoolsOfItsOwnClass",  # free_blocks: another class's pool is no pool
        "if isinstance(owner, BlockPool):",
        "if type(owner) is type(self):",
    ),
    (
        "OwnsForgetsTheIdentityTest",  # owns: any block of the right id naming this pool
        "and self.blocks[block_id] is block\n",
        "",
    ),
    (
        "RefusedFreeKeepsItsPoolsAlive",  # _plan_free: the error left bound in its frame
        "                    del error\n",
        "                    pass\n",
    ),
    (
        "OwnsReadsPastTheLastBlock",  # owns: off by one at the top
        "and 0 <= block_id < self.num_blocks",
        "and 0 <= block_id <= self.num_blocks",
    ),
]


@pytest.mark.parametrize(("name", "old", "new"), MUTANTS, ids=[name for name, *_ in MUTANTS])
def test_the_pool_machine_catches_an_ownership_bug(name: str, old: str, new: str) -> None:
    """The derandomized machine fails on the mutant, by a mismatch or a crash of the pool."""
    with pytest.raises(Exception) as caught:  # noqa: PT011 -- a mismatch, or the pool's own crash
        run_without_collections(mutant(name, old, new))
    assert not isinstance(caught.value, (HypothesisException, pickle.PicklingError)), caught.value


#: The mutants the stray enumeration cannot reach, and why (the machine catches them).
ENUMERATION_MISSES = {
    # It makes no double free and drops no pool after a refused call: a pool a refused
    # free kept alive is never looked for.
    "RefusedFreeKeepsItsPoolsAlive",
}
ENUMERATED = [mutant_ for mutant_ in MUTANTS if mutant_[0] not in ENUMERATION_MISSES]


@pytest.mark.parametrize(("name", "old", "new"), ENUMERATED, ids=[n for n, *_ in ENUMERATED])
def test_the_stray_enumeration_catches_an_ownership_bug(name: str, old: str, new: str) -> None:
    """Every stray at every entry (``enumerate_strays``), complete at its scope, fails too."""
    gc.disable()
    try:
        runs, failure = enumerate_strays(pool_type=mutant(name, old, new))
    finally:
        gc.enable()
    assert failure is not None, f"{name}: {runs} runs, no mismatch"


def test_the_production_pool_passes_the_same_run() -> None:
    """The mutants' run passes on the production pool: what fails is the planted bug."""
    run_without_collections(BlockPool)
