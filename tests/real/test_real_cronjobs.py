"""CronJobs on a real control plane: kube-apiserver sends the CronJob to admit's validating webhook through the
chart's rules and matchConditions (its gang annotations are under ``spec.jobTemplate.metadata.annotations``), and
the real CronJob controller (kube-controller-manager, ``pkg/controller/cronjob``) creates each Job, which admit
mutates and gives its own PodGroup at the Job's admission. The CronJob itself is stored as written."""

from __future__ import annotations

import time

import pytest

from admit.families.apps import job_from_cronjob
from tests.real.support import container, pods, wait_for
from tests.support.plane import PlaneError

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER = "scheduler-plugins-scheduler"


def gang_cronjob(name: str, parallelism: int, completions: int, schedule: str = "0 2 * * *") -> dict:
    """``kubectl create cronjob NAME --image=... --schedule=...`` with a gang of 2 in its jobTemplate."""
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
            "spec": {"schedule": schedule, "concurrencyPolicy": "Forbid", "jobTemplate": {
                "metadata": {"name": name, "annotations": {"gang.admit.dev/min-member": "2",
                                                           "gang.admit.dev/schedule-timeout-seconds": "5"}},
                "spec": {"parallelism": parallelism, "completions": completions, "backoffLimit": 0, "template": {
                    "spec": {"restartPolicy": "Never", "containers": [container()]}}}}}}


@pytest.mark.needs("apiserver")
def test_a_cronjob_whose_jobs_admit_would_refuse_is_refused_and_a_good_ones_job_is_mutated_at_its_creation(plane, ns):
    cp = plane.cp
    path = f"/apis/batch/v1/namespaces/{ns}/cronjobs"
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", path, body=gang_cronjob("shards", 2, 3))  # the third pod would run alone
    assert refused.value.status == 403
    assert "each Job it creates would be refused" in str(refused.value)
    assert "spec.jobTemplate.spec.completions=3 with spec.jobTemplate.spec.parallelism=2" in str(refused.value)
    good = gang_cronjob("nightly", 2, 4)
    stored = cp.rest("POST", path, body=good)
    assert stored["spec"]["jobTemplate"]["metadata"]["annotations"] == \
        good["spec"]["jobTemplate"]["metadata"]["annotations"]
    assert LABEL not in str(stored) and "gang.admit.dev/managed" not in (stored["metadata"].get("labels") or {})
    bad = dict(stored, spec=dict(stored["spec"], jobTemplate=gang_cronjob("nightly", 2, 3)["spec"]["jobTemplate"]))
    with pytest.raises(PlaneError) as refused:
        cp.rest("PUT", f"{path}/nightly", body=bad)
    assert refused.value.status == 403 and "spec.jobTemplate.spec.completions=3" in str(refused.value)
    # the Job exactly as the CronJob controller makes it (getJobFromTemplate2), for the current minute
    job = cp.rest("POST", f"/apis/batch/v1/namespaces/{ns}/jobs",
                  body=job_from_cronjob(stored, ns, minute=int(time.time()) // 60))
    name = job["metadata"]["name"]
    assert job["spec"]["template"]["metadata"]["labels"][LABEL] == name
    assert job["spec"]["template"]["spec"]["schedulerName"] == SCHEDULER
    pg = cp.rest("GET", f"{PG.format(ns=ns)}/{name}")
    assert pg["spec"]["minMember"] == 2


@pytest.mark.needs("controllers")
def test_the_real_cronjob_controllers_job_is_its_own_gang_named_after_the_job(plane, ns):
    cp = plane.cp
    cp.rest("POST", f"/apis/batch/v1/namespaces/{ns}/cronjobs", body=gang_cronjob("every-minute", 2, 2, "* * * * *"))
    jobs = wait_for(lambda: cp.rest("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"], timeout=120.0,
                    what="the CronJob controller's first Job (at the next minute)")
    job = jobs[0]
    name = job["metadata"]["name"]
    assert name.startswith("every-minute-") and name.removeprefix("every-minute-").isdigit()
    assert (job["metadata"]["ownerReferences"][0]["kind"], job["metadata"]["ownerReferences"][0]["controller"]) == \
        ("CronJob", True)
    assert job["spec"]["template"]["metadata"]["labels"][LABEL] == name
    pg = wait_for(lambda: cp.rest("GET", f"{PG.format(ns=ns)}/{name}", ok=(404,)), what="the Job's PodGroup")
    assert pg["spec"]["minMember"] == 2
    wait_for(lambda: len([p for p in pods(cp, ns) if p["spec"].get("nodeName")]) >= 2, what="2 bound gang pods")
