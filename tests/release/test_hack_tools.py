"""The hack/ tools on a user's mistakes: one line on stderr that says what is wrong, exit 2, never a traceback
(hack/build-image.sh's mistakes: tests/release/test_build_image.py). And the release dry run that .ci/run runs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"


def _files(tmp: Path) -> dict[str, Path]:
    files = {
        "schema": "replicaCount: two\n",            # values.schema.json: an integer
        "template": "config:\n  apiTimeoutSeconds: 9\n",  # the chart's own check: below webhook.timeoutSeconds
        "yaml": "image: [\n",
        "list": "- replicaCount: 2\n",
    }
    out = {}
    for name, text in files.items():
        out[name] = tmp / f"{name}-values.yaml"
        out[name].write_text(text)
    out["file"] = tmp / "a-file"
    out["file"].write_text("x")
    return out


MISTAKES = [
    (["release.py", "manifest", "-f", "{tmp}/missing-values.yaml"], "cannot read the values file: No such file"),
    (["release.py", "manifest", "-f", "{schema}"], "at '/replicaCount': got string, want integer"),
    (["release.py", "manifest", "-f", "{template}"], "must be lower than webhook.timeoutSeconds"),
    (["release.py", "manifest", "-f", "{yaml}"], "not YAML (line 2, column 1)"),
    (["release.py", "manifest", "-f", "{list}"], "a values file is a YAML mapping"),
    (["release.py", "manifest", "-o", "{tmp}/no/such/folder/admit.yaml"], "No such file or directory"),
    (["release.py", "package", "--destination", "{file}"], "is a file, not a folder"),
    (["release.py", "push-chart", "{tmp}/admit-0.1.0.tgz", "oci://registry.example.com/charts"],
     "no such chart archive"),
    (["release.py", "push-chart", "{file}", "https://registry.example.com/charts"], "is not oci://host/path"),
    (["release.py", "publish"], "invalid choice: 'publish'"),
    (["release.py", "manifest", "--namespace"], "expected one argument"),
    (["cli_docs.py", "--check"], "unrecognized arguments: --check"),
    (["cli_docs.py", "-o", "{tmp}/no/such/folder/cli.md"], "No such file or directory"),
    (["release_dry_run.py", "--out", "{file}"], "is a file, not a folder"),
    (["release_dry_run.py", "--push"], "unrecognized arguments: --push"),
]


@pytest.mark.parametrize("argv, words", MISTAKES, ids=[" ".join(a[:2]) + f" {i}" for i, (a, _) in enumerate(MISTAKES)])
def test_every_hack_tool_mistake_is_one_line_and_exit_2_without_a_traceback(tmp_path, argv, words):
    paths = {"tmp": tmp_path, **_files(tmp_path)}
    command = [sys.executable, str(HACK / argv[0]), *(a.format(**paths) for a in argv[1:])]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"hack/{argv[0]}") and words in proc.stderr, proc.stderr


def test_a_wrong_release_tag_is_one_line_and_exit_1():
    proc = subprocess.run([sys.executable, str(HACK / "release.py"), "version", "--tag", "v9.9.9"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "tag v9.9.9 is not v" in proc.stderr


def _has_build_tools() -> bool:
    if not all(importlib.util.find_spec(m) for m in ("build", "wheel", "setuptools", "helm_python")):
        return False
    import setuptools

    return int(setuptools.__version__.split(".")[0]) >= 77


def test_the_release_dry_run_builds_and_checks_every_artifact_this_machine_can_build(tmp_path):
    if not _has_build_tools():
        if os.environ.get("CI"):
            pytest.fail("the test extras bring build, setuptools>=77 and wheel: pip install -e '.[test]'")
        pytest.skip("build, setuptools>=77 or wheel not installed: pip install -e '.[test]'")
    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, str(HACK / "release_dry_run.py"), "--out", str(out)], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import admit

    v = admit.__version__
    for name in (f"admit-{v}-py3-none-any.whl", f"admit-{v}.tar.gz", f"admit-{v}.tgz", "admit.yaml"):
        assert (out / name).is_file(), name
        assert name in proc.stdout
    assert "image tarball" in proc.stdout  # built, or said why not


def test_the_dry_runs_checks_find_a_wheel_of_another_version_and_a_stale_manifest(tmp_path):
    import zipfile

    sys.path.insert(0, str(HACK))
    try:
        import release_dry_run as dry
    finally:
        sys.path.remove(str(HACK))
    wheel = tmp_path / "admit-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("admit-0.0.1.dist-info/METADATA", "Metadata-Version: 2.4\nName: admit\nVersion: 0.0.1\n")
        z.writestr("admit/__init__.py", "")
    problems = dry.check_wheel(wheel, "0.1.0")
    assert any("not named admit-0.1.0-py3-none-any.whl" in p for p in problems)
    assert any("METADATA Version is None" in p or "METADATA Name" in p for p in problems)
    assert any("modules missing" in p for p in problems)
    stale = tmp_path / "admit.yaml"
    stale.write_text((ROOT / "deploy" / "admit.yaml").read_text().replace("admit:0.1.0", "admit:0.0.9"))
    problems = dry.check_manifest(stale, "0.1.0")
    assert any("differs from deploy/admit.yaml" in p for p in problems) and any("0.0.9" in p for p in problems)
