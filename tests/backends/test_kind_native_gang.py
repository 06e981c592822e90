"""The Job record's native-gang facts (``admit/families/apps.py`` ``JOB``: ``gang_from_parent`` and ``handover``)
decide, through ``backends.apply_backend`` and ``backends.handover_ops``, which Jobs admit leaves to a parent's
Workload (KEP-5547 ``scheduling.k8s.io/group-template-name``) and which it hands to the Job controller
(``--controller-gang Job``); the backends name no kind."""

from __future__ import annotations

import copy

import jsonpatch

from admit.config import Config
from admit.families.apps import GROUP_TEMPLATE_ANNOTATION, JOB
from admit.webhook.mutate import mutate
from admit.webhook.validate import validate
from tests.backends.test_backends import req
from tests.helpers import example

COS = Config()
BETA = Config(gang_backend="workload-api", workload_api_version="v1beta1")
HANDING = BETA.replace(controller_gangs=frozenset({"Job"}))
LABEL = "scheduling.x-k8s.io/pod-group"


def delegated_job() -> dict:
    """``examples/training-job.yaml`` as a JobSet-like parent's controller makes it under KEP-5547: annotated with the
    parent Workload's pod group template that its pods belong to."""
    job = example("training-job.yaml")
    job["metadata"]["annotations"][GROUP_TEMPLATE_ANNOTATION] = "workers"
    return job


def test_the_job_record_carries_the_parent_annotation_and_the_spec_scheduling_admit_hands_over():
    assert JOB.gang_from_parent == "scheduling.k8s.io/group-template-name"
    assert JOB.handover is not None and JOB.handover(4) == {"schedulingPolicy": {"gang": {"minCount": 4}}}


def test_a_job_whose_pod_group_a_parents_workload_makes_is_only_checked_for_its_size_with_either_backend():
    for config in (COS, BETA):
        job = delegated_job()
        decision = mutate(req(job), config)
        assert decision.patch == [], config.gang_backend
        assert ("Job ml/allreduce carries scheduling.k8s.io/group-template-name: its PodGroup comes from a parent's "
                "Workload; admit only checks its size") in decision.notes
        verdict = validate(req(job), config)
        assert verdict.decision.allowed and (verdict.ensure is None or not verdict.ensure.create_pod_group)


def test_a_delegated_job_below_its_min_member_is_still_refused():
    job = delegated_job()
    job["metadata"]["annotations"]["gang.admit.dev/min-member"] = "6"
    verdict = validate(req(job), BETA)
    assert not verdict.decision.allowed and "spec.parallelism=4" in verdict.decision.message


def test_a_managed_job_recreated_with_the_parent_annotation_loses_admits_marks_so_one_gang_mechanism_remains():
    job = delegated_job()  # a re-apply of a Job admit ganged before: its marks are in the manifest
    job["metadata"]["labels"] = {"gang.admit.dev/managed": "true"}
    template = job["spec"]["template"]
    template["metadata"]["labels"][LABEL] = "allreduce"
    template["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
    decision = mutate(req(job), COS)
    out = jsonpatch.apply_patch(copy.deepcopy(job), decision.patch)
    assert LABEL not in out["spec"]["template"]["metadata"]["labels"]
    assert out["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"
    assert "gang.admit.dev/managed" not in out["metadata"]["labels"]
    assert any(w.startswith("nothing to change: spec.scheduling") and "its controller's native gang" in w
               for w in decision.warnings)


def test_the_handover_note_names_the_spec_scheduling_field_the_job_record_sets():
    decision = mutate(req(example("training-job.yaml")), HANDING)
    assert decision.patch == [{"op": "add", "path": "/spec/scheduling",
                               "value": {"schedulingPolicy": {"gang": {"minCount": 4}}}}]
    assert ("Job ml/allreduce goes to the Job controller's native gang: admit sets "
            "spec.scheduling.schedulingPolicy.gang.minCount=4 (--controller-gang Job) and makes no Workload or "
            "PodGroup of its own") in decision.notes


def test_controller_gangs_naming_a_kind_whose_record_has_no_handover_leave_it_to_admits_own_native_gang():
    config = BETA.replace(controller_gangs=frozenset({"Deployment"}))
    dep = example("pause-gang-deployment.yaml")
    out = jsonpatch.apply_patch(copy.deepcopy(dep), mutate(req(dep), config).patch)
    assert "scheduling" not in out["spec"]
    assert out["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": dep["metadata"]["name"]}
