"""Who a request to the binding is from: the seam between authentication and the audit.

`caller` names the principal authentication found (its name and role, which
authentication puts in the request's scope under PRINCIPAL; none when the deployment
authenticates nobody by name), the source address (the connection's peer: serve reads no
proxy headers) and the request's id. Every record the binding sends for the request
carries it (the SDK's `actor`), and the processor writes it into the audit record as
`by`: nothing the caller sends can name anyone else.
"""

from __future__ import annotations

from starlette.requests import Request

from gateway.core.actor import Actor

# The scope key authentication sets for an authenticated request: (name, role or None).
PRINCIPAL = "gateway.principal"


def caller(request: Request, request_id: str) -> Actor:
    principal = request.scope.get(PRINCIPAL)
    name, role = principal if isinstance(principal, tuple) else (None, None)
    client = request.client
    return Actor(name, role, None if client is None else client.host, request_id)
