"""`magnetar produce` and `magnetar consume`, like pulsar-client, through our
own client (magnetar.client), with a progress bar on long runs."""

from __future__ import annotations

import click
from rich.console import Console
from rich.progress import Progress

from magnetar import client as pulsar

_SERVICE_URL = click.option(
    "--url",
    default="pulsar://localhost:6650",
    show_default=True,
    envvar="MAGNETAR_SERVICE_URL",
    help="The broker's service URL.",
)
# Runs at least this long (or open-ended consumes) get a progress display.
_PROGRESS_FROM = 100


def _progress(count: int) -> Progress:
    """A progress display on standard error, shown for long or open-ended
    runs only (message bodies keep standard output to themselves)."""
    return Progress(
        console=Console(stderr=True),
        disable=0 < count < _PROGRESS_FROM,
        transient=True,
    )


@click.command()
@click.argument("topic")
@click.option("--messages", "-m", multiple=True, required=True, help="Message body (repeatable).")
@click.option("--num-produce", "-n", default=1, show_default=True, help="Times to send them.")
@_SERVICE_URL
def produce(topic: str, messages: tuple[str, ...], num_produce: int, url: str) -> None:
    """Publish messages to TOPIC."""
    client = pulsar.Client(url)
    try:
        producer = client.create_producer(topic)
        bodies = [m.encode() for m in messages] * num_produce
        with _progress(len(bodies)) as progress:
            task = progress.add_task("producing", total=len(bodies))
            for body in bodies:
                producer.send(body)
                progress.advance(task)
        producer.close()
        click.echo(f"{len(bodies)} messages produced", err=True)
    finally:
        client.close()


@click.command()
@click.argument("topic")
@click.option("--subscription-name", "-s", required=True)
@click.option("--num-messages", "-n", default=1, show_default=True, help="0: until interrupted.")
@click.option(
    "--subscription-type",
    "-t",
    type=click.Choice(["Exclusive", "Shared", "Failover", "Key_Shared"]),
    default="Exclusive",
    show_default=True,
)
@click.option("--earliest", is_flag=True, help="A new subscription starts at the oldest message.")
@_SERVICE_URL
def consume(
    topic: str,
    subscription_name: str,
    num_messages: int,
    subscription_type: str,
    earliest: bool,
    url: str,
) -> None:
    """Receive messages from TOPIC, print and acknowledge them."""
    client = pulsar.Client(url)
    try:
        consumer = client.subscribe(
            topic,
            subscription_name,
            consumer_type=getattr(pulsar.ConsumerType, subscription_type),
            initial_position=(
                pulsar.InitialPosition.Earliest if earliest else pulsar.InitialPosition.Latest
            ),
        )
        received = 0
        with _progress(num_messages) as progress:
            task = progress.add_task("consuming", total=num_messages or None)
            while num_messages == 0 or received < num_messages:
                message = consumer.receive()
                click.echo(message.data().decode(errors="replace"))
                consumer.acknowledge(message)
                received += 1
                progress.advance(task)
        consumer.close()
    finally:
        client.close()
