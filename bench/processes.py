"""The processes a benchmark runs and measures: ``admit serve`` and the baseline as HTTPS servers, the fake
Kubernetes API, the development certificates; and what ``/proc`` and ``/metrics`` say about them.

Children run with the checkout on their ``PYTHONPATH`` (after whatever the caller's already has), so ``python -m
admit.cli``, ``python -m admit.testing.fake_kube`` and ``python -m bench.baseline`` start the same code as the
benchmark that started them, from whatever directory it was run in.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parent.parent
"""The repository checkout that holds ``bench/`` (and ``admit/`` and ``tests/`` beside it)."""

MB = 1024 * 1024


def child_env() -> dict[str, str]:
    """This process's environment with :data:`CHECKOUT` last on ``PYTHONPATH`` (unless already on it)."""
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(CHECKOUT) not in parts:
        env["PYTHONPATH"] = os.pathsep.join([*parts, str(CHECKOUT)])
    return env


# --------------------------------------------------------------------------------------------------------------
# Event loop: the same choice as ``admit serve``
# --------------------------------------------------------------------------------------------------------------


def event_loop_name() -> str:
    """``"uvloop"`` when admit serve runs on uvloop (installed and not disabled), else ``"asyncio"``."""
    try:
        from admit.eventloop import loop_name
    except ImportError:
        return "asyncio"
    return loop_name()


def run(coro: Any) -> Any:
    """Run ``coro`` on the event loop admit serve would use."""
    try:
        from admit.eventloop import run as admit_run
    except ImportError:
        return asyncio.run(coro)
    return admit_run(coro)

# --------------------------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------------------------


def write_certs(directory: Path) -> ssl.SSLContext:
    """Write a development CA and serving pair into ``directory`` (``admit certs --dir``); returns a client context
    that trusts the CA."""
    subprocess.run([sys.executable, "-m", "admit.cli", "certs", "--dir", str(directory)], check=True,
                   stdout=subprocess.DEVNULL, env=child_env())
    return ssl.create_default_context(cafile=str(directory / "ca.crt"))


# Processes
# --------------------------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_memory(pid: int) -> dict[str, float]:
    """``{"rss": VmRSS, "hwm": VmHWM}`` of process ``pid`` in MiB (``/proc/<pid>/status``)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[2:5].lower()] = int(line.split()[1]) / 1024
    return out


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A server under test: a subprocess serving HTTPS on 127.0.0.1:``port``."""

    def __init__(self, name: str, cmd: list[str], port: int, log: Path) -> None:
        self.name = name
        self.port = port
        self.log = log
        self.proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=child_env())
        self.requests = 0  # requests this driver sent and got answered

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, ctx: ssl.SSLContext, timeout: float = 30.0) -> None:
        """Wait until ``GET /healthz`` answers 200 (seconds ``timeout``); raise with the server's log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz", context=ctx, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit(f"{self.name} did not start; its output:\n{self.log.read_text()}")

    def stop(self) -> int | None:
        """SIGTERM, then wait (kill after 10 s); returns the exit code."""
        return stop_process(self.proc)


def stop_process(proc: subprocess.Popen) -> int | None:
    """SIGTERM ``proc``, wait up to 10 s, then kill; returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class FakeAPI:
    """``python -m admit.testing.fake_kube`` in a subprocess; its ``/_fake/stats`` counts API requests."""

    def __init__(self, log: Path, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "admit.testing.fake_kube", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=log.open("wb"), stdin=subprocess.DEVNULL,
                                     env=child_env())
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.startswith("http://"):
            self.stop()
            raise SystemExit(f"fake Kubernetes API did not start: {line!r} {log.read_text()}")
        self.url = line

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def total(self) -> int:
        """API requests received so far (``/_fake/*`` not counted)."""
        return int(self._call("GET", "/_fake/stats")["total"])

    def counts(self) -> dict[str, int]:
        """Requests by ``"VERB plural"``."""
        return dict(self._call("GET", "/_fake/stats")["counts"])

    def store(self, obj: dict[str, Any]) -> None:
        """Create ``obj`` (a namespaced apps/v1 object) through the REST API."""
        self._call("POST", f"/apis/apps/v1/namespaces/{obj['metadata']['namespace']}/deployments", obj)

    def stop(self) -> None:
        """SIGTERM, then wait (kill after 10 s)."""
        stop_process(self.proc)


# --------------------------------------------------------------------------------------------------------------


def scrape_metrics(port: int) -> dict[str, float]:
    """``controller_runtime_webhook_requests_total`` by ``webhook`` and ``code`` from admit's ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "controller_runtime_webhook_requests_total":
                out[f"{sample.labels['webhook']} {sample.labels['code']}"] = sample.value
    return out

