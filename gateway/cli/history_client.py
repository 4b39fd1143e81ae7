"""`gateway explain` asking a running gateway: its key history route, page by page.

Every `gateway serve` keeps an audit index of `decisions` as records come
(audit/key_history.py), so a gateway that runs answers a key's history at once, where a
first `gateway explain` of its own reads the whole topic. The pages are the route's
(docs/http.md#key-history): the items as it tells and checks them.
"""

from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson

API_KEY_ENV = "GATEWAY_API_KEY"
URL_ENV = "GATEWAY_URL"
PAGE = 1000
# The route waits up to 2 s for its index to reach the committed end, then reads by
# position: 10 s is a gateway in trouble.
TIMEOUT_S = 10.0


class Unanswered(Exception):
    """The gateway gave no history: not reachable, refused the caller, or keeps no index."""


class NotFound(Exception):
    """The gateway's index holds no record naming the key."""


def pages(url: str, key: str) -> Iterator[dict[str, Any]]:
    """The history of `key` as the gateway at `url` answers it, a page at a time."""
    cursor: str | None = None
    while True:
        page = _get(url, key, cursor)
        yield page
        cursor = page.get("next_cursor")
        if not isinstance(cursor, str):
            return


def _get(url: str, key: str, cursor: str | None) -> dict[str, Any]:
    query = {"limit": str(PAGE), **({"cursor": cursor} if cursor else {})}
    path = f"/ojs/v1/admin/unique-jobs/{urllib.parse.quote(key, safe='')}/history"
    request = urllib.request.Request(f"{url.rstrip('/')}{path}?{urllib.parse.urlencode(query)}")
    api_key = os.environ.get(API_KEY_ENV)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            body = answer.read()
    except urllib.error.HTTPError as exc:
        raise _refusal(exc) from None
    except (urllib.error.URLError, TimeoutError, ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unanswered(f"no answer from {url} ({reason})") from None
    page = _json(body)
    if page is None or not isinstance(page.get("items"), list):
        raise Unanswered(f"{url} answered something other than a key's history")
    return page


def _refusal(exc: urllib.error.HTTPError) -> Exception:
    body = _json(exc.read()) or {}
    error = body.get("error")
    if not isinstance(error, dict):
        error = body
    message = str(error.get("message") or exc.reason)[:500]
    details = error.get("details")
    if exc.code == 404 and isinstance(details, dict) and "index" in details:
        return NotFound(message)
    if exc.code in (401, 403):
        return Unanswered(
            f"{exc.code}: {message} (set ${API_KEY_ENV} to the key of a principal allowed "
            "`inspect`)"
        )
    return Unanswered(f"{exc.code}: {message}")


def _json(body: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
