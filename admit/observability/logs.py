"""Log output of ``admit serve``: ``--log-format text`` (one line per record) or ``json`` (one JSON object per line).

JSON records come from python-json-logger's ``JsonFormatter``: keys ``time`` (ISO 8601 with milliseconds, UTC),
``level``, ``logger``, ``message``, ``exc_info`` when there is a traceback, plus every attribute a call passes in
``extra``: the admission records of ``metrics.WebhookRecorder`` (logger ``admit.requests``) carry ``uid``, ``kind``,
``operation``, ``namespace``, ``object`` (``"namespace/name"``; the name is empty for a generateName CREATE),
``decision`` (allowed, patched, denied) and ``duration_ms`` (float).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO

__all__ = ["configure_logging", "TEXT_FORMAT"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str, fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Send every record of ``level`` (``"debug"``, ``"info"``, ...) and above to ``stream`` (standard error) in
    ``fmt`` (``"text"`` or ``"json"``), replacing the root logger's handlers; returns the handler.

    Raises:
        ValueError: an unknown ``fmt`` or ``level``.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r} (text or json)")
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        formatter = JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", json_ensure_ascii=False,
                                  rename_fields={"asctime": "time", "levelname": "level", "name": "logger"})
        formatter.converter = time.gmtime
        formatter.default_time_format = "%Y-%m-%dT%H:%M:%S"
        formatter.default_msec_format = "%s.%03dZ"
        handler.setFormatter(formatter)
    # a handler without a formatter gets TEXT_FORMAT's
    logging.basicConfig(format=TEXT_FORMAT, level=level.upper(), handlers=[handler], force=True)
    return handler
