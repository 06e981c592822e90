"""The fake kube-apiserver's admission chain (admit/testing/fake_kube/admission.py) against what kube-apiserver does
(k8s.io/apiserver plugin/webhook/mutating dispatcher.go ``Dispatch``, reinvocationcontext.go, admission/reinvocation.go,
plugin/webhook/generic ``ShouldCallHook``, matchconditions ``Match``): order, reinvocation, validating after mutating,
selectors, matchConditions and failure policies; and admit's own webhooks registered from the rendered chart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from admit.config import Config
from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI, allowed, denied, patched
from tests.support.chart import webhook_configurations
from tests.webhook_stack import fake_cluster

JSON = dict[str, Any]
POD_RULES = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
              "scope": "Namespaced"}]


def pod(name: str = "p", labels: JSON | None = None, annotations: JSON | None = None) -> JSON:
    meta: JSON = {"name": name, "namespace": "default"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


class Recorder:
    """In-process webhooks that log each call as ``(webhook, labels seen)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JSON]] = []

    def labeller(self, name: str, key: str, value: str | None = None, *, when: str | None = None):
        """Sets ``key`` (to ``value``, or to the value of label ``when`` once it exists)."""
        async def call(request: JSON) -> JSON:
            obj = json.loads(json.dumps(request["object"]))
            labels = obj["metadata"].setdefault("labels", {})
            self.calls.append((name, dict(labels)))
            if when is None:
                labels[key] = value
            elif when in labels:
                labels[key] = labels[when]
            return patched(request, obj)
        return call

    def watcher(self, name: str):
        async def call(request: JSON) -> JSON:
            self.calls.append((name, dict((request["object"]["metadata"]).get("labels") or {})))
            return allowed(request)
        return call


def hook(name: str, reinvocation: str = "Never", **extra: Any) -> JSON:
    return {"name": name, "rules": POD_RULES, "failurePolicy": "Fail", "reinvocationPolicy": reinvocation, **extra}


async def create_pod(chain: AdmissionChain, body: JSON) -> JSON:
    async with FakeKubeAPI(admission=chain) as fake:
        async with fake.api_client() as client:
            await k8s.CoreV1Api(client).create_namespaced_pod("default", body)
        return fake.get("v1", "pods", "default", body["metadata"]["name"])


async def test_mutating_webhooks_run_in_configuration_name_order_each_seeing_the_previous_patch():
    rec = Recorder()
    chain = AdmissionChain()
    chain.add("Mutating", "zz-last", hook("z.example.com"), rec.labeller("z", "z", "1"))
    chain.add("Mutating", "aa-first", hook("a.example.com"), rec.labeller("a", "a", "1"))
    chain.add("Mutating", "aa-first", hook("b.example.com"), rec.labeller("b", "b", "1"))
    stored = await create_pod(chain, pod())
    assert [name for name, _ in rec.calls] == ["a", "b", "z"]
    assert rec.calls[1][1] == {"a": "1"} and rec.calls[2][1] == {"a": "1", "b": "1"}
    assert stored["metadata"]["labels"] == {"a": "1", "b": "1", "z": "1"}


async def test_an_if_needed_webhook_is_reinvoked_once_when_a_later_webhook_changed_the_object():
    # admit's LWS pod joiner needs this: it runs before LWS's pod webhook adds the group index, and again after it.
    rec = Recorder()
    chain = AdmissionChain()
    chain.add("Mutating", "a-joiner", hook("joiner.example.com", "IfNeeded"),
              rec.labeller("joiner", "group", when="index"))
    chain.add("Mutating", "b-indexer", hook("indexer.example.com"), rec.labeller("indexer", "index", "3"))
    stored = await create_pod(chain, pod())
    assert [name for name, _ in rec.calls] == ["joiner", "indexer", "joiner"]
    assert stored["metadata"]["labels"] == {"index": "3", "group": "3"}


async def test_a_never_webhook_is_not_reinvoked_and_the_chain_runs_at_most_two_rounds():
    rec = Recorder()
    chain = AdmissionChain()
    chain.add("Mutating", "a", hook("never.example.com", "Never"), rec.labeller("never", "n", when="index"))
    chain.add("Mutating", "b", hook("again.example.com", "IfNeeded"), rec.watcher("again"))

    async def flip(request: JSON) -> JSON:  # changes the object every time it is called
        obj = json.loads(json.dumps(request["object"]))
        labels = obj["metadata"].setdefault("labels", {})
        rec.calls.append(("flip", dict(labels)))
        labels["index"] = str(int(labels.get("index", "0")) + 1)
        return patched(request, obj)

    chain.add("Mutating", "c", hook("flip.example.com", "IfNeeded"), flip)
    chain.add("Mutating", "d", hook("late.example.com", "IfNeeded"), rec.labeller("late", "late", "x"))
    stored = await create_pod(chain, pod())
    # round 1: every webhook; "flip" and "late" changed the object, so "again" and "flip" (IfNeeded, called before a
    # change) are marked for round 2. In round 2 "flip" changes the object again, which marks "late" (invoked in
    # round 1, IfNeeded) too, and "late" comes after "flip" in the same round, so it is called: the set of webhooks
    # to reinvoke is read as the round goes (ShouldReinvokeWebhook). "never" is never reinvoked, and there is no
    # third round although round 2 changed the object.
    assert [name for name, _ in rec.calls] == ["never", "again", "flip", "late", "again", "flip", "late"]
    assert stored["metadata"]["labels"] == {"index": "2", "late": "x"}


async def test_a_webhook_that_did_not_match_in_the_first_round_is_not_called_in_the_second():
    rec = Recorder()
    chain = AdmissionChain()
    chain.add("Mutating", "a", hook("gated.example.com", "IfNeeded",
                                    objectSelector={"matchLabels": {"index": "3"}}), rec.watcher("gated"))
    chain.add("Mutating", "b", hook("indexer.example.com"), rec.labeller("indexer", "index", "3"))
    await create_pod(chain, pod())
    assert [name for name, _ in rec.calls] == ["indexer"]


async def test_validating_webhooks_run_after_every_mutating_one_and_see_the_stored_shape():
    rec = Recorder()
    chain = AdmissionChain()
    seen: list[JSON] = []

    async def validate(request: JSON) -> JSON:
        seen.append(request["object"])
        return allowed(request)

    chain.add("Validating", "a", hook("v.example.com"), validate)
    chain.add("Mutating", "z", hook("m.example.com"), rec.labeller("m", "m", "1"))
    body = pod()
    body["metadata"] = {"generateName": "p-", "namespace": "default"}
    async with FakeKubeAPI(admission=chain) as fake:
        async with fake.api_client() as client:
            await k8s.CoreV1Api(client).create_namespaced_pod("default", body)
    (obj,) = seen
    assert obj["metadata"]["labels"] == {"m": "1"}
    assert obj["metadata"]["name"].startswith("p-") and obj["metadata"]["uid"]


async def test_a_refusal_reads_as_kube_apiserver_writes_it_and_an_unreachable_webhook_follows_its_failure_policy():
    async def refuse(request: JSON) -> JSON:
        return denied(request, 'Pod "p" is invalid: spec: Forbidden: no', code=422, reason="Invalid")

    async def broken(request: JSON) -> JSON:
        raise ConnectionError("connection refused")

    chain = AdmissionChain()
    chain.add("Validating", "a", hook("refuse.example.com"), refuse)
    async with FakeKubeAPI(admission=chain) as fake:
        async with fake.api_client() as client:
            with pytest.raises(k8s.ApiException) as e:
                await k8s.CoreV1Api(client).create_namespaced_pod("default", pod())
    assert e.value.status == 422
    assert json.loads(e.value.body)["message"] == \
        'admission webhook "refuse.example.com" denied the request: Pod "p" is invalid: spec: Forbidden: no'

    ignored = AdmissionChain()
    ignored.add("Mutating", "a", hook("down.example.com", failurePolicy="Ignore"), broken)
    assert (await create_pod(ignored, pod()))["metadata"]["name"] == "p"
    closed = AdmissionChain()
    closed.add("Mutating", "a", hook("down.example.com"), broken)
    with pytest.raises(k8s.ApiException) as e:
        await create_pod(closed, pod())
    assert e.value.status == 500 and 'failed calling webhook "down.example.com"' in json.loads(e.value.body)["message"]


def test_an_emulated_webhook_that_allows_with_an_empty_generator_of_warnings_answers_without_a_warnings_field():
    # kube-apiserver's AdmissionReview request for a Pod CREATE, as an emulated operator webhook receives it
    request = {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
               "operation": "CREATE", "object": pod(), "oldObject": None, "dryRun": False}
    # a webhook that keeps only some of its warnings passes a generator; an empty one must read as no warnings, the
    # way ``warnings: ()`` does, not as ``"warnings": []`` (the generator is truthy before it is consumed)
    assert allowed(request, warnings=(w for w in ["unused"] if w.startswith("x"))) == \
        {"uid": request["uid"], "allowed": True}
    assert allowed(request, warnings=(w for w in ["kept", "unused"] if w == "kept")) == \
        {"uid": request["uid"], "allowed": True, "warnings": ["kept"]}
    assert patched(request, request["object"], warnings=iter(())) == {"uid": request["uid"], "allowed": True}


async def test_match_conditions_are_evaluated_with_cel_and_an_error_follows_the_failure_policy():
    rec = Recorder()
    chain = AdmissionChain()
    chain.add("Mutating", "a", hook("cel.example.com", matchConditions=[
        {"name": "labelled", "expression": "has(object.metadata.labels) && 'team' in object.metadata.labels"}]),
        rec.watcher("cel"))
    await create_pod(chain, pod("plain"))
    await create_pod(chain, pod("team", labels={"team": "a"}))
    assert [labels for _, labels in rec.calls] == [{"team": "a"}]
    failing = AdmissionChain()
    failing.add("Mutating", "a", hook("cel.example.com", matchConditions=[
        {"name": "bad", "expression": "object.metadata.labels.team == 'a'"}]), rec.watcher("bad"))
    with pytest.raises(k8s.ApiException) as e:
        await create_pod(failing, pod("plain"))
    assert e.value.status == 500 and "matchCondition 'bad'" in json.loads(e.value.body)["message"]


# ------------------------------------------------------------------------------ admit's webhooks from the chart


def test_admits_webhooks_in_the_fake_are_the_charts_with_their_rules_conditions_and_policies():
    configurations = webhook_configurations()
    chain = AdmissionChain.from_configurations(configurations, "http://127.0.0.1:1")
    names = [h.name for h in chain.mutating], [h.name for h in chain.validating]
    assert names == (["workloads.mutate.admit.dev", "pods.mutate.admit.dev"],
                     ["workloads.validate.admit.dev", "scale.validate.admit.dev", "pods.validate.admit.dev"])
    specs = {w["name"]: w for conf in configurations for w in conf["webhooks"]}
    for h in (*chain.mutating, *chain.validating):
        assert h.spec == specs[h.name]
    assert all(h.reinvoked_if_needed for h in chain.mutating)


async def test_jobsets_leaderworkersets_ray_objects_and_trainjobs_reach_admit_through_the_fake(aiohttp_server):
    # The hand-written rules the fake had before left these four groups out, so no fake test admitted them.
    async with fake_cluster(aiohttp_server, Config()) as (fake, user):
        custom = k8s.CustomObjectsApi(user)
        for group, version, plural, kind in (("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
                                             ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
                                             ("ray.io", "v1", "rayclusters", "RayCluster"),
                                             ("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")):
            body = {"apiVersion": f"{group}/{version}", "kind": kind,
                    "metadata": {"name": "x", "annotations": {"gang.admit.dev/min-member": "bogus"}}, "spec": {}}
            with pytest.raises(k8s.ApiException) as e:
                await custom.create_namespaced_custom_object(group, version, "default", plural, body)
            assert 'admission webhook "workloads.validate.admit.dev" denied the request' in \
                json.loads(e.value.body)["message"], kind


async def test_a_workload_without_admits_annotations_is_not_sent_to_admit(aiohttp_server):
    async with fake_cluster(aiohttp_server, Config()) as (fake, user):
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                               "template": {"metadata": {"labels": {"app": "web"}},
                                            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
        await k8s.AppsV1Api(user).create_namespaced_deployment("default", deployment)
        assert fake.get("apps/v1", "deployments", "default", "web")
        assert fake.admission.reviews == []


async def test_a_namespace_labelled_disabled_or_the_release_namespace_is_not_sent_to_admit(aiohttp_server):
    gang = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "g", "annotations": {"gang.admit.dev/min-member": "bogus"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "g"}},
                     "template": {"metadata": {"labels": {"app": "g"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    async with fake_cluster(aiohttp_server, Config()) as (fake, user):
        await k8s.CoreV1Api(user).create_namespace(
            {"metadata": {"name": "opted-out", "labels": {"gang.admit.dev/webhook": "disabled"}}})
        await k8s.AppsV1Api(user).create_namespaced_deployment("opted-out", gang)
        await k8s.AppsV1Api(user).create_namespaced_deployment("admit-system", gang)
        assert fake.admission.reviews == []
        with pytest.raises(k8s.ApiException):
            await k8s.AppsV1Api(user).create_namespaced_deployment("default", gang)
