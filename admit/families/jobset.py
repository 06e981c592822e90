"""JobSet (``jobset.x-k8s.io/v1alpha2``): one gang over the whole JobSet; its Jobs are children.

Sources: kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go`` (fields and defaults),
``pkg/controllers/startup_policy.go`` (``inOrderStartupPolicy``, ``allReplicasStarted``), the JobSet docs
"Startup policy" sample (``startup-driver-ready``), and the JobSet webhook defaults (``startupPolicyOrder:
AnyOrder``).

- Pod templates: ``spec.replicatedJobs[i].template.spec.template``. The JobSet controller copies each into the Jobs
  it creates (``<jobset>-<replicatedJob>-<index>``, controller ownerReference to the JobSet), so their pods carry
  admit's label; the Jobs are children (``admit.gang.children``), never gangs of their own.
- Pods at once: Σ over replicatedJobs of ``replicas`` × the Job's pods at once (:func:`replicated_jobs`, as for a
  plain Job).
- Steps that finish first (``dependsOn`` with ``status: Complete``; JobSet KEP-672 "serial job execution",
  ``pkg/controllers/depends_on.go``) never run together with their dependents, so they are no gang members
  (:func:`gang_members`): their templates get neither the label nor ``schedulerName``, else a 1-pod initializer
  under a gang of ``numNodes`` would never pass PreFilter (:class:`admit.gang.plan.Wave`). Kubeflow Trainer's
  ``node`` after its initializers: minMember = numNodes.
- Order among gang members (``startupPolicyOrder: InOrder``: replicatedJob N+1 once every Job of N is ready; a
  member with ``dependsOn`` another member): admit keeps one PodGroup per JobSet, so a gang larger than the pods that
  start first deadlocks (:func:`_check_ordered_start`).
- Exclusive placement (:func:`_exclusive`, :func:`_exclusive_leaders`; the TPU multislice shape) and restarts under
  ``restartStrategy: Recreate`` (:func:`_warn_on_recreate`).
- A JobSet made by Kubeflow Trainer (controller ownerReference to a TrainJob): its refusals name the TrainJob and a
  fix on it, as they land in Trainer's log; when Trainer's own ``podGroupPolicy`` marked its templates admit defers
  (:func:`_trainer_ganged`, ``admit.families.trainer``).
- ``minResources``: the requests of the first minMember member pods, taking replicatedJobs in their start order.
- On UPDATE the pod templates are immutable (``PodTarget.immutable``): JobSet's validating webhook refuses any change
  of ``spec.replicatedJobs`` (kubernetes-sigs/jobset v0.12.0 ``pkg/webhooks/jobset_webhook.go`` ``ValidateUpdate``:
  ``apivalidation.ValidateImmutableField``; while the JobSet is suspended before or after the update only the pod
  templates' labels, annotations, nodeSelector, tolerations and schedulingGates may change, never
  ``schedulerName``). So a JobSet annotated after creation is allowed with a warning and no PodGroup, as a Job is; a
  re-apply that drops admit's marks gets them back as stored.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config import Config
from ..echo import clip
from ..gang.foreign import VOLCANO_GROUP_NAME
from ..gang.plan import GangAnnotations, GangError, GangPlan, below_min_member, choose_group_name, get_path, int_field
from .shared import (
    WorkloadKind,
    controller_owner,
    defer_to_operator,
    gang_min_member,
    min_resources_of,
    object_ref,
    template_target,
)

__all__ = ["JOBSET", "resolve_jobset", "replicated_jobs", "gang_members", "KINDS"]

GROUP = "jobset.x-k8s.io"
TRAINER_GROUP = "trainer.kubeflow.org"
EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
NODE_SELECTOR_STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector"


def _exclusive(obj: dict[str, Any], rj: dict[str, Any]) -> str | None:
    """The topology key of a replicatedJob placed exclusively with JobSet's pod webhook strategy, or None: the key
    comes from the JobSet's annotations, then the Job template's (kubernetes-sigs/jobset
    ``pkg/controllers/jobset_controller.go`` ``labelAndAnnotateObject``), and ``pkg/webhooks/pod_webhook.go``
    ``ValidateCreate`` refuses each follower pod until its Job's leader is scheduled, but under ``node-selector``."""
    key = None
    for source in (get_path(obj, ("metadata", "annotations")), get_path(rj, ("template", "metadata", "annotations"))):
        if isinstance(source, dict) and EXCLUSIVE_TOPOLOGY in source:
            key = None if NODE_SELECTOR_STRATEGY in source else str(source[EXCLUSIVE_TOPOLOGY])
    return key


def replicated_jobs(obj: dict[str, Any], ref: str) -> list[dict[str, Any]]:
    """``[{"name", "index", "replicas", "pods_per_job", "pod_spec", "depends_on", "exclusive"}, ...]`` in spec order.

    ``pods_per_job`` = min(parallelism (default 1), completions) of the replicatedJob's Job template;
    ``depends_on`` = ``[(name, status), ...]`` from ``dependsOn`` (status ``"Ready"`` or ``"Complete"``, the JobSet
    API's ``DependsOnStatus``; a missing status reads as ``"Ready"``, today's stricter rule); ``exclusive`` = the
    topology key of JobSet's exclusive placement by pod webhook (:func:`_exclusive`), or None.

    Raises:
        GangError (400): no ``spec.replicatedJobs``, a replicatedJob that is not an object or has no Job pod
            template, a negative or non-integer count.
    """
    rjobs = get_path(obj, ("spec", "replicatedJobs"))
    if not isinstance(rjobs, list) or not rjobs:
        raise GangError(f"Add spec.replicatedJobs, at least one replicatedJob with a Job template: {ref} has none, and "
                        "a JobSet needs one", 400)
    out = []
    for i, rj in enumerate(rjobs):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            raise GangError(f"Make {where} a replicatedJob (name, replicas, template): {ref} has {clip(rj)} there",
                            400)
        name = str(rj.get("name") or f"#{i}")
        pod_spec = get_path(rj, ("template", "spec", "template", "spec"))
        if not isinstance(pod_spec, dict):
            raise GangError(f"Add a Job template with a pod template to {where} ({name}): {ref} has no "
                            f"{where}.template.spec.template.spec, and every replicatedJob needs one", 400)
        replicas = int_field(rj, ("replicas",), 1, f"{ref}: {where}.replicas")
        parallelism = int_field(rj, ("template", "spec", "parallelism"), 1, f"{ref}: {where}.template.spec.parallelism")
        completions = int_field(rj, ("template", "spec", "completions"), None,
                                f"{ref}: {where}.template.spec.completions")
        assert replicas is not None and parallelism is not None
        per_job = parallelism if completions is None else min(parallelism, completions)
        deps = rj.get("dependsOn")
        out.append({
            "name": name, "index": i, "replicas": replicas, "pods_per_job": per_job, "pod_spec": pod_spec,
            "depends_on": [(str(d.get("name")), "Complete" if d.get("status") == "Complete" else "Ready")
                           for d in deps if isinstance(d, dict)] if isinstance(deps, list) else [],
            "exclusive": _exclusive(obj, rj),
        })
    return out


def _trainer_ganged(obj: dict[str, Any], config: Config) -> str | None:
    """``"coscheduling"`` or ``"volcano"`` when Kubeflow Trainer gangs this JobSet (one a TrainJob controls) itself
    (its runtime's ``podGroupPolicy``: ``coscheduling.go`` / ``volcano.go`` ``EnforcePodGroupPolicy`` put the
    pod-group label or :data:`~admit.gang.foreign.VOLCANO_GROUP_NAME` on every pod template), else None."""
    if get_path(obj, ("metadata", "labels", config.managed_label)) is not None:
        return None  # admit labelled it (an earlier admission of this JobSet)
    for rj in get_path(obj, ("spec", "replicatedJobs")) or ():
        pod_meta = get_path(rj, ("template", "spec", "template", "metadata")) if isinstance(rj, dict) else None
        if not isinstance(pod_meta, dict):
            continue
        if get_path(pod_meta, ("annotations", VOLCANO_GROUP_NAME)) is not None:
            return "volcano"
        if get_path(pod_meta, ("labels", config.pod_group_label)) is not None:
            return "coscheduling"
    return None


#: How Kubeflow Trainer's own gang (:func:`_trainer_ganged`) marks the pod templates, and what it makes.
_TRAINER_GANGS = {"volcano": (f"carry {VOLCANO_GROUP_NAME} from", "a Volcano PodGroup"),
                  "coscheduling": ("were labelled by", "the PodGroup")}


def gang_members(rjobs: list[dict[str, Any]], in_order: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                      list[dict[str, Any]]]:
    """``(steps, members, first)`` of :func:`replicated_jobs` output (module docstring): the replicatedJobs another
    one waits to complete; the rest, in spec order; the members that wait for no member (the first under
    ``InOrder``). A ``dependsOn`` naming no replicatedJob is ignored (the JobSet webhook refuses it)."""
    if in_order:  # InOrder waits for each replicatedJob to be ready, never for one to complete
        return [], rjobs, rjobs[:1]
    by_name = {rj["name"]: rj for rj in rjobs}
    step_names = {dep for rj in rjobs for dep, status in rj["depends_on"] if status == "Complete" and dep in by_name}
    members = [rj for rj in rjobs if rj["name"] not in step_names]
    if not members:  # a cycle of Complete dependencies (refused by the JobSet webhook): count every replicatedJob
        members, step_names = rjobs, set()
    member_names = {rj["name"] for rj in members}
    waits: dict[str, bool] = {}

    def waits_for_member(name: str, seen: frozenset[str]) -> bool:
        if name not in waits:
            rj = by_name[name]
            waits[name] = any(
                dep in member_names or (dep in by_name and dep not in seen and waits_for_member(dep, seen | {dep}))
                for dep, _ in rj["depends_on"])
        return waits[name]

    first = [rj for rj in members if not waits_for_member(rj["name"], frozenset({rj["name"]}))]
    return [rj for rj in rjobs if rj["name"] in step_names], members, first


def resolve_jobset(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a JobSet (module docstring): ``targets`` the members' pod templates, ``total_pods`` the member pods
    that start first, ``min_resources`` a ResourceList of member pods (``{"cpu": "9", "memory": "18Gi"}``).

    Raises:
        GangError: 400 for a malformed JobSet (see :func:`replicated_jobs`); 403 for a gang that deadlocks under
            ``InOrder`` or ``dependsOn`` (``auto``, or a minMember above the pods that start first). For a JobSet
            made by Kubeflow Trainer the message names the TrainJob and fixes on it.
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref("JobSet", namespace, name)
    rjobs = replicated_jobs(obj, ref)
    in_order = get_path(obj, ("spec", "startupPolicy", "startupPolicyOrder")) == "InOrder"
    steps, members, first = gang_members(rjobs, in_order)
    targets = [template_target(("spec", "replicatedJobs", str(rj["index"]), "template", "spec", "template"),
                               f"replicatedJob {rj['name']}") for rj in members]
    if operation == "UPDATE":
        targets = [replace(t, immutable=True, where=f"{t.where} pod template (JobSet's update webhook keeps "
                                                   "spec.replicatedJobs immutable)") for t in targets]
    order_text = ("startupPolicyOrder: InOrder" if in_order else "dependsOn") if len(first) < len(members) else ""
    total_all = sum(rj["replicas"] * rj["pods_per_job"] for rj in members)
    total_first = sum(rj["replicas"] * rj["pods_per_job"] for rj in first)
    ordered = first + [rj for rj in members if rj not in first]

    plan = GangPlan(
        kind="JobSet", api_group=GROUP, name=name, namespace=namespace, group_name=name, min_member=1,
        total_pods=total_first, targets=targets,
        total_field=("Σ replicatedJobs[*].replicas × pods per Job" if not order_text and not steps
                     else f"pods of the replicatedJobs that start first ({', '.join(rj['name'] for rj in first)})"),
        schedule_timeout_seconds=ann.schedule_timeout_seconds,
    )
    owner = controller_owner(obj)
    trainjob = owner[2] if owner is not None and owner[:2] == (TRAINER_GROUP, "TrainJob") else None
    if trainjob is not None:
        ref = f"{ref} (made by Kubeflow Trainer for {object_ref('TrainJob', namespace, trainjob)})"
    trainer_gang = _trainer_ganged(obj, config) if trainjob is not None else None
    if trainer_gang is not None:
        how, makes = _TRAINER_GANGS[trainer_gang]
        return defer_to_operator(plan, f"its pod templates {how} Kubeflow Trainer for TrainJob {trainjob} (runtime "
                                 f"podGroupPolicy.{trainer_gang}: Trainer makes {makes})", config)
    plan.group_name = choose_group_name(obj, ann, targets, config, "JobSet", name)
    if steps:
        plan.notes.append(
            f"{ref}: replicatedJob(s) {', '.join(rj['name'] for rj in steps)} complete before the others start "
            f"(dependsOn status: Complete), so they are not in PodGroup {plan.group_name}: their pods carry no "
            f"{config.pod_group_label} label and are scheduled on their own")

    if order_text and total_first < total_all:
        _check_ordered_start(plan, ann, config, ref, order_text, in_order, total_first, total_all, trainjob)
    leaders = _exclusive_leaders(plan, ann, config, ref, first)
    if leaders is not None:
        total_first = plan.total_pods = leaders
    plan.min_member = gang_min_member(ann, total_first)
    lower = None  # the annotation of the object refused
    if trainjob is not None:  # Trainer copies the TrainJob's annotations: the user edits them there
        raise_fix = f"Raise spec.trainer.numNodes of TrainJob {namespace}/{trainjob}"
        lower = f"{config.min_member_key} on TrainJob {namespace}/{trainjob}"
    else:
        raise_fix = "Raise the replicatedJobs' replicas or their Jobs' parallelism"
    below_min_member(plan, ann, config, " + ".join(f"{rj['name']} {rj['replicas']} x {rj['pods_per_job']}" for rj in first),
                 raise_fix, ref=ref, lower=lower)
    _warn_on_recreate(obj, plan, config, ref, sum(rj["replicas"] for rj in members))
    for rj in rjobs:
        if rj["replicas"] == 0 or rj["pods_per_job"] == 0:
            plan.notes.append(f"{ref}: replicatedJob {rj['name']} runs no pods (replicas or parallelism 0)")
    # exclusive placement: the leaders pass only where every pod of the first members fits (as LWS's LeaderReady)
    covered = plan.min_member if leaders is None else sum(rj["replicas"] * rj["pods_per_job"] for rj in first)
    plan.min_resources = min_resources_of(
        [(rj["pod_spec"], rj["replicas"] * rj["pods_per_job"]) for rj in ordered], covered, ann, f"{ref} pod template")
    return plan


# kubernetes-sigs/jobset keps/969-WAS-integration (JobSetSpec.scheduling, gate JobSetWorkloadAwareSchedulingAPI):
# alpha with Kubernetes 1.37's building blocks; the field name is the KEP's, the Go types in api/ are unconfirmed here.
JOBSET = WorkloadKind(GROUP, "JobSet", (("v1alpha2", "jobsets"),), resolve_jobset, children=(("batch", "Job"),),
                    pod_joiner=None, pod_watch_selector=None, rollout=None, gang_from_parent=None, handover=None, allowed_backends=None, in_status=False,
                    controller_gang="the JobSet controller makes its Workload and PodGroups")

KINDS = (JOBSET,)


def _check_ordered_start(plan: GangPlan, ann: GangAnnotations, config: Config, ref: str, order_text: str,
                         in_order: bool, total_first: int, total_all: int, trainjob: str | None) -> None:
    """Refuse (``GangError``, 403) a gang of members that start in order (module docstring): ``auto`` or a minMember
    above ``total_first``, the fix on TrainJob ``trainjob`` when Trainer made the JobSet; else note it on ``plan``."""
    namespace = plan.namespace
    if trainjob is not None:
        fix = (f"Use a runtime whose trainer replicatedJobs start together, or set {config.min_member_key} on "
               f"TrainJob {namespace}/{trainjob} (admit passes it on to this JobSet)")
    else:
        fix = ("Set spec.startupPolicy.startupPolicyOrder to AnyOrder" if in_order
               else "Remove the dependsOn between gang members so that they start together")
    if ann.min_member is None:
        raise GangError(
            f"{fix}, or set {config.min_member_key} to at most {total_first} to gang only the pods that start first: "
            f"{ref} starts its replicatedJobs in order ({order_text}), only {total_first} of its {total_all} "
            f"pods start before the others wait for them to be Ready, so one gang of all {total_all} pods "
            "deadlocks (admit keeps one PodGroup per JobSet and does not split it per replicatedJob)"
        )
    if ann.min_member > total_first:
        raise GangError(
            f"{fix}, or set {config.min_member_key} to at most {total_first}: {ref} starts its replicatedJobs in "
            f"order ({order_text}), only {total_first} pod(s) start first, and the rest wait for them to be Ready, "
            f"so a gang of {ann.min_member} ({config.min_member_key}={ann.min_member}) deadlocks (admit does not "
            "split a JobSet into one gang per replicatedJob)"
        )
    plan.notes.append(
        f"{ref} starts its replicatedJobs in order ({order_text}): PodGroup {plan.group_name} gangs the first "
        f"{ann.min_member} pod(s); the pods of the later replicatedJobs join it once it runs"
    )


def _exclusive_leaders(plan: GangPlan, ann: GangAnnotations, config: Config, ref: str,
                       first: list[dict[str, Any]]) -> int | None:
    """Under exclusive placement, the pods of the ``first`` replicatedJobs that exist before the gang is placed (one
    leader per Job of an exclusive replicatedJob, all pods of the others), noted on ``plan``; else ``None``. A
    minMember above the leaders is refused (``GangError``, 403): the followers wait for a gang that waits for them."""
    exclusive = [rj for rj in first if rj["exclusive"] is not None and rj["pods_per_job"] > 1]
    if not exclusive:
        return None
    leaders = sum(rj["replicas"] * (1 if rj in exclusive else rj["pods_per_job"]) for rj in first)
    topology = ", ".join(sorted({f"{EXCLUSIVE_TOPOLOGY}={rj['exclusive']}" for rj in exclusive}))
    if ann.min_member is not None and ann.min_member > leaders:
        raise GangError(
            f"Set {config.min_member_key} to \"auto\" (the leaders, with minResources covering every pod) or at most "
            f"{leaders}, or use {NODE_SELECTOR_STRATEGY} (the strategy that holds no follower back): {ref} uses "
            f"JobSet's exclusive placement ({topology}), and JobSet's pod webhook refuses every follower pod until "
            f"its Job's leader pod is scheduled, so only {leaders} pod(s) (one leader per Job of "
            f"{', '.join(rj['name'] for rj in exclusive)}) exist before the gang is placed, and a gang of "
            f"{ann.min_member} ({config.min_member_key}={ann.min_member}) waits for followers that wait for it")
    plan.notes.append(
        f"{ref} uses JobSet's exclusive placement ({topology}): PodGroup {plan.group_name} gangs the "
        f"{leaders} pod(s) that exist before placement (one leader per Job); the followers are created once "
        "their leader is scheduled and join it, and minResources covers every pod")
    return leaders


def _warn_on_recreate(obj: dict[str, Any], plan: GangPlan, config: Config, ref: str, jobs: int) -> None:
    """Warn on ``plan`` when the JobSet restarts its ``jobs`` Jobs under ``restartStrategy: Recreate`` (the CRD's
    default): old pods still terminating count toward the new quorum (admit keeps one PodGroup per JobSet: one per
    attempt would need every pod relabelled at admission)."""
    policy = get_path(obj, ("spec", "failurePolicy"))
    if isinstance(policy, dict) and isinstance(policy.get("maxRestarts"), int) and policy["maxRestarts"] > 0 and \
            (policy.get("restartStrategy") or "Recreate") == "Recreate" and jobs > 1 and plan.min_member > 1:
        # jobset_types.go: Recreate "recreates each Job as soon as its previous iteration (and its Pods) is
        # deleted"; BlockingRecreate "ensures that all Jobs (and their Pods) from the previous iteration are deleted
        # before creating new Jobs" (constructJobsFromTemplate waits while ownedJobs.previous is not empty).
        plan.warnings.append(
            "set spec.failurePolicy.restartStrategy: BlockingRecreate when creating the JobSet: with Recreate, old "
            f"pods still terminating count toward the restarted gang's quorum of {plan.min_member}")
        plan.notes.append(
            f"{ref} restarts with failurePolicy.restartStrategy Recreate: JobSet re-creates each of its {jobs} Jobs "
            "as soon as that Job's own old pods are gone, while the other Jobs' old pods are still terminating and "
            f"still carry {config.pod_group_label}={plan.group_name}; Coscheduling counts those, so the new "
            f"attempt's first pods can pass the quorum before the rest exist (failurePolicy is immutable)")
