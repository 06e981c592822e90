"""JobSet and LeaderWorkerSet on a real control plane, stored through the CRDs of ``tests/real/crds`` (schemas cut to
``x-kubernetes-preserve-unknown-fields``). Neither the JobSet nor the LWS controller runs here: nothing turns a
JobSet into Jobs or an LWS into StatefulSets. So the tests check what kube-apiserver does with admit's answers (the
stored object is the patched one, a deadlocking shape is refused) and the PodGroups. For an LWS, the test creates
group 0's two StatefulSets as the LWS controller would (leader and workers, from the patched templates, with the
labels the LWS pod webhook adds); the real StatefulSet controller makes the pods, admit's webhooks label them and
the leader's admission makes the group's PodGroup, and the scheduler-plugins scheduler binds the three as one gang.
"""

from __future__ import annotations

import copy
import json
import time

import pytest

from admit.config import Config
from tests.support.plane import PlaneError
from tests.helpers import example
from tests.manifest_seeds import ORDINARY_LABELS, lost_fields, plant_ordinary
from tests.real.support import bound, container, gang_deployment, pods, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
SCHEDULER = "scheduler-plugins-scheduler"
LABEL = "scheduling.x-k8s.io/pod-group"
SPEC_KEY = "gang.admit.dev/group-spec"


def pod_groups(cp, ns):
    return {pg["metadata"]["name"]: pg for pg in cp.rest("GET", PG.format(ns=ns))["items"]}


def small_jobset(ns, order=None):
    """The examples/jobset-pytorch.yaml shape with requests that fit the plane's two 4-CPU nodes, and no GPU."""
    js = example("jobset-pytorch.yaml")
    js["metadata"]["namespace"] = ns
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["containers"] = [container("200m", "128Mi")]
    js["metadata"]["annotations"]["gang.admit.dev/schedule-timeout-seconds"] = "10"
    if order:
        js["spec"]["startupPolicy"] = {"startupPolicyOrder": order}
    return js


@pytest.mark.needs("apiserver")
def test_a_jobset_stored_through_its_crd_gets_its_templates_patched_and_one_pod_group(plane, ns):
    cp = plane.cp
    stored = cp.rest("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body=small_jobset(ns))
    for rj in stored["spec"]["replicatedJobs"]:
        template = rj["template"]["spec"]["template"]
        assert template["metadata"]["labels"][LABEL] == "pytorch"
        assert template["spec"]["schedulerName"] == SCHEDULER
    assert stored["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
    pg = pod_groups(cp, ns)["pytorch"]
    # 1 leader + 3 workers, 200m and 128Mi each
    assert pg["spec"] == {"minMember": 4, "minResources": {"cpu": "800m", "memory": "512Mi"},
                          "scheduleTimeoutSeconds": 10}
    owner = wait_for(lambda: (cp.rest("GET", f"{PG.format(ns=ns)}/pytorch")["metadata"].get("ownerReferences")
                              or [None])[0], what="adoption by the JobSet")
    assert (owner["apiVersion"], owner["kind"], owner["uid"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet",
                                                                  stored["metadata"]["uid"])


@pytest.mark.needs("apiserver")
def test_a_jobset_stored_through_kube_apiserver_keeps_the_users_template_labels_and_annotations(plane, ns):
    """The user's labels and annotations on every replicatedJob's pod template (Istio injection, Prometheus, a team
    and cost center, Trainer's ancestor-step label) are all in the stored JobSet beside admit's pod-group label."""
    cp = plane.cp
    jobset = plant_ordinary(small_jobset(ns))
    for rj in jobset["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] = \
            "trainer"
    stored = cp.rest("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body=jobset)
    assert lost_fields(jobset, stored, Config()) == []
    for rj in stored["spec"]["replicatedJobs"]:
        labels = rj["template"]["spec"]["template"]["metadata"]["labels"]
        assert {k: labels[k] for k in ORDINARY_LABELS} == ORDINARY_LABELS and labels[LABEL] == "pytorch"


@pytest.mark.needs("apiserver")
def test_an_in_order_jobset_is_refused_by_kube_apiserver_with_the_fix(plane, ns):
    cp = plane.cp
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body=small_jobset(ns, "InOrder"))
    assert refused.value.status == 403
    assert "startupPolicyOrder: AnyOrder" in str(refused.value) and "does not split" in str(refused.value)
    assert pod_groups(cp, ns) == {}


def initializer_jobset(ns, nodes=2):
    """A JobSet in the shape Kubeflow Trainer makes from a torchtune-style runtime (hand-made: no Trainer runs here):
    ``dataset-initializer`` and ``model-initializer`` (1 pod each), then ``node`` (``nodes`` pods) with ``dependsOn``
    both ``status: Complete``, the ``trainer.kubeflow.org/trainjob-ancestor-step`` labels, small requests."""
    def rj(name, step, pods, depends_on=None):
        out = {"name": name, "replicas": 1, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}},
            "spec": {"parallelism": pods, "completions": pods, "template": {"metadata": {"labels": {"team": "ml"}},
                                                                            "spec": {"restartPolicy": "OnFailure",
                                                                                     "containers": [container()]}}}}}
        if depends_on:
            out["dependsOn"] = [{"name": d, "status": "Complete"} for d in depends_on]
        return out

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llama-sft", "namespace": ns, "annotations": {"gang.admit.dev/min-member": "auto"}},
            "spec": {"replicatedJobs": [
                rj("dataset-initializer", "dataset-initializer", 1),
                rj("model-initializer", "model-initializer", 1),
                rj("node", "trainer", nodes, ["dataset-initializer", "model-initializer"])]}}


@pytest.mark.needs("apiserver")
def test_a_jobset_with_initializers_gangs_only_the_pods_that_run_together(plane, ns):
    cp = plane.cp
    stored = cp.rest("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", body=initializer_jobset(ns))
    templates = {rj["name"]: rj["template"]["spec"]["template"] for rj in stored["spec"]["replicatedJobs"]}
    assert templates["node"]["metadata"]["labels"] == {"team": "ml", LABEL: "llama-sft"}
    assert templates["node"]["spec"]["schedulerName"] == SCHEDULER
    for step in ("dataset-initializer", "model-initializer"):  # as written: Coscheduling must not count them
        assert templates[step]["metadata"]["labels"] == {"team": "ml"}
        assert "schedulerName" not in templates[step]["spec"]
    assert pod_groups(cp, ns)["llama-sft"]["spec"] == {"minMember": 2,
                                                       "minResources": {"cpu": "200m", "memory": "128Mi"}}


@pytest.mark.needs("apiserver")
def test_min_resources_leaves_out_an_extended_resource_a_device_class_serves(plane, ns):
    cp = plane.cp
    name = f"gpu-{ns}"[:63]
    device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}],
                             "extendedResourceName": f"example.com/{name}"}}
    stored = cp.rest("POST", "/apis/resource.k8s.io/v1/deviceclasses", body=device_class)
    try:
        if not stored["spec"].get("extendedResourceName"):
            pytest.skip("kube-apiserver dropped spec.extendedResourceName: feature gate DRAExtendedResource is off")
        dep = gang_deployment("infer", replicas=2, min_member=2)
        dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {f"example.com/{name}": "1"}
        cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=dep)
        # admission reads admit's DeviceClass cache; if it had not seen the class yet, the controller corrects it
        spec = wait_for(lambda: (pod_groups(cp, ns).get("infer") or {}).get("spec", {}).get("minResources") == {
            "cpu": "200m", "memory": "128Mi"} and pod_groups(cp, ns)["infer"]["spec"], what="minResources without it")
        assert spec["minMember"] == 2
    finally:
        cp.rest("DELETE", f"/apis/resource.k8s.io/v1/deviceclasses/{name}")


def lws_manifest(ns):
    """examples/leaderworkerset-vllm.yaml with one group of 3 small pods that fit the plane."""
    lws = example("leaderworkerset-vllm.yaml")
    lws["metadata"]["namespace"] = ns
    lws["spec"]["replicas"] = 1
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    tmpl["size"] = 3
    for key in ("leaderTemplate", "workerTemplate"):
        tmpl[key]["spec"]["containers"] = [container("300m", "256Mi", name=key.removesuffix("Template"))]
        tmpl[key]["spec"]["terminationGracePeriodSeconds"] = 0
    return lws


def group_statefulset(stored, name, template, replicas, start=0, worker_index=None):
    """A StatefulSet shaped like the ones the LWS controller makes for group 0 (``Parallel``, workers' ordinals from
    1), whose template carries the labels the LWS pod webhook would add: the set name and the group index (and the
    worker index of the leader; a worker's own index is per pod, which a shared template cannot say)."""
    template = copy.deepcopy(template)
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({"leaderworkerset.sigs.k8s.io/name": stored["metadata"]["name"],
                   "leaderworkerset.sigs.k8s.io/group-index": "0", "lws-pod-set": name})
    if worker_index is not None:
        labels["leaderworkerset.sigs.k8s.io/worker-index"] = worker_index
    template["metadata"].setdefault("annotations", {})["leaderworkerset.sigs.k8s.io/size"] = str(
        stored["spec"]["leaderWorkerTemplate"]["size"])
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": stored["metadata"]["name"], "podManagementPolicy": "Parallel",
                     "ordinals": {"start": start}, "selector": {"matchLabels": {"lws-pod-set": name}},
                     "template": template}}


def test_an_lws_group_gets_its_pod_group_from_its_leader_pod_and_binds_as_one_gang(plane, ns):
    cp = plane.cp
    stored = cp.rest("POST", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
                     body=lws_manifest(ns))
    tmpl = stored["spec"]["leaderWorkerTemplate"]
    spec = {"minMember": 3, "minResources": {"cpu": "900m", "memory": "768Mi"}}
    for key in ("leaderTemplate", "workerTemplate"):
        assert tmpl[key]["spec"]["schedulerName"] == SCHEDULER
        assert json.loads(tmpl[key]["metadata"]["annotations"][SPEC_KEY]) == spec
    assert pod_groups(cp, ns) == {}  # groups are made by their leader pods
    sts = f"/apis/apps/v1/namespaces/{ns}/statefulsets"
    # The leader StatefulSet: the real StatefulSet controller creates pod vllm-0 from the patched leader template.
    cp.rest("POST", sts, body=group_statefulset(stored, "vllm", tmpl["leaderTemplate"], 1, worker_index="0"))
    leader = wait_for(lambda: pods(cp, ns, "lws-pod-set=vllm"), what="leader pod vllm-0")[0]
    assert leader["metadata"]["name"] == "vllm-0"
    assert leader["metadata"]["labels"][LABEL] == "vllm-0" and leader["spec"]["schedulerName"] == SCHEDULER
    pg = pod_groups(cp, ns)["vllm-0"]
    assert pg["spec"] == spec
    assert pg["metadata"]["annotations"]["gang.admit.dev/owner"] == "leaderworkerset.x-k8s.io/LeaderWorkerSet/vllm"
    time.sleep(1.5)
    assert bound(pods(cp, ns, "leaderworkerset.sigs.k8s.io/name=vllm")) == []  # the leader alone waits for its gang
    # The group's worker StatefulSet (vllm-0, ordinals from 1): pods vllm-0-1 and vllm-0-2 join group vllm-0.
    cp.rest("POST", sts, body=group_statefulset(stored, "vllm-0", tmpl["workerTemplate"], 2, start=1))
    members = wait_for(lambda: (lambda b: b if len(b) == 3 else None)(
        bound(pods(cp, ns, "leaderworkerset.sigs.k8s.io/name=vllm"))), what="the leader and its 2 workers bound")
    assert sorted(p["metadata"]["name"] for p in members) == ["vllm-0", "vllm-0-1", "vllm-0-2"]
    assert {p["metadata"]["labels"][LABEL] for p in members} == {"vllm-0"}
    # Claimed by no stored workload, the group is kept while its pods live (orphan grace 5 s on this plane) ...
    time.sleep(7)
    assert "vllm-0" in pod_groups(cp, ns)
    # ... and deleted once they are gone (the StatefulSets deleted: the garbage collector removes their pods).
    for name in ("vllm", "vllm-0"):
        cp.rest("DELETE", f"{sts}/{name}", body={"kind": "DeleteOptions", "apiVersion": "v1",
                                                 "propagationPolicy": "Background"})
    wait_for(lambda: "vllm-0" not in pod_groups(cp, ns), timeout=45, what="the group's PodGroup deleted")


@pytest.mark.needs("apiserver")
def test_an_lws_whose_gang_deadlocks_under_leader_ready_is_refused_by_kube_apiserver(plane, ns):
    cp = plane.cp
    body = example("denied/leaderworkerset-leader-ready.yaml")
    body["metadata"]["namespace"] = ns
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets", body=body)
    assert refused.value.status == 403 and "LeaderReady" in str(refused.value)
