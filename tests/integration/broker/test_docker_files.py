"""docker/ without a Docker engine: the compose files and configs parse and
point at files that exist; every metric the Grafana dashboard and the
Prometheus config use is one a live broker exports on /metrics; the
Dockerfile starts the broker with the command README documents."""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from magnetar.broker.__main__ import build_parser
from magnetar.broker.config import BrokerConfig
from tests.support.brokers import BrokerThread
from tests.support.official import official_client

DOCKER = Path(__file__).resolve().parents[3] / "docker"
METRIC = re.compile(r"\b(?:pulsar|magnetar)_[a-z_]+\b")


def test_compose_and_configs_parse() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert set(compose["services"]) == {"broker", "prometheus", "grafana"}
    assert compose["services"]["broker"]["build"]["dockerfile"] == "docker/Dockerfile"
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DOCKER / source).exists(), source
    prometheus = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"] == ["broker:8080"]
    for path in (DOCKER / "grafana" / "provisioning").rglob("*.yml"):
        assert yaml.safe_load(path.read_text())["apiVersion"] == 1


@pytest.mark.parametrize(
    ("compose_file", "brokers"),
    [("objects.yaml", ["broker"]), ("cluster.yaml", ["broker-1", "broker-2", "broker-3"])],
)
def test_object_storage_compose_wires_the_brokers_to_their_bucket(
    compose_file: str, brokers: list[str]
) -> None:
    """docker/objects.yaml and docker/cluster.yaml: each broker's object store
    settings point at the SeaweedFS service with the credentials its
    identities file grants; the cluster's brokers share no volume."""
    compose = yaml.safe_load((DOCKER / compose_file).read_text())
    services = compose["services"]
    assert {"seaweedfs", "bucket", *brokers} <= set(services)
    identities = json.loads((DOCKER / "seaweedfs" / "identities.json").read_text())
    (credentials,) = identities["identities"][0]["credentials"]
    keys = {f.name for f in dataclasses.fields(BrokerConfig)}
    for name in brokers:
        env = services[name]["environment"]
        assert env["MAGNETAR_STORAGE"] == "object"
        assert env["MAGNETAR_OBJECT_STORE_ENDPOINT"] == "http://seaweedfs:8333"
        bucket = env["MAGNETAR_OBJECT_STORE_URL"].removeprefix("s3://").split("/")[0]
        assert f"/buckets/{bucket}/" in services["bucket"]["command"]
        assert credentials == {
            "accessKey": env["AWS_ACCESS_KEY_ID"],
            "secretKey": env["AWS_SECRET_ACCESS_KEY"],
        }
        if len(brokers) > 1:  # a standalone broker keeps its SQLite store in a volume
            assert not services[name].get("volumes"), "a cluster broker's /data is its own"
        # Every MAGNETAR_ variable is a broker setting.
        for variable in env:
            if variable.startswith("MAGNETAR_"):
                assert variable.removeprefix("MAGNETAR_").lower() in keys, variable
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DOCKER / source).exists(), source


def test_dashboard_metrics_exist_on_live_metrics(broker: BrokerThread) -> None:
    with official_client(broker.url) as client:
        consumer = client.subscribe("persistent://public/default/docker-metrics", "s")
        producer = client.create_producer("persistent://public/default/docker-metrics")
        producer.send(b"x")
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
            exported = set(METRIC.findall(response.read().decode()))
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "magnetar.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in METRIC.findall(target["expr"])
    }
    used |= set(METRIC.findall((DOCKER / "prometheus" / "prometheus.yml").read_text()))
    assert used and used <= exported, sorted(used - exported)


def test_dockerfile_runs_the_documented_command() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    readme = (DOCKER.parent / "README.md").read_text()
    assert "USER magnetar" in dockerfile and "HEALTHCHECK" in dockerfile
    assert "/admin/v2/brokers/health" in dockerfile
    cmd = json.loads(dockerfile.split("\nCMD ", 1)[1].splitlines()[0])
    assert " ".join(cmd[:2]) in readme  # magnetar-broker standalone
    # Every flag of the CMD is one the broker's own parser takes.
    assert cmd[0] == "magnetar-broker"
    parsed = build_parser().parse_args(cmd[1:])
    assert (parsed.bind, parsed.data_dir) == ("0.0.0.0", "/data")
    # README's docker commands are the Dockerfile's own header lines.
    for line in dockerfile.splitlines():
        if line.startswith("#   docker "):
            assert line.removeprefix("#   ") in readme, line
