"""What a new user met with the README's quick start, ``admit review`` and ``admit serve --dev``: a misspelt
annotation prefix, a TrainJob reviewed without its runtime, the patch of a refused object, an unknown flag, the
minMember of a refused gang, and the walk-through without kubectl."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from admit.cli import build_parser, config_from_args, main
from admit.families.kinds import READS
from admit.families.trainer import judge_runtime
from admit.webhook.admissionreview import WARNING_ITEM_RUNES
from tests.helpers import EXAMPLES, ROOT

TRAINJOB = EXAMPLES / "trainjob-torch.yaml"
RUNTIME = EXAMPLES / "clustertrainingruntime-torch-distributed.yaml"


def review(capsys: Any, *args: str | Path) -> tuple[int, str, str]:
    code = main(["review", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def review_json(capsys: Any, *args: str | Path) -> tuple[int, list[dict[str, Any]]]:
    code, out, _ = review(capsys, "-o", "json", *args)
    return code, json.loads(out)


def rows(out: str) -> dict[str, list[str]]:
    """The one-line table's rows by object (``"Deployment default/a"``): ``[verdict, group, minMember, rest]``."""
    found = {}
    for line in out.splitlines()[1:]:
        parts = line.split(None, 5)
        if len(parts) >= 5 and parts[0] in ("ALLOWED", "DENIED", "UNCHECKED"):
            found[f"{parts[1]} {parts[2]}"] = [parts[0], parts[3], parts[4], parts[5] if len(parts) > 5 else ""]
    return found


def deployment(name: str, annotations: dict[str, str], replicas: int = 3) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "team", "annotations": annotations},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}}


def write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


# 1. a misspelt prefix


@pytest.mark.parametrize("key, meant", [
    ("gang.admitt.dev/min-member", "gang.admit.dev/min-member"),
    ("gang.admit.io/min-member", "gang.admit.dev/min-member"),
    ("gang-admit.dev/min-member", "gang.admit.dev/min-member"),
    ("gang.admit.dev.min-member", "gang.admit.dev/min-member"),
    ("gang.admit.dev_schedule-timeout-seconds", "gang.admit.dev/schedule-timeout-seconds"),
    ("gang.admitt.dev/minmember", "gang.admit.dev/min-member"),
])
def test_review_warns_about_a_misspelt_prefix_naming_the_key_admit_reads_and_strict_fails(tmp_path, capsys, key,
                                                                                          meant):
    path = write(tmp_path, "typo.yaml", deployment("trainer", {key: "3"}))
    code, out, _ = review(capsys, "--strict", path)
    verdict, group, min_member, rest = rows(out)["Deployment team/trainer"]
    assert code == 1 and (verdict, group, min_member) == ("ALLOWED", "-", "-")
    assert rest.startswith(f"warning: rename annotation {key} to {meant}: admit ignores it (it reads only keys "
                           "under gang.admit.dev/"), rest


def test_a_mis_cased_prefix_is_said_to_be_a_matter_of_case():
    from admit.config import Config
    from admit.gang.plan import unknown_annotation_warnings

    assert unknown_annotation_warnings({"Gang.Admit.dev/min-member": "3"}, Config()) == [
        "rename annotation Gang.Admit.dev/min-member to gang.admit.dev/min-member: admit ignores it (annotation keys "
        "are case-sensitive)"]


def test_other_systems_gang_keys_near_admits_get_no_misspelt_prefix_warning(tmp_path, capsys):
    path = write(tmp_path, "others.yaml", deployment("trainer", {
        "scheduling.volcano.sh/group-min-member": "3", "kueue.x-k8s.io/pod-group-total-count": "3",
        "pod-group.scheduling.sigs.k8s.io/min-member": "3", "gang.admit.device/enabled": "true"}))
    code, out, _ = review(capsys, "--strict", path)
    assert code == 0 and "warning:" not in out and "not a gang: unchanged" in out, out


# 2. an admission-time read review cannot make


def test_every_kind_whose_admission_reads_another_object_has_a_review_case_here():
    # a new WorkloadKind.admission_read needs its case in the tests below (the TrainJob's runtime today)
    assert set(READS) == {("trainer.kubeflow.org", "TrainJob")}


def test_a_trainjob_reviewed_without_its_runtime_is_unchecked_naming_the_runtime_and_how_to_include_it(capsys):
    code, out, _ = review(capsys, TRAINJOB)
    verdict, _, _, rest = rows(out)["TrainJob ml/pytorch-mnist"]
    assert code == 0 and verdict == "UNCHECKED"
    assert rest == ("warning: review ClusterTrainingRuntime torch-distributed too: it is not among the files "
                    "reviewed, and admit's verdict here rests on the JobSet Kubeflow Trainer builds from it")
    assert "1 object: 0 allowed, 0 denied, 1 unchecked" in out
    assert "create ClusterTrainingRuntime" not in out  # the server's words: it may well exist in the cluster
    code, (r,) = review_json(capsys, TRAINJOB)
    assert r["unchecked"] == ["ClusterTrainingRuntime torch-distributed"] and r["allowed"] is True
    assert ("to review ClusterTrainingRuntime torch-distributed as your cluster holds it: kubectl get "
            f"clustertrainingruntimes torch-distributed -o yaml | admit review - {TRAINJOB}") in r["notes"]
    assert main(["review", "--strict", str(TRAINJOB)]) == 1  # a warning: a CI step does not pass it unread


def test_a_spark_executor_reviewed_without_its_driver_is_told_to_review_them_together_not_that_it_is_not_found(
        tmp_path, capsys):
    driver, executor = yaml.safe_load_all((EXAMPLES / "spark-submit-pods.yaml").read_text())
    code, out, _ = review(capsys, write(tmp_path, "executor.yaml", executor))
    row = f"Pod {executor['metadata']['namespace']}/{executor['metadata']['name']}"
    verdict, group, _, rest = rows(out)[row]
    assert code == 0 and verdict == "ALLOWED" and group == "-", out  # in a cluster it is admitted, in no gang
    assert rest == ("warning: this Spark executor joins no PodGroup: its driver pod "
                    f"{driver['metadata']['name']} is not among the files reviewed: review them together, the "
                    "driver first")
    code, out, _ = review(capsys, write(tmp_path, "both.yaml", driver, executor))
    assert rows(out)[row][:2] == ["ALLOWED", driver["metadata"]["labels"]["spark-app-selector"]], out


def test_the_unchecked_sample_in_the_behaviour_doc_is_what_admit_review_prints(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    doc = (ROOT / "docs" / "behaviour.md").read_text().split("### What review cannot see", 1)[1]
    block = doc.split("```\n", 2)[1]
    command, shown = block.split("\n", 1)
    assert command == "$ admit review examples/trainjob-torch.yaml"
    code, out, _ = review(capsys, "examples/trainjob-torch.yaml")
    assert shown.startswith(out), out


def test_a_trainjob_its_runtime_refuses_is_unchecked_alone_and_denied_with_the_runtime(tmp_path, capsys):
    trainjob = yaml.safe_load(TRAINJOB.read_text())
    trainjob["metadata"]["annotations"]["gang.admit.dev/min-member"] = "3"  # 2 training nodes
    path = write(tmp_path, "trainjob.yaml", trainjob)
    code, out, _ = review(capsys, path)
    verdict, _, min_member, _ = rows(out)["TrainJob ml/pytorch-mnist"]
    assert code == 0 and (verdict, min_member) == ("UNCHECKED", "3")
    code, out, _ = review(capsys, path, RUNTIME)
    verdict, _, min_member, rest = rows(out)["TrainJob ml/pytorch-mnist"]
    assert code == 1 and (verdict, min_member) == ("DENIED", "3"), out
    assert "2" in rest and "3" in rest


def test_a_trainjob_reviewed_with_its_runtime_piped_in_as_kubectl_get_prints_it_is_allowed(monkeypatch, capsys):
    import io

    runtime = yaml.safe_load(RUNTIME.read_text())
    runtime["metadata"].update(uid="5f0b3c1e-2a4d-4e8f-9b6a-7c1d2e3f4a5b", resourceVersion="1207",
                               creationTimestamp="2026-12-01T09:00:00Z", generation=1)
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump(runtime)))
    code, out, _ = review(capsys, "-", TRAINJOB)
    assert code == 0 and rows(out)["TrainJob ml/pytorch-mnist"][0] == "ALLOWED", out


def test_a_trainjob_naming_a_namespaced_runtime_gets_the_kubectl_get_of_its_namespace(tmp_path, capsys):
    trainjob = yaml.safe_load(TRAINJOB.read_text())
    trainjob["spec"]["runtimeRef"] = {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                      "name": "torch-team"}
    path = write(tmp_path, "trainjob.yaml", trainjob)
    code, (r,) = review_json(capsys, path)
    assert r["unchecked"] == ["TrainingRuntime ml/torch-team"]
    assert any(n.endswith(f"kubectl get trainingruntimes torch-team -n ml -o yaml | admit review - {path}")
               for n in r["notes"])


def test_a_trainjob_on_standard_input_without_its_runtime_says_to_save_the_runtime_and_review_it_too(monkeypatch,
                                                                                                  capsys):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(TRAINJOB.read_text()))
    code, (r,) = review_json(capsys, "-")
    assert r["unchecked"] == ["ClusterTrainingRuntime torch-distributed"]
    assert ("to review ClusterTrainingRuntime torch-distributed as your cluster holds it: kubectl get "
            "clustertrainingruntimes torch-distributed -o yaml > torch-distributed.yaml, then review it too"
            ) in r["notes"]


def test_a_scale_and_an_hpa_reviewed_without_their_workload_are_unchecked_naming_it(tmp_path, capsys):
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 2, "maxReplicas": 10}}
    scale = EXAMPLES / "denied" / "admission-review-scale-below-min-member.json"
    code, out, _ = review(capsys, scale, write(tmp_path, "hpa.yaml", hpa))
    found = rows(out)
    assert code == 0 and found["Scale default/web"][0] == found["HorizontalPodAutoscaler default/web"][0] == \
        "UNCHECKED", out
    assert found["Scale default/web"][3] == ("warning: review Deployment default/web too: it is not among the files "
                                             "reviewed, and admit's verdict here rests on its gang's minMember")
    code, out, _ = review(capsys, scale, write(tmp_path, "hpa.yaml", hpa), EXAMPLES / "web-gang-deployment.yaml")
    found = rows(out)
    assert code == 1 and found["Scale default/web"][:3] == ["DENIED", "web", "6"], out
    assert found["HorizontalPodAutoscaler default/web"][0] == "DENIED", out


def test_the_servers_own_warning_for_a_runtime_not_found_still_fits_what_kube_apiserver_keeps():
    config = config_from_args(build_parser().parse_args(["review", "-"]))
    long = "a-name-as-long-as-kubernetes-allows-for-a-label-value-sixty-3"
    trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": long, "namespace": long, "annotations": {"gang.admit.dev/min-member": "2"}},
                "spec": {"runtimeRef": {"name": long}}}
    (warning,), refusal = judge_runtime(trainjob, None, config, long)
    assert refusal is None and warning.startswith(f"create ClusterTrainingRuntime {long} (or correct spec.runtimeRef)")
    assert len(warning) <= WARNING_ITEM_RUNES


# 3. the patch of a refused object


def test_a_denied_object_shows_no_patch_and_no_mutated_object_in_yaml_json_or_v(capsys):
    denied = EXAMPLES / "denied" / "deployment-below-min-member.yaml"
    code, out, _ = review(capsys, "-o", "yaml", denied, EXAMPLES / "pause-gang-deployment.yaml")
    by_name = {r["name"]: r for r in yaml.safe_load(out)}
    assert code == 1
    assert by_name["pause-too-small"]["allowed"] is False
    assert by_name["pause-too-small"]["patch"] == [] and by_name["pause-too-small"]["object"] is None
    assert by_name["pause"]["patch"] and by_name["pause"]["object"]["spec"]["template"]["spec"]["schedulerName"]
    code, out, _ = review(capsys, "-v", denied)
    assert "patch:" not in out and "object after mutation" not in out


# 4. an unknown flag


@pytest.mark.parametrize("args", [["review", "--bogus"], ["review", "--bogus", "examples/"],
                                  ["review", "examples/", "--bogus"]])
def test_an_unknown_review_flag_is_argparses_unrecognized_arguments_with_exit_2(capsys, args):
    with pytest.raises(SystemExit) as stop:
        main(args)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.startswith("usage: admit review ") and err.endswith(
        "admit review: error: unrecognized arguments: --bogus\n"), err


def test_review_without_a_path_still_says_the_path_is_required_and_admit_alone_the_command(capsys):
    for args, said in ((["review"], "admit review: error: the following arguments are required: FILE|DIR|-"),
                       ([], "admit: error: the following arguments are required: command"),
                       (["--bogus"], "admit: error: unrecognized arguments: --bogus"),
                       (["status", "--bogus"], "admit status: error: unrecognized arguments: --bogus")):
        with pytest.raises(SystemExit) as stop:
            main(args)
        assert stop.value.code == 2 and capsys.readouterr().err.endswith(said + "\n"), args


def test_the_cli_reference_gives_exit_2_for_a_wrong_argument():
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "2 when an argument is wrong (an unknown flag: usage and 'unrecognized arguments'" in text


# 5. the minMember of a refused gang


def test_denied_rows_show_the_min_member_the_gang_asked_for_and_a_dash_for_auto(tmp_path, capsys):
    small = deployment("small", {"gang.admit.dev/min-member": "5"}, replicas=2)
    auto = deployment("auto", {"gang.admit.dev/min-member": "auto",
                               "gang.admit.dev/backend": "no-such-backend"})
    code, out, _ = review(capsys, write(tmp_path, "denied.yaml", small, auto),
                          EXAMPLES / "denied" / "cronjob-last-wave-below-min-member.yaml",
                          EXAMPLES / "denied" / "statefulset-ordered-ready.yaml")
    found = rows(out)
    assert code == 1
    assert found["Deployment team/small"][:3] == ["DENIED", "small", "5"], out
    assert found["Deployment team/auto"][0] == "DENIED" and found["Deployment team/auto"][2] == "-", out
    assert found["CronJob ml/nightly-shards"][2] == "4"  # read where a CronJob keeps it: its jobTemplate
    assert found["StatefulSet default/zk"][2] == "3"
    code, (r, *_) = review_json(capsys, write(tmp_path, "small.yaml", small))
    assert r["minMember"] == 5 and r["group"] == "small"


def test_v_on_a_jobsets_job_carrying_min_member_does_not_say_it_has_no_gang_annotation(tmp_path, capsys):
    # JobSet copies replicatedJobs[].template's annotations onto its Jobs; a Job a JobSet controls is its child,
    # never a gang of its own, so admit leaves it unchanged: -v must not claim the annotation is absent
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "llama-workers-0", "namespace": "ml",
                        "annotations": {"gang.admit.dev/min-member": "4"},
                        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                             "name": "llama", "uid": "0f3c2a1e-1111-2222-3333-444455556666",
                                             "controller": True, "blockOwnerDeletion": True}]},
           "spec": {"parallelism": 2, "completions": 2,
                    "template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}}}
    code, out, _ = review(capsys, "-v", write(tmp_path, "job.yaml", job))
    assert code == 0 and "=== Job ml/llama-workers-0 (CREATE, " in out
    assert "no gang annotation" not in out, out
    assert "  not a gang for admit here: unchanged" in out, out



# 6. the dev walk-through without kubectl


def walkthrough() -> list[str]:
    """The README's walk-through lines of 'Try it without a cluster' (its second bash block)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Try it without a cluster", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line for line in blocks[1].splitlines()]


def test_every_kubectl_step_of_the_readme_walkthrough_is_followed_by_its_curl_request():
    lines = walkthrough()
    steps = [i for i, line in enumerate(lines) if line.startswith("kubectl ")]
    assert steps
    for i in steps:
        assert lines[i + 1].startswith("# without kubectl"), lines[i]
        assert "curl " in lines[i + 2] and "$ADMIT_FAKE_API" in lines[i + 2], lines[i + 2]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_the_readme_curl_requests_get_what_their_kubectl_steps_get_from_the_dev_server(tmp_path):
    from tests.cli.test_serve_e2e import start_dev, stop

    lines = walkthrough()
    curls = [lines[i + 2] for i, line in enumerate(lines) if line.startswith("kubectl ")]
    proc, port, fake_url, _ = await start_dev(tmp_path)
    env = {**os.environ, "ADMIT_FAKE_API": fake_url, "ADMIT_URL": f"https://127.0.0.1:{port}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    outputs = []
    try:
        for line in curls:
            run = await asyncio.create_subprocess_exec("bash", "-c", line, cwd=ROOT, env=env,
                                                       stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(run.communicate(), 60)
            outputs.append((run.returncode, out.decode(), err.decode()))
    finally:
        log = await stop(proc)
    assert proc.returncode == 0, log
    scale, create, runtime = outputs
    for (code, out, err), webhook, words in ((scale, "scale", "Scale to at least 6"),
                                             (create, "workloads", "Set spec.replicas to at least 3")):
        status = json.loads(out)
        assert code == 0 and status["code"] == 403 and status["reason"] == "Forbidden", (out, err)
        assert status["message"].startswith(f'admission webhook "{webhook}.validate.admit.dev" denied the request: '
                                            f"{words}"), status
    code, out, err = runtime
    assert code == 0 and "ALLOWED  TrainJob ml/pytorch-mnist" in out and "UNCHECKED" not in out, (out, err)
