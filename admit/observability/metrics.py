"""Prometheus metrics of ``admit serve``, with the official ``prometheus-client`` library, on their own plain-HTTP port.

Served by :func:`start_metrics_server` on ``--metrics-port`` (``GET /metrics``), never on the webhook's TLS port. Every
label has a bounded set of values: no object names, namespaces or uids are ever labels. Each metric, its labels and
their values: docs/operations.md ("Metrics"); the chart's dashboard (``charts/admit/dashboards/admit.json``) names them.

The admission metrics have the names, labels and buckets of controller-runtime's webhook metrics
(``pkg/webhook/internal/metrics``; ``webhook`` the URL path, ``code`` the HTTP status of the answer), so dashboards
and alerts written for controller-runtime webhooks work unchanged. They are plain numbers that the event loop's
thread updates without a lock (a collector turns them into metric families at scrape time): about a microsecond per
request, where prometheus-client's locked children cost about 15 us for the same five updates on the development
machine (docs/performance.md). The Kubernetes API metrics count every request of every ``ApiClient`` of the process,
through an aiohttp trace hook (:func:`instrument_api_client`).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from itertools import accumulate
from time import perf_counter
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterable

import aiohttp
from aiohttp import web
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ..echo import clip_message
from ..eventloop import EVERY_ADDRESS, listen_sockets

if TYPE_CHECKING:
    from ..webhook.admissionreview import AdmissionRequest, Decision

__all__ = [
    "WebhookRecorder", "instrument_api_client", "start_metrics_server", "failure_mode_applied", "pod_group",
    "watch_cache", "leader", "certificate", "api_verb", "WEBHOOK_BUCKETS", "native_gang",
]

log = logging.getLogger("admit.requests")

# client_golang prometheus.DefBuckets, which controller-runtime's webhook latency histogram uses.
WEBHOOK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# API calls: admit's budget is a few seconds; a watch opens in milliseconds.
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

API_REQUESTS = Counter(
    "admit_kube_api_requests_total", "Kubernetes API requests by verb, resource and HTTP status (timeout, error).",
    ["verb", "resource", "code"],
)
API_LATENCY = Histogram(
    "admit_kube_api_request_duration_seconds", "Time to the response headers of a Kubernetes API request.",
    ["verb", "resource"], buckets=API_BUCKETS,
)
FAILURE_MODE = Counter(
    "admit_failure_mode_applied_total", "Admissions answered by the failure mode because the API could not be used.",
    ["mode"],
)
POD_GROUPS = Counter(
    "admit_podgroup_operations_total", "PodGroup writes: created, patched, adopted, recreated, orphan_deleted.",
    ["operation"],
)
NATIVE_GANGS = Counter(
    "admit_native_gang_operations_total",
    "Workload and PodGroup (scheduling.k8s.io) writes and refusals: created, patched, adopted, orphan_deleted, refused.",
    ["kind", "operation"],
)
NATIVE_BELOW_MIN_COUNT = Gauge(
    "admit_native_gangs_below_min_count",
    "workload-api gangs admit manages whose PodGroup was scheduled (PodGroupInitiallyScheduled, which never goes back) "
    "and that now have fewer pods on nodes than minCount, with a replacement pending or a pod gone; set by the leader.",
)
CACHE_OBJECTS = Gauge("admit_watch_cache_objects", "Objects in a watch cache.", ["resource"])
CACHE_RELISTS = Counter("admit_watch_cache_relists_total", "Full lists of a watch cache (start, expiry, failure).",
                        ["resource"])
LEADER = Gauge("admit_leader", "1 while this replica holds the controller's Lease, else 0.")
CERT_EXPIRY = Gauge("admit_certificate_expiry_timestamp_seconds",
                    "Expiry (notAfter) of the certificate in use, seconds since the epoch.", ["certificate"])
CERT_ROTATIONS = Counter("admit_certificate_rotations_total",
                         "Certificates replaced while running (a reloaded file, a renewed or new CA).", ["certificate"])

OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
POD_GROUP_OPERATIONS = frozenset({"created", "patched", "adopted", "recreated", "orphan_deleted"})


class _Series:
    """One ``(webhook, code)`` series: count, latency sum (s), per-bucket counts (not cumulative; the last is +Inf)."""

    __slots__ = ("count", "sum", "buckets")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.buckets = [0] * (len(WEBHOOK_BUCKETS) + 1)


class _WebhookCollector(Collector):
    """The admission metrics as plain numbers (module docstring), turned into metric families when the registry is
    collected (``/metrics`` is served on the same event loop, so no lock is needed)."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], _Series] = {}
        self.in_flight: dict[str, list[int]] = {}
        self.outcomes: dict[tuple[str, str, str, str], int] = {}

    def collect(self) -> Iterable[Metric]:
        total = CounterMetricFamily("controller_runtime_webhook_requests",
                                    "Total number of admission requests by HTTP status code.",
                                    labels=["webhook", "code"])
        latency = HistogramMetricFamily("controller_runtime_webhook_latency_seconds",
                                        "Histogram of the latency of processing admission requests",
                                        labels=["webhook", "code"])
        bounds = [floatToGoString(b) for b in WEBHOOK_BUCKETS] + ["+Inf"]
        for (webhook, code), series in sorted(self.series.items()):
            total.add_metric([webhook, code], series.count)
            latency.add_metric([webhook, code], list(zip(bounds, accumulate(series.buckets))), series.sum)
        flight = GaugeMetricFamily("controller_runtime_webhook_requests_in_flight",
                                   "Current number of admission requests being served.", labels=["webhook"])
        for webhook, cell in sorted(self.in_flight.items()):
            flight.add_metric([webhook], cell[0])
        outcomes = CounterMetricFamily("admit_admission_requests",
                                       "Admission requests by webhook path, object kind, operation and outcome.",
                                       labels=["webhook", "kind", "operation", "outcome"])
        for labels, n in sorted(self.outcomes.items()):
            outcomes.add_metric(list(labels), n)
        return [total, latency, flight, outcomes]


_WEBHOOKS = _WebhookCollector()
REGISTRY.register(_WEBHOOKS)


class WebhookRecorder:
    """Metrics and the request log of one webhook path (``"/mutate"`` or ``"/validate"``).

    The server calls :meth:`started` when a request arrives, then :meth:`answered` (an AdmissionReview was answered) or
    :meth:`bad_request` (HTTP 400), on the event loop's thread. Recorders of one path (one per app) share their series.

    Each answer is also one record of the ``admit.requests`` logger, with the attributes ``--log-format json`` writes
    as keys (``observability/logs.py``; ``decision`` is the ``outcome`` label): at INFO for denials, at DEBUG for the
    rest (``--log-level debug`` logs every request).

    ``kinds``: the object kinds counted under their own ``kind`` label (the server gives the kinds of
    ``admit.families.kinds.RESOLVERS``; ``Scale`` is always one); any other kind is counted as ``"other"``, so a cluster's
    custom resources cannot grow the series without bound.
    """

    def __init__(self, webhook: str, kinds: Iterable[str] = ()) -> None:
        self.webhook = webhook
        store = _WEBHOOKS
        self._in_flight = store.in_flight.setdefault(webhook, [0])
        self._ok = store.series.setdefault((webhook, "200"), _Series())
        self._bad = store.series.setdefault((webhook, "400"), _Series())
        self._labels: dict[tuple[str, str, str], tuple[str, str, str, str]] = {}
        self._kinds = frozenset(kinds) | {"Scale"}
        self._debug = log.isEnabledFor(logging.DEBUG)

    def _count(self, kind: str, operation: str, outcome: str) -> None:
        key = (kind, operation, outcome)
        labels = self._labels.get(key)
        if labels is None:
            labels = self._labels[key] = (self.webhook, kind if kind in self._kinds else "other",
                                          operation if operation in OPERATIONS else "other", outcome)
        outcomes = _WEBHOOKS.outcomes
        outcomes[labels] = outcomes.get(labels, 0) + 1

    def started(self) -> float:
        """Count the request in flight; returns the start time (``time.perf_counter()`` seconds)."""
        self._in_flight[0] += 1
        return perf_counter()

    def _observe(self, series: _Series, started: float) -> float:
        elapsed = perf_counter() - started
        self._in_flight[0] -= 1
        series.count += 1
        series.sum += elapsed
        series.buckets[bisect_left(WEBHOOK_BUCKETS, elapsed)] += 1  # le: the first bound >= elapsed
        return elapsed

    def answered(self, req: "AdmissionRequest", decision: "Decision", started: float) -> None:
        """An AdmissionReview answer (HTTP 200) for ``req``."""
        elapsed = self._observe(self._ok, started)
        outcome = "denied" if not decision.allowed else "patched" if decision.patch else "allowed"
        self._count(req.kind, req.operation, outcome)
        if outcome == "denied":
            self._log(logging.INFO, req, outcome, elapsed, decision.message)
        elif self._debug:
            self._log(logging.DEBUG, req, outcome, elapsed, "")

    def bad_request(self, started: float) -> None:
        """An HTTP 400 answer (not an AdmissionReview admit can answer; the server logs the reason)."""
        self._observe(self._bad, started)
        self._count("", "", "bad_request")

    def _log(self, level: int, req: "AdmissionRequest", outcome: str, elapsed: float, message: str) -> None:
        name, uid = clip_message(req.name, 253), clip_message(req.uid, 128)  # echo.py: never a user value whole
        log.log(
            level, "%s %s %s %s/%s uid=%s%s", outcome, req.operation, req.kind, req.namespace, name, uid,
            f": {clip_message(message)}" if message else "",
            extra={"uid": uid, "kind": req.kind, "operation": req.operation, "namespace": req.namespace,
                   "object": f"{req.namespace}/{name}", "decision": outcome,
                   "duration_ms": round(elapsed * 1000, 3)},
        )


def failure_mode_applied(mode: str) -> None:
    """An admission answered by the failure mode (``"deny"`` or ``"allow"``)."""
    FAILURE_MODE.labels(mode).inc()


def pod_group(operation: str) -> None:
    """A PodGroup write that succeeded: one of :data:`POD_GROUP_OPERATIONS`."""
    if operation in POD_GROUP_OPERATIONS:
        POD_GROUPS.labels(operation).inc()


NATIVE_GANG_OPERATIONS = frozenset({"created", "patched", "adopted", "orphan_deleted", "refused"})


def native_gang(kind: str, operation: str) -> None:
    """A workload-api gang object (``kind`` ``"Workload"`` or ``"PodGroup"``) written, or an admission refused
    because of it: one of :data:`NATIVE_GANG_OPERATIONS`."""
    if kind in ("Workload", "PodGroup") and operation in NATIVE_GANG_OPERATIONS:
        NATIVE_GANGS.labels(kind, operation).inc()


def native_gangs_below_min_count(count: int) -> None:
    """The leader's last count of managed native gangs that broke after they were scheduled
    (``backends.workload_api.diagnose.below_min_count``); 0 when this replica stops leading."""
    NATIVE_BELOW_MIN_COUNT.set(count)


_cache_gauges: dict[str, Any] = {}


def watch_cache(resource: str, objects: int, relisted: bool = False) -> None:
    """A watch cache of ``resource`` (``kube.Resource.label``, ``"podgroups.scheduling.x-k8s.io/v1alpha1"``)
    holds ``objects``; ``relisted``: it has just listed everything again. Called on every watch event."""
    gauge = _cache_gauges.get(resource)
    if gauge is None:
        gauge = _cache_gauges[resource] = CACHE_OBJECTS.labels(resource)
    gauge.set(objects)
    if relisted:
        CACHE_RELISTS.labels(resource).inc()


def leader(leading: bool) -> None:
    """This replica started (``True``) or stopped (``False``) leading."""
    LEADER.set(1 if leading else 0)


_cert_seen: dict[str, float] = {}


def certificate(which: str, not_after: float) -> None:
    """The ``which`` (``"serving"`` or ``"ca"``) certificate in use expires at ``not_after`` (epoch seconds); a
    different expiry than the last one seen counts as a rotation."""
    previous = _cert_seen.get(which)
    if previous is not None and previous != not_after:
        CERT_ROTATIONS.labels(which).inc()
    _cert_seen[which] = not_after
    CERT_EXPIRY.labels(which).set(not_after)


def api_verb(method: str, path: str, query: str) -> tuple[str, str]:
    """``(verb, resource)`` of a Kubernetes REST request, as kube-apiserver's audit and metrics name them.

    ``GET /apis/g/v/namespaces/ns/podgroups/x`` -> ``("get", "podgroups")``; ``GET .../podgroups`` ->
    ``("list", ...)``, ``("watch", ...)`` with ``watch=true``; ``POST`` create, ``PUT`` update, ``PATCH`` patch,
    ``DELETE`` delete (``deletecollection`` on a collection). A subresource is kept: ``deployments/scale``.
    Source: Kubernetes docs "API Concepts" (URL layout) and "Auditing" (verbs).
    """
    segs = [s for s in path.split("/") if s]
    if segs[:1] == ["api"]:
        rest = segs[2:]
    elif segs[:1] == ["apis"]:
        rest = segs[3:]
    else:
        return method.lower(), "other"
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method.lower(), "other"
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    if method == "GET":
        verb = "get" if named else ("watch" if "watch=true" in query or "watch=1" in query else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if named else "deletecollection"}.get(method, method.lower())
    return verb, resource


async def _on_start(_: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestStartParams) -> None:
    ctx.start = time.perf_counter()
    ctx.verb, ctx.resource = api_verb(params.method, params.url.path, params.url.query_string)


async def _on_end(_: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestEndParams) -> None:
    API_REQUESTS.labels(ctx.verb, ctx.resource, str(params.response.status)).inc()
    API_LATENCY.labels(ctx.verb, ctx.resource).observe(time.perf_counter() - ctx.start)


async def _on_error(_: aiohttp.ClientSession, ctx: SimpleNamespace,
                    params: aiohttp.TraceRequestExceptionParams) -> None:
    if not hasattr(ctx, "start"):
        return
    timeout = isinstance(params.exception, (TimeoutError, aiohttp.ServerTimeoutError)) or \
        type(params.exception).__name__ == "CancelledError"  # asyncio.timeout() cancels the request
    API_REQUESTS.labels(ctx.verb, ctx.resource, "timeout" if timeout else "error").inc()
    API_LATENCY.labels(ctx.verb, ctx.resource).observe(time.perf_counter() - ctx.start)


def instrument_api_client(api_client: Any) -> bool:
    """Count and time every request of a ``kubernetes_asyncio`` ``ApiClient`` (its aiohttp session's trace hooks).

    Returns False (and changes nothing) for a client without the expected aiohttp session; calling it twice on one
    client adds the hooks once.
    """
    session = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
    configs = getattr(session, "_trace_configs", None)
    if not isinstance(configs, list):
        return False
    if any(getattr(c, "_admit_metrics", False) for c in configs):
        return True
    tc = aiohttp.TraceConfig()
    tc.on_request_start.append(_on_start)
    tc.on_request_end.append(_on_end)
    tc.on_request_exception.append(_on_error)
    tc._admit_metrics = True  # type: ignore[attr-defined]
    tc.freeze()
    configs.append(tc)
    return True


async def start_metrics_server(port: int, host: str = EVERY_ADDRESS) -> web.AppRunner:
    """Serve ``GET /metrics`` (plain HTTP; Prometheus text format, or OpenMetrics when the scraper asks for it: the
    library's negotiation) on ``host:port``; returns the runner (``await runner.cleanup()`` stops it). A scrape renders
    the registry on the event loop (well under a millisecond for admit's few hundred series).

    Raises:
        OSError: the port cannot be bound.
    """

    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(REGISTRY), headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        if host == EVERY_ADDRESS:  # IPv4 and IPv6, one socket each on one port (eventloop.listen_sockets)
            for sock in listen_sockets(port):
                await web.SockSite(runner, sock).start()
        else:
            await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
