#!/usr/bin/env python3
"""Rolling restarts of admit under continuous webhook calls: how many calls fail, per thousand.

Run from the root of a checkout after ``pip install .`` (or ``pip install '.[fast]'``)::

    python -m bench.restart_bench                 # 3 restarts of each of 2 replicas, about 2 minutes
    python -m bench.restart_bench --restarts 1    # about 40 s

What it does:

1. writes a development CA and serving pair (``admit certs``), starts the fake Kubernetes API
   (``python -m admit.testing.fake_kube``) and two ``admit serve`` replicas (``--no-controller``, the default
   ``--shutdown-delay`` of 5 s unless given);
2. puts them behind ``tests.support.balancer.ReadinessBalancer`` on loopback: new connections go to the replicas
   whose ``GET /readyz`` answered 200 at the last check (every 500 ms, as a Service's endpoints follow readiness);
   established connections stay with their replica (as conntrack keeps them behind a Service's virtual IP);
3. drives it with ``--clients`` clients shaped like kube-apiserver's webhook client
   (``tests.support.webhook_client.KeepAliveClient``: a Go-like keep-alive pool, no retry of a failed POST), each
   with ``--loops`` loops that send the next AdmissionReview as soon as the last is answered: gang Deployment
   CREATEs (``/mutate`` then ``/validate``, which creates the PodGroup) and Pod CREATEs of a known gang
   (``bench/reviews.py``); and every ``--burst-every`` seconds a burst of 1 to ``--burst`` admissions at once, so
   that each pool also holds connections that only the larger bursts reach, as kube-apiserver's does;
4. restarts the replicas in turn, ``--restarts`` times each, as a rolling update with ``maxSurge: 1,
   maxUnavailable: 0`` does: SIGTERM, wait for the exit, start it again on the same port, wait until the balancer
   sees it ready, wait ``--pause`` seconds;
5. prints the calls answered and failed, failed per thousand, the reasons, and per restart the time to exit and
   what the replica's listener closed. ``--json FILE`` writes every figure.

A SIGKILL is not measured: the calls in flight on a killed replica are lost whatever the server does.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.processes import FakeAPI, child_env, free_port, write_certs
from bench.reviews import MIXES, fill, uid_for
# test support code of the checkout (not part of the wheel): the balancer and kube-apiserver's webhook client
from tests.support.balancer import Backend, ReadinessBalancer
from tests.support.webhook_client import CallFailed, KeepAliveClient

ADMISSIONS = [MIXES["deployment"].steps, MIXES["known-group"].steps]


class Replica:
    """One ``admit serve`` process on a fixed port, restarted in place."""

    def __init__(self, name: str, port: int, args: list[str], workdir: Path) -> None:
        self.name, self.port, self.args, self.workdir = name, port, args, workdir
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}-{self.starts}.log"

    async def start(self) -> None:
        self.starts += 1
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "admit.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args,
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env())

    async def sigterm(self, timeout: float = 60.0) -> tuple[float, int | None, str]:
        """SIGTERM and wait for the exit: (seconds to exit, exit code, the listener's closing line)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
        took = time.monotonic() - started
        line = next((x for x in self.log.read_text().splitlines() if "listener stopped" in x), "")
        return took, code, line.split("listener stopped", 1)[-1].strip(" :")


async def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def loop_calls(client: KeepAliveClient, first: int, step: int, until: asyncio.Event) -> None:
    """One of kube-apiserver's request loops: admission ``n`` (a gang Deployment or a Pod of a known gang: each to
    ``/mutate`` then ``/validate``, with the same uid), the next call as soon as the last is answered (or failed)."""
    n = first
    while not until.is_set():
        await one_admission(client, n)
        n += step


async def bursts(client: KeepAliveClient, first: int, largest: int, every: float, seed: int,
                 until: asyncio.Event) -> None:
    """Every ``every`` seconds, 1 to ``largest`` admissions at once (a Job creating its pods, a burst of applies;
    the size drawn from ``random.Random(seed)``): the pool grows past what the loops use, and only the larger
    bursts reach its bottom, so some connections sit idle for many seconds, as in kube-apiserver's pool."""
    rng = random.Random(seed)
    n = first
    while not until.is_set():
        await asyncio.sleep(every)
        size = rng.randint(1, largest)
        await asyncio.gather(*(one_admission(client, n + i) for i in range(size)))
        n += size


async def one_admission(client: KeepAliveClient, n: int) -> None:
    uid = uid_for(n).decode()
    for path, parts in ADMISSIONS[n % 2]:
        try:
            await client.post(path, fill(parts, n), uid)
        except CallFailed:
            return  # kube-apiserver refuses the object: no further webhook is called


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    certs = workdir / "certs"
    ctx = write_certs(certs)
    fake = FakeAPI(workdir / "fake-api.log")
    try:
        serve_args = ["--cert-mode", "files", "--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file",
                      str(certs / "tls.key"), "--api-server", fake.url, "--no-controller",
                      "--shutdown-delay", f"{args.shutdown_delay:g}"]
        replicas = [Replica(f"admit-{i}", free_port(), serve_args, workdir) for i in range(2)]
        backends = [Backend("127.0.0.1", r.port) for r in replicas]
        for r in replicas:
            await r.start()
        async with ReadinessBalancer(backends, ctx, period=args.check_period) as balancer:
            await wait_until(lambda: all(b.ready for b in backends), 60, "both replicas ready")
            clients = [KeepAliveClient("127.0.0.1", balancer.port, ctx, timeout=args.timeout)
                       for _ in range(args.clients)]
            until = asyncio.Event()
            loops = [asyncio.create_task(loop_calls(c, 1_000_000 * i + j, args.loops, until))
                     for i, c in enumerate(clients) for j in range(args.loops)]
            if args.burst:
                loops += [asyncio.create_task(bursts(c, 1_000_000 * i + 500_000, args.burst, args.burst_every,
                                                     args.seed + i, until))
                          for i, c in enumerate(clients)]
            restarts = []
            started = time.monotonic()
            try:
                await asyncio.sleep(args.pause)
                for round_ in range(args.restarts):
                    for r, backend in zip(replicas, backends):
                        answered = sum(c.answered for c in clients)
                        failed = sum(len(c.failed) for c in clients)
                        signalled = time.monotonic()
                        took, code, closing = await r.sigterm()
                        await r.start()
                        await wait_until(lambda: backend.ready, 60, f"{r.name} ready again")
                        ready_again = time.monotonic() - signalled
                        await asyncio.sleep(args.pause)
                        restarts.append({
                            "replica": r.name, "round": round_ + 1, "exit_seconds": round(took, 2), "exit_code": code,
                            "listener": closing,
                            "calls": sum(c.answered for c in clients) - answered,
                            "failed": sum(len(c.failed) for c in clients) - failed,
                            "ready_again_seconds": round(ready_again, 2),
                        })
                        print(f"  restart {len(restarts)}: {r.name} exited {code} in {took:.1f}s ({closing}); "
                              f"failed {restarts[-1]['failed']} of {restarts[-1]['calls']} calls", flush=True)
            finally:
                until.set()
                await asyncio.gather(*loops)
                for c in clients:
                    c.close()
            seconds = time.monotonic() - started
        for r in replicas:
            await r.sigterm()
    finally:
        fake.stop()
    answered = sum(c.answered for c in clients)
    failures = [f for c in clients for f in c.failed]
    total = answered + len(failures)
    return {
        "meta": {"replicas": 2, "clients": args.clients, "loops_per_client": args.loops, "largest_burst": args.burst,
                 "burst_every": args.burst_every, "seed": args.seed,
                 "shutdown_delay": args.shutdown_delay, "check_period": args.check_period, "pause": args.pause},
        "seconds": round(seconds, 1),
        "calls": total,
        "calls_per_second": round(total / seconds, 1),
        "failed": len(failures),
        "failed_per_thousand": round(1000 * len(failures) / total, 3) if total else 0.0,
        "reasons": dict(collections.Counter(reason for _, reason in failures).most_common(5)),
        "restarts": restarts,
        "dials": sum(c.dials for c in clients),
        "answers_with_connection_close": sum(c.closed_by_server for c in clients),
        "idle_connections_found_closed": sum(c.skipped_broken for c in clients),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--restarts", type=int, default=3, help="restarts of each replica (default 3)")
    p.add_argument("--clients", type=int, default=2, help="kube-apiserver-like clients, one pool each (default 2)")
    p.add_argument("--loops", type=int, default=3, help="request loops per client (default 3)")
    p.add_argument("--burst", type=int, default=12, help="largest burst: every --burst-every seconds a client also "
                                                        "sends 1 to this many admissions at once (default 12; 0: none)")
    p.add_argument("--burst-every", type=float, default=1.0, help="seconds between bursts (default 1)")
    p.add_argument("--seed", type=int, default=1, help="seed of the burst sizes (default 1)")
    p.add_argument("--shutdown-delay", type=float, default=5.0, help="admit serve --shutdown-delay (default 5)")
    p.add_argument("--check-period", type=float, default=0.5, help="seconds between /readyz checks (default 0.5)")
    p.add_argument("--pause", type=float, default=3.0, help="seconds of calls before the first restart and after "
                                                           "each replica is ready again (default 3)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per webhook call (default 10)")
    p.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (certs, server logs)")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="admit-restart-bench-"))
    print(f"2 replicas, {args.restarts} restart(s) each, {args.clients} client(s) x {args.loops} loop(s) + bursts "
          f"of up to {args.burst} every {args.burst_every:g}s, "
          f"--shutdown-delay {args.shutdown_delay:g}; logs in {workdir}", flush=True)
    result = asyncio.run(run(args, workdir))
    print(f"calls {result['calls']} in {result['seconds']}s ({result['calls_per_second']}/s), failed "
          f"{result['failed']}: {result['failed_per_thousand']} per thousand")
    print(f"dials {result['dials']}, answers with Connection: close {result['answers_with_connection_close']}, "
          f"idle connections found closed {result['idle_connections_found_closed']}")
    for reason, count in result["reasons"].items():
        print(f"  {count} x {reason}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
