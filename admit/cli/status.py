"""``admit status``: read pods, scheduling events, gang workloads and nodes once (:func:`list_shared`), and each
wanted gang backend's objects and diagnosis (:func:`collect`); print one line per gang. This module names no backend.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, Iterable, TextIO

from ..backends import runtime
from ..backends.diagnose import JSON, GangStatus, WorkloadSize, format_table, size_key, to_json
from ..backends.common import asked_backend
from ..backends.status import Listed, list_or_note
from ..config import Config
from ..families import FAMILY_KINDS, kinds
from ..gang.children import is_child
from ..gang.plan import (BelowMinMember, GangError, Resolver, below_min_member, counted_and_fix, get_path,
                         min_member_source, parse_gang_annotations)
from ..kube.client import KubeError
from ..kube.watchcache import KubeRaw, Resource

__all__ = ["list_shared", "workload_sizes", "wanted_backends", "collect", "run_status"]

WORKLOAD_RESOURCES = tuple(Resource(k.api_group, k.versions[0][0], k.plural, k.kind) for k in FAMILY_KINDS
                           if k.in_status)
"""The workloads ``admit status`` lists to name a gang's workload: the kinds whose record says ``in_status``."""
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)


async def list_shared(api: KubeRaw, namespace: str | None, notes: list[str], config: Config | None = None) -> Listed:
    """The pods, ``FailedScheduling`` events and gang workloads of ``namespace`` (None: all) and every node: what
    every backend's diagnosis reads, listed once, with what each gang workload asks for (:func:`workload_sizes`,
    with ``config``'s annotations; none without a ``config``). A list refused with 403 or 404 is empty (nodes:
    ``None``), with a line in ``notes``. Raises ``KubeError`` when the API cannot be reached."""
    pods, events, nodes, *workloads = await asyncio.gather(
        list_or_note(api, PODS, namespace, notes),
        list_or_note(api, EVENTS, namespace, notes, (("fieldSelector", "reason=FailedScheduling"),)),
        list_or_note(api, NODES, None, notes),
        # a custom resource (a dot outside Kubernetes' own *.k8s.io: kubeflow.org): a cluster without its CRD answers
        # 404, which only means there is none of it
        *(list_or_note(api, r, namespace, notes, missing_ok="." in r.group and not r.group.endswith(".k8s.io"))
          for r in WORKLOAD_RESOURCES),
    )
    by_resource = list(zip(WORKLOAD_RESOURCES, [items or [] for items in workloads]))
    sizes = workload_sizes(by_resource, config) if config is not None else {}
    return Listed(pods or [], events or [], [w for _, items in by_resource for w in items], nodes, sizes)


def workload_sizes(listed: Iterable[tuple[Resource, list[JSON]]],
                   config: Config) -> dict[tuple[str, str, str], WorkloadSize]:
    """``diagnose.size_key(workload) -> WorkloadSize`` for each listed gang workload (``(resource, its items)``):
    the pods it asks for as admission counts them, with its kind's resolver (``families.kinds.KINDS``; operation
    ``UPDATE``) and ``backends.check_plan``'s below-minMember refusal (``gang.plan.below_min_member``), as the
    controller's claims do (``controller/claims.py`` ``claim_of``). The family's resolver, before any backend: the
    count does not depend on it, and a backend's own refusal would hide it. Left out: workloads without the
    min-member annotation, children of a gang workload, plans that count no pods, other refusals. Pure."""
    sizes: dict[tuple[str, str, str], WorkloadSize] = {}
    for resource, items in listed:
        kind = kinds.KINDS.get((resource.group, resource.kind))
        if kind is None:
            continue
        for obj in items:
            size = _size_of(obj, resource, kind.resolve, config)
            if size is not None:
                sizes[size_key(obj)] = size
    return sizes


def _size_of(obj: JSON, resource: Resource, resolver: Resolver, config: Config) -> WorkloadSize | None:
    """:func:`workload_sizes` of one stored workload, or None."""
    if is_child(obj, resource.group, resource.kind, kinds.PARENTS):
        return None
    obj = obj if obj.get("apiVersion") else dict(obj, apiVersion=resource.api_version, kind=resource.kind)
    meta = obj.get("metadata") or {}
    try:
        ann = parse_gang_annotations(get_path(obj, kinds.annotations_path(resource.group, resource.kind)), config)
        if ann is None:
            return None
        plan = resolver(obj, ann, config, str(meta.get("namespace") or ""), "UPDATE")
        if plan.total_pods is None:
            return None
        counted, fix = counted_and_fix(plan)
        below_min_member(plan, ann, config, counted, fix)  # check_plan's refusal, before it names a scheduler
    except BelowMinMember as e:
        return WorkloadSize(e.ref, e.total, e.counted, e.min_member, e.source, e.fix, e.lower)
    except GangError:
        return None
    return WorkloadSize(plan.ref, plan.total_pods, counted, plan.min_member, min_member_source(plan, ann, config), fix,
                        config.min_member_key)


def wanted_backends(config: Config, listed: Listed) -> frozenset[str]:
    """The backends whose ``admit status`` part runs: the enabled ones (``config.allowed_backends``:
    ``--gang-backend`` and ``--extra-gang-backend``, as admit serve runs with them) and those a listed workload or
    pod asks for with its ``<prefix>/backend`` annotation (``backends.common.asked_backend``, the rule admission
    follows). A backend that is registered but neither enabled nor asked for is not looked at, so a cluster without
    its objects gets no note about them (its CRD's ``... not listed (404 NotFound)``) on every run."""
    asked = {asked_backend((obj.get("metadata") or {}).get("annotations"), config)
             for obj in (*listed.workloads, *listed.pods) if isinstance(obj, dict)}
    return config.allowed_backends | asked


async def collect(api: KubeRaw, config: Config, namespace: str | None) -> tuple[list[GangStatus], list[str]]:
    """``(rows, notes)`` for ``namespace`` (None: all): :func:`list_shared`, then the status part of each backend in
    ``runtime.APIS`` that has one and is in :func:`wanted_backends`, in registration order (its ``collect``, then its
    pure ``diagnose``; a ``collect`` answering ``None`` has nothing to show), the rows of all sorted by namespace,
    group and workload. ``notes``: the lists left out and what the diagnoses left out, one line each. Raises
    ``KubeError`` when the API cannot be reached."""
    notes: list[str] = []
    listed = await list_shared(api, namespace, notes, config)
    wanted = wanted_backends(config, listed)
    rows: list[GangStatus] = []
    for name, backend_api in runtime.APIS.items():
        part = backend_api.status
        if part is None or name not in wanted:
            continue
        kwargs = await part.collect(api, config, namespace, listed, notes)
        if kwargs is not None:
            rows += part.diagnose(**kwargs)
    rows.sort(key=lambda r: (r.namespace, r.group, r.workload))
    return rows, notes


async def run_status(args: argparse.Namespace, config: Config, out: TextIO = sys.stdout,
                     err: TextIO = sys.stderr) -> int:
    """``admit status``: print the table (or ``-o json``) once, or with ``--watch`` read every ``--interval`` seconds
    and print again when a gang changed (not its waiting time alone). Returns 0, or 1 when the API cannot be reached."""
    from .serve import api_client_for

    api_client = await api_client_for(args)
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
