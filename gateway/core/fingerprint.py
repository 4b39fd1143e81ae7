"""The uniqueness key: SHA-256 (lowercase hex) of the JCS form of the selected dimensions.

The canonical object has keys among args, meta, queue and type; type is
always present, queue defaults to "default". args is an object or, as in OJS
core, an array. args_keys filters an object's top-level keys; for an array it
filters the single object the array holds and keeps the array shape, so
`[{"user_id": 42, "locale": "en"}]` with args_keys ["user_id"] gives
`"args":[{"user_id":42}]`. An array that is empty, holds more than one item or
whose item is not an object cannot be filtered and is invalid. Without
args_keys the whole args value is used, whatever its shape.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable
from typing import Any

from gateway.core.canonical import canonical_json, canonical_json_reference
from gateway.core.envelope import DEFAULT_QUEUE
from gateway.core.errors import GatewayError, Invalid, invalid_request
from gateway.core.policy import Dimension, UniquePolicy

_QUEUE, _ARGS, _META = Dimension.QUEUE, Dimension.ARGS, Dimension.META


def fingerprint(
    policy: UniquePolicy,
    job_type: str,
    queue: str = DEFAULT_QUEUE,
    args: Any = None,
    meta: Any = None,
    field: str = "unique",
) -> str | GatewayError:
    """The key of a job under `policy`; `field` names the policy in error messages."""
    try:
        return fingerprint_or_raise(policy, job_type, queue, args, meta, field)
    except Invalid as exc:
        return exc.error


def fingerprint_reference(
    policy: UniquePolicy,
    job_type: str,
    queue: str = DEFAULT_QUEUE,
    args: Any = None,
    meta: Any = None,
    field: str = "unique",
) -> str | GatewayError:
    """The same key computed through the reference JCS implementation only."""
    hashed = _serialised(canonical_json_reference, policy, job_type, queue, args, meta, field)
    return hashed if isinstance(hashed, GatewayError) else hashlib.sha256(hashed).hexdigest()


def canonical_form(
    policy: UniquePolicy,
    job_type: str,
    queue: str = DEFAULT_QUEUE,
    args: Any = None,
    meta: Any = None,
    field: str = "unique",
) -> bytes | GatewayError:
    """The exact bytes that are hashed, for inspection."""
    return _serialised(canonical_json, policy, job_type, queue, args, meta, field)


def _serialised(
    serialise: Callable[[Any, str], bytes],
    policy: UniquePolicy,
    job_type: str,
    queue: str,
    args: Any,
    meta: Any,
    field: str,
) -> bytes | GatewayError:
    try:
        return serialise(canonical_object(policy, job_type, queue, args, meta, field), "")
    except Invalid as exc:
        return exc.error


def fingerprint_or_raise(
    policy: UniquePolicy,
    job_type: str,
    queue: str,
    args: Any,
    meta: Any,
    field: str,
) -> str:
    obj = canonical_object(policy, job_type, queue, args, meta, field)
    return hashlib.sha256(canonical_json(obj, "")).hexdigest()


def canonical_object(
    policy: UniquePolicy,
    job_type: str,
    queue: str,
    args: Any,
    meta: Any,
    field: str,
) -> dict[str, Any]:
    """The selected dimensions, filtered but not yet normalised."""
    obj: dict[str, Any] = {"type": job_type}
    keys = policy.keys
    if _QUEUE in keys:
        obj["queue"] = queue
    if _ARGS in keys:
        obj["args"] = _select_args(args, policy.args_keys, field)
    if _META in keys:
        obj["meta"] = _select_meta(meta, policy.meta_keys or (), field)
    return obj


def _select_args(args: Any, args_keys: tuple[str, ...] | None, field: str) -> Any:
    if type(args) is dict:
        if args_keys is None:
            return args
        return _select(args, args_keys, "args", field, "args_keys")
    if type(args) is not list:
        raise invalid_request("args must be an array or an object")
    if args_keys is None:
        return args
    if len(args) != 1 or type(args[0]) is not dict:
        raise invalid_request(
            f"{field}.args_keys needs args to be an object, or an array holding exactly one "
            "object; remove args_keys to use the whole args array"
        )
    return [_select(args[0], args_keys, "args[0]", field, "args_keys")]


def _select_meta(meta: Any, meta_keys: tuple[str, ...], field: str) -> dict[str, Any]:
    if type(meta) is not dict:
        raise invalid_request(
            f"meta must be an object holding {_names(meta_keys)}, because {field}.keys "
            'contains "meta"'
        )
    return _select(meta, meta_keys, "meta", field, "meta_keys")


def _select(
    source: dict[str, Any], names: tuple[str, ...], where: str, field: str, by: str
) -> dict[str, Any]:
    """The named top-level fields of `source`, matched after NFC normalisation.

    `where` and `field`.`by` only serve error messages, built on the error path alone.
    """
    out: dict[str, Any] = {}
    if "".join(source).isascii():  # ASCII keys are their own NFC form: plain lookups
        for name in names:
            if name not in source:
                break
            out[name] = source[name]
        else:
            return out
    by = f"{field}.{by}"
    by_nfc: dict[str, str] = {}
    for key in source:
        norm = unicodedata.normalize("NFC", key)
        if norm in by_nfc and norm in names:
            raise invalid_request(
                f"{where} has keys {ascii(by_nfc[norm])} and {ascii(key)}, which are equal "
                f"after Unicode NFC normalisation, so {by} is ambiguous; keep one"
            )
        by_nfc[norm] = key
    missing = [name for name in names if name not in by_nfc]
    if missing:
        them = "it" if len(missing) == 1 else "them"
        raise invalid_request(
            f"{by} names {_names(missing)}, not present in {where}; add {them} to {where} "
            f"or remove {them} from {by}"
        )
    return {name: source[by_nfc[name]] for name in names}


def _names(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)
