"""Which ``scheduling.k8s.io`` version of the Workload API the API server serves, found once at ``admit serve`` start.

API discovery (``GET /apis/scheduling.k8s.io`` for the group's versions, ``GET /apis/scheduling.k8s.io/<version>``
for its resources, as kubectl does): a version counts when it serves both ``workloads`` and ``podgroups``. admit
speaks the versions whose shapes it knows (the rows of ``workload_api.SHAPES``, each with its ``types.go``) and
prefers ``v1`` (planned GA, 1.38), then ``v1beta1`` (1.37), then the alphas ``v1alpha3`` (1.37) and ``v1alpha2``
(1.36); ``v1alpha1`` (1.35: Workload with embedded pod groups and pod ``spec.workloadRef``) has no runtime PodGroup
and is not spoken. ``scheduling.k8s.io/v1`` also serves ``priorityclasses``: only a version with both gang
resources counts. Seen on a 1.36.2 kube-apiserver with ``--feature-gates=GenericWorkload=true,GangScheduling=true
--runtime-config=scheduling.k8s.io/v1alpha2=true``: versions ``v1`` and ``v1alpha2``; v1alpha2 resources
``podgroups``, ``podgroups/status``, ``workloads``.

A version that serves ``workloads`` or ``podgroups`` but is not in the table (a later alpha, a v2) is reported once,
at start, in one line naming it; when no known version is served the backend stays off rather than write shapes
admit does not know.

When the ``workload-api`` backend is admit's default (``--gang-backend``) and no version is served, ``admit serve``
refuses to start with one line naming the feature gates and runtime-config; when it is only an extra backend, admit
starts and refuses the workloads that ask for it, with the same reason.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio import client

from ...config import WORKLOAD_API, WORKLOAD_API_GROUP, WORKLOAD_API_VERSIONS, Config
from ...kube.client import KubeError, api_errors
from . import not_served_message

__all__ = ["BackendUnavailable", "choose_version", "unknown_versions", "discover_workload_api", "configure_backends"]

log = logging.getLogger("admit.backends")
NEEDED = frozenset({"workloads", "podgroups"})


class BackendUnavailable(Exception):
    """``--gang-backend workload-api`` on an API server that does not serve it; ``str(e)`` is the one-line reason."""


def choose_version(served: dict[str, set[str]]) -> str:
    """The version to speak from ``{version: {resource names}}`` of ``scheduling.k8s.io``: the first of
    ``config.WORKLOAD_API_VERSIONS`` (v1, v1beta1, v1alpha3, v1alpha2) that serves both ``workloads`` and
    ``podgroups``; ``""`` when none does."""
    for version in WORKLOAD_API_VERSIONS:
        if NEEDED <= served.get(version, set()):
            return version
    return ""


def unknown_versions(served: dict[str, set[str]]) -> list[str]:
    """Served versions that carry ``workloads`` or ``podgroups`` but whose shapes admit does not know (sorted)."""
    return sorted(v for v, names in served.items() if v not in WORKLOAD_API_VERSIONS and names & NEEDED)


async def discover_workload_api(api_client: client.ApiClient, timeout: float = 10.0) -> tuple[str, dict[str, set[str]]]:
    """``(version, served)``: the version :func:`choose_version` picks and what the server serves.

    Raises:
        kube.KubeError: discovery itself failed (API unreachable, 403 ...); a group or version the server does not
            know (404) is simply not served.
    """
    served: dict[str, set[str]] = {}
    with api_errors(f"discover {WORKLOAD_API_GROUP}", timeout):
        async with asyncio.timeout(timeout):
            groups: Any = await client.ApisApi(api_client).get_api_versions(_request_timeout=timeout)
            group = next((g for g in groups.groups or [] if g.name == WORKLOAD_API_GROUP), None)
            versions = [v.version for v in (group.versions if group else None) or []]
            custom = client.CustomObjectsApi(api_client)
            for version in versions:
                doc: Any = await custom.get_api_resources(WORKLOAD_API_GROUP, version, _request_timeout=timeout)
                served[version] = {r.name for r in doc.resources or []}
    return choose_version(served), served


async def configure_backends(api_client: client.ApiClient, config: Config, timeout: float = 10.0) -> Config:
    """``config`` with ``workload_api_version`` set from discovery when ``workload-api`` is one of its backends
    (unchanged, and no API call, otherwise).

    Raises:
        BackendUnavailable: ``workload-api`` is the default backend and the server does not serve it, or discovery
            failed.
    """
    if WORKLOAD_API not in config.allowed_backends:
        return config
    required = config.gang_backend == WORKLOAD_API
    try:
        version, served = await discover_workload_api(api_client, timeout)
    except KubeError as e:
        if required:
            raise BackendUnavailable(f"--gang-backend workload-api: {e.message}") from None
        log.warning("workload-api backend off: %s", e.message)
        return config
    unknown = unknown_versions(served)
    if unknown:
        what = (f"{WORKLOAD_API_GROUP} serves Workload/PodGroup version(s) {', '.join(unknown)}, whose shapes this "
                f"admit does not know (it speaks {', '.join(WORKLOAD_API_VERSIONS)})")
        if version:
            log.warning("%s; it uses %s", what, version)
        elif required:
            raise BackendUnavailable(f"--gang-backend workload-api: {what}; upgrade admit")
        else:
            log.warning("%s: the workload-api backend stays off rather than write shapes it does not know; upgrade "
                        "admit", what)
            return config
    if not version:
        shown = ", ".join(sorted(served)) or "none"
        if required:
            raise BackendUnavailable(f"--gang-backend workload-api: {not_served_message(config)} (it serves "
                                     f"{WORKLOAD_API_GROUP} versions: {shown})")
        log.warning("workload-api backend off (%s versions served: %s): %s", WORKLOAD_API_GROUP, shown,
                    not_served_message(config))
        return config
    log.info("workload-api backend speaks %s/%s", WORKLOAD_API_GROUP, version)
    return config.replace(workload_api_version=version)
