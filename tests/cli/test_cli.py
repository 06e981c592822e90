"""``admit review`` and ``admit certs`` as a user runs them."""

import json
import shutil
import subprocess
import sys

import pytest

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
                      "too-small", "nightly-shards"}


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


def test_verbose_review_prints_verdicts_and_the_mutated_object(capsys):
    assert main(["review", "-v", str(EXAMPLES / "pause-gang-deployment.yaml")]) == 0
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


def test_review_of_an_empty_folder_exits_0_with_a_note_that_it_holds_no_manifest_file(tmp_path, capsys):
    assert main(["review", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == (f"admit review: no Kubernetes objects to review in {tmp_path}: it holds no .yaml, .yml "
                            "or .json file\n")
    assert captured.out == "0 objects: 0 allowed, 0 denied\n"  # no table header over no rows


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
    proc = subprocess.run(f"{sys.executable} -m admit.cli review -v {EXAMPLES} | head -1", shell=True,
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.stdout.startswith("===") and "Traceback" not in proc.stderr


def test_the_default_review_prints_one_line_per_object_with_group_and_min_member_and_the_summary_last(capsys):
    assert main(["review", str(EXAMPLES)]) == 0
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    objects = [line for line in lines if line.startswith(("ALLOWED", "DENIED"))]
    assert len(lines) == len(objects) + 3  # header, blank line, summary
    assert lines[0].split() == ["VERDICT", "OBJECT", "GROUP", "MINMEMBER"]
    pause = next(line for line in objects if "Deployment default/pause " in line)
    assert pause.split()[:5] == ["ALLOWED", "Deployment", "default/pause", "pause", "3"]
    assert lines[-1].startswith(f"{len(objects)} objects: {len(objects)} allowed, 0 denied") and "-v" in lines[-1]


def test_the_default_review_gives_the_reason_of_a_refusal_on_its_line(capsys):
    assert main(["review", str(EXAMPLES / "denied" / "deployment-below-min-member.yaml")]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("DENIED"))
    assert "Deployment default/pause-too-small" in line and "minMember 3" in line


def test_yaml_output_has_every_detail(capsys):
    import yaml

    assert main(["review", "-o", "yaml", str(EXAMPLES / "pause-gang-deployment.yaml")]) == 0
    (r,) = yaml.safe_load(capsys.readouterr().out)
    assert r["podGroups"][0]["spec"]["minMember"] == 3 and r["object"]["kind"] == "Deployment"


def test_one_unreadable_file_in_a_folder_is_reported_and_the_rest_reviewed_with_exit_2(tmp_path, capsys):
    (tmp_path / "a-good.yaml").write_text((EXAMPLES / "pause-gang-deployment.yaml").read_text())
    (tmp_path / "b-broken.yaml").write_text("kind: Deployment\n  metadata: [\n")
    (tmp_path / "c-binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "d-good.yaml").write_text((EXAMPLES / "web-gang-deployment.yaml").read_text())
    assert main(["review", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "b-broken.yaml" in captured.err and "c-binary.yaml" in captured.err
    assert "Deployment default/pause" in captured.out and "Deployment default/web" in captured.out
    assert "2 unreadable" in captured.out


def test_wrong_shapes_in_a_manifest_are_denials_naming_the_field_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: odd\n  annotations:\n"
        "    gang.admit.dev/min-member: '" + "9" * 5000 + "'\n"
        "spec:\n  replicas: 2\n  template:\n    spec:\n      containers: 5\n"
        "---\napiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: huge\n  annotations:\n"
        "    gang.admit.dev/min-member: auto\nspec:\n  tfReplicaSpecs:\n    Worker:\n      replicas: 2\n"
        "      template:\n        spec:\n          containers:\n            - name: tf\n"
        "              resources: {requests: {cpu: '1e9999999'}}\n"
    )
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "review", str(bad)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert "gang.admit.dev/min-member" in proc.stdout and "resources.requests.cpu" in proc.stdout


def test_certs_reuses_an_existing_ca_and_replaces_it_only_with_force(tmp_path, capsys):
    assert main(["certs", "--dir", str(tmp_path)]) == 0
    first_ca = (tmp_path / "ca.crt").read_bytes()
    first_leaf = (tmp_path / "tls.crt").read_bytes()
    capsys.readouterr()
    assert main(["certs", "--dir", str(tmp_path)]) == 0
    assert "kept the existing CA" in capsys.readouterr().out
    assert (tmp_path / "ca.crt").read_bytes() == first_ca and (tmp_path / "tls.crt").read_bytes() != first_leaf
    for leaf in ("tls.crt",):  # the new serving certificate still verifies against the CA already handed out
        proc = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / leaf)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert main(["certs", "--dir", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "ca.crt").read_bytes() != first_ca


def test_certs_refuses_a_broken_ca_without_force_and_has_a_help_description(tmp_path, capsys):
    (tmp_path / "ca.crt").write_text("not a certificate")
    assert main(["certs", "--dir", str(tmp_path)]) == 1
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "ca.crt").read_text() == "not a certificate"
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "certs", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert "CA already in --dir is reused" in " ".join(proc.stdout.split())


MISSPELT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
  namespace: ml
  labels: {app: trainer}
  annotations:
    gang.admit.dev/minmember: "3"
spec:
  replicas: 3
  selector:
    matchLabels: {app: trainer}
  template:
    metadata:
      labels: {app: trainer}
    spec:
      containers:
      - name: trainer
        image: registry.k8s.io/pause:3.10
        resources:
          requests: {cpu: 500m, memory: 256Mi}
"""


def test_a_misspelt_admit_key_shows_its_warning_on_the_one_line_table(tmp_path, capsys):
    path = tmp_path / "trainer.yaml"
    path.write_text(MISSPELT)
    assert main(["review", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("ALLOWED"))
    assert "warning: rename annotation gang.admit.dev/minmember to gang.admit.dev/min-member" in line
    assert "1 allowed, 0 denied (1 with warnings)" in out


def test_strict_review_exits_1_on_a_warning_and_0_on_a_clean_gang(tmp_path, capsys):
    path = tmp_path / "trainer.yaml"
    path.write_text(MISSPELT)
    assert main(["review", "--strict", str(path)]) == 1
    assert main(["review", "--strict", str(EXAMPLES / "pause-gang-deployment.yaml")]) == 0
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "review", "--strict", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 1 and "rename annotation gang.admit.dev/minmember" in proc.stdout
    assert "admit review --strict: exit 1: 1 object with warnings" in proc.stderr  # why the exit, said once


def test_an_unquoted_min_member_names_the_quoting_fix_and_that_kube_apiserver_refuses_it(tmp_path, capsys):
    path = tmp_path / "trainer.yaml"
    path.write_text(MISSPELT.replace('gang.admit.dev/minmember: "3"', "gang.admit.dev/min-member: 3"))
    assert main(["review", str(path)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("DENIED"))
    assert 'Quote annotation gang.admit.dev/min-member: "3": annotation gang.admit.dev/min-member must be a string, ' \
           "got number 3" in line
    assert "kube-apiserver refuses" in line


@pytest.mark.parametrize("written,got", [("true", 'Quote annotation gang.admit.dev/min-member: "true": '
                                                  "annotation gang.admit.dev/min-member must be a string, got bool true"),
                                         ("2.5", "got number 2.5"), ("[3]", "got array [3]")])
def test_an_unquoted_value_is_named_with_the_json_type_kube_apiserver_names_not_pythons(tmp_path, capsys, written,
                                                                                       got):
    path = tmp_path / "trainer.yaml"
    path.write_text(MISSPELT.replace('gang.admit.dev/minmember: "3"', f"gang.admit.dev/min-member: {written}"))
    assert main(["review", str(path)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("DENIED"))
    assert got in line and "True" not in line


def _below_min_member(tmp_path):
    """A TFJob (training-operator's dist-mnist shape), a RayCluster (KubeRay's sample shape) and a Deployment, each
    running 2 pods under a gang of minMember 4."""
    import yaml

    tfjob = yaml.safe_load((EXAMPLES / "tfjob-ps-worker.yaml").read_text())
    tfjob["metadata"]["annotations"]["gang.admit.dev/min-member"] = "4"
    del tfjob["spec"]["tfReplicaSpecs"]["PS"]
    tfjob["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    ray = yaml.safe_load((EXAMPLES / "raycluster-autoscaler.yaml").read_text())
    ray["metadata"]["annotations"] = {"gang.admit.dev/min-member": "4"}
    ray["spec"].pop("enableInTreeAutoscaling", None)
    for group in ray["spec"]["workerGroupSpecs"]:
        group["replicas"] = group["minReplicas"] = 1 if group is ray["spec"]["workerGroupSpecs"][0] else 0
    deployment = yaml.safe_load((EXAMPLES / "pause-gang-deployment.yaml").read_text())
    deployment["metadata"]["annotations"]["gang.admit.dev/min-member"] = "4"
    deployment["spec"]["replicas"] = 2
    path = tmp_path / "below.yaml"
    path.write_text(yaml.safe_dump_all([tfjob, ray, deployment]))
    return path


def test_on_the_workload_api_backend_every_kind_below_min_member_blames_kube_schedulers_gang_plugin(tmp_path, capsys):
    code, results = run_json(capsys, "--gang-backend", "workload-api", _below_min_member(tmp_path))
    assert code == 1
    assert [r["kind"] for r in results] == ["TFJob", "RayCluster", "Deployment"]
    for r in results:
        assert not r["allowed"], r
        assert "runs 2 pods" in r["message"] and "minMember 4" in r["message"], r["message"]
        assert "kube-scheduler's GangScheduling plugin would keep every pod Pending forever" in r["message"], r
        assert "Coscheduling" not in r["message"], r["message"]


def test_on_the_coscheduling_backend_every_kind_below_min_member_blames_the_coscheduling_plugin(tmp_path, capsys):
    code, results = run_json(capsys, _below_min_member(tmp_path))
    assert code == 1
    for r in results:
        assert not r["allowed"], r
        assert "the Coscheduling plugin would keep every pod Pending forever" in r["message"], r["message"]


def test_an_empty_kubeconfig_variable_means_the_default_file_as_kubectl_reads_it(tmp_path, monkeypatch):
    from admit.kube.client import default_kubeconfig

    monkeypatch.setenv("HOME", str(tmp_path))
    for value, expected in (("", tmp_path / ".kube" / "config"), (":/etc/k/one:/etc/k/two", "/etc/k/one"),
                            ("/etc/k/only", "/etc/k/only")):
        monkeypatch.setenv("KUBECONFIG", value)
        assert default_kubeconfig() == str(expected)
    env = {k: v for k, v in __import__("os").environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env.update(KUBECONFIG="", HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "status"], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"and {tmp_path}/.kube/config does not exist" in proc.stderr, proc.stderr


def test_admit_status_output_flag_says_what_json_holds():
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "status", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    text = " ".join(proc.stdout.split())
    assert "json: an array, one object per gang" in text and "waitingSeconds" in text


def test_strict_review_of_a_folder_with_no_kubernetes_object_exits_1_saying_nothing_was_reviewed(tmp_path, capsys):
    # a CI step pointed at the wrong folder (values files, a chart's templates): before, --strict passed with exit 0
    (tmp_path / "values.yaml").write_text("replicaCount: 3\nimage:\n  tag: v1\n")
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: trainer\nversion: 0.1.0\n")
    (chart / "templates" / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n")
    assert main(["review", "--strict", "-R", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"admit review --strict: exit 1: no Kubernetes objects to review in {tmp_path}: skipped 1 file" in (
        captured.err)
    assert "0 objects: 0 allowed, 0 denied" in captured.out
    assert main(["review", "--strict", "-o", "json", str(tmp_path / "values.yaml")]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == [] and "no Kubernetes objects to review" in captured.err


def test_review_without_strict_of_no_kubernetes_object_exits_0_with_a_note_on_stderr(tmp_path, capsys):
    (tmp_path / "values.yaml").write_text("replicaCount: 3\n")
    assert main(["review", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err == (f"admit review: no Kubernetes objects to review in {tmp_path}: skipped 1 document that is not a "
                   "Kubernetes object (values, Chart.yaml, kustomization, lists)\n")


def test_an_empty_folder_file_or_standard_input_is_nothing_to_review_exit_0_and_1_with_strict(tmp_path, monkeypatch,
                                                                                                  capsys):
    import io

    empty = tmp_path / "empty"
    (empty / "overlays").mkdir(parents=True)
    (tmp_path / "blank.yaml").write_text("# rendered nothing\n")
    cases = [([str(empty)], f"{empty}: it holds no .yaml, .yml or .json file (-R reads its sub-folders)"),
             (["-R", str(empty)], f"{empty}: it holds no .yaml, .yml or .json file"),
             ([str(tmp_path / "blank.yaml")], f"{tmp_path / 'blank.yaml'}: it is empty (no YAML document)"),
             (["-"], "standard input: it is empty")]
    for strict, code, said in (([], 0, "admit review"), (["--strict"], 1, "admit review --strict: exit 1")):
        for args, why in cases:
            monkeypatch.setattr(sys, "stdin", io.StringIO(""))
            assert main(["review", *strict, *args]) == code, args
            captured = capsys.readouterr()
            assert captured.err == f"{said}: no Kubernetes objects to review in {why}\n"
            assert captured.out == "0 objects: 0 allowed, 0 denied\n"


def test_a_mistyped_path_or_a_folder_that_cannot_be_listed_exits_2_with_or_without_strict(tmp_path, monkeypatch,
                                                                                          capsys):
    from pathlib import Path

    for strict in ([], ["--strict"]):
        assert main(["review", *strict, str(tmp_path / "exmaples")]) == 2
        assert "exmaples: no such file or directory" in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    real_iterdir = Path.iterdir

    def iterdir(self):  # what a folder without read permission answers a user who is not root
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    assert main(["review", str(locked), str(EXAMPLES / "pause-gang-deployment.yaml")]) == 2
    captured = capsys.readouterr()
    assert f"admit review: cannot read {locked}: Permission denied" in captured.err
    assert "Deployment default/pause" in captured.out


def test_the_readme_quick_start_review_of_the_examples_exits_0_with_only_the_note_of_the_sub_folder_not_read(
        monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["review", "examples/"]) == 0
    assert capsys.readouterr().err == "admit review: examples/: 1 sub-folder not read (denied/; -R reads them)\n"


def test_a_folder_reviewed_without_r_names_its_sub_folders_not_read_and_strict_does_not_fail_on_it(tmp_path, capsys):
    shutil.copy(EXAMPLES / "pause-gang-deployment.yaml", tmp_path / "good.yaml")
    for sub in ("sub", "b-more", "c-more", "d-more"):
        (tmp_path / sub).mkdir()
    shutil.copy(EXAMPLES / "denied" / "deployment-below-min-member.yaml", tmp_path / "sub")
    for hidden in (".git", "node_modules"):  # never read by -R either: not named
        (tmp_path / hidden).mkdir()
    assert main(["review", "--strict", str(tmp_path)]) == 0  # as kubectl apply -f DIR: the sub-folders are not read
    captured = capsys.readouterr()
    assert "1 object: 1 allowed, 0 denied" in captured.out
    assert captured.err == (f"admit review: {tmp_path}: 4 sub-folders not read (b-more/, c-more/, d-more/, ...; "
                            "-R reads them)\n")
    assert main(["review", "--strict", "-R", str(tmp_path)]) == 1  # -R reads sub/ and its refused Deployment
    captured = capsys.readouterr()
    assert "DENIED" in captured.out and "not read" not in captured.err
    assert main(["review", "-o", "json", str(tmp_path)]) == 0
    assert "sub-folders not read" in capsys.readouterr().err  # said in every output format


NAMESPACELESS = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    gang.admit.dev/min-member: "3"
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: registry.k8s.io/pause:3.9
          resources: {requests: {cpu: 100m}}
"""


def _scale_in(namespace: str, name: str, replicas: int, old: int) -> dict:
    from tests.helpers import scale_review

    return scale_review(name, namespace, new=replicas, old=old)


def test_review_n_puts_a_manifest_without_a_namespace_and_its_pod_group_in_that_namespace(tmp_path, capsys):
    (tmp_path / "web.yaml").write_text(NAMESPACELESS)
    (tmp_path / "scale.json").write_text(json.dumps(_scale_in("team-a", "web", 2, 3)))
    assert main(["review", "-n", "team-a", "-o", "json", str(tmp_path / "web.yaml"), str(tmp_path / "scale.json")]) == 1
    dep, scale = json.loads(capsys.readouterr().out)
    assert dep["namespace"] == "team-a" and dep["allowed"]
    assert [pg["metadata"]["namespace"] for pg in dep["podGroups"]] == ["team-a"]
    # the Scale of team-a/web finds the Deployment there, and is refused below its minMember
    assert scale["namespace"] == "team-a" and not scale["allowed"] and "minMember 3" in scale["message"]
    assert main(["review", "--namespace", "team-a", str(tmp_path / "web.yaml")]) == 0
    assert "Deployment team-a/web" in capsys.readouterr().out


def test_review_without_n_reviews_a_manifest_without_a_namespace_in_default_as_kubectl_apply(tmp_path, capsys):
    (tmp_path / "web.yaml").write_text(NAMESPACELESS)
    code, (r,) = run_json(capsys, tmp_path / "web.yaml")
    assert code == 0 and r["namespace"] == "default" and r["podGroups"][0]["metadata"]["namespace"] == "default"


def test_review_n_keeps_a_manifests_own_namespace_and_an_admission_reviews_request_namespace(tmp_path, capsys):
    code = main(["review", "-n", "team-a", "-o", "json", str(EXAMPLES / "pause-gang-deployment.yaml"),
                 str(EXAMPLES / "admission-review-pod-from-replicaset.json")])
    dep, pod = json.loads(capsys.readouterr().out)
    assert code == 0 and dep["namespace"] == "default" and pod["namespace"] == "default"
    assert dep["podGroups"][0]["metadata"]["namespace"] == "default"


def test_review_n_refuses_a_name_that_cannot_be_a_namespace(capsys):
    for bad in ("Team_A", "team-", "a" * 64, "team.a", ""):
        try:
            main(["review", "-n", bad, str(EXAMPLES / "pause-gang-deployment.yaml")])
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"-n {bad!r} was accepted")
        assert "is not a namespace name" in capsys.readouterr().err


TIMEOUT_ONLY = MISSPELT.replace('gang.admit.dev/minmember: "3"', 'gang.admit.dev/schedule-timeout-seconds: "60"')


def test_a_schedule_timeout_without_min_member_is_a_warning_on_the_line_in_v_and_fails_strict(tmp_path, capsys):
    path = tmp_path / "trainer.yaml"
    path.write_text(TIMEOUT_ONLY)
    ignored = "add gang.admit.dev/min-member, or remove gang.admit.dev/schedule-timeout-seconds"
    assert main(["review", str(path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ALLOWED"))
    assert "Deployment ml/trainer" in line and f"warning: {ignored}" in line and "not a gang" not in line
    assert main(["review", "-v", "--no-objects", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"  warning: {ignored}" in out and "no gang annotation" not in out
    assert main(["review", "--strict", str(path)]) == 1
    assert capsys.readouterr().err == "admit review --strict: exit 1: 1 object with warnings\n"


def test_a_pod_group_admit_made_reviewed_as_kubectl_get_prints_it_gets_no_warning_for_admits_own_annotations(
        tmp_path, capsys):
    path = tmp_path / "podgroups.yaml"
    path.write_text("""apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: trainer
  namespace: ml
  labels: {app.kubernetes.io/managed-by: admit}
  annotations:
    gang.admit.dev/owner: apps/Deployment/trainer
    gang.admit.dev/workload-generation: "2"
spec:
  minMember: 3
  scheduleTimeoutSeconds: 60
""")
    assert main(["review", "--strict", "-o", "json", str(path)]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert r["kind"] == "PodGroup" and r["warnings"] == []


def test_the_unhandled_kind_warning_names_every_registered_kind_but_those_of_an_ignored_api_group(tmp_path, capsys):
    from admit.families.kinds import KINDS

    path = tmp_path / "node-agent.yaml"
    path.write_text(TIMEOUT_ONLY.replace("kind: Deployment", "kind: DaemonSet").replace("  replicas: 3\n", ""))
    code, (r,) = run_json(capsys, path)
    (warning,) = r["warnings"]
    assert code == 0 and warning == ("remove the gang.admit.dev/* annotations: admit does not handle DaemonSet of "
                                     "apps/v1, so they have no effect on it")
    (note,) = [n for n in r["notes"] if n.startswith("admit handles ")]
    listed = {f"{group}/{kind}" for part in note.removeprefix("admit handles ").split("; ")
              for group, _, kinds in [part.partition(": ")] for kind in kinds.split(", ")}
    assert listed == {f"{group or 'core'}/{kind}" for group, kind in KINDS}
    assert {"jobset.x-k8s.io/JobSet", "batch/Job", "core/Pod", "kubeflow.org/TFJob"} <= listed
    code, (r,) = run_json(capsys, "--ignore-api-group", "kubeflow.org", path)
    assert "TFJob" not in r["notes"][-1] and "TrainJob" in r["notes"][-1]


def test_two_manifests_piped_without_a_separator_exit_2_naming_the_key_and_both_lines(monkeypatch, capsys):
    import io

    pause = (EXAMPLES / "pause-gang-deployment.yaml").read_text()
    web = (EXAMPLES / "web-gang-deployment.yaml").read_text()
    assert not pause.startswith("---") and "\n---" not in pause
    second = pause.count("\n") + 1 + next(i for i, x in enumerate(web.splitlines()) if x.startswith("apiVersion:"))
    first = 1 + next(i for i, x in enumerate(pause.splitlines()) if x.startswith("apiVersion:"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(pause + web))  # cat pause.yaml web.yaml | admit review -
    assert main(["review", "-"]) == 2
    captured = capsys.readouterr()
    assert (f'admit review: cannot read <stdin>: not valid YAML or JSON: line {second}: mapping key "apiVersion" '
            f"already defined at line {first} (two objects without --- between them?") in captured.err
    assert "0 objects" in captured.out and "1 unreadable" in captured.out
    monkeypatch.setattr(sys, "stdin", io.StringIO(pause + "---\n" + web))
    assert main(["review", "-"]) == 0


def test_a_key_given_twice_in_a_manifest_exits_2_naming_the_key_the_file_and_the_line_and_the_rest_is_reviewed(
        tmp_path, capsys):
    bad = tmp_path / "a-trainer.yaml"
    bad.write_text(MISSPELT.replace("  replicas: 3\n", "  replicas: 3\n  paused: false\n  replicas: 2\n"))
    (tmp_path / "b-pause.yaml").write_text((EXAMPLES / "pause-gang-deployment.yaml").read_text())
    (tmp_path / "c-review.json").write_text('{"apiVersion": "v1", "kind": "ConfigMap", "kind": "Secret"}')
    assert main(["review", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert (f'cannot read {bad}: not valid YAML or JSON: line 12: mapping key "replicas" already defined at line 10 '
            "(kubectl refuses a key given twice)") in captured.err
    assert 'c-review.json: not valid YAML or JSON: line 1: mapping key "kind" already defined at line 1' in captured.err
    assert "Deployment default/pause" in captured.out and "2 unreadable" in captured.out


def test_a_key_a_yaml_merge_brings_in_may_be_overridden_as_yaml_allows():
    import yaml

    from admit.cli.review import StrictLoader

    text = "defaults: &d {cpu: 1, memory: 1Gi}\nworker:\n  <<: *d\n  cpu: 2\n"
    assert yaml.load(text, Loader=StrictLoader) == yaml.safe_load(text) == {
        "defaults": {"cpu": 1, "memory": "1Gi"}, "worker": {"cpu": 2, "memory": "1Gi"}}


def test_strict_says_v_shows_the_warnings_only_when_the_one_line_view_hides_some(tmp_path, capsys):
    path = tmp_path / "trainer.yaml"
    path.write_text(MISSPELT)  # allowed, its warning whole on its row: nothing hidden
    assert main(["review", "--strict", str(path)]) == 1
    assert capsys.readouterr().err == "admit review --strict: exit 1: 1 object with warnings\n"
    path.write_text(MISSPELT.replace('gang.admit.dev/minmember: "3"', 'gang.admit.dev/min-member: "4"\n'
                                     '    gang.admit.dev/min-resource: none'))
    assert main(["review", "--strict", str(path)]) == 1  # denied: its row gives the refusal, not the warning
    captured = capsys.readouterr()
    assert "min-resource" not in captured.out
    assert captured.err == ("admit review --strict: exit 1: 1 object with warnings (-v shows those of the denied "
                            "ones)\n")
    assert main(["review", "--strict", "-v", str(path)]) == 1
    captured = capsys.readouterr()
    assert "rename annotation gang.admit.dev/min-resource to gang.admit.dev/min-resources" in captured.out
    assert captured.err == "admit review --strict: exit 1: 1 object with warnings\n"


def test_no_objects_without_v_is_refused_by_the_parser_as_doing_nothing(capsys):
    import pytest

    pause = str(EXAMPLES / "pause-gang-deployment.yaml")
    for args in ([], ["-o", "json"], ["-o", "yaml", "-v"]):
        with pytest.raises(SystemExit) as e:
            main(["review", "--no-objects", *args, pause])
        assert e.value.code == 2
        assert "admit review: error: argument --no-objects: only with -v" in capsys.readouterr().err
    assert main(["review", "-v", "--no-objects", pause]) == 0
    out = capsys.readouterr().out
    assert "kind: PodGroup" in out and "object after mutation:" not in out
