"""Client logging: structlog events routed through the stdlib `logging` module.

A library must not print on its own: the application's logging configuration
decides what is shown (by default only warnings and errors, as for any
library logger), under logger names starting with `magnetar.client`.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog


def get_logger(name: str) -> Any:
    """A structlog logger that renders `event key=value ...` into stdlib logging."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.processors.KeyValueRenderer(key_order=["event"], drop_missing=True),
        ],
    )
