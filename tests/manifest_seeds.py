"""Manifests of every kind admit handles, and the checks that what a user wrote survives admit's mutation.

Used by ``tests/families/test_invariants.py`` (property tests over the kind registry) and ``tests/families/test_user_fields.py`` (every
example and test manifest with ordinary labels planted). Sources of manifests:

- every document of ``examples/`` (``denied/`` included) and ``tests/manifests/``; an AdmissionReview file gives its
  ``request.object``;
- the manifest builders of the tests (:func:`builders`), as each test module calls them.

A *leaf* is a scalar, or an empty map or list, at a key path (map keys and list indexes). A leaf the user wrote
survives when the mutated object holds the same value, of the same JSON type, at the same path (an empty or ``null``
map may gain admit's keys); the fields admit owns (``admit.families.owned.OWNED_FIELDS``) are the only exceptions.
"""

from __future__ import annotations

import copy
import uuid
import json
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from admit.config import Config
from admit.families.owned import owner_of
from tests.helpers import EXAMPLES, ROOT

MANIFESTS = ROOT / "tests" / "manifests"

Path_ = tuple[Any, ...]


def _files() -> list[Path]:
    out = []
    for base in (EXAMPLES, MANIFESTS):
        out.extend(sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json")))
    return out


def file_documents() -> list[tuple[str, dict[str, Any]]]:
    """``[(source, document), ...]`` of every file in ``examples/`` and ``tests/manifests/`` (AdmissionReviews as
    they are), ``source`` being ``"<file relative to the repository>#<n>"``."""
    out = []
    for path in _files():
        docs = [json.loads(path.read_text())] if path.suffix == ".json" else list(yaml.safe_load_all(path.read_text()))
        for i, doc in enumerate(d for d in docs if d):
            out.append((f"{path.relative_to(ROOT)}#{i}", doc))
    return out


def builders() -> dict[str, Callable[[], Any]]:
    """``{"<module> <call>": builder}``: the manifest builders of the test modules (each call gives a fresh object).
    Imported when called, since some of those modules import this one."""
    from tests.families import test_families as fam
    from tests.families import test_kubeflow as kf
    from tests.families import test_spark as sp
    from tests.real import support as real
    from tests.real import test_real_families as real_fam

    def rayjob() -> dict[str, Any]:
        cluster = fam.raycluster()
        return {"apiVersion": "ray.io/v1", "kind": "RayJob",
                "metadata": {"name": "train", "namespace": "ray", "annotations": cluster["metadata"]["annotations"]},
                "spec": {"entrypoint": "python /home/ray/train.py", "rayClusterSpec": cluster["spec"]}}

    return {
        "tests/families/test_families.py jobset()": fam.jobset,
        "tests/families/test_families.py lws()": fam.lws,
        "tests/families/test_families.py raycluster()": fam.raycluster,
        "tests/families/test_families.py raycluster(autoscaling=True)": lambda: fam.raycluster(autoscaling=True),
        "tests/families/test_families.py raycluster spec as a RayJob's rayClusterSpec": rayjob,
        "tests/families/test_kubeflow.py tfjob()": kf.tfjob,
        "tests/families/test_kubeflow.py elastic_pytorchjob(master=True)":
            lambda: kf.elastic_pytorchjob({"minReplicas": 2, "maxReplicas": 4}, master=True),
        "tests/families/test_spark.py spark_app()": sp.spark_app,
        "tests/real/support.py gang_deployment()": lambda: real.gang_deployment("web"),
        "tests/real/test_real_families.py small_jobset()": lambda: real_fam.small_jobset("real"),
        "tests/real/test_real_families.py lws_manifest()": lambda: real_fam.lws_manifest("real"),
    }


def all_manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every file document (:func:`file_documents`) and every builder's manifest, ``[(source, document), ...]``."""
    return file_documents() + [(name, build()) for name, build in builders().items()]


def object_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The Kubernetes object a document stands for: itself, or an AdmissionReview's ``request.object``."""
    if doc.get("kind") == "AdmissionReview":
        obj = (doc.get("request") or {}).get("object")
        return obj if isinstance(obj, dict) else None
    return doc


def kind_key(obj: dict[str, Any]) -> tuple[str, str]:
    """``(API group, kind)`` of an object, the key of ``admit.families.kinds.RESOLVERS``."""
    return str(obj.get("apiVersion", "")).rpartition("/")[0], str(obj.get("kind", ""))


def seeds_by_kind() -> dict[tuple[str, str], list[tuple[str, dict[str, Any]]]]:
    """``{(API group, kind): [(source, object), ...]}`` over :func:`all_manifests` and :func:`operator_made`."""
    out: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    for source, doc in all_manifests() + operator_made():
        obj = object_of(doc)
        if obj is not None:
            out.setdefault(kind_key(obj), []).append((source, obj))
    return out


def _stored(obj: dict[str, Any], config: Config) -> dict[str, Any]:
    """``obj`` as kube-apiserver stores it after admit's CREATE mutation, with a uid (what an operator reads)."""
    import jsonpatch

    from admit.webhook.admissionreview import AdmissionRequest
    from admit.webhook.mutate import mutate

    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, repr(obj)[:200])))
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = obj["metadata"]
    req = AdmissionRequest(uid="seed", api_version="admission.k8s.io/v1", group=group, version=version,
                           kind=str(obj.get("kind")), resource_group=group, resource=str(obj.get("kind")).lower() + "s",
                           sub_resource="", operation="CREATE", namespace=str(meta.get("namespace") or "default"),
                           name=str(meta.get("name") or ""), object=obj, old_object=None, dry_run=False)
    patch = mutate(req, config).patch
    return jsonpatch.apply_patch(obj, patch) if patch else obj


def operator_made() -> list[tuple[str, dict[str, Any]]]:
    """The objects the operator emulations (``admit/testing/kuberay.py``, ``spark.py``,
    ``kubeflow.py``) make from the seed user objects as stored: KubeRay's RayClusters for RayJobs and
    RayServices and its head and worker Pods, spark-submit's driver and the driver's executor Pods, the
    training-operator's replica Pods, the mpi-operator's worker Pods and launcher Job. Each source names the
    emulation function and the user object it came from."""
    from tests.emulations import kubeflow as kf
    from tests.emulations import kuberay as kr
    from tests.emulations import spark as so

    config = Config()
    out: list[tuple[str, dict[str, Any]]] = []
    for source, doc in all_manifests():
        obj = object_of(doc)
        if obj is None or not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
            continue
        group, kind = kind_key(obj)
        made = f"made by {{}} from {source}"
        try:
            if group == "ray.io" and kind in ("RayJob", "RayService"):
                cluster = kr.cluster_for_parent(_stored(obj, config), f"{obj['metadata']['name']}-x7k2p")
                if cluster is not None:
                    out.append((made.format("kuberay.cluster_for_parent"), cluster))
            if group == "ray.io" and kind == "RayCluster":
                cluster = _stored(obj, config)
                groups = [None, *((cluster.get("spec") or {}).get("workerGroupSpecs") or [])]
                out += [(made.format("kuberay.ray_pod"), kr.ray_pod(cluster, g, None)) for g in groups[:2]]
            if group == "sparkoperator.k8s.io" and kind == "SparkApplication":
                app = _stored(obj, config)
                driver = so.driver_pod(app, "3f1c", "spark-0123456789abcdef0123456789abcdef")
                driver = so.spark_pod_defaulter(driver, app)
                driver["metadata"]["uid"] = "d-" + app["metadata"]["uid"]
                out.append((made.format("spark.driver_pod"), driver))
                out += [(made.format("spark.executor_pods"), p)
                        for p in so.executor_pods(app, driver, "3f1c")[:1]]
            if group == "kubeflow.org" and kind in ("TFJob", "PyTorchJob", "XGBoostJob", "PaddleJob", "JAXJob") \
                    or (group == "kubeflow.org" and kind == "MPIJob" and obj.get("apiVersion") == "kubeflow.org/v1"):
                job = _stored(obj, config)
                for rtype in ((job.get("spec") or {}).get(kf.REPLICA_SPECS[kind.lower() + "s"]) or {}):
                    out.append((made.format("kubeflow.training_operator_pod"),
                                kf.training_operator_pod(job, rtype, 0, "")))
            if group == "kubeflow.org" and kind == "MPIJob" and obj.get("apiVersion") == "kubeflow.org/v2beta1":
                job = _stored(obj, config)
                out.append((made.format("kubeflow.mpi_worker_pod"), kf.mpi_worker_pod(job, 0)))
                out.append((made.format("kubeflow.mpi_launcher_job"), kf.mpi_launcher_job(job)))
        except (KeyError, TypeError, AttributeError, ValueError):
            continue  # a seed malformed on purpose (tests/manifests): the operator would refuse it too
    return out


def pod_templates(obj: Any, path: Path_ = (), depth: int = 0) -> Iterator[Path_]:
    """Key paths of every pod template and pod in ``obj`` (a map whose ``spec`` has ``containers``, at any depth,
    inside lists too), and of a SparkApplication's ``spec.driver`` / ``spec.executor`` (their ``labels`` and
    ``annotations`` reach the pods the spark-operator makes)."""
    if depth > 12:
        return
    if isinstance(obj, dict):
        spec = obj.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            yield path
        for key, value in obj.items():
            if path == ("spec",) and key in ("driver", "executor") and isinstance(value, dict):
                yield path + (key,)
            yield from pod_templates(value, path + (key,), depth + 1)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from pod_templates(value, path + (i,), depth + 1)


def at(obj: Any, path: Path_) -> Any:
    """The value at ``path`` (keys and list indexes), or :data:`MISSING`."""
    for step in path:
        if isinstance(obj, dict) and step in obj:
            obj = obj[step]
        elif isinstance(obj, list) and isinstance(step, int) and step < len(obj):
            obj = obj[step]
        else:
            return MISSING
    return obj


MISSING = object()


def leaves(obj: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """``(path, value)`` of every leaf of ``obj`` (module docstring)."""
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            yield from leaves(value, path + (key,))
    elif isinstance(obj, list) and obj:
        for i, value in enumerate(obj):
            yield from leaves(value, path + (i,))
    else:
        yield path, obj


def _same(a: Any, b: Any) -> bool:
    """``a`` (read after the mutation) keeps the leaf ``b``: equal with the same JSON type; an empty map or list
    survives as a map or list (admit may add its keys to an empty ``labels: {}``)."""
    if isinstance(b, (dict, list)) and not b:
        return type(a) is type(b)
    if b is None:  # a null map ("labels:" left empty in YAML) is an empty one: admit may start it with its keys
        return a is None or isinstance(a, dict)
    return type(a) is type(b) and a == b


def lost_fields(before: dict[str, Any], after: dict[str, Any], config: Config) -> list[str]:
    """The leaves of ``before`` that ``after`` lost or changed and that admit does not own, as ``"a.b.0.c"``
    strings; ``[]`` when every field the user wrote survived."""
    lost = []
    for path, value in leaves(before):
        if not _same(at(after, path), value) and owner_of(path, before, config) is None:
            lost.append(".".join(map(str, path)))
    return lost


def _op_path(op_path: str, after: Any) -> Path_:
    """An operation's JSON Pointer as a key path in the patched object (``-`` is the list's last item)."""
    path: list[Any] = []
    node = after
    for raw in op_path.split("/")[1:]:
        step = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):
            index = len(node) - 1 if step == "-" else int(step)
            path.append(index)
            node = node[index] if 0 <= index < len(node) else None
        else:
            path.append(step)
            node = node.get(step) if isinstance(node, dict) else None
    return tuple(path)


def foreign_writes(patch: list[dict[str, Any]], before: dict[str, Any], after: dict[str, Any],
                   config: Config) -> list[str]:
    """Operations of ``patch`` that write or remove a field admit does not own (``admit.families.owned``), as readable
    strings; ``[]`` when the patch touches only admit's fields. An ``add``/``replace`` counts every leaf of its
    value (read in ``after``); a ``remove`` its path (read in ``before``)."""
    bad = []
    for op in patch:
        if op["op"] == "remove":
            path = _op_path(op["path"], before)
            if owner_of(path, before, config) is None:
                bad.append(f"remove {op['path']}")
        elif op["op"] in ("add", "replace"):
            base = _op_path(op["path"], after)
            for sub, _ in leaves(op["value"]):
                if owner_of(base + sub, after, config) is None:
                    bad.append(f"{op['op']} {op['path']} writes {'.'.join(map(str, base + sub))}")
        else:
            bad.append(f"{op['op']} {op['path']}")
    return bad


ORDINARY_LABELS = {"team": "ml-platform", "sidecar.istio.io/inject": "false", "example.com/cost-center": "cc-4711"}
ORDINARY_ANNOTATIONS = {"prometheus.io/scrape": "true", "example.com/cost-center": "cc-4711",
                        "sidecar.istio.io/inject": "false"}


def plant_ordinary(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` with :data:`ORDINARY_LABELS` and :data:`ORDINARY_ANNOTATIONS` on every pod template and pod
    (:func:`pod_templates`; a Spark driver/executor gets them as its ``labels``/``annotations``), as a platform team
    adds them (Istio injection, Prometheus scraping, cost attribution). Keys the object already has keep their
    values."""
    out = copy.deepcopy(obj)
    for path in list(pod_templates(out)):
        node = at(out, path)
        meta = node if path[-1:] in (("driver",), ("executor",)) else node.setdefault("metadata", {})
        if not isinstance(meta, dict):
            continue
        for field, values in (("labels", ORDINARY_LABELS), ("annotations", ORDINARY_ANNOTATIONS)):
            current = meta.get(field)
            if current is None:
                meta[field] = dict(values)
            elif isinstance(current, dict):
                for k, v in values.items():
                    current.setdefault(k, v)
    return out
