"""Every package folder is listed in pyproject.toml, so installs include it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOP_LEVEL = ("proto", "broker", "client", "spark_connector")


def _setuptools() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        config: dict[str, object] = tomllib.load(f)["tool"]["setuptools"]
    return config


def _package_folders() -> set[str]:
    found: set[str] = set()
    for top in TOP_LEVEL:
        for init in (ROOT / top).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / top)
            found.add(".".join(("magnetar", top, *relative.parts)))
    return found


def test_every_package_folder_is_listed() -> None:
    listed = set(_setuptools()["packages"])  # type: ignore[call-overload]
    missing = sorted(_package_folders() - listed)
    assert missing == [], f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_every_listed_package_exists() -> None:
    package_dir: dict[str, str] = _setuptools()["package-dir"]  # type: ignore[assignment]
    for package in _setuptools()["packages"]:  # type: ignore[attr-defined]
        top = ".".join(package.split(".")[:2])
        folder = ROOT / package_dir[top] / Path(*package.split(".")[2:])
        assert (folder / "__init__.py").is_file(), f"{package} has no {folder}/__init__.py"


def test_top_level_folders_map_to_magnetar_subpackages() -> None:
    assert _setuptools()["package-dir"] == {f"magnetar.{top}": top for top in TOP_LEVEL}
