"""Wrapper kinds whose controller makes another gang kind's objects from a template on a schedule, and copies none of
the wrapper's annotations onto them: ScheduledSparkApplication (``sparkoperator.k8s.io/v1beta2``, its
SparkApplications) and RayCronJob (``ray.io/v1``, its RayJobs). A batch/v1 CronJob is the same idea with the
annotations copied (``admit.families.apps.resolve_cronjob``).

Sources: kubeflow/spark-operator v2.5.2 ``internal/controller/scheduledsparkapplication/controller.go``
``createSparkApplication`` (:func:`scheduled_run`; ``concurrencyPolicy``, ``Allow`` by default, may run several at
once) and ray-project/kuberay v1.7.0 ``ray-operator/controllers/ray/raycronjob_controller.go`` ``constructRayJob``
(:func:`ray_cron_run`; feature gate ``RayCronJob``, alpha, off by default, ``pkg/features/features.go``; no
concurrency policy: every tick makes a RayJob).

So the gang annotations a user writes on the wrapper's own metadata never reach a run by themselves. admit:

- **judges** the wrapper by the run it makes (built as the operator builds it, with the wrapper's gang annotations
  on the run's metadata) at the wrapper's CREATE and UPDATE: what the run's admission would refuse is refused here,
  named after the wrapper and its template's fields, instead of on every schedule in the operator's log;
- **carries** the annotations through the template (``shared.Carry``: :data:`SPARK_CARRY`, the driver pod's
  annotations; :data:`RAY_CARRY`, the head pod's) onto each run's own ``metadata.annotations``: each run is then a
  gang of its own, named after it (a RayJob's through the RayCluster KubeRay makes with its annotations).
  ``gang.admit.dev/pod-group`` is not carried: every run would name one PodGroup (a warning says so).

The wrapper itself gets no PodGroup, no pod-group label and no ``schedulerName`` (its runs get them at their own
admission) and the controller does not watch it (``WorkloadKind.unwatched``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import partial
from typing import Any, Callable

from ..config import Config
from ..gang.patch import pointer, set_keys_ops
from ..gang.plan import BelowMinMember, GangAnnotations, GangError, GangPlan, Resolver, get_map, get_path
from .ray import RAYJOB
from .shared import Carry, WorkloadKind, object_ref
from .spark import SPARK_APPLICATION, resolve_spark_application

__all__ = ["SCHEDULED_SPARK_APPLICATION", "RAY_CRON_JOB", "KINDS", "scheduled_run", "ray_cron_run", "carried_keys",
           "carry_ops", "EXAMPLE_TIME"]

#: The scheduled time a wrapper is judged by (2025-02-19 21:20 UTC); only the run's name depends on it.
EXAMPLE_TIME = datetime(2025, 2, 19, 21, 20, tzinfo=timezone.utc)
SCHEDULED_APP_LABEL = "sparkoperator.k8s.io/scheduled-app-name"
RAY_CRONJOB_LABEL = "ray.io/cronjob-name"
RAY_CRONJOB_TIMESTAMP = "ray.io/cronjob-scheduled-timestamp"
#: The 5 characters kube-apiserver appends to a ``generateName`` (``names.SimpleNameGenerator``): a wrapper created
#: with ``generateName`` only is judged by the runs of an object named ``<generateName>x7k2p``.
GENERATED_SUFFIX = "x7k2p"


def scheduled_run(sched: dict[str, Any], namespace: str, when: datetime = EXAMPLE_TIME) -> dict[str, Any]:
    """The SparkApplication the spark-operator v2.5.2 makes from ScheduledSparkApplication ``sched`` at ``when``
    (``controller.go`` ``createSparkApplication``; pure): name ``<name>-<nanoseconds>`` (``formatTimestamp`` at the
    default precision of the flag ``--scheduled-spark-application-timestamp-precision``, ``nanos``: 19 digits), the
    labels of ``sched`` plus ``sparkoperator.k8s.io/scheduled-app-name``, no annotations, an ownerReference with
    ``blockOwnerDeletion`` and no ``controller``, ``spec`` a deep copy of ``spec.template``."""
    meta = get_map(sched, ("metadata",))
    name = str(meta.get("name") or "")
    nanos = int(when.timestamp()) * 1_000_000_000
    template = get_path(sched, ("spec", "template"))
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": f"{name}-{nanos}", "namespace": namespace,
                         "labels": {SCHEDULED_APP_LABEL: name, **get_map(meta, ("labels",))},
                         "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                              "kind": "ScheduledSparkApplication", "name": name,
                                              "uid": str(meta.get("uid") or ""), "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy(template) if isinstance(template, dict) else {}}


def ray_cron_run(cron: dict[str, Any], namespace: str, when: datetime = EXAMPLE_TIME) -> dict[str, Any]:
    """The RayJob KubeRay v1.7.0 makes from RayCronJob ``cron`` for the scheduled time ``when``
    (``raycronjob_controller.go`` ``constructRayJob``, ``getRayJobName``; pure): name ``<name>-<minutes since the
    epoch>``, the label ``ray.io/cronjob-name``, the annotation ``ray.io/cronjob-scheduled-timestamp`` (RFC 3339,
    UTC) and no other, a controller ownerReference (``controller`` and ``blockOwnerDeletion`` true), ``spec`` a deep
    copy of ``spec.jobTemplate`` (a RayJobSpec, ``apis/ray/v1/raycronjob_types.go``)."""
    meta = get_map(cron, ("metadata",))
    name = str(meta.get("name") or "")
    template = get_path(cron, ("spec", "jobTemplate"))
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": f"{name}-{int(when.timestamp()) // 60}", "namespace": namespace,
                         "labels": {RAY_CRONJOB_LABEL: name},
                         "annotations": {RAY_CRONJOB_TIMESTAMP: when.strftime("%Y-%m-%dT%H:%M:%SZ")},
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCronJob", "name": name,
                                              "uid": str(meta.get("uid") or ""), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy(template) if isinstance(template, dict) else {}}


def carried_keys(config: Config) -> tuple[str, ...]:
    """The annotations a wrapper's template carries to its runs: the gang settings a run reads
    (``gang.plan.parse_gang_annotations``) except ``<prefix>/pod-group``, which would put every run in one PodGroup."""
    return (config.min_member_key, config.timeout_key, config.min_resources_key, config.backend_key)


def carry_ops(obj: dict[str, Any], carry: Carry, plan: GangPlan | None, config: Config) -> list[dict[str, Any]]:
    """JSONPatch operations that make the carried map of wrapper ``obj`` (``carry.in_wrapper``) hold exactly the
    wrapper's gang annotations among :func:`carried_keys` (``plan``'s ``template_annotations``), touching no other
    key: added or changed when ``plan`` gangs the runs, removed when ``plan`` is ``None`` (the gang annotation was
    removed) or leaves the runs to their operator (``plan.mutate`` off)."""
    want = dict(plan.template_annotations) if plan is not None and plan.mutate else {}
    ops = set_keys_ops(obj, carry.in_wrapper, want) if want else []
    there = get_map(obj, carry.in_wrapper)
    ops.extend({"op": "remove", "path": pointer(carry.in_wrapper + (key,))}
               for key in carried_keys(config) if key in there and key not in want)
    return ops


@dataclass(frozen=True, slots=True)
class _Wrapper:
    group: str
    kind: str
    make: Callable[[dict[str, Any], str], dict[str, Any]]
    resolve: Resolver
    carry: Carry


def _in_template(text: str, run_ref: str, ref: str, w: _Wrapper, *, lead: bool = False) -> str:
    """A run's message said of the wrapper: the run named as "each <Kind> of <wrapper>" (with ``lead``, a refusal
    that starts with the run's name loses it: the caller names the wrapper first), the names made from the run's
    (``<name>-<scheduled time>``) and its ``spec.*`` paths moved under the wrapper's template."""
    text = (text.removeprefix(f"{run_ref}: ") if lead else text).replace(run_ref, f"each {run_ref.split()[0]} of {ref}")
    run_name = run_ref.rpartition("/")[2]
    text = text.replace(run_name, f"{run_name.rpartition('-')[0]}-<scheduled time>")
    return re.sub(r"(?<![\w./-])spec\.", f"{'.'.join(w.carry.template)}.", text)


def _resolve_wrapper(obj: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str,
                     w: _Wrapper) -> GangPlan:
    """Plan for wrapper ``w``: its run's CREATE plan and refusals said of the wrapper (module docstring), no PodGroup
    and no marks of its own, the gang annotations to carry in ``template_annotations`` (:func:`carry_ops`)."""
    meta = get_map(obj, ("metadata",))
    name = str(meta.get("name") or "")
    ref = object_ref(w.kind, namespace, name or str(meta.get("generateName") or ""))
    if not name and meta.get("generateName"):  # judged with a name as kube-apiserver makes it: generateName + 5
        obj = {**obj, "metadata": {**meta, "name": f"{meta['generateName']}{GENERATED_SUFFIX}"}}
    run = w.make(obj, namespace)
    own = get_map(obj, ("metadata", "annotations"))
    run["metadata"]["annotations"] = {**get_map(run, ("metadata", "annotations")),
                                      **{k: own[k] for k in carried_keys(config) if k in own}}
    run_ref = object_ref(run["kind"], namespace, run["metadata"]["name"])
    reword = lambda text: _in_template(text, run_ref, ref, w)  # noqa: E731
    try:
        plan = w.resolve(run, replace(ann, pod_group=None), config, namespace, "CREATE")
    except BelowMinMember as e:
        raise BelowMinMember(f"{ref}: each {run['kind']} it creates", e.total, reword(e.counted), e.min_member,
                             e.source, reword(e.fix), e.lower, e.backend) from None
    except GangError as e:
        raise GangError(f"{_in_template(e.message, run_ref, ref, w, lead=True)} ({ref}: each {run['kind']} it "
                        "creates would be refused)", e.code) from None
    carried = {k: str(own[k]) for k in carried_keys(config) if isinstance(own.get(k), str)}
    out = replace(plan, kind=w.kind, api_group=w.group, name=str(get_path(obj, ("metadata", "name")) or ""),
                  targets=[], min_resources=None, create_pod_group=False, extra_ops=[], runtime_class=None,
                  template_annotations=carried if plan.mutate else {}, operator_notice="", last_wave=None,
                  warnings=[reword(x) for x in plan.warnings], notes=[reword(x) for x in plan.notes],
                  refusal_note=reword(plan.refusal_note))
    kind = run["kind"]
    if config.pod_group_key in own:
        out.warnings.append(f"remove {config.pod_group_key}: every {kind} {ref} makes would name that one "
                            f"PodGroup, and each needs its own (named after it); admit does not carry it")
    if plan.mutate:
        out.notes.append(
            f"{ref}: each {kind} it makes is a gang of its own (minMember {out.min_member}); its template carries the "
            f"gang annotations ({'.'.join(w.carry.in_wrapper)}, which the operator copies onto each {kind} and does "
            f"not read), and admit puts them on each {kind}'s metadata when it is created")
    return out


SPARK_CARRY = Carry(("sparkoperator.k8s.io", "SparkApplication"), ("spec", "template"), ("driver", "annotations"))
RAY_CARRY = Carry(("ray.io", "RayJob"), ("spec", "jobTemplate"),
                  ("rayClusterSpec", "headGroupSpec", "template", "metadata", "annotations"))
_SCHEDULED = _Wrapper("sparkoperator.k8s.io", "ScheduledSparkApplication", scheduled_run, resolve_spark_application,
                      SPARK_CARRY)
_RAY_CRON = _Wrapper("ray.io", "RayCronJob", ray_cron_run, RAYJOB.resolve, RAY_CARRY)

SCHEDULED_SPARK_APPLICATION = WorkloadKind(
    "sparkoperator.k8s.io", "ScheduledSparkApplication", (("v1beta2", "scheduledsparkapplications"),),
    partial(_resolve_wrapper, w=_SCHEDULED), pod_joiner=None, pod_watch_selector=None, rollout=None,
    controller_gang=None, gang_from_parent=None, handover=None, allowed_backends=SPARK_APPLICATION.allowed_backends,
    in_status=False, carry=SPARK_CARRY,
    unwatched="no gang object belongs to a ScheduledSparkApplication: each SparkApplication it makes claims its own "
              "PodGroup, and the controller watches SparkApplications")

RAY_CRON_JOB = WorkloadKind(
    "ray.io", "RayCronJob", (("v1", "raycronjobs"),), partial(_resolve_wrapper, w=_RAY_CRON), pod_joiner=None,
    pod_watch_selector=None, rollout=None, controller_gang=None, gang_from_parent=None, handover=None,
    allowed_backends=None, in_status=False, carry=RAY_CARRY,
    unwatched="no gang object belongs to a RayCronJob: each RayCluster KubeRay makes for one of its RayJobs claims "
              "its own PodGroup, and the controller watches RayClusters")

KINDS = (SCHEDULED_SPARK_APPLICATION, RAY_CRON_JOB)
