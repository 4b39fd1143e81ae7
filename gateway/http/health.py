"""Health: this process is live; the deployment behind it is ready, or why not (the
routes `/ojs/v1/health/live` and `/ojs/v1/health`).

Ready means this deployment's processor owns its partitions and has restored
its state. Only the processor knows both, so with its URL (`gateway up` passes
its own processor's) we ask it (gateway/processor/readiness.py), and a
processor that is gone does not answer. The consumer group seen from here
cannot tell: a stopped processor's static member stays listed, with its
partitions, until its session times out. Without a processor URL that group is
all we have: ready when it is stable and has members.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import orjson
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient
from starlette.requests import Request
from starlette.responses import Response

from gateway import wire
from gateway.http import access
from gateway.http.binding import Binding
from gateway.http.errors import ApiError
from gateway.http.plumbing import media_type_of, request_id_of
from gateway.http.responses import ojs_response

TIMEOUT_S = 2.0


def not_ready(admin: AdminClient, topic: str, group: str, processor_url: str | None) -> str | None:
    """None when ready, else the reason; blocking (a few TIMEOUT_S at most), run it off the loop."""
    try:
        admin.list_topics(topic, timeout=TIMEOUT_S)
    except KafkaException as exc:
        return f"Kafka did not answer in time: {exc.args[0].str()}"
    if processor_url:
        return _ask_processor(processor_url.rstrip("/") + "/ready")
    try:
        [future] = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S).values()
        description = future.result(timeout=TIMEOUT_S)
    except (KafkaException, TimeoutError) as exc:
        return f"Kafka did not describe consumer group {group} in time: {exc}"
    if not description.members:
        return (
            f"no processor is consuming: consumer group {group} has no members "
            "(start `gateway process` with the same --namespace)"
        )
    if description.state != ConsumerGroupState.STABLE:
        return f"consumer group {group} is {description.state.name.lower()}, not stable"
    return None


def _ask_processor(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S):
            return None
    except urllib.error.HTTPError as exc:
        try:
            return str(orjson.loads(exc.read())["reason"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return f"the processor at {url} answered {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"the processor does not answer at {url} (not started yet, or gone): {exc}"


async def health(request: Request) -> Response:
    """Readiness: 200 once this process's view is live (it follows every partition of
    job_states and has read what was there), and every other serve worker's, and the
    processor owns its partitions and has restored its state. Open to anyone; with a
    credentials file, why it is not ready is said to a principal's key only."""
    binding: Binding = request.app.state.binding
    settings = binding.settings
    reason = binding.view_not_live()
    if reason is None and settings.board is not None:
        reason = settings.board.not_live()
    if reason is None:
        reason = await asyncio.to_thread(
            not_ready,
            binding.admin,
            binding.requests_topic,
            wire.group_name(settings.namespace),
            settings.processor_url,
        )
    media_type = media_type_of(request)
    if reason is not None:
        body = {"status": "starting", "reason": reason}
        if not await _may_read_reasons(request, binding):
            # Names of hosts, topics and groups are for the deployment's own principals.
            body = {"status": "starting"}
        return ojs_response(503, body, request_id_of(request), None, media_type)
    return ojs_response(200, {"status": "ok"}, request_id_of(request), None, media_type)


async def _may_read_reasons(request: Request, binding: Binding) -> bool:
    """Without a credentials file anyone may; with one, any principal's key."""
    if binding.watcher is None:
        return True
    try:
        await access.authenticate(request, binding.watcher)
    except ApiError:
        return False
    return True


async def live(request: Request) -> Response:
    """Liveness: this process answers; Kafka and the processor are readiness's business."""
    return ojs_response(200, {"status": "ok"}, request_id_of(request), None, media_type_of(request))
