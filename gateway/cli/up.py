"""`gateway up`: the product on one machine, in the foreground.

Starts the local Kafka broker (unless --bootstrap names one), applies the topic
catalogue, and runs the dedup processor and the HTTP binding until Ctrl-C, then
stops what it started, all within STOP_BUDGET_S. If the HTTP binding cannot
start or dies (its port is taken, say), `up` stops the rest and exits 1
naming why: half a product that looks up is worse than none. Ports it will
listen on that are already taken (the HTTP port, the metrics ports), and TLS
files or job-type patterns the HTTP binding could not use (exit 2), are refused
before anything is started or printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import socket
import subprocess
import threading
import time

from confluent_kafka import KafkaException

from gateway import admin, catalogue, config, logs
from gateway.broker import launcher
from gateway.broker.install import BrokerError
from gateway.broker.ports import free_port_block
from gateway.catalogue import CatalogueError
from gateway.children import Stop, ignore_sigint, python_module
from gateway.cli import process
from gateway.cli.common import (
    EXIT_UNAVAILABLE,
    CommandError,
    add_credentials_argument,
    credentials_of,
)
from gateway.cli.serve import (
    HTTP_GUARDED,
    LIMIT_FLAGS,
    add_job_types_argument,
    add_json_responses_argument,
    add_limit_arguments,
    add_tls_arguments,
    add_workers_argument,
    job_types_of,
    limits_of,
    refuse_shared_token,
    tls_context_of,
)
from gateway.http.serving import GRACEFUL_SHUTDOWN_S, MAX_WORKERS

# From Ctrl-C to the last process gone; the processor takes at most
# supervisor.KILL_AFTER_S of it, the broker gets what is left.
STOP_BUDGET_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="run everything on this machine: broker, topics, processor, HTTP; Ctrl-C stops it",
        description="Start the local Kafka broker (unless --bootstrap names one), apply the "
        "topic catalogue, and run the dedup processor and the OJS HTTP binding in the "
        "foreground (one processor runtime per core, see `gateway process`). Ctrl-C stops "
        "everything it started within 10 s.",
    )
    p.add_argument(
        "--port", type=int, default=None,
        help="local broker port, when no --bootstrap is given; its controller listens on "
        f"PORT+100 (default: the existing local cluster's, else {launcher.DEFAULT_PORT})",
    )  # fmt: skip
    p.add_argument("--http-host", default="127.0.0.1", help="HTTP address (default %(default)s)")
    p.add_argument("--http-port", type=int, default=8080, help="HTTP port (default %(default)s)")
    add_json_responses_argument(p)
    add_tls_arguments(p)
    add_credentials_argument(
        p, f"{HTTP_GUARDED}, and the processor's /metrics one holding `inspect` (its /ready "
        "and /live stay open)", "every request may do anything",
    )  # fmt: skip
    add_job_types_argument(p)
    add_workers_argument(p, "--http-workers", None, "a fifth of the cores, rounded, at least 1")
    add_limit_arguments(p)
    process.add_arguments(p, metrics_default="a free block of ports")
    p.set_defaults(func=_up)


def _start_http(args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """The HTTP binding in a process of its own (it runs its own event loop and signals).

    Like the processor, it ignores the terminal's Ctrl-C until uvicorn installs
    its handlers, so a Ctrl-C while it starts is no KeyboardInterrupt there;
    we stop it with SIGTERM.
    """
    command = [
        *python_module("gateway", "serve"), "--bootstrap", args.bootstrap,
        "--host", args.http_host, "--port", str(args.http_port), "--log-level", args.log_level,
        "--processor-url", f"http://127.0.0.1:{args.metrics_port}",
        # The view keeps finished jobs as long as the processor does.
        "--retention-seconds", str(args.retention_seconds),
    ]  # fmt: skip
    if args.namespace:
        command += ["--namespace", args.namespace]
    if args.json_responses:
        command.append("--json-responses")
    if args.credentials is not None:
        command += ["--credentials", str(args.credentials)]
    if args.job_types is not None:
        command += ["--job-types", ",".join(args.job_types)]
    if args.audit_key_file is not None:  # its path: the secret never is on a command line
        command += ["--audit-key-file", str(args.audit_key_file)]
    for flag in ("tls_cert_file", "tls_key_file", "tls_client_ca_file", "tls_client_cert"):
        if getattr(args, flag) is not None:  # paths: a key is never on a command line
            command += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    command += ["--workers", str(args.http_workers or default_http_workers())]
    command += ["--store-memory-mb", str(args.store_memory_mb)]
    for flag, _, _ in LIMIT_FLAGS:
        command += [flag, str(getattr(args, flag[2:].replace("-", "_")))]
    return subprocess.Popen(command, preexec_fn=ignore_sigint)


def default_http_workers(cores: int | None = None) -> int:
    """Serve workers for `up`'s share of the machine: an HTTP enqueue cost serve about a fifth
    of the CPU it cost in all (393 µs of 1,858 with the processor's and the broker's, at
    fc7caa8 on 2 cores), so a fifth of the cores, at least one."""
    return max(1, round((cores or os.cpu_count() or 1) / 5))


def _up(args: argparse.Namespace) -> int:
    from gateway.processor.supervisor import supervise

    # A Ctrl-C from here on is noted, even one whose KeyboardInterrupt Python drops, and
    # even if `up` started with SIGINT ignored (a shell's background job): `up` stops on
    # it, as it does once its children run.
    stop = Stop().install(interrupting=True)
    if args.http_workers is not None and not 1 <= args.http_workers <= MAX_WORKERS:
        raise CommandError(f"--http-workers must be from 1 to {MAX_WORKERS}")
    scheme = "http" if tls_context_of(args) is None else "https"  # bad files: exit 2 now
    limits_of(args)  # and a bad limit
    args.job_types = job_types_of(args)  # and bad patterns
    _check_ports(args)
    refuse_shared_token()
    args.credentials = credentials_of(args)  # the binding's and the processor's
    started: launcher.Cluster | None = None
    try:
        if not args.bootstrap:
            result = _start_broker(args.port)
            args.bootstrap = result.cluster.bootstrap
            if not result.reused:
                started = result.cluster
                print(f"Kafka {started.version} started in {result.seconds:.1f}s")
        print(f"bootstrap: {args.bootstrap}", flush=True)
        settings = process.settings_from(args)
        # Other commands with this home (enqueue, explain, ...) ask this broker by
        # default, and explain asks this binding's audit index.
        url = _local_url(scheme, args.http_host, args.http_port)
        config.record_up(args.bootstrap, url, settings.catalogue.name("decisions"))
        processes = process.processes_from(args, settings)
        if args.metrics_port is None:
            # The HTTP binding asks the processor on this port whether it is
            # ready; with several processes, process n has the port plus n.
            args.metrics_port = free_port_block(processes + 1)
            settings = dataclasses.replace(settings, metrics_port=args.metrics_port)
        report = admin.apply(settings.catalogue, settings.client_config)
        print(f"topics: {len(report.created)} created, {len(report.unchanged)} present")
        http: subprocess.Popen[bytes] | None = None

        def on_stop() -> None:
            if http is not None:
                http.terminate()

        def on_reread() -> None:  # SIGHUP, with credentials: serve reads them again too
            if http is not None and http.poll() is None:
                http.send_signal(signal.SIGHUP)

        # From the first child on, Ctrl-C is a stop noted, never a KeyboardInterrupt: one
        # while `http` starts would leave it running unrecorded (children.Stop).
        stop.interrupting = False
        if stop.requested:
            raise KeyboardInterrupt  # one raised before, and dropped where Python drops it
        try:
            http = _start_http(args)
            died: list[str] = []
            threading.Thread(
                target=_watch, args=(http, args, stop, died), name="gateway-up-http", daemon=True
            ).start()
            print(f"http: {scheme}://{args.http_host}:{args.http_port}/ojs/v1/jobs", flush=True)
            print("processor: starting; press Ctrl-C to stop", flush=True)
            logs.configure(args.log_level)
            code = supervise(settings, args.log_level, on_stop, processes, on_reread, stop)
            if died:
                raise CommandError(died[0])
            return code
        finally:
            if http is not None:
                # Its own graceful stop takes GRACEFUL_SHUTDOWN_S; a uvicorn
                # still starting only sees SIGTERM once started: kill it then.
                stopped_at = min(stop.at, time.monotonic())
                # Its workers' grace, then their supervisor's second to stop them.
                _end(http, stopped_at + GRACEFUL_SHUTDOWN_S + 2.0)
    except (BrokerError, CatalogueError) as exc:
        raise CommandError(str(exc)) from exc
    except KafkaException as exc:
        raise CommandError(f"Kafka: {exc.args[0].str()}", EXIT_UNAVAILABLE) from exc
    finally:
        config.forget_up()
        if started is not None:
            left = min(STOP_BUDGET_S, stop.at + STOP_BUDGET_S - time.monotonic())
            launcher.down(started, timeout=max(1.0, left - 0.5))
            print("stopped the local Kafka broker", flush=True)


def _local_url(scheme: str, host: str, port: int) -> str:
    """Where a command on this machine reaches the binding listening on `host`."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _check_ports(args: argparse.Namespace) -> None:
    """Refuse ports `up` would listen on that are taken, before it starts or prints anything.

    The HTTP port, and with --metrics-port P the processor's status port P and, with
    several processes, P+1..P+N. (Without --metrics-port, `up` picks a free block.) A port
    taken between this check and its bind still ends `up` (see _watch).
    """
    wanted = [("--http-port", args.http_host, args.http_port)]
    if args.metrics_port is not None:
        processes = _processes_planned(args)
        wanted.append(("--metrics-port", "127.0.0.1", args.metrics_port))
        if processes > 1:
            wanted += [
                ("--metrics-port", "127.0.0.1", args.metrics_port + n)
                for n in range(1, processes + 1)
            ]
    for flag, host, port in wanted:
        problem = _cannot_listen(host, port)
        if problem is not None:
            hint = "choose another with --http-port" if flag == "--http-port" else (
                "choose another with --metrics-port (with N processes, process n listens on "
                "P+n), or leave it out for a free one"
            )  # fmt: skip
            raise CommandError(f"cannot listen on {host}:{port} ({flag}): {problem}; {hint}")


def _processes_planned(args: argparse.Namespace) -> int:
    """How many processor processes `up` will run (process.processes_from decides; an
    invalid --processes is refused there)."""
    from gateway.processor.supervisor import default_processes

    try:
        partitions = catalogue.load(namespace=args.namespace).by_role("requests").partitions
    except CatalogueError as exc:
        raise CommandError(str(exc)) from exc
    if args.processes is None:
        return default_processes(partitions, os.cpu_count())
    return max(1, min(int(args.processes), partitions))


def _cannot_listen(host: str, port: int) -> str | None:
    """Why a server could not listen on host:port (taken, say), or None if it could.

    Bound as uvicorn and the status server bind (SO_REUSEADDR), so a port a previous run
    left in TIME_WAIT is free, as it is to them.
    """
    if not 0 < port < 65536:
        return "not a port number (1 to 65535)"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
            probe.listen(1)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _say(line: str) -> None:
    print(line, flush=True)


def _start_broker(port: int | None) -> launcher.UpResult:
    """launcher.up, and on Ctrl-C while it waits, stop the nodes it had started."""
    before = launcher.load_cluster()
    was_running = before is not None and bool(launcher.running_nodes(before))
    try:
        return launcher.up(port=port, say=_say)
    except KeyboardInterrupt:
        cluster = launcher.load_cluster()
        if cluster is not None and not was_running:
            launcher.down(cluster, timeout=STOP_BUDGET_S / 2)
        raise


def _watch(
    http: subprocess.Popen[bytes], args: argparse.Namespace, stop: Stop, died: list[str]
) -> None:
    """When the HTTP binding exits before a stop began, stop everything, recording why.

    An exit 0 is the binding's own Ctrl-C (the group's signal, taken by uvicorn), perhaps
    before ours is handled: a stop like any other. The stop is requested as a signal's
    would be, so the processor stops the way it always does.
    """
    code = http.wait()
    if not stop.requested and code != 0:
        died.append(
            f"the HTTP binding on {args.http_host}:{args.http_port} exited with code {code} "
            "(its log above says why; a taken port: choose another with --http-port); "
            "stopped the rest"
        )
    stop.request()


def _end(proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Terminate `proc` and wait for it until `deadline` (monotonic), then kill it."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=max(0.5, min(deadline - time.monotonic(), STOP_BUDGET_S)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
