"""What users do besides Deployments, on a real control plane: the seed blog post's hand-written PodGroup, Jobs,
StatefulSets, a standalone ReplicaSet, dry runs, deletion (the real garbage collector), and Kubeflow / Spark objects
stored through their CRDs (no operator runs here: nothing makes their pods, so only the stored object and the
PodGroup are checked)."""

from __future__ import annotations

import copy
import time

import pytest

from tests.support.plane import PlaneError
from tests.helpers import example
from tests.real.support import PERMIT_WAIT, bound, container, gang_annotations, gang_deployment, pods, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
SCHEDULER = "scheduler-plugins-scheduler"


def pod_groups(cp, ns):
    return {pg["metadata"]["name"]: pg for pg in cp.rest("GET", PG.format(ns=ns))["items"]}


def owner_of(cp, ns, name):
    refs = (cp.rest("GET", f"{PG.format(ns=ns)}/{name}", ok=(404,)) or {}).get("metadata", {}).get("ownerReferences")
    return refs[0] if refs else None


def labelled_pod(name: str, group: str) -> dict:
    """A Pod as in the seed blog post: the group label by hand, no schedulerName (admit adds it)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"scheduling.x-k8s.io/pod-group": group, "app": group}},
            "spec": {"containers": [container()], "terminationGracePeriodSeconds": 0}}


def test_the_seed_post_flow_a_hand_written_pod_group_and_labelled_pods_bind_together(plane, ns):
    cp = plane.cp
    for name, minimum in (("pg1", 3), ("pg2", 3)):
        cp.rest("POST", PG.format(ns=ns), body={"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                                "metadata": {"name": name},
                                                "spec": {"minMember": minimum, "scheduleTimeoutSeconds": 5}})
    for i in (1, 2, 3):
        created = cp.rest("POST", f"/api/v1/namespaces/{ns}/pods", body=labelled_pod(f"pg1-pod-{i}", "pg1"))
        assert created["spec"]["schedulerName"] == SCHEDULER  # admit's mutating webhook
    for i in (1, 2):  # pg2 needs 3 members and gets 2
        cp.rest("POST", f"/api/v1/namespaces/{ns}/pods", body=labelled_pod(f"pg2-pod-{i}", "pg2"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=pg1"))) == 3, what="pg1's 3 pods bound")
    time.sleep(PERMIT_WAIT + 1)
    assert bound(pods(cp, ns, "app=pg2")) == []
    assert set(pod_groups(cp, ns)) == {"pg1", "pg2"}  # admit created none and changed none
    assert "app.kubernetes.io/managed-by" not in pod_groups(cp, ns)["pg1"]["metadata"].get("labels", {})


def test_a_job_gang_binds_all_its_pods_and_its_pod_group_is_owned_by_the_job(plane, ns):
    cp = plane.cp
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "annotations": gang_annotations("auto")},
           "spec": {"parallelism": 3, "completions": 3, "backoffLimit": 0,
                    "template": {"metadata": {"labels": {"app": "train"}},
                                 "spec": {"restartPolicy": "Never", "containers": [container()],
                                          "terminationGracePeriodSeconds": 0}}}}
    stored = cp.rest("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job)
    wait_for(lambda: len(bound(pods(cp, ns, "app=train"))) == 3, what="3 bound Job pods")
    assert pod_groups(cp, ns)["train"]["spec"]["minMember"] == 3
    owner = wait_for(lambda: owner_of(cp, ns, "train"), what="adoption")
    assert (owner["kind"], owner["uid"]) == ("Job", stored["metadata"]["uid"])


def test_a_statefulset_gang_binds_all_its_pods_and_ordered_ready_is_refused(plane, ns):
    cp = plane.cp
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "annotations": gang_annotations(3)},
           "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}},
                                 "spec": {"containers": [container()], "terminationGracePeriodSeconds": 0}}}}
    ordered = copy.deepcopy(sts)
    del ordered["spec"]["podManagementPolicy"]
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", body=ordered)
    assert refused.value.status == 403 and "OrderedReady (the default when" in str(refused.value)
    stored = cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", body=sts)
    wait_for(lambda: len(bound(pods(cp, ns, "app=db"))) == 3, what="3 bound StatefulSet pods")
    owner = wait_for(lambda: owner_of(cp, ns, "db"), what="adoption")
    assert (owner["kind"], owner["uid"]) == ("StatefulSet", stored["metadata"]["uid"])


def test_a_standalone_replicaset_is_a_gang_of_its_own(plane, ns):
    cp = plane.cp
    rs = gang_deployment("solo", replicas=2, min_member=2)
    rs["kind"] = "ReplicaSet"
    stored = cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/replicasets", body=rs)
    assert stored["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
    wait_for(lambda: len(bound(pods(cp, ns, "app=solo"))) == 2, what="2 bound pods")
    owner = wait_for(lambda: owner_of(cp, ns, "solo"), what="adoption")
    assert (owner["kind"], owner["uid"]) == ("ReplicaSet", stored["metadata"]["uid"])
    with pytest.raises(PlaneError) as refused:
        cp.rest("PATCH", f"/apis/apps/v1/namespaces/{ns}/replicasets/solo/scale", body={"spec": {"replicas": 1}},
                content_type="application/merge-patch+json")
    assert refused.value.status == 403


@pytest.mark.needs("apiserver")
def test_a_dry_run_create_is_answered_like_a_real_one_and_stores_nothing(plane, ns):
    cp = plane.cp
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    answer = cp.rest("POST", path, body=gang_deployment("dry"), query={"dryRun": "All"})
    assert answer["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "dry"
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", path, body=gang_deployment("dry", replicas=1), query={"dryRun": "All"})
    assert refused.value.status == 403
    time.sleep(1)
    assert cp.rest("GET", f"{path}/dry", ok=(404,)) is None
    assert pod_groups(cp, ns) == {} and pods(cp, ns) == []


def test_deleting_a_gang_deployment_deletes_its_pod_group(plane, ns):
    cp = plane.cp
    path = f"/apis/apps/v1/namespaces/{ns}/deployments"
    cp.rest("POST", path, body=gang_deployment("gone"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=gone"))) == 3, what="3 bound pods")
    wait_for(lambda: owner_of(cp, ns, "gone"), what="adoption")
    cp.rest("DELETE", f"{path}/gone", body={"propagationPolicy": "Background"})
    wait_for(lambda: "gone" not in pod_groups(cp, ns), timeout=30, what="PodGroup garbage-collected")
    wait_for(lambda: pods(cp, ns, "app=gone") == [], timeout=30, what="pods gone")


@pytest.mark.needs("apiserver")
def test_a_tfjob_stored_through_its_crd_gets_its_templates_patched_and_its_pod_group(plane, ns):
    cp = plane.cp
    job = example("tfjob-ps-worker.yaml")
    job["metadata"]["namespace"] = ns
    del job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    stored = cp.rest("POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs", body=job)
    for replica in ("PS", "Worker"):
        template = stored["spec"]["tfReplicaSpecs"][replica]["template"]
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "dist-mnist"
        assert template["spec"]["schedulerName"] == SCHEDULER
    pg = pod_groups(cp, ns)["dist-mnist"]
    assert pg["spec"]["minMember"] == 6 and pg["spec"]["minResources"] == {"cpu": "9", "memory": "19Gi"}
    owner = wait_for(lambda: owner_of(cp, ns, "dist-mnist"), what="adoption")
    assert (owner["apiVersion"], owner["kind"], owner["uid"]) == ("kubeflow.org/v1", "TFJob",
                                                                  stored["metadata"]["uid"])


@pytest.mark.needs("apiserver")
def test_a_spark_application_stored_through_its_crd_gets_driver_and_executor_patched_and_its_pod_group(plane, ns):
    cp = plane.cp
    app = example("spark-pi-scala.yaml")
    app["metadata"]["namespace"] = ns
    stored = cp.rest("POST", f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/sparkapplications", body=app)
    for role in ("driver", "executor"):
        assert stored["spec"][role]["labels"]["scheduling.x-k8s.io/pod-group"] == "spark-pi"
        assert stored["spec"][role]["schedulerName"] == SCHEDULER
    pg = pod_groups(cp, ns)["spark-pi"]
    assert pg["spec"]["minMember"] == 1 and pg["spec"]["minResources"] == {"cpu": "9", "memory": "20452Mi"}
    owner = wait_for(lambda: owner_of(cp, ns, "spark-pi"), what="adoption")
    assert (owner["kind"], owner["uid"]) == ("SparkApplication", stored["metadata"]["uid"])


@pytest.mark.needs("apiserver")
def test_a_ganged_spark_application_gets_an_event_naming_the_operators_default_batch_scheduler(plane, ns):
    # admit cannot read the spark-operator's --default-batch-scheduler, which would gang every app a second time
    # beside admit's: kubectl describe shows it once, as admit's controller records it
    cp = plane.cp
    app = example("spark-pi-scala.yaml")
    app["metadata"]["namespace"] = ns
    cp.rest("POST", f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/sparkapplications", body=app)

    def setting() -> list:
        events = cp.rest("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
        return [e for e in events if e.get("reason") == "OperatorSetting"
                and (e.get("regarding") or {}).get("name") == "spark-pi"]

    (event,) = wait_for(setting, what="the OperatorSetting Event")
    assert event["type"] == "Normal" and "--default-batch-scheduler" in event["note"]
    assert event["regarding"]["kind"] == "SparkApplication"
