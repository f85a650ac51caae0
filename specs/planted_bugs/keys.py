"""Key bugs: planted bugs in the prefix-cache keys (``verified_queue/kvcache/keys.py``).

Each is one function of the keys module copied with one realistic defect. The keys are plain
functions, so a bug is planted by :func:`planted`, which puts the defective function in the
module in place of the production one for the duration of a ``with`` block: the module's
other functions, and every caller that looks a function up on the module, then use it. They
are the bugs of kind ``"keys"`` in :data:`specs.planted_bugs.kvcache.CLIENT_CATALOGUE`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from verified_queue.kvcache import keys as keys_module
from verified_queue.kvcache.keys import (
    DEFAULT_KEY_FUNCTION,
    BlockHash,
    ExtraKey,
    ExtraKeys,
    KeyFunction,
    MultimodalInput,
)

__all__ = [
    "KeysBug",
    "encode_int_rounds_bytes_down",
    "encode_str_and_bytes_alike",
    "extra_keys_drop_lora_zero",
    "extra_keys_overlap_next_block",
    "planted",
    "request_keys_drop_lone_salt",
]


class KeysBug(NamedTuple):
    """A planted key bug: the keys module's function it replaces, and the replacement."""

    function: str
    replacement: Callable[..., Any]


@contextmanager
def planted(bug: KeysBug | None) -> Iterator[None]:
    """Run the ``with`` block with ``bug`` in the keys module (nothing for ``None``)."""
    if bug is None:
        yield
        return
    names = vars(keys_module)
    saved = names[bug.function]
    names[bug.function] = bug.replacement
    try:
        yield
    finally:
        names[bug.function] = saved


def encode_int_rounds_bytes_down(value: int) -> bytes:
    """``_encode_int`` with the byte count rounded for an unsigned value: no room for the sign.

    128, -129 and 2**63 need one more byte than their bits fill, so encoding them raises
    ``OverflowError``: a LoRA id of 128 or a token past 63 bits cannot be keyed.
    """
    # Two's complement in the fewest whole bytes that keep the sign bit.
    raw = value.to_bytes((value.bit_length() + 7) // 8, "little", signed=True)  # should be // 8 + 1
    return b"I" + keys_module._length(len(raw)) + raw


def encode_str_and_bytes_alike(value: object, out: list[bytes]) -> None:
    """``_encode_extra`` that tags ``str`` and ``bytes`` alike: ``"t"`` and ``b"t"`` collide.

    Two tenants salting with the text and the bytes of one word share every block.
    """
    if value is None:
        out.append(b"N")
    elif isinstance(value, int):  # bool too: True == 1 as a dictionary key, so one encoding
        out.append(keys_module._encode_int(value))
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out.append(b"S" + keys_module._length(len(raw)) + raw)
    elif isinstance(value, bytes):
        out.append(b"S" + keys_module._length(len(value)) + value)  # should tag bytes with B
    elif isinstance(value, tuple):
        out.append(b"T" + keys_module._length(len(value)))
        for item in value:
            keys_module._encode_extra(item, out)
    else:
        raise TypeError(
            f"an extra key must be an int, str, bytes, None or a tuple of them, "
            f"not {type(value).__name__}"
        )


def extra_keys_overlap_next_block(
    block_index: int,
    block_size: int,
    *,
    lora: str | int | None = None,
    mm_inputs: Sequence[MultimodalInput] = (),
    cache_salt: str | bytes | None = None,
) -> ExtraKeys | None:
    """``block_extra_keys`` whose overlap test takes a block's end as inside it (``<=``).

    An input starting exactly where the next block starts lands in this one's keys too, so
    a request with it misses the blocks before it that a request without it cached.
    """
    start = block_index * block_size
    end = start + block_size
    keys: list[ExtraKey] = []
    if lora is not None:
        keys.append(("lora", lora))
    for item in mm_inputs:
        if item.offset <= end and start < item.offset + item.length:  # should be <
            keys.append(("mm", item.identifier, item.offset - start))
    if cache_salt and block_index == 0:
        keys.append(("cache_salt", cache_salt))
    return tuple(keys) if keys else None


def extra_keys_drop_lora_zero(
    block_index: int,
    block_size: int,
    *,
    lora: str | int | None = None,
    mm_inputs: Sequence[MultimodalInput] = (),
    cache_salt: str | bytes | None = None,
) -> ExtraKeys | None:
    """``block_extra_keys`` testing ``lora`` for truth: adapter id 0 keys as no adapter."""
    start = block_index * block_size
    end = start + block_size
    keys: list[ExtraKey] = []
    if lora:  # should be: lora is not None
        keys.append(("lora", lora))
    for item in mm_inputs:
        if item.offset < end and start < item.offset + item.length:
            keys.append(("mm", item.identifier, item.offset - start))
    if cache_salt and block_index == 0:
        keys.append(("cache_salt", cache_salt))
    return tuple(keys) if keys else None


def request_keys_drop_lone_salt(
    token_ids: Sequence[int],
    block_size: int,
    key_function: KeyFunction = DEFAULT_KEY_FUNCTION,
    *,
    known: Sequence[BlockHash] = (),
    lora: str | int | None = None,
    mm_inputs: Sequence[MultimodalInput] = (),
    cache_salt: str | bytes | None = None,
) -> list[BlockHash]:
    """``hash_request_tokens`` whose shortcut for plain requests forgets the salt.

    A request with a salt and nothing else is keyed as unsalted: tenants share blocks.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, not {block_size}")
    keys = list(known)
    parent = keys[-1] if keys else None
    plain = lora is None and not mm_inputs  # should also require: not cache_salt
    for index in range(len(keys), len(token_ids) // block_size):
        start = index * block_size
        extra = (
            None
            if plain
            else keys_module.block_extra_keys(
                index, block_size, lora=lora, mm_inputs=mm_inputs, cache_salt=cache_salt
            )
        )
        parent = key_function(parent, token_ids[start : start + block_size], extra)
        keys.append(parent)
    return keys
