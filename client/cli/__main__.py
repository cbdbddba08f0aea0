"""`magnetar`: one console script; `magnetar broker` starts a broker (the
same as `magnetar-broker`, which keeps working) without this package
importing the broker unless asked to; `magnetar token` (secret keys and
tokens, broker/auth/tokens.py) is loaded the same lazy way."""

from __future__ import annotations

import click

from magnetar.client.cli.admin import admin
from magnetar.client.cli.perf import perf
from magnetar.client.cli.pubsub import consume, produce


@click.group()
def cli() -> None:
    """Magnetar: a Pulsar-compatible broker and its tools."""


cli.add_command(admin)
cli.add_command(produce)
cli.add_command(consume)
cli.add_command(perf)


# --help goes through to the broker's (and token's) own parser.
_PASS_THROUGH = {
    "ignore_unknown_options": True,
    "allow_extra_args": True,
    "help_option_names": [],
}


@cli.command(context_settings=_PASS_THROUGH)
@click.pass_context
def broker(ctx: click.Context) -> None:
    """Start a broker (all options as for magnetar-broker)."""
    import importlib

    # Imported only here: the client tools never load the broker.
    main = importlib.import_module("magnetar.broker.__main__").main
    raise SystemExit(main(ctx.args))


@cli.command(context_settings=_PASS_THROUGH)
@click.pass_context
def token(ctx: click.Context) -> None:
    """Create secret keys and tokens (as `magnetar-broker token`)."""
    import importlib

    main = importlib.import_module("magnetar.broker.auth.tokens").main
    raise SystemExit(main(["token", *ctx.args]))


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
