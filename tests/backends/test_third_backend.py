"""A gang backend that admit does not ship (tests/backends/volcano.py), registered through the backend interface
alone, gangs a Deployment through ``/mutate``, ``/validate`` and the controller on the fake API, and ``admit status``
explains its gang: the proof that a new backend needs no change to any admit module (docs/architecture.md, "Add a
gang backend")."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest

from admit.cli import build_parser, config_from_args
from admit.cli.status import run_status
from admit.config import Config
from admit.controller.manager import ControllerSettings, Manager
from admit.kube.client import KubeAPI
from admit.testing.fake_kube import FakeKubeAPI
from admit.webhook.admission import Admission
from admit.webhook.app import create_app
from tests.backends import volcano
from tests.helpers import FAST_CONTROLLER, admission_review, apply_answer, eventually

CONFIG = Config(gang_backend=volcano.NAME)
STATUS_CONFIG = Config(gang_backend=volcano.NAME, extra_gang_backends=frozenset({"coscheduling"}))
"""``admit status`` with Coscheduling enabled beside Volcano, so that its diagnosis sees the Volcano gang too."""
API_VERSION = f"{volcano.GROUP}/{volcano.VERSION}"


def deployment(replicas: int = 3, min_member: str = "3") -> dict[str, Any]:
    """A Deployment as a user applies it, asking for a gang of ``min_member``."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team", "annotations": {"gang.admit.dev/min-member": min_member}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }


@pytest.fixture
async def cluster(aiohttp_client):
    """The fake API serving Volcano's PodGroup, admit's controller (one gang controller per enabled backend, as
    ``admit serve`` starts it) and the webhook over HTTP, with the Volcano backend registered."""
    volcano.install()
    try:
        async with FakeKubeAPI(gc_orphans_after=0.025) as fake:
            fake.register(volcano.GROUP, volcano.VERSION, "PodGroup", volcano.PLURAL)
            settings = ControllerSettings(identity="a", lease_namespace="admit", **FAST_CONTROLLER)
            main = Manager(fake.api_client(), CONFIG, settings, own_client=True)
            await main.start()
            assert list(main.gangs) == [volcano.NAME]
            await eventually(lambda: main.working)
            async with fake.api_client() as api_client:
                admission = Admission(CONFIG, KubeAPI(api_client), main.cache)
                client = await aiohttp_client(create_app(admission))
                yield fake, client
            await main.stop()
    finally:
        volcano.uninstall()


async def test_a_backend_defined_only_in_the_tests_gangs_a_deployment_from_admission_to_adoption(cluster):
    fake, client = cluster
    user = deployment()
    answer = await (await client.post("/mutate", json=admission_review(user))).json()
    assert answer["response"]["allowed"]
    mutated = apply_answer(user, answer)
    template = mutated["spec"]["template"]
    assert template["metadata"]["annotations"] == {volcano.GROUP_NAME_ANNOTATION: "web"}
    assert template["spec"]["schedulerName"] == volcano.SCHEDULER
    assert mutated["metadata"]["labels"] == {"gang.admit.dev/managed": "true"}

    answer = await (await client.post("/validate", json=admission_review(mutated))).json()
    assert answer["response"]["allowed"], answer["response"]
    pg = fake.get(API_VERSION, volcano.PLURAL, "team", "web")
    assert pg is not None and pg["spec"] == {"minMember": 3}
    assert pg["metadata"]["annotations"]["gang.admit.dev/owner"] == "apps/Deployment/web"
    assert "ownerReferences" not in pg["metadata"]  # made at admission: the workload is not stored yet

    stored = fake.put(mutated)  # kube-apiserver stores it; the gang-object controller adopts the PodGroup

    def owners() -> list[Any]:
        obj = fake.get(API_VERSION, volcano.PLURAL, "team", "web") or {}
        return [r.get("uid") for r in (obj.get("metadata") or {}).get("ownerReferences") or []]

    await eventually(lambda: owners() == [stored["metadata"]["uid"]])


async def test_a_gang_of_the_third_backend_below_min_member_is_refused_naming_its_scheduler(cluster):
    fake, client = cluster
    small = deployment(replicas=2)
    mutated = apply_answer(small, await (await client.post("/mutate", json=admission_review(small))).json())
    answer = await (await client.post("/validate", json=admission_review(mutated))).json()
    assert not answer["response"]["allowed"]
    message = answer["response"]["status"]["message"]
    assert "runs 2 pods" in message and "Volcano's gang plugin would keep every pod Pending forever" in message
    assert fake.get(API_VERSION, volcano.PLURAL, "team", "web") is None


async def test_a_pod_naming_a_volcano_group_that_does_not_exist_is_allowed_with_a_warning_saying_what_to_create(
        cluster):
    # Volcano's scheduler keeps such a pod Pending (SchedulerCache.Snapshot skips a job without its PodGroup), as
    # Coscheduling's Permit does: the backend's unknown_group hook and its API half's missing_group say so
    fake, client = cluster
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "adhoc-0", "namespace": "team",
                        "annotations": {volcano.GROUP_NAME_ANNOTATION: "adhoc"}},
           "spec": {"schedulerName": volcano.SCHEDULER, "containers": [{"name": "c", "image": "busybox"}]}}
    answer = (await (await client.post("/validate", json=admission_review(pod))).json())["response"]
    assert answer["allowed"] is True
    assert answer["warnings"] == [f"create Volcano PodGroup adhoc ({API_VERSION}) or correct annotation "
                                  f"{volcano.GROUP_NAME_ANNOTATION}: that PodGroup does not exist, so the pod waits"]
    fake.put({"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": "adhoc", "namespace": "team"},
              "spec": {"minMember": 1}})
    answer = (await (await client.post("/validate", json=admission_review(pod))).json())["response"]
    assert answer["allowed"] is True and "warnings" not in answer


@pytest.fixture
async def picked(aiohttp_client):
    """The webhook over HTTP on the fake API with the Volcano backend registered and admit configured as ``admit
    serve --extra-gang-backend volcano-test`` parses it (default backend coscheduling), so one workload picks Volcano by
    its annotation; yields ``(fake, client, config)``."""
    volcano.install()
    try:
        config = config_from_args(build_parser().parse_args(["serve", "--extra-gang-backend", volcano.NAME]))
        async with FakeKubeAPI() as fake:
            fake.register(volcano.GROUP, volcano.VERSION, "PodGroup", volcano.PLURAL)
            async with fake.api_client() as api_client:
                client = await aiohttp_client(create_app(Admission(config, KubeAPI(api_client))))
                yield fake, client, config
    finally:
        volcano.uninstall()


def picking(name: str, backend: str | None) -> dict[str, Any]:
    """A Deployment called ``name`` that asks for gang backend ``backend`` with ``gang.admit.dev/backend`` (``None``:
    no annotation, the default backend)."""
    obj = deployment()
    obj["metadata"]["name"] = name
    obj["spec"]["selector"]["matchLabels"]["app"] = obj["spec"]["template"]["metadata"]["labels"]["app"] = name
    if backend is not None:
        obj["metadata"]["annotations"]["gang.admit.dev/backend"] = backend
    return obj


async def test_the_backend_annotation_picks_a_registered_third_backend_for_one_workload_beside_the_default(picked):
    fake, client, config = picked
    assert config.gang_backend == "coscheduling" and config.known_backends[-1] == volcano.NAME
    for name, backend in (("vol", volcano.NAME), ("cos", None)):
        user = picking(name, backend)
        answer = await (await client.post("/mutate", json=admission_review(user))).json()
        mutated = apply_answer(user, answer)
        verdict = await (await client.post("/validate", json=admission_review(mutated))).json()
        assert verdict["response"]["allowed"], verdict["response"]
        template = mutated["spec"]["template"]
        if backend:
            assert template["metadata"]["annotations"] == {volcano.GROUP_NAME_ANNOTATION: "vol"}
            assert template["spec"]["schedulerName"] == volcano.SCHEDULER
            assert fake.get(API_VERSION, volcano.PLURAL, "team", "vol")["spec"] == {"minMember": 3}
            assert fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "team", "vol") is None
        else:  # the other workload keeps the default backend: label, schedulerName and a scheduler-plugins PodGroup
            assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "cos"
            assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
            assert fake.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "team", "cos")["spec"]["minMember"] == 3
            assert fake.get(API_VERSION, volcano.PLURAL, "team", "cos") is None


async def test_a_backend_annotation_naming_no_registered_backend_is_refused_listing_the_registered_ones(picked):
    fake, client, _ = picked
    user = picking("typo", "volcan0")
    answer = await (await client.post("/mutate", json=admission_review(user))).json()
    assert answer["response"]["allowed"] and "patch" not in answer["response"]  # /validate says why
    answer = await (await client.post("/validate", json=admission_review(user))).json()
    assert not answer["response"]["allowed"]
    assert answer["response"]["status"]["message"] == (
        'Set annotation gang.admit.dev/backend to "coscheduling", "workload-api" or "volcano-test" (the gang backends '
        'admit knows): "volcan0" is invalid')


async def test_a_pod_that_names_its_volcano_group_itself_gets_the_volcano_scheduler_from_the_backend(picked):
    """``/mutate`` asks every registered backend whether a new Pod already names its group (``named_pod_ops``):
    Volcano's answers for its own annotation, as coscheduling's does for its label."""
    _, client, _ = picked
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "worker-0", "namespace": "team", "annotations": {volcano.GROUP_NAME_ANNOTATION: "pg"}},
           "spec": {"containers": [{"name": "w", "image": "busybox"}]}}
    answer = await (await client.post("/mutate", json=admission_review(pod))).json()
    assert apply_answer(pod, answer)["spec"]["schedulerName"] == volcano.SCHEDULER
    labelled = {**pod, "metadata": {"name": "worker-1", "namespace": "team",
                                    "labels": {"scheduling.x-k8s.io/pod-group": "pg"}}}
    answer = await (await client.post("/mutate", json=admission_review(labelled))).json()
    assert apply_answer(labelled, answer)["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_a_registered_backend_is_a_choice_of_gang_backend_and_extra_gang_backend_and_only_while_registered():
    volcano.install()
    try:
        args = build_parser().parse_args(["serve", "--gang-backend", volcano.NAME])
        assert config_from_args(args).gang_backend == volcano.NAME
        review = config_from_args(build_parser().parse_args(["review", "x.yaml"]))
        assert review.extra_gang_backends == frozenset()  # admit review enables what admit serve enables
        review = config_from_args(build_parser().parse_args(["review", "--extra-gang-backend", volcano.NAME, "x.yaml"]))
        assert volcano.NAME in review.extra_gang_backends
    finally:
        volcano.uninstall()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--gang-backend", volcano.NAME])
    assert config_from_args(build_parser().parse_args(["review", "x.yaml"])).known_backends == (
        "coscheduling", "workload-api")


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The controller ownerReference a Kubernetes controller gives what it makes for ``owner`` (a stored object)."""
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def replica_set(deployment_obj: dict[str, Any]) -> dict[str, Any]:
    """The ReplicaSet the Deployment controller makes for a stored Deployment (its template, and annotations)."""
    template = deployment_obj["spec"]["template"]
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-7d9f8b6c5d", "namespace": "team",
                         "labels": {**template["metadata"]["labels"], "pod-template-hash": "7d9f8b6c5d"},
                         "annotations": dict(deployment_obj["metadata"]["annotations"]),
                         "ownerReferences": [controller_ref(deployment_obj)]},
            "spec": {"replicas": deployment_obj["spec"]["replicas"], "selector": deployment_obj["spec"]["selector"],
                     "template": template}}


def replica_pod(i: int, rs: dict[str, Any], node: str | None = None) -> dict[str, Any]:
    """Pod ``i`` as the ReplicaSet controller makes it from a stored ReplicaSet's template (Pending until Volcano
    binds it)."""
    template = rs["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-7d9f8b6c5d-{i}", "namespace": "team",
                         "labels": {**template["metadata"]["labels"], "pod-template-hash": "7d9f8b6c5d"},
                         "annotations": dict(template["metadata"]["annotations"]),
                         "ownerReferences": [controller_ref(rs)]},
            "spec": {**template["spec"], **({"nodeName": node} if node else {})},
            "status": {"phase": "Running" if node else "Pending"}}


async def admit_status(fake: FakeKubeAPI, output: str, config: Config = STATUS_CONFIG) -> tuple[str, str]:
    """``admit status -n team [-o json]`` against the fake API, in this process (where the Volcano backend is
    registered): ``(standard output, standard error)``."""
    args = argparse.Namespace(api_server=fake.url, kubeconfig=None, namespace="team", all_namespaces=False,
                              output=output, watch=False, interval=2.0, request_timeout=5.0)
    out, err = io.StringIO(), io.StringIO()
    assert await run_status(args, config, out, err) == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


async def test_admit_status_shows_the_third_backends_gang_with_its_reason_and_no_coscheduling_row_for_it(cluster):
    fake, client = cluster
    user = deployment()
    mutated = apply_answer(user, await (await client.post("/mutate", json=admission_review(user))).json())
    assert (await (await client.post("/validate", json=admission_review(mutated))).json())["response"]["allowed"]
    rs = fake.put(replica_set(fake.put(mutated)))
    for i in range(2):  # a quota let two of the three pods in
        fake.put(replica_pod(i, rs))

    text, _ = await admit_status(fake, "text")
    lines = text.splitlines()
    # one row: the Volcano gang; the Coscheduling diagnosis does not call the Deployment an unmutated gang of its own
    assert len(lines) == 2 and lines[0].split()[:2] == ["GROUP", "WORKLOAD"], text
    assert lines[1].split()[:6] == ["podgroup.scheduling.volcano.sh/web", "Deployment/web", "3", "2", "0", "2"], text
    assert "NotEnoughPods: 2 pod(s) exist, minMember is 3: Volcano's gang plugin waits for 1 more" in lines[1]

    for i in range(3):  # the third let in, and Volcano binds all three together
        fake.put(replica_pod(i, rs, node=f"n{i + 1}"))
    rows = json.loads((await admit_status(fake, "json"))[0])
    assert [(r["group"], r["workload"], r["minMember"], r["pods"], r["reason"]) for r in rows] == [
        ("podgroup.scheduling.volcano.sh/web", "Deployment/web", 3, {"total": 3, "scheduled": 3, "pending": 0},
         "Scheduled")]


async def test_admit_status_leaves_a_registered_backend_that_is_neither_enabled_nor_asked_for_alone():
    # the Volcano backend registered, on a cluster without its CRD, with admit running Coscheduling: no
    # "scheduling.volcano.sh/v1beta1 podgroups not listed (404 NotFound)" note on every run, until a workload asks
    volcano.install()
    try:
        async with FakeKubeAPI() as fake:
            fake.put(deployment())
            _, err = await admit_status(fake, "json", Config())
            assert volcano.GROUP not in err, err
            asking = deployment()
            asking["metadata"]["name"] = "asks"
            asking["metadata"]["annotations"]["gang.admit.dev/backend"] = volcano.NAME
            fake.put(asking)
            _, err = await admit_status(fake, "json", Config())
    finally:
        volcano.uninstall()
    assert f"{volcano.PLURAL}.{volcano.GROUP}/{volcano.VERSION} not listed (404 NotFound)" in err, err


def test_the_gang_backend_flags_offer_and_describe_every_registered_backend(capsys):
    volcano.install()
    try:
        parser = build_parser()
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--help"])
        extra = config_from_args(parser.parse_args(["serve", "--extra-gang-backend", volcano.NAME]))
        status = config_from_args(parser.parse_args(["status", "--gang-backend", volcano.NAME]))
    finally:
        volcano.uninstall()
    text = " ".join(capsys.readouterr().out.split())
    assert "--gang-backend {coscheduling,workload-api,volcano-test}" in text
    assert ("what the gang annotations become: coscheduling (scheduler-plugins PodGroup, pod label and "
            "schedulerName), workload-api (Kubernetes' native Workload and PodGroup, scheduling.k8s.io, pod "
            f"spec.schedulingGroup) or volcano-test ({volcano.Volcano.description});") in text
    assert extra.allowed_backends == {"coscheduling", volcano.NAME}
    # admit status, like admit serve, enables --gang-backend and each --extra-gang-backend only
    assert status.allowed_backends == {volcano.NAME}
