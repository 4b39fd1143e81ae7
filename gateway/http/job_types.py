"""The job types the binding lets in (OJS security §8.1): `serve --job-types PATTERN,...`.

A job whose type matches none of the patterns (of gateway/auth/roles.py: `*` is any
run of characters) is refused with 422 `job_type_not_allowed` before anything is
sent; a cron whose job template names such a type is refused as well, since every
job it fires would be. Without patterns every type is let in.
"""

from __future__ import annotations

from gateway.auth.roles import Patterns
from gateway.http import errors
from gateway.http.errors import ApiError


def refusal(allowed: Patterns | None, job_type: str) -> ApiError | None:
    """The 422 if `allowed` names patterns and `job_type` matches none, else None."""
    if allowed is None or allowed.matches(job_type):
        return None
    return ApiError(
        422, errors.JOB_TYPE_NOT_ALLOWED,
        f"job type {job_type!r} is not registered: this gateway accepts only the job types "
        "its --job-types names",
        details={"type": job_type},
    )  # fmt: skip


def batch_refusal(items: list[tuple[int, str]]) -> ApiError:
    """The 422 for a batch whose jobs at these indexes have these types, none allowed."""
    index, job_type = items[0]
    return ApiError(
        422, errors.JOB_TYPE_NOT_ALLOWED,
        f"batch refused: job at index {index}: job type {job_type!r} is not registered "
        "(--job-types); nothing was enqueued",
        details={"type": job_type, "errors": [
            {"index": i, "code": errors.JOB_TYPE_NOT_ALLOWED, "type": t} for i, t in items
        ]},
    )  # fmt: skip


def permit(allowed: Patterns | None, job_type: str) -> None:
    """Raise `refusal(allowed, job_type)`, if there is one."""
    error = refusal(allowed, job_type)
    if error is not None:
        raise error
