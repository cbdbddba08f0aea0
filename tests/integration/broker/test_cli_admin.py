"""`magnetar admin` end to end: the console script's commands go over REST
to a running broker and change its state; refusals exit 1 with the broker's
reason, an unreachable broker exits 3; the CLI never imports the broker."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid

from tests.support.brokers import BrokerThread
from tests.support.http_calls import http_call
from tests.support.official import official_client


def _magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.client.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _contents(stdout: str) -> list[str]:
    """The contents consume printed (pulsar-client's message lines)."""
    return [line.split("content:", 1)[1] for line in stdout.splitlines() if "content:" in line]


def test_admin_commands_change_broker_state(broker: BrokerThread) -> None:
    url = ["admin", "--admin-url", broker.http_url]
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{ns}/t"
    assert _magnetar(*url, "namespaces", "create", ns).returncode == 0
    assert _magnetar(*url, "namespaces", "set-message-ttl", ns, "--ttl", "60").returncode == 0
    ran = _magnetar(*url, "namespaces", "set-retention", ns, "--time", "10", "--size", "-1")
    assert ran.returncode == 0, ran.stderr
    ran = _magnetar(
        *url,
        "namespaces",
        "set-backlog-quota",
        ns,
        "--limit",
        "100000",
        "--policy",
        "producer_exception",
    )
    assert ran.returncode == 0, ran.stderr
    base = f"{broker.http_url}/admin/v2/namespaces/{ns}"
    assert http_call("GET", f"{base}/messageTTL") == (200, 60)
    assert http_call("GET", f"{base}/retention")[1]["retentionSizeInMB"] == -1
    assert http_call("GET", f"{base}/backlogQuotaMap")[1]["destination_storage"]["limitSize"] == (
        100000
    )
    assert _magnetar(*url, "topics", "create", topic).returncode == 0
    ran = _magnetar(*url, "topics", "create-subscription", topic, "-s", "sub", "--earliest")
    assert ran.returncode == 0, ran.stderr
    with official_client(broker.url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(4):
            producer.send(f"m{i}".encode())
        producer.close()
    ran = _magnetar(*url, "--json", "topics", "stats", topic)
    assert json.loads(ran.stdout)["subscriptions"]["sub"]["msgBacklog"] == 4
    ran = _magnetar(*url, "topics", "peek-messages", topic, "-s", "sub", "-n", "2")
    assert [line.split(": ", 1)[1] for line in ran.stdout.splitlines()] == ["m0", "m1"]
    assert _magnetar(*url, "topics", "skip", topic, "-s", "sub", "-n", "1").returncode == 0
    ran = _magnetar(*url, "--json", "topics", "stats-internal", topic)
    assert json.loads(ran.stdout)["cursors"]["sub"]["markDeletePosition"].endswith(":0")
    assert _magnetar(*url, "topics", "clear-backlog", topic, "-s", "sub").returncode == 0
    ran = _magnetar(*url, "--json", "topics", "stats", topic)
    assert json.loads(ran.stdout)["subscriptions"]["sub"]["msgBacklog"] == 0
    ran = _magnetar(*url, "topics", "reset-cursor", topic, "-s", "sub", "--time", "0")
    assert ran.returncode == 0, ran.stderr
    assert _magnetar(*url, "topics", "subscriptions", topic).stdout.split() == ["sub"]
    ran = _magnetar(*url, "topics", "create-partitioned-topic", f"{topic}-p", "-p", "2")
    assert ran.returncode == 0, ran.stderr
    assert _magnetar(*url, "topics", "unload", topic).returncode == 0
    # A refusal: exit 1 with the broker's reason.
    ran = _magnetar(*url, "topics", "stats", f"persistent://{ns}/missing")
    assert ran.returncode == 1 and "404" in ran.stderr
    ran = _magnetar(*url, "namespaces", "create", ns)
    assert ran.returncode == 1 and "409" in ran.stderr


def test_unreachable_broker_and_no_broker_import() -> None:
    ran = _magnetar("admin", "--admin-url", "http://127.0.0.1:9", "tenants", "list")
    assert ran.returncode == 3 and "cannot reach" in ran.stderr
    check = (
        "import sys, magnetar.client.cli.__main__ as m; "
        "sys.exit(any(n.startswith('magnetar.broker') for n in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", check], check=False).returncode == 0


def test_produce_and_consume(broker: BrokerThread) -> None:
    """`magnetar produce` publishes through our client; `magnetar consume`
    prints and acknowledges them (the backlog drops to 0)."""
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:6]}"
    url = ["--url", broker.url]
    admin = ["admin", "--admin-url", broker.http_url]
    assert _magnetar(*admin, "topics", "create", topic).returncode == 0
    ran = _magnetar(*admin, "topics", "create-subscription", topic, "-s", "s", "--earliest")
    assert ran.returncode == 0, ran.stderr
    ran = _magnetar("produce", topic, "-m", "a", "-m", "b", "-n", "2", *url)
    assert ran.returncode == 0 and "4 messages successfully produced" in ran.stderr, ran.stderr
    ran = _magnetar("consume", topic, "-s", "s", "-n", "4", *url)
    assert ran.returncode == 0, ran.stderr
    assert _contents(ran.stdout) == ["a", "b", "a", "b"]
    stats = http_call("GET", f"{broker.http_url}/admin/v2/{topic.replace('://', '/')}/stats")[1]
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0
    # A long run shows its progress on standard error only: standard output
    # carries exactly the messages.
    ran = _magnetar("produce", topic, "-m", "x", "-n", "150", *url)
    assert ran.returncode == 0 and "150 messages successfully produced" in ran.stderr, ran.stderr
    ran = _magnetar("consume", topic, "-s", "s", "-n", "150", *url)
    assert ran.returncode == 0, ran.stderr
    assert _contents(ran.stdout) == ["x"] * 150
    assert len(ran.stdout.splitlines()) == 300  # a boundary line and a message line each


def test_perf_produce_and_consume(broker: BrokerThread) -> None:
    """`magnetar perf` publishes and receives the asked number of messages
    and prints periodic lines and a summary with HDR latency percentiles."""
    topic = f"persistent://public/default/perf-{uuid.uuid4().hex[:6]}"
    url = ["--url", broker.url]
    consumer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar.client.cli",
            "perf",
            "consume",
            topic,
            "-m",
            "200",
            "--interval",
            "0.5",
            *url,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    admin = ["admin", "--admin-url", broker.http_url]
    ran = _magnetar(*admin, "topics", "create-subscription", topic, "-s", "perf", "--earliest")
    assert ran.returncode in (0, 1), ran.stderr  # 1: the consumer created it first (409)
    ran = _magnetar("perf", "produce", topic, "-m", "200", "-r", "0", "--size", "100", *url)
    assert ran.returncode == 0, ran.stderr
    summary = ran.stdout.splitlines()[-1]
    assert summary.startswith("summary: produced") and "p99" in summary and "max" in summary
    out, _ = consumer.communicate(timeout=60)
    assert consumer.returncode == 0
    assert out.splitlines()[-1].startswith("summary: consumed")


def test_perf_produce_open_ended_run_ends_with_its_summary(broker: BrokerThread) -> None:
    """An open-ended `magnetar perf produce` (the default) prints a line per
    interval with rates and HDR latency percentiles, keeps to its --rate cap,
    and on Ctrl-C (SIGINT) still prints its summary and exits 0."""
    topic = f"persistent://public/default/perf-{uuid.uuid4().hex[:6]}"
    command = [sys.executable, "-m", "magnetar.client.cli", "perf", "produce", topic]
    command += ["-r", "200", "--size", "10", "--interval", "0.3", "--url", broker.url]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        started = time.monotonic()
        periodic = proc.stdout.readline()  # the first line comes after one interval
        for _ in range(2):  # a few intervals' worth of sends before the interrupt
            proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # it ignored the interrupt: the test fails, nothing leaks
            proc.kill()
            proc.communicate()
    elapsed = time.monotonic() - started + 0.3  # the process began before `started`
    assert proc.returncode == 0
    line = re.compile(
        r"^produced [0-9.]+ msg/s [0-9.]+ MB/s latency ms p50 [0-9.]+ p95 [0-9.]+ p99 [0-9.]+"
        r" max [0-9.]+$"
    )
    assert line.match(periodic.strip()), periodic
    summary = out.splitlines()[-1]
    assert summary.startswith("summary: produced") and "p99" in summary
    # The rate is a cap: never more than 200 msg/s over the run (some slack
    # for the first send and the interval boundaries).
    published = _published(broker, topic)
    assert 0 < published <= 200 * (elapsed + 0.5), (published, elapsed)


def _published(broker: BrokerThread, topic: str) -> int:
    import pulsar

    with official_client(broker.url) as client:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        count = 0
        while reader.has_message_available():
            reader.read_next(5000)
            count += 1
        return count
