"""The webhook's HTTP endpoints: ``POST /mutate``, ``POST /validate``, ``GET /healthz``, ``GET /readyz``, served by
aiohttp's low-level server (:func:`create_server`, what ``admit serve`` runs) or as an aiohttp ``Application``
(:func:`create_app`); both answer the same bytes for the same request.

HTTP rules (Kubernetes docs "Dynamic Admission Control", webhook request and response):

- kube-apiserver POSTs ``Content-Type: application/json`` AdmissionReview bodies and expects HTTP 200 with an
  AdmissionReview whose ``response.uid`` echoes ``request.uid``;
- a body admit cannot read as an AdmissionReview (``admissionreview.parse_review``), of another content type or
  larger than ``Config.max_body_bytes`` gets HTTP 400 with a one-line reason and is logged: it is not from a
  kube-apiserver, so the reason is plain text, not an AdmissionReview echoing a uid (the same for ``/mutate`` and
  ``/validate``, the ``*/scale`` checks included);
- a body that does not arrive within ``Config.read_timeout_seconds`` gets HTTP 400 and the connection is closed;
- nothing in a request can make the server answer 500 or stop serving.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from time import perf_counter
from typing import Any, Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from .admission import Admission
from .validate import Verdict
from ..echo import clip, clip_message
from ..families.kinds import RESOLVERS
from ..observability.metrics import WebhookRecorder
from .admissionreview import AdmissionRequest, BadReview, Decision, encode_response, parse_review
from .connections import ConnectionGuard
from .fastpath import SUPPORTED as FAST_PATH, FastServer

__all__ = ["create_app", "create_server", "Webhook", "ReadinessCheck"]

log = logging.getLogger("admit.server")

ReadinessCheck = Callable[[], tuple[bool, str]]
"""``check() -> (ready, reason)``; ``/readyz`` answers 200 only when every check is ready."""


class UnreadableBody(BadReview):
    """The body's bytes cannot be read (a Content-Encoding that does not decode): the connection's parser state is
    lost, so the answer closes the connection."""


def _bad_request(error: BadReview) -> web.Response:
    reason = clip_message(str(error).replace("\n", " "), 512)
    log.warning("bad request: %s", reason)
    resp = web.Response(status=400, text=f"bad request: {reason}\n", content_type="text/plain")
    if isinstance(error, UnreadableBody):
        resp.force_close()
    return resp


async def _read_body(request: web.BaseRequest, max_bytes: int) -> bytes:
    # read() returns what has arrived so far, which is only part of a body that comes in several TLS records or
    # TCP segments: read until the end of the body.
    body = await request.content.read(max_bytes + 1)
    if body and not request.content.at_eof():
        chunks = [body]
        size = len(body)
        while size <= max_bytes:
            chunk = await request.content.read(max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        body = b"".join(chunks)
    return body


async def _read_review(request: web.BaseRequest, max_bytes: int, read_timeout: float,
                       handed: tuple[bytes, AdmissionRequest, Any] | None = None) -> AdmissionRequest:
    """The request's AdmissionReview, read within the limits; the one the fast path parsed (``handed``) when the
    body is the same bytes. Raises :class:`BadReview` (the 400s)."""
    # kube-apiserver sends exactly "application/json": compare the raw header first, since parsing it
    # (request.content_type) costs about 4 us, several percent of a whole admission.
    if request.headers.get("Content-Type") != "application/json":
        if "Content-Type" not in request.headers:  # aiohttp would report its default, application/octet-stream
            raise BadReview("no Content-Type header was sent; send Content-Type: application/json")
        ctype = request.content_type
        if ctype != "application/json":
            raise BadReview(f"Content-Type {clip(ctype)} is not application/json")
    if request.content_length is not None and request.content_length > max_bytes:
        raise BadReview(f"body of {request.content_length} bytes is larger than the limit of {max_bytes} bytes")
    try:
        if request.content.is_eof():  # the whole body is here already (kube-apiserver's usual case): no wait, no timer
            body = await _read_body(request, max_bytes)
        else:
            async with asyncio.timeout(read_timeout):  # a body sent byte by byte must not hold the connection
                body = await _read_body(request, max_bytes)
    except TimeoutError:
        request.content.feed_eof()
        raise UnreadableBody(f"the body did not arrive within {read_timeout:g}s") from None
    except (RequestPayloadError, HttpProcessingError) as e:  # e.g. a Content-Encoding that does not decode
        # the rest of this body cannot be read either: mark it ended, so aiohttp does not drain (and fail on) it
        # after the answer
        request.content.feed_eof()
        raise UnreadableBody(f"body cannot be read: {getattr(e, 'message', None) or e}") from None
    if len(body) > max_bytes:
        raise BadReview(f"body is larger than the limit of {max_bytes} bytes")
    if not body:
        raise BadReview("empty body (expected an AdmissionReview)")
    if handed is not None and handed[0] == body:
        return handed[1]
    return parse_review(body)


class Webhook:
    """The four endpoints around one :class:`admit.webhook.admission.Admission`, which :func:`create_server` and
    :func:`create_app` both serve.

    Per request the low-level server costs no router, no application handler and no middleware chain (measured: about 20
    us of the 100-125 us ``admit serve`` spent per known-group request on the development machine, docs/performance.md);
    an answer that only allows is written from pre-encoded parts (``admissionreview.encode_response``).
    """

    def __init__(self, admission: Admission, readiness: list[ReadinessCheck] | None = None) -> None:
        self.admission = admission
        self.max_bytes = admission.config.max_body_bytes
        self.read_timeout = admission.config.read_timeout_seconds
        self.checks = list(readiness or ())
        self.closing = False  # shutdown has begun (ConnectionGuard.begin_closing): no inline answers
        #: the last /validate review the fast path parsed, decided and left to aiohttp's path (it awaits the API):
        #: (body, request, verdict), taken by that path when it reads the same bytes, so it is not done twice
        self.handed: tuple[bytes, AdmissionRequest, Verdict] | None = None
        kinds = {kind for _, kind in RESOLVERS}
        self.mutate_metrics = WebhookRecorder("/mutate", kinds)
        self.validate_metrics = WebhookRecorder("/validate", kinds)
        # path -> (methods, handler): aiohttp's router answers HEAD where it answers GET, and so does dispatch
        self.routes: dict[str, tuple[tuple[str, ...], Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]]] = {
            "/mutate": (("POST",), self.mutate), "/validate": (("POST",), self.validate),
            "/healthz": (("GET", "HEAD"), self.healthz), "/readyz": (("GET", "HEAD"), self.readyz),
        }

    def answer_now(self, message: Any, body: bytes) -> bytes | None:
        """The fast path's answer (``fastpath.FastRequestHandler``): the AdmissionReview answer body for a complete
        ``POST /mutate`` or ``/validate`` (an aiohttp ``RawRequestMessage`` and its whole body) whose decision needs
        no API call, with its metrics counted, or ``None`` (``fastpath``'s module docstring says when): then the
        request takes the path of :meth:`dispatch`, which gives the same bytes and metrics."""
        if self.closing:
            return None
        path = message.path.partition("?")[0]
        if path == "/mutate":
            metrics = self.mutate_metrics
        elif path == "/validate":
            metrics = self.validate_metrics
        else:
            return None
        headers = message.headers
        if headers.get("Content-Type") != "application/json" or "Content-Encoding" in headers \
                or len(body) > self.max_bytes or not body:
            return None  # the 400s, and a compressed body, whose size limit aiohttp's path checks before decoding
        started = perf_counter()
        try:
            req = parse_review(body)
        except BadReview:
            return None
        verdict = None
        if metrics is self.mutate_metrics:
            decision: Decision | None = self.admission.mutate(req)
            if decision is not None and decision.lookup is not None:
                decision = None
        else:
            decision, verdict = self.admission.verdict_now(req)
        if decision is None:
            if verdict is not None:  # only a /validate verdict: a /mutate decision is made again from the review
                self.handed = (body, req, verdict)
            return None
        metrics.started()
        metrics.answered(req, decision, started)
        return encode_response(req.api_version, req.uid, decision)

    async def mutate(self, request: web.BaseRequest) -> web.Response:
        """``POST /mutate``: the AdmissionReview answer, or HTTP 400 with the reason."""
        metrics = self.mutate_metrics
        started = metrics.started()
        try:
            req = await _read_review(request, self.max_bytes, self.read_timeout)
        except BadReview as e:
            metrics.bad_request(started)
            return _bad_request(e)
        decision = self.admission.mutate(req)
        if decision.lookup is not None:  # rare: a Spark executor whose driver the cache does not know
            decision = await self.admission.finish_mutation(req, decision)
        metrics.answered(req, decision, started)
        return _answer(req, decision)

    async def validate(self, request: web.BaseRequest) -> web.Response:
        """``POST /validate``: the AdmissionReview answer, or HTTP 400 with the reason."""
        metrics = self.validate_metrics
        started = metrics.started()
        try:
            handed, self.handed = self.handed, None
            req = await _read_review(request, self.max_bytes, self.read_timeout, handed)
        except BadReview as e:
            metrics.bad_request(started)
            return _bad_request(e)
        decision = await self.admission.validate(req, prepared=handed[2] if handed and handed[1] is req else None)
        metrics.answered(req, decision, started)  # logs denials (logger admit.requests)
        return _answer(req, decision)

    async def healthz(self, _: web.BaseRequest) -> web.Response:
        """``GET /healthz``: 200 while the event loop answers."""
        return web.Response(text="ok\n")

    async def readyz(self, _: web.BaseRequest) -> web.Response:
        """``GET /readyz``: 200 when every readiness check is ready, else 503 with the first reason."""
        for check in self.checks:
            ok, reason = check()
            if not ok:
                return web.Response(status=503, text=f"not ready: {reason}\n")
        return web.Response(text="ok\n")

    async def dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        """The low-level server's one handler: the endpoint of ``request``'s path, 404 for another path and 405
        (with ``Allow``) for another method, as aiohttp's router answers them."""
        path = request.raw_path.partition("?")[0]
        route = self.routes.get(path)
        if route is None and "%" in path:  # the router matches the decoded path
            route = self.routes.get(path := request.path)
        if route is None:
            return web.Response(status=404, text="404: Not Found")
        methods, handler = route
        if request.method not in methods:
            return web.Response(status=405, text="405: Method Not Allowed", headers={"Allow": ",".join(methods)})
        return await handler(request)


def _answer(req: AdmissionRequest, decision: Decision) -> web.Response:
    return web.Response(body=encode_response(req.api_version, req.uid, decision), content_type="application/json")


def create_server(admission: Admission, readiness: list[ReadinessCheck] | None = None,
                  guard: ConnectionGuard | None = None, **kwargs: Any) -> web.Server:
    """aiohttp's low-level server (``aiohttp.web.Server``) answering the :class:`Webhook`'s endpoints: what ``admit
    serve`` runs (``web.ServerRunner``). ``guard``: the :class:`admit.webhook.connections.ConnectionGuard` that
    bounds the listener's connections sees each request (``ConnectionGuard.handle``); ``kwargs`` go to aiohttp's
    request handler (``keepalive_timeout``, ...); no access log."""
    webhook = Webhook(admission, readiness)
    dispatch = webhook.dispatch
    handler = dispatch if guard is None else partial(guard.handle, handler=dispatch)
    if not FAST_PATH:
        return web.Server(handler, access_log=None, **kwargs)
    if guard is not None:
        guard.on_closing.append(lambda: setattr(webhook, "closing", True))
    return FastServer(handler, webhook.answer_now, access_log=None, **kwargs)


def create_app(admission: Admission, readiness: list[ReadinessCheck] | None = None) -> web.Application:
    """The :class:`Webhook`'s endpoints as an aiohttp ``Application`` (the same handlers as :func:`create_server`,
    behind aiohttp's router; what the tests mount with aiohttp's test client)."""
    webhook = Webhook(admission, readiness)
    app = web.Application(client_max_size=webhook.max_bytes + 1)
    for path, (methods, handler) in webhook.routes.items():  # add_get answers HEAD too, as the routes say
        (app.router.add_get if "GET" in methods else app.router.add_post)(path, handler)
    return app
