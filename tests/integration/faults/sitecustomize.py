"""A fault for the totality tests, loaded by every Python process started with this folder
on PYTHONPATH: the core's decision raises for jobs of the type $GATEWAY_TEST_FAULT names,
so a test can watch the real processor meet an exception it does not expect."""

import os

_FAULT = os.environ.get("GATEWAY_TEST_FAULT")

if _FAULT:
    import gateway.core
    from gateway.core import Request

    _decide = gateway.core.decide

    def _failing_decide(entries, request, *args, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(request, Request) and request.envelope.type == _FAULT:
            raise RuntimeError("injected fault")
        return _decide(entries, request, *args, **kwargs)

    gateway.core.decide = _failing_decide
