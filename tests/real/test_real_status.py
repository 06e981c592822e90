"""``admit status`` on the real control plane: the scheduler-plugins scheduler (Coscheduling) writes the real
FailedScheduling events and PodScheduled conditions, and admit's webhooks and controller act as in a cluster. Each
situation a user meets ("why are my pods Pending?") must come out with the right reason."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Iterable

import pytest
from kubernetes_asyncio import client, config

from admit.config import Config
from admit.cli.status import collect
from tests.support.plane import TIERS, ControlPlane, find_binaries
from admit.kube.watchcache import KubeRaw
from tests.real.support import PERMIT_WAIT, bound, container, gang_deployment, pods, wait_for

APPS = "/apis/apps/v1/namespaces/{ns}/deployments"
PODS = "/api/v1/namespaces/{ns}/pods"
PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"


def bare_pod(name: str, labels: dict[str, str], scheduler: str = "scheduler-plugins-scheduler",
             cpu: str = "100m") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name, **labels}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0, "containers": [container(cpu)]}}


def hand_pod_group(name: str, min_member: int, min_resources: dict | None = None) -> dict:
    spec: dict = {"minMember": min_member, "scheduleTimeoutSeconds": 5}
    if min_resources:
        spec["minResources"] = min_resources
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": name},
            "spec": spec}


async def rows_until(kube, ns: str, group: str, want: str, timeout: float = 30.0):
    """Run the diagnosis (admit status's own reading of the API) until ``group`` has reason ``want``; returns its
    row. Fails with every row seen last."""
    api = KubeRaw(kube, timeout=10)
    deadline = time.monotonic() + timeout
    rows = []
    while time.monotonic() < deadline:
        rows, _ = await collect(api, Config(), ns)
        found = [r for r in rows if r.group == group]
        if found and found[0].reason == want:
            return found[0]
        await asyncio.sleep(0.3)
    raise AssertionError(f"{group}: no {want} within {timeout}s; rows: {rows}")


async def test_a_gang_short_of_capacity_shows_the_schedulers_words(plane, ns, kube):
    # two nodes of 4 CPU: 7.5 CPU in all fits the cluster's total (Coscheduling's minResources check passes), but
    # one 2.5-CPU pod per node leaves the third nowhere
    plane.cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("big", replicas=3, min_member=3, cpu="2500m"))
    row = await rows_until(kube, ns, "big", "Insufficient")
    assert (row.workload, row.min_member, row.pods, row.scheduled, row.pending) == ("Deployment/big", 3, 3, 0, 3)
    assert row.message and row.waiting_seconds is not None


async def test_pods_whose_pod_group_is_missing_are_reported_with_the_missing_name(plane, ns, kube):
    for i in range(2):
        plane.cp.rest("POST", PODS.format(ns=ns), body=bare_pod(f"lone-{i}", {LABEL: "nowhere"}))
    row = await rows_until(kube, ns, "nowhere", "PodGroupMissing")
    assert row.pods == 2 and row.pending == 2 and f"no PodGroup {ns}/nowhere" in row.message


async def test_a_typo_in_the_group_label_value_names_the_pod_group_that_exists(plane, ns, kube):
    plane.cp.rest("POST", PG.format(ns=ns), body=hand_pod_group("train", 2))
    for i in range(2):
        plane.cp.rest("POST", PODS.format(ns=ns), body=bare_pod(f"train-{i}", {LABEL: "trian"}))
    row = await rows_until(kube, ns, "trian", "PodGroupMissing")
    assert "PodGroup train exists" in row.message


async def test_a_typo_in_the_group_label_key_leaves_the_pods_out_of_their_gang(plane, ns, kube):
    plane.cp.rest("POST", PG.format(ns=ns), body=hand_pod_group("web", 2))
    for i in range(2):
        plane.cp.rest("POST", PODS.format(ns=ns), body=bare_pod(f"web-{i}", {"scheduling.x-k8s.io/podgroup": "web"}))
    row = await rows_until(kube, ns, "web", "LabelTypo")
    assert row.pods == 0 and "scheduling.x-k8s.io/podgroup=web" in row.message


async def test_pods_on_a_scheduler_that_does_not_run_are_said_to_be_untouched(plane, ns, kube):
    plane.cp.rest("POST", PG.format(ns=ns), body=hand_pod_group("solo", 1))
    # admit keeps an explicit non-default schedulerName (with a warning): a typo there leaves the pod alone
    plane.cp.rest("POST", PODS.format(ns=ns), body=bare_pod("solo-0", {LABEL: "solo"},
                                                             scheduler="scheduler-plugin-scheduler"))
    await asyncio.sleep(2)  # the scheduler that does run had time to (not) look at it
    row = await rows_until(kube, ns, "solo", "WrongScheduler")
    assert "no scheduler named scheduler-plugin-scheduler is running" in row.message and row.pending == 1


async def test_min_resources_larger_than_the_cluster_are_reported_and_the_command_prints_them(plane, ns, kube):
    # the seed post's hand-written PodGroup, with minResources no two 4-CPU nodes can give
    plane.cp.rest("POST", PG.format(ns=ns), body=hand_pod_group("huge", 2, {"cpu": "64"}))
    for i in range(2):
        plane.cp.rest("POST", PODS.format(ns=ns), body=bare_pod(f"huge-{i}", {LABEL: "huge"}))
    row = await rows_until(kube, ns, "huge", "MinResourcesTooLarge")
    assert "cpu 64 >" in row.message
    proc = subprocess.run([sys.executable, "-m", "admit.cli", "status", "--kubeconfig", str(plane.kubeconfig),
                           "-n", ns, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    by_group = {r["group"]: r for r in json.loads(proc.stdout)}
    assert by_group["huge"]["reason"] == "MinResourcesTooLarge"
    assert by_group["huge"]["pods"] == {"total": 2, "scheduled": 0, "pending": 2}


async def test_a_gang_that_fits_is_scheduled(plane, ns, kube):
    plane.cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("fits", replicas=2, min_member=2))
    row = await rows_until(kube, ns, "fits", "Scheduled")
    assert (row.pods, row.scheduled, row.pending, row.workload) == (2, 2, 0, "Deployment/fits")


async def test_the_scheduler_message_for_a_short_gang_is_classified(plane, ns, kube):
    # replicas below minMember cannot be created through admit; a hand-made group of 3 with 2 pods shows what
    # Coscheduling says about it
    plane.cp.rest("POST", PG.format(ns=ns), body=hand_pod_group("short", 3))
    for i in range(2):
        plane.cp.rest("POST", PODS.format(ns=ns), body=bare_pod(f"short-{i}", {LABEL: "short"}))
    row = await rows_until(kube, ns, "short", "NotEnoughPods")
    assert row.pods == 2 and row.min_member == 3


async def test_a_gang_deployment_at_zero_then_scaled_below_min_member_past_the_webhook_says_why_it_never_forms(
        plane, ns, kube):
    # admitted at replicas 0 (examples/paused-gang-deployment.yaml): nothing to schedule, and no "waits for 3 more"
    plane.cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("web", replicas=0, min_member=3))
    row = await rows_until(kube, ns, "web", "ScaledToZero")
    assert (row.pods, row.pending, row.workload) == (0, 0, "Deployment/web")
    assert f"Deployment {ns}/web asks for no pods (spec.replicas=0)" in row.message
    # admit refuses a scale to 2; with the namespace opted out of its webhooks (chart: namespaceSelector, optOut) the
    # scale goes through, as it does while admit is unreachable with failurePolicy Ignore
    plane.cp.rest("PATCH", f"/api/v1/namespaces/{ns}", body={"metadata": {"labels": {"gang.admit.dev/webhook":
                                                                                        "disabled"}}},
                  content_type="application/merge-patch+json")
    wait_for(lambda: plane.cp.rest("PATCH", f"{APPS.format(ns=ns)}/web", body={"spec": {"replicas": 2}},
                                   content_type="application/merge-patch+json", ok=(400, 403)),
             what="the scale to 2, once kube-apiserver no longer calls admit for the namespace")
    row = await rows_until(kube, ns, "web", "BelowMinMember")
    assert row.message == (f"Deployment {ns}/web asks for 2 pod(s) (spec.replicas=2), minMember 3 "
                           "(gang.admit.dev/min-member=3): the gang can never form. Set spec.replicas to at least 3, "
                           "or lower gang.admit.dev/min-member")


# ----------------------------------------------------------------------------------------------------------------------
# A scheduler-plugins scheduler with podGroupBackoffSeconds: a gang stranded by the backoff, and its retry
# ----------------------------------------------------------------------------------------------------------------------

BACKOFF = 8  # podGroupBackoffSeconds of the plane below (seconds): the replacement pod must come within it


@pytest.fixture(scope="module")
def backoff_plane() -> Iterable[ControlPlane]:
    """A plane of its own: the shared one runs Coscheduling with its defaults (no backoff)."""
    cp = ControlPlane(find_binaries(TIERS["coscheduling"]), permit_waiting_seconds=PERMIT_WAIT,
                      pod_group_backoff_seconds=BACKOFF, keep=bool(os.environ.get("ADMIT_PLANE_KEEP")))
    cp.start()
    try:
        for name in ("node-1", "node-2"):
            cp.add_node(name, cpu="4", memory="8Gi")
        yield cp
    finally:
        cp.stop()


async def test_a_gang_the_backoff_left_unschedulable_is_reported_with_the_command_that_retries_it(backoff_plane):
    """Seen in CI: with a backoff and nothing else for the scheduler to do, a gang whose pods were retried during
    the backoff is not tried again for 5 minutes. Made here on purpose: one pod of three cannot fit (the group is
    rejected and backed off), and its replacement arrives within the backoff."""
    cp, ns = backoff_plane, "stranded"
    cp.create_namespace(ns)
    cp.rest("POST", PG.format(ns=ns), body=hand_pod_group("train", 3))
    for name, cpu in (("train-0", "100m"), ("train-1", "100m"), ("train-2", "5")):  # 5 CPU: no node has them
        cp.rest("POST", PODS.format(ns=ns), body=bare_pod(name, {LABEL: "train"}, cpu=cpu))
    wait_for(lambda: any("Insufficient cpu" in e.get("message", "")
                         for e in cp.rest("GET", f"/api/v1/namespaces/{ns}/events")["items"]),
             timeout=30, what="the 5-CPU pod refused")
    cp.rest("DELETE", f"{PODS.format(ns=ns)}/train-2", query={"gracePeriodSeconds": "0"})
    cp.rest("POST", PODS.format(ns=ns), body=bare_pod("train-3", {LABEL: "train"}))  # fits: the gang could start
    time.sleep(BACKOFF * 2)  # past the backoff: nothing tries the group again
    assert bound(pods(cp, ns)) == []
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cp.kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as kube:
        row = await rows_until(kube, ns, "train", "GroupBackedOff")
    assert (row.pods, row.scheduled, row.pending) == (3, 0, 3)
    assert "failed recently" in row.message or "optimistic rejection in PostFilter" in row.message
    assert row.retry == (f'kubectl annotate podgroups.scheduling.x-k8s.io train -n {ns} retried-at="$(date +%s)" '
                         "--overwrite")
    if shutil.which("kubectl"):  # run it as printed
        done = subprocess.run(["bash", "-c", row.retry], env={**os.environ, "KUBECONFIG": str(cp.kubeconfig)},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "podgroup.scheduling.x-k8s.io/train annotated" in done.stdout, done
    else:  # what it sends: a merge patch of the PodGroup's annotations
        cp.rest("PATCH", f"{PG.format(ns=ns)}/train", content_type="application/merge-patch+json",
                body={"metadata": {"annotations": {"retried-at": str(int(time.time()))}}})
    wait_for(lambda: len(bound(pods(cp, ns))) == 3, timeout=20, what="the gang bound once its PodGroup was updated")
