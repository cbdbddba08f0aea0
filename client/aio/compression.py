"""Payload codecs, byte-compatible with the official clients.

LZ4 is the raw block format (no frame, no size prefix: the size travels in
MessageMetadata.uncompressed_size), ZLIB has the zlib header, ZSTD is a
standard frame, SNAPPY is raw snappy (not the framing format).
"""

from __future__ import annotations

import zlib

import cramjam
import lz4.block
import zstandard

from magnetar.client.aio.enums import CompressionType
from magnetar.client.aio.errors import InvalidMessage

_ZSTD_LEVEL = 3  # the level the official clients use
_zstd_compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


def compress(codec: CompressionType | int, data: bytes) -> bytes:
    """`data` compressed with `codec` (NONE returns it unchanged)."""
    if codec == CompressionType.NONE:
        return data
    if codec == CompressionType.LZ4:
        return bytes(lz4.block.compress(data, store_size=False))
    if codec == CompressionType.ZLib:
        return zlib.compress(data)
    if codec == CompressionType.ZSTD:
        return bytes(_zstd_compressor.compress(data))
    if codec == CompressionType.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise ValueError(f"unknown compression type {codec}")


def decompress(codec: int, data: bytes, uncompressed_size: int) -> bytes:
    """Undo `compress`; raises InvalidMessage when the bytes do not decode to the size."""
    if codec == CompressionType.NONE:
        return data
    try:
        if codec == CompressionType.LZ4:
            out = bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
        elif codec == CompressionType.ZLib:
            out = zlib.decompress(data)
        elif codec == CompressionType.ZSTD:
            out = bytes(_zstd_decompressor.decompress(data, max_output_size=uncompressed_size))
        elif codec == CompressionType.SNAPPY:
            out = bytes(cramjam.snappy.decompress_raw(data))
        else:
            raise InvalidMessage(f"unknown compression type {codec}")
    except InvalidMessage:
        raise
    except Exception as exc:
        raise InvalidMessage(
            f"cannot decompress {CompressionType(codec).name} payload: {exc}"
        ) from exc
    if len(out) != uncompressed_size:
        raise InvalidMessage(
            f"{CompressionType(codec).name} payload decompressed to {len(out)} bytes, "
            f"metadata says {uncompressed_size}"
        )
    return out
