"""``admit status``: read PodGroups, pods, scheduling events, gang workloads and nodes, print one line per gang.

The diagnosis is :func:`admit.backends.diagnose.diagnose` (pure); this module only lists objects through the Kubernetes REST
API (kubeconfig or in-cluster configuration, like kubectl; ``--api-server`` for a plain URL such as
``kubectl proxy``) and prints. Lists that RBAC forbids or that the cluster does not serve (no Nodes permission, no
PodGroup CRD) are left out of the diagnosis with a note on standard error, never a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from ..families import FAMILY_KINDS
from ..config import COSCHEDULING, WORKLOAD_API, WORKLOAD_API_GROUP, Config
from ..kube.client import KubeError, load_api_client
from ..backends.common import asked_backend
from ..backends.diagnose import diagnose, diagnose_native, format_table, to_json
from ..kube.watchcache import KubeRaw, Resource

__all__ = ["collect", "collect_native", "run_status"]

WORKLOAD_RESOURCES = tuple(Resource(k.api_group, k.versions[0][0], k.plural, k.kind) for k in FAMILY_KINDS
                           if k.in_status)
"""The workloads ``admit status`` lists to name a gang's workload: the kinds whose record says ``in_status``."""
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


async def _list(api: KubeRaw, resource: Resource, namespace: str | None, notes: list[str],
                query: tuple[tuple[str, str], ...] = ()) -> list[dict[str, Any]] | None:
    try:
        answer = await api.request("GET", resource.path(namespace), query=query)
    except KubeError as e:
        if e.status in (403, 404):
            notes.append(f"{resource.label} not listed ({e.status} {e.reason}); left out of the diagnosis")
            return None
        raise
    items = answer.get("items") or []
    for item in items:  # list items carry no apiVersion/kind
        item.setdefault("kind", resource.kind)
    return items


async def collect(api: KubeRaw, config: Config, namespace: str | None) -> tuple[dict[str, Any], list[str]]:
    """The keyword arguments of :func:`admit.backends.diagnose.diagnose` for ``namespace`` (None: all), and notes about lists
    left out. Raises ``KubeError`` when the API cannot be reached."""
    notes: list[str] = []
    pg_resource = Resource(config.pod_group_group, config.pod_group_version, config.pod_group_plural, "PodGroup")
    lists = await asyncio.gather(
        _list(api, pg_resource, namespace, notes),
        _list(api, PODS, namespace, notes),
        _list(api, EVENTS, namespace, notes, (("fieldSelector", "reason=FailedScheduling"),)),
        _list(api, NODES, None, notes),
        *(_list(api, r, namespace, notes) for r in WORKLOAD_RESOURCES),
    )
    pod_groups, pods, events, nodes, *workloads = lists
    if pod_groups is None and COSCHEDULING in config.allowed_backends:
        problem = await _pod_group_crd_problem(api, config, pg_resource)
        if problem:
            notes.append(problem)
    return {
        "pod_groups": pod_groups or [], "pods": pods or [], "events": events or [], "nodes": nodes,
        "workloads": [w for items in workloads for w in items or []], "config": config,
    }, notes


async def _pod_group_crd_problem(api: KubeRaw, config: Config, resource: Resource) -> str | None:
    """When the PodGroup list was refused: ``coscheduling.crd_missing_message`` if the API server does not serve
    the resource (404 on discovery of its group/version, or no ``podgroups`` there; the other API group asked too),
    else None."""
    from ..backends.coscheduling import crd_missing_message, other_pod_group_group

    async def serves(group: str) -> bool | None:
        try:
            doc = await api.request("GET", f"/apis/{group}/{config.pod_group_version}")
        except KubeError as e:
            return False if e.status == 404 else None
        return any(isinstance(r, dict) and r.get("name") == resource.plural for r in doc.get("resources") or [])

    if await serves(config.pod_group_group) is not False:
        return None
    return "PodGroup CRD: " + crd_missing_message(config, bool(await serves(other_pod_group_group(config))))


async def _served_workload_api(api: KubeRaw, notes: list[str]) -> str | None:
    """The scheduling.k8s.io version admit would speak (``backends.discovery.choose_version``), ``""`` when none is
    served, ``None`` when discovery itself is forbidden."""
    from ..backends.workload_api.discovery import choose_version

    try:
        group = await api.request("GET", f"/apis/{WORKLOAD_API_GROUP}")
    except KubeError as e:
        if e.status == 404:
            return ""
        if e.status == 403:
            notes.append(f"discovery of {WORKLOAD_API_GROUP} forbidden ({e.reason}); native gangs left out")
            return None
        raise
    served: dict[str, set[str]] = {}
    for v in group.get("versions") or []:
        version = v.get("version") if isinstance(v, dict) else None
        if version:
            try:
                doc = await api.request("GET", f"/apis/{WORKLOAD_API_GROUP}/{version}")
            except KubeError:
                continue
            served[version] = {r["name"] for r in doc.get("resources") or []
                               if isinstance(r, dict) and isinstance(r.get("name"), str)}
    return choose_version(served)


async def collect_native(api: KubeRaw, config: Config, namespace: str | None, pods: list[dict[str, Any]],
                         events: list[dict[str, Any]], workloads: list[dict[str, Any]],
                         notes: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of :func:`admit.backends.diagnose.diagnose_native` (the pods, events and workloads
    :func:`collect` read, plus the served version's scheduling.k8s.io PodGroups), or None when there is nothing
    native to look at: no pod names a ``schedulingGroup``, no workload asks for the workload-api backend and the
    API server serves no Workload API."""
    served = await _served_workload_api(api, notes)
    native_asked = config.gang_backend == WORKLOAD_API or any(
        asked_backend((w.get("metadata") or {}).get("annotations"), config) == WORKLOAD_API for w in workloads)
    if served is None or (not served and not native_asked):
        return None
    pod_groups = await _list(api, Resource(WORKLOAD_API_GROUP, served, "podgroups", "PodGroup"), namespace,
                             notes) if served else []
    return {"pod_groups": pod_groups or [], "pods": pods, "events": events, "workloads": workloads,
            "served": served, "config": config, "notes": notes}


async def run_status(args: argparse.Namespace, config: Config, out: TextIO = sys.stdout,
                     err: TextIO = sys.stderr) -> int:
    """``admit status``: print the table (or ``-o json``) once, or with ``--watch`` read every ``--interval`` seconds
    and print again when a gang changed (its waiting time alone does not count). Returns the exit code: 0, or 1 when the API cannot be reached."""
    from kubernetes_asyncio import client

    if args.api_server:
        api_client = client.ApiClient(client.Configuration(host=args.api_server.rstrip("/")))
    else:
        api_client = await load_api_client(args.kubeconfig)
    namespace = None if args.all_namespaces else (args.namespace or _current_namespace(args.kubeconfig))
    api = KubeRaw(api_client, timeout=args.request_timeout)
    last: list[tuple[Any, ...]] | None = None
    try:
        while True:
            try:
                kwargs, notes = await collect(api, config, namespace)
            except KubeError as e:
                print(f"admit status: {e.message}", file=err)
                if not args.watch:
                    return 1
            else:
                rows = diagnose(**kwargs)
                native = await collect_native(api, config, namespace, kwargs["pods"], kwargs["events"],
                                              kwargs["workloads"], notes)
                if native is not None:
                    rows = sorted(rows + diagnose_native(**native), key=lambda r: (r.namespace, r.group, r.workload))
                text = to_json(rows) if args.output == "json" else format_table(rows, namespace is None)
                # a change is a change of the gangs, not of their waiting time
                signature = [(r.namespace, r.group, r.workload, r.min_member, r.pods, r.scheduled, r.pending, r.phase,
                              r.reason, r.message) for r in rows]
                if signature != last:
                    for note in notes:
                        print(f"note: {note}", file=err)
                    print(text, file=out, flush=True)
                    if args.watch and args.output != "json":
                        print(file=out, flush=True)
                    last = signature
            if not args.watch:
                return 0
            await asyncio.sleep(args.interval)
    finally:
        await api_client.close()


def _current_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context (as kubectl uses it), else ``default``."""
    import yaml

    from ..kube.client import default_kubeconfig

    path = kubeconfig or default_kubeconfig()
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError):
        return "default"
    current = doc.get("current-context")
    for ctx in doc.get("contexts") or []:
        if isinstance(ctx, dict) and ctx.get("name") == current:
            return (ctx.get("context") or {}).get("namespace") or "default"
    return "default"
