"""Spark: SparkApplication gangs sized the way Spark sizes its pods, spark-submit driver pods that own their group,
executors that join it from the cache, and the inputs admit refuses."""

import copy

import jsonpatch
import pytest

from admit.webhook.admission import Admission
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.webhook.mutate import mutate
from admit.gang.plan import GangError
from admit.webhook.admissionreview import dumps, parse_review
from admit.webhook.app import create_app
from admit.families.spark import initial_executors, join_spark_executor, parse_resource_list, spark_bytes, spark_pod_resources
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.validate import validate
from tests.helpers import admission_review, apply_answer, decode_patch, example, example_docs, requests_caused

CONFIG = Config()
LABEL = "scheduling.x-k8s.io/pod-group"
SCHED = "scheduler-plugins-scheduler"
MI = 2**20
SELECTOR = "spark-5b1e0c4f9a7d4e2b8c3f6a9d0e1b2c47"


def request(obj, operation="CREATE", **kw):
    return parse_review(dumps(admission_review(obj, operation, **kw)))


def verdict(obj, config=CONFIG, **kw):
    return validate(request(obj, **kw), config)


def spark_app(name="etl", app_type="Scala", driver=None, executor=None, annotations=None, **spec):
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": "spark-jobs",
                     "annotations": {"gang.admit.dev/min-member": "auto", **(annotations or {})}},
        "spec": {
            "type": app_type,
            "mode": "cluster",
            "image": "spark:3.5.3",
            "mainApplicationFile": "local:///opt/spark/app.jar",
            "sparkVersion": "3.5.3",
            "driver": {"cores": 1, "memory": "1g", "serviceAccount": "spark", **(driver or {})},
            "executor": {"instances": 2, "cores": 1, "memory": "1g", **(executor or {})},
            **spec,
        },
    }


def memory_mib(app, role):
    return spark_pod_resources(app, role)["memory"] / MI


# ---------------------------------------------------------------------------------------------- Spark sizes


@pytest.mark.parametrize("text,mib", [
    ("512m", 512), ("2g", 2048), ("2G", 2048), ("1t", 1024 * 1024), ("4096", 4096), ("1024mb", 1024),
    ("2048k", 2), ("1gb", 1024), (3072, 3072),
])
def test_spark_memory_strings_are_binary_units_and_a_plain_number_is_mib(text, mib):
    assert spark_bytes(text, "spec.executor.memory") == mib * MI


def test_a_plain_off_heap_size_is_bytes():
    assert spark_bytes("1048576", "spark.memory.offHeap.size", default_unit=1) == MI


@pytest.mark.parametrize("text,hint", [
    ("12x", "whole number with a suffix"), ("1.5g", "no fractions"), ("2Gi", "Kubernetes quantity"),
    ("", "not a Spark memory size"), ("-1g", "not a Spark memory size"), (None, "not a Spark memory size"),
])
def test_memory_strings_spark_would_refuse_are_denied_naming_the_field(text, hint):
    with pytest.raises(GangError) as e:
        spark_bytes(text, "SparkApplication x: spec.executor.memory")
    assert e.value.code == 400 and "spec.executor.memory" in e.value.message and hint in e.value.message


def test_jvm_overhead_is_ten_percent_with_a_384_mib_floor():
    app = spark_app(driver={"memory": "2g"}, executor={"memory": "8g"})
    assert memory_mib(app, "driver") == 2048 + 384  # 204.8 < 384
    assert memory_mib(app, "executor") == 8192 + 819  # floor(819.2), as Spark's toInt


@pytest.mark.parametrize("app_type", ["Python", "R"])
def test_python_and_r_overhead_is_forty_percent(app_type):
    app = spark_app(app_type=app_type, executor={"memory": "2g"})
    assert memory_mib(app, "executor") == 2048 + 819  # floor(2048 x 0.4)


def test_an_explicit_overhead_or_factor_replaces_the_default():
    app = spark_app(executor={"memory": "4g", "memoryOverhead": "1g"})
    assert memory_mib(app, "executor") == 4096 + 1024
    app = spark_app(executor={"memory": "4g", "memoryOverhead": "300"})  # plain number: MiB
    assert memory_mib(app, "executor") == 4096 + 300
    app = spark_app(executor={"memory": "10g"}, memoryOverheadFactor="0.2")
    assert memory_mib(app, "executor") == 10240 + 2048
    app["spec"]["sparkConf"] = {"spark.executor.memoryOverheadFactor": "0.05"}  # per role wins, floor 384 stays
    assert memory_mib(app, "executor") == 10240 + 512


def test_pyspark_and_off_heap_memory_add_to_executors_only():
    conf = {"spark.executor.pyspark.memory": "1g", "spark.memory.offHeap.enabled": "true",
            "spark.memory.offHeap.size": "536870912"}
    app = spark_app(app_type="Python", executor={"memory": "2g"}, driver={"memory": "1g"}, sparkConf=conf)
    assert memory_mib(app, "executor") == 2048 + 819 + 1024 + 512
    assert memory_mib(app, "driver") == 1024 + 409
    app["spec"]["type"] = "Scala"  # pyspark memory applies to Python applications
    assert memory_mib(app, "executor") == 2048 + 384 + 512


def test_cpu_comes_from_core_request_else_cores_else_one_and_gpus_from_the_gpu_spec():
    app = spark_app(executor={"cores": 4, "coreRequest": "3500m", "gpu": {"name": "nvidia.com/gpu", "quantity": 2}})
    res = spark_pod_resources(app, "executor")
    assert res["cpu"] == 3.5 and res["nvidia.com/gpu"] == 2
    del app["spec"]["driver"]["cores"]
    assert spark_pod_resources(app, "driver")["cpu"] == 1


def test_sparkconf_values_stand_in_for_missing_spec_fields():
    app = spark_app(executor={"instances": None, "cores": None, "memory": None},
                    sparkConf={"spark.executor.instances": "3", "spark.executor.cores": "2",
                               "spark.executor.memory": "6g"})
    for k in ("instances", "cores", "memory"):
        del app["spec"]["executor"][k]
    assert initial_executors(app)[0] == 3
    res = spark_pod_resources(app, "executor")
    assert res["cpu"] == 2 and res["memory"] == (6144 + 614) * MI


def test_sidecars_add_to_the_pod_and_init_containers_count_at_their_peak():
    app = spark_app(executor={"memory": "1g", "sidecars": [
        {"name": "fluent-bit", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "4", "memory": "256Mi"}}}]})
    res = spark_pod_resources(app, "executor")
    assert res["cpu"] == 4  # the init container's 4 cores beat 1 + 0.1
    assert res["memory"] == (1024 + 384 + 64) * MI


@pytest.mark.parametrize("executor,dynamic,conf,expected", [
    ({"instances": 5}, None, {}, 5),
    ({}, None, {}, 1),  # the spark-operator defaults instances to 1
    ({"instances": 1}, {"enabled": True, "initialExecutors": 2, "minExecutors": 1}, {}, 2),
    ({"instances": 6}, {"enabled": True, "initialExecutors": 2, "minExecutors": 1}, {}, 6),
    ({}, {"enabled": True, "minExecutors": 3}, {}, 3),  # initialExecutors defaults to minExecutors
    ({}, {"enabled": True}, {}, 0),  # the driver alone; executors come on demand
    ({"instances": 4}, {"enabled": False, "initialExecutors": 9}, {}, 4),
    ({}, None, {"spark.dynamicAllocation.enabled": "true", "spark.dynamicAllocation.minExecutors": "2"}, 2),
])
def test_initial_executors_follow_spark_and_the_spark_operator(executor, dynamic, conf, expected):
    app = spark_app(executor=executor, sparkConf=conf)
    if "instances" not in executor:
        del app["spec"]["executor"]["instances"]
    if dynamic is not None:
        app["spec"]["dynamicAllocation"] = dynamic
    assert initial_executors(app)[0] == expected


def test_dynamic_allocation_starting_above_max_executors_is_denied():
    app = spark_app(executor={"instances": 8}, dynamicAllocation={"enabled": True, "maxExecutors": 4})
    v = verdict(app)
    assert not v.decision.allowed and v.decision.code == 400 and "maxExecutors is 4" in v.decision.message


# ---------------------------------------------------------------------------------------------- SparkApplication


def test_a_scala_spark_application_gets_min_member_one_and_min_resources_for_driver_and_executors():
    app = example("spark-pi-scala.yaml")
    d = mutate(request(app), CONFIG)
    out = jsonpatch.apply_patch(app, d.patch)
    for role in ("driver", "executor"):
        assert out["spec"][role]["labels"][LABEL] == "spark-pi"
        assert out["spec"][role]["labels"]["version"] == "3.5.3"
        assert out["spec"][role]["schedulerName"] == SCHED
    assert out["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
    assert mutate(request(out), CONFIG).patch == []
    v = verdict(out)
    assert v.decision.allowed
    plan = v.ensure
    assert plan.owner == "sparkoperator.k8s.io/SparkApplication/spark-pi"
    # driver: 1 cpu, 2048 + 384 MiB; executors: 4 x (2 cpu, 4096 + 409 MiB)
    assert plan.pod_group_spec() == {
        "minMember": 1,
        "minResources": {"cpu": "9", "memory": f"{2432 + 4 * 4505}Mi"},
        "scheduleTimeoutSeconds": 300,
    }


def test_a_pyspark_application_with_dynamic_allocation_covers_the_initial_executors():
    plan = verdict(example("pyspark-dynamic-allocation.yaml")).ensure
    assert plan.total_pods == 3
    # driver 1024 + 409; executors 2 x (2048 + 819 + 512 pyspark), cpu 1 + 2 x 500m
    assert plan.min_resources == {"cpu": "2", "memory": f"{1433 + 2 * 3379}Mi"}


def test_a_spark_application_with_min_member_above_one_is_denied_because_it_would_deadlock():
    app = spark_app(annotations={"gang.admit.dev/min-member": "3"})
    v = verdict(app)
    assert not v.decision.allowed and v.decision.code == 403
    assert "creates the executors only once it runs" in v.decision.message
    assert mutate(request(app), CONFIG).patch == []


def test_min_member_one_is_accepted_like_auto():
    assert verdict(spark_app(annotations={"gang.admit.dev/min-member": "1"})).ensure.min_member == 1


def test_with_a_batch_scheduler_the_spark_operator_gangs_the_app_and_admit_touches_nothing():
    app = spark_app(batchScheduler="volcano", batchSchedulerOptions={"queue": "default"})
    d = mutate(request(app), CONFIG)
    assert d.patch == [] and any("spec.batchScheduler='volcano'" in w for w in d.warnings)
    v = verdict(app)
    assert v.decision.allowed and v.ensure is None
    assert any("creates no PodGroup" in w for w in v.decision.warnings)
    old = copy.deepcopy(app)
    del app["metadata"]["annotations"]
    assert mutate(request(app, "UPDATE", old=old), CONFIG).patch == []


def test_removing_the_annotation_takes_the_labels_back_from_driver_and_executor():
    app = spark_app()
    old = jsonpatch.apply_patch(app, mutate(request(app), CONFIG).patch)
    new = copy.deepcopy(old)
    del new["metadata"]["annotations"]
    out = jsonpatch.apply_patch(new, mutate(request(new, "UPDATE", old=old), CONFIG).patch)
    assert LABEL not in out["spec"]["driver"]["labels"] and LABEL not in out["spec"]["executor"]["labels"]


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_a_spark_application_without_driver_or_executor_is_denied_naming_the_field(role):
    app = spark_app()
    del app["spec"][role]
    v = verdict(app)
    assert not v.decision.allowed and v.decision.code == 400
    assert v.decision.message.startswith(f"Add spec.{role} (cores, memory, instances): ")


@pytest.mark.parametrize("field,value,named", [
    ("memory", "12x", 'spec.executor.memory="12x"'),
    ("memoryOverhead", "1.5g", 'spec.executor.memoryOverhead="1.5g"'),
    ("instances", -2, "Set spec.executor.instances to a non-negative integer"),
    ("instances", "four", "Set spec.executor.instances to a non-negative integer"),
    ("coreRequest", "lots", "spec.executor.coreRequest"),
    ("gpu", {"quantity": 1}, "Give spec.executor.gpu a resource name"),
])
def test_bad_executor_fields_are_denied_naming_the_field(field, value, named):
    app = spark_app(executor={field: value})
    v = verdict(app)
    assert not v.decision.allowed and v.decision.code == 400 and named in v.decision.message


def test_a_non_numeric_overhead_factor_is_denied():
    v = verdict(spark_app(memoryOverheadFactor="ten percent"))
    assert not v.decision.allowed and "spec.memoryOverheadFactor" in v.decision.message


# ---------------------------------------------------------------------------------------------- spark-submit


def driver_and_executor():
    driver, executor = example_docs("spark-submit-pods.yaml")
    return driver, executor


class Cache:
    """The PodGroup cache as the admission path sees it; counts reads."""

    def __init__(self, groups=None):
        self.groups = dict(groups or {})
        self.reads = 0

    def get(self, namespace, name):
        self.reads += 1
        return self.groups.get((namespace, name))


def test_a_spark_submit_driver_creates_its_group_named_after_the_application_id():
    driver, _ = driver_and_executor()
    d = mutate(request(driver), CONFIG)
    out = jsonpatch.apply_patch(driver, d.patch)
    assert out["metadata"]["labels"][LABEL] == SELECTOR
    assert out["metadata"]["labels"]["gang.admit.dev/managed"] == "true"
    assert out["spec"]["schedulerName"] == SCHED
    v = verdict(out)
    assert v.decision.allowed
    assert v.ensure.owner == "/Pod/spark-pi-3c9f1b7e5a2d4c08-driver"
    # driver requests 1 cpu / 1408Mi + 3 executors x (cpu 1, memory 1408Mi)
    assert v.ensure.pod_group_spec() == {"minMember": 1, "minResources": {"cpu": "4", "memory": "5632Mi"}}


def test_a_driver_names_its_group_by_annotation_when_asked():
    driver, _ = driver_and_executor()
    driver["metadata"]["annotations"]["gang.admit.dev/pod-group"] = "nightly-etl"
    assert verdict(driver).ensure.group_name == "nightly-etl"


def test_a_driver_with_min_member_above_one_is_denied():
    driver, _ = driver_and_executor()
    driver["metadata"]["annotations"]["gang.admit.dev/min-member"] = "4"
    v = verdict(driver)
    assert not v.decision.allowed and "would deadlock" in v.decision.message


@pytest.mark.parametrize("key,value,named", [
    ("gang.admit.dev/spark-executors", "-1", "Set annotation gang.admit.dev/spark-executors to the number of "
                                           'executors (spark.executor.instances), a non-negative integer: "-1" is invalid'),
    ("gang.admit.dev/spark-executors", "three", 'a non-negative integer: "three" is invalid'),
    ("gang.admit.dev/spark-executor-resources", "cpu=1;memory=2Gi", "Set annotation gang.admit.dev/spark-executor-resources to "
                                                                     "comma-separated name=quantity pairs"),
    ("gang.admit.dev/spark-executor-resources", "cpu", "is not name=quantity"),
    ("gang.admit.dev/spark-executor-resources", "cpu=1,memory=2g", "memory"),
    ("gang.admit.dev/spark-executor-resources", 'cpu=-1', 'Give "cpu" a quantity of 0 or more'),
    ("gang.admit.dev/spark-executor-resources", "cpu=1,cpu=2", "Name cpu once in annotation "
                                                                "gang.admit.dev/spark-executor-resources"),
    ("gang.admit.dev/spark-executor-resources", "", "is empty"),
])
def test_malformed_executor_annotations_are_denied_naming_the_annotation(key, value, named):
    driver, _ = driver_and_executor()
    driver["metadata"]["annotations"][key] = value
    v = verdict(driver)
    assert not v.decision.allowed and v.decision.code == 400 and named in v.decision.message
    assert mutate(request(driver), CONFIG).patch == []  # mutation leaves the refusal to the validating webhook


def test_one_executor_annotation_without_the_other_sizes_the_driver_only_with_a_warning():
    driver, _ = driver_and_executor()
    del driver["metadata"]["annotations"]["gang.admit.dev/spark-executor-resources"]
    v = verdict(driver)
    assert v.decision.allowed and v.ensure.min_resources == {"cpu": "1", "memory": "1408Mi"}
    assert any(w.startswith("set both gang.admit.dev/spark-executors and gang.admit.dev/spark-executor-resources: "
                            "without gang.admit.dev/spark-executor-resources") for w in v.decision.warnings)


def test_the_executor_resource_list_reads_kubernetes_quantities():
    assert parse_resource_list("cpu=1500m, memory=4505Mi ,nvidia.com/gpu=1", "x") == {
        "cpu": 1.5, "memory": 4505 * MI, "nvidia.com/gpu": 1}


def test_an_executor_memory_without_a_unit_is_refused_instead_of_read_as_bytes():
    with pytest.raises(GangError, match="^Write memory=4505 in .* as a Kubernetes quantity such as 4505Mi: .* has no unit"):
        parse_resource_list("cpu=1,memory=4505", "annotation gang.admit.dev/spark-executor-resources")


def test_an_executor_joins_its_drivers_group_from_the_cache_without_an_api_call():
    driver, executor = driver_and_executor()
    pg = {"metadata": {"name": SELECTOR, "namespace": "spark-jobs",
                       "annotations": {"gang.admit.dev/owner": "/Pod/spark-pi-3c9f1b7e5a2d4c08-driver"}},
          "spec": {"minMember": 1}}
    cache = Cache({("spark-jobs", SELECTOR): pg})
    d = Admission(CONFIG, store=None, cache=cache).mutate(request(executor))
    out = jsonpatch.apply_patch(executor, d.patch)
    assert out["metadata"]["labels"][LABEL] == SELECTOR and out["spec"]["schedulerName"] == SCHED
    assert "gang.admit.dev/managed" not in out["metadata"]["labels"]
    assert cache.reads == 1
    v = verdict(out)  # a pod with a controller: nothing to validate, nothing to create
    assert v.decision.allowed and v.ensure is None


def test_an_executor_joins_a_group_its_driver_pod_has_adopted():
    _, executor = driver_and_executor()
    pg = {"metadata": {"name": SELECTOR, "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "spark-pi-3c9f1b7e5a2d4c08-driver", "uid": "u", "controller": True}]}}
    assert join_spark_executor(executor, CONFIG, "spark-jobs", Cache({("spark-jobs", SELECTOR): pg})).mutate


def test_without_a_cache_or_a_known_group_an_executor_is_left_alone():
    _, executor = driver_and_executor()
    assert mutate(request(executor), CONFIG, None).patch == []
    assert mutate(request(executor), CONFIG, Cache()).patch == []


def test_an_executor_does_not_join_a_group_of_that_name_that_is_not_its_drivers():
    _, executor = driver_and_executor()
    pg = {"metadata": {"name": SELECTOR, "annotations": {"gang.admit.dev/owner": "/Pod/someone-else"}}}
    d = mutate(request(executor), CONFIG, Cache({("spark-jobs", SELECTOR): pg}))
    assert d.patch == [] and any("does not belong to its driver pod" in w for w in d.warnings)


def test_pods_that_are_not_spark_executors_never_read_the_cache():
    class Exploding:
        def get(self, namespace, name):
            raise AssertionError("read the cache for a pod that is not an executor")

    driver, executor = driver_and_executor()
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
             "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    assert mutate(request(plain), CONFIG, Exploding()).patch == []
    bare = copy.deepcopy(executor)
    bare["metadata"]["ownerReferences"] = []
    assert join_spark_executor(bare, CONFIG, "spark-jobs", Cache()) is None


async def test_over_http_the_driver_creates_the_group_and_its_executor_joins_with_no_api_call(aiohttp_client):
    driver, executor = driver_and_executor()

    class FakeCache:
        def __init__(self, fake):
            self.fake = fake

        def get(self, namespace, name):
            return self.fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", namespace, name)

    async with FakeKubeAPI() as fake:
        async with fake.api_client() as api_client:
            admission = Admission(CONFIG, KubeAPI(api_client), cache=FakeCache(fake))
            client = await aiohttp_client(create_app(admission))

            async def post(path, obj):
                resp = await client.post(path, json=admission_review(obj))
                assert resp.status == 200
                return await resp.json()

            answer = await post("/mutate", driver)
            driver = apply_answer(driver, answer)
            assert (await post("/validate", driver))["response"]["allowed"] is True
            pg = fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "spark-jobs", SELECTOR)
            assert pg["spec"] == {"minMember": 1, "minResources": {"cpu": "4", "memory": "5632Mi"}}

            fake.clear_requests()
            answer = await post("/mutate", executor)
            assert {"op": "add", "path": "/metadata/labels/scheduling.x-k8s.io~1pod-group", "value": SELECTOR} in (
                decode_patch(answer))
            assert (await post("/validate", apply_answer(executor, answer)))["response"]["allowed"] is True
            assert fake.requests == []


async def test_over_http_bad_spark_input_is_a_denial_never_a_server_error(aiohttp_client):
    client = await aiohttp_client(create_app(Admission(CONFIG)))
    bad = [spark_app(executor={"memory": "12x"}), {**spark_app(), "spec": {"type": "Scala", "driver": {}}}]
    driver, _ = driver_and_executor()
    driver["metadata"]["annotations"]["gang.admit.dev/spark-executors"] = "-4"
    bad.append(driver)
    for obj in bad:
        for path in ("/mutate", "/validate"):
            resp = await client.post(path, json=admission_review(obj))
            assert resp.status == 200
        body = await resp.json()
        assert body["response"]["allowed"] is False and body["response"]["status"]["code"] == 400


# ---------------------------------------------------------------------------------------------- executors follow the
# driver's group, whatever named it

DRIVER_UID = "7a3e5c1b-9d2f-4b8e-a6c0-1f4d7e9b2a53"  # the executor's ownerReference in examples/spark-submit-pods.yaml
DRIVER = "spark-pi-3c9f1b7e5a2d4c08-driver"


def named_driver(group="nightly-agg"):
    """The spark-submit driver with ``--conf spark.kubernetes.driver.annotation.gang.admit.dev/pod-group=<group>``."""
    driver, executor = driver_and_executor()
    driver["metadata"]["annotations"]["gang.admit.dev/pod-group"] = group
    driver["metadata"]["uid"] = DRIVER_UID
    return driver, executor


def hand_labelled_driver(group="nightly-agg"):
    """The driver as a user labels it without admit (``spark.kubernetes.driver.label.scheduling.x-k8s.io/pod-group``)
    next to a hand-written PodGroup: no admit annotations."""
    driver, executor = driver_and_executor()
    driver["metadata"]["annotations"] = {}
    driver["metadata"]["labels"][LABEL] = group
    driver["spec"]["schedulerName"] = SCHED
    driver["metadata"]["uid"] = DRIVER_UID
    return driver, executor


class DriverCache(Cache):
    """A cache that also knows gang driver pods (``ControllerView.workload``)."""

    def __init__(self, groups=None, pods=None):
        super().__init__(groups)
        self.pods = dict(pods or {})

    def workload(self, group, version, plural, kind, namespace, name):
        assert (group, version, plural, kind) == ("", "v1", "pods", "Pod")
        return True, self.pods.get((namespace, name))


def test_an_executor_joins_the_group_its_driver_named_by_annotation_from_the_driver_cache():
    driver, executor = named_driver()
    out = jsonpatch.apply_patch(driver, mutate(request(driver), CONFIG).patch)
    assert out["metadata"]["labels"][LABEL] == "nightly-agg"
    cache = DriverCache(pods={("spark-jobs", DRIVER): out})
    d = mutate(request(executor), CONFIG, cache)
    joined = jsonpatch.apply_patch(executor, d.patch)
    assert joined["metadata"]["labels"][LABEL] == "nightly-agg" and joined["spec"]["schedulerName"] == SCHED
    assert d.warnings == [] and d.lookup is None


def test_an_executor_whose_driver_the_cache_does_not_know_asks_for_the_driver_to_be_read():
    _, executor = driver_and_executor()
    d = mutate(request(executor), CONFIG, DriverCache())
    assert d.patch == [] and d.lookup.name == DRIVER and d.lookup.uid == DRIVER_UID


def spark_fake_pod(obj):
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = "spark-jobs"
    return obj


async def spark_webhook(aiohttp_client, fake, controller):
    """The webhook over HTTP against ``fake``, with the controller's caches running (started and synced) or not."""
    from admit.controller.manager import ControllerSettings, Manager
    from tests.helpers import FAST_CONTROLLER, eventually

    api_client = fake.api_client()
    cache = ctl = None
    if controller:
        ctl = Manager(fake.api_client(), CONFIG, ControllerSettings(identity="a", lease_namespace="admit",
                                                                    **FAST_CONTROLLER), own_client=True)
        await ctl.start()
        await eventually(lambda: ctl.working)
        cache = ctl.cache
    client = await aiohttp_client(create_app(Admission(CONFIG, KubeAPI(api_client), cache)))

    async def close():
        if ctl is not None:
            await ctl.stop()
        await api_client.close()

    client.close_all = close
    client.view = cache
    return client


async def admit_pod(client, obj):
    """``/mutate`` then ``/validate`` as kube-apiserver runs them; returns (object after mutation, warnings)."""
    resp = await client.post("/mutate", json=admission_review(obj))
    assert resp.status == 200
    answer = await resp.json()
    assert answer["response"]["allowed"] is True
    out = apply_answer(obj, answer)
    resp = await client.post("/validate", json=admission_review(out))
    validated = await resp.json()
    assert validated["response"]["allowed"] is True
    return out, answer["response"].get("warnings", []) + validated["response"].get("warnings", [])


async def test_over_http_with_the_controller_an_executor_joins_the_group_its_driver_named_without_an_api_call(
        aiohttp_client):
    from tests.helpers import eventually

    async with FakeKubeAPI() as fake:
        client = await spark_webhook(aiohttp_client, fake, controller=True)
        try:
            driver, executor = named_driver()
            driver, warnings = await admit_pod(client, driver)
            assert driver["metadata"]["labels"][LABEL] == "nightly-agg" and warnings == []
            assert fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "spark-jobs", "nightly-agg") is not None
            fake.put(spark_fake_pod(driver))  # stored: the controller's cache of gang drivers sees it
            await eventually(lambda: client.view.workload("", "v1", "pods", "Pod", "spark-jobs", DRIVER)[1])
            await eventually(lambda: fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "spark-jobs",
                                              "nightly-agg")["metadata"].get("ownerReferences"))  # adopted
            fake.clear_requests()
            out, warnings = await admit_pod(client, executor)
            assert out["metadata"]["labels"][LABEL] == "nightly-agg" and out["spec"]["schedulerName"] == SCHED
            assert warnings == []
            # (the controller's own writes, such as Events, are not the admission's)
            assert requests_caused(fake, "pods", "podgroups") == []
        finally:
            await client.close_all()


@pytest.mark.parametrize("controller", [True, False])
async def test_over_http_an_executor_of_a_hand_labelled_driver_joins_its_group_with_one_read_per_driver(
        aiohttp_client, controller):
    async with FakeKubeAPI() as fake:
        client = await spark_webhook(aiohttp_client, fake, controller=controller)
        try:
            fake.put({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                      "metadata": {"name": "nightly-agg", "namespace": "spark-jobs"}, "spec": {"minMember": 1}})
            driver, executor = hand_labelled_driver()
            fake.put(spark_fake_pod(driver))
            fake.clear_requests()
            for exec_id in ("1", "2", "3"):
                pod = copy.deepcopy(executor)
                pod["metadata"]["name"] = f"spark-pi-3c9f1b7e5a2d4c08-exec-{exec_id}"
                pod["metadata"]["labels"]["spark-exec-id"] = exec_id
                out, warnings = await admit_pod(client, pod)
                assert out["metadata"]["labels"][LABEL] == "nightly-agg" and warnings == []
            # only the reads these admissions caused: the controller's own pod list and watch (which may reconnect
            # at any moment) are not theirs
            assert [(r.verb, r.name) for r in requests_caused(fake, "pods")] == [("get", DRIVER)]
        finally:
            await client.close_all()


@pytest.mark.parametrize("controller", [True, False])
async def test_over_http_an_executor_whose_driver_cannot_be_found_gets_a_warning_not_silence(
        aiohttp_client, controller):
    async with FakeKubeAPI() as fake:
        client = await spark_webhook(aiohttp_client, fake, controller=controller)
        try:
            _, executor = driver_and_executor()
            out, warnings = await admit_pod(client, executor)
            assert LABEL not in out["metadata"]["labels"]
            assert any(w == f"this Spark executor joins no PodGroup: its driver pod {DRIVER} was not found"
                       for w in warnings)
            fake.fail("get", "pods", 429, times=1, retry_after=30)  # longer than the budget: not retried
            out, warnings = await admit_pod(client, copy.deepcopy(executor))
            assert LABEL not in out["metadata"]["labels"]
            assert any(f"could not read its driver pod {DRIVER}" in w for w in warnings)
        finally:
            await client.close_all()


async def test_over_http_an_executor_of_a_driver_in_no_gang_is_left_alone_without_a_warning(aiohttp_client):
    async with FakeKubeAPI() as fake:
        client = await spark_webhook(aiohttp_client, fake, controller=False)
        try:
            driver, executor = driver_and_executor()
            driver["metadata"]["annotations"] = {}
            driver["metadata"]["uid"] = DRIVER_UID
            fake.put(spark_fake_pod(driver))
            out, warnings = await admit_pod(client, executor)
            assert out == executor and warnings == []
        finally:
            await client.close_all()


def test_admit_review_makes_an_executor_follow_a_driver_that_named_its_group():
    import asyncio

    from admit.cli.review import review_documents

    driver, executor = named_driver()
    del driver["metadata"]["uid"]
    results = asyncio.run(review_documents([("driver", driver), ("executor", executor)], CONFIG))
    assert results[1]["object"]["metadata"]["labels"][LABEL] == "nightly-agg"


async def test_over_http_a_bug_while_reading_the_driver_is_an_unchanged_pod_with_a_warning_never_a_500(aiohttp_client):
    class BrokenStore:
        async def get_pod(self, namespace, name, timeout):
            raise RuntimeError("boom")

    _, executor = driver_and_executor()
    client = await aiohttp_client(create_app(Admission(CONFIG, BrokenStore())))
    resp = await client.post("/mutate", json=admission_review(executor))
    assert resp.status == 200
    answer = (await resp.json())["response"]
    assert answer["allowed"] is True and "patch" not in answer
    assert any("a bug in admit" in w for w in answer["warnings"])
