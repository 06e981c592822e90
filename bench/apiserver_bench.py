#!/usr/bin/env python3
"""Cost per pod through a real kube-apiserver: pod creation with admit's webhooks in the path, without any webhook,
and through a webhook that only answers "allowed", in alternating rounds of one run.

    python -m bench.apiserver_bench --kubeconfig admin.kubeconfig     # a control plane that can reach 127.0.0.1
    python -m bench.apiserver_bench --plane                           # start a real plane on $ADMIT_K8S_ASSETS

(from the root of a checkout: ``--plane`` uses the real-plane launcher of ``tests/support/plane.py``)

What it does:

1. writes a serving pair for 127.0.0.1, starts ``admit serve`` (files mode, ``--kubeconfig``, the controller on, so
   its PodGroup cache is filled from a watch, ``--metrics-port``) and the *allow-only* webhook (``bench/baseline.py``,
   the benchmark's baseline server: it parses each AdmissionReview and answers allowed with its uid), each in its own process;
2. creates three namespaces and registers, as the chart does for pods (``CREATE``, ``sideEffects: NoneOnDryRun``,
   ``failurePolicy: Fail``, ``timeoutSeconds: 10``), a mutating and a validating webhook for admit, selecting
   namespace ``<prefix>-admit``, and the same two for the allow-only server, selecting ``<prefix>-allow``;
   ``<prefix>-none`` has no webhook. A PodGroup ``bench`` (minMember 1) exists in each namespace;
3. per round, creates ``--pods`` pods (``POST /api/v1/namespaces/<ns>/pods``, ``--concurrency`` at a time) in each
   namespace in turn, the order rotating every round; each pod carries the group label and the Coscheduling
   scheduler name, as a gang pod that admit has already mutated (admit answers allowed without a patch and without
   an API call). The latency of each POST is timed in this process; the round's pods are deleted between rounds;
4. prints, per path, p50 / p99 of the POST latency and pods/s, the latency added by admit and by the allow-only
   webhook over no webhook (p50 and p99 of each), and the throughput ratios; ``--json FILE`` writes every figure.

The kube-apiserver calls each webhook over HTTPS on 127.0.0.1: the difference between "allow-only" and "none" is
the cost of any two webhook calls (TLS, JSON, the API server's admission chain), the difference between "admit" and
"allow-only" is admit's own.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.processes import Server, free_port, scrape_metrics

MODES = ("none", "admit", "allow")
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER = "scheduler-plugins-scheduler"


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def pod_body(namespace: str, index: int, round_: int) -> dict[str, Any]:
    """A gang pod as it reaches the API server after admit mutated its workload: group label, scheduler name,
    requests, a name per round and index."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"bench-r{round_}-{index}", "namespace": namespace,
                     "labels": {"app": "bench", GROUP_LABEL: "bench"}},
        "spec": {"schedulerName": SCHEDULER, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
    }


def webhook_configs(name: str, port: int, namespace: str, ca_pem: bytes) -> list[tuple[str, dict[str, Any]]]:
    """A Mutating- and a ValidatingWebhookConfiguration for pod CREATE in ``namespace``, calling
    ``https://127.0.0.1:<port>/mutate`` and ``/validate``: (plural, body) pairs."""
    out = []
    for kind, plural, path in (("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "/mutate"),
                               ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "/validate")):
        hook = {
            "name": f"{name}.bench.admit.dev", "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
            "failurePolicy": "Fail", "timeoutSeconds": 10, "matchPolicy": "Equivalent",
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}",
                             "caBundle": base64.b64encode(ca_pem).decode()},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
                       "scope": "Namespaced"}],
        }
        if kind.startswith("Mutating"):
            hook["reinvocationPolicy"] = "IfNeeded"
        out.append((plural, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                             "metadata": {"name": f"{name}-bench"}, "webhooks": [hook]}))
    return out


async def create_pods(api: Any, namespace: str, count: int, concurrency: int, round_: int) -> tuple[list[float], float, int]:
    """POST ``count`` pods, ``concurrency`` at a time: (latencies in seconds, wall seconds, errors)."""
    from admit.kube.client import KubeError

    latencies: list[float] = []
    errors = 0
    queue = list(range(count))

    async def worker() -> None:
        nonlocal errors
        while queue:
            i = queue.pop()
            t0 = time.perf_counter()
            try:
                await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod_body(namespace, i, round_))
            except KubeError as e:
                errors += 1
                if errors <= 3:
                    print(f"  {namespace}: {e.message}", file=sys.stderr)
                continue
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start, errors


async def measure(args: argparse.Namespace, kubeconfig: str, tmp: Path) -> dict[str, Any]:
    from admit.tls.certs import write_development_certificates
    from admit.kube.client import KubeError, load_api_client
    from admit.kube.watchcache import KubeRaw

    certs = write_development_certificates(tmp / "certs", ip_addresses=["127.0.0.1"])
    ctx = ssl.create_default_context(cafile=str(certs["ca.crt"]))
    prefix = args.namespace_prefix
    system_ns = f"{prefix}-system"
    api_client = await load_api_client(kubeconfig)
    api = KubeRaw(api_client, timeout=30)
    namespaces = {mode: f"{prefix}-{mode}" for mode in MODES}
    for ns in [system_ns, *namespaces.values()]:
        try:
            await api.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                                  "metadata": {"name": ns}})
        except KubeError as e:
            if e.status != 409:
                raise
    for ns in namespaces.values():  # pods are refused until the namespace's default ServiceAccount exists
        for _ in range(200):
            try:
                await api.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
                break
            except KubeError:
                await asyncio.sleep(0.1)
        try:
            await api.request("POST", f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups", body={
                "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "bench", "namespace": ns}, "spec": {"minMember": 1}})
        except KubeError as e:
            if e.status != 409:
                raise
    admit_port, allow_port, metrics_port = free_port(), free_port(), free_port()
    admit_srv = Server("admit serve", [
        sys.executable, "-m", "admit.cli", "serve", "--host", "127.0.0.1", "--port", str(admit_port),
        "--cert-mode", "files", "--tls-cert-file", str(certs["tls.crt"]), "--tls-key-file", str(certs["tls.key"]),
        "--kubeconfig", kubeconfig, "--namespace", system_ns, "--log-level", "warning",
        "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1",
    ], admit_port, tmp / "admit.log")
    allow_srv = Server("allow-only webhook", [
        sys.executable, "-m", "bench.baseline", "--port", str(allow_port),
        "--tls-cert-file", str(certs["tls.crt"]), "--tls-key-file", str(certs["tls.key"]),
    ], allow_port, tmp / "allow.log")
    written: list[tuple[str, str]] = []
    result: dict[str, Any] = {"rounds": [], "modes": {}}
    try:
        admit_srv.wait_ready(ctx)
        allow_srv.wait_ready(ctx)
        ca_pem = certs["ca.crt"].read_bytes()
        for name, port, mode in (("admit", admit_port, "admit"), ("allow", allow_port, "allow")):
            for plural, body in webhook_configs(name, port, namespaces[mode], ca_pem):
                path = f"/apis/admissionregistration.k8s.io/v1/{plural}"
                try:
                    await api.request("DELETE", f"{path}/{body['metadata']['name']}")
                except KubeError:
                    pass
                await api.request("POST", path, body=body)
                written.append((path, body["metadata"]["name"]))
        # kube-apiserver picks webhook configurations up from a watch: wait until admit is called
        await wait_webhooks_active(api, namespaces["admit"], metrics_port)
        samples: dict[str, list[float]] = {m: [] for m in MODES}
        walls: dict[str, float] = {m: 0.0 for m in MODES}
        counts: dict[str, int] = {m: 0 for m in MODES}
        errors: dict[str, int] = {m: 0 for m in MODES}
        warm = max(10, args.pods // 10)
        for mode in MODES:  # warm-up: connections, caches, the API server's webhook clients
            await create_pods(api, namespaces[mode], warm, args.concurrency, 999)
            await delete_pods(api, namespaces[mode])
        for r in range(args.rounds):
            order = MODES[r % 3:] + MODES[:r % 3]
            row: dict[str, Any] = {"round": r, "order": list(order)}
            for mode in order:
                lat, wall, err = await create_pods(api, namespaces[mode], args.pods, args.concurrency, r)
                samples[mode] += lat
                walls[mode] += wall
                counts[mode] += len(lat)
                errors[mode] += err
                row[mode] = {"pods_per_s": round(len(lat) / wall, 1), "p50_ms": round(percentile(lat, .5) * 1e3, 2),
                             "p99_ms": round(percentile(lat, .99) * 1e3, 2), "errors": err}
                await delete_pods(api, namespaces[mode])
            result["rounds"].append(row)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{m} {row[m]['pods_per_s']:.0f} pods/s p50 {row[m]['p50_ms']:.1f} ms" for m in order), flush=True)
        for mode in MODES:
            s = samples[mode]
            result["modes"][mode] = {
                "pods": counts[mode], "errors": errors[mode], "pods_per_s": round(counts[mode] / walls[mode], 1),
                "p50_ms": round(percentile(s, .5) * 1e3, 3), "p99_ms": round(percentile(s, .99) * 1e3, 3),
                "mean_ms": round(statistics.fmean(s) * 1e3, 3) if s else None,
            }
        result["admit_webhook_requests"] = scrape_metrics(metrics_port)
        result["admit_own_ms"] = admit_own_latency(metrics_port)
    finally:
        for path, name in written:
            try:
                await api.request("DELETE", f"{path}/{name}")
            except KubeError:
                pass
        for ns in [*namespaces.values(), system_ns]:  # the namespace controller finishes in the background
            try:
                await api.request("DELETE", f"/api/v1/namespaces/{ns}")
            except KubeError:
                pass
        await api_client.close()
        admit_srv.stop()
        allow_srv.stop()
    m = result["modes"]
    # paired per round: each round ran the three paths back to back, so the machine's load is closer within a round
    result["added_per_round_median"] = {
        name: {"p50_ms": round(statistics.median(r[a]["p50_ms"] - r[b]["p50_ms"] for r in result["rounds"]), 3),
               "throughput_ratio": round(statistics.median(r[a]["pods_per_s"] / r[b]["pods_per_s"]
                                                           for r in result["rounds"]), 3)}
        for name, a, b in (("admit vs none", "admit", "none"), ("allow-only vs none", "allow", "none"),
                           ("admit vs allow-only", "admit", "allow"))
    }
    result["added"] = {
        name: {"p50_ms": round(m[a]["p50_ms"] - m[b]["p50_ms"], 3), "p99_ms": round(m[a]["p99_ms"] - m[b]["p99_ms"], 3),
               "throughput_ratio": round(m[a]["pods_per_s"] / m[b]["pods_per_s"], 3)}
        for name, a, b in (("admit vs none", "admit", "none"), ("allow-only vs none", "allow", "none"),
                           ("admit vs allow-only", "admit", "allow"))
    }
    return result


def admit_own_latency(port: int) -> dict[str, float]:
    """Mean time admit spent per webhook call (ms), from its ``controller_runtime_webhook_latency_seconds`` sum and
    count: its own work, without the network and the API server's side of the call."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("code") != "200":
                continue
            if sample.name == "controller_runtime_webhook_latency_seconds_sum":
                sums[sample.labels["webhook"]] = sample.value
            elif sample.name == "controller_runtime_webhook_latency_seconds_count":
                counts[sample.labels["webhook"]] = sample.value
    return {hook: round(sums[hook] / n * 1e3, 3) for hook, n in counts.items() if n and hook in sums}


async def delete_pods(api: Any, namespace: str) -> None:
    """Delete every pod of ``namespace`` at once (grace period 0: no kubelet has to confirm)."""
    await api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods",
                      body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    for _ in range(300):
        left = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=[("limit", "1")])
        if not left.get("items"):
            return
        await asyncio.sleep(0.05)


async def wait_webhooks_active(api: Any, namespace: str, metrics_port: int, timeout: float = 30.0) -> None:
    """Create dry-run pods in ``namespace`` until admit's /metrics counts a /validate call (the configuration is in
    effect), then wait one more second for the allow-only configuration written at the same time."""
    from admit.kube.client import KubeError

    deadline = time.monotonic() + timeout
    before = scrape_metrics(metrics_port).get("/validate 200", 0)
    while time.monotonic() < deadline:
        try:
            await api.request("POST", f"/api/v1/namespaces/{namespace}/pods", query=[("dryRun", "All")],
                              body=pod_body(namespace, 0, 0))
        except KubeError:
            pass
        if scrape_metrics(metrics_port).get("/validate 200", 0) > before:
            await asyncio.sleep(1.0)
            return
        await asyncio.sleep(0.2)
    raise SystemExit("kube-apiserver never called admit's webhook")


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    m = result["modes"]
    names = {"none": "no webhook", "admit": "admit (mutate + validate)", "allow": "allow-only webhook (x2)"}
    lines = [f"{args.rounds} rounds x {args.pods} pods per path, {args.concurrency} concurrent POSTs, order rotating",
             "", "| path | pods | pods/s | p50 ms | p99 ms | errors |", "|---|---:|---:|---:|---:|---:|"]
    for mode in MODES:
        x = m[mode]
        lines.append(f"| {names[mode]} | {x['pods']} | {x['pods_per_s']:.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | "
                     f"{x['errors']} |")
    lines += ["", "| added by | p50 ms | p99 ms | throughput ratio |", "|---|---:|---:|---:|"]
    for name, a in result["added"].items():
        lines.append(f"| {name} | {a['p50_ms']:+.2f} | {a['p99_ms']:+.2f} | {a['throughput_ratio']:.2f} |")
    lines += ["", "Paired within each round (median over rounds):", "",
              "| added by | p50 ms | throughput ratio |", "|---|---:|---:|"]
    for name, a in result["added_per_round_median"].items():
        lines.append(f"| {name} | {a['p50_ms']:+.2f} | {a['throughput_ratio']:.2f} |")
    own = result.get("admit_own_ms") or {}
    lines += ["", "admit's own time per webhook call (mean, its latency histogram): " + ", ".join(
        f"{hook} {ms:.2f} ms" for hook, ms in sorted(own.items()))]
    lines += ["", "admit's /metrics after the run: " + ", ".join(
        f"{k} = {v:,.0f}" for k, v in sorted((result.get("admit_webhook_requests") or {}).items()))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--kubeconfig", help="admin kubeconfig of a kube-apiserver that can call https://127.0.0.1")
    src.add_argument("--plane", action="store_true", help="start a real control plane (tests.support.plane) on the "
                                                          "binaries of $ADMIT_K8S_ASSETS for the run")
    p.add_argument("--rounds", type=int, default=6, help="rounds; each creates --pods pods per path (default 6)")
    p.add_argument("--pods", type=int, default=200, help="pods per path and round (default 200)")
    p.add_argument("--concurrency", type=int, default=8, help="concurrent POSTs (default 8)")
    p.add_argument("--namespace-prefix", default="admit-bench", help="namespaces <prefix>-none/-admit/-allow")
    p.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="admit-apiserver-bench-"))
    started = time.monotonic()
    if args.plane:
        result = asyncio.run(_with_plane(args, tmp))
    else:
        result = asyncio.run(measure(args, args.kubeconfig, tmp))
    result["seconds"] = round(time.monotonic() - started, 1)
    result["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(render(result, args))
    print(f"\n(run took {result['seconds']} s; load average at the end {result['loadavg']})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    errors = sum(x["errors"] for x in result["modes"].values())
    return 2 if errors else 0


async def _with_plane(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Start the real plane (``tests.support.plane.ControlPlane``: etcd, kube-apiserver, kube-controller-manager,
    the scheduler-plugins scheduler, the kubelet helper) with two large fake nodes, run :func:`measure`, stop it."""
    from tests.support.plane import ControlPlane  # test support code of the checkout, not part of the wheel

    cp = ControlPlane()
    cp.start()
    try:
        for name in ("bench-node-1", "bench-node-2"):
            cp.add_node(name, cpu="64", memory="256Gi", pods="1000")
        return await measure(args, str(cp.kubeconfig), tmp)
    finally:
        cp.stop()


if __name__ == "__main__":
    sys.exit(main())
