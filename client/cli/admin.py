"""`magnetar admin`: tenants, namespaces (policies) and topics over the
admin REST API, with human output by default and `--json` for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from magnetar.client.cli.connection import Connection, connection_options
from magnetar.client.cli.http import Admin
from magnetar.client.cli.names import topic_rest_path
from magnetar.client.cli.peek import peeked_messages


def _human(value: Any, indent: int = 0) -> list[str]:
    """Nested stats as indented `key: value` lines (what a person reads;
    `--json` keeps the broker's JSON for scripts)."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return [f"{pad}(none)"]
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"{pad}{key}:")
                lines.extend(_human(item, indent + 1))
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            if isinstance(item, dict | list) and item:
                lines.append(f"{pad}-")
                lines.extend(_human(item, indent + 1))
            else:
                lines.append(f"{pad}- {_scalar(item)}")
        return lines
    return [f"{pad}{_scalar(value)}"]


def _scalar(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if value in ({}, []):
        return "(none)"
    return str(value)


def _show(ctx: click.Context, value: Any) -> None:
    if value is None:
        return
    if ctx.obj["json"]:
        click.echo(json.dumps(value, indent=2, sort_keys=True))
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        for item in value:
            click.echo(item)
    elif isinstance(value, bytes):
        click.echo(value.decode(errors="replace"))
    else:
        click.echo("\n".join(_human(value)))


def _admin(ctx: click.Context) -> Admin:
    admin: Admin = ctx.obj["admin"]
    return admin


def rest_command(
    group: click.Group,
    name: str,
    method: str,
    path: Callable[..., str],
    *arguments: str,
    help_text: str | None = None,
) -> None:
    """Add to `group` a command that makes one admin call, its path from the
    command's arguments (by name), and prints the answer when there is one."""

    @click.pass_context
    def command(ctx: click.Context, /, **values: str) -> None:
        _show(ctx, _admin(ctx).call(method, path(**values)))

    for argument in reversed(arguments):
        command = click.argument(argument)(command)
    group.command(name, help=help_text)(command)


@click.group()
@connection_options("admin")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_context
def admin(ctx: click.Context, connection: Connection, as_json: bool) -> None:
    """Administer a broker over its admin REST API (like pulsar-admin).
    A topic is a full name, `tenant/namespace/topic` or `topic` (in
    public/default)."""
    ctx.ensure_object(dict)
    ctx.obj.update(admin=connection.admin(), json=as_json)


# ------------------------------------------------------------------ tenants


@admin.group()
def tenants() -> None:
    """Tenants."""


rest_command(tenants, "list", "GET", lambda: "/admin/v2/tenants")


@tenants.command("create")
@click.argument("tenant")
@click.option("--allowed-clusters", "-c", default="standalone", show_default=True)
@click.pass_context
def tenants_create(ctx: click.Context, tenant: str, allowed_clusters: str) -> None:
    body = {"adminRoles": [], "allowedClusters": allowed_clusters.split(",")}
    _admin(ctx).call("PUT", f"/admin/v2/tenants/{tenant}", body)


# --------------------------------------------------------------- namespaces


@admin.group()
def namespaces() -> None:
    """Namespaces and their policies."""


def _namespace_path(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}"


rest_command(namespaces, "list", "GET", lambda tenant: f"/admin/v2/namespaces/{tenant}", "tenant")
rest_command(namespaces, "create", "PUT", _namespace_path, "namespace")
rest_command(namespaces, "policies", "GET", _namespace_path, "namespace")


@namespaces.command("set-deduplication")
@click.argument("namespace")
@click.option("--enable/--disable", required=True)
@click.pass_context
def set_dedup(ctx: click.Context, namespace: str, enable: bool) -> None:
    _admin(ctx).call("POST", f"/admin/v2/namespaces/{namespace}/deduplication", enable)


@namespaces.command("set-retention")
@click.argument("namespace")
@click.option("--time", "minutes", type=int, required=True, help="Minutes; -1 unlimited.")
@click.option("--size", "megabytes", type=int, required=True, help="MB; -1 unlimited.")
@click.pass_context
def set_retention(ctx: click.Context, namespace: str, minutes: int, megabytes: int) -> None:
    body = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": megabytes}
    _admin(ctx).call("POST", f"/admin/v2/namespaces/{namespace}/retention", body)


@namespaces.command("set-message-ttl")
@click.argument("namespace")
@click.option("--ttl", "seconds", type=int, required=True, help="Seconds.")
@click.pass_context
def set_ttl(ctx: click.Context, namespace: str, seconds: int) -> None:
    _admin(ctx).call("POST", f"/admin/v2/namespaces/{namespace}/messageTTL", seconds)


@namespaces.command("set-backlog-quota")
@click.argument("namespace")
@click.option("--limit", "limit_size", type=int, required=True, help="Bytes.")
@click.option(
    "--policy",
    type=click.Choice(["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]),
    required=True,
)
@click.pass_context
def set_quota(ctx: click.Context, namespace: str, limit_size: int, policy: str) -> None:
    body = {"limitSize": limit_size, "limitTime": -1, "policy": policy}
    _admin(ctx).call("POST", f"/admin/v2/namespaces/{namespace}/backlogQuota", body)


def _policy_path(base: str, policy: str, params: tuple[str, ...]) -> str:
    """The REST path of a policy (Pulsar's name, e.g. messageTTL), with
    query parameters given as key=value (backlogQuotaType=message_age)."""
    for param in params:
        if "=" not in param:
            raise click.BadParameter(f"{param!r} is not key=value", param_hint="--param")
    query = "&".join(params)
    return f"{base}/{policy}" + (f"?{query}" if query else "")


def _policy_value(text: str) -> object:
    """A policy value as JSON (60, true, {"limitSize": 1}); else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


_POLICY_HELP = (
    "POLICY is Pulsar's REST name of the policy (messageTTL, retention, "
    "maxProducersPerTopic, backlogQuota, ...); VALUE is JSON."
)


@namespaces.command("get-policy", help=f"Show one policy. {_POLICY_HELP}")
@click.argument("namespace")
@click.argument("policy")
@click.pass_context
def ns_get_policy(ctx: click.Context, namespace: str, policy: str) -> None:
    _show(ctx, _admin(ctx).call("GET", f"/admin/v2/namespaces/{namespace}/{policy}"))


@namespaces.command("set-policy", help=f"Set one policy. {_POLICY_HELP}")
@click.argument("namespace")
@click.argument("policy")
@click.argument("value")
@click.option("--param", "params", multiple=True, help="A query parameter, key=value.")
@click.pass_context
def ns_set_policy(
    ctx: click.Context, namespace: str, policy: str, value: str, params: tuple[str, ...]
) -> None:
    path = _policy_path(f"/admin/v2/namespaces/{namespace}", policy, params)
    _admin(ctx).call("POST", path, _policy_value(value))


@namespaces.command("remove-policy", help=f"Remove one policy (inherit again). {_POLICY_HELP}")
@click.argument("namespace")
@click.argument("policy")
@click.option("--param", "params", multiple=True, help="A query parameter, key=value.")
@click.pass_context
def ns_remove_policy(
    ctx: click.Context, namespace: str, policy: str, params: tuple[str, ...]
) -> None:
    path = _policy_path(f"/admin/v2/namespaces/{namespace}", policy, params)
    _admin(ctx).call("DELETE", path)


# ------------------------------------------------------------------- topics


@admin.group()
def topics() -> None:
    """Topics and subscriptions."""


def topic_path(suffix: str = "") -> Callable[[str], str]:
    """The REST path of a command's TOPIC argument, and `suffix` under it."""
    return lambda topic: f"/admin/v2/{topic_rest_path(topic)}{suffix}"


rest_command(
    topics, "list", "GET", lambda namespace: f"/admin/v2/persistent/{namespace}", "namespace"
)
rest_command(topics, "create", "PUT", topic_path(), "topic")


@topics.command("create-partitioned-topic")
@click.argument("topic")
@click.option("--partitions", "-p", type=int, required=True)
@click.pass_context
def create_partitioned(ctx: click.Context, topic: str, partitions: int) -> None:
    _admin(ctx).call("PUT", f"/admin/v2/{topic_rest_path(topic)}/partitions", partitions)


@topics.command("delete")
@click.argument("topic")
@click.option(
    "--force", "-f", is_flag=True, help="Close the topic's producers and consumers and delete it."
)
@click.pass_context
def topics_delete(ctx: click.Context, topic: str, force: bool) -> None:
    params = {"force": "true"} if force else None
    _admin(ctx).call("DELETE", f"/admin/v2/{topic_rest_path(topic)}", params=params)


for _name, _suffix, _help in (
    ("stats", "stats", "Topic stats (rates, backlog, subscriptions, consumers)."),
    ("stats-internal", "internalStats", "Ledgers and cursors of a topic."),
    ("partitioned-stats", "partitioned-stats", "Stats of a partitioned topic."),
    ("subscriptions", "subscriptions", "A topic's subscriptions."),
    ("last-message-id", "lastMessageId", "The newest message id."),
):
    rest_command(topics, _name, "GET", topic_path(f"/{_suffix}"), "topic", help_text=_help)


@topics.command("create-subscription")
@click.argument("topic")
@click.option("--subscription", "-s", required=True)
@click.option("--earliest", is_flag=True, help="Start at the oldest message (default: latest).")
@click.pass_context
def create_subscription(ctx: click.Context, topic: str, subscription: str, earliest: bool) -> None:
    body = {"ledgerId": -1, "entryId": -1} if earliest else None
    path = f"/admin/v2/{topic_rest_path(topic)}/subscription/{subscription}"
    _admin(ctx).call("PUT", path, body)


@topics.command("unsubscribe")
@click.argument("topic")
@click.option("--subscription", "-s", required=True)
@click.pass_context
def unsubscribe(ctx: click.Context, topic: str, subscription: str) -> None:
    _admin(ctx).call("DELETE", f"/admin/v2/{topic_rest_path(topic)}/subscription/{subscription}")


@topics.command("reset-cursor")
@click.argument("topic")
@click.option("--subscription", "-s", required=True)
@click.option("--time", "timestamp", type=int, help="Publish time, ms since the epoch.")
@click.option("--message-id", "-m", help="ledgerId:entryId")
@click.pass_context
def reset_cursor(
    ctx: click.Context, topic: str, subscription: str, timestamp: int | None, message_id: str | None
) -> None:
    base = f"/admin/v2/{topic_rest_path(topic)}/subscription/{subscription}/resetcursor"
    if (timestamp is None) == (message_id is None):
        raise click.UsageError("give exactly one of --time and --message-id")
    if timestamp is not None:
        _admin(ctx).call("POST", f"{base}/{timestamp}")
        return
    assert message_id is not None
    try:
        ledger, entry = (int(part) for part in message_id.split(":"))
    except ValueError as exc:
        raise click.UsageError(f"--message-id must be ledgerId:entryId, got {message_id}") from exc
    _admin(ctx).call("POST", base, {"ledgerId": ledger, "entryId": entry})


@topics.command("skip")
@click.argument("topic")
@click.option("--subscription", "-s", required=True)
@click.option("--count", "-n", type=int, required=True)
@click.pass_context
def skip(ctx: click.Context, topic: str, subscription: str, count: int) -> None:
    path = f"/admin/v2/{topic_rest_path(topic)}/subscription/{subscription}/skip/{count}"
    _admin(ctx).call("POST", path)


@topics.command("clear-backlog")
@click.argument("topic")
@click.option("--subscription", "-s", required=True)
@click.pass_context
def clear_backlog(ctx: click.Context, topic: str, subscription: str) -> None:
    path = f"/admin/v2/{topic_rest_path(topic)}/subscription/{subscription}/skip_all"
    _admin(ctx).call("POST", path)


@topics.command("expire-messages")
@click.argument("topic")
@click.option("--subscription", "-s", required=True)
@click.option("--expire-time", "-t", "seconds", type=int, required=True)
@click.pass_context
def expire(ctx: click.Context, topic: str, subscription: str, seconds: int) -> None:
    path = (
        f"/admin/v2/{topic_rest_path(topic)}/subscription/{subscription}/expireMessages/{seconds}"
    )
    _admin(ctx).call("POST", path)


@topics.command("peek-messages")
@click.argument("topic")
@click.option("--subscription", "-s", required=True)
@click.option("--count", "-n", type=int, default=1, show_default=True)
@click.pass_context
def peek(ctx: click.Context, topic: str, subscription: str, count: int) -> None:
    """The first COUNT unacknowledged entries, batches split into their
    messages (decompressed), one line each: id and body (with --json, objects
    with the key and properties too)."""
    base = f"/admin/v2/{topic_rest_path(topic)}/subscription/{subscription}/position"
    for n in range(1, count + 1):
        response = _admin(ctx).request("GET", f"{base}/{n}")
        for message in peeked_messages(response.headers, response.content):
            if ctx.obj["json"]:
                click.echo(json.dumps(message, sort_keys=True))
            else:
                click.echo(f"{message['id']}: {message['body']}")


@topics.command("terminate")
@click.argument("topic")
@click.pass_context
def terminate(ctx: click.Context, topic: str) -> None:
    """No more messages may be published; prints the last message id."""
    last = _admin(ctx).call("POST", f"/admin/v2/{topic_rest_path(topic)}/terminate")
    if ctx.obj["json"]:
        _show(ctx, last)
    else:
        click.echo(f"terminated; last message id {last['ledgerId']}:{last['entryId']}")


rest_command(topics, "unload", "PUT", topic_path("/unload"), "topic")


@topics.command("get-policy", help=f"Show one topic policy. {_POLICY_HELP}")
@click.argument("topic")
@click.argument("policy")
@click.option(
    "--applied", is_flag=True, help="What the topic runs with (topic, namespace, broker)."
)
@click.pass_context
def topic_get_policy(ctx: click.Context, topic: str, policy: str, applied: bool) -> None:
    path = f"/admin/v2/{topic_rest_path(topic)}/{policy}" + ("?applied=true" if applied else "")
    _show(ctx, _admin(ctx).call("GET", path))


@topics.command("set-policy", help=f"Set one topic policy. {_POLICY_HELP}")
@click.argument("topic")
@click.argument("policy")
@click.argument("value")
@click.option("--param", "params", multiple=True, help="A query parameter, key=value.")
@click.pass_context
def topic_set_policy(
    ctx: click.Context, topic: str, policy: str, value: str, params: tuple[str, ...]
) -> None:
    path = _policy_path(f"/admin/v2/{topic_rest_path(topic)}", policy, params)
    _admin(ctx).call("POST", path, _policy_value(value))


@topics.command("remove-policy", help=f"Remove one topic policy (inherit again). {_POLICY_HELP}")
@click.argument("topic")
@click.argument("policy")
@click.option("--param", "params", multiple=True, help="A query parameter, key=value.")
@click.pass_context
def topic_remove_policy(
    ctx: click.Context, topic: str, policy: str, params: tuple[str, ...]
) -> None:
    _admin(ctx).call("DELETE", _policy_path(f"/admin/v2/{topic_rest_path(topic)}", policy, params))
