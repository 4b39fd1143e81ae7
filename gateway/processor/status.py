"""One status port for a supervisor's several runtimes.

With `--processes N` (N > 1) and `--metrics-port P`, runtime n serves its own
/metrics, /ready and /live on P+n (readiness.py), and the supervisor serves
on P what a caller asks of the deployment as a whole, so `gateway serve
--processor-url` and a Prometheus scrape keep one address:

GET /ready    200 {"status": "ready", "partitions": n, "processes": N} when every
              runtime is ready: owns partitions, restores none, is not stopping (one
              still joining would soon take partitions from the others, pausing them
              for a rebalance); else 503 {"status": "starting", "reason"} naming it
GET /live     200 while the supervisor runs
GET /metrics  the runtimes' metrics added up: a series with the same name and labels
              in several runtimes is their sum (counters, histograms, keys held, lag
              per partition all add up this way); every metric a runtime's own port
              shows is here, those with no series yet too

With a credentials file, /metrics is for a principal's key holding `inspect` here as on
each runtime's port (status_access.py): this port checks the caller, then asks the
runtimes with the caller's own Authorization header.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from gateway.processor.readiness import serve_status
from gateway.processor.status_access import Guard

# The HTTP binding gives the whole question 2 s (gateway/http/health.py).
ASK_TIMEOUT_S = 1.0


def _ask(url: str, headers: Mapping[str, str]) -> tuple[int | None, bytes]:
    """The status and body a runtime answers, (None, b"") when it does not."""
    try:
        request = urllib.request.Request(url, headers=dict(headers))
        with urllib.request.urlopen(request, timeout=ASK_TIMEOUT_S) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return None, b""


def readiness(answers: Sequence[tuple[str, int | None, bytes]]) -> tuple[bool, dict[str, Any]]:
    """Whole-deployment readiness from each runtime's (instance id, status, /ready body)."""
    owned = 0
    for instance, status, body in answers:
        if status is None:
            return False, {
                "status": "starting",
                "reason": f"processor {instance} does not answer (starting, or restarting "
                "after a failure)",
            }
        state = _json(body)
        if status != 200:
            return False, {
                "status": "starting",
                "reason": f"processor {instance}: {state.get('reason', f'answered {status}')}",
            }
        owned += int(state.get("partitions", 0))
    return True, {"status": "ready", "partitions": owned, "processes": len(answers)}


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def merge_metrics(texts: Sequence[str]) -> str:
    """Prometheus text expositions added up series by series, in the order first seen.

    Every family a runtime exposes is exposed, with its HELP and TYPE, even one with no
    series yet (a labelled counter nothing has counted, such as gateway_dead_letters):
    the port shows the same metrics as each runtime's own. Creation times alone
    (`_created`) are left out: they are instants, and no sum of them means anything.
    """
    families: dict[str, tuple[str, str]] = {}  # name -> (type, help)
    series: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    only_created: set[str] = set()  # families whose every sample is a creation time
    for text in texts:
        for family in text_string_to_metric_families(text):
            families.setdefault(family.name, (family.type, family.documentation))
            samples = series.setdefault(family.name, {})
            created = [s for s in family.samples if s.name.endswith("_created")]
            if created and len(created) == len(family.samples):
                only_created.add(family.name)
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                key = (s.name, tuple(s.labels.items()))
                samples[key] = samples.get(key, 0.0) + s.value
    lines = []
    for name, (kind, doc) in families.items():
        if name in only_created and not series[name]:
            continue
        shown = f"{name}_total" if kind == "counter" else name
        help_text = doc.replace("\\", "\\\\").replace("\n", "\\n")
        lines += [f"# HELP {shown} {help_text}", f"# TYPE {shown} {kind}"]
        for (sample, labels), value in series[name].items():
            lines.append(f"{sample}{_labels(labels)} {floatToGoString(value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def serve(
    port: int, children: Sequence[tuple[str, int]], guard: Guard | None = None
) -> ThreadingHTTPServer:
    """Serve the runtimes' (instance id, status port) as one on 127.0.0.1:`port`."""
    pool = ThreadPoolExecutor(max_workers=len(children), thread_name_prefix="status-ask")

    def ask_all(path: str, headers: Mapping[str, str]) -> list[tuple[str, int | None, bytes]]:
        urls = [f"http://127.0.0.1:{p}{path}" for _, p in children]
        answers = pool.map(lambda url: _ask(url, headers), urls)
        return [(i, *a) for (i, _), a in zip(children, answers, strict=True)]

    def metrics(authorization: Sequence[str]) -> bytes:
        # The caller's key, for the runtimes to check as this port did (a guard lets in
        # one Authorization header at most).
        headers = {"Authorization": authorization[0]} if authorization else {}
        return merge_metrics(
            [body.decode() for _, status, body in ask_all("/metrics", headers) if status == 200]
        ).encode()

    return serve_status(port, metrics, lambda: readiness(ask_all("/ready", {})), guard)
