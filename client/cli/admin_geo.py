"""`magnetar admin` commands for geo-replication (issue 45), with
pulsar-admin's names: `clusters` (create, update, get, list, delete),
`tenants update` (allowed clusters), `namespaces set-clusters` /
`get-clusters` and `topics set-replication-clusters` /
`get-replication-clusters` / `remove-replication-clusters`.

Importing this module adds them to the `admin` group (the console script
imports it)."""

from __future__ import annotations

import click

from magnetar.client.cli.admin import (
    _admin,
    _show,
    admin,
    namespaces,
    rest_command,
    tenants,
    topic_path,
    topics,
)

__all__ = ["admin"]


def _clusters_list(text: str) -> list[str]:
    found = [c.strip() for c in text.split(",") if c.strip()]
    if not found:
        raise click.BadParameter("give at least one cluster", param_hint="--clusters")
    return found


@admin.group()
def clusters() -> None:
    """Clusters: this one and the remote ones topics replicate to."""


def _cluster_options(command: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        (
            click.option("--url", help="The remote's HTTP service URL (serviceUrl)."),
            click.option("--url-secure", help="Its HTTPS service URL (serviceUrlTls)."),
            click.option("--broker-url", help="Its binary protocol URL (brokerServiceUrl)."),
            click.option(
                "--broker-url-secure", help="Its TLS binary protocol URL (brokerServiceUrlTls)."
            ),
            click.option("--auth-plugin", help="How to authenticate there (authenticationPlugin)."),
            click.option(
                "--auth-parameters",
                help="The plugin's parameters, e.g. token:<jwt> (authenticationParameters).",
            ),
            click.option(
                "--tls-enable",
                is_flag=True,
                default=None,
                help="Replicate over --broker-url-secure (brokerClientTlsEnabled).",
            ),
            click.option(
                "--tls-trust-certs-filepath",
                help="CA certificates to trust there (brokerClientTrustCertsFilePath).",
            ),
            click.option(
                "--tls-allow-insecure",
                is_flag=True,
                default=None,
                help="Accept any certificate there (tlsAllowInsecureConnection).",
            ),
        )
    ):
        command = option(command)
    return command


def _cluster_data(options: dict[str, str | bool | None]) -> dict[str, str | bool]:
    names = {
        "tls_enable": "brokerClientTlsEnabled",
        "tls_trust_certs_filepath": "brokerClientTrustCertsFilePath",
        "tls_allow_insecure": "tlsAllowInsecureConnection",
        "url": "serviceUrl",
        "url_secure": "serviceUrlTls",
        "broker_url": "brokerServiceUrl",
        "broker_url_secure": "brokerServiceUrlTls",
        "auth_plugin": "authenticationPlugin",
        "auth_parameters": "authenticationParameters",
    }
    return {names[key]: value for key, value in options.items() if value is not None}


def _cluster_path(cluster: str) -> str:
    return f"/admin/v2/clusters/{cluster}"


rest_command(clusters, "list", "GET", lambda: "/admin/v2/clusters")
rest_command(clusters, "get", "GET", _cluster_path, "cluster")
rest_command(clusters, "delete", "DELETE", _cluster_path, "cluster")


@clusters.command("create")
@click.argument("cluster")
@_cluster_options
@click.pass_context
def clusters_create(ctx: click.Context, /, cluster: str, **options: str | bool | None) -> None:
    _admin(ctx).call("PUT", _cluster_path(cluster), _cluster_data(options))


@clusters.command("update")
@click.argument("cluster")
@_cluster_options
@click.pass_context
def clusters_update(ctx: click.Context, /, cluster: str, **options: str | bool | None) -> None:
    _admin(ctx).call("POST", _cluster_path(cluster), _cluster_data(options))


@tenants.command("update")
@click.argument("tenant")
@click.option("--allowed-clusters", "-c", required=True, help="Comma-separated cluster names.")
@click.pass_context
def tenants_update(ctx: click.Context, tenant: str, allowed_clusters: str) -> None:
    body = {"allowedClusters": _clusters_list(allowed_clusters)}
    _admin(ctx).call("POST", f"/admin/v2/tenants/{tenant}", body)


def _ns_replication(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}/replication"


@namespaces.command("set-clusters")
@click.argument("namespace")
@click.option("--clusters", "-c", required=True, help="Comma-separated cluster names.")
@click.pass_context
def ns_set_clusters(ctx: click.Context, namespace: str, clusters: str) -> None:
    _admin(ctx).call("POST", _ns_replication(namespace), _clusters_list(clusters))


rest_command(namespaces, "get-clusters", "GET", _ns_replication, "namespace")

_replication = topic_path("/replication")


@topics.command("set-replication-clusters")
@click.argument("topic")
@click.option("--clusters", "-c", required=True, help="Comma-separated cluster names.")
@click.pass_context
def topic_set_clusters(ctx: click.Context, topic: str, clusters: str) -> None:
    _admin(ctx).call("POST", _replication(topic), _clusters_list(clusters))


@topics.command("get-replication-clusters")
@click.argument("topic")
@click.option("--applied", is_flag=True, help="What the topic runs with (else its own).")
@click.pass_context
def topic_get_clusters(ctx: click.Context, topic: str, applied: bool) -> None:
    params = {"applied": "true"} if applied else None
    _show(ctx, _admin(ctx).call("GET", _replication(topic), params=params))


rest_command(topics, "remove-replication-clusters", "DELETE", _replication, "topic")
