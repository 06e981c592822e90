"""An annotation-only change of a gang workload, of every kind the controller watches: the validating webhook writes
the PodGroup from the update before kube-apiserver stores it, and the controller, still reading the stored
version, never writes the old spec back (on a 1.36 plane it did, 103-119 times in a 15-minute soak, for
StatefulSets and Jobs, whose annotation change keeps ``metadata.generation``; and once for 2.9 s after a leader
change).

Each kind starts from its seed manifest (``tests/manifest_seeds.py``), mutated by admit as kube-apiserver would store
it. The update is the one kube-apiserver hands to validating admission: the fake computes it with a dry-run PUT
(``metadata.generation`` bumped per kind as the registry strategies do, ``admit/testing/fake_kube/server.py``
``_spec_part``; the ``resourceVersion`` of the stored version it replaces). Timings scaled down as in
``test_controller.py``.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from admit.backends.common import stamped_replaces as pod_group_replaces
from admit.controller.claims import claim_of, watched_kinds
from admit.kube.client import KubeAPI
from admit.kube.watchcache import KubeRaw, Resource
from admit.webhook.admission import Admission
from admit.webhook.admissionreview import AdmissionRequest
from admit.webhook.validate import validate
from tests.controller.test_controller import CONFIG, GRACE, PG_API, controllers, kube  # noqa: F401 - fixtures
from tests.helpers import eventually
from tests.manifest_seeds import _stored, seeds_by_kind

pytestmark = pytest.mark.fake_api()

NEW_TIMEOUT = "777"


def _gang_seeds() -> list[Any]:
    """``pytest.param(resource, stored object)`` for every watched kind with a seed that claims its own PodGroup and
    that admission creates it for (bare pods' shared groups have no workload to revert to; a Pod's UPDATE is never
    admitted as a gang, ``validate.validate``, so the webhook writes nothing ahead of a stored Spark driver)."""
    seeds = seeds_by_kind()
    table, _ = watched_kinds(CONFIG)
    out = []
    for wk in table:
        if wk.resource.kind == "Pod":
            continue
        for _source, seed in seeds.get(wk.resolver_key, []):
            if seed.get("apiVersion") != wk.resource.api_version:
                continue
            obj = _stored(seed, CONFIG)
            obj["metadata"].pop("uid", None)
            claim = claim_of(obj, wk.resource, CONFIG)
            if claim is None or claim.plan is None or claim.plan.shared or claim.key is None:
                continue
            obj["metadata"].setdefault("namespace", "default")
            if validate(admission_request(obj, wk.resource, "CREATE"), CONFIG).ensure is None:
                continue  # refused (a seed of examples/denied/), or no PodGroup of its own to wait on
            out.append(pytest.param(wk.resource, obj, id=f"{wk.resource.kind}.{wk.resource.api_version}"))
            break
    return out


def admission_request(obj: dict[str, Any], resource: Resource, operation: str, old: dict[str, Any] | None = None
                      ) -> AdmissionRequest:
    """The AdmissionRequest kube-apiserver sends for ``obj`` of ``resource``."""
    meta = obj["metadata"]
    return AdmissionRequest(uid=f"req-{operation}", api_version="admission.k8s.io/v1", group=resource.group,
                            version=resource.version, kind=resource.kind, resource_group=resource.group,
                            resource=resource.plural, sub_resource="", operation=operation,
                            namespace=meta["namespace"], name=meta["name"], object=obj, old_object=old,
                            dry_run=False)


GANG_SEEDS = _gang_seeds()


def timeout_of(fake: Any, key: tuple[str, str]) -> Any:
    pg = fake.get(PG_API, "podgroups", *key) or {}
    return (pg.get("spec") or {}).get("scheduleTimeoutSeconds")


async def admitted_gang(fake: Any, kube: KubeRaw, admission: Admission, resource: Resource,
                        obj: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, str]]:
    """Admit and store ``obj`` (the validating webhook creates the PodGroup, the controller adopts it); returns the
    stored object and the PodGroup's key."""
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("namespace", "default")
    claim = claim_of(obj, resource, CONFIG)
    assert claim is not None and claim.key is not None
    verdict = await admission.validate(admission_request(obj, resource, "CREATE"))
    assert verdict.allowed, verdict.message
    stored = await kube.request("POST", resource.path(obj["metadata"]["namespace"]), body=obj)
    uid = stored["metadata"]["uid"]
    await eventually(lambda: any(r.get("uid") == uid for r in ((fake.get(PG_API, "podgroups", *claim.key) or {})
                                                               .get("metadata") or {}).get("ownerReferences") or []))
    return stored, claim.key


async def annotated(kube: KubeRaw, resource: Resource, stored: dict[str, Any]) -> dict[str, Any]:
    """``kubectl annotate --overwrite <kind> <name> gang.admit.dev/schedule-timeout-seconds=777`` as validating
    admission sees it (a dry-run of the update: generation and resourceVersion as the server sets them)."""
    new = copy.deepcopy(stored)
    new["metadata"].setdefault("annotations", {})[CONFIG.timeout_key] = NEW_TIMEOUT
    meta = stored["metadata"]
    return await kube.request("PUT", resource.path(meta["namespace"], meta["name"]), body=new,
                              query=[("dryRun", "All")])


@pytest.mark.parametrize("resource,obj", GANG_SEEDS)
async def test_an_annotation_only_change_of_a_gang_is_never_reverted_by_the_controller(
        fake, kube, controllers, resource, obj):
    controller = await controllers()
    admission = Admission(CONFIG, KubeAPI(kube.api_client), controller.cache)
    stored, key = await admitted_gang(fake, kube, admission, resource, obj)
    update = await annotated(kube, resource, stored)
    same_generation = update["metadata"].get("generation") == stored["metadata"].get("generation")
    assert same_generation == ((resource.group, resource.kind) != ("apps", "Deployment")), update["metadata"]
    fake.clear_requests()
    before = len(controller.gangs["coscheduling"].actions)
    verdict = await admission.validate(admission_request(update, resource, "UPDATE", stored))
    assert verdict.allowed, verdict.message
    assert str(timeout_of(fake, key)) == NEW_TIMEOUT
    assert pod_group_replaces(fake.get(PG_API, "podgroups", *key), CONFIG) == stored["metadata"]["resourceVersion"]
    await asyncio.sleep(GRACE / 2)  # the controller sees the webhook's PodGroup and still the stored workload
    assert str(timeout_of(fake, key)) == NEW_TIMEOUT
    await kube.request("PUT", resource.path(key[0], stored["metadata"]["name"]), body=update)
    await asyncio.sleep(0.4)
    assert str(timeout_of(fake, key)) == NEW_TIMEOUT
    assert len(fake.requests_for("podgroups", "patch")) == 1  # the webhook's; none from the controller
    assert ("patch", key) not in list(controller.gangs["coscheduling"].actions)[before:]


async def test_an_annotation_change_is_not_reverted_by_a_leader_elected_while_it_is_in_flight(
        fake, kube, controllers):
    """A StatefulSet (its annotation change keeps the generation): the webhook writes the PodGroup, the leader
    steps down, and the new leader, its bookkeeping empty, reads the same stored StatefulSet."""
    resource, obj = next((p.values for p in GANG_SEEDS if p.values[0].kind == "StatefulSet"))
    first = await controllers("a")
    second = await controllers("b", wait=False)
    admission = Admission(CONFIG, KubeAPI(kube.api_client), first.cache)
    stored, key = await admitted_gang(fake, kube, admission, resource, obj)
    update = await annotated(kube, resource, stored)
    fake.clear_requests()
    assert (await admission.validate(admission_request(update, resource, "UPDATE", stored))).allowed
    await first.stop()
    await eventually(lambda: second.working)
    await asyncio.sleep(GRACE / 2)
    assert str(timeout_of(fake, key)) == NEW_TIMEOUT
    assert not fake.requests_for("podgroups", "patch")[1:]
    await kube.request("PUT", resource.path(key[0], stored["metadata"]["name"]), body=update)
    await asyncio.sleep(0.4)
    assert str(timeout_of(fake, key)) == NEW_TIMEOUT
    assert len(fake.requests_for("podgroups", "patch")) == 1
