"""The interface every gang backend implements. Pure.

A gang backend turns one :class:`admit.gang.plan.GangPlan` into the objects a scheduler waits on (a
scheduler-plugins PodGroup; a native Workload and PodGroup) and into the pod fields that make the pods wait on them.
The framework (``webhook/``, ``controller/``, ``backends/__init__.py``) finds a backend by the plan's ``backend`` in
``registry.BACKENDS`` (:class:`GangBackend`, here) and ``runtime.APIS`` (:class:`BackendAPI`, the half that talks to
the API server) and never branches on its name. The built-ins live in ``admit/backends/coscheduling/`` and
``admit/backends/workload_api/``; docs/architecture.md, "Add a gang backend", lists the steps for another
(tests/backends/volcano.py is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from ..config import Config
from ..gang.plan import GangPlan, PodTarget
from .action import Action
from .common import ObjectType, Ownership

if TYPE_CHECKING:  # the status part lists through the API client; this module only names its type
    from .status import BackendStatus

__all__ = ["ObjectType", "GangBackend", "BackendHooks", "BackendAPI", "GangDecide"]

JSON = dict[str, Any]
Ops = list[JSON]


class GangBackend(Protocol):
    """The pure half of a gang backend (objects in, decisions out; no API call).

    Attributes:
        name: the value of ``--gang-backend`` / annotation ``<prefix>/backend`` that selects it.
        scheduler: who keeps an undersized gang Pending, for messages ("the Coscheduling plugin").
        size_name: the field of its objects that holds the gang size, for messages (``"minMember"``).
        description: what the gang annotations become with it, one line for ``--gang-backend``'s help
            (``"scheduler-plugins PodGroup, pod label and schedulerName"``; ``admit/cli/__init__.py``).
    """

    name: str
    scheduler: str
    size_name: str
    description: str

    def join_field(self, config: Config) -> str:
        """How a pod joins its gang, for messages: ``"scheduling.x-k8s.io/pod-group label"``,
        ``"spec.schedulingGroup"``."""
        ...

    def served(self, config: Config) -> bool:
        """True when the API server serves its objects (found at start: ``Config.workload_api_version``)."""
        ...

    def not_served_problem(self, config: Config) -> str | None:
        """When the API server answers 404 for its objects: the refusal for good (its CRD is not installed, with
        the fix), or ``None`` when the served version may have changed (admission runs discovery again)."""
        ...

    def object_types(self, config: Config) -> tuple[ObjectType, ...]:
        """The kinds of object it writes, in creation order; the last is the group its pods name (the gang
        controller's and the admission view's group kind)."""
        ...

    def prepare(self, plan: GangPlan, obj: JSON, config: Config, deferred: bool) -> None:
        """Checks and settings at planning time (after the backend is chosen; ``deferred``: someone else owns the
        gang's objects and admit only checks its size). Raises ``GangError`` to refuse."""
        ...

    def join_ops(self, obj: JSON, plan: GangPlan, config: Config, label_workload: bool,
                 old: JSON | None = None) -> tuple[Ops, list[str]]:
        """``(JSONPatch ops, warnings)`` that make ``obj``'s pods wait on the plan's objects (``plan.mutate`` is on;
        ``old``: the stored object of an UPDATE, whose marks an immutable template may keep). Not the plan's
        ``extra_ops``: the engine (``webhook.mutate.plan_patch``) adds those for every backend."""
        ...

    def leave_ops(self, obj: JSON, old_plan: GangPlan, config: Config) -> tuple[Ops, list[str]]:
        """``(ops, warnings)`` that undo :meth:`join_ops` when an UPDATE removes the gang annotations."""
        ...

    def joined(self, obj: JSON, target: PodTarget, plan: GangPlan, config: Config) -> bool:
        """True when the target's pods already wait on the plan's group."""
        ...

    def pod_in_group(self, pod: JSON, name: str, config: Config) -> bool:
        """True when a stored pod waits on group ``name`` (the controller keeps a group such pods still use)."""
        ...

    def named_pod_ops(self, pod: JSON, target: PodTarget, config: Config) -> tuple[Ops, list[str]] | None:
        """For a Pod at CREATE that already names its group with this backend's key (a user's or an operator's own
        gang, no gang annotations needed; ``target`` is the Pod's own labels and ``schedulerName``): ``(JSONPatch
        ops, warnings)`` for what the pod still needs to wait on that group, or ``None`` when the pod names no group
        of this backend (``webhook.mutate`` then reads its annotations and the pod joiners). Asked of every
        registered backend, whichever admit runs with, first one answering wins."""
        ...

    def join_key(self, config: Config) -> str:
        """The key the pods carry with the group's name, for messages (``"spec.schedulingGroup.podGroupName"``)."""
        ...

    def size_of(self, obj: JSON) -> Any:
        """The gang size stored on one of its objects (``None`` when absent)."""
        ...

    def desired_objects(self, plan: GangPlan, config: Config) -> list[JSON]:
        """The objects the gang needs, in :meth:`object_types` order, without ownerReferences but those of
        ``plan.kept_by`` (an Argo step's Workflow: ``gangobjects`` then leaves them to the garbage collector)."""
        ...

    def update_ops(self, existing: JSON, desired: JSON, version: str) -> Ops | None:
        """JSONPatch bringing ``existing`` in step with ``desired`` (``[]``: in step; ``None``: it cannot follow)."""
        ...

    def ownership(self, existing: JSON, plan: GangPlan, config: Config, explicit_name: bool,
                  others: int | None = None) -> Ownership:
        """How admit may treat an existing object of the gang (``common.Ownership``). ``others``: the pods of the
        other stored workloads that name the same group (the controller's claims; ``None``: none, or nobody can
        tell), so that a shortfall one of them may fill is a warning, not a refusal."""
        ...

    def cannot_follow(self, kind: str, existing: JSON, desired: JSON, plan: GangPlan,
                      config: Config) -> tuple[str, str] | None:
        """When :meth:`update_ops` is ``None``: ``(action kind, message)`` the controller reports (``"immutable"``,
        ``"priority"``), or ``None`` to stay silent."""
        ...


class BackendHooks(Protocol):
    """Optional methods of a :class:`GangBackend`, for what only some backends do: the framework looks each up
    (``registry.hooks``, ``registry.hook_of``) and does without it when it is absent."""

    def deferring_reason(self, obj: JSON, plan: GangPlan, backend: str, config: Config,
                         kind: Any = None) -> str | None:
        """Asked of every registered backend for every gang whatever its ``backend``: why someone else makes the
        workload's gang objects (its own controller's native gang, a parent's, a group its templates name), so admit
        only checks its size; ``None`` when this backend knows of none. ``kind``: the workload's ``WorkloadKind``
        record (``None``: none)."""
        ...

    def native_handover(self, obj: JSON, plan: GangPlan, config: Config, kind: Any = None) -> tuple[Ops, list[str]]:
        """Asked of every registered backend for a plan admit does not mutate: ``(ops, warnings)`` that hand the
        workload to its controller's native gang, or take admit's earlier marks off it (``([], [])``: nothing)."""
        ...

    def written_group(self, obj: JSON, plan: GangPlan, config: Config) -> str | None:
        """Asked of the backend a workload asks for when it names no group: the group name admit wrote into it in
        the mutating phase when that differs from ``plan.group_name`` (a ``generateName`` object had no name yet);
        the framework resolves the workload again under that name. ``None`` otherwise."""
        ...

    def merge_shared(self, existing: JSON, desired: JSON, plan: GangPlan,
                     members: list[JSON] | None = None) -> tuple[JSON, list[str]]:
        """For a group bare pods share (``plan.shared``): ``(desired, warnings)`` that one more member brings to
        the stored object ``existing`` (Coscheduling: no member lowers what another member set; a group whose size
        follows its members, ``plan.follows_members``, is sized from ``members``, the group's pods as read, or
        ``None`` when they could not be read: ``common.members_left``). A backend without it cannot have such a
        group: ``backends.apply_backend`` refuses its members with the fix."""
        ...

    def members_selector(self, plan: GangPlan, config: Config) -> str:
        """A label selector of the pods of ``plan``'s group, for a group whose size follows its members
        (``plan.follows_members``): the admission engine lists them for :meth:`merge_shared`, keeping those
        :meth:`GangBackend.pod_in_group` says are in it."""
        ...

    def cannot_admit(self, kind: str, existing: JSON, desired: JSON, ops: Ops | None, plan: GangPlan,
                     config: Config) -> tuple[int | None, str] | None:
        """For an object admit manages, once :meth:`GangBackend.update_ops` gave ``ops``: ``(403, message)`` to
        refuse the admission (its pods would never be scheduled with the stored object), ``(None, warning)`` to
        admit with one warning for the gang, ``None`` for nothing to say (the Workload API's immutable alpha
        ``minCount`` and priority fields)."""
        ...

    def unknown_group(self, pod: JSON, namespace: str, config: Config, cache: Any) -> str | None:
        """Asked of every registered backend for a Pod CREATE admitted with no gang annotations, with the
        controller's caches: the name of the group the pod names with this backend's key when ``cache``
        (``admission.GroupCache``) does not hold it, else ``None``; a dict lookup or two (every such Pod CREATE
        asks). For a backend whose scheduler keeps a pod naming a missing group waiting forever; its API half says
        what is missing (:attr:`BackendAPI.missing_group`)."""
        ...

    def owned_fields(self, config: Config) -> tuple[tuple[tuple[str, ...], bool, str], ...]:
        """The fields of a user's object it writes or removes, for the invariant tests and tools
        (``families/owned.py`` ``resolved``): ``(key-path pattern, anchored, why)`` each, as
        ``families.owned.OwnedField`` reads them (``"*"``: any one step; anchored: from the object root)."""
        ...

    def describe(self, desired: JSON) -> list[str]:
        """For the controller's logs and Events: what an object it creates holds (``["minMember 3", "minResources
        {'cpu': '3'}"]``); without it, ``["<size_name> <minMember>"]``."""
        ...

    def pod_selector(self, name: str, config: Config) -> str:
        """A label selector for the pods of group ``name`` (``scheduling.x-k8s.io/pod-group=<name>``), which the
        controller lists before it deletes an orphaned group; without it, every live pod of the namespace, filtered
        with :meth:`GangBackend.pod_in_group`."""
        ...

    def describe_changes(self, existing: JSON, desired: JSON) -> list[str]:
        """For the controller's logs and Events: what its patch of ``existing`` changes (``["minMember 3 -> 5"]``);
        without it, ``["<size_name> <old> -> <new>"]``."""
        ...


GangDecide = Callable[..., list[Action]]
"""``decide(key, objects, claims, config, *, now, unclaimed_since, grace) -> [action.Action]``: the pure controller
decision for one gang key (``backends.gangobjects.decide_objects``)."""


@dataclass(frozen=True, slots=True)
class BackendAPI:
    """The API half of one backend.

    Attributes:
        decide: the decision of its gang controller; ``None``: ``gangobjects.decide_objects`` over the backend.
        below_min_count: ``(group, its pods) -> (scheduled, pending, minCount) | None`` for a gang that broke
            after it was scheduled, which the gang controller counts every resync period, or ``None``.
        below_min_gauge: ``(count) -> None``, the backend's gauge of those gangs, set after each count (0 when
            this replica stops leading); ``None``: none.
        status: its ``admit status`` part (``status.BackendStatus``: list its objects, diagnose its gangs), or
            ``None`` when ``admit status`` does not show its gangs.
        start: ``async (api_client, config) -> (config, problem, rediscovery)``, run once at ``admit serve`` start
            for an enabled backend (``cli.serve.start_backends``): its discovery (the settings it found, such as the
            Workload API version; why it cannot create its objects on this cluster, or ``None``; an object whose
            ``async again(config) -> config`` finds the served version again after a 404 and whose ``listeners`` it
            awaits on a switch, or ``None``); raises ``common.BackendUnavailable`` when it is the default backend and
            cannot run. ``None``: nothing to discover.
        missing_group: ``async (namespace, name, config, cache, store) -> str | None``: for a Pod CREATE naming group
            ``namespace/name`` that the admission cache does not hold (the backend's ``unknown_group`` hook): the
            warning for the answer, or ``None`` (it exists, or nobody can tell); ``cache``: ``admission.GroupCache``,
            ``store``: ``admission.Store`` or ``None``, at most one GET within ``config.api_timeout_seconds``. Never
            raises. ``None``: no check.
        count: ``(kind, operation)`` for each write admission makes (``"created"``, ``"patched"``) and each
            admission refused because of a stored object (``"refused"``): the backend's metric, or ``None``.
    """

    decide: GangDecide | None = None
    below_min_count: Callable[[Any, list[Any]], Any] | None = None
    status: "BackendStatus | None" = None
    count: Callable[[str, str], None] | None = None
    start: Callable[[Any, Any], Awaitable[tuple[Any, str | None, Any]]] | None = None
    missing_group: Callable[[str, str, Config, Any, Any], Awaitable[str | None]] | None = None
    below_min_gauge: Callable[[int], None] | None = None
