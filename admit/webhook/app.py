"""The aiohttp application: ``POST /mutate``, ``POST /validate``, ``GET /healthz``, ``GET /readyz``.

HTTP rules (Kubernetes docs "Dynamic Admission Control", webhook request and response):

- kube-apiserver POSTs ``Content-Type: application/json`` AdmissionReview bodies and expects HTTP 200 with an
  AdmissionReview whose ``response.uid`` echoes ``request.uid``;
- a body admit cannot read as an AdmissionReview (bad JSON, wrong kind/apiVersion, no ``request.uid``, a
  ``request`` of a shape kube-apiserver never sends: see ``admissionreview.parse_review``; another content type,
  larger than ``Config.max_body_bytes``) gets HTTP 400 with a one-line reason and is logged: it is not from a
  kube-apiserver, so the reason is plain text, not an AdmissionReview echoing a uid (the same for ``/mutate`` and
  ``/validate``, the ``*/scale`` checks included);
- a body that does not arrive within ``Config.read_timeout_seconds`` gets HTTP 400 and the connection is closed;
- nothing in a request can make the server answer 500 or stop serving.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from .admission import Admission
from ..echo import clip, clip_message
from ..families.kinds import RESOLVERS
from ..observability.metrics import WebhookRecorder
from .admissionreview import AdmissionRequest, BadReview, Decision, dumps, parse_review, review_response

__all__ = ["create_app", "ReadinessCheck", "ADMISSION_KEY"]

log = logging.getLogger("admit.server")

ADMISSION_KEY: web.AppKey[Admission] = web.AppKey("admission", Admission)

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


async def _read_body(request: web.Request, max_bytes: int) -> bytes:
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


async def _read_review(request: web.Request, max_bytes: int, read_timeout: float) -> AdmissionRequest:
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
    return parse_review(body)


def create_app(admission: Admission, readiness: list[ReadinessCheck] | None = None) -> web.Application:
    """Build the web application around an :class:`admit.webhook.admission.Admission`.

    ``readiness`` checks gate ``/readyz`` (certificate loaded, caBundle in place, ...); ``/healthz`` is 200 while
    the event loop answers.
    """
    max_bytes = admission.config.max_body_bytes
    read_timeout = admission.config.read_timeout_seconds
    checks = list(readiness or ())

    def respond(api_version: str, uid: str, decision: Decision) -> web.Response:
        return web.Response(body=dumps(review_response(api_version, uid, decision)), content_type="application/json")

    kinds = {kind for _, kind in RESOLVERS}
    mutate_metrics, validate_metrics = WebhookRecorder("/mutate", kinds), WebhookRecorder("/validate", kinds)

    async def mutate_handler(request: web.Request) -> web.Response:
        started = mutate_metrics.started()
        try:
            req = await _read_review(request, max_bytes, read_timeout)
        except BadReview as e:
            mutate_metrics.bad_request(started)
            return _bad_request(e)
        decision = admission.mutate(req)
        if decision.lookup is not None:  # rare: a Spark executor whose driver the cache does not know
            decision = await admission.finish_mutation(req, decision)
        mutate_metrics.answered(req, decision, started)
        return respond(req.api_version, req.uid, decision)

    async def validate_handler(request: web.Request) -> web.Response:
        started = validate_metrics.started()
        try:
            req = await _read_review(request, max_bytes, read_timeout)
        except BadReview as e:
            validate_metrics.bad_request(started)
            return _bad_request(e)
        decision = await admission.validate(req)
        validate_metrics.answered(req, decision, started)  # logs denials (logger admit.requests)
        return respond(req.api_version, req.uid, decision)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        for check in checks:
            ok, reason = check()
            if not ok:
                return web.Response(status=503, text=f"not ready: {reason}\n")
        return web.Response(text="ok\n")

    app = web.Application(client_max_size=max_bytes + 1)
    app.router.add_post("/mutate", mutate_handler)
    app.router.add_post("/validate", validate_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app[ADMISSION_KEY] = admission
    return app
