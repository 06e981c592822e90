"""``admit review``: the webhook's decisions on manifests and AdmissionReview files, offline.

Input: files or directories (``*.yaml``, ``*.yml``, ``*.json``; directories are read one level deep unless
``recursive``, like ``kubectl apply -f``). A YAML file may hold several documents; a ``List`` is expanded. A document
whose ``kind`` is ``AdmissionReview`` is answered as the server would answer it; any other object is reviewed as a
CREATE of that object (namespace: ``metadata.namespace``, else ``default``).

Each object goes through the same code as the server: ``/mutate``, the patch applied with ``jsonpatch``, then
``/validate`` on the mutated object. Between the two, an object created with ``generateName`` only gets its name the
way kube-apiserver gives it (the prefix plus 5 characters, after the mutating webhooks), so ``admit review`` and the
server see the same objects in each phase. A manifest's review uid (and so any generated name) is derived from its
file and position: the same input gives the same output. PodGroups are "created" in an in-memory store
(:class:`OfflineKube`), which also serves the other input objects, so a ``deployments/scale`` review finds its
Deployment among the inputs.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import uuid
from pathlib import Path
from typing import Any, Iterable, TextIO

import jsonpatch
import yaml

from ..webhook.admission import Admission
from ..config import Config
from ..families.kinds import RESOLVERS
from ..kube.client import AlreadyExists
from ..echo import clip_message
from ..gang.plan import generated_group_name, get_path
from ..webhook.admissionreview import AdmissionRequest, BadReview, dumps, parse_review

__all__ = ["InputError", "OfflineKube", "load_documents", "manifest_request", "review_documents", "format_text",
           "format_lines"]

SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    """A file that cannot be read or parsed; ``str(e)`` is ``"<file>: <reason>"``."""


def _plural(kind: str) -> str:
    lower = kind.lower()
    return lower + ("es" if lower.endswith("s") else "s")


class OfflineKube:
    """In-memory stand-in for the Kubernetes API used by ``admit review`` (implements ``PodGroupStore``).

    ``objects`` are the reviewed input objects, keyed by ``(group, plural, namespace, name)``; PodGroups that
    admission creates are kept in ``pod_groups`` keyed by ``(namespace, name)``. Never raises for timeouts.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.pod_groups: dict[tuple[str, str], dict[str, Any]] = {}

    def add_object(self, obj: dict[str, Any]) -> None:
        """Make ``obj`` (a manifest with apiVersion/kind/metadata) readable through :meth:`get_object`."""
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        meta = obj.get("metadata") or {}
        kind = str(obj.get("kind", ""))
        # a Cluster* kind (ClusterTrainingRuntime) is cluster-scoped: read with namespace ""
        namespace = "" if kind.startswith("Cluster") else str(meta.get("namespace") or "default")
        key = (group, _plural(kind), namespace, str(meta.get("name")))
        self.objects[key] = obj

    async def create_pod_group(self, body: dict[str, Any], dry_run: bool, timeout: float) -> dict[str, Any]:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        if key in self.pod_groups:
            raise AlreadyExists(409, "AlreadyExists", f"PodGroup {key[0]}/{key[1]} already exists")
        if not dry_run:
            self.pod_groups[key] = json.loads(json.dumps(body))
        return body

    async def get_pod_group(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
        return self.pod_groups.get((namespace, name))

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``GroupCache`` view of the PodGroups made so far in this run (so a Spark driver reviewed earlier makes its
        executors join, as the watch-backed cache does in ``admit serve``)."""
        return self.pod_groups.get((namespace, name))

    async def patch_pod_group(
        self, namespace: str, name: str, ops: list[dict[str, Any]], dry_run: bool, timeout: float
    ) -> dict[str, Any]:
        patched = jsonpatch.apply_patch(self.pod_groups[(namespace, name)], ops)
        if not dry_run:
            self.pod_groups[(namespace, name)] = patched
        return patched

    async def get_object(
        self, group: str, version: str, plural: str, namespace: str, name: str, timeout: float
    ) -> dict[str, Any] | None:
        return self.objects.get((group, plural, namespace, name))

    async def create_object(
        self, group: str, version: str, plural: str, body: dict[str, Any], dry_run: bool, timeout: float
    ) -> dict[str, Any]:
        """Keep a Workload API object (``workload-api`` backend) so that later reviews see it (409 if it exists)."""
        key = (group, plural, body["metadata"]["namespace"], body["metadata"]["name"])
        if key in self.objects:
            raise AlreadyExists(409, "AlreadyExists", f"{body.get('kind')} {key[2]}/{key[3]} already exists")
        if not dry_run:
            self.objects[key] = json.loads(json.dumps(body))
        return body

    async def patch_object(
        self, group: str, version: str, plural: str, namespace: str, name: str, ops: list[dict[str, Any]],
        dry_run: bool, timeout: float,
    ) -> dict[str, Any]:
        patched = jsonpatch.apply_patch(self.objects[(group, plural, namespace, name)], ops)
        if not dry_run:
            self.objects[(group, plural, namespace, name)] = patched
        return patched

    async def delete_object(
        self, group: str, version: str, plural: str, namespace: str, name: str, uid: str | None, dry_run: bool,
        timeout: float,
    ) -> None:
        if not dry_run:
            self.objects.pop((group, plural, namespace, name), None)

    async def get_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
        """A Pod of this run, as mutated (a Spark driver reviewed earlier tells its executors its group)."""
        return self.objects.get(("", "pods", namespace, name))


def _files(paths: Iterable[str], recursive: bool, errors: list[str] | None = None) -> list[Path | None]:
    """The files to read, in order; ``None`` stands for standard input (``-``). A missing path raises
    :class:`InputError`, or is appended to ``errors`` when that list is given."""
    out: list[Path | None] = []
    for arg in paths:
        if arg == "-":
            out.append(None)
            continue
        p = Path(arg)
        if p.is_dir():
            pattern = "**/*" if recursive else "*"
            out.extend(sorted(f for f in p.glob(pattern) if f.is_file() and f.suffix in SUFFIXES))
        elif p.exists():
            out.append(p)
        elif errors is not None:
            errors.append(f"{p}: no such file or directory")
        else:
            raise InputError(f"{p}: no such file or directory")
    return out


def _yaml_error(e: yaml.YAMLError) -> str:
    """PyYAML's whole message (problem, line and column) on one line."""
    text = " ".join(line.strip() for line in str(e).splitlines() if line.strip() and line.strip() != "^")
    return text.replace('in "<unicode string>", ', "") or type(e).__name__


def load_documents(
    paths: Iterable[str], recursive: bool = False, stdin: TextIO | None = None, errors: list[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """``[(source file, document), ...]`` from files, directories and ``-`` (standard input, e.g.
    ``kubectl get deploy -o yaml | admit review -``); ``List`` kinds expanded, empty documents skipped.

    ``errors``: when given, a file that cannot be read is reported there (``"<file>: <reason>"``) and the other files
    are still read (``admit review DIR`` reviews the rest and exits 2 at the end).

    Raises:
        InputError: a path is missing, a file is unreadable, not YAML/JSON (with PyYAML's line and column), a
            document is not a mapping (only when ``errors`` is ``None``), or there is no document at all.
    """
    docs: list[tuple[str, dict[str, Any]]] = []
    for f in _files(paths, recursive, errors):
        name = "<stdin>" if f is None else str(f)
        try:
            try:
                text = (stdin or sys.stdin).read() if f is None else f.read_text(encoding="utf-8")
                loaded = list(yaml.safe_load_all(text))
            except yaml.YAMLError as e:
                raise InputError(f"{name}: not valid YAML or JSON: {_yaml_error(e)}") from None
            except RecursionError:
                raise InputError(f"{name}: not valid YAML or JSON: nested too deeply") from None
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(f"{name}: {e.strerror if isinstance(e, OSError) and e.strerror else e}") from None
        except InputError as e:
            if errors is None:
                raise
            errors.append(str(e))
            continue
        for i, doc in enumerate(loaded):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                message = f"{name}: document {i + 1} is not a mapping (got {type(doc).__name__})"
                if errors is None:
                    raise InputError(message)
                errors.append(message)
                continue
            if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
                docs.extend((name, item) for item in doc["items"] if isinstance(item, dict))
            else:
                docs.append((name, doc))
    if not docs and not errors:
        raise InputError(f"{', '.join(paths)}: no Kubernetes objects found (.yaml, .yml or .json documents)")
    return docs


def _fill_generated_name(req: AdmissionRequest, obj: dict[str, Any] | None) -> AdmissionRequest:
    """``req`` with ``metadata.name`` filled in from ``generateName`` on a CREATE that has none, as kube-apiserver
    does between the mutating and the validating webhooks (``rest.BeforeCreate``); the suffix is derived from
    ``req.uid`` so that a review is repeatable."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if req.operation != "CREATE" or not isinstance(meta, dict) or meta.get("name"):
        return dataclasses.replace(req, object=obj)
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        return dataclasses.replace(req, object=obj)
    name = generated_group_name(prefix, "name:" + req.uid)  # kube-apiserver's shape: prefix[:58] + 5 characters
    assert obj is not None
    obj = dict(obj, metadata=dict(meta, name=name))
    return dataclasses.replace(req, object=obj, name=name)


def manifest_request(doc: dict[str, Any], uid: str | None = None) -> AdmissionRequest:
    """The CREATE AdmissionRequest kube-apiserver would send for manifest ``doc`` (not a dry run; ``uid`` random
    unless given; namespace "default" when the manifest has none, as ``kubectl apply`` without ``-n``)."""
    api_version = str(doc.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    kind = str(doc.get("kind", ""))
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return AdmissionRequest(
        uid=uid or str(uuid.uuid4()),
        api_version="admission.k8s.io/v1",
        group=group,
        version=version,
        kind=kind,
        resource_group=group,
        resource=_plural(kind),
        sub_resource="",
        operation="CREATE",
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        object=doc,
        old_object=None,
        dry_run=False,
    )


async def review_documents(
    docs: list[tuple[str, dict[str, Any]]], config: Config, errors: list[str] | None = None
) -> list[dict[str, Any]]:
    """Run every document through ``/mutate`` then ``/validate``; one result dict per document.

    ``errors``: when given, a malformed AdmissionReview is reported there and the other documents are reviewed.

    Result keys: ``source``, ``kind``, ``apiVersion``, ``name``, ``namespace``, ``operation``, ``allowed``,
    ``message``, ``warnings`` (list), ``patch`` (decoded JSONPatch list), ``object`` (after mutation, or ``None``),
    ``podGroups`` (PodGroup objects the webhook would create or patch, as stored).

    Raises:
        InputError: an AdmissionReview document is malformed (the reason the server would give with HTTP 400).
    """
    store = OfflineKube(config)
    for _, doc in docs:
        if doc.get("kind") != "AdmissionReview":
            store.add_object(doc)
        if doc.get("kind") == "PodGroup" and doc.get("apiVersion") == config.pod_group_api_version:
            # a PodGroup reviewed with the workloads is one the cluster will have (a hand-written one): a workload
            # that names it joins it as it is, and is refused when it could never fill it, as in the webhook
            meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
            store.pod_groups[(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))] = doc
    admission = Admission(config.replace(api_timeout_seconds=30.0), store, cache=store)
    results = []
    for i, (source, doc) in enumerate(docs):
        if doc.get("kind") == "AdmissionReview":
            try:
                req = parse_review(dumps(doc))
            except (BadReview, ValueError, TypeError, RecursionError) as e:  # dumps of odd YAML values
                if errors is None:
                    raise InputError(f"{source}: {e}") from None
                errors.append(f"{source}: {e}")
                continue
        else:
            req = manifest_request(doc, str(uuid.uuid5(uuid.NAMESPACE_URL, f"admit-review:{source}#{i}")))
        mutation = admission.mutate(req)
        if mutation.lookup is not None:
            mutation = await admission.finish_mutation(req, mutation)
        obj = req.object
        if mutation.patch and obj is not None:
            try:
                obj = jsonpatch.apply_patch(obj, mutation.patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, RecursionError) as e:
                if errors is None:
                    raise InputError(f"{source}: the patch does not apply: {e}") from None
                errors.append(f"{source}: the patch does not apply: {e}")
                continue
        req = _fill_generated_name(req, obj)
        obj = req.object
        if mutation.patch and obj is not None and doc.get("kind") != "AdmissionReview":
            store.add_object(obj)
        decision = await admission.validate(req)
        meta = (obj or {}).get("metadata") or {}
        if doc.get("kind") != "AdmissionReview" and (req.group, req.kind) not in RESOLVERS:
            decision.warnings.extend(_unhandled_kind_warnings(doc, req.kind, config))
        results.append(
            {
                "source": source,
                "kind": req.kind,
                "apiVersion": f"{req.group}/{req.version}" if req.group else req.version,
                "name": req.name or str(meta.get("name") or meta.get("generateName") or ""),
                "namespace": req.namespace,
                "operation": req.operation + (f" {req.resource}/{req.sub_resource}" if req.sub_resource else ""),
                "allowed": decision.allowed,
                "message": decision.message,
                "warnings": mutation.warnings + [w for w in decision.warnings if w not in mutation.warnings],
                "patch": mutation.patch,
                "object": obj,
                "podGroups": decision.pod_groups,
            }
        )
    return results


def _unhandled_kind_warnings(doc: dict[str, Any], kind: str, config: Config) -> list[str]:
    """Why a gang annotation on a kind admit does not handle does nothing (the webhook is never called for it)."""
    annotations = (doc.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict) or not any(str(k).startswith(config.annotation_prefix) for k in annotations):
        return []
    if kind == "CronJob":
        return [f"admit does not handle CronJob itself: put the {config.annotation_prefix} annotations under "
                "spec.jobTemplate.metadata.annotations, so every Job the CronJob creates is a gang"]
    if not kind:
        return ["this document has no kind: it is not a Kubernetes object admit can review"]
    return [f"admit does not handle {kind}: the {config.annotation_prefix} annotations have no effect on it "
            "(handled: Deployment, StatefulSet, ReplicaSet, Job, Pod, Kubeflow jobs, SparkApplication)"]


def _yaml(obj: Any, indent: str = "    ") -> str:
    text = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).rstrip("\n")
    return "\n".join(indent + line for line in text.splitlines())


def format_text(results: list[dict[str, Any]], show_objects: bool = True) -> str:
    """Human-readable report: verdict, message, warnings, patch, PodGroups and (optionally) the mutated object."""
    out = []
    for r in results:
        where = f"{r['namespace']}/{r['name']}" if r["namespace"] else r["name"]
        verdict = "ALLOWED" if r["allowed"] else "DENIED"
        out.append(f"=== {r['kind']} {where} ({r['operation']}, {r['source']}): {verdict}")
        if r["message"]:
            out.append(f"  message: {r['message']}")
        for w in r["warnings"]:
            out.append(f"  warning: {w}")
        if r["patch"] and r["allowed"]:
            out.append("  patch:")
            out.append(_yaml(r["patch"]))
        for pg in r["podGroups"]:
            kind = str(pg.get("kind") or "PodGroup")
            out.append(f"  {kind[:1].lower() + kind[1:]}:")  # podGroup, or workload (the workload-api backend)
            out.append(_yaml(pg))
        if r["allowed"] and not (r["patch"] or r["podGroups"] or r["warnings"] or r["message"]):
            out.append("  no gang annotation or label for admit here: unchanged")
        if show_objects and r["allowed"] and r["patch"] and r["object"] is not None:
            out.append("  object after mutation:")
            out.append(_yaml(r["object"]))
        out.append("")
    allowed = sum(1 for r in results if r["allowed"])
    n = len(results)
    out.append(f"{n} object{'s' if n != 1 else ''}: {allowed} allowed, {n - allowed} denied")
    return "\n".join(out)


def _group_label(obj: Any, depth: int = 0) -> str | None:
    """The value of a pod-group label anywhere in the pod templates of ``obj`` (first found), else ``None``."""
    if not isinstance(obj, dict) or depth > 6:
        return None
    labels = obj.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            if isinstance(key, str) and key.endswith("pod-group") and isinstance(value, str):
                return value
    for value in obj.values():
        found = _group_label(value, depth + 1)
        if found:
            return found
    return None


def _group_of(r: dict[str, Any]) -> tuple[str, str]:
    """``(group name, minMember)`` of a result for the one-line view; ``"-"`` where there is none."""
    if r["podGroups"]:
        pg = r["podGroups"][-1]  # the PodGroup (with the workload-api backend the Workload comes first)
        meta = pg.get("metadata") or {}
        spec = pg.get("spec") or {}
        size = spec.get("minMember", get_path(spec, ("schedulingPolicy", "gang", "minCount")))
        return str(meta.get("name") or "-"), str("-" if size is None else size)
    found = _group_label(r["object"])  # a pod that joins (or already names) a group
    if found:
        return found, "-"
    return "-", "-"


def format_lines(results: list[dict[str, Any]], errors: list[str] | None = None) -> str:
    """The default ``admit review`` view: one line per object (verdict, kind/name, PodGroup, minMember, and for a
    refusal its reason), then a summary. ``-v`` gives :func:`format_text`, ``-o yaml``/``-o json`` everything."""
    rows = []
    for r in results:
        where = f"{r['namespace']}/{r['name']}" if r["namespace"] else r["name"]
        group, min_member = _group_of(r)
        note = ""
        if not r["allowed"]:
            note = clip_message(r["message"].replace("\n", " "), 400)
        elif r["warnings"]:
            # the first warning itself: a misspelt key (gang.admit.dev/minmember) leaves the object no gang, and a
            # count alone reads as "fine" in a CI log
            more = len(r["warnings"]) - 1
            note = "warning: " + clip_message(r["warnings"][0].replace("\n", " "), 300)
            if more:
                note += f" (+{more} more warning{'s' if more != 1 else ''}: -v shows them)"
        elif not (r["patch"] or r["podGroups"]):
            note = "not a gang: unchanged"
        rows.append(("ALLOWED" if r["allowed"] else "DENIED", f"{r['kind']} {where}", group, min_member, note))
    header = ("VERDICT", "OBJECT", "GROUP", "MINMEMBER", "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    out = ["  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + (f"  {row[4]}" if row[4] else "")
           for row in [header, *rows]]
    out = [line.rstrip() for line in out]
    allowed = sum(1 for r in results if r["allowed"])
    n = len(results)
    summary = f"{n} object{'s' if n != 1 else ''}: {allowed} allowed, {n - allowed} denied"
    warned = sum(1 for r in results if r["allowed"] and r["warnings"])
    if warned:
        summary += f" ({warned} with warnings)"
    if errors:
        summary += f", {len(errors)} unreadable (see above)"
    out.append("")
    out.append(summary + ". Details (warnings, patches, PodGroups): admit review -v or -o yaml")
    return "\n".join(out)
