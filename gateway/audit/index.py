"""Where each route's audit records are on `decisions`: an index kept in RocksDB.

`gateway explain` and the history route read one key's records, never the
whole log. So this index maps every route an audit record names (its
`state.routes`; for records written before they carried state, their
unique_key) to the record's position (partition, offset), and each job id it
names (`state.jobs`, an older record's job ids) to the job's unique key, so a
job's id finds its key's history; a job without a unique key is a route of
its own. It also holds how far it has read each partition, in the
same write batch as the positions that read found: a reader that stops at
any point resumes there, and the directory deleted is read again from the
log. Nothing is held in memory: positions live on disk, written a batch of
records at a time.

As it reads each partition it follows its chain (chain.py): what the chain shows of a
record (off the chain, a gap before it) is kept by the record's position, for explain to
say beside it; the chain's tail is kept with the offset read, so a later run goes on
from it.

Layout:
    r<route digest:16><partition:4><offset:8>  -> b""   a route's records, in log order
    k<job id>                                 -> its unique key
    o<partition:4>                            -> the next offset to read (8 bytes), then
                                                 the chain's tail (JSON, chain.Chain)
    x<partition:4><offset:8>                  -> what the chain shows of the record there
                                                 (a JSON list of sentences)
A route is named by its blake2b digest: every position takes 29 bytes, whatever
the route's length, and no two routes share a digest (2^-64 odds for 2^32 routes).
The directory's identity.json ties it to the cluster, the topic and this layout
(LAYOUT); see `open_index`.

Pure but for RocksDB: reading Kafka is follow.py's.
"""

from __future__ import annotations

import hashlib
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
from rocksdict import Options, Rdict, WriteBatch

from gateway import store_memory
from gateway.audit.chain import Chain
from gateway.core.limits import MAX_ID_BYTES
from gateway.home import gateway_home
from gateway.processor import state_identity
from gateway.processor.state_identity import Identity
from gateway.stage.trail import JOB

# Raise with any change of the layout above: an index of another is read anew.
LAYOUT = 2
DB_DIR = "index"
DecisionAt = tuple[int, int]  # (partition, offset) on decisions
# (partition, offset, value) of one record of decisions, as read
Read = tuple[int, int, bytes | None]

_ROUTE = b"r"
_KEY_OF = b"k"
_OFFSET = b"o"
_MARK = b"x"
_DIGEST = 16
_POSITION = struct.Struct(">IQ")
_PARTITION = struct.Struct(">I")
_NEXT = struct.Struct(">Q")
# A unique key is 64 hex digits and a job id at most MAX_ID_BYTES: a longer name is no
# route, and is not indexed (the processor never writes one).
MAX_ROUTE_BYTES = MAX_ID_BYTES


def named(record: Mapping[str, Any]) -> tuple[set[str], dict[str, str]]:
    """The routes an audit record is about, and the unique key of each job it names.

    A job with a unique key lives on its key's route, so its id is no route of its own:
    the id finds the key, the key the records. A job without one is its own route; an
    event is found by its job's id too (one sent under a key its job does not hold is
    on no route of that job's)."""
    routes: set[str] = set()
    jobs: set[str] = set()
    keys: dict[str, str] = {}
    state = record.get("state")
    if isinstance(state, Mapping):
        routes.update(r for r in _list(state.get("routes")) if isinstance(r, str))
        jobs.update(row[0] for row in _list(state.get("jobs")) if _named_row(row))
        for row in _list(state.get("before")):  # [route, "job/<id>", the job as read, ...]
            if _named_row(row) and len(row) > 2 and str(row[1]).startswith(JOB):
                key = row[2].get("unique_key") if isinstance(row[2], Mapping) else None
                if isinstance(key, str):
                    keys[str(row[1])[len(JOB) :]] = key
    what = record.get("what")
    if isinstance(what, Mapping) and isinstance(what.get("job_id"), str):
        routes.add(what["job_id"])
    # A request's record, of any format: its key, the job it names, the jobs it cancelled.
    unique_key = record.get("unique_key")
    for job_id in (record.get("job_id"), record.get("existing_job_id"),
                   *_list(record.get("cancelled_job_ids"))):  # fmt: skip
        if isinstance(job_id, str):
            jobs.add(job_id)
            if isinstance(unique_key, str):
                keys[job_id] = unique_key
    if isinstance(unique_key, str):
        routes.add(unique_key)
    routes.update(jobs - keys.keys())
    fits = {r for r in routes if r and len(r.encode()) <= MAX_ROUTE_BYTES}
    return fits, {j: k for j, k in keys.items() if k in fits and len(j.encode()) <= MAX_ROUTE_BYTES}


def _named_row(row: Any) -> bool:
    return isinstance(row, list) and len(row) > 1 and isinstance(row[0], str)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _route_prefix(route: str) -> bytes:
    return _ROUTE + hashlib.blake2b(route.encode(), digest_size=_DIGEST).digest()


class IndexUnavailable(Exception):
    """RocksDB cannot open the index (another process holds it); the message says which."""


class AuditIndex:
    """Thread-safe: a follower writes while readers ask."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        store_memory.shared().apply(options)
        try:
            self._db = Rdict(str(path), options)
        except Exception as exc:  # rocksdict raises a bare Exception ("IO error: lock ...")
            raise IndexUnavailable(f"cannot open the audit index {path}: {exc}") from exc
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def offsets(self) -> dict[int, int]:
        """The next offset to read, per partition read so far."""
        return {p: _NEXT.unpack(value[: _NEXT.size])[0] for p, value in self._tails()}

    def chain(self, partition: int) -> Chain:
        """The partition's chain as far as the index has read it."""
        raw = self._db.get(_OFFSET + _PARTITION.pack(partition))
        return _tail(bytes(raw))[1] if raw is not None else Chain()  # type: ignore[arg-type]

    def marks(self, position: DecisionAt) -> list[str]:
        """What the chain shows of the record at `position` (nothing: it runs through it)."""
        raw = self._db.get(_MARK + _POSITION.pack(*position))
        return [] if raw is None else list(orjson.loads(bytes(raw)))  # type: ignore[arg-type]

    def _tails(self) -> Iterator[tuple[int, bytes]]:
        """Each partition read so far, and its offset key's value."""
        for key, value in self._db.items(from_key=_OFFSET):
            key = bytes(key)  # type: ignore[arg-type]
            if not key.startswith(_OFFSET):
                return
            yield _PARTITION.unpack(key[1:])[0], bytes(value)  # type: ignore[arg-type]

    def add(self, records: Iterable[Read], reached: Mapping[int, int]) -> None:
        """Index `records` (each partition's in offset order), follow each partition's
        chain through those not read before, and move each partition's offset to `reached`
        (never back), in one write batch. A record that is not JSON names nothing, and is
        only read past."""
        batch = WriteBatch(raw_mode=True)
        marks: dict[DecisionAt, list[str]] = {}
        with self._lock:
            held = {partition: _tail(value) for partition, value in self._tails()}
            chains = {p: chain for p, (_, chain) in held.items()}
            for partition, offset, value in records:
                try:
                    record = orjson.loads(value or b"")
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(record, Mapping):
                    continue
                routes, keys = named(record)
                where = _POSITION.pack(partition, offset)
                for route in routes:
                    batch.put(_route_prefix(route) + where, b"")
                for job_id, key in keys.items():
                    batch.put(_KEY_OF + job_id.encode(), key.encode())
                if offset >= held.get(partition, (0, None))[0]:
                    link = chains.setdefault(partition, Chain()).follow(offset, record)
                    for about, text in ({} if link is None else link.said(offset)).items():
                        marks.setdefault((partition, about), []).append(text)
            for position, texts in marks.items():
                batch.put(_MARK + _POSITION.pack(*position),
                          orjson.dumps(self.marks(position) + texts))  # fmt: skip
            for partition, next_offset in reached.items():
                if next_offset > held.get(partition, (-1, None))[0]:
                    tail = orjson.dumps(chains.get(partition, Chain()).state())
                    batch.put(_OFFSET + _PARTITION.pack(partition), _NEXT.pack(next_offset) + tail)
            self._db.write(batch)

    def unique_key(self, job_id: str) -> str | None:
        """The unique key a record gave the job `job_id`; None if none did."""
        raw = self._db.get(_KEY_OF + job_id.encode())
        return None if raw is None else bytes(raw).decode()  # type: ignore[arg-type]

    def positions(self, route: str, start: DecisionAt = (0, 0)) -> Iterator[DecisionAt]:
        """The positions of `route`'s records from `start` on, in log order."""
        prefix = _route_prefix(route)
        for key in self._db.keys(from_key=prefix + _POSITION.pack(*start)):
            key = bytes(key)  # type: ignore[arg-type]
            if not key.startswith(prefix) or len(key) != len(prefix) + _POSITION.size:
                return
            yield _POSITION.unpack(key[len(prefix) :])


def _tail(value: bytes) -> tuple[int, Chain]:
    """An offset key's value: the next offset to read, and the chain's tail."""
    [next_offset] = _NEXT.unpack(value[: _NEXT.size])
    return next_offset, Chain.of(
        orjson.loads(value[_NEXT.size :]) if len(value) > _NEXT.size else {}
    )


def index_root() -> Path:
    """Where `gateway explain` keeps its indexes: audit-index/<decisions topic>/<cluster id>
    (the topic's name holds the namespace)."""
    return gateway_home() / "audit-index"


def default_index_dir(topic: str, cluster_id: str) -> Path:
    return index_root() / topic / cluster_id


def open_index(directory: Path, identity: Identity) -> AuditIndex:
    """The index in `directory`, emptied first if it was built from another cluster or
    topic, or in another layout (`identity`'s, with LAYOUT)."""
    state_identity.reconcile(directory, identity, keep=DB_DIR)
    return AuditIndex(directory / DB_DIR)
