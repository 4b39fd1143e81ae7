"""Several runtimes under one supervisor: their ids, their count, their status as one."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from gateway import catalogue
from gateway.children import Stop
from gateway.cli import process
from gateway.cli.common import CommandError
from gateway.processor import status, supervisor
from gateway.processor.app import ProcessorSettings
from gateway.processor.supervisor import children, default_processes
from gateway.wire import group_name


def settings(**changes: object) -> ProcessorSettings:
    base = ProcessorSettings({"bootstrap.servers": "x:1"}, catalogue.load(), instance_id="7")
    return ProcessorSettings(**{**base.__dict__, **changes})


def test_one_process_is_the_instance_itself():
    one = settings(state_dir=Path("/s"), metrics_port=9000)
    assert children(one, 1) == [one]


def test_each_process_gets_its_own_id_state_and_port():
    several = children(settings(state_dir=Path("/s"), metrics_port=9000), 3)
    assert [c.instance_id for c in several] == ["7-1", "7-2", "7-3"]
    assert [c.state_dir for c in several] == [Path("/s/7-1"), Path("/s/7-2"), Path("/s/7-3")]
    assert [c.metrics_port for c in several] == [9001, 9002, 9003]
    assert {c.group for c in several} == {group_name(None)}


def test_derived_ids_are_the_same_on_every_start():
    assert children(settings(), 2) == children(settings(), 2)


def test_without_a_state_dir_or_port_the_defaults_follow_the_id():
    several = children(settings(), 2)
    assert [(c.state_dir, c.metrics_port) for c in several] == [(None, None), (None, None)]


@pytest.mark.parametrize(
    ("partitions", "cores", "expected"),
    [(8, 2, 2), (8, 16, 8), (8, 1, 1), (8, None, 1), (1, 4, 1), (32, 16, 16)],
)
def test_the_default_is_one_per_core_and_at_most_one_per_partition(partitions, cores, expected):
    assert default_processes(partitions, cores) == expected


class Exited:
    returncode = -9  # SIGKILL


def test_a_first_restart_is_at_once_and_a_runtime_failing_again_backs_off(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(supervisor.time, "monotonic", lambda: now[0])
    child = supervisor._Child(settings())
    waits = []
    for _ in range(8):
        child.started = now[0]
        now[0] += 5.0  # up 5 s, then it fails
        child.proc = Exited()  # type: ignore[assignment]
        assert supervisor._exited(child) == 0 and child.proc is None
        waits.append(child.resume_at - now[0])
        now[0] = child.resume_at
    assert waits == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    # Up longer than HEALTHY_AFTER_S: the next restart is at once again.
    child.started = now[0]
    now[0] += supervisor.HEALTHY_AFTER_S + 1
    child.proc = Exited()  # type: ignore[assignment]
    supervisor._exited(child)
    assert child.resume_at == now[0]


def args(processes: int | None) -> argparse.Namespace:
    return argparse.Namespace(processes=processes)


def test_the_command_takes_a_count_up_to_the_partitions():
    s = settings()
    partitions = s.catalogue.by_role("requests").partitions
    assert process.processes_from(args(partitions), s) == partitions
    for wrong in (0, partitions + 1):
        with pytest.raises(CommandError, match="--processes must be from 1 to"):
            process.processes_from(args(wrong), s)
    assert 1 <= process.processes_from(args(None), s) <= partitions


def ready(partitions: int) -> tuple[int, bytes]:
    return 200, orjson.dumps({"status": "ready", "partitions": partitions})


def test_ready_when_every_process_is_and_together_they_own_partitions():
    ok, body = status.readiness([("1-1", *ready(4)), ("1-2", *ready(4))])
    assert ok and body == {"status": "ready", "partitions": 8, "processes": 2}


def test_a_process_still_joining_holds_the_others_back():
    # It would take partitions from them at its join: a rebalance still to come.
    joining = (503, orjson.dumps({"status": "starting", "reason": "owns no partitions yet"}))
    ok, body = status.readiness([("1-1", *ready(8)), ("1-2", *joining)])
    assert not ok and body["reason"] == "processor 1-2: owns no partitions yet"


def test_a_process_gone_or_restoring_is_named():
    ok, body = status.readiness([("1-1", *ready(4)), ("1-2", None, b"")])
    assert not ok and "processor 1-2 does not answer" in body["reason"]
    restoring = (503, orjson.dumps({"status": "starting", "reason": "restoring its state"}))
    ok, body = status.readiness([("1-1", *restoring), ("1-2", *ready(4))])
    assert not ok and body["reason"] == "processor 1-1: restoring its state"


def test_metrics_add_up_series_by_series():
    one = (
        "# HELP d_total Decisions.\n# TYPE d_total counter\n"
        'd_total{outcome="accepted"} 2.0\nd_created{outcome="accepted"} 1.7e9\n'
        "# HELP lag Lag.\n# TYPE lag gauge\n"
        'lag{partition="0"} 5.0\n'
    )
    two = (
        "# HELP d_total Decisions.\n# TYPE d_total counter\n"
        'd_total{outcome="accepted"} 3.0\nd_total{outcome="rejected"} 1.0\n'
        "# HELP lag Lag.\n# TYPE lag gauge\n"
        'lag{partition="1"} 7.0\n'
    )
    merged = status.merge_metrics([one, two])
    assert merged.splitlines() == [
        "# HELP d_total Decisions.",
        "# TYPE d_total counter",
        'd_total{outcome="accepted"} 5.0',
        'd_total{outcome="rejected"} 1.0',
        "# HELP lag Lag.",
        "# TYPE lag gauge",
        'lag{partition="0"} 5.0',
        'lag{partition="1"} 7.0',
    ]


def test_every_metric_a_runtime_shows_is_on_the_aggregated_port():
    """A labelled metric nothing has counted yet (dead letters, refused inputs, restore
    remaining) has no series, only its HELP and TYPE; the added-up port shows it too."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from gateway.processor.metrics import Metrics

    def families(text: str) -> dict[str, str]:
        return {f.name: f.type for f in text_string_to_metric_families(text)}

    idle, busy = Metrics(), Metrics()
    busy.refused_inputs.labels("dedup", "invalid_event").inc()
    busy.decided("accepted", "ojs", 0)
    busy.flush()
    texts = [generate_latest(m.registry).decode() for m in (idle, busy)]
    own = {n: t for n, t in families(texts[0]).items() if not n.endswith("_created")}
    merged = status.merge_metrics(texts)
    assert families(merged) == own
    for name in ("gateway_dead_letters", "gateway_refused_inputs", "gateway_restore_remaining"):
        assert name in own
    assert "gateway_dead_letters_total" not in [
        s.name for f in text_string_to_metric_families(merged) for s in f.samples
    ]
    assert 'gateway_refused_inputs_total{code="invalid_event",stage="dedup"} 1.0' in merged
    # Creation times are instants: left out, not added up.
    assert "_created" not in merged


def test_label_values_are_escaped_back():
    text = '# TYPE g gauge\ng{path="a\\"b\\\\c"} 1.0\n'
    assert 'g{path="a\\"b\\\\c"} 1.0' in status.merge_metrics([text])


def test_a_runtimes_settings_reach_it_whole():
    # The supervisor hands each runtime its settings pickled: every value in them must come
    # back, compiled modules' classes too (gateway/compiled.py).
    import pickle

    from gateway.stage.parsing import Limits

    sent = settings(limits=Limits(max_request_bytes=1000, retention_ms=5, idempotency_ms=7))
    assert pickle.loads(pickle.dumps(sent)) == sent


class _Proc:
    """A runtime that runs until terminated."""

    def __init__(self) -> None:
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.returncode = 0

    def wait(self, _timeout: float | None = None) -> int:
        return 0


def test_a_stop_between_two_starts_starts_no_more_and_stops_what_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = Stop()
    started: list[_Proc] = []

    def start(_settings: ProcessorSettings, _level: str) -> _Proc:
        started.append(_Proc())
        stop.request()  # the signal comes while the first runtime is being started
        return started[-1]

    monkeypatch.setattr(supervisor, "_start", start)
    stopped: list[bool] = []
    code = supervisor.supervise(settings(), "INFO", lambda: stopped.append(True), 3, stop=stop)
    assert (code, len(started), stopped) == (0, 1, [True])
    assert started[0].returncode == 0  # terminated


def test_a_failure_in_the_loop_still_stops_the_runtimes_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[_Proc] = []

    def start(_settings: ProcessorSettings, _level: str) -> _Proc:
        if started:
            raise OSError("cannot fork")
        started.append(_Proc())
        return started[-1]

    monkeypatch.setattr(supervisor, "_start", start)
    with pytest.raises(OSError):
        supervisor.supervise(settings(), "INFO", None, 2, stop=Stop())
    assert started[0].returncode == 0
