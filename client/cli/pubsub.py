"""`magnetar produce` and `magnetar consume`, standing in for pulsar-client's
(Pulsar 2.8) commands of the same names, through our own client
(magnetar.client), with a progress bar on long runs.

As pulsar-client: `-m` and `-p` values are comma-separated lists; consume
prints `----- got message -----` and then `key:[..], properties:[..],
content:..` per message; the count ends each run on standard error.
"""

from __future__ import annotations

from collections.abc import Mapping

import click
from rich.console import Console
from rich.progress import Progress

from magnetar import client as pulsar
from magnetar.client.cli.connection import Connection, client_errors, connection_options
from magnetar.client.cli.names import topic_argument
from magnetar.client.cli.perf import until_interrupted

MESSAGE_BOUNDARY = "----- got message -----"
# Runs at least this long (or open-ended consumes) get a progress display.
_PROGRESS_FROM = 100
# How often a waiting consume looks whether Ctrl-C was pressed.
_POLL_MS = 200
_TYPES = {
    "Exclusive": pulsar.ConsumerType.Exclusive,
    "Shared": pulsar.ConsumerType.Shared,
    "Failover": pulsar.ConsumerType.Failover,
    "Key_Shared": pulsar.ConsumerType.KeyShared,
}
_POSITIONS = {
    "Latest": pulsar.InitialPosition.Latest,
    "Earliest": pulsar.InitialPosition.Earliest,
}


def _progress(count: int) -> Progress:
    """A progress display on standard error, shown for long or open-ended
    runs only (message bodies keep standard output to themselves)."""
    return Progress(
        console=Console(stderr=True),
        disable=0 < count < _PROGRESS_FROM,
        transient=True,
    )


def split_list(values: tuple[str, ...]) -> list[str]:
    """Each value split on commas, as JCommander splits a list option
    (Java's String.split: trailing empty pieces dropped)."""
    items: list[str] = []
    for value in values:
        pieces = value.split(",")
        while len(pieces) > 1 and pieces[-1] == "":
            pieces.pop()
        if value and all(piece == "" for piece in pieces):
            continue  # Java: "," splits into nothing
        items.extend(pieces)
    return items


def _properties(values: tuple[str, ...]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in split_list(values):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--properties")
        pairs[key] = value
    return pairs


@click.command()
@topic_argument
@click.option(
    "--messages",
    "-m",
    multiple=True,
    required=True,
    help="Message bodies, comma-separated (repeatable).",
)
@click.option("--num-produce", "-n", default=1, show_default=True, help="Times to send them.")
@click.option("--key", "-k", help="The messages' key.")
@click.option("--properties", "-p", multiple=True, help="key=value,key=value set on each message.")
@connection_options("client")
def produce(
    topic: str,
    messages: tuple[str, ...],
    num_produce: int,
    key: str | None,
    properties: tuple[str, ...],
    connection: Connection,
) -> None:
    """Publish messages to TOPIC (a full name, tenant/namespace/topic, or a
    topic in public/default)."""
    bodies = [m.encode() for m in split_list(messages)] * num_produce
    props = _properties(properties)
    with client_errors():
        client = connection.client()
        try:
            producer = client.create_producer(topic)
            with _progress(len(bodies)) as progress:
                task = progress.add_task("producing", total=len(bodies))
                for body in bodies:
                    producer.send(body, properties=props or None, partition_key=key)
                    progress.advance(task)
            producer.close()
        finally:
            client.close()
    click.echo(f"{len(bodies)} messages successfully produced", err=True)


def hex_dump(data: bytes) -> str:
    """Apache Commons IO's HexDump.dump, which pulsar-client's --hex prints:
    per 16 bytes the offset, the bytes in hex, then those printable as ASCII."""
    lines = []
    for start in range(0, len(data), 16):
        row = data[start : start + 16]
        cells = "".join(f"{b:02X} " for b in row) + "   " * (16 - len(row))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{start:08X} {cells}{text}\n")
    return "".join(lines)


def describe(key: str | None, properties: Mapping[str, str], data: bytes, hex_: bool) -> str:
    """One message as pulsar-client 2.8 prints it (after the boundary line)."""
    shown = ", ".join(f"{k}={v}" for k, v in properties.items())
    content = hex_dump(data) if hex_ else data.decode(errors="replace")
    return f"key:[{key if key else 'null'}], properties:[{shown}], content:{content}"


@click.command()
@topic_argument
@click.option("--subscription-name", "-s", required=True)
@click.option("--num-messages", "-n", default=1, show_default=True, help="0: until interrupted.")
@click.option(
    "--subscription-type",
    "-t",
    type=click.Choice(list(_TYPES)),
    default="Exclusive",
    show_default=True,
)
@click.option(
    "--subscription-position",
    "-p",
    type=click.Choice(list(_POSITIONS)),
    default="Latest",
    show_default=True,
    help="Where a new subscription starts.",
)
@click.option("--earliest", is_flag=True, hidden=True, help="Same as -p Earliest.")
@click.option("--hex", "hex_", is_flag=True, help="Print the content as a hex dump.")
@connection_options("client")
def consume(
    topic: str,
    subscription_name: str,
    num_messages: int,
    subscription_type: str,
    subscription_position: str,
    earliest: bool,
    hex_: bool,
    connection: Connection,
) -> None:
    """Receive messages from TOPIC (a full name, tenant/namespace/topic, or
    a topic in public/default), print and acknowledge them."""
    position = "Earliest" if earliest else subscription_position
    received = 0
    with client_errors():
        client = connection.client()
        try:
            consumer = client.subscribe(
                topic,
                subscription_name,
                consumer_type=_TYPES[subscription_type],
                initial_position=_POSITIONS[position],
            )
            with _progress(num_messages) as progress, until_interrupted() as stop:
                task = progress.add_task("consuming", total=num_messages or None)
                while (num_messages == 0 or received < num_messages) and not stop.is_set():
                    try:
                        message = consumer.receive(timeout_millis=_POLL_MS)
                    except pulsar.Timeout:
                        continue  # to look at the flag
                    click.echo(MESSAGE_BOUNDARY)
                    click.echo(
                        describe(
                            message.partition_key() or None,
                            message.properties(),
                            message.data(),
                            hex_,
                        )
                    )
                    consumer.acknowledge(message)
                    received += 1
                    progress.advance(task)
            consumer.close()
        finally:
            client.close()
    click.echo(f"{received} messages successfully consumed", err=True)
