"""Every listener of ``admit serve`` (the webhook with its probes, the metrics port) serves both address families by
default, for IPv4-only, IPv6-only and dual-stack clusters: one socket per family on one port, the IPv6 one with
``IPV6_V6ONLY`` set, so ``net.ipv6.bindv6only`` does not matter. ``--host`` pins one family or address.

The servers bind loopback only: the wildcards :func:`admit.eventloop.listen_sockets` binds are swapped for
``127.0.0.1`` and ``::1``, the same code path on addresses no other machine can reach."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp import web

from admit import eventloop
from admit.eventloop import EVERY_ADDRESS, listen_sockets, listen_url
from admit.observability import metrics
from admit.webhook.connections import ConnectionGuard, GuardedSite


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")


@pytest.fixture
def loopback_wildcards(monkeypatch):
    monkeypatch.setattr(eventloop, "WILDCARDS", ("127.0.0.1", "::1"))


async def _answers(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status


async def _healthz_site(host: str) -> tuple[web.AppRunner, GuardedSite]:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    guard = ConnectionGuard(lambda: None, 10, 5.0)  # type: ignore[arg-type, return-value]
    app.middlewares.append(guard.middleware)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    guard.factory = runner.server  # type: ignore[assignment]
    site = GuardedSite(runner, guard, host, 0)
    await site.start()
    return runner, site


@needs_ipv6
async def test_the_webhook_listener_started_with_the_default_answers_on_127_0_0_1_and_on_ipv6_loopback(
        loopback_wildcards):
    runner, site = await _healthz_site(EVERY_ADDRESS)
    try:
        families = {s.family for s in site._server.sockets}  # type: ignore[union-attr]
        ports = {s.getsockname()[1] for s in site._server.sockets}  # type: ignore[union-attr]
        assert families == {socket.AF_INET, socket.AF_INET6} and len(ports) == 1
        (port,) = ports
        assert await _answers(f"http://127.0.0.1:{port}/healthz") == 200
        assert await _answers(f"http://[::1]:{port}/healthz") == 200
        v6 = next(s for s in site._server.sockets if s.family == socket.AF_INET6)  # type: ignore[union-attr]
        assert v6.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1  # whatever bindv6only says
    finally:
        await site.stop()
        await runner.cleanup()


@needs_ipv6
async def test_the_metrics_listener_started_with_the_default_answers_on_both_loopbacks(loopback_wildcards):
    probe = listen_sockets(0)
    port = probe[0].getsockname()[1]
    for s in probe:
        s.close()
    runner = await metrics.start_metrics_server(port)
    try:
        assert await _answers(f"http://127.0.0.1:{port}/metrics") == 200
        assert await _answers(f"http://[::1]:{port}/metrics") == 200
    finally:
        await runner.cleanup()


@needs_ipv6
async def test_a_pinned_address_serves_that_family_only():
    runner, site = await _healthz_site("127.0.0.1")
    try:
        (sock,) = site._server.sockets  # type: ignore[union-attr]
        port = sock.getsockname()[1]
        assert await _answers(f"http://127.0.0.1:{port}/healthz") == 200
        with pytest.raises(aiohttp.ClientConnectionError):
            await _answers(f"http://[::1]:{port}/healthz")
    finally:
        await site.stop()
        await runner.cleanup()


def test_a_family_the_kernel_lacks_is_left_out_and_the_other_still_listens(loopback_wildcards, monkeypatch):
    real_socket = socket.socket

    def no_ipv6(family=socket.AF_INET, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(97, "Address family not supported by protocol")  # EAFNOSUPPORT: ipv6.disable=1
        return real_socket(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", no_ipv6)
    (only,) = listen_sockets(0)
    try:
        assert only.family == socket.AF_INET
    finally:
        only.close()


def test_the_serve_log_line_names_where_each_listener_serves():
    assert listen_url("https", EVERY_ADDRESS, 8443) == "https://[::]:8443"
    assert listen_url("http", "127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert listen_url("https", "fd00::1", 8443) == "https://[fd00::1]:8443"


def test_serve_listens_on_every_address_of_both_families_by_default_and_host_pins_one():
    from admit.cli import build_parser

    assert build_parser().parse_args(["serve"]).host == EVERY_ADDRESS
    assert build_parser().parse_args(["serve", "--host", "::"]).host == "::"
    assert build_parser().parse_args(["serve"]).metrics_host is None  # follows --host
