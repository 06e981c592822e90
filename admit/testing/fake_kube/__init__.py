"""A fake Kubernetes API server over real HTTP, for tests and benchmarks (one module per concern: ``resources``,
``errors``, ``objects``, ``requestlog``, ``server``; ``__main__`` runs it as a process).

``FakeKubeAPI`` serves the Kubernetes REST protocol on ``127.0.0.1`` with aiohttp, well enough that the
unmodified ``kubernetes_asyncio`` client (``CoreV1Api``, ``AppsV1Api``, ``CoordinationV1Api``,
``AdmissionregistrationV1Api``, ``CustomObjectsApi``, ``EventsV1Api`` and ``kubernetes_asyncio.watch.Watch``)
works against it. Everything lives in memory; nothing is persisted.

Usage in a test::

    async with FakeKubeAPI() as api:
        async with api.api_client() as client:
            pods = kubernetes_asyncio.client.CoreV1Api(client)
            await pods.create_namespaced_pod("default", {...})
        assert api.requests_for("pods", "POST")

Standalone (a benchmark running it in another process)::

    python -m admit.testing.fake_kube --port 8001     # prints http://127.0.0.1:8001, serves until SIGTERM/SIGINT
    curl http://127.0.0.1:8001/_fake/stats           # {"total": N, "counts": {"POST podgroups": 3, ...}, "by": [...]}
    curl -X POST http://127.0.0.1:8001/_fake/reset-stats

What follows the real kube-apiserver (and where it deliberately does not):

* Objects are stored under ``(group, version, plural, namespace or None, name)``. Unlike a real cluster, two versions
  of one resource (``kubeflow.org/v1`` and ``v2beta1`` ``mpijobs``) and the two Event APIs (core ``v1`` and
  ``events.k8s.io/v1``) are separate collections: there is no conversion between versions.
* ``resourceVersion`` is one global increasing integer (as a string), bumped by every write, like etcd's revision.
  A write that changes nothing is a no-op: no new resourceVersion and no watch event (as the real server).
* A list's items are shaped as kube-apiserver's: a built-in kind's (``PodList``) carry no ``apiVersion`` or
  ``kind``, only the list does (kubernetes/kubernetes#3030); a custom resource's keep them, as stored. A GET, a
  write's answer and a watch event's object carry both (``server.list_item``).
* ``metadata.generation`` starts at 1 and is bumped when anything outside ``metadata`` (and outside ``status`` for
  resources with a status subresource) changes, and when ``deletionTimestamp`` is set; for a Deployment an
  annotation change bumps it too, as kube-apiserver's Deployment strategy does (no other kind's: a StatefulSet's,
  a Job's or a custom resource's annotation change keeps its generation; ``server.py`` ``_spec_part`` cites the
  strategies).
* Resources with a ``/status`` subresource ignore ``status`` on create and on writes to the main resource, and the
  ``/status`` endpoint only changes ``status`` (Kubernetes' status strategies). A created Pod gets
  ``status.phase: Pending``.
* Custom resources (``custom=True``: every group that is not a Kubernetes built-in group) behave like CRDs:
  ``kind``/``apiVersion`` are required in bodies, PUT without ``metadata.resourceVersion`` is 422 (CRDs do not allow
  unconditional updates), strategic merge patch is 415.
* Deleting an object with ``metadata.finalizers`` only sets ``deletionTimestamp`` (MODIFIED); the object goes away
  (DELETED) when an update removes the last finalizer.
* Validation is limited to what catches real client bugs: names (RFC 1123 subdomain), label keys and values (63
  characters), Lease ``MicroTime`` fields (exactly six fractional digits and a zone, as the Go layout
  ``2006-01-02T15:04:05.000000Z07:00`` demands), Event times, base64 in ``Secret.data``/``ConfigMap.binaryData`` and
  webhook ``caBundle``. ``Secret.stringData`` is folded into ``data`` as the real server does.
* HTTP creates, updates and patches of built-in workload kinds and Pods are defaulted before admission as
  kube-apiserver decodes them (``fake_defaults.py``: ``podManagementPolicy: OrderedReady``, Deployment strategy, Job
  ``parallelism``/``completions``, ``schedulerName: default-scheduler``, ...); ``put`` stores what it is given. A
  created Job gets the Job strategy's selector and ``controller-uid`` labels after the mutating webhooks.
* A created Namespace gets ``status.phase: Active`` and the ``kubernetes`` finalizer; deleting it marks it
  Terminating, a create in it is 403 "being terminated" (NamespaceLifecycle), and the namespace controller deletes
  its content and then the namespace. A namespace that is not stored is not required (unlike the real server).
* The admission chain (``admission=AdmissionChain(...)``, off by default; ``admission.py``): mutating webhooks in
  order with reinvocation, then validating webhooks, each matched by rules, selectors and CEL matchConditions;
  admit's are read from the chart (``AdmissionChain.from_configurations``), an operator's run in process. The
  Deployment controller's ReplicaSets (``deployment_controller=True``), the Job controller's Pods
  (``job_controller=True``) and any controller added with ``add_controller`` (the operator emulations of
  ``tests/emulations``): ``controllers.py``. Without them, writes are stored as given (defaulted) and no
  controller runs.
* Not emulated (docs/fake-api.md has the whole list): namespaces are not required to exist; authentication,
  server-side apply (415), managedFields, propagationPolicy=Foreground, list snapshots.

Direct access for tests (no HTTP, no validation, still emits watch events): ``put``, ``get``, ``delete_object``,
``objects``. Fault injection: ``fail``, ``delay``, ``forbid``. Watch control: ``compact``, ``drop_watches``,
``send_bookmarks``, ``open_watches``, ``hold_watches`` / ``release_watches`` (a stream of one kind that stays
open but silent, or lags). Request log: ``requests``, ``requests_for``, ``clear_requests``, ``stats``.
"""

from .admission import AdmissionChain, Webhook, WebhookCallError, allowed, denied, patched, selector_matches
from .controllers import Controller, DeploymentController, JobController, pod_template_hash
from .errors import ApiError, status_object
from .objects import apply_patch, merge_patch, parse_field_selector, parse_label_selector, strategic_merge_patch
from .requestlog import RequestRecord
from .resources import (BUILTIN_RESOURCES, WORKLOAD_API_VERSIONS, ResourceType, _workload_api_errors,
                        workload_api_resources)
from .server import FakeKubeAPI

__all__ = ["FakeKubeAPI", "RequestRecord", "ResourceType", "BUILTIN_RESOURCES", "WORKLOAD_API_VERSIONS", "ApiError",
           "status_object", "workload_api_resources", "parse_label_selector", "parse_field_selector", "apply_patch",
           "merge_patch", "strategic_merge_patch", "_workload_api_errors", "AdmissionChain", "Webhook",
           "WebhookCallError", "allowed", "denied", "patched", "selector_matches", "Controller", "DeploymentController",
           "JobController", "pod_template_hash"]
