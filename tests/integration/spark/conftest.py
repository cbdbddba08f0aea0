"""A local Spark session for the connector's tests (one per test run: a
session takes seconds to start), a standalone cluster for those that run on
one, and brokers with deduplication on."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.support.broker_fixtures import broker_defaults, broker_factory
from tests.support.brokers import BrokerFactory, BrokerThread, token_auth
from tests.support.certs import CertAuthority
from tests.support.spark_cluster import SparkCluster

pyspark = pytest.importorskip("pyspark", reason="pip install magnetar[spark]")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java runtime (17+) on PATH or JAVA_HOME", allow_module_level=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from magnetar import spark_connector

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    warehouse = Path(tmp_path_factory.mktemp("spark"))
    session = (
        # local[2, 3]: two threads, and a failed task is tried up to 3 times.
        SparkSession.builder.master("local[2,3]")
        .appName("magnetar-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone cluster (issue 46): a master and two one-core workers, each
    a JVM of its own; started by the first test that asks for it."""
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1) as started:
        yield started


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    """Deduplication on: the connector's effectively-once writes rely on it."""
    return broker_factory(broker_deduplication_enabled=True)


SECRET = b"spark-connector-test-secret-0123456789"


@pytest.fixture
def secured(broker_factory: BrokerFactory, tmp_path: Path) -> tuple[BrokerThread, str, str]:
    """TLS (a certificate for localhost), token authentication, no anonymous
    role, deduplication on; with the CA certificate's path and a token the
    broker takes."""
    ca = CertAuthority(tmp_path)
    server = ca.issue("localhost", server=True)
    broker = broker_factory(
        **token_auth(
            tmp_path,
            SECRET,
            tls_enabled=True,
            tls_port=0,
            tls_http_port=0,
            tls_cert_file=str(server.cert),
            tls_key_file=str(server.key),
            broker_deduplication_enabled=True,
        )
    )
    token = jwt.encode({"sub": "spark"}, SECRET, algorithm="HS256")
    return broker, str(ca.pem.cert), token


__all__ = ["broker", "broker_defaults", "broker_factory", "cluster", "secured", "spark"]
