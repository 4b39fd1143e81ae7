"""Structured logs: one JSON object per line on stderr.

Fields passed through `extra=` become keys of the object. The uniqueness key
is only ever logged at DEBUG.
"""

from __future__ import annotations

import logging
import sys

import orjson

# Record attributes that are not fields of the line: the standard ones, and
# uvicorn's copy of its message with terminal colours.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


# librdkafka's warnings that a broker just started gives, and that it retries by itself:
# the transaction coordinator is still loading its partitions. Not faults.
_STARTING = ("Failed to acquire transactional PID", "Coordinator load in progress")
STARTING_NOTE = "expected while the broker's transaction coordinator starts: retried"


class BrokerStarting(logging.Filter):
    """Logs librdkafka's warnings of a starting broker at INFO, saying they are expected."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and any(s in record.getMessage() for s in _STARTING):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.expected = STARTING_NOTE
        return True


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter()
    formatter.converter = __import__("time").gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
