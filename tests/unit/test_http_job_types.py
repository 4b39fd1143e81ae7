"""The job-type allowlist (OJS security §8.1, `serve --job-types`): an enqueue, a batch's
jobs and a cron's job template of a type the patterns do not match are refused with 422
before anything is sent; the option and its environment variable, and bad patterns."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.auth.roles import Patterns
from gateway.cli import main
from gateway.http.answers import Answer
from gateway.http.binding import HttpSettings
from gateway.http.enqueue_rate import EnqueueRate
from gateway.http.errors import ApiError
from gateway.sdk import ClientError, EnqueueResult
from tests.http_requests import Untouchable, call, request, route

ALLOWED = Patterns.of(["email.*", "report.build"])
NO_BROKER = ("--bootstrap", "127.0.0.1:1")  # were a command to go on, it would exit 3


class Client:
    """Records what reaches Kafka; each job is answered as a duplicate of itself."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    @staticmethod
    def _ignored(job: dict[str, Any]) -> EnqueueResult:
        shown = {"id": "01900000-0000-7000-8000-000000000001", "type": job["type"]}
        return EnqueueResult.from_record({
            "outcome": "ignored", "request_id": job["request_id"], "job_id": shown["id"],
            "job": shown,
        })  # fmt: skip

    async def enqueue(self, job: dict[str, Any], **_: Any) -> EnqueueResult:
        self.sent.append(job)
        return self._ignored(job)

    async def enqueue_many(self, jobs: list[dict[str, Any]], **_: Any) -> list[EnqueueResult]:
        self.sent.extend(jobs)
        return [self._ignored(job) for job in jobs]

    async def send_commands(self, commands: Any, **_: Any) -> Any:
        self.sent.append(commands)
        raise ClientError("kafka", "Kafka at x: down")


async def _live() -> None:
    return None


def binding(client: Any, allowed: Patterns | None = ALLOWED) -> Any:
    return SimpleNamespace(
        settings=HttpSettings(job_types=allowed), client=client, view=Untouchable(),
        view_live=_live, watcher=None, enqueue_rate=EnqueueRate(0),
    )  # fmt: skip


def enqueue(body: object, client: Any, allowed: Patterns | None = ALLOWED) -> Answer | ApiError:
    return call(route("POST", "/ojs/v1/jobs"), request(body), binding(client, allowed))


def batch(body: object, client: Any) -> Answer | ApiError:
    return call(route("POST", "/ojs/v1/jobs/batch"), request(body), binding(client))


@pytest.mark.parametrize("job_type", ["email.send", "email.digest.weekly", "report.build"])
def test_a_job_of_an_allowed_type_is_enqueued(job_type: str):
    client = Client()
    answer = enqueue({"type": job_type, "args": []}, client)
    assert isinstance(answer, Answer) and answer.status == 200, answer
    assert [job["type"] for job in client.sent] == [job_type]


def test_a_job_of_another_type_is_422_naming_it_and_nothing_is_sent():
    answer = enqueue({"type": "report.delete", "args": []}, Untouchable())
    assert isinstance(answer, ApiError), answer
    assert (answer.status, answer.code) == (422, "job_type_not_allowed")
    assert "'report.delete'" in answer.message and answer.details == {"type": "report.delete"}
    envelope = answer.envelope("r")["error"]
    assert envelope["code"] == "job_type_not_allowed" and envelope["retryable"] is False


def test_without_patterns_every_type_is_enqueued():
    client = Client()
    answer = enqueue({"type": "anything.at.all", "args": []}, client, allowed=None)
    assert isinstance(answer, Answer) and len(client.sent) == 1


def test_an_invalid_job_is_still_400_before_its_type_is_asked_about():
    answer = enqueue({"type": "Not A Type", "args": []}, Untouchable())
    assert isinstance(answer, ApiError) and (answer.status, answer.code) == (400, "invalid_request")


def test_a_batch_with_a_job_of_another_type_is_422_naming_each_and_nothing_is_sent():
    jobs = [{"type": "email.send", "args": []}, {"type": "sms.send", "args": []},
            {"type": "report.build", "args": []}, {"type": "fax", "args": []}]  # fmt: skip
    answer = batch({"jobs": jobs}, Untouchable())
    assert isinstance(answer, ApiError), answer
    assert (answer.status, answer.code) == (422, "job_type_not_allowed")
    assert "index 1" in answer.message and "'sms.send'" in answer.message
    assert answer.details["type"] == "sms.send"
    assert answer.details["errors"] == [
        {"index": 1, "code": "job_type_not_allowed", "type": "sms.send"},
        {"index": 3, "code": "job_type_not_allowed", "type": "fax"},
    ]


def test_a_batch_keeps_answering_invalid_jobs_first_with_400():
    jobs = [{"type": "sms.send", "args": []}, {"type": "email.send"}]
    answer = batch({"jobs": jobs}, Untouchable())
    assert isinstance(answer, ApiError) and (answer.status, answer.code) == (400, "invalid_request")
    assert [e["index"] for e in answer.details["errors"]] == [1]


def test_a_batch_of_allowed_types_is_enqueued_whole():
    client = Client()
    jobs = [{"type": "email.send", "args": []}, {"type": "report.build", "args": [1]}]
    answer = batch({"jobs": jobs}, client)
    assert isinstance(answer, Answer) and answer.status == 201, answer
    assert [job["type"] for job in client.sent] == ["email.send", "report.build"]


def cron(job_type: str) -> dict[str, Any]:
    return {"name": "nightly", "expression": "0 3 * * *", "job_template": {"type": job_type}}


def test_a_cron_firing_jobs_of_another_type_is_422_and_nothing_is_sent():
    register = route("POST", "/ojs/v1/cron")
    answer = call(register, request(cron("report.delete")), binding(Untouchable()))
    assert isinstance(answer, ApiError), answer
    assert (answer.status, answer.code) == (422, "job_type_not_allowed")
    assert answer.details == {"type": "report.delete"}


def test_a_cron_firing_jobs_of_an_allowed_type_goes_on_to_the_processor():
    client = Client()
    answer = call(route("POST", "/ojs/v1/cron"), request(cron("report.build")), binding(client))
    assert isinstance(answer, ApiError) and answer.status == 503  # the fake Kafka is down
    assert len(client.sent) == 1


def test_patterns_match_whole_types_with_star_as_any_run():
    assert ALLOWED.matches("email.send") and ALLOWED.matches("email.")
    assert not ALLOWED.matches("email") and not ALLOWED.matches("xemail.send")
    assert not ALLOWED.matches("report.build.fast") and not ALLOWED.matches("report")
    assert Patterns.of(["*"]).matches("any.type") and Patterns.of(["*.send"]).matches("sms.send")


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`job_types_of` over `serve`'s arguments, with $GATEWAY_JOB_TYPES as given."""
    from gateway.cli import build_parser
    from gateway.cli.serve import job_types_of

    def of(*argv: str, env: str | None = None) -> tuple[str, ...] | None:
        if env is None:
            monkeypatch.delenv("GATEWAY_JOB_TYPES", raising=False)
        else:
            monkeypatch.setenv("GATEWAY_JOB_TYPES", env)
        return job_types_of(build_parser().parse_args(["serve", *argv]))

    return of


def test_the_option_and_the_environment(parsed: Any):
    assert parsed() is None
    assert parsed(env="") is None
    assert parsed("--job-types", "email.*, report.build") == ("email.*", "report.build")
    assert parsed(env="sms.*") == ("sms.*",)
    assert parsed("--job-types", "email.*", env="sms.*") == ("email.*",)  # the option first


@pytest.mark.parametrize("command", ["serve", "up"])
@pytest.mark.parametrize("patterns", ["Email.send", "email.*,", "a b", "email/send"])
def test_bad_patterns_are_refused_at_start_with_exit_2(capsys, monkeypatch, command, patterns):
    monkeypatch.delenv("GATEWAY_JOB_TYPES", raising=False)
    code = main([command, *NO_BROKER, "--job-types", patterns])
    err = capsys.readouterr().err
    assert code == 2 and "--job-types" in err and err.endswith("[job_types_invalid]\n"), err


def test_a_bad_pattern_from_the_environment_is_refused_too(capsys, monkeypatch):
    monkeypatch.setenv("GATEWAY_JOB_TYPES", "email.*,Bad")
    assert main(["serve", *NO_BROKER]) == 2
    assert "'Bad'" in capsys.readouterr().err


def test_up_passes_the_patterns_on_to_serve(monkeypatch: pytest.MonkeyPatch):
    from gateway.cli import build_parser, up
    from gateway.cli.serve import job_types_of

    monkeypatch.delenv("GATEWAY_JOB_TYPES", raising=False)
    args = build_parser().parse_args(["up", *NO_BROKER, "--job-types", "email.*, report.build"])
    args.job_types, args.metrics_port = job_types_of(args), 9999
    started: list[list[str]] = []
    monkeypatch.setattr(up.subprocess, "Popen", lambda command, **_: started.append(command))
    up._start_http(args)
    [command] = started
    assert command[command.index("--job-types") + 1] == "email.*,report.build"
