"""Which hot-path modules run compiled (setup.py builds them with mypyc).

A compiled module carries COMPILED_FROM, the SHA-256 of the source it was
built from. After an edit the old extension would still be imported before
the new source, so a module counts as compiled only when that hash matches
the source beside it; callers then use the pure-Python path instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def source_path(module: ModuleType) -> Path:
    """The .py file a (possibly compiled) module was made from: beside its
    package's __init__ (a module that mypyc compiled in a group with another
    may carry the build's staging path as its __file__)."""
    package, _, name = module.__name__.rpartition(".")
    init = sys.modules[package].__file__ or ""
    return Path(init).with_name(name + ".py")


def is_current(module: ModuleType) -> bool:
    """Whether ``module`` is the build's compiled module, made from the
    source beside it."""
    if (module.__file__ or "").endswith(".py"):
        return False
    try:
        source = source_path(module).read_bytes()
    except OSError:
        return True  # installed without its source: the build's own
    # getattr: a module compiled before the marker existed has none.
    built_from: str = getattr(module, "COMPILED_FROM", "")
    return hashlib.sha256(source).hexdigest() == built_from


def from_source(module: ModuleType) -> ModuleType:
    """``module`` run from its source, even where the build compiled it (the
    tests and benchmarks hold the two side by side)."""
    spec = importlib.util.spec_from_file_location(module.__name__ + "_source", source_path(module))
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded
