"""Kafka's default (Java client) partitioner: murmur2 of the key bytes.

Every producer of requests and job events uses it (librdkafka's
`murmur2_random`), so a fingerprint lands on the same partition number in every
co-partitioned topic whoever produced it. The processor uses this function to
notice a record that some other partitioner put on the wrong partition. It
does so for every record, so it asks librdkafka's own murmur2 partitioner (a
public function of its C API, in the library confluent-kafka loaded) when that
library is found and agrees with the Python reference below; else it runs the
reference, about 7 µs a key in CPython.
"""

from __future__ import annotations

import ctypes
import glob
import os
import struct
from collections.abc import Callable
from typing import Any

PRODUCER_SETTING = {"partitioner": "murmur2_random"}

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like Java's."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for k in struct.unpack_from(f"<{whole // 4}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


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


partition_for: Callable[[bytes, int], int] = _native() or reference_partition_for
