"""End-to-end encryption, interoperable with the official client.

The producer makes a random 32-byte data key, encrypts it for every key
name it was given with that name's RSA public key (OAEP, SHA-1 as OpenSSL's
default, as the C++ client), and encrypts each payload (after compression,
before chunking) with AES-256-GCM under a fresh 12-byte IV; the 16-byte tag
follows the ciphertext. The metadata carries the IV in ``encryption_param``
and one ``encryption_keys`` entry per key name (its encrypted data key and
the key reader's metadata). A consumer decrypts the data key of any entry
its private key opens. Elliptic-curve keys are refused: the official
client's C++ core encrypts with RSA only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from magnetar.client.aio.enums import CompressionType
from magnetar.client.aio.errors import CryptoError
from magnetar.proto import pulsar_api_pb2 as pb

DATA_KEY_BYTES = 32
IV_BYTES = 12
_OAEP = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)


@dataclass
class EncryptionKeyInfo:
    """A key as the key reader gives it: PEM bytes and its metadata."""

    key: bytes
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EncryptionKey:
    """One ``encryption_keys`` entry of a received message."""

    key: str
    value: bytes
    metadata: dict[str, str]


class EncryptionContext:
    """How a received message was encrypted (`Message.encryption_context()`),
    and whether this consumer could decrypt it."""

    def __init__(self, meta: pb.MessageMetadata, decryption_failed: bool) -> None:
        self._meta = meta
        self._failed = decryption_failed

    def keys(self) -> list[EncryptionKey]:
        return [
            EncryptionKey(e.key, e.value, {kv.key: kv.value for kv in e.metadata})
            for e in self._meta.encryption_keys
        ]

    def param(self) -> bytes:
        return self._meta.encryption_param

    def algorithm(self) -> str:
        return self._meta.encryption_algo

    def compression_type(self) -> CompressionType:
        return CompressionType(self._meta.compression)

    def uncompressed_message_size(self) -> int:
        return self._meta.uncompressed_size

    def batch_size(self) -> int:
        """Messages in the batch; -1 for a message sent alone."""
        meta = self._meta
        return meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else -1

    def is_decryption_failed(self) -> bool:
        return self._failed


class CryptoKeyReader:
    """PEM key files, the same file for every key name (as `pulsar.CryptoKeyReader`)."""

    def __init__(self, public_key_path: str, private_key_path: str) -> None:
        if not isinstance(public_key_path, str) or not isinstance(private_key_path, str):
            raise ValueError("CryptoKeyReader(public_key_path: str, private_key_path: str)")
        self.public_key_path = public_key_path
        self.private_key_path = private_key_path

    def get_public_key(self, key_name: str, metadata: dict[str, str]) -> EncryptionKeyInfo:
        return EncryptionKeyInfo(_read(self.public_key_path, "public"))

    def get_private_key(self, key_name: str, metadata: dict[str, str]) -> EncryptionKeyInfo:
        return EncryptionKeyInfo(_read(self.private_key_path, "private"))


def _read(path: str, which: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CryptoError(f"cannot read the {which} key {path}: {exc}") from None


class ProducerCrypto:
    """One producer's data key, encrypted once per key name."""

    def __init__(self, key_names: list[str], reader: CryptoKeyReader) -> None:
        self._reader = reader
        self._data_key = AESGCM.generate_key(bit_length=DATA_KEY_BYTES * 8)
        self._aes = AESGCM(self._data_key)
        self._keys: list[pb.EncryptionKeys] = [self._encrypt_key(name) for name in key_names]

    def _encrypt_key(self, name: str) -> pb.EncryptionKeys:
        info = self._reader.get_public_key(name, {})
        try:
            public = serialization.load_pem_public_key(info.key)
        except ValueError as exc:
            raise CryptoError(f"public key for {name!r} is not a PEM key: {exc}") from None
        if not isinstance(public, rsa.RSAPublicKey):
            raise CryptoError(f"public key for {name!r} is not RSA (only RSA interoperates)")
        entry = pb.EncryptionKeys(key=name, value=public.encrypt(self._data_key, _OAEP))
        for k, v in info.metadata.items():
            entry.metadata.add(key=k, value=v)
        return entry

    def encrypt(self, meta: pb.MessageMetadata, body: bytes) -> bytes:
        """Encrypt ``body`` and record how in ``meta``."""
        iv = os.urandom(IV_BYTES)
        meta.encryption_param = iv
        del meta.encryption_keys[:]
        meta.encryption_keys.extend(self._keys)
        return self._aes.encrypt(iv, body, None)


class ConsumerCrypto:
    """Data keys opened with the reader's private key, kept by their
    encrypted form (a producer's key is the same for all its messages)."""

    def __init__(self, reader: CryptoKeyReader) -> None:
        self._reader = reader
        self._opened: dict[bytes, AESGCM] = {}

    def decrypt(self, meta: pb.MessageMetadata, body: bytes) -> bytes | None:
        """The plaintext, or None when no key opens it (or it was tampered with)."""
        for entry in meta.encryption_keys:
            aes = self._open(entry)
            if aes is None:
                continue
            try:
                return aes.decrypt(meta.encryption_param, body, None)
            except (InvalidTag, ValueError):
                return None
        return None

    def _open(self, entry: pb.EncryptionKeys) -> AESGCM | None:
        aes = self._opened.get(entry.value)
        if aes is not None:
            return aes
        metadata = {kv.key: kv.value for kv in entry.metadata}
        try:
            info = self._reader.get_private_key(entry.key, metadata)
            private = serialization.load_pem_private_key(info.key, password=None)
        except (CryptoError, ValueError, TypeError):
            return None
        if not isinstance(private, rsa.RSAPrivateKey):
            return None
        try:
            data_key = private.decrypt(entry.value, _OAEP)
        except ValueError:
            return None
        if len(data_key) != DATA_KEY_BYTES:
            return None
        aes = AESGCM(data_key)
        if len(self._opened) > 64:
            self._opened.clear()
        self._opened[entry.value] = aes
        return aes
