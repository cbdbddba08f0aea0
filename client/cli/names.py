"""Topic names as the tools take them: Pulsar's short forms expanded, the
way pulsar-admin and pulsar-client expand them (TopicName.get)."""

from __future__ import annotations

import click

from magnetar.proto.naming import InvalidTopicName, TopicName


def full_topic(name: str) -> str:
    """`t` -> persistent://public/default/t; `tenant/ns/t` ->
    persistent://tenant/ns/t; a full name stays as it is. A name that is
    none of these is bad usage (exit 2)."""
    try:
        return str(TopicName.parse(name))
    except InvalidTopicName as exc:
        raise click.BadParameter(str(exc), param_hint="TOPIC") from None


def topic_rest_path(name: str) -> str:
    """`persistent/tenant/ns/t`, as the admin REST paths name a topic."""
    return TopicName.parse(full_topic(name)).rest_path


def _expand(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    return full_topic(value)


# The TOPIC argument of every command that takes one.
topic_argument = click.argument("topic", callback=_expand)
