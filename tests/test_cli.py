"""``admit review`` and ``admit certs`` as a user runs them."""

import json
import subprocess
import sys

from admit.cli import main
from tests.helpers import EXAMPLES, ROOT


def run_json(capsys, *paths):
    code = main(["review", "--output", "json", *map(str, paths)])
    return code, json.loads(capsys.readouterr().out)


def test_review_of_the_examples_exits_0_and_shows_patches_and_pod_groups(capsys):
    code, results = run_json(capsys, EXAMPLES)
    assert code == 0
    for r in results:
        assert {"kind", "name", "namespace", "allowed", "message", "warnings", "patch", "podGroups"} <= r.keys()
    by_name = {(r["kind"], r["name"]): r for r in results}
    pause = by_name[("Deployment", "pause")]
    assert pause["allowed"] and pause["patch"]
    (pg,) = pause["podGroups"]
    assert pg["metadata"]["name"] == "pause" and pg["spec"]["minMember"] == 3
    assert by_name[("Job", "allreduce")]["podGroups"][0]["spec"]["minMember"] == 4


def test_review_reads_an_admission_review_as_kube_apiserver_sends_it(capsys):
    code, (r,) = run_json(capsys, EXAMPLES / "admission-review-pod-from-replicaset.json")
    assert code == 0
    assert r["kind"] == "Pod" and r["namespace"] == "default"
    assert r["patch"] == [{"op": "replace", "path": "/spec/schedulerName", "value": "scheduler-plugins-scheduler"}]


def test_review_exits_1_when_any_object_is_denied(capsys):
    code, results = run_json(capsys, EXAMPLES, EXAMPLES / "denied")
    assert code == 1
    denied = {r["name"] for r in results if not r["allowed"]}
    assert denied == {"pause-too-small", "zk", "web", "batch-workers", "eval-shards", "startup-driver-ready", "leader-ready",
                      "too-small"}


def test_a_scale_review_finds_its_deployment_among_the_inputs(capsys):
    code, results = run_json(capsys, EXAMPLES / "web-gang-deployment.yaml",
                             EXAMPLES / "denied" / "admission-review-scale-below-min-member.json")
    scale = results[-1]
    assert code == 1 and scale["kind"] == "Scale" and "minMember 6" in scale["message"]


def test_review_exits_2_naming_the_file_on_unreadable_input(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Deployment\n  metadata: [\n")
    assert main(["review", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "line 2" in err
    assert main(["review", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_review_exits_2_on_a_malformed_admission_review(tmp_path, capsys):
    f = tmp_path / "review.json"
    f.write_text(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}))
    assert main(["review", str(f)]) == 2
    assert "request.uid" in capsys.readouterr().err


def test_text_review_prints_verdicts_and_the_mutated_object(capsys):
    assert main(["review", str(EXAMPLES / "pause-gang-deployment.yaml")]) == 0
    out = capsys.readouterr().out
    assert "Deployment default/pause" in out and "ALLOWED" in out
    assert "object after mutation:" in out and "kind: PodGroup" in out


def test_the_console_script_runs_review_from_a_shell(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "review", "-o", "json", str(EXAMPLES)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)


def test_certs_writes_a_ca_and_serving_pair_that_openssl_verifies(tmp_path, capsys):
    assert main(["certs", "--dir", str(tmp_path), "--service", "admit", "--namespace", "admit-system"]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {"ca.crt", "tls.crt", "tls.key"} <= names
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    proc = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "OK" in proc.stdout
    text = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-ext", "subjectAltName"],
                          capture_output=True, text=True).stdout
    assert "admit.admit-system.svc" in text and "127.0.0.1" in text


def test_the_legacy_pod_group_api_uses_the_old_group_and_label(capsys):
    code = main(["review", "-o", "json", "--pod-group-api", "scheduling.sigs.k8s.io",
                 str(EXAMPLES / "pause-gang-deployment.yaml")])
    (r,) = json.loads(capsys.readouterr().out)
    assert code == 0
    assert r["podGroups"][0]["apiVersion"] == "scheduling.sigs.k8s.io/v1alpha1"
    assert r["object"]["spec"]["template"]["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io"] == "pause"


def test_review_reads_standard_input_for_a_dash(monkeypatch, capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO((EXAMPLES / "pause-gang-deployment.yaml").read_text()))
    code, (r,) = run_json(capsys, "-")
    assert code == 0 and r["source"] == "<stdin>" and r["podGroups"][0]["metadata"]["name"] == "pause"


def test_review_of_a_folder_without_manifests_exits_2(tmp_path, capsys):
    assert main(["review", str(tmp_path)]) == 2
    assert "no Kubernetes objects found" in capsys.readouterr().err


def test_review_explains_that_a_cronjob_gang_goes_in_its_job_template(tmp_path, capsys):
    f = tmp_path / "cron.yaml"
    f.write_text("""apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly-train
  namespace: ml
  annotations:
    gang.admit.dev/min-member: "4"
spec:
  schedule: "0 1 * * *"
  jobTemplate:
    spec:
      parallelism: 4
      template:
        spec:
          restartPolicy: Never
          containers: [{name: train, image: ghcr.io/example/train:2.1}]
""")
    code, (r,) = run_json(capsys, f)
    assert code == 0 and r["patch"] == [] and r["podGroups"] == []
    assert any("spec.jobTemplate.metadata.annotations" in w for w in r["warnings"])


def test_review_piped_into_head_exits_quietly():
    proc = subprocess.run(f"{sys.executable} -m admit.cli review {EXAMPLES} | head -1", shell=True,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.stdout.startswith("===") and "Traceback" not in proc.stderr
