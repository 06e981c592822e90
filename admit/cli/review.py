"""``admit review``: the webhook's decisions on manifests and AdmissionReview files, offline.

Input (:func:`load_documents`): files or directories (``*.yaml``, ``*.yml``, ``*.json``; one level deep unless
``recursive``, as ``kubectl apply -f``), YAML files of several documents, ``List`` items. An ``AdmissionReview`` is
answered as the server would answer it; any other object is reviewed as a CREATE (:func:`manifest_request`; its
uid, and so any generated name, derived from its file and position: the same input gives the same output).

Each object goes through the same code as the server (:func:`review_documents`): ``/mutate``, the patch applied, a
``generateName`` filled in as kube-apiserver does between the two phases, then ``/validate``, against an in-memory
store of the inputs and the gang objects made so far (:class:`OfflineKube`).
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

from ..webhook.admission import Admission, parent_not_found
from ..config import Config
from ..families.argo import WORKFLOW, review_step_pods, workflow_review
from ..families.kinds import KINDS, RESOLVERS, SCALABLE
from ..families.shared import object_ref
from ..kube.client import AlreadyExists
from ..gang.plan import BOOKKEEPING_ANNOTATIONS, GangError, generated_group_name, get_path, parse_gang_annotations
from ..webhook.admissionreview import AdmissionRequest, BadReview, Decision, dumps, parse_review
from ..webhook.validate import validate as pure_verdict

__all__ = ["InputError", "OfflineKube", "Skipped", "load_documents", "manifest_request", "review_documents",
           "accept_warnings", "missing_type", "format_text", "format_lines", "verdict_of", "not_an_object", "nothing_reviewed", "handled_kinds",
           "DEFAULT_NAMESPACE"]

SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    """A file that cannot be read or parsed; ``str(e)`` is ``"<file>: <reason>"``."""


def _unreadable(errors: list[str] | None, message: str) -> None:
    """Append ``message`` (``"<file>: <reason>"``) to ``errors`` when given, else raise it as :class:`InputError`."""
    if errors is None:
        raise InputError(message)
    errors.append(message)


# Kinds kube-apiserver serves cluster-scoped (``kubectl api-resources --namespaced=false`` on Kubernetes 1.34, plus
# Kueue's ResourceFlavor and Cohort) but the Cluster* ones (ClusterRole, ClusterTrainingRuntime, ClusterQueue,
# ClusterIssuer), which :func:`_namespace_of` knows by their name. A manifest of one has no namespace.
CLUSTER_SCOPED = frozenset({
    "APIService", "CSIDriver", "CSINode", "CertificateSigningRequest", "ComponentStatus", "CustomResourceDefinition",
    "DeviceClass", "FlowSchema", "IngressClass", "IPAddress", "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding", "MutatingWebhookConfiguration", "Namespace", "Node", "PersistentVolume",
    "PriorityClass", "PriorityLevelConfiguration", "ResourceSlice", "RuntimeClass", "ServiceCIDR", "StorageClass",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration",
    "VolumeAttachment", "ResourceFlavor", "Cohort",
})


DEFAULT_NAMESPACE = "default"
"""The namespace of a manifest without ``metadata.namespace`` when ``admit review`` is given no ``-n``, as ``kubectl
apply`` uses without ``-n`` and no namespace in the kubeconfig context."""


def _namespace_of(doc: dict[str, Any], namespace: str = DEFAULT_NAMESPACE) -> str:
    """``metadata.namespace``, ``""`` for a cluster-scoped kind; else ``namespace`` (``-n``, as ``kubectl apply -n``)."""
    kind = str(doc.get("kind", ""))
    if kind in CLUSTER_SCOPED or kind.startswith("Cluster"):  # a Cluster* kind (ClusterTrainingRuntime, ClusterRole)
        return ""
    meta = meta_v if isinstance(meta_v := doc.get("metadata"), dict) else {}
    return str(meta.get("namespace") or namespace)


_PLURALS = {k.kind: k.plural for k in KINDS.values()}


def _plural(kind: str) -> str:
    """The resource name of ``kind``: its registered plural (``WorkloadKind.plural``), else the English rule."""
    lower = kind.lower()
    return _PLURALS.get(kind) or lower + ("es" if lower.endswith("s") else "s")


class OfflineKube:
    """In-memory stand-in for the Kubernetes API used by ``admit review`` (implements ``admission.Store``).

    ``objects`` are the reviewed input objects (``docs`` but their AdmissionReviews) and the gang objects admission
    creates, keyed by ``(group, plural, namespace, name)`` (``namespace`` for an object without one, the run's ``-n``).
    A PodGroup reviewed with the workloads is one the cluster will have (a hand-written one): a workload that names it
    joins it as it is, and is refused when it could never fill it, as in the webhook. Never raises for timeouts.
    """

    def __init__(self, config: Config, namespace: str = DEFAULT_NAMESPACE,
                 docs: Iterable[tuple[str, dict[str, Any]]] = ()) -> None:
        self.config = config
        self.namespace = namespace
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        for _, doc in docs:
            if doc.get("kind") != "AdmissionReview":
                self.add_object(doc)

    def add_object(self, obj: dict[str, Any]) -> None:
        """Make ``obj`` (a manifest with apiVersion/kind/metadata) readable through :meth:`get_object`."""
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        meta = obj.get("metadata") or {}
        key = (group, _plural(str(obj.get("kind", ""))), _namespace_of(obj, self.namespace), str(meta.get("name")))
        self.objects[key] = obj

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``GroupCache`` view of the PodGroups of ``--pod-group-api`` reviewed or made so far in this run (a Spark
        driver reviewed earlier makes its executors join, as in ``admit serve``)."""
        c = self.config
        return self.objects.get((c.pod_group_group, c.pod_group_plural, namespace, name))

    def gang_object(self, group: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """``GroupCache.gang_object``: a gang object reviewed or made so far in this run."""
        return self.objects.get((group, _plural(kind), namespace, name))

    async def get_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                         timeout: float) -> dict[str, Any] | None:
        return self.objects.get((group, plural, namespace, name))

    async def create_object(self, group: str, version: str, plural: str, body: dict[str, Any], dry_run: bool,
                            timeout: float) -> dict[str, Any]:
        """Keep a gang object admission creates so that later reviews see it (409 if it exists)."""
        key = (group, plural, body["metadata"]["namespace"], body["metadata"]["name"])
        if key in self.objects:
            raise AlreadyExists(409, "AlreadyExists", f"{body.get('kind')} {key[2]}/{key[3]} already exists")
        if not dry_run:
            self.objects[key] = json.loads(json.dumps(body))
        return body

    async def patch_object(self, group: str, version: str, plural: str, namespace: str, name: str,
                           ops: list[dict[str, Any]], dry_run: bool, timeout: float) -> dict[str, Any]:
        patched = jsonpatch.apply_patch(self.objects[(group, plural, namespace, name)], ops)
        if not dry_run:
            self.objects[(group, plural, namespace, name)] = patched
        return patched

    async def delete_object(self, group: str, version: str, plural: str, namespace: str, name: str, uid: str | None,
                            dry_run: bool, timeout: float) -> None:
        if not dry_run:
            self.objects.pop((group, plural, namespace, name), None)

    async def list_objects(self, group: str, version: str, plural: str, namespace: str,
                           timeout: float) -> list[dict[str, Any]]:
        """The input objects of ``plural`` in ``namespace`` (an HPA reviewed with the Deployment it scales)."""
        return [o for (g, p, ns, _), o in self.objects.items() if (g, p, ns) == (group, plural, namespace)]

    async def get_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any]:
        """A Pod of this run, as mutated (a Spark driver reviewed earlier tells its executors its group). Raises
        ``LookupError`` (``admission.Admission._read_group``'s why) for one not among the inputs: not "not found"."""
        if (pod := self.objects.get(("", "pods", namespace, name))) is None:
            raise LookupError("is not among the files reviewed: review them together, the driver first")
        return pod


# Folders ``-R`` never walks into: hidden ones (.git, .venv, .tox), and what a Python or Node checkout keeps beside
# its manifests. A folder holding ``pyvenv.cfg`` is a virtualenv whatever its name (PEP 405).
SKIPPED_FOLDERS = frozenset({"node_modules", "__pycache__", "site-packages", "venv"})

# API groups of configuration files that look like Kubernetes objects (apiVersion and kind) but are read by a tool,
# never sent to kube-apiserver: kustomize's kustomization.yaml and components, kubectl's kubeconfig (kind: Config,
# apiVersion v1), kind's cluster configuration.
TOOL_CONFIG_GROUPS = frozenset({"kustomize.config.k8s.io", "kind.x-k8s.io", "config.kubernetes.io"})


@dataclasses.dataclass
class Skipped:
    """What the loader left out, for the one summary line: ``files`` and ``documents`` as ``"<file>: <why>"``;
    ``empty``: the paths that gave nothing at all (``"<folder> holds no .yaml, .yml or .json file"``, ``"<file> is
    empty"``), for the note of a run with nothing to review (:func:`nothing_reviewed`), not counted in the summary."""

    files: list[str] = dataclasses.field(default_factory=list)
    documents: list[str] = dataclasses.field(default_factory=list)
    empty: list[str] = dataclasses.field(default_factory=list)
    #: :func:`unread_folders`' notes: on stderr, never a failure (not under ``--strict`` either), not in the summary.
    folders: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """``"skipped 2 files (a Helm chart's templates, ...) and 3 documents that are not Kubernetes objects"``, or
        ``""`` when nothing was skipped; the hint to review rendered output when templates or patches were skipped."""
        parts = []
        if self.files:
            parts.append(f"{len(self.files)} file{'s' if len(self.files) != 1 else ''} (Helm templates, kustomize "
                         "patches)")
        if self.documents:
            n = len(self.documents)
            parts.append(f"{n} document{'s' if n != 1 else ''} that {'are' if n != 1 else 'is'} not {'' if n != 1 else 'a '}Kubernetes object{'s' if n != 1 else ''} "
                         "(values, Chart.yaml, kustomization, lists)")
        if not parts:
            return ""
        text = "skipped " + " and ".join(parts)
        return text + ("; to review those files, pipe in what they render to: kubectl kustomize DIR | admit review -, "
                       "or helm template RELEASE CHART -f values.yaml | admit review -" if self.files else "")


def _walk(top: Path) -> Iterable[Path]:
    """Every file under ``top``, sorted, not descending into hidden folders, virtualenvs (a ``pyvenv.cfg``) or
    :data:`SKIPPED_FOLDERS` (``os.walk`` pruned in place, so a 17,000-file ``.venv`` costs one ``stat``)."""
    import os

    found: list[Path] = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS
                   and not (Path(root) / d / "pyvenv.cfg").exists()]
        found.extend(Path(root) / f for f in files)
    return sorted(found)


#: How many sub-folder names the note of :func:`unread_folders` lists before "...".
UNREAD_FOLDERS_NAMED = 3


def unread_folders(arg: str, folder: Path) -> str:
    """The note on a folder read without ``-R`` (as ``kubectl apply -f DIR``, which says nothing): ``"examples/: 1
    sub-folder not read (denied/; -R reads them)"``, naming up to :data:`UNREAD_FOLDERS_NAMED` of the sub-folders
    :func:`_walk` would descend into, sorted; ``""`` when there are none. ``arg`` is the path as given.

    Raises:
        OSError: ``folder`` cannot be listed."""
    below = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")
                   and d.name not in SKIPPED_FOLDERS and not (d / "pyvenv.cfg").exists())
    if not below:
        return ""
    named = ", ".join(f"{d}/" for d in below[:UNREAD_FOLDERS_NAMED]) + (", ..." if len(below) > UNREAD_FOLDERS_NAMED
                                                                          else "")
    n = len(below)
    return f"{arg}: {n} sub-folder{'s' if n != 1 else ''} not read ({named}; -R reads them)"


def _kustomize_patches(folder: Path) -> set[Path]:
    """The patch files a ``kustomization.yaml`` in ``folder`` names (``patches[].path``, ``patchesStrategicMerge``,
    ``patchesJson6902[].path``): partial objects, or JSON6902 operation lists, that only mean something once
    ``kubectl kustomize`` applies them (kustomize ``api/types/kustomization.go``, ``Kustomization``)."""
    out: set[Path] = set()
    for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
        path = folder / name
        if not path.is_file():
            continue
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, OSError, UnicodeDecodeError, RecursionError):
            continue
        if not isinstance(doc, dict):
            continue
        for entry in [*(doc.get("patches") or []), *(doc.get("patchesJson6902") or []),
                      *(doc.get("patchesStrategicMerge") or [])]:
            ref = entry.get("path") if isinstance(entry, dict) else entry
            if isinstance(ref, str) and "\n" not in ref:  # an inline patch is text, not a file name
                out.add((folder / ref).resolve())
    return out


def _helm_chart_of(path: Path, stop: Path) -> Path | None:
    """The Helm chart folder (one holding ``Chart.yaml``) whose ``templates/`` holds ``path``, looking no higher
    than ``stop``; else ``None``. Helm templates are Go templates: not YAML until ``helm template`` renders them."""
    for parent in path.parents:
        if parent.name == "templates" and (parent.parent / "Chart.yaml").is_file():
            return parent.parent
        if parent == stop or parent == parent.parent:
            return None
    return None


def _files(paths: Iterable[str], recursive: bool, errors: list[str] | None = None,
           skipped: Skipped | None = None) -> list[Path | None]:
    """The files to read, in order; ``None`` stands for standard input (``-``); a missing path is
    :func:`_unreadable`. Inside a directory, a Helm chart's templates and the patches a kustomization names are left
    out (noted in ``skipped``); ``recursive`` walks sub-folders as :func:`_walk`."""
    out: list[Path | None] = []
    skipped = Skipped() if skipped is None else skipped  # the caller does not ask: noted and dropped
    for arg in paths:
        if arg == "-":
            out.append(None)
            continue
        p = Path(arg)
        if p.is_dir():
            try:
                listing = list(_walk(p)) if recursive else sorted(f for f in p.iterdir() if f.is_file())
            except OSError as e:  # a folder without read permission: cannot be read, as a file
                _unreadable(errors, f"{p}: {e.strerror or e}")
                continue
            if not any(f.suffix in SUFFIXES for f in listing):
                below = not recursive and any(d.is_dir() for d in p.iterdir())
                skipped.empty.append(f"{p} holds no .yaml, .yml or .json file"
                                     + (" (-R reads its sub-folders)" if below else ""))
            elif not recursive:  # an empty folder's note says it already
                note = unread_folders(arg, p)
                if note:
                    skipped.folders.append(note)
            patches: dict[Path, set[Path]] = {}
            for f in listing:
                if f.suffix not in SUFFIXES:
                    continue
                if f.parent not in patches:
                    patches[f.parent] = _kustomize_patches(f.parent)
                chart = _helm_chart_of(f, p)
                if chart is not None:
                    skipped.files.append(f"{f}: a template of Helm chart {chart}")
                elif f.resolve() in patches[f.parent]:
                    skipped.files.append(f"{f}: a patch that {f.parent / 'kustomization.yaml'} applies")
                else:
                    out.append(f)
        elif p.exists():
            out.append(p)
        else:
            _unreadable(errors, f"{p}: no such file or directory")
    return out


class StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types: SafeLoader is Any
    """``yaml.SafeLoader`` that refuses a mapping key given twice, as kubectl does (sigs.k8s.io/yaml's strict
    decoding: ``mapping key "replicas" already defined at line 8``). PyYAML keeps the last value silently, so two
    manifests concatenated without ``---`` would read as one object, the first one lost. A key a merge (``<<:``)
    brings in may be overridden, as YAML allows.

    Raises (from ``yaml.load_all``): ``yaml.constructor.ConstructorError`` naming the key and both lines (1-based:
    ``line 8: mapping key "replicas" already defined at line 6``).
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)  # kept: the mapping's own construction reuses it
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the constructor below refuses it
                    continue
                if first is None:
                    seen[key] = line
                else:  # the key was there already (on the same line too, in flow or JSON style)
                    # a document's own apiVersion again: two manifests concatenated (cat a.yaml b.yaml)
                    joined = node.start_mark.column == 0 and key in ("apiVersion", "kind")
                    raise yaml.constructor.ConstructorError(
                        None, None, f"line {line}: mapping key {json.dumps(key, default=str)} already defined at line "
                        f"{first} ({'two objects without --- between them? ' if joined else ''}kubectl refuses a "
                        "key given twice)")
        return super().construct_mapping(node, deep=deep)


def _yaml_error(e: yaml.YAMLError) -> str:
    """PyYAML's whole message (problem, line and column) on one line."""
    text = " ".join(line.strip() for line in str(e).splitlines() if line.strip() and line.strip() != "^")
    return text.replace('in "<unicode string>", ', "") or type(e).__name__


def not_an_object(doc: Any) -> str | None:
    """Why YAML document ``doc`` is not a Kubernetes object to review, else ``None``: not a mapping (a JSON6902
    patch, a list of values), no string ``apiVersion`` and ``kind`` (a values.yaml, a Chart.yaml), or a tool's
    configuration (:data:`TOOL_CONFIG_GROUPS`, kubeconfig's ``kind: Config``)."""
    if not isinstance(doc, dict):
        return f"a YAML {'list' if isinstance(doc, list) else type(doc).__name__}, not an object"
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(kind, str) or not kind or not isinstance(api_version, str) or not api_version:
        return "no apiVersion and kind"
    if api_version.rpartition("/")[0] in TOOL_CONFIG_GROUPS or (api_version == "v1" and kind == "Config"):
        return f"{kind} ({api_version}) is a tool's configuration, not sent to kube-apiserver"
    return None


def _typed_item(listed: dict[str, Any], item: Any) -> Any:
    """``item`` of the list ``listed``, with the ``apiVersion`` and ``kind`` a typed list implies when it has none:
    kube-apiserver encodes a built-in kind's list items without them (``kind: DeploymentList``, ``apiVersion:
    apps/v1`` on the list only: kubernetes/kubernetes#3030), so the answer of ``kubectl get --raw`` or a client's
    list names its items' kind only through the list's. ``kubectl get -o yaml``'s ``kind: List`` items carry their
    own; an item that has either field, or that is not a mapping, is returned as is."""
    kind, api_version = listed.get("kind"), listed.get("apiVersion")
    if (not isinstance(item, dict) or "kind" in item or "apiVersion" in item or not isinstance(kind, str)
            or kind == "List" or not isinstance(api_version, str)):
        return item
    return {"apiVersion": api_version, "kind": kind.removesuffix("List"), **item}


def missing_type(doc: Any) -> str | None:
    """The fix for a document that is a Kubernetes object but for its ``apiVersion`` (or ``kind``): a mapping with
    ``metadata.name`` (or ``generateName``) and one of the two; kube-apiserver and ``kubectl apply`` refuse it
    ("apiVersion not set"), so ``admit review`` reports it as an error instead of skipping it as a values file.
    The ``apiVersion`` of a kind admit handles is named (``apps/v1`` for a Deployment). ``None`` otherwise."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        return None
    meta = doc["metadata"]
    if not (meta.get("name") or meta.get("generateName")):
        return None
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    has_version, has_kind = isinstance(api_version, str) and bool(api_version), isinstance(kind, str) and bool(kind)
    if has_kind and not has_version:
        known = [f"{group + '/' if group else ''}{k.versions[0][0]}" for (group, name), k in KINDS.items()
                 if name == kind]
        hint = f" ({' or '.join(known)} for a {kind})" if known else ""
        return f"add apiVersion{hint}: {str(kind)[:63]} {str(meta.get('name') or '')[:63]} has none, and " \
               "kube-apiserver refuses an object without one"
    if has_version and not has_kind:
        return f"add kind: {str(meta.get('name') or '')[:63]} ({str(api_version)[:63]}) has none, and kube-apiserver " \
               "refuses an object without one"
    return None


def load_documents(paths: Iterable[str], recursive: bool = False, stdin: TextIO | None = None,
                   errors: list[str] | None = None, skipped: Skipped | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``[(source file, document), ...]`` from files, directories and ``-`` (standard input, e.g.
    ``kubectl get deploy -o yaml | admit review -``); ``List`` kinds expanded, empty documents skipped.

    ``errors``: when given, a file that cannot be read is reported there (``"<file>: <reason>"``) and the other files
    are still read. ``skipped``: when given, documents that are not Kubernetes objects (:func:`not_an_object`) and,
    inside a directory, Helm templates and kustomize patches are counted there and left out instead of failing the
    run. A path that holds no object (an empty folder or file, an empty ``List``) is no error (``skipped.empty``).

    Raises:
        InputError: a path is missing, a file is unreadable, not YAML/JSON (with PyYAML's line and column), holds a
            mapping key twice (:class:`StrictLoader`), or a document is not an object (only when neither ``errors``
            nor ``skipped`` is given).
    """
    docs: list[tuple[str, dict[str, Any]]] = []
    for f in _files(paths, recursive, errors, skipped):
        name = "<stdin>" if f is None else str(f)
        try:
            text = (stdin or sys.stdin).read() if f is None else f.read_text(encoding="utf-8")
            loaded = list(yaml.load_all(text, Loader=StrictLoader))
        except yaml.YAMLError as e:
            if skipped is not None and f is not None and "{{" in text:
                skipped.files.append(f"{name}: a template ({{{{ ... }}}}), not YAML until rendered")
            else:
                _unreadable(errors, f"{name}: not valid YAML or JSON: {_yaml_error(e)}")
            continue
        except RecursionError:
            _unreadable(errors, f"{name}: not valid YAML or JSON: nested too deeply")
            continue
        except (OSError, UnicodeDecodeError) as e:
            _unreadable(errors, f"{name}: {e.strerror if isinstance(e, OSError) and e.strerror else e}")
            continue
        if skipped is not None and all(doc is None for doc in loaded):
            skipped.empty.append(f"{'standard input' if f is None else name} is empty"
                                 + (" (no YAML document)" if text.strip() else ""))
        for i, doc in enumerate(loaded):
            if doc is None:
                continue
            if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"),
                                                                                                  list):
                items = [_typed_item(doc, item) for item in doc["items"]]  # an empty List gives none
            else:
                items = [doc]
            for item in items:
                why = not_an_object(item)
                fix = missing_type(item) if why is not None else None
                if why is None:
                    docs.append((name, item))
                elif fix is not None:
                    _unreadable(errors, f"{name}: document {i + 1}: {fix}")
                elif skipped is not None:
                    skipped.documents.append(f"{name}: document {i + 1}: {why}")
                elif not isinstance(item, dict):
                    _unreadable(errors, f"{name}: document {i + 1} is not a mapping (got {type(item).__name__})")
                else:
                    docs.append((name, item))
    return docs


def nothing_reviewed(paths: Iterable[str], skipped: Skipped | None = None) -> str:
    """The note of a run that found no Kubernetes object to review in ``paths`` (``admit review`` prints it on
    stderr; ``--strict`` fails on it): what was skipped instead, which path was empty (``skipped.empty``, "it"
    when that is the one path given), and where to look."""
    names = ["standard input" if p == "-" else p for p in paths]
    where = ", ".join(names)
    text = f"no Kubernetes objects to review in {where}"
    empty = [f"it{e[len(where):]}" if len(names) == 1 and e.startswith(f"{where} ") else e
             for e in (skipped.empty if skipped is not None else [])]
    left_out = "; ".join(filter(None, [skipped.summary() if skipped is not None else "", *empty]))
    if left_out:
        return f"{text}: {left_out}"
    return f"{text} (only empty Lists, as kubectl get -o yaml prints for a namespace without any)"


def _fill_generated_name(req: AdmissionRequest, obj: dict[str, Any] | None) -> AdmissionRequest:
    """``req`` with ``metadata.name`` filled in from ``generateName`` on a CREATE that has none, as kube-apiserver
    does between the mutating and the validating webhooks (``rest.BeforeCreate``); the suffix is derived from
    ``req.uid`` so that a review is repeatable."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    prefix = meta.get("generateName") if isinstance(meta, dict) and not meta.get("name") else None
    if req.operation != "CREATE" or not isinstance(prefix, str) or not prefix:
        return dataclasses.replace(req, object=obj)
    name = generated_group_name(prefix, "name:" + req.uid)  # kube-apiserver's shape: prefix[:58] + 5 characters
    assert obj is not None and meta is not None
    obj = dict(obj, metadata=dict(meta, name=name))
    return dataclasses.replace(req, object=obj, name=name)


def manifest_request(doc: dict[str, Any], uid: str | None = None,
                     namespace: str = DEFAULT_NAMESPACE) -> AdmissionRequest:
    """The CREATE AdmissionRequest kube-apiserver would send for manifest ``doc`` (not a dry run; ``uid`` random
    unless given; its namespace :func:`_namespace_of` with ``namespace``, the run's ``-n``)."""
    api_version = str(doc.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    kind = str(doc.get("kind", ""))
    meta = meta_v if isinstance(meta_v := doc.get("metadata"), dict) else {}
    return AdmissionRequest(uid=uid or str(uuid.uuid4()), api_version="admission.k8s.io/v1", group=group,
                            version=version, kind=kind, resource_group=group, resource=_plural(kind), sub_resource="",
                            operation="CREATE", namespace=_namespace_of(doc, namespace),
                            name=str(meta.get("name") or ""), object=doc, old_object=None, dry_run=False)


async def review_documents(docs: list[tuple[str, dict[str, Any]]], config: Config, errors: list[str] | None = None,
                           namespace: str = DEFAULT_NAMESPACE) -> list[dict[str, Any]]:
    """Run every document through ``/mutate`` then ``/validate``; one result dict per document.

    ``errors``: when given, a malformed AdmissionReview is reported there and the other documents are reviewed.
    ``namespace``: that of a manifest without one (``admit review -n``, :func:`manifest_request`).

    Result keys: ``source``, ``kind``, ``apiVersion``, ``name``, ``namespace``, ``operation``, ``allowed``, ``message``,
    ``warnings`` (list: what to change), ``notes`` (list: what admit only explains, never sent as admission warnings; a
    refused object keeps only the refusal's, none of its mutation's), ``acceptedWarnings`` (list, filled by
    :func:`accept_warnings`), ``patch`` (decoded JSONPatch list; ``[]`` for a denied object, which kube-apiserver
    neither patches nor stores), ``object`` (after mutation; ``None`` for a denied object or a malformed review),
    ``podGroups`` (PodGroup objects the webhook would create or patch, as stored), ``unchecked``
    (``["ClusterTrainingRuntime torch-distributed"]``: the object the admission reads that is not among the inputs,
    :func:`_unseen_read`; ``[]`` otherwise), ``group`` and ``minMember`` (the gang's name and size as far as known: its
    PodGroup's, the scaled gang's, else the pod-group label and the number ``<prefix>/min-member`` asks for, also for a
    denied object; ``None`` where unknown), ``scaleOf`` (for a Scale: ``{"workload", "group", "minMember"}`` of the gang
    it scales, when that workload is among the inputs and is a gang; else ``None``).

    Raises:
        InputError: an AdmissionReview document is malformed (the reason the server would give with HTTP 400).
    """
    store = OfflineKube(config, namespace, docs)
    admission = Admission(config.replace(api_timeout_seconds=30.0), store, cache=store)
    results = []
    for i, (source, doc) in enumerate(docs):
        if doc.get("kind") == "AdmissionReview":
            try:
                req = parse_review(dumps(doc))
            except (BadReview, ValueError, TypeError, RecursionError) as e:  # dumps of odd YAML values
                _unreadable(errors, f"{source}: {e}")
                continue
        else:
            req = manifest_request(doc, str(uuid.uuid5(uuid.NAMESPACE_URL, f"admit-review:{source}#{i}")), namespace)
        mutation = admission.mutate(req)
        if mutation.lookup is not None:
            mutation = await admission.finish_mutation(req, mutation)
        obj = req.object
        if mutation.patch and obj is not None:
            try:
                obj = jsonpatch.apply_patch(obj, mutation.patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, RecursionError) as e:
                _unreadable(errors, f"{source}: the patch does not apply: {e}")
                continue
        req = _fill_generated_name(req, obj)
        obj = req.object
        if mutation.patch and obj is not None and doc.get("kind") != "AdmissionReview":
            store.add_object(obj)
        decision = await admission.validate(req)
        unseen = _unseen_read(req, store, config, source) if decision.allowed else None
        if unseen is not None:  # the decision rests on an object review could not see: say so, not "not found"
            _say_unseen(decision, unseen)
        if doc.get("kind") != "AdmissionReview" and (req.group, req.kind) not in RESOLVERS and (
                req.group == WORKFLOW[0] or _user_keys(doc, config)):
            unhandled, why = (workflow_review(doc, config, await _step_refusals(admission, doc, config, namespace))
                              if req.group == WORKFLOW[0] else _unhandled_kind_warnings(doc, req.kind, config))
            decision.warnings.extend(unhandled)
            decision.notes.extend(why)
        scale = _scaled_gang(req, store, config) if req.sub_resource == "scale" else None
        results.append(_result(source, req, obj, mutation, decision, scale, unseen, config))
    return results


def _say_unseen(decision: Decision, unseen: tuple[str, list[str], str, str]) -> None:
    """Put :func:`_unseen_read`'s warning and note on ``decision`` in place of the warnings the admission gave for
    the object it could not find (changes ``decision``)."""
    _, absent, warning, how = unseen
    decision.warnings[:] = [w for w in decision.warnings if w not in absent] + [warning]
    if decision.message == "; ".join(decision.notes):  # an allowed answer's message is its notes
        decision.message = "; ".join(decision.notes + [how])
    decision.notes.append(how)


def _result(source: str, req: AdmissionRequest, obj: dict[str, Any] | None, mutation: Decision, decision: Decision,
            scale: dict[str, Any] | None, unseen: tuple[str, list[str], str, str] | None,
            config: Config) -> dict[str, Any]:
    """One result of :func:`review_documents` (its docstring names the keys) for ``req``: ``obj`` is the object as
    mutated, ``mutation`` and ``decision`` the answers of ``/mutate`` and ``/validate``."""
    meta = (obj or {}).get("metadata") or {}
    return {
        "source": source,
        "kind": req.kind,
        "apiVersion": f"{req.group}/{req.version}" if req.group else req.version,
        "name": req.name or str(meta.get("name") or meta.get("generateName") or ""),
        "namespace": req.namespace,
        "operation": req.operation + (f" {req.resource}/{req.sub_resource}" if req.sub_resource else ""),
        "allowed": decision.allowed,
        # an allowed answer's message is its notes joined (webhook.validate): shown once, as notes
        "message": "" if decision.allowed and decision.message == "; ".join(decision.notes) else decision.message,
        "warnings": mutation.warnings + [w for w in decision.warnings if w not in mutation.warnings],
        # the mutation's notes say what admit does with an admitted object (its PodGroup, its labels)
        "notes": (mutation.notes if decision.allowed else [])
        + [n for n in decision.notes if n not in mutation.notes],
        "acceptedWarnings": [],
        "patch": mutation.patch if decision.allowed else [],
        "object": obj if decision.allowed else None,
        "podGroups": decision.pod_groups,
        "scaleOf": scale,
        "unchecked": [unseen[0]] if unseen is not None else [],
        "group": scale["group"] if scale else _group_name(decision.pod_groups, obj),
        "minMember": scale["minMember"] if scale else _min_member(decision.pod_groups, req.object, req.group,
                                                                   req.kind, config),
    }


async def _step_refusals(admission: Admission, doc: dict[str, Any], config: Config, namespace: str) -> dict[str, str]:
    """Template name -> the refusal ``/mutate`` then ``/validate`` give the first step pod Argo would make from it
    (``families.argo.review_step_pods``), for the templates whose pods admit refuses: the rule that judges the pods in a
    cluster (a backend that cannot lower the group as its members finish, say) judges the review's Workflow too."""
    refusals = {}
    for which, pod in review_step_pods(doc, config, namespace).items():
        req = manifest_request(pod, str(uuid.uuid5(uuid.NAMESPACE_URL, f"admit-review:step:{which}")), namespace)
        mutation = admission.mutate(req)
        if mutation.patch:
            try:
                req = manifest_request(jsonpatch.apply_patch(pod, mutation.patch), req.uid, namespace)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
                pass
        decision = mutation if not mutation.allowed else await admission.validate(req)
        if not decision.allowed:
            refusals[which] = decision.message
    return refusals


def _unseen_read(req: AdmissionRequest, store: OfflineKube, config: Config,
                 source: str) -> tuple[str, list[str], str, str] | None:
    """When the validating admission of ``req`` reads another object that is not among the reviewed inputs (the
    runtime of a TrainJob, ``WorkloadKind.admission_read``; the workload a Scale or HorizontalPodAutoscaler
    scales), on which a cluster's verdict rests: ``(its reference, the warnings admission gives when it is not
    found, the warning admit review gives instead, a note piping the cluster's copy in with ``source``)``, else
    ``None``. Pure: ``webhook.validate.validate`` says what the admission reads."""
    try:
        verdict = pure_verdict(req, config)
    except Exception:  # noqa: BLE001 - admission.validate answered it already; nothing read
        return None
    target = verdict.read if verdict.read is not None else verdict.scale
    if target is None or (target.group, target.plural, target.namespace, target.name) in store.objects:
        return None
    name, namespace = target.name, target.namespace
    ref = object_ref(target.kind, namespace, name)
    if verdict.read is not None:
        absent, judged = verdict.read.judge(None, config)[0], verdict.read.judged
    else:
        absent, judged = [parent_not_found(ref)], "its gang's minMember"
    get = f"kubectl get {target.plural} {name}{f' -n {namespace}' if namespace else ''} -o yaml"
    how = f"{get} | admit review - {source}" if source != "<stdin>" else f"{get} > {name}.yaml, then review it too"
    return ref, absent, (f"review {ref} too: it is not among the files reviewed, and admit's verdict here rests on "
                         f"{judged}"), f"to review {ref} as your cluster holds it: {how}"


def _group_name(pod_groups: list[dict[str, Any]], obj: Any) -> str | None:
    """The gang's group name for the one-line view: its PodGroup's (with the workload-api backend the Workload comes
    first, the PodGroup last), else a pod-group label in the pod templates of ``obj`` as mutated (a pod that joins
    a group; for a refused object, the label admit would have given), else ``None``."""
    if pod_groups:
        return str(get_path(pod_groups[-1], ("metadata", "name")) or "") or None
    return _group_label(obj)


def _min_member(pod_groups: list[dict[str, Any]], obj: Any, group: str, kind: str, config: Config) -> int | None:
    """The gang's minMember: its PodGroup's (``spec.minMember``, or the workload-api PodGroup's
    ``schedulingPolicy.gang.minCount``), else the number the object's ``<prefix>/min-member`` asks for, read where
    its kind keeps its gang annotations (``WorkloadKind.annotations``: a CronJob's job template), so a refused gang
    still shows the size it asked for; ``None`` for ``auto``, a malformed value or none."""
    if pod_groups:
        spec = pod_groups[-1].get("spec") or {}
        size = spec.get("minMember", get_path(spec, ("schedulingPolicy", "gang", "minCount")))
        return size if isinstance(size, int) and not isinstance(size, bool) else None
    record = KINDS.get((group, kind))
    annotations = get_path(obj, record.annotations if record is not None else ("metadata", "annotations"))
    try:
        asked = parse_gang_annotations(annotations, config) if isinstance(annotations, dict) else None
    except GangError:
        return None
    return asked.min_member if asked is not None else None


def _scaled_gang(req: AdmissionRequest, store: OfflineKube, config: Config) -> dict[str, Any] | None:
    """The gang a Scale request scales, when its workload is among the inputs and carries admit's annotations:
    ``{"workload": "Deployment default/web", "group": "web", "minMember": 6}``, else ``None``. The same resolution
    as the scale check (``webhook.validate.scale_verdict``: the workload at its current replicas)."""
    parent = SCALABLE.get((req.resource_group, req.resource))
    if parent is None:
        return None
    group, _, kind = parent
    obj = store.objects.get((group, req.resource, req.namespace, req.name))
    resolver = RESOLVERS.get((group, kind))
    if obj is None or resolver is None:
        return None
    try:
        ann = parse_gang_annotations(get_path(obj, ("metadata", "annotations")), config)
        if ann is None:
            return None
        plan = resolver(obj, ann, config, req.namespace, "UPDATE")
    except GangError:
        return None
    return {"workload": plan.ref, "group": plan.group_name, "minMember": plan.min_member}


def accept_warnings(results: list[dict[str, Any]], patterns: list[str]) -> None:
    """Move every warning that one of ``patterns`` (Python regular expressions, ``re.search``) finds in
    ``"<Kind> <namespace>/<name>: <warning>"`` from ``warnings`` to ``acceptedWarnings`` (``admit review
    --accept-warning``): shown, but ``--strict`` no longer fails on it. Matching the object's reference too lets a
    pattern accept one warning of one object, not that warning everywhere.

    Raises:
        re.error: a pattern is not a regular expression.
    """
    import re

    compiled = [re.compile(p) for p in patterns]
    for r in results:
        ref = object_ref(r["kind"], r["namespace"], r["name"])
        accepted = {w for w in r["warnings"] if any(c.search(f"{ref}: {w}") for c in compiled)}
        r["acceptedWarnings"] += [w for w in r["warnings"] if w in accepted]
        r["warnings"] = [w for w in r["warnings"] if w not in accepted]


def _user_keys(doc: dict[str, Any], config: Config) -> bool:
    """``doc``'s ``metadata.annotations`` hold a key under admit's prefix that a user writes, not one of
    ``plan.BOOKKEEPING_ANNOTATIONS`` (as on a PodGroup admit made). Labels are not looked at."""
    annotations = get_path(doc, ("metadata", "annotations"))
    if not isinstance(annotations, dict):
        return False
    prefix = config.key_prefix
    return any(isinstance(k, str) and k.startswith(prefix) and k[len(prefix):] not in BOOKKEEPING_ANNOTATIONS
               for k in annotations)


def handled_kinds(config: Config) -> str:
    """The kinds admit gangs, by API group, from the kind registry (``families.kinds.KINDS``, in registration order,
    so a kind is named the day it is registered), without those of ``config.ignored_api_groups``
    (``--ignore-api-group``): ``"apps: Deployment, ReplicaSet, StatefulSet; batch: Job, CronJob; core: Pod; ..."``.
    The group is named: a ``batch.volcano.sh`` Job is not the ``batch`` Job admit handles."""
    by_group: dict[str, list[str]] = {}
    for group, kind in KINDS:
        if group not in config.ignored_api_groups:
            by_group.setdefault(group or "core", []).append(kind)
    return "; ".join(f"{group}: {', '.join(dict.fromkeys(kinds))}" for group, kinds in by_group.items())


def _unhandled_kind_warnings(doc: dict[str, Any], kind: str, config: Config) -> tuple[list[str], list[str]]:
    """``(warnings, notes)``: why admit's annotations (:func:`_user_keys`) on a kind it does not handle do nothing
    (the webhook is never called for it), naming the kind's apiVersion; the note lists :func:`handled_kinds`."""
    if not kind:
        return ["add kind and apiVersion: this document is not a Kubernetes object admit can review"], []
    api_version = str(doc.get("apiVersion") or "")[:80]
    return ([f"remove the {config.key_prefix}* annotations: admit does not handle {str(kind)[:63]} of {api_version}, "
             "so they have no effect on it"], [f"admit handles {handled_kinds(config)}"])


def _yaml(title: str, obj: Any) -> str:
    """``"  <title>:"``, then ``obj`` as YAML indented under it."""
    text = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).rstrip("\n")
    return f"  {title}:\n" + "\n".join("    " + line for line in text.splitlines())


def format_text(results: list[dict[str, Any]], show_objects: bool = True, skipped: Skipped | None = None) -> str:
    """Human-readable report: verdict, message, warnings, notes, patch, PodGroups and (optionally) the mutated
    object; then the summary (and what was skipped)."""
    out = []
    for r in results:
        ref = object_ref(r["kind"], r["namespace"], r["name"])
        out.append(f"=== {ref} ({r['operation']}, {r['source']}): {verdict_of(r)}")
        if r["message"]:
            out.append(f"  message: {r['message']}")
        for label, key in (("warning", "warnings"), ("warning (accepted by --accept-warning)", "acceptedWarnings"),
                           ("note", "notes")):
            out.extend(f"  {label}: {text}" for text in r.get(key, ()))
        scale = r.get("scaleOf")
        if scale and r["allowed"]:
            out.append(f"  scale of {scale['workload']}: PodGroup {scale['group']}, minMember {scale['minMember']}")
        if r["patch"] and r["allowed"]:
            out.append(_yaml("patch", r["patch"]))
        for pg in r["podGroups"]:
            kind = str(pg.get("kind") or "PodGroup")
            out.append(_yaml(kind[:1].lower() + kind[1:], pg))  # podGroup, or workload (the workload-api backend)
        if r["allowed"] and not (r["patch"] or r["podGroups"] or r["warnings"] or r["message"] or r.get("notes")
                                 or scale):
            out.append("  not a gang for admit here: unchanged")
        if show_objects and r["allowed"] and r["patch"] and r["object"] is not None:
            out.append(_yaml("object after mutation", r["object"]))
        out.append("")
    out.append(_summary(results, None, skipped))
    return "\n".join(out)


def _summary(results: list[dict[str, Any]], errors: list[str] | None, skipped: Skipped | None) -> str:
    allowed = sum(1 for r in results if r["allowed"])
    unchecked = sum(1 for r in results if r["allowed"] and r.get("unchecked"))
    n = len(results)
    summary = f"{n} object{'s' if n != 1 else ''}: {allowed - unchecked} allowed, {n - allowed} denied" + (
        f", {unchecked} unchecked" if unchecked else "")
    noted = sum(1 for r in results if r.get("notes"))
    counts = ((sum(1 for r in results if r["allowed"] and r["warnings"]), "with warnings"),
              (sum(1 for r in results if r.get("acceptedWarnings")), "with accepted warnings"),
              (noted, f"object{'s' if noted != 1 else ''} with notes"))  # objects, not notes: -v says each
    extra = [f"{count} {what}" for count, what in counts if count]
    if extra:
        summary += f" ({', '.join(extra)})"
    if errors:
        summary += f", {len(errors)} unreadable (see above)"
    text = skipped.summary() if skipped is not None else ""
    return summary + (f"; {text}" if text else "")


def _group_label(obj: Any, depth: int = 0) -> str | None:
    """The value of a pod-group label anywhere in the pod templates of ``obj`` (first found), else ``None``."""
    if not isinstance(obj, dict) or depth > 6:
        return None
    labels = obj.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            if isinstance(key, str) and key.endswith("pod-group") and isinstance(value, str):
                return value
    return next(filter(None, (_group_label(value, depth + 1) for value in obj.values())), None)


def verdict_of(r: dict[str, Any]) -> str:
    """``ALLOWED``, ``DENIED``, or ``UNCHECKED``: allowed on the files reviewed, but decided in a cluster by an object
    that is not among them (``unchecked``, :func:`_unseen_read`)."""
    return "DENIED" if not r["allowed"] else "UNCHECKED" if r.get("unchecked") else "ALLOWED"


def format_lines(results: list[dict[str, Any]], errors: list[str] | None = None, skipped: Skipped | None = None) -> str:
    """The default ``admit review`` view: one line per object (verdict, kind/name, PodGroup, minMember, and for a
    refusal its reason, for a warning the first warning), then a summary. A message is never cut: the first one
    ends its row whole, any further warning gets a line of its own under the row, indented to the message column
    (a terminal wraps a long line; a CI log keeps it whole). With no result, the summary alone."""
    rows = []
    below: list[list[str]] = []
    for r in results:
        group, min_member = str(r.get("group") or "-"), str("-" if r.get("minMember") is None else r["minMember"])
        note, more = "", []
        scale = r.get("scaleOf")
        if not r["allowed"]:
            note = r["message"].replace("\n", " ")
        elif r["warnings"]:
            # whole, not a count that reads "fine" in a CI log: a misspelt key (gang.admit.dev/minmember) means no gang
            note = "warning: " + r["warnings"][0].replace("\n", " ")
            more = ["warning: " + w.replace("\n", " ") for w in r["warnings"][1:]]
        elif scale:
            group, min_member = scale["group"], str(scale["minMember"])
            note = f"scale of gang {scale['workload']}: checked against its minMember"
        elif r.get("notes"):  # explained, not to change: named on the row, said by -v
            n = len(r["notes"])
            note = f"{n} note{'s' if n != 1 else ''}: -v shows {'them' if n != 1 else 'it'}"
        elif not (r["patch"] or r["podGroups"]):
            note = f"already labelled for group {group}: unchanged" if group != "-" else "not a gang: unchanged"
        rows.append((verdict_of(r), object_ref(r["kind"], r["namespace"], r["name"]), group, min_member, note))
        below.append(more)
    header = ("VERDICT", "OBJECT", "GROUP", "MINMEMBER", "")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    indent = sum(widths) + 2 * 4
    out = []
    for row, more in zip([header, *rows], [[], *below]) if rows else ():  # no object: no table, the summary alone
        line = "  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + (f"  {row[4]}" if row[4] else "")
        out.append(line.rstrip())
        out.extend(" " * indent + text for text in more)
    if out:
        out.append("")
    details = ". Details (warnings, notes, patches, PodGroups): admit review -v or -o yaml" if results else ""
    out.append(_summary(results, errors, skipped) + details)
    return "\n".join(out)
