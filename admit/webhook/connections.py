"""Bounds on the connections ``admit serve`` holds: how many, how long one may idle, how long a request may take to
arrive.

Why: 4,000 idle TLS connections take an unbounded server from 95 to 291 MiB with the ``fast`` extra and to
1,194 MiB on a plain install (asyncio's ``SSLProtocol`` keeps a 256 KiB read buffer per connection), past the chart's
256Mi limit, and a connection may send half a request line or a body byte by byte. kube-apiserver itself needs few
connections: it keeps a small pool of keep-alive connections per webhook and sends each AdmissionReview at once.

:class:`ConnectionGuard` wraps aiohttp's protocol factory (``web.Server``) and keeps, per connection, the moment its
current request began to arrive:

- at most ``max_connections`` at once. A new connection over the cap closes the connection that has been idle longest
  (so a flood of idle connections cannot lock kube-apiserver out: its next connection evicts one of them); when none
  is idle, the new one is closed at once.
- a request must arrive within ``read_timeout`` seconds of its first byte (the request line and headers here; the body
  under the same deadline in ``app._read_review``), well inside kube-apiserver's webhook timeout (10 s by default,
  at most 30 s): a slow-header client is closed.
- an idle keep-alive connection is closed by aiohttp after ``keepalive_timeout`` (set on the ``AppRunner``; longer
  than Go's ``http.Transport`` ``IdleConnTimeout`` of 90 s, so kube-apiserver closes its idle connections first and
  never sends a request on a connection the server is closing).
- a connection closed after its answer while the client may still be sending (a 400 for a body that did not arrive
  in time: the response is ``force_close``d) is closed the way Go's ``net/http`` server does it
  (``closeWriteAndWait`` in ``net/http/server.go``): the answer, then a FIN (``write_eof``, TCP only), then whatever
  the client still sends is read and dropped until it closes its side or :data:`LINGER_SECONDS` pass. Closing at
  once with bytes still arriving makes the kernel answer them with a RST, which can overtake the 400 at the client
  (it then sees ``ECONNRESET`` instead of the answer). TLS transports cannot half-close: they close at once.

Shutdown (``admit serve`` on SIGTERM; :meth:`ConnectionGuard.begin_closing`, :meth:`ConnectionGuard.close_quiet`).
kube-apiserver calls webhooks with Go's ``net/http`` ``Transport``, which keeps a pool of idle HTTP/1.1 keep-alive
connections and reuses the one returned last. It does not send a POST again when the connection fails after the
request was written (``persistConn.shouldRetryRequest``: a fresh connection is never retried, and a reused one only
when nothing was written or the method is idempotent); the create then fails with ``failed calling webhook ...:
EOF``. The server therefore never closes a connection on which a request may be on its way:

- from the moment shutdown begins, every response carries ``Connection: close`` and aiohttp closes the connection
  after sending it (RFC 9112 section 9.6: the client must not send further requests on it); Go's ``readLoop`` sees
  ``resp.Close`` and does not put the connection back into its pool, so the next request dials a new connection,
  which the Service sends to a ready replica. No request can race with this close.
- a connection without a request in progress is closed only when it has been *quiet*: no request byte for
  ``quiet`` seconds (``DEFAULT_QUIET_SECONDS``, 1 s: far above the time a written request takes to reach the
  server inside a cluster) and none waiting unread in the kernel. That covers a connection just accepted (Go dials
  only to send a request at once) and one the client used a moment ago. What stays possible is a client that picks
  a connection it left idle for that long at the very instant the close reaches it; Go reuses the connection it
  returned last, so a connection left alone through the whole ``--shutdown-delay`` is one its pool is not reaching
  for, and once the close arrives Go marks it broken and never writes on it.

:class:`GuardedSite` is aiohttp's ``TCPSite`` serving through the guard, with a bound on the TLS handshake too.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any, Awaitable, Callable, cast

from aiohttp import web

from ..eventloop import EVERY_ADDRESS, ServerGroup, cancel, listen_sockets

try:  # FIONREAD: bytes received and not yet read (Linux, macOS); elsewhere only what the loop has read counts
    from fcntl import ioctl
    from termios import FIONREAD
except ImportError:  # pragma: no cover - Windows
    ioctl = None  # type: ignore[assignment]
    FIONREAD = 0  # type: ignore[misc]

__all__ = ["ConnectionGuard", "DEFAULT_MAX_CONNECTIONS", "DEFAULT_READ_TIMEOUT", "DEFAULT_IDLE_TIMEOUT",
           "DEFAULT_QUIET_SECONDS"]

log = logging.getLogger("admit.connections")

DEFAULT_MAX_CONNECTIONS = 500
"""Connections one replica holds at once: a plain install's RSS stays under the chart's 256Mi limit even when every
one is an idle TLS connection (see docs/performance.md)."""

DEFAULT_READ_TIMEOUT = 5.0  # seconds: ``read_timeout`` (module docstring)
DEFAULT_IDLE_TIMEOUT = 120.0  # seconds: ``keepalive_timeout`` (module docstring)
DEFAULT_QUIET_SECONDS = 1.0  # seconds: ``quiet`` during shutdown (module docstring)
LINGER_SECONDS = 0.5
"""Seconds a half-closed connection keeps reading (and dropping) what the client still sends before it is closed:
Go's ``net/http`` server waits ``rstAvoidanceDelay`` (500 ms) the same way."""


class _Guarded(asyncio.Protocol):
    """aiohttp's request handler behind the guard: forwards every protocol call, notes when a request begins."""

    __slots__ = ("guard", "inner", "transport", "reading_since", "in_request", "last_active", "made", "draining")

    def __init__(self, guard: "ConnectionGuard", inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None  # a stream's: abort, write_eof
        self.reading_since: float | None = None  # first byte of a request that has not reached its handler yet
        self.in_request = False
        self.last_active = time.monotonic()
        self.made = False
        self.draining = False  # answered and half-closed: what still arrives is dropped
        if hasattr(inner, "on_answer"):  # fastpath.FastRequestHandler: a request answered inside data_received
            inner.on_answer = self.answered_inline

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # create_server's are stream transports
        if not self.guard._admit(self):
            self.transport.abort()
            return
        self.made = True
        self.last_active = time.monotonic()  # after a TLS handshake: the first request follows at once
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.draining:
            return
        if self.reading_since is None and not self.in_request:
            self.reading_since = time.monotonic()
        self.inner.data_received(data)

    def answered_inline(self) -> None:
        """A request answered in ``data_received`` (:meth:`ConnectionGuard.handle` notes the others): none arriving."""
        self.reading_since = None
        self.last_active = time.monotonic()

    def eof_received(self) -> bool | None:
        if self.draining:  # the client read the answer and closed its side: close ours (no RST, nothing unread)
            return False
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard._forget(self)
        if self.made:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def unread_bytes(self) -> int:
        """Bytes the kernel holds for this connection that the loop has not read yet (0 when it cannot tell)."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None or ioctl is None:
            return 0
        try:
            return struct.unpack("i", ioctl(sock.fileno(), FIONREAD, b"\0\0\0\0"))[0]
        except (OSError, ValueError):  # closed meanwhile
            return 0

    def close(self) -> None:
        """Drop the connection now. ``abort``, not ``close``: a TLS close waits for the peer's close_notify (up to
        30 s in uvloop), holding the connection's buffers, and the peers closed here are the ones not reading."""
        if self.transport is not None:
            self.transport.abort()

    def close_after_answer(self) -> None:
        """Make aiohttp's close of this connection (after a ``force_close``d answer) a lingering close: the answer
        is flushed, a FIN follows it, and input is dropped until the client's FIN or :data:`LINGER_SECONDS`
        (module docstring). Without half-close support (TLS) aiohttp's close is kept."""
        transport = self.transport
        if transport is None or not self.made or not transport.can_write_eof():
            return
        inner = self.inner
        if getattr(inner, "transport", None) is self.transport:
            inner.transport = _LingeringTransport(self, transport)  # type: ignore[attr-defined]

    def linger(self) -> None:
        """Half-close now (FIN after what is buffered) and close for good after :data:`LINGER_SECONDS`."""
        transport = self.transport
        if transport is None or self.draining:
            return
        self.draining = True
        self.guard.live.pop(transport, None)  # no longer counted: it holds no request and goes away shortly
        if transport.is_closing():
            return
        transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)


class _LingeringTransport:
    """What aiohttp's request handler holds instead of the transport of a connection it will close after its answer:
    every call goes to the transport, except ``close``, which lingers (:meth:`_Guarded.linger`)."""

    __slots__ = ("_conn", "_transport")

    def __init__(self, conn: _Guarded, transport: asyncio.BaseTransport) -> None:
        self._conn = conn
        self._transport = transport

    def close(self) -> None:
        self._conn.linger()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class ConnectionGuard:
    """Counts, caps and times the server's connections (module docstring).

    Args:
        factory: aiohttp's protocol factory (``runner.server``).
        max_connections: connections held at once (int >= 1).
        read_timeout: seconds from a request's first byte until its handler starts (float > 0).

    Attributes:
        evicted / refused / timed_out: connections closed because of the cap (an idle one to make room, or the new
            one), and requests that did not arrive within ``read_timeout``.
        closing: shutdown has begun (:meth:`begin_closing`): every response carries ``Connection: close``.
    """

    def __init__(self, factory: Callable[[], asyncio.Protocol], max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 read_timeout: float = DEFAULT_READ_TIMEOUT) -> None:
        self.factory = factory
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self.live: dict[Any, _Guarded] = {}  # transport -> connection
        self.evicted = self.refused = self.timed_out = 0
        self.closing = False
        self.on_closing: list[Callable[[], None]] = []  # called once by begin_closing
        self._sweeper: asyncio.Task[None] | None = None

    def __call__(self) -> asyncio.Protocol:
        return _Guarded(self, self.factory())

    def __len__(self) -> int:
        return len(self.live)

    def _admit(self, conn: _Guarded) -> bool:
        if len(self.live) >= self.max_connections:
            idle = [c for c in self.live.values() if not c.in_request and c.reading_since is None]
            if not idle:
                self.refused += 1
                if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                    log.warning("connection cap of %d reached with every connection busy: closed a new connection "
                                "(%d so far)", self.max_connections, self.refused)
                return False
            self.evicted += 1
            if self.evicted in (1, 10, 100) or self.evicted % 1000 == 0:
                log.warning("connection cap of %d reached: closed the connection idle longest to make room (%d so far)",
                            self.max_connections, self.evicted)
            self._close([min(idle, key=lambda c: c.last_active)])
        self.live[conn.transport] = conn
        return True

    def _close(self, conns: list[_Guarded]) -> int:
        """Forget and drop ``conns`` (:meth:`_Guarded.close`); returns how many."""
        for conn in conns:
            self.live.pop(conn.transport, None)
            conn.close()
        return len(conns)

    def _forget(self, conn: _Guarded) -> None:
        if self.live.get(conn.transport) is conn:
            del self.live[conn.transport]

    async def handle(self, request: web.BaseRequest,
                     handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Runs ``handler`` for ``request`` and marks the connection busy meanwhile (the read deadline then belongs
        to the body read); once :attr:`closing`, answers with ``Connection: close`` (errors raised as
        ``web.HTTPException`` too). The low-level server calls it for every request
        (``functools.partial(guard.handle, handler=...)``, ``webhook.app.create_server``)."""
        conn = self.live.get(request.transport)
        if conn is not None:
            conn.in_request, conn.reading_since = True, None
        try:
            resp = await handler(request)
        except web.HTTPException as e:
            if self.closing:
                e.force_close()
            raise
        finally:
            if conn is not None:
                conn.in_request = False
                conn.last_active = time.monotonic()
        if self.closing:
            resp.force_close()  # aiohttp sends "Connection: close" and closes after the response
        if conn is not None and resp.keep_alive is False:  # force_close()d: the client may still be sending
            conn.close_after_answer()
        return resp

    @web.middleware
    async def middleware(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        """:meth:`handle` as an aiohttp middleware, for an ``Application`` served through the guard."""
        return await self.handle(request, handler)  # type: ignore[arg-type]

    def begin_closing(self) -> None:
        """Shutdown has begun: from now on every response carries ``Connection: close`` (module docstring)."""
        self.closing = True
        for hook in self.on_closing:
            hook()

    def close_quiet(self, quiet: float = DEFAULT_QUIET_SECONDS, now: float | None = None) -> int:
        """Close the connections no request can be on its way to: none in progress, no request byte for ``quiet``
        seconds, nothing unread in the kernel (module docstring). Returns how many were closed."""
        now = time.monotonic() if now is None else now
        return self._close([c for c in self.live.values()
                            if not c.in_request and c.reading_since is None and now - c.last_active >= quiet
                            and not c.unread_bytes()])

    def start(self) -> None:
        """Start the sweeper that closes requests slower than ``read_timeout`` (checks twice per timeout)."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="connection read deadline")

    async def stop(self) -> None:
        """Stop the sweeper (connections are left to :meth:`close_all`)."""
        task, self._sweeper = self._sweeper, None
        await cancel([task])

    def close_all(self) -> int:
        """Close every connection still open; returns how many."""
        return self._close(list(self.live.values()))

    def expire(self, now: float | None = None) -> int:
        """Close connections whose request has been arriving for longer than ``read_timeout``; returns how many."""
        now = time.monotonic() if now is None else now
        late = [c for c in self.live.values()
                if c.reading_since is not None and not c.in_request and now - c.reading_since > self.read_timeout]
        if self._close(late):
            self.timed_out += len(late)
            log.info("closed %d connection(s) whose request did not arrive within %gs", len(late), self.read_timeout)
        return len(late)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.read_timeout / 2)
            self.expire()


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` whose connections go through ``guard`` and whose TLS handshakes must finish within
    ``handshake_timeout`` seconds (asyncio's default is 60 s, and a connection holds its TLS buffers meanwhile).
    ``host`` ``""`` (``eventloop.EVERY_ADDRESS``) listens on every address of both families."""

    def __init__(self, runner: web.BaseRunner, guard: ConnectionGuard, host: str, port: int, *,
                 ssl_context: Any = None, backlog: int = 128, handshake_timeout: float = DEFAULT_READ_TIMEOUT) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context, backlog=backlog)
        self.guard = guard
        self.handshake_timeout = handshake_timeout

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {"ssl_handshake_timeout": self.handshake_timeout} if self._ssl_context is not None else {}
        server: asyncio.AbstractServer
        if self._host == EVERY_ADDRESS:  # IPv4 and IPv6, one socket each on one port (eventloop.listen_sockets)
            self._server = server = ServerGroup([
                await loop.create_server(self.guard, sock=sock, ssl=self._ssl_context, backlog=self._backlog, **extra)
                for sock in listen_sockets(self._port, self._backlog)
            ])
        else:
            self._server = server = await loop.create_server(
                self.guard, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog, **extra
            )
        sockets = getattr(server, "sockets", ())
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    def in_flight(self) -> int:
        """Requests being read or handled right now."""
        return sum(1 for c in self.guard.live.values() if c.in_request or c.reading_since is not None)
