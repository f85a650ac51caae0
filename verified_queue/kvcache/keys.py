"""Prefix-cache keys: what identifies a full KV-cache block, and how far that identification holds.

A full block's key chains its parent's key (the key of the block before it in
the request) with the block's own token ids and its *extra keys* (what else
shaped its KV values: a LoRA adapter, multimodal inputs, a tenant's cache
salt). Two blocks with equal keys are treated as interchangeable by the pool,
so a key function must never give two different prefixes one key: a request
would then be served KV values computed from someone else's prompt, which in
a shared engine leaks that prompt and corrupts the answer.

Two key functions, by name in :data:`KEY_FUNCTIONS`:

``"sha256"`` (the default, :func:`sha256_block_key`)
    SHA-256 over a canonical encoding of ``(parent key, token ids, extra
    keys)`` (:func:`encode_block`), keeping the whole 32-byte digest.
    *Guarantees*: two different prefixes (different tokens anywhere before or
    in the block, different extra keys, or a different cache salt) get the
    same key only through a SHA-256 collision. The encoding is injective, so
    no choice of inputs shares an encoding; the root (the parent of a first
    block) is fixed, so keys are the same in every process and may be shared
    between engines. *Does not guarantee*: isolation between tenants who send
    the same prompt with no salt (their blocks are *meant* to be shared; pass
    ``cache_salt`` to keep them apart), or secrecy of which prefixes are
    cached: a prefix-cache hit makes a request faster, and that timing side
    channel is out of scope here.

``"builtin"`` (:func:`builtin_hash_block_key`)
    Python's built-in ``hash`` of a tuple, kept as 8 bytes. Faster (see
    ``bench/keys.py``), and safe only when every request comes from one
    trusted tenant. Its 64-bit value is not collision resistant: CPython's
    tuple hash is an invertible mix of the items' hashes, and ints hash to
    themselves, so two token sequences with one key can be computed directly,
    whatever the seed (``tests/kvcache/test_keys.py`` builds such a pair and shows the
    wrong cache hit). The root is a per-process random seed (derived from
    ``PYTHONHASHSEED`` when that is set to a number, so processes that share
    it agree), which keeps keys from being precomputed across processes but
    does not stop the attack above.

>>> first = sha256_block_key(None, [1, 2, 3, 4])
>>> len(first)
32
>>> sha256_block_key(first, [5, 6, 7, 8]) != sha256_block_key(None, [5, 6, 7, 8])
True
>>> sha256_block_key(None, [1, 2, 3, 4], (("cache_salt", "tenant-a"),)) != first
True
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, NewType, TypeAlias

__all__ = [
    "DEFAULT_KEY_FUNCTION",
    "KEY_FUNCTIONS",
    "BlockHash",
    "ExtraKey",
    "ExtraKeys",
    "KeyFunction",
    "MultimodalInput",
    "block_extra_keys",
    "builtin_hash_block_key",
    "encode_block",
    "hash_block_tokens",
    "hash_request_tokens",
    "key_function_by_name",
    "sha256_block_key",
]

#: This module's frames are the library's (see ``verified_queue._trace_records``).
__trace_library__ = True

#: A full block's prefix-cache key: a digest of its parent's key, its tokens and its extra keys.
BlockHash = NewType("BlockHash", bytes)

#: One extra key: what besides the tokens shaped a block (ints, strings, bytes, nested tuples).
ExtraKey: TypeAlias = "int | str | bytes | tuple[ExtraKey, ...] | None"

#: A block's extra keys, e.g. ``(("lora", "sql-adapter"), ("cache_salt", "tenant-a"))``.
ExtraKeys: TypeAlias = "tuple[ExtraKey, ...]"

#: A function from ``(parent key or None, token ids, extra keys or None)`` to a block's key.
KeyFunction: TypeAlias = "Callable[[BlockHash | None, Sequence[int], ExtraKeys | None], BlockHash]"


class MultimodalInput(NamedTuple):
    """A multimodal input (an image, say) placed over ``length`` tokens from ``offset``."""

    identifier: str
    offset: int
    length: int


# --- the canonical encoding ---------------------------------------------------------------

_VERSION = b"verified_queue block key v1\x00"
_PREFIX_WITHOUT_EXTRA_KEYS = _VERSION + b"N"  # the encoding of None, as below
# Struct formats by (bytes before the parent, parent length, token count): building one
# packer per shape and reusing it keeps the encoding at a few hundred ns per block.
_PACKERS: dict[tuple[int, int, int], struct.Struct] = {}
_MAX_PACKERS = 256


def _length(count: int) -> bytes:
    return count.to_bytes(8, "little")


def _encode_int(value: int) -> bytes:
    # Two's complement in the fewest whole bytes that keep the sign bit.
    raw = value.to_bytes(value.bit_length() // 8 + 1, "little", signed=True)
    return b"I" + _length(len(raw)) + raw


def _encode_extra(value: object, out: list[bytes]) -> None:
    """Append the self-delimiting encoding of ``value`` (an :data:`ExtraKey`) to ``out``."""
    if value is None:
        out.append(b"N")
    elif isinstance(value, int):  # bool too: True == 1 as a dictionary key, so one encoding
        out.append(_encode_int(value))
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out.append(b"S" + _length(len(raw)) + raw)
    elif isinstance(value, bytes):
        out.append(b"B" + _length(len(value)) + value)
    elif isinstance(value, tuple):
        out.append(b"T" + _length(len(value)))
        for item in value:
            _encode_extra(item, out)
    else:
        raise TypeError(
            f"an extra key must be an int, str, bytes, None or a tuple of them, "
            f"not {type(value).__name__}"
        )


def _encode_tokens_one_by_one(token_ids: Sequence[int]) -> bytes:
    """Encode token ids that do not all fit in 64 bits, each as a length-prefixed int."""
    parts = [b"L", _length(len(token_ids))]
    for token in token_ids:
        if not isinstance(token, int):
            raise TypeError(f"a token id must be an int, not {type(token).__name__}")
        parts.append(_encode_int(token))
    return b"".join(parts)


def encode_block(
    parent: bytes, token_ids: Sequence[int], extra_keys: ExtraKeys | None = None
) -> bytes:
    """Return the canonical byte encoding of ``(parent, token_ids, extra_keys)``.

    Injective: every field is tagged and length-prefixed (never ``repr`` or
    plain concatenation), so two different inputs never share an encoding.
    The layout is a version string, the extra keys (nested, each item tagged
    by type and prefixed by its length), then ``B``, the parent's length and
    bytes, then ``Q``, the token count and the tokens as 64-bit little-endian
    integers; a sequence with a token outside 64 bits is written ``L``, count,
    then each token length-prefixed, so every sequence has exactly one form.
    Empty extra keys encode as ``None``: ``()`` and ``None`` both mean none.
    Raises ``TypeError`` for a token that is not an int, or an extra key of
    another type (floats, whose equality is not exact, are refused).

    Runtime complexity: O(len(token_ids) + size of extra_keys)

    >>> encode_block(b"", [1]) != encode_block(b"", [1], (("cache_salt", ""),))
    True
    >>> encode_block(b"", [1, 2], ()) == encode_block(b"", [1, 2], None)
    True
    """
    if extra_keys:
        parts = [_VERSION]
        _encode_extra(extra_keys, parts)
        prefix = b"".join(parts)
    else:
        prefix = _PREFIX_WITHOUT_EXTRA_KEYS
    shape = (len(prefix), len(parent), len(token_ids))
    packer = _PACKERS.get(shape)
    if packer is None:
        if len(_PACKERS) >= _MAX_PACKERS:
            _PACKERS.clear()  # extra keys of ever new lengths must not grow it without bound
        packer = struct.Struct(f"<{shape[0]}scQ{shape[1]}scQ{shape[2]}q")
        _PACKERS[shape] = packer
    try:
        # Unpacked into the call, so any sequence of ints works (bytes too: one token per byte).
        return packer.pack(prefix, b"B", len(parent), parent, b"Q", len(token_ids), *token_ids)
    except struct.error:
        pass  # a token outside 64 bits (or not an int: refused below, with a clear message)
    return b"".join(
        (prefix, b"B", _length(len(parent)), parent, _encode_tokens_one_by_one(token_ids))
    )


# --- the key functions ---------------------------------------------------------------------

#: The parent of every request's first block under SHA-256: fixed, so keys agree across processes.
SHA256_ROOT = BlockHash(hashlib.sha256(b"verified_queue prefix-cache root").digest())


def sha256_block_key(
    parent: BlockHash | None, token_ids: Sequence[int], extra_keys: ExtraKeys | None = None
) -> BlockHash:
    """Return SHA-256 of :func:`encode_block` of the block: the whole 32-byte digest.

    ``parent`` is ``None`` for a request's first block. Different prefixes
    share a key only through a SHA-256 collision (see the module docstring).

    Runtime complexity: O(len(token_ids) + size of extra_keys)

    >>> sha256_block_key(None, [1, 2]) == sha256_block_key(SHA256_ROOT, [1, 2])
    True
    >>> sha256_block_key(None, [1, 2]) == sha256_block_key(None, [2, 1])
    False
    """
    encoded = encode_block(SHA256_ROOT if parent is None else parent, token_ids, extra_keys)
    return BlockHash(hashlib.sha256(encoded).digest())


def _builtin_root() -> BlockHash:
    seed = os.environ.get("PYTHONHASHSEED", "random")
    if seed == "random":  # Python's own word for a random hash seed, as when unset
        return BlockHash(os.urandom(32))
    # Shared by every process started with this seed, whose str and bytes hashes agree too.
    return BlockHash(hashlib.sha256(b"verified_queue builtin root " + seed.encode()).digest())


#: The parent of every first block under the built-in hash: random per process (see above).
BUILTIN_ROOT = _builtin_root()


def builtin_hash_block_key(
    parent: BlockHash | None, token_ids: Sequence[int], extra_keys: ExtraKeys | None = None
) -> BlockHash:
    """Return Python's ``hash`` of ``(parent, extra_keys, *token_ids)`` as 8 bytes.

    Fast, and **not collision resistant**: for one trusted tenant only (see
    the module docstring). ``parent`` is ``None`` for a request's first block,
    which then chains from the per-process random :data:`BUILTIN_ROOT`.

    Runtime complexity: O(len(token_ids) + size of extra_keys)

    >>> key = builtin_hash_block_key(None, [1, 2])
    >>> len(key), key == builtin_hash_block_key(None, [1, 2])
    (8, True)
    """
    value = hash((BUILTIN_ROOT if parent is None else parent, extra_keys or None, *token_ids))
    return BlockHash(value.to_bytes(8, "little", signed=True))


#: The key functions by name; the pool's default is ``"sha256"``.
KEY_FUNCTIONS: Mapping[str, KeyFunction] = {
    "sha256": sha256_block_key,
    "builtin": builtin_hash_block_key,
}

#: The key function used when none is named: SHA-256, full digest.
DEFAULT_KEY_FUNCTION: KeyFunction = sha256_block_key


def key_function_by_name(name: str) -> KeyFunction:
    """Return the key function called ``name`` in :data:`KEY_FUNCTIONS`.

    Raises ``ValueError`` naming the choices for an unknown name.

    Runtime complexity: O(1)

    >>> key_function_by_name("sha256") is sha256_block_key
    True
    """
    try:
        return KEY_FUNCTIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown key function {name!r}; expected one of {sorted(KEY_FUNCTIONS)}"
        ) from None


# --- keys of a request ---------------------------------------------------------------------


def block_extra_keys(
    block_index: int,
    block_size: int,
    *,
    lora: str | int | None = None,
    mm_inputs: Sequence[MultimodalInput] = (),
    cache_salt: str | bytes | None = None,
) -> ExtraKeys | None:
    """Return the extra keys of block ``block_index`` of a request, as vLLM forms them.

    ``lora`` (the adapter's name or id) goes into every block; each
    multimodal input into the blocks it overlaps, with its offset from the
    block's start; ``cache_salt`` into the first block only, which the chain
    carries into every later key. ``None`` when there is nothing to add.

    Runtime complexity: O(len(mm_inputs))

    >>> block_extra_keys(0, 4, lora="sql", cache_salt="tenant-a")
    (('lora', 'sql'), ('cache_salt', 'tenant-a'))
    >>> block_extra_keys(1, 4, mm_inputs=[MultimodalInput("img-1", 2, 5)])
    (('mm', 'img-1', -2),)
    >>> block_extra_keys(1, 4, cache_salt="tenant-a") is None
    True
    """
    start = block_index * block_size
    end = start + block_size
    keys: list[ExtraKey] = []
    if lora is not None:
        keys.append(("lora", lora))
    for item in mm_inputs:
        if item.offset < end and start < item.offset + item.length:
            keys.append(("mm", item.identifier, item.offset - start))
    if cache_salt and block_index == 0:
        keys.append(("cache_salt", cache_salt))
    return tuple(keys) if keys else None


def hash_block_tokens(
    parent: BlockHash | None,
    token_ids: Sequence[int],
    key_function: KeyFunction = DEFAULT_KEY_FUNCTION,
    extra_keys: ExtraKeys | None = None,
) -> BlockHash:
    """Return the key of a full block of ``token_ids`` that follows ``parent``.

    ``parent`` is ``None`` for a request's first block.

    Runtime complexity: O(len(token_ids))

    >>> first = hash_block_tokens(None, [1, 2])
    >>> hash_block_tokens(first, [3, 4]) == hash_block_tokens(None, [3, 4])
    False
    """
    return key_function(parent, token_ids, extra_keys)


def hash_request_tokens(
    token_ids: Sequence[int],
    block_size: int,
    key_function: KeyFunction = DEFAULT_KEY_FUNCTION,
    *,
    known: Sequence[BlockHash] = (),
    lora: str | int | None = None,
    mm_inputs: Sequence[MultimodalInput] = (),
    cache_salt: str | bytes | None = None,
) -> list[BlockHash]:
    """Return the chained keys of every full block of ``token_ids``.

    The keys in ``known`` (those of the first ``len(known)`` blocks, computed
    earlier with the same arguments) are reused, so a decoding request hashes
    each block once. A trailing partial block has no key. ``lora``,
    ``mm_inputs`` and ``cache_salt`` become extra keys (:func:`block_extra_keys`):
    the same tokens under another salt share no key.

    Runtime complexity: O(len(token_ids) - len(known) * block_size)

    >>> keys = hash_request_tokens([1, 2, 3, 4, 5], block_size=2)
    >>> len(keys)
    2
    >>> salted = hash_request_tokens([1, 2, 3, 4, 5], block_size=2, cache_salt="tenant-b")
    >>> any(key in keys for key in salted)
    False
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, not {block_size}")
    keys = list(known)
    parent = keys[-1] if keys else None
    plain = lora is None and not mm_inputs and not cache_salt
    for index in range(len(keys), len(token_ids) // block_size):
        start = index * block_size
        extra = (
            None
            if plain
            else block_extra_keys(
                index, block_size, lora=lora, mm_inputs=mm_inputs, cache_salt=cache_salt
            )
        )
        parent = key_function(parent, token_ids[start : start + block_size], extra)
        keys.append(parent)
    return keys
