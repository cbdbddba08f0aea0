"""Free loopback ports for servers a test starts on fixed addresses."""

from __future__ import annotations

import contextlib
import socket


def free_port() -> int:
    """One free loopback port (for two or more, `free_ports`: see there)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports. They are held open together
    while chosen: one port asked for twice in a row can come back twice."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(contextlib.closing(socket.socket()))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
