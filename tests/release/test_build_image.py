"""hack/build-image.sh with the container engines a user has: docker with or without the buildx plugin, or podman.

No engine runs on the test machines, so each test puts a fake ``docker`` or ``podman`` on PATH that records its
arguments (one JSON list per call) and answers as the real one does for what the script asks: ``docker buildx
version`` fails without the plugin (docker then says ``docker: 'buildx' is not a docker command``), ``save`` writes
the archive. What is checked is the command line each engine receives.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import admit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "build-image.sh"
VERSION = admit.__version__

FAKE = """#!/usr/bin/env bash
# a fake {name}: records its arguments, answers like the real one for what hack/build-image.sh asks
python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@" >> "{log}"
if [ "$1" = buildx ] && [ "{buildx}" != yes ]; then
  echo "docker: 'buildx' is not a docker command." >&2; exit 1
fi
if [ "$1" = image ] && [ "$2" = inspect ]; then
  if [ -n "${{FAKE_IDS:-}}" ]; then head -1 "$FAKE_IDS"; sed -i 1d "$FAKE_IDS"; else echo sha256:0123abcd; fi
  exit 0
fi
for ((i = 1; i <= $#; i++)); do
  if [ "${{!i}}" = --output ] && [ "$1" = save ]; then j=$((i + 1)); echo archive > "${{!j}}"; fi
done
exit 0
"""


def engines(tmp_path: Path, *names: str, buildx: bool = False) -> tuple[dict[str, str], Path]:
    """A PATH with fake engines ``names`` (and python3, bash, coreutils, nothing else); the log of their calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "calls.jsonl"
    for name in names:
        fake = bin_dir / name
        fake.write_text(FAKE.format(name=name, log=log, buildx="yes" if buildx else "no"))
        fake.chmod(0o755)
    python = bin_dir / "python3"
    if not python.exists():
        python.symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("IMAGE", "ENGINE", "PLATFORMS", "PUSH", "TARBALL",
                                                             "REPRODUCIBLE")}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    return env, log


def run(env: dict[str, str], **settings: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], env={**env, **settings}, capture_output=True, text=True, timeout=60)


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_plain_docker_without_buildx_builds_this_platform_with_docker_build_and_the_version_label(tmp_path):
    env, log = engines(tmp_path, "docker")
    proc = run(env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"ghcr.io/admit-dev/admit:{VERSION}"
    assert calls(log) == [
        ["buildx", "version"],
        ["build", "--build-arg", "SOURCE_DATE_EPOCH=1700000000", "--label", f"org.opencontainers.image.version={VERSION}", "--tag",
         f"ghcr.io/admit-dev/admit:{VERSION}", "."],
    ]


def test_one_named_platform_goes_to_plain_docker_build_too(tmp_path):
    env, log = engines(tmp_path, "docker")
    assert run(env, PLATFORMS="linux/arm64", IMAGE="admit").returncode == 0
    assert calls(log)[-1] == ["build", "--platform", "linux/arm64", "--build-arg", "SOURCE_DATE_EPOCH=1700000000", "--label",
                              f"org.opencontainers.image.version={VERSION}", "--tag", f"admit:{VERSION}", "."]


def test_docker_with_buildx_loads_a_local_build_and_pushes_both_platforms_for_a_release(tmp_path):
    env, log = engines(tmp_path, "docker", buildx=True)
    assert run(env, IMAGE="registry.example.com:5000/team/admit").returncode == 0
    ref = f"registry.example.com:5000/team/admit:{VERSION}"
    assert calls(log)[-1] == ["buildx", "build", "--build-arg", "SOURCE_DATE_EPOCH=1700000000", "--label",
                              f"org.opencontainers.image.version={VERSION}", "--tag", ref, "--output",
                              "type=docker,rewrite-timestamp=true", "."]
    assert run(env, PUSH="true", IMAGE="ghcr.io/admit-dev/admit").returncode == 0
    assert calls(log)[-1] == ["buildx", "build", "--platform", "linux/amd64,linux/arm64", "--build-arg", "SOURCE_DATE_EPOCH=1700000000", "--label",
                              f"org.opencontainers.image.version={VERSION}", "--tag",
                              f"ghcr.io/admit-dev/admit:{VERSION}", "--output",
                              "type=image,push=true,rewrite-timestamp=true", "."]


def test_several_platforms_without_buildx_fail_with_one_line_naming_buildx_and_build_nothing(tmp_path):
    env, log = engines(tmp_path, "docker")
    proc = run(env, PUSH="true")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "needs docker buildx" in proc.stderr and "ENGINE=podman" in proc.stderr
    assert not any(c[0] == "build" or c[:2] == ["buildx", "build"] for c in calls(log))


def test_podman_alone_builds_locally_and_a_release_as_a_manifest_list_pushed_with_all_its_images(tmp_path):
    env, log = engines(tmp_path, "podman")
    proc = run(env, IMAGE="quay.io/team/admit")
    assert proc.returncode == 0, proc.stderr
    ref = f"quay.io/team/admit:{VERSION}"
    assert calls(log) == [["build", "--build-arg", "SOURCE_DATE_EPOCH=1700000000", "--label", f"org.opencontainers.image.version={VERSION}", "--tag",
                           ref, "."]]
    log.unlink()
    assert run(env, IMAGE="quay.io/team/admit", PUSH="true").returncode == 0
    assert calls(log) == [
        ["build", "--platform", "linux/amd64,linux/arm64", "--build-arg", "SOURCE_DATE_EPOCH=1700000000", "--label",
         f"org.opencontainers.image.version={VERSION}", "--manifest", ref, "."],
        ["manifest", "push", "--all", ref, f"docker://{ref}"],
    ]


def test_engine_picks_podman_where_both_are_installed(tmp_path):
    env, log = engines(tmp_path, "docker", "podman")
    assert run(env, ENGINE="podman").returncode == 0
    assert calls(log)[0][0] == "build"  # podman's: docker would have been asked about buildx first


def test_a_tarball_is_the_saved_local_image(tmp_path):
    env, log = engines(tmp_path, "docker")
    tarball = tmp_path / "dist" / "admit-image.tar"
    assert run(env, TARBALL=str(tarball), IMAGE="admit").returncode == 0
    assert calls(log)[-1] == ["save", "--output", str(tarball), f"admit:{VERSION}"]
    assert tarball.read_text() == "archive\n"


@pytest.mark.parametrize("settings, words", [
    ({}, "no container engine: install docker or podman"),
    ({"ENGINE": "nerdctl"}, "ENGINE must be docker or podman"),
    ({"PUSH": "yes"}, "PUSH must be true or false"),
    ({"IMAGE": "ghcr.io/admit-dev/admit:latest"}, "carries a tag or digest"),
    ({"IMAGE": "admit@sha256:0123"}, "carries a tag or digest"),
    ({"TARBALL": "x.tar", "PUSH": "true"}, "TARBALL saves a local one-platform build"),
    ({"SOURCE_DATE_EPOCH": "yesterday"}, "SOURCE_DATE_EPOCH must be whole seconds"),
    ({"REPRODUCIBLE": "yes"}, "REPRODUCIBLE must be check"),
    ({"REPRODUCIBLE": "check", "PUSH": "true"}, "REPRODUCIBLE=check builds this machine's platform twice"),
])
def test_every_mistake_is_one_line_and_exit_2(tmp_path, settings, words):
    env, log = engines(tmp_path, *(() if not settings else ("docker",)))
    proc = run(env, **settings)
    assert proc.returncode == 2, proc
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("hack/build-image.sh: ") and words in proc.stderr
    assert "Traceback" not in proc.stderr and not any(c[0] in ("build", "buildx") and len(c) > 2 for c in calls(log))


def test_the_image_is_small_and_runs_as_non_root():
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert len(stages) == 2 and "ARG PYTHON_IMAGE=python:3.11-slim" in dockerfile  # slim base, builder left behind
    runtime = dockerfile.split("\n" + stages[1] + "\n", 1)[1]
    assert "COPY --from=builder /opt/venv /opt/venv" in runtime and "pip install" not in runtime
    assert "USER 65532:65532" in runtime
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignored[1:5] == ["*", "!pyproject.toml", "!README.md", "!admit/"]  # the context: the package, nothing else


def test_the_kind_walk_through_goes_from_a_checkout_to_a_running_gang_and_is_linked():
    install = (ROOT / "docs" / "install.md").read_text()
    section = install.split("### kind walk-through", 1)[1].split("\n### ", 1)[0].split("```bash", 1)[1]
    steps = ["kind create cluster", "hack/build-image.sh", "kind load docker-image",
             "helm install scheduler-plugins", "helm install admit charts/admit", "--set image.pullPolicy=Never",
             "kubectl apply -f examples/pause-gang-deployment.yaml", "admit status"]
    at = [section.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), dict(zip(steps, at))
    assert "(#kind-walk-through)" in install
    assert "docs/install.md#kind-walk-through" in (ROOT / "README.md").read_text()


def test_the_build_context_holds_the_license_and_the_lock_the_dockerfile_copies():
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert {"!LICENSE", "!requirements.lock"} <= set(ignored)  # pyproject.toml's license-files needs LICENSE
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY pyproject.toml README.md LICENSE ./" in dockerfile and "COPY requirements.lock ./" in dockerfile


def test_the_base_image_is_pinned_by_digest_and_says_how_to_refresh_it():
    dockerfile = (ROOT / "Dockerfile").read_text()
    (arg,) = [line for line in dockerfile.splitlines() if line.startswith("ARG PYTHON_IMAGE=")]
    assert re.fullmatch(r"ARG PYTHON_IMAGE=python:3\.11-slim@sha256:[0-9a-f]{64}", arg)
    assert "docker buildx imagetools inspect python:3.11-slim" in dockerfile


def test_dependencies_are_installed_from_a_lock_with_a_hash_for_every_pin():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock" in dockerfile
    assert "--no-build-isolation --no-index ." in dockerfile  # admit itself: nothing fetched beyond the lock
    lock = (ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9._-]+)==([^ \\]+)", lock, re.M)
    blocks = re.split(r"\n(?=[A-Za-z0-9._-]+==)", lock.split("\n", 6)[-1])
    assert len(pins) == len(blocks) >= 10
    assert all("--hash=sha256:" in block for block in blocks)
    pinned = {name.lower() for name, _ in pins}
    # every runtime dependency and the fast extra, and what builds admit without build isolation
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["fast"], "setuptools", "wheel"]
    for requirement in wanted:
        name = re.split(r"[<>=;\[ ]", requirement, maxsplit=1)[0].lower()
        assert name.replace("_", "-") in pinned, f"{name} is not in requirements.lock"


def test_a_reproducibility_check_builds_twice_without_cache_at_one_epoch_and_compares_the_images(tmp_path):
    env, log = engines(tmp_path, "docker", buildx=True)
    proc = run(env, REPRODUCIBLE="check", IMAGE="admit")
    assert proc.returncode == 0, proc.stderr
    builds = [c for c in calls(log) if c[:2] == ["buildx", "build"]]
    assert len(builds) == 2
    for n, build in enumerate(builds, 1):
        assert "--no-cache" in build and "SOURCE_DATE_EPOCH=1700000000" in build
        assert build[build.index("--output") + 1] == f"type=docker,name=admit:{VERSION}-repro{n},rewrite-timestamp=true"
    assert "reproducible: sha256:" in proc.stdout
    # two builds that differ fail, naming both images
    (tmp_path / "differ").mkdir()
    env, log = engines(tmp_path / "differ", "podman")
    (tmp_path / "differ" / "ids").write_text("sha256:aaa\nsha256:bbb\n")
    proc = run(env, REPRODUCIBLE="check", IMAGE="admit", FAKE_IDS=str(tmp_path / "differ" / "ids"))
    assert proc.returncode == 1 and "sha256:aaa" in proc.stderr and "sha256:bbb" in proc.stderr
    builds = [c for c in calls(log) if c[0] == "build"]
    assert all("--source-date-epoch" in b and "--rewrite-timestamp" in b and "--no-cache" in b for b in builds)


def test_the_classic_docker_builder_cannot_check_reproducibility_and_says_so(tmp_path):
    env, log = engines(tmp_path, "docker")
    proc = run(env, REPRODUCIBLE="check")
    assert proc.returncode == 2 and "needs docker buildx" in proc.stderr
