"""The `docker` command pulsar-flex's test helpers call, standing in for
the Pulsar container: `docker exec <container> /pulsar/bin/pulsar-admin ...`
runs `magnetar admin ...`, `.../pulsar-client produce|consume ...` runs
`magnetar produce|consume ...`, and nothing else is mapped. The CLI reads
the broker's URLs and the suite's admin token from the client.conf named by
MAGNETAR_CLIENT_CONF, as Pulsar's tools read the container's client.conf.
Their output and exit status are passed on unchanged, so a failing call
fails here as it fails there.

`js.py` writes a `docker` script on PATH that runs this module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

CONTAINER = "pulsar-standalone-pulsar-flex"
TOOLS = {
    "/pulsar/bin/pulsar-admin": ("admin",),
    "/pulsar/bin/pulsar-client": (),
}
CLIENT_COMMANDS = ("produce", "consume")
# Pulsar's CLI tools start a JVM: about a second passes before a call acts.
# pulsar-flex's tests rely on that pause (see README "Conformance").
STARTUP_DELAY_ENV = "MAGNETAR_STANDIN_DELAY_S"


def mapped(argv: list[str]) -> list[str] | str:
    """The magnetar command line for a docker command line, or why none."""
    if len(argv) < 3 or argv[0] != "exec":
        return f"the stand-in maps only `docker exec {CONTAINER} <pulsar tool> ...`: {argv}"
    container, tool, *args = argv[1:]
    if container != CONTAINER:
        return f"Error: No such container: {container}"
    if tool not in TOOLS:
        return f"the stand-in maps only {', '.join(TOOLS)}, not {tool}"
    if not TOOLS[tool] and (not args or args[0] not in CLIENT_COMMANDS):
        return f"pulsar-client: the stand-in maps only {', '.join(CLIENT_COMMANDS)}: {args}"
    return [sys.executable, "-m", "magnetar.client.cli", *TOOLS[tool], *args]


def main(argv: list[str]) -> int:
    command = mapped(argv)
    if isinstance(command, str):
        print(command, file=sys.stderr)
        return 1
    delay = float(os.environ.get(STARTUP_DELAY_ENV, "0") or 0)
    if delay > 0:
        time.sleep(delay)
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
