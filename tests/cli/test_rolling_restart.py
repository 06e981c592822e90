"""A rolling restart of admit fails no webhook call: two real ``admit serve`` replicas behind a balancer that follows
``/readyz`` (as a Service's endpoints do), a client shaped like kube-apiserver's (a Go-like pool of keep-alive
connections, POSTs of real AdmissionReviews sent without pause from several tasks, no retry), and SIGTERM to one
replica while the calls go on.

Before the server answered ``Connection: close`` from the start of its shutdown, the connections kube-apiserver kept
with the stopping replica stayed in use through the whole ``--shutdown-delay`` and were closed under requests on
their way at its end: each such request failed with EOF (``failed calling webhook ...: EOF``)."""

import asyncio
import json
import signal
import ssl
import subprocess
import sys

from admit.tls.certs import write_development_certificates
from tests.support.balancer import Backend, ReadinessBalancer
from admit.testing.fake_kube import FakeKubeAPI
from tests.support.webhook_client import CallFailed, KeepAliveClient
from tests.helpers import EXAMPLES, ROOT, admission_review, eventually, example
from tests.cli.test_serve_e2e import start_serve, stop, wait_ready

UID = "00000000-0000-4000-8000-@@@@@@@@@@@@"


def review_templates() -> list[tuple[str, bytes]]:
    """What kube-apiserver sends for a gang Deployment and one of its pods: the Deployment CREATE to both webhooks,
    a Pod CREATE from its ReplicaSet to both; each body with a placeholder uid."""
    deployment = admission_review(example("pause-gang-deployment.yaml"), uid=UID)
    pod = json.loads((EXAMPLES / "admission-review-pod-from-replicaset.json").read_text())
    pod["request"]["uid"] = UID
    bodies = [json.dumps(deployment).encode(), json.dumps(pod).encode()]
    return [(path, body) for body in bodies for path in ("/mutate", "/validate")]


async def call(client: KeepAliveClient, templates: list[tuple[str, bytes]], n: int) -> None:
    """Webhook call number ``n`` (its own uid); a failure is counted in ``client.failed``."""
    path, body = templates[n % len(templates)]
    uid = UID.replace("@@@@@@@@@@@@", f"{n:012x}")
    try:
        await client.post(path, body.replace(UID.encode(), uid.encode()), uid)
    except CallFailed:
        pass


async def call_without_pause(client: KeepAliveClient, templates: list[tuple[str, bytes]], first: int, step: int,
                             until: asyncio.Event) -> None:
    """One of kube-apiserver's request loops: the next review as soon as the last is answered (or failed)."""
    n = first
    while not until.is_set():
        await call(client, templates, n)
        n += step


async def test_sigterm_to_a_replica_under_continuous_keep_alive_posts_fails_no_webhook_call(tmp_path):
    paths = write_development_certificates(tmp_path)
    ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    templates = review_templates()
    async with FakeKubeAPI() as fake:
        args = ("--cert-mode", "files", "--tls-cert-file", str(paths["tls.crt"]), "--tls-key-file",
                str(paths["tls.key"]), "--api-server", fake.url, "--no-controller", "--shutdown-delay", "2")
        (first, first_port), (second, second_port) = await asyncio.gather(start_serve(*args), start_serve(*args))
        logs = ""
        try:
            await asyncio.gather(wait_ready(f"https://127.0.0.1:{first_port}", ctx, first),
                                 wait_ready(f"https://127.0.0.1:{second_port}", ctx, second))
            backends = [Backend("127.0.0.1", first_port), Backend("127.0.0.1", second_port)]
            async with ReadinessBalancer(backends, ctx, period=0.5) as balancer:
                busy = KeepAliveClient("127.0.0.1", balancer.port, ctx, timeout=10)
                idle = KeepAliveClient("127.0.0.1", balancer.port, ctx, timeout=10)  # a second kube-apiserver
                # Bursts fill the pools over both replicas (the balancer alternates): the busy one's 6 loops then
                # keep reusing the connections returned last; the idle one sends nothing until the restart is over,
                # so its 4 connections to the first replica sit idle through the whole shutdown delay.
                await asyncio.gather(*(call(busy, templates, n) for n in range(12)))
                await asyncio.gather(*(call(idle, templates, 50 + n) for n in range(8)))
                assert busy.dials == 12 and idle.dials == 8 and backends[0].connections == 10
                until = asyncio.Event()
                loops = [asyncio.create_task(call_without_pause(busy, templates, 100 + n, 6, until))
                         for n in range(6)]
                try:
                    await eventually(lambda: busy.answered >= 200, timeout=30)
                    first.send_signal(signal.SIGTERM)
                    await asyncio.wait_for(first.wait(), 20)
                    answered = busy.answered
                    await eventually(lambda: busy.answered >= answered + 100, timeout=30)  # the other one serves
                    await asyncio.gather(*(call(idle, templates, 60 + n) for n in range(8)))  # 8 at once: whole pool
                finally:
                    until.set()
                    await asyncio.gather(*loops)
                    busy.close()
                    idle.close()
        finally:
            logs = await stop(first)
            await stop(second)
    stopped = next((line for line in logs.splitlines() if "listener stopped" in line), "")
    print(f"calls answered {busy.answered + idle.answered}, failed {len(busy.failed) + len(idle.failed)}; "
          f"busy pool: {busy.dials} dials, {busy.closed_by_server} answers with Connection: close; idle pool: "
          f"{idle.skipped_broken} connections found closed; {stopped.split('admit.serve')[-1].strip(': ')}")
    failed = busy.failed + idle.failed
    assert failed == [], f"{len(failed)} of {busy.answered + idle.answered + len(failed)} calls failed: " \
                         f"{failed[:5]}\n{logs}"
    assert first.returncode == 0, logs
    # The connections in use were closed by answers saying so; the ones left idle were closed once quiet, and the
    # idle client saw it before writing on them; nothing was left to close under a request.
    assert busy.closed_by_server >= 1, logs
    assert idle.skipped_broken == 4 and idle.dials == 12, logs
    assert "0 connection(s) closed at the end of the drain, 0 request(s) unfinished" in logs, logs


def test_the_restart_benchmark_restarts_each_replica_and_counts_failed_calls_per_thousand(tmp_path):
    out = tmp_path / "restart.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.restart_bench", "--restarts", "1", "--clients", "1", "--loops", "2",
         "--burst", "3", "--burst-every", "0.5", "--shutdown-delay", "1", "--pause", "0.5", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,  # from the checkout's root, as docs/ run it
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert [r["replica"] for r in result["restarts"]] == ["admit-0", "admit-1"]
    assert all(r["exit_code"] == 0 and r["exit_seconds"] >= 1 for r in result["restarts"])
    assert result["calls"] > 0 and result["failed"] == 0 and result["failed_per_thousand"] == 0.0
    assert result["answers_with_connection_close"] >= 1  # each stopping replica told its clients to move
    assert "failed 0:" in proc.stdout and "per thousand" in proc.stdout
