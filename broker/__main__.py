"""`magnetar-broker standalone|cluster` / `python -m magnetar.broker standalone`.

Exit status: 0 after a graceful shutdown, 2 for a bad configuration, 1 when a
second signal forced the exit or the broker failed to start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import structlog

from magnetar.broker.auth import tokens
from magnetar.broker.config import BrokerConfig, ConfigError, load_config
from magnetar.broker.observability.logging import configure_logging
from magnetar.broker.server import BrokerServer
from magnetar.broker.storage.api import StorageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="magnetar-broker", description="Magnetar: a Pulsar-protocol-compatible broker."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    standalone = commands.add_parser(
        "standalone",
        help="run one broker with embedded storage",
        description=(
            "Run a standalone broker. Every option is also a TOML key (--config) and an "
            "environment variable MAGNETAR_<KEY>; the command line wins over both."
        ),
    )
    _add_common_options(standalone)
    cluster = commands.add_parser(
        "cluster",
        help="run one broker of a cluster coordinated by etcd",
        description=(
            "Run a broker that shares topics with the other brokers of the cluster: "
            "metadata in etcd, ledgers in a data directory every broker can read "
            "(README, Cluster). Options as for standalone."
        ),
    )
    _add_common_options(cluster)
    cluster.add_argument("--metadata-url", help="etcd://host:port (required here or in TOML)")
    cluster.add_argument("--cluster-name", help="cluster name (default standalone)")
    tokens.add_commands(commands)
    return parser


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML configuration file")
    parser.add_argument("--data-dir", help="data directory (default ./data)")
    parser.add_argument("--bind", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", help="binary protocol port (default 6650; 0 = any)")
    parser.add_argument("--http-port", help="HTTP port for /metrics and health (default 8080)")
    parser.add_argument("--advertised-address", help="host name LOOKUP answers with")
    parser.add_argument("--log-format", choices=["console", "json"], help="default console")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument(
        "--sync-policy", choices=["fsync", "interval", "none"], help="default fsync"
    )
    parser.add_argument(
        "--storage", choices=["files", "object"], help="where entries live (default files)"
    )
    parser.add_argument("--object-store-url", help="s3://bucket/prefix (storage object)")
    parser.add_argument("--object-store-endpoint", help="http(s)://host:port for non-AWS stores")
    parser.add_argument("--object-store-region", help="the bucket's region")
    parser.add_argument(
        "--entry-cache-size", help="entry cache budget in bytes of memory (default 134217728)"
    )
    parser.add_argument(
        "--entry-cache-eviction-threshold-seconds",
        help="cached entries older than this leave the cache (default 1.0)",
    )


def config_from_args(args: argparse.Namespace, warnings: list[str] | None = None) -> BrokerConfig:
    overrides = {
        key: getattr(args, key, None)
        for key in (
            "data_dir",
            "bind",
            "port",
            "http_port",
            "advertised_address",
            "log_format",
            "log_level",
            "sync_policy",
            "entry_cache_size",
            "entry_cache_eviction_threshold_seconds",
            "storage",
            "object_store_url",
            "object_store_endpoint",
            "object_store_region",
            "metadata_url",
            "cluster_name",
        )
    }
    config = load_config(config_file=args.config, overrides=overrides, warnings=warnings)
    if args.command == "standalone":
        # Standalone always runs on its embedded store, whatever a shared
        # configuration file says about a cluster.
        return config.replace(metadata_url="")
    if not config.metadata_url:
        raise ConfigError("metadata_url is required in cluster mode (--metadata-url etcd://...)")
    return config


# The hot paths allocate many short-lived objects (frames, futures, receipts),
# few of them in cycles. Under CPython's default thresholds (700, 10, 10) the
# collector ran every 700 allocations and took about 8 us per published
# message, a third of the broker's CPU (bench compare, unbatched produce).
# Cycles are still collected, in fewer and larger young sweeps.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Fewer collections; what startup built is frozen out of them."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# The soft descriptor limit is raised at most this far: a hard limit of a
# billion (systemd's LimitNOFILE=infinity) buys nothing past it.
MAX_RAISED_NOFILE = 1 << 20


def raise_open_files_limit() -> tuple[int, int]:
    """The soft descriptor limit up to the hard one (often 1,024 against
    hundreds of thousands), at most MAX_RAISED_NOFILE: ledger files stay
    open by the thousand when the limit allows (storage/handles.py).
    Returns the limits (soft, hard) in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_RAISED_NOFILE if hard == resource.RLIM_INFINITY else min(hard, MAX_RAISED_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < target:
        # A platform that refuses the value keeps the limit as it was.
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


def _run(coro: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "token":
        return tokens.run(args)
    warnings: list[str] = []
    try:
        config = config_from_args(args, warnings)
    except ConfigError as exc:
        print(f"magnetar-broker: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_format, config.log_level)
    for warning in warnings:
        structlog.get_logger("magnetar.broker").warning(warning)
    soft, hard = raise_open_files_limit()
    structlog.get_logger("magnetar.broker").info("descriptor limit", soft=soft, hard=hard)
    server = BrokerServer(config)
    tune_gc()
    try:
        _run(server.serve())
    except (OSError, StorageError) as exc:
        # Port in use, data directory locked by another broker, unreadable files.
        structlog.get_logger("magnetar.broker").error("broker failed to start", error=str(exc))
        return 1
    _exit_without_teardown()
    return 0  # not reached


def _exit_without_teardown() -> None:
    """The broker has stopped (files synced and closed): leave without the
    interpreter freeing every object one by one, which took 2.5 s after a
    broker with 20,000 topics had stopped, longer than its whole shutdown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
