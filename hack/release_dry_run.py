#!/usr/bin/env python3
"""Release dry run: build, on this machine, every artifact a release publishes (.github/workflows/release.yml), and
check each one; nothing is pushed or published. .ci/run runs it.

    python hack/release_dry_run.py [--out DIR]

Artifacts, and what is checked:

- wheel and sdist (``python -m build --no-isolation``: ``build``, ``setuptools>=77`` and ``wheel`` come with the
  test extras): named for the version, their metadata say name, version, license and Python, the wheel holds every
  module of admit/ and nothing else, the ``admit`` command, the license file; the sdist holds what building the
  wheel needs.
- the chart package (``hack/release.py package``): ``admit-<version>.tgz`` whose Chart.yaml has the version as
  ``version`` and ``appVersion``, with its values schema.
- the plain manifest (``hack/release.py manifest``): equal to deploy/admit.yaml, deploying the image of the version.
- the image tarball (``hack/build-image.sh`` with ``TARBALL``), where docker or podman is on PATH: an image archive
  (``manifest.json``) tagged with the version. Without an engine it is reported as not built (and why).

Exit 0: every artifact this machine can build was built and passed; 1: a check failed (one line per problem);
2: a tool it needs is missing (one line naming it). Without ``--out`` the artifacts go to a temporary folder that is
removed at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))

import release  # noqa: E402  (hack/release.py: version, render_manifest)

IMAGE = "ghcr.io/admit-dev/admit"


class Missing(Exception):
    """A tool the dry run needs is not installed; ``str(e)`` says which and how to get it."""


def _metadata(text: str) -> dict[str, str]:
    return dict(Parser().parsestr(text).items())


def check_wheel(path: Path, version: str) -> list[str]:
    """Problems of the wheel at ``path`` (empty: none)."""
    problems = []
    if path.name != f"admit-{version}-py3-none-any.whl":
        problems.append(f"{path.name}: not named admit-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        info = f"admit-{version}.dist-info"
        meta = _metadata(z.read(f"{info}/METADATA").decode()) if f"{info}/METADATA" in names else {}
        entry_points = z.read(f"{info}/entry_points.txt").decode() if f"{info}/entry_points.txt" in names else ""
    expected = {"Name": "admit", "Version": version, "License-Expression": "Apache-2.0", "Requires-Python": ">=3.11"}
    for key, value in expected.items():
        if meta.get(key) != value:
            problems.append(f"{path.name}: METADATA {key} is {meta.get(key)!r}, not {value!r}")
    if "admit = admit.cli:main" not in entry_points:
        problems.append(f"{path.name}: no `admit` command (entry_points.txt: admit = admit.cli:main)")
    if f"{info}/licenses/LICENSE" not in names:
        problems.append(f"{path.name}: no {info}/licenses/LICENSE")
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "admit").rglob("*.py") if "__pycache__" not in p.parts}
    packaged = {n for n in names if n.endswith(".py")}
    if modules - packaged:
        problems.append(f"{path.name}: modules missing: {', '.join(sorted(modules - packaged)[:5])}")
    if packaged - modules:
        problems.append(f"{path.name}: files that are not admit's modules: {', '.join(sorted(packaged - modules)[:5])}")
    return problems


def check_sdist(path: Path, version: str) -> list[str]:
    """Problems of the sdist at ``path``."""
    problems = []
    if path.name != f"admit-{version}.tar.gz":
        problems.append(f"{path.name}: not named admit-{version}.tar.gz")
    top = f"admit-{version}"
    with tarfile.open(path) as t:
        names = set(t.getnames())
        member = t.extractfile(f"{top}/PKG-INFO") if f"{top}/PKG-INFO" in names else None
        meta = _metadata(member.read().decode()) if member else {}
    if meta.get("Version") != version:
        problems.append(f"{path.name}: PKG-INFO Version is {meta.get('Version')!r}, not {version!r}")
    for needed in ("pyproject.toml", "README.md", "LICENSE", "admit/__init__.py", "admit/cli/__init__.py"):
        if f"{top}/{needed}" not in names:
            problems.append(f"{path.name}: {needed} is missing")
    return problems


def check_chart(path: Path, version: str) -> list[str]:
    """Problems of the chart package at ``path``."""
    import yaml

    problems = []
    if path.name != f"admit-{version}.tgz":
        problems.append(f"{path.name}: not named admit-{version}.tgz")
    with tarfile.open(path) as t:
        names = set(t.getnames())
        member = t.extractfile("admit/Chart.yaml") if "admit/Chart.yaml" in names else None
        chart = yaml.safe_load(member.read()) if member else {}
    for key in ("version", "appVersion"):
        if str(chart.get(key)) != version:
            problems.append(f"{path.name}: Chart.yaml {key} is {chart.get(key)!r}, not {version!r}")
    for needed in ("values.yaml", "values.schema.json", "templates/deployment.yaml", "templates/rbac.yaml"):
        if f"admit/{needed}" not in names:
            problems.append(f"{path.name}: {needed} is missing")
    return problems


def check_manifest(path: Path, version: str) -> list[str]:
    """Problems of the plain manifest at ``path``."""
    import yaml

    problems = []
    text = path.read_text()
    if text != (ROOT / "deploy" / "admit.yaml").read_text():
        problems.append(f"{path.name}: differs from deploy/admit.yaml (run python hack/release.py manifest -o "
                        "deploy/admit.yaml)")
    images = [c["image"] for d in yaml.safe_load_all(text) if d and d.get("kind") == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "admit"]
    if images != [f"{IMAGE}:{version}"]:
        problems.append(f"{path.name}: deploys {images}, not {IMAGE}:{version}")
    return problems


def check_image_tarball(path: Path, version: str) -> list[str]:
    """Problems of the image archive at ``path`` (``docker save`` / ``podman save --format docker-archive``)."""
    try:
        with tarfile.open(path) as t:
            member = t.extractfile("manifest.json")
            manifest = json.load(io.TextIOWrapper(member)) if member else []
    except (tarfile.TarError, KeyError, ValueError) as e:
        return [f"{path.name}: not an image archive ({e})"]
    tags = [tag for entry in manifest for tag in entry.get("RepoTags") or []]
    if not any(tag.endswith(f":{version}") for tag in tags):
        return [f"{path.name}: no image tagged {version} (tags: {tags})"]
    return []


def _run(command: list[str], **kw) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, **kw)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"`{' '.join(command)}` exited {proc.returncode}: {tail[0]}")
    return proc.stdout


def _python_packages(out: Path) -> tuple[Path, Path]:
    for module in ("build", "setuptools", "wheel"):
        if importlib.util.find_spec(module) is None:
            raise Missing(f"{module} is not installed: pip install -e '.[test]' (it brings build, setuptools>=77 "
                          "and wheel)")
    import setuptools
    if int(setuptools.__version__.split(".")[0]) < 77:
        raise Missing(f"setuptools {setuptools.__version__} is older than 77 (PEP 639 license metadata): "
                      "pip install -e '.[test]'")
    _run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)])
    version = release.version()
    return out / f"admit-{version}-py3-none-any.whl", out / f"admit-{version}.tar.gz"


def _engine() -> tuple[str | None, str]:
    """The container engine that can build here (its ``info`` answers), else ``(None, why not)``: a docker client
    without a daemon it can reach builds nothing."""
    found = [e for e in ("docker", "podman") if shutil.which(e)]
    for engine in found:
        try:
            if subprocess.run([engine, "info"], capture_output=True, timeout=30).returncode == 0:
                return engine, ""
        except subprocess.TimeoutExpired:
            pass
    if not found:
        return None, "no docker or podman on PATH (hack/build-image.sh needs one)"
    return None, f"{' and '.join(found)} on PATH, but `{found[0]} info` fails (no daemon it can reach)"


def dry_run(out: Path) -> tuple[list[str], list[str]]:
    """Build and check every artifact into ``out``; ``(lines to print, problems)``.

    Raises:
        Missing: build, setuptools>=77, wheel or helm-python-sdk is not installed.
    """
    version = release.version()
    lines, problems = [], []

    def report(name: str, path: Path, found: list[str]) -> None:
        problems.extend(found)
        size = path.stat().st_size if path.exists() else 0
        lines.append(f"{'ok  ' if not found else 'FAIL'} {name}: {path.name} ({size / 1024:.0f} KiB)")

    wheel_path, sdist_path = _python_packages(out)
    for name, path, check in (("wheel", wheel_path, check_wheel), ("sdist", sdist_path, check_sdist)):
        report(name, path, check(path, version) if path.exists() else [f"{path.name} was not built"])
    if importlib.util.find_spec("helm_python") is None:
        raise Missing("helm-python-sdk is not installed: pip install -e '.[test]'")
    chart = Path(_run([sys.executable, str(ROOT / "hack" / "release.py"), "package", "--destination",
                       str(out)]).strip())
    report("chart", chart, check_chart(chart, version))
    manifest = out / "admit.yaml"
    _run([sys.executable, str(ROOT / "hack" / "release.py"), "manifest", "-o", str(manifest)])
    report("plain manifest", manifest, check_manifest(manifest, version))
    engine, why = _engine()
    if engine is None:
        lines.append(f"skip image tarball: {why}")
    else:
        tarball = out / f"admit-image-{version}.tar"
        _run(["bash", str(ROOT / "hack" / "build-image.sh")],
             env={**os.environ, "TARBALL": str(tarball), "ENGINE": engine, "IMAGE": IMAGE},
             timeout=1800)
        report("image tarball", tarball, check_image_tarball(tarball, version))
    return lines, problems


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One line, not argparse's usage block (exit 2, as argparse)."""
        self.exit(2, f"{self.prog}: {message} (--help shows the usage)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="hack/release_dry_run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="keep the artifacts in this folder (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    if args.out:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            print(f"hack/release_dry_run.py: --out {out} is a file, not a folder", file=sys.stderr)
            return 2
        out.mkdir(parents=True, exist_ok=True)
        context = None
    else:
        context = tempfile.TemporaryDirectory(prefix="admit-dry-run-")
        out = Path(context.name)
    scratch = [p for p in (ROOT / "build", ROOT / "admit.egg-info") if not p.exists()]  # setuptools makes them
    try:
        lines, problems = dry_run(out)
    except Missing as e:
        print(f"hack/release_dry_run.py: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"hack/release_dry_run.py: {e}", file=sys.stderr)
        return 1
    finally:
        for folder in scratch:  # only what this run made
            shutil.rmtree(folder, ignore_errors=True)
        if context is not None:
            context.cleanup()
    print(f"release dry run of admit {release.version()}" + (f" in {out}" if args.out else ""))
    for line in lines:
        print("  " + line)
    for problem in problems:
        print(f"hack/release_dry_run.py: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
