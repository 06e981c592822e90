"""API Priority and Fairness throttling admit on a real kube-apiserver: a FlowSchema sends admit's PodGroup creates in
one namespace to a priority level of its own (flowcontrol.apiserver.k8s.io/v1) whose only queue is kept full, so
kube-apiserver answers each of them 429 with ``Retry-After``, as it does under load. admit retries within its 3 s
budget and answers through its failure mode when the throttling outlasts it; throttling that ends within the budget
costs the user nothing.

How the level throttles, as kube-apiserver 1.36 serves it (``k8s.io/apiserver`` ``pkg/util/flowcontrol``):

- no seats of its own and none borrowed (``nominalConcurrencyShares: 0``, ``lendablePercent: 0``,
  ``borrowingLimitPercent: 0``): its concurrency limit is 0 (``apf_controller.go`` ``updateBorrowingLocked``), so a
  request queued there is never dispatched (``queueset.go`` ``dispatchAsMuchAsPossibleLocked``);
- ``limitResponse: Queue`` with one queue of length 1, held by a request the test parks there (a PodGroup create as a
  user the FlowSchema also matches, by impersonation, which kube-apiserver applies before APF classifies:
  ``pkg/server/config.go`` ``DefaultBuildHandlerChain``); every further request is rejected at once as
  ``queue-full`` (``rejectOrEnqueueToBoundLocked``) with 429 and ``Retry-After: 1`` (``priority-and-fairness.go``,
  ``droppedrequests.go``).

``limitResponse: Reject`` does not do it: with a concurrency limit of 0 ``canAccommodateSeatsLocked`` still dispatches
a request when nothing else of the level executes (kubernetes/kubernetes#134196, unfixed in 1.36), so admit's lone
create went through. The plane runs kube-apiserver with APF on (``tests/support/plane.py``).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

from tests.real.support import gang_deployment, wait_for
from tests.support.plane import ControlPlane, PlaneError

APPS = "/apis/apps/v1/namespaces/{ns}/deployments"
PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
#: The user whose request holds the jail's only queue slot (impersonated by the admin; it never reaches authorization).
HOLDER = "admit-test-queue-holder"
SUBJECTS = [{"kind": "ServiceAccount", "serviceAccount": {"name": "admit", "namespace": "admit-system"}},
            {"kind": "User", "user": {"name": HOLDER}}]


def _jail(cp: ControlPlane, ns: str) -> str:
    """A priority level of no seats with one queue of length 1, and a FlowSchema sending admit's (and the holder's)
    PodGroup creates in ``ns`` to it; waits until kube-apiserver's APF configuration controller has applied both (it
    marks the FlowSchema ``Dangling: False`` after switching to the new configuration, ``apf_controller.go``
    ``digestConfigObjects``). Returns the name of both objects."""
    name = f"admit-jail-{ns}"[:63]
    cp.rest("POST", f"{FLOWCONTROL}/prioritylevelconfigurations", body={
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 1}}}},
    })
    cp.rest("POST", f"{FLOWCONTROL}/flowschemas", body={
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": name},
        "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 100,
                 "distinguisherMethod": {"type": "ByUser"},
                 "rules": [{"subjects": SUBJECTS,
                            "resourceRules": [{"verbs": ["create"], "apiGroups": ["scheduling.x-k8s.io"],
                                               "resources": ["podgroups"], "namespaces": [ns]}]}]},
    })

    def applied() -> bool:
        conditions = (cp.rest("GET", f"{FLOWCONTROL}/flowschemas/{name}").get("status") or {}).get("conditions")
        return any(c.get("type") == "Dangling" and c.get("status") == "False" for c in conditions or [])

    wait_for(applied, what=f"FlowSchema {name} applied by kube-apiserver's APF configuration controller")
    return name


def _free(cp: ControlPlane, name: str) -> None:
    cp.rest("DELETE", f"{FLOWCONTROL}/flowschemas/{name}", ok=(404,))
    cp.rest("DELETE", f"{FLOWCONTROL}/prioritylevelconfigurations/{name}", ok=(404,))


def _queued(cp: ControlPlane, level: str) -> float:
    """Requests waiting in the queues of priority level ``level``: kube-apiserver's
    ``apiserver_flowcontrol_current_inqueue_requests`` gauge, summed over its FlowSchemas."""
    text = cp.rest("GET", "/metrics")
    pattern = re.compile(r'^apiserver_flowcontrol_current_inqueue_requests\{[^}]*priority_level="'
                         + re.escape(level) + r'"[^}]*\} (\S+)$', re.M)
    return sum(float(v) for v in pattern.findall(text if isinstance(text, str) else json.dumps(text)))


@contextmanager
def _queue_held(cp: ControlPlane, ns: str, level: str) -> Iterator[None]:
    """Park a PodGroup create (as :data:`HOLDER`) in the jail's only queue slot: sent, its answer never read, until
    the block ends and the connection is closed (kube-apiserver then drops it from the queue). Waits until
    kube-apiserver counts it queued."""
    conn = cp.connect(timeout=60)
    body = json.dumps({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                       "metadata": {"name": "held"}, "spec": {"minMember": 1}})
    conn.request("POST", PG.format(ns=ns), body=body,
                 headers={"Content-Type": "application/json", "Accept": "application/json",
                          "Impersonate-User": HOLDER})
    try:
        wait_for(lambda: _queued(cp, level) >= 1, interval=0.25,
                 what=f"a request held in the queue of priority level {level}")
        yield
    finally:
        if conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conn.close()


@pytest.mark.needs("apiserver")
def test_throttling_longer_than_the_budget_refuses_the_deployment_through_the_failure_mode_in_time(plane, ns):
    cp = plane.cp
    name = _jail(cp, ns)
    try:
        with _queue_held(cp, ns, name):
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
    lifted = threading.Timer(0.5, _free, (cp, name))  # the throttling ends while admit waits its Retry-After
    try:
        with _queue_held(cp, ns, name):
            started = time.monotonic()
            lifted.start()
            try:
                dep = cp.rest("POST", APPS.format(ns=ns), body=gang_deployment("web", replicas=3, min_member=3))
            finally:
                elapsed = time.monotonic() - started
                lifted.join()
    finally:
        _free(cp, name)
    assert dep["metadata"]["name"] == "web"
    assert 0.5 <= elapsed < 5.0  # admit waited out the throttling (a Retry-After), within its budget
    assert wait_for(lambda: cp.rest("GET", f"{PG.format(ns=ns)}/web", ok=(404,)), what="PodGroup web")
