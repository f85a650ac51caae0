"""What a prefix-cache key must tell apart, said without computing a key.

A key function is right when two blocks get one key exactly when they stand for the same
thing. This module says what "the same thing" is, in plain tuples, from the rules of
:mod:`verified_queue.kvcache.keys`' docstrings and vLLM's, without calling it:

- :func:`logical_encoding`: what :func:`~verified_queue.kvcache.keys.encode_block` must keep
  apart: the parent's bytes (``None`` is the fixed root), the tokens, and the extra keys,
  where ``()`` and ``None`` both mean none and ``True`` is ``1`` (they are one key in a dict);
- :func:`logical_request_keys`: what the key of each full block of a request stands for: the
  LoRA adapter, the cache salt (an empty salt is none), every token up to the block's end,
  and for each block up to it the multimodal inputs that overlap it, in order, with their
  offsets from that block's start.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

__all__ = ["logical_encoding", "logical_request_keys"]


def _extra(value: object) -> Hashable:
    """An extra key as a plain value: tuples item by item, types kept apart by a tag."""
    if isinstance(value, tuple):
        return ("tuple", tuple(_extra(item) for item in value))
    if isinstance(value, bool):
        return ("int", int(value))
    return (type(value).__name__, value)


def logical_encoding(
    parent: bytes | None, root: bytes, tokens: Sequence[int], extra_keys: object
) -> Hashable:
    """What ``encode_block``'s input stands for; equal exactly when the encodings must be."""
    extra = None if not extra_keys else _extra(extra_keys)
    return (root if parent is None else bytes(parent), tuple(int(t) for t in tokens), extra)


def logical_request_keys(
    tokens: Sequence[int],
    block_size: int,
    *,
    lora: str | int | None = None,
    mm_inputs: Sequence[tuple[str, int, int]] = (),
    cache_salt: str | bytes | None = None,
) -> list[Hashable]:
    """What each full block's key of a request stands for, one value per full block."""
    salt = _extra(cache_salt) if cache_salt else None
    adapter = None if lora is None else _extra(lora)
    keys: list[Hashable] = []
    placed: list[tuple[tuple[str, int], ...]] = []
    for index in range(len(tokens) // block_size):
        start, end = index * block_size, (index + 1) * block_size
        placed.append(
            tuple(
                (identifier, offset - start)
                for identifier, offset, length in mm_inputs
                if start < offset + length and offset < end
            )
        )
        keys.append((adapter, salt, tuple(tokens[:end]), tuple(placed)))
    return keys
