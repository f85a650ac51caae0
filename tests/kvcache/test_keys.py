"""Prefix-cache keys: the canonical encoding, chaining, extra keys, and collision attacks."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from collections.abc import Sequence

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from verified_queue.kvcache import keys as keys_module
from verified_queue.kvcache.block import KVCacheBlock
from verified_queue.kvcache.keys import (
    BUILTIN_ROOT,
    DEFAULT_KEY_FUNCTION,
    KEY_FUNCTIONS,
    SHA256_ROOT,
    BlockHash,
    ExtraKey,
    ExtraKeys,
    KeyFunction,
    MultimodalInput,
    _builtin_root,
    block_extra_keys,
    builtin_hash_block_key,
    encode_block,
    hash_block_tokens,
    hash_request_tokens,
    key_function_by_name,
    sha256_block_key,
)
from verified_queue.kvcache.pool import BlockPool

BLOCK_SIZE = 4

# --- a decoder for the encoding: a round trip proves the encoding injective --------------


class Reader:
    """Read the fields of an encoding back, front to back."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def take(self, count: int) -> bytes:
        """Return the next ``count`` bytes; fail if fewer are left."""
        chunk = self.data[self.position : self.position + count]
        assert len(chunk) == count, "the encoding ended early"
        self.position += count
        return chunk

    def length(self) -> int:
        """Read an 8-byte little-endian length."""
        return int.from_bytes(self.take(8), "little")

    def integer(self) -> int:
        """Read a tagged, length-prefixed two's-complement integer."""
        assert self.take(1) == b"I"
        return int.from_bytes(self.take(self.length()), "little", signed=True)

    def extra(self) -> ExtraKey:
        """Read one tagged extra key."""
        tag = self.take(1)
        if tag == b"N":
            return None
        if tag == b"I":
            self.position -= 1
            return self.integer()
        if tag == b"S":
            return self.take(self.length()).decode("utf-8")
        if tag == b"B":
            return self.take(self.length())
        assert tag == b"T", f"unknown tag {tag!r}"
        return tuple(self.extra() for _ in range(self.length()))


def decode_block(data: bytes) -> tuple[bytes, list[int], ExtraKeys | None]:
    """Invert encode_block: return the parent, the token ids and the extra keys."""
    reader = Reader(data)
    version = b"verified_queue block key v1\x00"
    assert reader.take(len(version)) == version
    extra = reader.extra()
    assert extra is None or isinstance(extra, tuple)
    assert reader.take(1) == b"B"
    parent = reader.take(reader.length())
    tag = reader.take(1)
    count = reader.length()
    if tag == b"Q":
        tokens = [int.from_bytes(reader.take(8), "little", signed=True) for _ in range(count)]
    else:
        assert tag == b"L"
        tokens = [reader.integer() for _ in range(count)]
    assert reader.position == len(data), "trailing bytes"
    return parent, tokens, extra


token_ids = st.lists(
    st.one_of(
        st.integers(-(2**63), 2**63 - 1),
        st.integers(),  # beyond 64 bits too: the one-by-one form
        st.sampled_from([2**63, -(2**63) - 1, 0, -1]),
    ),
    max_size=12,
)
extra_keys: st.SearchStrategy[ExtraKey] = st.recursive(
    st.none() | st.integers() | st.text(max_size=6) | st.binary(max_size=6),
    lambda children: st.lists(children, max_size=3).map(tuple),
    max_leaves=8,
)
extra_key_tuples = st.none() | st.lists(extra_keys, max_size=3).map(tuple)


@given(st.binary(max_size=40), token_ids, extra_key_tuples)
def test_the_encoding_decodes_back_to_its_input(
    parent: bytes, tokens: list[int], extra: ExtraKeys | None
) -> None:
    """decode(encode(x)) == x for every input, so no two different inputs share an encoding."""
    assert decode_block(encode_block(parent, tokens, extra)) == (parent, tokens, extra or None)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # The boundary between parent and tokens moves.
        ((b"\x01", [2], None), (b"", [1, 2], None)),
        # A token moves into the extra keys.
        ((b"", [1, 2], None), (b"", [1], ((2,),))),
        # A string and bytes with the same content, a nested and a flat tuple.
        ((b"", [1], (("a",),)), (b"", [1], ((b"a",),))),
        ((b"", [1], ((("a", "b"),),)), (b"", [1], (("a", "b"),))),
        # One token past 64 bits against the same value's low bits.
        ((b"", [2**64 + 5], None), (b"", [5], None)),
        # Concatenation of strings would merge these.
        ((b"", [], (("ab", "c"),)), (b"", [], (("a", "bc"),))),
    ],
)
def test_inputs_that_naive_encodings_confuse_stay_apart(
    first: tuple[bytes, list[int], ExtraKeys | None],
    second: tuple[bytes, list[int], ExtraKeys | None],
) -> None:
    """Pairs that repr-free concatenation would merge get different encodings and keys."""
    assert encode_block(*first) != encode_block(*second)
    assert sha256_block_key(BlockHash(first[0]), first[1], first[2]) != sha256_block_key(
        BlockHash(second[0]), second[1], second[2]
    )


def test_the_encoding_stays_exact_for_more_shapes_than_it_caches() -> None:
    """Past the bound on cached struct formats the cache is refilled, and keys do not change."""
    parent = BlockHash(bytes(32))
    shapes = range(300)  # one packing format per token count
    first = [encode_block(parent, list(range(count))) for count in shapes]
    again = [encode_block(parent, list(range(count))) for count in shapes]
    assert first == again
    assert [decode_block(data)[1] for data in first] == [list(range(count)) for count in shapes]


def test_no_extra_keys_is_one_encoding_and_bytes_are_one_token_per_byte() -> None:
    """None and () mean no extra keys; a bytes object is a sequence of small token ids."""
    assert encode_block(b"p", [1, 2], ()) == encode_block(b"p", [1, 2], None)
    assert encode_block(b"p", b"\x00\x07") == encode_block(b"p", [0, 7])
    assert encode_block(b"p", (True, 2)) == encode_block(b"p", [1, 2])  # True == 1 as a key


@pytest.mark.parametrize(
    ("tokens", "extra", "message"),
    [
        ([1, 2.0], None, "token id must be an int, not float"),
        ([2**70, "x"], None, "token id must be an int, not str"),
        ([1], ((1.5,),), "extra key must be an int, str, bytes, None or a tuple"),
        ([1], (["lora"],), "not list"),
    ],
)
def test_values_without_an_exact_encoding_are_refused(
    tokens: list[object], extra: object, message: str
) -> None:
    """A token that is not an int, or an extra key of another type, raises TypeError."""
    with pytest.raises(TypeError, match=message):
        encode_block(b"", tokens, extra)  # type: ignore[arg-type]  # wrong types on purpose


# --- the key functions -----------------------------------------------------------------------


def test_the_default_is_sha256_with_the_whole_digest() -> None:
    """The default key function is SHA-256 and keeps all 32 bytes; builtin keeps 8."""
    assert DEFAULT_KEY_FUNCTION is sha256_block_key is key_function_by_name("sha256")
    assert key_function_by_name("builtin") is builtin_hash_block_key
    assert sorted(KEY_FUNCTIONS) == ["builtin", "sha256"]
    assert len(sha256_block_key(None, [1, 2, 3, 4])) == 32
    assert len(builtin_hash_block_key(None, [1, 2, 3, 4])) == 8
    assert len(SHA256_ROOT) == len(BUILTIN_ROOT) == 32
    with pytest.raises(ValueError, match=r"unknown key function 'md5'.*\['builtin', 'sha256'\]"):
        key_function_by_name("md5")


@pytest.mark.parametrize("key_function", list(KEY_FUNCTIONS.values()), ids=list(KEY_FUNCTIONS))
def test_keys_chain_through_the_parent(key_function: KeyFunction) -> None:
    """A block's key depends on every token before it, not only on its own tokens."""
    first = hash_block_tokens(None, [1, 2], key_function)
    assert first == key_function(None, [1, 2], None)
    after_first = hash_block_tokens(first, [3, 4], key_function)
    after_other = hash_block_tokens(
        hash_block_tokens(None, [9, 9], key_function), [3, 4], key_function
    )
    assert after_first != after_other
    assert hash_request_tokens([1, 2, 3, 4, 5], 2, key_function) == [first, after_first]


def test_hash_request_tokens_reuses_known_keys_and_skips_the_partial_block() -> None:
    """Known keys are kept as given and only the blocks after them are hashed."""
    calls: list[Sequence[int]] = []

    def counting(
        parent: BlockHash | None, tokens: Sequence[int], extra: ExtraKeys | None
    ) -> BlockHash:
        calls.append(tokens)
        return sha256_block_key(parent, tokens, extra)

    known = hash_request_tokens([1, 2, 3, 4], 2, counting)
    assert len(calls) == 2
    extended = hash_request_tokens([1, 2, 3, 4, 5, 6, 7], 2, counting, known=known)
    assert len(calls) == 3
    assert extended[:2] == known
    assert extended == hash_request_tokens([1, 2, 3, 4, 5, 6, 7], 2)
    assert hash_request_tokens([1, 2, 3], 4) == []
    with pytest.raises(ValueError, match="block_size"):
        hash_request_tokens([1], 0)


def test_sha256_keys_are_the_same_in_every_process_and_builtin_roots_are_not() -> None:
    """SHA-256 keys are reproducible across processes; the builtin root is random per process."""
    program = (
        "from verified_queue.kvcache.keys import BUILTIN_ROOT, sha256_block_key\n"
        "print(sha256_block_key(None, [1, 2, 3]).hex(), BUILTIN_ROOT.hex())"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}

    def run(**extra: str) -> list[str]:
        completed = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            check=True,
            env={**env, **extra},
            timeout=60,
        )
        return completed.stdout.split()

    first, second = run(), run()
    assert first[0] == second[0] == sha256_block_key(None, [1, 2, 3]).hex()
    assert first[1] != second[1]
    assert run(PYTHONHASHSEED="random")[1] != run(PYTHONHASHSEED="random")[1]
    # Processes that share PYTHONHASHSEED share the builtin root (and Python's str hashes).
    assert run(PYTHONHASHSEED="7")[1] == run(PYTHONHASHSEED="7")[1]


# --- extra keys --------------------------------------------------------------------------------


def test_extra_keys_follow_vllms_placement() -> None:
    """LoRA goes into every block, an image into the blocks it overlaps, the salt into the first."""
    image = MultimodalInput("img-7", offset=3, length=6)  # tokens 3..8: blocks 0, 1 and 2
    keys = [
        block_extra_keys(index, BLOCK_SIZE, lora="sql", mm_inputs=[image], cache_salt="s")
        for index in range(4)
    ]
    assert keys == [
        (("lora", "sql"), ("mm", "img-7", 3), ("cache_salt", "s")),
        (("lora", "sql"), ("mm", "img-7", -1)),
        (("lora", "sql"), ("mm", "img-7", -5)),
        (("lora", "sql"),),
    ]
    assert block_extra_keys(0, BLOCK_SIZE) is None


@pytest.mark.parametrize(
    "context",
    [
        {"cache_salt": "tenant-b"},
        {"lora": "adapter-1"},
        {"lora": 2},
        {"mm_inputs": [MultimodalInput("img-1", 0, 4)]},
    ],
)
def test_extra_keys_keep_identical_prompts_apart(context: dict[str, object]) -> None:
    """The same tokens under another salt, adapter or image share no key with the plain prompt."""
    prompt = list(range(3 * BLOCK_SIZE))
    plain = hash_request_tokens(prompt, BLOCK_SIZE)
    other = hash_request_tokens(prompt, BLOCK_SIZE, **context)  # type: ignore[arg-type]  # keyword options
    assert len(other) == 3
    assert not set(plain) & set(other)
    assert other == hash_request_tokens(prompt, BLOCK_SIZE, **context)  # type: ignore[arg-type]


def test_a_cache_salt_keeps_two_tenants_apart_in_the_pool() -> None:
    """Two tenants with different salts and the same prompt never hit each other's blocks."""
    pool = BlockPool(8)
    prompt = list(range(2 * BLOCK_SIZE + 1))
    keys_a = hash_request_tokens(prompt, BLOCK_SIZE, cache_salt="tenant-a")
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks, keys_a, 0, 2)
    keys_b = hash_request_tokens(prompt, BLOCK_SIZE, cache_salt="tenant-b")
    assert pool.find_longest_cache_hit(keys_b) == []
    assert pool.find_longest_cache_hit(keys_a) == blocks[:2]
    # Without a salt the same prompt is meant to be shared.
    assert pool.find_longest_cache_hit(hash_request_tokens(prompt, BLOCK_SIZE)) == []


# --- the property: different token sequences never share a key -------------------------------


@given(
    st.lists(st.integers(0, 3), max_size=14),
    st.lists(st.integers(0, 3), max_size=14),
    st.integers(1, 4),
)
def test_different_prefixes_never_share_a_key(
    first: list[int], second: list[int], size: int
) -> None:
    """Under the default, block i of two requests has one key exactly when their prefixes agree."""
    assume(first != second)
    keys_first = hash_request_tokens(first, size)
    keys_second = hash_request_tokens(second, size)
    for index, (key_first, key_second) in enumerate(zip(keys_first, keys_second, strict=False)):
        same_prefix = first[: (index + 1) * size] == second[: (index + 1) * size]
        assert (key_first == key_second) == same_prefix
    # And no key of one request is the key of another block of the other.
    shared = set(keys_first) & set(keys_second)
    assert all(keys_first.index(key) == keys_second.index(key) for key in shared)


# --- attacks: collisions the weak functions allow and the default does not ------------------

# CPython's tuple hash (3.8 and later, 64-bit): acc = rotl31(acc + lane * P2) * P1 per item,
# where an int's lane is the int itself. Both steps are invertible, so a difference placed
# in two adjacent tokens can be made to cancel.
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_MASK = 2**64 - 1


def builtin_collision() -> tuple[tuple[int, int], tuple[int, int]]:
    """Return two different token pairs that collide in any tuple hash, whatever precedes them.

    Choose token differences so that the first pair's states differ by ``m << 33`` before
    the rotation (``m`` after it, with no carry unless the unknown state's top 31 bits are
    all ones) and the second token cancels ``m`` times P1 exactly.
    """
    limit = 2**61 - 2  # an int's hash is itself below the Mersenne prime 2**61 - 1

    def signed(value: int) -> int:
        return value - 2**64 if value >> 63 else value

    inverse = pow(_P2, -1, 2**64)
    for m in itertools.count(1):
        first_delta = signed(inverse * (m << 33) & _MASK)
        second_delta = signed(_P1 * m * inverse & _MASK)
        if abs(first_delta) + 1000 < limit and abs(second_delta) + 2000 < limit:
            return (1000 + first_delta, 2000), (1000, 2000 + second_delta)
    raise AssertionError("unreachable")


def admit_prompt(pool: BlockPool, keys: list[BlockHash]) -> list[KVCacheBlock]:
    """Cache a prompt's full blocks as a request would, and return them."""
    blocks = pool.get_new_blocks(len(keys))
    pool.cache_full_blocks(blocks, keys, 0, len(keys))
    return blocks


@pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.hash_info.width != 64,
    reason="the construction inverts CPython's 64-bit tuple hash",
)
def test_a_constructed_builtin_collision_gives_a_wrong_hit_and_sha256_holds() -> None:
    """Two different prompts share all builtin keys, whatever the seed; SHA-256 keeps them apart."""
    (a1, a2), (b1, b2) = builtin_collision()
    suffix = [7, 7, 7, 7]
    victim = [11, 12, a1, a2, *suffix]  # the first tenant's prompt, two blocks
    attacker = [11, 12, b1, b2, *suffix]  # another prompt: tokens 2 and 3 differ
    assert victim != attacker
    # The collision holds under any parent (the per-process random root does not help).
    for parent in (None, BlockHash(os.urandom(32)), BlockHash(b"")):
        assert builtin_hash_block_key(parent, victim[:4]) == builtin_hash_block_key(
            parent, attacker[:4]
        )
    # (a) The builtin keys collide through the chain: the attacker's prompt is served the
    # victim's KV blocks, computed from tokens it never sent.
    weak = KEY_FUNCTIONS["builtin"]
    pool = BlockPool(8)
    victim_blocks = admit_prompt(pool, hash_request_tokens(victim, BLOCK_SIZE, weak))
    wrong_hit = pool.find_longest_cache_hit(hash_request_tokens(attacker, BLOCK_SIZE, weak))
    assert wrong_hit == victim_blocks
    # (b) Under the default the same prompts have different keys and there is no hit.
    pool = BlockPool(8)
    victim_keys = hash_request_tokens(victim, BLOCK_SIZE)
    attacker_keys = hash_request_tokens(attacker, BLOCK_SIZE)
    assert not set(victim_keys) & set(attacker_keys)
    admit_prompt(pool, victim_keys)
    assert pool.find_longest_cache_hit(attacker_keys) == []


def truncated_sha256(bits: int) -> KeyFunction:
    """Return SHA-256 keys cut to ``bits`` bits: the old scheme's mistake, small enough to break."""

    def key(parent: BlockHash | None, tokens: Sequence[int], extra: ExtraKeys | None) -> BlockHash:
        return BlockHash(sha256_block_key(parent, tokens, extra)[: bits // 8])

    return key


def test_a_birthday_search_breaks_truncated_keys_and_not_the_full_digest() -> None:
    """A birthday search finds two first blocks with one 32-bit key; the full digests differ."""
    weak = truncated_sha256(32)
    seen: dict[BlockHash, list[int]] = {}
    for start in itertools.count():
        tokens = [start, 1, 2, 3]
        key = weak(None, tokens, None)
        if key in seen:
            break
        seen[key] = tokens
    victim = [*seen[key], 9, 9, 9, 9]
    attacker = [*tokens, 9, 9, 9, 9]
    assert victim != attacker
    pool = BlockPool(6)
    victim_blocks = admit_prompt(pool, hash_request_tokens(victim, BLOCK_SIZE, weak))
    assert pool.find_longest_cache_hit(hash_request_tokens(attacker, BLOCK_SIZE, weak)) == (
        victim_blocks
    )
    pool = BlockPool(6)
    admit_prompt(pool, hash_request_tokens(victim, BLOCK_SIZE))
    assert pool.find_longest_cache_hit(hash_request_tokens(attacker, BLOCK_SIZE)) == []


def test_builtin_root_follows_the_hash_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A numeric seed gives its own fixed root; "random" or no seed gives fresh 32 bytes."""
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    expected = hashlib.sha256(b"verified_queue builtin root 7").digest()
    assert _builtin_root() == expected
    monkeypatch.setenv("PYTHONHASHSEED", "8")
    assert _builtin_root() != expected
    for seed in ("random", None):
        if seed is None:
            monkeypatch.delenv("PYTHONHASHSEED")
        else:
            monkeypatch.setenv("PYTHONHASHSEED", seed)
        first, second = _builtin_root(), _builtin_root()
        assert len(first) == 32
        assert first != second


def test_packers_are_reused_per_shape_and_bounded() -> None:
    """One packer per encoding shape, reused by later calls, and never more than the bound."""
    keys_module._PACKERS.clear()
    encode_block(b"p", [1, 2])
    ((shape, packer),) = keys_module._PACKERS.items()
    encode_block(b"q", [3, 4])
    assert list(keys_module._PACKERS.items()) == [(shape, packer)]
    for length in range(keys_module._MAX_PACKERS + 5):
        encode_block(b"", [0] * length)
        assert len(keys_module._PACKERS) <= keys_module._MAX_PACKERS
