"""A fake Kubernetes API server over real HTTP, for tests, benchmarks and ``admit serve --dev``: a public kit
(docs/fake-api.md says what it emulates, with the upstream code each part follows, and what it does not).

``FakeKubeAPI`` serves the Kubernetes REST protocol from memory on ``127.0.0.1`` (aiohttp), well enough that the
unmodified ``kubernetes_asyncio`` client and ``kubectl --server`` work against it. In a test::

    async with FakeKubeAPI() as api:
        async with api.api_client() as client:
            await kubernetes_asyncio.client.CoreV1Api(client).create_namespaced_pod("default", {...})
        assert api.requests_for("pods", "POST")

A controller of your own runs on its writes with ``api.add_controller(c)`` (any :class:`Controller`: ``observe``,
``busy``, ``stop``). As a benchmark's process: ``python -m admit.testing.fake_kube --port 8001`` prints the URL and serves until
SIGTERM/SIGINT (:meth:`FakeKubeAPI._handle_control` lists its ``/_fake/`` endpoints).
"""

from .admission import AdmissionChain, Webhook, WebhookCallError, allowed, denied, patched, selector_matches
from .errors import ApiError, status_object
from .objects import apply_patch, merge_patch, parse_field_selector, parse_label_selector, strategic_merge_patch
from .requestlog import RequestRecord
from .resources import (BUILTIN_RESOURCES, WORKLOAD_API_VERSIONS, ResourceType, _workload_api_errors,
                        workload_api_resources)
from .server import Controller, FakeKubeAPI

__all__ = ["FakeKubeAPI", "RequestRecord", "ResourceType", "BUILTIN_RESOURCES", "WORKLOAD_API_VERSIONS", "ApiError",
           "status_object", "workload_api_resources", "parse_label_selector", "parse_field_selector", "apply_patch",
           "merge_patch", "strategic_merge_patch", "_workload_api_errors", "AdmissionChain", "Webhook",
           "WebhookCallError", "allowed", "denied", "patched", "selector_matches", "Controller"]
