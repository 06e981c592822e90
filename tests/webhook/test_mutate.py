"""The mutating decision on real manifests: labels, schedulerName, idempotence, what is never touched."""

import copy

import jsonpatch

from admit.config import Config
from admit.webhook.mutate import mutate
from admit.webhook.admissionreview import parse_review, dumps
from tests.helpers import admission_review, controller_pod, example, example_docs

CONFIG = Config()
LABEL = "scheduling.x-k8s.io/pod-group"


def run(obj, operation="CREATE", **kw):
    req = parse_review(dumps(admission_review(obj, operation, **kw)))
    return mutate(req, CONFIG)


def test_a_gang_deployment_template_gets_the_group_label_and_scheduler_name():
    dep = example("pause-gang-deployment.yaml")
    decision = run(dep)
    out = jsonpatch.apply_patch(dep, decision.patch)
    assert out["spec"]["template"]["metadata"]["labels"] == {"app": "pause", LABEL: "pause"}
    assert out["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert out["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
    assert decision.warnings == []


def test_a_second_pass_over_the_mutated_object_gives_an_empty_patch():
    dep = example("pause-gang-deployment.yaml")
    once = jsonpatch.apply_patch(dep, run(dep).patch)
    assert run(once).patch == []


def test_the_defaulted_default_scheduler_is_replaced_by_the_coscheduling_profile():
    dep = example("web-gang-deployment.yaml")
    assert dep["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"
    ops = run(dep).patch
    assert {"op": "replace", "path": "/spec/template/spec/schedulerName", "value": "scheduler-plugins-scheduler"} in ops


def test_an_explicit_other_scheduler_is_kept_with_a_warning():
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    decision = run(dep)
    assert not any(op["path"].endswith("schedulerName") for op in decision.patch)
    assert any("volcano" in w for w in decision.warnings)


def test_the_group_name_annotation_names_the_label():
    sts = example("etcd-statefulset.yaml")
    out = jsonpatch.apply_patch(sts, run(sts).patch)
    assert out["spec"]["template"]["metadata"]["labels"][LABEL] == "etcd-quorum"


def test_a_template_without_metadata_gets_the_metadata_map_added():
    dep = example("pause-gang-deployment.yaml")
    del dep["spec"]["template"]["metadata"]
    out = jsonpatch.apply_patch(dep, run(dep).patch)
    assert out["spec"]["template"]["metadata"] == {"labels": {LABEL: "pause"}}


def test_a_deployment_without_the_annotation_is_not_touched():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {}
    assert run(dep).patch == []


def test_malformed_annotations_are_left_to_the_validating_webhook():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "three"
    decision = run(dep)
    assert decision.allowed and decision.patch == []


def test_a_job_template_is_mutated_on_create_but_only_warned_about_on_update():
    job = example("training-job.yaml")
    assert run(job).patch
    decision = run(job, "UPDATE", old=job)
    assert decision.patch == [{"op": "add", "path": "/metadata/labels", "value": {"gang.admit.dev/managed": "true"}}]
    assert any("immutable" in w for w in decision.warnings)


def test_a_pod_carrying_the_group_label_gets_the_scheduler_name_only():
    # the seed blog post's shape: the template carries the label, nothing else is gang-aware
    pod = controller_pod(example_docs("seed-labelled-deployment.yaml")[1])
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    decision = run(pod, strip_namespace=True)
    assert decision.patch == [{"op": "replace", "path": "/spec/schedulerName", "value": "scheduler-plugins-scheduler"}]


def test_a_pod_from_a_mutated_template_needs_no_patch():
    dep = example("pause-gang-deployment.yaml")
    pod = controller_pod(jsonpatch.apply_patch(dep, run(dep).patch))
    assert run(pod, strip_namespace=True).patch == []


def test_a_plain_pod_outside_any_group_is_not_touched():
    pod = controller_pod(example("web-gang-deployment.yaml"))
    assert run(pod).patch == []


def test_pods_are_never_touched_on_update():
    pod = controller_pod(example("web-gang-deployment.yaml"))
    pod["metadata"]["name"] = "web-7d9f8b6c5d-abcde"
    pod["metadata"]["labels"][LABEL] = "web"
    assert run(pod, "UPDATE", old=pod).patch == []


def test_a_bare_pod_with_the_annotations_joins_its_named_group():
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "worker-0", "namespace": "default",
                     "annotations": {"gang.admit.dev/min-member": "2", "gang.admit.dev/pod-group": "pair"}},
        "spec": {"containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
    }
    out = jsonpatch.apply_patch(pod, run(pod).patch)
    assert out["metadata"]["labels"] == {LABEL: "pair"}
    assert out["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_a_controlled_pod_with_gang_annotations_is_told_to_annotate_its_controller():
    dep = example("web-gang-deployment.yaml")
    dep["spec"]["template"]["metadata"]["annotations"] = {"gang.admit.dev/min-member": "3"}
    pod = controller_pod(dep)
    decision = run(pod)
    assert decision.patch == []
    assert any("annotate the controller" in w for w in decision.warnings)


def test_delete_and_subresources_pass_untouched():
    dep = example("pause-gang-deployment.yaml")
    assert run(None, "DELETE", old=dep).patch == []
    assert run(dep, "UPDATE", old=dep, sub_resource="status").patch == []


def test_a_custom_annotation_prefix_and_scheduler_name_are_honoured():
    config = Config(annotation_prefix="batch.example.com", scheduler_name="default-scheduler")
    dep = example("pause-gang-deployment.yaml")
    ann = dep["metadata"]["annotations"]
    dep["metadata"]["annotations"] = {k.replace("gang.admit.dev", "batch.example.com"): v for k, v in ann.items()}
    del dep["spec"]["template"]["metadata"]["labels"]["app"]
    req = parse_review(dumps(admission_review(copy.deepcopy(dep))))
    out = jsonpatch.apply_patch(dep, mutate(req, config).patch)
    assert out["spec"]["template"]["metadata"]["labels"] == {LABEL: "pause"}
    assert out["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"
    assert out["metadata"]["labels"] == {"batch.example.com/managed": "true"}


def test_removing_the_annotation_on_update_removes_the_group_label_admit_added():
    dep = example("pause-gang-deployment.yaml")
    ganged = jsonpatch.apply_patch(dep, run(dep).patch)
    new = copy.deepcopy(ganged)
    new["metadata"]["annotations"] = {}
    out = jsonpatch.apply_patch(new, run(new, "UPDATE", old=ganged).patch)
    assert LABEL not in out["spec"]["template"]["metadata"]["labels"]
    assert "gang.admit.dev/managed" not in out["metadata"]["labels"]
    assert out["spec"]["template"]["metadata"]["labels"] == {"app": "pause"}


def test_removing_the_annotation_leaves_a_group_label_the_user_changed():
    dep = example("pause-gang-deployment.yaml")
    ganged = jsonpatch.apply_patch(dep, run(dep).patch)
    new = copy.deepcopy(ganged)
    new["metadata"]["annotations"] = {}
    new["spec"]["template"]["metadata"]["labels"][LABEL] = "pg1"
    out = jsonpatch.apply_patch(new, run(new, "UPDATE", old=ganged).patch)
    assert out["spec"]["template"]["metadata"]["labels"][LABEL] == "pg1"


def test_an_update_of_a_workload_that_never_was_a_gang_is_not_touched():
    docs = example_docs("seed-labelled-deployment.yaml")
    dep = docs[1]
    assert run(dep, "UPDATE", old=dep).patch == []
