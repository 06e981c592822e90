"""API Priority and Fairness throttling admit on a real kube-apiserver: a priority level with no seats
(``nominalConcurrencyShares: 0``, no borrowing, ``limitResponse: Reject``, flowcontrol.apiserver.k8s.io/v1) and a
FlowSchema that sends admit's PodGroup creates in one namespace to it make kube-apiserver answer each of them 429
with ``Retry-After``, as it does under load. admit retries within its 3 s budget and answers through its failure mode
when the throttling outlasts it; throttling that ends within the budget costs the user nothing."""

from __future__ import annotations

import threading
import time

import pytest

from tests.real.support import gang_deployment, wait_for
from tests.support.plane import PlaneError

APPS = "/apis/apps/v1/namespaces/{ns}/deployments"
PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"


def _jail(cp, ns: str) -> str:
    """Send admit's PodGroup creates in ``ns`` to a priority level that rejects every request; returns the name of
    both objects."""
    name = f"admit-jail-{ns}"[:63]
    cp.rest("POST", f"{FLOWCONTROL}/prioritylevelconfigurations", body={
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0,
                                                "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}},
    })
    cp.rest("POST", f"{FLOWCONTROL}/flowschemas", body={
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
        "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 100,
                 "distinguisherMethod": {"type": "ByUser"},
                 "rules": [{"subjects": [{"kind": "ServiceAccount",
                                          "serviceAccount": {"name": "admit", "namespace": "admit-system"}}],
                            "resourceRules": [{"verbs": ["create"], "apiGroups": ["scheduling.x-k8s.io"],
                                               "resources": ["podgroups"], "namespaces": [ns]}]}]},
    })
    return name


def _free(cp, name: str) -> None:
    cp.rest("DELETE", f"{FLOWCONTROL}/flowschemas/{name}", ok=(404,))
    cp.rest("DELETE", f"{FLOWCONTROL}/prioritylevelconfigurations/{name}", ok=(404,))


@pytest.mark.needs("apiserver")
def test_throttling_longer_than_the_budget_refuses_the_deployment_through_the_failure_mode_in_time(plane, ns):
    cp = plane.cp
    name = _jail(cp, ns)
    try:
        time.sleep(1.0)  # the APF configuration controller picks the new objects up
        started = time.monotonic()
        with pytest.raises(PlaneError) as refused:
            cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("web", replicas=3, min_member=3))
        elapsed = time.monotonic() - started
    finally:
        _free(cp, name)
    assert "failure mode 'deny'" in str(refused.value) and "429" in str(refused.value)
    assert elapsed < 5.0  # within webhook.timeoutSeconds: admit answered, not kube-apiserver's timeout
    assert cp.rest("GET", f"{APPS.format(ns=ns)}/web", ok=(404,)) is None


@pytest.mark.needs("apiserver")
def test_throttling_that_ends_within_the_budget_costs_the_deployment_nothing(plane, ns):
    cp = plane.cp
    name = _jail(cp, ns)
    time.sleep(1.0)
    lifted = threading.Timer(0.5, _free, (cp, name))  # the throttling ends while admit waits its Retry-After
    started = time.monotonic()
    lifted.start()
    try:
        dep = cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("web", replicas=3, min_member=3))
    finally:
        elapsed = time.monotonic() - started
        lifted.join()
        _free(cp, name)
    assert dep["metadata"]["name"] == "web"
    assert 0.5 <= elapsed < 5.0  # admit waited out the throttling (a Retry-After), within its budget
    assert wait_for(lambda: cp.rest("GET", f"{PG.format(ns=ns)}/web", ok=(404,)), what="PodGroup web")
