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

What it emulates, each with the upstream code it follows, and what it does not emulate: docs/fake-api.md.

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
