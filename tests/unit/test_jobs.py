"""Reproducible UUIDv7 ids and RFC 3339 times."""

from __future__ import annotations

import hashlib
import uuid

from hypothesis import given
from hypothesis import strategies as st

from gateway.core import uuid7
from gateway.core.times import format_rfc3339, parse_rfc3339


@given(
    st.integers(min_value=0, max_value=2**48 - 1),
    st.none() | st.text(max_size=64),
    st.binary(max_size=32),
)
def test_uuid7_layout_and_determinism(ms: int, key: str | None, seed: bytes) -> None:
    text = uuid7(ms, key, seed)
    value = uuid.UUID(text)
    assert text == str(value) == text.lower()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert value.int >> 80 == ms
    assert uuid7(ms, key, seed) == text


@given(
    st.integers(min_value=-(2**50), max_value=2**50),
    st.none() | st.text(max_size=64),
    st.binary(max_size=32),
)
def test_uuid7_bits_are_the_time_and_the_digest_of_key_time_and_seed(
    ms: int, key: str | None, seed: bytes
) -> None:
    """The id every version mints from the same record: 48 bits of time, then the first 12
    bits of the digest, then its next 62 after skipping 6 (replays compare ids byte for
    byte with those a processor minted)."""
    value = uuid.UUID(uuid7(ms, key, seed)).int
    digest = hashlib.sha256(
        b"gateway.uuid7\x00" + (key or "").encode() + b"\x00"
        + ms.to_bytes(8, "big", signed=True) + seed
    ).digest()  # fmt: skip
    assert value >> 80 == ms & (2**48 - 1)
    assert (value >> 64) & 0xFFF == int.from_bytes(digest[:2], "big") >> 4
    assert value & (2**62 - 1) == int.from_bytes(digest[2:10], "big") & (2**62 - 1)


def test_uuid7_random_bits_depend_on_key_and_seed() -> None:
    ids = {uuid7(1, key, seed) for key in ("a", "b") for seed in (b"1", b"2")}
    assert len(ids) == 4


def test_uuid7_sorts_by_time() -> None:
    assert uuid7(1_000, "k", b"z") < uuid7(1_001, "k", b"a")


@given(st.integers(min_value=-(10**12), max_value=2 * 10**14))
def test_rfc3339_round_trips_milliseconds(ms: int) -> None:
    text = format_rfc3339(ms)
    assert text.endswith("Z") and len(text) == 24
    assert parse_rfc3339(text) == ms


def test_rfc3339_offsets_and_fractions() -> None:
    assert parse_rfc3339("1970-01-01T01:00:00+01:00") == 0
    assert parse_rfc3339("1970-01-01T00:00:00.0019999Z") == 1  # truncated to milliseconds
    assert parse_rfc3339("1970-01-01t00:00:01z") == 1000
    assert parse_rfc3339("1970-01-01") is None
    assert parse_rfc3339("1970-01-01T00:00:00") is None
