"""What a release publishes, checked before any tag: one version everywhere, the plain manifest in step with the
chart, the workflows linted, the license and changelog in place.

The workflows themselves run only on GitHub; every step in them is a script of this repository (``hack/``,
``.ci/run``), and those scripts are exercised here (``hack/release.py``) or by the chart tests.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import admit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "admit"
WORKFLOWS = ROOT / ".github" / "workflows"
REGENERATE = "python hack/release.py manifest -o deploy/admit.yaml"


def _release():
    sys.path.insert(0, str(ROOT / "hack"))
    try:
        return importlib.import_module("release")
    finally:
        sys.path.pop(0)


def _require(module: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{module} is not installed: pip install -e '.[test]'")


def test_the_chart_app_version_the_package_and_the_release_script_share_one_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == admit.__version__ == _release().version()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "admit.__version__" }' in pyproject


def test_the_release_tag_check_refuses_a_tag_that_is_not_the_version():
    script = [sys.executable, str(ROOT / "hack" / "release.py"), "version", "--tag"]
    assert subprocess.run([*script, f"v{admit.__version__}"], capture_output=True).returncode == 0
    wrong = subprocess.run([*script, "v9.9.9"], capture_output=True, text=True)
    assert wrong.returncode == 1 and f"is not v{admit.__version__}" in wrong.stderr


def test_the_checked_in_plain_manifest_is_the_chart_rendered_with_default_values():
    _require("helm_python")
    rendered = _release().render_manifest()
    checked_in = (ROOT / "deploy" / "admit.yaml").read_text()
    assert checked_in == rendered, f"deploy/admit.yaml is out of date with charts/admit: run `{REGENERATE}`"


def test_the_plain_manifest_starts_with_its_namespace_and_installs_webhooks_last_with_the_published_image():
    _require("helm_python")
    docs = [d for d in yaml.safe_load_all(_release().render_manifest()) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "Namespace" and docs[0]["metadata"]["name"] == "admit-system"
    # the pods meet the restricted Pod Security standard (tests/release/test_chart.py), so the namespace enforces it
    assert docs[0]["metadata"]["labels"] == {f"pod-security.kubernetes.io/{mode}": "restricted"
                                             for mode in ("enforce", "audit", "warn")}
    assert kinds[1] == "PriorityClass" and kinds.index("PriorityClass") < kinds.index("Deployment")
    assert kinds[-2:] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    assert kinds.index("ServiceAccount") < kinds.index("ClusterRoleBinding") < kinds.index("Deployment")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/admit-dev/admit:{admit.__version__}"
    # the same install as docs/install.md's helm install: scheduler-plugins' namespace is never sent to admit
    for config in (d for d in docs if d["kind"].endswith("WebhookConfiguration")):
        for hook in config["webhooks"]:
            excluded = hook["namespaceSelector"]["matchExpressions"][0]
            assert excluded["operator"] == "NotIn" and "scheduler-plugins" in excluded["values"], hook["name"]


def test_the_manifest_command_renders_any_values_files_in_order_without_a_helm_binary(tmp_path):
    _require("helm_python")
    later = tmp_path / "mine.yaml"
    later.write_text("image:\n  repository: registry.example.com/platform/admit\n  tag: 0.1.0-rc1\n")
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no helm on this PATH
    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "release.py"), "manifest", "-n", "gangs",
         "-f", str(CHART / "ci" / "single-scheduler-values.yaml"), "-f", str(later)],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "gangs"
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--scheduler-name=default-scheduler" in args
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.example.com/platform/admit:0.1.0-rc1"


def test_the_workflows_pass_actionlint():
    actionlint = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    if actionlint is None:
        if os.environ.get("CI"):
            pytest.fail("actionlint is not installed: pip install -e '.[test]'")
        pytest.skip("actionlint is not installed: pip install -e '.[test]'")
    proc = subprocess.run([actionlint, "-color=false", *sorted(map(str, WORKFLOWS.glob("*.yml")))],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_workflow_step_is_an_action_or_a_script_of_this_repository():
    local = re.compile(r"^(bash \.ci/run|hack/[\w.-]+|(python3|\.venv/bin/python) hack/release\.py \w|"
                       r"echo \"\$REGISTRY_PASSWORD\" \| docker login|archive=|gh release create)")
    for path in sorted(WORKFLOWS.glob("*.yml")):
        workflow = yaml.safe_load(path.read_text())
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                if "run" in step:
                    for line in step["run"].strip().splitlines():
                        assert local.match(line.strip()), f"{path.name}: {line!r} is not a script of the repository"
                        script = re.search(r"hack/[\w.-]+", line)
                        assert script is None or (ROOT / script.group(0)).is_file(), line
    release = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    assert release[True] == {"push": {"tags": ["v*"]}}  # PyYAML reads the key `on` as True
    assert yaml.safe_load((WORKFLOWS / "ci.yml").read_text())[True]["pull_request"] is None


def test_the_license_is_the_apache_2_0_text_and_the_changelog_has_the_version_and_unreleased():
    text = (ROOT / "LICENSE").read_bytes()
    assert text.split()[:5] == [b"Apache", b"License", b"Version", b"2.0,", b"January"]
    # byte for byte https://www.apache.org/licenses/LICENSE-2.0.txt (its well-known MD5), copied from an
    # installed package's license file, not retyped
    assert hashlib.md5(text).hexdigest() == "3b83ef96387f14655fc854ddc3c6bd57"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and f"## [{admit.__version__}] - " in changelog
    notes = _release().release_notes()
    assert notes.startswith("The first version") and not re.search(r"^## ", notes, re.M) and "[Unreleased]" not in notes


def test_the_project_urls_name_one_home():
    home = "https://github.com/admit-dev/admit"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"] == home and home in chart["sources"]
    assert f'Homepage = "{home}"' in (ROOT / "pyproject.toml").read_text()
    assert f'org.opencontainers.image.source="{home}"' in (ROOT / "Dockerfile").read_text()


def test_the_cli_reference_is_generated_from_the_argument_parsers(monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)  # a default some flags' help names, not the page
    sys.path.insert(0, str(ROOT / "hack"))
    try:
        cli_docs = importlib.import_module("cli_docs")
    finally:
        sys.path.pop(0)
    text = (ROOT / "docs" / "cli.md").read_text()
    assert text == cli_docs.render(), "docs/cli.md is out of date: run `python hack/cli_docs.py > docs/cli.md`"
    for flag in ("--strict", "--dev", "--gang-backend", "--shutdown-delay", "--all-namespaces", "--force"):
        assert f"`{flag}`" in text


def test_the_readme_fits_on_a_few_screens_and_nothing_cites_an_issue_number():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "README.md is an overview: move the depth to docs/"
    # a bare tracker number means nothing to a reader outside the tracker: write the rule instead. An upstream
    # reference that names its repository (kubeflow/mpi-operator issue #608) can be looked up and is fine.
    for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *ROOT.glob("docs/*.md"), *ROOT.glob("admit/**/*.py"),
                 *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("hack/*")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"\b[Ii]ssues? #?\d+", line):
                words = line[: m.start()].split()
                assert words and "/" in words[-1].lstrip("("), f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
