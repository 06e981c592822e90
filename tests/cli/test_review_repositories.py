"""``admit review`` on real repositories: what a CI job pointed at a checkout meets.

A repository holds more than manifests: a Helm chart (Chart.yaml, values.yaml, Go templates), a kustomize overlay
(kustomization.yaml and the patches it names, a JSON6902 patch being a YAML list), a virtualenv, cluster-scoped
objects. And ``--strict`` is only worth running in CI if it fails on what a user should change, never on what admit
merely explains (notes).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import yaml

from admit.cli import main
from admit.cli.review import Skipped, load_documents
from tests.helpers import EXAMPLES, ROOT

HELM_TEMPLATE = """\
{{- if .Values.enabled }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "trainer.fullname" . }}
  annotations:
    gang.admit.dev/min-member: {{ .Values.replicas | quote }}
spec:
  replicas: {{ .Values.replicas }}
{{- end }}
"""

KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../base
patches:
  - path: replicas.yaml
    target:
      group: apps
      version: v1
      kind: Deployment
      name: web
"""

JSON6902 = """\
- op: replace
  path: /spec/replicas
  value: 8
"""

PRIORITY_CLASS = """\
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: training-high
value: 100000
globalDefault: false
description: training gangs
"""


def repository(tmp_path):
    """A checkout as teams keep one: base manifests, a kustomize overlay with a JSON6902 patch (and a stray one no
    kustomization names), a Helm chart, a virtualenv holding YAML of its own, and a .git folder."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "web.yaml").write_text((EXAMPLES / "web-gang-deployment.yaml").read_text())
    (tmp_path / "base" / "priority.yaml").write_text(PRIORITY_CLASS)
    (tmp_path / "base" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [web.yaml, priority.yaml]\n")
    (tmp_path / "overlays" / "prod").mkdir(parents=True)
    (tmp_path / "overlays" / "prod" / "kustomization.yaml").write_text(KUSTOMIZATION)
    (tmp_path / "overlays" / "prod" / "replicas.yaml").write_text(JSON6902)
    (tmp_path / "overlays" / "prod" / "stray-patch.yaml").write_text(JSON6902)
    chart = tmp_path / "charts" / "trainer"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: trainer\nversion: 0.1.0\nappVersion: '1.0'\n")
    (chart / "values.yaml").write_text("enabled: true\nreplicas: 4\nimage: {repository: trainer, tag: '1.0'}\n")
    (chart / "templates" / "deployment.yaml").write_text(HELM_TEMPLATE)
    (chart / "templates" / "service.yaml").write_text(  # a template that happens to parse: still a template
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: trainer\n")
    venv = tmp_path / ".venv"
    (venv / "lib" / "python3.11" / "site-packages" / "pkg").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\n")
    (venv / "lib" / "python3.11" / "site-packages" / "pkg" / "bad.yaml").write_text("kind: [\n")
    env = tmp_path / "env"  # a virtualenv by its pyvenv.cfg, whatever its name
    (env / "lib").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (env / "lib" / "denied.yaml").write_text((EXAMPLES / "denied" / "deployment-below-min-member.yaml").read_text())
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config.yaml").write_text("kind: [\n")
    return tmp_path


def test_a_repository_with_a_helm_chart_a_kustomize_json6902_patch_and_a_venv_reviews_with_exit_0_and_no_blank_rows(
        tmp_path, capsys):
    repo = repository(tmp_path)
    assert main(["review", "-R", "--strict", str(repo)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("ALLOWED", "DENIED"))]
    assert [row.split()[:3] for row in rows] == [["ALLOWED", "PriorityClass", "training-high"],
                                                 ["ALLOWED", "Deployment", "default/web"]]
    assert not any(row.rstrip().endswith(("default/", "/")) for row in rows)
    summary = out.splitlines()[-1]
    # Helm's two templates and the kustomization's patch are files; Chart.yaml, values.yaml, two kustomizations and
    # the stray JSON6902 list are documents that are not objects
    assert "skipped 3 files" in summary and "5 documents that are not Kubernetes objects" in summary
    assert "kubectl kustomize DIR | admit review -" in summary and "helm template" in summary


def test_recursive_review_never_reads_hidden_folders_or_virtualenvs(tmp_path):
    repo = repository(tmp_path)
    errors: list[str] = []
    skipped = Skipped()
    sources = {source for source, _ in load_documents([str(repo)], recursive=True, errors=errors, skipped=skipped)}
    assert sources == {str(repo / "base" / "priority.yaml"), str(repo / "base" / "web.yaml")}
    assert errors == []  # .git/config.yaml and .venv's bad.yaml are never opened
    assert not any(".venv" in s or "env/lib" in s for s in skipped.files + skipped.documents)


def test_a_yaml_list_given_by_name_is_skipped_not_a_failure(tmp_path, capsys):
    patch = tmp_path / "replicas.yaml"
    patch.write_text(JSON6902)
    assert main(["review", str(patch), str(EXAMPLES / "pause-gang-deployment.yaml")]) == 0
    out = capsys.readouterr().out
    assert "1 object: 1 allowed" in out and "skipped 1 document that is not a Kubernetes object" in out


def test_a_kind_list_and_a_multi_document_stream_on_stdin_are_each_reviewed_as_kubectl_get_prints_them(capsys):
    web = yaml.safe_load((EXAMPLES / "web-gang-deployment.yaml").read_text())
    pause = yaml.safe_load((EXAMPLES / "pause-gang-deployment.yaml").read_text())
    listed = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [web]}
    stream = yaml.safe_dump(listed) + "---\n" + yaml.safe_dump(pause) + "---\n" + PRIORITY_CLASS
    docs = load_documents(["-"], stdin=io.StringIO(stream))
    assert [d["kind"] for _, d in docs] == ["Deployment", "Deployment", "PriorityClass"]
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "review", "-o", "json", "-"], input=stream,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [(r["kind"], r["namespace"], r["name"]) for r in json.loads(proc.stdout)] == [
        ("Deployment", "default", "web"), ("Deployment", "default", "pause"), ("PriorityClass", "", "training-high")]


def test_a_typed_list_as_kube_apiserver_answers_it_is_reviewed_item_by_item_with_the_lists_kind(capsys):
    # kubectl get --raw /apis/apps/v1/namespaces/default/deployments: the items carry no apiVersion/kind (only the
    # DeploymentList does), and were skipped as "no apiVersion and kind"
    web = yaml.safe_load((EXAMPLES / "web-gang-deployment.yaml").read_text())
    item = {k: v for k, v in web.items() if k not in ("apiVersion", "kind")}
    raw = json.dumps({"kind": "DeploymentList", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "7"},
                      "items": [item]})
    ((_, doc),) = load_documents(["-"], stdin=io.StringIO(raw))
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["name"]) == ("apps/v1", "Deployment", "web")
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "review", "-o", "json", "-"], input=raw,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [(r["kind"], r["name"]) for r in json.loads(proc.stdout)] == [("Deployment", "web")]

def test_cluster_scoped_objects_are_shown_without_a_namespace(capsys):
    assert main(["review", str(ROOT / "deploy" / "admit.yaml")]) == 0
    rows = {line.split()[1]: line.split()[2] for line in capsys.readouterr().out.splitlines()
            if line.startswith("ALLOWED")}
    assert rows["Namespace"] == "admit-system" and rows["ClusterRole"] == "admit"
    assert rows["MutatingWebhookConfiguration"] == "admit" and rows["Deployment"] == "admit-system/admit"


def test_a_long_refusal_is_shown_whole_with_its_fix_on_its_row(capsys):
    path = EXAMPLES / "denied" / "jobset-in-order.yaml"
    assert main(["review", "-o", "json", str(path)]) == 1
    (r,) = json.loads(capsys.readouterr().out)
    assert len(r["message"]) > 400
    assert main(["review", str(path)]) == 1
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("DENIED")]
    assert row.endswith(r["message"]) and "chars)" not in row


def test_every_warning_of_an_object_is_shown_whole_under_its_row(tmp_path, capsys):
    from tests.cli.test_cli import MISSPELT

    path = tmp_path / "trainer.yaml"
    path.write_text(MISSPELT.replace('gang.admit.dev/minmember: "3"',
                                     'gang.admit.dev/minmember: "3"\n    gang.admit.dev/pod-grup: trainer'))
    assert main(["review", "-o", "json", str(path)]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert len(r["warnings"]) == 2
    assert main(["review", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("ALLOWED"))
    assert lines[row].endswith("warning: " + r["warnings"][0])
    assert lines[row + 1].strip() == "warning: " + r["warnings"][1]
    assert lines[row + 1].index("warning") == lines[row].index("warning")  # under the message column


def test_an_allowed_scale_of_a_gang_reviewed_in_the_same_run_shows_as_a_scale_of_that_gang(capsys):
    scale = EXAMPLES / "admission-review-scale-dryrun.json"
    assert main(["review", str(scale), str(EXAMPLES / "web-gang-deployment.yaml")]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("ALLOWED  Scale"))
    assert row.split()[:5] == ["ALLOWED", "Scale", "default/web", "web", "6"]
    assert "scale of gang Deployment default/web" in row and "not a gang" not in row
    assert main(["review", "-o", "json", str(scale)]) == 0  # its Deployment not among the inputs: said so
    (r,) = json.loads(capsys.readouterr().out)
    assert r["scaleOf"] is None and r["unchecked"] == ["Deployment default/web"]
    assert r["warnings"][0].startswith("review Deployment default/web too: ")


HELM_ORDER = """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: db, namespace: team}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: StatefulSet, name: db}
  minReplicas: 2
  maxReplicas: 6
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: team
  annotations: {gang.admit.dev/min-member: "3"}
spec:
  replicas: 3
  serviceName: db
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: ghcr.io/acme/db:1.0}]}
"""


def test_a_statefulset_reviewed_with_its_hpa_below_its_min_member_is_refused_naming_the_hpa_whatever_the_order(
        tmp_path, capsys):
    path = tmp_path / "chart.yaml"  # as helm template renders it: the HPA first (Helm's InstallOrder)
    path.write_text(HELM_ORDER)
    assert main(["review", "-o", "json", str(path)]) == 1
    results = {r["kind"]: r for r in json.loads(capsys.readouterr().out)}
    assert not results["StatefulSet"]["allowed"]
    assert results["StatefulSet"]["message"].startswith(
        "Set spec.minReplicas of HorizontalPodAutoscaler team/db to at least 3, or gang.admit.dev/min-member to at "
        "most 2 (or auto)")


def test_strict_review_of_the_examples_exits_0_and_what_admit_explains_are_notes_shown_by_v(capsys):
    assert main(["review", "--strict", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "with warnings" not in out and " with notes" in out
    assert main(["review", "-o", "json", str(EXAMPLES)]) == 0
    results = {(r["kind"], r["name"]): r for r in json.loads(capsys.readouterr().out)}
    for key, words in {("LeaderWorkerSet", "vllm"): "one PodGroup per group",
                       ("TrainJob", "pytorch-mnist"): "is the gang",
                       ("RayJob", "rayjob-sample"): "a gang of its own",
                       ("RayService", "rayservice-sample"): "a gang of its own",
                       ("Deployment", "batch-workers"): "spec.replicas=0"}.items():
        assert results[key]["warnings"] == [] and any(words in n for n in results[key]["notes"]), key
    assert main(["review", "-v", "--no-objects", str(EXAMPLES / "leaderworkerset-vllm.yaml")]) == 0
    assert "  note: LeaderWorkerSet serving/vllm: one PodGroup per group" in capsys.readouterr().out


def test_a_misspelt_key_still_fails_strict_and_accept_warning_accepts_only_the_warning_it_names(tmp_path, capsys):
    from tests.cli.test_cli import MISSPELT

    path = tmp_path / "trainer.yaml"
    path.write_text(MISSPELT)
    other = tmp_path / "other.yaml"
    other.write_text(MISSPELT.replace("name: trainer\n  namespace: ml", "name: other\n  namespace: ml", 1))
    assert main(["review", "--strict", str(path)]) == 1
    capsys.readouterr()
    accept = r"Deployment ml/trainer: rename annotation gang\.admit\.dev/minmember"
    assert main(["review", "--strict", "--accept-warning", accept, str(path)]) == 0
    assert "1 with accepted warnings" in capsys.readouterr().out
    assert main(["review", "--strict", "--accept-warning", accept, str(path), str(other)]) == 1  # other's stays
    capsys.readouterr()
    assert main(["review", "-v", "--accept-warning", accept, str(path)]) == 0
    assert "warning (accepted by --accept-warning): rename annotation gang.admit.dev/minmember" in capsys.readouterr().out


def test_an_accept_warning_that_is_not_a_regular_expression_exits_2_with_one_line(capsys):
    assert main(["review", "--accept-warning", "minmember(", str(EXAMPLES / "pause-gang-deployment.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--accept-warning 'minmember(' is not a regular expression" in err


def test_the_readme_sample_output_is_exactly_what_admit_review_prints(capsys, monkeypatch):
    import re
    import shlex

    monkeypatch.chdir(ROOT)  # the sample's paths are a checkout's
    readme = (ROOT / "README.md").read_text()
    samples = re.findall(r"```\n\$ (admit review [^\n]+)\n(.*?)```", readme, re.S)
    assert samples, "README.md shows admit review's output"
    for command, shown in samples:
        args = shlex.split(command)[1:]
        code = main(args)
        printed = capsys.readouterr().out
        assert printed == shown, f"README.md's sample of `{command}` (exit {code}) is not what it prints"


def test_an_empty_list_as_kubectl_get_prints_it_for_an_empty_namespace_reviews_as_zero_objects_with_exit_0(capsys):
    # exit 0 with a note; --strict fails it (exit 1), as any run that reviews nothing: `kubectl get -n <typo>` prints
    # the same empty List
    empty = "apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"
    assert load_documents(["-"], stdin=io.StringIO(empty)) == []
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "review", "-"], input=empty,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "0 objects: 0 allowed, 0 denied" in proc.stdout
    assert "admit review: no Kubernetes objects to review in standard input (only empty Lists" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "review", "--strict", "-"], input=empty,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 1 and "0 objects: 0 allowed, 0 denied" in proc.stdout
    assert "admit review --strict: exit 1: no Kubernetes objects to review in standard input" in proc.stderr


def test_one_skipped_document_is_counted_in_the_singular():
    skipped = Skipped(documents=["values.yaml: document 1: no apiVersion and kind"])
    assert skipped.summary().startswith("skipped 1 document that is not a Kubernetes object (")
    skipped.documents.append("Chart.yaml: document 1: no apiVersion and kind")
    assert skipped.summary().startswith("skipped 2 documents that are not Kubernetes objects (")
