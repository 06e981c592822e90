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

The group's size follows the members still to run (``GangPlan.follows_members``,
``backends.coscheduling.podgroup.members_still_to_run``): a member that succeeded never runs again and kube-scheduler
no longer counts it, so a retried member (``retryStrategy``: a new pod for the node) would wait for ever for a group
that keeps its size (argo-workflows#734, volcano#2720). Argo's pod GC deletes finished pods (``spec.podGC``,
``workflow/controller/pod/cleanup.go`` ``determinePodCleanupAction``), so the controller records the members that
succeeded on the group's objects (``backends.common.succeeded_record``), which an ownerReference to the Workflow
keeps (``GangPlan.kept_by``) while a retry waits out its backoff with no member left.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..config import Config
from ..echo import clip_message
from ..gang.foreign import KUEUE_TOTAL_COUNT
from ..gang.ownerrefs import controller_ref
from ..gang.patch import set_keys_ops
from ..gang.plan import (MEMBER, GangAnnotations, GangError, GangPlan, check_group_name, get_map, get_path,
                         parse_gang_annotations)
from .apps import POD, resolve_pod
from .shared import controller_owner

__all__ = ["step_pod", "resolve_step_pod", "workflow_review", "review_step_pods", "WORKFLOW", "WORKFLOW_LABEL",
           "NODE_NAME", "TEMPLATES"]

#: The controller kind of a step pod: ``(API group, kind)``.
WORKFLOW = ("argoproj.io", "Workflow")
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
NODE_NAME = "workflows.argoproj.io/node-name"


#: Where each Argo kind keeps its templates (``pkg/apis/workflow/v1alpha1``: ``WorkflowSpec.Templates``; a
#: CronWorkflow's ``spec.workflowSpec``).
TEMPLATES: dict[str, tuple[str, ...]] = {
    "Workflow": ("spec", "templates"), "WorkflowTemplate": ("spec", "templates"),
    "ClusterWorkflowTemplate": ("spec", "templates"), "CronWorkflow": ("spec", "workflowSpec", "templates")}


def step_pod(pod: Any) -> bool:
    """True when ``pod``'s controller ownerReference is an Argo ``Workflow`` (a step pod)."""
    owner = controller_owner(pod)  # None for a pod that is no object (ownerrefs.controller_ref)
    return owner is not None and (owner[0], owner[1]) == WORKFLOW


def resolve_step_pod(pod: dict[str, Any], ann: GangAnnotations, config: Config, namespace: str, operation: str
                     ) -> GangPlan:
    """Plan for an Argo step pod with the gang annotations (module docstring); without ``gang.admit.dev/pod-group``
    (or the group label) the group is named after the Workflow, with a note.

    ``auto`` is refused unless Kueue gives the count (``kueue.x-k8s.io/pod-group-total-count``): a step pod carries
    no count of its siblings (``createWorkflowPod`` sets its node's name and id, not the fan-out's size: ``steps.go``
    ``expandStep`` makes one step per ``withItems``/``withParam`` item and the template's or Workflow's
    ``parallelism`` bounds how many run at once, ``operator.go`` ``checkParallelism``), and a refused pod is the
    node's error message in the Workflow, where a warning would reach only the workflow controller's log.

    Raises:
        GangError: as ``apps.resolve_pod``; ``auto`` with no Kueue count (400).
    """
    owner = controller_owner(pod)
    workflow = owner[2] if owner is not None else ""
    label = get_path(pod, POD.labels + (config.pod_group_label,))
    default = (ann.pod_group is None and label in (None, workflow) and bool(workflow)
               and check_group_name(workflow) is None)  # the label admit's mutation gave it: the default again
    plan = resolve_pod(pod, replace(ann, pod_group=workflow) if default else ann, config, namespace, operation)
    node = get_path(pod, ("metadata", "annotations", NODE_NAME))
    ref = f"step {node}" if isinstance(node, str) and node else plan.ref
    if not plan.size_known:  # auto, and no Kueue count: Argo tells a step pod nothing of its siblings
        raise GangError(
            f"Set {config.min_member_key} in the metadata.annotations of the template of {ref[:120]} to the number of "
            'the step\'s pods that start together (its withItems or withParam items, at most its parallelism), e.g. '
            f'"3" or "{{{{inputs.parameters.world-size}}}}": auto has no count to read on an Argo step pod', 400)
    plan.follows_members = True
    kept_by = controller_ref(pod) or {}
    if kept_by.get("uid"):  # the group lives as long as its Workflow, however long a retry waits with no member left
        plan.kept_by = [{k: kept_by.get(k) for k in ("apiVersion", "kind", "name", "uid")}]
    plan.extra_ops = set_keys_ops(pod, POD.labels, {config.managed_label: MEMBER})  # the controller watches members
    if default:
        plan.notes.append(
            f"{ref} of Workflow {namespace}/{workflow}: PodGroup {plan.group_name} is named after the Workflow; give "
            f'each gang step of it its own group ({config.pod_group_key}: "{{{{workflow.name}}}}-<step>" in the '
            "template's metadata.annotations)")
    plan.notes.append(
        f"{ref}: PodGroup {plan.group_name} (minMember {plan.min_member}) is shared by the step's pods and sized to "
        "its members still to run: a retried member does not wait for those that succeeded")
    return plan


def _run_name(meta: dict[str, Any]) -> str:
    """``{{workflow.name}}`` as Argo substitutes it (``SubstituteParams``): the name, or generateName + 5
    characters."""
    return str(meta.get("name") or f"{meta.get('generateName') or ''}x7k2p")


def review_step_pods(doc: dict[str, Any], config: Config, namespace: str) -> dict[str, dict[str, Any]]:
    """The first step pod Argo's workflow controller would create from each template of ``doc`` (a ``Workflow`` or
    another kind of :data:`TEMPLATES`; ``{}`` for another kind) whose ``metadata.annotations`` name admit's prefix
    and use no Argo variable but ``{{workflow.name}}``, keyed by template name: what ``admit review`` runs through the
    pod webhook, so the review of a Workflow judges its steps by the rule that judges their pods in a cluster (a
    backend that cannot follow the group's members refuses each of them: ``backends.apply_backend``).

    The pod is shaped as argo-workflows v4.1.2 ``workflow/controller/workflowpod.go`` ``createWorkflowPod`` makes it,
    as far as admit reads it: one controller ownerReference to the Workflow (``NewControllerRef``), the label
    :data:`WORKFLOW_LABEL`, the annotation :data:`NODE_NAME`, the Workflow's ``spec.podMetadata`` then the template's
    ``metadata`` copied on (``addMetadata``, after ``SubstituteParams``), the template's ``schedulerName`` else the
    Workflow's (``addSchedulingConstraints``), and the template's ``container`` (or ``script``) as the ``main``
    container after the executor's ``wait``. The Workflow's uid is made up when the manifest has none. Pure."""
    path = TEMPLATES.get(str(doc.get("kind") or ""))
    templates = get_path(doc, path) if path is not None else None
    meta = get_map(doc, ("metadata",))
    run = _run_name(meta)
    uid = str(meta.get("uid") or f"00000000-0000-4000-8000-{sum(map(ord, run)) % 10**12:012d}")
    pods: dict[str, dict[str, Any]] = {}
    for template in templates if isinstance(templates, list) else []:
        t_meta = get_map(template, ("metadata",))
        raw = t_meta.get("annotations")
        if not isinstance(raw, dict) or not any(isinstance(k, str) and k.startswith(config.key_prefix) for k in raw):
            continue
        given = {k: v.replace("{{workflow.name}}", run) if isinstance(v, str) else v for k, v in raw.items()}
        if any(isinstance(v, str) and "{{" in v for k, v in given.items() if str(k).startswith(config.key_prefix)):
            continue  # checked when Argo creates the pod, with its parameters substituted
        which = str(template.get("name") or "")
        pod_meta = get_map(doc, ("spec", "podMetadata"))
        labels = {**get_map(pod_meta, ("labels",)), **get_map(t_meta, ("labels",))}
        annotations = {**get_map(pod_meta, ("annotations",)), **given}
        main = template.get("container") or template.get("script") or {}
        spec: dict[str, Any] = {"containers": [{"name": "wait", "image": "quay.io/argoproj/argoexec:v4.1.2"},
                                               {**(main if isinstance(main, dict) else {}), "name": "main"}],
                                "restartPolicy": "Never"}
        scheduler = template.get("schedulerName") or get_path(doc, ("spec", "schedulerName"))
        if isinstance(scheduler, str) and scheduler:
            spec["schedulerName"] = scheduler
        pods[which] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{run}-{which}-1234567890"[:253], "namespace": str(meta.get("namespace") or namespace),
                         "labels": {**labels, WORKFLOW_LABEL: run},
                         "annotations": {**annotations, NODE_NAME: f"{run}[0].{which}(0)"},
                         "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": run,
                                              "uid": uid, "controller": True, "blockOwnerDeletion": True}]},
            "spec": spec}
    return pods


def workflow_review(doc: dict[str, Any], config: Config,
                    refusals: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """``(warnings, notes)`` ``admit review`` gives an Argo ``Workflow`` (or ``WorkflowTemplate``,
    ``ClusterWorkflowTemplate``, ``CronWorkflow``), which admit's webhooks never see: each template whose
    ``metadata.annotations`` carry ``<prefix>/min-member`` is a gang of the step pods Argo makes from it (their
    PodGroup, minMember, and how it follows its members); gang annotations on the object's own metadata do nothing
    (Argo copies a template's metadata onto its pods, ``addMetadata``), and a template's malformed ones or ``auto``
    refuse each of its pods: each warned about. ``refusals``: template name -> the refusal its step pod got from
    the webhook (:func:`review_step_pods`), warned about in place of the gang's note. Pure; empty for another
    kind."""
    path = TEMPLATES.get(str(doc.get("kind") or ""))
    if path is None:
        return [], []
    meta = get_map(doc, ("metadata",))
    name = str(meta.get("name") or meta.get("generateName") or "")
    run = _run_name(meta)
    warnings: list[str] = []
    notes: list[str] = []
    own = meta.get("annotations")
    if isinstance(own, dict) and any(isinstance(k, str) and k.startswith(config.key_prefix) for k in own):
        warnings.append(f"move the {config.key_prefix}* annotations to the metadata.annotations of the step's "
                        f"template: Argo copies a template's metadata onto its pods, not the {doc.get('kind')}'s")
    templates = get_path(doc, path)
    for template in templates if isinstance(templates, list) else []:
        if not isinstance(template, dict):
            continue
        which = str(template.get("name") or "")[:63]
        raw = get_path(template, ("metadata", "annotations"))
        given = {k: v.replace("{{workflow.name}}", run) if isinstance(v, str) else v
                 for k, v in (raw.items() if isinstance(raw, dict) else ())}
        if any(isinstance(v, str) and "{{" in v for k, v in given.items() if str(k).startswith(config.key_prefix)):
            notes.append(f"{doc.get('kind')} {name}: template {which}'s gang annotations use Argo variables other "
                         "than {{workflow.name}}: admit checks them when Argo creates each step pod")
            continue
        try:
            ann = parse_gang_annotations(given, config)
        except GangError as e:
            warnings.append(f"correct template {which}'s metadata.annotations, or each of its pods is refused: "
                            f"{clip_message(e.message, 160)}")
            continue
        if ann is None:
            continue
        size = ann.min_member if ann.min_member is not None else given.get(KUEUE_TOTAL_COUNT)
        if size is None:
            warnings.append(f"set template {which}'s {config.min_member_key} to the number of its step's pods (its "
                            "withItems or withParam items), or each of its pods is refused: Argo gives a step pod no "
                            "count for auto")
            continue
        if which in (refusals or {}):
            refusal = (refusals or {})[which]  # its fix first, worded as a warning's (lower case)
            warnings.append(f"{refusal[:1].lower()}{refusal[1:]} (template {which}: each of its step pods is refused)")
            continue
        shown = run if meta.get("name") else f"{name}<5 characters>"
        group = ann.pod_group.replace(run, shown) if ann.pod_group else f"{shown} (the Workflow's name)"
        notes.append(f"{doc.get('kind')} {name}: the step pods of template {which} are ganged when Argo creates "
                     f"them: PodGroup {group}, minMember {size}, shared by them and, once one of them finished, "
                     "sized to the members still to run (a retry does not wait for those that succeeded)")
    return warnings, notes
