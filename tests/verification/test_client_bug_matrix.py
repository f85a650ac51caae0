"""The pool and key bugs of the catalogue against the layers that call the pool or the keys.

The second table of ``docs/bug-matrix.md`` (:func:`specs.bug_matrix.compute_client`): every
planted pool and key bug run against the pool machine, the pool sequences, the pool
contracts, the key property and the key enumeration; each must be caught by at least three.
"""

from __future__ import annotations

import pytest

from specs import bug_matrix
from specs.planted_bugs.kvcache import CLIENT_CATALOGUE, CLIENT_KINDS, ClientBug

Matrix = dict[tuple[str, str], bool]

pytestmark = pytest.mark.bug_matrix


@pytest.fixture(scope="module")
def client() -> Matrix:
    """The client matrix, computed once per process."""
    return bug_matrix.compute_client()


def test_client_catalogue_plants_every_kind_in_both_modules() -> None:
    """At least 8 bugs, both kinds, pool bugs overriding the method they name."""
    assert len(CLIENT_CATALOGUE) >= 8
    assert {bug.kind for bug in CLIENT_CATALOGUE.values()} == set(CLIENT_KINDS)
    for name, bug in CLIENT_CATALOGUE.items():
        if bug.kind == "pool":
            assert bug.operation in vars(bug.pool_type), name
        else:
            assert bug.keys_bug is not None, name
            assert bug.keys_bug.function == bug.operation, name


def test_every_client_bug_is_caught_by_three_layers(client: Matrix) -> None:
    """Each planted pool or key bug is reported by at least three of the client layers."""
    for name in CLIENT_CATALOGUE:
        layers = [layer for layer in bug_matrix.CLIENT_LAYERS if client[layer, name]]
        assert len(layers) >= 3, f"{name} is caught only by {layers}"


def test_every_client_miss_is_explained(client: Matrix) -> None:
    """A client layer misses exactly the bugs MISSES gives it a reason for, of those it reaches."""
    out_of_reach = set(bug_matrix.CLIENT_NOT_APPLICABLE)
    missed = {key for key, found in client.items() if not found and key not in out_of_reach}
    explained = {key for key in bug_matrix.MISSES if key[0] in bug_matrix.CLIENT_LAYERS}
    assert missed == explained, (sorted(missed - explained), sorted(explained - missed))


def test_layers_pass_on_the_production_pool_and_keys() -> None:
    """With nothing planted, no client layer reports anything: a catch is the bug's."""
    clean = ClientBug("pool", "none")
    for layer, runner in bug_matrix._CLIENT_RUNNERS.items():
        assert not runner(clean), layer
