"""Broker configuration: TOML < environment < command line, validated once."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.broker.__main__ import build_parser, config_from_args
from magnetar.broker.config import BrokerConfig, ConfigError, load_config


def test_defaults() -> None:
    config = load_config(env={})
    assert config == BrokerConfig()
    assert config.port == 6650
    assert config.http_port == 8080
    assert config.bind == "127.0.0.1"
    assert config.data_dir == Path("./data")
    assert config.max_message_size == 5 * 1024 * 1024
    assert config.allow_auto_topic_creation is True
    assert config.sync_policy == "fsync"


def test_precedence_file_env_cli(tmp_path: Path) -> None:
    toml = tmp_path / "broker.toml"
    toml.write_text('port = 7000\nhttp_port = 7001\nlog_format = "json"\nbind = "0.0.0.0"\n')
    config = load_config(
        config_file=toml,
        env={"MAGNETAR_PORT": "7100", "MAGNETAR_ALLOW_AUTO_TOPIC_CREATION": "false", "HOME": "x"},
        overrides={"port": "7200", "data_dir": None},
    )
    assert config.port == 7200  # CLI wins
    assert config.http_port == 7001  # from the file
    assert config.allow_auto_topic_creation is False  # from the environment
    assert config.log_format == "json"
    assert config.advertised_host == "127.0.0.1"  # bind-all advertises loopback


def test_cli_parser_maps_to_config(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["standalone", "--port", "0", "--http-port", "0", "--data-dir", str(tmp_path)]
    )
    config = config_from_args(args)
    assert (config.port, config.http_port, config.data_dir) == (0, 0, tmp_path)


def test_entry_cache_settings_from_the_command_line(tmp_path: Path) -> None:
    """The cache budget and age threshold reach the storage's configuration."""
    from magnetar.broker.storage_setup import ledger_config

    args = build_parser().parse_args(
        [
            "standalone",
            "--data-dir",
            str(tmp_path),
            "--entry-cache-size",
            "8_388_608",
            "--entry-cache-eviction-threshold-seconds",
            "0.25",
        ]
    )
    config = config_from_args(args)
    assert (config.entry_cache_size, config.entry_cache_eviction_threshold_seconds) == (
        8 << 20,
        0.25,
    )
    storage = ledger_config(config)
    assert (storage.entry_cache_size, storage.cache_eviction_threshold_s) == (8 << 20, 0.25)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MAGNETAR_PORT": "eighty"}, "MAGNETAR_PORT"),
        ({"MAGNETAR_PORT": "70000"}, "port"),
        ({"MAGNETAR_SYNC_POLICY": "sometimes"}, "fsync, interval, none"),
        ({"MAGNETAR_ALLOW_AUTO_TOPIC_CREATION": "maybe"}, "boolean"),
        ({"MAGNETAR_MAX_MESSAGE_SIZE": "10"}, "max_message_size"),
        ({"MAGNETAR_ENTRY_CACHE_SIZE": "-1"}, "entry_cache_size = -1: must be >= 0"),
        ({"MAGNETAR_ENTRY_CACHE_SIZE": "lots"}, "entry_cache_size .*not an integer"),
        (
            {"MAGNETAR_ENTRY_CACHE_EVICTION_THRESHOLD_SECONDS": "0"},
            "entry_cache_eviction_threshold_seconds = 0.0: must be > 0",
        ),
        (
            {"MAGNETAR_ENTRY_CACHE_EVICTION_THRESHOLD_SECONDS": "soon"},
            "entry_cache_eviction_threshold_seconds .*not a number",
        ),
    ],
)
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(env=env)


def test_unknown_environment_keys_are_reported_not_fatal() -> None:
    warnings: list[str] = []
    config = load_config(env={"MAGNETAR_NO_SUCH_KEY": "1"}, warnings=warnings)
    assert config == BrokerConfig()
    assert warnings == ["ignoring MAGNETAR_NO_SUCH_KEY: not a broker setting"]


def test_bad_toml_is_reported(tmp_path: Path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text("port = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(config_file=toml, env={})
    toml.write_text("colour = 'blue'\n")
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        load_config(config_file=toml, env={})


def test_config_is_frozen() -> None:
    config = load_config(env={})
    with pytest.raises(AttributeError):
        config.port = 1  # type: ignore[misc]
    assert config.replace(port=0).port == 0
    with pytest.raises(ConfigError):
        config.replace(port=-1)
