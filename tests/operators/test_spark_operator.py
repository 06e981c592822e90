"""The spark-operator end to end on the fake API: the user's annotated SparkApplication goes in, the spark-operator
emulation (``tests/emulations/spark.py``: its batch-scheduler step, spark-submit's driver Pod, its own
pod webhook, the driver's executors) makes the Pods through admission, and the gang is checked as a user would.
Also ``--enable-batch-scheduler --default-batch-scheduler`` makes a second gang object."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from admit.backends.coscheduling.diagnose import diagnose
from admit.config import Config
from tests.emulations import spark
from tests.emulations.spark import SparkOperator
from tests.helpers import eventually
from tests.operator_stack import PG, events_about, gang_problems, lost, operator_cluster, pod_groups_of, said

CONFIG = Config()
NS = "etl"


def spark_app(name: str = "nightly", executors: int = 3, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": name, "namespace": NS, "labels": {"team": "data"},
                         "annotations": {"gang.admit.dev/min-member": "1"}},
            "spec": {"type": "Scala", "mode": "cluster", "image": "spark:3.5.0", "sparkVersion": "3.5.0",
                     "mainClass": "org.apache.spark.examples.SparkPi",
                     "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                     "driver": {"cores": 1, "memory": "2g", "serviceAccount": "spark",
                                "labels": {"example.com/cost-center": "42"}},
                     "executor": {"cores": 2, "memory": "4g", "instances": executors},
                     **spec}}


async def create(user: Any, obj: dict[str, Any]) -> dict[str, Any]:
    from kubernetes_asyncio import client as k8s

    return await k8s.CustomObjectsApi(user).create_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", NS, "sparkapplications", copy.deepcopy(obj))


def app_pods(fake: Any, app: str) -> list[dict[str, Any]]:
    return [p for p in fake.objects("pods", NS) if p["metadata"]["labels"].get("sparkoperator.k8s.io/app-name") == app]


async def settle(fake: Any, op: SparkOperator, pods: int) -> list[dict[str, Any]]:
    await eventually(lambda: len(app_pods(fake, "nightly")) >= pods)
    await op.idle()
    return app_pods(fake, "nightly")


async def test_the_spark_operator_puts_the_driver_and_every_executor_in_the_one_gang_admit_made(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, spark.install) as (fake, op, user):
        written = await create(user, spark_app())
        pods = await settle(fake, op, 4)
        assert op.errors == []
        assert sorted(p["metadata"]["labels"]["spark-role"] for p in pods) == ["driver"] + ["executor"] * 3
        assert gang_problems(fake, NS, pods, CONFIG) == []
        assert pod_groups_of(fake, NS) == ["nightly"]  # one gang object
        pg = fake.get(*PG, NS, "nightly")
        assert pg["spec"]["minMember"] == 1  # the driver creates the executors: a larger gang would deadlock
        # the operator's own webhook accepted admit's fields: the driver is owned by the app, on admit's scheduler
        driver = next(p for p in pods if p["metadata"]["labels"]["spark-role"] == "driver")
        assert driver["metadata"]["ownerReferences"][0]["kind"] == "SparkApplication"
        assert driver["metadata"]["labels"]["example.com/cost-center"] == "42"
        assert driver["metadata"]["labels"]["team"] == "data"
        assert lost(spark_app(), written) == {}
        # the chain as kube-apiserver runs it: admit's pod webhook, the operator's (configurations in name order),
        # then admit's again (reinvocationPolicy IfNeeded: the operator's patch changed the pod)
        driver_calls = [hook for hook, r, _ in fake.admission.calls
                        if r["kind"]["kind"] == "Pod" and (r.get("object") or {}).get("metadata", {}).get("name")
                        == driver["metadata"]["name"] and "mutate" in hook]
        assert driver_calls.index("mutate--v1-pod.sparkoperator.k8s.io") > 0, driver_calls
        assert driver_calls[-1] != "mutate--v1-pod.sparkoperator.k8s.io", driver_calls
        # the executors were created by the driver's ServiceAccount and joined its group at their admission
        exec_reviews = [r for _, r, _ in fake.admission.reviews
                        if r["kind"]["kind"] == "Pod" and "-exec-" in (r["object"] or {})["metadata"]["name"]]
        assert exec_reviews and all(r["userInfo"]["username"] == f"system:serviceaccount:{NS}:spark"
                                    for r in exec_reviews)


async def replace(user: Any, obj: dict[str, Any]) -> dict[str, Any]:
    from kubernetes_asyncio import client as k8s

    return await k8s.CustomObjectsApi(user).replace_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", NS, "sparkapplications", obj["metadata"]["name"], copy.deepcopy(obj))


async def test_annotating_a_submitted_spark_application_is_refused_with_the_fix_instead_of_re_running_it(
        aiohttp_server):
    # admit wrote the pod-group label and schedulerName into spec.driver/spec.executor of the running app, and the
    # spark-operator took the spec change as a new application: it killed the driver and ran the job again, unsaid.
    from kubernetes_asyncio.client import ApiException

    async with operator_cluster(aiohttp_server, CONFIG, spark.install) as (fake, op, user):
        plain = spark_app()
        del plain["metadata"]["annotations"]
        await create(user, plain)
        pods = await settle(fake, op, 4)
        stored = fake.get("sparkoperator.k8s.io/v1beta2", "sparkapplications", NS, "nightly")
        assert stored["status"]["applicationState"]["state"] == "SUBMITTED"
        stored["metadata"]["annotations"] = {"gang.admit.dev/min-member": "1"}
        with pytest.raises(ApiException) as refused:
            await replace(user, stored)
        text = refused.value.body
        assert "workloads.validate.admit.dev" in text and "runs the application again" in text
        assert "delete and re-create the SparkApplication" in text
        await op.idle()
        assert op.reruns == [] and app_pods(fake, "nightly") == pods and pod_groups_of(fake, NS) == []


async def test_a_spec_change_of_a_ganged_spark_application_re_runs_it_in_its_gang_and_a_re_apply_changes_nothing(
        aiohttp_server):
    # The user's own spec change re-runs the app (the operator's rule); the new run is ganged as the first. A
    # re-apply of the manifest (without admit's marks) gets them back as stored: no spec change, no re-run.
    async with operator_cluster(aiohttp_server, CONFIG, spark.install) as (fake, op, user):
        await create(user, spark_app())
        await settle(fake, op, 4)
        stored = fake.get("sparkoperator.k8s.io/v1beta2", "sparkapplications", NS, "nightly")
        manifest = spark_app()
        manifest["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        await replace(user, manifest)
        await op.idle()
        assert op.reruns == []
        stored = fake.get("sparkoperator.k8s.io/v1beta2", "sparkapplications", NS, "nightly")
        stored["spec"]["image"] = "spark:3.5.1"
        await replace(user, stored)
        await eventually(lambda: op.reruns == [(NS, "nightly")] and len(app_pods(fake, "nightly")) == 4)
        await op.idle()
        pods = app_pods(fake, "nightly")
        assert gang_problems(fake, NS, pods, CONFIG) == [] and pod_groups_of(fake, NS) == ["nightly"]


# ----------------------------------------------------------------------------------------------------------------------
# --enable-batch-scheduler --default-batch-scheduler gangs every app too
# ----------------------------------------------------------------------------------------------------------------------


def operator_with_default(default: str):  # noqa: ANN201
    def make(fake: Any, chain: Any) -> SparkOperator:
        if default == "volcano":
            fake.register("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups")
        return spark.install(fake, chain, enable_batch_scheduler=True, default_batch_scheduler=default,
                             kube_scheduler_names=("scheduler-plugins-scheduler",))
    return make


@pytest.mark.parametrize("default, operator_object", [
    ("scheduler-plugins-scheduler", "PodGroup nightly-pg"),
    ("volcano", "Volcano PodGroup spark-nightly-pg"),
    ("yunikorn", "YuniKorn task groups"),
])
async def test_a_default_batch_scheduler_of_the_spark_operator_is_said_in_the_app_note_and_admit_status(
        aiohttp_server, default, operator_object):
    async with operator_cluster(aiohttp_server, CONFIG, operator_with_default(default)) as (fake, op, user):
        await create(user, spark_app())
        pods = await settle(fake, op, 4)
        # what the operator does: its own gang beside admit's; the pods still follow admit's (nothing deadlocks)
        assert gang_problems(fake, NS, pods, CONFIG) == []
        if default == "scheduler-plugins-scheduler":
            assert pod_groups_of(fake, NS) == ["nightly", "nightly-pg"]
            assert fake.get(*PG, NS, "nightly-pg")["metadata"]["ownerReferences"][0]["kind"] == "SparkApplication"
        elif default == "volcano":
            assert [pg["metadata"]["name"] for pg in fake.objects("podgroups", NS,
                                                                   api_version="scheduling.volcano.sh/v1beta1")] \
                == ["spark-nightly-pg"]
        # the user's own admission warning names the operator flags and the fix
        warnings = said(fake, "SparkApplication")
        assert any("--default-batch-scheduler" in w and "--enable-batch-scheduler" in w
                   and "run it without --default-batch-scheduler" in w for w in warnings), warnings
        # admit status shows the operator's gang object
        rows = diagnose(pod_groups=fake.objects("podgroups", NS, api_version=PG[0]), pods=fake.objects("pods", NS),
                        config=CONFIG)
        second = [r for r in rows if r.reason == "SecondGang"]
        assert len(second) == 1 and operator_object in second[0].message
        assert "--default-batch-scheduler" in second[0].message


async def test_admits_controller_records_the_default_batch_scheduler_caveat_as_an_event_on_the_app(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, operator_with_default("scheduler-plugins-scheduler"),
                                controller=True) as (fake, op, user):
        await create(user, spark_app())
        await settle(fake, op, 4)
        await eventually(lambda: [e for e in events_about(fake, NS, "SparkApplication", "nightly")
                                  if e["reason"] == "OperatorSetting"])
        (event,) = [e for e in events_about(fake, NS, "SparkApplication", "nightly") if e["reason"] == "OperatorSetting"]
        assert "--default-batch-scheduler" in event["note"]


async def test_a_spark_application_naming_its_batch_scheduler_is_left_to_the_operator_with_one_gang(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, operator_with_default("")) as (fake, op, user):
        await create(user, spark_app(batchScheduler="scheduler-plugins-scheduler"))
        pods = await settle(fake, op, 4)
        assert pod_groups_of(fake, NS) == ["nightly-pg"]  # the operator's only: admit made none
        assert {p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") for p in pods} == {"nightly-pg"}
        # the operator's pod webhook sends every pod to spec.batchScheduler
        assert {p["spec"]["schedulerName"] for p in pods} == {"scheduler-plugins-scheduler"}


# ---------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/spark.py LATER): status updates, a retry after the driver fails, a lost executor
# replaced by the driver, a GitOps re-apply; each allowed, the pods after it in the one gang that can form
# ---------------------------------------------------------------------------------------------------------------------


def later_gang(fake: Any, op: SparkOperator, app: dict[str, Any]) -> list[dict[str, Any]]:
    """The app's live pods, after checking they form one gang that can form and nothing was refused."""
    gangs = spark.gangs_of(op, app)
    for _, pods in gangs:
        assert gang_problems(fake, NS, pods, CONFIG) == []
    assert spark.refused_writes(op) == []
    return [p for _, pods in gangs for p in pods]


async def test_a_retried_spark_application_runs_again_in_its_gang_after_the_driver_fails(aiohttp_server):
    app = spark_app(restartPolicy={"type": "OnFailure", "onFailureRetries": 2})
    app["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    async with operator_cluster(aiohttp_server, CONFIG, spark.install, gc_orphans_after=0.01) as (fake, op, user):
        await create(user, app)
        await settle(fake, op, 4)
        await spark.running(op, app)
        first = {p["metadata"]["uid"] for p in later_gang(fake, op, app)}
        pod_group = fake.get(*PG, NS, "nightly")
        await spark.retry_after_the_driver_fails(op, app)
        pods = later_gang(fake, op, app)
        assert len(pods) == 4 and not first & {p["metadata"]["uid"] for p in pods}  # all new, the driver too
        stored = fake.get("sparkoperator.k8s.io/v1beta2", "sparkapplications", NS, "nightly")
        assert stored["status"]["applicationState"]["state"] == "SUBMITTED"
        assert fake.get(*PG, NS, "nightly") == pod_group  # the same gang, untouched


async def test_an_executor_the_driver_replaces_after_a_node_loss_joins_the_gang(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, spark.install, gc_orphans_after=0.01) as (fake, op, user):
        app = spark_app()
        await create(user, app)
        before = {p["metadata"]["name"] for p in await settle(fake, op, 4)}
        await spark.an_executor_is_lost(op, app)
        pods = later_gang(fake, op, app)
        (new,) = [p for p in pods if p["metadata"]["name"] not in before]
        assert new["metadata"]["name"].endswith("-exec-4") and len(pods) == 4


async def test_a_gitops_re_apply_of_a_running_spark_application_neither_changes_nor_re_runs_it(aiohttp_server):
    async with operator_cluster(aiohttp_server, CONFIG, spark.install, gc_orphans_after=0.01) as (fake, op, user):
        app = spark_app()
        await create(user, app)
        await settle(fake, op, 4)
        await spark.running(op, app)
        await spark.gitops_reapply(op, app)
        assert op.reruns == [] and len(later_gang(fake, op, app)) == 4


async def test_removing_the_gang_annotations_of_a_submitted_spark_application_is_refused_with_the_fix_first(
        aiohttp_server):
    # admit took its label and schedulerName off spec.driver/spec.executor and the spark-operator re-ran the
    # application for that alone, unsaid: the same rule as adding them now refuses, leading with the fix.
    from kubernetes_asyncio.client import ApiException

    async with operator_cluster(aiohttp_server, CONFIG, spark.install) as (fake, op, user):
        await create(user, spark_app())
        pods = await settle(fake, op, 4)
        stored = fake.get("sparkoperator.k8s.io/v1beta2", "sparkapplications", NS, "nightly")
        del stored["metadata"]["annotations"]["gang.admit.dev/min-member"]
        with pytest.raises(ApiException) as refused:
            await replace(user, stored)
        message = json.loads(refused.value.body)["message"]
        assert message.split("denied the request: ", 1)[1].startswith(
            "Remove the gang annotations in an update that changes the spec anyway")
        await op.idle()
        assert op.reruns == [] and app_pods(fake, "nightly") == pods
        # with a spec change it re-runs anyway: allowed, and the re-run is not ganged
        stored["spec"]["image"] = "spark:3.5.5"
        await replace(user, stored)
        await op.idle()
        assert op.reruns == [(NS, "nightly")]
        assert all("scheduling.x-k8s.io/pod-group" not in p["metadata"]["labels"] for p in app_pods(fake, "nightly"))
