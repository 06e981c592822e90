"""``python -m bench.admit_bench --gang-workloads N[,N...]``: ``admit serve`` with its controller over N stored gang workloads.

For each N (default 0, 1,000, 5,000 and 20,000): the fake Kubernetes API is preloaded with N gang Deployments as
kube-apiserver stores them (about 5.2 KB of JSON each: the last-applied annotation, managedFields of kubectl and of
kube-controller-manager, a two-container template, status) and their PodGroups (adopted, in step, with a status and
managedFields, as scheduler-plugins leaves them); then ``admit serve`` starts with its controller (one replica, so
it leads) while a probe sends Pod admissions of a known gang group (``known-group`` mix: ``/mutate`` then
``/validate``) at a fixed rate the whole time. Phases, each ended when admit's CPU use falls back to the probe's
(under 30% of a core for 2 s: the probe alone costs admit about 15%, so a lower bar made the 0-workload run
wait minutes for a quiet it never reached):

- **startup**: from ``/readyz`` 200 to the end of the first sync (the caches listed, the leader's first pass over
  every key done);
- **resync**: the controller's periodic resync (``--resync-period``, ``--gang-resync`` seconds after start);
- **relist**: an etcd compaction and every watch dropped (``/_fake/compact``, ``/_fake/drop-watches``), so that every
  cache relists at once, as after a kube-apiserver restart; done twice.

Printed per N: RSS after the sync and after each relist (VmRSS), the peak (VmHWM), memory per workload (RSS after
sync minus the N=0 run's, over N), and the admission latency p50/p99/max in each phase (open loop: latency counts
from the moment the schedule released the request). The scale goals are checked at the largest N: RSS
within the chart's 256 MiB limit, p99 under 50 ms in every phase, RSS flat across a relist (within 10%); the
controller must also make no write (everything is in step).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.driver import Driver, Sample
from bench.processes import FakeAPI, Server, free_port, proc_cpu_seconds, proc_memory, run, write_certs
from bench.reviews import MIXES, NAMESPACE, deployment, mutated

CHART_LIMIT_MB = 256
P99_GOAL_MS = 50.0


def stored_deployment(name: str, replicas: int = 4) -> dict[str, Any]:
    """A gang Deployment as kube-apiserver stores it after admit's mutation (about 5.2 KB of JSON)."""
    dep = mutated(deployment(name, "auto", replicas), name)
    meta = dep["metadata"]
    meta["uid"] = str(uuid.uuid4())
    meta["generation"] = 1
    meta["creationTimestamp"] = "2026-11-29T10:12:01Z"
    meta["annotations"]["deployment.kubernetes.io/revision"] = "1"
    meta["managedFields"].append({
        "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
        "time": "2026-11-29T10:12:09Z", "fieldsType": "FieldsV1", "subresource": "status",
        "fieldsV1": {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}},
                     "f:status": {"f:availableReplicas": {}, "f:conditions": {
                         ".": {}, 'k:{"type":"Available"}': {".": {}, "f:lastTransitionTime": {},
                                                             "f:lastUpdateTime": {}, "f:message": {},
                                                             "f:reason": {}, "f:status": {}, "f:type": {}},
                         'k:{"type":"Progressing"}': {".": {}, "f:lastTransitionTime": {}, "f:lastUpdateTime": {},
                                                      "f:message": {}, "f:reason": {}, "f:status": {},
                                                      "f:type": {}}},
                         "f:observedGeneration": {}, "f:readyReplicas": {}, "f:replicas": {},
                         "f:updatedReplicas": {}}},
    })
    dep["status"] = {
        "observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {"type": "Available", "status": "True", "lastUpdateTime": "2026-11-29T10:12:09Z",
             "lastTransitionTime": "2026-11-29T10:12:09Z", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability."},
            {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-11-29T10:12:09Z",
             "lastTransitionTime": "2026-11-29T10:12:01Z", "reason": "NewReplicaSetAvailable",
             "message": f'ReplicaSet "{name}-7d9c5b8f6d" has successfully progressed.'},
        ],
    }
    return dep


def stored_pod_group(dep: dict[str, Any]) -> dict[str, Any]:
    """The PodGroup admit made for ``dep``, adopted and in step, with scheduler-plugins' status on it."""
    from admit.backends.coscheduling.podgroup import desired_pod_group
    from admit.config import Config
    from admit.controller.claims import claim_of
    from admit.gang.ownerrefs import owner_reference
    from admit.kube.client import Resource

    claim = claim_of(dep, Resource("apps", "v1", "deployments", "Deployment"), Config())
    assert claim is not None and claim.plan is not None
    pg = desired_pod_group(claim.plan, Config(), claim.generation)
    pg["metadata"]["ownerReferences"] = [owner_reference(dep)]
    pg["metadata"]["managedFields"] = [
        {"manager": "admit", "operation": "Update", "apiVersion": "scheduling.x-k8s.io/v1alpha1",
         "time": "2026-11-29T10:12:01Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:gang.admit.dev/owner": {},
                                                       "f:gang.admit.dev/workload-generation": {}},
                                     "f:labels": {".": {}, "f:app.kubernetes.io/managed-by": {}},
                                     "f:ownerReferences": {}},
                      "f:spec": {".": {}, "f:minMember": {}, "f:minResources": {}, "f:scheduleTimeoutSeconds": {}}}},
        {"manager": "scheduler-plugins-controller", "operation": "Update", "apiVersion": "scheduling.x-k8s.io/v1alpha1",
         "time": "2026-11-29T10:12:09Z", "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {".": {}, "f:phase": {}, "f:running": {}, "f:scheduleStartTime": {}}}},
    ]
    pg["status"] = {"phase": "Running", "running": pg["spec"]["minMember"],
                    "scheduleStartTime": "2026-11-29T10:12:02Z"}
    return pg


class Probe:
    """Pod admissions of a known gang group at a fixed rate, for as long as it runs; keeps ``(sent, latency_s, ok)``
    per request (sent on ``time.perf_counter``)."""

    def __init__(self, driver: Any, rate: float) -> None:
        self.driver = driver
        self.rate = rate
        self.samples: list[tuple[float, float, bool]] = []
        self._task: asyncio.Task | None = None
        self._stop = False

    async def start(self) -> None:
        await self.driver.connect()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop = True
        if self._task is not None:
            await self._task
        self.driver.close()

    async def _run(self) -> None:
        mix = MIXES["known-group"]
        free: asyncio.Queue = asyncio.Queue()
        for c in self.driver.conns:
            free.put_nowait(c)
        pending: set[asyncio.Task] = set()
        clock = time.perf_counter
        start = clock()
        i = 0

        async def one(n: int, due: float) -> None:
            conn = await free.get()
            sample = Sample()
            try:
                path, parts = mix.steps[n % len(mix.steps)]
                answer = await self.driver._send(conn, mix, path, parts, n, sample)  # noqa: SLF001
                self.samples.append((due, clock() - due, answer is not None and sample.errors == 0))
            finally:
                free.put_nowait(conn)

        while not self._stop:
            due = start + i / self.rate
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(i, max(due, clock() if delay < -0.05 else due)))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
        if pending:
            await asyncio.gather(*pending)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        """Latency figures (ms) of the requests sent in ``[t0, t1]``."""
        lat = sorted(s[1] for s in self.samples if t0 <= s[0] <= t1)
        errors = sum(1 for s in self.samples if t0 <= s[0] <= t1 and not s[2])
        if not lat:
            return {"requests": 0, "errors": errors}

        def pct(q: float) -> float:
            k = max(0, min(len(lat) - 1, int(round(q / 100 * len(lat) + 0.5)) - 1))
            return round(lat[k] * 1000, 2)

        return {"requests": len(lat), "errors": errors, "seconds": round(t1 - t0, 1), "p50_ms": pct(50),
                "p99_ms": pct(99), "max_ms": round(lat[-1] * 1000, 2)}


def _post(url: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body if body is not None else {}).encode()
    req = urllib.request.Request(url + path, data=data, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def preload(url: str, n: int) -> dict[str, Any]:
    """Store ``n`` gang Deployments and their PodGroups in the fake API (bulk ``/_fake/put``); returns sizes."""
    started = time.monotonic()
    dep_bytes = pg_bytes = 0
    batch: list[dict[str, Any]] = []
    for i in range(n):
        dep = stored_deployment("trainer" if i == 0 else f"gang-{i:05}")
        pg = stored_pod_group(dep)
        dep_bytes += len(json.dumps(dep, separators=(",", ":")))
        pg_bytes += len(json.dumps(pg, separators=(",", ":")))
        batch += [dep, pg]
        if len(batch) >= 400:
            _post(url, "/_fake/put", batch)
            batch = []
    if batch:
        _post(url, "/_fake/put", batch)
    return {"deployment_bytes": round(dep_bytes / n) if n else 0, "pod_group_bytes": round(pg_bytes / n) if n else 0,
            "preload_seconds": round(time.monotonic() - started, 1)}


def _reads(fake: Any) -> int:
    """GETs of Deployments the fake API has answered (lists, watches, live reads; the Deployment list is the longest
    of a relist). PodGroups are left out: with no PodGroup stored, every probe admission confirms with one GET that
    its group is missing."""
    return fake.counts().get("GET deployments", 0)


async def _quiet(pid: int, since: float, *, fake: Any, below: float = 0.30, hold: float = 2.0,
                 timeout: float = 900.0, log: Path | None = None, needle: str | None = None) -> float:
    """Wait until process ``pid`` used less than ``below`` of a core over ``hold`` seconds while asking the fake API
    for no Deployment (a relist waiting on a slow page is not quiet), and, with ``needle``, its log
    contains it; returns the perf_counter time the quiet stretch began."""
    deadline = time.perf_counter() + timeout
    quiet_since: float | None = None
    last_cpu, last_t = proc_cpu_seconds(pid), time.perf_counter()
    last_reads = await asyncio.to_thread(_reads, fake)
    while time.perf_counter() < deadline:
        await asyncio.sleep(0.25)
        cpu, t = proc_cpu_seconds(pid), time.perf_counter()
        reads = await asyncio.to_thread(_reads, fake)
        busy = (cpu - last_cpu) / (t - last_t)
        last_cpu, last_t = cpu, t
        reading, last_reads = reads != last_reads, reads
        found = needle is None or (log is not None and needle in log.read_text(errors="replace"))
        if busy < below and not reading and found and t > since:
            quiet_since = quiet_since or t - 0.25
            if t - quiet_since >= hold:
                return quiet_since
        else:
            quiet_since = None
    raise SystemExit(f"admit serve did not settle within {timeout:g}s")


async def run_one(n: int, args: Any, certs: Path, ctx: ssl.SSLContext, tmp: Path) -> dict[str, Any]:
    """One N: preload, start admit serve with the controller, measure the phases."""
    fake = FakeAPI(tmp / f"fake-{n}.log", "--bookmark-interval", "60")  # kube-apiserver's bookmark period
    sizes = await asyncio.to_thread(preload, fake.url, n)
    port = free_port()
    log = tmp / f"admit-{n}.log"
    resync = args.gang_resync
    srv = Server(f"admit serve ({n} workloads)", [
        sys.executable, "-m", "admit.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--cert-mode", "files", "--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file", str(certs / "tls.key"),
        "--api-server", fake.url, "--namespace", "admit-system", "--resync-period", str(resync),
        "--orphan-grace-period", "3600", "--log-level", "info", "--shutdown-delay", "0",
    ], port, log)
    started = time.perf_counter()
    result: dict[str, Any] = {"workloads": n, **sizes}
    probe = Probe(Driver(srv, ctx, 8, []), args.gang_rate)
    try:
        await asyncio.to_thread(srv.wait_ready, ctx, 120.0)
        while True:  # readyz: the PodGroup cache answered its first list
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            await asyncio.sleep(0.05)
        ready = time.perf_counter()
        result["ready_seconds"] = round(ready - started, 2)
        await probe.start()
        synced = await _quiet(srv.pid, ready, fake=fake, log=log, needle="leading:")
        result["sync_seconds"] = round(synced - started, 2)
        result["startup_cpu_seconds"] = round(proc_cpu_seconds(srv.pid), 2)
        result["rss_after_sync_mb"] = round(proc_memory(srv.pid)["rss"], 1)
        result["startup"] = probe.window(ready, synced)
        # The resync: resync_period seconds after the caches started (about when the process started).
        t_resync = started + resync
        if time.perf_counter() > t_resync - 1:
            result["resync"] = {"skipped": f"the sync took longer than --gang-resync {resync:g}s"}
        else:
            await asyncio.sleep(t_resync - 1 - time.perf_counter())
            w0, c0 = time.perf_counter(), proc_cpu_seconds(srv.pid)
            await asyncio.sleep(2.0)
            w1 = await _quiet(srv.pid, w0, fake=fake)
            result["resync"] = probe.window(w0, w1)
            result["resync"]["cpu_seconds"] = round(proc_cpu_seconds(srv.pid) - c0, 2)
        result["rss_after_relist_mb"] = []
        relists = []
        for _ in range(args.gang_relists):
            r0, c0 = time.perf_counter(), proc_cpu_seconds(srv.pid)
            await asyncio.to_thread(_post, fake.url, "/_fake/put", [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"bump-{uuid.uuid4().hex[:8]}", "namespace": NAMESPACE}}])
            await asyncio.to_thread(_post, fake.url, "/_fake/compact")
            await asyncio.to_thread(_post, fake.url, "/_fake/drop-watches")
            await asyncio.sleep(1.0)
            r1 = await _quiet(srv.pid, r0, fake=fake)
            relists.append(probe.window(r0, r1))
            relists[-1]["cpu_seconds"] = round(proc_cpu_seconds(srv.pid) - c0, 2)
            result["rss_after_relist_mb"].append(round(proc_memory(srv.pid)["rss"], 1))
        result["relist"] = relists
        mem = proc_memory(srv.pid)
        result["hwm_mb"] = round(mem["hwm"], 1)
        await probe.stop()
        result["all"] = probe.window(ready, time.perf_counter())
        counts = fake.counts()
        result["controller_writes"] = {k: v for k, v in counts.items()
                                       if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE")
                                       and k.split()[1] in ("podgroups", "events")}
        result["api_requests"] = counts
    finally:
        if probe._task is not None and not probe._task.done():  # noqa: SLF001
            await probe.stop()
        result["exit_code"] = srv.stop()
        fake.stop()
    text = log.read_text(errors="replace")
    result["log_errors"] = [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line][:5]
    return result


def render(results: list[dict[str, Any]], baseline_mb: float | None) -> str:
    lines = ["## admit serve with the controller over N stored gang workloads", "",
             f"(load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}; admission probe "
             f"latencies include waiting for a CPU on a shared machine)", "",
             "| workloads | KB/Deployment | ready s | synced s | RSS after sync MiB | after relists MiB | peak MiB "
             "| KiB/workload | startup p99/max ms | resync p99/max ms | relist p99/max ms | CPU s: startup / resync / "
             "relists | controller writes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        n = r["workloads"]
        per = (f"{(r['rss_after_sync_mb'] - baseline_mb) * 1024 / n:.1f}" if baseline_mb is not None and n
               else "-")

        def pm(w: Any) -> str:
            if not isinstance(w, dict) or "p99_ms" not in w:
                return "-"
            return f"{w['p99_ms']:.1f} / {w['max_ms']:.1f}"

        relist = " ; ".join(pm(w) for w in r["relist"])
        writes = sum(r["controller_writes"].values())
        cpu = " / ".join([str(r.get("startup_cpu_seconds", "-")), str(r["resync"].get("cpu_seconds", "-")),
                          ", ".join(str(w.get("cpu_seconds", "-")) for w in r["relist"])])
        lines.append(
            f"| {n:,} | {r['deployment_bytes'] / 1000:.1f} | {r['ready_seconds']} | {r['sync_seconds']} | "
            f"{r['rss_after_sync_mb']} | {', '.join(str(x) for x in r['rss_after_relist_mb'])} | {r['hwm_mb']} | "
            f"{per} | {pm(r['startup'])} | {pm(r['resync'])} | {relist} | {cpu} | {writes} |")
    return "\n".join(lines)


def check(results: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """The scale goals at the largest N."""
    r = max(results, key=lambda x: x["workloads"])
    n = r["workloads"]
    phases = [r["startup"], r["resync"], *r["relist"]]
    p99s = [w["p99_ms"] for w in phases if isinstance(w, dict) and "p99_ms" in w]
    flat = all(x <= r["rss_after_sync_mb"] * 1.10 for x in r["rss_after_relist_mb"])
    return [
        (f"{n:,} workloads: peak RSS {r['hwm_mb']} MiB within the chart's {CHART_LIMIT_MB}Mi limit",
         r["hwm_mb"] < CHART_LIMIT_MB),
        (f"{n:,} workloads: admission p99 under {P99_GOAL_MS:g} ms in startup, resync and relist "
         f"(worst {max(p99s) if p99s else float('nan'):.1f} ms)", bool(p99s) and max(p99s) < P99_GOAL_MS),
        (f"{n:,} workloads: RSS flat across relists ({r['rss_after_sync_mb']} -> "
         f"{', '.join(str(x) for x in r['rss_after_relist_mb'])} MiB)", flat),
        (f"{n:,} workloads: the controller writes nothing when everything is in step "
         f"({sum(r['controller_writes'].values())} writes)", sum(r["controller_writes"].values()) == 0),
    ]


def run_gang(args: Any) -> int:
    """The ``--gang-workloads`` mode of ``bench/admit_bench.py``."""
    tmp = Path(tempfile.mkdtemp(prefix="admit-gang-bench-"))
    certs = tmp / "certs"
    ctx = write_certs(certs)
    results = []
    for n in args.gang_workloads:
        print(f"... {n:,} gang workloads", file=sys.stderr, flush=True)
        results.append(run(run_one(n, args, certs, ctx, tmp)))
    zero = next((r for r in results if r["workloads"] == 0), None)
    out = render(results, zero["rss_after_sync_mb"] if zero else None)
    targets = check(results)
    out += "\n\nGoals:\n" + "\n".join(f"- {'PASS' if ok else 'FAIL'} {what}" for what, ok in targets)
    print(out)
    for r in results:
        if r["log_errors"]:
            print(f"\nerrors in admit's log at {r['workloads']:,} workloads: {r['log_errors']}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"gang": results, "targets": targets}, indent=2))
    if args.keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    errors = sum(r["all"].get("errors", 0) for r in results) + sum(1 for r in results if r["exit_code"] != 0)
    if errors:
        return 2
    if args.check and not all(ok for _, ok in targets):
        return 1
    return 0

