"""docker/cluster.yaml without a Docker engine: it parses, every broker runs
`magnetar-broker cluster` with a command line our parser accepts, on its
own ports and a /data of its own (the ledgers are in the bucket: no volume
is shared), against the etcd service."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from magnetar.broker.__main__ import build_parser, config_from_args
from magnetar.broker.config import ConfigError

DOCKER = Path(__file__).resolve().parents[3] / "docker"


def test_cluster_compose_file_runs_three_brokers_on_one_etcd() -> None:
    compose = yaml.safe_load((DOCKER / "cluster.yaml").read_text())
    services = compose["services"]
    assert "etcd" in services
    brokers = {name: s for name, s in services.items() if name.startswith("broker-")}
    assert len(brokers) == 3
    ports = set()
    for service in brokers.values():
        command = service["command"]
        assert command[0] == "magnetar-broker"
        config = config_from_args(build_parser().parse_args(command[1:]))
        assert config.metadata_url == "etcd://etcd:2379"
        assert str(config.data_dir) == "/data"
        assert not service.get("volumes"), "nothing shared between brokers"
        assert service["environment"]["MAGNETAR_STORAGE"] == "object"
        ports.add((config.port, config.http_port))
        assert f"{config.port}:{config.port}" in service["ports"]
    assert len(ports) == 3


def test_standalone_ignores_a_metadata_url_and_cluster_requires_one() -> None:
    standalone = build_parser().parse_args(["standalone"])
    assert config_from_args(standalone).metadata_url == ""
    cluster = build_parser().parse_args(["cluster", "--metadata-url", "etcd://h:1"])
    assert config_from_args(cluster).metadata_url == "etcd://h:1"
    with pytest.raises(ConfigError, match="metadata_url"):
        config_from_args(build_parser().parse_args(["cluster"]))


def test_a_standalone_broker_needs_no_cluster_dependency() -> None:
    """The etcd client is an optional extra: starting the standalone daemon's
    modules does not import it."""
    code = (
        "import sys, magnetar.broker.__main__, magnetar.broker.server, magnetar.broker.admin; "
        "sys.exit(1 if 'aetcd' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
