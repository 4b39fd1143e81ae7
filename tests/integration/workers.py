"""Workers the integration tests run beside the gateway, each a set of threads: started
when its `with` block opens, stopped and joined when it closes."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

from gateway import Client
from gateway.core import EventOutcome
from gateway.sdk import ClientError, EventAck


class Threads:
    """Threads running `_run(*args)`, one per item of `each`, until `stop` is set."""

    def __init__(self, each: list[tuple[Any, ...]]) -> None:
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=a, daemon=True) for a in each]

    def __enter__(self) -> Any:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def _run(self, *args: Any) -> None:
        raise NotImplementedError


class Claimer(Threads):
    """A worker that claims each job of `ids` straight through the SDK, never asking a view,
    so only the processor's rule stands between it and a limit; it runs each job it gets a
    little while and completes it, and counts the claims refused with `refused_code`.
    `fields` go into every event it sends; with `undo`, a claim left without an answer is
    undone (sent back to waiting under its claim id), as fetch does."""

    def __init__(
        self, client: Client, ids: list[str], refused_code: str, name: str,
        fields: dict[str, Any] | None = None, undo: bool = False,
    ) -> None:  # fmt: skip
        super().__init__([()])
        self.client, self.ids, self.refused_code, self.name = client, ids, refused_code, name
        self.fields, self.undo = fields or {}, undo
        self.refused = self.done = 0

    def _event(self, job_id: str, kind: str, **fields: Any) -> EventAck | None:
        event = {"job_id": job_id, **self.fields, "type": kind, **fields}
        try:
            ack = self.client.publish_event(event, timeout=20)
        except ClientError:
            return None
        return ack if isinstance(ack, EventAck) else None

    def _run(self) -> None:
        while not self.stop.is_set():
            for job_id in self.ids:
                claim = uuid.uuid4().hex
                ack = self._event(job_id, "job.started", claim_id=claim, worker_id=self.name,
                                  visibility_timeout_ms=120_000)  # fmt: skip
                if ack is None and self.undo:  # no answer: undo the claim, if it was applied
                    self.client.publish_event({"job_id": job_id, **self.fields,
                                               "type": "job.enqueued", "claim_id": claim},
                                              wait=False)  # fmt: skip
                elif ack is not None and ack.error is not None:
                    self.refused += ack.error.code == self.refused_code
                elif ack is not None and ack.outcome is EventOutcome.APPLIED:
                    time.sleep(random.uniform(0.05, 0.2))  # the work
                    while self._event(job_id, "job.completed") is None:
                        time.sleep(0.2)
                    self.done += 1
                if self.stop.is_set():
                    return
            time.sleep(0.05)
