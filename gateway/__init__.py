"""A Kafka-native unique-jobs gateway."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.sdk import AsyncClient, Client

__version__ = "0.4.0"
__all__ = ["AsyncClient", "Client", "__version__"]

# The SDK pulls in the Kafka client: import it only when it is asked for, so
# `import gateway` (and every `gateway` command) stays cheap.
_LAZY = {"Client", "AsyncClient"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from gateway import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")
