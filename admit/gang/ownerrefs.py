"""Who owns an object: ownerReferences (``metadata.ownerReferences``, apimachinery ``OwnerReference``), the controller
reference admit writes to a gang's objects and how one is read, and admit's managed-by label. Pure; the one place these
are parsed.

Kubernetes allows at most one reference with ``controller: true`` per object (apimachinery
``ValidateOwnerReferences``: "Only one reference can have Controller set to true"); ``blockOwnerDeletion: true`` makes
a foreground deletion of the owner wait for the dependent (garbage collector, "Foreground cascading deletion").
"""

from __future__ import annotations

from typing import Any

from ..config import MANAGED_BY_LABEL, MANAGED_BY_VALUE

__all__ = ["owner_reference", "controller_ref", "has_controller", "controlled_by", "controller_identity", "adopt_ops",
           "is_managed"]

JSON = dict[str, Any]


def owner_reference(workload: JSON) -> JSON:
    """The controller ownerReference to a stored workload, with ``blockOwnerDeletion: true`` (module docstring)."""
    meta = workload.get("metadata") or {}
    return {"apiVersion": workload.get("apiVersion"), "kind": workload.get("kind"), "name": meta.get("name"),
            "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": True}


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
    """True when ``obj`` has a controller ownerReference (a pod made by a controller, not a bare pod)."""
    return controller_ref(obj) is not None


def controlled_by(obj: Any, uid: str) -> bool:
    """True when ``obj``'s controller ownerReference names the object with ``uid`` (the object was adopted by it)."""
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == uid


def controller_identity(obj: Any) -> str | None:
    """``"<group>/<Kind>/<name>"`` of ``obj``'s controller (``group`` from the reference's ``apiVersion``, ``""`` for
    the core group), the form of admit's owner annotation; ``None`` without a controller ownerReference."""
    ref = controller_ref(obj)
    if ref is None:
        return None
    group = str(ref.get("apiVersion", "")).rpartition("/")[0]
    return f"{group}/{ref.get('kind')}/{ref.get('name')}"


def adopt_ops(obj: JSON, workload: JSON) -> list[JSON]:
    """JSON Patch operations that make ``workload`` the controller of ``obj``: its :func:`owner_reference` replaces
    any other controller reference (and an older one to the same uid); references that are not controllers stay."""
    meta = obj.get("metadata") or {}
    ours = owner_reference(workload)
    refs = [r for r in (meta.get("ownerReferences") or [])
            if isinstance(r, dict) and not r.get("controller") and r.get("uid") != ours["uid"]]
    return [{"op": "replace" if "ownerReferences" in meta else "add", "path": "/metadata/ownerReferences",
             "value": [*refs, ours]}]


def is_managed(obj: JSON) -> bool:
    """True when the object carries ``app.kubernetes.io/managed-by: admit`` (the Kubernetes recommended label admit
    puts on the PodGroups, Workloads and PodGroups it makes)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
