"""Both gang backends over real HTTP against the fake Kubernetes API: the gang objects are created at admission,
idempotently, never on dry runs, with ownership refusals; the Workload API version is found at start and a missing
one stops ``admit serve`` with one line."""

import asyncio
import copy
import sys

import pytest

from admit.webhook.admission import Admission
from admit.backends.workload_api.discovery import BackendUnavailable, configure_backends
from admit.config import Config
from admit.kube.client import KubeAPI
from admit.webhook.app import create_app
from admit.testing.fake_kube import FakeKubeAPI
from tests.helpers import admission_review, apply_answer, example

COS_PG = ("scheduling.x-k8s.io/v1alpha1", "podgroups")

# backend id -> (Config, Workload API version served by the fake or None)
BACKENDS = {
    "coscheduling": (Config(), None),
    "v1alpha2": (Config(gang_backend="workload-api", workload_api_version="v1alpha2"), "v1alpha2"),
    "v1beta1": (Config(gang_backend="workload-api", workload_api_version="v1beta1"), "v1beta1"),
}


@pytest.fixture(params=list(BACKENDS))
async def setup(request, aiohttp_client):
    config, version = BACKENDS[request.param]
    async with FakeKubeAPI(workload_api=version) as fake:
        api_client = fake.api_client()
        client = await aiohttp_client(create_app(Admission(config, KubeAPI(api_client))))
        yield client, fake, config
        await api_client.close()


def gang_objects(fake, config, namespace, name):
    """The stored gang objects of one group: [PodGroup] or [Workload, PodGroup] (None where missing)."""
    if config.gang_backend == "coscheduling":
        return [fake.get(*COS_PG, namespace, name)]
    api = f"scheduling.k8s.io/{config.workload_api_version}"
    return [fake.get(api, "workloads", namespace, name), fake.get(api, "podgroups", namespace, name)]


def size_of(obj):
    spec = obj["spec"]
    if "minMember" in spec:
        return spec["minMember"]
    if obj["kind"] == "Workload":
        return spec["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"]
    return spec["schedulingPolicy"]["gang"]["minCount"]


def gang_writes(fake):
    return [(r.method, r.path, r.status) for r in fake.requests if r.resource in ("podgroups", "workloads")
            and r.method != "GET"]


async def post(client, path, review):
    resp = await client.post(path, json=review)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["response"]["uid"] == review["request"]["uid"]
    return body["response"]


async def admit(client, obj, operation="CREATE", **kw):
    """/mutate then /validate, as kube-apiserver calls them; returns (validate answer, mutated object)."""
    mutated = apply_answer(obj, {"response": await post(client, "/mutate", admission_review(obj, operation, **kw))})
    return await post(client, "/validate", admission_review(mutated, operation, **kw)), mutated


async def test_a_gang_deployment_gets_its_gang_objects_before_its_first_pod_without_owner_references(setup):
    client, fake, config = setup
    answer, _ = await admit(client, example("pause-gang-deployment.yaml"))
    assert answer["allowed"] is True
    objs = gang_objects(fake, config, "default", "pause")
    assert all(o is not None for o in objs)
    assert [size_of(o) for o in objs] == [3] * len(objs)
    assert all("ownerReferences" not in o["metadata"] for o in objs)
    assert all(o["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "admit"} for o in objs)
    if config.gang_backend == "workload-api":  # the Workload first: its PodGroup references it
        assert [p.rsplit("/", 1)[-1] for _, p, _ in gang_writes(fake)] == ["workloads", "podgroups"]


async def test_a_repeated_admission_writes_nothing_when_the_objects_are_in_step(setup):
    client, fake, config = setup
    dep = example("pause-gang-deployment.yaml")
    await admit(client, dep)
    fake.clear_requests()
    answer, _ = await admit(client, dep)
    assert answer["allowed"] is True
    assert all(status == 409 for method, _, status in gang_writes(fake))  # only the idempotent create attempts


async def test_a_changed_min_member_brings_the_gang_objects_in_step_where_the_api_allows_it(setup):
    client, fake, config = setup
    dep = example("pause-gang-deployment.yaml")
    _, stored = await admit(client, dep)
    new = copy.deepcopy(stored)
    new["spec"]["replicas"] = 5
    new["metadata"]["annotations"]["gang.admit.dev/min-member"] = "5"
    answer, _ = await admit(client, new, "UPDATE", old=stored)
    assert answer["allowed"] is True
    sizes = [size_of(o) for o in gang_objects(fake, config, "default", "pause")]
    methods = {m for m, _, _ in gang_writes(fake)}
    assert "DELETE" not in methods
    if config.workload_api_version == "v1alpha2":  # immutable: kept as they are, and the answer says so
        assert sizes == [3, 3] and "PATCH" not in methods
        assert any(w.startswith("to change the gang size, delete the Deployment and create it again") and
                   "keeps minCount 3, not 5 (minCount is immutable in scheduling.k8s.io/v1alpha2" in w
                   for w in answer["warnings"])
    else:
        assert sizes == [5] * len(sizes) and "PATCH" in methods


async def test_fewer_pods_than_an_immutable_min_count_are_refused_in_v1alpha2(setup):
    client, fake, config = setup
    dep = example("pause-gang-deployment.yaml")
    dep["metadata"]["annotations"]["gang.admit.dev/min-member"] = "auto"
    _, stored = await admit(client, dep)
    new = copy.deepcopy(stored)
    new["spec"]["replicas"] = 2
    answer, _ = await admit(client, new, "UPDATE", old=stored)
    if config.workload_api_version == "v1alpha2":
        assert answer["allowed"] is False and answer["status"]["code"] == 403
        assert "keeps minCount 3" in answer["status"]["message"]
        assert "spec.replicas at least 3" in answer["status"]["message"]
    else:
        assert answer["allowed"] is True
        assert [size_of(o) for o in gang_objects(fake, config, "default", "pause")] == [2] * (
            1 if config.gang_backend == "coscheduling" else 2)


@pytest.mark.parametrize("version", ["v1alpha2", "v1beta1"])
async def test_a_pod_group_being_deleted_is_an_api_failure_with_the_reason(version, aiohttp_client):
    config, _ = BACKENDS[version]
    async with FakeKubeAPI(workload_api=version) as fake:
        async with fake.api_client() as api_client:
            client = await aiohttp_client(create_app(Admission(config, KubeAPI(api_client))))
            await admit(client, example("pause-gang-deployment.yaml"))
            api = f"scheduling.k8s.io/{version}"
            pg = fake.get(api, "podgroups", "default", "pause")
            # deleted while its pods still name it: kube-apiserver 1.36.2 keeps it for its protection finalizer
            pg["metadata"].update(finalizers=["scheduling.k8s.io/podgroup-protection"],
                                  deletionTimestamp="2026-11-30T16:17:39Z")
            fake.put(pg)
            answer, _ = await admit(client, example("pause-gang-deployment.yaml"))
    assert answer["allowed"] is False and answer["status"]["code"] == 503
    assert "PodGroup default/pause is being deleted" in answer["status"]["message"]


async def test_dry_run_requests_get_the_same_answer_and_store_nothing(setup):
    client, fake, config = setup
    answer, _ = await admit(client, example("pause-gang-deployment.yaml"), dry_run=True)
    assert answer["allowed"] is True
    assert gang_objects(fake, config, "default", "pause") == [None] * len(gang_objects(fake, config, "default", "x"))
    assert all(r.query.get("dryRun") == "All" for r in fake.requests
               if r.resource in ("podgroups", "workloads") and r.method == "POST")


async def test_a_gang_object_owned_by_another_workload_is_a_clear_denial(setup):
    client, fake, config = setup
    await admit(client, example("pause-gang-deployment.yaml"))
    job = example("training-job.yaml")
    job["metadata"]["name"] = "pause"
    job["metadata"]["namespace"] = "default"
    answer, _ = await admit(client, job)
    assert answer["allowed"] is False and answer["status"]["code"] == 409
    assert "already belongs to apps/Deployment/pause" in answer["status"]["message"]
    assert "gang.admit.dev/pod-group" in answer["status"]["message"]


async def test_replicas_below_min_member_are_refused_and_nothing_is_created(setup):
    client, fake, config = setup
    dep = example("pause-gang-deployment.yaml")
    dep["spec"]["replicas"] = 2
    answer, _ = await admit(client, dep)
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    assert gang_writes(fake) == []


async def test_an_unreachable_api_refuses_with_the_reason_in_deny_mode(setup):
    client, fake, config = setup
    fake.fail("POST", "podgroups" if config.gang_backend == "coscheduling" else "workloads", 500, times=None)
    answer, _ = await admit(client, example("pause-gang-deployment.yaml"))
    assert answer["allowed"] is False and answer["status"]["code"] == 503
    assert "failure mode 'deny'" in answer["status"]["message"]


@pytest.mark.parametrize("version", ["v1alpha2", "v1beta1"])
async def test_discovery_at_start_finds_the_served_workload_api_version(version):
    async with FakeKubeAPI(workload_api=version) as fake:
        async with fake.api_client() as api_client:
            config = await configure_backends(api_client, Config(gang_backend="workload-api"))
    assert config.workload_api_version == version


async def test_discovery_is_skipped_when_only_coscheduling_is_enabled():
    async with FakeKubeAPI() as fake:
        async with fake.api_client() as api_client:
            config = await configure_backends(api_client, Config())
        assert fake.requests == [] and config.workload_api_version == ""


async def test_an_extra_workload_api_backend_on_a_cluster_without_it_starts_and_stays_off():
    async with FakeKubeAPI() as fake:
        async with fake.api_client() as api_client:
            config = await configure_backends(api_client, Config(extra_gang_backends=frozenset({"workload-api"})))
    assert config.workload_api_version == ""


async def test_admit_serve_refuses_to_start_with_one_line_naming_the_missing_gates_and_runtime_config(tmp_path):
    async with FakeKubeAPI() as fake:
        with pytest.raises(BackendUnavailable) as e:
            async with fake.api_client() as api_client:
                await configure_backends(api_client, Config(gang_backend="workload-api"))
        message = str(e.value)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "admit.cli", "serve", "--gang-backend", "workload-api", "--api-server", fake.url,
            "--tls-cert-file", str(tmp_path / "none.crt"), "--tls-key-file", str(tmp_path / "none.key"),
            "--port", "0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot start: --gang-backend workload-api" in lines[0]
    assert "GenericWorkload=true,GangScheduling=true" in lines[0] and "scheduling.k8s.io/v1alpha2=true" in lines[0]
    assert "GenericWorkload" in message


# ------------------------------------------------------------------------------ an upgrade under a running admit


async def upgraded_webhook(aiohttp_client, fake, config):
    """admit's webhook as ``admit serve`` wires it: discovery at start, and a Rediscovery for later 404s."""
    from admit.backends.workload_api.discovery import Rediscovery

    api_client = fake.api_client()
    config = await configure_backends(api_client, config)
    admission = Admission(config, KubeAPI(api_client))
    admission.rediscoveries["workload-api"] = Rediscovery(api_client, config, min_interval=0.0)
    return await aiohttp_client(create_app(admission)), admission, api_client


async def test_after_an_upgrade_stops_serving_the_version_in_use_admit_discovers_again_and_writes_the_new_one(
        aiohttp_client):
    # Kubernetes 1.36 -> 1.37: scheduling.k8s.io/v1alpha2 is no longer served, v1beta1 is. Discovery ran once at
    # start, so every write went to v1alpha2 and answered 404 until admit restarted.
    async with FakeKubeAPI(workload_api="v1alpha2") as fake:
        client, admission, api_client = await upgraded_webhook(aiohttp_client, fake,
                                                               Config(gang_backend="workload-api"))
        assert admission.config.workload_api_version == "v1alpha2"
        fake.stop_serving_workload_api("v1alpha2")
        fake.serve_workload_api("v1beta1")
        answer, _ = await admit(client, example("pause-gang-deployment.yaml"))
        await api_client.close()
    assert answer["allowed"] is True, answer
    assert admission.config.workload_api_version == "v1beta1"
    assert fake.get("scheduling.k8s.io/v1beta1", "podgroups", "default", "pause")["spec"]["workloadRef"] == {
        "workloadName": "pause", "templateName": "gang"}


async def test_after_an_upgrade_that_serves_no_known_version_a_gang_is_refused_with_the_gates_and_no_retry(
        aiohttp_client):
    async with FakeKubeAPI(workload_api="v1alpha2") as fake:
        client, admission, api_client = await upgraded_webhook(aiohttp_client, fake,
                                                               Config(gang_backend="workload-api"))
        fake.stop_serving_workload_api("v1alpha2")
        answer, _ = await admit(client, example("pause-gang-deployment.yaml"))
        await api_client.close()
    assert answer["allowed"] is False and answer["status"]["code"] == 400
    message = answer["status"]["message"]
    assert "does not serve Kubernetes' native gang scheduling" in message and "GenericWorkload=true" in message
    assert "retry" not in message.lower()
