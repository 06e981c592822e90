"""ScheduledSparkApplication and RayCronJob on a real control plane: kube-apiserver sends the wrapper to admit's
webhooks through the chart's rules, and each run, created as the wrapper's operator creates it (built by the
emulations of ``tests/emulations/scheduled.py``, from spark-operator v2.5.2 ``createSparkApplication`` and KubeRay
v1.7.0 ``constructRayJob``; the operators do not run here, their CRDs are in ``tests/real/crds``), reaches admit
through the workload webhooks' ``matchConditions`` (``admit.celCarriedHasPrefix``) although its own metadata carries
none of admit's annotations. What a user sees: a wrapper every run of which would be refused is refused; a good one
is stored with the annotations carried in its template, and each run is ganged under its own name."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from tests.emulations.kuberay import cluster_for_parent, ray_pod
from tests.emulations.scheduled import ray_job_run, spark_run
from tests.helpers import EXAMPLES
from tests.real.support import bound, pods, wait_for
from tests.support.plane import PlaneError

PG = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
LABEL = "scheduling.x-k8s.io/pod-group"
MIN = "gang.admit.dev/min-member"
SCHEDULER = "scheduler-plugins-scheduler"


def example(name: str, ns: str) -> dict:
    obj = yaml.safe_load(Path(EXAMPLES / name).read_text())
    obj["metadata"]["namespace"] = ns
    return obj


@pytest.mark.needs("apiserver")
def test_a_scheduled_spark_application_is_judged_by_its_runs_and_each_run_is_ganged_under_its_own_name(plane, ns):
    cp = plane.cp
    path = f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/scheduledsparkapplications"
    bad = example("scheduledsparkapplication-spark-pi.yaml", ns)
    bad["metadata"]["annotations"][MIN] = "2"
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", path, body=bad)
    assert refused.value.status == 403 and "each SparkApplication it creates would be refused" in str(refused.value)
    stored = cp.rest("POST", path, body=example("scheduledsparkapplication-spark-pi.yaml", ns))
    assert stored["spec"]["template"]["driver"]["annotations"] == {MIN: "auto"}
    assert LABEL not in str(stored)
    apps = f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{ns}/sparkapplications"
    names = []
    now = datetime.now(timezone.utc)
    for when in (now, now + timedelta(minutes=3)):  # concurrencyPolicy Allow: two runs at once
        run = cp.rest("POST", apps, body=spark_run(stored, when))  # as the operator's ServiceAccount would
        name = run["metadata"]["name"]
        names.append(name)
        assert run["metadata"]["annotations"] == {MIN: "auto"}
        assert run["spec"]["driver"]["labels"][LABEL] == run["spec"]["executor"]["labels"][LABEL] == name
        assert run["spec"]["driver"]["schedulerName"] == SCHEDULER
        pg = cp.rest("GET", f"{PG.format(ns=ns)}/{name}")
        assert pg["spec"] == {"minMember": 1, "minResources": {"cpu": "2", "memory": "1792Mi"}}
    assert len(set(names)) == 2


@pytest.mark.needs("coscheduling")
def test_a_ray_cron_jobs_rayjob_gets_its_annotations_and_its_rayclusters_pods_are_bound_as_one_gang(plane, ns):
    cp = plane.cp
    path = f"/apis/ray.io/v1/namespaces/{ns}/raycronjobs"
    bad = example("raycronjob-sample.yaml", ns)
    bad["metadata"]["annotations"][MIN] = "3"
    with pytest.raises(PlaneError) as refused:
        cp.rest("POST", path, body=bad)
    assert refused.value.status == 403 and "each RayJob it creates runs 2 pods" in str(refused.value)
    cron = example("raycronjob-sample.yaml", ns)
    head = cron["spec"]["jobTemplate"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head.pop("volumes")  # no ConfigMap here: the pods only need to be bound
    head["containers"][0].pop("volumeMounts")
    stored = cp.rest("POST", path, body=cron)
    job = cp.rest("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayjobs",
                  body=ray_job_run(stored, datetime.now(timezone.utc)))
    assert job["metadata"]["annotations"][MIN] == "auto"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "RayCronJob"
    cluster = cp.rest("POST", f"/apis/ray.io/v1/namespaces/{ns}/rayclusters",
                      body=cluster_for_parent(job, f"{job['metadata']['name']}-x7k2p"))
    name = cluster["metadata"]["name"]
    assert cluster["spec"]["headGroupSpec"]["template"]["metadata"]["labels"][LABEL] == name
    pg = cp.rest("GET", f"{PG.format(ns=ns)}/{name}")
    assert pg["spec"]["minMember"] == 2
    for group in (None, cluster["spec"]["workerGroupSpecs"][0]):
        cp.rest("POST", f"/api/v1/namespaces/{ns}/pods", body=ray_pod(cluster, group, None))
    wait_for(lambda: len(bound(pods(cp, ns, f"{LABEL}={name}"))) == 2, what="the RayCluster's 2 pods bound together")
