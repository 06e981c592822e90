"""``admit_bench --idle-connections N``: admit's RSS while N idle TLS connections are held, and its bounds at work
(a new admission still answered during the flood; connections stalled mid-header closed by the read deadline).
"""

from __future__ import annotations

import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.driver import http_request
from bench.processes import FakeAPI, Server, event_loop_name, free_port, proc_memory, write_certs
from bench.reviews import MIXES, fill


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
    ctx = write_certs(certs)
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
            for s in [s for s in slow if _closed_by_peer(s)]:
                s.close()
                slow.remove(s)
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
    from admit.jsonio import JSON_BACKEND

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

