"""Wrapper kinds (``admit.families.wrappers``): a ScheduledSparkApplication and a RayCronJob are judged by the run they
make and carry their gang annotations through their template to each run, which is then a gang of its own.

The runs are built as the operators build them (spark-operator v2.5.2 ``createSparkApplication``, KubeRay v1.7.0
``constructRayJob``: ``families.wrappers.scheduled_run`` / ``ray_cron_run``), and the RayCluster KubeRay makes for
a RayJob by the KubeRay emulation (``tests/emulations/kuberay.py`` ``cluster_for_parent``); the manifests are the
examples, shaped as the operators' own samples.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import jsonpatch
import yaml

from admit.config import Config
from admit.families.wrappers import ray_cron_run, scheduled_run
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.mutate import mutate
from admit.webhook.validate import validate
from tests.emulations.kuberay import cluster_for_parent
from tests.helpers import EXAMPLES, admission_review

CONFIG = Config()
MIN = "gang.admit.dev/min-member"
LABEL = "scheduling.x-k8s.io/pod-group"


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())


def scheduled(min_member: str = "auto", **more: str) -> dict[str, Any]:
    obj = example("scheduledsparkapplication-spark-pi.yaml")
    obj["metadata"]["annotations"] = {MIN: min_member, **more}
    return obj


def ray_cron(min_member: str = "auto", **more: str) -> dict[str, Any]:
    obj = example("raycronjob-sample.yaml")
    obj["metadata"]["annotations"] = {MIN: min_member, **more}
    return obj


def request(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> Any:
    return parse_review(dumps(admission_review(obj, operation, old=old)))


def admitted(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None) -> dict[str, Any]:
    """``obj`` as stored after admit's mutating webhook; asserts the validating one allows it."""
    decision = mutate(request(obj, operation, old), CONFIG)
    out = jsonpatch.apply_patch(obj, decision.patch) if decision.patch else copy.deepcopy(obj)
    verdict = validate(request(out, operation, old), CONFIG)
    assert verdict.decision.allowed, verdict.decision.message
    return out


def test_a_scheduled_spark_application_every_run_of_which_admit_would_refuse_is_refused_at_create_and_update():
    bad = scheduled("3")
    for operation, old in (("CREATE", None), ("UPDATE", scheduled())):
        decision = validate(request(bad, operation, old), CONFIG).decision
        assert not decision.allowed and decision.code == 403
        assert decision.message.startswith('Set gang.admit.dev/min-member to "auto" or "1": each SparkApplication of '
                                           "ScheduledSparkApplication default/spark-pi-scheduled: "
                                           "gang.admit.dev/min-member=3 would deadlock")
        assert decision.message.endswith("(ScheduledSparkApplication default/spark-pi-scheduled: each "
                                         "SparkApplication it creates would be refused)")
    # the run alone is refused for the same reason at its own admission
    run = scheduled_run(bad, "default")
    run["metadata"]["annotations"] = {MIN: "3"}
    assert not validate(request(run), CONFIG).decision.allowed


def test_a_scheduled_spark_application_without_a_driver_is_refused_naming_its_template_field():
    bad = scheduled()
    del bad["spec"]["template"]["driver"]
    decision = validate(request(bad), CONFIG).decision
    assert not decision.allowed and decision.code == 400
    assert decision.message.startswith("Add spec.template.driver (cores, memory, instances): ")
    assert "each SparkApplication of" in decision.message


def test_each_run_of_a_scheduled_spark_application_is_a_gang_of_its_own_named_after_it():
    stored = admitted(scheduled(**{"gang.admit.dev/schedule-timeout-seconds": "60"}))
    # the template carries the annotations; the wrapper gets no label, no schedulerName, no managed label
    assert stored["spec"]["template"]["driver"]["annotations"] == {
        MIN: "auto", "gang.admit.dev/schedule-timeout-seconds": "60"}
    assert "labels" not in stored["metadata"] and "schedulerName" not in stored["spec"]["template"]["driver"]
    verdict = validate(request(stored), CONFIG)
    assert verdict.ensure is None  # no PodGroup for the wrapper
    assert "(minMember 1)" in verdict.decision.message
    runs = [scheduled_run(stored, "default", when) for when in (datetime(2026, 12, 5, 6, 0, tzinfo=timezone.utc),
                                                               datetime(2026, 12, 5, 6, 3, tzinfo=timezone.utc))]
    groups = []
    for run in runs:
        made = admitted(run)
        assert made["metadata"]["annotations"] == {MIN: "auto", "gang.admit.dev/schedule-timeout-seconds": "60"}
        name = made["metadata"]["name"]
        assert made["spec"]["driver"]["labels"][LABEL] == made["spec"]["executor"]["labels"][LABEL] == name
        plan = validate(request(made), CONFIG).ensure
        assert plan is not None and plan.group_name == name and plan.min_member == 1
        assert plan.schedule_timeout_seconds == 60
        # driver 512m + 384Mi overhead, one executor alike: what the wrapper's template says
        assert plan.min_resources == {"cpu": "2", "memory": "1792Mi"}
        groups.append(plan.group_name)
    assert len(set(groups)) == 2


def test_a_spark_application_with_gang_annotations_in_its_driver_but_no_scheduled_owner_is_not_ganged_by_them():
    run = scheduled_run(admitted(scheduled()), "default")
    del run["metadata"]["ownerReferences"]
    assert mutate(request(run), CONFIG).patch == []
    assert validate(request(run), CONFIG).ensure is None


def test_removing_the_gang_annotation_from_a_wrapper_removes_what_its_template_carried_and_nothing_else():
    for obj, path in ((scheduled(), ("spec", "template", "driver", "annotations")),
                      (ray_cron(), ("spec", "jobTemplate", "rayClusterSpec", "headGroupSpec", "template", "metadata",
                                    "annotations"))):
        stored = admitted(obj)
        node = stored
        for step in path:
            node = node[step]
        node["team"] = "bi"  # the user's own annotation there stays
        new = copy.deepcopy(stored)
        del new["metadata"]["annotations"][MIN]
        after = admitted(new, "UPDATE", stored)
        node = after
        for step in path:
            node = node[step]
        assert node == {"team": "bi"}


def test_a_pod_group_annotation_on_a_wrapper_is_not_carried_and_is_warned_about():
    decision = mutate(request(scheduled(**{"gang.admit.dev/pod-group": "nightly"})), CONFIG)
    stored = jsonpatch.apply_patch(scheduled(**{"gang.admit.dev/pod-group": "nightly"}), decision.patch)
    assert stored["spec"]["template"]["driver"]["annotations"] == {MIN: "auto"}
    warnings = validate(request(stored), CONFIG).decision.warnings
    assert any(w.startswith("remove gang.admit.dev/pod-group: every SparkApplication") for w in warnings)


def test_a_ray_cron_job_every_run_of_which_would_run_fewer_pods_than_min_member_is_refused_naming_its_template():
    decision = validate(request(ray_cron("3")), CONFIG).decision
    assert not decision.allowed and decision.code == 403
    assert decision.message.startswith("Raise the replicas (and minReplicas) of spec.jobTemplate.rayClusterSpec."
                                       "workerGroupSpecs[*]")
    assert ": RayCronJob default/raycronjob-sample: each RayJob it creates runs 2 pods (1 head + 1 worker) but its "\
        "gang needs minMember 3" in decision.message
    assert "workerGroupSpecs[*]" in decision.message and "spec.jobTemplate.rayClusterSpec" in decision.message


def test_a_ray_cron_job_with_autoscaling_above_its_floor_is_refused_as_each_rayjobs_cluster_would_be():
    obj = ray_cron("3")
    obj["spec"]["jobTemplate"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    obj["spec"]["jobTemplate"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = 4
    decision = validate(request(obj), CONFIG).decision
    assert not decision.allowed
    assert "the fewest the Ray autoscaler keeps" in decision.message
    assert "Raise minReplicas of spec.jobTemplate.rayClusterSpec.workerGroupSpecs[*]" in decision.message


def test_each_rayjob_of_a_ray_cron_job_gets_the_annotations_and_its_raycluster_is_a_gang_of_its_own():
    stored = admitted(ray_cron())
    head = stored["spec"]["jobTemplate"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"] == {MIN: "auto"} and "labels" not in head["metadata"]
    job = admitted(ray_cron_run(stored, "default"))
    assert job["metadata"]["annotations"][MIN] == "auto"
    assert job["metadata"]["annotations"]["ray.io/cronjob-scheduled-timestamp"] == "2025-02-19T21:20:00Z"
    job["metadata"]["uid"] = "5b1e0f0e-0000-4000-8000-000000000001"
    cluster = admitted(cluster_for_parent(job, "raycronjob-sample-29000000-x7k2p"))
    plan = validate(request(cluster), CONFIG).ensure
    assert plan is not None and plan.group_name == "raycronjob-sample-29000000-x7k2p" and plan.min_member == 2
    assert cluster["spec"]["headGroupSpec"]["template"]["metadata"]["labels"][LABEL] == plan.group_name


def test_a_ray_cron_job_whose_runs_use_an_existing_cluster_carries_nothing_and_says_so():
    obj = ray_cron()
    del obj["spec"]["jobTemplate"]["rayClusterSpec"]
    obj["spec"]["jobTemplate"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    decision = mutate(request(obj), CONFIG)
    assert decision.patch == []
    warnings = validate(request(obj), CONFIG).decision.warnings
    assert any("runs on an existing cluster" in w for w in warnings)


def test_a_wrapper_created_with_generate_name_is_judged_by_the_runs_of_the_name_kube_apiserver_gives_it():
    for obj in (scheduled(), ray_cron()):
        obj["metadata"]["generateName"] = obj["metadata"].pop("name") + "-"
        verdict = validate(request(obj), CONFIG)
        assert verdict.decision.allowed, verdict.decision.message
        assert f"{obj['kind']} default/{obj['metadata']['generateName']}" in verdict.decision.message
    bad = ray_cron("3")
    bad["metadata"]["generateName"] = bad["metadata"].pop("name") + "-"
    decision = validate(request(bad), CONFIG).decision
    assert not decision.allowed and "each RayJob it creates runs 2 pods" in decision.message
