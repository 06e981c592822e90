"""The baseline server: the fastest aiohttp HTTPS handler on the machine, the floor admit is measured against.

    python -m bench.baseline --port 8443 --tls-cert-file tls.crt --tls-key-file tls.key

It parses each AdmissionReview and answers "allowed" with the request's uid, on ``/mutate`` and ``/validate``
(``GET /healthz`` answers ``ok``), with admit's TLS settings, JSON backend and event loop. ``bench/admit_bench.py``
runs it as its baseline, ``bench/apiserver_bench.py`` as the allow-only webhook. SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from bench.processes import run


def serve_baseline(host: str, port: int, cert: str, key: str, constant: bool = False) -> int:
    """The floor: an aiohttp HTTPS server that parses each AdmissionReview and answers allowed, echoing its uid;
    ``constant``: aiohttp's low-level server (``web.Server``, no router) answering one constant AdmissionReview
    without reading the body, the least any aiohttp server can spend per request."""
    from aiohttp import web

    from admit.jsonio import dumps, loads
    from admit.tls.provider import create_server_ssl_context

    async def review(request: web.Request) -> web.Response:
        doc = loads(await request.read())
        answer = {"apiVersion": doc["apiVersion"], "kind": "AdmissionReview",
                  "response": {"uid": doc["request"]["uid"], "allowed": True}}
        return web.Response(body=dumps(answer), content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    allowed = dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "response": {"uid": "00000000-0000-4000-8000-000000000001", "allowed": True}})

    async def constant_answer(request: web.BaseRequest) -> web.Response:
        if request.path == "/healthz":
            return web.Response(text="ok\n")
        return web.Response(body=allowed, content_type="application/json")

    async def main() -> None:
        ctx = create_server_ssl_context()
        ctx.load_cert_chain(cert, key)
        runner: web.BaseRunner
        if constant:
            runner = web.ServerRunner(web.Server(constant_answer, access_log=None))
        else:
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


def main(argv: list[str] | None = None) -> int:
    """``--port``, ``--tls-cert-file``, ``--tls-key-file``: serve on 127.0.0.1 until SIGTERM; exit 0."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1")
    p.add_argument("--tls-cert-file", required=True, help="serving certificate (PEM)")
    p.add_argument("--tls-key-file", required=True, help="its private key (PEM)")
    p.add_argument("--constant", action="store_true",
                   help="aiohttp's low-level server answering a constant review (the floor of any aiohttp server)")
    args = p.parse_args(argv)
    return serve_baseline("127.0.0.1", args.port, args.tls_cert_file, args.tls_key_file, args.constant)


if __name__ == "__main__":
    sys.exit(main())
