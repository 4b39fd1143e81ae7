"""Audit: explain a key's history and replay the committed log through the core.

The modules here are pure except `kafka.py`, `follow.py` and `stream.py`, the thin edges
that read topics (and `index.py` and `trail_store.py`, which keep what they need in
RocksDB).
Nothing here decides an outcome itself: replays call the processor's own
per-record code (which calls `core.decide` / `core.on_key`), and
explanations read decision records and the policies they carry.
"""

from gateway.audit.explain import Explained, explain_decision, explain_record
from gateway.audit.findings import Difference, ReplayReport, compare_records
from gateway.audit.log import LogRecord
from gateway.audit.moves import explain_event
from gateway.audit.whatif import Flip, FlipReport, replay_under_policy

__all__ = [
    "Difference",
    "Explained",
    "Flip",
    "FlipReport",
    "LogRecord",
    "ReplayReport",
    "compare_records",
    "explain_decision",
    "explain_event",
    "explain_record",
    "replay_under_policy",
]
