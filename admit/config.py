"""Settings of admit: annotation keys, label keys, scheduler name, failure mode, timeouts.

Every user-facing key and name is configurable (docs/behaviour.md, "The rules the code is built on"; the flags:
docs/cli.md). The defaults follow:

- the pod-group label ``scheduling.x-k8s.io/pod-group`` and the PodGroup API ``scheduling.x-k8s.io/v1alpha1``
  of kubernetes-sigs/scheduler-plugins v0.25.7 and later (``apis/scheduling/v1alpha1/types.go``,
  ``PodGroupLabel``); older releases used ``pod-group.scheduling.sigs.k8s.io`` and ``scheduling.sigs.k8s.io``;
- the scheduler profile name ``scheduler-plugins-scheduler`` of the scheduler-plugins Helm chart (second-scheduler
  install); a single-scheduler install keeps ``default-scheduler``.

A :class:`Config` is immutable and built once per process (``admit serve``) or per run (``admit review``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

FailureMode = Literal["deny", "allow"]

DEFAULT_ANNOTATION_PREFIX = "gang.admit.dev"
DEFAULT_SCHEDULER_NAME = "scheduler-plugins-scheduler"
KUBE_DEFAULT_SCHEDULER = "default-scheduler"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
POD_GROUP_API_GROUP = "scheduling.x-k8s.io"
POD_GROUP_API_VERSION = "v1alpha1"
LEGACY_POD_GROUP_API_GROUP = "scheduling.sigs.k8s.io"
LEGACY_POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
POD_GROUP_PLURAL = "podgroups"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "admit"
COSCHEDULING = "coscheduling"
WORKLOAD_API = "workload-api"
#: The gang backend the ``pod_group_*`` settings of :class:`Config` describe (the scheduler-plugins PodGroup and its
#: pod-group label): that of a plan joining a group by that label or of a PodGroup an operator makes (a pod joiner's
#: plan, ``GangPlan.backend``'s default; Spark's pods; the training-operator's own PodGroup).
POD_GROUP_BACKEND = COSCHEDULING
#: The gang backends admit ships: what a :class:`Config` built without the registry knows (``Config.known_backends``).
BUILTIN_BACKENDS = (COSCHEDULING, WORKLOAD_API)
#: ``group -> {name: "module:attribute"}``: the entry points pyproject.toml declares for the built-in backends (the
#: pure half, ``admit.gang_backends``; the API half, ``admit.gang_backend_apis``), which ``backends.common.installed``
#: loads only when admit's package metadata lists none (a checkout whose metadata predates them; ``pip install -e .``).
BUILTIN_ENTRY_POINTS = {
    "admit.gang_backends": {COSCHEDULING: "admit.backends.coscheduling:BACKEND",
                            WORKLOAD_API: "admit.backends.workload_api:BACKEND"},
    "admit.gang_backend_apis": {COSCHEDULING: "admit.backends.coscheduling.api:API",
                                WORKLOAD_API: "admit.backends.workload_api.api:API"},
}
WORKLOAD_API_GROUP = "scheduling.k8s.io"
WORKLOAD_API_VERSIONS = ("v1", "v1beta1", "v1alpha3", "v1alpha2")  # preferred first: the rows of workload_api.SHAPES
# Kubernetes 1.35's first alpha (KEP-4671): a Workload embedding its pod groups, pods naming it in spec.workloadRef,
# no PodGroup object; 1.36 replaced both (v1alpha2, pod spec.schedulingGroup). Known, never spoken.
WORKLOAD_API_FIRST_ALPHA = "v1alpha1"


@dataclass(frozen=True, slots=True)
class Config:
    """Immutable settings shared by the decision code, the server and the controller.

    Attributes:
        annotation_prefix: prefix of the workload annotations (``<prefix>/min-member`` ...).
        scheduler_name: ``spec.schedulerName`` injected into gang pods: the scheduler profile that runs the
            Coscheduling plugin.
        pod_group_label: pod label naming the PodGroup (scheduler-plugins ``PodGroupLabel``).
        pod_group_group / pod_group_version / pod_group_plural: the PodGroup API (CRD) coordinates.
        failure_mode: what to answer when the Kubernetes API cannot be reached during admission:
            ``"deny"`` (refuse with the reason) or ``"allow"`` (admit with a warning).
        api_timeout_seconds: total budget (seconds, float) for the Kubernetes API calls of one admission request,
            well inside the webhook's ``timeoutSeconds`` (default 10 s, "Dynamic Admission Control", timeouts).
        max_body_bytes: largest AdmissionReview body accepted (bytes); larger gets HTTP 400.
        read_timeout_seconds: seconds from a request's first byte to its whole body; slower gets HTTP 400 and the
            connection is closed (``connections.ConnectionGuard`` for the headers, ``app._read_review`` for the body).
        kubeflow_gang_by_operator: the Kubeflow training-operator itself creates PodGroups
            (``--gang-scheduler-name``); admit then only validates Kubeflow jobs.
        ignored_api_groups: API groups whose workloads admit does not handle or watch (e.g. ``kubeflow.org`` when
            the chart's ``workloads.kubeflow`` is off, so the controller does not list kinds RBAC does not grant).
        gang_backend: the gang backend of a workload without ``<prefix>/backend``: ``"coscheduling"``
            (scheduler-plugins PodGroup, the default) or ``"workload-api"`` (Kubernetes' native Workload API).
        extra_gang_backends: backends a workload may also pick with ``<prefix>/backend`` (the chart grants RBAC for
            ``gang_backend`` and these only).
        known_backends: the backend names annotation ``<prefix>/backend`` may give (another is refused, naming
            these): ``registry.BACKENDS`` (filled by ``admit.cli.config_from_args``), else the built-ins, always with
            ``gang_backend`` and ``extra_gang_backends``; one known but not enabled is ``backends.apply_backend``'s.
        workload_api_version: the ``scheduling.k8s.io`` version admit speaks for Workload/PodGroup (``"v1alpha2"``,
            ``"v1beta1"``), found at start (``cli.serve.start_backends``); ``""`` when the API server does not serve it.
        workload_api_served: the ``scheduling.k8s.io`` versions serving Workloads or PodGroups that discovery found
            at start, spoken or not (``("v1alpha1",)`` on Kubernetes 1.35): what a refusal names when
            ``workload_api_version`` is ``""``.
        controller_gangs: kinds (``"Job"``) whose new ``workload-api`` gangs admit hands to their own controller
            through ``spec.scheduling`` instead of making the Workload and PodGroup itself
            (``backends.workload_api.native.native_handover``).
    """

    annotation_prefix: str = DEFAULT_ANNOTATION_PREFIX
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    pod_group_label: str = POD_GROUP_LABEL
    pod_group_group: str = POD_GROUP_API_GROUP
    pod_group_version: str = POD_GROUP_API_VERSION
    pod_group_plural: str = POD_GROUP_PLURAL
    failure_mode: FailureMode = "deny"
    api_timeout_seconds: float = 3.0
    max_body_bytes: int = 3 * 1024 * 1024
    read_timeout_seconds: float = 5.0
    kubeflow_gang_by_operator: bool = False
    ignored_api_groups: frozenset[str] = frozenset()
    gang_backend: str = COSCHEDULING
    extra_gang_backends: frozenset[str] = frozenset()
    workload_api_version: str = ""
    workload_api_served: tuple[str, ...] = ()
    controller_gangs: frozenset[str] = frozenset()
    known_backends: tuple[str, ...] = BUILTIN_BACKENDS

    # Derived annotation keys (computed in __post_init__ so the hot path never formats strings).
    min_member_key: str = dataclasses.field(init=False, default="")
    timeout_key: str = dataclasses.field(init=False, default="")
    min_resources_key: str = dataclasses.field(init=False, default="")
    pod_group_key: str = dataclasses.field(init=False, default="")
    spark_executors_key: str = dataclasses.field(init=False, default="")
    spark_executor_resources_key: str = dataclasses.field(init=False, default="")
    managed_label: str = dataclasses.field(init=False, default="")
    backend_key: str = dataclasses.field(init=False, default="")
    key_prefix: str = dataclasses.field(init=False, default="")
    """``"<prefix>/"``: what every key of admit's annotations starts with (``"gang.admit.dev/"``)."""

    def __post_init__(self) -> None:
        p = self.annotation_prefix.rstrip("/")
        object.__setattr__(self, "min_member_key", f"{p}/min-member")
        object.__setattr__(self, "timeout_key", f"{p}/schedule-timeout-seconds")
        object.__setattr__(self, "min_resources_key", f"{p}/min-resources")
        object.__setattr__(self, "pod_group_key", f"{p}/pod-group")
        object.__setattr__(self, "spark_executors_key", f"{p}/spark-executors")
        object.__setattr__(self, "spark_executor_resources_key", f"{p}/spark-executor-resources")
        object.__setattr__(self, "managed_label", f"{p}/managed")
        object.__setattr__(self, "backend_key", f"{p}/backend")
        object.__setattr__(self, "key_prefix", f"{p}/")
        known = tuple(self.known_backends)
        object.__setattr__(self, "known_backends", known + tuple(sorted(self.allowed_backends.difference(known))))

    @property
    def pod_group_api_version(self) -> str:
        """``"<group>/<version>"`` of the PodGroup API, e.g. ``"scheduling.x-k8s.io/v1alpha1"``."""
        return f"{self.pod_group_group}/{self.pod_group_version}"

    @property
    def allowed_backends(self) -> frozenset[str]:
        """The backends this process may use: ``gang_backend`` plus ``extra_gang_backends``."""
        return self.extra_gang_backends | {self.gang_backend}

    def replace(self, **changes: object) -> "Config":
        """A copy with ``changes`` applied (derived keys recomputed)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
