"""Argo Workflows step pods on a real control plane: the Workflow stored through its CRD (``tests/real/crds``; the
workflow controller does not run here), its fan-out's step pods created as the controller creates them
(``tests/emulations/argo.py`` ``step_pod``, from argo-workflows v4.1.2 ``createWorkflowPod``), each ganged by the
annotations of its template; then two members succeed, one fails, and the retried member (a new pod of the node) is
scheduled alone, since its group's minMember follows the members still to run. Before, the group kept minMember 3
and Coscheduling's PreFilter held the retried pod for ever (kube-scheduler no longer counts finished pods). Then the
controller's side: a retry that waits while the other members succeed has its group lowered when they finish. A step
pod asking for ``min-member: auto`` is refused at its CREATE (Argo tells it no count), naming the number to set."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml

from tests.emulations.argo import step_pod
from tests.helpers import EXAMPLES
from tests.real.support import bound, pods, wait_for
from tests.real.test_real_after_admission import MERGE, finish, min_member
from tests.support.plane import PlaneError

LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER = "scheduler-plugins-scheduler"


@pytest.mark.needs("coscheduling")
def test_argo_step_pods_are_one_gang_and_a_retried_member_runs_once_the_others_succeeded(plane, ns):
    cp = plane.cp
    written = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    written["metadata"] = {"name": "train-x7k2p"}
    worker = written["spec"]["templates"][1]
    worker["metadata"]["annotations"]["gang.admit.dev/schedule-timeout-seconds"] = "5"
    worker["container"] = {"image": "registry.k8s.io/pause:3.10",
                           "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    wf = cp.rest("POST", f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/workflows", body=written)
    template = copy.deepcopy(wf["spec"]["templates"][1])
    made = []
    for i in range(3):
        node = f"train-x7k2p[0].train({i}:{i})(0)"
        made.append(cp.rest("POST", f"/api/v1/namespaces/{ns}/pods",
                            body=step_pod(wf, template, node, {"rank": str(i)})))
    assert {p["metadata"]["labels"][LABEL] for p in made} == {"train-x7k2p-train"}
    assert {p["spec"]["schedulerName"] for p in made} == {SCHEDULER}
    assert min_member(cp, ns, "train-x7k2p-train") == 3
    first = wait_for(lambda: (lambda p: p if len(p) == 3 else None)(bound(pods(cp, ns, f"{LABEL}=train-x7k2p-train"))),
                     what="the 3 step pods bound together")
    by_node = {p["metadata"]["annotations"]["workflows.argoproj.io/node-name"]: p for p in first}
    finish(cp, ns, by_node["train-x7k2p[0].train(0:0)(0)"], "Succeeded")
    finish(cp, ns, by_node["train-x7k2p[0].train(1:1)(0)"], "Succeeded")
    finish(cp, ns, by_node["train-x7k2p[0].train(2:2)(0)"], "Failed")
    retried = cp.rest("POST", f"/api/v1/namespaces/{ns}/pods",
                      body=step_pod(wf, template, "train-x7k2p[0].train(2:2)(1)", {"rank": "2"}))
    assert retried["metadata"]["labels"][LABEL] == "train-x7k2p-train"
    assert min_member(cp, ns, "train-x7k2p-train") == 1
    wait_for(lambda: [p for p in bound(pods(cp, ns, f"{LABEL}=train-x7k2p-train"))
                      if p["metadata"]["name"] == retried["metadata"]["name"]], what="the retried step pod bound")


@pytest.mark.needs("coscheduling")
def test_a_retried_argo_step_still_waiting_when_the_others_succeed_runs_once_admits_controller_lowers_its_group(
        plane, ns):
    # The third member's pod is deleted while all three run (Argo: "pod deleted", an Error node, retried under
    # retryPolicy Always); its retry joins the group at minMember 3 (three live members) but cannot be placed (its
    # node is cordoned). The two others then succeed: kube-scheduler no longer counts them, so without admit's
    # controller the retry waits for ever; the controller sees them finish and lowers the group to 1.
    cp = plane.cp
    node = "node-argo-retry"
    cp.add_node(node, cpu="4", memory="8Gi", labels={"admit-test": ns})
    try:
        written = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
        written["metadata"] = {"name": "train-r3t9q"}
        worker = written["spec"]["templates"][1]
        worker["metadata"]["annotations"]["gang.admit.dev/schedule-timeout-seconds"] = "5"
        worker["retryStrategy"] = {"limit": "2", "retryPolicy": "Always"}
        worker["nodeSelector"] = {"admit-test": ns}
        worker["container"] = {"image": "registry.k8s.io/pause:3.10",
                               "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
        wf = cp.rest("POST", f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/workflows", body=written)
        template = copy.deepcopy(wf["spec"]["templates"][1])
        made = [cp.rest("POST", f"/api/v1/namespaces/{ns}/pods",
                        body=step_pod(wf, template, f"train-r3t9q[0].train({i}:{i})(0)", {"rank": str(i)}))
                for i in range(3)]
        assert {p["metadata"]["labels"]["gang.admit.dev/managed"] for p in made} == {"member"}
        wait_for(lambda: len(bound(pods(cp, ns, f"{LABEL}=train-r3t9q-train"))) == 3, what="the 3 step pods bound")
        cp.rest("PATCH", f"/api/v1/nodes/{node}", body={"spec": {"unschedulable": True}}, content_type=MERGE)
        cp.rest("DELETE", f"/api/v1/namespaces/{ns}/pods/{made[2]['metadata']['name']}",
                body={"gracePeriodSeconds": 0})
        wait_for(lambda: len(pods(cp, ns, f"{LABEL}=train-r3t9q-train")) == 2, what="the third pod gone")
        retried = cp.rest("POST", f"/api/v1/namespaces/{ns}/pods",
                          body=step_pod(wf, template, "train-r3t9q[0].train(2:2)(1)", {"rank": "2"}))
        assert min_member(cp, ns, "train-r3t9q-train") == 3
        finish(cp, ns, made[0], "Succeeded")
        finish(cp, ns, made[1], "Succeeded")
        wait_for(lambda: min_member(cp, ns, "train-r3t9q-train") == 1, what="the group lowered by admit's controller")
        cp.rest("PATCH", f"/api/v1/nodes/{node}", body={"spec": {"unschedulable": False}}, content_type=MERGE)
        wait_for(lambda: [p for p in bound(pods(cp, ns, f"{LABEL}=train-r3t9q-train"))
                          if p["metadata"]["name"] == retried["metadata"]["name"]], what="the retried step pod bound")
    finally:
        cp.delete_node(node)


@pytest.mark.needs("apiserver")
def test_an_argo_step_pod_asking_for_an_auto_min_member_is_refused_at_its_create_naming_the_number_to_set(plane, ns):
    cp = plane.cp
    written = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    written["metadata"] = {"name": "train-a8u7o"}
    written["spec"]["templates"][1]["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    wf = cp.rest("POST", f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/workflows", body=written)
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", f"/api/v1/namespaces/{ns}/pods", body=step_pod(
            wf, copy.deepcopy(wf["spec"]["templates"][1]), "train-a8u7o[0].train(0:0)(0)", {"rank": "0"}))
    assert refused.value.status == 400
    assert "Set gang.admit.dev/min-member in the metadata.annotations of the template of step " \
           "train-a8u7o[0].train(0:0)(0) to the number of the step's pods that start together" in str(refused.value)
    assert pods(cp, ns, "workflows.argoproj.io/workflow=train-a8u7o") == []


@pytest.mark.needs("coscheduling")
def test_a_retried_argo_step_runs_alone_after_argos_pod_gc_deleted_the_members_that_succeeded(plane, ns):
    # podGC OnPodCompletion deletes each finished pod (argo-workflows v4.1.2 pod/cleanup.go
    # determinePodCleanupAction); the retry comes after its backoff, past admit's orphan grace period (5s here).
    # Before, nothing was left saying that two members had succeeded: the group was deleted as unclaimed and made
    # again at minMember 3, and the retry was never scheduled. The group now lives as long as its Workflow (the
    # garbage collector deletes it with it) and records the members that succeeded.
    cp = plane.cp
    written = yaml.safe_load(Path(EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    written["metadata"] = {"name": "train-g4c1d"}
    written["spec"]["podGC"] = {"strategy": "OnPodCompletion"}
    worker = written["spec"]["templates"][1]
    worker["metadata"]["annotations"]["gang.admit.dev/schedule-timeout-seconds"] = "5"
    worker["retryStrategy"] = {"limit": "2", "backoff": {"duration": "10s"}}
    worker["container"] = {"image": "registry.k8s.io/pause:3.10",
                           "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    wf = cp.rest("POST", f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/workflows", body=written)
    template = copy.deepcopy(wf["spec"]["templates"][1])
    made = [cp.rest("POST", f"/api/v1/namespaces/{ns}/pods",
                    body=step_pod(wf, template, f"train-g4c1d[0].train({i}:{i})(0)", {"rank": str(i)}))
            for i in range(3)]
    wait_for(lambda: len(bound(pods(cp, ns, f"{LABEL}=train-g4c1d-train"))) == 3, what="the 3 step pods bound")
    for pod, phase in zip(made, ("Succeeded", "Succeeded", "Failed")):
        finish(cp, ns, pod, phase)
        cp.rest("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", body={"gracePeriodSeconds": 0})
    wait_for(lambda: pods(cp, ns, f"{LABEL}=train-g4c1d-train") == [], what="the finished pods collected")
    time.sleep(10)  # the retry's backoff
    retried = cp.rest("POST", f"/api/v1/namespaces/{ns}/pods",
                      body=step_pod(wf, template, "train-g4c1d[0].train(2:2)(1)", {"rank": "2"}))
    wait_for(lambda: min_member(cp, ns, "train-g4c1d-train") == 1, what="the group sized to the retry")
    wait_for(lambda: [p for p in bound(pods(cp, ns, f"{LABEL}=train-g4c1d-train"))
                      if p["metadata"]["name"] == retried["metadata"]["name"]], what="the retried step pod bound")
    group = cp.rest("GET", f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/train-g4c1d-train")
    assert [r["uid"] for r in group["metadata"]["ownerReferences"]] == [wf["metadata"]["uid"]]
    cp.rest("DELETE", f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/workflows/train-g4c1d")
    wait_for(lambda: min_member(cp, ns, "train-g4c1d-train") is None, timeout=60,
             what="the group deleted with its Workflow by the garbage collector")
