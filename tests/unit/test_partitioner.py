import os
import random

from hypothesis import given
from hypothesis import strategies as st

from gateway.partitioner import _native, murmur2, partition_for, reference_partition_for


def test_murmur2_matches_kafka_reference_values():
    # Values from Kafka's own UtilsTest.testMurmur2.
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        bytes([ord("a"), ord("b"), ord("c")]): 479470107,
    }
    for data, expected in cases.items():
        assert murmur2(data) == expected, data


def test_partition_is_in_range_and_stable():
    key = b"f" * 64
    assert 0 <= partition_for(key, 8) < 8
    assert partition_for(key, 8) == partition_for(key, 8)


def test_partition_for_agrees_with_the_reference():
    rng = random.Random(3)
    for _ in range(2000):
        key = os.urandom(rng.randint(0, 300))
        partitions = rng.randint(1, 200)
        assert partition_for(key, partitions) == reference_partition_for(key, partitions)


@given(st.binary(max_size=300), st.integers(1, 200))
def test_the_reference_agrees_with_librdkafka(key, partitions):
    # Compiled, the reference is what partition_for runs; as source, librdkafka's.
    native = _native()
    assert native is not None
    assert reference_partition_for(key, partitions) == native(key, partitions)
