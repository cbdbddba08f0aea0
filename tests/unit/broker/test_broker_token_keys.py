"""HS256 secret key files (the `tokenSecretKey` of Pulsar's token
authentication): raw bytes as `token create-secret-key` writes them, or
base64 text."""

from __future__ import annotations

import base64
from pathlib import Path

import jwt
import pytest

from magnetar.broker.auth.authentication import TokenProvider, read_secret_key

# Random bytes that happen to start and end with whitespace: all of them are key.
RAW = b"\n\t" + bytes(range(100, 128)) + b" \n"


@pytest.mark.parametrize("prefix", ["", "file://"])
def test_a_raw_key_keeps_every_byte(tmp_path: Path, prefix: str) -> None:
    path = tmp_path / "raw.key"
    path.write_bytes(RAW)
    assert read_secret_key(prefix + str(path)) == RAW


def test_a_base64_key_is_decoded_with_or_without_a_newline(tmp_path: Path) -> None:
    path = tmp_path / "b64.key"
    path.write_bytes(base64.b64encode(RAW) + b"\n")
    assert read_secret_key(str(path)) == RAW


def test_a_token_signed_with_the_raw_key_is_accepted(tmp_path: Path) -> None:
    """The whole key signs and verifies: a shorter one (whitespace cut) would
    be refused by the broker for a token made elsewhere with the full key."""
    path = tmp_path / "raw.key"
    path.write_bytes(RAW)
    token = jwt.encode({"sub": "svc"}, RAW, algorithm="HS256")
    provider = TokenProvider(str(path), "")
    got = provider.authenticate(token.encode(), None)
    assert got.role == "svc"
