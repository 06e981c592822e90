"""Which ``scheduling.k8s.io`` version of the Workload API the API server serves, found once at ``admit serve`` start.

API discovery (``GET /apis/scheduling.k8s.io`` and ``/apis/scheduling.k8s.io/<version>``, as kubectl does): a
version counts when it serves both ``workloads`` and ``podgroups`` (``v1`` also serves ``priorityclasses``). admit
speaks the versions whose shapes it knows (``workload_api.SHAPES``), preferring ``v1`` (planned GA, 1.38), then
``v1beta1`` (1.37), ``v1alpha3`` (1.37), ``v1alpha2`` (1.36). ``v1alpha1`` (1.35: embedded pod groups, pod ``spec.workloadRef``, no
runtime PodGroup) is not spoken: a cluster serving only it is told to run Kubernetes 1.36 or the Coscheduling backend
(``first_alpha_message``; the versions found are kept in ``Config.workload_api_served``). Seen on a 1.36.2
kube-apiserver with ``--feature-gates=GenericWorkload=true,GangScheduling=true
--runtime-config=scheduling.k8s.io/v1alpha2=true``: versions ``v1`` and ``v1alpha2``; v1alpha2 resources
``podgroups``, ``podgroups/status``, ``workloads``.

A served version not in the table (a later alpha, a v2) is reported once, at start; with no known version the
backend stays off rather than write shapes admit does not know. When ``workload-api`` is the default backend and
none is served, ``admit serve`` refuses to start with one line naming the feature gates and runtime-config; as an
extra backend, admit starts and refuses the workloads that ask for it, with the same reason.

An upgrade can stop serving the version found at start (1.37 serves ``v1alpha3``/``v1beta1``, no longer
``v1alpha2``): every write then answers 404. :class:`Rediscovery` runs discovery again on such a 404 (at most once
per ``min_interval``, one run for all callers) and switches admission and the controller (its listeners) to the new
version, or turns the backend off with the gates to turn on (``not_served_message``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from kubernetes_asyncio import client

from ...config import WORKLOAD_API, WORKLOAD_API_FIRST_ALPHA, WORKLOAD_API_GROUP, WORKLOAD_API_VERSIONS, Config
from ...kube.client import KubeError, api_errors
from ..common import BackendUnavailable
from . import not_served_message

__all__ = ["BackendUnavailable", "choose_version", "unknown_versions", "gang_versions", "discover_workload_api",
           "configure_backends", "Rediscovery", "start"]

log = logging.getLogger("admit.backends")
NEEDED = frozenset({"workloads", "podgroups"})


def choose_version(served: dict[str, set[str]]) -> str:
    """The version to speak from ``{version: {resource names}}`` of ``scheduling.k8s.io``: the first of
    ``config.WORKLOAD_API_VERSIONS`` that serves both ``workloads`` and ``podgroups``; ``""`` when none does."""
    return next((version for version in WORKLOAD_API_VERSIONS if NEEDED <= served.get(version, set())), "")


def unknown_versions(served: dict[str, set[str]]) -> list[str]:
    """Served versions that carry ``workloads`` or ``podgroups`` but whose shapes admit does not know (sorted); not
    the first alpha (``v1alpha1``), which admit knows and does not speak."""
    return sorted(v for v in gang_versions(served) if v not in WORKLOAD_API_VERSIONS and v != WORKLOAD_API_FIRST_ALPHA)


def gang_versions(served: dict[str, set[str]]) -> tuple[str, ...]:
    """The versions of ``served`` that carry ``workloads`` or ``podgroups`` (sorted): ``("v1alpha1",)`` on a
    Kubernetes 1.35 API server with the ``GenericWorkload`` gate, ``("v1alpha2",)`` on 1.36."""
    return tuple(sorted(v for v, names in served.items() if names & NEEDED))


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
    config = config.replace(workload_api_served=gang_versions(served))
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


class Rediscovery:
    """Discovery again, when a write answered 404 for the Workload API version in use (module docstring).

    Args:
        api_client: the ApiClient discovery uses.
        config: the settings in use (``workload_api_version`` set at start by :func:`configure_backends`).
        min_interval: seconds between two discoveries (404s in a burst share one).
        discover: ``(api_client, timeout) -> (version, served)``, default :func:`discover_workload_api`.

    Attributes:
        config: the settings to use now (replaced on a switch).
        listeners: ``async (new_config) -> None``, awaited after a switch, in order.
    """

    def __init__(self, api_client: client.ApiClient, config: Config, *, min_interval: float = 5.0,
                 timeout: float = 10.0, discover: Callable[..., Awaitable[tuple[str, dict[str, set[str]]]]] | None = None
                 ) -> None:
        self.api_client = api_client
        self.config = config
        self.min_interval = min_interval
        self.timeout = timeout
        self._discover = discover or discover_workload_api
        self._lock = asyncio.Lock()
        self._last = float("-inf")
        self.listeners: list[Callable[[Config], Awaitable[None]]] = []

    async def again(self, config: Config) -> Config:
        """``runtime.BackendAPI.start``'s rediscovery: the settings to use after a write in ``config``'s version
        answered 404 "could not find the requested resource": :attr:`config`, switched to the version discovery now
        finds (``workload_api_version`` ``""`` when none is served). Unchanged when another caller switched already,
        when discovery ran less than ``min_interval`` seconds ago, when it still finds that version (the 404 was
        something else), or when it fails (logged)."""
        version = config.workload_api_version
        async with self._lock:
            if self.config.workload_api_version != version or time.monotonic() - self._last < self.min_interval:
                return self.config
            self._last = time.monotonic()
            try:
                found, served = await self._discover(self.api_client, self.timeout)
            except KubeError as e:
                log.warning("workload-api backend: %s/%s answered 404 and discovery failed: %s", WORKLOAD_API_GROUP,
                            version, e.message)
                return self.config
            if found == version:
                return self.config
            shown = ", ".join(sorted(served)) or "none"
            if found:
                log.warning("workload-api backend: the API server no longer serves %s/%s (upgraded?); it speaks %s "
                            "now (versions served: %s)", WORKLOAD_API_GROUP, version, found, shown)
            else:
                log.warning("workload-api backend off: the API server no longer serves %s/%s and serves no version "
                            "admit speaks (versions served: %s): %s", WORKLOAD_API_GROUP, version, shown,
                            not_served_message(self.config))
            self.config = self.config.replace(workload_api_version=found, workload_api_served=gang_versions(served))
            for listener in self.listeners:
                try:
                    await listener(self.config)
                except Exception:  # noqa: BLE001 - one listener must not keep the switch from the others
                    log.exception("workload-api backend: a listener of the switch to %s failed", found or "none")
            return self.config


async def start(api_client: client.ApiClient, config: Config) -> tuple[Config, str | None, Rediscovery | None]:
    """``runtime.BackendAPI.start`` of the ``workload-api`` backend: ``config`` with the served version
    (:func:`configure_backends`), no problem to report, and a :class:`Rediscovery` for a later 404 when a version is
    served.

    Raises:
        BackendUnavailable: it is the default backend and the server does not serve it.
    """
    config = await configure_backends(api_client, config)
    return config, None, Rediscovery(api_client, config) if config.workload_api_version else None
