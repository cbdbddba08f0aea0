"""Where a managed ledger's things are named: its metadata node and its
directory of files (a bounded, file-system-safe form of its name)."""

from __future__ import annotations

import hashlib
import os
import re
from urllib.parse import quote

ML_ROOT = "/managed-ledgers"


# What quote(name, safe="") leaves as it is, plus "/" (encoded below).
_PLAIN = re.compile(r"[A-Za-z0-9_.~/-]*")


def _quoted(name: str) -> str:
    """quote(name, safe=""), without its walk byte by byte for the common
    names (a topic load asks for it twice: node and directory)."""
    if _PLAIN.fullmatch(name):
        return name.replace("/", "%2F")
    return quote(name, safe="")


def ledger_meta_path(name: str) -> str:
    return f"{ML_ROOT}/{_quoted(name)}"


# File names stay well below the common 255-byte limit whatever the topic.
_MAX_FILE_NAME = 200


def storage_file_name(name: str) -> str:
    """A bounded file-system name for a ledger: the percent-encoded name while
    it is short (so directories made before keep their place), else a prefix
    of it plus a hash of the whole."""
    encoded = _quoted(name)
    if len(encoded) <= _MAX_FILE_NAME:
        return encoded
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    return f"{encoded[:120]}~{digest}"


def ledger_dir(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, "ledgers", storage_file_name(name))
