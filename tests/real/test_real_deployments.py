"""Gang Deployments on a real control plane: the Deployment controller's ReplicaSets, the Coscheduling scheduler's
outcome (pods bound = ``spec.nodeName`` set), rollouts, scale and refusals, as a user sees them."""

from __future__ import annotations

import time

import pytest

from tests.support.plane import PlaneError
from tests.real.support import PERMIT_WAIT, bound, gang_annotations, gang_deployment, pods, wait_for

APPS = "/apis/apps/v1/namespaces/{ns}/deployments"
PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"


def replicasets(cp, ns):
    return cp.rest("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]


def events(cp, ns, reason=None):
    items = cp.rest("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if reason is None or e.get("reason") == reason]


def test_an_annotated_deployment_starts_all_its_pods_through_its_replicaset(plane, ns):
    cp = plane.cp
    dep = cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("web", replicas=3, min_member=3))
    assert dep["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "web"
    assert dep["spec"]["template"]["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    running = wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3 and bound(pods(cp, ns, "app=web")),
                       what="3 bound pods")
    assert {p["spec"]["schedulerName"] for p in running} == {"scheduler-plugins-scheduler"}
    assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in running} == {"web"}
    # The ReplicaSet the Deployment controller made carries the Deployment's annotations, and was admitted as a child.
    (rs,) = replicasets(cp, ns)
    assert rs["metadata"]["annotations"]["gang.admit.dev/min-member"] == "3"
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert "gang.admit.dev/managed" not in rs["metadata"].get("labels", {})
    assert events(cp, ns, "ReplicaSetCreateError") == []
    # One PodGroup, adopted by the Deployment; the rollout completes (the kubelet helper marks pods Ready).
    (pg,) = cp.rest("GET", PG.format(ns=ns))["items"]
    assert pg["metadata"]["name"] == "web" and pg["spec"]["minMember"] == 3
    wait_for(lambda: cp.rest("GET", f"{PG.format(ns=ns)}/web")["metadata"].get("ownerReferences"), what="adoption")
    owner = cp.rest("GET", f"{PG.format(ns=ns)}/web")["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Deployment", "web", dep["metadata"]["uid"])
    wait_for(lambda: cp.rest("GET", f"{APPS.format(ns=ns)}/web").get("status", {}).get("availableReplicas") == 3,
             what="Deployment available")
    # kubectl describe deployment/web shows what admit did (events.k8s.io/v1 Events, written with the chart's RBAC).
    notes = wait_for(lambda: [e["note"] for e in cp.rest("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")[
        "items"] if e["reason"] == "PodGroupAdopted" and e["regarding"]["name"] == "web"], what="PodGroupAdopted")
    assert notes == ["PodGroup web is now owned by this Deployment: the garbage collector deletes it with the "
                     "Deployment"]


def test_a_gang_that_does_not_fit_the_nodes_stays_entirely_unbound(plane, ns):
    cp = plane.cp
    # Two nodes of 4 CPU: two 3-CPU pods would fit one per node, the third nowhere; a gang of 3 must not start at all.
    cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("big", replicas=3, min_member=3, cpu="3"))
    wait_for(lambda: len(pods(cp, ns, "app=big")) == 3, what="3 pods created")
    checks = 0
    end = time.monotonic() + PERMIT_WAIT + 5  # past a whole Permit wait and a backoff round
    while time.monotonic() < end:
        assert bound(pods(cp, ns, "app=big")) == [], "a pod of an incomplete gang was bound"
        checks += 1
        time.sleep(0.25)
    assert checks > 10


def test_replicas_below_min_member_are_refused_also_through_kubectl_scale(plane, ns):
    cp = plane.cp
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("small", replicas=2, min_member=3))
    assert refused.value.status == 403
    assert 'admission webhook "workloads.validate.admit.dev" denied the request' in str(refused.value)
    assert "spec.replicas=2" in str(refused.value) and "minMember 3" in str(refused.value)
    assert cp.rest("GET", f"{APPS.format(ns=ns)}/small", ok=(404,)) is None
    cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("web", replicas=3, min_member=3))
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3, what="3 bound pods")
    # kubectl scale deployment/web --replicas=2 sends a merge patch to the scale subresource.
    with pytest.raises(PlaneError) as scaled:
        cp.rest("PATCH", f"{APPS.format(ns=ns)}/web/scale", body={"spec": {"replicas": 2}},
                content_type="application/merge-patch+json")
    assert scaled.value.status == 403
    assert 'admission webhook "scale.validate.admit.dev" denied the request' in str(scaled.value)
    assert cp.rest("GET", f"{APPS.format(ns=ns)}/web")["spec"]["replicas"] == 3
    # Scaling up, and to 0 (a pause), are allowed.
    cp.rest("PATCH", f"{APPS.format(ns=ns)}/web/scale", body={"spec": {"replicas": 4}},
            content_type="application/merge-patch+json")
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 4, what="4 bound pods")
    cp.rest("PATCH", f"{APPS.format(ns=ns)}/web/scale", body={"spec": {"replicas": 0}},
            content_type="application/merge-patch+json")
    wait_for(lambda: pods(cp, ns, "app=web") == [], what="all pods gone")
    cp.rest("PATCH", f"{APPS.format(ns=ns)}/web/scale", body={"spec": {"replicas": 3}},
            content_type="application/merge-patch+json")
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3, what="3 bound pods after the pause")
    wait_for(lambda: cp.rest("GET", f"{PG.format(ns=ns)}/web")["spec"]["minMember"] == 3, what="PodGroup in step")


def test_a_rolling_update_of_a_gang_deployment_completes(plane, ns):
    cp = plane.cp
    cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("web", replicas=3, min_member=3))
    first = wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3 and bound(pods(cp, ns, "app=web")),
                     what="3 bound pods")
    wait_for(lambda: cp.rest("GET", f"{APPS.format(ns=ns)}/web").get("status", {}).get("availableReplicas") == 3,
             what="first rollout")
    patch = {"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}}
    cp.rest("PATCH", f"{APPS.format(ns=ns)}/web", body=patch, content_type="application/merge-patch+json")

    def done():
        d = cp.rest("GET", f"{APPS.format(ns=ns)}/web")
        s = d.get("status", {})
        return (s.get("observedGeneration") == d["metadata"]["generation"] and s.get("updatedReplicas") == 3
                and s.get("availableReplicas") == 3 and s.get("replicas") == 3)

    wait_for(done, timeout=60, what="second rollout complete")
    now = bound(pods(cp, ns, "app=web"))
    assert len(now) == 3 and not {p["metadata"]["uid"] for p in now} & {p["metadata"]["uid"] for p in first}
    rss = replicasets(cp, ns)
    assert sorted(rs["spec"]["replicas"] for rs in rss) == [0, 3]
    assert events(cp, ns, "ReplicaSetCreateError") == []
    assert len(cp.rest("GET", PG.format(ns=ns))["items"]) == 1


def test_replacing_a_gang_deployment_with_the_manifest_the_user_wrote_starts_no_rollout(plane, ns):
    cp = plane.cp
    manifest = gang_deployment("web", replicas=3, min_member=3)
    created = cp.rest("POST", APPS.format(ns=ns), body=manifest)
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3, what="3 bound pods")
    # kubectl replace -f web.yaml: the template arrives without admit's label and schedulerName; admit puts them back,
    # so the stored template does not change and the Deployment controller makes no new ReplicaSet.
    for attempt in range(20):  # kubectl replace retries on 409 too: the controllers keep writing the status
        current = cp.rest("GET", f"{APPS.format(ns=ns)}/web")
        again = {**manifest, "metadata": {**manifest["metadata"],
                                          "resourceVersion": current["metadata"]["resourceVersion"]}}
        try:
            replaced = cp.rest("PUT", f"{APPS.format(ns=ns)}/web", body=again)
            break
        except PlaneError as e:
            if e.status != 409 or attempt == 19:
                raise
            time.sleep(0.1)
    # (its generation moves anyway: kube-apiserver bumps it when annotations change, and the manifest lacks the
    # deployment.kubernetes.io/revision annotation the Deployment controller added)
    assert replaced["spec"]["template"] == created["spec"]["template"]
    time.sleep(1)
    assert len(replicasets(cp, ns)) == 1 and len(bound(pods(cp, ns, "app=web"))) == 3


def test_annotating_a_running_deployment_is_refused_for_a_rolling_update_and_works_with_recreate(plane, ns):
    """Found on this plane: a rolling update into a gang never finishes (the first new pod waits for siblings that
    come only once it runs); admit refuses it with the fixes, and the Recreate fix starts the whole gang."""
    cp = plane.cp
    plain = gang_deployment("web", replicas=3)
    plain["metadata"]["annotations"] = {}
    # Coscheduling's profile schedules pods without a group like any other scheduler profile.
    plain["spec"]["template"]["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
    cp.rest("POST", APPS.format(ns=ns), body=plain)
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3, what="3 bound pods without a gang")
    merge = "application/merge-patch+json"
    annotate = {"metadata": {"annotations": gang_annotations(3)}}
    with pytest.raises(PlaneError) as refused:
        cp.rest("PATCH", f"{APPS.format(ns=ns)}/web", body=annotate, content_type=merge)
    assert refused.value.status == 403 and "rolling update" in str(refused.value)
    assert "spec.strategy.type: Recreate" in str(refused.value)
    assert cp.rest("GET", PG.format(ns=ns))["items"] == []
    cp.rest("PATCH", f"{APPS.format(ns=ns)}/web", content_type=merge,
            body={**annotate, "spec": {"strategy": {"type": "Recreate", "rollingUpdate": None}}})

    def ganged():
        running = bound(pods(cp, ns, "app=web"))
        return len(running) == 3 and all(
            p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") == "web" for p in running)

    wait_for(ganged, timeout=60, what="3 bound gang pods after the rollout")
    wait_for(lambda: (cp.rest("GET", f"{PG.format(ns=ns)}/web", ok=(404,)) or {}).get("metadata", {}).get(
        "ownerReferences"), what="PodGroup adopted")
    assert events(cp, ns, "ReplicaSetCreateError") == []
    # Removing the annotation rolls back out of the gang (admit removes the label it added).
    cp.rest("PATCH", f"{APPS.format(ns=ns)}/web", content_type=merge,
            body={"metadata": {"annotations": {"gang.admit.dev/min-member": None}}})

    def unganged():
        running = bound(pods(cp, ns, "app=web"))
        return len(running) == 3 and all("scheduling.x-k8s.io/pod-group" not in p["metadata"]["labels"]
                                         for p in running)

    wait_for(unganged, timeout=60, what="3 bound pods without the group label after the annotation went")
