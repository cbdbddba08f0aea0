"""A private network of Linux network namespaces for fault tests.

Topology: one router namespace and one namespace per node. Each node has a
single /32 address on a veth link to the router and reaches every other node
through it; the host's own namespace gets no address and no route, so test
traffic never leaves these namespaces. A partition between two nodes is a
pair of `ip rule ... blackhole` entries in the router: forwarded packets
between them vanish silently (no reset, no ICMP), as on a real cut link,
while both nodes keep talking to everyone else. Needs root (CAP_NET_ADMIN)
and iproute2; `unavailable()` says why not.

Namespace names carry a prefix and the creating process's id, so a run can
remove what a crashed earlier run left behind (`remove_leftovers`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

PREFIX = "mgchaos"
SUBNET = "10.231.0"
ROUTER_ADDRESS = f"{SUBNET}.254"


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def _owner_alive(name: str) -> bool:
    parts = name.split("-")
    try:
        pid = int(parts[1])
    except (IndexError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(netns: str) -> None:
    """SIGKILL every process still running inside the namespace."""
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    for word in out.stdout.split():
        try:
            os.kill(int(word), signal.SIGCONT)  # a stopped process dies on SIGKILL anyway
            os.kill(int(word), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            continue


def _delete(netns: str) -> None:
    _kill_inside(netns)
    # Deleting a namespace deletes its veth ends, and so their peers.
    subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


def remove_leftovers() -> list[str]:
    """Delete namespaces of earlier runs whose creating process is gone."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    removed = []
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(f"{PREFIX}-") and not _owner_alive(name):
            _delete(name)
            removed.append(name)
    return removed


@dataclass
class Node:
    name: str
    netns: str
    address: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)


class Network:
    """Create with :meth:`create`; :meth:`close` removes everything (idempotent)."""

    def __init__(self) -> None:
        self._stem = f"{PREFIX}-{os.getpid()}"
        self.router = f"{self._stem}-router"
        self.nodes: dict[str, Node] = {}
        self._cuts: set[frozenset[str]] = set()
        self._closed = False

    @classmethod
    def create(cls) -> Network:
        network = cls()
        try:
            _ip("netns", "add", network.router)
            _ip("link", "set", "lo", "up", netns=network.router)
            subprocess.run(
                ["ip", "netns", "exec", network.router, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                check=True,
                capture_output=True,
            )
        except BaseException:
            network.close()
            raise
        return network

    def add_node(self, name: str) -> Node:
        """A namespace with lo and one link to the router; address x.y.z.(n+1)."""
        if len(self.nodes) >= 250:
            raise ValueError("at most 250 nodes")
        address = f"{SUBNET}.{len(self.nodes) + 1}"
        netns = f"{self._stem}-{name}"
        router_side = f"cx{len(self.nodes) + 1}"
        node = Node(name, netns, address)
        self.nodes[name] = node
        _ip("netns", "add", netns)
        _ip("link", "add", router_side, "netns", self.router, "type", "veth",
            "peer", "name", "eth0", "netns", netns)  # fmt: skip
        _ip("link", "set", "lo", "up", netns=netns)
        _ip("link", "set", "eth0", "up", netns=netns)
        _ip("addr", "add", f"{address}/32", "dev", "eth0", netns=netns)
        _ip("route", "add", f"{ROUTER_ADDRESS}/32", "dev", "eth0", netns=netns)
        _ip("route", "add", f"{SUBNET}.0/24", "via", ROUTER_ADDRESS, netns=netns)
        _ip("link", "set", router_side, "up", netns=self.router)
        _ip("addr", "add", f"{ROUTER_ADDRESS}/32", "dev", router_side, netns=self.router)
        _ip("route", "add", f"{address}/32", "dev", router_side, netns=self.router)
        return node

    def popen(
        self, node: str, argv: Sequence[str], log: IO[bytes] | int | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Run a process inside the node's namespace (`ip netns exec` execs it:
        the Popen's pid is the process itself, so signals reach it)."""
        target = self.nodes[node]
        proc = subprocess.Popen(
            ["ip", "netns", "exec", target.netns, *argv], stdout=log, stderr=log, **kwargs
        )
        target.procs.append(proc)
        return proc

    def _rules(self, verb: str, a: str, b: str) -> None:
        one, other = self.nodes[a].address, self.nodes[b].address
        for src, dst in ((one, other), (other, one)):
            _ip("rule", verb, "from", src, "to", dst, "blackhole", netns=self.router)

    def cut(self, a: str, b: str) -> None:
        """Drop every packet between the two nodes, both ways."""
        pair = frozenset((a, b))
        if a == b or pair in self._cuts:
            return
        self._rules("add", a, b)
        self._cuts.add(pair)

    def heal(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair not in self._cuts:
            return
        self._rules("del", a, b)
        self._cuts.discard(pair)

    def isolate(self, node: str, others: Sequence[str]) -> None:
        for other in others:
            self.cut(node, other)

    def rejoin(self, node: str, others: Sequence[str]) -> None:
        for other in others:
            self.heal(node, other)

    def heal_all(self) -> None:
        for pair in list(self._cuts):
            a, b = sorted(pair)
            self.heal(a, b)

    @property
    def cuts(self) -> list[tuple[str, str]]:
        return sorted(tuple(sorted(pair)) for pair in self._cuts)  # type: ignore[misc]

    def close(self) -> None:
        """Kill every process in the namespaces and delete them all."""
        if self._closed:
            return
        self._closed = True
        for node in self.nodes.values():
            for proc in node.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                    proc.wait(10)
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
            _delete(node.netns)
        _delete(self.router)
