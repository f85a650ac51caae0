"""The block pool keeps every call's contract under a random engine (specs/pool_contracts.py)."""

from __future__ import annotations

from specs.pool_contracts import check_pool_contracts
from verified_queue.kvcache.pool import BlockPool


def test_every_call_keeps_its_contract() -> None:
    """300 random engines of 30 steps: no call breaks its contract, the pool stays consistent."""
    assert check_pool_contracts(BlockPool, runs=300, steps=30) is None


def test_contracts_report_a_broken_pool() -> None:
    """A pool whose reset never resets breaks the reset contract, and the report says so."""

    class NeverResets(BlockPool):
        """A pool that refuses every reset."""

        __slots__ = ()

        def reset_prefix_cache(self) -> bool:
            """Refuse."""
            return False

    report = check_pool_contracts(NeverResets, runs=50)
    assert report is not None
    assert "reset_prefix_cache(): returned False with idle=True" in report
