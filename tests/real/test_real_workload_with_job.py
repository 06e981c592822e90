"""The Job controller's own gang objects (``WorkloadWithJob``, KEP-5547) beside admit's Coscheduling gang, on a real
control plane with the gate on: ``--feature-gates=GenericWorkload=true,GangScheduling=true,WorkloadWithJob=true``
and ``--runtime-config=scheduling.k8s.io/v1alpha2=true`` (``ControlPlane(native_gang=True, feature_gates=...)``), and
``admit serve`` with its default backend (coscheduling) behind the chart's webhooks.

What the sources say (kubernetes ``pkg/controller/job/job_scheduling_manager.go``): on 1.36 the Job controller makes a
gang Workload and PodGroup (``minCount = parallelism``) for an Indexed Job with ``completions == parallelism > 1`` whose
template names no ``schedulingGroup`` (``isGangSchedulingEligible``); on 1.37 it makes one for every such Job,
**Basic** unless ``spec.scheduling`` says gang (``shouldManageWorkloadForJob``). Either way a Job admit gangs through
Coscheduling gets one too. ``admit status`` must show that gang once, as the Coscheduling gang it is.

A plane whose binaries do not know the gate (kube-apiserver or kube-controller-manager stop with "unrecognized feature
gate") skips the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any, Iterable

import pytest

from tests.real.support import container, pods, wait_for
from tests.support.plane import TIERS, ControlPlane, PlaneError, find_binaries

pytestmark = pytest.mark.needs("native")

JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"
NATIVE_PODGROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups"
GATES = {"WorkloadWithJob": True}


@pytest.fixture(scope="module")
def gated() -> Iterable[ControlPlane]:
    binaries = find_binaries(TIERS["native"])  # tests/real/conftest.py skipped the module if any is missing
    cp = ControlPlane(binaries, native_gang=True, feature_gates=GATES, keep=bool(os.environ.get("ADMIT_PLANE_KEEP")))
    try:
        cp.start()
    except PlaneError as e:
        if "unrecognized feature gate" in str(e) or "WorkloadWithJob" in str(e):
            pytest.skip(f"these Kubernetes binaries do not know the WorkloadWithJob gate: {str(e)[-300:]}")
        raise
    try:
        cp.add_node("gated-1", cpu="4", memory="8Gi")
        cp.start_admit("admit-gated", ["--orphan-grace-period", "5"])
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def ns(gated: ControlPlane) -> Iterable[str]:
    name = f"wwj-{uuid.uuid4().hex[:8]}"
    gated.create_namespace(name)
    yield name
    gated.delete_namespace(name)


def indexed_job(name: str, parallelism: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": {"gang.admit.dev/min-member": "auto"}},
        "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                 "template": {"spec": {"restartPolicy": "Never", "containers": [container("100m")],
                                       "terminationGracePeriodSeconds": 0}}},
    }


def status_rows(cp: ControlPlane, ns: str) -> tuple[list[dict[str, Any]], str]:
    """``admit status`` as for an admit that may also use the workload-api backend (``--extra-gang-backend``): its
    native part runs only for an enabled or asked-for backend (``admit/cli/status.py`` ``wanted_backends``)."""
    done = subprocess.run([sys.executable, "-m", "admit.cli", "status", "--kubeconfig", str(cp.kubeconfig), "-n", ns,
                           "-o", "json", "--extra-gang-backend", "workload-api"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_a_coscheduling_job_gang_shows_once_in_status_beside_the_job_controllers_own_pod_group(gated, ns):
    cp = gated
    created = cp.rest("POST", JOBS.format(ns=ns), body=indexed_job("train", 3))
    template = created["spec"]["template"]
    assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "train"  # admit's Coscheduling gang
    wait_for(lambda: len(pods(cp, ns, "job-name=train")) == 3, what="3 pods of the Job")
    made = wait_for(lambda: [pg for pg in cp.rest("GET", NATIVE_PODGROUPS.format(ns=ns))["items"]
                             if any(r.get("kind") == "Job" and r.get("uid") == created["metadata"]["uid"]
                                    for r in pg["metadata"].get("ownerReferences") or [])],
                    what="the Job controller's own PodGroup (WorkloadWithJob)")
    assert len(made) == 1
    rows, err = status_rows(cp, ns)
    assert [r["group"] for r in rows] == ["train"], rows  # the Coscheduling gang, and no native row beside it
    assert "left out: " in err
