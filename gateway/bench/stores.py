"""Redis and PostgreSQL doing the same unique checks over the same keys.

- Redis: per job an atomic check-and-set, `SET key id NX PX ttl` in a Lua
  script that returns the existing id (the mechanism of Faktory, BullMQ and
  sidekiq-unique-jobs), pipelined 100 jobs at a time.
- PostgreSQL: a jobs table with a partial unique index on the key over live
  states and batched `INSERT … ON CONFLICT DO NOTHING RETURNING` (the
  mechanism of River and Oban Pro), 100 jobs per statement, each statement
  its own committed transaction.

Both run at their Debian defaults (PostgreSQL fsyncs each commit; Redis keeps
data in memory), which is how they are met in the field.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from gateway.bench import procfs
from gateway.bench.workload import Workload

BATCH = 100

_CHECK_AND_SET = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])
"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id bigserial PRIMARY KEY,
    kind text NOT NULL,
    args jsonb NOT NULL,
    unique_key text NOT NULL,
    state text NOT NULL DEFAULT 'available',
    inserted_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique_live ON jobs (unique_key)
    WHERE state IN ('available', 'scheduled', 'executing', 'retryable');
"""

_INSERT = """
INSERT INTO jobs (kind, args, unique_key)
SELECT * FROM unnest(%s::text[], %s::jsonb[], %s::text[])
ON CONFLICT (unique_key) WHERE state IN ('available', 'scheduled', 'executing', 'retryable')
DO NOTHING
RETURNING id
"""


@dataclass
class StoreRound:
    system: str
    round: int
    requests: int
    seconds: float
    cpu_server_s: float | None
    cpu_client_s: float
    duplicates: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def redis_round(port: int, server_pid: int, workload: Workload, number: int) -> StoreRound:
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    client.flushall()
    script = client.script_load(_CHECK_AND_SET)
    items = workload.items
    duplicates = 0
    server, own, started = procfs.cpu_seconds(server_pid), time.process_time(), time.monotonic()
    for start in range(0, len(items), BATCH):
        pipe = client.pipeline(transaction=False)
        for item in items[start : start + BATCH]:
            pipe.evalsha(script, 1, item.key, uuid.uuid4().hex, item.ttl_ms)
        duplicates += sum(1 for existing in pipe.execute() if existing is not None)
    seconds = time.monotonic() - started
    result = StoreRound(
        "redis", number, len(items), seconds, _minus(procfs.cpu_seconds(server_pid), server),
        time.process_time() - own, duplicates,
    )  # fmt: skip
    client.close()
    return result


def postgres_round(port: int, server_pid: int, workload: Workload, number: int) -> StoreRound:
    import psycopg

    with psycopg.connect(
        host="127.0.0.1", port=port, user="bench", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(_SCHEMA)
        conn.execute("TRUNCATE jobs")
        conn.execute("VACUUM ANALYZE jobs")
        items = workload.items
        kinds, args, keys = [], [], []
        for item in items:
            job = _loads(item.value)
            kinds.append(job["type"])
            args.append(_dumps(job["args"]))
            keys.append(item.key)
        inserted = 0
        server, own = procfs.cpu_seconds(server_pid), time.process_time()
        started = time.monotonic()
        for start in range(0, len(items), BATCH):
            end = start + BATCH
            rows = conn.execute(_INSERT, (kinds[start:end], args[start:end], keys[start:end]))
            inserted += len(rows.fetchall())
        seconds = time.monotonic() - started
        return StoreRound(
            "postgres", number, len(items), seconds,
            _minus(procfs.cpu_seconds(server_pid), server), time.process_time() - own,
            len(items) - inserted,
        )  # fmt: skip


def _minus(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def _loads(value: bytes) -> Any:
    import orjson

    return orjson.loads(value)


def _dumps(value: Any) -> str:
    import orjson

    return orjson.dumps(value).decode()
