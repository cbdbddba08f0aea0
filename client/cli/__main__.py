"""`magnetar`: the client's console script (admin over HTTP, produce,
consume, perf). It never loads the broker: a broker starts with
`magnetar-broker standalone|cluster`, and keys and tokens come from
`magnetar-broker token` (broker/auth/tokens.py)."""

from __future__ import annotations

import click

from magnetar.client.cli.admin_geo import admin
from magnetar.client.cli.perf import perf
from magnetar.client.cli.pubsub import consume, produce

# Subcommands this script once had that belong to the broker's own script.
_BROKER_COMMANDS = {"broker": "magnetar-broker", "token": "magnetar-broker token"}


class _Group(click.Group):
    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        moved = _BROKER_COMMANDS.get(args[0]) if args else None
        if moved is not None:
            ctx.fail(f"`magnetar {args[0]}` is now `{moved}`: run `{moved} --help`.")
        return super().resolve_command(ctx, args)


@click.group(cls=_Group)
def cli() -> None:
    """Magnetar's client tools (a broker starts with `magnetar-broker`)."""


cli.add_command(admin)
cli.add_command(produce)
cli.add_command(consume)
cli.add_command(perf)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
