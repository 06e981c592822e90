"""A webhook client shaped like kube-apiserver's: Go ``net/http`` ``Transport`` over HTTP/1.1 keep-alive, no retry.

kube-apiserver calls an admission webhook through client-go's REST client on a Go ``http.Transport``
(``k8s.io/apiserver/pkg/util/webhook``). What matters for a webhook server that restarts, and what this client
reproduces:

- a pool of idle keep-alive connections per host; a request takes the idle connection returned *last* (Go's
  ``queueForIdleConn`` pops the end of ``idleConn[key]``) and dials a new one when none is idle; a connection whose
  answer said ``Connection: close`` (``resp.Close``) is not put back;
- a connection the server closed while it sat idle is noticed (Go's ``readLoop`` peeks and sees EOF:
  ``errServerClosedIdle``, the connection is marked broken) and skipped when a request picks one;
- a POST whose connection fails after the request was written is not sent again (``persistConn.shouldRetryRequest``:
  a fresh connection is never retried; a reused one only when nothing was written, and a POST is not idempotent).
  Here no failure is retried at all: stricter than Go, which can only make a server look worse, never better.

The AdmissionReview answer is checked as kube-apiserver checks it: HTTP 200 and ``response.uid`` echoing
``request.uid``.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass, field

__all__ = ["KeepAliveClient", "CallFailed"]


class CallFailed(Exception):
    """A webhook call failed as kube-apiserver's would (``failed calling webhook``): EOF, reset, timeout, bad
    answer."""


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = False

    def broken(self) -> bool:
        """Go's ``isBroken``: the server's close (EOF or reset) has been seen."""
        return self.reader.at_eof() or self.reader.exception() is not None or self.writer.is_closing()

    def drop(self) -> None:
        self.writer.close()


@dataclass
class KeepAliveClient:
    """POSTs AdmissionReviews to ``host:port`` over a Go-like keep-alive pool (module docstring).

    Args:
        host, port: where to dial (a Service's address: here a balancer).
        ssl_context: client TLS context trusting the webhook's CA; ``server_hostname`` the name it checks
            (default: ``host``).
        timeout: seconds per call (the webhook's ``timeoutSeconds``; kube-apiserver's default is 10).
        max_idle: idle connections kept (Go's ``MaxIdleConnsPerHost``).

    Attributes (counters): ``answered``, ``failed`` (a list of ``(path, reason)``), ``dials``, ``closed_by_server``
    (answers carrying ``Connection: close``), ``skipped_broken`` (idle connections found closed when picked).
    """

    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    timeout: float = 10.0
    max_idle: int = 100
    answered: int = 0
    dials: int = 0
    closed_by_server: int = 0
    skipped_broken: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    _idle: list[_Conn] = field(default_factory=list)

    async def _conn(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()  # the one returned last, as Go does
            if not conn.broken():
                conn.reused = True
                return conn
            self.skipped_broken += 1
            conn.drop()
        self.dials += 1
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.ssl_context,
            server_hostname=(self.server_hostname or self.host) if self.ssl_context else None)
        return _Conn(reader, writer)

    async def post(self, path: str, body: bytes, uid: str) -> dict:
        """One webhook call of an AdmissionReview ``body`` whose ``request.uid`` is ``uid``; returns the answer's
        ``response``. Raises :class:`CallFailed` (and counts it in ``failed``)."""
        head = (f"POST {path}?timeout={self.timeout:g}s HTTP/1.1\r\nHost: {self.server_hostname or self.host}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json, */*\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        conn: _Conn | None = None
        try:
            async with asyncio.timeout(self.timeout):
                conn = await self._conn()
                conn.writer.write(head + body)  # one write, as Go's bufio.Writer flushes a small request
                status_line, headers = await _read_head(conn.reader)
                answer = await conn.reader.readexactly(int(headers.get("content-length", "0")))
            status = status_line.split(b" ", 2)[1].decode()
            response = json.loads(answer).get("response") if status == "200" else None
        except (OSError, EOFError, asyncio.LimitOverrunError, ssl.SSLError, TimeoutError, ValueError,
                IndexError) as e:
            if conn is not None:
                conn.drop()
            reason = f"{type(e).__name__}: {e}" + (" (reused connection)" if conn is not None and conn.reused else "")
            self.failed.append((path, reason))
            raise CallFailed(reason) from None
        if headers.get("connection", "").lower() == "close":
            self.closed_by_server += 1
            conn.drop()
        elif len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.drop()
        if response is None or response.get("uid") != uid:
            self.failed.append((path, f"HTTP {status}: {answer[:200]!r}"))
            raise CallFailed(f"HTTP {status}")
        self.answered += 1
        return response

    def close(self) -> None:
        """Close the idle connections (Go's ``CloseIdleConnections``)."""
        for conn in self._idle:
            conn.drop()
        self._idle.clear()


async def _read_head(reader: asyncio.StreamReader) -> tuple[bytes, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = raw[:-4].split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status_line, headers
