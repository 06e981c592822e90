"""ownerReferences (``metadata.ownerReferences``, apimachinery ``OwnerReference``): the controller reference admit
writes to a gang's objects, and how one is read. Pure.

Kubernetes allows at most one reference with ``controller: true`` per object (apimachinery
``ValidateOwnerReferences``: "Only one reference can have Controller set to true"); ``blockOwnerDeletion: true`` makes
a foreground deletion of the owner wait for the dependent (garbage collector, "Foreground cascading deletion").
"""

from __future__ import annotations

from typing import Any

__all__ = ["owner_reference", "controller_ref", "has_controller"]

JSON = dict[str, Any]


def owner_reference(workload: JSON) -> JSON:
    """The controller ownerReference to a stored workload (``blockOwnerDeletion: true``: foreground deletion of the
    workload waits for the PodGroup)."""
    meta = workload.get("metadata") or {}
    return {
        "apiVersion": workload.get("apiVersion"),
        "kind": workload.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_ref(obj: Any) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true`` of ``obj`` (at most one is allowed by API validation), or None."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def has_controller(obj: Any) -> bool:
    """True when ``metadata.ownerReferences`` has an entry with ``controller: true`` (a pod made by a controller, not
    a bare pod)."""
    return controller_ref(obj) is not None
