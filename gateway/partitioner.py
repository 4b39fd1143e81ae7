"""Kafka's default (Java client) partitioner: murmur2 of the key bytes.

Every producer of requests and job events uses it (librdkafka's
`murmur2_random`), so a fingerprint lands on the same partition number in every
co-partitioned topic whoever produced it. The processor uses this function to
notice a record that some other partitioner put on the wrong partition.
"""

from __future__ import annotations

import struct

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


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
