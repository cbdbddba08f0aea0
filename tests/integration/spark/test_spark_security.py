"""The connector against a secured broker (issue 26, item 1): TLS with host
name validation and a token, given as `client.*` options (the token as
`client.auth_plugin` / `client.auth_params`); without the token the write
fails, and a bad plugin name is an option error."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from magnetar.spark_connector.options import OptionError, client_options
from tests.support.brokers import BrokerThread


def test_write_and_read_through_tls_and_a_token(
    spark: Any, secured: tuple[BrokerThread, str, str]
) -> None:
    broker, ca_cert, token = secured
    assert broker.server is not None
    url = f"pulsar+ssl://localhost:{broker.server.tls_port}"
    topic = f"persistent://public/default/spark-sec-{uuid.uuid4().hex[:8]}"
    security = {
        "client.tls_trust_certs_file_path": ca_cert,
        "client.tls_validate_hostname": "true",
        "client.auth_plugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "client.auth_params": f"token:{token}",
    }
    rows = [(f"v{i}",) for i in range(50)]
    df = spark.createDataFrame(rows, "value string")
    (
        df.write.format("magnetar")
        .option("service_url", url)
        .option("topic", topic)
        .options(**security)
        .mode("append")
        .save()
    )
    read = spark.read.format("magnetar").option("service_url", url).option("topic", topic)
    values = read.options(**security).load().selectExpr("CAST(value AS STRING) AS v").collect()
    assert sorted(r.v for r in values) == sorted(v for (v,) in rows)

    anonymous = {k: v for k, v in security.items() if not k.startswith("client.auth")}
    with pytest.raises(Exception, match=r"(?i)authentic|connect"):
        (
            df.write.format("magnetar")
            .option("service_url", url)
            .option("topic", topic)
            .option("client.operation_timeout_seconds", "5")
            .options(**anonymous)
            .mode("append")
            .save()
        )


def test_authentication_options_are_checked() -> None:
    auth = client_options({"client.auth_plugin": "token", "client.auth_params": "token:abc"})
    assert auth["authentication"].auth_data() == b"abc"
    with pytest.raises(OptionError, match=r"client\.auth_plugin"):
        client_options({"client.auth_params": "token:abc"})
    with pytest.raises(OptionError, match="no authentication plugin"):
        client_options({"client.auth_plugin": "kerberos-maybe"})
    with pytest.raises(OptionError, match=r"unknown option client\.authentication"):
        client_options({"client.authentication": "token:abc"})
