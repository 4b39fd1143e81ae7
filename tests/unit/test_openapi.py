"""openapi.json against the route table: what each route needs (its operation, 401 and 403
when it needs one, 429 from the client limit) as the code has it. That every route is
described: tests/integration/test_http_openapi.py."""

from __future__ import annotations

import orjson
from starlette.routing import Route

from gateway.http import access
from gateway.http.app import OPENAPI, HttpSettings, create_app


def served() -> dict[tuple[str, str], access.Need | None]:
    app = create_app(HttpSettings(bootstrap="127.0.0.1:1", namespace="unit"))
    found = {}
    for route in app.routes:
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                found[(method.lower(), route.path)] = access.need_of(route.endpoint)
    return found


def test_each_route_names_its_operation_and_its_refusals():
    doc = orjson.loads(OPENAPI.read_bytes())
    for (method, path), need in served().items():
        operation = doc["paths"][path][method]
        answers = operation["responses"]
        assert "429" in answers, (method, path)
        if need is access.OPEN:
            assert operation["security"] == [] and "401" not in answers, (method, path)
        else:
            assert need is not None
            assert operation["x-ojs-operation"] == need.operation, (method, path)
            assert {"401", "403"} <= set(answers), (method, path)
