"""The OJS HTTP binding (`gateway serve`): an edge over the SDK and a read model of jobs."""

from gateway.http.app import HttpSettings, create_app

__all__ = ["HttpSettings", "create_app"]
