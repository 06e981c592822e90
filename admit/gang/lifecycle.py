"""Objects that are going away: what admit must leave alone so that deletion always ends.

Pure helpers used by both admission phases (``mutate.py``, ``validate.py``); ``admission.py`` and the controller
treat a create refused in a terminating namespace with ``kube.namespace_terminating``.

Rules and their sources:

- An object with ``metadata.deletionTimestamp`` is being deleted (Kubernetes docs "Finalizers", "Garbage
  Collection": foreground deletion sets ``deletionTimestamp`` and the ``foregroundDeletion`` finalizer, and the
  object goes away when its last finalizer is removed). Removing a finalizer is an UPDATE, so it reaches the
  webhooks: such an UPDATE must be allowed untouched, and must not make a PodGroup the garbage collector would then
  have to remove again.
- An UPDATE that changes ``status``, ``metadata.finalizers`` or the fields the API server maintains
  (``metadata.resourceVersion``, ``metadata.generation``, ``metadata.managedFields``) and nothing else changes
  nothing admit decides on: it is allowed untouched, with no API write.
- While a namespace is being deleted, the NamespaceLifecycle admission plugin refuses every create in it with
  403 Forbidden "unable to create new content in namespace <ns> because it is being terminated", with the status
  cause ``NamespaceTerminating`` (kubernetes ``staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle/
  admission.go``; Events included). It runs before the webhooks, so admit never sees a CREATE there, only UPDATEs.
  Such a refusal (``kube.namespace_terminating``) is the end of the story, not a failure to retry: nothing admit
  creates there could outlive the namespace.
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
    """True when an UPDATE from ``old`` to ``new`` changes something, but only ``status``, ``metadata.finalizers``,
    ``metadata.resourceVersion``, ``metadata.generation`` or ``metadata.managedFields`` (both are object dicts;
    False when either is missing). An UPDATE that changes nothing at all (``kubectl apply`` of the same manifest) is
    not bookkeeping: it is how a workload annotated before admit was installed gets its group."""
    if not isinstance(old, dict) or not isinstance(new, dict) or old == new:
        return False
    return _without_bookkeeping(old) == _without_bookkeeping(new)
