"""The list model is the definition of correct, so its own semantics are pinned down here."""

from __future__ import annotations

import doctest
import importlib

import pytest

from specs.model import ListModel, Membership, SpecBlock, ValueComparisonError, position
from specs.structure import mismatch, order_of, outcome_difference, outcome_of
from verified_queue.errors import (
    AlreadyInQueueError,
    EmptyQueueError,
    NegativeCountError,
    NotInQueueError,
)
from verified_queue.queue import FreeBlockQueue


def blocks_of(count: int) -> list[SpecBlock]:
    return [SpecBlock(number) for number in range(count)]


def numbers(model: ListModel[SpecBlock]) -> list[int]:
    return [block.number for block in model]


def test_spec_blocks_refuse_value_comparison() -> None:
    """SpecBlock raises on == and hash(), so any checker run on them proves identity-only use."""
    block = SpecBlock(0)
    with pytest.raises(ValueComparisonError):
        _ = block == SpecBlock(0)
    with pytest.raises(ValueComparisonError):
        hash(block)
    assert position([SpecBlock(1), block], block) == 1


def test_popleft_and_popleft_n_take_from_the_front() -> None:
    """popleft and popleft_n return the front blocks in order and shrink the model."""
    blocks = blocks_of(4)
    model = ListModel(blocks)
    assert model.popleft() is blocks[0]
    popped = model.popleft_n(2)
    assert [block.number for block in popped] == [1, 2]
    assert model.popleft_n(0) == []
    assert numbers(model) == [3]
    assert len(model) == model.num_free_blocks == 1


def test_popleft_n_errors_leave_the_model_unchanged() -> None:
    """popleft_n refuses too many (EmptyQueueError) and negative (NegativeCountError) counts."""
    model = ListModel(blocks_of(2))
    with pytest.raises(EmptyQueueError):
        model.popleft_n(3)
    with pytest.raises(NegativeCountError):
        model.popleft_n(-1)
    with pytest.raises(EmptyQueueError):
        ListModel().popleft()
    assert numbers(model) == [0, 1]


def test_remove_finds_the_block_itself() -> None:
    """remove takes out exactly the given block and refuses detached blocks and sentinels."""
    blocks = blocks_of(3)
    model = ListModel(blocks)
    model.remove(blocks[1])
    assert numbers(model) == [0, 2]
    with pytest.raises(NotInQueueError):
        model.remove(blocks[1])
    with pytest.raises(NotInQueueError):
        model.remove(FreeBlockQueue().fake_free_list_head)  # type: ignore[arg-type]  # a sentinel on purpose
    assert numbers(model) == [0, 2]


def test_append_refuses_double_free_and_sentinels() -> None:
    """append adds at the back but refuses a block already in the queue and a sentinel."""
    blocks = blocks_of(2)
    model = ListModel(blocks[:1])
    model.append(blocks[1])
    assert numbers(model) == [0, 1]
    with pytest.raises(AlreadyInQueueError):
        model.append(blocks[0])
    with pytest.raises(AlreadyInQueueError):
        model.append(FreeBlockQueue().fake_free_list_tail)  # type: ignore[arg-type]  # a sentinel on purpose
    assert numbers(model) == [0, 1]


def test_append_n_is_all_or_none() -> None:
    """append_n refuses a batch with a linked, repeated or sentinel block and changes nothing."""
    blocks = blocks_of(4)
    model = ListModel(blocks[:1])
    for batch in ([blocks[1], blocks[0]], [blocks[1], blocks[2], blocks[1]]):
        with pytest.raises(AlreadyInQueueError):
            model.append_n(batch)
        assert numbers(model) == [0]
    model.append_n(iter(blocks[1:]))
    assert numbers(model) == [0, 1, 2, 3]


def test_prepend_n_puts_the_batch_first_in_order_all_or_none() -> None:
    """prepend_n is list[0:0] = batch, and refuses what append_n refuses, naming prepend_n."""
    blocks = blocks_of(5)
    model = ListModel(blocks[:1])
    model.prepend_n([blocks[1], blocks[2]])
    assert numbers(model) == [1, 2, 0]
    for batch in ([blocks[3], blocks[0]], [blocks[3], blocks[4], blocks[3]]):
        with pytest.raises(AlreadyInQueueError, match=r"^prepend_n\("):
            model.prepend_n(batch)
        assert numbers(model) == [1, 2, 0]
    with pytest.raises(AlreadyInQueueError, match="sentinel"):
        model.prepend_n([blocks[3], FreeBlockQueue().fake_free_list_head])  # type: ignore[list-item]  # a sentinel on purpose
    model.prepend_n(iter(blocks[3:]))
    assert numbers(model) == [3, 4, 1, 2, 0]


def test_iter_blocks_after_yields_what_follows_the_cursor_or_refuses_it() -> None:
    """iter_blocks_after: all for None, the tail of the list for a member, NotInQueueError else."""
    membership = Membership()
    blocks = blocks_of(4)
    model = ListModel(blocks[:3], membership=membership)
    sibling = ListModel(blocks[3:], membership=membership)
    assert [block.number for block in model.iter_blocks_after(None)] == [0, 1, 2]
    assert [block.number for block in model.iter_blocks_after(blocks[0])] == [1, 2]
    assert list(model.iter_blocks_after(blocks[2])) == []
    reasons = {
        "not linked in a queue": SpecBlock(9),
        "linked in another queue": blocks[3],
        "another queue's sentinel": FreeBlockQueue().fake_free_list_tail,
    }
    for reason, cursor in reasons.items():
        with pytest.raises(NotInQueueError, match=reason):
            model.iter_blocks_after(cursor)  # type: ignore[arg-type]  # sentinels on purpose
    assert numbers(model) == [0, 1, 2]
    assert numbers(sibling) == [3]


def test_append_n_propagates_a_failing_iterator() -> None:
    """An iterator that raises part-way makes append_n raise the same error and add nothing."""
    blocks = blocks_of(2)
    model: ListModel[SpecBlock] = ListModel()

    def failing() -> object:
        yield blocks[0]
        raise KeyError("the caller's generator failed")

    with pytest.raises(KeyError):
        model.append_n(failing())  # type: ignore[arg-type]  # yields blocks, then raises
    assert numbers(model) == []


def test_shared_membership_sees_blocks_of_sibling_queues() -> None:
    """Models sharing a Membership refuse a block that sits in a sibling, and remove does not."""
    membership = Membership()
    blocks = blocks_of(2)
    left = ListModel(blocks[:1], membership=membership)
    right = ListModel(blocks[1:], membership=membership)
    with pytest.raises(AlreadyInQueueError):
        right.append(blocks[0])
    with pytest.raises(NotInQueueError):
        right.remove(blocks[0])
    left.remove(blocks[0])
    right.append(blocks[0])
    assert numbers(right) == [1, 0]
    assert not left


def test_copy_is_independent() -> None:
    """A copy of a model changes without changing the original, membership included."""
    blocks = blocks_of(2)
    model = ListModel(blocks[:1])
    twin = model.copy()
    twin.append(blocks[1])
    twin.popleft()
    assert numbers(model) == [0]
    assert numbers(twin) == [1]
    model.append(blocks[1])
    assert numbers(model) == [0, 1]


def test_contains_and_iteration_use_identity() -> None:
    """``in`` and iteration compare by identity and iterate over a snapshot."""
    blocks = blocks_of(2)
    model = ListModel(blocks[:1])
    assert blocks[0] in model
    assert blocks[1] not in model
    for block in model:
        model.remove(block)
    assert model.get_all_free_blocks() == []


def test_mismatch_reports_every_kind_of_difference() -> None:
    """mismatch accepts an equal queue and names a wrong order, count or stray link."""
    blocks = blocks_of(3)
    queue: FreeBlockQueue[SpecBlock] = FreeBlockQueue(blocks[:2])
    model = ListModel(blocks[:2])
    assert mismatch(queue, model, blocks) is None
    assert mismatch(queue, ListModel(blocks[1::-1]), blocks) is not None
    queue.num_free_blocks = 5
    assert "num_free_blocks" in str(mismatch(queue, model, blocks))
    queue.num_free_blocks = 2
    blocks[2].next_free_block = blocks[0]
    assert "still has links" in str(mismatch(queue, model, blocks))
    blocks[2].next_free_block = None
    blocks[1].next_free_block = blocks[0]
    assert isinstance(order_of(queue, limit=3), str)


def test_outcome_difference_compares_errors_by_type_and_results_by_identity() -> None:
    """Outcomes agree only on the same exception type, or on identical results."""
    block = SpecBlock(0)
    assert outcome_difference(outcome_of(lambda: block), outcome_of(lambda: block)) is None
    assert outcome_difference(outcome_of(lambda: [block]), outcome_of(lambda: [block])) is None
    assert outcome_difference(outcome_of(lambda: SpecBlock(0)), outcome_of(lambda: block))
    assert outcome_difference(outcome_of(ListModel().popleft), outcome_of(lambda: block))
    assert outcome_difference(outcome_of(lambda: block), outcome_of(ListModel().popleft))
    wrong_error = outcome_of(ListModel().popleft_n, -1)
    assert outcome_difference(wrong_error, outcome_of(ListModel().popleft_n, 1))


@pytest.mark.parametrize(
    "name", ["specs.model", "specs.structure", "specs.exhaustive", "specs.planted_bugs"]
)
def test_specs_docstring_examples(name: str) -> None:
    """Every docstring example in the specs modules produces the output it shows."""
    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert results.failed == 0
