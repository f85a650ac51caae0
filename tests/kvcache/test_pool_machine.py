"""The block pool against its reference model: a Hypothesis machine and every short sequence.

Both drive :class:`specs.pool_driver.PoolDriver`, which runs each step on a
:class:`~verified_queue.kvcache.pool.BlockPool` and on :class:`specs.pool_model.PoolModel` and
compares results, exception types and messages, and every observable after every step.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from specs.pool_driver import (
    ENTRIES,
    PEER_SLOTS,
    STRAYS,
    PoolDriver,
    RequestSpec,
    enumerate_sequences,
    enumerate_strays,
)
from verified_queue.kvcache.pool import BlockPool

#: Prompts that share prefixes (mostly), or drawn freely; one token past 64 bits.
PROMPTS = st.sampled_from([(1, 2, 3, 4, 5), (1, 2, 3, 4), (1, 2, 3), (1, 2, 9, 9), (2**63, 1, 3)])
TOKENS = st.sampled_from([1, 2, 3, 2**63])
#: Requests: every kind of LoRA id, salt and multimodal placement a key must keep apart.
REQUESTS = (
    st.builds(RequestSpec, PROMPTS)
    | st.builds(RequestSpec, PROMPTS, cache_salt=st.sampled_from(["t", b"t"]))
    | st.builds(
        RequestSpec,
        tokens=PROMPTS | st.lists(TOKENS, min_size=1, max_size=7).map(tuple),
        lora=st.sampled_from([None, None, "a", 0, 1, 128, -129]),
        cache_salt=st.sampled_from([None, None, "", "t", b"t"]),
        mm_inputs=st.sampled_from(
            [(), (), (("i", 2, 1),), (("i", 1, 2),), (("i", 0, 4), ("j", 3, 1))]
        ),
    )
)
INDEX = st.integers(min_value=0, max_value=7)

#: The default run's examples; the bug matrix runs fewer.
RUN = settings(max_examples=150, stateful_step_count=30, deadline=None)
#: The most examples the ownership machine runs: enough for its planted bugs (the most any
#: needs is 27, derandomized), and the default run stays near the two machines' time.
OWNERSHIP_EXAMPLES = 100


class PoolAgainstModel(RuleBasedStateMachine):
    """Engine steps and misuse on a 6-block pool, compared with the model after each."""

    pool_type: type[BlockPool] = BlockPool
    enable_caching = True

    @initialize()
    def start(self) -> None:
        """A new pool and model, compared."""
        self.driver = PoolDriver(6, enable_caching=self.enable_caching, pool_type=self.pool_type)

    @rule(spec=REQUESTS)
    def admit(self, spec: RequestSpec) -> None:
        """Admit a request: hit, touch, allocate, cache."""
        self.driver.admit(spec)

    @rule(index=INDEX, evict_first=st.booleans())
    def free(self, index: int, evict_first: bool) -> None:
        """Finish a request, freeing its blocks tail first."""
        self.driver.free(index, evict_first)

    @rule(index=INDEX)
    def preempt(self, index: int) -> None:
        """Preempt a request and admit it again."""
        self.driver.preempt(index)

    @rule(index=INDEX)
    def share(self, index: int) -> None:
        """Take a second reference on a running request's blocks."""
        self.driver.share(index)

    @rule(index=INDEX)
    def double_free(self, index: int) -> None:
        """Free a request's blocks twice in one call."""
        self.driver.double_free(index)

    @rule(count=st.integers(min_value=-1, max_value=7))
    def allocate(self, count: int) -> None:
        """Ask for blocks outright, maybe too many or a negative number."""
        self.driver.allocate(count)

    @rule(index=INDEX, kind=st.integers(min_value=0, max_value=4))
    def cache_misuse(self, index: int, kind: int) -> None:
        """Cache what the pool must refuse."""
        self.driver.cache_misuse(index, kind)

    @rule(specs=st.lists(REQUESTS, min_size=1, max_size=2), skip=st.integers(0, 3))
    def look_up(self, specs: list[RequestSpec], skip: int) -> None:
        """Look up the keys of requests run together, one left out."""
        self.driver.look_up(specs, skip)

    @rule()
    def reset(self) -> None:
        """Reset the prefix cache."""
        self.driver.reset()


class PoolWithoutCaching(PoolAgainstModel):
    """The same steps with caching off: nothing cached, every freed block reused first."""

    enable_caching = False


class PoolOwnership(PoolAgainstModel):
    """The same steps, caching on, and ownership: other pools, pools gone, stray blocks.

    A machine of its own, so that the two above draw the steps they always drew (the
    planted-bug matrix counts on them) and so that the ownership mutants can be run alone.
    """

    @rule(
        index=INDEX,
        slot=st.sampled_from(PEER_SLOTS),
        count=st.integers(min_value=0, max_value=3),
        cache=st.booleans(),
    )
    def hold_foreign(self, index: int, slot: str, count: int, cache: bool) -> None:
        """A request also holds blocks of another pool, maybe cached there."""
        self.driver.hold_foreign(index, slot, count, cache)

    @rule(slot=st.sampled_from(PEER_SLOTS))
    def drop_peer(self, slot: str) -> None:
        """Drop another pool whose blocks requests may hold."""
        self.driver.drop_peer(slot)

    @rule(
        kind=st.sampled_from(STRAYS),
        entry=st.sampled_from(ENTRIES),
        index=INDEX,
        position=st.integers(min_value=0, max_value=7),
        which=st.integers(min_value=0, max_value=3),
    )
    def misuse_foreign(self, kind: str, entry: str, index: int, position: int, which: int) -> None:
        """Pass a block that is not the pool's own, among a request's, to a pool entry point."""
        self.driver.misuse_foreign(kind, entry, index, position, which)


def _over(machine: type[PoolAgainstModel], pool_type: type[BlockPool]) -> type[PoolAgainstModel]:
    return type(f"{machine.__name__}Over{pool_type.__name__}", (machine,), {"pool_type": pool_type})


def run_ownership_machine(pool_type: type[BlockPool], run: Any = RUN) -> None:
    """Run the ownership machine over ``pool_type``, at most :data:`OWNERSHIP_EXAMPLES`
    examples of ``run``'s; raise on a mismatch."""
    examples = min(run.max_examples, OWNERSHIP_EXAMPLES)
    run_state_machine_as_test(
        _over(PoolOwnership, pool_type), settings=settings(run, max_examples=examples)
    )


def run_pool_machine(pool_type: type[BlockPool], run: Any = RUN) -> None:
    """Run the machine over ``pool_type`` with caching on, then off, then with ownership steps.

    Raises on a mismatch.
    """
    for machine in (PoolAgainstModel, PoolWithoutCaching):
        run_state_machine_as_test(_over(machine, pool_type), settings=run)
    run_ownership_machine(pool_type, run)


def test_pool_matches_model() -> None:
    """The pool shows what the model does after every step, caching on and off, and with
    blocks of other pools, of pools that are gone and of none."""
    run_pool_machine(BlockPool)


def test_every_short_sequence_matches_model() -> None:
    """Every sequence of up to 3 menu steps, from each starting state, matches the model."""
    runs, failure = enumerate_sequences(depth=3)
    assert failure is None, failure
    assert runs == 2 * (14 + 14**2 + 14**3)


def test_every_stray_block_at_every_entry_matches_model() -> None:
    """Every kind of stray block, to every entry, at each position, beside each other pool."""
    runs, failure = enumerate_strays()
    assert failure is None, failure
    assert runs == 2 * len(STRAYS) * len(ENTRIES) * 2 * 4


def test_an_accepted_double_free_leaves_no_request_holding_free_blocks() -> None:
    """The machine's shrunk example: after a double free a sharer took, the driver stays sound.

    The double free of a request whose blocks another request shared is accepted (each
    count drops twice). The driver used to drop only the request named, so it went on
    believing the sharer held blocks that were free again, reused and recached; the
    caching misuse it then planted on them was no misuse, and its own bookkeeping
    raised ``KeyError`` on a correct pool. Now it runs that step only where one request
    holds exactly the same blocks, and drops both.
    """
    driver = PoolDriver(6, enable_caching=True)
    driver.admit(RequestSpec((1, 2, 3, 4)))
    driver.admit(RequestSpec((1, 2, 3, 4, 5)))
    driver.admit(RequestSpec((1, 2, 3, 4), cache_salt="t"))
    for _ in range(3):
        driver.admit(RequestSpec((1, 2, 3, 4, 5)))
    driver.double_free(0)
    driver.admit(RequestSpec((1, 2, 3, 4, 5)))
    driver.admit(RequestSpec((2**63, 1, 3)))
    driver.cache_misuse(0, 4)
    driver.share(0)
    driver.double_free(len(driver.requests) - 1)
    driver.compare("the end")
