"""Builders for tests: AdmissionReviews shaped as kube-apiserver sends them, example manifests, patch decoding."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import jsonpatch
import yaml
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# request.resource plural and whether the kind is namespaced, for the kinds tests send
PLURALS = {
    "Pod": "pods",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "Job": "jobs",
    "TFJob": "tfjobs",
    "PyTorchJob": "pytorchjobs",
    "MPIJob": "mpijobs",
    "XGBoostJob": "xgboostjobs",
    "PaddleJob": "paddlejobs",
    "JAXJob": "jaxjobs",
    "SparkApplication": "sparkapplications",
    "ConfigMap": "configmaps",
}

USER_INFO = {
    "username": "kubernetes-admin",
    "groups": ["kubeadm:cluster-admins", "system:authenticated"],
}


def example(name: str) -> dict[str, Any]:
    """The first document of ``examples/<name>`` (a deep copy)."""
    path = EXAMPLES / name
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return copy.deepcopy(docs[0])


def example_docs(name: str) -> list[dict[str, Any]]:
    """All documents of ``examples/<name>``."""
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def admission_review(
    obj: dict[str, Any] | None,
    operation: str = "CREATE",
    *,
    old: dict[str, Any] | None = None,
    namespace: str | None = None,
    dry_run: bool = False,
    uid: str | None = None,
    strip_namespace: bool = False,
    sub_resource: str | None = None,
    resource: tuple[str, str, str] | None = None,
    kind: tuple[str, str, str] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """An ``admission.k8s.io/v1`` AdmissionReview for ``obj`` as kube-apiserver sends it.

    ``strip_namespace`` drops ``metadata.namespace`` from the object (controllers' pods arrive that way);
    ``resource``/``kind`` override ``(group, version, plural|kind)`` for subresources such as ``deployments/scale``.
    """
    src = obj if obj is not None else old
    assert src is not None
    api_version = src.get("apiVersion", "v1")
    group, _, version = api_version.rpartition("/")
    k = src.get("kind", "")
    meta = src.get("metadata", {})
    ns = namespace if namespace is not None else meta.get("namespace", "default")
    body = copy.deepcopy(obj) if obj is not None else None
    if body is not None and strip_namespace:
        body.get("metadata", {}).pop("namespace", None)
    kind_t = kind or (group, version, k)
    res_t = resource or (group, version, PLURALS.get(k, k.lower() + "s"))
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": kind_t[0], "version": kind_t[1], "kind": kind_t[2]},
        "resource": {"group": res_t[0], "version": res_t[1], "resource": res_t[2]},
        "requestKind": {"group": kind_t[0], "version": kind_t[1], "kind": kind_t[2]},
        "requestResource": {"group": res_t[0], "version": res_t[1], "resource": res_t[2]},
        "name": name if name is not None else meta.get("name", ""),
        "namespace": ns,
        "operation": operation,
        "userInfo": USER_INFO,
        "object": body,
        "oldObject": copy.deepcopy(old) if old is not None else None,
        "dryRun": dry_run,
        "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
        request["requestSubResource"] = sub_resource
    if not request["name"]:
        del request["name"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSONPatch list of an AdmissionReview answer (``[]`` when there is none)."""
    patch = response["response"].get("patch")
    if patch is None:
        assert "patchType" not in response["response"]
        return []
    assert response["response"]["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(patch))


def apply_answer(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the answer's patch applied by the ``jsonpatch`` library (as kube-apiserver would)."""
    return jsonpatch.apply_patch(obj, decode_patch(response))


def controller_pod(template_owner: dict[str, Any], rs_hash: str = "7d9f8b6c5d") -> dict[str, Any]:
    """A Pod as the ReplicaSet controller creates it from a Deployment's (mutated) template: ``generateName``, no
    ``metadata.name``, no ``metadata.namespace``, a controller ownerReference, defaulted fields."""
    tpl = copy.deepcopy(template_owner["spec"]["template"])
    name = template_owner["metadata"]["name"]
    labels = dict(tpl.get("metadata", {}).get("labels", {}))
    labels["pod-template-hash"] = rs_hash
    spec = tpl["spec"]
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-{rs_hash}-",
            "labels": labels,
            "annotations": dict(tpl.get("metadata", {}).get("annotations", {})),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{name}-{rs_hash}",
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
        "status": {},
    }


async def eventually(predicate: Callable[[], Any], timeout: float = 10.0) -> float:
    """Poll until ``predicate()`` is truthy; returns the seconds it took (fails the test after ``timeout`` seconds).

    The timeout only bounds a failing test: a passing one returns as soon as the observable holds, so it is generous
    (two loaded cores can stall a process for seconds)."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.002)
    return time.monotonic() - start


def requests_caused(fake: Any, *plurals: str) -> list[Any]:
    """The requests of ``fake`` (a ``FakeKubeAPI``) for ``plurals`` (every resource when none is given), less the
    informers' ``list`` and ``watch``: a running controller's watches reconnect (and may relist) on their own schedule,
    so only the remaining verbs (get, create, update, patch, delete) can be the requests a test caused."""
    wanted = set(plurals)
    return [r for r in fake.requests
            if (not wanted or r.resource in wanted) and r.verb not in ("list", "watch")]


async def serve_tls(provider: Any) -> tuple[web.AppRunner, int]:
    """A tiny HTTPS app (``GET /`` -> ``ok``) on 127.0.0.1 using ``provider.ssl_context``; returns (runner, port)."""
    app = web.Application()

    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=provider.ssl_context)
    await site.start()
    return runner, runner.addresses[0][1]


# Controller timings scaled down for tests (the defaults are seconds to minutes; see tests/controller/test_controller.py); the one
# copy every controller test uses.
FAST_CONTROLLER: dict[str, Any] = dict(
    orphan_grace_period=0.5, resync_period=60.0, lease_duration=0.6, renew_deadline=0.4, retry_period=0.1,
    slow_retry=0.3, watch_backoff=(0.02, 0.2), retry_backoff=(0.05, 0.5), sync_timeout=2.0, api_timeout=2.0,
)


def scale_review(name: str, namespace: str, new: int, old: int, *, plural: str = "deployments",
                 dry_run: bool = False, selector: str | None = None) -> dict[str, Any]:
    """A ``<plural>/scale`` UPDATE as kube-apiserver sends it for ``kubectl scale --replicas=new`` or a
    HorizontalPodAutoscaler: kind ``autoscaling/v1 Scale``, resource ``apps/v1 <plural>``, subResource ``scale``;
    ``object``/``oldObject`` are Scale objects (``spec.replicas``; ``status.replicas`` and ``status.selector``)."""
    def scale(replicas: int) -> dict[str, Any]:
        return {
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace, "uid": "6f1c2b9e-0d3a-4c57-9e8f-2a1b3c4d5e6f",
                         "resourceVersion": "4711", "creationTimestamp": "2026-11-30T09:00:00Z"},
            "spec": {"replicas": replicas},
            "status": {"replicas": old, "selector": selector or f"app={name}"},
        }
    return admission_review(scale(new), "UPDATE", old=scale(old), sub_resource="scale", dry_run=dry_run,
                            resource=("apps", "v1", plural), kind=("autoscaling", "v1", "Scale"))


@contextlib.contextmanager
def webhook_on_own_loop(prepare: Callable[[Any], Any] | None = None) -> Iterator[tuple[asyncio.Runner, Any, Any]]:
    """``(runner, client, fake)``: admit's HTTP app (default :class:`admit.config.Config`) in front of the in-repo fake
    Kubernetes API, on an event loop of its own, for tests that hypothesis calls synchronously (``runner.run(coro)``
    drives a request). ``prepare(fake)`` runs before the server starts (e.g. to store a parent object)."""
    from aiohttp.test_utils import TestClient, TestServer

    from admit.webhook.admission import Admission
    from admit.config import Config
    from admit.kube.client import KubeAPI
    from admit.webhook.app import create_app
    from admit.testing.fake_kube import FakeKubeAPI

    runner = asyncio.Runner()

    async def start():
        fake = FakeKubeAPI()
        await fake.__aenter__()
        if prepare is not None:
            prepare(fake)
        api_client = fake.api_client()
        config = Config()
        client = TestClient(TestServer(create_app(Admission(config, KubeAPI(api_client)))))
        await client.start_server()
        return fake, api_client, client

    fake, api_client, client = runner.run(start())
    try:
        yield runner, client, fake
    finally:
        async def stop():
            await client.close()
            await api_client.close()
            await fake.__aexit__(None, None, None)

        runner.run(stop())
        runner.close()


#: Seconds after which the fake API's garbage collector deletes an object whose owner uid is not stored, as a real
#: cluster's garbage collector does (measured: about 25 ms); modules whose tests depend on it mark themselves
#: ``pytestmark = pytest.mark.fake_api(gc_orphans_after=GC_ORPHANS_AFTER)`` (tests/conftest.py, ``fake``).
GC_ORPHANS_AFTER = 0.025


def decide_pod_group(key: tuple[str, str], pg: dict[str, Any] | None, claims: list[Any], config: Any, *,
                     now: float, unclaimed_since: float | None, grace: float,
                     ahead_since: float | None = None) -> Any:
    """The one decision of every backend (``backends.gangobjects.decide_objects``) for the Coscheduling PodGroup
    ``key`` alone: its one action, or ``Action("none")`` when there is nothing to do."""
    from admit.backends.action import Action
    from admit.backends.gangobjects import decide_objects
    from admit.backends.registry import backend_of

    actions = decide_objects(backend_of("coscheduling"), key, {"PodGroup": pg}, claims, config, now=now,
                             unclaimed_since=unclaimed_since, grace=grace, ahead_since=ahead_since)
    return actions[0] if actions else Action("none")
