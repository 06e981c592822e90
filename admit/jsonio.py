"""JSON in and out for every layer: ``loads`` (bytes or str -> Python objects) and ``dumps`` (Python objects ->
compact UTF-8 JSON bytes, no spaces), with orjson when the ``fast`` extra installed it, else the standard library.
``JSON_BACKEND`` names the one in use (``"orjson"`` or ``"json"``).

Ground floor: imports nothing of admit, so the API cache (``watchcache``) and the controller's records read JSON
without importing the webhook's AdmissionReview model.
"""

from __future__ import annotations

from typing import Any

__all__ = ["loads", "dumps", "JSON_BACKEND"]

try:  # optional speed-up (extra "fast"); the stdlib path is always available and tested
    import orjson as _orjson

    def loads(data: bytes | str) -> Any:
        """Parse JSON (orjson when installed, else the stdlib)."""
        return _orjson.loads(data)

    def dumps(obj: Any) -> bytes:
        """Serialise to compact JSON bytes (orjson when installed, else the stdlib)."""
        return _orjson.dumps(obj)

    JSON_BACKEND = "orjson"
except ImportError:  # pragma: no cover - exercised by tests that block orjson
    import json as _json

    def loads(data: bytes | str) -> Any:
        """Parse JSON (orjson when installed, else the stdlib)."""
        return _json.loads(data)

    def dumps(obj: Any) -> bytes:
        """Serialise to compact JSON bytes (orjson when installed, else the stdlib)."""
        return _json.dumps(obj, separators=(",", ":")).encode()

    JSON_BACKEND = "json"
