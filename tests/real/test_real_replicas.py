"""admit's availability on a real control plane: two ``admit serve`` replicas (both answer admission, one leader
holds the Lease and runs the controller, the other takes over when it stops, as during a rolling update of admit
itself), and what the chart's failure policies do while no replica answers."""

from __future__ import annotations

import pytest

from tests.support.plane import PlaneError, free_port
from tests.real.support import bound, container, gang_deployment, pods, wait_for

LEASE = "/apis/coordination.k8s.io/v1/namespaces/admit-system/leases/admit-controller"
PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}"


def holder(cp) -> str:
    return (cp.rest("GET", LEASE, ok=(404,)) or {}).get("spec", {}).get("holderIdentity") or ""


def adopted(cp, ns, name):
    pg = cp.rest("GET", PG.format(ns=ns, name=name), ok=(404,)) or {}
    return pg.get("metadata", {}).get("ownerReferences")


def test_two_replicas_share_admission_one_leads_and_the_other_takes_over(plane, ns):
    cp = plane.cp
    first = plane.admit
    assert holder(cp).startswith(f"{first.name}_")
    # A second replica; the webhooks now call it (a follower): admission works on every replica.
    second = plane.start_admit("admit-1", ["--orphan-grace-period", "5"], register=True)
    # kube-apiserver calls the first until its informer delivers the new configurations: paused gangs (replicas 0,
    # no pods) until one of them has its PodGroup made by the second
    probes: list[str] = []

    def second_answers() -> bool:
        probes.append(f"probe-{len(probes)}")
        cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment(probes[-1], replicas=0))
        out = second.output()
        return any(f"created PodGroup {ns}/{name}" in out for name in probes)

    wait_for(second_answers, interval=0.2, what="kube-apiserver calling the second replica's webhooks")
    cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment("web"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3, what="3 bound pods")
    assert f"created PodGroup {ns}/web" in second.output()
    wait_for(lambda: adopted(cp, ns, "web"), what="adoption by the leader")
    assert f"adopted PodGroup {ns}/web" in first.output() and "adopted PodGroup" not in second.output()
    assert holder(cp).startswith(f"{first.name}_")
    # The leader stops (SIGTERM: it gives the Lease back); the follower leads and adopts the next group.
    assert first.stop() == 0
    wait_for(lambda: holder(cp).startswith(f"{second.name}_"), timeout=20, what="the follower takes the Lease")
    cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment("api"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=api"))) == 3, what="3 bound pods")
    wait_for(lambda: adopted(cp, ns, "api"), what="adoption by the new leader")
    assert f"adopted PodGroup {ns}/api" in second.output()


def test_while_no_admit_answers_gang_workloads_are_refused_and_pods_and_scale_go_through(plane, ns):
    """The chart's failure policies on a real kube-apiserver: workloads Fail, pods and scale Ignore."""
    cp = plane.cp
    cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment("web"))
    wait_for(lambda: len(bound(pods(cp, ns, "app=web"))) == 3, what="3 bound pods")
    cp.register_webhooks(f"https://127.0.0.1:{free_port()}")  # nothing listens there
    try:
        # kube-apiserver calls admit until its informer delivers the new configurations: dry runs until one fails
        wait_for(lambda: _dry_run_refused(cp, ns), interval=0.2,
                 what="kube-apiserver calling the address nothing serves")
        with pytest.raises(PlaneError) as refused:
            cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment("api"))
        assert 'failed calling webhook "workloads.mutate.admit.dev"' in str(refused.value)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "labelled", "labels": {"scheduling.x-k8s.io/pod-group": "web"}},
               "spec": {"containers": [container()]}}
        created = cp.rest("POST", f"/api/v1/namespaces/{ns}/pods", body=pod)
        assert created["spec"]["schedulerName"] == "default-scheduler"  # admitted unmutated: Ignore
        scaled = cp.rest("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/web/scale",
                         body={"spec": {"replicas": 2}}, content_type="application/merge-patch+json")
        assert scaled["spec"]["replicas"] == 2  # not checked while admit is away: Ignore
    finally:
        cp.register_webhooks(plane.admit.url)
        cp.wait_webhooks_answer(ns)  # before the next test, whose workloads admit must answer


def _dry_run_refused(cp, ns) -> bool:
    """A dry-run create of a gang Deployment fails calling admit's webhook (failurePolicy Fail)."""
    try:
        cp.rest("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body=gang_deployment("probe"),
                query={"dryRun": "All"})
    except PlaneError as e:
        return 'failed calling webhook "workloads.mutate.admit.dev"' in str(e)
    return False
