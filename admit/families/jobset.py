"""JobSet (``jobset.x-k8s.io/v1alpha2``): one gang over the whole JobSet; its Jobs are children.

Sources: kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go`` (fields and defaults),
``pkg/controllers/startup_policy.go`` (``inOrderStartupPolicy``, ``allReplicasStarted``), the JobSet docs
"Startup policy" sample (``startup-driver-ready``), and the JobSet webhook defaults (``startupPolicyOrder:
AnyOrder``).

- Pod templates: ``spec.replicatedJobs[i].template.spec.template`` (a Job template inside each replicatedJob). The
  JobSet controller copies it into each Job it creates (``<jobset>-<replicatedJob>-<index>``, controller
  ownerReference to the JobSet), so the Jobs' pods carry admit's label; the Jobs are children (``admit.children``)
  and never gangs of their own.
- Pods at once: Σ over replicatedJobs of ``replicas`` (default 1) × the Job's pods at once: ``parallelism``
  (default 1) capped by ``completions`` (Kubernetes docs "Jobs", parallel execution), as for a plain Job.
- Order: ``spec.startupPolicy.startupPolicyOrder: InOrder`` creates replicatedJob N+1 only once every Job of
  replicatedJob N is ready; a replicatedJob with ``dependsOn`` waits for the named ones (``Ready`` or ``Complete``).
  The pods that start first are then those of the first replicatedJob (InOrder) or of the replicatedJobs without
  ``dependsOn``. admit keeps one PodGroup per JobSet and does **not** split it into one per replicatedJob: a gang
  larger than the pods that start first deadlocks (the later pods wait for the earlier ones to be Ready, which wait
  for the gang), so ``auto`` and any minMember above that count are refused with a message naming both fixes
  (``startupPolicyOrder: AnyOrder``, or a min-member no larger than the first pods). An explicit minMember within
  the first pods is allowed, with a warning that only those are ganged.
- ``minResources``: the requests of the first minMember pods, taking replicatedJobs in their start order.
- A JobSet made by Kubeflow Trainer (controller ownerReference to a ``trainer.kubeflow.org`` TrainJob) whose pod
  templates already carry the pod-group label without admit's managed label was labelled by Trainer's
  ``podGroupPolicy.coscheduling`` plugin, which also makes the PodGroup: admit defers (``admit.families.trainer``).
"""

from __future__ import annotations

from typing import Any

from ..config import Config
from ..plan import GangAnnotations, GangError, GangPlan, choose_group_name, get_path, int_field
from .shared import (
    WorkloadKind,
    controller_owner,
    defer_to_operator,
    gang_min_member,
    min_resources_of,
    object_ref,
    refuse_below,
    template_target,
)

__all__ = ["JOBSET", "resolve_jobset", "replicated_jobs", "KINDS"]

GROUP = "jobset.x-k8s.io"
TRAINER_GROUP = "trainer.kubeflow.org"


def replicated_jobs(obj: dict[str, Any], ref: str) -> list[dict[str, Any]]:
    """``[{"name", "index", "replicas", "pods_per_job", "pod_spec", "depends_on"}, ...]`` in spec order.

    ``pods_per_job`` = min(parallelism (default 1), completions) of the replicatedJob's Job template.

    Raises:
        GangError (400): no ``spec.replicatedJobs``, a replicatedJob that is not an object or has no Job pod
            template, a negative or non-integer count.
    """
    rjobs = get_path(obj, ("spec", "replicatedJobs"))
    if not isinstance(rjobs, list) or not rjobs:
        raise GangError(f"{ref} has no spec.replicatedJobs: a JobSet needs at least one replicatedJob with a Job template",
                        400)
    out = []
    for i, rj in enumerate(rjobs):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            raise GangError(f"{ref}: {where} must be a replicatedJob (name, replicas, template), got {rj!r}", 400)
        name = str(rj.get("name") or f"#{i}")
        pod_spec = get_path(rj, ("template", "spec", "template", "spec"))
        if not isinstance(pod_spec, dict):
            raise GangError(f"{ref}: {where} ({name}) has no template.spec.template.spec: every replicatedJob needs a "
                            "Job template with a pod template", 400)
        replicas = int_field(rj, ("replicas",), 1, f"{ref}: {where}.replicas")
        parallelism = int_field(rj, ("template", "spec", "parallelism"), 1, f"{ref}: {where}.template.spec.parallelism")
        completions = int_field(rj, ("template", "spec", "completions"), None,
                                f"{ref}: {where}.template.spec.completions")
        assert replicas is not None and parallelism is not None
        per_job = parallelism if completions is None else min(parallelism, completions)
        deps = rj.get("dependsOn")
        out.append({
            "name": name, "index": i, "replicas": replicas, "pods_per_job": per_job, "pod_spec": pod_spec,
            "depends_on": [str(d.get("name")) for d in deps if isinstance(d, dict)] if isinstance(deps, list) else [],
        })
    return out


def _trainer_ganged(obj: dict[str, Any], config: Config) -> bool:
    owner = controller_owner(obj)
    if owner is None or owner[:2] != (TRAINER_GROUP, "TrainJob"):
        return False
    if get_path(obj, ("metadata", "labels", config.managed_label)) is not None:
        return False  # admit labelled it (an earlier admission of this JobSet)
    for rj in get_path(obj, ("spec", "replicatedJobs")) or ():
        if isinstance(rj, dict) and get_path(rj, ("template", "spec", "template", "metadata", "labels",
                                                  config.pod_group_label)) is not None:
            return True
    return False


def resolve_jobset(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str) -> GangPlan:
    """Plan for a JobSet (rules in the module docstring).

    ``total_pods`` is the number of pods that start without waiting for another replicatedJob; ``min_resources``
    a ResourceList (``{"cpu": "9", "memory": "18Gi"}``).

    Raises:
        GangError: 400 for a malformed JobSet (see :func:`replicated_jobs`); 403 for a gang that deadlocks under
            ``InOrder`` or ``dependsOn`` (``auto``, or a minMember above the pods that start first).
    """
    name = str(get_path(obj, ("metadata", "name")) or "")
    ref = object_ref("JobSet", namespace, name)
    rjobs = replicated_jobs(obj, ref)
    targets = [
        template_target(("spec", "replicatedJobs", str(rj["index"]), "template", "spec", "template"),
                        f"replicatedJob {rj['name']}")
        for rj in rjobs
    ]
    in_order = get_path(obj, ("spec", "startupPolicy", "startupPolicyOrder")) == "InOrder"
    if in_order:
        first = rjobs[:1]
        order_text = "startupPolicyOrder: InOrder"
    elif any(rj["depends_on"] for rj in rjobs):
        first = [rj for rj in rjobs if not rj["depends_on"]]
        order_text = "dependsOn"
    else:
        first, order_text = rjobs, ""
    total_all = sum(rj["replicas"] * rj["pods_per_job"] for rj in rjobs)
    total_first = sum(rj["replicas"] * rj["pods_per_job"] for rj in first)
    ordered = rjobs if not order_text else first + [rj for rj in rjobs if rj not in first]

    plan = GangPlan(
        kind="JobSet", api_group=GROUP, name=name, namespace=namespace, group_name=name, min_member=1,
        total_pods=total_first, targets=targets,
        total_field=("Σ replicatedJobs[*].replicas × pods per Job" if not order_text
                     else f"pods of the replicatedJobs that start first ({', '.join(rj['name'] for rj in first)})"),
        schedule_timeout_seconds=ann.schedule_timeout_seconds,
    )
    if _trainer_ganged(obj, config):
        owner = controller_owner(obj)
        assert owner is not None
        return defer_to_operator(
            plan, f"its pod templates were labelled by Kubeflow Trainer for TrainJob {owner[2]} (runtime "
            "podGroupPolicy.coscheduling: Trainer makes the PodGroup)", config)
    plan.group_name = choose_group_name(obj, ann, targets, config, "JobSet", name)

    if order_text and total_first < total_all:
        fix = ("set spec.startupPolicy.startupPolicyOrder: AnyOrder" if in_order
               else "remove dependsOn so that all replicatedJobs start together")
        if ann.min_member is None:
            raise GangError(
                f"{ref} starts its replicatedJobs in order ({order_text}): only {total_first} of its {total_all} pods "
                f"start before the others wait for them to be Ready, so one gang of all {total_all} pods deadlocks. "
                f"admit keeps one PodGroup per JobSet and does not split it per replicatedJob; {fix}, or set "
                f"{config.min_member_key} to at most {total_first} to gang only the pods that start first"
            )
        if ann.min_member > total_first:
            raise GangError(
                f"{ref} starts its replicatedJobs in order ({order_text}): only {total_first} pod(s) start first, "
                f"and the rest wait for them to be Ready, so a gang of {ann.min_member} "
                f"({config.min_member_key}={ann.min_member}) deadlocks. admit does not split a JobSet into one gang "
                f"per replicatedJob; {fix}, or set {config.min_member_key} to at most {total_first}"
            )
        plan.warnings.append(
            f"{ref} starts its replicatedJobs in order ({order_text}): PodGroup {plan.group_name} gangs the first "
            f"{ann.min_member} pod(s); the pods of the later replicatedJobs join it once it runs"
        )
    plan.min_member = gang_min_member(ann, total_first)
    refuse_below(plan, ann, config, " + ".join(f"{rj['name']} {rj['replicas']} x {rj['pods_per_job']}" for rj in first),
                 "Raise the replicatedJobs' replicas or their Jobs' parallelism")
    for rj in rjobs:
        if rj["replicas"] == 0 or rj["pods_per_job"] == 0:
            plan.warnings.append(f"{ref}: replicatedJob {rj['name']} runs no pods (replicas or parallelism 0)")
    plan.min_resources = min_resources_of(
        [(rj["pod_spec"], rj["replicas"] * rj["pods_per_job"]) for rj in ordered], plan.min_member, ann, ref)
    return plan


JOBSET = WorkloadKind(GROUP, "JobSet", (("v1alpha2", "jobsets"),), resolve_jobset, children=(("batch", "Job"),))

KINDS = (JOBSET,)
