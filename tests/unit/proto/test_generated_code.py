"""The committed generated protobuf code is what `make proto` produces now."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ("pulsar_api_pb2.py", "pulsar_api_pb2.pyi")


def _make_proto_command(out_dir: Path) -> list[str]:
    """The `make proto` recipe from the Makefile, writing into out_dir instead."""
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^proto:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE)
    assert match, "no `proto:` target in the Makefile"
    recipe = match.group(1).replace("\\\n", " ").replace("\t", " ").strip()
    bin_dir = str(Path(sys.executable).parent)
    recipe = recipe.replace("$(BIN)/python", sys.executable).replace("$(BIN)", bin_dir)
    assert "$(" not in recipe, f"unexpanded make variable in {recipe!r}"
    args = shlex.split(recipe)
    for i, arg in enumerate(args):
        for option in ("--python_out=", "--mypy_out="):
            if arg.startswith(option):
                args[i] = option + str(out_dir)
    assert sum(a.startswith(("--python_out=", "--mypy_out=")) for a in args) == 2, args
    return args


def test_committed_protobuf_code_is_fresh(tmp_path: Path) -> None:
    result = subprocess.run(
        _make_proto_command(tmp_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in GENERATED:
        fresh = (tmp_path / name).read_bytes()
        committed = (ROOT / "proto" / name).read_bytes()
        assert fresh == committed, f"proto/{name} is stale: run `make proto` and commit it"
