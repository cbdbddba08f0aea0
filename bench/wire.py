"""Where a new topic's time goes on the wire (`python -m bench wire`).

`bench scale`'s creation rows time an official client creating producers
on new topics one by one: three requests each (PARTITIONED_METADATA,
LOOKUP, PRODUCER), each answered before the next is sent. This splits that
time by watching the loopback interface: for every request, how long the
broker took to answer it (request segment in to answer segment out, by
the kernel's receive timestamps) and how long the client took before it
(previous answer out to this request in). Per broker (brokers alternating,
a fresh one each round) it prints the medians per request type and the
creation rate of the same run.

It reads the first command of each TCP segment, which is the whole story
for this one-request-at-a-time exchange. Capturing needs CAP_NET_RAW (an
AF_PACKET socket): run as root; elsewhere it says so and stops. Only
loopback traffic to or from the broker's port is looked at. On request
only (not in `python -m bench`): it measures an explanation, not a target.
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import FrameType

from bench.compare import LIKE_FOR_LIKE, LITE, _client, start_broker
from bench.scale import _REPO, _producers, first_topic_ms
from magnetar.proto import pulsar_api_pb2 as pb

_ETH_P_ALL = 0x0003
_SO_TIMESTAMPNS = 35  # Linux: a struct timespec of the receive time per packet
_ETH_HEADER = 14
_REQUESTS = ("PARTITIONED_METADATA", "LOOKUP", "PRODUCER")


def _capture(port: int, out: Path) -> None:
    """Write "time direction command-type" per TCP segment with a payload
    to or from ``port`` on loopback. Says "ready" on stdout once bound; on
    SIGTERM it reads what the socket already holds (loopback hands a packet
    to it as it is sent), writes ``out`` and ends."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(_ETH_P_ALL))
    sock.bind(("lo", 0))
    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    lines: list[str] = []

    def stop(_sig: int, _frame: FrameType | None) -> None:
        sock.setblocking(False)  # the interrupted read resumes, then drains

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while True:
        try:
            data, ancillary, _flags, address = sock.recvmsg(65536, 1024)
        except BlockingIOError:
            out.write_text("".join(lines))
            return
        if address[2] == socket.PACKET_OUTGOING:
            continue  # loopback shows each packet twice
        if len(data) < _ETH_HEADER + 20 or data[12:14] != b"\x08\x00":
            continue  # IPv4 only: the benches listen on 127.0.0.1
        ip = _ETH_HEADER
        if data[ip + 9] != socket.IPPROTO_TCP:
            continue
        tcp = ip + (data[ip] & 15) * 4
        sport, dport = struct.unpack_from("!HH", data, tcp)
        payload = data[tcp + (data[tcp + 12] >> 4) * 4 :]
        if not payload or port not in (sport, dport):
            continue
        stamp = time.time()
        for _level, kind, value in ancillary:
            if kind == _SO_TIMESTAMPNS:
                seconds, nanos = struct.unpack_from("qq", value)
                stamp = seconds + nanos / 1e9
        lines.append(f"{stamp:.6f} {'in' if dport == port else 'out'} {_first_type(payload)}\n")


def _first_type(payload: bytes) -> int:
    """The type of the segment's first frame: BaseCommand's field 1 (a
    varint) right after the two size fields; -1 when it is not there."""
    if len(payload) < 10 or payload[8] != 0x08:
        return -1
    value, shift = 0, 0
    for byte in payload[9:14]:
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    return -1


def split(events: list[tuple[float, str, int]]) -> dict[str, list[float]]:
    """Microseconds per request: "broker NAME" (request in to the next
    answer out) and "client NAME" (the previous answer out to the request)."""
    spans: dict[str, list[float]] = defaultdict(list)
    last_out: float | None = None
    unanswered: list[tuple[str, float]] = []  # requests in since the last answer
    for stamp, direction, kind in events:
        if direction == "out":
            last_out = stamp
            for name, came in unanswered:
                spans[f"broker {name}"].append((stamp - came) * 1e6)
            unanswered.clear()
            continue
        known = kind in pb.BaseCommand.Type.values()
        name = pb.BaseCommand.Type.Name(pb.BaseCommand.Type.ValueType(kind)) if known else "?"
        if last_out is not None:
            spans[f"client {name}"].append((stamp - last_out) * 1e6)
        unanswered.append((name, stamp))
    return spans


def one_run(kind: str, workdir: Path, topics: int) -> tuple[float, dict[str, float]]:
    """(topics created/s, median us per span) on a fresh broker, after the
    first-topic probe as in `bench scale`."""
    with start_broker(kind, workdir, discard=True) as broker:
        first_topic_ms(broker.url, broker.proc.pid)
        port = int(broker.url.rsplit(":", 1)[1])
        trace = workdir / f"{kind}.trace"
        capture = [sys.executable, "-m", "bench.wire", "--capture", str(port), str(trace)]
        sniffer = subprocess.Popen(capture, cwd=_REPO, stdout=subprocess.PIPE, text=True)
        try:
            assert sniffer.stdout is not None
            if sniffer.stdout.readline().strip() != "ready":  # bound before the first request
                raise RuntimeError("the capture stopped: it needs CAP_NET_RAW (run as root)")
            client = _client(broker.url)
            try:
                started = time.perf_counter()
                producers = _producers(client, "wire", topics, False)
                rate = topics / (time.perf_counter() - started)
                for producer in producers:
                    producer.close()
            finally:
                client.close()
        finally:
            sniffer.terminate()
            sniffer.wait(timeout=10)
        events = []
        for line in trace.read_text().splitlines():
            stamp, direction, kind_ = line.split()
            events.append((float(stamp), direction, int(kind_)))
    spans = split(events)
    return rate, {name: statistics.median(values) for name, values in spans.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench wire", description=__doc__)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--capture", nargs=2, metavar=("PORT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.capture:
        _capture(int(args.capture[0]), Path(args.capture[1]))
        return 0
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(_ETH_P_ALL)).close()
    except PermissionError:
        print("bench wire needs CAP_NET_RAW to watch loopback (run it as root)", file=sys.stderr)
        return 2
    kinds = (LIKE_FOR_LIKE, LITE)
    results: dict[str, list[tuple[float, dict[str, float]]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="magnetar-wire-") as tmp:
        for rnd in range(args.rounds):
            for kind in kinds:
                rate, medians = one_run(kind, Path(tmp) / f"r{rnd}", args.topics)
                results[kind].append((rate, medians))
                shown = " ".join(f"{k}: {v:.0f}" for k, v in sorted(medians.items()))
                print(f"  [{kind} round {rnd}] {rate:,.0f} topics/s; us: {shown}", flush=True)
    print()
    print(f"{args.topics} new topics, official client; medians over {args.rounds} round(s) "
          "of each round's median, in us (topics/s for the rate).")  # fmt: skip
    columns = ["topics/s"] + [f"{who} {r}" for r in _REQUESTS for who in ("broker", "client")]
    print("| broker | " + " | ".join(columns) + " |")
    print("|" + "---|" * (len(columns) + 1))
    for kind in kinds:
        runs = results[kind]
        cells = [f"{statistics.median(rate for rate, _ in runs):,.0f}"]
        for column in columns[1:]:
            values = [m[column] for _, m in runs if column in m]
            cells.append(f"{statistics.median(values):.0f}" if values else "-")
        print(f"| {kind} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
