"""Serve workers' shared parts: the listening socket and the board of live views."""

from __future__ import annotations

import os
import socket

import pytest

from gateway.cli import main
from gateway.cli.common import EXIT_REFUSED
from gateway.cli.up import default_http_workers
from gateway.http import serving
from gateway.http.serving import Board, bind


def test_health_is_ready_only_once_every_workers_view_is_live():
    board = Board.create(3)
    workers = [Board(board.fd, 3, index) for index in range(3)]
    assert board.not_live() == "serve worker 1, 2, 3 of 3: its job view is not live yet"
    workers[0].mark(True)
    workers[2].mark(True)
    assert board.not_live() == "serve worker 2 of 3: its job view is not live yet"
    workers[1].mark(True)
    assert board.not_live() is None
    # A worker started again is not live until its view is.
    workers[1].mark(False)
    assert workers[0].not_live() == "serve worker 2 of 3: its job view is not live yet"


def test_only_a_worker_marks_a_byte():
    with pytest.raises(AssertionError):
        Board.create(1).mark(True)


def test_a_worker_that_died_is_not_live_until_it_is_started_again_and_its_view_is():
    board = Board.create(2)
    workers = [Board(board.fd, 2, index) for index in range(2)]
    for worker in workers:
        worker.mark(True)
    board.clear(1)  # the supervisor saw worker 2 exit: its own byte said live when it died
    assert workers[0].not_live() == "serve worker 2 of 2: its job view is not live yet"
    with pytest.raises(AssertionError):
        workers[0].clear(1)


def test_a_worker_knows_whether_another_is_live():
    board = Board.create(3)
    workers = [Board(board.fd, 3, index) for index in range(3)]
    workers[1].mark(True)
    assert not workers[1].others_live()  # its own byte does not count
    assert workers[0].others_live() and workers[2].others_live()


def test_a_taken_port_fails_before_any_worker_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            bind("127.0.0.1", taken.getsockname()[1])


def test_the_bound_socket_is_passed_down_to_workers():
    sock = bind("127.0.0.1", 0)
    with sock:
        assert sock.get_inheritable()


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 1), (4, 1), (8, 2), (16, 3)])
def test_up_gives_serve_a_fifth_of_the_cores(cores: int, workers: int):
    assert default_http_workers(cores) == workers


@pytest.mark.parametrize(("command", "flag"), [("serve", "--workers"), ("up", "--http-workers")])
def test_a_worker_count_out_of_range_is_refused_in_one_line(capsys, command: str, flag: str):
    assert main([command, flag, "0"]) == EXIT_REFUSED
    assert capsys.readouterr().err == f"gateway: {flag} must be from 1 to 64\n"


def test_a_worker_whose_supervisor_died_before_it_asked_for_a_signal_ends_at_once():
    """A supervisor gone between the fork and PR_SET_PDEATHSIG sends no SIGTERM: the worker
    sees a parent that is not its supervisor and ends before it would exec."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            serving._prepare(os.getppid() + 1_000_000)  # never this worker's parent
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] >> 8 == 1
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            serving._prepare(os.getppid())
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] >> 8 == 0
