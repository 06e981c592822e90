"""The load generator: a minimal HTTP/1.1 keep-alive client on ``asyncio.Protocol`` + ``ssl`` that writes pre-built
requests (``bench/reviews.py``) and reads ``Content-Length`` bodies, in closed and open loops.

Why not aiohttp's client: on a 2-core machine the client and the server each get one core, so the client must cost
less CPU per request than the server under test; aiohttp's client pool costs more than the baseline server itself
(``bench/admit_bench.py`` says what was measured).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from bench.processes import Server, proc_memory
from bench.reviews import Mix, fill


class BadAnswer(Exception):
    """The server answered something other than HTTP 200 with the expected AdmissionReview."""


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request in flight at a time (no pipelining, as kube-apiserver)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[bytes] | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError(f"connection closed by the server: {exc}"))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(buf[:end]).lower()
        i = head.find(b"\r\ncontent-length:")
        if i < 0:
            self.waiter.set_exception(BadAnswer(f"answer without Content-Length: {bytes(buf[:200])!r}"))  # type: ignore[union-attr]
            return
        length = int(head[i + 17: head.find(b"\r\n", i + 17) if head.find(b"\r\n", i + 17) > 0 else None])
        total = end + 4 + length
        if len(buf) < total:
            return
        answer = bytes(buf[:total])
        del buf[:total]
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(answer)

    def request(self, data: bytes) -> asyncio.Future[bytes]:
        """Send one request; the future gets the whole answer (head and body) as bytes."""
        self.waiter = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(data)
        return self.waiter


def http_request(path: str, port: int, body: bytes) -> bytes:
    """The bytes of a ``POST path`` with a JSON body, headers as kube-apiserver's webhook client sends them."""
    return (
        b"POST %s?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: kube-apiserver-admission\r\n"
        b"Content-Type: application/json\r\nAccept: application/json, */*\r\nContent-Length: %d\r\n\r\n"
        % (path.encode(), port, len(body))
    ) + body


@dataclass
class Sample:
    """What one phase measured: requests answered, admissions completed, seconds, latencies (seconds), errors."""

    requests: int = 0
    admissions: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    driver_cpu: float = 0.0
    fake_cpu: float = 0.0
    lag_ms: dict[str, float] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        """Answered requests per second."""
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        """Latency percentile ``q`` (0..100, nearest rank) in milliseconds."""
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
        return ordered[k] * 1000

    def summary(self) -> dict[str, Any]:
        """The figures of this sample (rates in requests/s, latencies in ms)."""
        return {"requests": self.requests, "admissions": self.admissions, "seconds": round(self.seconds, 3),
                "rps": round(self.rps, 1), "p50_ms": round(self.percentile(50), 3),
                "p99_ms": round(self.percentile(99), 3), "p999_ms": round(self.percentile(99.9), 3),
                "errors": self.errors, "first_error": self.first_error,
                **({"schedule_lag_ms": self.lag_ms} if self.lag_ms else {})}


class Driver:
    """Sends a mix's requests to one server over a pool of keep-alive connections."""

    def __init__(self, server: Server, ctx: ssl.SSLContext, pool: int, marks: list[int]) -> None:
        self.server = server
        self.ctx = ctx
        self.pool_size = pool
        self.conns: list[Connection] = []
        self.seq = 0  # admission number: makes uids and Deployment names unique
        self.marks = sorted(marks)
        self.mark_rss: dict[int, float] = {}
        self._cache: dict[tuple[str, Any], bytes] = {}

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.conns = []
        for _ in range(self.pool_size):
            _, proto = await loop.create_connection(Connection, "127.0.0.1", self.server.port, ssl=self.ctx,
                                                    server_hostname="127.0.0.1")
            self.conns.append(proto)

    def close(self) -> None:
        for c in self.conns:
            if c.transport is not None:
                c.transport.close()

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def _answered(self) -> None:
        self.server.requests += 1
        if self.marks and self.server.requests >= self.marks[0]:
            mark = self.marks.pop(0)
            self.mark_rss[mark] = proc_memory(self.server.pid)["rss"]

    async def _send(self, conn: Connection, mix: Mix, path: str, parts: Any, n: int, sample: Sample) -> bytes | None:
        data = http_request(path, self.server.port, fill(parts, n))
        if conn.closed:  # closed by the server while it idled (Go closes a connection whose first request is late)
            await self._reconnect(conn)
        try:
            answer = await conn.request(data)
        except (ConnectionError, BadAnswer) as e:
            sample.errors += 1
            sample.first_error = sample.first_error or str(e)
            if conn.closed:
                await self._reconnect(conn)
            return None
        self._answered()
        if not answer.startswith(b"HTTP/1.1 200") or mix.expect not in answer:
            sample.errors += 1
            sample.first_error = sample.first_error or answer[:600].decode(errors="replace")
        return answer

    async def _reconnect(self, conn: Connection) -> None:
        conn.buf.clear()
        conn.closed = False
        await asyncio.get_running_loop().create_connection(lambda: conn, "127.0.0.1", self.server.port,
                                                           ssl=self.ctx, server_hostname="127.0.0.1")

    async def closed_loop(self, mixes: list[Mix], connections: int, seconds: float, max_requests: int) -> Sample:
        """Each of ``connections`` connections sends the next request as soon as the last is answered, for
        ``seconds`` (or until ``max_requests``); admissions cycle through ``mixes``."""
        sample = Sample()
        clock = time.perf_counter  # not loop.time(): uvloop's clock ticks in whole milliseconds
        start = clock()
        end = start + seconds

        async def worker(idx: int) -> None:
            while clock() < end and sample.requests < max_requests:
                n = self._next()
                mix = mixes[n % len(mixes)]
                for path, parts in mix.steps:
                    conn = self.conns[idx]
                    t0 = clock()
                    if await self._send(conn, mix, path, parts, n, sample) is not None:
                        sample.latencies.append(clock() - t0)
                        sample.requests += 1
                sample.admissions += 1

        await asyncio.gather(*(worker(i) for i in range(min(connections, len(self.conns)))))
        sample.seconds = clock() - start
        return sample

    async def open_loop(self, mix: Mix, rate: float, seconds: float, max_requests: int) -> Sample:
        """Requests at a fixed ``rate`` (requests/s) for ``seconds``, each on a free pooled connection, whatever the
        answers do. Latency counts from the moment the schedule released the request, so waiting for a free
        connection counts (no coordinated omission); the driver's own timer lag (event-loop timers tick in
        milliseconds) is left out of it and kept apart in ``Sample.lag_ms``."""
        sample = Sample()
        loop = asyncio.get_running_loop()
        clock = time.perf_counter  # not loop.time(): uvloop's clock ticks in whole milliseconds
        free: asyncio.Queue[Connection] = asyncio.Queue()
        for c in self.conns:
            free.put_nowait(c)
        total = max(1, min(int(rate * seconds), max_requests))
        steps = len(mix.steps)
        start = clock() + 0.02
        base = self.seq
        pending: set[asyncio.Task[None]] = set()

        lags: list[float] = []

        async def one(i: int, due: float) -> None:
            released = clock()
            lags.append(released - due)
            conn = await free.get()
            try:
                n = base + i // steps + 1
                path, parts = mix.steps[i % steps]
                if await self._send(conn, mix, path, parts, n, sample) is not None:
                    sample.latencies.append(clock() - released)
                    sample.requests += 1
                    if i % steps == steps - 1:
                        sample.admissions += 1
            finally:
                free.put_nowait(conn)

        for i in range(total):
            due = start + i / rate
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            task = loop.create_task(one(i, due))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        self.seq = base + total // steps + 1
        sample.seconds = clock() - start
        lags.sort()
        sample.lag_ms = {"p99": round(lags[int(len(lags) * 0.99)] * 1000, 3), "max": round(lags[-1] * 1000, 3)}
        return sample


# --------------------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------------------
