"""The fault network itself: nodes talk through the router, a cut drops
packets between exactly two nodes (silently), healing restores them, and
closing leaves no namespace behind."""

from __future__ import annotations

import subprocess
import sys

from tests.chaos import netns

# Listens on the node's address, answers one line per connection.
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen()
print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"pong"); c.close()
"""

CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], 7000), timeout=1.0) as c:
        print(c.recv(4).decode())
except OSError as exc:
    print(type(exc).__name__)
"""


def _reach(net: netns.Network, src: str, dst: str) -> str:
    target = net.nodes[dst].address
    proc = net.popen(src, [sys.executable, "-c", CLIENT, target], log=subprocess.PIPE)
    out, _ = proc.communicate(timeout=10)
    return out.decode().strip()


def test_a_cut_drops_one_pair_only_and_heals(network: netns.Network) -> None:
    for name in ("a", "b", "c"):
        network.add_node(name)
    for name in ("b", "c"):
        server = network.popen(
            name, [sys.executable, "-c", SERVER, network.nodes[name].address], log=subprocess.PIPE
        )
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
    assert _reach(network, "a", "b") == "pong"
    network.cut("a", "b")
    # Silently dropped: the connect times out, it is not refused.
    assert _reach(network, "a", "b") == "TimeoutError"
    assert _reach(network, "a", "c") == "pong"
    assert _reach(network, "c", "b") == "pong"
    network.heal("a", "b")
    assert _reach(network, "a", "b") == "pong"


def test_close_removes_namespaces_and_processes(network: netns.Network) -> None:
    network.add_node("a")
    sleeper = network.popen("a", [sys.executable, "-c", "import time; time.sleep(600)"])
    network.close()
    assert sleeper.poll() is not None
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert network.router not in listed
    assert network.nodes["a"].netns not in listed


def test_leftovers_of_a_dead_run_are_removed(network: netns.Network) -> None:
    """A namespace named after a process that no longer exists is deleted."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    stale = f"{netns.PREFIX}-{dead}-router"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    assert stale in netns.remove_leftovers()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert stale not in listed
