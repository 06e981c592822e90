"""Invariants over the whole kind registry (``admit.families.kinds.RESOLVERS``), property-based with hypothesis.

For every registered kind, hypothesis takes a manifest of that kind (``tests/manifest_seeds.py``: the examples, the
test manifests and builders) and adds arbitrary labels and annotations (keys with ``/``, ``~`` and dots, any text
value) to the object and to every pod template and pod in it, templates inside lists included (JobSet
replicatedJobs, Ray worker groups), arbitrary extra fields with arbitrary JSON values at every level, and sometimes a
copy of a list item that holds a pod template (one more replicatedJob or worker group). The gang annotations stay
on. It sends the object as kube-apiserver does: CREATE, or UPDATE of the stored (already mutated) object with
``oldObject``, sometimes with the gang annotation removed; with the coscheduling backend, the workload-api backend,
or the pre-v0.25.7 scheduler-plugins label. Checked:

- the patch applies cleanly (``jsonpatch``) to the exact object, and ``mutate`` leaves that object unchanged;
- every leaf the user wrote survives, except the fields admit owns (``admit.families.owned.OWNED_FIELDS``), and every
  operation writes or removes only those fields;
- a second ``/mutate`` of the result is empty (idempotent: ``reinvocationPolicy: IfNeeded`` re-runs the webhook);
- over HTTP (``/mutate`` and ``/validate`` of the server, the fake Kubernetes API behind it): HTTP 200 with the
  request's uid for CREATE and UPDATE, dryRun true and false, and a dryRun review writes nothing to the API.

A kind added to the registry is covered by these tests as soon as a manifest of it exists (examples/ or
tests/manifests/); ``test_every_registered_kind_has_a_seed_manifest`` fails until then, saying what to add. The
seeds also hold the objects the operator emulations make from those manifests (``manifest_seeds.operator_made``:
KubeRay's RayClusters and Pods, spark-submit's driver and executors, the training-operator's and mpi-operator's
Pods and launcher Job), so the properties hold for what admit sees from the operators too.

Budget (``ADMIT_HYPOTHESIS_PROFILE``): ``ci`` (default) generates :data:`PURE_EXAMPLES` objects per kind for the
decision properties and :data:`HTTP_EXAMPLES` reviews per kind over HTTP; ``long`` ten times as many
(docs/invariants.md).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from admit.config import LEGACY_POD_GROUP_API_GROUP, LEGACY_POD_GROUP_LABEL, WORKLOAD_API, Config
from admit.families.kinds import RESOLVERS
from admit.webhook.mutate import mutate
from admit.webhook.admissionreview import AdmissionRequest
from tests.helpers import admission_review, apply_answer, webhook_on_own_loop
from tests.manifest_seeds import at, foreign_writes, lost_fields, pod_templates, seeds_by_kind

PROFILES = {"ci": (50, 10), "long": (500, 100)}
PROFILE = os.environ.get("ADMIT_HYPOTHESIS_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"ADMIT_HYPOTHESIS_PROFILE={PROFILE!r}: use one of {', '.join(PROFILES)}")
PURE_EXAMPLES, HTTP_EXAMPLES = PROFILES[PROFILE]

SEEDS = seeds_by_kind()
KINDS = sorted(RESOLVERS)
CONFIGS = {
    "coscheduling": Config(),
    "workload-api": Config(gang_backend=WORKLOAD_API, workload_api_version="v1alpha2"),
    "legacy-label": Config(pod_group_label=LEGACY_POD_GROUP_LABEL, pod_group_group=LEGACY_POD_GROUP_API_GROUP),
}

# Keys a user writes: ordinary ones, then arbitrary ones with the characters JSON Pointer escapes.
ORDINARY_KEYS = ["team", "app", "sidecar.istio.io/inject", "prometheus.io/scrape", "example.com/cost-center",
                 "app.kubernetes.io/name", "trainer.kubeflow.org/trainjob-ancestor-step", "a~b", "x/y~z"]
# Keys that change what admit decides (its own, its annotations, operators' gang switches): not planted.
_DECIDING = ("gang.admit.dev", "pod-group", "ray.io/", "leaderworkerset.sigs.k8s.io", "kueue.x-k8s.io",
             "spark-role", "spark-app", "scheduling.k8s.io")
USER_KEYS = (st.sampled_from(ORDINARY_KEYS) | st.from_regex(r"[a-z0-9][-a-z0-9._/~]{0,24}", fullmatch=True)).filter(
    lambda k: not any(d in k for d in _DECIDING))
FIELD_KEYS = st.from_regex(r"x-[A-Za-z0-9._/~-]{1,16}", fullmatch=True)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=5,
)
_NO_EXTRA_FIELDS_IN = ("labels", "annotations", "requests", "limits", "matchLabels", "nodeSelector", "sparkConf")


def _maps(obj: Any, path: tuple = (), depth: int = 0) -> list[tuple]:
    """Paths of the maps of ``obj`` where an unknown field may go (not label, annotation or quantity maps)."""
    out = []
    if isinstance(obj, dict):
        if not path or path[-1] not in _NO_EXTRA_FIELDS_IN:
            out.append(path)
        items = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return out
    if depth < 10:
        for key, value in items:
            out.extend(_maps(value, path + (key,), depth + 1))
    return out


def _template_items(obj: Any) -> list[tuple]:
    """Paths of the list items and replica-spec entries that hold a pod template (a replicatedJob, a Ray worker
    group, a Kubeflow replica type), in document order."""
    out: list[tuple] = []
    for path in pod_templates(obj):
        for i in range(len(path) - 1, 0, -1):
            if isinstance(path[i], int) or str(path[i - 1]).endswith("ReplicaSpecs"):
                if path[: i + 1] not in out:
                    out.append(path[: i + 1])
                break
    return out


@st.composite
def planted(draw: Any, seed: dict[str, Any]) -> dict[str, Any]:
    """``seed`` with the user's additions described in the module docstring."""
    obj = copy.deepcopy(seed)
    items = _template_items(obj)
    if items and draw(st.integers(0, 3)) == 0:  # one more replicatedJob / worker group / replica type
        path = draw(st.sampled_from(items))
        parent = at(obj, path[:-1])
        clone = copy.deepcopy(parent[path[-1]])
        for key in ("name", "groupName"):
            if isinstance(clone.get(key), str):
                clone[key] += "-extra"
        if isinstance(parent, list):
            parent.append(clone)
        else:  # a replica type whose name needs JSON Pointer escaping in admit's operations
            parent.setdefault(draw(st.sampled_from(["Extra/Worker", "Extra~Worker", "Extra~1/Worker"])), clone)
    for path in [()] + list(pod_templates(obj)):
        node = at(obj, path)
        direct = path[-1:] in (("driver",), ("executor",))
        if not direct and path and "metadata" not in node and draw(st.integers(0, 5)) == 0:
            node["metadata"] = draw(st.sampled_from([None, {"labels": None}, {"labels": {}}]))  # YAML "metadata:"
            continue
        for field in ("labels", "annotations"):
            extra = draw(st.dictionaries(USER_KEYS, st.text(max_size=16), max_size=3))
            if not extra:
                continue
            meta = node if direct else node.setdefault("metadata", {})
            target = meta.setdefault(field, {}) if isinstance(meta, dict) else None
            if isinstance(target, dict):
                for k, v in extra.items():
                    target.setdefault(k, v)
    maps = _maps(obj)
    for _ in range(draw(st.integers(0, 4))):
        node = at(obj, draw(st.sampled_from(maps)))
        node.setdefault(draw(FIELD_KEYS), draw(JSON_VALUES))
    return obj


def _request(obj: dict[str, Any], operation: str, old: dict[str, Any] | None, uid: str,
             dry_run: bool = False) -> AdmissionRequest:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = obj.get("metadata") or {}
    return AdmissionRequest(uid=uid, api_version="admission.k8s.io/v1", group=group, version=version,
                            kind=str(obj.get("kind")), resource_group=group, resource=str(obj.get("kind")).lower() + "s",
                            sub_resource="", operation=operation, namespace=str(meta.get("namespace") or "default"),
                            name=str(meta.get("name") or ""), object=obj, old_object=old, dry_run=dry_run)


def _apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    return jsonpatch.apply_patch(obj, patch) if patch else copy.deepcopy(obj)


@st.composite
def admissions(draw: Any, kind: tuple[str, str], configs: tuple[str, ...] = tuple(sorted(CONFIGS))) -> tuple[
    str, Config, AdmissionRequest
]:
    """``(config name, config, request)``: a CREATE of a planted seed of ``kind``, or an UPDATE of its stored
    (mutated) form with more user changes and sometimes the gang annotation removed."""
    source, seed = draw(st.sampled_from(SEEDS[kind]))
    name = draw(st.sampled_from(configs))
    config = CONFIGS[name]
    uid = draw(st.uuids()).hex
    obj = draw(planted(seed))
    if draw(st.booleans()):
        return name, config, _request(obj, "CREATE", None, uid)
    stored = _apply(obj, mutate(_request(obj, "CREATE", None, uid), config).patch)
    new = draw(planted(stored))
    annotations = (new.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict) and draw(st.integers(0, 3)) == 0:
        annotations.pop(config.min_member_key, None)
    return name, config, _request(new, "UPDATE", stored, uid)


def test_every_registered_kind_has_a_seed_manifest():
    missing = [f"{group or 'core'}/{kind}" for group, kind in KINDS if (group, kind) not in SEEDS]
    assert not missing, (
        f"no manifest of {', '.join(missing)}: add one shaped like the operator's own sample, with the "
        "gang.admit.dev/min-member annotation, to examples/ (with its expected PodGroup in tests/cli/test_examples.py) or "
        "to tests/manifests/, so that the invariant tests cover the kind")


def test_the_operator_made_objects_are_seeds_too():
    # KubeRay's RayClusters and Pods, spark-submit's driver and executors, the training-operator's and mpi-operator's
    # Pods and launcher Job, as the emulations in admit/testing build them from the seed user objects
    sources = {source.split(" from ")[0] for seeds in SEEDS.values() for source, _ in seeds}
    for made in ("kuberay.cluster_for_parent", "kuberay.ray_pod", "spark.driver_pod",
                 "spark.executor_pods", "kubeflow.training_operator_pod",
                 "kubeflow.mpi_worker_pod", "kubeflow.mpi_launcher_job"):
        assert f"made by {made}" in sources, made


@pytest.mark.parametrize("kind", KINDS, ids=[f"{g or 'core'}/{k}" for g, k in KINDS])
@settings(max_examples=PURE_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(data=st.data())
def test_mutation_keeps_every_user_field_writes_only_admits_fields_and_is_idempotent(kind, data):
    if kind not in SEEDS:
        pytest.skip("no seed manifest (test_every_registered_kind_has_a_seed_manifest fails)")
    name, config, req = data.draw(admissions(kind))
    obj = req.object
    snapshot = copy.deepcopy(obj)
    decision = mutate(req, config)
    assert obj == snapshot, "mutate changed the object it was given"
    after = jsonpatch.apply_patch(obj, decision.patch)  # raises when the patch does not apply to the exact object
    where = f"{kind[1]} {req.operation} ({name} backend)"
    assert not lost_fields(obj, after, config), (where, lost_fields(obj, after, config), decision.patch)
    foreign = foreign_writes(decision.patch, obj, after, config)
    assert not foreign, (f"{where} writes fields admit does not own (a new field admit writes belongs in "
                         f"admit.families.owned.OWNED_FIELDS or its backend's owned_fields, with why it is admit's)", foreign)
    event(f"{req.operation} {name}: {'patched' if decision.patch else 'unchanged'}")  # --hypothesis-show-statistics
    again = mutate(_request(after, req.operation, req.old_object, req.uid), config)
    assert again.patch == [], (where, "second /mutate is not empty", again.patch)


# ---------------------------------------------------------------------------------------------------------------- HTTP


@pytest.fixture(scope="module")
def webhook():
    """``(runner, client, fake)``: the webhook's HTTP app in front of the fake Kubernetes API, on a loop of its own
    (hypothesis calls the test synchronously)."""
    with webhook_on_own_loop() as running:
        yield running


async def _post(client: Any, path: str, review: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post(path, data=json.dumps(review), headers={"Content-Type": "application/json"})
    text = await resp.text()
    assert resp.status == 200, (path, resp.status, text[:500])
    answer = json.loads(text)["response"]
    assert answer["uid"] == review["request"]["uid"], (path, answer)
    return answer


@pytest.mark.parametrize("kind", KINDS, ids=[f"{g or 'core'}/{k}" for g, k in KINDS])
@settings(max_examples=HTTP_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutate_and_validate_answer_200_with_the_uid_and_a_dry_run_writes_nothing(webhook, kind, data):
    if kind not in SEEDS:
        pytest.skip("no seed manifest (test_every_registered_kind_has_a_seed_manifest fails)")
    runner, client, fake = webhook
    _, _, req = data.draw(admissions(kind, ("coscheduling",)))
    dry_run = data.draw(st.booleans())
    review = admission_review(req.object, req.operation, old=req.old_object, uid=req.uid, dry_run=dry_run,
                              namespace=req.namespace)
    before = fake.resource_version

    async def both():
        mutated = await _post(client, "/mutate", review)
        if mutated.get("patch"):
            review["request"]["object"] = apply_answer(review["request"]["object"], {"response": mutated})
        await _post(client, "/validate", review)

    runner.run(both())
    if dry_run:
        assert fake.resource_version == before, f"a dryRun {req.operation} of a {kind[1]} wrote to the API"


# ------------------------------------------------------------------------------------- objects operators make


def _operator_scenarios() -> dict[str, Any]:
    from tests.emulations import jobset as jobset_operator
    from tests.emulations import lws as lws_operator
    from tests.emulations import trainer as trainer_operator
    from tests.operators.test_jobset import MULTISLICE, jobset
    from tests.operators.test_lws import leaderworkerset
    from tests.operators.test_trainer import TORCH, trainjob

    def trainer(fake):
        jobset_operator.install(fake)
        return trainer_operator.install(fake)

    return {
        "lws-v0.10": (lambda fake: lws_operator.install(fake), [leaderworkerset("auto")]),
        "lws-v0.9": (lambda fake: lws_operator.install(fake, version="0.9"), [leaderworkerset("4")]),
        "jobset-multislice": (jobset_operator.install, [jobset("auto", annotations=MULTISLICE)]),
        "trainer-torch": (trainer, [TORCH, trainjob("torch-distributed")]),
    }


@pytest.mark.parametrize("scenario", ["lws-v0.10", "lws-v0.9", "jobset-multislice", "trainer-torch"])
async def test_every_object_an_operator_makes_keeps_its_fields_gets_only_admits_and_mutates_idempotently(
        aiohttp_server, scenario):
    """The registry's invariants on the objects the operator emulations make (tests/emulations) as
    kube-apiserver sends them to admit: the LWS StatefulSets and pods, the JobSet's pods, Trainer's JobSet and its
    pods. Each request admit's webhooks got is checked as the generated ones above: nothing the operator or
    another webhook wrote is lost, only admit's fields are written, a second /mutate is empty; and every
    operator-made object is allowed."""
    from admit.webhook.validate import validate
    from tests.operators.conftest import operator_cluster

    install, objects = _operator_scenarios()[scenario]
    config = Config()
    async with operator_cluster(aiohttp_server, install) as cluster:
        *stored, user_object = objects
        for obj in stored:
            cluster.fake.put(obj)
        await cluster.create(copy.deepcopy(user_object))
        for pod in cluster.pods():  # the leaders bound, so that every follower and worker is made
            if not pod["spec"].get("nodeName"):
                pod["spec"]["nodeName"] = "node-a"
                cluster.fake.put(pod)
        await cluster.fake.settle()
        seen = set()
        for hook, request, _ in cluster.fake.admission.calls:
            if hook not in ("workloads.mutate.admit.dev", "pods.mutate.admit.dev") or \
                    request["userInfo"]["username"] == "kubernetes-admin":
                continue
            obj = request["object"]
            req = _request(obj, request["operation"], request.get("oldObject"), request["uid"])
            decision = mutate(req, config)
            after = _apply(obj, decision.patch)
            where = f"{scenario}: {obj['kind']} {obj['metadata'].get('name')}"
            assert not lost_fields(obj, after, config), (where, lost_fields(obj, after, config))
            assert not foreign_writes(decision.patch, obj, after, config), where
            assert mutate(_request(after, req.operation, req.old_object, req.uid), config).patch == [], where
            verdict = validate(_request(after, req.operation, req.old_object, req.uid), config)
            assert verdict.decision.allowed, (where, verdict.decision.message)
            seen.add(obj["kind"])
        # LWS v0.10's StatefulSets carry the LWS's annotations, so they reach admit (v0.9's do not match the chart's
        # matchConditions); Trainer's JobSet carries the TrainJob's gang annotations
        expected = {"lws-v0.10": {"Pod", "StatefulSet"}, "trainer-torch": {"Pod", "JobSet"}}.get(scenario, {"Pod"})
        assert seen == expected, seen
