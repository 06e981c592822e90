"""LeaderWorkerSet, emulated from kubernetes-sigs/lws (read at ``060ab4d``, 2026-08-21, and tag ``v0.9.0``; v0.10.0 is
2026-08-11).

What the LWS controller makes from a LeaderWorkerSet, in its order, every write through the fake's admission chain
as the ``lws-controller-manager`` service account:

1. **The leader StatefulSet** ``<lws>`` (``pkg/controllers/leaderworkerset_controller.go`` ``Reconcile`` ->
   ``SSAWithStatefulset`` -> ``constructLeaderStatefulSetApplyConfiguration``): replicas = ``spec.replicas``
   (more during a rolling update with ``maxSurge``: :func:`rolling_update_parameters`),
   ``serviceName: <lws>``, ``podManagementPolicy: Parallel``, selector ``{name: <lws>, worker-index: "0"}``, the
   template = ``leaderTemplate`` (else ``workerTemplate``) plus the labels ``leaderworkerset.sigs.k8s.io/name``,
   ``worker-index: "0"``, ``template-revision-hash`` and the annotations ``leaderworkerset.sigs.k8s.io/size`` and
   (when the LWS has it) ``exclusive-topology`` / the subgroup ones; a controller ownerReference to the LWS
   (``setControllerReferenceWithStatefulSet``). Since **v0.10** the StatefulSet's own labels are the LWS's labels
   plus ``name`` and ``template-revision-hash``, and its annotations the LWS's annotations plus
   ``leaderworkerset.sigs.k8s.io/replicas`` (``mergeMetadata(lws.Labels, ...)``, ``mergeMetadata(lws.Annotations,
   ...)``); **v0.9** sets only the LWS keys. (LWS writes it with server-side apply; the fake has none, so it is a
   CREATE, then UPDATEs.)
2. **The leader Pods** ``<lws>-<i>``: the StatefulSet controller's (``kcm.StatefulSetController``).
3. **A worker StatefulSet per leader Pod** (``pkg/controllers/pod_controller.go`` ``Reconcile`` ->
   ``constructWorkerStatefulSetApplyConfiguration``), named after the leader Pod, created when the leader Pod exists
   (``LeaderCreated``), only once it is Ready (``startupPolicy: LeaderReady``), never for ``size: 1``, and with
   ``leaderworkerset.sigs.k8s.io/exclusive-topology`` on the LWS only once the leader Pod is scheduled
   (``pod.Spec.NodeName != ""``: "if exclusive placement is enabled but leader pod is not scheduled, don't create the
   worker sts"): replicas ``size - 1``, ``ordinals.start: 1``, Parallel, ``serviceName: <lws>``, the worker
   template plus the labels ``group-index``, ``name``, ``group-key`` (the leader's) and ``template-revision-hash``,
   and the annotations ``size``, ``leader-name`` and ``exclusive-topology``; a **controller ownerReference to the
   leader Pod**. Labels: v0.10 the LWS's labels plus those (``mergeMetadata(lws.Labels, labelMap)``), and the LWS's
   annotations (``WithAnnotations(lws.Annotations)``); v0.9 the label map only and no annotations. Its Pods
   ``<leader>-<j>``, j = 1..size-1, are the StatefulSet controller's.

LWS's **pod webhook** (``pkg/webhooks/pod_webhook.go`` ``PodWebhook.Default``, registered as ``mpod.kb.io`` in
``lws-mutating-webhook-configuration`` with ``objectSelector: leaderworkerset.sigs.k8s.io/name Exists``,
``failurePolicy: Fail``, no reinvocation; ``config/webhook/mutating-patch.yaml``): for a leader (``worker-index:
"0"``) it adds ``group-index`` from the Pod's ordinal (``statefulsetutils.GetParentNameAndOrdinal``) and
``group-key`` = sha1 of ``<namespace>/<pod>`` (``genGroupUniqueKey``), plus the exclusive pod (anti-)affinities
(``SetExclusiveAffinities``) when the Pod carries ``exclusive-topology``; for a worker it adds ``worker-index`` from
its ordinal. A Pod of an LWS without the ``size`` annotation is refused ("size annotation is unexpectedly missing").
admit's pod webhook (configuration ``admit``) sorts before it and is reinvoked (``IfNeeded``) after it.

**Later writes** (:data:`LATER`, for the invariant of tests/operators/test_later_writes.py): a template change and the
rolling update that follows, with the surge groups of ``maxSurge`` (:func:`rolling_update_with_surge`).

Options that change what admit sees: ``version`` (``"0.10"``: metadata copied onto the StatefulSets; ``"0.9"``:
not). Not emulated: ControllerRevisions (the revision key is a hash of ``leaderWorkerTemplate``, stable but not
LWS's value), the headless Service, readiness (so a rolling update never progresses past its first step:
:func:`rolling_update_parameters` makes the surge groups, and the partition stays), ``RecreateGroupOnPodRestart``,
subgroups' labels, the TPU and ``LWS_*`` environment variables, the worker node selector under exclusive placement, LWS's
validating webhooks, and Volcano gang support (``--gang-scheduling-management``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

from .kcm import StatefulSetController, ensure_running, pod_template_hash
from .kit import Controller, put_event
from .later import Emulated, LaterWrite
from admit.testing.fake_kube import AdmissionChain, ApiError, FakeKubeAPI, denied, patched

__all__ = ["LeaderWorkerSetOperator", "install", "LATER", "rolling_update_parameters", "NAME", "GROUP_INDEX", "WORKER_INDEX", "REVISION", "GROUP_KEY",
           "SIZE", "EXCLUSIVE", "REPLICAS", "LEADER_NAME", "POD_WEBHOOK", "POD_WEBHOOK_CONFIGURATION", "USER"]

JSON = dict[str, Any]
GROUP = "leaderworkerset.x-k8s.io"
NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
SIZE = "leaderworkerset.sigs.k8s.io/size"
EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
REPLICAS = "leaderworkerset.sigs.k8s.io/replicas"
LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
POD_WEBHOOK = "mpod.kb.io"
POD_WEBHOOK_CONFIGURATION = "lws-mutating-webhook-configuration"
USER = {"username": "system:serviceaccount:lws-system:lws-controller-manager",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:lws-system", "system:authenticated"]}

_ORDINAL = re.compile(r"^(.*)-([0-9]+)$")  # statefulsetutils.GetParentNameAndOrdinal


def revision_key(lws: JSON) -> str:
    """The ``template-revision-hash`` of an LWS: a hash of its ``leaderWorkerTemplate`` (LWS hashes the
    ControllerRevision's data with FNV-32, ``hashRevision``; this value is stable but not LWS's)."""
    return pod_template_hash((lws.get("spec") or {}).get("leaderWorkerTemplate") or {})


def _merge(user: JSON | None, controller: JSON) -> JSON:
    """``mergeMetadata``: the user's map, then the controller's keys over it."""
    return {**(user or {}), **controller}


def _template_annotations(lws: JSON) -> JSON:
    lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    annotations = {SIZE: str(lwt.get("size", 1))}
    lws_annotations = lws["metadata"].get("annotations") or {}
    if lws_annotations.get(EXCLUSIVE):
        annotations[EXCLUSIVE] = lws_annotations[EXCLUSIVE]
    subgroup = lwt.get("subGroupPolicy")
    if isinstance(subgroup, dict):
        if subgroup.get("type"):
            annotations["leaderworkerset.sigs.k8s.io/subgroup-policy-type"] = str(subgroup["type"])
        annotations["leaderworkerset.sigs.k8s.io/subgroup-size"] = str(subgroup.get("subGroupSize"))
        if lws_annotations.get(SUBGROUP_EXCLUSIVE):
            annotations[SUBGROUP_EXCLUSIVE] = lws_annotations[SUBGROUP_EXCLUSIVE]
    return annotations


def _with_metadata(template: JSON, labels: JSON, annotations: JSON) -> JSON:
    """``PodTemplateSpecApplyConfiguration.WithLabels`` / ``WithAnnotations``: keys added over the template's."""
    template = copy.deepcopy(template)
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return template


def _owner(obj: JSON, api_version: str, kind: str) -> JSON:
    """``setControllerReferenceWithStatefulSet`` (``pkg/controllers/pod_controller.go``): the owner's group, version
    and kind come from the scheme (``apiutil.GVKForObject(owner, scheme)``), never from the object, whose TypeMeta a
    typed client leaves empty and kube-apiserver leaves out of a list's items (a listed leader Pod has no
    ``apiVersion``/``kind``); its name and uid from its metadata."""
    meta = obj["metadata"]
    return {"apiVersion": api_version, "kind": kind, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def leader_statefulset(lws: JSON, version: str = "0.10") -> JSON:
    """The leader StatefulSet the controller applies for ``lws`` (a stored LWS: ``metadata.uid`` set)."""
    meta, spec = lws["metadata"], lws.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate") or {}
    name, rev = meta["name"], revision_key(lws)
    template = _with_metadata(lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {},
                              {WORKER_INDEX: "0", NAME: name, REVISION: rev}, _template_annotations(lws))
    own_labels = {NAME: name, REVISION: rev}
    own_annotations = {REPLICAS: str(spec.get("replicas", 1))}
    if version != "0.9":
        own_labels = _merge(meta.get("labels"), own_labels)
        own_annotations = _merge(meta.get("annotations"), own_annotations)
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": own_labels,
                     "annotations": own_annotations,
                     "ownerReferences": [_owner(lws, f"{GROUP}/v1", "LeaderWorkerSet")]},
        "spec": {"serviceName": name, "replicas": spec.get("replicas", 1), "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {NAME: name, WORKER_INDEX: "0"}}, "template": template,
                 "updateStrategy": {"type": (spec.get("rolloutStrategy") or {}).get("type") or "RollingUpdate",
                                    "rollingUpdate": {"partition": 0, "maxUnavailable": 1}}},
    }


def worker_statefulset(lws: JSON, leader: JSON, version: str = "0.10") -> JSON:
    """The worker StatefulSet the pod controller creates for a leader Pod of ``lws`` (as read or listed: a listed
    Pod carries no ``apiVersion``/``kind``, and none is needed)."""
    meta, spec = lws["metadata"], lws.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate") or {}
    labels = leader["metadata"].get("labels") or {}
    label_map = {GROUP_INDEX: labels.get(GROUP_INDEX, ""), NAME: meta["name"], GROUP_KEY: labels.get(GROUP_KEY, ""),
                 REVISION: labels.get(REVISION, "")}
    annotations = {**_template_annotations(lws), LEADER_NAME: leader["metadata"]["name"]}
    template = _with_metadata(lwt.get("workerTemplate") or {}, label_map, annotations)
    body: JSON = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": leader["metadata"]["name"], "namespace": meta["namespace"],
                     "labels": _merge(meta.get("labels"), label_map) if version != "0.9" else dict(label_map),
                     "ownerReferences": [_owner(leader, "v1", "Pod")]},
        "spec": {"serviceName": meta["name"], "replicas": int(lwt.get("size", 1)) - 1,
                 "podManagementPolicy": "Parallel", "ordinals": {"start": 1}, "template": template,
                 "selector": {"matchLabels": {GROUP_INDEX: label_map[GROUP_INDEX], NAME: meta["name"],
                                              GROUP_KEY: label_map[GROUP_KEY]}}},
    }
    if version != "0.9" and meta.get("annotations"):
        body["metadata"]["annotations"] = dict(meta["annotations"])
    return body


def _scaled(value: Any, total: int, round_up: bool, default: int) -> int:
    """apimachinery ``intstr.GetScaledValueFromIntOrPercent`` (``default`` when absent)."""
    if value is None:
        return default
    if isinstance(value, str) and value.endswith("%"):
        scaled = int(value[:-1]) * total / 100
        return int(-(-scaled // 1)) if round_up else int(scaled // 1)
    return int(value)


def rolling_update_parameters(lws: JSON, sts: JSON) -> tuple[int, int]:
    """``(partition, replicas)`` of the leader StatefulSet ``sts`` of a stored ``lws`` (``rollingUpdateParameters``,
    ``pkg/controllers/leaderworkerset_controller.go``, v0.10.0), for the cases the fake reaches (no pod is ever
    Ready here): a template change (the StatefulSet's ``template-revision-hash`` is not the LWS's: Case 2, "a new
    rolling update") bursts to ``calculateRollingUpdateReplicas(replicas, maxSurge, maxUnavailable, unready =
    replicas)`` with partition ``min(replicas, stsReplicas)``; while that update runs (partition above 0) the
    StatefulSet keeps its size; else (Case 3) ``replicas`` and partition 0. ``maxSurge`` is scaled rounding up and
    capped at ``replicas``, ``maxUnavailable`` rounding down (defaults 0 and 1). The LWS ``partition`` is a floor.
    The surge groups ``<lws>-<replicas>`` ... are created by the StatefulSet controller from the new template."""
    spec = lws.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    rolling = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    surge = min(_scaled(rolling.get("maxSurge"), replicas, True, 0), replicas)
    unavailable = _scaled(rolling.get("maxUnavailable"), replicas, False, 1)
    floor = int(rolling.get("partition") or 0)
    sts_replicas = int((sts.get("spec") or {}).get("replicas", replicas))
    if ((sts["metadata"].get("labels") or {}).get(REVISION) != revision_key(lws)) and sts_replicas >= replicas:
        unready = replicas  # every group is on the old revision
        want = replicas + max(unready - unavailable, 0) if unready <= surge else replicas + surge
        return max(min(replicas, sts_replicas), floor), want
    partition = int((((sts.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate") or {})
                    .get("partition") or 0)
    if partition > 0:
        return max(partition, floor), sts_replicas
    return floor, replicas


def _ready(pod: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class LeaderWorkerSetOperator(Controller):
    """The LWS controller and its pod controller (module docstring), syncing per LeaderWorkerSet.

    Attributes:
        errors: ``(namespace, lws, message)`` of every refused write (also a Warning Event ``FailedCreate`` on the
            LWS, as the controllers record it).
    """

    what = "LeaderWorkerSet controller"

    def __init__(self, api: FakeKubeAPI, *, version: str = "0.10") -> None:
        super().__init__(api)
        self.version = version

    def observe(self, rt: Any, ns: str, name: str, obj: JSON | None, old: JSON | None = None) -> None:
        if obj is None:
            return
        if rt.key == (GROUP, "v1", "leaderworkersets"):
            self.changed(ns, name)
        elif rt.key in (("", "v1", "pods"), ("apps", "v1", "statefulsets")):
            lws = ((obj.get("metadata") or {}).get("labels") or {}).get(NAME)
            if lws:  # enqueueLWSRequests / the pod controller's watch on pods with the name label
                self.changed(ns, lws)

    async def _sync(self, ns: str, name: str) -> None:
        api = self.api
        lws = self._live(f"{GROUP}/v1", "leaderworkersets", ns, name)
        if lws is None:
            return
        stss = api.resource_type("apps/v1", "statefulsets")
        try:
            leader = api.get("apps/v1", "statefulsets", ns, name)
            desired = leader_statefulset(lws, self.version)
            if leader is None:
                await api.admitted_create(stss, ns, desired, dry_run=False, user=USER)
            else:
                new = copy.deepcopy(leader)
                new["metadata"]["labels"] = desired["metadata"]["labels"]
                new["metadata"]["annotations"] = desired["metadata"]["annotations"]
                new["spec"].update({k: desired["spec"][k] for k in ("replicas", "template", "serviceName")})
                partition, new["spec"]["replicas"] = rolling_update_parameters(lws, leader)
                new["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = partition
                if new != leader:
                    await api.admitted_update(stss, ns, name, new, dry_run=False, user=USER)
        except ApiError as e:
            what = "create" if api.get("apps/v1", "statefulsets", ns, name) is None else "update"
            self._record(lws, f"Failed to {what} leader statefulset {name}: {e.message}")
            return
        size = int(((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size", 1))
        # the pod controller's informer: the Pods as listed (no apiVersion/kind on the items)
        for pod in api.list_objects("v1", "pods", ns, label_selector=f"{NAME}={name},{WORKER_INDEX}=0"):
            if not pod["metadata"].get("deletionTimestamp"):
                await self._leader_pod(lws, pod, size)

    async def _leader_pod(self, lws: JSON, pod: JSON, size: int) -> None:
        """``PodReconciler.Reconcile`` for one leader Pod."""
        api, ns = self.api, lws["metadata"]["namespace"]
        if size == 1:
            return
        if (lws.get("spec") or {}).get("startupPolicy") == "LeaderReady" and not _ready(pod):
            return
        if EXCLUSIVE in (lws["metadata"].get("annotations") or {}) and not (pod.get("spec") or {}).get("nodeName"):
            return
        if api.get("apps/v1", "statefulsets", ns, pod["metadata"]["name"]) is not None:
            return
        try:
            await api.admitted_create(api.resource_type("apps/v1", "statefulsets"), ns,
                                      worker_statefulset(lws, pod, self.version), dry_run=False, user=USER)
        except ApiError as e:
            self._record(lws, f"Failed to create worker statefulset for leader pod {pod['metadata']['name']}: "
                              f"{e.message}")

    def _record(self, lws: JSON, message: str) -> None:
        meta = lws["metadata"]
        self.errors.append((meta["namespace"], meta["name"], message))
        put_event(self.api, lws, "Warning", "FailedCreate", message, "lws-controller-manager")


def _exclusive_affinities(pod: JSON, key: str, topology: str) -> None:
    """``SetExclusiveAffinities``: the group's pods together in one topology domain, no other group's there."""
    affinity = pod["spec"].setdefault("affinity", {})
    value = pod["metadata"]["labels"][key]
    affinity.setdefault("podAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
        {"labelSelector": {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]},
         "topologyKey": topology})
    affinity.setdefault("podAntiAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(
        {"labelSelector": {"matchExpressions": [{"key": key, "operator": "Exists"},
                                                {"key": key, "operator": "NotIn", "values": [value]}]},
         "topologyKey": topology})


async def pod_webhook(request: JSON) -> JSON:
    """``mpod.kb.io``: ``PodWebhook.Default`` (module docstring), as controller-runtime answers (a JSONPatch)."""
    pod = copy.deepcopy(request["object"])
    meta = pod.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    if NAME not in labels:
        return patched(request, request["object"])
    annotations = meta.get("annotations") or {}
    name = meta.get("name") or ""
    if SIZE not in annotations:
        return denied(request, f"size annotation is unexpectedly missing for pod {name}")
    match = _ORDINAL.match(name)
    if match is None:
        return denied(request, f"parsing pod ordinal for pod {name}")
    if labels.get(WORKER_INDEX) == "0":
        labels.setdefault(GROUP_INDEX, match.group(2))
        key = labels.setdefault(GROUP_KEY, hashlib.sha1(f"{request.get('namespace') or meta.get('namespace')}/{name}"
                                                       .encode()).hexdigest())
        if annotations.get(EXCLUSIVE) and key:
            _exclusive_affinities(pod, GROUP_KEY, annotations[EXCLUSIVE])
    else:
        labels[WORKER_INDEX] = match.group(2)
    return patched(request, pod)


POD_WEBHOOK_SPEC: JSON = {
    "name": POD_WEBHOOK, "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
    "objectSelector": {"matchExpressions": [{"key": NAME, "operator": "Exists"}]},
    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
}


def install(api: FakeKubeAPI, chain: AdmissionChain | None = None, *, version: str = "0.10") -> LeaderWorkerSetOperator:
    """Run the LWS emulation on ``api``: its controllers, and its pod webhook in ``chain`` (default:
    ``api.admission``). The StatefulSet controller must run too (``FakeControlPlane(statefulset_controller=True)``) for
    Pods to appear."""
    chain = chain if chain is not None else api.admission
    if chain is not None:
        chain.add("Mutating", POD_WEBHOOK_CONFIGURATION, json.loads(json.dumps(POD_WEBHOOK_SPEC)), pod_webhook)
    return api.add_controller(LeaderWorkerSetOperator(api, version=version))


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): what the LWS controller sends after the CREATE
# ----------------------------------------------------------------------------------------------------------------------

USER_WRITER = {"username": "alice", "groups": ["system:authenticated"]}


def _install_with_statefulsets(api: FakeKubeAPI, chain: AdmissionChain | None = None) -> LeaderWorkerSetOperator:
    """:func:`install`, with the fake's StatefulSet controller (which makes the group pods) when it is not running."""
    ensure_running(api, StatefulSetController)
    return install(api, chain)


async def rolling_update_with_surge(op: LeaderWorkerSetOperator, obj: JSON) -> None:
    """A user's template change (a new image), then the LWS controller's rolling update: the leader StatefulSet
    updated to the new revision and burst to ``replicas + maxSurge`` groups (:func:`rolling_update_parameters`), the
    surge groups made by the StatefulSet controller from the new template, each one's worker StatefulSet made by
    the pod controller."""
    api, ns, name = op.api, obj["metadata"]["namespace"], obj["metadata"]["name"]
    stored = api.get(f"{GROUP}/v1", "leaderworkersets", ns, name)
    if stored is None:
        return
    container = stored["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["image"] = f"{container.get('image', 'vllm/vllm-openai')}-next"
    try:
        await api.admitted_update(api.resource_type(f"{GROUP}/v1", "leaderworkersets"), ns, name, stored,
                                  dry_run=False, user=USER_WRITER)
    except ApiError:  # the user's own write refused: the fix was named there, nothing later happens
        return


def gangs_of(op: LeaderWorkerSetOperator, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """``(group, its pods)`` per group index and revision of ``obj``'s live pods: each is one gang."""
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    groups: dict[tuple[str, str], list[JSON]] = {}
    for pod in op.api.objects("pods", ns):
        labels = pod["metadata"].get("labels") or {}
        if labels.get(NAME) == name and not pod["metadata"].get("deletionTimestamp"):
            groups.setdefault((labels.get(GROUP_INDEX, "?"), labels.get(REVISION, "")), []).append(pod)
    return [(f"group {index} revision {rev}", pods) for (index, rev), pods in sorted(groups.items())]


def refused_writes(op: LeaderWorkerSetOperator) -> list[tuple[str, str, str]]:
    """The LWS controllers' refused writes, and the fake StatefulSet controller's (the group pods)."""
    statefulsets = getattr(op.api, "statefulsets", None)
    return [*op.errors, *(statefulsets.errors if statefulsets is not None else [])]


LATER_WRITES = (
    LaterWrite("rolling update with maxSurge after a template change",
               "kubernetes-sigs/lws pkg/controllers/leaderworkerset_controller.go rollingUpdateParameters, "
               "calculateRollingUpdateReplicas (burstReplicas = replicas + maxSurge), SSAWithStatefulset (v0.10.0)",
               "spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge (default 0); any change of "
               "spec.leaderWorkerTemplate is a new revision (pkg/utils/revision getPatch)",
               lambda obj: True, rolling_update_with_surge),
)

LATER = Emulated("lws", _install_with_statefulsets, ((f"{GROUP}/v1", "LeaderWorkerSet"),), LATER_WRITES, gangs_of,
                 refused_writes)
