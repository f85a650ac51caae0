"""Arguments no build can use raise the same specific error, with the same message, on both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from verified_queue import Block, FreeBlockQueue
from verified_queue.errors import AlreadyInQueueError, WrongTypeError


class KeyErrorProxy:
    """A proxy whose every attribute lookup raises KeyError, as a dict-backed wrapper's may."""

    def __getattribute__(self, name: str) -> Any:
        raise KeyError(name)

    def __repr__(self) -> str:
        return "KeyErrorProxy()"


TAKING_A_BLOCK: dict[str, Callable[[FreeBlockQueue[Any], object], object]] = {
    "remove": lambda queue, value: queue.remove(value),
    "append": lambda queue, value: queue.append(value),
    "append_n": lambda queue, value: queue.append_n([Block(), value]),
    "prepend_n": lambda queue, value: queue.prepend_n([Block(), value]),
    "iter_blocks_after": lambda queue, value: queue.iter_blocks_after(value),
}


@pytest.mark.parametrize("operation", sorted(TAKING_A_BLOCK))
def test_a_proxy_whose_lookup_raises_is_not_a_block(operation: str) -> None:
    """A non-block whose attribute lookup raises KeyError gets WrongTypeError; nothing changes."""
    blocks = [Block(), Block()]
    queue: FreeBlockQueue[Any] = FreeBlockQueue(blocks)
    with pytest.raises(WrongTypeError) as caught:
        TAKING_A_BLOCK[operation](queue, KeyErrorProxy())
    assert str(caught.value) == (
        f"{operation}(KeyErrorProxy()): expected a block (a verified_queue.Block, or an object "
        "with prev_free_block and next_free_block), got KeyErrorProxy"
    )
    assert queue.get_all_free_blocks() == blocks


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
@pytest.mark.parametrize("batch", [3.5, 7, None])
def test_a_batch_that_is_not_iterable_is_a_wrong_type(operation: str, batch: object) -> None:
    """append_n(3.5) and prepend_n(3.5) raise WrongTypeError naming what they got."""
    blocks = [Block(), Block()]
    queue: FreeBlockQueue[Any] = FreeBlockQueue(blocks)
    with pytest.raises(WrongTypeError) as caught:
        getattr(queue, operation)(batch)
    assert str(caught.value) == (
        f"{operation}({batch!r}): expected an iterable of blocks, got {type(batch).__qualname__}"
    )
    assert queue.get_all_free_blocks() == blocks


def test_a_queue_built_from_a_non_iterable_is_a_wrong_type() -> None:
    """FreeBlockQueue(3.5) raises WrongTypeError, as append_n(3.5) does."""
    with pytest.raises(WrongTypeError, match=r"^append_n\(3\.5\): expected an iterable of blocks"):
        FreeBlockQueue(3.5)  # type: ignore[arg-type]  # the point


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_an_iterator_s_own_type_error_is_raised_as_it_is(operation: str) -> None:
    """A TypeError the batch's iterator raises is the caller's own: it propagates unchanged."""
    failure = TypeError("the iterator's own")

    def blocks() -> Iterator[Block]:
        yield Block()
        raise failure

    queue: FreeBlockQueue[Block] = FreeBlockQueue([Block()])
    with pytest.raises(TypeError) as caught:
        getattr(queue, operation)(blocks())
    assert caught.value is failure
    assert len(queue) == 1


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_block_repeated_in_its_batch_is_named_as_repeated(operation: str) -> None:
    """A block twice in one batch is refused as repeated in the batch, not as a double free."""
    queue: FreeBlockQueue[Block] = FreeBlockQueue([Block()])
    repeated = Block()
    with pytest.raises(AlreadyInQueueError) as caught:
        getattr(queue, operation)([Block(), repeated, Block(), repeated])
    # Named as it was when refused: linked, by the batch itself.
    assert str(caught.value) == (
        f"{operation}(<Block at {id(repeated):#x}, linked>): it is repeated in the batch"
    )
    assert len(queue) == 1


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_a_block_linked_elsewhere_and_repeated_is_a_double_free(operation: str) -> None:
    """A block already linked, even if the batch repeats it, is refused as a double free."""
    other = FreeBlockQueue([Block()])
    linked = other.get_all_free_blocks()[0]
    queue: FreeBlockQueue[Block] = FreeBlockQueue([Block()])
    with pytest.raises(AlreadyInQueueError) as caught:
        getattr(queue, operation)([Block(), linked, linked])
    assert str(caught.value).endswith("it is already linked in a queue (a double free?)")


@pytest.mark.parametrize("operation", ["append_n", "prepend_n"])
def test_the_queue_s_own_first_block_is_a_double_free(operation: str) -> None:
    """A block of this queue, right beside where the batch goes, is a double free, not a repeat."""
    blocks = [Block(), Block()]
    queue: FreeBlockQueue[Block] = FreeBlockQueue(blocks)
    for block in blocks:
        with pytest.raises(AlreadyInQueueError) as caught:
            getattr(queue, operation)([block])
        assert str(caught.value).endswith("(a double free?)")
