"""The `logger=` objects of `pulsar.Client`: where a client's log lines go.

Our client logs through the stdlib `logging` module under names starting
with `magnetar.client` (see aio/log.py); by default the application's
logging configuration decides what is shown. A `logger=` given to a Client
adds one destination for as long as that client is open:

- `ConsoleLogger(level)`: lines at `level` and above to standard output;
- `FileLogger(level, path)`: the same, appended to a file;
- a `logging.Logger`: every line the logger is enabled for, handed to it.

Loggers in `logging` are process-wide, so while two clients with loggers
are open, each destination sees the other client's lines too.
"""

from __future__ import annotations

import enum
import logging
import sys
from typing import Any

from magnetar.client.aio.errors import InvalidConfiguration

ROOT = "magnetar.client"


class LoggerLevel(enum.IntEnum):
    """The official client's log levels (values as in its binding)."""

    Debug = 0
    Info = 1
    Warn = 2
    Error = 3


_STDLIB_LEVEL = {
    LoggerLevel.Debug: logging.DEBUG,
    LoggerLevel.Info: logging.INFO,
    LoggerLevel.Warn: logging.WARNING,
    LoggerLevel.Error: logging.ERROR,
}
_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _level_of(log_level: Any) -> LoggerLevel:
    try:
        return LoggerLevel(int(log_level))
    except (TypeError, ValueError):
        raise InvalidConfiguration(f"log_level must be a LoggerLevel, not {log_level!r}") from None


class ConsoleLogger:
    """Log lines at `log_level` and above to standard output."""

    def __init__(self, log_level: LoggerLevel = LoggerLevel.Info) -> None:
        self.log_level = _level_of(log_level)

    def handler(self) -> logging.Handler:
        handler = logging.StreamHandler(sys.stdout)
        handler.setLevel(_STDLIB_LEVEL[self.log_level])
        handler.setFormatter(logging.Formatter(_FORMAT))
        return handler


class FileLogger:
    """Log lines at `log_level` and above, appended to `log_file`."""

    def __init__(self, log_level: LoggerLevel, log_file: str) -> None:
        self.log_level = _level_of(log_level)
        self.log_file = str(log_file)

    def handler(self) -> logging.Handler:
        handler = logging.FileHandler(self.log_file, encoding="utf-8")
        handler.setLevel(_STDLIB_LEVEL[self.log_level])
        handler.setFormatter(logging.Formatter(_FORMAT))
        return handler


class _Forward(logging.Handler):
    """Hands our records to an application's logger, as its own."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__(logging.NOTSET)
        self._target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self._target.isEnabledFor(record.levelno):
            self._target.handle(record)


class LogDestination:
    """One client's `logger=`, attached while the client is open."""

    def __init__(self, logger: Any) -> None:
        if isinstance(logger, ConsoleLogger | FileLogger):
            self._handler: logging.Handler = logger.handler()
        elif isinstance(logger, logging.Logger):
            self._handler = _Forward(logger)
        else:
            raise InvalidConfiguration(
                "logger must be a logging.Logger, ConsoleLogger or FileLogger, "
                f"not {type(logger).__name__}"
            )
        self._attached = False

    @property
    def level(self) -> int:
        if isinstance(self._handler, _Forward):
            return self._handler._target.getEffectiveLevel()
        return self._handler.level

    def attach(self) -> None:
        root = logging.getLogger(ROOT)
        root.addHandler(self._handler)
        # Records below the root's level are never made; lower it as far as
        # this destination wants (it only ever goes down while clients live).
        wanted = self.level
        if root.level == logging.NOTSET or root.level > wanted:
            root.setLevel(wanted)
        self._attached = True

    def detach(self) -> None:
        if not self._attached:
            return
        self._attached = False
        logging.getLogger(ROOT).removeHandler(self._handler)
        self._handler.close()
