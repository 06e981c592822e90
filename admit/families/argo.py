"""Argo Workflows step pods (and Kubeflow Pipelines' on Argo): pods whose controller is a ``Workflow``
(``argoproj.io/v1alpha1``), ganged by their own annotations as bare pods of a shared group whose size follows the
members still to run.

Sources: argoproj/argo-workflows v4.1.2 ``workflow/controller/workflowpod.go``: ``createWorkflowPod`` gives every
step pod one controller ownerReference to its Workflow (``metav1.NewControllerRef(woc.wf, ...WithKind("Workflow"))``),
the label ``workflows.argoproj.io/workflow: <workflow>`` and the annotation ``workflows.argoproj.io/node-name``, and
``addMetadata`` copies the Workflow's ``spec.podMetadata`` and the template's ``metadata`` annotations and labels
onto it, after the template was substituted whole (``workflow/common/util.go`` ``SubstituteParams``: a template's
metadata may use ``{{workflow.name}}``). No one can annotate a Workflow's pod template for admit, and the Workflow
is no gang workload (its steps run one after another), so a step pod that carries the gang annotations is a member of
a group bare pods share (``apps.resolve_pod``): ``gang.admit.dev/pod-group`` names the group (default: the
Workflow's name), ``gang.admit.dev/min-member`` its size.

The group's size follows the members still to run (``GangPlan.follows_members``): a member that succeeded never runs
again and kube-scheduler no longer counts it, so a retried member (``retryStrategy``: a new pod for the node) would
wait for ever for a group that keeps its size (argo-workflows#734, volcano#2720). At each member's admission the
admission engine reads the group's pods, and once one has finished the size is the members still to run and not yet
placed (``backends.coscheduling.podgroup.members_still_to_run``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config import Config
from ..gang.plan import GangAnnotations, GangPlan, check_group_name, get_path
from .apps import POD, resolve_pod
from .shared import controller_owner

__all__ = ["step_pod", "resolve_step_pod", "WORKFLOW", "WORKFLOW_LABEL", "NODE_NAME"]

#: The controller kind of a step pod: ``(API group, kind)``.
WORKFLOW = ("argoproj.io", "Workflow")
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_NAME = "workflows.argoproj.io/node-name"


def step_pod(pod: Any) -> bool:
    """True when ``pod``'s controller ownerReference is an Argo ``Workflow`` (a step pod)."""
    if not isinstance(pod, dict):
        return False
    owner = controller_owner(pod)
    return owner is not None and (owner[0], owner[1]) == WORKFLOW


def resolve_step_pod(pod: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
                     ) -> GangPlan:
    """Plan for an Argo step pod with the gang annotations (module docstring): a bare pod of a shared group
    (``apps.resolve_pod``) that follows its members; without ``gang.admit.dev/pod-group`` (or the group label) the
    group is named after the Workflow, with a note.

    Raises:
        GangError: as ``apps.resolve_pod``.
    """
    owner = controller_owner(pod)
    workflow = owner[2] if owner is not None else ""
    label = get_path(pod, POD.labels + (config.pod_group_label,))
    default = (ann.pod_group is None and label in (None, workflow) and bool(workflow)
               and check_group_name(workflow) is None)  # the label admit's mutation gave it: the default again
    plan = resolve_pod(pod, replace(ann, pod_group=workflow) if default else ann, config, namespace, operation)
    plan.follows_members = True
    node = get_path(pod, ("metadata", "annotations", NODE_NAME))
    ref = f"step {node}" if isinstance(node, str) and node else plan.ref
    if default:
        plan.notes.append(
            f"{ref} of Workflow {namespace}/{workflow}: PodGroup {plan.group_name} is named after the Workflow; give "
            f'each gang step of it its own group ({config.pod_group_key}: "{{{{workflow.name}}}}-<step>" in the '
            "template's metadata.annotations)")
    plan.notes.append(
        f"{ref}: PodGroup {plan.group_name} (minMember {plan.min_member}) is shared by the step's pods and sized to "
        "its members still to run: a retried member does not wait for those that succeeded")
    return plan
