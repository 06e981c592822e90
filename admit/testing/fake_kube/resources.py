"""The resource registry: the kinds the fake serves (built-in and the Workload API of each version) and the
Workload API's validation, as kube-apiserver applies it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


#: API groups served by kube-apiserver itself; resources of any other group are treated as CRDs.
BUILTIN_GROUPS = frozenset({
    "", "apps", "batch", "autoscaling", "policy", "coordination.k8s.io", "events.k8s.io",
    "admissionregistration.k8s.io", "rbac.authorization.k8s.io", "networking.k8s.io", "storage.k8s.io",
    "scheduling.k8s.io", "apiextensions.k8s.io", "discovery.k8s.io", "resource.k8s.io", "node.k8s.io"})


@dataclass(frozen=True)
class ResourceType:
    """One served resource: ``group`` ("" for core), ``version``, ``kind``, ``plural``, ``namespaced``.

    ``status``: has a ``/status`` subresource (status strategy applies). ``scale``: has an autoscaling/v1 ``/scale``
    subresource reading/writing ``spec.replicas``. ``custom``: served like a CRD (docs/fake-api.md).
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    status: bool = True
    scale: bool = False
    custom: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.version, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``pods`` or ``deployments.apps``: how the real server names the resource in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _rt(group: str, version: str, kind: str, plural: str, namespaced: bool = True, *, status: bool = True,
        scale: bool = False, custom: bool | None = None) -> ResourceType:
    return ResourceType(group, version, kind, plural, namespaced, status, scale,
                        group not in BUILTIN_GROUPS if custom is None else custom)


#: The resources every FakeKubeAPI serves; ``FakeKubeAPI.register`` adds more.
BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    _rt("", "v1", "Pod", "pods"),
    _rt("", "v1", "Secret", "secrets", status=False),
    _rt("", "v1", "ConfigMap", "configmaps", status=False),
    _rt("", "v1", "Service", "services"),
    _rt("", "v1", "Event", "events", status=False),
    _rt("", "v1", "Namespace", "namespaces", namespaced=False),
    _rt("", "v1", "Node", "nodes", namespaced=False),
    _rt("apps", "v1", "Deployment", "deployments", scale=True),
    _rt("apps", "v1", "StatefulSet", "statefulsets", scale=True),
    _rt("apps", "v1", "ReplicaSet", "replicasets", scale=True),
    _rt("apps", "v1", "DaemonSet", "daemonsets"),
    _rt("batch", "v1", "Job", "jobs"),
    _rt("batch", "v1", "CronJob", "cronjobs"),
    _rt("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
    _rt("coordination.k8s.io", "v1", "Lease", "leases", status=False),
    _rt("events.k8s.io", "v1", "Event", "events", status=False),
    _rt("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations",
        namespaced=False, status=False),
    _rt("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations",
        namespaced=False, status=False),
    _rt("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups"),
    # DRA DeviceClasses (GA in 1.34; cluster-scoped, no status): admit reads spec.extendedResourceName
    _rt("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", namespaced=False, status=False),
    # RuntimeClasses (node.k8s.io/v1, cluster-scoped, no status): admit reads overhead.podFixed
    _rt("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", namespaced=False, status=False),
    _rt("kubeflow.org", "v1", "TFJob", "tfjobs"),
    _rt("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
    _rt("kubeflow.org", "v1", "MPIJob", "mpijobs"),
    _rt("kubeflow.org", "v1", "XGBoostJob", "xgboostjobs"),
    _rt("kubeflow.org", "v1", "PaddleJob", "paddlejobs"),
    _rt("kubeflow.org", "v1", "JAXJob", "jaxjobs"),
    _rt("kubeflow.org", "v2beta1", "MPIJob", "mpijobs"),
    _rt("sparkoperator.k8s.io", "v1beta2", "SparkApplication", "sparkapplications"),
    _rt("sparkoperator.k8s.io", "v1alpha1", "SparkConnect", "sparkconnects"),
    _rt("sparkoperator.k8s.io", "v1beta2", "ScheduledSparkApplication", "scheduledsparkapplications"),
    _rt("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    _rt("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", scale=True),
    _rt("ray.io", "v1", "RayCluster", "rayclusters"),
    _rt("ray.io", "v1", "RayJob", "rayjobs"),
    _rt("ray.io", "v1", "RayService", "rayservices"),
    _rt("ray.io", "v1", "RayCronJob", "raycronjobs"),
    # Kubeflow Trainer's CRDs, installed together (kubeflow/trainer manifests/base/crds: the runtimes without status
    # or shortNames, ClusterTrainingRuntime of scope Cluster): admit reads a TrainJob's runtime at its CREATE
    _rt("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
    _rt("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime", "clustertrainingruntimes", namespaced=False,
        status=False),
    _rt("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes", status=False),
)

#: Discovery's ``shortNames`` by ``(group, plural)`` (none where there is no entry): each registry's ``ShortNames()``
#: (``pkg/registry/core/pod/storage/storage.go`` ``po``, ``apps/deployment/storage`` ``deploy``, ...), a CRD's
#: ``spec.names.shortNames`` (PodGroup: ``charts/admit/templates/podgroup-crd.yaml``, as scheduler-plugins').
SHORT_NAMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("po",), ("", "services"): ("svc",), ("", "configmaps"): ("cm",), ("", "events"): ("ev",),
    ("", "namespaces"): ("ns",), ("", "nodes"): ("no",), ("apps", "deployments"): ("deploy",),
    ("apps", "statefulsets"): ("sts",), ("apps", "replicasets"): ("rs",), ("apps", "daemonsets"): ("ds",),
    ("autoscaling", "horizontalpodautoscalers"): ("hpa",), ("events.k8s.io", "events"): ("ev",),
    ("scheduling.x-k8s.io", "podgroups"): ("pg", "pgs"), ("leaderworkerset.x-k8s.io", "leaderworkersets"): ("lws",),
    ("sparkoperator.k8s.io", "sparkapplications"): ("sparkapp",), ("sparkoperator.k8s.io", "sparkconnects"):
    ("sparkconn",), ("sparkoperator.k8s.io", "scheduledsparkapplications"): ("scheduledsparkapp",),
}


def workload_api_resources(version: str) -> tuple[ResourceType, ...]:
    """Kubernetes' native gang scheduling API (``scheduling.k8s.io`` ``Workload`` and ``PodGroup``: ``v1alpha2`` in
    1.36, ``v1alpha3`` and ``v1beta1`` in 1.37, ``v1`` planned for 1.38; ``v1alpha1``, 1.35's first alpha, serves
    ``workloads`` only): not served by default (like a cluster without the ``GenericWorkload`` gate);
    ``FakeKubeAPI(workload_api="v1beta1")`` or ``serve_workload_api`` adds it."""
    workloads = _rt("scheduling.k8s.io", version, "Workload", "workloads", status=False)
    if version == FIRST_ALPHA:  # 1.35: the Workload embeds its pod groups; there is no PodGroup object
        return (workloads,)
    if version not in WORKLOAD_API_VERSIONS:
        raise ValueError(f"Workload API version {version!r} is not one of {WORKLOAD_API_VERSIONS + (FIRST_ALPHA,)}")
    return (workloads, _rt("scheduling.k8s.io", version, "PodGroup", "podgroups"))


WORKLOAD_API_VERSIONS = ("v1alpha2", "v1alpha3", "v1beta1", "v1")
# Kubernetes 1.35 (KEP-4671, gate GenericWorkload, --runtime-config=scheduling.k8s.io/v1alpha1=true): only
# ``workloads``, each with ``spec.podGroups[]`` (staging/src/k8s.io/api/scheduling/v1alpha1/types.go of
# release-1.35); served with ``workload_api="v1alpha1"``, its shapes are not checked
FIRST_ALPHA = "v1alpha1"
# PodGroupTemplate and PodGroupSpec fields besides the reference: the OpenAPI of the 1.36.2 kube-apiserver (v1alpha2)
# and staging/src/k8s.io/api/scheduling/v1beta1/types.go (adds preemptionPolicy)
_TEMPLATE_FIELDS = frozenset({"name", "schedulingPolicy", "schedulingConstraints", "disruptionMode", "priority",
                              "priorityClassName", "resourceClaims", "preemptionPolicy"})
# Immutable (``+k8s:immutable``) on a template and on a PodGroup in v1alpha3/v1beta1/v1 types.go; ``schedulingPolicy``
# is handled apart (only ``gang.minCount`` may change there)
_IMMUTABLE_PRIORITY = ("priorityClassName", "priority", "preemptionPolicy", "disruptionMode")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HIGHEST_USER_PRIORITY = 1_000_000_000  # "+k8s:maximum=1000000000 # HighestUserDefinablePriority"


def _name_format_ok(value: Any, subdomain: bool) -> bool:
    """``k8s-short-name`` (DNS label, at most 63) or ``k8s-long-name`` (DNS subdomain, at most 253)."""
    text = str(value or "")
    if subdomain:
        return len(text) <= 253 and bool(_DNS_SUBDOMAIN.match(text))
    return len(text) <= 63 and bool(_DNS_LABEL.match(text))


def _policy_errors(policy: Any, where: str) -> list[str]:
    if not isinstance(policy, dict) or len([k for k in ("basic", "gang") if policy.get(k) is not None]) != 1 \
            or set(policy) - {"basic", "gang"}:
        return [f"{where}: Invalid value: exactly one of basic or gang must be set"]
    gang = policy.get("gang")
    if gang is not None:
        count = gang.get("minCount") if isinstance(gang, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1 or set(gang) - {"minCount"}:
            return [f"{where}.gang.minCount: Invalid value: {count!r}: must be greater than or equal to 1"]
    return []


def _priority_errors(fields: JSON, where: str, version: str) -> list[str]:
    """``priorityClassName`` (``k8s-long-name``), ``priority`` (at most HighestUserDefinablePriority) and
    ``preemptionPolicy`` (``Never``/``PreemptLowerPriority``) of a v1alpha3/v1beta1/v1 template or PodGroup spec
    (the fake serves them as with the ``PodGroupPreemptionPolicy`` gate on)."""
    errors: list[str] = []
    if version == "v1alpha2":
        return errors
    cls = fields.get("priorityClassName")
    if cls is not None and not _name_format_ok(cls, subdomain=True):
        errors.append(f"{where}.priorityClassName: Invalid value: {cls!r}: must be a DNS subdomain")
    prio = fields.get("priority")
    if prio is not None and (not isinstance(prio, int) or prio > _HIGHEST_USER_PRIORITY):
        errors.append(f"{where}.priority: Invalid value: {prio!r}: must be less than or equal to "
                      f"{_HIGHEST_USER_PRIORITY}")
    policy = fields.get("preemptionPolicy")
    if policy is not None and policy not in ("Never", "PreemptLowerPriority"):
        errors.append(f'{where}.preemptionPolicy: Unsupported value: {policy!r}: supported values: "Never", '
                      '"PreemptLowerPriority"')
    return errors


def _workload_api_errors(rt: ResourceType, obj: JSON) -> list[str]:
    """Field shapes of ``staging/src/k8s.io/api/scheduling/<version>/types.go`` that admit writes. Stricter than the
    real server in one way: an unknown field is refused (the real one drops it with a warning), so a misspelt field
    fails the test that sends it. Name formats as the types give them: template names and ``templateName`` are
    DNS labels; ``workloadName`` is a DNS label in v1alpha2 and a DNS subdomain (``k8s-long-name``) in
    ``workloadRef`` (v1alpha3, v1beta1, v1)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return ["spec: Required value"]
    errors: list[str] = []
    if rt.kind == "Workload":
        unknown = set(spec) - {"controllerRef", "podGroupTemplates", "compositePodGroupTemplates"}
        ref = spec.get("controllerRef")
        if ref is not None and (not isinstance(ref, dict) or not ref.get("kind") or not ref.get("name")
                                or set(ref) - {"apiGroup", "kind", "name"}):
            errors.append("spec.controllerRef: Invalid value: kind and name are required (apiGroup optional)")
        templates = spec.get("podGroupTemplates")
        if not isinstance(templates, list) or not 1 <= len(templates) <= 8:
            errors.append("spec.podGroupTemplates: Invalid value: 1 to 8 templates required")
            templates = []
        for i, t in enumerate(templates):
            where = f"spec.podGroupTemplates[{i}]"
            if not isinstance(t, dict) or not _DNS_LABEL.match(str(t.get("name") or "")):
                errors.append(f"{where}.name: Invalid value: must be a DNS label")
                continue
            unknown |= {f"podGroupTemplates[{i}].{k}" for k in set(t) - _TEMPLATE_FIELDS}
            errors += _policy_errors(t.get("schedulingPolicy"), f"{where}.schedulingPolicy")
            errors += _priority_errors(t, where, rt.version)
    else:
        if rt.version == "v1alpha2":
            ref_field, keys = "podGroupTemplateRef", ("workloadName", "podGroupTemplateName")
            ref = (spec.get("podGroupTemplateRef") or {}).get("workload") if isinstance(
                spec.get("podGroupTemplateRef"), dict) else None
        else:
            ref_field, keys = "workloadRef", ("workloadName", "templateName")
            ref = spec.get("workloadRef")
        unknown = set(spec) - {ref_field, "parentCompositePodGroupName", *_TEMPLATE_FIELDS} - {"name"}
        if ref is not None:
            if not isinstance(ref, dict) or set(ref) != set(keys):
                errors.append(f"spec.{ref_field}: Invalid value: {' and '.join(keys)} are required")
            else:
                subdomain = rt.version != "v1alpha2"
                if not _name_format_ok(ref.get("workloadName"), subdomain):
                    errors.append(f"spec.{ref_field}.workloadName: Invalid value: must be a "
                                  f"{'DNS subdomain' if subdomain else 'DNS label'}")
                if not _name_format_ok(ref.get(keys[1]), subdomain=False):
                    errors.append(f"spec.{ref_field}.{keys[1]}: Invalid value: must be a DNS label")
        errors += _policy_errors(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
        errors += _priority_errors(spec, "spec", rt.version)
    if unknown:
        errors.append(f"spec: unknown field(s) {sorted(unknown)} for {rt.api_version} {rt.kind}")
    return errors


def _workload_api_update_errors(rt: ResourceType, new: JSON, old: JSON) -> list[str]:
    """Immutability: v1alpha2 ``Workload.spec.podGroupTemplates`` and ``PodGroup.spec.schedulingPolicy`` and
    ``podGroupTemplateRef`` (kubernetes v1.36 ``pkg/apis/scheduling/validation/validation.go``
    ``validateWorkloadSpecUpdate`` and ``validatePodGroupSpecUpdate``, ``ValidateImmutableField``; seen on the 1.36.2
    kube-apiserver: 422 "field is immutable"); the later versions only
    let ``gang.minCount`` change (``+k8s:update=NoAddItem/NoRemoveItem``, ``NoSet/NoUnset`` on ``gang``), and a
    template's and a PodGroup's ``priorityClassName``, ``priority``, ``preemptionPolicy`` and ``disruptionMode`` are
    ``+k8s:immutable``."""
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}

    def strip_counts(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip_counts(v) for k, v in value.items() if k != "minCount"}
        if isinstance(value, list):
            return [strip_counts(v) for v in value]
        return value

    immutable = ["controllerRef"]
    if rt.kind == "Workload":
        immutable.append("podGroupTemplates")
    else:
        immutable += ["podGroupTemplateRef", "workloadRef", "schedulingPolicy", *_IMMUTABLE_PRIORITY]
    errors = []
    for key in immutable:
        a, b = ns.get(key), os_.get(key)
        if rt.version != "v1alpha2" and key in ("podGroupTemplates", "schedulingPolicy"):
            a, b = strip_counts(a), strip_counts(b)
        if a != b:
            errors.append(f"spec.{key}: Invalid value: field is immutable")
    return errors
