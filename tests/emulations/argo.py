"""Argo Workflows' step pods (argoproj/argo-workflows v4.1.2, ``workflow/controller``) as the workflow controller
creates them, each through the fake's admission chain under the controller's ServiceAccount:

- **which pods**: a ``steps`` template's step with ``withItems`` is expanded into one node per item, named
  ``<parent>.<step>(<index>:<item>)`` (``operator.go`` ``expandStep``: ``fmt.Sprintf("%s(%d:%v)", name, index,
  cleanName)``); under a ``retryStrategy`` each such node is a Retry node whose attempts are its children
  ``<node>(<attempt>)`` (``operator.go``: ``fmt.Sprintf("%s(%d)", retryNodeName, retryNum)``), one pod per attempt;
- **the template** is substituted whole before the pod is built (``workflow/common/util.go`` ``SubstituteParams``:
  the template marshalled to JSON, ``{{workflow.name}}``, ``{{inputs.parameters.*}}`` and the other variables
  replaced), so its ``metadata`` may use them;
- **the pod** (``workflowpod.go`` ``createWorkflowPod``): name ``GeneratePodName`` (v2 names:
  ``<workflow>-<template>-<fnv32a(node name)>``, ``workflow/util/pod_name.go``), labels
  ``workflows.argoproj.io/workflow: <workflow>`` and ``workflows.argoproj.io/completed: "false"``, annotations
  ``workflows.argoproj.io/node-name`` and ``node-id`` (``Workflow.NodeID``: ``<workflow>-<fnv32a(node name)>``), one
  controller ownerReference to the Workflow (``metav1.NewControllerRef(woc.wf, ...WithKind("Workflow"))``),
  ``restartPolicy: Never``; the ``wait`` container (the executor's aux container, ``executor.resources`` of the
  controller's ConfigMap, none by default) then the template's ``main`` container; ``addMetadata`` copies the
  Workflow's ``spec.podMetadata`` and then the template's ``metadata`` annotations and labels onto the pod;
  ``schedulerName`` and ``nodeSelector`` are the template's, else the Workflow's (``addSchedulingConstraints``).

The phases are the test's to set (:meth:`ArgoWorkflows.finish`: no kubelet runs here); a retry is one more attempt
pod for a node whose last attempt failed, or whose pod was deleted before it finished (:meth:`ArgoWorkflows.retry`,
from ``operator.go`` ``processNodeRetries`` and ``executeTemplate``, argo-workflows main at f016ad8, after v4.1.0).
Argo's pod GC (:meth:`ArgoWorkflows.collect`) deletes finished pods under ``spec.podGC``. Not emulated: DAGs, the
``init`` container (input artifacts only), ``podSpecPatch``, the executor's work, the Workflow's status, the retry's
``backoff`` and the GC's delay (the test calls :meth:`ArgoWorkflows.retry` and :meth:`ArgoWorkflows.collect` when
they would run).
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from .kit import OperatorEmulation, controller_ref, service_account
from .later import Emulated, LaterWrite

if TYPE_CHECKING:
    from admit.testing.fake_kube import FakeKubeAPI

__all__ = ["ArgoWorkflows", "install", "step_pod", "node_id", "pod_name", "WORKFLOW_LABEL", "NODE_NAME"]

JSON = dict[str, Any]
API = "argoproj.io/v1alpha1"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
COMPLETED_LABEL = "workflows.argoproj.io/completed"
NODE_NAME = "workflows.argoproj.io/node-name"
NODE_ID = "workflows.argoproj.io/node-id"
POD_GC = "workflows.argoproj.io/pod-gc-strategy"


def fnv32a(text: str) -> int:
    """Go's ``hash/fnv`` ``New32a`` over ``text``'s bytes."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def node_id(workflow: str, node: str) -> str:
    """``Workflow.NodeID``."""
    return workflow if node == workflow else f"{workflow}-{fnv32a(node)}"


def pod_name(workflow: str, node: str, template: str) -> str:
    """``GeneratePodName`` with ``PodNameV2`` (the default)."""
    return workflow if node == workflow else f"{workflow}-{template}-{fnv32a(node)}"


def _substitute(template: JSON, values: dict[str, str]) -> JSON:
    """``SubstituteParams``: the template as JSON, each ``{{name}}`` of ``values`` replaced."""
    text = json.dumps(template)
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    return json.loads(text)


def step_pod(workflow: JSON, template: JSON, node: str, inputs: dict[str, str] | None = None) -> JSON:
    """The pod ``createWorkflowPod`` builds for node ``node`` of stored ``workflow`` running ``template`` (module
    docstring); ``inputs`` are the step's argument parameters, ``{{inputs.parameters.<name>}}``."""
    meta, spec = workflow["metadata"], workflow.get("spec") or {}
    values = {"workflow.name": meta["name"], "workflow.namespace": str(meta.get("namespace") or "")}
    values.update({f"inputs.parameters.{k}": v for k, v in (inputs or {}).items()})
    tmpl = _substitute(template, values)
    pod_meta = spec.get("podMetadata") or {}
    labels = {WORKFLOW_LABEL: meta["name"], COMPLETED_LABEL: "false", **(pod_meta.get("labels") or {}),
              **((tmpl.get("metadata") or {}).get("labels") or {})}
    annotations = {NODE_NAME: node, NODE_ID: node_id(meta["name"], node), **(pod_meta.get("annotations") or {}),
                   **((tmpl.get("metadata") or {}).get("annotations") or {})}
    main = {**copy.deepcopy(tmpl.get("container") or {}), "name": "main"}
    wait = {"name": "wait", "image": "quay.io/argoproj/argoexec:v4.1.2", "command": ["argoexec"], "args": ["wait"]}
    pod_spec: JSON = {"restartPolicy": "Never", "containers": [wait, main]}
    if spec.get("podGC"):  # createWorkflowPod: "<strategy>/<delay>", the delay getPodGCDelay's (default 5s)
        annotations[POD_GC] = f"{spec['podGC'].get('strategy', '')}/{spec['podGC'].get('deleteDelayDuration', '5s')}"
    scheduler = tmpl.get("schedulerName") or spec.get("schedulerName")
    if scheduler:
        pod_spec["schedulerName"] = scheduler
    if tmpl.get("nodeSelector") or spec.get("nodeSelector"):
        pod_spec["nodeSelector"] = tmpl.get("nodeSelector") or spec.get("nodeSelector")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(meta["name"], node, tmpl["name"]), "namespace": meta.get("namespace"),
                         "labels": labels, "annotations": annotations, "ownerReferences": [controller_ref(workflow)]},
            "spec": pod_spec}


class ArgoWorkflows(OperatorEmulation):
    """The workflow controller's pod creation for one :class:`FakeKubeAPI` (module docstring)."""

    component = "workflow-controller"

    def __init__(self, api: "FakeKubeAPI") -> None:
        super().__init__(api, service_account("argo", "argo"))
        self.inputs: dict[str, dict[str, str]] = {}  # a node's argument parameters (the Workflow's status keeps them)

    async def idle(self, timeout: float = 10.0) -> None:
        """Nothing of it runs in the background: each pod is made in a call its caller awaits."""

    async def submit(self, workflow: JSON, user: JSON | None = None) -> JSON:
        """Store a Workflow as ``argo submit`` / ``kubectl create`` does (its own admission: admit's webhooks do not
        take Workflows)."""
        rt = self.api.resource_type(API, "workflows")
        return await self.api.admitted_create(rt, workflow["metadata"].get("namespace"), copy.deepcopy(workflow),
                                              dry_run=False, user=user)

    def _template(self, workflow: JSON, name: str) -> JSON:
        return next(t for t in (workflow.get("spec") or {}).get("templates") or [] if t.get("name") == name)

    async def run_step(self, ns: str, workflow_name: str, step: str) -> list[JSON]:
        """Start step ``step`` of the entrypoint's first step group: one pod per ``withItems`` item (the first
        attempt's under a ``retryStrategy``), its argument parameters with ``{{item}}`` substituted
        (``expandStep``), as stored; refused ones are in :attr:`errors`."""
        workflow = self.live(API, "workflows", ns, workflow_name)
        assert workflow is not None
        entry = self._template(workflow, workflow["spec"]["entrypoint"])
        found = next(s for group in entry.get("steps") or [] for s in group if s.get("name") == step)
        template = self._template(workflow, found["template"])
        parent = f"{workflow_name}[0].{step}"
        made = []
        for index, item in enumerate(found.get("withItems") or [None]):
            node = parent if item is None else f"{parent}({index}:{item})"
            if template.get("retryStrategy"):
                node = f"{node}(0)"
            self.inputs[node.rpartition("(")[0] if template.get("retryStrategy") else node] = inputs = {
                str(p["name"]): str(p.get("value", "")).replace("{{item}}", str(item))
                for p in ((found.get("arguments") or {}).get("parameters") or [])}
            pod = await self.create(workflow, "v1", "pods", step_pod(workflow, template, node, inputs),
                                    "FailedCreatePod")
            if pod is not None:
                made.append(pod)
        return made

    def finish(self, pod: JSON, phase: str) -> None:
        """The pod ends in ``phase`` (``Succeeded`` / ``Failed``), as kubelet reports it."""
        stored = self.api.get("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        assert stored is not None
        stored["status"] = {**(stored.get("status") or {}), "phase": phase}
        self.api.put(stored)

    def collect(self, pod: JSON) -> bool:
        """Argo's pod GC of a finished pod (``pod_cleanup.go`` ``queuePodsForCleanup``, for a pod whose node is
        fulfilled; ``pod/cleanup.go`` ``determinePodCleanupAction``): deleted under ``OnPodCompletion``, or under
        ``OnPodSuccess`` when it succeeded (its annotation ``pod-gc-strategy``; ``OnWorkflow*`` wait for the
        Workflow, which this emulation never completes). The delay is the test's (it calls this when it is over).
        True when deleted."""
        stored = self.api.get("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        phase = ((stored or {}).get("status") or {}).get("phase")
        strategy = ((stored or {}).get("metadata", {}).get("annotations") or {}).get(POD_GC, "").partition("/")[0]
        if phase not in ("Succeeded", "Failed") or not (
                strategy == "OnPodCompletion" or (strategy == "OnPodSuccess" and phase == "Succeeded")):
            return False
        self.api.delete_object("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        return True

    async def retry(self, failed: JSON, error: bool = False) -> JSON | None:
        """The next attempt of the node whose attempt pod ``failed`` ended: node ``<retry node>(<attempt + 1>)``,
        from the same template and inputs, as stored; ``None`` when the ``retryStrategy`` does not retry it.

        The attempt's node is Failed (its pod failed), or with ``error`` Error: its pod was deleted before it
        finished (``podReconciliation``: a pod node missing from the pods seen is marked ``"pod deleted"``,
        ``markNodeError``). ``processNodeRetries`` retries Failed under the policy ``OnFailure`` or ``Always`` and
        Error under ``OnError`` or ``Always`` (``RetryStrategy.RetryPolicyActual``: ``OnFailure`` when none is
        given and no ``expression``, else ``Always``), while the attempts so far are at most ``limit``; then
        ``executeTemplate`` adds child node ``fmt.Sprintf("%s(%d)", retryNodeName, retryNum)`` and creates its pod.
        """
        ns = failed["metadata"]["namespace"]
        workflow = self.live(API, "workflows", ns, failed["metadata"]["labels"][WORKFLOW_LABEL])
        assert workflow is not None
        base, _, attempt = failed["metadata"]["annotations"][NODE_NAME].rpartition("(")
        template_name = failed["metadata"]["name"][len(workflow["metadata"]["name"]) + 1:].rpartition("-")[0]
        template = self._template(workflow, template_name)
        strategy = template.get("retryStrategy") or (workflow.get("spec") or {}).get("retryStrategy") or {}
        policy = strategy.get("retryPolicy") or ("Always" if strategy.get("expression") else "OnFailure")
        attempts = int(attempt.rstrip(")")) + 1
        limit = strategy.get("limit")
        if policy not in ("Always", "OnError" if error else "OnFailure") or (
                limit is not None and attempts > int(limit)):
            return None
        return await self.create(workflow, "v1", "pods", step_pod(workflow, template, f"{base}({attempts})",
                                                                  self.inputs.get(base)), "FailedCreatePod")


def install(api: "FakeKubeAPI", chain: Any = None) -> ArgoWorkflows:
    """Serve Argo's Workflow CRD (``argoproj.io/v1alpha1`` ``workflows``) on ``api`` and run the workflow
    controller's pod creation there (no webhook of Argo's meets admit's writes)."""
    api.register("argoproj.io", "v1alpha1", "Workflow", "workflows")
    return api.add_controller(ArgoWorkflows(api))


# ----------------------------------------------------------------------------------------------------------------------
# Later writes (tests/emulations/later.py): the workflow controller's step pods after the user's Workflow, a member
# finishing, a failed member's retries
# ----------------------------------------------------------------------------------------------------------------------


def _step(obj: JSON) -> str:
    """The entrypoint's first step (the fan-out the later writes run)."""
    entry = next(t for t in obj["spec"]["templates"] if t["name"] == obj["spec"]["entrypoint"])
    return str(entry["steps"][0][0]["name"])


def _pods(op: ArgoWorkflows, obj: JSON) -> list[JSON]:
    return [p for p in op.api.objects("pods", obj["metadata"]["namespace"])
            if (p["metadata"].get("labels") or {}).get(WORKFLOW_LABEL) == obj["metadata"]["name"]]


async def the_step_starts(op: ArgoWorkflows, obj: JSON) -> None:
    """The step group runs: one pod per ``withItems`` item (``expandStep``, ``createWorkflowPod``)."""
    await op.run_step(obj["metadata"]["namespace"], obj["metadata"]["name"], _step(obj))
    await op.api.settle()


async def a_member_fails_after_the_others_succeeded_and_is_retried(op: ArgoWorkflows, obj: JSON) -> None:
    """Every member but the last succeeds, the last fails and Argo starts its next attempt (``retryStrategy``)."""
    pods = sorted(_pods(op, obj), key=lambda p: p["metadata"]["annotations"][NODE_NAME])
    if not pods:
        return
    for pod in pods[:-1]:
        op.finish(pod, "Succeeded")
    op.finish(pods[-1], "Failed")
    await op.retry(pods[-1])
    await op.api.settle()


async def the_members_finish_argos_pod_gc_deletes_them_and_the_failed_one_is_retried(op: ArgoWorkflows,
                                                                                      obj: JSON) -> None:
    """As :func:`a_member_fails_after_the_others_succeeded_and_is_retried`, under a ``podGC`` strategy: with a
    ``retryStrategy.backoff`` the pod GC (queued at the end of the operation that saw the pods finish,
    ``queuePodsForCleanup``) deletes them before the retry; without, the retry comes first (same operation,
    ``processNodeRetries``) and the pods go after it (the GC's delay)."""
    pods = sorted(_pods(op, obj), key=lambda p: p["metadata"]["annotations"][NODE_NAME])
    if not pods:
        return
    for pod in pods:
        op.finish(pod, "Succeeded" if pod is not pods[-1] else "Failed")
    await _retry_and_collect(op, obj, pods[-1], pods)


async def _retry_and_collect(op: ArgoWorkflows, obj: JSON, failed: JSON, finished: list[JSON]) -> None:
    backoff = bool(_template(obj).get("retryStrategy", {}).get("backoff"))
    for pod in finished if backoff else ():
        op.collect(pod)
    await op.api.settle()
    await op.retry(failed)
    for pod in () if backoff else finished:
        op.collect(pod)
    await op.api.settle()


async def the_retried_member_fails_again_and_is_retried(op: ArgoWorkflows, obj: JSON) -> None:
    """The retried attempt fails too and Argo starts one more (within ``retryStrategy.limit``); under a ``podGC``
    strategy the failed attempt's pod is collected as above."""
    live = [p for p in _pods(op, obj) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    for pod in live[:1]:
        op.finish(pod, "Failed")
        await _retry_and_collect(op, obj, pod, [pod])
    await op.api.settle()


def gangs_of(op: ArgoWorkflows, obj: JSON) -> list[tuple[str, list[JSON]]]:
    """The step's pods still to run (not finished): one gang, whose size follows them; none when none is left."""
    live = [p for p in _pods(op, obj) if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return [(f"Workflow {obj['metadata']['name']} step {_step(obj)}", live)] if live else []


def refused_writes(op: ArgoWorkflows) -> list[tuple[str, str, str]]:
    """The workflow controller's refused pods."""
    return list(op.errors)


def _template(obj: JSON) -> JSON:
    entry = next(t for t in obj["spec"]["templates"] if t["name"] == obj["spec"]["entrypoint"])
    return next(t for t in obj["spec"]["templates"] if t["name"] == entry["steps"][0][0]["template"])


def _retries(obj: JSON) -> bool:
    return bool(_template(obj).get("retryStrategy"))


def _collected(obj: JSON) -> bool:
    return (obj["spec"].get("podGC") or {}).get("strategy") in ("OnPodSuccess", "OnPodCompletion")


_SOURCE = "argoproj/argo-workflows v4.1.2 workflow/controller/operator.go "
LATER_WRITES = (
    LaterWrite("the step starts, one pod per item", _SOURCE + "expandStep; workflowpod.go createWorkflowPod",
               "a steps template with withItems", lambda obj: True, the_step_starts),
    LaterWrite("a member fails after the others succeeded and is retried", _SOURCE + "retryStrategy: the next "
               "attempt node <node>(<n>), createWorkflowPod", "retryStrategy on the step's template",
               lambda obj: _retries(obj) and not _collected(obj),
               a_member_fails_after_the_others_succeeded_and_is_retried),
    LaterWrite("the members finish, Argo's pod GC deletes them and the failed one is retried",
               "argoproj/argo-workflows v4.1.2 workflow/controller/pod_cleanup.go queuePodsForCleanup, pod/cleanup.go "
               "determinePodCleanupAction; operator.go retryStrategy", "spec.podGC.strategy OnPodSuccess or "
               "OnPodCompletion (default none), retryStrategy (its backoff orders the two)",
               lambda obj: _retries(obj) and _collected(obj),
               the_members_finish_argos_pod_gc_deletes_them_and_the_failed_one_is_retried),
    LaterWrite("the retried member fails again and is retried", _SOURCE + "retryStrategy (limit)",
               "retryStrategy.limit above 1", _retries, the_retried_member_fails_again_and_is_retried),
)

LATER = Emulated("argo", install, ((API, "Workflow"),), LATER_WRITES, gangs_of, refused_writes, controller=True)
