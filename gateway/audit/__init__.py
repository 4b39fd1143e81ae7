"""Audit: explain a key's history and replay the committed log through the core.

The modules here are pure except `kafka.py`, the thin edge that reads topics.
Nothing here decides an outcome itself: replays call the processor's own
per-record code (which calls `core.decide` / `core.on_key`), and
explanations read decision records and the policies they carry.
"""

from gateway.audit.explain import HistoryItem, explain_decision, explain_event, explain_history
from gateway.audit.findings import Difference, ReplayReport, compare_records
from gateway.audit.log import LogRecord, in_log_order
from gateway.audit.whatif import Flip, FlipReport, replay_under_policy

__all__ = [
    "Difference",
    "Flip",
    "FlipReport",
    "HistoryItem",
    "LogRecord",
    "ReplayReport",
    "compare_records",
    "explain_decision",
    "explain_event",
    "explain_history",
    "in_log_order",
    "replay_under_policy",
]
