"""Kafka client settings: file, environment, bootstrap precedence."""

import json
import os
import subprocess
import sys

import pytest

from gateway import config
from gateway.config import ConfigError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in ("GATEWAY_CONFIG", "KAFKA_BOOTSTRAP", "GATEWAY_KAFKA_SASL_USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GATEWAY_HOME", str(tmp_path / "home"))  # no local cluster


def test_the_file_sets_every_client_and_the_environment_wins(monkeypatch, tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text(
        '[kafka]\n"bootstrap.servers" = "b1:9093"\n"security.protocol" = "SASL_SSL"\n'
        '"sasl.username" = "file-user"\n"enable.ssl.certificate.verification" = true\n'
    )
    monkeypatch.setenv("GATEWAY_CONFIG", str(path))
    monkeypatch.setenv("GATEWAY_KAFKA_SASL_USERNAME", "env-user")
    settings = config.client_config()
    assert settings["bootstrap.servers"] == "b1:9093"
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["sasl.username"] == "env-user"
    assert settings["enable.ssl.certificate.verification"] == "true"
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "env:9092")
    assert config.client_config()["bootstrap.servers"] == "env:9092"
    assert config.client_config("flag:9092")["bootstrap.servers"] == "flag:9092"


def test_without_anything_the_default_broker_is_used():
    assert config.client_config() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "logger": config.KAFKA_LOGGER,
    }


def test_a_missing_or_malformed_file_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("GATEWAY_CONFIG", str(tmp_path / "absent.toml"))
    with pytest.raises(ConfigError, match="cannot read GATEWAY_CONFIG"):
        config.client_config()
    bad = tmp_path / "bad.toml"
    bad.write_text("[http]\nport = 1\n")
    monkeypatch.setenv("GATEWAY_CONFIG", str(bad))
    with pytest.raises(ConfigError, match="only a \\[kafka\\] table"):
        config.client_config()


def test_the_running_gateway_up_is_asked_before_the_local_cluster_and_after_the_settings(
    monkeypatch,
):
    config.record_up("up-broker:9093")
    assert config.bootstrap_of() == (
        "up-broker:9093",
        f"the running gateway up (pid {os.getpid()})",
    )
    assert config.client_config()["bootstrap.servers"] == "up-broker:9093"
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "env:9092")
    assert config.bootstrap_of() == ("env:9092", "$KAFKA_BOOTSTRAP")
    assert config.bootstrap_of("flag:9092") == ("flag:9092", "--bootstrap")
    monkeypatch.delenv("KAFKA_BOOTSTRAP")
    config.forget_up()
    assert config.bootstrap_of() == ("127.0.0.1:9092", "the default")


def test_a_gateway_up_that_is_gone_is_not_asked(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    home = tmp_path / "home"
    home.mkdir()
    (home / config.UP_FILE).write_text(json.dumps({"bootstrap": "up:9093", "pid": gone.pid}))
    assert config.running_up() is None
    assert config.client_config()["bootstrap.servers"] == "127.0.0.1:9092"
