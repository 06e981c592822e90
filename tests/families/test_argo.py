"""Argo Workflows step pods (``admit.families.argo``): ganged by their own annotations as members of a shared group
whose size follows the members still to run (``backends.coscheduling.podgroup.members_still_to_run``).

The pods are built as argo-workflows v4.1.2's workflow controller builds them (``tests/emulations/argo.py``
``step_pod``, from ``workflowpod.go`` ``createWorkflowPod``) from ``examples/argo-workflow-gang-step.yaml``.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from admit.backends.coscheduling.podgroup import merge_shared_spec, members_still_to_run
from admit.config import Config
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.mutate import mutate
from admit.webhook.validate import validate
from tests.emulations.argo import step_pod
from tests.helpers import EXAMPLES, admission_review

CONFIG = Config()
LABEL = "scheduling.x-k8s.io/pod-group"


def workflow() -> dict[str, Any]:
    obj = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    obj["metadata"] = {"name": "train-x7k2p", "namespace": "default", "uid": "6c0a7d1e-0000-4000-8000-00000000000a"}
    return obj


def worker_pod(index: int = 0, attempt: int = 0, *, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    wf = workflow()
    template = copy.deepcopy(wf["spec"]["templates"][1])
    for key in drop:
        template["metadata"]["annotations"].pop(key)
    return step_pod(wf, template, f"train-x7k2p[0].train({index}:{index})({attempt})", {"rank": str(index)})


def request(obj: dict[str, Any]) -> Any:
    return parse_review(dumps(admission_review(obj, "CREATE", strip_namespace=True, namespace="default")))


def test_an_argo_step_pod_with_gang_annotations_joins_the_group_its_template_names_instead_of_being_told_to_annotate_its_controller():
    pod = worker_pod()
    decision = mutate(request(pod), CONFIG)
    assert not any("annotate the controller" in w for w in decision.warnings)
    made = jsonpatch.apply_patch(pod, decision.patch)
    assert made["metadata"]["labels"][LABEL] == "train-x7k2p-train"
    assert made["spec"]["schedulerName"] == CONFIG.scheduler_name
    verdict = validate(request(made), CONFIG)
    plan = verdict.ensure
    assert verdict.decision.allowed and plan is not None
    assert (plan.group_name, plan.min_member, plan.shared, plan.follows_members) == ("train-x7k2p-train", 3, True, True)
    assert plan.min_resources == {"cpu": "3", "memory": "6Gi"}


def test_an_argo_step_pod_without_a_pod_group_annotation_shares_a_group_named_after_its_workflow_with_a_note():
    made = jsonpatch.apply_patch(worker_pod(drop=("gang.admit.dev/pod-group",)),
                                 mutate(request(worker_pod(drop=("gang.admit.dev/pod-group",))), CONFIG).patch)
    assert made["metadata"]["labels"][LABEL] == "train-x7k2p"
    verdict = validate(request(made), CONFIG)
    assert "is named after the Workflow" in verdict.decision.message


def test_a_pod_of_another_controller_with_gang_annotations_is_still_told_to_annotate_that_controller():
    pod = worker_pod()
    pod["metadata"]["ownerReferences"][0].update(apiVersion="apps/v1", kind="ReplicaSet")
    decision = mutate(request(pod), CONFIG)
    assert decision.patch == [] and any("annotate the controller" in w for w in decision.warnings)


def phases(*names: str, node: str | None = "node-1") -> list[dict[str, Any]]:
    """Pods of the group in these phases; a Running or finished one was placed on ``node``."""
    return [{"metadata": {"name": f"p{i}"}, "spec": {"nodeName": node} if p != "Pending" else {},
             "status": {"phase": p}} for i, p in enumerate(names)]


def test_a_group_that_follows_its_members_is_sized_to_those_still_to_run_once_one_finished():
    desired = {"minMember": 3, "minResources": {"cpu": "3", "memory": "6Gi"}}
    assert members_still_to_run(desired, {}, 3, phases("Running", "Pending")) is None  # members agree as usual
    assert members_still_to_run(desired, {}, 3, phases("Succeeded", "Succeeded", "Failed")) == {
        "minMember": 1, "minResources": {"cpu": "1", "memory": "2Gi"}}
    # two members failed: their retries gang together (the second retry finds the first still pending)
    assert members_still_to_run(desired, {"scheduleTimeoutSeconds": 120}, 3,
                                phases("Succeeded", "Failed", "Failed", "Pending")) == {
        "minMember": 2, "minResources": {"cpu": "2", "memory": "4Gi"}, "scheduleTimeoutSeconds": 120}
    # a member still running is placed: if it succeeds while the retry waits, the retry must not be short of it
    assert members_still_to_run(desired, {}, 3, phases("Succeeded", "Running", "Failed"))["minMember"] == 1
    # every member of the last round succeeded: a later step naming the group starts again at its own size
    assert members_still_to_run(desired, {}, 3, phases("Succeeded", "Succeeded", "Succeeded"))["minMember"] == 3


def test_a_retried_member_lowers_the_stored_group_while_a_plain_shared_group_never_lowers():
    made = jsonpatch.apply_patch(worker_pod(2, 1), mutate(request(worker_pod(2, 1)), CONFIG).patch)
    plan = validate(request(made), CONFIG).ensure
    stored = {"spec": {"minMember": 3, "minResources": {"cpu": "3", "memory": "6Gi"}, "scheduleTimeoutSeconds": 120}}
    spec, warnings = merge_shared_spec(stored, plan, phases("Succeeded", "Succeeded", "Failed"))
    assert spec["minMember"] == 1 and warnings == []
    plain = dataclasses.replace(plan, follows_members=False)
    assert merge_shared_spec(stored, plain, phases("Succeeded", "Succeeded", "Failed"))[0]["minMember"] == 3


def test_admit_review_says_which_templates_of_a_workflow_gang_their_step_pods_and_what_would_refuse_them(capsys):
    from admit.cli import main

    # the Workflow itself never reaches admit's webhooks: review says what its step pods will get
    assert main(["review", "-v", str(EXAMPLES / "argo-workflow-gang-step.yaml")]) == 0
    out = capsys.readouterr().out
    assert "the step pods of template worker are ganged when Argo creates them: PodGroup train-<5 characters>-train, " \
           "minMember 3" in out
    wf = workflow()
    wf["metadata"]["annotations"] = {"gang.admit.dev/min-member": "3"}
    wf["spec"]["templates"][1]["metadata"]["annotations"]["gang.admit.dev/min-member"] = "zero"
    from admit.families.argo import workflow_review
    warnings, notes = workflow_review(wf, CONFIG)
    assert warnings[0].startswith("move the gang.admit.dev/* annotations to the metadata.annotations of the step's "
                                  "template")
    assert warnings[1].startswith("correct template worker's metadata.annotations, or each of its pods is refused: "
                                  "Set annotation gang.admit.dev/min-member to a positive integer")
    assert '"zero" is invalid' in warnings[1]
    assert notes == [] and all(len(w) <= 256 for w in warnings)


def test_an_argo_step_pod_asking_for_an_auto_min_member_is_refused_at_its_create_with_the_number_to_set():
    # Before: allowed as minMember 1 (no gang), its warning only in the workflow controller's log. Argo tells a step
    # pod nothing of its siblings (createWorkflowPod), so the refusal, shown as the node's error, names the fix.
    pod = worker_pod()
    pod["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    assert mutate(request(pod), CONFIG).patch == []  # the validating webhook refuses it
    decision = validate(request(pod), CONFIG).decision
    assert not decision.allowed and decision.code == 400
    assert decision.message.startswith(
        "Set gang.admit.dev/min-member in the metadata.annotations of the template of step train-x7k2p[0].train(0:0)(0) "
        "to the number of the step's pods that start together (its withItems or withParam items, at most its "
        'parallelism), e.g. "3" or "{{inputs.parameters.world-size}}"')
    # a Kueue pod group's total count is a count auto can read
    pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "train-x7k2p-train"
    pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "3"
    made = jsonpatch.apply_patch(pod, mutate(request(pod), CONFIG).patch)
    assert validate(request(made), CONFIG).ensure.min_member == 3


def test_admit_review_of_a_workflow_warns_that_an_auto_min_member_refuses_each_step_pod():
    from admit.families.argo import workflow_review

    wf = workflow()
    wf["spec"]["templates"][1]["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    warnings, notes = workflow_review(wf, CONFIG)
    assert warnings == ["set template worker's gang.admit.dev/min-member to the number of its step's pods (its "
                        "withItems or withParam items), or each of its pods is refused: Argo gives a step pod no count "
                        "for auto"] and notes == []


def test_members_the_group_records_as_succeeded_still_count_once_argos_pod_gc_deleted_their_pods():
    desired = {"minMember": 3, "minResources": {"cpu": "3", "memory": "6Gi"}}
    # two members succeeded and their pods are gone: only the PodGroup's record says so
    assert members_still_to_run(desired, {}, 3, [], {"a", "b"}) == {
        "minMember": 1, "minResources": {"cpu": "1", "memory": "2Gi"}}
    # a recorded member still listed is counted once (counted twice, the round would look complete: 3)
    assert members_still_to_run(desired, {}, 3, phases("Succeeded"), {"p0", "x"})["minMember"] == 1
    # the merge records every member seen to succeed, and the record only grows
    made = jsonpatch.apply_patch(worker_pod(2, 1), mutate(request(worker_pod(2, 1)), CONFIG).patch)
    plan = validate(request(made), CONFIG).ensure
    from admit.backends.coscheduling import BACKEND
    stored = BACKEND.desired_objects(plan, CONFIG)[0]
    stored["metadata"]["annotations"]["gang.admit.dev/members-succeeded"] = "a"
    want, _ = BACKEND.merge_shared(stored, BACKEND.desired_objects(plan, CONFIG)[0], plan, phases("Succeeded"))
    assert want["metadata"]["annotations"]["gang.admit.dev/members-succeeded"] == "a,p0"
    assert {"op": "replace", "path": "/metadata/annotations/gang.admit.dev~1members-succeeded",
            "value": "a,p0"} in BACKEND.update_ops(stored, want)


def test_admit_review_of_a_workflow_warns_with_the_fix_where_the_backend_would_refuse_each_step_pod(capsys):
    # Before: review said the steps were ganged, while on Kubernetes 1.36 (Workload API v1alpha2, minCount
    # immutable) the cluster refused every step pod. The review now runs the step pod Argo would make through the
    # webhook, so the Workflow is judged by the rule that judges its pods.
    from admit.cli import main

    path = str(EXAMPLES / "argo-workflow-gang-step.yaml")
    assert main(["review", "-v", "--gang-backend", "workload-api", path]) == 0
    out = capsys.readouterr().out
    assert "warning: set annotation gang.admit.dev/backend: coscheduling in the step template's metadata.annotations" \
           in out and "(template worker: each of its step pods is refused)" in out
    assert "are ganged when Argo creates them" not in out
    assert main(["review", "--strict", "--gang-backend", "workload-api", path]) == 1
    capsys.readouterr()
    # v1beta1 (Kubernetes 1.37) can lower minCount: ganged, as under Coscheduling
    assert main(["review", "-v", "--gang-backend", "workload-api", "--workload-api-version", "v1beta1", path]) == 0
    assert "the step pods of template worker are ganged when Argo creates them" in capsys.readouterr().out


def test_the_step_pod_admit_review_judges_gets_the_plan_of_the_pod_argo_makes():
    from admit.families.argo import review_step_pods

    wf = workflow()
    wf["spec"]["podMetadata"] = {"labels": {"team": "ml"}}
    pods = review_step_pods(wf, CONFIG, "default")
    assert list(pods) == ["worker"]
    plans = []
    for pod in (pods["worker"], worker_pod()):  # the review's and the emulation's (from createWorkflowPod)
        made = jsonpatch.apply_patch(pod, mutate(request(pod), CONFIG).patch)
        plan = validate(request(made), CONFIG).ensure
        plans.append((plan.group_name, plan.min_member, plan.min_resources, plan.follows_members, plan.kept_by))
    assert plans[0] == plans[1]
    assert pods["worker"]["metadata"]["labels"]["team"] == "ml"  # addMetadata: the Workflow's podMetadata too
    # a template whose gang annotations use a variable Argo substitutes per step is judged at the pod's creation
    wf["spec"]["templates"][1]["metadata"]["annotations"]["gang.admit.dev/min-member"] = "{{inputs.parameters.n}}"
    assert review_step_pods(wf, CONFIG, "default") == {}
