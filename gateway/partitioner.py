"""Kafka's default (Java client) partitioner: murmur2 of the key bytes.

Every producer of requests and job events uses it (librdkafka's
`murmur2_random`), so a fingerprint lands on the same partition number in every
co-partitioned topic whoever produced it. The processor uses this function to
notice a record that some other partitioner put on the wrong partition, and
to mint a keyed job's id at the id's home. It does so for every record, so the
reference below is written for mypyc (gateway/compiled.py): compiled, it takes
about 0.05 µs a job id. As source (about 7 µs in CPython) it gives way to
librdkafka's own murmur2 partitioner (a public function of its C API, in the
library confluent-kafka loaded, about 0.5 µs through ctypes) when that library is
found and agrees with the reference.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable
from typing import Any, Final

from mypy_extensions import i64

PRODUCER_SETTING = {"partitioner": "murmur2_random"}

_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like Java's.

    Every product is of two numbers below 2**32 and 2**31, so it fits a signed 64-bit
    word: compiled (gateway/compiled.py), the arithmetic is the machine's; as source,
    `i64` is Python's int and gives the same numbers.
    """
    length: i64 = len(data)
    h: i64 = (0x9747B28C ^ length) & _MASK
    whole: i64 = length - length % 4
    i: i64 = 0
    while i < whole:
        k: i64 = i64(data[i]) | i64(data[i + 1]) << 8 | i64(data[i + 2]) << 16
        k |= i64(data[i + 3]) << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
        i += 4
    rest = length % 4
    if rest == 3:
        h ^= i64(data[whole + 2]) << 16
    if rest >= 2:
        h ^= i64(data[whole + 1]) << 8
    if rest >= 1:
        h ^= i64(data[whole])
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return int(h - (1 << 32) if h & 0x80000000 else h)


def reference_partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# Keys the native partitioner must agree on with the reference before it is used.
_CHECKS = (b"", b"2", b"21", b"foobar", b"a-little-bit-longer-string", bytes(range(256)) * 3)


def _native() -> Callable[[bytes, int], int] | None:
    """librdkafka's rd_kafka_msg_partitioner_murmur2, or None when absent or different."""
    import confluent_kafka

    here = os.path.dirname(confluent_kafka.__file__)
    # The wheel's bundled copy (the one the extension loaded), else a system librdkafka.
    for path in [*glob.glob(f"{here}/../confluent_kafka.libs/librdkafka*"), "librdkafka.so.1"]:
        try:
            fn = ctypes.CDLL(path).rd_kafka_msg_partitioner_murmur2
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int32
        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int32,
                       ctypes.c_void_p, ctypes.c_void_p]  # fmt: skip

        def native(key: bytes, partitions: int, fn: Any = fn) -> int:
            # The topic and opaque arguments are unused by this partitioner.
            return int(fn(None, key, len(key), partitions, None, None))

        if all(native(k, n) == reference_partition_for(k, n) for k in _CHECKS for n in (1, 8, 97)):
            return native
    return None


_COMPILED: Final = not __file__.endswith(".py")
partition_for: Callable[[bytes, int], int] = (
    reference_partition_for if _COMPILED else _native() or reference_partition_for
)
