"""The audit key file, and records sealed with its newest key: named by its id, verifiable
only with it, and byte for byte as before when no key is given."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from gateway.cli import main
from gateway.processor.metrics import Metrics
from gateway.stage import audit_keys
from gateway.stage.audit_keys import AuditKeyError, AuditKeys
from gateway.stage.dedup import Dedup
from gateway.stage.parsing import Limits
from gateway.stage.records import Output, Source
from gateway.stage.trail import UNKEYED, Sealer, intact, sealed_bytes
from tests.memory_store import Store
from tests.support import validator
from tests.unit.test_actor import cancel_log
from tests.unit.test_replay import key_of, processed

OLD, NEW = "11" * 32, "22" * 16
KEYS = f"# rotated monthly\n\n2026-01 {OLD}\n  2026-02   {NEW}  \n"
JOB = {"type": "email.send", "args": [1], "unique": {"keys": ["type", "args"]}}


def test_a_key_file_holds_keys_by_id_and_the_last_is_the_newest() -> None:
    keys = audit_keys.parse(KEYS, "f")
    assert keys.newest == "2026-02" and keys.get("2026-01") == bytes.fromhex(OLD)
    assert keys.get("2026-03") is None
    sealer = keys.sealer()
    assert (sealer.key, sealer.key_id) == (bytes.fromhex(NEW), "2026-02")
    # Settings are printed and pickled: no secret shows.
    for shown in (repr(keys), repr(sealer), str(keys)):
        assert OLD not in shown and NEW not in shown and "2026-02" in shown


@pytest.mark.parametrize(
    ("text", "code", "said"),
    [
        ("", "audit_key_file_empty", "f: holds no key"),
        ("# only a comment\n", "audit_key_file_empty", "holds no key"),
        (f"k1 {OLD} extra\n", "audit_key_line_invalid", "f, line 1: expected `ID SECRET`"),
        (OLD, "audit_key_line_invalid", "line 1"),
        (f"k/1 {OLD}\n", "audit_key_id_invalid", "a key id is 1 to 64"),
        (f"k1 {OLD}\nk1 {NEW}\n", "audit_key_id_repeated", "line 2: key id 'k1' is repeated"),
        ("k1 abcd\n", "audit_key_secret_invalid", "16 to 64 bytes in hex"),
        (f"k1 {OLD}0\n", "audit_key_secret_invalid", "line 1"),
        (f"k1 {'ab' * 65}\n", "audit_key_secret_invalid", "line 1"),
        (f"k1 {'zz' * 16}\n", "audit_key_secret_invalid", "line 1"),
    ],
)
def test_a_bad_key_file_is_refused_with_a_code_and_where_never_the_secret(
    text: str, code: str, said: str
) -> None:
    with pytest.raises(AuditKeyError) as refused:
        audit_keys.parse(text, "f")
    assert refused.value.code == code and said in str(refused.value)
    assert OLD not in str(refused.value) and NEW not in str(refused.value)


def test_a_command_refuses_a_bad_key_file_before_it_reaches_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = logging.getLogger()  # the commands configure logging: put it back after
    monkeypatch.setattr(root, "handlers", root.handlers[:])
    monkeypatch.setattr(root, "level", root.level)
    bad = tmp_path / "keys"
    bad.write_text(f"k1 {OLD[:10]}\n")
    for command in (["process"], ["replay"], ["explain", "x"], ["serve"]):
        assert main([*command, "--audit-key-file", str(bad)]) == 2
        said = capsys.readouterr().err
        assert said.startswith(f"gateway: --audit-key-file {bad}, line 1: the secret of 'k1'")
        assert said.rstrip().endswith("[audit_key_secret_invalid]") and OLD[:10] not in said
    monkeypatch.setenv(audit_keys.ENV, str(tmp_path / "absent"))
    assert main(["process"]) == 2
    assert "No such file or directory [audit_key_file_unreadable]" in capsys.readouterr().err


def sealed(sealer: Sealer) -> list[bytes]:
    """The audit records of two requests of one key, sealed by `sealer`."""
    store, out = Store(), list[Output]()
    dedup = Dedup(1, lambda o, _: out.append(o), Metrics(), Limits(),
                  lambda _, key: store.state(key), sealer=sealer)  # fmt: skip
    key = key_of(JOB).encode()
    for offset in range(2):
        source = Source("requests", 0, offset, 1_760_000_000_000 + offset, {})
        dedup.on_record(orjson.dumps(JOB), key, source, store.state(key))
    return [o.value or b"" for o in out if o.role == "decisions"]


def test_a_keyed_record_names_its_key_and_verifies_only_with_it() -> None:
    keys = AuditKeys({"2026-02": bytes.fromhex(NEW)}, "2026-02")
    plain, keyed = sealed(UNKEYED), sealed(keys.sealer())
    # The same record, with the key's id before its digest, and another digest.
    assert sealed_bytes(keyed[0]) == sealed_bytes(plain[0]) + b',"sealed_by":"2026-02"'
    for was, now in zip(plain, keyed, strict=True):
        assert intact(was) and not intact(now) and intact(now, bytes.fromhex(NEW))
        assert not intact(now, bytes.fromhex(OLD))
    # The chain runs through the keyed digests.
    assert orjson.loads(keyed[1])["prev"] == orjson.loads(keyed[0])["digest"]
    # Without a key, the bytes are those of before keys (the differential test holds them).
    assert sealed(Sealer()) == plain
    # The topics' schemas know the key's id, on a decision and on any other record.
    for record in keyed:
        validator("decision.json").validate(orjson.loads(record))
    *_, cancelled = processed(cancel_log(None), keys.sealer())
    validator("audit.json").validate(orjson.loads(cancelled.value or b""))
