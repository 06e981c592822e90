"""A loopback TCP balancer in front of webhook replicas, shaped like a Service's virtual IP behind kube-proxy.

What it emulates (Kubernetes docs "Virtual IPs and Service Proxies", "Pod Lifecycle: termination"):

- a new connection goes to one of the *ready* endpoints, round robin. Readiness follows each replica's
  ``GET /readyz``, checked every ``period`` seconds (0.5 s by default): the EndpointSlice controller marks a pod's
  endpoint not ready when its readiness fails or the pod starts terminating, and kube-proxy applies the change
  within about a second;
- an established connection stays with the replica it was sent to (conntrack keeps the NAT entry), whatever its
  readiness: bytes and closes (FIN, reset) pass through as they come;
- with no ready endpoint, a new connection is closed at once (kube-proxy rejects connections to a Service without
  endpoints).

The TLS of the webhook passes through untouched; the readiness checks speak HTTPS to each replica with
``ssl_context``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field

__all__ = ["ReadinessBalancer", "Backend"]


@dataclass
class Backend:
    """One replica: ``host:port``; ``ready`` as last checked; ``connections`` sent to it so far."""

    host: str
    port: int
    ready: bool = False
    connections: int = 0


@dataclass
class ReadinessBalancer:
    """Balances ``127.0.0.1:<port>`` over ``backends`` (module docstring). ``server_hostname`` is the name the
    readiness checks' TLS verifies; a check that takes longer than ``check_timeout`` seconds fails (the chart's
    readinessProbe ``timeoutSeconds``: 2). Use ``async with``; ``port`` is set once started."""

    backends: list[Backend]
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    period: float = 0.5
    check_timeout: float = 2.0
    port: int = 0
    refused: int = 0
    _server: asyncio.base_events.Server | None = None
    _tasks: set[asyncio.Task] = field(default_factory=set)  # one per connection passed through
    _links: set[asyncio.StreamWriter] = field(default_factory=set)
    _checker: asyncio.Task | None = None
    _next: int = 0

    async def __aenter__(self) -> "ReadinessBalancer":
        await self.check()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._checker = asyncio.create_task(self._check_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        if self._checker is not None:
            self._checker.cancel()
        for writer in list(self._links):  # the pipes see the end of their streams and finish
            writer.transport.abort()
        await asyncio.gather(*filter(None, [self._checker, *self._tasks]), return_exceptions=True)

    async def check(self) -> None:
        """Check every backend's ``/readyz`` once (a connection each, as the kubelet's probes do)."""
        results = await asyncio.gather(*(self._ready(b) for b in self.backends))
        for backend, ready in zip(self.backends, results):
            backend.ready = ready

    async def _ready(self, backend: Backend) -> bool:
        writer = None
        try:
            async with asyncio.timeout(self.check_timeout):
                reader, writer = await asyncio.open_connection(
                    backend.host, backend.port, ssl=self.ssl_context,
                    server_hostname=self.server_hostname if self.ssl_context else None)
                writer.write(b"GET /readyz HTTP/1.1\r\nHost: admit\r\nConnection: close\r\n\r\n")
                status = await reader.readline()
                return status.split(b" ")[1:2] == [b"200"]
        except (OSError, EOFError, ssl.SSLError, TimeoutError, IndexError):
            return False
        finally:
            if writer is not None:
                writer.close()

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            await self.check()

    def _pick(self) -> Backend | None:
        ready = [b for b in self.backends if b.ready]
        if not ready:
            return None
        self._next += 1
        return ready[self._next % len(ready)]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = self._pick()
        upstream = None
        if backend is not None:
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection(backend.host, backend.port)
        if backend is None or upstream is None:  # no ready backend, or it refused
            self.refused += 1
            writer.transport.abort()
            return
        backend.connections += 1
        up_reader, up_writer = upstream
        task = asyncio.current_task()
        self._tasks.add(task)  # type: ignore[arg-type]
        self._links.update((writer, up_writer))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:  # both directions ended
            self._tasks.discard(task)
            self._links.difference_update((writer, up_writer))
            writer.close()
            up_writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close ``dst`` (a FIN passes through); a reset aborts ``dst`` (it passes through)."""
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except OSError:
        dst.transport.abort()
        return
    if not dst.transport.is_closing() and dst.can_write_eof():
        with contextlib.suppress(OSError):
            dst.write_eof()
