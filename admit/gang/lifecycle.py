"""Objects that are going away: what admit must leave alone so that deletion always ends.

Pure helpers used by both admission phases (``mutate.py``, ``validate.py``); a create refused in a terminating
namespace is ``kube.namespace_terminating``. The rules and their sources:

- An object with ``metadata.deletionTimestamp`` goes away when its last finalizer is removed (Kubernetes docs
  "Finalizers", "Garbage Collection"). Removing a finalizer is an UPDATE that reaches the webhooks: it is allowed
  untouched, and makes no PodGroup the garbage collector would have to remove again.
- An UPDATE that changes only ``status``, ``metadata.finalizers`` or what the API server maintains
  (``resourceVersion``, ``generation``, ``managedFields``) changes nothing admit decides on: allowed untouched.
- In a namespace being deleted, NamespaceLifecycle refuses every create before the webhooks (403 "... because it is
  being terminated", cause ``NamespaceTerminating``; kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/plugin/
  namespace/lifecycle/admission.go``): the end of the story, not a failure to retry.
"""

from __future__ import annotations

from typing import Any

__all__ = ["going_away", "bookkeeping_only"]

_BOOKKEEPING_META = ("finalizers", "resourceVersion", "generation", "managedFields")


def going_away(obj: Any) -> bool:
    """True when ``obj`` (a Kubernetes object as JSON) has ``metadata.deletionTimestamp`` set."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return isinstance(meta, dict) and bool(meta.get("deletionTimestamp"))


def _without_bookkeeping(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {k: v for k, v in meta.items() if k not in _BOOKKEEPING_META}
    return out


def bookkeeping_only(old: Any, new: Any) -> bool:
    """True when an UPDATE from ``old`` to ``new`` (object dicts; False when either is missing) changes something, but
    only the bookkeeping of the module docstring. An UPDATE that changes nothing at all (``kubectl apply`` of the
    same manifest) is not: it is how a workload annotated before admit was installed gets its group."""
    if not isinstance(old, dict) or not isinstance(new, dict) or old == new:
        return False
    return _without_bookkeeping(old) == _without_bookkeeping(new)
