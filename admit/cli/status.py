"""``admit status``: read pods, scheduling events, gang workloads and nodes, and each gang backend's objects; print
one line per gang.

The objects every diagnosis reads are listed here once (``backends.status.Listed``); then the ``admit status`` part
of every registered backend that has one (``runtime.BackendAPI.status``, ``admit/backends/status.py``) lists its own
objects and diagnoses its gangs (pure: ``admit/backends/coscheduling/diagnose.py``,
``admit/backends/workload_api/diagnose.py``, or a backend registered from elsewhere), and their rows make one table.
This module names no backend. It lists through the Kubernetes REST API (kubeconfig or in-cluster configuration, like
kubectl; ``--api-server`` for a plain URL such as ``kubectl proxy``) and prints. Lists that RBAC forbids or that the
cluster does not serve (no Nodes permission, no PodGroup CRD) are left out of the diagnosis with a note on standard
error, never a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from ..backends import runtime
from ..backends.diagnose import GangStatus, format_table, to_json
from ..backends.status import Listed, list_or_note
from ..config import Config
from ..families import FAMILY_KINDS
from ..kube.client import KubeError, load_api_client
from ..kube.watchcache import KubeRaw, Resource

__all__ = ["list_shared", "collect", "run_status"]

WORKLOAD_RESOURCES = tuple(Resource(k.api_group, k.versions[0][0], k.plural, k.kind) for k in FAMILY_KINDS
                           if k.in_status)
"""The workloads ``admit status`` lists to name a gang's workload: the kinds whose record says ``in_status``."""
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


async def list_shared(api: KubeRaw, namespace: str | None, notes: list[str]) -> Listed:
    """The pods, ``FailedScheduling`` events and gang workloads of ``namespace`` (None: all) and every node: what
    every backend's diagnosis reads, listed once. A list refused with 403 or 404 is empty (nodes: ``None``), with a
    line in ``notes``. Raises ``KubeError`` when the API cannot be reached."""
    pods, events, nodes, *workloads = await asyncio.gather(
        list_or_note(api, PODS, namespace, notes),
        list_or_note(api, EVENTS, namespace, notes, (("fieldSelector", "reason=FailedScheduling"),)),
        list_or_note(api, NODES, None, notes),
        *(list_or_note(api, r, namespace, notes) for r in WORKLOAD_RESOURCES),
    )
    return Listed(pods or [], events or [], [w for items in workloads for w in items or []], nodes)


async def collect(api: KubeRaw, config: Config, namespace: str | None) -> tuple[list[GangStatus], list[str]]:
    """``(rows, notes)`` for ``namespace`` (None: all): :func:`list_shared`, then the status part of each backend in
    ``runtime.APIS`` that has one, in registration order (its ``collect``, then its pure ``diagnose``; a ``collect``
    answering ``None`` has nothing to show), the rows of all sorted by namespace, group and workload. ``notes``:
    the lists left out and what the diagnoses left out, one line each. Raises ``KubeError`` when the API cannot be
    reached."""
    notes: list[str] = []
    listed = await list_shared(api, namespace, notes)
    rows: list[GangStatus] = []
    for backend_api in runtime.APIS.values():
        part = backend_api.status
        if part is None:
            continue
        kwargs = await part.collect(api, config, namespace, listed, notes)
        if kwargs is not None:
            rows += part.diagnose(**kwargs)
    rows.sort(key=lambda r: (r.namespace, r.group, r.workload))
    return rows, notes


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
                rows, notes = await collect(api, config, namespace)
            except KubeError as e:
                print(f"admit status: {e.message}", file=err)
                if not args.watch:
                    return 1
            else:
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
