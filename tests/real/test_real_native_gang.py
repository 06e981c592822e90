"""The workload-api backend on a real control plane (Kubernetes 1.36.2, binaries the tester brings): Kubernetes' native
gang scheduling (scheduling.k8s.io/v1alpha2 Workload + PodGroup, pod spec.schedulingGroup) with the stock kube-scheduler,
started as a second plane with ``--feature-gates=GenericWorkload=true,GangScheduling=true`` and
``--runtime-config=scheduling.k8s.io/v1alpha2=true`` (``ControlPlane(native_gang=True)``), and ``admit serve
--gang-backend workload-api`` behind the chart's webhooks. A pod counts as scheduled when ``spec.nodeName`` is set.

One node of 4 CPU: three 500m pods fit; three 1500m pods do not (two would), so the gang binds none of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterable

import pytest
import yaml

from tests.emulations.argo import step_pod
from tests.helpers import EXAMPLES
from tests.support.plane import TIERS, ControlPlane, PlaneError, find_binaries
from tests.real.support import bound, container, pods, wait_for

pytestmark = pytest.mark.needs("native")

APPS = "/apis/apps/v1/namespaces/{ns}/deployments"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
NATIVE = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/{plural}"
UNBOUND_FOR = 6.0  # seconds a gang that cannot fit is watched staying entirely unbound


@pytest.fixture(scope="module")
def native() -> Iterable[ControlPlane]:
    binaries = find_binaries(TIERS["native"])  # tests/real/conftest.py skipped the module if any is missing
    cp = ControlPlane(binaries, native_gang=True, keep=bool(os.environ.get("ADMIT_PLANE_KEEP")))
    cp.start()
    try:
        cp.add_node("native-1", cpu="4", memory="8Gi")
        cp.start_admit("admit-native", ["--gang-backend", "workload-api", "--orphan-grace-period", "5"],
                       values={"config": {"gangBackend": "workload-api"}})
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def ns(native: ControlPlane, request: pytest.FixtureRequest) -> Iterable[str]:
    name = f"n-{request.node.name.lower().removeprefix('test_')[:30].strip('_').replace('_', '-')}-{uuid.uuid4().hex[:5]}"
    native.create_namespace(name)
    yield name
    native.delete_namespace(name)


def deployment(name: str, replicas: int, min_member: int | str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": {"gang.admit.dev/min-member": str(min_member)}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [container(cpu)], "terminationGracePeriodSeconds": 0}}},
    }


def job(name: str, parallelism: int, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {"gang.admit.dev/min-member": "auto"}},
        "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                 "template": {"spec": {"restartPolicy": "Never", "containers": [container(cpu)],
                                       "terminationGracePeriodSeconds": 0}}},
    }


def gang_objects(cp: ControlPlane, ns: str, name: str) -> list[dict[str, Any] | None]:
    return [cp.rest("GET", f"{NATIVE.format(ns=ns, plural=p)}/{name}", ok=(404,)) for p in ("workloads", "podgroups")]


def stays_unbound(cp: ControlPlane, ns: str, selector: str, count: int) -> None:
    wait_for(lambda: len(pods(cp, ns, selector)) == count, what=f"{count} pods created")
    end = time.monotonic() + UNBOUND_FOR
    while time.monotonic() < end:
        assert bound(pods(cp, ns, selector)) == [], "a pod of a gang that cannot fit was bound"
        time.sleep(0.2)


def test_an_annotated_deployment_binds_all_its_pods_when_they_fit_and_none_when_they_do_not(native, ns):
    cp = native
    dep = cp.rest("POST", APPS.format(ns=ns), body=deployment("fits", 3, 3, "500m"))
    assert dep["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "fits"}
    assert dep["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"
    running = wait_for(lambda: len(bound(pods(cp, ns, "app=fits"))) == 3 and bound(pods(cp, ns, "app=fits")),
                       what="3 bound pods")
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in running} == {"fits"}
    workload, pod_group = gang_objects(cp, ns, "fits")
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert pod_group["spec"]["podGroupTemplateRef"]["workload"] == {"workloadName": "fits",
                                                                    "podGroupTemplateName": "gang"}
    for obj in gang_objects(cp, ns, "fits"):  # adopted by the stored Deployment
        owner = wait_for(lambda o=obj: (cp.rest("GET", f"{NATIVE.format(ns=ns, plural=o['kind'].lower() + 's')}/fits")
                                        ["metadata"].get("ownerReferences")), what="adoption")[0]
        assert (owner["kind"], owner["uid"]) == ("Deployment", dep["metadata"]["uid"])
    scheduled = wait_for(lambda: [c for c in (cp.rest("GET", f"{NATIVE.format(ns=ns, plural='podgroups')}/fits")
                                              .get("status") or {}).get("conditions", []) if c["status"] == "True"],
                         what="the PodGroup's scheduled condition")
    # the condition's name per version: PodGroupScheduled (v1alpha2, 1.36), PodGroupInitiallyScheduled (1.37)
    assert scheduled[0]["type"] in ("PodGroupScheduled", "PodGroupInitiallyScheduled")
    # Three 1500m pods on one 4-CPU node: two would fit one by one; the gang of three binds none.
    cp.rest("POST", APPS.format(ns=ns), body=deployment("big", 3, 3, "1500m"))
    stays_unbound(cp, ns, "app=big", 3)


def test_an_annotated_job_binds_all_its_pods_when_they_fit_and_none_when_they_do_not(native, ns):
    cp = native
    created = cp.rest("POST", JOBS.format(ns=ns), body=job("train", 2, "500m"))
    assert created["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    wait_for(lambda: len(bound(pods(cp, ns, "job-name=train"))) == 2, what="2 bound pods")
    assert all(o is not None for o in gang_objects(cp, ns, "train"))
    cp.rest("POST", JOBS.format(ns=ns), body=job("wide", 3, "1500m"))
    stays_unbound(cp, ns, "job-name=wide", 3)


def test_replicas_below_min_count_are_refused_also_through_scale(native, ns):
    cp = native
    with pytest.raises(PlaneError) as e:
        cp.rest("POST", APPS.format(ns=ns), body=deployment("small", 2, 3, "100m"))
    assert e.value.status == 403 and "GangScheduling" in str(e.value) and "spec.replicas=2" in str(e.value)
    assert gang_objects(cp, ns, "small") == [None, None]
    cp.rest("POST", APPS.format(ns=ns), body=deployment("web", 3, 3, "100m"))
    with pytest.raises(PlaneError) as e:
        cp.rest("PATCH", f"{APPS.format(ns=ns)}/web/scale", body={"spec": {"replicas": 2}},
                content_type="application/merge-patch+json")
    assert e.value.status == 403 and "below its gang minMember 3" in str(e.value)


def test_deleting_the_workload_deletes_its_workload_and_pod_group(native, ns):
    cp = native
    dep = cp.rest("POST", APPS.format(ns=ns), body=deployment("gone", 2, 2, "100m"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=gone"))) == 2, what="2 bound pods")
    wait_for(lambda: all(o and o["metadata"].get("ownerReferences") for o in gang_objects(cp, ns, "gone")),
             what="adoption")
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]
               for o in gang_objects(cp, ns, "gone"))
    cp.rest("DELETE", f"{APPS.format(ns=ns)}/gone", body={"propagationPolicy": "Background"})
    # The garbage collector deletes both; the PodGroup's podgroup-protection finalizer holds it until its pods are
    # gone (the kubelet helper force-deletes pods left Terminating).
    wait_for(lambda: gang_objects(cp, ns, "gone") == [None, None], timeout=60, what="Workload and PodGroup deleted")


def test_a_generate_name_job_gangs_its_pods_under_the_name_chosen_at_mutation(native, ns):
    cp = native
    body = job("ignored", 2, "100m")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "batch-"
    created = cp.rest("POST", JOBS.format(ns=ns), body=body)
    group = created["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"]
    assert group.startswith("batch-") and group != created["metadata"]["name"]
    wait_for(lambda: len(bound(pods(cp, ns, f"job-name={created['metadata']['name']}"))) == 2, what="2 bound pods")
    assert all(o is not None for o in gang_objects(cp, ns, group))


def test_an_auto_gang_cannot_shrink_below_its_immutable_v1alpha2_min_count(native, ns):
    cp = native
    cp.rest("POST", APPS.format(ns=ns), body=deployment("auto", 3, "auto", "100m"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=auto"))) == 3, what="3 bound pods")
    with pytest.raises(PlaneError) as e:
        cp.rest("PATCH", f"{APPS.format(ns=ns)}/auto/scale", body={"spec": {"replicas": 2}},
                content_type="application/merge-patch+json")
    assert e.value.status == 403 and "keeps minCount 3" in str(e.value) and "immutable" in str(e.value)
    # Growing is allowed: the gang keeps minCount 3 (and says so), the fourth pod joins it.
    cp.rest("PATCH", f"{APPS.format(ns=ns)}/auto/scale", body={"spec": {"replicas": 4}},
            content_type="application/merge-patch+json")
    wait_for(lambda: len(bound(pods(cp, ns, "app=auto"))) == 4, what="4 bound pods")
    assert [o["spec"]["schedulingPolicy"]["gang"]["minCount"] for o in gang_objects(cp, ns, "auto")[1:]] == [3]


def status_rows(cp: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    """``admit status -n <ns> -o json`` against the plane, by group."""
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "status", "--kubeconfig", str(cp.kubeconfig), "-n", ns,
                           "-o", "json", "--gang-backend", "workload-api"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {r["group"]: r for r in json.loads(proc.stdout)}


def test_admit_status_says_why_a_native_gang_waits_where_kube_scheduler_says_nothing(native, ns):
    cp = native
    # a pod naming a PodGroup nobody made: kube-scheduler holds it at PreEnqueue, with no event and no condition
    cp.rest("POST", f"/api/v1/namespaces/{ns}/pods", body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray-0", "labels": {"app": "stray"}},
        "spec": {"schedulingGroup": {"podGroupName": "nowhere"}, "containers": [container("100m")],
                 "terminationGracePeriodSeconds": 0}})
    stray = wait_for(lambda: status_rows(cp, ns).get("podgroup.scheduling.k8s.io/nowhere"), what="the stray row")
    assert stray["reason"] == "PodGroupMissing" and stray["pods"]["pending"] == 1
    # a gang too big for the node: its rows say why it waits (the PodGroup's condition or the scheduler's words)
    cp.rest("POST", APPS.format(ns=ns), body=deployment("big", 3, 3, "1500m"))
    stays_unbound(cp, ns, "app=big", 3)
    big = wait_for(lambda: (r := status_rows(cp, ns).get("podgroup.scheduling.k8s.io/big")) and r["reason"] not in (
        "Waiting", "Scheduled") and r, what="a reason for the big gang")
    assert big["minMember"] == 3 and big["pods"] == {"total": 3, "scheduled": 0, "pending": 3}
    assert big["message"], big


def test_an_argo_step_pod_is_refused_with_the_fix_as_its_v1alpha2_group_could_not_follow_its_members(native, ns):
    # 1.36 keeps a PodGroup's schedulingPolicy immutable (validatePodGroupSpecUpdate): after two members of a step
    # succeeded, a retried third would wait for ever on minCount 3. So the step pod (what Argo's workflow controller
    # creates, tests/emulations/argo.py) is refused at its own admission, the fix first, and no group is made.
    cp = native
    cp.install_crd(Path(__file__).parent / "crds" / "argoproj.io_workflows.yaml")
    written = yaml.safe_load((EXAMPLES / "argo-workflow-gang-step.yaml").read_text())
    written["metadata"] = {"name": "train-x7k2p"}
    wf = cp.rest("POST", f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/workflows", body=written)
    pod = step_pod(wf, wf["spec"]["templates"][1], "train-x7k2p[0].train(0:0)(0)", {"rank": "0"})
    with pytest.raises(PlaneError) as e:
        cp.rest("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
    assert e.value.status == 403
    assert "denied the request: Set annotation gang.admit.dev/backend: coscheduling in the step template's " \
           "metadata.annotations" in str(e.value)
    assert "scheduling.k8s.io/v1alpha2 Workload's minCount cannot change once created" in str(e.value)
    assert gang_objects(cp, ns, "train-x7k2p-train") == [None, None]
