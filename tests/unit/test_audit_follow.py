"""Reading records by position (follow.read_at) over a partition as a consumer sees it:
what it reads to reach them, and what it says of those the log no longer holds."""

from __future__ import annotations

from typing import Any

from gateway.audit import follow

TOPIC = "ns.gateway.decisions"


class Message:
    def __init__(self, partition: int, offset: int, value: bytes | None, end: bool) -> None:
        self._partition, self._offset, self._value, self._end = partition, offset, value, end

    def error(self) -> Any:
        return _Eof() if self._end else None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value


class _Eof:
    def code(self) -> int:
        return follow.KafkaError._PARTITION_EOF


class Consumer:
    """One partition from `low` to `high`; the offsets in `holes` are no records (a
    transaction's markers); every poll gives the next message, then the end."""

    def __init__(self, low: int, high: int, holes: frozenset[int] = frozenset()) -> None:
        self.low, self.high, self.holes = low, high, holes
        self.at: int | None = None
        self.delivered: list[int] = []
        self.seeks = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        return self.low, self.high

    def assign(self, partitions: list[Any]) -> None:
        self.at, self.seeks = partitions[0].offset, self.seeks + 1

    def unassign(self) -> None:
        self.at = None

    def poll(self, timeout: float) -> Message | None:
        assert self.at is not None
        while self.at in self.holes:
            self.at += 1
        if self.at >= self.high:
            return Message(0, self.high, None, end=True)
        self.delivered.append(self.at)
        self.at += 1
        return Message(0, self.at - 1, b"r%d" % (self.at - 1), end=False)


def test_near_records_are_read_on_and_far_ones_sought():
    client = Consumer(0, 10_000)
    wanted = [(0, 5), (0, 40), (0, 5_000)]
    found, starts = follow.read_at(client, TOPIC, wanted)  # type: ignore[arg-type]
    assert found == {(0, 5): b"r5", (0, 40): b"r40", (0, 5_000): b"r5000"}
    assert starts == {0: 0}
    assert client.seeks == 2 and len(client.delivered) == 37  # 5..40, then 5000 at once


def test_records_the_log_no_longer_holds_are_none():
    client = Consumer(100, 200, holes=frozenset({150}))
    wanted = [(0, 7), (0, 150), (0, 160), (0, 250)]
    found, starts = follow.read_at(client, TOPIC, wanted)  # type: ignore[arg-type]
    assert found == {(0, 7): None, (0, 150): None, (0, 160): b"r160", (0, 250): None}
    assert starts == {0: 100}
