"""Rolling restarts of admit fail no create on a real kube-apiserver: two ``admit serve`` replicas behind a loopback
balancer that follows ``/readyz`` every 500 ms (as a Service's endpoints do; established connections stay with their
replica, as conntrack keeps them), registered as the chart's webhooks (``failurePolicy: Fail`` for workloads), while
client loops create gang Deployments without pause and each replica in turn is replaced as a rolling update with
``maxSurge: 1, maxUnavailable: 0`` does: a new replica ready first, then SIGTERM to the old one.

Before every response carried ``Connection: close`` from the start of the shutdown, kube-apiserver's keep-alive
connections to the stopping replica were closed under requests on their way at the end of ``--shutdown-delay``:
``failed calling webhook "...": failed to call webhook: Post "...": EOF`` (2 or 3 creates of about 1,650 in some
runs)."""

from __future__ import annotations

import asyncio
import ssl
import threading

import pytest

from tests.support.balancer import Backend, ReadinessBalancer
from tests.support.plane import PlaneError
from tests.real.support import gang_deployment, wait_for

LOOPS = 6
ROUNDS = 2  # every replica replaced twice


class BalancerThread:
    """A :class:`ReadinessBalancer` on its own event loop in a thread (the plane's calls are synchronous)."""

    def __init__(self, backends: list[Backend], ctx: ssl.SSLContext) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="balancer")
        self.thread.start()
        self.balancer = ReadinessBalancer(backends, ctx, period=0.5)
        asyncio.run_coroutine_threadsafe(self.balancer.__aenter__(), self.loop).result(30)

    def add(self, backend: Backend) -> None:
        self.loop.call_soon_threadsafe(self.balancer.backends.append, backend)

    def remove(self, backend: Backend) -> None:
        self.loop.call_soon_threadsafe(self.balancer.backends.remove, backend)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.balancer.__aexit__(None, None, None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.mark.needs("apiserver")  # dry-run creates: admission only
def test_rolling_restarts_of_two_replicas_under_continuous_creates_fail_no_create(plane, ns):
    cp = plane.cp
    ctx = ssl.create_default_context(cafile=str(cp.ca_file))
    args = ["--no-controller", "--shutdown-delay", "3"]  # plane.admit keeps the Lease and the controller
    serial = iter(range(1000))
    replicas = [plane.start_admit(f"roll-{next(serial)}", args) for _ in range(2)]
    backends = {r.name: Backend("127.0.0.1", r.port) for r in replicas}
    lb = BalancerThread(list(backends.values()), ctx)
    stop = threading.Event()
    created: list[str] = []
    failed: list[str] = []

    def create_without_pause(loop: int) -> None:
        n = 0
        while not stop.is_set():
            name = f"w{loop}-{n}"
            try:  # a dry run: every webhook is called (sideEffects NoneOnDryRun), nothing piles up in the cluster
                cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment(name),
                        query={"dryRun": "All"})
                created.append(name)
            except PlaneError as e:
                failed.append(str(e))
            n += 1

    def probe() -> bool:
        cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment(f"probe-{next(serial)}"),
                query={"dryRun": "All"})
        return any(b.connections for b in backends.values())

    loops = [threading.Thread(target=create_without_pause, args=(i,), daemon=True) for i in range(LOOPS)]
    exits = []
    try:
        cp.register_webhooks(f"https://127.0.0.1:{lb.balancer.port}")
        # kube-apiserver reloads webhook configurations from its informer: wait until its calls go to the balancer
        wait_for(probe, what="webhook calls through the balancer")
        for t in loops:
            t.start()
        wait_for(lambda: len(created) >= 50, what="creates flowing")
        for _ in range(ROUNDS):
            for old in list(replicas):
                new = plane.start_admit(f"roll-{next(serial)}", args)  # maxSurge 1: the new one is ready first
                backends[new.name] = Backend("127.0.0.1", new.port)
                lb.add(backends[new.name])
                wait_for(lambda: backends[new.name].ready, what=f"{new.name} ready behind the balancer")
                before = len(created)
                exits.append((old.name, old.stop(timeout=20), old.output()))
                lb.remove(backends.pop(old.name))
                replicas.remove(old)
                replicas.append(new)
                wait_for(lambda: len(created) >= before + 50, what="creates flowing after the restart")
    finally:
        stop.set()
        for t in loops:
            if t.is_alive():
                t.join(30)
        lb.close()
        for r in replicas:
            r.stop()
        cp.register_webhooks(plane.admit.url)
        cp.wait_webhooks_answer(ns)  # kube-apiserver no longer calls the closed balancer: the next test's admit answers
    assert failed == [], f"{len(failed)} of {len(created) + len(failed)} creates failed: {failed[:5]}"
    for name, code, log in exits:
        assert code == 0, f"{name} exited {code}:\n{log[-3000:]}"
        assert "0 connection(s) closed at the end of the drain, 0 request(s) unfinished" in log, log[-3000:]
    assert len(created) >= 50 * (1 + 2 * ROUNDS)
