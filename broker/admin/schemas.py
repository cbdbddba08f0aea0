"""Admin v2 schemas (`/admin/v2/schemas/{tenant}/{namespace}/{topic}/...`).
The schema compatibility strategy policy is declared in policies/catalog.py."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from magnetar.broker.admin.base import HttpError, json_body
from magnetar.broker.schemas.types import SchemaData, SchemaType, SchemaVersion
from magnetar.broker.service.broker_service import BrokerService
from magnetar.proto.naming import InvalidTopicName, TopicName


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    try:
        return TopicName.parse(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicName as exc:
        raise HttpError(412, str(exc)) from exc


def _schema_json(stored: SchemaVersion) -> dict[str, Any]:
    schema = stored.schema
    assert schema is not None
    data = schema.data.decode(errors="replace")
    if schema.type is SchemaType.KEY_VALUE:
        data = _key_value_text(schema.data)
    return {
        "version": stored.version,
        "type": schema.type.name,
        "timestamp": stored.timestamp_ms,
        "data": data,
        "properties": schema.properties,
    }


def _key_value_text(data: bytes) -> str:
    """A KeyValue schema's stored form (key length, key schema, value length,
    value schema; 4-byte big-endian lengths) as Pulsar's REST API shows it:
    {"key": ..., "value": ...}, each part as JSON where it is JSON."""

    def part(raw: bytes) -> object:
        text = raw.decode(errors="replace")
        try:
            return json.loads(text)
        except ValueError:
            return text

    parts: list[bytes] = []
    offset = 0
    for _ in range(2):
        if len(data) < offset + 4:
            return data.decode(errors="replace")
        size = int.from_bytes(data[offset : offset + 4], "big", signed=True)
        start = offset + 4
        if size < 0:
            size = 0
        parts.append(data[start : start + size])
        offset = start + size
    return json.dumps({"key": part(parts[0]), "value": part(parts[1])})


def _payload(body: object) -> SchemaData:
    """A PostSchemaPayload: {"type": "AVRO", "schema": "...", "properties": {}}."""
    if not isinstance(body, dict):
        raise HttpError(400, "the body must be a schema payload object")
    type_name = str(body.get("type", "")).upper()
    if type_name not in SchemaType.__members__ or type_name == "NONE":
        raise HttpError(400, f"unknown schema type {body.get('type')!r}")
    properties = body.get("properties") or {}
    if not isinstance(properties, dict):
        raise HttpError(400, "properties must be an object")
    return SchemaData(
        SchemaType[type_name],
        str(body.get("schema", "")).encode(),
        {str(k): str(v) for k, v in properties.items()},
    )


def routes(service: BrokerService) -> list[web.RouteDef]:
    registry = service.schemas

    async def get_schema(request: web.Request) -> web.Response:
        topic = _topic(request)
        raw = request.match_info.get("version")
        version = None
        if raw is not None:
            try:
                version = int(raw)
            except ValueError as exc:
                raise HttpError(400, f"invalid schema version {raw!r}") from exc
        found = await registry.get(topic, version)
        if found is None:
            raise HttpError(404, "Schema not found")
        return web.json_response(_schema_json(found))

    async def get_all(request: web.Request) -> web.Response:
        live = await registry.live(_topic(request))
        return web.json_response({"getSchemaResponses": [_schema_json(v) for v in live]})

    async def post_schema(request: web.Request) -> web.Response:
        topic = _topic(request)
        await service.check_namespace(topic)
        version = await registry.add(topic, _payload(await json_body(request)))
        return web.json_response({"version": version})

    async def delete_schema(request: web.Request) -> web.Response:
        version = await registry.delete(_topic(request))
        return web.json_response({"version": version})

    async def compatibility(request: web.Request) -> web.Response:
        topic = _topic(request)
        ok, strategy = await registry.is_compatible(topic, _payload(await json_body(request)))
        return web.json_response(
            {"isCompatibility": ok, "schemaCompatibilityStrategy": strategy.value}
        )

    base = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
    return [
        web.get(f"{base}/schema", get_schema),
        web.get(f"{base}/schema/{{version}}", get_schema),
        web.get(f"{base}/schemas", get_all),
        web.post(f"{base}/schema", post_schema),
        web.delete(f"{base}/schema", delete_schema),
        web.post(f"{base}/compatibility", compatibility),
    ]
