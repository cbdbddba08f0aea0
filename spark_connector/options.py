"""The connector's options: Spark hands them over lower-cased, as strings.

Known options are checked here, with a clear error naming the option; the
`client.*` ones pass through to `magnetar.client.Client`, converted to the
type of that keyword's default.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.client import Authentication, Client, PulsarException

CLIENT_PREFIX = "client."


class OptionError(ValueError):
    """An unknown option, a bad value, or a combination that cannot work."""


READER_PREFIX = "reader."
# create_reader's keywords a Spark option cannot carry (objects, or set by us).
_NOT_FOR_READERS = (
    "self", "topic", "start_message_id", "schema", "reader_listener", "crypto_key_reader",
    "start_message_id_inclusive", "crypto_failure_action",
)  # fmt: skip


def _keywords(function: Any, skip: tuple[str, ...]) -> dict[str, inspect.Parameter]:
    params = inspect.signature(function).parameters
    return {
        name: p
        for name, p in params.items()
        if name not in skip and p.kind is p.POSITIONAL_OR_KEYWORD
    }


def _convert(option: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise OptionError(f"option {option}: {raw!r} is not a {type(default).__name__}") from None
    return raw


def _passthrough(
    options: Mapping[str, str], prefix: str, keywords: dict[str, inspect.Parameter], owner: str
) -> dict[str, Any]:
    by_lower = {name.lower(): name for name in keywords}
    result: dict[str, Any] = {}
    for option, raw in options.items():
        if not option.startswith(prefix):
            continue
        name = by_lower.get(option[len(prefix) :])
        if name is None:
            raise OptionError(f"unknown option {option} ({owner} has no such keyword)")
        result[name] = _convert(option, raw, keywords[name].default)
    return result


# Authentication is an object, not a string: these two name it as Pulsar's
# own tools do (a plugin name and its parameter string), and the connector
# builds Authentication(plugin, params) from them.
AUTH_PLUGIN, AUTH_PARAMS = f"{CLIENT_PREFIX}auth_plugin", f"{CLIENT_PREFIX}auth_params"


def client_options(options: Mapping[str, str]) -> dict[str, Any]:
    """The `client.*` options as keyword arguments of magnetar.client.Client."""
    keywords = _keywords(Client.__init__, ("self", "service_url", "authentication"))
    given = {k: v for k, v in options.items() if k not in (AUTH_PLUGIN, AUTH_PARAMS)}
    result = _passthrough(given, CLIENT_PREFIX, keywords, "magnetar.client.Client")
    plugin, params = options.get(AUTH_PLUGIN), options.get(AUTH_PARAMS)
    if params is not None and plugin is None:
        raise OptionError(f"option {AUTH_PARAMS} needs {AUTH_PLUGIN} (token, basic, tls, oauth2)")
    if plugin is not None:
        try:
            auth = Authentication(plugin, params or "")
        except (ValueError, PulsarException) as exc:
            raise OptionError(f"option {AUTH_PLUGIN}={plugin!r}: {exc}") from None
        if not auth.plugin_found:
            raise OptionError(f"option {AUTH_PLUGIN}: no authentication plugin {plugin!r}")
        result["authentication"] = auth
    return result


def reader_options(options: Mapping[str, str]) -> dict[str, Any]:
    """The `reader.*` options as keyword arguments of Client.create_reader."""
    keywords = _keywords(Client.create_reader, _NOT_FOR_READERS)
    return _passthrough(options, READER_PREFIX, keywords, "Client.create_reader")


@dataclass(frozen=True)
class WriteOptions:
    service_url: str
    topic: str | None  # None: every row names its topic in a `topic` column
    producer_name_prefix: str | None
    client: dict[str, Any] = field(default_factory=dict)

    # Spark's own options arrive too (lower-cased).
    KNOWN = frozenset(
        {"service_url", "topic", "producer_name_prefix", "path", "checkpointlocation"}
    )

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: list[str]) -> WriteOptions:
        unknown = [o for o in options if o not in cls.KNOWN and not o.startswith(CLIENT_PREFIX)]
        if unknown:
            raise OptionError(f"unknown option(s) for writing: {', '.join(sorted(unknown))}")
        service_url = options.get("service_url")
        if not service_url:
            raise OptionError("option service_url is required (e.g. pulsar://localhost:6650)")
        topic = options.get("topic") or options.get("path")
        if topic is None and "topic" not in columns:
            raise OptionError("name the topic: option topic, or a `topic` column")
        if "value" not in columns:
            raise OptionError("the DataFrame needs a `value` column (binary or string)")
        return cls(service_url, topic, options.get("producer_name_prefix"), client_options(options))
