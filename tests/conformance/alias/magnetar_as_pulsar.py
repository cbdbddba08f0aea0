"""A pytest plugin for `make conformance CLIENT=magnetar`: the official
suite's `pulsar`, `pulsar.*` and `_pulsar` imports resolve to
`magnetar.client`, `magnetar.client.*` and `magnetar.client._pulsar`.

Nothing in the suite is patched: a finder placed first on sys.meta_path
answers those names with our modules (the same module objects, so a class
imported both ways is one class), whether or not pulsar-client is installed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

_ALIASES = {"pulsar": "magnetar.client", "_pulsar": "magnetar.client._pulsar"}


def target_of(name: str) -> str | None:
    """Our module behind an official module name, or None for other names."""
    head, dot, rest = name.partition(".")
    if head not in _ALIASES or (head == "_pulsar" and dot):
        return None
    return _ALIASES[head] + dot + rest


class _Existing(importlib.abc.Loader):
    """Hands back a module imported under its own name."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        # Already executed under its real name (running it again would make
        # a second copy of every class); the import system has just given it
        # the alias's spec, and its own keeps its relative imports right.
        module.__spec__ = self._spec


class AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        real = target_of(fullname)
        if real is None:
            return None
        module = importlib.import_module(real)
        spec = importlib.machinery.ModuleSpec(
            fullname, _Existing(module), is_package=hasattr(module, "__path__")
        )
        if hasattr(module, "__path__"):
            spec.submodule_search_locations = list(module.__path__)
        return spec


def _install() -> None:
    for name in list(sys.modules):
        if target_of(name) is not None:
            del sys.modules[name]  # the official module, imported before us
    sys.meta_path.insert(0, AliasFinder())


_install()
