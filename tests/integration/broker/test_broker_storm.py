"""Connection storm (issue 15): 1,000 connections opened and dropped without a
goodbye (reset mid-conversation); the broker's connections, tasks and file
descriptors return to their baseline, and a normal client is served."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import struct
import time
import uuid

import pulsar

from magnetar.proto import pulsar_api_pb2 as pb
from magnetar.proto.frames import encode_command, wrap
from tests.support.brokers import BrokerThread
from tests.support.official import official_client
from tests.support.polling import eventually

STORM = 1000
WAVE = 100


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _task_count() -> int:
    return len(asyncio.all_tasks())


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a crashed client would."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_thousand_dropped_connections_leave_nothing_behind(broker: BrokerThread) -> None:
    topic = f"persistent://public/default/storm-{uuid.uuid4().hex[:8]}"
    server = broker.server
    assert server is not None
    with official_client(broker.url) as warm:
        # Load the topic and create the subscription the storm uses: one
        # dispatcher task per subscription belongs to the baseline.
        warm.subscribe(topic, "storm", consumer_type=pulsar.ConsumerType.Shared).close()
        warm.create_producer(topic).send(b"warm")
    eventually("connections back to 0", lambda: server.connection_count == 0)
    gc.collect()
    fds = _open_fds()
    tasks = broker.call(_task_count())

    connect = encode_command(wrap(pb.CommandConnect(client_version="storm", protocol_version=20)))
    producer = encode_command(wrap(pb.CommandProducer(topic=topic, producer_id=1, request_id=1)))
    subscribe = encode_command(
        wrap(
            pb.CommandSubscribe(
                topic=topic,
                subscription="storm",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=2,
            )
        )
    )
    stages = [b"", connect, connect + producer, connect + subscribe, connect[:5]]
    for wave in range(STORM // WAVE):
        socks = []
        for i in range(WAVE):
            sock = socket.create_connection(("127.0.0.1", broker.port))
            stage = stages[(wave * WAVE + i) % len(stages)]
            if stage:
                sock.sendall(stage)
            socks.append(sock)
        time.sleep(0.05)  # let the broker take some of them further
        for sock in socks:
            _reset(sock)

    eventually("connections back to 0", lambda: server.connection_count == 0)
    eventually("tasks back to baseline", lambda: broker.call(_task_count()) <= tasks)
    gc.collect()
    eventually("file descriptors back to baseline", lambda: _open_fds() <= fds)

    with official_client(broker.url) as client:
        consumer = client.subscribe(topic, "after-storm")
        client.create_producer(topic).send(b"after")
        assert consumer.receive(timeout_millis=5000).data() == b"after"
