"""Turning a peeked entry (the admin REST `.../position/N` answer in Pulsar's
format: the payload plus X-Pulsar-* headers) into its messages: decompressed
and, for a batch, split, as pulsar-admin shows them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar.client.aio.compression import decompress
from magnetar.proto import messages, pulsar_api_pb2 as pb

_PROPERTY = "x-pulsar-property-"


def peeked_messages(headers: Mapping[str, str], payload: bytes) -> list[dict[str, Any]]:
    entry_id = headers.get("X-Pulsar-Message-ID", "?")
    codec = headers.get("X-Pulsar-compression")
    # Magnetar's broker sends the payload as stored (Pulsar's decompresses).
    if codec and codec != "NONE":
        payload = decompress(
            pb.CompressionType.Value(codec), payload, int(headers["X-Pulsar-uncompressed-size"])
        )
    batch_size = headers.get("X-Pulsar-num-batch-message")
    if batch_size is None:
        properties = {
            name[len(_PROPERTY) :]: value
            for name, value in headers.items()
            if name.lower().startswith(_PROPERTY)
        }
        return [
            {
                "id": entry_id,
                "key": headers.get("X-Pulsar-partition-key"),
                "properties": properties,
                "body": payload.decode(errors="replace"),
            }
        ]
    return [
        {
            "id": f"{entry_id}:{index}",
            "key": messages.partition_key(meta),
            "properties": messages.properties(meta),
            "body": body.decode(errors="replace"),
        }
        for index, (meta, body) in enumerate(messages.split_batch(payload, int(batch_size)))
    ]
