"""The credentials file, roles, queue patterns, keys and the keyring, without HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.auth import credentials, keys, roles
from gateway.auth.credentials import CredentialsError
from gateway.auth.keyring import Keyring, Watcher
from gateway.core.envelope import is_valid_queue_name

QUEUE = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,30}", fullmatch=True)


def test_the_roles_grant_the_matrix_of_ojs_security_7_5():
    assert roles.ROLES["producer"] == {"enqueue"}
    assert roles.ROLES["worker"] == {"dequeue"}
    assert roles.ROLES["operator"] == {"enqueue", "cancel", "inspect"}
    assert roles.ROLES["admin"] == set(roles.OPERATIONS)
    assert roles.ROLES["read-only"] == {"inspect"}


@given(QUEUE, QUEUE)
def test_a_pattern_without_a_star_reaches_its_own_queue_only(name: str, other: str):
    reached = roles.Patterns.of([name])
    assert reached.matches(name)
    assert reached.matches(other) == (other == name)
    assert not reached.every


@given(QUEUE, QUEUE)
def test_a_star_stands_for_any_run_of_characters(prefix: str, rest: str):
    assert is_valid_queue_name(prefix + "." + rest)
    assert roles.Patterns.of([prefix + ".*"]).matches(prefix + "." + rest)
    assert not roles.Patterns.of([prefix + ".*"]).matches(prefix)
    assert roles.Patterns.of(["*"]).matches(rest) and roles.Patterns.of(["*"]).every
    assert not roles.Patterns.of([]).matches(rest)


def test_dots_in_a_pattern_are_dots():
    assert not roles.Patterns.of(["a.b"]).matches("axb")


def test_a_key_has_256_bits_and_only_its_hash_verifies_it():
    key = keys.new_key()
    assert key.startswith("gk_") and len(key) == 3 + 43
    stored = keys.hash_key(key)
    assert key not in stored and keys.is_hash(stored)
    assert keys.verify(key, stored) and not keys.verify(keys.new_key(), stored)
    assert not keys.is_hash(key) and not keys.is_hash("scrypt$1$8$1$x$y")


def a_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    made: tuple[credentials.Principal, ...] = ()
    given_keys = {}
    for name, role, queues in [("api", "producer", ["orders.*"]), ("ops", "admin", ["*"])]:
        given_keys[name] = keys.new_key()
        new = credentials.principal(name, role, None, queues)
        made = credentials.with_key(made, name, given_keys[name], 1000, new=new)
    path = tmp_path / "credentials.toml"
    credentials.save(path, made)
    return path, given_keys


def test_the_file_reads_back_as_written_and_holds_no_key(tmp_path: Path):
    path, given_keys = a_file(tmp_path)
    text = path.read_text()
    assert all(key not in text for key in given_keys.values())
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    read = credentials.load(path)
    assert credentials.dump(read) == text
    assert [p.name for p in read] == ["api", "ops"]
    assert read[0].operations == {"enqueue"} and read[0].queues.patterns == ("orders.*",)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[[principal]]\nname = 'a'\nrole = 'x'\nqueues = ['*']\n", "role must be one of"),
        ("[[principal]]\nname = 'a'\nqueues = ['*']\n", "a role or a list of operations"),
        ("[[principal]]\nname = 'a'\nrole = 'admin'\nqueues = ['*']\nroles = 1\n", "'roles'"),
        ("[[principal]]\nname = 'a'\nrole = 'admin'\nqueues = ['A!']\n", "queues must be"),
        ("[[principal]]\nname = 'a'\nrole = 'admin'\n", "queues must be"),
        ("[[principal]]\nname = 'a'\noperations = ['fly']\nqueues = ['*']\n", "operations must"),
        ("[[principal]]\nname = 'a'\nrole = 'admin'\nqueues = ['*']\n[[principal.key]]\n"
         "id = '0123456789abcdef'\nhash = 'gk_plainkey'\ncreated = '2026-01-01T00:00:00Z'\n",
         "never the key itself"),
        ("[[principal]]\nname = 'a'\nrole = 'admin'\nqueues = ['*']\n" * 2, "given twice"),
        ("[[principal]]\nname = 'a'\nrole = 'admin'\nqueues = ['*']\nkeyless_from = ['x']\n",
         "keyless_from"),
        ("principal = 1\n", "array of tables"),
        ("not toml [", "not valid TOML"),
    ],
)  # fmt: skip
def test_a_file_with_a_problem_is_refused_naming_it(text: str, named: str):
    with pytest.raises(CredentialsError, match=named.replace("(", r"\(")):
        credentials.parse(text)


def test_a_key_is_verified_once_then_remembered_and_expires(tmp_path: Path):
    path, given_keys = a_file(tmp_path)
    ring = Keyring(credentials.load(path))
    key = given_keys["api"]
    digest = keys.digest(key)
    assert ring.cached(digest, 2000) is None and ring.candidate(digest, 2000)
    assert not ring.candidate(keys.digest(keys.new_key()), 2000)
    principal = ring.verify(key, digest, 2000)
    assert principal is not None and principal.name == "api"
    assert ring.cached(digest, 2000) == principal
    rotated = credentials.with_key(credentials.load(path), "api", keys.new_key(), 2000,
                                   grace_ms=500)  # fmt: skip
    after = Keyring(rotated, ring)
    assert after.cached(digest, 2499) is not None, "remembered across a reading"
    assert after.cached(digest, 2500) is None and not after.candidate(digest, 2500)


def test_a_revoked_key_is_forgotten_by_the_next_reading(tmp_path: Path):
    path, given_keys = a_file(tmp_path)
    watcher = Watcher(path)
    key = given_keys["ops"]
    assert watcher.current().verify(key, keys.digest(key), 2000) is not None
    credentials.save(path, credentials.without_keys(credentials.load(path), "ops"))
    watcher.reload()
    assert watcher.current().cached(keys.digest(key), 2000) is None
    assert not watcher.current().candidate(keys.digest(key), 2000)


def test_a_bad_file_on_reload_keeps_the_last_good_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    path, given_keys = a_file(tmp_path)
    watcher = Watcher(path)
    path.write_text("not toml [")
    watcher.reload()
    assert [p.name for p in watcher.current().principals] == ["api", "ops"]
    assert "last one is kept" in caplog.text
    assert all(k not in caplog.text for k in given_keys.values())


def test_revoking_one_key_of_two_keeps_the_other(tmp_path: Path):
    path, _ = a_file(tmp_path)
    second = keys.new_key()
    two = credentials.with_key(credentials.load(path), "api", second, 3000)
    first_id = two[0].keys[0].id
    one = credentials.without_keys(two, "api", first_id)
    assert [k.id for k in one[0].keys] == [keys.key_id(keys.digest(second))]
    with pytest.raises(CredentialsError, match="no key"):
        credentials.without_keys(one, "api", first_id)


def gateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, check=False)  # fmt: skip


def test_keys_new_prints_the_key_alone_on_its_last_line_and_stores_its_hash(tmp_path: Path):
    path = tmp_path / "c.toml"
    made = gateway("keys", "new", "api", "--role", "producer", "--queues", "orders,orders.*",
                   "--file", str(path))  # fmt: skip
    assert made.returncode == 0, made.stderr
    key = made.stdout.splitlines()[-1]
    assert key.startswith("gk_") and key not in path.read_text()
    [principal] = credentials.load(path)
    assert principal.queues.patterns == ("orders", "orders.*")
    assert keys.verify(key, principal.keys[0].hash)
    again = gateway("keys", "new", "api", "--role", "admin", "--file", str(path))
    assert again.returncode == 2 and "only adds a key" in again.stderr
    listed = gateway("keys", "list", env={"GATEWAY_CREDENTIALS": str(path)})
    assert "api: role producer" in listed.stdout and key not in listed.stdout
    revoked = gateway("keys", "revoke", "api", "--key", "0" * 16, "--file", str(path))
    assert revoked.returncode == 2 and "no key" in revoked.stderr


def test_keys_commands_at_once_each_keep_the_others_change(tmp_path: Path):
    path = tmp_path / "c.toml"
    command = [sys.executable, "-m", "gateway", "keys", "new", "--role", "worker", "--file",
               str(path)]  # fmt: skip
    running = [subprocess.Popen([*command[:5], f"w{n}", *command[5:]], stdout=subprocess.PIPE)
               for n in range(8)]  # fmt: skip
    assert [p.wait(timeout=120) for p in running] == [0] * 8
    assert sorted(p.name for p in credentials.load(path)) == [f"w{n}" for n in range(8)]


def test_keys_on_a_file_it_cannot_write_exits_2(tmp_path: Path):
    made = gateway("keys", "new", "api", "--role", "producer",
                   "--file", str(tmp_path / "missing" / "c.toml"))  # fmt: skip
    assert made.returncode == 2 and "cannot edit" in made.stderr


DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
# How the routes table says which queues a route touches (access.Need.queues).
WHERE = {"one": "the one", "reached": "the ones it reaches", "every": "every queue"}


def test_the_security_page_matrix_is_the_roles():
    matrix = DOC.read_text().split("\n## Principals and roles\n")[1].split("\n## ")[0]
    rows = [line for line in matrix.splitlines() if line.startswith("| ") and "yes" in line]
    table = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    shown = {
        cells[0]: {
            op for op, cell in zip(roles.OPERATIONS, cells[1:], strict=True) if cell == "yes"
        }
        for cells in table
    }
    assert shown == roles.ROLES


def test_the_security_page_routes_are_the_route_table():
    from gateway.http import access
    from gateway.http.app import HttpSettings, create_app

    app = create_app(HttpSettings(bootstrap="127.0.0.1:1", namespace="unit"))
    table = set()
    for route in app.routes:
        need = access.need_of(route.endpoint)
        assert need is not None
        where = "—" if not need.operation else WHERE[need.queues]
        for method in set(route.methods or ()) - {"HEAD"}:
            table.add((f"`{method} {route.path}`", need.operation or "open", where))
    routes = DOC.read_text().split("\n## The routes\n")[1].split("\n## ")[0]
    documented = {
        (cells[0], cells[1], cells[2].replace(" it touches", ""))
        for line in routes.splitlines()
        if line.startswith("| `")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert documented == table


def test_the_security_page_example_file_reads():
    text = DOC.read_text()
    example = text.split("```toml\n")[1].split("```")[0]
    [principal] = credentials.parse(example)
    assert principal.role == "producer" and principal.keys[0].expires_ms is not None
