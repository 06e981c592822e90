"""The validating decision on real manifests: denials with actionable messages, and the work it asks for."""

import copy

import pytest

from admit.config import Config
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.validate import ScaleCheck, scale_verdict, validate
from tests.helpers import admission_review, example

CONFIG = Config()


def verdict(obj, operation="CREATE", **kw):
    return validate(parse_review(dumps(admission_review(obj, operation, **kw))), CONFIG)


def test_a_deployment_with_replicas_below_min_member_is_denied_with_the_numbers_and_the_fix():
    v = verdict(example("denied/deployment-below-min-member.yaml"))
    assert not v.decision.allowed
    assert v.decision.code == 403
    msg = v.decision.message
    assert "Deployment default/pause-too-small" in msg
    assert "spec.replicas=2" in msg and "minMember 3" in msg
    assert "Set spec.replicas to at least 3" in msg
    assert v.ensure is None


def test_an_update_lowering_replicas_below_min_member_is_denied():
    dep = example("pause-gang-deployment.yaml")
    new = {**dep, "spec": {**dep["spec"], "replicas": 1}}
    v = verdict(new, "UPDATE", old=dep)
    assert not v.decision.allowed and "spec.replicas=1" in v.decision.message


def test_zero_replicas_pauses_a_gang_and_is_allowed_with_a_warning():
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["replicas"] = 0
    v = verdict(dep)
    assert v.decision.allowed
    assert any("spec.replicas=0" in n for n in v.decision.notes) and not v.decision.warnings


def test_a_job_below_min_member_names_parallelism():
    job = example("training-job.yaml")
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = "6"
    v = verdict(job)
    assert not v.decision.allowed and "spec.parallelism=4" in v.decision.message


def test_a_job_with_fewer_completions_than_parallelism_counts_completions():
    job = example("training-job.yaml")
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = "4"
    job["spec"]["completions"] = 2
    v = verdict(job)
    assert not v.decision.allowed and "spec.completions=2" in v.decision.message


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("gang.admit.dev/min-member", "0", "positive integer"),
        ("gang.admit.dev/min-member", "-2", "positive integer"),
        ("gang.admit.dev/min-member", "three", "positive integer"),
        ("gang.admit.dev/min-member", "2.5", "positive integer"),
        ("gang.admit.dev/schedule-timeout-seconds", "0", "1 to 900"),
        ("gang.admit.dev/schedule-timeout-seconds", "3600", "1 to 900"),
        ("gang.admit.dev/min-resources", "some", '"auto" or "none"'),
        ("gang.admit.dev/pod-group", "Not_A_Label", "lowercase"),
        ("gang.admit.dev/pod-group", "x" * 64, "at most 63"),
    ],
)
def test_malformed_annotation_values_are_denied_naming_the_annotation(key, value, fragment):
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"][key] = value
    v = verdict(dep)
    assert not v.decision.allowed
    assert v.decision.code == 400
    assert key in v.decision.message and fragment in v.decision.message


def test_every_malformed_gang_annotation_is_refused_in_the_one_answer_each_with_its_fix():
    # as kube-apiserver's validation answers every field error at once: one apply, not one per mistake
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"].update({"gang.admit.dev/min-member": "three",
                                           "gang.admit.dev/schedule-timeout-seconds": "3600",
                                           "gang.admit.dev/pod-group": "Not_A_Label"})
    v = verdict(dep)
    assert not v.decision.allowed and v.decision.code == 400
    fixes = v.decision.message.split("; ")
    assert [f.split(" to ")[0] for f in fixes] == ["Set annotation gang.admit.dev/min-member",
                                                   "Set annotation gang.admit.dev/schedule-timeout-seconds",
                                                   "Set annotation gang.admit.dev/pod-group"], v.decision.message
    assert all("is invalid" in f for f in fixes)


def test_a_workload_name_too_long_for_a_label_value_points_to_the_pod_group_annotation():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["name"] = "a" * 70
    v = verdict(dep)
    assert not v.decision.allowed and "gang.admit.dev/pod-group" in v.decision.message


def test_an_ordered_ready_statefulset_gang_is_denied():
    v = verdict(example("denied/statefulset-ordered-ready.yaml"))
    assert not v.decision.allowed and v.decision.message.startswith("Set spec.podManagementPolicy to Parallel: ")


def test_an_ordered_ready_statefulset_update_explains_the_field_is_immutable():
    sts = example("denied/statefulset-ordered-ready.yaml")
    v = verdict(sts, "UPDATE", old=sts)
    assert "immutable" in v.decision.message


def test_an_ordered_ready_statefulset_of_one_is_allowed():
    sts = example("denied/statefulset-ordered-ready.yaml")
    sts["metadata"]["annotations"]["gang.admit.dev/min-member"] = "1"
    assert verdict(sts).decision.allowed


def test_an_allowed_gang_workload_asks_for_its_pod_group():
    v = verdict(example("pause-gang-deployment.yaml"), dry_run=True)
    assert v.decision.allowed
    assert v.ensure is not None and v.ensure.group_name == "pause" and v.ensure.min_member == 3
    assert v.ensure.pod_group_spec() == {
        "minMember": 3, "minResources": {"cpu": "300m", "memory": "192Mi"}, "scheduleTimeoutSeconds": 10,
    }
    assert v.dry_run is True


def test_min_resources_none_leaves_min_resources_out():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-resources"] = "none"
    assert "minResources" not in verdict(dep).ensure.pod_group_spec()


def test_a_scale_down_below_min_member_asks_for_the_parent_then_is_denied():
    dep = example("web-gang-deployment.yaml")
    review = admission_review(
        {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "default"},
         "spec": {"replicas": 2}},
        "UPDATE",
        old={"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web", "namespace": "default"},
             "spec": {"replicas": 8}},
        sub_resource="scale", resource=("apps", "v1", "deployments"), kind=("autoscaling", "v1", "Scale"),
    )
    v = validate(parse_review(dumps(review)), CONFIG)
    assert v.scale == ScaleCheck("apps", "v1", "Deployment", "deployments", "default", "web", 2)
    d = scale_verdict(dep, v.scale, CONFIG).decision
    assert not d.allowed and "to 2 replicas" in d.message and "minMember 6" in d.message


def scale_review(new, old, name="web"):
    return admission_review(
        {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name}, "spec": {"replicas": new}},
        "UPDATE",
        old={"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name}, "spec": {"replicas": old}},
        sub_resource="scale", resource=("apps", "v1", "deployments"), kind=("autoscaling", "v1", "Scale"),
    )


def test_a_scale_to_zero_needs_no_lookup():
    v = validate(parse_review(dumps(scale_review(0, 8))), CONFIG)
    assert v.decision.allowed and v.scale is None


@pytest.mark.parametrize("new,old", [(10, 8), (2, 0), (4, 0)])
def test_a_scale_up_is_checked_too_since_a_scale_from_zero_can_land_below_min_member(new, old):
    v = validate(parse_review(dumps(scale_review(new, old))), CONFIG)
    assert v.scale == ScaleCheck("apps", "v1", "Deployment", "deployments", "default", "web", new)


def test_a_scale_from_zero_below_min_member_is_refused_like_the_same_deployment_update():
    # A Deployment with min-member "3" stored at replicas 0, then deployments/scale 0 -> 2.
    dep = example("web-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "3"
    dep["spec"]["replicas"] = 0
    v = validate(parse_review(dumps(scale_review(2, 0))), CONFIG)
    scale = scale_verdict(dep, v.scale, CONFIG)
    updated = copy.deepcopy(dep)
    updated["spec"]["replicas"] = 2
    update = validate(parse_review(dumps(admission_review(updated, "UPDATE", old=dep))), CONFIG)
    assert not scale.decision.allowed and not update.decision.allowed
    assert "to 2 replicas" in scale.decision.message and "minMember 3" in scale.decision.message
    assert scale.ensure is None


def test_a_scale_of_an_auto_gang_asks_for_its_pod_group_at_the_new_size():
    dep = example("web-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    dep["spec"]["replicas"] = 0
    v = scale_verdict(dep, ScaleCheck("apps", "v1", "Deployment", "deployments", "default", "web", 4), CONFIG,
                      dry_run=True)
    assert v.decision.allowed and v.dry_run
    assert v.ensure is not None and v.ensure.pod_group_spec()["minMember"] == 4


def test_a_scale_of_an_auto_gang_follows_the_new_replica_count():
    dep = example("web-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    d = scale_verdict(dep, ScaleCheck("apps", "v1", "Deployment", "deployments", "default", "web", 2), CONFIG).decision
    assert d.allowed


def test_a_scale_of_a_workload_without_the_annotation_is_allowed():
    dep = example("web-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {}
    assert scale_verdict(dep, ScaleCheck("apps", "v1", "Deployment", "deployments", "default", "web", 1), CONFIG).decision.allowed


def test_objects_of_unknown_kinds_and_delete_requests_are_allowed_untouched():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default",
          "annotations": {"gang.admit.dev/min-member": "3"}}, "data": {}}
    assert verdict(cm).decision.allowed
    assert verdict(None, "DELETE", old=example("pause-gang-deployment.yaml")).decision.allowed


def test_conflicting_template_label_and_annotation_are_denied():
    dep = example("etcd-statefulset.yaml")
    dep["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "other"
    v = verdict(dep)
    assert not v.decision.allowed and "contradicts" in v.decision.message


def test_a_pre_labelled_template_keeps_its_group_name():
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pg1"
    assert verdict(dep).ensure.group_name == "pg1"


def test_non_numeric_replicas_are_a_clear_denial_not_a_crash():
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["replicas"] = "three"
    v = verdict(dep)
    assert not v.decision.allowed and "spec.replicas" in v.decision.message


@pytest.mark.parametrize("plural,kind", [("statefulsets", "StatefulSet"), ("replicasets", "ReplicaSet")])
def test_statefulset_and_replicaset_scale_below_min_member_are_denied(plural, kind):
    parent = example("etcd-statefulset.yaml") if kind == "StatefulSet" else example("web-gang-deployment.yaml")
    parent["kind"] = kind
    name = parent["metadata"]["name"]
    ns = parent["metadata"]["namespace"]
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": ns},
             "spec": {"replicas": 2}}
    old = {**scale, "spec": {"replicas": 5}}
    review = admission_review(scale, "UPDATE", old=old, sub_resource="scale", resource=("apps", "v1", plural),
                              kind=("autoscaling", "v1", "Scale"))
    v = validate(parse_review(dumps(review)), CONFIG)
    assert v.scale is not None and v.scale.kind == kind and v.scale.plural == plural
    d = scale_verdict(parent, v.scale, CONFIG).decision
    assert not d.allowed and f"{kind} {ns}/{name}" in d.message


def test_a_misspelt_annotation_is_named_with_the_closest_known_key():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-resource"] = "none"
    v = verdict(dep)
    assert v.decision.allowed
    assert any(w.startswith("rename annotation gang.admit.dev/min-resource to gang.admit.dev/min-resources: it is "
                            "not one of admit's") for w in v.decision.warnings)


def test_an_annotation_key_with_a_trailing_space_is_quoted_so_the_rename_reads_as_a_change():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {"gang.admit.dev/min-member ": "3"}
    v = verdict(dep)
    assert v.decision.allowed and v.ensure is None
    assert any(w.startswith("rename annotation 'gang.admit.dev/min-member ' to gang.admit.dev/min-member:")
               for w in v.decision.warnings)


def test_a_misspelt_min_member_warns_that_no_gang_is_made():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {"gang.admit.dev/minmember": "3"}
    v = verdict(dep)
    assert v.decision.allowed and v.ensure is None
    assert any(w.startswith("rename annotation gang.admit.dev/minmember to gang.admit.dev/min-member")
               for w in v.decision.warnings)


def test_annotating_an_existing_job_creates_no_pod_group_its_pods_could_never_join():
    job = example("training-job.yaml")
    v = verdict(job, "UPDATE", old=job)
    assert v.decision.allowed and v.ensure is None
    labelled = copy.deepcopy(job)
    labelled["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "allreduce"
    assert verdict(labelled, "UPDATE", old=labelled).ensure is not None


def test_a_statefulset_without_a_policy_is_told_ordered_ready_is_the_default():
    v = verdict(example("denied/statefulset-ordered-ready.yaml"))
    assert "OrderedReady (the default when spec.podManagementPolicy is not set)" in v.decision.message


def test_a_statefulset_whose_policy_kube_apiserver_defaulted_is_also_told_it_is_the_default():
    sts = example("denied/statefulset-ordered-ready.yaml")
    sts["spec"]["podManagementPolicy"] = "OrderedReady"  # what admission receives: defaulting runs before it
    v = verdict(sts)
    assert "OrderedReady (the default when spec.podManagementPolicy is not set)" in v.decision.message


def test_a_min_member_beyond_int32_is_refused():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "99999999999"
    v = verdict(dep)
    assert not v.decision.allowed and "int32" in v.decision.message


@pytest.mark.parametrize("key", ["gang.admit.io/min-member", "Gang.Admit.dev/min-member", "gang.admit.dev.x/min-member"])
def test_a_misspelt_or_mis_cased_prefix_warns_naming_the_key_admit_reads(key):
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {key: "3"}
    v = verdict(dep)
    assert v.decision.allowed and v.ensure is None
    assert any(w.startswith(f"rename annotation {key} to gang.admit.dev/min-member: admit ignores it")
               for w in v.decision.warnings)


def test_other_systems_annotations_get_no_prefix_warning():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"].update({"kueue.x-k8s.io/pod-group-total-count": "3",
                                           "scheduling.volcano.sh/group-min-member": "3",
                                           "deployment.kubernetes.io/revision": "1"})
    assert verdict(dep).decision.warnings == []


def test_gang_annotations_on_the_pod_template_instead_of_the_workload_get_a_hint():
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["template"]["metadata"]["annotations"] = dep["metadata"].pop("annotations")
    v = verdict(dep)
    assert v.decision.allowed and v.ensure is None
    assert any(w.startswith("move the gang.admit.dev/ annotations to the Deployment's own metadata.annotations: on "
                            "the pod template (spec.template) they have no effect") for w in v.decision.warnings)


def _moved_to_templates(obj, *paths):
    """``obj`` with its gang annotations moved off its own metadata onto the pod template at each key path."""
    annotations = obj["metadata"].pop("annotations")
    for path in paths:
        node = obj
        for step in path:
            node = node[step]
        node.setdefault("metadata", {})["annotations"] = dict(annotations)
    return obj


@pytest.mark.parametrize("manifest,paths,where", [
    ("jobset-pytorch.yaml", [("spec", "replicatedJobs", 0, "template", "spec", "template")],
     ["spec.replicatedJobs[0].template.spec.template"]),
    ("leaderworkerset-vllm.yaml", [("spec", "leaderWorkerTemplate", "leaderTemplate"),
                                   ("spec", "leaderWorkerTemplate", "workerTemplate")],
     ["spec.leaderWorkerTemplate.leaderTemplate", "spec.leaderWorkerTemplate.workerTemplate"]),
    ("raycluster-autoscaler.yaml", [("spec", "headGroupSpec", "template"), ("spec", "workerGroupSpecs", 0, "template")],
     ["spec.headGroupSpec.template", "spec.workerGroupSpecs[0].template"]),
    ("cronjob-nightly-eval.yaml", [("spec", "jobTemplate", "spec", "template")],
     ["spec.jobTemplate.spec.template"]),
])
def test_gang_annotations_on_any_kinds_pod_templates_instead_of_the_workload_get_a_hint_naming_each_template(
        manifest, paths, where):
    obj = example(manifest)
    if obj["kind"] == "CronJob":  # its gang annotations live on spec.jobTemplate.metadata (WorkloadKind.annotations)
        obj["metadata"]["annotations"] = obj["spec"]["jobTemplate"]["metadata"].pop("annotations")
    v = verdict(_moved_to_templates(obj, *paths))
    assert v.decision.allowed and v.ensure is None
    hints = [w for w in v.decision.warnings if w.startswith("move the gang.admit.dev/ annotations")]
    assert hints == [f"move the gang.admit.dev/ annotations to the {obj['kind']}'s own metadata.annotations: on the "
                     f"pod template ({w}) they have no effect" for w in where], v.decision.warnings


def test_the_annotations_a_raycronjob_carries_in_its_head_template_get_no_hint_they_reach_each_rayjob():
    cron = example("raycronjob-sample.yaml")
    head = ("spec", "jobTemplate", "rayClusterSpec", "headGroupSpec", "template")
    v = verdict(_moved_to_templates(cron, head))
    assert not [w for w in v.decision.warnings if w.startswith("move the")], v.decision.warnings


def test_a_bare_pod_asking_for_a_gang_of_3_without_a_group_name_is_told_how_to_fill_it():
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "solo", "namespace": "default", "annotations": {"gang.admit.dev/min-member": "3"}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    v = verdict(pod)
    assert v.decision.allowed
    assert any(w.startswith("give each of the 3 pods the same gang.admit.dev/pod-group, or use a Deployment or Job: "
                            "this pod names no group") for w in v.decision.warnings)
    pod["metadata"]["annotations"]["gang.admit.dev/pod-group"] = "trio"
    assert not any("names no group" in w for w in verdict(pod).decision.warnings)


def test_gang_settings_without_min_member_are_allowed_with_one_warning_naming_every_key_found():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {"gang.admit.dev/schedule-timeout-seconds": "60",
                                      "deployment.kubernetes.io/revision": "1", "gang.admit.dev/pod-group": "trainers"}
    v = verdict(dep)
    assert v.decision.allowed and v.ensure is None
    assert v.decision.warnings == [
        "add gang.admit.dev/min-member, or remove gang.admit.dev/schedule-timeout-seconds, gang.admit.dev/pod-group: "
        "without gang.admit.dev/min-member admit makes no gang of this object, so they are ignored"]
    dep["metadata"]["annotations"] = {"gang.admit.dev/schedule-timeout-seconds": "60"}
    (warning,) = verdict(dep).decision.warnings
    assert warning.startswith("add gang.admit.dev/min-member, or remove gang.admit.dev/schedule-timeout-seconds: ")


def test_admits_own_bookkeeping_keys_and_managed_label_without_min_member_give_no_warning():
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {"gang.admit.dev/owner": "apps/Deployment/pause",
                                      "gang.admit.dev/group-spec": "{}"}
    dep["metadata"]["labels"] = {"app": "pause", "gang.admit.dev/managed": "true"}
    v = verdict(dep)
    assert v.decision.allowed and v.decision.warnings == []
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "3"  # a gang: its settings are read, no warning
    dep["metadata"]["annotations"]["gang.admit.dev/schedule-timeout-seconds"] = "60"
    assert not any("admit makes no gang" in w for w in verdict(dep).decision.warnings)


def test_a_gang_setting_under_another_annotation_prefix_is_read_under_that_prefix():
    config = Config(annotation_prefix="gang.example.com")
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"] = {"gang.admit.dev/schedule-timeout-seconds": "60",
                                      "gang.example.com/backend": "coscheduling"}
    (warning,) = validate(parse_review(dumps(admission_review(dep))), config).decision.warnings
    assert warning.startswith("add gang.example.com/min-member, or remove gang.example.com/backend: ")
