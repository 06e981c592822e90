"""ScheduledSparkApplication and RayCronJob end to end on the fake API: the user's annotated wrapper goes in, the
wrapper's controller (``tests/emulations/scheduled.py``) makes a run on each due time, the run's operator
(``tests/emulations/spark.py``, ``kuberay.py``) makes its pods, each through admission, and each run's gang is checked
as a user would (tests/operator_stack.py)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client import ApiException

from admit.config import Config
from tests.emulations import kuberay, scheduled, spark
from tests.helpers import EXAMPLES, eventually
from tests.operator_stack import PG, gang_problems, lost, operator_cluster, pod_groups_of, pods_of

CONFIG = Config()
NS = "default"
MIN = "gang.admit.dev/min-member"
TICKS = (datetime(2026, 12, 5, 6, 0, tzinfo=timezone.utc), datetime(2026, 12, 5, 6, 3, tzinfo=timezone.utc))


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load(Path(EXAMPLES / name).read_text())


def with_spark(fake: Any, chain: Any) -> tuple[Any, Any]:
    return scheduled.install_scheduled_spark(fake, chain), spark.install(fake, chain)


def with_kuberay(fake: Any, chain: Any) -> tuple[Any, Any]:
    return scheduled.install_ray_cron_jobs(fake, chain), kuberay.install(fake, chain)


def spark_pods(fake: Any, app: str) -> list[dict[str, Any]]:
    return [p for p in fake.objects("pods", NS)
            if (p["metadata"].get("labels") or {}).get("sparkoperator.k8s.io/app-name") == app]


async def test_each_run_of_a_scheduled_spark_application_is_a_gang_of_its_own_with_its_driver_and_executors(
        aiohttp_server):
    # The spark-operator copies none of a ScheduledSparkApplication's annotations onto its runs: before, every run
    # was an ungated SparkApplication and nothing said so.
    async with operator_cluster(aiohttp_server, CONFIG, with_spark) as (fake, (sched_op, spark_op), user):
        written = example("scheduledsparkapplication-spark-pi.yaml")
        api = k8s.CustomObjectsApi(user)
        stored = await api.create_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", NS,
                                                           "scheduledsparkapplications", copy.deepcopy(written))
        assert lost(written, stored) == {}
        assert stored["spec"]["template"]["driver"]["annotations"] == {MIN: "auto"}
        runs = []
        for when in TICKS:  # concurrencyPolicy Allow: the second run starts while the first one runs
            run = await sched_op.run_due(NS, "spark-pi-scheduled", when)
            assert run is not None
            runs.append(run["metadata"]["name"])
            await eventually(lambda: len(spark_pods(fake, runs[-1])) == 2)
        await spark_op.idle()
        assert sched_op.errors == [] and spark_op.errors == []
        assert pod_groups_of(fake, NS) == sorted(runs)
        for name in runs:
            app = fake.get("sparkoperator.k8s.io/v1beta2", "sparkapplications", NS, name)
            assert app["metadata"]["annotations"] == {MIN: "auto"}
            pods = spark_pods(fake, name)
            assert gang_problems(fake, NS, pods, CONFIG) == []
            assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in pods} == {name}
            pg = fake.get(*PG, NS, name)
            assert pg["spec"] == {"minMember": 1, "minResources": {"cpu": "2", "memory": "1792Mi"}}


async def test_a_scheduled_spark_application_every_run_of_which_would_deadlock_is_refused_before_any_run(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, with_spark) as (fake, (sched_op, _), user):
        written = example("scheduledsparkapplication-spark-pi.yaml")
        written["metadata"]["annotations"][MIN] = "2"
        with pytest.raises(ApiException) as refused:
            await k8s.CustomObjectsApi(user).create_namespaced_custom_object(
                "sparkoperator.k8s.io", "v1beta2", NS, "scheduledsparkapplications", written)
        assert refused.value.status == 403
        assert "each SparkApplication it creates would be refused" in refused.value.body
        assert fake.objects("scheduledsparkapplications", NS) == []


async def test_each_rayjob_of_a_ray_cron_job_makes_a_raycluster_that_is_a_gang_of_its_own(aiohttp_server):
    # KubeRay's RayCronJob copies none of its annotations onto the RayJobs it makes: before, no run was a gang.
    async with operator_cluster(aiohttp_server, CONFIG, with_kuberay) as (fake, (cron_op, ray_op), user):
        written = example("raycronjob-sample.yaml")
        api = k8s.CustomObjectsApi(user)
        stored = await api.create_namespaced_custom_object("ray.io", "v1", NS, "raycronjobs", copy.deepcopy(written))
        assert lost(written, stored) == {}
        jobs = []
        for when in TICKS:
            job = await cron_op.run_due(NS, "raycronjob-sample", when)
            assert job is not None and job["metadata"]["annotations"][MIN] == "auto"
            jobs.append(job)
            await eventually(lambda: len(ray_op.clusters_of(jobs[-1])) == 1)
        await ray_op.idle()
        assert cron_op.errors == [] and ray_op.errors == []
        clusters = [ray_op.clusters_of(job)[0] for job in jobs]
        assert pod_groups_of(fake, NS) == sorted(c["metadata"]["name"] for c in clusters)
        for cluster in clusters:
            pods = pods_of(fake, NS, cluster["metadata"]["uid"])
            assert len(pods) == 2 and gang_problems(fake, NS, pods, CONFIG) == []
            assert fake.get(*PG, NS, cluster["metadata"]["name"])["spec"]["minMember"] == 2


async def test_a_ray_cron_job_whose_runs_would_run_fewer_pods_than_min_member_is_refused_before_any_run(
        aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, with_kuberay) as (fake, _, user):
        written = example("raycronjob-sample.yaml")
        written["metadata"]["annotations"][MIN] = "3"
        with pytest.raises(ApiException) as refused:
            await k8s.CustomObjectsApi(user).create_namespaced_custom_object("ray.io", "v1", NS, "raycronjobs",
                                                                             written)
        assert refused.value.status == 403
        assert "each RayJob it creates runs 2 pods" in refused.value.body
