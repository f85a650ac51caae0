"""Distinct inputs give distinct keys, and equal inputs equal keys, over every part of a key.

A key stands for a parent, the block's tokens and its extra keys (LoRA, multimodal inputs and
their offsets, cache salt). :mod:`specs.key_model` says, without computing a key, when two
inputs stand for the same thing; here the SHA-256 key function and its encoding must agree
with it both ways: by a Hypothesis property over every kind of value each part may take, and
by enumerating every small input. (The built-in key function is not collision resistant by
design and is left out.)
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from specs.key_model import logical_encoding, logical_request_keys
from verified_queue.kvcache import keys as keys_module
from verified_queue.kvcache.keys import SHA256_ROOT, MultimodalInput

BLOCK_SIZE = 2

#: Token ids of every size class: small, negative, at the 64-bit edges and past them.
TOKEN_VALUES = [0, 1, -1, 255, 256, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64]
#: Parents: the first block's (None, the same as the root), the root, other bytes of any length.
PARENTS: list[bytes | None] = [None, SHA256_ROOT, b"", b"\x00", b"B", b"\x00" * 32]
#: Extra keys of every kind: none, ints at byte edges, strings and bytes alike, nesting.
EXTRAS: list[Any] = [
    None,
    (),
    (0,),
    (True,),
    (1,),
    (127,),
    (128,),
    (-128,),
    (-129,),
    (255,),
    (2**63,),
    ("",),
    (b"",),
    ("a",),
    (b"a",),
    (None,),
    ((),),
    ((0,),),
    (0, 0),
    ("S", ""),
    ("", "S"),
    (("lora", "a"),),
    (("lora", 1),),
    (("cache_salt", "t"),),
    (("cache_salt", b"t"),),
]
#: What shapes a request's keys besides its tokens, one list per part.
LORAS: list[str | int | None] = [None, "", "a", "1", 0, 1, 128, -129]
SALTS: list[str | bytes | None] = [None, "", b"", "t", b"t"]
PLACEMENTS: list[tuple[tuple[str, int, int], ...]] = [
    (),
    (("i", 0, 1),),
    (("i", 1, 1),),
    (("i", 2, 1),),
    (("i", 1, 2),),
    (("j", 1, 2),),
    (("i", 0, 4), ("j", 3, 1)),
    (("j", 3, 1), ("i", 0, 4)),
]

# Small alphabets, so that drawn inputs often mean the same thing or differ in one part only:
# both directions of "equal keys exactly when equal meanings" get exercised.
extra_leaves = st.sampled_from(
    [None, 0, 1, True, -1, 127, 128, -129, 2**63, "", "a", "S", b"", b"a", b"S"]
)
extra_values = st.recursive(
    extra_leaves,
    lambda inner: st.tuples(inner) | st.tuples(inner, inner) | st.tuples(),
    max_leaves=4,
)
token_lists = st.lists(st.sampled_from([0, 1]) | st.sampled_from(TOKEN_VALUES), max_size=3)
#: Prompts that share prefixes, and now and then one drawn freely.
prompts = st.sampled_from([(1, 2, 1, 2), (1, 2, 1), (1, 2), (1, 2, 2**63, 1)]) | st.lists(
    st.sampled_from([1, 2, 2**63]), max_size=5
).map(tuple)


def _tokens_as(tokens: list[int], kind: int) -> Sequence[int]:
    """The same tokens as a list, a tuple or, where they fit, bytes (one token per byte)."""
    if kind == 1:
        return tuple(tokens)
    if kind == 2 and all(0 <= token < 256 for token in tokens):
        return bytes(tokens)
    return tokens


def assert_keys_match_meanings(pairs: list[tuple[Hashable, bytes]]) -> None:
    """Each key belongs to exactly one meaning and each meaning has exactly one key."""
    key_of: dict[Hashable, bytes] = {}
    meaning_of: dict[bytes, Hashable] = {}
    for meaning, key in pairs:
        assert key_of.setdefault(meaning, key) == key, f"{meaning!r} got two keys"
        assert meaning_of.setdefault(key, meaning) == meaning, (
            f"{meaning!r} and {meaning_of[key]!r} share a key"
        )


def block_pairs(
    parent: bytes | None, tokens: Sequence[int], extra: Any
) -> list[tuple[Hashable, bytes]]:
    """The meaning of one block input with its encoding and with its SHA-256 key."""
    meaning = logical_encoding(parent, SHA256_ROOT, tokens, extra)
    root = SHA256_ROOT if parent is None else parent
    return [
        (("encoding", meaning), keys_module.encode_block(root, tokens, extra)),
        (
            ("key", meaning),
            keys_module.sha256_block_key(
                None if parent is None else keys_module.BlockHash(parent), tokens, extra
            ),
        ),
    ]


def request_pairs(
    tokens: Sequence[int],
    lora: str | int | None,
    salt: str | bytes | None,
    placement: tuple[tuple[str, int, int], ...],
) -> list[tuple[Hashable, bytes]]:
    """The meaning of each full block of a request with its key."""
    keys = keys_module.hash_request_tokens(
        tokens,
        BLOCK_SIZE,
        lora=lora,
        mm_inputs=[MultimodalInput(*item) for item in placement],
        cache_salt=salt,
    )
    meanings = logical_request_keys(
        tokens, BLOCK_SIZE, lora=lora, mm_inputs=placement, cache_salt=salt
    )
    assert len(keys) == len(meanings)
    return list(zip(meanings, keys, strict=True))


#: A block input: parent, tokens, how the tokens are passed (list, tuple, bytes), extra keys.
block_inputs = st.tuples(st.sampled_from(PARENTS), token_lists, st.integers(0, 2), extra_values)
#: A request: prompt, LoRA id, cache salt, multimodal placement.
request_inputs = st.tuples(
    prompts,
    st.sampled_from([None, None, *LORAS]),
    st.sampled_from([None, None, *SALTS]),
    st.sampled_from([(), (), *PLACEMENTS]),
)


def variants(base: tuple[Any, ...], changes: list[tuple[int, tuple[Any, ...]]]) -> list[Any]:
    """``base``, and for each change a copy of it with one part taken from another input."""
    out = [base]
    for part, other in changes:
        varied = list(base)
        varied[part % len(base)] = other[part % len(base)]
        out.append(tuple(varied))
    return out


#: The properties' runs in the default test run; the bug matrix passes a derandomized one.
PROPERTY_RUN = settings(max_examples=300, deadline=None)


def block_property(run: settings = PROPERTY_RUN) -> Callable[[], None]:
    """The block-input property as a Hypothesis test run with ``run``."""

    @run
    @given(
        block_inputs,
        st.lists(st.tuples(st.integers(0, 3), block_inputs), min_size=1, max_size=6),
    )
    def keys_tell_inputs_apart(
        base: tuple[bytes | None, list[int], int, Any],
        changes: list[tuple[int, tuple[Any, ...]]],
    ) -> None:
        pairs: list[tuple[Hashable, bytes]] = []
        for parent, tokens, kind, extra in variants(base, changes):
            pairs += block_pairs(parent, _tokens_as(tokens, kind), extra)
            pairs += block_pairs(parent, _tokens_as(tokens, kind), (extra,))
        assert_keys_match_meanings(pairs)

    return keys_tell_inputs_apart


def request_property(run: settings = PROPERTY_RUN) -> Callable[[], None]:
    """The request property as a Hypothesis test run with ``run``."""

    @run
    @given(
        request_inputs,
        st.lists(st.tuples(st.integers(0, 3), request_inputs), min_size=1, max_size=6),
    )
    def keys_tell_prefixes_apart(
        base: tuple[tuple[int, ...], str | int | None, str | bytes | None, Any],
        changes: list[tuple[int, tuple[Any, ...]]],
    ) -> None:
        pairs: list[tuple[Hashable, bytes]] = []
        for tokens, lora, salt, placement in variants(base, changes):
            pairs += request_pairs(tokens, lora, salt, placement)
        assert_keys_match_meanings(pairs)

    return keys_tell_prefixes_apart


def test_block_keys_tell_inputs_apart() -> None:
    """Encodings and keys of inputs that differ in one part are equal exactly when meanings are."""
    block_property()()


def test_request_keys_tell_prefixes_apart() -> None:
    """Keys of requests that differ in one part are equal exactly when their prefixes are."""
    request_property()()


def test_every_small_block_input_has_its_own_key() -> None:
    """Every parent, token list of up to 2 tokens and extra key above: keys match meanings."""
    pairs: list[tuple[Hashable, bytes]] = []
    token_lists = [
        list(tokens) for size in range(3) for tokens in itertools.product(TOKEN_VALUES, repeat=size)
    ]
    for parent, tokens, extra in itertools.product(PARENTS, token_lists, EXTRAS):
        pairs += block_pairs(parent, tokens, extra)
    assert len(pairs) == 2 * len(PARENTS) * 111 * len(EXTRAS)
    assert_keys_match_meanings(pairs)


def test_every_small_request_has_its_own_keys() -> None:
    """Every prompt of up to 4 tokens of 1 and 2 under every LoRA, salt and placement above."""
    pairs: list[tuple[Hashable, bytes]] = []
    prompts = [
        list(tokens) for size in range(5) for tokens in itertools.product([1, 2], repeat=size)
    ]
    for tokens, lora, salt, placement in itertools.product(prompts, LORAS, SALTS, PLACEMENTS):
        pairs += request_pairs(tokens, lora, salt, placement)
    # Fewer meanings than blocks: equal prefixes (an empty salt is none, an input that misses a
    # block leaves it alone) must get equal keys, not only different ones different keys.
    assert (len(pairs), len({meaning for meaning, _key in pairs})) == (14_080, 3_456)
    assert_keys_match_meanings(pairs)


def test_encoding_and_keys_are_pinned() -> None:
    """The encoding and the keys are a format shared between processes: these bytes never move."""
    inputs: list[tuple[bytes, list[int], Any]] = [
        (b"", [], None),
        (b"p", [1, -1, 2**63 - 1], None),
        (b"p", [2**63, -(2**64)], None),
        (
            b"\x00" * 32,
            [7],
            (("lora", "a"), ("mm", "i", -2), ("cache_salt", b"t"), 128, -129, None, ()),
        ),
    ]
    encodings = b"".join(keys_module.encode_block(*item) for item in inputs)
    assert hashlib.sha256(encodings).hexdigest() == (
        "7e52e36b29a1045e92cb1d8f7a271809c10ac8bc5cb9748bfccd7b2cd38c5403"
    )
    request = keys_module.hash_request_tokens([1, 2, 3, 4, 5], 2, lora=1, cache_salt="t")
    assert request[-1].hex() == "4f412816fc6f3acde326c658750d3ceaefc4b03ab723a09415af4b2f909cba5a"


def test_known_keys_and_single_blocks_agree_with_a_whole_request() -> None:
    """Keys resumed from known ones, and block by block with extras, equal the whole request's."""
    tokens, extra = [1, 2, 3, 4, 5, 6], {"lora": "a", "cache_salt": "t"}
    whole = keys_module.hash_request_tokens(tokens, 2, lora="a", cache_salt="t")
    for known in range(len(whole) + 1):
        resumed = keys_module.hash_request_tokens(
            tokens, 2, known=whole[:known], lora="a", cache_salt="t"
        )
        assert resumed == whole
    parent = None
    for index, key in enumerate(whole):
        extras = keys_module.block_extra_keys(index, 2, **extra)  # type: ignore[arg-type]
        parent = keys_module.hash_block_tokens(
            parent, tokens[2 * index : 2 * index + 2], extra_keys=extras
        )
        assert parent == key


def test_builtin_keys_chain_from_the_root_and_take_extras() -> None:
    """The built-in key: no parent means the process's root, and extra keys change the key."""
    builtin = keys_module.builtin_hash_block_key
    root = keys_module.BUILTIN_ROOT
    assert builtin(None, [1, 2]) == builtin(root, [1, 2])
    assert builtin(None, [1, 2], (("lora", "a"),)) != builtin(None, [1, 2])
    assert builtin(None, [1, 2], ()) == builtin(None, [1, 2], None)
