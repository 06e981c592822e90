"""In-process micro-profile of admit's request: the CPU each layer of a known-group Pod admission costs, without
TLS, sockets or a load generator (their cost is the same for every layer; ``bench/admit_bench.py`` measures the
whole request against its peers).

    python -m bench.handler_profile            # about 30 s
    python -m bench.handler_profile --requests 20000 --repeat 7

Each variant is an aiohttp server fed the bytes of kube-apiserver's requests (``bench/reviews.py``, the known-group
mix: ``/mutate`` then ``/validate``) through an in-memory transport, on the event loop ``admit serve`` uses; the
figure is the process's CPU time (``time.process_time``) per request, best of ``--repeat`` runs. Variants add one
layer of admit's work at a time, so the difference between two rows is what that layer costs:

1. ``aiohttp low-level server, constant answer``: ``aiohttp.web.Server``'s HTTP/1.1 work (parse, request objects,
   the per-request task, response headers) around a handler that answers a constant AdmissionReview;
2. ``+ body read under admit's limits``: the Content-Type and size checks and the body read (``app._read_review``'s
   first half);
3. ``+ JSON parse``: ``jsonio.loads`` of the body;
4. ``+ AdmissionReview checks``: ``admissionreview.parse_review`` (the 400s on malformed input) instead of the bare
   parse;
5. ``+ decision``: ``Admission.mutate`` / ``Admission.validate`` (no API call for this mix);
6. ``+ metrics``: ``WebhookRecorder.started`` / ``answered``;
7. ``+ answer encoding``: ``review_response`` + ``dumps`` instead of the constant answer;
8. ``admit before``: the whole handler as ``admit serve`` ran it before the low-level server: an aiohttp
   ``Application`` (router, application handler) with the ``ConnectionGuard`` middleware;
9. ``admit, aiohttp's path``: the low-level server, one dispatch, ``ConnectionGuard.handle``, pre-encoded
   answers: what ``admit serve`` ran before the fast path, and what it still runs for every request the fast path
   leaves to aiohttp;
10. ``fast path, constant answer``: ``admit serve``'s connection (``webhook.app.create_server`` behind the
   ``ConnectionGuard``) whose fast path (``webhook.fastpath``) answers a constant review inline: aiohttp's C
   parser and what the fast path adds around an answer, no admit work;
11. ``+ JSON parse``, 12. ``+ AdmissionReview checks``, 13. ``+ decision``: the same, adding ``jsonio.loads``, then
   ``parse_review``, then ``Admission.mutate`` / ``Admission.verdict_now``;
14. ``admit now``: what ``admit serve`` runs: the fast path answering with ``Webhook.answer_now`` (the header and
   size checks, the decision, the metrics, the answer's encoding).

Each request is followed by a few turns of the event loop, as a network round trip would give the server before
the next request on the connection.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any, Awaitable, Callable

from bench.driver import http_request
from bench.processes import run
from bench.reviews import MIXES, fill

Handler = Callable[[Any], Awaitable[Any]]


class MemoryTransport(asyncio.Transport):
    """What aiohttp's request handler writes to: keeps nothing, resolves :attr:`answered` on each answer."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: asyncio.Future[None] | None = None
        self.bytes_out = 0

    def write(self, data: Any) -> None:
        self.bytes_out += len(data)
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def known_group_requests(count: int) -> list[bytes]:
    """``count`` request byte strings of the known-group mix (``/mutate``, ``/validate``, ...), each uid unique."""
    steps = MIXES["known-group"].steps
    return [http_request(steps[i % 2][0], 8443, fill(steps[i % 2][1], i // 2 + 1)) for i in range(count)]


async def cpu_per_request(make_protocol: Callable[[], asyncio.Protocol], requests: list[bytes]) -> float:
    """CPU microseconds per request of feeding ``requests`` to one keep-alive connection of ``make_protocol``."""
    loop = asyncio.get_running_loop()
    proto = make_protocol()
    transport = MemoryTransport()
    proto.connection_made(transport)
    started = time.process_time()
    for data in requests:
        transport.answered = loop.create_future()
        proto.data_received(data)
        await transport.answered
        for _ in range(3):  # as a network round trip would: the server finishes its request before the next comes
            await asyncio.sleep(0)
    spent = time.process_time() - started
    proto.connection_lost(None)
    return spent * 1e6 / len(requests)


def layered_handlers() -> list[tuple[str, Handler]]:
    """The handlers of variants 1-7 (module docstring), each one layer more than the one before."""
    from aiohttp import web

    from admit.config import Config
    from admit.jsonio import dumps, loads
    from admit.observability.metrics import WebhookRecorder
    from admit.webhook import app as webhook_app
    from admit.webhook.admission import Admission
    from admit.webhook.admissionreview import parse_review, review_response

    admission = Admission(Config())
    read_body: Callable[[Any, int], Awaitable[bytes]] = getattr(webhook_app, "_read_body")
    constant = dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "00000000-0000-4000-8000-000000000001", "allowed": True}})
    recorders = {"/mutate": WebhookRecorder("/profile-mutate"), "/validate": WebhookRecorder("/profile-validate")}

    def answer(body: bytes = constant) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    async def body_of(request: Any) -> bytes:
        if request.headers.get("Content-Type") != "application/json" or (request.content_length or 0) > 3 << 20:
            raise AssertionError("the profile sends what kube-apiserver sends")
        return await read_body(request, 3 << 20)

    async def decide(request: Any, req: Any) -> Any:
        if request.raw_path.startswith("/mutate"):
            return admission.mutate(req)
        return await admission.validate(req)

    async def constant_answer(request: Any) -> web.Response:
        return answer()

    async def with_body(request: Any) -> web.Response:
        await body_of(request)
        return answer()

    async def with_loads(request: Any) -> web.Response:
        loads(await body_of(request))
        return answer()

    async def with_checks(request: Any) -> web.Response:
        parse_review(await body_of(request))
        return answer()

    async def with_decision(request: Any) -> web.Response:
        await decide(request, parse_review(await body_of(request)))
        return answer()

    async def with_metrics(request: Any) -> web.Response:
        recorder = recorders[request.raw_path.partition("?")[0]]
        started = recorder.started()
        req = parse_review(await body_of(request))
        recorder.answered(req, await decide(request, req), started)
        return answer()

    async def with_encoding(request: Any) -> web.Response:
        recorder = recorders[request.raw_path.partition("?")[0]]
        started = recorder.started()
        req = parse_review(await body_of(request))
        decision = await decide(request, req)
        recorder.answered(req, decision, started)
        return answer(dumps(review_response(req.api_version, req.uid, decision)))

    return [
        ("aiohttp low-level server, constant answer", constant_answer),
        ("+ body read under admit's limits", with_body),
        ("+ JSON parse", with_loads),
        ("+ AdmissionReview checks", with_checks),
        ("+ decision", with_decision),
        ("+ metrics", with_metrics),
        ("+ answer encoding", with_encoding),
    ]


def variants() -> list[tuple[str, Callable[[], asyncio.Protocol]]]:
    """``(name, protocol factory)`` of every variant of the module docstring (``admit now`` only where this checkout
    has ``webhook.app.create_server``)."""
    from aiohttp import web

    from admit.config import Config
    from admit.webhook import app as webhook_app
    from admit.webhook.admission import Admission
    from admit.webhook.connections import ConnectionGuard

    out: list[tuple[str, Callable[[], asyncio.Protocol]]] = [
        (name, web.Server(handler, access_log=None)) for name, handler in layered_handlers()
    ]
    app = webhook_app.create_app(Admission(Config()))
    app.middlewares.append(ConnectionGuard(lambda: None).middleware)  # type: ignore[arg-type, return-value]
    out.append(("admit before: Application, router, guard middleware", app._make_handler(access_log=None)))
    create_server = getattr(webhook_app, "create_server", None)
    if create_server is not None:
        guard = ConnectionGuard(lambda: None)  # type: ignore[arg-type, return-value]
        server = create_server(Admission(Config()), None, guard)
        if type(server) is not web.Server:  # this checkout answers inline (webhook.fastpath): its aiohttp path too
            out.append(("admit, aiohttp's path: low-level server, dispatch, guard",
                        web.Server(server.request_handler, access_log=None)))
            for name, answer in fast_layers(Admission(Config())):
                layer = create_server(Admission(Config()), None, ConnectionGuard(lambda: None))  # type: ignore[arg-type, return-value]
                layer.fast = answer
                out.append((name, guarded(layer)))
        out.append(("admit now: low-level server, fast path, guard", guarded(server)))
    return out


def guarded(server: Any) -> Callable[[], asyncio.Protocol]:
    """``server``'s connections behind a ``ConnectionGuard``, as ``admit serve`` accepts them."""
    from admit.webhook.connections import ConnectionGuard

    return ConnectionGuard(server)


def fast_layers(admission: Any) -> list[tuple[str, Callable[[Any, bytes], bytes]]]:
    """The answers of variants 10-13 (module docstring) for the fast path's ``fast`` hook, each one layer more."""
    from admit.jsonio import dumps, loads
    from admit.webhook.admissionreview import parse_review

    constant = dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "00000000-0000-4000-8000-000000000001", "allowed": True}})

    def constant_answer(message: Any, body: bytes) -> bytes:
        return constant

    def with_loads(message: Any, body: bytes) -> bytes:
        loads(body)
        return constant

    def with_checks(message: Any, body: bytes) -> bytes:
        parse_review(body)
        return constant

    def with_decision(message: Any, body: bytes) -> bytes:
        req = parse_review(body)
        if message.path.startswith("/mutate"):
            admission.mutate(req)
        else:
            admission.verdict_now(req)
        return constant

    return [("fast path, constant answer: aiohttp's parser, the fast path, guard", constant_answer),
            ("+ JSON parse, inline", with_loads), ("+ AdmissionReview checks, inline", with_checks),
            ("+ decision, inline", with_decision)]


async def profile(count: int, repeat: int) -> list[tuple[str, float]]:
    """``(variant, best CPU us per request)`` over ``repeat`` runs of ``count`` requests each, variants alternating."""
    requests = known_group_requests(count)
    made = variants()
    for _, factory in made:  # warm-up: every code path once
        await cpu_per_request(factory, requests[:200])
    best = {name: float("inf") for name, _ in made}
    for _ in range(repeat):
        for name, factory in made:
            best[name] = min(best[name], await cpu_per_request(factory, requests))
    return list(best.items())


def render(rows: list[tuple[str, float]]) -> str:
    """The table: CPU per request of each variant and what its layer adds to the one before."""
    lines = ["| variant | CPU us/request | layer us |", "|---|---:|---:|"]
    previous = None
    for name, us in rows:
        layer = f"{us - previous:+.1f}" if previous is not None and name.startswith("+") else ""
        lines.append(f"| {name} | {us:.1f} | {layer} |")
        previous = us
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 0."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=10000, help="requests per run (default 10000)")
    p.add_argument("--repeat", type=int, default=5, help="runs per variant; the best counts (default 5)")
    args = p.parse_args(argv)
    from admit.eventloop import loop_name
    from admit.jsonio import JSON_BACKEND

    rows = run(profile(args.requests, args.repeat))
    print(f"known-group pod requests, in-process (no TLS, no sockets); loop {loop_name()}, JSON {JSON_BACKEND}; "
          f"best of {args.repeat} x {args.requests} requests\n")
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
