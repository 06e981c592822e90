"""``admit serve``: wire the Kubernetes client, the TLS provider, the web app and the controller; run until signalled.

Start order, so that a replica reports ready only when it can answer correctly: Kubernetes client -> each enabled
backend's discovery -> certificate (files, or self-managed Secret + caBundle) -> controller (leader-elected, when
enabled) -> HTTPS listener (connections bounded by :class:`admit.webhook.connections.ConnectionGuard`:
``--max-connections``, ``--read-timeout``, ``--idle-timeout``).

SIGTERM/SIGINT: every answer from then on says ``Connection: close`` (kube-apiserver's next request dials a ready
replica; :mod:`admit.webhook.connections`, Shutdown); the controller's Lease is given back (another replica leads at
once, not when it expires); ``/readyz`` fails while the replica goes on serving for ``--shutdown-delay`` seconds (the
endpoints controller and kube-proxy need a moment to stop routing here; a second signal ends the wait); then
:func:`shut_down` drains and closes. Exit time: ``--shutdown-delay`` + about 1 s, at most ``--shutdown-delay`` +
``--drain-seconds`` + 1 s (aiohttp's cleanup) + the Lease release (at most ``--drain-seconds`` / 2): 5 + 10 + 1 + 5
= 21 s with the defaults, inside the chart's 30 s ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import logging
import signal
import time
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client

from ..observability import metrics
from ..eventloop import listen_url
from ..webhook.admission import Admission, GroupCache
from ..backends.runtime import APIS
from ..config import Config
from ..webhook.connections import DEFAULT_QUIET_SECONDS, ConnectionGuard, GuardedSite
from ..kube.client import KubeAPI, load_api_client, resolve_proxy_once
from ..webhook.app import create_server

__all__ = ["serve", "api_client_for", "start_backends", "shut_down"]

log = logging.getLogger("admit.serve")


async def api_client_for(args: argparse.Namespace) -> client.ApiClient:
    """The ApiClient for ``--api-server`` (plain URL, no credentials) or ``--kubeconfig``/in-cluster config, with
    its proxy resolved once (``kube.resolve_proxy_once``)."""
    if args.api_server:
        api_client = client.ApiClient(client.Configuration(host=args.api_server.rstrip("/")))
    else:
        api_client = await load_api_client(args.kubeconfig)
    resolve_proxy_once(api_client)
    metrics.instrument_api_client(api_client)
    return api_client


async def start_backends(api_client: client.ApiClient, config: Config) -> tuple[Config, dict[str, str], dict[str, Any]]:
    """Run the start-time discovery of every enabled backend that has one (``runtime.BackendAPI.start``), in name
    order: ``(config as they leave it, {backend: why it cannot create its objects here}, {backend: its
    rediscovery})``. A problem is logged once here; admission's refusals of that backend's gangs then say it.

    Raises:
        backends.common.BackendUnavailable: the default backend is not served.
    """
    problems: dict[str, str] = {}
    rediscoveries: dict[str, Any] = {}
    for name in sorted(config.allowed_backends):
        api = APIS.get(name)
        if api is None or api.start is None:
            continue
        config, problem, rediscovery = await api.start(api_client, config)
        if problem:
            problems[name] = problem
            log.warning("%s backend: %s. Until then every gang it handles is refused (or, with --failure-mode "
                        "allow, admitted without its objects)", name, problem)
        if rediscovery is not None:
            rediscoveries[name] = rediscovery
    return config, problems, rediscoveries


def _tls_provider(args: argparse.Namespace, api_client: client.ApiClient) -> Any:
    if args.cert_mode == "self":
        from ..tls.selfcerts import SelfManagedTLSProvider

        return SelfManagedTLSProvider(
            api_client,
            namespace=args.namespace,
            secret_name=args.secret_name,
            service_name=args.service_name,
            mutating_config=args.mutating_webhook_config,
            validating_config=args.validating_webhook_config,
            cluster_domain=args.cluster_domain,
        )
    from ..tls.provider import FileTLSProvider

    return FileTLSProvider(args.tls_cert_file, args.tls_key_file)


async def serve(args: argparse.Namespace, config: Config) -> None:
    """Run the webhook server until SIGTERM/SIGINT (see module docstring).

    Whatever fails during start (certificate, port in use, ...) stops what was already started, in reverse order:
    a replica that took the controller's Lease releases it instead of holding it until it expires.
    """
    async with contextlib.AsyncExitStack() as stack:
        api_client = await api_client_for(args)
        stack.push_async_callback(api_client.close)
        config, problems, rediscoveries = await start_backends(api_client, config)
        provider = _tls_provider(args, api_client)
        await provider.start()
        stack.push_async_callback(provider.stop)
        cache: GroupCache | None = None
        controller = None
        draining = asyncio.Event()
        checks = [lambda: (not draining.is_set(), "shutting down"), lambda: (provider.ready(), provider.reason())]
        if args.controller:
            from ..controller.manager import start_manager

            # one gang controller per enabled backend, and what they share (controller/manager.py)
            controller = await start_manager(api_client, config, args)
            stack.push_async_callback(controller.stop)
            cache = controller.cache
            checks.append(controller.readiness)
        admission = Admission(config, KubeAPI(api_client), cache)
        admission.problems = problems
        admission.rediscoveries = rediscoveries
        if controller is not None:  # a backend whose served version moved: its gang controller follows
            for name, rediscovery in rediscoveries.items():
                rediscovery.listeners.append(functools.partial(controller.restart, name))
        # the guard's factory is aiohttp's low-level server, made next around the guard
        metrics_host = args.host if args.metrics_host is None else args.metrics_host
        guard = ConnectionGuard(lambda: None, args.max_connections,  # type: ignore[arg-type, return-value]
                                config.read_timeout_seconds)
        server = create_server(admission, checks, guard, keepalive_timeout=args.idle_timeout)
        drain = args.drain_seconds
        runner = web.ServerRunner(server, shutdown_timeout=1.0)
        await runner.setup()
        guard.factory = server
        site = GuardedSite(runner, guard, args.host, args.port, ssl_context=provider.ssl_context, backlog=1024,
                           handshake_timeout=config.read_timeout_seconds)
        if args.metrics_port:  # closed after the listener's drain: scrapes see the whole shutdown
            metrics_runner = await metrics.start_metrics_server(args.metrics_port, metrics_host)
            stack.push_async_callback(metrics_runner.cleanup)
        # first to run on exit: stop leading, stop taking requests, drain, close
        stack.push_async_callback(shut_down, runner, site, controller, drain)
        await site.start()
        guard.start()
        # Everything made so far (modules, the Kubernetes client, TLS) lives as long as the process: keep it out of
        # the cyclic collector, so a full collection scans only what requests leave behind (about 1 ms instead of
        # 15-40 ms stalls with the kubernetes_asyncio heap; see docs/performance.md).
        gc.collect()
        gc.freeze()
        log.info(
            "admit serving %s (gang backend %s, scheduler %s, failure mode %s, cert mode %s); metrics %s",
            listen_url("https", args.host, args.port), config.gang_backend, config.scheduler_name, config.failure_mode,
            args.cert_mode, listen_url("http", metrics_host, args.metrics_port) + "/metrics" if args.metrics_port else "off",
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        guard.begin_closing()
        await _release_lease(controller, drain)
        await _drain_delay(stop, draining, args.shutdown_delay)
        log.info("shutting down")


async def shut_down(runner: web.BaseRunner, site: GuardedSite, controller: Any, drain_seconds: float,
                    quiet: float = DEFAULT_QUIET_SECONDS) -> None:
    """The SIGTERM sequence of the listener (module docstring); every step is bounded.

    1. stop leading: the controller's workers stop and the Lease is released (``LeaderElector.stop``; the caches keep
       serving the admission path until ``controller.stop``);
    2. stop accepting connections; every response carries ``Connection: close`` (already so after a signal);
    3. until no connection is left, for at most ``drain_seconds``: requests in flight finish and their connections
       close after the answer; a connection without a request for ``quiet`` seconds (and no byte unread) is closed
       (``ConnectionGuard.close_quiet``: none can race with a request on its way);
    4. close every connection left (requests that did not finish) and clean up aiohttp.
    """
    started = time.monotonic()
    guard = site.guard
    guard.begin_closing()
    await _release_lease(controller, drain_seconds)  # done already after a signal; here for a start that failed
    with contextlib.suppress(RuntimeError):  # not started (start failed): nothing to stop
        await site.stop()
    deadline = time.monotonic() + drain_seconds
    quiet_closed = guard.close_quiet(quiet)
    while len(guard) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        quiet_closed += guard.close_quiet(quiet)
    left = site.in_flight()
    closed = guard.close_all()
    await guard.stop()
    await runner.cleanup()
    log.info("listener stopped in %.1fs: %d quiet connection(s) closed, %d connection(s) closed at the end of the "
             "drain, %d request(s) unfinished after the %gs drain",
             time.monotonic() - started, quiet_closed, closed, left, drain_seconds)


async def _release_lease(controller: Any, drain_seconds: float) -> None:
    """Stop leading and give the Lease back (``LeaderElector.stop``, idempotent), bounded in time."""
    if controller is None:
        return
    try:
        await asyncio.wait_for(controller.elector.stop(release=True), timeout=max(1.0, drain_seconds / 2))
    except (TimeoutError, Exception):  # noqa: BLE001 - the rest of the shutdown must happen anyway
        log.warning("could not release the controller's Lease in time; another replica takes over when it expires")


async def _drain_delay(stop: asyncio.Event, draining: asyncio.Event, delay: float) -> None:
    """Fail ``/readyz`` and keep serving for ``delay`` seconds, or until another signal sets ``stop`` again."""
    draining.set()
    if delay <= 0:
        return
    log.info("signal received: /readyz fails now; serving %gs more while endpoints stop routing here", delay)
    stop.clear()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay):
            await stop.wait()
