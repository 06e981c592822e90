"""The ``coscheduling`` backend's start-time check (``runtime.BackendAPI.start``): does the API server serve admit's
PodGroup resource? A cluster without the PodGroup CRD (or serving only the other API group of scheduler-plugins)
gets one warning at start, and every refusal of a gang then names the CRD and the fixes.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio import client

from ...config import Config
from ...kube.client import KubeError, api_errors
from . import crd_missing_message, other_pod_group_group

__all__ = ["pod_group_api_problem", "start"]

log = logging.getLogger("admit.serve")


async def pod_group_api_problem(api_client: client.ApiClient, config: Config, timeout: float = 10.0) -> str | None:
    """Why the ``coscheduling`` backend cannot create PodGroups on this cluster, or None.

    API discovery (``GET /apis/<group>/<version>``, as kubectl does): when ``--pod-group-api``'s group does not
    serve ``podgroups`` (404, or a list without it: the CRD is not installed), the other group is asked too, and the
    answer is ``coscheduling.crd_missing_message`` (naming the CRD and the fixes, leading with the API-group setting
    when only the other group is served). None also when discovery itself failed (logged at INFO: admission then
    finds out on its first PodGroup create).
    """
    custom = client.CustomObjectsApi(api_client)

    async def serves(group: str) -> bool:
        try:
            with api_errors(f"discover {group}/{config.pod_group_version}", timeout):
                doc: Any = await custom.get_api_resources(group, config.pod_group_version, _request_timeout=timeout)
        except KubeError as e:
            if e.status == 404:
                return False
            raise
        return any(r.name == config.pod_group_plural for r in doc.resources or [])

    try:
        if await serves(config.pod_group_group):
            return None
        other = await serves(other_pod_group_group(config))
    except KubeError as e:
        log.info("could not check that the API server serves PodGroups: %s", e.message)
        return None
    return crd_missing_message(config, other)


async def start(api_client: client.ApiClient, config: Config) -> tuple[Config, str | None, None]:
    """``runtime.BackendAPI.start``: ``config`` unchanged, and :func:`pod_group_api_problem`."""
    return config, await pod_group_api_problem(api_client, config), None
