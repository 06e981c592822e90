#!/usr/bin/env python3
"""Benchmark of admit's admission hot path against the fastest aiohttp HTTPS handler on the same machine.

Run from a checkout after ``pip install .`` (or ``pip install '.[fast]'``)::

    python bench/admit_bench.py            # full run, under 3 minutes
    python bench/admit_bench.py --quick    # under 30 seconds

What it does:

1. writes a development CA and serving pair (``admit certs``), starts the fake Kubernetes API
   (``python -m admit.testing.fake_kube``, which counts the requests it receives) and stores the Deployment the
   ``scale`` mix scales;
2. starts ``admit serve`` (HTTPS, keep-alive, ``--api-server`` = the fake, ``--no-controller``) and, as the
   *baseline*, a bare aiohttp HTTPS handler (``--serve-baseline``, this script in another process) that parses the
   AdmissionReview and answers "allowed" with the request's uid: the floor for a Python HTTPS server here. Both use
   admit's TLS settings, JSON backend and event loop;
3. drives both from this process (the servers are separate processes, so their RSS is their own) with the
   AdmissionReviews of ``bench/reviews.py``, per mix: closed loop (``--connections`` keep-alive connections, as
   fast as answers come; baseline and admit alternate in ``--rounds`` rounds and the best round of each counts,
   which damps noise from other work on the machine), then open loop at each of ``--rates`` requests/s (requests
   sent on a fixed schedule whatever the answers do; latency counted from the scheduled time, so a stall shows);
4. tops admit up with mixed traffic until it has served the last of ``--rss-marks`` requests, reading its VmRSS
   (``/proc/<pid>/status``) when each mark is reached, and VmHWM (peak RSS) at the end;
5. prints the tables and the benchmark's targets with PASS/FAIL; ``--json FILE`` writes every figure.

Why this load generator: the driver is a minimal HTTP/1.1 keep-alive client on ``asyncio.Protocol`` + ``ssl``
that writes pre-built requests and reads ``Content-Length`` bodies. On this 2-core machine the client and the
server each get one core, so the client must cost less CPU per request than the server under test; aiohttp's
client pool costs more than the baseline server itself (measured: about 110 us against 85 us per request), so it
would cap both servers and hide the ratio. ``wrk`` (Debian) was tried as a cross-check: on the baseline it reached
9,200-11,500 requests/s where this driver reached 12,300-13,100 (alternating runs, 16 connections), so the driver is
not the limit; wrk also sends one fixed body (one uid) without Lua and has no fixed-rate mode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    import admit  # noqa: F401
except ImportError:  # a checkout without ``pip install``: use the package next to bench/, in subprocesses too
    _ROOT = str(Path(__file__).resolve().parent.parent)
    sys.path.insert(0, _ROOT)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))
from reviews import MIXES, NAMESPACE, Mix, fill, scale_parent  # noqa: E402

MB = 1024 * 1024

# --------------------------------------------------------------------------------------------------------------
# Event loop: the same choice as ``admit serve``
# --------------------------------------------------------------------------------------------------------------


def event_loop_name() -> str:
    """``"uvloop"`` when admit serve runs on uvloop (installed and not disabled), else ``"asyncio"``."""
    try:
        from admit.eventloop import loop_name
    except ImportError:
        return "asyncio"
    return loop_name()


def run(coro: Any) -> Any:
    """Run ``coro`` on the event loop admit serve would use."""
    try:
        from admit.eventloop import run as admit_run
    except ImportError:
        return asyncio.run(coro)
    return admit_run(coro)


# --------------------------------------------------------------------------------------------------------------
# The baseline server (this script, ``--serve-baseline``)
# --------------------------------------------------------------------------------------------------------------


def serve_baseline(host: str, port: int, cert: str, key: str) -> int:
    """The floor: an aiohttp HTTPS server that parses each AdmissionReview and answers allowed, echoing its uid."""
    from aiohttp import web

    from admit.webhook.admissionreview import dumps, loads
    from admit.tls.provider import create_server_ssl_context

    async def review(request: web.Request) -> web.Response:
        doc = loads(await request.read())
        answer = {"apiVersion": doc["apiVersion"], "kind": "AdmissionReview",
                  "response": {"uid": doc["request"]["uid"], "allowed": True}}
        return web.Response(body=dumps(answer), content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def main() -> None:
        ctx = create_server_ssl_context()
        ctx.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_post("/mutate", review)
        app.router.add_post("/validate", review)
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, ssl_context=ctx, backlog=1024).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()

    run(main())
    return 0


# --------------------------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_memory(pid: int) -> dict[str, float]:
    """``{"rss": VmRSS, "hwm": VmHWM}`` of process ``pid`` in MiB (``/proc/<pid>/status``)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[2:5].lower()] = int(line.split()[1]) / 1024
    return out


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A server under test: a subprocess serving HTTPS on 127.0.0.1:``port``."""

    def __init__(self, name: str, cmd: list[str], port: int, log: Path) -> None:
        self.name = name
        self.port = port
        self.log = log
        self.proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.requests = 0  # requests this driver sent and got answered

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, ctx: ssl.SSLContext, timeout: float = 30.0) -> None:
        """Wait until ``GET /healthz`` answers 200 (seconds ``timeout``); raise with the server's log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz", context=ctx, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit(f"{self.name} did not start; its output:\n{self.log.read_text()}")

    def stop(self) -> int | None:
        """SIGTERM, then wait (kill after 10 s); returns the exit code."""
        return stop_process(self.proc)


def stop_process(proc: subprocess.Popen) -> int | None:
    """SIGTERM ``proc``, wait up to 10 s, then kill; returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class FakeAPI:
    """``python -m admit.testing.fake_kube`` in a subprocess; its ``/_fake/stats`` counts API requests."""

    def __init__(self, log: Path, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "admit.testing.fake_kube", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=log.open("wb"), stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            self.stop()
            raise SystemExit(f"fake Kubernetes API did not start: {line!r} {log.read_text()}")
        self.url = line

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def total(self) -> int:
        """API requests received so far (``/_fake/*`` not counted)."""
        return int(self._call("GET", "/_fake/stats")["total"])

    def counts(self) -> dict[str, int]:
        """Requests by ``"VERB plural"``."""
        return dict(self._call("GET", "/_fake/stats")["counts"])

    def store(self, obj: dict[str, Any]) -> None:
        """Create ``obj`` (a namespaced apps/v1 object) through the REST API."""
        self._call("POST", f"/apis/apps/v1/namespaces/{obj['metadata']['namespace']}/deployments", obj)

    def stop(self) -> None:
        """SIGTERM, then wait (kill after 10 s)."""
        stop_process(self.proc)


# --------------------------------------------------------------------------------------------------------------
# The load generator
# --------------------------------------------------------------------------------------------------------------


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
            self.conns.append(proto)  # type: ignore[arg-type]

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
        loop = asyncio.get_running_loop()
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


@dataclass
class Settings:
    """Run parameters (seconds, requests/s, request counts)."""

    mixes: list[str]
    connections: int
    rounds: int
    seconds: float
    rates: list[float]
    open_seconds: float
    marks: list[int]
    max_requests: int
    warmup: float


def settings_from(args: argparse.Namespace) -> Settings:
    quick = args.quick
    return Settings(
        mixes=args.mixes or list(MIXES),
        connections=args.connections,
        rounds=args.rounds if args.rounds is not None else (1 if quick else 4),
        seconds=args.seconds if args.seconds is not None else (1.0 if quick else 2.0),
        rates=args.rates or ([500.0] if quick else [500.0, 1000.0]),
        open_seconds=args.open_seconds if args.open_seconds is not None else (1.0 if quick else 4.0),
        marks=args.rss_marks or ([5000, 10000] if quick else [50000, 100000]),
        max_requests=args.max_requests,
        warmup=0.3 if quick else 1.0,
    )


async def measure(st: Settings, admit: Server, base: Server, fake: FakeAPI, ctx: ssl.SSLContext) -> dict[str, Any]:
    pool = max(st.connections, 32)
    drivers = {"baseline": Driver(base, ctx, pool, []), "admit": Driver(admit, ctx, pool, st.marks)}
    for d in drivers.values():
        await d.connect()
    mixes = [MIXES[m] for m in st.mixes]
    result: dict[str, Any] = {"mixes": {}, "memory": {}}
    result["memory"]["admit_idle_mb"] = proc_memory(admit.pid)["rss"]
    result["memory"]["baseline_idle_mb"] = proc_memory(base.pid)["rss"]
    # warm-up: every code path once, connections open
    for d in drivers.values():
        await d.closed_loop(mixes, st.connections, st.warmup, max(4 * len(mixes), min(st.max_requests, 10**9)))
    for mix in mixes:
        out: dict[str, Any] = {"title": mix.title, "body_bytes": mix.body_sizes(), "closed": {}, "open": {}}
        api_before = fake.total()
        counts_before = fake.counts()
        admissions = 0
        best: dict[str, Sample] = {}
        cpu: dict[str, float] = {}
        for _ in range(st.rounds):
            for name in ("baseline", "admit"):
                d = drivers[name]
                c0, d0, f0 = proc_cpu_seconds(d.server.pid), time.process_time(), proc_cpu_seconds(fake.proc.pid)
                s = await d.closed_loop([mix], st.connections, st.seconds, st.max_requests)
                s.driver_cpu = (time.process_time() - d0) / s.seconds if s.seconds else 0.0
                s.fake_cpu = (proc_cpu_seconds(fake.proc.pid) - f0) / s.seconds if s.seconds else 0.0
                if name == "admit":
                    admissions += s.admissions
                if name not in best or s.rps > best[name].rps:
                    best[name] = s
                    cpu[name] = (proc_cpu_seconds(d.server.pid) - c0) / s.seconds if s.seconds else 0.0
        for name, s in best.items():
            out["closed"][name] = s.summary() | {"server_cpu": round(cpu[name], 3), "driver_cpu": round(s.driver_cpu, 2),
                                                "fake_api_cpu": round(s.fake_cpu, 2)}
        out["ratio"] = round(best["admit"].rps / best["baseline"].rps, 3) if best["baseline"].rps else None
        for rate in st.rates:
            out["open"][str(int(rate))] = {}
            for name in ("baseline", "admit"):
                s = await drivers[name].open_loop(mix, rate, st.open_seconds, st.max_requests)
                if name == "admit":
                    admissions += s.admissions
                out["open"][str(int(rate))][name] = s.summary()
        api_calls = fake.total() - api_before
        counts_after = fake.counts()
        out["api_calls"] = api_calls
        out["api_calls_by"] = {k: v - counts_before.get(k, 0) for k, v in counts_after.items()
                               if v != counts_before.get(k, 0)}
        out["admissions"] = admissions
        out["api_calls_per_admission"] = round(api_calls / admissions, 4) if admissions else None
        out["memory_mb"] = {"admit": proc_memory(admit.pid), "baseline": proc_memory(base.pid)}
        result["mixes"][mix.name] = out
    # top up to the last RSS mark with mixed traffic: pods mostly, as in a cluster
    soak_mix = [MIXES["known-group"], MIXES["no-group"]] * 4 + [MIXES["deployment"], MIXES["scale"]]
    soak_start = time.monotonic()
    while drivers["admit"].marks:
        left = drivers["admit"].marks[-1] - admit.requests
        await drivers["admit"].closed_loop(soak_mix, st.connections, 3600.0, max(left, 1))
    result["memory"]["soak_seconds"] = round(time.monotonic() - soak_start, 1)
    result["memory"]["admit_rss_at_mb"] = {str(k): v for k, v in sorted(drivers["admit"].mark_rss.items())}
    result["memory"]["admit_peak_mb"] = proc_memory(admit.pid)["hwm"]
    result["memory"]["baseline_peak_mb"] = proc_memory(base.pid)["hwm"]
    result["memory"]["admit_requests"] = admit.requests
    result["memory"]["baseline_requests"] = base.requests
    for d in drivers.values():
        d.close()
    return result


def metrics_cost(calls: int = 200_000) -> dict[str, Any] | None:
    """In-process cost of admit's per-request metrics (``metrics.WebhookRecorder.started`` + ``answered``, the calls
    the server makes around each AdmissionReview) on a parsed known-group Pod review: microseconds per request, best
    of 5 runs of ``calls``. ``None`` for a checkout without ``admit/observability/metrics.py``."""
    try:
        from admit.observability.metrics import WebhookRecorder
    except ImportError:
        return None
    from admit.webhook.admissionreview import Decision, parse_review

    req = parse_review(fill(MIXES["known-group"].steps[0][1], 0))
    recorder = WebhookRecorder("/bench")
    decision = Decision()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            recorder.answered(req, decision, recorder.started())
        best = min(best, time.perf_counter() - t0)
    return {"us_per_request": round(best / calls * 1e6, 3), "calls": calls}


def scrape_metrics(port: int) -> dict[str, float]:
    """``controller_runtime_webhook_requests_total`` by ``webhook`` and ``code`` from admit's ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "controller_runtime_webhook_requests_total":
                out[f"{sample.labels['webhook']} {sample.labels['code']}"] = sample.value
    return out


def check_targets(result: dict[str, Any], marks: list[int]) -> list[tuple[str, bool]]:
    """The benchmark's targets, each ``(description with the figure, met)``."""
    checks = []
    for name in ("known-group", "no-group"):
        m = result["mixes"].get(name)
        if not m:
            continue
        ratio = m["ratio"] or 0.0
        checks.append((f"{name}: throughput {ratio:.2f} x baseline (>= 0.70)", ratio >= 0.7))
        per = m["api_calls_per_admission"]
        checks.append((f"{name}: {per} Kubernetes API calls per pod (0)", per == 0))
        o = m["open"].get("500", {}).get("admit")
        if o:
            checks.append((f"{name}: open loop 500 req/s p99 {o['p99_ms']:.2f} ms (<= 10 ms)", o["p99_ms"] <= 10))
    mem = result["memory"]
    peak = mem["admit_peak_mb"]
    checks.append((f"admit peak RSS {peak:.1f} MiB (<= 120 MB)", peak * MB <= 120e6))
    at = mem["admit_rss_at_mb"]
    if len(marks) >= 2 and str(marks[0]) in at and str(marks[-1]) in at:
        a, b = at[str(marks[0])], at[str(marks[-1])]
        growth = (b - a) / a * 100
        checks.append((f"admit RSS growth {a:.1f} -> {b:.1f} MiB between {marks[0]} and {marks[-1]} requests: "
                       f"{growth:+.1f}% (<= 5%)", growth <= 5))
    return checks


def _ms(x: float) -> str:
    return f"{x:.2f}"


def render(result: dict[str, Any], st: Settings, meta: dict[str, Any]) -> str:
    """The report as Markdown tables (what docs/performance.md shows)."""
    lines = [
        f"admit {meta['admit_version']} | Python {meta['python']} | JSON {meta['json']} | loop {meta['loop']} | "
        f"{meta['cpus']} CPUs | load average before {meta['loadavg_before']}, after {meta['loadavg_after']}",
        f"closed loop: {st.connections} keep-alive connections, best of {st.rounds} x {st.seconds:g} s per server; "
        f"open loop: {', '.join(str(int(r)) for r in st.rates)} requests/s for {st.open_seconds:g} s",
        "",
        "Closed loop (max throughput; one admission = the requests kube-apiserver sends for one object)",
        "",
        "| mix | server | requests/s | admissions/s | p50 ms | p99 ms | p99.9 ms | admit/baseline | "
        "server CPU (cores) | CPU us/request | driver CPU | API calls per admission | RSS / peak MiB | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in result["mixes"].items():
        for server in ("baseline", "admit"):
            c = m["closed"][server]
            steps = len(MIXES[name].steps)
            ratio = f"{m['ratio']:.2f}" if server == "admit" and m["ratio"] is not None else ""
            api = f"{m['api_calls_per_admission']:g}" if server == "admit" else ""
            mem = m["memory_mb"][server]
            us = c["server_cpu"] * 1e6 / c["rps"] if c["rps"] else float("nan")
            lines.append(
                f"| {name} | {server} | {c['rps']:.0f} | {c['rps'] / steps:.0f} | {_ms(c['p50_ms'])} | "
                f"{_ms(c['p99_ms'])} | {_ms(c['p999_ms'])} | {ratio} | {c['server_cpu']:.2f} | {us:.0f} | "
                f"{c['driver_cpu']:.2f} | {api} | {mem['rss']:.1f} / {mem['hwm']:.1f} | {c['errors']} |"
            )
    lines += ["", "Open loop (fixed request rate, sent whatever the answers do; latency includes waiting for a free "
              "connection)", "",
              "| mix | requests/s | server | p50 ms | p99 ms | p99.9 ms | requests | errors |",
              "|---|---:|---|---:|---:|---:|---:|---:|"]
    for name, m in result["mixes"].items():
        for rate, per in m["open"].items():
            for server in ("baseline", "admit"):
                o = per[server]
                lines.append(f"| {name} | {rate} | {server} | {_ms(o['p50_ms'])} | {_ms(o['p99_ms'])} | "
                             f"{_ms(o['p999_ms'])} | {o['requests']} | {o['errors']} |")
    mem = result["memory"]
    at = ", ".join(f"after {int(k):,} requests {v:.1f} MiB" for k, v in mem["admit_rss_at_mb"].items())
    lines += ["", "Memory (admit serve process, /proc/<pid>/status)", "",
              f"- admit RSS idle {mem['admit_idle_mb']:.1f} MiB; {at}; peak (VmHWM) {mem['admit_peak_mb']:.1f} MiB "
              f"after {mem['admit_requests']:,} requests",
              f"- baseline RSS idle {mem['baseline_idle_mb']:.1f} MiB; peak {mem['baseline_peak_mb']:.1f} MiB",
              "", "Kubernetes API calls per mix (admit, all phases of the mix)", ""]
    for name, m in result["mixes"].items():
        by = ", ".join(f"{k} {v}" for k, v in sorted(m["api_calls_by"].items())) or "none"
        fake_cpu = m["closed"]["admit"].get("fake_api_cpu", 0.0)
        lines.append(f"- {name}: {m['api_calls']} calls for {m['admissions']} admissions ({by}); the fake API used "
                     f"{fake_cpu:.2f} cores of the same machine during admit's closed loop")
    cost = (result.get("metrics") or {}).get("cost")
    if cost:
        known = result["mixes"].get("known-group", {}).get("closed", {}).get("admit")
        per_request = known["server_cpu"] * 1e6 / known["rps"] if known and known["rps"] else None
        share = f", {cost['us_per_request'] / per_request:.1%} of admit's CPU per known-group request" \
            if per_request else ""
        scraped = result["metrics"].get("scraped_requests_total") or {}
        lines += ["", "Metrics (admit/observability/metrics.py)", "",
                  f"- per request: {cost['us_per_request']:.2f} us in-process (WebhookRecorder started + answered, "
                  f"best of 5 x {cost['calls']:,} calls){share}",
                  f"- /metrics after the run: controller_runtime_webhook_requests_total "
                  + (", ".join(f"{k} = {v:,.0f}" for k, v in sorted(scraped.items())) or "not scraped")
                  + f" (the driver sent {result['metrics']['requests_sent']:,} requests)"]
    lines += ["", "Targets", ""]
    for text, ok in result["targets"]:
        lines.append(f"- {'PASS' if ok else 'FAIL'} {text}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Idle and slow connections (--idle-connections)
# --------------------------------------------------------------------------------------------------------------


def _closed_by_peer(sock: ssl.SSLSocket) -> bool:
    """True when the server has closed ``sock`` (a non-blocking read sees EOF or a reset)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLWantReadError, BlockingIOError):
        return False
    except OSError:
        return True


def idle_probe(n: int, partial: int = 20, hold: float = 3.0) -> dict[str, Any]:
    """Open ``n`` idle TLS connections to ``admit serve`` (loopback, handshake done, no request; 8 at a time), read its
    RSS, check that a new connection still gets an admission answered, close them and read RSS again; then open
    ``partial`` connections that send half a request line and time how long the server keeps them.

    Returns the figures (MiB, seconds, counts) as a dict.
    """
    tmp = Path(tempfile.mkdtemp(prefix="admit-idle-"))
    certs = tmp / "certs"
    subprocess.run([sys.executable, "-m", "admit.cli", "certs", "--dir", str(certs)], check=True,
                   stdout=subprocess.DEVNULL)
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    fake = FakeAPI(tmp / "fake.log")
    port = free_port()
    srv = Server("admit serve", [
        sys.executable, "-m", "admit.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--cert-mode", "files", "--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file", str(certs / "tls.key"),
        "--api-server", fake.url, "--no-controller", "--log-level", "warning", "--shutdown-delay", "0",
    ], port, tmp / "admit.log")
    out: dict[str, Any] = {"connections": n}
    socks: list[ssl.SSLSocket] = []
    try:
        srv.wait_ready(ctx)
        time.sleep(1.0)
        out["rss_idle_mib"] = proc_memory(srv.pid)["rss"]
        from concurrent.futures import ThreadPoolExecutor

        def connect(_: int) -> ssl.SSLSocket | None:
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=10)
                return ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            except OSError:
                return None

        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:  # handshakes in parallel; the server does its side on one core
            opened = list(pool.map(connect, range(n)))
        socks = [s for s in opened if s is not None]
        failed = n - len(socks)
        out["open_seconds"] = round(time.monotonic() - started, 1)
        out["failed_handshakes"] = failed
        time.sleep(hold)
        mem = proc_memory(srv.pid)
        out["rss_held_mib"], out["peak_mib"] = mem["rss"], mem["hwm"]
        out["held_by_server"] = sum(1 for s in socks if not _closed_by_peer(s))
        # kube-apiserver's next connection still gets an answer while the flood is open
        path, parts = MIXES["no-group"].steps[0]
        body = fill(parts, 1)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.settimeout(10)
                    s.sendall(http_request(path, port, body))
                    out["answer_during_flood"] = s.recv(64).split(b"\r\n", 1)[0].decode()
        except OSError as e:
            out["answer_during_flood"] = f"failed: {e}"
        for s in socks:
            s.close()
        socks.clear()
        time.sleep(3.0)
        out["rss_after_close_mib"] = proc_memory(srv.pid)["rss"]
        # half a request line, then silence: how long until the server closes it
        slow = []
        for _ in range(partial):
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            slow.append(s)
        started = time.monotonic()
        while slow and time.monotonic() - started < 60:
            slow = [s for s in slow if not _closed_by_peer(s) or s.close()]
            time.sleep(0.1)
        out["partial_header_closed_after_s"] = round(time.monotonic() - started, 1) if not slow else None
        for s in slow:
            s.close()
    finally:
        for s in socks:
            s.close()
        srv.stop()
        fake.stop()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    from admit.webhook.admissionreview import JSON_BACKEND

    out["json"], out["loop"] = JSON_BACKEND, event_loop_name()
    return out


def render_idle(r: dict[str, Any]) -> str:
    """One paragraph of the idle-connection probe's figures."""
    return (
        f"idle TLS connections ({r['json']}, {r['loop']}): {r['connections']} opened in {r['open_seconds']} s "
        f"({r['failed_handshakes']} failed), {r['held_by_server']} still held by admit after {3.0:g} s; "
        f"RSS {r['rss_idle_mib']:.1f} MiB idle -> {r['rss_held_mib']:.1f} MiB with them open "
        f"(peak {r['peak_mib']:.1f} MiB) -> {r['rss_after_close_mib']:.1f} MiB after they closed; "
        f"a new admission during the flood: {r['answer_during_flood']}; "
        f"connections stalled mid-header closed after {r['partial_header_closed_after_s']} s"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 0 when it ran (1 with ``--check`` and a missed target, 2 on errors)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run (under 30 s): 1 round of 1 s, 500 req/s only, "
                                                        "RSS marks 5k/10k")
    p.add_argument("--mixes", nargs="+", choices=list(MIXES), help="mixes to run (default: all)")
    p.add_argument("--connections", type=int, default=16, help="closed-loop connections per server (default 16)")
    p.add_argument("--rounds", type=int, help="closed-loop rounds per server and mix (default 4; quick 1)")
    p.add_argument("--seconds", type=float, help="seconds per closed-loop round (default 2; quick 1)")
    p.add_argument("--rates", type=float, nargs="+", help="open-loop rates in requests/s (default 500 1000)")
    p.add_argument("--open-seconds", type=float, help="seconds per open-loop rate (default 4; quick 1)")
    p.add_argument("--rss-marks", type=lambda s: [int(x) for x in s.split(",")],
                   help="comma-separated request counts at which admit's RSS is read (default 50000,100000)")
    p.add_argument("--max-requests", type=int, default=10**12,
                   help="cap on requests per phase (tests use a tiny one)")
    p.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (certs, server logs)")
    p.add_argument("--idle-connections", type=int, metavar="N",
                   help="instead of the load run: hold N idle TLS connections (loopback) and print admit's RSS "
                        "(docs/performance.md: 4000)")
    p.add_argument("--gang-workloads", type=lambda s: [int(x) for x in s.split(",")],
                   help="instead of the mixes: admit serve with its controller over N stored gang workloads, for each "
                        "comma-separated N (e.g. 0,1000,5000,20000; see bench/gang_scale.py)")
    p.add_argument("--gang-rate", type=float, default=100.0,
                   help="--gang-workloads: admission requests/s sent the whole time (default 100)")
    p.add_argument("--gang-resync", type=float, default=90.0,
                   help="--gang-workloads: admit's --resync-period, seconds (default 90; longer than the sync)")
    p.add_argument("--gang-relists", type=int, default=2, help="--gang-workloads: forced relists (default 2)")
    p.add_argument("--serve-baseline", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--tls-cert-file", help=argparse.SUPPRESS)
    p.add_argument("--tls-key-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_baseline:
        return serve_baseline("127.0.0.1", args.port, args.tls_cert_file, args.tls_key_file)
    if args.idle_connections:
        result = idle_probe(args.idle_connections)
        print(render_idle(result))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return 0
    if args.gang_workloads is not None:
        from gang_scale import run_gang

        return run_gang(args)
    st = settings_from(args)

    import admit
    from admit.webhook.admissionreview import JSON_BACKEND

    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="admit-bench-"))
    certs = tmp / "certs"
    subprocess.run([sys.executable, "-m", "admit.cli", "certs", "--dir", str(certs)], check=True,
                   stdout=subprocess.DEVNULL)
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    loadavg_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    fake = FakeAPI(tmp / "fake.log")
    admit_port, base_port = free_port(), free_port()
    # as the chart runs it: with its metrics port (a checkout before admit/observability/metrics.py has no such flag)
    metrics_port = free_port() if metrics_cost(1) is not None else 0
    admit_srv = Server("admit serve", [
        sys.executable, "-m", "admit.cli", "serve", "--host", "127.0.0.1", "--port", str(admit_port),
        "--cert-mode", "files", "--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file", str(certs / "tls.key"),
        "--api-server", fake.url, "--no-controller", "--log-level", "warning", "--shutdown-delay", "0",
        *(["--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"] if metrics_port else []),
    ], admit_port, tmp / "admit.log")
    base_srv = Server("baseline", [
        sys.executable, str(Path(__file__).resolve()), "--serve-baseline", "--port", str(base_port),
        "--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file", str(certs / "tls.key"),
    ], base_port, tmp / "baseline.log")
    try:
        admit_srv.wait_ready(ctx)
        base_srv.wait_ready(ctx)
        parent = scale_parent()
        parent["metadata"]["namespace"] = NAMESPACE
        fake.store(parent)
        result = run(measure(st, admit_srv, base_srv, fake, ctx))
        result["metrics"] = {"scraped_requests_total": scrape_metrics(metrics_port) if metrics_port else None,
                             "requests_sent": admit_srv.requests, "cost": metrics_cost()}
    finally:
        admit_rc = admit_srv.stop()
        base_srv.stop()
        fake.stop()
    admit_log = (tmp / "admit.log").read_text(errors="replace")
    result["targets"] = check_targets(result, st.marks)
    meta = {
        "admit_version": admit.__version__, "python": sys.version.split()[0], "json": JSON_BACKEND,
        "loop": event_loop_name(), "cpus": os.cpu_count(), "loadavg_before": loadavg_before,
        "loadavg_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "seconds": round(time.monotonic() - started, 1), "admit_exit_code": admit_rc,
    }
    result["meta"] = meta
    print(render(result, st, meta))
    print(f"\n(run took {meta['seconds']} s; admit serve exited with {admit_rc})")
    errors = sum(m["closed"][s]["errors"] for m in result["mixes"].values() for s in ("admit", "baseline"))
    errors += sum(o[s]["errors"] for m in result["mixes"].values() for o in m["open"].values()
                  for s in ("admit", "baseline"))
    if errors:
        print(f"\n{errors} requests failed; admit's log:\n{admit_log[-3000:]}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result | {"settings": st.__dict__}, indent=2))
    if args.keep:
        print(f"kept {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    if errors:
        return 2
    if args.check and not all(ok for _, ok in result["targets"]):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
