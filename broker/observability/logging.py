"""structlog set-up: human-readable lines on a terminal, JSON lines with
`--log-format json`. Every module logs with `structlog.get_logger(__name__)`
and binds its context (connection address, topic, producer or consumer id).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    log_format: str = "console", level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog once for the process (the daemon calls it at start)."""
    out = stream if stream is not None else sys.stderr
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if log_format == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        # The console renderer formats exceptions itself.
        processors.append(structlog.dev.ConsoleRenderer(colors=out.isatty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(out),
        # A module's logger is built on its first call, not on every call
        # (3 us each, a filtered one included); the daemon configures once,
        # before anything logs.
        cache_logger_on_first_use=True,
    )
