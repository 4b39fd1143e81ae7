"""Health: Kafka answers, and some processor is a member of the dedup consumer group."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from gateway.http import errors
from gateway.http.errors import ApiError

TIMEOUT_S = 2.0


def processor_group(namespace: str | None) -> str:
    """The processor's consumer group, named as `gateway process` names it."""
    return f"{namespace}.gateway-dedup" if namespace else "gateway-dedup"


def check(admin: AdminClient, topic: str, group: str) -> ApiError | None:
    """None when healthy; blocking (up to about twice TIMEOUT_S), so run it off the loop."""
    try:
        admin.list_topics(topic, timeout=TIMEOUT_S)
        [future] = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S).values()
        description = future.result(timeout=TIMEOUT_S)
    except (KafkaException, TimeoutError) as exc:
        return ApiError(
            503, errors.UNAVAILABLE, f"Kafka did not answer in time: {exc}", retryable=True
        )
    if not description.members:
        return ApiError(
            503, errors.UNAVAILABLE,
            f"no processor is consuming: consumer group {group} has no members "
            "(start `gateway process` with the same --namespace)",
            retryable=True,
        )  # fmt: skip
    return None
