"""Field cases on a real control plane where the scheduler's behaviour is the point:
Spark executors scheduled in the gang their driver named, a pod that waits for a PodGroup nobody made, and
scales through the ``scale`` subresource as ``kubectl scale`` sends them (a merge patch).

The plane runs only the scheduler-plugins scheduler (profile ``scheduler-plugins-scheduler``): a pod left with
``schedulerName: default-scheduler`` is never bound, so a bound executor is one that admit put into its driver's gang.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.support.plane import PlaneError
from tests.real.support import PERMIT_WAIT, bound, container, gang_deployment, pods, wait_for

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
PODS = "/api/v1/namespaces/{ns}/pods"
APPS = "/apis/apps/v1/namespaces/{ns}/deployments"
LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER = "scheduler-plugins-scheduler"


def spark_driver(app_id: str, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
                 ) -> dict:
    """A spark-submit driver pod (Spark's ``BasicDriverFeatureStep``: labels ``spark-app-selector``,
    ``spark-role: driver``), with ``--conf spark.kubernetes.driver.annotation.*`` / ``.label.*`` as given."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nightly-agg-7f3c-driver",
                     "labels": {"spark-app-name": "nightly-agg", "spark-app-selector": app_id, "spark-role": "driver",
                                "spark-version": "3.5.3", **(labels or {})},
                     "annotations": dict(annotations or {})},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [container(name="spark-kubernetes-driver")]},
    }


def spark_executor(app_id: str, driver: dict, exec_id: int) -> dict:
    """An executor pod as the driver's ``ExecutorPodsAllocator`` creates it: a name, Spark's labels, a controller
    ownerReference to the driver pod, and ``schedulerName: default-scheduler`` (nothing told Spark otherwise)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"nightly-agg-7f3c-exec-{exec_id}",
                     "labels": {"spark-app-name": "nightly-agg", "spark-app-selector": app_id,
                                "spark-exec-id": str(exec_id), "spark-exec-resourceprofile-id": "0",
                                "spark-role": "executor", "spark-version": "3.5.3"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": driver["metadata"]["name"],
                                          "uid": driver["metadata"]["uid"], "controller": True}]},
        "spec": {"restartPolicy": "Never", "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 0,
                 "containers": [container(name="spark-kubernetes-executor")]},
    }


def app_id() -> str:
    return f"spark-{uuid.uuid4().hex}"


def executors_join(cp, ns, app: str, driver: dict, group: str) -> None:
    for exec_id in (1, 2):
        executor = cp.rest("POST", PODS.format(ns=ns), body=spark_executor(app, driver, exec_id))
        assert executor["metadata"]["labels"][LABEL] == group
        assert executor["spec"]["schedulerName"] == SCHEDULER
    wait_for(lambda: len(bound(pods(cp, ns, "spark-role=executor"))) == 2, what="both executors bound")


def test_spark_executors_are_scheduled_in_the_group_their_driver_named_by_annotation(plane, ns):
    cp = plane.cp
    app = app_id()
    driver = cp.rest("POST", PODS.format(ns=ns), body=spark_driver(app, {
        "gang.admit.dev/min-member": "1", "gang.admit.dev/pod-group": "nightly-agg",
        "gang.admit.dev/schedule-timeout-seconds": "5"}))
    assert driver["metadata"]["labels"][LABEL] == "nightly-agg"
    assert cp.rest("GET", f"{PG.format(ns=ns)}/nightly-agg")["spec"]["minMember"] == 1
    wait_for(lambda: bound(pods(cp, ns, "spark-role=driver")), what="driver bound")
    executors_join(cp, ns, app, driver, "nightly-agg")
    assert cp.rest("GET", f"{PG.format(ns=ns)}/{app}", ok=(404,)) is None  # no group under the default name


def test_spark_executors_of_a_driver_labelled_by_hand_are_scheduled_in_its_group(plane, ns):
    cp = plane.cp
    cp.rest("POST", PG.format(ns=ns), body={"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                            "metadata": {"name": "etl-gang"},
                                            "spec": {"minMember": 1, "scheduleTimeoutSeconds": 5}})
    app = app_id()
    driver = cp.rest("POST", PODS.format(ns=ns), body=spark_driver(app, labels={LABEL: "etl-gang"}))
    assert driver["spec"]["schedulerName"] == SCHEDULER  # a labelled pod gets the scheduler (a hand-made setup)
    wait_for(lambda: bound(pods(cp, ns, "spark-role=driver")), what="driver bound")
    executors_join(cp, ns, app, driver, "etl-gang")


async def test_a_pod_labelled_for_a_missing_pod_group_is_created_with_a_warning_and_waits_until_it_exists(
        plane, ns, kube):
    from kubernetes_asyncio import client

    cp = plane.cp
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "adhoc-0", "labels": {LABEL: "adhoc", "app": "adhoc"}},
            "spec": {"containers": [container()], "terminationGracePeriodSeconds": 0}}
    resp = await client.CoreV1Api(kube).create_namespaced_pod(ns, body, _preload_content=False)
    warnings = resp.headers.getall("Warning", [])
    resp.release()
    assert any(f"PodGroup {ns}/adhoc does not exist" in w and f"Create PodGroup adhoc in namespace {ns}" in w
               for w in warnings), (warnings, plane.admit.output()[-3000:])
    # Coscheduling keeps it waiting as long as the group is missing ...
    end = time.monotonic() + PERMIT_WAIT + 2
    while time.monotonic() < end:
        assert bound(pods(cp, ns, "app=adhoc")) == [], "a pod of a missing PodGroup was bound"
        time.sleep(0.25)
    # ... and schedules it once the PodGroup the warning names is created.
    cp.rest("POST", PG.format(ns=ns), body={"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                            "metadata": {"name": "adhoc"}, "spec": {"minMember": 1}})
    # The scheduler moves the pod back to its active queue on the PodGroup's add event; when that event races the
    # pod's own failing cycle (seen under load), the pod can sit in the unschedulable queue until the scheduler's
    # periodic flush (5 min). What a user then does, deleting the pod for its controller to make it again, puts a new
    # pod in the active queue at once: do that after 20 s.
    try:
        wait_for(lambda: bound(pods(cp, ns, "app=adhoc")), timeout=20, what="the pod bound once its PodGroup exists")
    except AssertionError:
        cp.rest("DELETE", f"{PODS.format(ns=ns)}/adhoc-0", body={"gracePeriodSeconds": 0})
        wait_for(lambda: not pods(cp, ns, "app=adhoc"), what="the waiting pod deleted")
        cp.rest("POST", PODS.format(ns=ns), body=body)
        try:
            wait_for(lambda: bound(pods(cp, ns, "app=adhoc")), timeout=60, what="the pod made again bound")
        except AssertionError as e:
            raise AssertionError(f"{e}; scheduler log: {cp.logs('scheduler-plugins-scheduler')[-3000:]}") from None


def scale(cp, ns, name, replicas):
    """``kubectl scale deployment/<name> --replicas=<n>``: a merge patch of the scale subresource."""
    return cp.rest("PATCH", f"{APPS.format(ns=ns)}/{name}/scale", body={"spec": {"replicas": replicas}},
                   content_type="application/merge-patch+json")


def test_a_scale_from_zero_below_min_member_is_refused_through_the_scale_subresource(plane, ns):
    cp = plane.cp
    cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("batch", replicas=0, min_member=3))
    wait_for(lambda: cp.rest("GET", f"{PG.format(ns=ns)}/batch", ok=(404,)), what="PodGroup")
    for target in (1, 2):
        with pytest.raises(PlaneError) as refused:
            scale(cp, ns, "batch", target)
        assert refused.value.status == 403
        assert 'admission webhook "scale.validate.admit.dev" denied the request' in str(refused.value)
        assert f"to {target} replica" in str(refused.value) and "minMember 3" in str(refused.value)
    assert cp.rest("GET", f"{APPS.format(ns=ns)}/batch")["spec"]["replicas"] == 0
    assert pods(cp, ns, "app=batch") == []
    scale(cp, ns, "batch", 3)
    wait_for(lambda: len(bound(pods(cp, ns, "app=batch"))) == 3, what="3 bound pods")


@pytest.mark.needs("apiserver")
def test_a_scale_of_a_deployment_that_is_no_gang_is_never_refused(plane, ns):
    cp = plane.cp
    plain = gang_deployment("plain", replicas=4)
    plain["metadata"]["annotations"] = {}
    cp.rest("POST", APPS.format(ns=ns), body=plain)
    assert scale(cp, ns, "plain", 1)["spec"]["replicas"] == 1
    assert cp.rest("GET", f"{APPS.format(ns=ns)}/plain")["spec"]["replicas"] == 1


def test_an_auto_gang_scaled_from_zero_waits_for_all_its_pods_from_the_first_one(plane, ns):
    cp = plane.cp
    # Two nodes of 4 CPU; 3-CPU pods: one fits per node, so a gang of 4 must not start at all. With the PodGroup
    # still at minMember 1 (its size at 0 replicas) the first two pods would be bound one by one.
    cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("burst", replicas=0, min_member="auto", cpu="3"))
    wait_for(lambda: (cp.rest("GET", f"{PG.format(ns=ns)}/burst", ok=(404,)) or {}).get("metadata", {}).get(
        "ownerReferences"), what="PodGroup adopted")
    before = cp.rest("GET", f"{PG.format(ns=ns)}/burst")
    assert before["spec"]["minMember"] == 1
    scale(cp, ns, "burst", 4)
    # The PodGroup's first change after the scale is admission's, to the new size: before the scale was stored, so
    # before any pod of it existed. (Its changes, in order, from a watch that replays them from the version read.)
    stream = cp.rest("GET", PG.format(ns=ns), query={
        "watch": "true", "resourceVersion": before["metadata"]["resourceVersion"], "timeoutSeconds": "1",
        "fieldSelector": "metadata.name=burst"})
    events = [stream] if isinstance(stream, dict) else [json.loads(line) for line in stream.splitlines() if line.strip()]
    changes = [e["object"]["spec"]["minMember"] for e in events]
    assert changes and changes[0] == 4, changes
    wait_for(lambda: len(pods(cp, ns, "app=burst")) == 4, what="4 pods created")
    end = time.monotonic() + PERMIT_WAIT + 3
    while time.monotonic() < end:
        assert bound(pods(cp, ns, "app=burst")) == [], "a pod of a gang that cannot fit was bound"
        time.sleep(0.25)
    assert cp.rest("GET", f"{PG.format(ns=ns)}/burst")["spec"]["minMember"] == 4


async def test_kubectl_apply_warns_only_for_what_to_change_never_for_admits_notes(plane, ns, kube):
    # A paused gang (replicas 0) is correct: admit's note about it must not come back as a Warning: header, which
    # kubectl prints on every apply. A misspelt key is a mistake: its warning must.
    from kubernetes_asyncio import client

    apps = client.AppsV1Api(kube)
    paused = gang_deployment("paused", replicas=0)
    resp = await apps.create_namespaced_deployment(ns, paused, _preload_content=False)
    warnings = resp.headers.getall("Warning", [])
    resp.release()
    assert warnings == [], (warnings, plane.admit.output()[-3000:])
    misspelt = gang_deployment("misspelt")
    misspelt["metadata"]["annotations"]["gang.admit.dev/minmember"] = "3"
    resp = await apps.create_namespaced_deployment(ns, misspelt, _preload_content=False)
    warnings = resp.headers.getall("Warning", [])
    resp.release()
    assert any("rename annotation gang.admit.dev/minmember to gang.admit.dev/min-member" in w for w in warnings), (
        warnings, plane.admit.output()[-3000:])


async def test_kubectl_apply_of_a_gang_whose_prefix_is_misspelt_gets_no_warning_and_no_gang_as_the_readme_says(
        plane, ns, kube):
    # The chart's matchConditions send admit only objects with a gang.admit.dev/ key: a misspelt prefix is stored as
    # no gang, with no Warning: header (admit review and admit status are where it is caught; README, docs/behaviour.md)
    from kubernetes_asyncio import client

    apps = client.AppsV1Api(kube)
    typo = gang_deployment("typo")
    typo["metadata"]["annotations"] = {"gang.admitt.dev/min-member": "3"}
    resp = await apps.create_namespaced_deployment(ns, typo, _preload_content=False)
    warnings = resp.headers.getall("Warning", [])
    stored = json.loads(await resp.read())
    resp.release()
    assert warnings == [], (warnings, plane.admit.output()[-3000:])
    template = stored["spec"]["template"]
    assert LABEL not in template["metadata"].get("labels", {}) and template["spec"].get("schedulerName") != SCHEDULER
