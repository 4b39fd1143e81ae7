"""OJS level 2's cron routes: register (an upsert), list, get, enable or disable, delete.

Crons live in the processor (core/crons.py, stage/commands.py): these
routes check a registration with the core's own rule, send the command and
report the processor's answer. Lists and gets read this process's view of what
the processor published, with this process's own answered changes shown at
once (as for jobs), to a caller that sees the queue the cron's jobs go to. A
change to a cron spans every queue (a name is one for every queue: a register is
an upsert). A cron is shown with the fields of both OJS documents: `cron` and
`expression`, `job_template` and type, args and options; it is answered under
both `cron` and `cron_job`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway import wire
from gateway.core import INVALID_REQUEST, EventOutcome, GatewayError
from gateway.core.actor import Actor
from gateway.core.crons import NAME_RULE, CronCommand, definition, is_valid_name
from gateway.core.meta import meta_problem
from gateway.http import access, commands, errors, job_types
from gateway.http.answers import Answer
from gateway.http.binding import Binding
from gateway.http.caller import caller
from gateway.http.errors import ApiError
from gateway.http.plumbing import read_json, unknown_fields
from gateway.http.security import privileged
from gateway.http.shared import page_of, seen_crons, sees_cron
from gateway.sdk.commands import cron_commands


@privileged
async def register(request: Request, binding: Binding, request_id: str) -> Answer:
    """201 with the cron when it is new, 200 when it replaced one of the same name; 422
    if the jobs it fires are of a type the binding does not allow."""
    body = await read_json(request, binding.settings.max_body_bytes)
    cron = definition(body)
    if isinstance(cron, GatewayError):
        raise ApiError(400, cron.code, cron.message)
    problem = meta_problem(cron["job_template"].get("meta"), "job_template.meta")
    if problem is not None:
        raise ApiError(400, INVALID_REQUEST, problem)
    job_types.permit(binding.settings.job_types, cron["job_template"]["type"])
    command = CronCommand("register", cron["name"], cron)
    answer = await _ask(binding, caller(request, request_id), command)
    return Answer(201 if answer.get("created") else 200, _shown(answer["cron"]))


async def list_crons(request: Request, binding: Binding, _: str) -> Answer:
    """The crons whose jobs go to a queue the caller sees, by name."""
    page = page_of(request)
    crons = seen_crons(binding, access.scope())
    shown = [crons[name] for name in page.of(sorted(crons))]
    return Answer(200, {
        "crons": shown, "cron_jobs": shown, "pagination": page.pagination(len(crons)),
    })  # fmt: skip


async def get_cron(request: Request, binding: Binding, _: str) -> Answer:
    """The cron; 404 if none has the name, or its jobs go to a queue the caller does not
    see (the same answer)."""
    name = _name(request)
    cron = binding.view.controls(wire.cron_key(name)).get("")
    if cron is None or not sees_cron(access.scope(), cron):
        raise _not_found(name)
    return Answer(200, _shown(cron))


@privileged
async def toggle(request: Request, binding: Binding, request_id: str) -> Answer:
    """`{"enabled": false}` stops the cron from firing (its next_run_at is null) and keeps
    it; `true` starts it again from the next slot."""
    name = _name(request)
    body = await read_json(request, binding.settings.max_body_bytes)
    if not isinstance(body, dict):
        raise ApiError(400, INVALID_REQUEST, 'the body is {"enabled": true|false}')
    unknown_fields(body, ("enabled",), "the body")
    on = body.get("enabled")
    if not isinstance(on, bool):
        raise ApiError(
            400, INVALID_REQUEST, 'enabled is required: the body is {"enabled": true|false}'
        )
    answer = await _ask(
        binding, caller(request, request_id), CronCommand("enable", name, enabled=on)
    )
    return Answer(200, _shown(answer["cron"]))


@privileged
async def delete(request: Request, binding: Binding, request_id: str) -> Answer:
    name = _name(request)
    answer = await _ask(binding, caller(request, request_id), CronCommand("delete", name))
    return Answer(200, {"deleted": True, "name": name, **_shown(answer["cron"])})


async def _ask(binding: Binding, actor: Actor, command: CronCommand) -> dict[str, Any]:
    """The processor's answer to the command, sent for `actor`; 404 if it names no
    registered cron."""
    [answer] = await commands.send(binding, actor, cron_commands(command), f"cron {command.name}")
    if answer.get("outcome") != EventOutcome.APPLIED:
        raise _not_found(command.name)
    key = wire.cron_key(command.name)
    binding.view.control_answered(key, None if answer.get("deleted") else answer["cron"])
    return answer


def _shown(cron: dict[str, Any]) -> dict[str, Any]:
    return {"cron": cron, "cron_job": cron}


def _name(request: Request) -> str:
    """The cron the path names."""
    name = request.path_params["name"]
    if not is_valid_name(name):
        raise ApiError(400, INVALID_REQUEST, f"a cron's name is {NAME_RULE}")
    return str(name)


def _not_found(name: str) -> ApiError:
    return errors.not_found("cron", name, f"no cron {name} is registered")
