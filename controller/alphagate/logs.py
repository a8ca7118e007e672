"""structlog setup: JSON lines in a cluster, readable console lines on a terminal.

One configuration for every command so a decision log line looks the same from `run`, `demo`
and `backtest`. Call `configure()` once at start-up; get loggers with `get(name)`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

Format = Literal["json", "console", "auto"]


def configure(*, fmt: Format = "auto", level: str = "INFO", stream: Any = None) -> None:
    out = stream if stream is not None else sys.stderr
    if fmt == "auto":
        fmt = "console" if getattr(out, "isatty", lambda: False)() else "json"
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(
        stream=out, level=level.upper(), format="%(levelname)s %(name)s %(message)s"
    )


def get(name: str) -> Any:
    return structlog.get_logger().bind(logger=name)
