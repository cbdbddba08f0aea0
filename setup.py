"""Compiles the hot-path modules listed below with mypyc, where it can.

Everything else about the package is in pyproject.toml. Each module here is
plain, fully typed Python that works uncompiled too: when mypyc or a C
compiler is missing the build goes on without it (the extensions are
optional) and the broker runs the pure-Python code, only slower. See
README's "Compiled hot path".
"""

from __future__ import annotations

import hashlib
import os
import sys

from setuptools import Extension, setup

# Source file -> module name. The package-dir mapping (proto/ is magnetar.proto)
# is not visible to mypyc, which names a module after its folders: each file is
# staged under build/mypyc-src/magnetar/... first, its COMPILED_FROM set to the
# source's SHA-256 (a compiled module older than its source is then ignored).
COMPILED = {
    "proto/batch_walk.py": "magnetar.proto.batch_walk",
    "proto/send_scan.py": "magnetar.proto.send_scan",
    "proto/replica_scan.py": "magnetar.proto.replica_scan",
}
STAGE = os.path.join("build", "mypyc-src")


def _stage() -> list[str]:
    paths = []
    for source, module in COMPILED.items():
        parts = module.split(".")
        folder = os.path.join(STAGE, *parts[:-1])
        os.makedirs(folder, exist_ok=True)
        for depth in range(1, len(parts)):
            init = os.path.join(STAGE, *parts[:depth], "__init__.py")
            if not os.path.exists(init):
                open(init, "w").close()
        with open(source, "rb") as f:
            text = f.read()
        marker = b'COMPILED_FROM: Final[str] = ""'
        if marker not in text:
            raise RuntimeError(f"{source} has no {marker.decode()} line")
        stamp = f'COMPILED_FROM: Final[str] = "{hashlib.sha256(text).hexdigest()}"'
        target = os.path.join(folder, parts[-1] + ".py")
        with open(target, "wb") as f:
            f.write(text.replace(marker, stamp.encode()))
        paths.append(target)
    return paths


def _extensions() -> list[Extension]:
    if os.environ.get("MAGNETAR_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("mypyc not found: the hot-path modules stay pure Python", file=sys.stderr)
        return []
    try:
        extensions: list[Extension] = mypycify(_stage(), opt_level="3")
    except Exception as exc:  # a mypyc that cannot build here: pure Python then
        print(f"mypyc failed ({exc}): the hot-path modules stay pure Python", file=sys.stderr)
        return []
    for ext in extensions:
        ext.optional = True  # no C compiler: pure Python, not a failed install
    return extensions


setup(ext_modules=_extensions())
