"""Requests in any dialect: OJS, Oban (Elixir and Python), Zizq, Faktory, BullMQ,
sidekiq-unique-jobs, River.

A request names its dialect in a top-level `dialect` field; without one it is
OJS. Each dialect's module validates its own job shape and unique options and
maps them onto the canonical policy (policy.py), a holder rule for the job it
creates (holder.py) and a key. The keys live in fingerprint spaces:

- OJS and Faktory share one: a Faktory job's key is the OJS key of
  keys ["type", "queue", "args"], so a Faktory job and an OJS job of the same
  type, queue and args collide.
- Oban (both flavours, as both share one jobs table) has its own, since its
  keys differ in kind (worker may be left out, `keys` picks from args and
  meta and tolerates missing names, meta may count whole) and its `replace`
  updates jobs that only Oban requests create.
- Zizq has its own: its key is the caller's string, global across types.
- BullMQ, sidekiq-unique-jobs and River have one each: BullMQ's is the queue
  and a deduplication id or job id, sidekiq's its lock digest (prefix, class,
  queue, lock_args), River's its unique key (kind, args, period, queue). In
  each the job that holds the key decides by its own rule (holder.py).
"""

from gateway.core.dialects.parse import (
    DIALECTS,
    UNKNOWN_DIALECT,
    parse_request,
    parse_request_json,
    requested_dialect,
)

__all__ = [
    "DIALECTS",
    "UNKNOWN_DIALECT",
    "parse_request",
    "parse_request_json",
    "requested_dialect",
]
