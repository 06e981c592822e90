"""The ``coscheduling`` gang backend: scheduler-plugins' PodGroup (scheduling.x-k8s.io/v1alpha1). Pure.

Today's behaviour, unchanged: the objects, spec comparison and ownership rules live in ``admit/backends/coscheduling/podgroup.py`` and the
pod template patch (label ``scheduling.x-k8s.io/pod-group`` + ``schedulerName``) in ``admit/webhook/mutate.py``
(``plan_patch``); this module gives them the same shape as ``backends/workload_api.py`` so that callers can treat
both backends alike. Source of the shapes: kubernetes-sigs/scheduler-plugins ``apis/scheduling/v1alpha1/types.go``.
"""

from __future__ import annotations

from typing import Any

from ...config import Config
from ...gang.patch import pointer
from ...gang.plan import GangPlan, PodTarget, get_path
from .podgroup import Ownership, desired_pod_group, ownership, spec_differs, spec_json_patch

__all__ = ["desired_objects", "spec_differs", "update_ops", "ownership", "template_joined", "switch_back_ops",
           "Ownership"]


def desired_objects(plan: GangPlan, config: Config) -> list[dict[str, Any]]:
    """``[PodGroup]`` (``podgroup.desired_pod_group``): the one object a Coscheduling gang needs."""
    return [desired_pod_group(plan, config)]


def update_ops(existing: dict[str, Any], desired: dict[str, Any], version: str = "") -> list[dict[str, Any]]:
    """JSON patch making the PodGroup's managed spec fields equal ``desired``'s (never ``None``: every field of a
    scheduler-plugins PodGroup spec may change)."""
    return spec_json_patch(existing, desired["spec"]) if spec_differs(existing, desired["spec"]) else []


def template_joined(obj: dict[str, Any], target: PodTarget, plan: GangPlan, config: Config) -> bool:
    """True when the target's pods carry the plan's pod-group label (so they will wait on its PodGroup)."""
    return get_path(obj, target.labels + (config.pod_group_label,)) == plan.group_name


def switch_back_ops(obj: dict[str, Any], plan: GangPlan, config: Config) -> list[dict[str, Any]]:
    """On a workload admit ganged before (its ``<prefix>/managed`` label) that moves back from the ``workload-api``
    backend: remove the ``spec.schedulingGroup`` admit put on its mutable pod templates (it names this group).
    Empty for every object that never used the other backend."""
    if get_path(obj, ("metadata", "labels", config.managed_label)) != "true":
        return []
    ops = []
    for target in plan.targets:
        spec = target.scheduler[:-1]
        if not target.immutable and get_path(obj, spec + ("schedulingGroup", "podGroupName")) == plan.group_name:
            ops.append({"op": "remove", "path": pointer(spec + ("schedulingGroup",))})
    return ops
