"""This process's open descriptors, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def open_files_under(root: Path) -> int:
    """How many of this process's descriptors are open on files under `root`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            count += 1
    return count
