"""The optional ``admit status`` part of a gang backend (:class:`BackendStatus`, ``runtime.BackendAPI.status``), and
the API reading all of them share. ``admit/cli/status.py`` lists what every diagnosis reads once (:class:`Listed`),
runs each backend's part and prints the rows in one table; it never names a backend. Not pure: it reads through
``kube.watchcache.KubeRaw``; a list that RBAC forbids or the API server does not serve is left out with a note
(:func:`list_or_note`), never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol

from ..config import Config
from ..kube.client import KubeError
from ..kube.watchcache import KubeRaw, Resource
from .diagnose import JSON, GangStatus, WorkloadSize

__all__ = ["Listed", "Collect", "BackendStatus", "list_or_note"]


@dataclass(frozen=True, slots=True)
class Listed:
    """What ``admit status`` lists once for every backend's status part, as the API lists it (plain dicts, each
    with its ``kind``).

    Attributes:
        pods: the Pods of the namespace (or all), any phase.
        events: core/v1 Events with reason ``FailedScheduling``.
        workloads: the objects of the workload kinds whose record says ``in_status`` (Deployments, Jobs, ...).
        nodes: every Node, or ``None`` when they could not be listed (RBAC): checks on capacity are skipped then.
        sizes: ``diagnose.size_key(workload) -> diagnose.WorkloadSize`` for the gang workloads of ``workloads``; a
            diagnosis passes it on to ``diagnose.size_cause``.
    """

    pods: list[JSON]
    events: list[JSON]
    workloads: list[JSON]
    nodes: list[JSON] | None
    sizes: Mapping[tuple[str, str, str], WorkloadSize] = field(default_factory=dict)


class Collect(Protocol):
    """``await collect(api, config, namespace, listed, notes)``: the keyword arguments of the backend's
    ``diagnose`` for ``namespace`` (``None``: all), or ``None`` when the cluster has nothing of this backend to look
    at (no row then). Lists its own objects with :func:`list_or_note`; appends to ``notes`` (one line each, printed
    on standard error) what it left out and why. Raises ``kube.KubeError`` when the API cannot be reached."""

    def __call__(self, api: KubeRaw, config: Config, namespace: str | None, listed: Listed,
                 notes: list[str]) -> Awaitable[dict[str, Any] | None]: ...


@dataclass(frozen=True, slots=True)
class BackendStatus:
    """The ``admit status`` part of one backend.

    Attributes:
        collect: :class:`Collect` (the API half: discovery and lists).
        diagnose: ``diagnose(**kwargs) -> [GangStatus]`` (pure), with what ``collect`` returned; rows sorted by
            namespace, group and workload.
    """

    collect: Collect
    diagnose: Callable[..., list[GangStatus]]


async def list_or_note(api: KubeRaw, resource: Resource, namespace: str | None, notes: list[str],
                       query: tuple[tuple[str, str], ...] = (), missing_ok: bool = False) -> list[JSON] | None:
    """The items of ``GET`` on ``resource`` in ``namespace`` (``None``: all namespaces; ``query``: e.g. a
    ``fieldSelector``), each given ``resource.kind`` (list items carry no ``kind``). ``None``, with a line in
    ``notes``, when the API server answers 403 (RBAC) or 404 (not served; with ``missing_ok``, e.g. a workload
    kind whose CRD is not installed, so there is none of it to diagnose, no line). Raises ``kube.KubeError`` for
    any other failure."""
    try:
        answer = await api.request("GET", resource.path(namespace), query=query)
    except KubeError as e:
        if e.status == 404 and missing_ok:
            return None
        if e.status in (403, 404):
            notes.append(f"{resource.label} not listed ({e.status} {e.reason}); left out of the diagnosis")
            return None
        raise
    items = answer.get("items") or []
    for item in items:  # list items carry no apiVersion/kind
        item.setdefault("kind", resource.kind)
    return items
