"""Careless inputs get a warning or an error that names the fix, and ``admit review`` says what a cluster would: a
setting written as a label, a Volcano Job with gang annotations, a manifest without ``apiVersion``, a TrainJob
reviewed with its runtime."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from admit.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
  namespace: ml
  labels: {gang.admit.dev/min-member: "3", gang.admit.dev/managed: "true"}
spec:
  replicas: 3
  selector: {matchLabels: {app: t}}
  template:
    metadata: {labels: {app: t}}
    spec: {containers: [{name: c, image: busybox}]}
"""


def run_json(capsys, *argv):
    code = main(["review", "-o", "json", *map(str, argv)])
    return code, json.loads(capsys.readouterr().out)


def test_min_member_written_as_a_label_is_a_warning_naming_the_fix_and_fails_strict(tmp_path, capsys):
    path = tmp_path / "trainer.yaml"
    path.write_text(DEPLOYMENT)
    code, (r,) = run_json(capsys, path)
    assert code == 0 and r["allowed"] and r["podGroups"] == []
    # admit's own managed label is not a setting: one warning, for min-member
    assert r["warnings"] == ["move gang.admit.dev/min-member from metadata.labels to metadata.annotations: admit "
                             "reads its settings from annotations only, so this label does nothing"]
    assert main(["review", "--strict", str(path)]) == 1


def test_gang_annotations_on_a_volcano_job_are_not_told_admit_handles_job(tmp_path, capsys):
    path = tmp_path / "vcjob.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "mpi", "namespace": "ml", "annotations": {"gang.admit.dev/min-member": "2"}},
        "spec": {"minAvailable": 2, "tasks": [{"name": "w", "replicas": 2, "template": {"spec": {
            "containers": [{"name": "w", "image": "b"}]}}}]}}))
    code, (r,) = run_json(capsys, path)
    assert r["warnings"] == ["remove the gang.admit.dev/* annotations: admit does not handle Job of "
                             "batch.volcano.sh/v1alpha1, so they have no effect on it"]
    [handled] = [n for n in r["notes"] if n.startswith("admit handles ")]
    assert "batch: Job, CronJob" in handled and "batch.volcano.sh" not in handled


def test_a_manifest_without_api_version_is_an_error_naming_the_fix_not_a_skip(tmp_path, capsys):
    path = tmp_path / "trainer.yaml"
    path.write_text(DEPLOYMENT.replace("apiVersion: apps/v1\n", ""))
    assert main(["review", str(path)]) == 2
    err = capsys.readouterr().err
    assert (f"{path}: document 1: add apiVersion (apps/v1 for a Deployment): Deployment trainer has none, and "
            "kube-apiserver refuses an object without one") in err
    values = tmp_path / "values.yaml"  # a values file is still skipped, not an error
    values.write_text("config:\n  gangBackend: coscheduling\n")
    assert main(["review", str(values)]) == 0


def test_review_shows_a_trainjobs_gang_when_its_runtime_is_in_the_same_input(capsys):
    code, results = run_json(capsys, EXAMPLES / "trainjob-torch.yaml",
                             EXAMPLES / "clustertrainingruntime-torch-distributed.yaml")
    [train] = [r for r in results if r["kind"] == "TrainJob"]
    assert code == 0 and train["allowed"]
    assert any("Trainer builds JobSet pytorch-mnist, a gang of PodGroup pytorch-mnist with minMember 2" in n
               for n in train["notes"]), train["notes"]
    code, (alone,) = run_json(capsys, EXAMPLES / "trainjob-torch.yaml")  # without it: not checked, and said so
    assert alone["unchecked"] == ["ClusterTrainingRuntime torch-distributed"]
    assert alone["warnings"][0].startswith("review ClusterTrainingRuntime torch-distributed too: ")


def test_a_volcano_runtime_gets_a_note_and_a_warning_that_agree(tmp_path, capsys):
    runtime = yaml.safe_load((EXAMPLES / "clustertrainingruntime-torch-distributed.yaml").read_text())
    runtime["spec"]["podGroupPolicy"] = {"volcano": {}}
    path = tmp_path / "runtime.yaml"
    path.write_text(yaml.safe_dump(runtime))
    code, results = run_json(capsys, EXAMPLES / "trainjob-torch.yaml", path)
    [train] = [r for r in results if r["kind"] == "TrainJob"]
    [warning] = train["warnings"]
    assert "podGroupPolicy.volcano, so Trainer gangs this TrainJob with a Volcano PodGroup and admit leaves it" in warning
    assert any("Volcano PodGroup pytorch-mnist itself, and admit leaves its JobSet alone" in n for n in train["notes"])
    # no note says admit's PodGroup is made without the condition that the runtime has no podGroupPolicy
    assert all("unless ClusterTrainingRuntime torch-distributed has a podGroupPolicy" in n
               for n in train["notes"] if "is made when Trainer creates the JobSet" in n)
