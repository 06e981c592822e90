"""Log output of ``admit serve``: ``--log-format text`` (one line per record) or ``json`` (one JSON object per line).

JSON records come from python-json-logger's ``JsonFormatter``: keys ``time`` (ISO 8601 with milliseconds, UTC),
``level``, ``logger``, ``message``, ``exc_info`` when there is a traceback, plus every attribute a call passes in
``extra``: the admission records of ``metrics.WebhookRecorder`` (logger ``admit.requests``) carry ``uid``, ``kind``,
``operation``, ``namespace``, ``object`` (``"namespace/name"``), ``decision`` (allowed, patched, denied) and
``duration_ms``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO

__all__ = ["configure_logging", "json_formatter", "TEXT_FORMAT"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def json_formatter() -> logging.Formatter:
    """The formatter of ``--log-format json`` (see the module docstring for the keys)."""
    from pythonjsonlogger.json import JsonFormatter

    formatter = JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        json_ensure_ascii=False,
    )
    formatter.converter = time.gmtime
    formatter.default_time_format = "%Y-%m-%dT%H:%M:%S"
    formatter.default_msec_format = "%s.%03dZ"
    return formatter


def configure_logging(level: str, fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Send every record of ``level`` (``"debug"``, ``"info"``, ...) and above to ``stream`` (standard error) in
    ``fmt`` (``"text"`` or ``"json"``), replacing the root logger's handlers; returns the handler.

    Raises:
        ValueError: an unknown ``fmt`` or ``level``.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r} (text or json)")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(json_formatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    return handler
