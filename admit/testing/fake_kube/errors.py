"""``metav1.Status`` objects and the API errors the fake answers with (kube-apiserver's reasons by HTTP code).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .resources import JSON, ResourceType


_REASON_BY_CODE = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
                   409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
                   429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


def status_object(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    """A ``kind: Status`` failure body exactly shaped like the real server's (``details`` only when given)."""
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                  "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Raised inside request handling; turned into a ``Status`` response with HTTP status ``code``."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def body(self) -> JSON:
        return status_object(self.code, self.reason, self.message, self.details)

    def response(self) -> web.Response:
        return _json_response(self.body(), self.code, self.headers)


def _details(rt: ResourceType, name: str | None) -> JSON:
    # Real server: details {name, group (omitted when ""), kind: <resource plural>}.
    return {k: v for k, v in (("name", name), ("group", rt.group), ("kind", rt.plural)) if v}


def _not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def _already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name))


def _conflict(rt: ResourceType, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
                    _details(rt, name))


def _forbidden(rt: ResourceType, name: str | None, why: str, **details: Any) -> ApiError:
    return ApiError(403, "Forbidden", f'{rt.qualified} "{name}" is forbidden: {why}' if name else
                    f"{rt.qualified} is forbidden: {why}", {**_details(rt, name), **details})


def _invalid(rt: ResourceType, name: str, causes: str) -> ApiError:
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {causes}', _details(rt, name))


def _bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=_dumps(data), status=status, headers=headers, content_type="application/json")


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
