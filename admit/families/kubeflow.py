"""Gang plans for Kubeflow training jobs: TFJob, PyTorchJob, XGBoostJob, PaddleJob, JAXJob (``kubeflow.org/v1``) and
MPIJob (``kubeflow.org/v1``, training-operator; ``kubeflow.org/v2beta1``, mpi-operator).

A job runs one pod per replica of each replica type; the pod templates live under
``spec.<x>ReplicaSpecs.<Type>.template`` (:data:`REPLICA_SPECS`). admit labels every template and sets its
``schedulerName``; CRD templates are not defaulted by kube-apiserver, so ``schedulerName`` is often absent.

Rules and their sources (kubeflow/training-operator ``pkg/controller.v1/common/job.go`` ``ReconcileJobs``,
``pkg/controller.v1/common/util.go`` ``CalcPGMinResources``; kubeflow/mpi-operator ``pkg/controller/podgroup.go``):

- Replicas: ``replicas`` of a replica type defaults to 1 (training-operator defaulting, ``setDefaultReplicas``).
  Replica type names are matched case-insensitively, as the operator camel-cases them (``ps`` is ``PS``).
- ``auto`` minMember: ``spec.runPolicy.schedulingPolicy.minAvailable``; else, for elastic jobs
  (``spec.elasticPolicy``: PyTorchJob, PaddleJob), ``minReplicas`` Workers plus every non-Worker replica (the
  Master); else the sum of the replicas (the training-operator's ``totalReplicas``, the mpi-operator's workers + 1).
  Elastic defaults follow the training-operator's ``setElasticPolicy``: a missing ``minReplicas`` takes
  ``maxReplicas``, a missing ``maxReplicas`` takes ``minReplicas``, both missing take the Worker replicas.
- ``minResources``: ``schedulingPolicy.minResources`` when set; else the requests of the first minMember pods,
  taking replica types in descending PriorityClass value (``CalcPGMinResources``). admit reads no object during
  admission, so only the built-in classes have a value (:data:`BUILTIN_PRIORITY_CLASSES`); others count as 0, as
  the operator counts a class it cannot read. Equal priorities are taken leader first (Chief, Master, Launcher, then
  PS, Worker, Evaluator, others by name; the mpi-operator also takes Launcher before Worker, the training-operator's
  order on ties is a Go map's). A pod's requests follow the scheduler's rule (``resources.pod_requests``), for the
  pod as the operator builds it (:func:`operator_pod_spec`: init containers the training-operator v1 adds).
- ``scheduleTimeoutSeconds``: the ``gang.admit.dev/schedule-timeout-seconds`` annotation, else
  ``schedulingPolicy.scheduleTimeoutSeconds``.
- MPIJob ``launcherCreationPolicy: WaitForWorkersReady`` (v2beta1): the launcher is created only once every worker
  is Ready, so a gang that counts the launcher never completes (kubeflow/mpi-operator issue #608). ``auto`` then
  counts the workers only; a larger minMember is refused.
- PodGroup name = the job's name (the training-operator's and mpi-operator's ``SyncPodGroup``/``newPodGroup``).
- ``Config.kubeflow_gang_by_operator`` (``--kubeflow-gang-by-operator``): the operator was started with
  ``--gang-scheduler-name`` and writes the PodGroup itself; two writers would fight over one object, so admit then
  mutates nothing and creates nothing, and only refuses jobs whose gang (as the operator computes it:
  ``minAvailable``, else all replicas) cannot start.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ..config import POD_GROUP_BACKEND, Config
from ..echo import clip
from ..gang.plan import GangAnnotations, GangError, GangPlan, below_min_member, choose_group_name, get_path, int_field
from ..gang.quantity import QuantityError, format_resources, parse_quantity
from .shared import WorkloadKind, min_resources_of, object_ref, template_target

__all__ = ["KINDS", "REPLICA_SPECS", "resolve_kubeflow", "BUILTIN_PRIORITY_CLASSES"]

REPLICA_SPECS: dict[str, str] = {
    "TFJob": "tfReplicaSpecs",
    "PyTorchJob": "pytorchReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}
"""Kind -> field of ``spec`` holding ``{ReplicaType: ReplicaSpec}``."""

BUILTIN_PRIORITY_CLASSES: dict[str, int] = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}
"""PriorityClass values every cluster has (Kubernetes docs "Pod Priority and Preemption")."""

_LEADER_ORDER = {"chief": 0, "master": 1, "launcher": 2, "ps": 3, "worker": 4, "evaluator": 5}


@dataclass(slots=True)
class _Replica:
    rtype: str
    count: int
    pod_spec: dict[str, Any]
    priority_class: str

    def order_key(self) -> tuple[int, int, str]:
        return (-BUILTIN_PRIORITY_CLASSES.get(self.priority_class, 0),
                _LEADER_ORDER.get(self.rtype.lower(), len(_LEADER_ORDER)), self.rtype)


def _read_replicas(obj: dict[str, Any], kind: str, field: str, ref: str) -> list[_Replica]:
    specs = get_path(obj, ("spec", field))
    if not isinstance(specs, dict) or not specs:
        raise GangError(
            f"Add spec.{field}, at least one replica type (e.g. Worker) with replicas and a pod template: {ref} has "
            f"none, and a {kind} needs one",
            400,
        )
    out = []
    for rtype, rspec in specs.items():
        where = f"spec.{field}.{rtype}"
        if not isinstance(rspec, dict):
            raise GangError(f"Make {where} a replica spec (replicas, template): {ref} has {clip(rspec)} there", 400)
        count = int_field(rspec, ("replicas",), 1, f"{ref}: {where}.replicas")
        assert count is not None
        pod_spec = get_path(rspec, ("template", "spec"))
        if not isinstance(pod_spec, dict):
            raise GangError(
                f"Add a pod template with containers at {where}.template.spec: {ref} has none there, and every replica "
                "type needs one",
                400,
            )
        pc = pod_spec.get("priorityClassName")
        out.append(_Replica(str(rtype), count, pod_spec, pc if isinstance(pc, str) else ""))
    return out


def _elastic_min(obj: dict[str, Any], replicas: list[_Replica], field: str, ref: str) -> tuple[int, str] | None:
    """``(minMember, source)`` of an elastic job, or ``None`` when ``spec.elasticPolicy`` is absent."""
    policy = get_path(obj, ("spec", "elasticPolicy"))
    if not isinstance(policy, dict):
        return None
    workers = [r for r in replicas if r.rtype.lower() == "worker"]
    if not workers:
        raise GangError(f"Add spec.{field}.Worker, or remove spec.elasticPolicy: {ref} sets spec.elasticPolicy but has "
                        "no Worker, and elastic jobs scale Workers", 400)
    min_r = int_field(policy, ("minReplicas",), None, f"{ref}: spec.elasticPolicy.minReplicas")
    max_r = int_field(policy, ("maxReplicas",), None, f"{ref}: spec.elasticPolicy.maxReplicas")
    if min_r is not None and max_r is not None and min_r > max_r:
        raise GangError(
            f"Make spec.elasticPolicy.minReplicas <= maxReplicas: {ref} has minReplicas={min_r} above "
            f"maxReplicas={max_r}, and an elastic job runs between minReplicas and maxReplicas Workers",
            400,
        )
    if min_r is None:
        min_r = max_r if max_r is not None else workers[0].count
    others = sum(r.count for r in replicas if r.rtype.lower() != "worker")
    source = f"spec.elasticPolicy.minReplicas={min_r}" + (f" + {others} non-Worker pod(s)" if others else "")
    return min_r + others, source


#: The init container the training-operator v1 adds to each Worker pod of a PyTorchJob that has a Master
#: (kubeflow/trainer v1.9.4 ``pkg/controller.v1/pytorch/initcontainer.go``: ``setInitContainer``, ``initContainerTemplate``;
#: the operator's ``--pytorch-init-container-template-file`` may replace it, which admit cannot see).
PYTORCH_INIT_CONTAINER = {"name": "init-pytorch", "resources": {"requests": {"cpu": "50m", "memory": "10Mi"},
                                                                "limits": {"cpu": "100m", "memory": "20Mi"}}}
#: The init container the training-operator v1 adds to an MPIJob's launcher pod (v1.9.4
#: ``pkg/controller.v1/mpi/mpijob_controller.go`` ``newLauncher``; ``mpijob.go`` ``initContainerCpu``,
#: ``initContainerMem``, ``initContainerEphStorage``, requests equal to limits).
KUBECTL_DELIVERY_CONTAINER = {"name": "kubectl-delivery", "resources": {
    "requests": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
    "limits": {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}}}


def operator_pod_spec(obj: dict[str, Any], kind: str, replicas: list[_Replica], replica: _Replica) -> dict[str, Any]:
    """The pod spec of ``replica`` as its operator builds it, as far as its requests go (a new dict; the template is
    not changed): the training-operator v1's init container appended after the template's own for a PyTorchJob
    Worker of a job with a Master (:data:`PYTORCH_INIT_CONTAINER`) and for a ``kubeflow.org/v1`` MPIJob's Launcher
    (:data:`KUBECTL_DELIVERY_CONTAINER`); else the template's spec as it is."""
    rtype = replica.rtype.lower()
    if kind == "PyTorchJob" and rtype == "worker" and any(r.rtype.lower() == "master" for r in replicas):
        added: dict[str, Any] = PYTORCH_INIT_CONTAINER
    elif kind == "MPIJob" and obj.get("apiVersion") == "kubeflow.org/v1" and rtype == "launcher":
        added = KUBECTL_DELIVERY_CONTAINER
    else:
        return replica.pod_spec
    init = replica.pod_spec.get("initContainers")
    return {**replica.pod_spec, "initContainers": [*(init if isinstance(init, list) else []), added]}


def _min_resources(
    obj: dict[str, Any], ann: GangAnnotations, started: list[_Replica], min_member: int, ref: str, plan: GangPlan
) -> dict[str, str] | None:
    if not ann.min_resources:
        return None
    given = get_path(obj, ("spec", "runPolicy", "schedulingPolicy", "minResources"))
    if isinstance(given, dict) and given:
        try:
            return format_resources({k: parse_quantity(v) for k, v in given.items()}) or None
        except QuantityError as e:
            raise GangError(f"Make spec.runPolicy.schedulingPolicy.minResources valid quantities: {ref}: {e}",
                            400) from None
    ordered = sorted(started, key=_Replica.order_key)
    total = sum(r.count for r in started)
    classes = {r.priority_class for r in started if r.count}
    unknown = sorted(c for c in classes if c and c not in BUILTIN_PRIORITY_CLASSES)
    if min_member < total and len(classes) > 1 and unknown:
        plan.warnings.append(
            "set spec.runPolicy.schedulingPolicy.minResources to be exact: admit cannot read PriorityClass "
            f"{str(', '.join(unknown))[:60]} at admission, so it guessed which {min_member} of {total} pods count")
        plan.notes.append(
            f"{ref}: minResources counts the first {min_member} of {total} pods taking replica types in the order "
            f"{', '.join(r.rtype for r in ordered)}")
    return min_resources_of([(r.pod_spec, r.count) for r in ordered], min_member, ann, f"{ref} pod template")


def _schedule_timeout(obj: dict[str, Any], ann: GangAnnotations, ref: str, plan: GangPlan) -> int | None:
    if ann.schedule_timeout_seconds is not None:
        return ann.schedule_timeout_seconds
    path = ("spec", "runPolicy", "schedulingPolicy", "scheduleTimeoutSeconds")
    value = int_field(obj, path, None, f"{ref}: spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds")
    if not value:
        return None  # 0 means the scheduler's default (scheduler-plugins GetWaitTimeDuration)
    if value > 900:
        plan.warnings.append(
            f"{ref}: schedulingPolicy.scheduleTimeoutSeconds={value}, but kube-scheduler waits at most 900 seconds "
            "for a gang"
        )
    return value


def resolve_kubeflow(
    obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str, kind: str = "TFJob"
) -> GangPlan:
    """Plan for a Kubeflow job of ``kind`` (a key of :data:`REPLICA_SPECS`); rules in the module docstring.

    ``total_pods`` is the number of pods the job starts at once (all replicas; workers only for a
    WaitForWorkersReady MPIJob). ``min_resources`` is a ResourceList (``{"cpu": "9", "memory": "19Gi"}``).

    Raises:
        GangError: 400 for malformed input (no replica specs, a replica type without template, non-integer or
            negative replicas, elastic minReplicas > maxReplicas, unparsable quantities); 403 for a gang that cannot
            start (minMember above the replicas, a WaitForWorkersReady launcher counted in the gang).
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref(kind, namespace, name)
    field = REPLICA_SPECS[kind]
    replicas = _read_replicas(obj, kind, field, ref)
    targets = [template_target(("spec", field, r.rtype, "template"), f"replica type {r.rtype}") for r in replicas]
    group_name = choose_group_name(obj, ann, targets, config, kind, name)

    wait = kind == "MPIJob" and get_path(obj, ("spec", "launcherCreationPolicy")) == "WaitForWorkersReady"
    late = [r for r in replicas if wait and r.rtype.lower() == "launcher"]
    started = [r for r in replicas if r not in late]
    total = sum(r.count for r in started)
    total_field = f"spec.{field}[*].replicas" + (" of the workers" if late else "")

    min_available = int_field(
        obj, ("spec", "runPolicy", "schedulingPolicy", "minAvailable"), None,
        f"{ref}: spec.runPolicy.schedulingPolicy.minAvailable",
    )
    if min_available == 0:
        raise GangError(
            f"Remove spec.runPolicy.schedulingPolicy.minAvailable to gang all replicas: {ref} has minAvailable=0, "
            "and a gang needs at least 1 pod",
            400,
        )
    elastic = _elastic_min(obj, replicas, field, ref)  # refuses minReplicas > maxReplicas in every mode
    plan = GangPlan(
        kind=kind, api_group="kubeflow.org", name=name, namespace=namespace, group_name=group_name, min_member=1,
        total_pods=total, total_field=total_field, targets=targets,
    )
    min_member, source = _gang_min_member(obj, plan, ann, config, ref, replicas, total, min_available, elastic)
    plan.min_member = min_member

    for r in replicas:
        if r.count == 0:
            plan.notes.append(f"{ref} has spec.{field}.{r.rtype}.replicas=0: no {r.rtype} pods run")
    if late and 0 < total < min_member:
        raise GangError(
            f"Set the gang to at most {total} (the workers) or use launcherCreationPolicy: AtStartup: {ref} uses "
            f"launcherCreationPolicy: WaitForWorkersReady, and the mpi-operator creates the launcher only once all "
            f"{total} workers are Ready, so a gang of {min_member} ({source}) never completes and every worker waits "
            "forever (kubeflow/mpi-operator#608)"
        )
    # the operator's own PodGroup (--kubeflow-gang-by-operator) is scheduler-plugins': Coscheduling keeps its pods
    below_min_member(plan, ann, config, f"{total_field}={total}", "Raise the replicas", ref=ref, source=source,
                 lower="spec.runPolicy.schedulingPolicy.minAvailable" if config.kubeflow_gang_by_operator
                 else source.split("=")[0] if ann.min_member is None else None,  # auto: the field that set it
                 backend=POD_GROUP_BACKEND if config.kubeflow_gang_by_operator else None)
    if late:
        plan.notes.append(
            f"{ref}: with launcherCreationPolicy: WaitForWorkersReady the launcher starts after the workers, so the "
            f"gang counts the {total} workers and the launcher joins the PodGroup later"
        )
    if plan.mutate:
        built = [replace(r, pod_spec=operator_pod_spec(obj, kind, replicas, r)) for r in started]
        plan.min_resources = _min_resources(obj, ann, built, min_member, ref, plan)
        plan.schedule_timeout_seconds = _schedule_timeout(obj, ann, ref, plan)
    return plan


def _gang_min_member(obj: dict[str, Any], plan: GangPlan, ann: GangAnnotations, config: Config, ref: str,
                     replicas: list[_Replica], total: int, min_available: int | None,
                     elastic: tuple[int, str] | None) -> tuple[int, str]:
    """The gang's minMember and where it comes from (``(4, "annotation gang.admit.dev/min-member=4")``), in the
    order of the module docstring; warns on ``plan`` where a setting is overridden or unused."""
    group_name, total_field = plan.group_name, plan.total_field
    if config.kubeflow_gang_by_operator:
        # The operator's own minMember: minAvailable, else every replica (training-operator ReconcileJobs,
        # mpi-operator calculateMinAvailable: workers + 1), whatever the elastic policy or admit's annotation say.
        everyone = sum(r.count for r in replicas)
        min_member = min_available if min_available is not None else max(everyone, 1)
        source = (
            f"spec.runPolicy.schedulingPolicy.minAvailable={min_available}" if min_available is not None
            else f"all {everyone} replicas, as the operator counts them"
        )
        plan.mutate = False
        plan.create_pod_group = False
        operator = "mpi-operator" if obj.get("apiVersion") == "kubeflow.org/v2beta1" else "training-operator"
        plan.notes.append(
            f"{ref}: the {operator} gangs Kubeflow jobs itself (admit runs with --kubeflow-gang-by-operator); "
            f"admit only checks it and leaves the pod templates and PodGroup {group_name} to the operator"
        )
        if ann.min_member is not None and ann.min_member != min_member:
            plan.warnings.append(
                f"set spec.runPolicy.schedulingPolicy.minAvailable instead of {config.min_member_key}: the operator's "
                f"gang ignores the annotation and needs {min_member} ({str(source)[:80]})")
    elif ann.min_member is not None:
        min_member, source = ann.min_member, f"annotation {config.min_member_key}={ann.min_member}"
        if min_available is not None and min_available != ann.min_member:
            plan.warnings.append(
                f"remove spec.runPolicy.schedulingPolicy.minAvailable={min_available} or make it equal: annotation "
                f"{config.min_member_key}={ann.min_member} overrides it for PodGroup {str(group_name)[:63]}")
    elif min_available is not None:
        min_member, source = min_available, f"spec.runPolicy.schedulingPolicy.minAvailable={min_available}"
    elif elastic is not None:
        min_member, source = max(elastic[0], 1), elastic[1]
    else:
        min_member, source = max(total, 1), f"{total_field}={total}"
    return min_member, source


def _versions(kind: str) -> tuple[tuple[str, str], ...]:
    # MPIJob is served as kubeflow.org/v1 by the training-operator and as v2beta1 by mpi-operator (a cluster has one
    # of them; the other answers 404)
    plural = kind.lower() + "s"
    return (("v1", plural), ("v2beta1", plural)) if kind == "MPIJob" else (("v1", plural),)


KINDS = tuple(WorkloadKind("kubeflow.org", kind, _versions(kind), partial(resolve_kubeflow, kind=kind),
                           pod_joiner=None, pod_watch_selector=None, rollout=None, gang_from_parent=None, handover=None, controller_gang=None, allowed_backends=None, in_status=True)
              for kind in REPLICA_SPECS)
