"""Health: this process is live; the deployment behind it is ready, or why not.

Ready means this deployment's processor owns its partitions and has restored
its state. Only the processor knows both, so with its URL (`gateway up` passes
its own processor's) we ask it (gateway/processor/readiness.py), and a
processor that is gone does not answer. The consumer group seen from here
cannot tell: a stopped processor's static member stays listed, with its
partitions, until its session times out. Without a processor URL that group is
all we have: ready when it is stable and has members.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import orjson
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

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
