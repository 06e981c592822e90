"""The event loop ``admit serve`` runs on: uvloop when installed (extra ``fast``), else the stdlib asyncio loop; and
the sockets its listeners bind on every address of both families (:func:`listen_sockets`).

uvloop does the TLS record layer and socket I/O in C instead of asyncio's pure-Python ``sslproto``, which is most of
the per-request cost of a small HTTPS answer (see ``docs/performance.md``). Set ``ADMIT_EVENT_LOOP=asyncio`` to
run on the stdlib loop even where uvloop is installed; the stdlib path is always available and tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import time
from typing import Any, Coroutine, Iterable, TypeVar

__all__ = ["loop_name", "run", "ENV_VAR", "cancel", "Pacer", "EVERY_ADDRESS", "WILDCARDS", "listen_sockets", "ServerGroup",
           "listen_url"]

ENV_VAR = "ADMIT_EVENT_LOOP"
"""Environment variable: ``asyncio`` forces the stdlib loop, ``uvloop`` (or unset) uses uvloop when importable."""

T = TypeVar("T")


def _uvloop() -> Any:
    if os.environ.get(ENV_VAR, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def loop_name() -> str:
    """``"uvloop"`` or ``"asyncio"``: the loop :func:`run` will use."""
    return "uvloop" if _uvloop() is not None else "asyncio"


ASYNCIO_TLS_READ_BUFFER = 32 * 1024
"""Bytes of the read buffer asyncio's TLS layer keeps per connection (``asyncio.sslproto.SSLProtocol.max_size``,
256 KiB in CPython 3.11-3.13). Two TLS records (16 KiB each) per read are plenty for AdmissionReviews; with the
default, 4,000 idle TLS connections took a plain install to 1,194 MiB of RSS (about 280 KiB each)."""


def _small_asyncio_tls_buffers() -> None:
    sslproto = getattr(asyncio, "sslproto", None)
    protocol = getattr(sslproto, "SSLProtocol", None)
    if protocol is not None and getattr(protocol, "max_size", 0) > ASYNCIO_TLS_READ_BUFFER:
        protocol.max_size = ASYNCIO_TLS_READ_BUFFER


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new loop of the kind :func:`loop_name` names (like ``asyncio.run``).

    On the stdlib loop, asyncio's per-connection TLS read buffer is made :data:`ASYNCIO_TLS_READ_BUFFER` bytes first.
    """
    uvloop = _uvloop()
    if uvloop is None:
        _small_asyncio_tls_buffers()
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


async def cancel(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel ``tasks`` (``None`` is skipped) and wait until every one has ended."""
    live = [t for t in tasks if t is not None]
    for task in live:
        task.cancel()
    for task in live:
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Pacer:
    """Give the event loop back during a long synchronous walk (a relist's handler calls, a resync, a work queue).

    ``await pacer.tick()`` after each item: it yields (``asyncio.sleep(0)``) once ``slice_seconds`` have passed since
    the last yield, so admissions waiting on the same loop wait at most about one slice (default 5 ms) instead of
    the whole walk. Cheap when it does not yield: one ``time.perf_counter()`` call.
    """

    __slots__ = ("slice_seconds", "_since")

    def __init__(self, slice_seconds: float = 0.005) -> None:
        self.slice_seconds = slice_seconds
        self._since = time.perf_counter()

    async def tick(self) -> None:
        now = time.perf_counter()
        if now - self._since >= self.slice_seconds:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


EVERY_ADDRESS = ""
"""``admit serve --host`` / ``--metrics-host`` value, the default: every address of both families, IPv4 and IPv6
(:func:`listen_sockets`). ``0.0.0.0`` pins IPv4, ``::`` IPv6 (asyncio sets ``IPV6_V6ONLY`` on it), an address
that address."""

WILDCARDS = ("0.0.0.0", "::")
"""What :data:`EVERY_ADDRESS` binds: the IPv4 and the IPv6 wildcard, one socket each (tests bind the loopback pair
``127.0.0.1`` and ``::1`` instead)."""


def listen_sockets(port: int, backlog: int = 128) -> list[socket.socket]:
    """Listening TCP sockets on every address of both families, all on ``port`` (``0``: the port the kernel gives
    the first): one per :data:`WILDCARDS` entry the kernel has, the IPv6 one with ``IPV6_V6ONLY`` set on the socket,
    so the two never clash and ``net.ipv6.bindv6only`` does not matter (a bare ``::`` takes IPv4 too where it is 0,
    and not where it is 1). A family the kernel lacks (``EAFNOSUPPORT``: IPv6 disabled at boot; ``EADDRNOTAVAIL``)
    is left out, so an IPv4-only or IPv6-only node still serves its own family. Non-blocking, ``SO_REUSEADDR`` set,
    for ``loop.create_server(sock=...)``.

    Raises:
        OSError: the port cannot be bound (taken, or privileged), or no family could be bound.
    """
    sockets: list[socket.socket] = []
    skipped: list[str] = []
    try:
        for address in WILDCARDS:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as e:
                if e.errno != errno.EAFNOSUPPORT:
                    raise
                skipped.append(f"{address}: {e.strerror}")
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((address, port))
                sock.listen(backlog)
                sock.setblocking(False)
            except OSError as e:
                sock.close()
                if e.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    raise
                skipped.append(f"{address}: {e.strerror}")
                continue
            port = sock.getsockname()[1]  # the next family takes the same port
            sockets.append(sock)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(errno.EADDRNOTAVAIL, f"no address family to listen on ({'; '.join(skipped)})")
    return sockets


class ServerGroup(asyncio.AbstractServer):
    """Several ``asyncio`` servers (one per :func:`listen_sockets` socket) as one server for an aiohttp site to hold."""

    def __init__(self, servers: list[asyncio.AbstractServer]) -> None:
        self.servers = servers

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(s for server in self.servers for s in getattr(server, "sockets", ()) or ())

    def close(self) -> None:  # connections stay, as asyncio.Server.close leaves them
        for server in self.servers:
            server.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.servers[0].get_loop()

    def is_serving(self) -> bool:
        return any(server.is_serving() for server in self.servers)

    async def wait_closed(self) -> None:
        for server in self.servers:
            await server.wait_closed()

    async def start_serving(self) -> None:
        for server in self.servers:
            await server.start_serving()

    async def serve_forever(self) -> None:
        await asyncio.gather(*(server.serve_forever() for server in self.servers))


def listen_url(scheme: str, host: str, port: int) -> str:
    """``https://[::]:8443`` for a log line saying where a listener serves: ``[::]`` for :data:`EVERY_ADDRESS`
    (IPv4 and IPv6), brackets around any other IPv6 address."""
    shown = "[::]" if host == EVERY_ADDRESS else (f"[{host}]" if ":" in host else host)
    return f"{scheme}://{shown}:{port}"
