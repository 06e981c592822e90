"""Idle, slow and too many connections, and shutdown with slow clients: the listener as ``admit serve`` wires
it (``ConnectionGuard`` + ``GuardedSite`` + the app), on loopback; SIGTERM against a real ``admit serve`` process."""

import asyncio
import json
import os
import socket
import ssl
import time

import aiohttp
import pytest
from aiohttp import web

from admit.webhook.admission import Admission
from admit.tls.certs import write_development_certificates
from admit.config import Config
from admit.webhook.connections import ConnectionGuard, GuardedSite
from admit.webhook.app import create_server
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import admission_review, eventually, example
from tests.cli.test_serve_e2e import free_port, lease_holder, start_serve, wait_ready

REVIEW = json.dumps(admission_review(example("pause-gang-deployment.yaml"))).encode()


def request_bytes(body: bytes = REVIEW) -> bytes:
    return (b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


async def listener(read_timeout=0.3, max_connections=100, idle_timeout=30.0):
    """The webhook's low-level server behind the guard on 127.0.0.1, wired as ``admit serve`` wires it (plain HTTP:
    the guard is the same with TLS); returns (runner, site)."""
    guard = ConnectionGuard(lambda: None, max_connections, read_timeout)
    server = create_server(Admission(Config(read_timeout_seconds=read_timeout)), None, guard,
                           keepalive_timeout=idle_timeout)
    runner = web.ServerRunner(server, shutdown_timeout=1.0)
    await runner.setup()
    guard.factory = server
    site = GuardedSite(runner, guard, "127.0.0.1", 0)
    await site.start()
    guard.start()
    return runner, site


async def closed(reader: asyncio.StreamReader, within: float) -> float:
    """Seconds until the server closes the connection (EOF), failing after ``within`` seconds."""
    started = time.monotonic()
    await asyncio.wait_for(reader.read(), within)  # whatever is still to come, then EOF
    return time.monotonic() - started


@pytest.fixture
async def served():
    runner, site = await listener()
    yield site
    await site.guard.stop()
    await runner.cleanup()


async def answered(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    writer.close()
    return head


async def test_a_connection_that_stops_in_the_middle_of_its_headers_is_closed_after_the_read_timeout(served):
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
    took = await closed(reader, 5)
    assert 0.2 < took < 2.0 and served.guard.timed_out == 1
    assert (await answered(served.port)).startswith(b"HTTP/1.1 200")


async def test_a_body_sent_byte_by_byte_gets_400_and_the_connection_closed_within_the_read_timeout(served):
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    data = request_bytes()
    head_end = data.index(b"\r\n\r\n") + 4
    writer.write(data[:head_end])
    started = time.monotonic()

    async def trickle():
        for byte in data[head_end:head_end + 40]:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)

    sender = asyncio.create_task(trickle())
    answer = await asyncio.wait_for(reader.read(), 5)
    sender.cancel()
    await asyncio.gather(sender, return_exceptions=True)
    assert answer.startswith(b"HTTP/1.1 400") and b"did not arrive within 0.3s" in answer
    assert time.monotonic() - started < 2.5


async def test_after_a_late_body_the_400_is_followed_by_a_fin_and_what_the_client_still_sends_draws_no_reset(served):
    """Go's net/http server closes so (closeWriteAndWait): answer, FIN, then drop input until the client closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    data = request_bytes()
    writer.write(data[:data.index(b"\r\n\r\n") + 4 + 10])  # headers and 10 bytes of the body, then silence
    answer = await asyncio.wait_for(reader.read(), 5)  # the 400, then EOF: the server half-closed
    assert answer.startswith(b"HTTP/1.1 400") and b"Connection: close" in answer
    for _ in range(3):  # a client that did not notice yet: its bytes are read and dropped, never answered by a RST
        writer.write(b"x" * 100)
        await writer.drain()
    writer.close()
    await eventually(lambda: len(served.guard) == 0)


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout():
    runner, site = await listener(idle_timeout=0.5)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
        writer.write(request_bytes())
        await reader.readuntil(b"\r\n\r\n")
        took = await closed(reader, 5)  # the rest of the answer, then EOF once idle
        assert took < 3
        await eventually(lambda: len(site.guard) == 0)
    finally:
        await site.guard.stop()
        await runner.cleanup()


async def test_over_the_connection_cap_the_connection_idle_longest_makes_room_for_a_new_one():
    runner, site = await listener(max_connections=3)
    try:
        idle = [await asyncio.open_connection("127.0.0.1", site.port) for _ in range(3)]
        await eventually(lambda: len(site.guard) == 3)
        assert (await answered(site.port)).startswith(b"HTTP/1.1 200")  # kube-apiserver's new connection
        await closed(idle[0][0], 2)  # the oldest idle one went
        assert site.guard.evicted >= 1 and len(site.guard) <= 3
    finally:
        await site.guard.stop()
        await runner.cleanup()


async def test_over_the_cap_with_every_connection_busy_the_new_one_is_refused_and_the_busy_ones_finish():
    runner, site = await listener(max_connections=2, read_timeout=2.0)
    try:
        busy = []
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", site.port)
            writer.write(request_bytes()[:-10])  # headers and most of the body: a request in progress
            busy.append((reader, writer))
        await eventually(lambda: site.in_flight() == 2)
        reader, _ = await asyncio.open_connection("127.0.0.1", site.port)
        assert await asyncio.wait_for(reader.read(), 2) == b"" and site.guard.refused == 1
        for reader, writer in busy:
            writer.write(request_bytes()[-10:])
            assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
    finally:
        await site.guard.stop()
        await runner.cleanup()


async def test_sigterm_with_slow_body_clients_releases_the_lease_first_and_exits_within_the_drain(tmp_path):
    paths = write_development_certificates(tmp_path)
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    async with FakeKubeAPI() as fake:
        proc, port = await start_serve(
            "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]), "--api-server", fake.url,
            "--namespace", "admit-system", "--read-timeout", "60", "--drain-seconds", "2",
        )
        slow = []
        try:
            await wait_ready(f"https://127.0.0.1:{port}", ctx, proc)
            await eventually(lambda: lease_holder(fake), timeout=10)
            for _ in range(3):  # three clients that send headers and then the body one byte every few seconds
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
                writer.write(request_bytes()[: len(request_bytes()) - len(REVIEW) + 5])
                await writer.drain()
                slow.append((reader, writer))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            proc.send_signal(15)
            await asyncio.wait_for(proc.wait(), 15)
            took = time.monotonic() - started
            log = (await proc.stdout.read()).decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            for _, writer in slow:
                writer.close()
        assert proc.returncode == 0, log
        assert took < 6, f"exit took {took:.1f}s\n{log}"
        assert not lease_holder(fake), "the Lease is released on SIGTERM"
        released = log.index("released Lease")
        stopped = log.index("listener stopped")
        assert released < stopped, log
        assert "3 request(s) unfinished after the 2s drain" in log, log


def test_the_stdlib_loop_keeps_a_small_tls_read_buffer_per_connection():
    from tests.webhook.test_hot_path import run_python

    proc = run_python("""
        import asyncio, asyncio.sslproto
        from admit import eventloop as loop
        assert asyncio.sslproto.SSLProtocol.max_size == 256 * 1024  # CPython's default: 256 KiB per TLS connection

        async def size():
            return asyncio.sslproto.SSLProtocol.max_size

        print(loop.run(size()))
    """, ADMIT_EVENT_LOOP="asyncio")
    assert proc.stdout.strip() == str(32 * 1024)


async def test_once_shutdown_begins_every_answer_says_connection_close_and_the_connection_closes_after_it(served):
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(request_bytes())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert b"Connection: close" not in head  # keep-alive until shutdown
    await reader.readexactly(int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]))
    served.guard.begin_closing()
    writer.write(request_bytes())  # the same keep-alive connection
    answer = await closed_answer(reader)
    assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer
    for path, status in ((b"/healthz", b"200"), (b"/readyz", b"200"), (b"/no-such-path", b"404")):  # probes, errors
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path)
        head = (await closed_answer(reader)).split(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 " + status) and b"Connection: close" in head, head


async def closed_answer(reader: asyncio.StreamReader) -> bytes:
    """The whole answer, read until the server closes the connection (fails if it does not within 5 s)."""
    return await asyncio.wait_for(reader.read(), 5)


async def test_in_shutdown_a_connection_is_closed_only_once_quiet_for_the_bound_with_nothing_unread(served):
    guard = served.guard
    guard.begin_closing()
    fresh = await asyncio.open_connection("127.0.0.1", served.port)  # kube-apiserver dials to send at once
    await eventually(lambda: len(guard) == 1)
    assert guard.close_quiet(1.0) == 0  # just accepted: its request may be on its way
    conn = next(iter(guard.live.values()))
    raw = socket.socket(fileno=os.dup(fresh[1].get_extra_info("socket").fileno()))
    try:
        raw.send(request_bytes()[:20])  # a request reaches the server's kernel; the loop has not read it yet
        assert conn.unread_bytes() == 20
        assert guard.close_quiet(1.0, now=time.monotonic() + 5) == 0  # quiet long enough, but bytes are waiting
    finally:
        raw.close()
    other = await asyncio.open_connection("127.0.0.1", served.port)
    await eventually(lambda: len(guard) == 2)
    assert guard.close_quiet(1.0, now=time.monotonic() + 1.01) == 1  # the other one: quiet, nothing unread
    assert await closed_answer(other[0]) == b""
    fresh[1].write(request_bytes()[20:])
    assert (await closed_answer(fresh[0])).startswith(b"HTTP/1.1 200")  # its request was answered, then closed


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_the_metrics_port_answers_through_the_drain_until_the_listener_has_stopped(tmp_path):
    paths = write_development_certificates(tmp_path)
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    metrics_port = free_port()
    async with FakeKubeAPI() as fake:
        proc, port = await start_serve(
            "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file", str(paths["tls.key"]), "--api-server", fake.url,
            "--no-controller", "--read-timeout", "60", "--drain-seconds", "3", "--metrics-port", str(metrics_port),
        )
        try:
            await wait_ready(f"https://127.0.0.1:{port}", ctx, proc)
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            writer.write(request_bytes()[:-10])  # a request in progress holds the drain open
            await writer.drain()
            proc.send_signal(15)
            await eventually(lambda: not listening(port), timeout=5)  # the drain has begun
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
                    assert resp.status == 200 and "admit_" in await resp.text()
            assert proc.returncode is None, "the scrape came during the drain"
            await asyncio.wait_for(proc.wait(), 15)
            writer.close()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        log = (await proc.stdout.read()).decode()
        assert proc.returncode == 0 and "1 request(s) unfinished after the 3s drain" in log, log
