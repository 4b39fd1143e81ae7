"""A fault for the totality tests, loaded by every Python process started with this folder
on PYTHONPATH: the processor's handling of a request raises for jobs of the type
$GATEWAY_TEST_FAULT names, so a test can watch the real processor meet an exception it
does not expect. It replaces the request's parse (`stage/parsing.py`, which stays
Python), since a compiled module's calls between compiled functions reach no replacement
(gateway/compiled.py)."""

import os

_FAULT = os.environ.get("GATEWAY_TEST_FAULT")

if _FAULT:
    from gateway.core import Request
    from gateway.stage import parsing

    _parse_limited = parsing.parse_limited

    def _failing_parse(value, limits, headers=None):  # type: ignore[no-untyped-def]
        request = _parse_limited(value, limits, headers)
        if isinstance(request, Request) and request.envelope.type == _FAULT:
            raise RuntimeError("injected fault")
        return request

    parsing.parse_limited = _failing_parse
