"""Zizq unique keys built from a job type and payload fields, as Zizq's `uniqueKey()` helper.

`"<type>:<hex SHA-256 of the RFC 8785 JSON of the selected fields>"`: the same
key whatever the order of the payload's keys; all fields when none are named.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from gateway.core.canonical import canonical_json
from gateway.core.errors import Invalid


def zizq_unique_key(job_type: str, payload: Mapping[str, Any], *fields: str) -> str:
    """A Zizq `uniqueKey` for `payload` of `job_type`, from `fields` (default: all of it).

    Raises KeyError naming a field the payload lacks, ValueError for a value
    JSON cannot carry exactly: an integer beyond +-(2**53 - 1) (send it as a
    string), NaN or an infinity. A float of any size is a double and is fine.
    """
    if fields:
        missing = [f for f in fields if f not in payload]
        if missing:
            raise KeyError(f"the payload has no {', '.join(missing)}")
        payload = {f: payload[f] for f in fields}
    try:
        digest = hashlib.sha256(canonical_json(dict(payload), "payload")).hexdigest()
    except Invalid as exc:
        raise ValueError(exc.error.message) from None
    return f"{job_type}:{digest}"
