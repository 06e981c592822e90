"""Kubeflow Trainer, LeaderWorkerSet and JobSet on a real control plane, with the objects each operator makes shaped
by the same code as the fake API's emulations (``tests/emulations``, written from each operator's source: Trainer's
JobSet by ``tests/emulations/trainer_runtime.py``, never by admit's own reading of Trainer) and stored through
kube-apiserver, which calls admit's webhooks as the chart registers them. The operators
themselves do not run here (their CRDs are in ``tests/real/crds``, cut to ``x-kubernetes-preserve-unknown-fields``),
nor their webhooks: where an operator's webhook would add a label (LWS's group index), the test adds it to the
template. The real StatefulSet and Job controllers make the pods, and scheduler-plugins binds them. What is checked
is what a user sees: the object accepted or refused with the fix, the PodGroup, the pods bound as one gang.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.emulations import jobset as jobset_operator
from tests.emulations import lws as lws_operator
from tests.emulations.trainer import runtime_manifest, trainjob_jobset
from tests.support.plane import PlaneError
from tests.real.support import bound, container, pods, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"
ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def pod_groups(cp, ns):
    return {pg["metadata"]["name"]: pg for pg in cp.rest("GET", PG.format(ns=ns))["items"]}


def small(template_spec):
    template_spec["containers"] = [container("200m", "128Mi", name="node")]
    template_spec["terminationGracePeriodSeconds"] = 0
    return template_spec


def deepspeed_runtime(ns):
    """manifests/base/runtimes/deepspeed_distributed.yaml's shape: the launcher (trainer step) after the nodes are
    Ready."""
    def job(name, labels=None, depends_on=None):
        rj = {"name": name, "template": {"metadata": {"labels": labels or {}},
                                         "spec": {"template": {"spec": small({})}}}}
        if depends_on:
            rj["dependsOn"] = depends_on
        return rj
    runtime = runtime_manifest(
        "deepspeed-distributed", [job("node"), job("launcher", ANCESTOR, [{"name": "node", "status": "Ready"}])],
        ml_policy={"numNodes": 1, "mpi": {"numProcPerNode": 1, "runLauncherAsNode": True}})
    runtime["metadata"]["name"] = f"deepspeed-{ns}"  # cluster-scoped: one per test namespace
    return runtime


def trainjob(ns, runtime, min_member):
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "ds", "namespace": ns,
                         "annotations": {"gang.admit.dev/min-member": min_member,
                                         "gang.admit.dev/schedule-timeout-seconds": "10"}},
            "spec": {"runtimeRef": {"name": runtime["metadata"]["name"]}, "trainer": {"numNodes": 3}}}


@pytest.mark.needs("controllers")
def test_a_trainjob_is_refused_with_a_fix_trainer_accepts_and_the_fix_gets_one_gang_of_the_nodes(plane, ns):
    cp = plane.cp
    runtime = deepspeed_runtime(ns)
    runtimes = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
    cp.rest("POST", runtimes, body=runtime)
    try:
        trainjobs = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs"
        with pytest.raises(PlaneError) as refused:
            cp.rest("POST", trainjobs, body=trainjob(ns, runtime, "auto"))
        assert refused.value.status == 403 and "set gang.admit.dev/min-member to at most 2" in str(refused.value)
        stored = cp.rest("POST", trainjobs, body=trainjob(ns, runtime, "2"))
        (entry,) = stored["spec"]["runtimePatches"]
        assert entry["manager"] == "gang.admit.dev/admit"  # Trainer's webhook requires a domain-prefixed path
        # the JobSet Trainer builds from it (the emulation's code), stored through kube-apiserver
        jobset = trainjob_jobset(stored, runtime)
        cp.rest("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body=jobset)
        pg = wait_for(lambda: pod_groups(cp, ns).get("ds"), what="PodGroup ds")
        assert pg["spec"]["minMember"] == 2
    finally:
        cp.rest("DELETE", f"{runtimes}/{runtime['metadata']['name']}")


@pytest.mark.needs("controllers")
def test_a_trainjob_on_a_runtime_without_ml_policy_is_sized_by_its_num_nodes_and_gets_one_gang_of_them(plane, ns):
    # Trainer's plainml plugin sizes the trainer Job from spec.trainer.numNodes when the runtime has no mlPolicy;
    # admit used to count one pod there and refuse min-member 3.
    cp = plane.cp
    runtime = runtime_manifest("plain", [{"name": "node", "template": {
        "metadata": {"labels": ANCESTOR}, "spec": {"template": {"spec": small({})}}}}], ml_policy=None)
    runtime["metadata"]["name"] = f"plain-{ns}"  # cluster-scoped: one per test namespace
    runtimes = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
    cp.rest("POST", runtimes, body=runtime)
    try:
        stored = cp.rest("POST", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs",
                         body=trainjob(ns, runtime, "3"))
        jobset = trainjob_jobset(stored, runtime)
        (node,) = jobset["spec"]["replicatedJobs"]
        assert node["template"]["spec"]["parallelism"] == 3
        cp.rest("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body=jobset)
        pg = wait_for(lambda: pod_groups(cp, ns).get("ds"), what="PodGroup ds")
        assert pg["spec"]["minMember"] == 3
    finally:
        cp.rest("DELETE", f"{runtimes}/{runtime['metadata']['name']}")


@pytest.mark.needs("controllers")
def test_lws_v0_10_statefulsets_carrying_the_lws_annotations_are_accepted_and_the_group_binds_as_one_gang(plane, ns):
    cp = plane.cp
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "vllm", "namespace": ns,
                        "annotations": {"gang.admit.dev/min-member": "3",
                                        "gang.admit.dev/schedule-timeout-seconds": "10"}},
           "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 3, "workerTemplate": {"spec": small({})}}}}
    stored = cp.rest("POST", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets", body=lws)
    sts = f"/apis/apps/v1/namespaces/{ns}/statefulsets"
    leader_sts = lws_operator.leader_statefulset(stored)  # v0.10: the LWS's annotations on it, replicas 1
    assert leader_sts["metadata"]["annotations"]["gang.admit.dev/min-member"] == "3"
    # LWS's pod webhook would add the group index from the pod's ordinal; with one group it is 0 for every pod
    leader_sts["spec"]["template"]["metadata"]["labels"][lws_operator.GROUP_INDEX] = "0"
    cp.rest("POST", sts, body=leader_sts)  # a StatefulSet gang of 1 below minMember 3 before: refused
    leader = wait_for(lambda: pods(cp, ns, f"{lws_operator.NAME}=vllm"), what="leader pod vllm-0")[0]
    group = leader["metadata"]["labels"][LABEL]
    assert group == f"vllm-0-{leader['metadata']['labels'][lws_operator.REVISION]}"  # per revision, as LWS names it
    cp.rest("POST", sts, body=lws_operator.worker_statefulset(stored, leader))
    members = wait_for(lambda: (lambda b: b if len(b) == 3 else None)(
        bound(pods(cp, ns, f"{lws_operator.NAME}=vllm"))), what="the leader and its 2 workers bound")
    assert {p["metadata"]["labels"][LABEL] for p in members} == {group}
    assert pod_groups(cp, ns)[group]["spec"]["minMember"] == 3


@pytest.mark.needs("controllers")
def test_a_multislice_jobset_gets_a_gang_of_its_leaders_and_every_pod_joins_it(plane, ns):
    cp = plane.cp
    js = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "slices", "namespace": ns,
                       "annotations": {"gang.admit.dev/min-member": "auto",
                                       "gang.admit.dev/schedule-timeout-seconds": "10",
                                       jobset_operator.EXCLUSIVE: "kubernetes.io/hostname"}},
          "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2, "template": {"spec": {
              "parallelism": 2, "completions": 2, "completionMode": "Indexed",
              "template": {"spec": {**small({}), "restartPolicy": "OnFailure"}}}}}]}}
    stored = cp.rest("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body=copy.deepcopy(js))
    pg = pod_groups(cp, ns)["slices"]
    assert pg["spec"]["minMember"] == 2  # one leader per Job: JobSet's pod webhook holds the followers back
    assert pg["spec"]["minResources"] == {"cpu": "800m", "memory": "512Mi"}  # every pod
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    for i in range(2):  # the Jobs the JobSet controller makes (the emulation's constructJob)
        cp.rest("POST", jobs, body=jobset_operator.construct_job(stored, stored["spec"]["replicatedJobs"][0], i))
    members = wait_for(lambda: (lambda b: b if len(b) == 4 else None)(
        bound(pods(cp, ns, f"{jobset_operator.JOBSET_NAME}=slices"))), what="every pod bound")
    assert {p["metadata"]["labels"][LABEL] for p in members} == {"slices"}
    assert json.dumps(stored["metadata"]["annotations"]).count("exclusive-topology") == 1
