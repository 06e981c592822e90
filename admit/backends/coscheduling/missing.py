"""The ``coscheduling`` backend's check of a Pod CREATE labelled for a PodGroup the admission cache lacks
(``runtime.BackendAPI.missing_group``, after the pure ``Coscheduling.unknown_group``).

The Coscheduling plugin's Permit keeps a pod whose labelled PodGroup is not found waiting (scheduler-plugins
``pkg/coscheduling/core/core.go`` ``Permit``: ``PodGroupNotFound``). admit never refuses or delays such a pod; it
warns (:func:`missing_group`).
"""

from __future__ import annotations

import logging
from typing import Any

from ...config import Config
from ...kube.client import KubeError

__all__ = ["missing_group", "missing_group_warning"]

log = logging.getLogger("admit.admission")


async def missing_group(namespace: str, name: str, config: Config, cache: Any, store: Any) -> str | None:
    """The warning for a Pod CREATE labelled for PodGroup ``namespace/name``, which the managed PodGroup cache lacks,
    or ``None``.

    ``cache`` (``admission.GroupCache``): ``missing(namespace, name)`` is the controller's warning when a stored
    workload claims the group (it re-creates it), ``pod_group(namespace, name) -> (synced, PodGroup | None)`` looks
    over managed and other PodGroups (without it, or before it has listed: no warning). ``store``: one GET of the
    PodGroup, for a watch that lags behind one created a moment ago (``get_object``, within
    ``config.api_timeout_seconds``); a failed GET gives no warning. Never raises ``KubeError``.
    """
    missing = getattr(cache, "missing", None)
    warning = missing(namespace, name) if missing is not None else None
    if warning:
        return str(warning)
    pod_group = getattr(cache, "pod_group", None)
    if pod_group is None:
        return None
    synced, pg = pod_group(namespace, name)
    if not synced or pg is not None:
        return None
    if store is not None:
        try:
            if await store.get_object(config.pod_group_group, config.pod_group_version, config.pod_group_plural,
                                      namespace, name, config.api_timeout_seconds) is not None:
                return None
        except KubeError as e:
            log.info("could not confirm that PodGroup %s/%s is missing: %s", namespace, name, e.message)
            return None
    return missing_group_warning(namespace, name, config)


def missing_group_warning(namespace: str, name: str, config: Config) -> str:
    """The warning of :func:`missing_group` when no PodGroup ``namespace/name`` exists and nothing claims it."""
    return (
        f"create PodGroup {str(name)[:63]} ({config.pod_group_api_version}), annotate the pod's workload with "
        f"{config.min_member_key}, or correct label {config.pod_group_label}: that PodGroup does not exist, so the "
        "pod waits"
    )
