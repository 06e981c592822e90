"""The fake cluster with an operator emulation running (``tests/emulations``: ``kuberay``, ``spark``,
``kubeflow``), admit's webhooks in its admission chain as the chart registers them, the operator's own webhooks
beside them, and the checks a user would make of the gangs that result: the conformance tests of each operator
(tests/operators/test_kuberay.py, test_spark_operator.py, test_kubeflow_operators.py) use it."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Callable

from admit.config import Config
from admit.gang.ownerrefs import controller_ref
from admit.kube.client import KubeAPI
from admit.testing.fake_kube import AdmissionChain, FakeKubeAPI
from admit.webhook.admission import Admission
from admit.webhook.app import create_app
from tests.emulations.kcm import FakeControlPlane

PG = ("scheduling.x-k8s.io/v1alpha1", "podgroups")
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"



@contextlib.asynccontextmanager
async def operator_cluster(aiohttp_server: Any, config: Config,
                           operator: Callable[[FakeKubeAPI, AdmissionChain], Any], controller: bool = False,
                           **fake_options: Any) -> AsyncIterator[tuple[FakeControlPlane, Any, Any]]:
    """The fake kube-apiserver with admit's webhooks registered from the rendered chart (admit's own app on
    loopback; PodGroups are made at admission) and the operator ``operator(fake, chain)`` installed (an emulation's
    ``install``: its controller and its webhooks); with ``controller`` admit's controller runs too
    (leading, caches synced, its Events recorded). Yields ``(fake, operator, a user's ApiClient)``."""
    from admit.controller.manager import ControllerSettings, Manager
    from tests.helpers import FAST_CONTROLLER, eventually
    from tests.support.chart import admission_chain

    fake = FakeControlPlane(**fake_options)
    await fake.start()
    api_client = fake.api_client()
    ctl = None
    try:
        cache = None
        if controller:
            ctl = Manager(fake.api_client(), config,
                          ControllerSettings(identity="a", lease_namespace="admit", **FAST_CONTROLLER),
                          own_client=True)
            await ctl.start()
            await eventually(lambda: ctl.working)
            cache = ctl.cache
        server = await aiohttp_server(create_app(Admission(config, KubeAPI(api_client), cache)))
        fake.admission = admission_chain(str(server.make_url("")))
        op = operator(fake, fake.admission)
        async with fake.api_client() as user:
            yield fake, op, user
    finally:
        if ctl is not None:
            await ctl.stop()
        await fake.stop()
        await api_client.close()


def events_about(fake: FakeKubeAPI, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    """The Events about ``kind`` ``namespace/name`` (what ``kubectl describe`` shows), events.k8s.io/v1
    (``regarding``) or core/v1 (``involvedObject``), each with its ``note`` (``message``)."""
    out = []
    for e in fake.objects("events", namespace):
        about = e.get("regarding") or e.get("involvedObject") or {}
        if about.get("kind") == kind and about.get("name") == name:
            out.append({**e, "note": e.get("note") or e.get("message") or ""})
    return out


def pods_of(fake: FakeKubeAPI, namespace: str, owner_uid: str) -> list[dict[str, Any]]:
    """Pods controlled by ``owner_uid``."""
    return [p for p in fake.objects("pods", namespace)
            if (controller_ref(p) or {}).get("uid") == owner_uid]


def gang_problems(fake: FakeKubeAPI, namespace: str, pods: list[dict[str, Any]], config: Config,
                  can_exist_together: int | None = None) -> list[str]:
    """What a user would find wrong with the gang of ``pods`` (the pods one workload's operator made): a pod that
    joins no gang or another gang than the others, a gang without its PodGroup, a PodGroup whose minMember exceeds
    the pods that can exist together (``can_exist_together``, default: all of ``pods``), a pod sent to another
    scheduler. Empty when the gang can form."""
    problems = []
    groups = {p["metadata"].get("labels", {}).get(config.pod_group_label) for p in pods}
    if None in groups:
        problems.append(f"pods without the {config.pod_group_label} label: "
                        f"{[p['metadata']['name'] for p in pods if config.pod_group_label not in p['metadata'].get('labels', {})]}")
    groups.discard(None)
    if len(groups) > 1:
        problems.append(f"the pods are in several gangs: {sorted(groups)}")
    for group in groups:
        pg = fake.get(*PG, namespace, group)
        if pg is None:
            problems.append(f"no PodGroup {namespace}/{group}")
            continue
        room = len(pods) if can_exist_together is None else can_exist_together
        if pg["spec"].get("minMember", 1) > room:
            problems.append(f"PodGroup {group} minMember {pg['spec']['minMember']} > {room} pods that can exist")
    schedulers = {p["spec"].get("schedulerName") for p in pods}
    if schedulers != {config.scheduler_name}:
        problems.append(f"pods go to schedulers {sorted(map(str, schedulers))}, not {config.scheduler_name}")
    return problems


def pod_groups_of(fake: FakeKubeAPI, namespace: str) -> list[str]:
    """Names of the scheduler-plugins PodGroups in ``namespace``."""
    return sorted(pg["metadata"]["name"] for pg in fake.objects("podgroups", namespace, api_version=PG[0]))


def leaves(obj: Any, path: tuple = ()) -> dict[tuple, Any]:
    """Every scalar leaf of ``obj`` by path (for "nothing the user wrote is lost")."""
    if isinstance(obj, dict):
        out: dict[tuple, Any] = {}
        for k, v in obj.items():
            out.update(leaves(v, path + (k,)))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(leaves(v, path + (i,)))
        return out
    return {path: obj}


def lost(written: dict[str, Any], stored: dict[str, Any]) -> dict[tuple, Any]:
    """Leaves of ``written`` (``spec`` and ``metadata.labels/annotations``) whose value ``stored`` lacks."""
    have = leaves(stored)
    want = {p: v for p, v in leaves(written).items() if p[0] == "spec" or p[:2] in (("metadata", "labels"),
                                                                                     ("metadata", "annotations"))}
    return {p: v for p, v in want.items() if have.get(p) != v}


def said(fake: FakeKubeAPI, kind: str) -> set[str]:
    """Every warning and note admit gave about objects of ``kind``: the warnings the chain collected (kubectl's
    ``Warning:`` lines) and the notes of allowed answers (``status.message``, the notes joined by ``"; "``, what
    ``admit review -v`` shows one by one)."""
    out = {w for k, _, w in fake.admission.warnings if k == kind}
    for _, request, response in fake.admission.reviews:
        message = (response.get("status") or {}).get("message") if response.get("allowed") else None
        if request["kind"]["kind"] == kind and message:
            out.add(message)
    return out
